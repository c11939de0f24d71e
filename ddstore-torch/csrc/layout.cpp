// ddstore-torch: the dataset description checks and arithmetic of
// pyddstore.torch (Python keeps only what looks at the user's objects):
//
// - meta_check: the method-2 meta file ({name}.meta.json, format versions
//   1-4, written by DistDataset, read by DistDatasetReader) once json.loads
//   has turned it into Python objects: every field a reader relies on is
//   checked, each failure a ValueError naming the file and the field ("a
//   damaged or foreign meta file"), never a KeyError or a wrong row later.
//   Returns the variable of every schema field (the packed layout's one for
//   packed fields).
// - pack_layout: the packed row of pack_fields=True (packing.py): each fixed
//   field at its offset, aligned to its element size, fields in sample order,
//   the row padded to a multiple of 8 bytes; a layout read back from a meta
//   file is checked to fit (aligned, inside the row, no overlap).
// - budget_batches: BudgetBatchSampler's greedy batching (budget.py).
#include <algorithm>
#include <climits>

#include "ddstore_torch.h"

namespace ddstore_torch {

namespace {

constexpr const char *kMetaFormat = "pyddstore.torch.meta";
constexpr long long kMetaVersionPacked = 4;
constexpr int64_t kRowAlign = 8;

// s cut to at most n bytes, never inside a UTF-8 sequence
std::string cut(std::string s, size_t n)
{
    if (s.size() > n) {
        while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80)
            n--;
        s.resize(n);
    }
    return s;
}

bool is_int(py::handle o)
{
    return PyLong_CheckExact(o.ptr());
}

// an exact int >= lo (any size)
bool int_at_least(py::handle o, long long lo)
{
    if (!is_int(o))
        return false;
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o.ptr(), &overflow);
    return overflow > 0 || (overflow == 0 && v >= lo);
}

// an int as int64, saturated (the checks below then fail on it)
int64_t sat64(py::handle o)
{
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o.ptr(), &overflow);
    if (v == -1 && PyErr_Occurred())
        throw py::error_already_set();
    return overflow > 0 ? LLONG_MAX : overflow < 0 ? LLONG_MIN : v;
}

bool is_str(py::handle o, bool nonempty)
{
    return PyUnicode_CheckExact(o.ptr()) && (!nonempty || PyUnicode_GetLength(o.ptr()) > 0);
}

struct Meta {
    const std::string &path;
    py::dict d;

    [[noreturn]] void bad(const std::string &field, const std::string &why) const
    {
        throw_py(PyExc_ValueError, path + ": field '" + field + "' " + cut(why, 300) +
                                       " (a damaged or foreign meta file)");
    }
    py::object get(py::handle dict, const char *key) const
    {
        PyObject *v = PyDict_GetItemString(dict.ptr(), key);
        return v ? py::reinterpret_borrow<py::object>(v) : py::none();
    }
    py::object get(const char *key) const { return get(d, key); }
    void int_field(const char *field, long long lo) const
    {
        py::object v = get(field);
        if (!int_at_least(v, lo))
            bad(field, "must be an integer >= " + std::to_string(lo) + ", got " + repr_of(v));
    }
};

bool has(py::handle dict, const char *key)
{
    return PyDict_CheckExact(dict.ptr()) && PyDict_GetItemString(dict.ptr(), key) != nullptr;
}

// a field description's ragged axis and packed offset (Field builds the rest)
void check_field(const Meta &m, py::handle fd)
{
    if (!PyDict_CheckExact(fd.ptr()))
        return;   // Schema.from_description names it
    const py::object axis = m.get(fd, "axis"), off = m.get(fd, "offset");
    std::string why;
    if (!axis.is_none() && !int_at_least(axis, 0))
        why = "ragged axis must be an integer >= 0, got " + repr_of(axis);
    else if (!off.is_none() && (!int_at_least(off, 0) || !axis.is_none()))
        why = "packed offset must be an integer >= 0 of a fixed field, got " + repr_of(off);
    else
        return;
    m.bad("schema", "is not a valid sample description (ValueError: field " +
                        repr_of(m.get(fd, "key")) + ": " + why + ")");
}

py::handle item(py::handle list, size_t i)
{
    return PyList_GET_ITEM(list.ptr(), static_cast<Py_ssize_t>(i));
}

