/* pyddstore._core: buffers (Py_buffer -> dds_buf_t) and row indices.
 *
 * No numpy import: everything goes through the buffer protocol and its
 * struct-module format strings ('?', 'B', 'i', 'l', 'q', 'e', 'f', 'd',
 * 'T{..}', 'Nx'); GPU arrays through __cuda_array_interface__ (pydds_gpu.c);
 * host arrays without the buffer protocol (CPU torch tensors) through
 * __dlpack__, whose dtype codes also name bfloat16.  No torch import either.
 */
#include "pydds.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define PYDDS_BIG_ENDIAN 1
#else
#define PYDDS_BIG_ENDIAN 0
#endif

/* Skip a byte-order prefix.  Returns NULL for a non-native order. */
static const char *skip_order(const char *fmt)
{
    switch (fmt[0]) {
    case '@':
    case '=':
        return fmt + 1;
    case '<':
        return PYDDS_BIG_ENDIAN ? NULL : fmt + 1;
    case '>':
    case '!':
        return PYDDS_BIG_ENDIAN ? fmt + 1 : NULL;
    default:
        return fmt;
    }
}

/* A readable name for a buffer element type (for messages). */
static void format_name(const char *fmt, Py_ssize_t itemsize, char *out,
                        size_t cap)
{
    const char *f = skip_order(fmt);
    const char *name = NULL;
    if (f == NULL) {
        snprintf(out, cap, "non-native byte order (buffer format '%s')", fmt);
        return;
    }
    if (f[0] && f[1] == '\0') {
        switch (f[0]) {
        case '?': name = "bool"; break;
        case 'b': name = "int8"; break;
        case 'B': name = "uint8"; break;
        case 'h': name = "int16"; break;
        case 'H': name = "uint16"; break;
        case 'e': name = "float16"; break;
        case 'f': name = "float32"; break;
        case 'd': name = "float64"; break;
        case 'g': name = "longdouble"; break;
        case 'O': name = "object"; break;
        case 'c': name = "char"; break;
        case 'i': case 'l': case 'q': case 'n':
            snprintf(out, cap, "int%d (buffer format '%s')",
                     (int)(itemsize * 8), fmt);
            return;
        case 'I': case 'L': case 'Q': case 'N':
            snprintf(out, cap, "uint%d (buffer format '%s')",
                     (int)(itemsize * 8), fmt);
            return;
        default: break;
        }
    } else if (f[0] == 'Z') {
        name = "complex";
    } else {
        size_t n = strlen(f);
        if (n > 0 && f[n - 1] == 's')
            name = "bytes";
        else if (n > 0 && f[n - 1] == 'w')
            name = "str";
    }
    if (name)
        snprintf(out, cap, "%s (buffer format '%s')", name, fmt);
    else
        snprintf(out, cap, "buffer format '%s'", fmt);
}

/* '16x', 'x': padding bytes, i.e. numpy void ('V16'). */
static int is_void_format(const char *f)
{
    while (isdigit((unsigned char)*f))
        f++;
    return f[0] == 'x' && f[1] == '\0';
}

/* Element type of a buffer.  0, or -1 with TypeError naming it. */
static int format_dtype(const char *what, const char *fmt, Py_ssize_t itemsize,
                        dds_dtype_t *dt_p)
{
    const char *f;
    char name[160];
    if (fmt == NULL)
        fmt = "B";
    f = skip_order(fmt);
    if (f != NULL) {
        if (f[0] == 'T' && f[1] == '{') {   /* numpy structured records */
            *dt_p = DDS_DTYPE_RAW;
            return 0;
        }
        if (is_void_format(f)) {             /* numpy void 'V<n>'        */
            *dt_p = DDS_DTYPE_RAW;
            return 0;
        }
        if (f[0] && f[1] == '\0') {
            switch (f[0]) {
            case '?':
                if (itemsize == 1) { *dt_p = DDS_DTYPE_BOOL; return 0; }
                break;
            case 'B':
                if (itemsize == 1) { *dt_p = DDS_DTYPE_UINT8; return 0; }
                break;
            case 'i': case 'l': case 'q': case 'n':
                if (itemsize == 4) { *dt_p = DDS_DTYPE_INT32; return 0; }
                if (itemsize == 8) { *dt_p = DDS_DTYPE_INT64; return 0; }
                break;
            case 'e':
                if (itemsize == 2) { *dt_p = DDS_DTYPE_FLOAT16; return 0; }
                break;
            case 'f':
                if (itemsize == 4) { *dt_p = DDS_DTYPE_FLOAT32; return 0; }
                break;
            case 'd':
                if (itemsize == 8) { *dt_p = DDS_DTYPE_FLOAT64; return 0; }
                break;
            default:
                break;
            }
        }
    }
    format_name(fmt, itemsize, name, sizeof name);
    PyErr_Format(PyExc_TypeError,
                 "%s: unsupported dtype %s; expected bool, uint8, int32, "
                 "int64, float16, float32, float64 (bfloat16: a torch "
                 "tensor; or numpy structured/void records, stored as raw "
                 "bytes)",
                 what, name);
    return -1;
}

