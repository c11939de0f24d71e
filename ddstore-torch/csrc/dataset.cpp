// ddstore-torch: the read side of one DistDataset / DistDatasetReader.
//
// Reads is built once per dataset (python/pyddstore/torch/stored.py) from
// its fields: (key, name in errors, variable, row shape, dtype, tensor kind,
// ragged, offset in the packed row or None).  A read of some fields for a
// batch of rows then enters C++ once: the fixed fields' batch tensors are
// allocated (or taken from out=, alloc()'s buffers) and every field read in
// one planned call (read_vars: a fixed entry per variable, or the packed row
// with pack_fields; a ragged entry per ragged field, its values allocated
// at the exact size once core read the samples' index entries), the GIL
// released for it: one transport round for the fixed fields, two with
// ragged ones (their index entries, then every field's rows).  Python
// builds samples and batches from the tensors.
//
// Also here: DistSampler's keyed order (feistel) and WindowedDataset's
// window rows, the arithmetic of those two Python classes.
#include "ddstore_torch.h"

namespace ddstore_torch {

namespace {

// out[key] of a mapping; ValueError when it has no such key.
at::Tensor out_buffer(py::handle out, const py::object &key)
{
    PyObject *v = PyObject_GetItem(out.ptr(), key.ptr());
    if (v == nullptr) {
        if (!PyErr_ExceptionMatches(PyExc_KeyError))
            throw py::error_already_set();
        PyErr_Clear();
        throw_py(PyExc_ValueError, "out=: no buffer for field " + repr_of(key) +
                                       " (alloc() them with the same fields)");
    }
    return py::reinterpret_steal<py::object>(v).cast<at::Tensor>();
}

}  // namespace

Reads::Reads(py::list fields, int64_t total, std::string who, py::object packed)
    : total_(total), who_(std::move(who))
{
    if (!packed.is_none()) {
        py::tuple p = packed.cast<py::tuple>();
        packed_ = true;
        pack_var_ = p[0].cast<std::string>();
        row_bytes_ = p[1].cast<size_t>();
    }
    for (py::handle h : fields) {
        py::tuple t = py::reinterpret_borrow<py::tuple>(h);
        if (t.size() != 8)
            throw_py(PyExc_ValueError, "Reads: a field is (key, name, variable, row_shape, "
                                       "dtype, tensor, ragged, offset)");
        Field f;
        f.key = py::reinterpret_borrow<py::object>(t[0]);
        f.name = t[1].cast<std::string>();
        f.var = t[2].cast<std::string>();
        f.row_shape = t[3].cast<std::vector<int64_t>>();
        f.st = scalar_type_of(t[4].cast<std::string>());
        f.tensor = t[5].cast<bool>();
        f.ragged = t[6].cast<bool>();
        if (!f.ragged && packed_) {
            if (t[7].is_none())
                throw_py(PyExc_ValueError, "Reads: fixed field " + f.name +
                                               " has no offset in the packed row");
            f.offset = t[7].cast<size_t>();
        }
        f_.push_back(std::move(f));
    }
}

int64_t Reads::index(py::handle i) const
{
    PyObject *o = PyNumber_Index(i.ptr());   // operator.index's TypeError
    if (o == nullptr)
        throw py::error_already_set();
    const py::int_ obj = py::reinterpret_steal<py::int_>(o);
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow != 0 || v < -total_ || v >= total_)
        throw_py(PyExc_IndexError, who_ + ": index " + py::str(obj).cast<std::string>() +
                                       " out of range [-" + std::to_string(total_) + ", " +
                                       std::to_string(total_) +
                                       ") (negative indices count from the end)");
    return v < 0 ? v + total_ : v;
}

at::Tensor Reads::indices(py::handle indices) const
{
    return seq_indices(indices, total_, who_);
}

