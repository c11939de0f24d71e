// ddstore-torch: the Python layer's option tables and checks (pyddstore/torch
// keeps what builds the objects it returns):
//
// - ragged_table: DistDataset(ragged=...) as a table (ragged.ragged_mode);
//   comparable: a schema description without the shapes that may vary
//   (what the ranks compare before loading); first_checks: the first
//   sample's schema against the options; check_descs: every rank's
//   description against rank 0's (ValueError naming the first difference).
// - pyg_table / pyg_parts: torch_geometric samples, the axis each field
//   varies along and the arithmetic of a Batch (index fields incremented,
//   slices, ptr, batch); ragged.pyg_batch builds the Batch object.
// - pack_tensors: one ragged field's per-sample tensors packed.
// - structure_of / select_keys / field_layout: a sample's structure, fields=
//   and a Field's sizes (schema.py).
// - window_spec: WindowedDataset's arguments.
// - sampler_len / sampler_args / budget_args: the samplers' arguments.
#include "ddstore_torch.h"

#include <pybind11/numpy.h>

#include <cstring>

namespace ddstore_torch {

bool is_pyg(py::handle sample);   // samples.cpp

namespace {

std::string str_of(py::handle v) { return py::str(v).cast<std::string>(); }

bool instance_of(py::handle v, py::handle cls)
{
    const int r = PyObject_IsInstance(v.ptr(), cls.ptr());
    if (r < 0)
        throw py::error_already_set();
    return r == 1;
}

// operator.index(v) (its TypeError)
py::int_ as_index(py::handle v)
{
    auto i = py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()));
    if (!i)
        throw py::error_already_set();
    return py::reinterpret_borrow<py::int_>(i);
}

bool less(py::handle a, py::handle b)
{
    const int r = PyObject_RichCompareBool(a.ptr(), b.ptr(), Py_LT);
    if (r < 0)
        throw py::error_already_set();
    return r == 1;
}

// kinds whose shape may vary along one axis (schema.RAGGED_KINDS)
bool ragged_kind_obj(py::handle kind)
{
    const std::string k = str_of(kind);
    return k == "tensor" || k == "ndarray";
}

// torch_geometric: Data.num_nodes looks at these keys; "index" keys (and
// "face") are concatenated along their last dim, incremented by the nodes
bool pyg_node_key(py::handle key)
{
    if (!PyUnicode_Check(key.ptr()))
        return false;
    const std::string k = str_of(key);
    for (const char *n : {"x", "pos", "z", "feat", "node_type"})
        if (k == n)
            return true;
    return false;
}

bool pyg_index_key(py::handle key)
{
    if (!PyUnicode_Check(key.ptr()))
        return false;
    const std::string k = str_of(key);
    return k.find("index") != std::string::npos || k == "face";
}

at::Tensor tensor_of(py::handle v) { return v.cast<at::Tensor>(); }

bool is_tensor(py::handle v)
{
    static py::object cls = py::module_::import("torch").attr("Tensor");
    return instance_of(v, cls);
}

std::string diff(py::handle a, py::handle b)
{
    py::object sa = a.attr("get")("structure"), sb = b.attr("get")("structure");
    if (sa.not_equal(sb))
        return "structure " + str_of(sa) + " vs " + str_of(sb);
    py::list fa = a["fields"], fb = b["fields"];
    if (fa.size() != fb.size())
        return std::to_string(fa.size()) + " vs " + std::to_string(fb.size()) + " fields";
    for (size_t i = 0; i < fa.size(); i++)
        if (fa[i].not_equal(fb[i]))
            return "field " + repr_of(fa[i]["key"]) + ": " + str_of(fa[i]) + " vs " +
                   str_of(fb[i]);
    return "different descriptions";
}

}  // namespace