static int not_a_buffer(PyObject *obj, const char *what)
{
    const char *tn = Py_TYPE(obj)->tp_name;
    PyErr_Format(PyExc_TypeError,
                 "%s: expected a C-contiguous numpy array or CPU torch tensor "
                 "(an object with the buffer protocol or __dlpack__), or a "
                 "GPU array with __cuda_array_interface__; got %s",
                 what, tn);
    return -1;
}

/* ---- DLPack (host arrays without the buffer protocol) -------------------
 *
 * The stable (pre-1.0, "dltensor" capsule) ABI, declared here so that no
 * header is needed: https://dmlc.github.io/dlpack/latest/c_api.html */
typedef struct {
    int32_t device_type;
    int32_t device_id;
} pydds_dl_device_t;

typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} pydds_dl_dtype_t;

typedef struct {
    void *data;
    pydds_dl_device_t device;
    int32_t ndim;
    pydds_dl_dtype_t dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} pydds_dl_tensor_t;

typedef struct {
    pydds_dl_tensor_t dl_tensor;
    void *manager_ctx;
    void (*deleter)(void *self);
} pydds_dl_managed_t;

enum { DL_CPU = 1, DL_CUDA_HOST = 3, DL_ROCM_HOST = 11 };
enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4, DL_BOOL = 6 };

static int dl_dtype(const char *what, pydds_dl_dtype_t t, dds_dtype_t *dt_p)
{
    static const char *const codes[] = {"int", "uint", "float", "opaque",
                                        "bfloat", "complex", "bool"};
    if (t.lanes == 1) {
        switch (t.code) {
        case DL_BOOL:
            if (t.bits == 8) { *dt_p = DDS_DTYPE_BOOL; return 0; }
            break;
        case DL_UINT:
            if (t.bits == 8) { *dt_p = DDS_DTYPE_UINT8; return 0; }
            break;
        case DL_INT:
            if (t.bits == 32) { *dt_p = DDS_DTYPE_INT32; return 0; }
            if (t.bits == 64) { *dt_p = DDS_DTYPE_INT64; return 0; }
            break;
        case DL_FLOAT:
            if (t.bits == 16) { *dt_p = DDS_DTYPE_FLOAT16; return 0; }
            if (t.bits == 32) { *dt_p = DDS_DTYPE_FLOAT32; return 0; }
            if (t.bits == 64) { *dt_p = DDS_DTYPE_FLOAT64; return 0; }
            break;
        case DL_BFLOAT:
            if (t.bits == 16) { *dt_p = DDS_DTYPE_BFLOAT16; return 0; }
            break;
        default:
            break;
        }
    }
    PyErr_Format(PyExc_TypeError,
                 "%s: unsupported dtype %s%d%s (DLPack); expected bool, "
                 "uint8, int32, int64, float16, bfloat16, float32, float64",
                 what, t.code < 7 ? codes[t.code] : "code?", (int)t.bits,
                 t.lanes == 1 ? "" : " with lanes");
    return -1;
}

/* Re-raise the current exception as a TypeError naming `what` and the type
 * (e.g. torch: "Can't export tensors that require gradient"). */
