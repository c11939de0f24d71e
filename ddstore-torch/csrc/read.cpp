// ddstore-torch: reads straight into tensor storage.
//
// Every read checks its destination tensor (describe()) with the GIL held,
// then releases the GIL for the whole transfer (core checks the tensor
// against the variable there, before any byte moves), so loader threads
// read in parallel and the training thread keeps running.  Every read of
// the extension (here, collate.cpp, dataset.cpp, rowpack.cpp, the
// pipeline) is one read_vars call: core's one planned read.
#include "ddstore_torch.h"

namespace ddstore_torch {

void get(py::handle obj, const std::string &name, at::Tensor out,
         int64_t start, uintptr_t stream)
{
    const Target t(obj);
    dds_read_var_t e = read_entry(
        name.c_str(), DDS_READ_RANGE, describe(name, out, out.dim() ? out.size(0) : -1, stream));
    e.start = start;
    int rc;
    {
        py::gil_scoped_release nogil;
        const uint64_t t0 = now_ns();
        rc = read_vars(t.store, t.reader, &e, 1, nullptr, 0);
        note_read(t0, now_ns());
    }
    check(rc);
}

void get_batch(py::handle obj, const std::string &name, at::Tensor out,
               py::handle indices, uintptr_t stream)
{
    const Target t(obj);
    const at::Tensor idx = as_indices(indices);
    const int64_t n = idx.numel();
    if (out.dim() >= 1 && out.size(0) != n)
        throw_py(PyExc_ValueError, "variable '" + name + "': destination tensor has " +
                                       std::to_string(out.size(0)) + " rows but " +
                                       std::to_string(n) + " indices were given");
    dds_read_var_t e = read_entry(name.c_str(), DDS_READ_FIXED, describe(name, out, n, stream));
    int rc;
    {
        py::gil_scoped_release nogil;
        const uint64_t t0 = now_ns();
        rc = read_vars(t.store, t.reader, &e, 1, idx.data_ptr<int64_t>(),
                       static_cast<size_t>(n));
        note_read(t0, now_ns());
    }
    check(rc);
}

int read_fields_into(dds_store_t *store, dds_reader_t *reader,
                     const std::vector<std::string> &names, std::vector<dds_buf_t> &bufs,
                     const int64_t *rows, size_t n)
{
    std::vector<dds_read_var_t> e(names.size());
    for (size_t k = 0; k < names.size(); k++)
        e[k] = read_entry(names[k].c_str(), DDS_READ_FIXED, bufs[k]);
    return read_vars(store, reader, e.data(), e.size(), rows, n);
}

// Several variables, the same rows: outs[k][:len(indices)] <- rows of
// names[k], in one planned call under one GIL release.  Output tensors may
// have more rows than indices (reused buffers); the first len(indices) rows
// are written.  Every tensor is checked (describe()) before the call, and
// core checks each against its variable before any byte moves: a mismatch
// in any field raises with nothing written.
void read_fields(py::handle obj, const std::vector<std::string> &names,
                 std::vector<at::Tensor> outs, py::handle indices, uintptr_t stream)
{
    if (names.size() != outs.size())
        throw_py(PyExc_ValueError, std::to_string(names.size()) + " names but " +
                                       std::to_string(outs.size()) + " output tensors");
    const Target t(obj);
    const at::Tensor idx = as_indices(indices);
    const int64_t n = idx.numel();
    std::vector<dds_buf_t> bufs;
    bufs.reserve(outs.size());
    for (size_t k = 0; k < outs.size(); k++) {
        at::Tensor o = outs[k];
        if (o.dim() >= 1 && o.size(0) > n)
            o = o.narrow(0, 0, n);
        else if (o.dim() >= 1 && o.size(0) < n)
            throw_py(PyExc_ValueError, "variable '" + names[k] + "': output buffer has " +
                                           std::to_string(o.size(0)) + " rows, " +
                                           std::to_string(n) + " are read");
        bufs.push_back(describe(names[k], o, n, stream));
    }
    read_fields_checked(t, names, bufs, idx);
}

void read_fields_checked(const Target &t, const std::vector<std::string> &names,
                         std::vector<dds_buf_t> &bufs, const at::Tensor &idx)
{
    int rc;
    {
        py::gil_scoped_release nogil;
        const uint64_t t0 = now_ns();
        rc = read_fields_into(t.store, t.reader, names, bufs, idx.data_ptr<int64_t>(),
                              static_cast<size_t>(idx.numel()));
        note_read(t0, now_ns());
    }
    check(rc);
}

namespace {
dds_mem_t mem_of(const at::Tensor &buf, uintptr_t stream)
{
    dds_mem_t mem{};
    if (buf.device().is_cpu()) {
        mem.kind = DDS_MEM_HOST;
    } else if (buf.device().is_cuda()) {
        mem.kind = static_cast<dds_mem_kind_t>(gpu_kind());
        mem.device = buf.device().index();
        mem.stream = reinterpret_cast<void *>(stream);
    } else {
        throw_py(PyExc_TypeError, "buffer is on " + buf.device().str() +
                                      "; expected a CPU or CUDA/ROCm tensor");
    }
    if (!buf.is_contiguous())
        throw_py(PyExc_ValueError, "buffer must be C-contiguous");
    return mem;
}
}  // namespace

void register_recv(py::handle obj, at::Tensor buf, uintptr_t stream)
{
    const Target t(obj);
    const dds_mem_t mem = mem_of(buf, stream);
    const size_t bytes = static_cast<size_t>(buf.numel()) * buf.element_size();
    int rc;
    {
        py::gil_scoped_release nogil;
        rc = dds_store_recv_register(t.store, buf.data_ptr(), bytes, &mem);
    }
    check(rc);
}

void unregister_recv(py::handle obj, at::Tensor buf)
{
    const Target t(obj);
    const size_t bytes = static_cast<size_t>(buf.numel()) * buf.element_size();
    int rc;
    {
        py::gil_scoped_release nogil;
        rc = dds_store_recv_unregister(t.store, buf.data_ptr(), bytes);
    }
    if (rc == -DDS_ENOENT)   // as PyDDStore.unregister_recv: a ValueError
        throw_py(PyExc_ValueError,
                 "unregister_recv: this tensor (" + std::to_string(bytes) +
                     " bytes) is not registered (never registered, or "
                     "unregistered already)");
    check(rc);
}

}  // namespace ddstore_torch