py::object ragged_table(py::handle ragged, py::object keys)
{
    if (ragged.is_none() || ragged.ptr() == Py_False)
        return py::none();
    if (ragged.ptr() == Py_True)
        return py::str("auto");
    static py::object mapping = py::module_::import("collections.abc").attr("Mapping");
    py::dict table;
    if (instance_of(ragged, mapping)) {
        for (py::handle item : ragged.attr("items")()) {
            py::object k = item[py::int_(0)], a = item[py::int_(1)];
            if (!a.is_none()) {
                if (PyBool_Check(a.ptr()))
                    throw py::type_error("ragged={" + repr_of(k) + ": " + repr_of(a) +
                                         "}: the axis must be an int or None");
                a = as_index(a);
                if (less(a, py::int_(0)))
                    throw py::value_error("ragged={" + repr_of(k) + ": " + str_of(a) +
                                          "}: the axis must be >= 0");
            }
            table[k] = a.is_none() ? py::object(py::str("auto")) : a;
        }
    } else if (PyList_Check(ragged.ptr()) || PyTuple_Check(ragged.ptr()) ||
               PyAnySet_Check(ragged.ptr())) {
        for (py::handle k : ragged)
            table[k] = py::str("auto");
    } else {
        throw py::type_error("ragged must be a bool, a list of field keys or a dict "
                             "{key: axis}, got " + type_name(ragged));
    }
    if (keys.is_none())
        return std::move(table);
    py::list unknown;
    for (auto kv : table)
        if (!keys.contains(kv.first))
            unknown.append(kv.first);
    if (!unknown.empty())
        throw py::value_error(
            std::string("ragged: ") + (unknown.size() == 1 ? "field " : "fields ") +
            repr_of(unknown.size() > 1 ? py::object(unknown) : py::object(unknown[0])) +
            " not in the sample's fields " + repr_of(py::list(keys)));
    return std::move(table);
}

py::object comparable(py::dict desc, py::object mode_of)
{
    if (mode_of.is_none())
        return std::move(desc);
    py::dict out = desc.attr("copy")();
    py::list fields;
    for (py::handle fd : desc["fields"]) {
        if (ragged_kind_obj(fd["kind"]) && !mode_of(fd["key"]).is_none()) {
            py::dict c = py::reinterpret_borrow<py::dict>(fd).attr("copy")();
            c["shape"] = py::str(std::to_string(py::len(fd["shape"])) + " dims");
            fields.append(c);
        } else {
            fields.append(fd);
        }
    }
    out["fields"] = fields;
    return std::move(out);
}

void check_descs(const std::string &name, py::list descs)
{
    for (size_t r = 1; r < descs.size(); r++)
        if (descs[r].not_equal(descs[0]))
            throw py::value_error(
                "DistDataset '" + name + "': the samples of rank " + std::to_string(r) +
                " differ from rank 0's: " + diff(descs[0], descs[r]) +
                "; shapes and dtypes must be fixed across samples (DistDataset(ragged=True) "
                "stores tensor/ndarray fields whose size varies along one axis)");
}

void first_checks(py::list fields, py::object mode_of, const std::string &where, bool pyg,
                  py::object ragged_batch, bool chunked)
{
    for (py::handle f : fields)
        if (f.attr("disp").cast<int64_t>() == 0 &&
            (mode_of.is_none() || mode_of(f.attr("key")).is_none()))
            throw py::value_error(where + "[" + repr_of(f.attr("key")) +
                                  "]: a field with no elements (shape " + str_of(f.attr("shape")) +
                                  ") cannot be stored (a fixed field)");
    if (pyg && ragged_batch.not_equal(py::str("packed")))
        throw py::value_error("torch_geometric Data samples are batched as a torch_geometric "
                              "Batch (packed): ragged_batch='padded' does not apply");
    if (pyg && chunked)
        throw py::value_error("chunk_size cannot be used with torch_geometric Data samples "
                              "(their fields are ragged: loaded in one pass)");
}

py::dict pyg_table(py::list fields)
{
    py::dict table;
    for (py::handle f : fields) {
        py::object key = f.attr("key"), shape = f.attr("shape");
        if (!ragged_kind_obj(f.attr("kind")) || py::len(shape) == 0)
            continue;
        if (pyg_index_key(key))
            table[key] = py::int_(py::len(shape) - 1);
        else if (pyg_node_key(key))
            table[key] = py::int_(0);
        else
            table[key] = py::str("auto");
    }
    return table;
}