static int dl_refused(PyObject *obj, const char *what)
{
    PyObject *t, *v, *tb, *str;
    PyErr_Fetch(&t, &v, &tb);
    str = v ? PyObject_Str(v) : NULL;
    PyErr_Format(PyExc_TypeError, "%s: %s: %s", what, Py_TYPE(obj)->tp_name,
                 str && PyUnicode_Check(str) ? PyUnicode_AsUTF8(str)
                                             : "__dlpack__ failed");
    Py_XDECREF(str);
    Py_XDECREF(t);
    Py_XDECREF(v);
    Py_XDECREF(tb);
    return -1;
}

/* 1: obj exports host memory through __dlpack__ (described into b, the
 * capsule held in b->dlpack); 0: it has no __dlpack__ or the memory is not
 * host memory (nothing set); -1: an exception. */
static int dlpack_get(PyObject *obj, const char *what, pydds_buffer_t *b)
{
    PyObject *dev, *cap;
    const pydds_dl_managed_t *m;
    const pydds_dl_tensor_t *t;
    long devtype;
    int32_t i;
    int64_t per_row = 1, expect, nelem = 1;
    size_t isz;
    dds_dtype_t dt;

    if (!PyObject_HasAttrString(obj, "__dlpack__") ||
        !PyObject_HasAttrString(obj, "__dlpack_device__"))
        return 0;
    dev = PyObject_CallMethod(obj, "__dlpack_device__", NULL);
    if (dev == NULL)
        return dl_refused(obj, what);
    if (!PyTuple_Check(dev) || PyTuple_GET_SIZE(dev) < 1) {
        Py_DECREF(dev);
        return 0;
    }
    devtype = PyLong_AsLong(PyTuple_GET_ITEM(dev, 0));
    Py_DECREF(dev);
    if (devtype == -1 && PyErr_Occurred())
        return dl_refused(obj, what);
    if (devtype != DL_CPU && devtype != DL_CUDA_HOST && devtype != DL_ROCM_HOST)
        return 0;
    cap = PyObject_CallMethod(obj, "__dlpack__", NULL);
    if (cap == NULL)
        return dl_refused(obj, what);
    m = PyCapsule_IsValid(cap, "dltensor")
            ? (const pydds_dl_managed_t *)PyCapsule_GetPointer(cap, "dltensor")
            : NULL;
    if (m == NULL) {
        PyErr_Clear();
        Py_DECREF(cap);
        PyErr_Format(PyExc_TypeError,
                     "%s: %s.__dlpack__() did not return a 'dltensor' "
                     "capsule", what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    t = &m->dl_tensor;
    if (dl_dtype(what, t->dtype, &dt) < 0)
        goto fail;
    isz = dds_dtype_size(dt);
    if (t->ndim < 1) {
        PyErr_Format(PyExc_ValueError,
                     "%s: expected a 1-D or 2-D array (rows), got a 0-D %s",
                     what, Py_TYPE(obj)->tp_name);
        goto fail;
    }
    for (i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0) {
            PyErr_Format(PyExc_ValueError, "%s: negative shape", what);
            goto fail;
        }
        nelem *= t->shape[i];
        if (i > 0)
            per_row *= t->shape[i];
    }
    if (t->strides != NULL && nelem > 0) {
        expect = 1;
        for (i = t->ndim - 1; i >= 0; i--) {
            if (t->shape[i] != 1 && t->strides[i] != expect) {
                PyErr_Format(PyExc_ValueError,
                             "%s: expected a C-contiguous array, got a "
                             "non-contiguous %d-D %s (use .contiguous())",
                             what, (int)t->ndim, Py_TYPE(obj)->tp_name);
                goto fail;
            }
            expect *= t->shape[i];
        }
    }
    b->dlpack = cap;   /* its destructor (the producer's) frees the export */
    b->buf.ptr = (char *)t->data + t->byte_offset;
    b->buf.nrows = t->shape[0];
    b->buf.row_bytes = (size_t)per_row * isz;
    b->buf.dtype = dt;
    b->buf.itemsize = isz;
    b->buf.mem.kind = DDS_MEM_HOST;
    b->buf.mem.device = 0;
    b->buf.mem.stream = NULL;
    b->nbytes = (size_t)nelem * isz;
    return 1;
fail:
    Py_DECREF(cap);
    return -1;
}

int pydds_buffer_get(PyObject *obj, const char *what, int writable,
                     pydds_buffer_t *b)
{
    Py_ssize_t i, per_row = 1;
    dds_dtype_t dt;
    memset(b, 0, sizeof *b);
    if (!PyObject_CheckBuffer(obj)) {
        /* GPU arrays (torch CUDA/ROCm tensors, cupy, numba) */
        PyObject *cai = PyObject_GetAttrString(obj, "__cuda_array_interface__");
        int rc;
        if (cai == NULL) {
            PyObject *t, *v, *tb, *str;
            if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
                PyErr_Clear();
                /* host arrays without the buffer protocol: CPU tensors */
                rc = dlpack_get(obj, what, b);
                if (rc != 0)
                    return rc < 0 ? -1 : 0;
                return not_a_buffer(obj, what);
            }
            /* e.g. torch: "Can't get __cuda_array_interface__ on Variable
             * that requires grad" */
            PyErr_Fetch(&t, &v, &tb);
            str = v ? PyObject_Str(v) : NULL;
            PyErr_Format(PyExc_TypeError, "%s: %s: %s", what,
                         Py_TYPE(obj)->tp_name,
                         str && PyUnicode_Check(str) ? PyUnicode_AsUTF8(str)
                                                     : "bad "
                                                       "__cuda_array_interface__");
            Py_XDECREF(str);
            Py_XDECREF(t);
            Py_XDECREF(v);
            Py_XDECREF(tb);
            return -1;
        }
        rc = pydds_cai_get(obj, cai, what, writable, b);
        Py_DECREF(cai);
        return rc;
    }
    if (PyObject_GetBuffer(obj, &b->view, PyBUF_RECORDS_RO) < 0) {
        /* e.g. numpy datetime64: "cannot include dtype 'M' in a buffer" */
        PyObject *t, *v, *tb, *s;
        PyErr_Fetch(&t, &v, &tb);
        s = v ? PyObject_Str(v) : NULL;
        PyErr_Format(PyExc_TypeError, "%s: unsupported %s: %s", what,
                     Py_TYPE(obj)->tp_name,
                     s && PyUnicode_Check(s) ? PyUnicode_AsUTF8(s)
                                             : "no buffer");
        Py_XDECREF(s);
        Py_XDECREF(t);
        Py_XDECREF(v);
        Py_XDECREF(tb);
        return -1;
    }
    b->have_view = 1;
    if (writable && b->view.readonly) {
        PyErr_Format(PyExc_ValueError,
                     "%s: expected a writable buffer, got a read-only %s",
                     what, Py_TYPE(obj)->tp_name);
        goto fail;
    }
    if (b->view.ndim < 1) {
        PyErr_Format(PyExc_ValueError,
                     "%s: expected a 1-D or 2-D array (rows), got a 0-D %s",
                     what, Py_TYPE(obj)->tp_name);
        goto fail;
    }
    if (!PyBuffer_IsContiguous(&b->view, 'C')) {
        PyErr_Format(PyExc_ValueError,
                     "%s: expected a C-contiguous buffer, got a "
                     "non-contiguous %d-D %s (use numpy.ascontiguousarray)",
                     what, b->view.ndim, Py_TYPE(obj)->tp_name);
        goto fail;
    }
    if (format_dtype(what, b->view.format, b->view.itemsize, &dt) < 0)
        goto fail;
    for (i = 1; i < b->view.ndim; i++)
        per_row *= b->view.shape[i];
    b->buf.ptr = b->view.buf;
    b->buf.nrows = (int64_t)b->view.shape[0];
    b->buf.row_bytes = (size_t)per_row * (size_t)b->view.itemsize;
    b->buf.dtype = dt;
    b->buf.itemsize = (size_t)b->view.itemsize;
    b->buf.mem.kind = DDS_MEM_HOST;
    b->buf.mem.device = 0;
    b->buf.mem.stream = NULL;
    b->nbytes = (size_t)b->view.len;
    return 0;
fail:
    pydds_buffer_release(b);
    return -1;
}