// layout_from_meta: the variable of every schema field
py::list field_vars(const Meta &m, py::handle desc, py::handle vars)
{
    const py::object pk = m.get("packed");
    const size_t nf = py::len(desc), nv = py::len(vars);
    std::vector<py::handle> out;
    if (pk.is_none()) {
        for (size_t i = 0; i < nf; i++)
            if (has(item(desc, i), "offset"))
                m.bad("schema", "has packed field offsets but no 'packed' layout");
        if (nf != nv)
            m.bad("vars", "has " + std::to_string(nv) + " names for " + std::to_string(nf) +
                              " schema fields");
        for (size_t i = 0; i < nv; i++)
            out.push_back(item(vars, i));
    } else {
        if (!PyDict_CheckExact(pk.ptr()) || !is_str(m.get(pk, "var"), false) ||
            !int_at_least(m.get(pk, "row_bytes"), 1))
            m.bad("packed", "must be an object with 'var' (a string) and 'row_bytes' (an "
                            "integer >= 1)");
        const py::object var = m.get(pk, "var");
        if (nv == 0 || !py::reinterpret_borrow<py::object>(item(vars, 0)).equal(var))
            m.bad("vars", "must start with the packed variable " + repr_of(var));
        std::vector<size_t> unpacked;
        for (size_t i = 0; i < nf; i++)
            if (PyDict_CheckExact(item(desc, i).ptr()) && !has(item(desc, i), "offset"))
                unpacked.push_back(i);
        if (nv != 1 + unpacked.size())
            m.bad("vars", "has " + std::to_string(nv) + " names for the packed variable and " +
                              std::to_string(unpacked.size()) + " unpacked fields");
        out.assign(nf, var);
        for (size_t j = 0; j < unpacked.size(); j++)
            out[unpacked[j]] = item(vars, j + 1);
    }
    py::list res;
    for (py::handle h : out)
        res.append(h);
    return res;
}

bool lower_hex16(py::handle o)
{
    if (!is_str(o, false) || PyUnicode_GetLength(o.ptr()) != 16)
        return false;
    for (Py_ssize_t i = 0; i < 16; i++) {
        const Py_UCS4 c = PyUnicode_ReadChar(o.ptr(), i);
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false;
    }
    return true;
}

}  // namespace

py::list meta_check(py::object obj, const std::string &path, py::object name)
{
    if (!PyDict_CheckExact(obj.ptr()))
        throw_py(PyExc_ValueError, path + ": not a meta file: a JSON " +
                                       Py_TYPE(obj.ptr())->tp_name + ", expected an object");
    const Meta m{path, py::reinterpret_borrow<py::dict>(obj)};
    if (!m.get("format").equal(py::str(kMetaFormat)))
        m.bad("format", std::string("must be '") + kMetaFormat + "'");
    const py::object version = m.get("version");
    long long ver = 0;
    if (is_int(version) && int_at_least(version, 1) && !int_at_least(version, 5))
        ver = sat64(version);
    else
        throw_py(PyExc_ValueError,
                 cut(path + ": not a pyddstore.torch meta file of version " +
                         std::to_string(kMetaVersionPacked) + " (field 'version' is " +
                         repr_of(version) + ")",
                     400));
    if (has(m.d, "packed") != (ver == kMetaVersionPacked))
        m.bad("packed", std::string(ver == kMetaVersionPacked ? "is missing" : "is present") +
                            " in a meta file of version " + std::to_string(ver));
    if (!m.get("name").equal(name))
        m.bad("name", "is " + repr_of(m.get("name")) + ", expected " + repr_of(name));
    m.int_field("n_core", 1);
    m.int_field("total", 0);
    const py::object vars = m.get("vars");
    bool vars_ok = PyList_CheckExact(vars.ptr()) && PyList_GET_SIZE(vars.ptr()) > 0;
    for (size_t i = 0; vars_ok && i < py::len(vars); i++)
        vars_ok = is_str(item(vars, i), true);
    if (!vars_ok)
        m.bad("vars", "must be a non-empty list of variable names");
    const py::object schema = m.get("schema");
    if (!PyDict_CheckExact(schema.ptr()) || !PyList_CheckExact(m.get(schema, "fields").ptr()))
        m.bad("schema", "must be an object with a list of fields");
    const py::object desc = m.get(schema, "fields");
    py::list out = field_vars(m, desc, vars);
    if (ver >= 2) {
        if (!is_str(m.get("exchange_ns"), false))
            m.bad("exchange_ns", "must be a string");
        if (!lower_hex16(m.get("run_id")))
            m.bad("run_id", "must be 16 lowercase hex digits");
        const py::object gen = m.get("generation");
        bool ok = PyList_CheckExact(gen.ptr()) && py::len(gen) == py::len(vars);
        for (size_t i = 0; ok && i < py::len(gen); i++)
            ok = int_at_least(item(gen, i), 1);
        if (!ok)
            m.bad("generation", "must be " + std::to_string(py::len(vars)) +
                                    " positive integers (one record creation time per "
                                    "variable)");
    }
    for (size_t i = 0; i < py::len(desc); i++)
        check_field(m, item(desc, i));
    return out;
}