py::tuple pyg_parts(py::list fields, py::list vals, py::object packed_cls)
{
    const size_t nf = fields.size();
    std::vector<bool> packed(nf);
    int64_t b = -1;
    at::Tensor num_nodes;
    py::object nn_val;
    for (size_t k = 0; k < nf; k++) {
        py::handle f = fields[k], v = vals[k];
        packed[k] = instance_of(v, packed_cls);
        if (packed[k]) {
            at::Tensor lengths = tensor_of(v.attr("lengths"));
            b = lengths.numel();
            if (pyg_node_key(f.attr("key")) && !f.attr("axis").is_none() &&
                f.attr("axis").cast<int64_t>() == 0 && !num_nodes.defined())
                num_nodes = lengths;
        } else if (str_of(f.attr("key")) == "num_nodes" && PyUnicode_Check(f.attr("key").ptr())) {
            nn_val = py::reinterpret_borrow<py::object>(v);
        }
    }
    if (b < 0)
        b = py::len(vals) ? vals[0].attr("shape")[py::int_(0)].cast<int64_t>() : 0;
    if (!num_nodes.defined() && nn_val)
        num_nodes = py::module_::import("torch").attr("as_tensor")(
                        nn_val, py::arg("dtype") = py::module_::import("torch").attr("int64"))
                        .cast<at::Tensor>();
    for (size_t k = 0; k < nf && !num_nodes.defined(); k++) {
        py::handle f = fields[k];
        py::object shape = f.attr("shape");
        if (pyg_node_key(f.attr("key")) && !packed[k] && py::len(shape))
            num_nodes = at::full({b}, shape[py::int_(0)].cast<int64_t>(), at::kLong);
    }
    if (!num_nodes.defined()) {
        py::list keys;
        for (py::handle f : fields)
            keys.append(f.attr("key"));
        throw py::value_error("torch_geometric batch: no node-level field (x, pos, z, ...) "
                              "among " + repr_of(keys) + " to count the nodes of each sample");
    }
    at::Tensor ptr = at::zeros({b + 1}, at::kLong);
    ptr.slice(0, 1).copy_(at::cumsum(num_nodes, 0));
    py::list values;
    py::dict slices, incs;
    for (size_t k = 0; k < nf; k++) {
        py::object key = fields[k].attr("key");
        py::object v = vals[k];
        if (packed[k]) {
            at::Tensor value = tensor_of(v.attr("values"));
            slices[key] = v.attr("offsets");
            if (pyg_index_key(key)) {
                at::Tensor inc = ptr.slice(0, 0, b);
                const at::Tensor bt = tensor_of(v.attr("batch")).to(value.device());
                value = value + inc.to(value.device()).index({bt});
                incs[key] = inc;
            } else {
                incs[key] = at::zeros({b}, at::kLong);
            }
            values.append(value);
        } else if (is_tensor(v)) {
            at::Tensor t = tensor_of(v);
            if (t.dim() <= 1) {
                slices[key] = at::arange(b + 1, at::kLong);
                values.append(v);
            } else {
                std::vector<int64_t> shape{-1};
                for (int64_t d = 2; d < t.dim(); d++)
                    shape.push_back(t.size(d));
                slices[key] = at::arange(b + 1, at::kLong) * t.size(1);
                values.append(t.reshape(shape));
            }
            incs[key] = at::zeros({b}, at::kLong);
        } else {
            values.append(v);
        }
    }
    at::Tensor batch = at::repeat_interleave(at::arange(b, at::kLong), num_nodes);
    return py::make_tuple(b, values, slices, incs, batch, ptr);
}

py::tuple pack_tensors(std::vector<at::Tensor> ts, std::vector<int64_t> row_shape,
                       const std::string &dtype)
{
    const int64_t n = static_cast<int64_t>(ts.size());
    std::vector<int64_t> lens;
    for (const at::Tensor &t : ts)
        lens.push_back(t.size(0));
    at::Tensor lengths = at::tensor(lens, at::kLong);
    std::vector<int64_t> empty{0};
    empty.insert(empty.end(), row_shape.begin(), row_shape.end());
    at::Tensor values =
        n ? at::cat(ts, 0) : at::empty(empty, at::TensorOptions().dtype(scalar_type_of(dtype)));
    at::Tensor offsets = at::zeros({n + 1}, at::kLong);
    offsets.slice(0, 1).copy_(at::cumsum(lengths, 0));
    at::Tensor batch = at::repeat_interleave(at::arange(n, at::kLong), lengths);
    return py::make_tuple(values, lengths, offsets, batch);
}

