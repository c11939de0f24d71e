/* pyddstore._core: GPU memory without torch.
 *
 *   - GPU arrays: any object exposing __cuda_array_interface__ (torch CUDA
 *     and ROCm tensors, cupy, numba) becomes a dds_buf_t in CUDA/ROCm
 *     memory (version 0-3 of the interface; `stream` from version 3 on;
 *     shape/strides/typestr -> dtype and C-contiguity checks).  The memory
 *     kind and device come from the GPU runtime (the interface has no
 *     device field), so without a usable GPU such an object is a clear
 *     DDStoreError ("no GPU"), never a crash.
 *   - (The store's lazy memsys is libddstore's ddstore_gpu_memsys_create,
 *     libddstore/src/ddstore_gpu_memsys.c.)
 *   - Test hooks (underscored module functions) over ddstore-gpu: the none
 *     build's host emulation of one device, device allocations, streams
 *     and copies, so the Python tests drive GPU destinations and shards
 *     end to end on a machine without a GPU.
 */
#include "pydds.h"

#include <stdlib.h>
#include <string.h>

#include "ddstore/gpu.h"
#include "ddstore/log.h"
#include "ddstore/memops.h"

/* ---- __cuda_array_interface__ ------------------------------------------- */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define NATIVE_ORDER '>'
#else
#define NATIVE_ORDER '<'
#endif

static const char *kind_name(dds_mem_kind_t k)
{
    return k == DDS_MEM_ROCM ? "ROCm" : k == DDS_MEM_CUDA ? "CUDA" : "host";
}

/* typestr ("<f4", "|b1", "|V16", ...) -> dtype, itemsize.  0 or -1 with
 * TypeError naming it. */
static int typestr_dtype(const char *what, const char *ts, dds_dtype_t *dt_p,
                         size_t *isz_p)
{
    char order, kind;
    char *end = NULL;
    long n;
    const char *name = NULL;
    if (ts == NULL || strlen(ts) < 3)
        goto bad;
    order = ts[0];
    kind = ts[1];
    n = strtol(ts + 2, &end, 10);
    if (end == ts + 2 || *end != '\0' || n <= 0)
        goto bad;
    if (order != '|' && order != '=' && order != NATIVE_ORDER && n > 1) {
        PyErr_Format(PyExc_TypeError,
                     "%s: unsupported dtype: non-native byte order "
                     "(typestr '%s')",
                     what, ts);
        return -1;
    }
    *isz_p = (size_t)n;
    switch (kind) {
    case 'b':
        if (n == 1) { *dt_p = DDS_DTYPE_BOOL; return 0; }
        break;
    case 'u':
        if (n == 1) { *dt_p = DDS_DTYPE_UINT8; return 0; }
        name = n == 2 ? "uint16" : n == 4 ? "uint32" : n == 8 ? "uint64" : NULL;
        break;
    case 'i':
        if (n == 4) { *dt_p = DDS_DTYPE_INT32; return 0; }
        if (n == 8) { *dt_p = DDS_DTYPE_INT64; return 0; }
        name = n == 1 ? "int8" : n == 2 ? "int16" : NULL;
        break;
    case 'f':
        if (n == 4) { *dt_p = DDS_DTYPE_FLOAT32; return 0; }
        if (n == 8) { *dt_p = DDS_DTYPE_FLOAT64; return 0; }
        if (n == 2) { *dt_p = DDS_DTYPE_FLOAT16; return 0; }
        break;
    case 'V':
        /* raw records ('|V16', numpy void); '<V2' is torch.bfloat16 (and
         * ml_dtypes.bfloat16): the only 2-byte 'V' with a byte order */
        if (order == '|') {
            *dt_p = DDS_DTYPE_RAW;
            return 0;
        }
        if (n == 2) { *dt_p = DDS_DTYPE_BFLOAT16; return 0; }
        break;
    case 'c':
        name = "complex";
        break;
    default:
        break;
    }
    if (name != NULL)
        PyErr_Format(PyExc_TypeError,
                     "%s: unsupported dtype %s (typestr '%s'); expected bool, "
                     "uint8, int32, int64, float16, bfloat16, float32, "
                     "float64 (or raw '|V' records)",
                     what, name, ts);
    else
        PyErr_Format(PyExc_TypeError,
                     "%s: unsupported dtype (typestr '%s'); expected bool, "
                     "uint8, int32, int64, float16, bfloat16, float32, "
                     "float64 (or raw '|V' records)",
                     what, ts);
    return -1;
bad:
    PyErr_Format(PyExc_TypeError,
                 "%s: __cuda_array_interface__ has a bad typestr '%s'", what,
                 ts ? ts : "(none)");
    return -1;
}

