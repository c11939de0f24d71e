// ddstore-torch: a communicator over torch.distributed, for PyDDStore.
//
// PyDDStore(comm) accepts any object with a `_dds_comm` capsule holding a
// pyddstore_comm_provider_t (ddstore/comm_provider.h).  pyddstore.torch.comm's
// TorchComm wraps a torch.distributed group and gets its capsule from
// comm_capsule(self): the ops below call back into that Python object
// (allgather_bytes / barrier), which runs the group's collectives.  They
// need the GIL (needs_gil = 1), so _core keeps it around every collective.
#include "ddstore_torch.h"

#include <cstring>

namespace ddstore_torch {

namespace {

struct CommCtx {
    PyObject *obj;  // strong reference to the Python communicator
};

// A Python exception raised by a callback: cleared, and turned into an
// error code with its message as the detail (-DDS_ETIMEDOUT when the
// collective timed out: TorchComm raises "... timed out after ..."; else
// -DDS_EIO).
int callback_failed(const char *what)
{
    std::string msg = "unknown error";
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (value != nullptr) {
        PyObject *s = PyObject_Str(value);
        if (s != nullptr) {
            const char *u = PyUnicode_AsUTF8(s);
            if (u != nullptr)
                msg = u;
            Py_DECREF(s);
        }
    }
    PyErr_Clear();
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    const int rc = msg.find(" timed out after ") != std::string::npos ||
                           msg.find(" refused: an earlier collective") != std::string::npos
                       ? -DDS_ETIMEDOUT
                       : -DDS_EIO;
    return dds_error(rc, "torch.distributed %s: %s", what, msg.c_str());
}

int comm_allgather(void *vctx, const void *send, size_t bytes, void *recv)
{
    CommCtx *ctx = static_cast<CommCtx *>(vctx);
    PyGILState_STATE g = PyGILState_Ensure();
    int rc = 0;
    PyObject *arg = PyBytes_FromStringAndSize(static_cast<const char *>(send),
                                              static_cast<Py_ssize_t>(bytes));
    PyObject *res = arg ? PyObject_CallMethod(ctx->obj, "allgather_bytes", "O", arg)
                        : nullptr;
    Py_XDECREF(arg);
    if (res == nullptr) {
        rc = callback_failed("allgather");
    } else {
        char *p = nullptr;
        Py_ssize_t n = 0;
        if (PyBytes_AsStringAndSize(res, &p, &n) < 0) {
            rc = callback_failed("allgather (result)");
        } else {
            PyObject *size = PyObject_GetAttrString(ctx->obj, "size");
            const long nr = size ? PyLong_AsLong(size) : -1;
            Py_XDECREF(size);
            if (nr < 0 || static_cast<size_t>(n) != bytes * static_cast<size_t>(nr)) {
                if (PyErr_Occurred())
                    rc = callback_failed("allgather (size)");
                else
                    rc = -DDS_EIO;
            } else {
                std::memcpy(recv, p, static_cast<size_t>(n));
            }
        }
        Py_DECREF(res);
    }
    PyGILState_Release(g);
    return rc;
}

int comm_allreduce_i64(void *vctx, int64_t *inout, size_t n, dds_reduce_op_t op)
{
    CommCtx *ctx = static_cast<CommCtx *>(vctx);
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *size = PyObject_GetAttrString(ctx->obj, "size");
    const long nr = size ? PyLong_AsLong(size) : -1;
    Py_XDECREF(size);
    int rc = nr < 1 ? callback_failed("size") : 0;
    PyGILState_Release(g);
    if (rc < 0)
        return rc;
    std::vector<int64_t> all(n * static_cast<size_t>(nr));
    rc = comm_allgather(vctx, inout, n * sizeof(int64_t), all.data());
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        int64_t v = all[i];
        for (long r = 1; r < nr; r++) {
            const int64_t w = all[static_cast<size_t>(r) * n + i];
            switch (op) {
            case DDS_REDUCE_MIN: v = w < v ? w : v; break;
            case DDS_REDUCE_MAX: v = w > v ? w : v; break;
            default: v += w; break;
            }
        }
        inout[i] = v;
    }
    return 0;
}

int comm_barrier(void *vctx)
{
    CommCtx *ctx = static_cast<CommCtx *>(vctx);
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *res = PyObject_CallMethod(ctx->obj, "barrier", nullptr);
    int rc = res ? 0 : callback_failed("barrier");
    Py_XDECREF(res);
    PyGILState_Release(g);
    return rc;
}

void comm_destroy(void *vctx)
{
    CommCtx *ctx = static_cast<CommCtx *>(vctx);
    if (ctx == nullptr)
        return;
    if (Py_IsInitialized()) {
        PyGILState_STATE g = PyGILState_Ensure();
        Py_XDECREF(ctx->obj);
        PyGILState_Release(g);
    }
    delete ctx;
}

const dds_comm_ops_t torch_comm_ops = {
    sizeof(dds_comm_ops_t), "torch", comm_allgather, comm_allreduce_i64,
    comm_barrier, comm_destroy,
};

// provider->create: called by _core with the GIL held, once per store.
int provider_create(void *arg, dds_comm_t *comm_p)
{
    PyObject *obj = static_cast<PyObject *>(arg);
    PyObject *r = PyObject_GetAttrString(obj, "rank");
    PyObject *s = r ? PyObject_GetAttrString(obj, "size") : nullptr;
    const long rank = r ? PyLong_AsLong(r) : -1;
    const long size = s ? PyLong_AsLong(s) : -1;
    Py_XDECREF(r);
    Py_XDECREF(s);
    if (PyErr_Occurred())
        return callback_failed("rank/size");
    if (rank < 0 || size < 1 || rank >= size)
        return -DDS_EINVAL;
    CommCtx *ctx = new CommCtx{obj};
    Py_INCREF(obj);
    comm_p->ops = &torch_comm_ops;
    comm_p->ctx = ctx;
    comm_p->rank = static_cast<int>(rank);
    comm_p->size = static_cast<int>(size);
    return 0;
}

void capsule_free(PyObject *cap)
{
    auto *pv = static_cast<pyddstore_comm_provider_t *>(
        PyCapsule_GetPointer(cap, PYDDSTORE_COMM_CAPSULE));
    if (pv == nullptr) {
        PyErr_Clear();
        return;
    }
    Py_XDECREF(static_cast<PyObject *>(pv->arg));
    delete pv;
}

}  // namespace

// A capsule for `obj`'s `_dds_comm` attribute.  `obj` provides rank, size,
// allgather_bytes(bytes) -> bytes (every rank's contribution in rank order)
// and barrier().
py::object comm_capsule(py::object obj)
{
    auto *pv = new pyddstore_comm_provider_t{};
    pv->size = sizeof(pyddstore_comm_provider_t);
    pv->name = "torch";
    pv->needs_gil = 1;
    pv->create = provider_create;
    pv->arg = obj.ptr();
    Py_INCREF(obj.ptr());
    PyObject *cap = PyCapsule_New(pv, PYDDSTORE_COMM_CAPSULE, capsule_free);
    if (cap == nullptr) {
        Py_DECREF(obj.ptr());
        delete pv;
        throw py::error_already_set();
    }
    return py::reinterpret_steal<py::object>(cap);
}

}  // namespace ddstore_torch