py::tuple window_spec(py::handle window, py::handle stride, py::handle dilation,
                      py::object starts, int64_t n, py::object range_error)
{
    int64_t v[3];
    const char *what[3] = {"window", "stride", "dilation"};
    py::handle args[3] = {window, stride, dilation};
    for (int i = 0; i < 3; i++) {
        py::int_ x = as_index(args[i]);
        if (less(x, py::int_(1)))
            throw py::value_error(std::string("WindowedDataset: ") + what[i] +
                                  " must be >= 1, got " + str_of(x));
        v[i] = x.cast<int64_t>();
    }
    const int64_t span = (v[0] - 1) * v[2] + 1;
    if (starts.is_none())
        return py::make_tuple(v[0], v[1], v[2], span, py::none(),
                              n < span ? 0 : (n - span) / v[1] + 1);
    py::module_ np = py::module_::import("numpy");
    py::object s = np.attr("asarray")(starts);
    if (s.attr("ndim").cast<int64_t>() != 1 ||
        (s.attr("size").cast<int64_t>() &&
         std::string("iu").find(s.attr("dtype").attr("kind").cast<std::string>()) ==
             std::string::npos))
        throw py::value_error("WindowedDataset: starts must be a 1-D sequence of integers");
    auto a = s.attr("astype")(np.attr("int64")).cast<py::array_t<int64_t, py::array::c_style>>();
    const int64_t m = static_cast<int64_t>(a.size());
    at::Tensor out = at::empty({m}, at::kLong);
    std::memcpy(out.data_ptr<int64_t>(), a.data(), sizeof(int64_t) * static_cast<size_t>(m));
    const int64_t *p = out.data_ptr<int64_t>();
    for (int64_t k = 0; k < m; k++)
        if (p[k] < 0 || p[k] > n - span) {
            PyErr_SetString(range_error.ptr(),
                            ("WindowedDataset: starts[" + std::to_string(k) + "] = " +
                             std::to_string(p[k]) + " needs rows " + std::to_string(p[k]) + ".." +
                             std::to_string(p[k] + span - 1) + ", outside [0, " +
                             std::to_string(n) + ")")
                                .c_str());
            throw py::error_already_set();
        }
    return py::make_tuple(v[0], v[1], v[2], span, out, m);
}

int64_t sampler_len(py::handle dataset, int64_t max_n)
{
    static py::object integral = py::module_::import("numbers").attr("Integral");
    py::int_ n;
    if (instance_of(dataset, integral) && !PyBool_Check(dataset.ptr())) {
        n = py::int_(py::reinterpret_borrow<py::object>(dataset));
    } else {
        const Py_ssize_t len = PyObject_Length(dataset.ptr());
        if (len < 0) {
            if (!PyErr_ExceptionMatches(PyExc_TypeError))
                throw py::error_already_set();
            PyErr_Clear();
            throw py::type_error("DistSampler: dataset must have len() or be an int, got " +
                                 type_name(dataset));
        }
        n = py::int_(len);
    }
    if (less(n, py::int_(0)) || !less(n, py::int_(max_n)))
        throw py::value_error("DistSampler: the dataset length must be in [0, 2**62), got " +
                              str_of(n));
    return n.cast<int64_t>();
}

py::tuple sampler_args(py::handle num_replicas, py::handle rank, py::handle seed)
{
    static py::object integral = py::module_::import("numbers").attr("Integral");
    const char *what[3] = {"num_replicas", "rank", "seed"};
    py::handle v[3] = {num_replicas, rank, seed};
    for (int i = 0; i < 3; i++)
        if (PyBool_Check(v[i].ptr()) || !instance_of(v[i], integral))
            throw py::type_error(std::string("DistSampler: ") + what[i] +
                                 " must be an int, got " + type_name(v[i]));
    py::int_ w(py::reinterpret_borrow<py::object>(num_replicas)),
        r(py::reinterpret_borrow<py::object>(rank));
    if (less(w, py::int_(1)))
        throw py::value_error("DistSampler: num_replicas must be >= 1, got " + str_of(w));
    if (less(r, py::int_(0)) || !less(r, w))
        throw py::value_error("DistSampler: rank must be in [0, " +
                              str_of(py::int_(w.cast<int64_t>() - 1)) + "], got " + str_of(r));
    return py::make_tuple(w, r, py::int_(py::reinterpret_borrow<py::object>(seed)));
}