// Fields `sel` (positions; None: all) of rows `indices` (global rows, no
// sequence meaning: indices()/seq_indices first for that): a tensor
// (n, *row_shape) per fixed field, (values, lengths, offsets, batch) per
// ragged one.  Fixed fields: out= buffers (a mapping key -> tensor of at
// least n rows; their first n rows returned) or fresh tensors, tensor
// fields on `device` when given (host ones pinned with pin_memory).
py::list Reads::read(py::handle obj, py::handle indices, py::object sel, py::object out,
                     py::object device, uintptr_t stream, bool pin_memory, py::object rowbuf)
{
    std::vector<size_t> which;
    if (sel.is_none()) {
        for (size_t k = 0; k < f_.size(); k++)
            which.push_back(k);
    } else {
        for (py::handle h : sel) {
            const size_t k = h.cast<size_t>();
            if (k >= f_.size())
                throw_py(PyExc_IndexError, "Reads: field position " + std::to_string(k));
            which.push_back(k);
        }
    }
    if (!out.is_none()) {
        std::vector<std::string> bad;
        for (size_t k : which)
            if (f_[k].ragged)
                bad.push_back(repr_of(f_[k].key));
        if (!bad.empty()) {
            std::string list = "[";
            for (size_t j = 0; j < bad.size(); j++)
                list += (j ? ", " : "") + bad[j];
            throw_py(PyExc_ValueError,
                     "out=: buffers (alloc()) hold fixed fields only; " + list + "] " +
                         (bad.size() == 1 ? "is" : "are") +
                         " ragged (read them without out=, or select fixed fields)");
        }
    }
    const Target t(obj);
    const at::Tensor idx = as_indices(indices);
    const int64_t n = idx.numel();
    const c10::optional<at::Device> dev = device_of(device);

    // every field of the batch as one entry of one planned read: a fixed
    // field per variable (or the packed row), a ragged one per variable
    std::vector<std::string> names;
    std::vector<at::Tensor> outs;
    std::vector<dds_buf_t> bufs;
    std::vector<dds_read_var_t> entries;
    std::vector<RaggedOut> rag;
    PackedRow pk;
    if (packed_) {
        pk.var = pack_var_;
        pk.row_bytes = row_bytes_;
    }
    size_t nrag = 0;
    for (size_t k : which)
        nrag += f_[k].ragged;
    rag.reserve(nrag);   // the entries point at their RaggedOut
    for (size_t k : which) {
        const Field &f = f_[k];
        if (f.ragged)
            continue;
        at::Tensor o;
        if (out.is_none()) {
            std::vector<int64_t> shape{n};
            shape.insert(shape.end(), f.row_shape.begin(), f.row_shape.end());
            o = host_empty(shape, field_options(f.st, f.tensor ? dev : c10::nullopt,
                                                pin_memory));
        } else {
            o = out_buffer(out, f.key);
            if (o.dim() >= 1 && o.size(0) < n)
                throw_py(PyExc_ValueError, "out=: buffer for field " + repr_of(f.key) + " has " +
                                               std::to_string(o.size(0)) + " rows, " +
                                               std::to_string(n) + " are read");
            if (o.dim() >= 1 && o.size(0) > n)
                o = o.narrow(0, 0, n);
        }
        names.push_back(packed_ ? f.name : f.var);
        outs.push_back(o);
        bufs.push_back(describe(names.back(), o, n, stream));
        if (packed_) {
            pk.offsets.push_back(f.offset);
            check_packed_out(pk, pk.offsets.size() - 1, bufs.back(), f.name);
        } else {
            entries.push_back(read_entry(f.var.c_str(), DDS_READ_FIXED, bufs.back()));
        }
    }
    at::Tensor rb;
    bool host = true;
    if (!outs.empty() && packed_) {
        rb = packed_rowbuf(pk, outs, n, rowbuf.is_none() ? at::Tensor() : rowbuf.cast<at::Tensor>(),
                           &host);
        entries.push_back(read_entry(pk.var.c_str(), DDS_READ_FIXED, describe(pk.var, rb, n, stream)));
    }
    for (size_t k : which) {
        const Field &f = f_[k];
        if (!f.ragged)
            continue;
        rag.push_back(RaggedOut{f.row_shape,
                                field_options(f.st, f.tensor ? dev : c10::nullopt, pin_memory),
                                {}, {}});
        entries.push_back(ragged_entry(f.var, rag.back(), n, -1, stream));
    }
    int rc = 0;
    {
        py::gil_scoped_release nogil;
        const uint64_t t0 = now_ns();
        rc = read_vars(t.store, t.reader, entries.data(), entries.size(), idx.data_ptr<int64_t>(),
                       static_cast<size_t>(n));
        if (rc == 0 && rb.defined() && host)
            scatter_host(pk, rb.data_ptr(), n, bufs, bufs.size());
        note_read(t0, now_ns());
    }
    check(rc);
    if (rb.defined() && !host)
        scatter_tensors(pk, rb, outs);

    py::list res(which.size());
    size_t next = 0, r = 0;
    const size_t rag0 = entries.size() - nrag;
    for (size_t j = 0; j < which.size(); j++) {
        const Field &f = f_[which[j]];
        if (!f.ragged) {
            res[j] = py::cast(outs[next++]);
            continue;
        }
        std::vector<at::Tensor> v = ragged_finish(rag[r], entries[rag0 + r].total);
        r++;
        res[j] = py::make_tuple(v[0], v[1], v[2], v[3]);
    }
    return res;
}

