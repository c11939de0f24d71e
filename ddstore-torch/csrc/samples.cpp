// ddstore-torch: the user's samples while a DistDataset loads (schema.py
// keeps the Field/Schema classes; the per-sample work is here):
//
// - classify: the (kind, shape, dtype, record dtype, record class) of one
//   value of a sample (the kinds and dtypes of docs/reference-torch.md,
//   "Samples, fields and dtypes"); TypeError for what cannot be stored.
// - Samples: one schema's structure and fields.  values() takes a sample
//   apart (its structure checked against the first sample's), check() checks
//   its values against the fields (a mismatch raises through the Python
//   Field.matches, which words the message), fill() iterates the user's
//   samples (source[i], encode) and copies every field's bytes into host
//   row buffers (per-field arrays or the packed rows of pack_fields=True).
#include <algorithm>
#include <set>

#include "ddstore_torch.h"

#include <pybind11/numpy.h>

#include <torch/csrc/autograd/python_variable.h>

namespace ddstore_torch {

namespace {

enum Kind { K_TENSOR, K_NDARRAY, K_NPSCALAR, K_BOOL, K_INT, K_FLOAT, K_RECORD };
const char *const kKindNames[] = {"tensor", "ndarray", "npscalar", "bool",
                                  "int",    "float",   "record"};
// the stored dtypes (schema.SUPPORTED, in its order)
const char *const kDtypes[] = {"bool",     "uint8",   "int32",   "int64",
                               "float16",  "bfloat16", "float32", "float64"};
constexpr int kNDtypes = 8;
constexpr int kBfloat16 = 5;
const char *const kSupportedMsg =
    "supported: bool, uint8, int32, int64, float16, bfloat16 (tensors), float32, float64";

// numpy's and collections.abc's objects, looked up once (GIL held)
struct Np {
    py::object ndarray, void_, generic, recarray, mapping, ascontig, asarray;
    py::object dtypes[kNDtypes];   // native np.dtype of each stored dtype (bfloat16: None)
};

const Np &np_objects()
{
    static Np *np = [] {
        auto *n = new Np();
        py::module_ m = py::module_::import("numpy");
        n->ndarray = m.attr("ndarray");
        n->void_ = m.attr("void");
        n->generic = m.attr("generic");
        n->recarray = m.attr("recarray");
        n->ascontig = m.attr("ascontiguousarray");
        n->asarray = m.attr("asarray");
        n->mapping = py::module_::import("collections.abc").attr("Mapping");
        for (int i = 0; i < kNDtypes; i++)
            n->dtypes[i] = i == kBfloat16 ? py::none() : m.attr("dtype")(kDtypes[i]);
        return n;
    }();
    return *np;
}

bool isinstance(py::handle v, const py::object &cls)
{
    const int r = PyObject_IsInstance(v.ptr(), cls.ptr());
    if (r < 0)
        throw py::error_already_set();
    return r == 1;
}

[[noreturn]] void unsupported(const Where &where, const std::string &what)
{
    throw py::type_error(where() + ": " + what + " is not supported (" + kSupportedMsg +
                         "; numpy structured records; convert other values with encode=)");
}

// the stored dtype of a numpy dtype, -1 for another (equality, as a dict
// lookup by np.dtype: byte order counts)
int np_dtype_index(py::handle dt)
{
    const Np &np = np_objects();
    for (int i = 0; i < kNDtypes; i++)
        if (i != kBfloat16 && dt.ptr() == np.dtypes[i].ptr())
            return i;
    for (int i = 0; i < kNDtypes; i++) {
        if (i == kBfloat16)
            continue;
        const int r = PyObject_RichCompareBool(dt.ptr(), np.dtypes[i].ptr(), Py_EQ);
        if (r < 0)
            throw py::error_already_set();
        if (r == 1)
            return i;
    }
    return -1;
}

int torch_dtype_index(at::ScalarType t)
{
    switch (t) {
    case at::kBool: return 0;
    case at::kByte: return 1;
    case at::kInt: return 2;
    case at::kLong: return 3;
    case at::kHalf: return 4;
    case at::kBFloat16: return 5;
    case at::kFloat: return 6;
    case at::kDouble: return 7;
    default: return -1;
    }
}

struct Cls {
    int kind = 0;
    std::vector<int64_t> shape;
    int dtype = 0;
    py::object rdtype;          // record: its np.dtype
    const char *rclass = nullptr;
};

std::vector<int64_t> shape_of(py::handle seq)
{
    std::vector<int64_t> out;
    for (py::handle d : seq)
        out.push_back(d.cast<int64_t>());
    return out;
}

Cls classify_value(py::handle v, const Where &where)
{
    const Np &np = np_objects();
    Cls c;
    if (THPVariable_Check(v.ptr())) {
        const at::Tensor &t = THPVariable_Unpack(v.ptr());
        if (t.layout() != at::kStrided)
            unsupported(where, "a " + py::str(v.attr("layout")).cast<std::string>() +
                                   " tensor");
        c.dtype = torch_dtype_index(t.scalar_type());
        if (c.dtype < 0)
            unsupported(where, "tensor dtype " + py::str(v.attr("dtype")).cast<std::string>());
        c.kind = K_TENSOR;
        c.shape = t.sizes().vec();
        return c;
    }
    if (isinstance(v, np.ndarray)) {
        py::object dt = v.attr("dtype");
        if (!dt.attr("names").is_none()) {
            if (dt.attr("hasobject").cast<bool>())
                unsupported(where, "a record with object fields");
            c.kind = K_RECORD;
            c.shape = shape_of(v.attr("shape"));
            c.dtype = 1;
            c.rdtype = dt;
            c.rclass = isinstance(v, np.recarray) ? "recarray" : "ndarray";
            return c;
        }
        c.dtype = np_dtype_index(dt);
        if (c.dtype < 0)
            unsupported(where, "array dtype " + py::str(dt).cast<std::string>());
        c.kind = K_NDARRAY;
        c.shape = shape_of(v.attr("shape"));
        return c;
    }
    if (isinstance(v, np.void_)) {
        py::object dt = v.attr("dtype");
        if (dt.attr("names").is_none())
            unsupported(where, "an unstructured np.void");
        if (dt.attr("hasobject").cast<bool>())
            unsupported(where, "a record with object fields");
        c.kind = K_RECORD;
        c.dtype = 1;
        c.rdtype = dt;
        c.rclass = "void";
        return c;
    }
    if (isinstance(v, np.generic)) {
        c.dtype = np_dtype_index(v.attr("dtype"));
        if (c.dtype < 0)
            unsupported(where, "numpy scalar " + type_name(v));
        c.kind = K_NPSCALAR;
        return c;
    }
    if (PyBool_Check(v.ptr())) {
        c.kind = K_BOOL;
        c.dtype = 0;
        return c;
    }
    if (PyLong_Check(v.ptr())) {
        c.kind = K_INT;
        c.dtype = 3;
        return c;
    }
    if (PyFloat_Check(v.ptr())) {
        c.kind = K_FLOAT;
        c.dtype = 7;
        return c;
    }
    if (PyList_Check(v.ptr()) || PyTuple_Check(v.ptr()) || isinstance(v, np.mapping))
        throw py::type_error(where() + ": nested containers (" + type_name(v) +
                             " inside a sample) are not supported; flatten the sample or "
                             "use encode=");
    unsupported(where, "a value of type " + type_name(v));
}

py::tuple shape_tuple(const std::vector<int64_t> &s)
{
    py::tuple t(s.size());
    for (size_t i = 0; i < s.size(); i++)
        t[i] = py::int_(s[i]);
    return t;
}

int kind_index(const std::string &k)
{
    for (int i = 0; i < 7; i++)
        if (k == kKindNames[i])
            return i;
    throw py::value_error("unknown field kind " + k);
}

int dtype_index(const std::string &d)
{
    for (int i = 0; i < kNDtypes; i++)
        if (d == kDtypes[i])
            return i;
    throw py::value_error("unknown field dtype " + d);
}

// memcpy of n bytes of a contiguous host tensor or array's data
void copy_bytes(char *dst, const void *src, int64_t n)
{
    if (n > 0)
        std::memcpy(dst, src, static_cast<size_t>(n));
}

// the bytes of value v (classified as c, `nbytes` of them) to dst
void store_value(const Cls &c, py::handle v, char *dst, int64_t nbytes)
{
    const Np &np = np_objects();
    switch (c.kind) {
    case K_TENSOR: {
        at::Tensor t = THPVariable_Unpack(v.ptr());
        if (!t.device().is_cpu())
            t = t.cpu();
        if (t.is_neg())
            t = t.resolve_neg();
        t = t.contiguous();
        copy_bytes(dst, t.data_ptr(), nbytes);
        break;
    }
    case K_NDARRAY: {
        py::array a = py::reinterpret_borrow<py::array>(v);
        if (!(a.flags() & py::array::c_style))
            a = py::reinterpret_steal<py::array>(np.ascontig(a).release());
        copy_bytes(dst, a.data(), nbytes);
        break;
    }
    case K_NPSCALAR: {
        py::array a = py::reinterpret_steal<py::array>(np.asarray(v).release());
        copy_bytes(dst, a.data(), nbytes);
        break;
    }
    case K_BOOL:
        *reinterpret_cast<uint8_t *>(dst) = v.ptr() == Py_True ? 1 : 0;
        break;
    case K_INT: {
        int overflow = 0;
        const long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
        if (overflow != 0)
            throw_py(PyExc_OverflowError, "Python int too large to convert to C long");
        if (x == -1 && PyErr_Occurred())
            throw py::error_already_set();
        const int64_t y = x;
        std::memcpy(dst, &y, 8);
        break;
    }
    case K_FLOAT: {
        const double x = PyFloat_AsDouble(v.ptr());
        if (x == -1.0 && PyErr_Occurred())
            throw py::error_already_set();
        std::memcpy(dst, &x, 8);
        break;
    }
    case K_RECORD: {
        if (c.rclass == std::string("void")) {
            py::bytes b = v.attr("tobytes")();
            std::string bs = b;
            if (static_cast<int64_t>(bs.size()) != nbytes)
                throw_py(PyExc_ValueError, "record bytes differ in size from the first sample's");
            copy_bytes(dst, bs.data(), nbytes);
        } else {
            py::array a = py::reinterpret_steal<py::array>(np.ascontig(v).release());
            if (a.nbytes() != nbytes)
                throw_py(PyExc_ValueError, "record bytes differ in size from the first sample's");
            copy_bytes(dst, a.data(), nbytes);
        }
        break;
    }
    }
}


at::ScalarType storage_type(int dtype)
{
    static const at::ScalarType t[] = {at::kBool, at::kByte,  at::kInt,   at::kLong,
                                       at::kHalf, at::kShort, at::kFloat, at::kDouble};
    return t[dtype];
}

std::string tuple_repr(const std::vector<int64_t> &s)
{
    std::string out = "(";
    for (size_t i = 0; i < s.size(); i++)
        out += (i ? ", " : "") + std::to_string(s[i]);
    return out + (s.size() == 1 ? ",)" : ")");
}

bool ragged_kind(int kind)
{
    return kind == K_TENSOR || kind == K_NDARRAY;
}

// what the checks need of a Python Field
SampleField field_of(py::handle f)
{
    SampleField s;
    s.field = py::reinterpret_borrow<py::object>(f);
    s.kind = kind_index(f.attr("kind").cast<std::string>());
    s.dtype = dtype_index(f.attr("dtype").cast<std::string>());
    s.shape = shape_of(f.attr("shape"));
    s.rdtype = f.attr("rdtype");
    py::object rc = f.attr("rclass");
    s.rclass = rc.is_none() ? "" : rc.cast<std::string>();
    s.nbytes = f.attr("nbytes").cast<int64_t>();
    s.key_repr = py::repr(f.attr("key")).cast<std::string>();
    return s;
}

}  // namespace

py::tuple classify(py::handle value, const std::string &where)
{
    Cls c = classify_value(value, [&] { return where; });
    return py::make_tuple(kKindNames[c.kind], shape_tuple(c.shape), kDtypes[c.dtype],
                          c.rdtype ? c.rdtype : py::none(),
                          c.rclass ? py::object(py::str(c.rclass)) : py::object(py::none()));
}

Samples::Samples(const std::string &structure, int64_t width, py::list keys, py::list fields)
    : structure_(structure), width_(width), keys_(keys), fields_(fields)
{
    for (py::handle f : fields) {
        specs_.push_back(field_of(f));
    }
}

// a torch_geometric Data (checked without importing torch_geometric; also
// options.cpp's structure_of and is_pyg)
bool is_pyg(py::handle sample)
{
    for (py::handle c : py::type::handle_of(sample).attr("__mro__")) {
        if (py::str(c.attr("__name__")).cast<std::string>() == "Data" &&
            py::str(c.attr("__module__")).cast<std::string>().rfind("torch_geometric.", 0) == 0)
            return true;
    }
    return false;
}

py::list Samples::values(py::handle sample, const std::string &where) const
{
    const Np &np = np_objects();
    py::list vals;
    py::object s = py::reinterpret_borrow<py::object>(sample);
    const bool seq = PyList_Check(s.ptr()) || PyTuple_Check(s.ptr());
    if (structure_ == "value") {
        if (seq || PyDict_Check(s.ptr()) || isinstance(s, np.mapping))
            throw py::value_error(where + ": a " + type_name(s) +
                                  " where the first sample was a single value");
        vals.append(s);
        return vals;
    }
    if (structure_ == "dict" || structure_ == "pyg") {
        if (structure_ == "pyg" && !PyDict_Check(s.ptr()) && is_pyg(s))
            s = s.attr("to_dict")();
        if (!PyDict_Check(s.ptr()) && !isinstance(s, np.mapping))
            throw py::value_error(where + ": a " + type_name(s) +
                                  " where the first sample was a dict");
        const Py_ssize_t n = PyObject_Size(s.ptr());
        if (n < 0)
            throw py::error_already_set();
        if (n != width_)
            throw py::value_error(where + ": " + std::to_string(n) + " keys, the first sample had " +
                                  std::to_string(width_));
        for (py::handle k : keys_) {
            PyObject *v = PyObject_GetItem(s.ptr(), k.ptr());
            if (v == nullptr) {
                if (!PyErr_ExceptionMatches(PyExc_KeyError))
                    throw py::error_already_set();
                PyErr_Clear();
                throw py::value_error(where + ": key " + py::repr(k).cast<std::string>() +
                                      " missing (the first sample had keys " +
                                      py::repr(keys_).cast<std::string>() + ")");
            }
            vals.append(py::reinterpret_steal<py::object>(v));
        }
        return vals;
    }
    if (!seq)
        throw py::value_error(where + ": a " + type_name(s) + " where the first sample was a " +
                              structure_);
    const Py_ssize_t n = PyObject_Size(s.ptr());
    if (n != width_)
        throw py::value_error(where + ": " + std::to_string(n) + " values, the first sample had " +
                              std::to_string(width_));
    for (py::handle k : keys_)
        vals.append(s[k]);
    return vals;
}

// the value's classification differs from field k's: raise through
// Field.matches (the message), never return
[[noreturn]] static void mismatch(const SampleField &s, py::handle v, const std::string &where)
{
    s.field.attr("matches")(v, where);
    throw py::value_error(where + ": value differs from the first sample's");
}

void Samples::check_store(size_t k, py::handle v, const Where &where, char *dst) const
{
    const SampleField &s = specs_[k];
    const Cls c = classify_value(v, where);
    bool same = c.kind == s.kind && c.dtype == s.dtype && c.shape == s.shape;
    if (same && c.kind == K_RECORD) {
        const int r = PyObject_RichCompareBool(c.rdtype.ptr(), s.rdtype.ptr(), Py_NE);
        if (r < 0)
            throw py::error_already_set();
        same = r == 0 && s.rclass == c.rclass;
    }
    if (!same)
        mismatch(s, v, where());
    if (dst != nullptr)
        store_value(c, v, dst, s.nbytes);
}

void Samples::check(py::list vals, const std::string &where) const
{
    for (size_t k = 0; k < specs_.size(); k++) {
        const std::string &kr = specs_[k].key_repr;
        check_store(k, vals[k], [&] { return where + "[" + kr + "]"; }, nullptr);
    }
}

void Samples::fill(py::object source, py::object encode, py::object first, int64_t lo, int64_t j0,
                   int64_t j1, py::list dests, py::object bar) const
{
    const size_t nf = specs_.size();
    if (static_cast<size_t>(py::len(dests)) != nf)
        throw py::value_error("Samples.fill: one destination per field");
    std::vector<char *> base(nf);
    std::vector<int64_t> stride(nf);
    std::vector<py::array> keep;
    for (size_t k = 0; k < nf; k++) {
        // (rows, *row_shape) of the field's storage dtype; a row's bytes
        // contiguous (the rows themselves may be strided: packed rows)
        py::array a = dests[k];
        bool ok = a.writeable() && a.ndim() >= 1 && a.shape(0) >= j1 - j0;
        int64_t step = a.itemsize();
        for (py::ssize_t i = a.ndim() - 1; ok && i >= 1; i--) {
            ok = a.shape(i) == 1 || a.strides(i) == step;
            step *= a.shape(i);
        }
        if (!ok || step != specs_[k].nbytes)
            throw py::value_error("Samples.fill: destination " + std::to_string(k) +
                                  " does not hold the field's rows");
        base[k] = static_cast<char *>(a.mutable_data());
        stride[k] = a.strides(0);
        keep.push_back(a);
    }
    walk(source, encode, first, lo, j0, j1, bar,
         [&](int64_t j, const py::list &vals, const std::string &where) {
             for (size_t k = 0; k < nf; k++) {
                 const std::string &kr = specs_[k].key_repr;
                 check_store(k, vals[k], [&] { return where + "[" + kr + "]"; },
                             base[k] + (j - j0) * stride[k]);
             }
         });
}

// samples j0 .. j1-1 (source[lo + j], encoded; sample 0 is `first`) taken
// apart, each(j, values, where); bar.update(256) every 256 samples
void Samples::walk(py::object source, py::object encode, py::object first, int64_t lo,
                   int64_t j0, int64_t j1, py::object bar, const Each &each) const
{
    const bool enc = !encode.is_none();
    const std::string suffix = enc ? " (encoded)" : "";
    for (int64_t j = j0; j < j1; j++) {
        py::object s;
        if (j == 0) {
            s = first;
        } else {
            s = source[py::int_(lo + j)];
            if (enc)
                s = encode(s);
        }
        const std::string where = "source[" + std::to_string(lo + j) + "]" + suffix;
        each(j, values(s, where), where);
        if (!bar.is_none() && (j & 255) == 255)
            bar.attr("update")(256);
    }
}

// ------------------------------------------------------------ ragged --
void Samples::fill_columns(py::object source, py::object encode, py::object first, int64_t lo,
                           int64_t n, py::list cols, py::object bar) const
{
    const size_t nf = specs_.size();
    if (static_cast<size_t>(py::len(cols)) != nf)
        throw py::value_error("Samples.fill_columns: one Column per field");
    std::vector<Column *> cs;
    for (py::handle c : cols)
        cs.push_back(c.cast<Column *>());
    walk(source, encode, first, lo, 0, n, bar,
         [&](int64_t j, const py::list &vals, const std::string &where) {
             for (size_t k = 0; k < nf; k++)
                 cs[k]->put(j, vals[k], where + "[" + specs_[k].key_repr + "]");
         });
}

Column::Column(py::object field, int64_t n, py::object mode, const std::string &where)
{
    spec_ = field_of(field);
    n_ = n;
    auto_ = !mode.is_none() && py::isinstance<py::str>(mode);
    if (!mode.is_none() && !auto_) {
        axis_ = mode.cast<int64_t>();
        const std::string decl =
            where + ": ragged={" + spec_.key_repr + ": " + std::to_string(axis_) + "}, but ";
        if (!ragged_kind(spec_.kind)) {
            static const char *names[] = {"tensor", "ndarray", "numpy scalar", "Python bool",
                                          "Python int", "Python float", "record"};
            throw py::value_error(decl + "a " + names[spec_.kind] +
                                  " field cannot be ragged (only tensor and ndarray fields "
                                  "vary in shape)");
        }
        if (axis_ >= static_cast<int64_t>(spec_.shape.size()))
            throw py::value_error(decl + "the field has " + std::to_string(spec_.shape.size()) +
                                  " dims (shape " + tuple_repr(spec_.shape) + ")");
        items_on_ = true;
    } else {
        std::vector<int64_t> dims{n};
        py::tuple rs = field.attr("row_shape");
        for (py::handle d : rs)
            dims.push_back(d.cast<int64_t>());
        arr_ = at::empty(dims, at::TensorOptions().dtype(storage_type(spec_.dtype)));
    }
}

void Column::put(int64_t j, py::handle v, const std::string &where)
{
    const SampleField &f = spec_;
    const Cls c = classify_value(v, [&] { return where; });
    if (c.kind != f.kind || c.dtype != f.dtype)
        mismatch(f, v, where);
    if (c.kind == K_RECORD) {
        const int r = PyObject_RichCompareBool(c.rdtype.ptr(), f.rdtype.ptr(), Py_NE);
        if (r < 0)
            throw py::error_already_set();
        if (r == 1 || f.rclass != c.rclass)
            mismatch(f, v, where);
    }
    const bool moded = auto_ || axis_ >= 0;
    if (c.shape != f.shape) {
        if (!moded || !ragged_kind(c.kind)) {
            if (c.kind == K_RECORD && moded)
                throw py::value_error(where + ": record shape " + tuple_repr(c.shape) +
                                      " differs from the first sample's " + tuple_repr(f.shape) +
                                      ": a record field cannot be ragged (only tensor and "
                                      "ndarray fields vary in shape)");
            mismatch(f, v, where);
        }
        const std::string dt = kDtypes[c.dtype];
        if (c.shape.size() != f.shape.size())
            throw py::value_error(
                where + ": " + kKindNames[c.kind] + " " + dt + " shape " + tuple_repr(c.shape) +
                " has " + std::to_string(c.shape.size()) + " dims, the first sample's " +
                kKindNames[f.kind] + " " + dt + " shape " + tuple_repr(f.shape) + " " +
                std::to_string(f.shape.size()) +
                ": a ragged field varies in size along one axis, its number of dims is fixed");
        std::set<int64_t> axes = axes_;
        for (size_t a = 0; a < c.shape.size(); a++)
            if (c.shape[a] != f.shape[a])
                axes.insert(static_cast<int64_t>(a));
        if (axes.size() > 1) {
            auto it = axes.begin();
            const int64_t a = *it++, b = *it;
            throw py::value_error(where + ": field " + f.key_repr + " varies along axes " +
                                  std::to_string(a) + " and " + std::to_string(b) + " (shape " +
                                  tuple_repr(c.shape) + ", the first sample's " +
                                  tuple_repr(f.shape) +
                                  "); a ragged field varies along exactly one axis");
        }
        if (axis_ >= 0 && *axes.begin() != axis_)
            throw py::value_error(where + ": field " + f.key_repr + " varies along axis " +
                                  std::to_string(*axes.begin()) + " (shape " +
                                  tuple_repr(c.shape) + ", the first sample's " +
                                  tuple_repr(f.shape) + "), declared ragged along axis " +
                                  std::to_string(axis_));
        axes_ = axes;
        if (!items_on_) {       // the samples so far become items
            for (int64_t k = 0; k < j; k++)
                items_.push_back(arr_[k]);
            items_on_ = true;
        }
    }
    if (items_on_) {
        at::Tensor t = at::empty(c.shape, at::TensorOptions().dtype(storage_type(c.dtype)));
        store_value(c, v, static_cast<char *>(t.data_ptr()), t.nbytes());
        items_.push_back(t);
    } else {
        store_value(c, v, static_cast<char *>(arr_.data_ptr()) + j * f.nbytes, f.nbytes);
    }
}

py::list Column::report() const
{
    py::list shape, axes;
    for (int64_t d : spec_.shape)
        shape.append(d);
    for (int64_t a : axes_)
        axes.append(a);
    py::list out;
    out.append(shape);
    out.append(axes);
    return out;
}

py::object Column::arr() const
{
    if (!arr_.defined())
        return py::none();
    return py::cast(arr_).attr("numpy")();
}

py::tuple Column::ragged_values(int64_t axis, int64_t disp) const
{
    at::Tensor vals, lengths;
    const auto i64 = at::TensorOptions().dtype(at::kLong);
    if (!items_on_) {           // fixed on this rank, ragged on another
        const int64_t ln = arr_.size(axis + 1);
        lengths = at::full({n_}, ln, i64);
        vals = arr_.movedim(axis + 1, 1).reshape({n_ * ln, disp}).contiguous();
    } else {
        lengths = at::empty({static_cast<int64_t>(items_.size())}, i64);
        auto *ln = lengths.data_ptr<int64_t>();
        int64_t total = 0;
        for (size_t k = 0; k < items_.size(); k++)
            total += ln[k] = items_[k].size(axis);
        vals = at::empty({total, disp}, at::TensorOptions().dtype(storage_type(spec_.dtype)));
        int64_t pos = 0;
        for (size_t k = 0; k < items_.size(); k++) {
            if (ln[k] == 0)
                continue;
            vals.narrow(0, pos, ln[k]).copy_(items_[k].movedim(axis, 0).reshape({ln[k], disp}));
            pos += ln[k];
        }
    }
    return py::make_tuple(py::cast(vals).attr("numpy")(), py::cast(lengths).attr("numpy")());
}

void Column::drop()
{
    arr_ = at::Tensor();
    items_.clear();
}

}  // namespace ddstore_torch