/* A non-negative int from a Python int (-1 + exception). */
static int as_size(PyObject *o, const char *what, const char *field,
                   Py_ssize_t *v_p)
{
    Py_ssize_t v;
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError,
                     "%s: __cuda_array_interface__['%s'] must hold ints, got "
                     "%s",
                     what, field, Py_TYPE(o)->tp_name);
        return -1;
    }
    v = PyLong_AsSsize_t(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *v_p = v;
    return 0;
}

int pydds_cai_get(PyObject *obj, PyObject *cai, const char *what, int writable,
                  pydds_buffer_t *b)
{
    PyObject *shape, *typestr, *data, *strides, *mask, *version, *stream;
    Py_ssize_t ndim, i, dims[64], per_row = 1, nelem = 1, expect;
    dds_dtype_t dt = DDS_DTYPE_RAW;
    size_t isz = 0;
    long long ver = 0;
    unsigned long long sv = 0;
    void *ptr;
    int readonly;
    ddgpu_info_t info;
    dds_mem_t mem;
    const char *ts;

    if (!PyDict_Check(cai)) {
        PyErr_Format(PyExc_TypeError,
                     "%s: %s.__cuda_array_interface__ is not a dict (got %s)",
                     what, Py_TYPE(obj)->tp_name, Py_TYPE(cai)->tp_name);
        return -1;
    }
    shape = PyDict_GetItemString(cai, "shape");        /* borrowed */
    typestr = PyDict_GetItemString(cai, "typestr");
    data = PyDict_GetItemString(cai, "data");
    version = PyDict_GetItemString(cai, "version");
    strides = PyDict_GetItemString(cai, "strides");
    mask = PyDict_GetItemString(cai, "mask");
    stream = PyDict_GetItemString(cai, "stream");
    if (shape == NULL || typestr == NULL || data == NULL || version == NULL) {
        PyErr_Format(PyExc_TypeError,
                     "%s: %s.__cuda_array_interface__ lacks '%s' (shape, "
                     "typestr, data and version are required)",
                     what, Py_TYPE(obj)->tp_name,
                     shape == NULL     ? "shape"
                     : typestr == NULL ? "typestr"
                     : data == NULL    ? "data"
                                       : "version");
        return -1;
    }
    if (!PyLong_Check(version)) {
        PyErr_Format(PyExc_TypeError,
                     "%s: __cuda_array_interface__['version'] must be an int",
                     what);
        return -1;
    }
    ver = PyLong_AsLongLong(version);
    if (ver == -1 && PyErr_Occurred())
        return -1;
    if (!PyUnicode_Check(typestr)) {
        PyErr_Format(PyExc_TypeError,
                     "%s: __cuda_array_interface__['typestr'] must be a str",
                     what);
        return -1;
    }
    ts = PyUnicode_AsUTF8(typestr);
    if (ts == NULL || typestr_dtype(what, ts, &dt, &isz) < 0)
        return -1;
    if (!PyTuple_Check(shape)) {
        PyErr_Format(PyExc_TypeError,
                     "%s: __cuda_array_interface__['shape'] must be a tuple",
                     what);
        return -1;
    }
    ndim = PyTuple_GET_SIZE(shape);
    if (ndim < 1) {
        PyErr_Format(PyExc_ValueError,
                     "%s: expected a 1-D or 2-D array (rows), got a 0-D %s",
                     what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (ndim > 64) {
        PyErr_Format(PyExc_ValueError, "%s: %zd dimensions", what, ndim);
        return -1;
    }
    for (i = 0; i < ndim; i++) {
        if (as_size(PyTuple_GET_ITEM(shape, i), what, "shape", &dims[i]) < 0)
            return -1;
        if (dims[i] < 0) {
            PyErr_Format(PyExc_ValueError, "%s: negative shape", what);
            return -1;
        }
        nelem *= dims[i];
        if (i > 0)
            per_row *= dims[i];
    }
    if (mask != NULL && mask != Py_None) {
        PyErr_Format(PyExc_ValueError,
                     "%s: masked GPU arrays (__cuda_array_interface__ with a "
                     "mask) are not supported",
                     what);
        return -1;
    }
    if (strides != NULL && strides != Py_None && nelem > 0) {
        if (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != ndim) {
            PyErr_Format(PyExc_TypeError,
                         "%s: __cuda_array_interface__['strides'] must be "
                         "None or a tuple of %zd ints",
                         what, ndim);
            return -1;
        }
        expect = (Py_ssize_t)isz;
        for (i = ndim - 1; i >= 0; i--) {
            Py_ssize_t st;
            if (as_size(PyTuple_GET_ITEM(strides, i), what, "strides", &st) <
                0)
                return -1;
            if (dims[i] != 1 && st != expect) {
                PyErr_Format(PyExc_ValueError,
                             "%s: expected a C-contiguous array, got a "
                             "non-contiguous %zd-D %s (use .contiguous() / "
                             "cupy.ascontiguousarray)",
                             what, ndim, Py_TYPE(obj)->tp_name);
                return -1;
            }
            expect *= dims[i];
        }
    }
    if (!PyTuple_Check(data) || PyTuple_GET_SIZE(data) != 2 ||
        !PyLong_Check(PyTuple_GET_ITEM(data, 0))) {
        PyErr_Format(PyExc_TypeError,
                     "%s: __cuda_array_interface__['data'] must be a tuple "
                     "(pointer: int, readonly: bool)",
                     what);
        return -1;
    }
    ptr = PyLong_AsVoidPtr(PyTuple_GET_ITEM(data, 0));
    if (ptr == NULL && PyErr_Occurred())
        return -1;
    readonly = PyObject_IsTrue(PyTuple_GET_ITEM(data, 1));
    if (readonly < 0)
        return -1;
    if (writable && readonly) {
        PyErr_Format(PyExc_ValueError,
                     "%s: expected a writable buffer, got a read-only %s",
                     what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (ptr == NULL && nelem > 0) {
        PyErr_Format(PyExc_ValueError,
                     "%s: __cuda_array_interface__ has a NULL pointer for "
                     "%zd elements",
                     what, nelem);
        return -1;
    }

    if (ver >= 3 && stream != NULL && stream != Py_None) {
        if (!PyLong_Check(stream)) {
            PyErr_Format(PyExc_TypeError,
                         "%s: __cuda_array_interface__['stream'] must be None "
                         "or an int",
                         what);
            return -1;
        }
        sv = PyLong_AsUnsignedLongLong(stream);
        if (sv == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        if (sv == 0) {
            PyErr_Format(PyExc_ValueError,
                         "%s: __cuda_array_interface__['stream'] is 0, which "
                         "the interface disallows (1 = legacy default "
                         "stream, 2 = per-thread default stream)",
                         what);
            return -1;
        }
    }

    /* where the memory is: only the GPU runtime can tell */
    mem.kind = ddgpu_backend_kind();
    mem.device = 0;
    mem.stream = NULL;
    if (ddgpu_available(&info) != 0) {
        PyErr_Format(pydds_Error,
                     "%s: %s exposes __cuda_array_interface__ (GPU memory), "
                     "which needs a usable GPU, and this process has none "
                     "(no GPU): %s",
                     what, Py_TYPE(obj)->tp_name, dds_last_error());
        return -1;
    }
    /* 1: the legacy default stream (NULL here); 2: the per-thread default
     * stream, whose handle value is 2 in CUDA and HIP (the emulation has
     * none: the default stream stands in); None: no ordering asked for,
     * the legacy default stream */
    if (sv > 2 || (sv == 2 && !info.emulated))
        mem.stream = (void *)(uintptr_t)sv;
    if (nelem > 0) {
        ddgpu_ptr_kind_t pk;
        dds_mem_t pm;
        if (ddgpu_pointer_kind(ptr, &pk, &pm) != 0) {
            PyErr_Format(pydds_Error, "%s: %s", what, dds_last_error());
            return -1;
        }
        if (pk == DDGPU_PTR_DEVICE || pk == DDGPU_PTR_MANAGED) {
            mem.kind = pm.kind;
            mem.device = pm.device;
        } else if (pk == DDGPU_PTR_HOST_PINNED) {
            /* page-locked host memory behind the interface (mapped
             * arrays): the host path reads it like any buffer */
            mem.kind = DDS_MEM_HOST;
            mem.device = 0;
            mem.stream = NULL;
        } else {
            PyErr_Format(PyExc_ValueError,
                         "%s: %s exposes __cuda_array_interface__ with "
                         "pointer %p, which the %s runtime does not know as "
                         "device, managed or pinned memory",
                         what, Py_TYPE(obj)->tp_name, ptr,
                         ddgpu_backend_name());
            return -1;
        }
    }
    memset(b, 0, sizeof *b);
    b->buf.ptr = ptr;
    b->buf.nrows = (int64_t)dims[0];
    b->buf.row_bytes = (size_t)per_row * isz;
    b->buf.dtype = dt;
    b->buf.itemsize = isz;
    b->buf.mem = mem;
    b->nbytes = (size_t)nelem * isz;
    b->gpu = mem.kind != DDS_MEM_HOST;
    DDS_LOG(DDS_LOG_TRACE, DDS_SUBSYS_PY,
            "%s: %s array, %zd-D, typestr %s, %s memory (device %d, stream "
            "%p), interface version %lld",
            what, Py_TYPE(obj)->tp_name, ndim, ts, kind_name(mem.kind),
            mem.device, mem.stream, ver);
    return 0;
}

/* ---- test hooks over ddstore-gpu ---------------------------------------- */

#ifdef DDSTORE_TEST_HOOKS /* not in release builds */
static PyObject *raise_rc(int rc) { return pydds_raise(rc); }

static void *as_ptr(PyObject *o)
{
    return PyLong_AsVoidPtr(o);
}

/* stream argument: 0/None = the default stream */
static int mem_of(PyObject *stream_o, dds_mem_t *m)
{
    m->kind = ddgpu_backend_kind();
    m->device = 0;
    m->stream = NULL;
    if (stream_o != NULL && stream_o != Py_None) {
        m->stream = PyLong_AsVoidPtr(stream_o);
        if (m->stream == NULL && PyErr_Occurred())
            return -1;
    }
    return 0;
}
#endif

static PyObject *g_info(PyObject *m, PyObject *unused)
{
    ddgpu_info_t info;
    int rc;
    const char *detail;
    (void)m;
    (void)unused;
    rc = ddgpu_available(&info);
    detail = rc != 0 ? dds_last_error() : "";
    return Py_BuildValue("{s:s,s:s,s:O,s:i,s:O,s:s,s:i,s:i}", "backend",
                         ddgpu_backend_name(), "version", ddgpu_version(),
                         "available", rc == 0 ? Py_True : Py_False,
                         "device_count", info.device_count, "emulated",
                         info.emulated ? Py_True : Py_False, "detail", detail,
                         "runtime_version", info.runtime_version,
                         "driver_version", info.driver_version);
}

#ifdef DDSTORE_TEST_HOOKS
static PyObject *g_emulation(PyObject *m, PyObject *arg)
{
    int on = PyObject_IsTrue(arg), rc;
    (void)m;
    if (on < 0)
        return NULL;
    rc = ddgpu_test_host_emulation(on);
    if (rc != 0)
        return raise_rc(rc);
    Py_RETURN_NONE;
}

static PyObject *g_alloc(PyObject *m, PyObject *arg)
{
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    void *p = NULL;
    int rc;
    (void)m;
    if (n == -1 && PyErr_Occurred())
        return NULL;
    rc = ddgpu_device_alloc(0, (size_t)n, &p);
    if (rc != 0)
        return raise_rc(rc);
    return PyLong_FromVoidPtr(p);
}

static PyObject *g_free(PyObject *m, PyObject *arg)
{
    void *p = as_ptr(arg);
    int rc;
    (void)m;
    if (p == NULL && PyErr_Occurred())
        return NULL;
    rc = ddgpu_device_free(p);
    if (rc != 0)
        return raise_rc(rc);
    Py_RETURN_NONE;
}

static PyObject *g_stream_create(PyObject *m, PyObject *unused)
{
    void *s = NULL;
    int rc;
    (void)m;
    (void)unused;
    rc = ddgpu_stream_create(0, &s);
    if (rc != 0)
        return raise_rc(rc);
    return PyLong_FromVoidPtr(s);
}

static PyObject *g_stream_destroy(PyObject *m, PyObject *arg)
{
    void *s = as_ptr(arg);
    int rc;
    (void)m;
    if (s == NULL && PyErr_Occurred())
        return NULL;
    rc = ddgpu_stream_destroy(s);
    if (rc != 0)
        return raise_rc(rc);
    Py_RETURN_NONE;
}

static PyObject *g_stream_sync(PyObject *m, PyObject *arg)
{
    dds_mem_t mem;
    int rc;
    (void)m;
    if (mem_of(arg, &mem) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = ddgpu_stream_synchronize(&mem);
    Py_END_ALLOW_THREADS
    if (rc != 0)
        return raise_rc(rc);
    Py_RETURN_NONE;
}

/* _gpu_memset(ptr, value, nbytes, stream=None): queued, not waited for */
static PyObject *g_memset(PyObject *m, PyObject *args)
{
    PyObject *p_o, *s_o = Py_None;
    int value, rc;
    Py_ssize_t n;
    dds_mem_t mem;
    void *p;
    (void)m;
    if (!PyArg_ParseTuple(args, "Oin|O", &p_o, &value, &n, &s_o))
        return NULL;
    p = as_ptr(p_o);
    if ((p == NULL && PyErr_Occurred()) || mem_of(s_o, &mem) < 0)
        return NULL;
    rc = ddgpu_memset_async(p, value, (size_t)n, &mem);
    if (rc != 0)
        return raise_rc(rc);
    Py_RETURN_NONE;
}

/* _gpu_read(ptr, nbytes, stream=None) -> bytes, after the stream's work */
static PyObject *g_read(PyObject *m, PyObject *args)
{
    PyObject *p_o, *s_o = Py_None, *out;
    Py_ssize_t n;
    dds_mem_t mem;
    void *p;
    int rc;
    (void)m;
    if (!PyArg_ParseTuple(args, "On|O", &p_o, &n, &s_o))
        return NULL;
    p = as_ptr(p_o);
    if ((p == NULL && PyErr_Occurred()) || mem_of(s_o, &mem) < 0)
        return NULL;
    out = PyBytes_FromStringAndSize(NULL, n);
    if (out == NULL)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = ddgpu_copy_async(DDS_COPY_D2H, PyBytes_AS_STRING(out), p, (size_t)n,
                          &mem);
    if (rc == 0)
        rc = ddgpu_stream_synchronize(&mem);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        Py_DECREF(out);
        return raise_rc(rc);
    }
    return out;
}

/* _gpu_peek(ptr, nbytes) -> bytes of emulated device memory as they are
 * now, without waiting for anything (emulation only: its device memory is
 * host memory) */
static PyObject *g_peek(PyObject *m, PyObject *args)
{
    PyObject *p_o;
    Py_ssize_t n;
    ddgpu_info_t info;
    void *p;
    (void)m;
    if (!PyArg_ParseTuple(args, "On", &p_o, &n))
        return NULL;
    if (ddgpu_available(&info) != 0 || !info.emulated)
        return pydds_raise_fmt(-DDS_ENOSYS,
                               "_gpu_peek: only with the host emulation");
    p = as_ptr(p_o);
    if (p == NULL)
        return PyErr_Occurred() ? NULL : PyBytes_FromStringAndSize("", 0);
    return PyBytes_FromStringAndSize((const char *)p, n);
}

/* _gpu_write(ptr, data, stream=None): host bytes -> device, waited for */
static PyObject *g_write(PyObject *m, PyObject *args)
{
    PyObject *p_o, *s_o = Py_None;
    Py_buffer v;
    dds_mem_t mem;
    void *p;
    int rc;
    (void)m;
    if (!PyArg_ParseTuple(args, "Oy*|O", &p_o, &v, &s_o))
        return NULL;
    p = as_ptr(p_o);
    if ((p == NULL && PyErr_Occurred()) || mem_of(s_o, &mem) < 0) {
        PyBuffer_Release(&v);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = ddgpu_copy_async(DDS_COPY_H2D, p, v.buf, (size_t)v.len, &mem);
    if (rc == 0)
        rc = ddgpu_stream_synchronize(&mem);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&v);
    if (rc != 0)
        return raise_rc(rc);
    Py_RETURN_NONE;
}
#endif /* DDSTORE_TEST_HOOKS */

PyMethodDef pydds_gpu_methods[] = {
    {"_gpu_info", g_info, METH_NOARGS,
     "_gpu_info() -> dict: ddstore-gpu's backend, version, and whether a GPU "
     "is usable here (probes the runtime)."},
#ifdef DDSTORE_TEST_HOOKS
    {"_gpu_emulation", g_emulation, METH_O,
     "_gpu_emulation(on): TEST HOOK, none build only: ddstore-gpu's host "
     "emulation of one CUDA device (turn it on before creating a store)."},
    {"_gpu_alloc", g_alloc, METH_O, "_gpu_alloc(nbytes) -> device pointer"},
    {"_gpu_free", g_free, METH_O, "_gpu_free(ptr)"},
    {"_gpu_stream_create", g_stream_create, METH_NOARGS,
     "_gpu_stream_create() -> stream handle (int)"},
    {"_gpu_stream_destroy", g_stream_destroy, METH_O,
     "_gpu_stream_destroy(stream)"},
    {"_gpu_stream_synchronize", g_stream_sync, METH_O,
     "_gpu_stream_synchronize(stream or None)"},
    {"_gpu_memset", g_memset, METH_VARARGS,
     "_gpu_memset(ptr, value, nbytes, stream=None): queued on the stream"},
    {"_gpu_read", g_read, METH_VARARGS,
     "_gpu_read(ptr, nbytes, stream=None) -> bytes after the stream's work"},
    {"_gpu_write", g_write, METH_VARARGS,
     "_gpu_write(ptr, data, stream=None): copy and wait"},
    {"_gpu_peek", g_peek, METH_VARARGS,
     "_gpu_peek(ptr, nbytes) -> bytes of emulated device memory now, "
     "without waiting (emulation only)"},
#endif
    {NULL, NULL, 0, NULL}};