py::tuple budget_args(py::handle budget, py::handle seed, py::handle num_replicas,
                      py::handle rank)
{
    static py::object integral = py::module_::import("numbers").attr("Integral");
    const char *what[2] = {"budget", "seed"};
    py::handle v[2] = {budget, seed};
    for (int i = 0; i < 2; i++)
        if (PyBool_Check(v[i].ptr()) || !instance_of(v[i], integral))
            throw py::type_error(std::string("BudgetBatchSampler: ") + what[i] +
                                 " must be an int, got " + type_name(v[i]));
    py::int_ b(py::reinterpret_borrow<py::object>(budget));
    if (less(b, py::int_(1)))
        throw py::value_error("BudgetBatchSampler: budget must be >= 1, got " + str_of(b));
    py::int_ w = as_index(num_replicas), r = as_index(rank);
    if (less(w, py::int_(1)) || less(r, py::int_(0)) || !less(r, w))
        throw py::value_error("BudgetBatchSampler: rank " + str_of(r) + " of " + str_of(w) +
                              " replicas");
    return py::make_tuple(b, py::int_(py::reinterpret_borrow<py::object>(seed)), w, r);
}

py::tuple structure_of(py::handle sample, const std::string &where)
{
    static py::object mapping = py::module_::import("collections.abc").attr("Mapping");
    std::string st = "value";
    py::object ntype = py::none();
    py::list items;
    if (is_pyg(sample)) {
        st = "pyg";
        items = py::list(sample.attr("to_dict")().attr("items")());
    } else if (instance_of(sample, mapping)) {
        st = "dict";
        items = py::list(sample.attr("items")());
    } else if (PyTuple_Check(sample.ptr()) || PyList_Check(sample.ptr())) {
        st = PyList_Check(sample.ptr()) ? "list"
             : py::hasattr(sample, "_fields") ? "namedtuple" : "tuple";
        if (st == "namedtuple")
            ntype = py::type::of(sample);
        int64_t i = 0;
        for (py::handle v : sample)
            items.append(py::make_tuple(i++, v));
    } else {
        items.append(py::make_tuple(0, sample));
    }
    if (st != "value" && items.empty())
        throw py::value_error(where + ": an empty " + type_name(sample) +
                              " has no fields to store");
    return py::make_tuple(st, ntype, items);
}

py::list select_keys(py::object keys, py::list have, py::object unknown_cls)
{
    static py::object iterable = py::module_::import("collections.abc").attr("Iterable");
    py::list ks;
    if (PyUnicode_Check(keys.ptr()) || PyBytes_Check(keys.ptr()) || !instance_of(keys, iterable))
        ks.append(keys);
    else
        ks = py::list(keys);
    if (ks.empty())
        throw py::value_error("fields: an empty list selects nothing");
    py::list missing;
    for (py::handle k : ks)
        if (!have.contains(k))
            missing.append(k);
    if (!missing.empty()) {
        const std::string what = missing.size() == 1 ? "field " + repr_of(missing[0])
                                                     : "fields " + repr_of(missing);
        PyErr_SetString(unknown_cls.ptr(), ("fields: " + what + " not in the sample's fields " +
                                            repr_of(have)).c_str());
        throw py::error_already_set();
    }
    if (py::len(py::set(ks)) != ks.size())
        throw py::value_error("fields: repeated keys in " + repr_of(ks));
    return ks;
}

py::tuple field_layout(py::handle key, const std::string &kind, py::tuple shape,
                       int64_t itemsize, py::object axis)
{
    std::vector<int64_t> dims;
    for (py::handle d : shape)
        dims.push_back(d.cast<int64_t>());
    int64_t n = 1;
    if (axis.is_none()) {
        for (int64_t d : dims)
            n *= d;
        if (kind == "record")
            return py::make_tuple(py::make_tuple(n * itemsize), n * itemsize, n * itemsize);
        return py::make_tuple(shape, n, n * itemsize);
    }
    if (kind != "tensor" && kind != "ndarray")
        throw py::value_error("field " + repr_of(key) + ": a " + kind +
                              " field cannot be ragged (only tensor and ndarray fields vary "
                              "in shape)");
    py::int_ a = as_index(axis);
    if (less(a, py::int_(0)) || !less(a, py::int_(dims.size())) ||
        dims[a.cast<size_t>()] != -1)
        throw py::value_error("field " + repr_of(key) + ": ragged axis " + str_of(a) +
                              " does not fit shape " + str_of(shape) +
                              " (-1 marks the varying axis)");
    py::list row;
    for (size_t i = 0; i < dims.size(); i++)
        if (i != a.cast<size_t>()) {
            row.append(dims[i]);
            n *= dims[i];
        }
    return py::make_tuple(py::tuple(row), n, n * itemsize);
}

