// ddstore-torch: store handles, error translation and index conversion.
#include "ddstore_torch.h"

#include <cstring>
#include <time.h>

namespace ddstore_torch {

namespace {
PyObject *g_error = nullptr;      // pyddstore._core.DDStoreError (kept for good)
PyObject *g_key_error = nullptr;  // pyddstore._core.DDStoreKeyError
int g_gpu_kind = DDS_MEM_CUDA;
thread_local uint64_t t_read_begin = 0;
thread_local uint64_t t_read_end = 0;
}  // namespace

void load_errors()
{
    py::module_ core = py::module_::import("pyddstore._core");
    g_error = py::object(core.attr("DDStoreError")).release().ptr();
    g_key_error = py::object(core.attr("DDStoreKeyError")).release().ptr();
}

// The one place where C status codes become Python exceptions: the class
// is libddstore's mapping (ddstore_exc_of, the one _core uses), the message
// dds_last_error() (or the code's name when no detail was recorded).
void throw_rc(int rc)
{
    PyObject *type;
    switch (ddstore_exc_of(rc)) {
    case DDSTORE_EXC_KEY: type = g_key_error; break;
    case DDSTORE_EXC_INDEX: type = PyExc_IndexError; break;
    case DDSTORE_EXC_VALUE: type = PyExc_ValueError; break;
    case DDSTORE_EXC_TYPE: type = PyExc_TypeError; break;
    case DDSTORE_EXC_MEMORY: type = PyExc_MemoryError; break;
    default: type = g_error; break;
    }
    const char *msg = dds_last_error();
    if (msg == nullptr || msg[0] == '\0')
        msg = dds_strerror(rc);
    PyErr_SetString(type != nullptr ? type : PyExc_RuntimeError, msg);
    throw py::error_already_set();
}

void throw_py(PyObject *type, const std::string &msg)
{
    PyErr_SetString(type, msg.c_str());
    throw py::error_already_set();
}

uint64_t handle_of(py::handle obj)
{
    PyObject *h = PyObject_GetAttrString(obj.ptr(), "_handle");
    if (h == nullptr) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            throw py::error_already_set();  // a closed reader: DDStoreError
        PyErr_Clear();
        throw_py(PyExc_TypeError, std::string("expected a pyddstore.PyDDStore or "
                                              "pyddstore.Reader, got ") +
                                      Py_TYPE(obj.ptr())->tp_name);
    }
    const unsigned long long v = PyLong_AsUnsignedLongLong(h);
    Py_DECREF(h);
    if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred())
        throw py::error_already_set();
    return static_cast<uint64_t>(v);
}

Target::Target(py::handle obj)
{
    const uint64_t h = handle_of(obj);
    int rc;
    {
        // The pin waits while a destroy / free / close holds it exclusively,
        // and those may need the GIL: never wait for it holding the GIL.
        py::gil_scoped_release nogil;
        rc = ddstore_handle_enter(h, &pin_, &store, &reader);
    }
    if (rc < 0)
        throw_rc(rc);
}

Target::~Target() { ddstore_handle_leave(pin_); }

void set_gpu_kind(int kind)
{
    if (kind != DDS_MEM_CUDA && kind != DDS_MEM_ROCM)
        throw_py(PyExc_ValueError, "gpu kind must be 1 (CUDA) or 2 (ROCm)");
    g_gpu_kind = kind;
}

int gpu_kind() { return g_gpu_kind; }

bool to_dds_dtype(at::ScalarType st, dds_dtype_t *dt)
{
    switch (st) {
    case at::kBool: *dt = DDS_DTYPE_BOOL; return true;
    case at::kByte: *dt = DDS_DTYPE_UINT8; return true;
    case at::kInt: *dt = DDS_DTYPE_INT32; return true;
    case at::kLong: *dt = DDS_DTYPE_INT64; return true;
    case at::kFloat: *dt = DDS_DTYPE_FLOAT32; return true;
    case at::kDouble: *dt = DDS_DTYPE_FLOAT64; return true;
    case at::kHalf: *dt = DDS_DTYPE_FLOAT16; return true;
    case at::kBFloat16: *dt = DDS_DTYPE_BFLOAT16; return true;
    default: return false;
    }
}