py::tuple pack_layout(py::list fields, py::object row_bytes)
{
    struct F {
        py::object key, given;   // given: the offset read back, or None
        int64_t nbytes, align, off;
    };
    std::vector<F> fs;
    int64_t end = 0;
    for (py::handle h : fields) {
        py::tuple t = py::reinterpret_borrow<py::tuple>(h);
        F f{t[0], t[3], t[1].cast<int64_t>(), std::max<int64_t>(t[2].cast<int64_t>(), 1), 0};
        if (f.nbytes < 0)
            throw_py(PyExc_ValueError, "packed field " + repr_of(f.key) + ": " +
                                           std::to_string(f.nbytes) + " bytes");
        f.off = f.given.is_none() ? (end + f.align - 1) / f.align * f.align : sat64(f.given);
        end = f.off > LLONG_MAX - f.nbytes ? LLONG_MAX : f.off + f.nbytes;
        fs.push_back(f);
    }
    int64_t rb = (std::max<int64_t>(end, 1) + kRowAlign - 1) / kRowAlign * kRowAlign;
    if (!row_bytes.is_none()) {   // a layout read back: every field placed, all checked
        rb = sat64(row_bytes);
        if (fs.empty() ||
            std::any_of(fs.begin(), fs.end(), [](const F &f) { return f.given.is_none(); }))
            throw_py(PyExc_ValueError, "packed: every fixed field needs an offset");
    }
    for (const F &f : fs)
        if (f.off < 0 || f.off % f.align != 0 || f.nbytes > rb || f.off > rb - f.nbytes)
            throw_py(PyExc_ValueError,
                     cut("field " + repr_of(f.key) + ": offset " +
                             (f.given.is_none() ? std::to_string(f.off) : repr_of(f.given)) +
                             " (" +
                             std::to_string(f.nbytes) + " bytes) does not fit a packed row of " +
                             std::to_string(rb) + " bytes aligned to " +
                             std::to_string(f.align),
                         300));
    std::vector<size_t> order(fs.size());
    for (size_t i = 0; i < order.size(); i++)
        order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return fs[a].off != fs[b].off ? fs[a].off < fs[b].off : fs[a].nbytes < fs[b].nbytes;
    });
    for (size_t i = 1; i < order.size(); i++) {
        const F &a = fs[order[i - 1]], &b = fs[order[i]];
        if (b.off - a.off < a.nbytes)   // a.off <= b.off, both inside the row
            throw_py(PyExc_ValueError, cut("packed fields " + repr_of(a.key) + " and " +
                                               repr_of(b.key) + " overlap",
                                           300));
    }
    py::list offs;
    for (const F &f : fs)
        offs.append(f.off);
    return py::make_tuple(offs, row_bytes.is_none() ? py::object(py::int_(rb)) : row_bytes);
}

py::list budget_batches(at::Tensor indices, at::Tensor costs, int64_t budget)
{
    if (indices.scalar_type() != at::kLong || costs.scalar_type() != at::kLong ||
        indices.dim() != 1 || costs.dim() != 1 || costs.numel() != indices.numel() ||
        !indices.device().is_cpu() || !costs.device().is_cpu())
        throw_py(PyExc_ValueError, "budget_batches: indices and costs must be 1-D int64 CPU "
                                   "tensors of one length");
    const at::Tensor idx = indices.contiguous(), cost = costs.contiguous();
    const int64_t *ip = idx.data_ptr<int64_t>(), *cp = cost.data_ptr<int64_t>();
    py::list out, cur;
    int64_t acc = 0;
    for (int64_t i = 0; i < idx.numel(); i++) {
        if (py::len(cur) > 0 && acc + cp[i] > budget) {
            out.append(cur);
            cur = py::list();
            acc = 0;
        }
        cur.append(ip[i]);
        acc += cp[i];
    }
    if (py::len(cur) > 0)
        out.append(cur);
    return out;
}

}  // namespace ddstore_torch
