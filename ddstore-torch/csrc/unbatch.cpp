// ddstore-torch: a batch read back as samples (DistDataset.__getitem__ /
// __getitems__, WindowedDataset), without a per-sample Python loop:
//
// - split_batch(fields, ts): per field, the per-sample values of its batch,
//   of the field's kind (schema.py's table): tensors (views of the batch),
//   numpy arrays / scalars, Python int / float / bool, records (numpy
//   structured values, through Field.records); a ragged field's packed read
//   split by its lengths, the varying axis moved back where the samples had it
//   (a "str" field: each sample's UTF-8 bytes as a str).
// - build_samples(structure, keys, ntype, data_cls, cols): one sample per row
//   in the first sample's structure (a value, tuple, list, namedtuple, dict or
//   torch_geometric Data).
#include "ddstore_torch.h"

namespace ddstore_torch {

namespace {

py::object wrap(const at::Tensor &t) { return py::cast(t); }

// t as numpy (host memory first)
py::object numpy_of(const at::Tensor &t)
{
    return wrap(t.device().is_cpu() ? t : t.cpu()).attr("numpy")();
}

py::list fixed_values(py::handle f, py::handle tv)
{
    const std::string kind = py::str(f.attr("kind")).cast<std::string>();
    const at::Tensor t = tv.cast<at::Tensor>();
    py::list out;
    if (kind == "tensor") {
        for (const at::Tensor &row : t.unbind(0))
            out.append(wrap(row));
        return out;
    }
    if (kind == "int" || kind == "float" || kind == "bool")
        return py::list(wrap(t).attr("tolist")());
    if (kind == "ndarray" || kind == "npscalar")
        return py::list(numpy_of(t));
    // record: one structured value per row (numpy's indexing: a recarray's
    // rows are recarrays, its scalars records)
    py::object recs = f.attr("records")(tv);
    if (py::str(f.attr("rclass")).cast<std::string>() == "void")
        return py::list(recs);
    for (int64_t j = 0; j < t.size(0); j++)
        out.append(recs[py::int_(j)]);
    return out;
}

py::list ragged_value_list(py::handle f, py::handle tv)
{
    py::tuple read = py::reinterpret_borrow<py::tuple>(tv);
    const at::Tensor values = read[0].cast<at::Tensor>();
    const at::Tensor lengths = read[1].cast<at::Tensor>().cpu().contiguous();
    const int64_t axis = f.attr("axis").cast<int64_t>();
    const std::string kind = py::str(f.attr("kind")).cast<std::string>();
    const bool ndarray = kind == "ndarray";
    std::vector<int64_t> sizes(lengths.data_ptr<int64_t>(),
                               lengths.data_ptr<int64_t>() + lengths.numel());
    py::list out;
    if (kind == "str") {   // UTF-8 bytes (a file's text key): one str per sample
        const at::Tensor bytes = values.device().is_cpu() ? values.contiguous()
                                                          : values.cpu().contiguous();
        const char *p = reinterpret_cast<const char *>(bytes.data_ptr<uint8_t>());
        for (int64_t n : sizes) {
            PyObject *u = PyUnicode_DecodeUTF8(p, static_cast<Py_ssize_t>(n), "strict");
            if (u == nullptr)
                throw py::error_already_set();
            out.append(py::reinterpret_steal<py::object>(u));
            p += n;
        }
        return out;
    }
    for (at::Tensor part : values.split_with_sizes(sizes, 0)) {
        if (axis != 0)
            part = part.movedim(0, axis).contiguous();
        out.append(ndarray ? numpy_of(part) : wrap(part));
    }
    return out;
}

}  // namespace

py::list split_batch(py::list fields, py::list ts)
{
    py::list cols;
    for (size_t k = 0; k < fields.size(); k++) {
        py::handle f = fields[k];
        cols.append(f.attr("axis").is_none() ? fixed_values(f, ts[k]) : ragged_value_list(f, ts[k]));
    }
    return cols;
}

py::list build_samples(const std::string &structure, py::list keys, py::object ntype,
                       py::object data_cls, py::list cols)
{
    const size_t nf = cols.size();
    std::vector<py::list> c;
    for (size_t k = 0; k < nf; k++)
        c.push_back(py::list(cols[k]));
    const size_t n = nf ? c[0].size() : 0;
    for (size_t k = 1; k < nf; k++)
        if (c[k].size() != n)
            throw py::value_error("build_samples: the fields hold " + std::to_string(n) + " and " +
                                  std::to_string(c[k].size()) + " samples");
    py::list out;
    if (structure == "value") {
        for (size_t i = 0; i < n; i++)
            out.append(py::object(c[0][i]));
        return out;
    }
    const bool dict = structure == "dict" || structure == "pyg";
    for (size_t i = 0; i < n; i++) {
        if (dict) {
            py::dict d;
            for (size_t k = 0; k < nf; k++)
                d[keys[k]] = py::object(c[k][i]);
            out.append(structure == "pyg" ? data_cls(**d) : py::object(d));
            continue;
        }
        py::tuple t(nf);
        for (size_t k = 0; k < nf; k++)
            t[k] = py::object(c[k][i]);
        if (structure == "list")
            out.append(py::list(t));
        else if (structure == "namedtuple")
            out.append(ntype.attr("_make")(t));
        else
            out.append(t);
    }
    return out;
}

void def_unbatch(py::module_ &m)
{
    m.def("split_batch", &split_batch, py::arg("fields"), py::arg("ts"),
          "Per field, the per-sample values of its batch (a tensor per fixed field, "
          "(values, lengths, ...) per ragged one), of the field's kind.");
    m.def("build_samples", &build_samples, py::arg("structure"), py::arg("keys"),
          py::arg("ntype"), py::arg("data_cls"), py::arg("cols"),
          "One sample per row from per-field columns, in the schema's structure.");
}

}  // namespace ddstore_torch