dds_buf_t describe(const std::string &name, const at::Tensor &out, int64_t nrows,
                   uintptr_t stream)
{
    const std::string what = "variable '" + name + "': destination tensor";
    if (out.layout() != at::kStrided)
        throw_py(PyExc_TypeError, what + " must be a strided (dense) tensor");
    dds_buf_t buf{};
    if (out.device().is_cpu()) {
        buf.mem.kind = DDS_MEM_HOST;
    } else if (out.device().is_cuda()) {
        buf.mem.kind = static_cast<dds_mem_kind_t>(g_gpu_kind);
        buf.mem.device = out.device().index();
        buf.mem.stream = reinterpret_cast<void *>(stream);
    } else {
        throw_py(PyExc_TypeError, what + " is on " + out.device().str() +
                                      "; expected a CPU or CUDA/ROCm tensor");
    }
    if (!out.is_contiguous())
        throw_py(PyExc_ValueError, what + " must be C-contiguous (got strides of a "
                                          "non-contiguous view; call .contiguous())");
    if (out.dim() < 1)
        throw_py(PyExc_ValueError, what + " must have at least one dimension "
                                          "(rows first); got a 0-d tensor");
    if (out.size(0) != nrows)
        throw_py(PyExc_ValueError, what + " has " + std::to_string(out.size(0)) +
                                       " rows, expected " + std::to_string(nrows));

    dds_dtype_t dt;
    if (!to_dds_dtype(out.scalar_type(), &dt))
        throw_py(PyExc_TypeError,
                 what + " has dtype " + std::string(c10::toString(out.scalar_type())) +
                     "; supported: bool, uint8, int32, int64, float16, bfloat16, "
                     "float32, float64");

    int64_t row_elems = 1;
    for (int64_t d = 1; d < out.dim(); d++)
        row_elems *= out.size(d);
    buf.ptr = out.data_ptr();
    buf.nrows = nrows;
    buf.row_bytes = static_cast<size_t>(row_elems) * out.element_size();
    buf.dtype = dt;
    buf.itemsize = out.element_size();
    return buf;
}

dds_read_var_t read_entry(const char *name, int kind, const dds_buf_t &buf)
{
    dds_read_var_t e{};
    e.name = name;
    e.kind = kind;
    e.dst = buf;
    return e;
}

int read_vars(dds_store_t *store, dds_reader_t *reader, dds_read_var_t *vars, size_t nvars,
              const int64_t *rows, size_t n)
{
    for (;;) {
        const int rc = dds_store_read_vars(store, reader, vars, nvars, rows, n);
        if (rc != -DDS_ETYPE)
            return rc;
        // Core refused a tensor's element type before reading anything.  A
        // raw variable takes any element type whose rows have its row bytes:
        // describe those tensors as raw rows of the variable's itemsize and
        // read again (core checks the row width).  Any other variable: core's
        // error stands.
        const std::string msg = dds_last_error();
        bool again = false;
        for (size_t k = 0; k < nvars; k++) {
            dds_buf_t &b = vars[k].dst;
            dds_var_info_t info;
            if (vars[k].kind == DDS_READ_SIZES || b.dtype == DDS_DTYPE_RAW ||
                dds_store_var_info(store, vars[k].name, &info) != 0 ||
                info.dtype != DDS_DTYPE_RAW)
                continue;
            b.dtype = DDS_DTYPE_RAW;
            b.itemsize = info.itemsize;
            again = true;
        }
        if (!again)
            return dds_error(rc, "%s", msg.c_str());
    }
}