void pydds_buffer_release(pydds_buffer_t *b)
{
    Py_CLEAR(b->dlpack);
    if (b->have_view) {
        PyBuffer_Release(&b->view);
        b->have_view = 0;
    }
}

/* ---- indices ------------------------------------------------------------ */

static const int64_t empty_rows[1] = {0};

/* The class for a value that does not fit in int64: an index out of range is
 * an IndexError, a bad length a ValueError (as the reference says). */
static PyObject *range_exc(const char *what)
{
    return strcmp(what, "lengths") == 0 ? PyExc_ValueError : PyExc_IndexError;
}

enum { IX_BAD = 0, IX_SIGNED = 1, IX_UNSIGNED = 2 };

static int index_kind(const char *fmt)
{
    const char *f = fmt ? skip_order(fmt) : "B";
    if (f == NULL || f[0] == '\0' || f[1] != '\0')
        return IX_BAD;
    switch (f[0]) {
    case 'b': case 'h': case 'i': case 'l': case 'q': case 'n':
        return IX_SIGNED;
    case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N':
        return IX_UNSIGNED;
    default:
        return IX_BAD;
    }
}

static int indices_from_buffer(PyObject *obj, const char *what, int strict,
                               pydds_indices_t *ix)
{
    Py_buffer *v = &ix->view;
    int kind;
    Py_ssize_t n, i, stride;
    const char *p;
    if (PyObject_GetBuffer(obj, v, PyBUF_RECORDS_RO) < 0)
        return -1;
    ix->have_view = 1;
    kind = index_kind(v->format);
    if (kind == IX_BAD) {
        char name[160];
        format_name(v->format ? v->format : "B", v->itemsize, name,
                    sizeof name);
        PyErr_Format(PyExc_TypeError, "%s: expected integers, got %s", what,
                     name);
        return -1;
    }
    if (v->itemsize != 1 && v->itemsize != 2 && v->itemsize != 4 &&
        v->itemsize != 8) {
        PyErr_Format(PyExc_TypeError, "%s: unsupported integer size %zd",
                     what, v->itemsize);
        return -1;
    }
    if (strict && v->ndim != 1) {
        PyErr_Format(PyExc_ValueError, "%s: expected a 1-D array, got %d-D",
                     what, v->ndim);
        return -1;
    }
    if (v->ndim == 0) {
        n = 1;
        stride = v->itemsize;
    } else if (v->ndim == 1) {
        n = v->shape[0];
        stride = v->strides ? v->strides[0] : v->itemsize;
    } else if (PyBuffer_IsContiguous(v, 'C')) {
        n = v->len / v->itemsize;
        stride = v->itemsize;
    } else {
        PyErr_Format(PyExc_ValueError,
                     "%s: expected a 1-D or C-contiguous buffer, got a "
                     "non-contiguous multi-dimensional one",
                     what);
        return -1;
    }
    ix->n = (size_t)n;
    if (n == 0) {
        ix->rows = empty_rows;
        return 0;
    }
    /* int64, contiguous, aligned: use the buffer as is. */
    if (kind == IX_SIGNED && v->itemsize == 8 && stride == 8 &&
        ((uintptr_t)v->buf % sizeof(int64_t)) == 0) {
        ix->rows = (const int64_t *)v->buf;
        return 0;
    }
    ix->owned = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    if (ix->owned == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    p = (const char *)v->buf;
    for (i = 0; i < n; i++, p += stride) {
        int64_t val;
        if (kind == IX_SIGNED) {
            switch (v->itemsize) {
            case 1: { int8_t x; memcpy(&x, p, 1); val = x; break; }
            case 2: { int16_t x; memcpy(&x, p, 2); val = x; break; }
            case 4: { int32_t x; memcpy(&x, p, 4); val = x; break; }
            default: { int64_t x; memcpy(&x, p, 8); val = x; break; }
            }
        } else {
            uint64_t u;
            switch (v->itemsize) {
            case 1: { uint8_t x; memcpy(&x, p, 1); u = x; break; }
            case 2: { uint16_t x; memcpy(&x, p, 2); u = x; break; }
            case 4: { uint32_t x; memcpy(&x, p, 4); u = x; break; }
            default: { uint64_t x; memcpy(&x, p, 8); u = x; break; }
            }
            if (u > (uint64_t)INT64_MAX) {
                PyErr_Format(range_exc(what),
                             "%s[%zd] = %llu is out of range", what, i,
                             (unsigned long long)u);
                return -1;
            }
            val = (int64_t)u;
        }
        ix->owned[i] = val;
    }
    ix->rows = ix->owned;
    return 0;
}

static int indices_from_sequence(PyObject *obj, const char *what,
                                 pydds_indices_t *ix)
{
    PyObject *seq, **items;
    Py_ssize_t n, i;
    if (PyUnicode_Check(obj) || PyDict_Check(obj) || !PySequence_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "%s: expected a buffer of integers (numpy array) or a "
                     "sequence of integers, got %s",
                     what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    seq = PySequence_Fast(obj, "expected a sequence of integers");
    if (seq == NULL)
        return -1;
    n = PySequence_Fast_GET_SIZE(seq);
    items = PySequence_Fast_ITEMS(seq);
    ix->n = (size_t)n;
    if (n == 0) {
        Py_DECREF(seq);
        ix->rows = empty_rows;
        return 0;
    }
    ix->owned = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    if (ix->owned == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (i = 0; i < n; i++) {
        long long v;
        if (PyFloat_Check(items[i])) {
            PyErr_Format(PyExc_TypeError,
                         "%s[%zd]: expected an integer, got float", what, i);
            Py_DECREF(seq);
            return -1;
        }
        v = PyLong_AsLongLong(items[i]);
        if (v == -1 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
                PyErr_Clear();
                PyErr_Format(range_exc(what),
                             "%s[%zd] is out of range (does not fit in "
                             "int64)",
                             what, i);
            } else if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError,
                             "%s[%zd]: expected an integer, got %s", what, i,
                             Py_TYPE(items[i])->tp_name);
            }
            Py_DECREF(seq);
            return -1;
        }
        ix->owned[i] = (int64_t)v;
    }
    Py_DECREF(seq);
    ix->rows = ix->owned;
    return 0;
}

