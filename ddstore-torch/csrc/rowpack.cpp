// ddstore-torch: reads of datasets whose fixed fields are packed into one
// row per sample (DistDataset(pack_fields=True), python/pyddstore/torch/
// packing.py).
//
// The fixed fields of a sample are one row of one uint8 store variable:
// each field's bytes at its offset (aligned to its element size), the row
// padded to a multiple of 8 bytes.  A batch is then one planned read
// (one entry of the one planned read, read_vars: one transport batch, one
// remote read per run of consecutive rows per owner; a dataset's ragged
// fields ride in the same call, dataset.cpp) into a row buffer
// (len(indices), row_bytes), and each field is scattered from there into
// its own output tensor here (host: memcpy per row and field, no GIL;
// device: one strided copy per field on the current stream).  Python
// never touches the rows.
//
// Every field's place in the row is checked against the row width before
// anything is read (a layout that would overrun the row is a ValueError),
// and core checks the row buffer against the packed variable (its row
// width) before any byte moves: a layout that does not fit the store's
// variable is core's error, never a wrong row.
#include <cstring>

#include "ddstore_torch.h"

namespace ddstore_torch {

PackedRow parse_packed(py::handle h)
{
    py::tuple t = py::reinterpret_borrow<py::tuple>(h);
    if (t.size() != 3)
        throw_py(PyExc_ValueError, "packed layout must be (variable, row_bytes, offsets)");
    PackedRow p;
    p.var = t[0].cast<std::string>();
    const int64_t rb = t[1].cast<int64_t>();
    if (rb <= 0)
        throw_py(PyExc_ValueError, "packed variable '" + p.var + "': row_bytes must be > 0, got " +
                                       std::to_string(rb));
    p.row_bytes = static_cast<size_t>(rb);
    for (py::handle o : py::reinterpret_borrow<py::sequence>(t[2])) {
        const int64_t off = o.cast<int64_t>();
        if (off < 0 || static_cast<size_t>(off) >= p.row_bytes)
            throw_py(PyExc_ValueError, "packed variable '" + p.var + "': field offset " +
                                           std::to_string(off) + " outside its row of " +
                                           std::to_string(p.row_bytes) + " bytes");
        p.offsets.push_back(static_cast<size_t>(off));
    }
    return p;
}

void check_packed_out(const PackedRow &p, size_t k, const dds_buf_t &out,
                      const std::string &field)
{
    if (k >= p.offsets.size())
        throw_py(PyExc_ValueError, "packed variable '" + p.var + "': " +
                                       std::to_string(p.offsets.size()) +
                                       " field offsets for more output tensors");
    if (p.offsets[k] + out.row_bytes > p.row_bytes || out.itemsize == 0 ||
        p.offsets[k] % out.itemsize != 0)
        throw_py(PyExc_ValueError,
                 "packed variable '" + p.var + "': field '" + field + "' (" +
                     std::to_string(out.row_bytes) + " bytes per row at offset " +
                     std::to_string(p.offsets[k]) + ", element size " +
                     std::to_string(out.itemsize) + ") does not fit a row of " +
                     std::to_string(p.row_bytes) + " bytes (the layout does not match "
                     "the output tensor)");
}

void scatter_host(const PackedRow &p, const void *rowbuf, int64_t n,
                  const std::vector<dds_buf_t> &outs, size_t nout)
{
    const char *src = static_cast<const char *>(rowbuf);
    const size_t rb = p.row_bytes;
    for (size_t k = 0; k < nout; k++) {
        char *dst = static_cast<char *>(outs[k].ptr);
        const size_t nb = outs[k].row_bytes;
        const char *s = src + p.offsets[k];
        // the common small sizes as fixed-size copies the compiler inlines
        switch (nb) {
        case 1:
            for (int64_t i = 0; i < n; i++)
                dst[i] = s[static_cast<size_t>(i) * rb];
            break;
        case 4:
            for (int64_t i = 0; i < n; i++)
                std::memcpy(dst + 4 * i, s + static_cast<size_t>(i) * rb, 4);
            break;
        case 8:
            for (int64_t i = 0; i < n; i++)
                std::memcpy(dst + 8 * i, s + static_cast<size_t>(i) * rb, 8);
            break;
        default:
            for (int64_t i = 0; i < n; i++)
                std::memcpy(dst + static_cast<size_t>(i) * nb, s + static_cast<size_t>(i) * rb,
                            nb);
        }
    }
}

int packed_read_host(dds_store_t *store, dds_reader_t *reader, const PackedRow &p,
                     dds_buf_t *rowbuf, const int64_t *rows, size_t n,
                     const std::vector<dds_buf_t> &outs, size_t nout)
{
    dds_read_var_t e = read_entry(p.var.c_str(), DDS_READ_FIXED, *rowbuf);
    const int rc = read_vars(store, reader, &e, 1, rows, n);
    if (rc == 0)
        scatter_host(p, rowbuf->ptr, static_cast<int64_t>(n), outs, nout);
    return rc;
}

void scatter_tensors(const PackedRow &p, const at::Tensor &rowbuf,
                     const std::vector<at::Tensor> &outs)
{
    const int64_t n = rowbuf.size(0);
    if (n == 0)
        return;
    for (size_t k = 0; k < outs.size(); k++) {
        const at::Tensor &o = outs[k];
        const int64_t nb = o.numel() / n * o.element_size();
        at::Tensor col = rowbuf.narrow(1, static_cast<int64_t>(p.offsets[k]), nb);
        if (o.scalar_type() != at::kByte)
            col = col.view(o.scalar_type());
        o.view({n, -1}).copy_(col);
    }
}

at::Tensor packed_rowbuf(const PackedRow &p, const std::vector<at::Tensor> &outs, int64_t n,
                         at::Tensor rowbuf, bool *host_p)
{
    bool host = true;
    c10::optional<at::Device> dev;
    for (const at::Tensor &o : outs)
        if (!o.device().is_cpu()) {
            host = false;
            dev = o.device();
        }
    if (rowbuf.defined()) {   // alloc()'s registered row buffer: its device decides
        if (rowbuf.dim() != 2 || rowbuf.size(0) < n || rowbuf.scalar_type() != at::kByte ||
            rowbuf.size(1) != static_cast<int64_t>(p.row_bytes))
            throw_py(PyExc_ValueError, "packed variable '" + p.var + "': the row buffer must "
                                       "be a uint8 tensor (>= " + std::to_string(n) +
                                           ", " + std::to_string(p.row_bytes) + ")");
        rowbuf = rowbuf.narrow(0, 0, n);
        host = host && rowbuf.device().is_cpu();
    } else {
        auto opts = at::TensorOptions().dtype(at::kByte);
        if (dev.has_value())
            opts = opts.device(*dev);
        rowbuf = host_empty({n, static_cast<int64_t>(p.row_bytes)}, opts);
    }
    *host_p = host;
    return rowbuf;
}

// Rows `idx` of packed variable p.var scattered into outs[k] (field k at
// p.offsets[k], described as bufs[k]; outs have idx.numel() rows): one
// planned read into a row buffer (packed_rowbuf), then the scatter (host:
// without the GIL; device: one strided copy per field).
void packed_read(const Target &t, const PackedRow &p, const std::vector<at::Tensor> &outs,
                 std::vector<dds_buf_t> &bufs, const at::Tensor &idx, uintptr_t stream,
                 at::Tensor rowbuf)
{
    const int64_t n = idx.numel();
    bool host = true;
    rowbuf = packed_rowbuf(p, outs, n, rowbuf, &host);
    dds_read_var_t e = read_entry(p.var.c_str(), DDS_READ_FIXED, describe(p.var, rowbuf, n, stream));
    int rc;
    {
        py::gil_scoped_release nogil;
        const uint64_t t0 = now_ns();
        rc = read_vars(t.store, t.reader, &e, 1, idx.data_ptr<int64_t>(), static_cast<size_t>(n));
        if (rc == 0 && host)
            scatter_host(p, rowbuf.data_ptr(), n, bufs, bufs.size());
        note_read(t0, now_ns());
    }
    check(rc);
    if (!host)
        scatter_tensors(p, rowbuf, outs);
}

// read_packed(): packed_read() of Python's arguments.  Output tensors may
// have more rows than indices (alloc() buffers: the first len(indices) rows
// are written).
void read_packed(py::handle obj, py::tuple packed, std::vector<at::Tensor> outs,
                 py::handle indices, uintptr_t stream, py::object rowbuf_obj)
{
    const PackedRow p = parse_packed(packed);
    if (outs.size() > p.offsets.size())
        throw_py(PyExc_ValueError, std::to_string(outs.size()) + " output tensors but " +
                                       std::to_string(p.offsets.size()) + " field offsets");
    const Target t(obj);
    const at::Tensor idx = as_indices(indices);
    const int64_t n = idx.numel();
    std::vector<dds_buf_t> bufs;
    for (size_t k = 0; k < outs.size(); k++) {
        at::Tensor &o = outs[k];
        if (o.dim() >= 1 && o.size(0) > n)
            o = o.narrow(0, 0, n);
        else if (o.dim() >= 1 && o.size(0) < n)
            throw_py(PyExc_ValueError, "packed variable '" + p.var + "': output buffer " +
                                           std::to_string(k) + " has " +
                                           std::to_string(o.size(0)) + " rows, " +
                                           std::to_string(n) + " are read");
        bufs.push_back(describe(p.var, o, n, stream));
        check_packed_out(p, k, bufs.back(), std::to_string(k));
    }
    packed_read(t, p, outs, bufs, idx, stream,
                rowbuf_obj.is_none() ? at::Tensor() : rowbuf_obj.cast<at::Tensor>());
}

}  // namespace ddstore_torch