namespace {
// The integer kind of a buffer format ('b'... signed, 'B'... unsigned, 0
// for anything else); native or little-endian byte order only.
int index_kind(const char *fmt)
{
    const char *f = fmt != nullptr ? fmt : "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    if (f[0] == '\0' || f[1] != '\0')
        return 0;
    return std::strchr("bhilqn", f[0]) ? 1 : std::strchr("BHILQN", f[0]) ? 2 : 0;
}

[[noreturn]] void index_range(size_t i, uint64_t u)
{
    throw_py(PyExc_IndexError, "indices[" + std::to_string(i) + "] = " + std::to_string(u) +
                                   " is out of range");
}

// Any buffer of integers (numpy arrays of every integer width,
// array.array, memoryview): 0-D = one index, 1-D strided, N-D C-contiguous.
at::Tensor indices_from_buffer(PyObject *obj)
{
    Py_buffer v;
    if (PyObject_GetBuffer(obj, &v, PyBUF_RECORDS_RO) < 0)
        throw py::error_already_set();
    struct Release {
        Py_buffer *v;
        ~Release() { PyBuffer_Release(v); }
    } release{&v};
    const int kind = index_kind(v.format);
    if (kind == 0)
        throw_py(PyExc_TypeError, std::string("indices: expected integers, got format '") +
                                      (v.format != nullptr ? v.format : "B") + "'");
    if (v.itemsize != 1 && v.itemsize != 2 && v.itemsize != 4 && v.itemsize != 8)
        throw_py(PyExc_TypeError,
                 "indices: unsupported integer size " + std::to_string(v.itemsize));
    Py_ssize_t n, stride;
    if (v.ndim == 0) {
        n = 1;
        stride = v.itemsize;
    } else if (v.ndim == 1) {
        n = v.shape[0];
        stride = v.strides != nullptr ? v.strides[0] : v.itemsize;
    } else if (PyBuffer_IsContiguous(&v, 'C')) {
        n = v.len / v.itemsize;
        stride = v.itemsize;
    } else {
        throw_py(PyExc_ValueError, "indices: expected a 1-D or C-contiguous buffer, got a "
                                   "non-contiguous multi-dimensional one");
    }
    at::Tensor out = at::empty({static_cast<int64_t>(n)}, at::kLong);
    int64_t *dst = out.data_ptr<int64_t>();
    const char *p = static_cast<const char *>(v.buf);
    for (Py_ssize_t i = 0; i < n; i++, p += stride) {
        uint64_t u = 0;
        std::memcpy(&u, p, static_cast<size_t>(v.itemsize));  // little-endian host
        if (kind == 1) {
            const int bits = static_cast<int>(v.itemsize) * 8;
            dst[i] = bits == 64 ? static_cast<int64_t>(u)
                                : static_cast<int64_t>(u << (64 - bits)) >> (64 - bits);
        } else {
            if (u > static_cast<uint64_t>(INT64_MAX))
                index_range(static_cast<size_t>(i), u);
            dst[i] = static_cast<int64_t>(u);
        }
    }
    return out;
}

at::Tensor indices_from_sequence(PyObject *obj)
{
    if (PyUnicode_Check(obj) || PyDict_Check(obj) || !PySequence_Check(obj))
        throw_py(PyExc_TypeError, std::string("indices: expected a buffer of integers (numpy "
                                              "array) or a sequence of integers, got ") +
                                      Py_TYPE(obj)->tp_name);
    py::object seq = py::reinterpret_steal<py::object>(
        PySequence_Fast(obj, "expected a sequence of integers"));
    if (!seq)
        throw py::error_already_set();
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
    PyObject **items = PySequence_Fast_ITEMS(seq.ptr());
    at::Tensor out = at::empty({static_cast<int64_t>(n)}, at::kLong);
    int64_t *dst = out.data_ptr<int64_t>();
    // (the "indices[i]" of a message is built only when it is raised: per
    // row it cost more than the conversion itself)
    auto at_i = [](Py_ssize_t i) { return "indices[" + std::to_string(i) + "]"; };
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyLong_CheckExact(items[i])) {   // the common case: a plain int
            int overflow = 0;
            const long long x = PyLong_AsLongLongAndOverflow(items[i], &overflow);
            if (!overflow) {
                dst[i] = static_cast<int64_t>(x);
                continue;
            }
        }
        if (PyFloat_Check(items[i]))
            throw_py(PyExc_TypeError, at_i(i) + ": expected an integer, got float");
        const long long x = PyLong_AsLongLong(items[i]);
        if (x == -1 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
                PyErr_Clear();
                throw_py(PyExc_IndexError, at_i(i) + " is out of range (does not fit in int64)");
            }
            if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                throw_py(PyExc_TypeError, at_i(i) + ": expected an integer, got " +
                                              Py_TYPE(items[i])->tp_name);
            }
            throw py::error_already_set();
        }
        dst[i] = static_cast<int64_t>(x);
    }
    return out;
}
}  // namespace

at::Tensor as_indices(py::handle obj)
{
    // A tensor (any device: indices may live on the GPU) is torch's to
    // convert; so is another host DLPack tensor.  Anything else with the
    // rules of _core's converter (get_batch's): every integer width of a
    // buffer, sequences of integers.
    PyObject *o = obj.ptr();
    py::object from_dlpack;
    if (!THPVariable_Check(o) && !PyObject_CheckBuffer(o) && !PySequence_Check(o) &&
        PyObject_HasAttrString(o, "__dlpack__") &&
        !PyObject_HasAttrString(o, "__cuda_array_interface__")) {
        from_dlpack = py::module_::import("torch").attr("from_dlpack")(obj);
        o = from_dlpack.ptr();
    }
    if (THPVariable_Check(o)) {
        at::Tensor t = THPVariable_Unpack(o);
        if (!at::isIntegralType(t.scalar_type(), /*includeBool=*/false))
            throw_py(PyExc_TypeError, "indices must be an integer tensor, got " +
                                          std::string(c10::toString(t.scalar_type())));
        if (t.dim() != 1)
            throw_py(PyExc_ValueError, "indices must be 1-D, got " +
                                           std::to_string(t.dim()) + " dimensions");
        return t.to(at::kCPU, at::kLong).contiguous();
    }
    if (PyObject_CheckBuffer(o) && !PyBytes_Check(o) && !PyByteArray_Check(o))
        return indices_from_buffer(o);
    return indices_from_sequence(o);
}

uint64_t now_ns()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

void note_read(uint64_t t0, uint64_t t1)
{
    t_read_begin = t0;
    t_read_end = t1;
}

std::pair<uint64_t, uint64_t> last_read_window() { return {t_read_begin, t_read_end}; }

}  // namespace ddstore_torch