/* A 1-D integer tensor in host memory through __dlpack__ (CPU torch
 * tensors).  1 = done, 0 = not such an object (nothing set), -1 = error. */
static int indices_from_dlpack(PyObject *obj, const char *what, int strict,
                               pydds_indices_t *ix)
{
    PyObject *cap;
    const pydds_dl_managed_t *m;
    const pydds_dl_tensor_t *t;
    int64_t n, stride, i;
    const char *base;
    int sign;

    if (PyObject_CheckBuffer(obj) || PySequence_Check(obj) ||
        !PyObject_HasAttrString(obj, "__dlpack__") ||
        PyObject_HasAttrString(obj, "__cuda_array_interface__"))
        return 0;
    cap = PyObject_CallMethod(obj, "__dlpack__", NULL);
    if (cap == NULL)
        return dl_refused(obj, what);
    m = PyCapsule_IsValid(cap, "dltensor")
            ? (const pydds_dl_managed_t *)PyCapsule_GetPointer(cap, "dltensor")
            : NULL;
    if (m == NULL) {
        PyErr_Clear();
        Py_DECREF(cap);
        return 0;
    }
    t = &m->dl_tensor;
    if (t->device.device_type != DL_CPU &&
        t->device.device_type != DL_CUDA_HOST &&
        t->device.device_type != DL_ROCM_HOST) {
        Py_DECREF(cap);
        PyErr_Format(PyExc_TypeError,
                     "%s: expected host memory (a CPU tensor), got a device "
                     "tensor",
                     what);
        return -1;
    }
    sign = t->dtype.code == DL_INT ? 1 : t->dtype.code == DL_UINT ? 0 : -1;
    if (sign < 0 || t->dtype.lanes != 1 ||
        (t->dtype.bits != 8 && t->dtype.bits != 16 && t->dtype.bits != 32 &&
         t->dtype.bits != 64)) {
        Py_DECREF(cap);
        PyErr_Format(PyExc_TypeError,
                     "%s: expected integers (DLPack tensor of another dtype)",
                     what);
        return -1;
    }
    if (t->ndim > 1 || (strict && t->ndim != 1)) {
        Py_DECREF(cap);
        PyErr_Format(PyExc_ValueError, "%s: expected 1-D, got %d dimensions",
                     what, (int)t->ndim);
        return -1;
    }
    n = t->ndim == 0 ? 1 : t->shape[0];
    stride = (t->ndim == 1 && t->strides != NULL) ? t->strides[0] : 1;
    base = (const char *)t->data + t->byte_offset;
    ix->n = (size_t)n;
    if (n == 0) {
        Py_DECREF(cap);
        ix->rows = empty_rows;
        return 1;
    }
    ix->owned = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    if (ix->owned == NULL) {
        Py_DECREF(cap);
        PyErr_NoMemory();
        return -1;
    }
    for (i = 0; i < n; i++) {
        const char *p = base + i * stride * (t->dtype.bits / 8);
        uint64_t u = 0;
        int64_t v;
        switch (t->dtype.bits) {
        case 8: {
            uint8_t x;
            memcpy(&x, p, 1);
            v = sign ? (int8_t)x : (int64_t)x;
            u = x;
            break;
        }
        case 16: {
            uint16_t x;
            memcpy(&x, p, 2);
            v = sign ? (int16_t)x : (int64_t)x;
            u = x;
            break;
        }
        case 32: {
            uint32_t x;
            memcpy(&x, p, 4);
            v = sign ? (int32_t)x : (int64_t)x;
            u = x;
            break;
        }
        default:
            memcpy(&u, p, 8);
            v = (int64_t)u;
            break;
        }
        if (!sign && u > (uint64_t)INT64_MAX) {
            Py_DECREF(cap);
            PyErr_Format(range_exc(what), "%s[%lld] = %llu is out of range",
                         what, (long long)i, (unsigned long long)u);
            return -1;
        }
        ix->owned[i] = v;
    }
    Py_DECREF(cap);
    ix->rows = ix->owned;
    return 1;
}

