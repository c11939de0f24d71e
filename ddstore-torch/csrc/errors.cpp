// ddstore-torch: the capsule table, object unwrapping and error translation.
#include "ddstore_torch.h"

#include <cstring>
#include <time.h>

namespace ddstore_torch {

namespace {
const pyddstore_api_t *g_api = nullptr;
int g_gpu_kind = DDS_MEM_CUDA;
thread_local uint64_t t_read_begin = 0;
thread_local uint64_t t_read_end = 0;
}  // namespace

const pyddstore_api_t *api() { return g_api; }

void load_api()
{
    const pyddstore_api_t *a = pyddstore_api_import();
    if (a == nullptr)  // also a table of another version or size
        throw py::error_already_set();
    g_api = a;
}

// The one place where C status codes become Python exceptions: _core's
// raise_error() sets the documented exception (KeyError subclass, IndexError,
// ValueError, TypeError, MemoryError, DDStoreError) with dds_last_error().
void throw_rc(int rc)
{
    if (g_api == nullptr)
        throw_py(PyExc_RuntimeError, "pyddstore._ddstore_torch: C API not loaded");
    g_api->raise_error(rc);
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_RuntimeError, "ddstore error %d", rc);
    throw py::error_already_set();
}

void throw_py(PyObject *type, const std::string &msg)
{
    PyErr_SetString(type, msg.c_str());
    throw py::error_already_set();
}

namespace {
bool have_acquire()
{
    return g_api->acquire != nullptr && g_api->release != nullptr;
}
}  // namespace

Target::Target(py::handle obj) : obj_(obj.ptr())
{
    if (have_acquire()) {
        if (g_api->acquire(obj_, &store, &reader) < 0)
            throw py::error_already_set();
        pinned_ = true;  // acquire holds a reference until release
    } else if (g_api->unwrap(obj_, &store, &reader) < 0) {
        throw py::error_already_set();
    }
}

Target::~Target()
{
    if (pinned_)
        g_api->release(obj_);
}

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

int read_fields_into(dds_store_t *store, dds_reader_t *reader,
                     const std::vector<std::string> &names, std::vector<dds_buf_t> &bufs,
                     const int64_t *rows, size_t n)
{
    int rc = 0;
    for (size_t k = 0; k < bufs.size() && rc == 0; k++)
        rc = read_into(store, reader, names[k].c_str(), &bufs[k], rows, n, 0, true);
    return rc;
}

int read_into(const Target &t, const char *name, dds_buf_t *buf, const int64_t *rows,
              size_t n, int64_t start, bool batch)
{
    return read_into(t.store, t.reader, name, buf, rows, n, start, batch);
}

int read_into(dds_store_t *store, dds_reader_t *reader, const char *name, dds_buf_t *buf,
              const int64_t *rows, size_t n, int64_t start, bool batch)
{
    for (;;) {
        const int rc = batch ? g_api->get_batch(store, reader, name, buf, rows, n)
                             : g_api->get(store, reader, name, buf, start);
        if (rc != -DDS_ETYPE || buf->dtype == DDS_DTYPE_RAW)
            return rc;
        // Core refused the tensor's element type before reading anything.  A
        // raw variable takes any element type whose rows have its row bytes:
        // describe the tensor as raw rows of the variable's itemsize and let
        // core check the row width.  Any other variable: core's error stands.
        dds_var_info_t info;
        const int irc = g_api->var_info(store, name, &info);
        if (irc != 0)
            return irc;
        if (info.dtype != DDS_DTYPE_RAW)
            return rc;
        buf->dtype = DDS_DTYPE_RAW;
        buf->itemsize = info.itemsize;
    }
}

namespace {
int64_t *alloc_indices(void *ctx, size_t n)
{
    auto *t = static_cast<at::Tensor *>(ctx);
    *t = at::empty({static_cast<int64_t>(n)}, at::kLong);
    return t->data_ptr<int64_t>();
}
}  // namespace

at::Tensor as_indices(py::handle obj)
{
    // A tensor (any device: indices may live on the GPU) is torch's to
    // convert; anything else goes through _core's converter, the one
    // get_batch uses (every integer width, DLPack, sequences).
    if (THPVariable_Check(obj.ptr())) {
        at::Tensor t = THPVariable_Unpack(obj.ptr());
        if (!at::isIntegralType(t.scalar_type(), /*includeBool=*/false))
            throw_py(PyExc_TypeError, "indices must be an integer tensor, got " +
                                          std::string(c10::toString(t.scalar_type())));
        if (t.dim() != 1)
            throw_py(PyExc_ValueError, "indices must be 1-D, got " +
                                           std::to_string(t.dim()) + " dimensions");
        return t.to(at::kCPU, at::kLong).contiguous();
    }
    at::Tensor idx;
    if (api()->indices(obj.ptr(), alloc_indices, &idx) != 0)
        throw py::error_already_set();
    return idx;
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
