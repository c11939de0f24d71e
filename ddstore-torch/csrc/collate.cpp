// ddstore-torch: the direct-collate path.
//
// Given a dataset's field schema and a batch's indices, allocate each
// field's batch tensor once, (len(indices), *field_shape) with the dtype
// default_collate would produce, and read every sample's row into its slot:
// one planned read for all the fields (read_vars), no per-sample work, the
// GIL released for it.  Python (pyddstore.torch) arranges the tensors into the sample's
// structure (value / list / dict), which is what default_collate returns.
//
// Ragged fields (ragged_collate, and a dataset's ragged fields with its
// fixed ones, dataset.cpp): a DDS_READ_RAGGED entry of the one planned read
// straight into the values tensor, which core has allocated at the exact
// size once it read the samples' index entries (ragged_entry's grow
// callback: no guess, no second call); the offsets (prefix sums) and the
// per-element batch vector are built here, with the GIL released.
#include <limits>

#include "ddstore_torch.h"

namespace ddstore_torch {

at::ScalarType scalar_type_of(const std::string &name)
{
    if (name == "bool") return at::kBool;
    if (name == "uint8" || name == "raw") return at::kByte;
    if (name == "int32") return at::kInt;
    if (name == "int64") return at::kLong;
    if (name == "float32") return at::kFloat;
    if (name == "float64") return at::kDouble;
    if (name == "float16") return at::kHalf;
    if (name == "bfloat16") return at::kBFloat16;
    throw_py(PyExc_TypeError, "unsupported field dtype '" + name +
                                  "' (bool, uint8, int32, int64, float16, bfloat16, float32, "
                                  "float64, raw)");
}

namespace {

// (len(indices), *shape) tensors of one spec list, parsed once.
struct FieldSpec {
    std::string name;
    std::vector<int64_t> shape;   // shape[0] is the batch size, set per call
    at::TensorOptions opts;
};

FieldSpec parse_spec(py::handle h)
{
    py::tuple spec = py::reinterpret_borrow<py::tuple>(h);
    if (spec.size() < 3)
        throw_py(PyExc_ValueError, "collate spec must be (name, shape, dtype[, on_device])");
    FieldSpec f;
    f.name = spec[0].cast<std::string>();
    f.shape.push_back(0);
    for (py::handle d : py::reinterpret_borrow<py::tuple>(spec[1]))
        f.shape.push_back(d.cast<int64_t>());
    f.opts = at::TensorOptions().dtype(scalar_type_of(spec[2].cast<std::string>()));
    return f;
}

}  // namespace

at::Tensor seq_indices(py::handle indices, int64_t total, const std::string &who)
{
    at::Tensor idx = as_indices(indices);
    const int64_t n = idx.numel();
    if (n == 0)
        return idx;
    const int64_t *p = idx.data_ptr<int64_t>();
    int64_t lo = p[0], hi = p[0];
    for (int64_t i = 1; i < n; i++) {
        lo = std::min(lo, p[i]);
        hi = std::max(hi, p[i]);
    }
    if (lo < -total || hi >= total) {
        const int64_t bad = lo < -total ? lo : hi;
        throw_py(PyExc_IndexError,
                 who + ": index " + std::to_string(bad) + " out of range [-" +
                     std::to_string(total) + ", " + std::to_string(total) +
                     ") (negative indices count from the end)");
    }
    if (lo < 0) {
        // never write into the caller's tensor (as_indices may return it)
        idx = idx.clone();
        int64_t *q = idx.data_ptr<int64_t>();
        for (int64_t i = 0; i < n; i++)
            if (q[i] < 0)
                q[i] += total;
    }
    return idx;
}

Collator::Collator(py::list specs, int64_t total, std::string who, std::string structure,
                   py::object aux, py::object packed)
    : total_(total), who_(std::move(who)), aux_(std::move(aux))
{
    if (!packed.is_none()) {
        packed_ = true;
        pack_ = parse_packed(packed);
    }
    if (structure == "value") kind_ = 0;
    else if (structure == "tuple" || structure == "list") kind_ = 1;
    else if (structure == "namedtuple") kind_ = 2;
    else if (structure == "dict") kind_ = 3;
    else throw_py(PyExc_ValueError, "collator: unknown structure '" + structure + "'");
    for (py::handle h : specs) {
        FieldSpec f = parse_spec(h);
        names_.push_back(f.name);
        shapes_.push_back(f.shape);
        opts_.push_back(f.opts);
    }
    if (kind_ == 0 && names_.size() != 1)
        throw_py(PyExc_ValueError, "collator: a 'value' structure has one field");
    if (packed_ && pack_.offsets.size() != names_.size())
        throw_py(PyExc_ValueError, "collator: " + std::to_string(pack_.offsets.size()) +
                                       " packed offsets for " + std::to_string(names_.size()) +
                                       " fields");
}

at::Tensor Collator::rows(py::handle indices) const
{
    return seq_indices(indices, total_, who_);
}

void Collator::alloc(int64_t n, std::vector<at::Tensor> *outs,
                     std::vector<dds_buf_t> *bufs) const
{
    const size_t nf = names_.size();
    outs->reserve(nf);
    bufs->reserve(nf);
    for (size_t k = 0; k < nf; k++) {
        std::vector<int64_t> shape = shapes_[k];
        shape[0] = n;
        outs->push_back(batch_empty(shape, opts_[k]));
        bufs->push_back(describe(names_[k], outs->back(), n, 0));
        if (packed_)
            check_packed_out(pack_, k, bufs->back(), names_[k]);
    }
    if (packed_) {   // the row buffer rides along as the last out / buf
        outs->push_back(batch_empty({n, static_cast<int64_t>(pack_.row_bytes)},
                                     at::TensorOptions().dtype(at::kByte)));
        bufs->push_back(describe(pack_.var, outs->back(), n, 0));
    }
}

int Collator::read(dds_store_t *store, dds_reader_t *reader, const at::Tensor &idx,
                   std::vector<dds_buf_t> &bufs) const
{
    if (packed_)
        return packed_read_host(store, reader, pack_, &bufs[names_.size()],
                                idx.data_ptr<int64_t>(), static_cast<size_t>(idx.numel()),
                                bufs, names_.size());
    return read_fields_into(store, reader, names_, bufs, idx.data_ptr<int64_t>(),
                            static_cast<size_t>(idx.numel()));
}

py::object Collator::build(const std::vector<at::Tensor> &outs) const
{
    // what default_collate returns for samples of this structure (a packed
    // collator's row buffer, behind the fields, is not part of it)
    const size_t nf = names_.size();
    if (kind_ == 0)
        return py::cast(outs[0]);
    py::list vals(nf);
    for (size_t k = 0; k < nf; k++)
        vals[k] = py::cast(outs[k]);
    if (kind_ == 1)
        return std::move(vals);
    if (kind_ == 2)
        return aux_(*vals);
    py::dict d;
    py::sequence keys = py::reinterpret_borrow<py::sequence>(aux_);
    for (size_t k = 0; k < nf; k++)
        d[keys[k]] = vals[k];
    return std::move(d);
}

py::object Collator::call(py::handle obj, py::handle indices)
{
    const Target t(obj);
    const at::Tensor idx = rows(indices);
    std::vector<at::Tensor> outs;
    std::vector<dds_buf_t> bufs;
    alloc(idx.numel(), &outs, &bufs);
    int rc;
    {
        py::gil_scoped_release nogil;
        const uint64_t t0 = now_ns();
        rc = read(t.store, t.reader, idx, bufs);
        note_read(t0, now_ns());
    }
    check(rc);
    return build(outs);
}

// specs: [(variable, shape tuple, dtype name, on_device bool), ...]; fields
// with on_device True are allocated on `device` (a torch device string or
// None = CPU), the others on the CPU (pinned when pin_memory): one Reads
// (dataset.cpp) of those fields, read once.
std::vector<at::Tensor> collate(py::handle obj, py::list specs, py::handle indices,
                                py::object device, bool pin_memory, uintptr_t stream,
                                py::object packed)
{
    PackedRow pk;
    if (!packed.is_none()) {
        pk = parse_packed(packed);
        if (pk.offsets.size() != specs.size())
            throw_py(PyExc_ValueError, "collate: " + std::to_string(pk.offsets.size()) +
                                           " packed offsets for " +
                                           std::to_string(specs.size()) + " fields");
    }
    py::list fields;
    for (size_t k = 0; k < specs.size(); k++) {
        py::tuple spec = specs[k].cast<py::tuple>();
        if (spec.size() != 4)
            throw_py(PyExc_ValueError, "collate spec must be (name, shape, dtype, on_device)");
        fields.append(py::make_tuple(
            k, spec[0], packed.is_none() ? spec[0] : py::str(pk.var), spec[1], spec[2],
            spec[3], false,
            packed.is_none() ? py::object(py::none()) : py::object(py::int_(pk.offsets[k]))));
    }
    Reads reads(fields, std::numeric_limits<int64_t>::max(), "collate",
                packed.is_none() ? py::object(py::none())
                                 : py::object(py::make_tuple(pk.var, pk.row_bytes)));
    return reads.read(obj, indices, py::none(), py::none(), device, stream, pin_memory,
                      py::none())
        .cast<std::vector<at::Tensor>>();
}


namespace {

at::Tensor ragged_values_buffer(const std::vector<int64_t> &row_shape, int64_t rows,
                         const at::TensorOptions &opts)
{
    std::vector<int64_t> shape{rows};
    shape.insert(shape.end(), row_shape.begin(), row_shape.end());
    return at::empty(shape, opts);
}

// The entry's grow callback: core knows the total and the tensor is short
// (no GIL here: torch allocates without it).
int grow_values(void *arg, dds_read_var_t *var)
{
    auto *r = static_cast<RaggedOut *>(arg);
    try {
        r->values = ragged_values_buffer(r->row_shape, var->total, r->opts);
    } catch (const std::exception &e) {
        return dds_error(-DDS_ENOMEM, "cannot allocate %lld element rows: %s",
                         static_cast<long long>(var->total), e.what());
    }
    var->dst.ptr = r->values.data_ptr();
    var->dst.nrows = var->total;
    return 0;
}

}  // namespace

dds_read_var_t ragged_entry(const std::string &name, RaggedOut &r, int64_t n, int64_t guess,
                            uintptr_t stream)
{
    r.lengths = at::empty({n}, at::kLong);
    r.values = ragged_values_buffer(r.row_shape, std::max<int64_t>(guess, 0), r.opts);
    dds_read_var_t e =
        read_entry(name.c_str(), DDS_READ_RAGGED, describe(name, r.values, r.values.size(0), stream));
    e.lengths = r.lengths.data_ptr<int64_t>();
    e.grow = grow_values;
    e.grow_arg = &r;
    return e;
}

std::vector<at::Tensor> ragged_finish(RaggedOut &r, int64_t total)
{
    const int64_t n = r.lengths.numel();
    at::Tensor values = r.values, lengths = r.lengths;
    if (values.size(0) != total)
        values = values.narrow(0, 0, total);
    at::Tensor offsets = at::empty({n + 1}, at::kLong);
    at::Tensor batch = at::empty({total}, at::kLong);
    {
        py::gil_scoped_release nogil;
        const int64_t *lp = lengths.data_ptr<int64_t>();
        int64_t *op = offsets.data_ptr<int64_t>();
        int64_t *bp = batch.data_ptr<int64_t>();
        op[0] = 0;
        for (int64_t i = 0; i < n; i++) {
            op[i + 1] = op[i] + lp[i];
            std::fill(bp + op[i], bp + op[i + 1], i);
        }
    }
    if (!values.device().is_cpu()) {
        lengths = lengths.to(values.device(), /*non_blocking=*/false);
        offsets = offsets.to(values.device(), false);
        batch = batch.to(values.device(), false);
    }
    return {values, lengths, offsets, batch};
}

// Rows `idx` (int64, CPU) of ragged variable `name`, packed in request
// order: (values (total, *row_shape), lengths (n,), offsets (n+1,), batch
// (total,)), lengths/offsets/batch int64 on the values' device.  One
// planned read: `guess` element rows (>= 0) allocated first, and when the
// samples need more, core has the exact size allocated before any payload
// moves (ragged_entry's grow; < 0: nothing first).
std::vector<at::Tensor> ragged_read(const Target &t, const std::string &name,
                                    const std::vector<int64_t> &row_shape,
                                    const at::TensorOptions &opts, const at::Tensor &idx,
                                    int64_t guess, uintptr_t stream)
{
    const int64_t n = idx.numel();
    RaggedOut r{row_shape, opts, {}, {}};
    dds_read_var_t e = ragged_entry(name, r, n, guess, stream);
    int rc;
    {
        py::gil_scoped_release nogil;
        const uint64_t t0 = now_ns();
        rc = read_vars(t.store, t.reader, &e, 1, idx.data_ptr<int64_t>(), static_cast<size_t>(n));
        note_read(t0, now_ns());
    }
    check(rc);
    return ragged_finish(r, e.total);
}

c10::optional<at::Device> device_of(const py::object &device)
{
    if (device.is_none())
        return c10::nullopt;
    return at::Device(py::str(device).cast<std::string>());
}

at::TensorOptions field_options(at::ScalarType st, const c10::optional<at::Device> &dev,
                                bool pin_memory)
{
    auto opts = at::TensorOptions().dtype(st);
    if (dev.has_value())
        return opts.device(*dev);
    return pin_memory ? opts.pinned_memory(true) : opts;
}

// ragged_collate(): ragged_read() of Python's arguments.
std::vector<at::Tensor> ragged_collate(py::handle obj, const std::string &name,
                                       std::vector<int64_t> row_shape,
                                       const std::string &dtype, py::handle indices,
                                       int64_t guess, py::object device, bool pin_memory,
                                       uintptr_t stream)
{
    const Target t(obj);
    at::Tensor idx = as_indices(indices);
    if (!idx.device().is_cpu() || idx.scalar_type() != at::kLong)
        idx = idx.to(at::kCPU, at::kLong).contiguous();
    const c10::optional<at::Device> dev = device_of(device);
    return ragged_read(t, name, row_shape,
                       field_options(scalar_type_of(dtype), dev, pin_memory), idx, guess,
                       stream);
}

}  // namespace ddstore_torch