void def_options(py::module_ &m)
{
    m.def("ragged_table", &ragged_table, py::arg("ragged"), py::arg("keys") = py::none(),
          "DistDataset(ragged=...) as a table: None (every field fixed), 'auto' (every "
          "tensor/ndarray field), or {key: 'auto' or axis}; TypeError / ValueError naming "
          "the entry (unknown keys when `keys` is given).");
    m.def("comparable", &comparable, py::arg("desc"), py::arg("mode_of"),
          "A schema description without the shapes of the fields that may be ragged (their "
          "number of dims kept): what the ranks compare before loading.");
    m.def("check_descs", &check_descs, py::arg("name"), py::arg("descs"),
          "ValueError naming the first rank whose description differs from rank 0's.");
    m.def("first_checks", &first_checks, py::arg("fields"), py::arg("mode_of"),
          py::arg("where"), py::arg("pyg"), py::arg("ragged_batch"), py::arg("chunked"),
          "DistDataset: the checks of the first sample's schema (ValueError).");
    m.def("pyg_table", &pyg_table, py::arg("fields"),
          "torch_geometric fields: {key: axis or 'auto'} (index fields along their last "
          "dim, node-level ones along 0).");
    m.def("pyg_parts", &pyg_parts, py::arg("fields"), py::arg("vals"), py::arg("packed_cls"),
          "(graphs, values, slices, incs, batch, ptr) of a torch_geometric Batch from a "
          "batch's collated field values (Packed for ragged fields).");
    m.def("pack_tensors", &pack_tensors, py::arg("ts"), py::arg("row_shape"), py::arg("dtype"),
          "(values, lengths, offsets, batch) of per-sample tensors (varying axis first).");
    m.def("window_spec", &window_spec, py::arg("window"), py::arg("stride"),
          py::arg("dilation"), py::arg("starts"), py::arg("n"), py::arg("range_error"),
          "WindowedDataset's arguments: (window, stride, dilation, span, starts tensor or "
          "None, number of windows).");
    m.def("sampler_len", &sampler_len, py::arg("dataset"), py::arg("max_n"),
          "DistSampler: the dataset's length (an int, or len(dataset)).");
    m.def("sampler_args", &sampler_args, py::arg("num_replicas"), py::arg("rank"),
          py::arg("seed"), "DistSampler: (num_replicas, rank, seed) checked.");
    m.def("structure_of", &structure_of, py::arg("sample"), py::arg("where"),
          "(structure, namedtuple class or None, [(key, value)]) of a sample: 'pyg', "
          "'dict', 'namedtuple', 'tuple', 'list' or 'value'; ValueError for an empty one.");
    m.def("is_pyg", &is_pyg, py::arg("sample"), "True for a torch_geometric Data sample.");
    m.def("select_keys", &select_keys, py::arg("keys"), py::arg("have"), py::arg("unknown_cls"),
          "fields=: the keys (one key or an iterable of them) checked against the sample's "
          "keys `have` (unknown_cls naming the missing ones, ValueError: none, repeated).");
    m.def("field_layout", &field_layout, py::arg("key"), py::arg("kind"), py::arg("shape"),
          py::arg("itemsize"), py::arg("axis"),
          "(row_shape, disp, nbytes) of a field (ragged: along `axis`, -1 in shape; "
          "ValueError when it does not fit).");
    m.def("budget_args", &budget_args, py::arg("budget"), py::arg("seed"),
          py::arg("num_replicas"), py::arg("rank"),
          "BudgetBatchSampler: (budget, seed, num_replicas, rank) checked.");
}

}  // namespace ddstore_torch