// ------------------------------------------------------- DistSampler order --
namespace {

constexpr int kRounds = 6;
constexpr uint64_t kC1 = 0xBF58476D1CE4E5B9ull, kC2 = 0x94D049BB133111EBull;

uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * kC1;
    x = (x ^ (x >> 27)) * kC2;
    return x ^ (x >> 31);
}

}  // namespace

// A balanced Feistel network on 2h bits (4**h >= n) with round keys from
// (seed, epoch) and cycle walking back into [0, n): the keyed bijection of
// sampler.py's docstring, per position, nothing stored.
at::Tensor feistel(int64_t n, uint64_t seed, uint64_t epoch, at::Tensor x, bool inverse)
{
    if (n < 2)
        throw_py(PyExc_ValueError, "feistel: n must be >= 2, got " + std::to_string(n));
    x = x.to(at::kCPU, at::kLong).contiguous();
    int bits = 64 - __builtin_clzll(static_cast<uint64_t>(n - 1));
    bits = std::max(bits, 2);
    const unsigned h = static_cast<unsigned>((bits + 1) / 2);
    const uint64_t mask = (uint64_t{1} << h) - 1;
    uint64_t keys[kRounds];
    uint64_t k = splitmix64(seed ^ splitmix64(epoch));
    for (int r = 0; r < kRounds; r++)
        keys[r] = k = splitmix64(k);
    auto step = [&](uint64_t v) {
        uint64_t left = v >> h, right = v & mask;
        uint64_t a = inverse ? right : left, b = inverse ? left : right;
        for (int r = 0; r < kRounds; r++) {
            uint64_t f = (b ^ keys[inverse ? kRounds - 1 - r : r]) * kC1;
            f = (f ^ (f >> 29)) * kC2;
            a ^= f >> (64 - h);
            std::swap(a, b);
        }
        if (inverse)
            std::swap(a, b);
        return (a << h) | b;
    };
    at::Tensor y = at::empty_like(x);
    const int64_t *src = x.data_ptr<int64_t>();
    int64_t *dst = y.data_ptr<int64_t>();
    const int64_t m = x.numel();
    const uint64_t un = static_cast<uint64_t>(n);
    {
        py::gil_scoped_release nogil;
        for (int64_t i = 0; i < m; i++) {
            uint64_t v = step(static_cast<uint64_t>(src[i]));
            while (v >= un)
                v = step(v);
            dst[i] = static_cast<int64_t>(v);
        }
    }
    return y;
}

// ------------------------------------------------------- WindowedDataset --
std::pair<at::Tensor, int64_t> window_rows(py::handle indices, int64_t length,
                                           py::object starts, int64_t stride,
                                           int64_t dilation, int64_t window)
{
    const at::Tensor idx = seq_indices(indices, length, "WindowedDataset");
    const int64_t n = idx.numel();
    const int64_t *ip = idx.data_ptr<int64_t>();
    at::Tensor st;
    const int64_t *sp = nullptr;
    if (!starts.is_none()) {
        st = starts.cast<at::Tensor>();
        if (st.scalar_type() != at::kLong || !st.is_contiguous() || !st.device().is_cpu() ||
            st.numel() < length)
            throw_py(PyExc_ValueError, "window_rows: starts must be a contiguous int64 CPU "
                                       "tensor of the windows' count");
        sp = st.data_ptr<int64_t>();
    }
    at::Tensor rows = at::empty({n * window}, at::kLong);
    int64_t *rp = rows.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; i++) {
        const int64_t s = sp ? sp[ip[i]] : ip[i] * stride;
        for (int64_t w = 0; w < window; w++)
            rp[i * window + w] = s + w * dilation;
    }
    return {rows, n};
}

}  // namespace ddstore_torch