/* The one converter: `what` names the argument in messages; `strict`
 * refuses anything but one dimension (a 0-D scalar or an N-D array). */
static int ints_get(PyObject *obj, const char *what, int strict,
                    pydds_indices_t *ix)
{
    int rc;
    memset(ix, 0, sizeof *ix);
    if (PyObject_CheckBuffer(obj) && !PyBytes_Check(obj) &&
        !PyByteArray_Check(obj))
        rc = indices_from_buffer(obj, what, strict, ix);
    else if ((rc = indices_from_dlpack(obj, what, strict, ix)) != 0)
        rc = rc < 0 ? -1 : 0;
    else
        rc = indices_from_sequence(obj, what, ix);
    if (rc < 0)
        pydds_indices_release(ix);
    return rc;
}

int pydds_indices_get(PyObject *obj, pydds_indices_t *ix)
{
    return ints_get(obj, "indices", 0, ix);
}

int pydds_lengths_get(PyObject *obj, pydds_indices_t *ix)
{
    return ints_get(obj, "lengths", 1, ix);
}

void pydds_indices_release(pydds_indices_t *ix)
{
    free(ix->owned);
    ix->owned = NULL;
    if (ix->have_view) {
        PyBuffer_Release(&ix->view);
        ix->have_view = 0;
    }
    ix->rows = NULL;
    ix->n = 0;
}

/* ---- names and integers ------------------------------------------------- */

/* UTF-8 name of a variable: str without NUL.  NULL + exception. */
const char *pydds_var_name(PyObject *o)
{
    Py_ssize_t n;
    const char *s;
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "name: expected str, got %s",
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    s = PyUnicode_AsUTF8AndSize(o, &n);
    if (s == NULL)
        return NULL;
    if ((size_t)n != strlen(s)) {
        PyErr_SetString(PyExc_ValueError, "name: contains a NUL character");
        return NULL;
    }
    return s;
}

/* A Python int as int64 with a name for messages; -1 + exception. */
int pydds_as_i64(PyObject *o, const char *what, int64_t *v_p)
{
    long long v;
    if (PyFloat_Check(o) || !PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s: expected an integer, got %s", what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s: does not fit in int64", what);
        }
        return -1;
    }
    *v_p = (int64_t)v;
    return 0;
}