namespace ddstore_torch {

namespace {

std::string shapes_repr(std::vector<std::vector<int64_t>> shapes)
{
    std::sort(shapes.begin(), shapes.end());
    shapes.erase(std::unique(shapes.begin(), shapes.end()), shapes.end());
    std::string out = "[";
    for (size_t i = 0; i < shapes.size(); i++)
        out += (i ? ", " : "") + tuple_repr(shapes[i]);
    return out + "]";
}

}  // namespace

py::list ragged_decide(py::list fields, py::list reports, py::object mode_of,
                       const std::string &name, py::object field_cls)
{
    py::list out;
    const std::string ds = "DistDataset '" + name + "': ";
    for (size_t k = 0; k < fields.size(); k++) {
        py::object f = fields[k];
        const std::string key = py::repr(f.attr("key")).cast<std::string>();
        py::object mode = mode_of.is_none() ? py::none() : mode_of(f.attr("key"));
        std::vector<std::vector<int64_t>> shapes;
        std::set<int64_t> axes;
        for (py::handle r : reports) {
            py::object rk = py::reinterpret_borrow<py::object>(r)[py::int_(k)];
            shapes.push_back(shape_of(rk[py::int_(0)]));
            for (py::handle a : rk[py::int_(1)])
                axes.insert(a.cast<int64_t>());
        }
        for (size_t r = 1; r < shapes.size(); r++)
            if (shapes[r].size() != shapes[0].size())
                throw py::value_error(ds + "field " + key + ": the samples of rank " +
                                      std::to_string(r) + " have shape " + tuple_repr(shapes[r]) +
                                      ", rank 0's " + tuple_repr(shapes[0]) +
                                      ": the number of dims must be fixed");
        for (size_t r = 1; r < shapes.size(); r++)
            for (size_t a = 0; a < shapes[r].size(); a++)
                if (shapes[r][a] != shapes[0][a])
                    axes.insert(static_cast<int64_t>(a));
        if (axes.size() > 1) {
            auto it = axes.begin();
            const int64_t a = *it++, b = *it;
            throw py::value_error(ds + "field " + key + " varies along axes " + std::to_string(a) +
                                  " and " + std::to_string(b) + " (across ranks: first shapes " +
                                  shapes_repr(shapes) +
                                  "); a ragged field varies along exactly one axis");
        }
        int64_t axis = -1;
        if (!mode.is_none() && !py::isinstance<py::str>(mode)) {
            axis = mode.cast<int64_t>();
            if (!axes.empty() && *axes.begin() != axis)
                throw py::value_error(ds + "field " + key + " varies along axis " +
                                      std::to_string(*axes.begin()) +
                                      " across ranks, declared ragged along axis " +
                                      std::to_string(axis));
        } else if (!mode.is_none() && !axes.empty()) {
            axis = *axes.begin();
        }
        std::vector<int64_t> shape = shape_of(f.attr("shape"));
        if (axis < 0) {
            if (f.attr("disp").cast<int64_t>() == 0)
                throw py::value_error(ds + "field " + key + ": a field with no elements (shape " +
                                      tuple_repr(shape) + ") cannot be stored");
            out.append(f);
            continue;
        }
        shape[axis] = -1;
        py::object nf = field_cls(f.attr("key"), f.attr("kind"), shape_tuple(shape),
                                  f.attr("dtype"), py::none(), py::none(), f.attr("var"), axis);
        if (nf.attr("disp").cast<int64_t>() == 0)
            throw py::value_error(ds + "ragged field " + key + " (shape " + tuple_repr(shape) +
                                  ", varying along axis " + std::to_string(axis) +
                                  "): its other dims hold no elements");
        out.append(nf);
    }
    return out;
}

py::tuple padded_values(at::Tensor values, at::Tensor lengths, at::Tensor offsets,
                        at::Tensor batch, int64_t axis)
{
    const int64_t n = lengths.numel();
    const int64_t mx = n ? lengths.max().item<int64_t>() : 0;
    std::vector<int64_t> dims{n, mx};
    for (int64_t d = 1; d < values.dim(); d++)
        dims.push_back(values.size(d));
    at::Tensor out = values.new_zeros(dims);
    if (values.size(0)) {
        at::Tensor b = batch.to(values.device());
        at::Tensor pos = at::arange(values.size(0), b.options()) - offsets.to(values.device()).index_select(0, b);
        out.index_put_({b, pos}, values);
    }
    at::Tensor mask = at::arange(mx, lengths.options()).unsqueeze(0) < lengths.unsqueeze(1);
    if (axis != 0)
        out = out.movedim(1, axis + 1).contiguous();
    return py::make_tuple(out, mask);
}

}  // namespace ddstore_torch
