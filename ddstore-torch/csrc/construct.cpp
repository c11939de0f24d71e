// ddstore-torch: DistDataset's argument checks (step 1 of its construction,
// agreed across ranks by the caller: a bad argument on one rank fails every
// rank).  Only the device strings stay in Python (torch.device parses them).
#include "ddstore/backends.h"
#include "ddstore_torch.h"

namespace ddstore_torch {
namespace {

// The hub's row of `method` (None: the default for the communicator);
// ValueError listing the table otherwise (the words of _core.backend).
const ddstore_backend_t *backend_row(py::handle method, bool mpi_comm)
{
    const ddstore_backend_t *r = nullptr;
    if (method.is_none()) {
        r = ddstore_backend_find(ddstore_backend_default(mpi_comm ? 1 : 0));
    } else if (PyLong_Check(method.ptr())) {
        int overflow = 0;
        const long m = PyLong_AsLongAndOverflow(method.ptr(), &overflow);
        if (m == -1 && PyErr_Occurred())
            throw py::error_already_set();
        if (!overflow && m >= INT_MIN && m <= INT_MAX)
            r = ddstore_backend_find(static_cast<int>(m));
    }
    if (r != nullptr)
        return r;
    std::string names;
    for (size_t i = 0; i < ddstore_backend_count(); i++) {
        const ddstore_backend_t *b = ddstore_backend_at(i);
        names += (i ? ", " : "") + std::to_string(b->method) + " (" + b->help + ")";
    }
    throw_py(PyExc_ValueError, "method must be one of " + names + ", got " +
                                   py::repr(method).cast<std::string>());
}

bool is_bool(py::handle v)
{
    return PyBool_Check(v.ptr()) ||
           std::string(Py_TYPE(v.ptr())->tp_name) == "numpy.bool" ||
           std::string(Py_TYPE(v.ptr())->tp_name) == "numpy.bool_";
}

// operator.index(v), clamped to int64 (TypeError for a non-integer).
int64_t index_of(py::handle v)
{
    auto i = py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()));
    if (!i)
        throw py::error_already_set();
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
    return overflow > 0 ? INT64_MAX : overflow < 0 ? INT64_MIN : x;
}

}  // namespace

// (method, width or None); ValueError / TypeError naming the argument.
py::tuple dataset_args(py::object method, const std::string &comm_kind, int64_t comm_size,
                       bool have_handshake_dir, bool fields_given, bool encode_given,
                       py::object chunk_size, py::object add_device, py::object ragged_batch,
                       py::tuple ragged_batches, py::object pack_fields, bool ragged,
                       py::object width)
{
    const ddstore_backend_t *b = backend_row(method, comm_kind == "mpi");
    const std::string m = std::to_string(b->method);
    const bool split = b->flags & DDSTORE_BACKEND_NEEDS_HANDSHAKE;
    if ((b->flags & DDSTORE_BACKEND_NEEDS_MPI_COMM) && comm_kind != "mpi")
        throw_py(PyExc_ValueError, "method=" + m + " (" + b->help +
                                       ") needs an MPI communicator; comm is " + comm_kind +
                                       " (use method=1 or 2)");
    if (split && !have_handshake_dir)
        throw_py(PyExc_ValueError,
                 "method=" + m + " needs handshake_dir= (or DDSTORE_HANDSHAKE_DIR)");
    if (fields_given && encode_given)
        throw_py(PyExc_ValueError, "fields= cannot be combined with encode= (select the "
                                   "fields in encode instead)");
    if (!chunk_size.is_none()) {
        const int64_t c = index_of(chunk_size);
        if (c < 1)
            throw_py(PyExc_ValueError, "chunk_size must be >= 1, got " + std::to_string(c));
        if (!add_device.is_none())
            throw_py(PyExc_ValueError,
                     "chunk_size cannot be combined with add_device=" + repr_of(add_device) +
                         " (chunked loading fills host storage only); leave one of them "
                         "unset");
    }
    if (!ragged_batches.contains(ragged_batch))
        throw_py(PyExc_ValueError, "ragged_batch must be one of " + repr_of(ragged_batches) +
                                       ", got " + repr_of(ragged_batch));
    if (!is_bool(pack_fields))
        throw_py(PyExc_TypeError, "pack_fields must be True or False, got " + repr_of(pack_fields));
    if (ragged && !chunk_size.is_none())
        throw_py(PyExc_ValueError,
                 "chunk_size cannot be combined with ragged= (ragged fields are loaded in one "
                 "pass: their sizes must all be known before the store is sized); leave "
                 "chunk_size unset");
    py::object w = py::none();
    if (!width.is_none()) {
        int64_t v = index_of(width);
        if (v < 1)
            throw_py(PyExc_ValueError, "ddstore_width must be >= 1, got " + std::to_string(v));
        v = std::min(v, comm_size);
        if (split && v < comm_size)
            throw_py(PyExc_ValueError, "method=" + m + " needs one group: ddstore_width must "
                                                       "be at least the number of ranks");
        w = py::int_(v);
    }
    return py::make_tuple(b->method, w);
}

}  // namespace ddstore_torch
