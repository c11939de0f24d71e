// ddstore-torch: DistSampler's state check (sampler.py's load_state_dict):
// every field of a state dict checked against the sampler, each failure a
// ValueError naming the field.
#include "ddstore_torch.h"

namespace ddstore_torch {

namespace {

const char *const kSamplerStateFormat = "ddstore.DistSampler";
constexpr long kSamplerStateVersion = 1;

std::string fmt(const py::handle &v)
{
    return py::str(v).cast<std::string>();
}

// an integer field (bool refused), in [lo, hi) where given
py::int_ state_int(py::handle v, const std::string &field, py::object lo = py::none(),
                   py::object hi = py::none())
{
    static py::object integral = py::module_::import("numbers").attr("Integral");
    const std::string name = "DistSampler state: field '" + field + "'";
    if (PyBool_Check(v.ptr()) || PyObject_IsInstance(v.ptr(), integral.ptr()) != 1) {
        PyErr_Clear();
        throw py::value_error(name + " must be an integer, got " +
                              fmt(py::type::handle_of(v).attr("__name__")) + " " +
                              py::repr(v).cast<std::string>());
    }
    py::int_ x(py::reinterpret_borrow<py::object>(v));
    if ((!lo.is_none() && x < lo) || (!hi.is_none() && x >= hi)) {
        const std::string rng =
            hi.is_none() ? ">= " + fmt(lo) : "[" + fmt(lo) + ", " + fmt(hi) + ")";
        throw py::value_error(name + " = " + fmt(x) + " is out of range " + rng);
    }
    return x;
}

}  // namespace

py::tuple sampler_state_check(py::handle state, int64_t n, py::object seed, bool shuffle)
{
    if (!PyDict_Check(state.ptr()))
        throw py::value_error("DistSampler state: expected a dict, got " +
                              fmt(py::type::handle_of(state).attr("__name__")));
    py::dict st = py::reinterpret_borrow<py::dict>(state);
    for (const char *key : {"format", "version", "n", "seed", "shuffle", "epoch", "position",
                            "num_replicas"})
        if (!st.contains(key))
            throw py::value_error(std::string("DistSampler state: field '") + key +
                                  "' is missing");
    py::object format = st["format"];
    if (!format.equal(py::str(kSamplerStateFormat)))
        throw py::value_error("DistSampler state: field 'format' is " +
                              py::repr(format).cast<std::string>() + ", expected '" +
                              kSamplerStateFormat + "'");
    if (!state_int(st["version"], "version").equal(py::int_(kSamplerStateVersion)))
        throw py::value_error("DistSampler state: field 'version' is " + fmt(st["version"]) +
                              ", this pyddstore reads version " + std::to_string(kSamplerStateVersion));
    py::int_ sn = state_int(st["n"], "n", py::int_(0));
    if (!sn.equal(py::int_(n)))
        throw py::value_error("DistSampler state: field 'n' (dataset length) is " + fmt(sn) +
                              ", this sampler's dataset has " + std::to_string(n));
    py::int_ ss = state_int(st["seed"], "seed");
    if (!ss.equal(seed))
        throw py::value_error("DistSampler state: field 'seed' is " + fmt(ss) +
                              ", this sampler's seed is " + fmt(seed));
    py::object sh = st["shuffle"];
    if (!PyBool_Check(sh.ptr()))
        throw py::value_error("DistSampler state: field 'shuffle' must be a bool, got " +
                              py::repr(sh).cast<std::string>());
    if ((sh.ptr() == Py_True) != shuffle)
        throw py::value_error("DistSampler state: field 'shuffle' is " + fmt(sh) +
                              ", this sampler has shuffle=" + (shuffle ? "True" : "False"));
    py::int_ epoch = state_int(st["epoch"], "epoch", py::int_(0));
    py::int_ w = state_int(st["num_replicas"], "num_replicas", py::int_(1));
    py::int_ pos = state_int(st["position"], "position", py::int_(0), py::int_(n) + w);
    return py::make_tuple(epoch, pos);
}

}  // namespace ddstore_torch
