/* pyddstore._core: PyDDStore(...), the constructor: arguments (method,
 * communicator, NIC map, paths) resolved, the store opened through
 * libddstore (ddstore/open.h), the object registered as live.
 */
#include "pydds_store.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddstore/config.h"
#include "ddstore/log.h"

/* ---- construction ------------------------------------------------------- */

/* nic_map: None, a str, or a sequence of str (joined with ','). */
static PyObject *nic_map_str(PyObject *o)
{
    PyObject *sep, *seq, *res;
    if (o == NULL || o == Py_None)
        return PyUnicode_FromString("");
    if (PyUnicode_Check(o))
        return Py_NewRef(o);
    if (PyDict_Check(o) || !PySequence_Check(o)) {
        PyErr_Format(PyExc_TypeError,
                     "nic_map: expected None, a str or a sequence of str, "
                     "got %s",
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    seq = PySequence_Fast(o, "nic_map");
    if (seq == NULL)
        return NULL;
    {
        Py_ssize_t i, n = PySequence_Fast_GET_SIZE(seq);
        for (i = 0; i < n; i++)
            if (!PyUnicode_Check(PySequence_Fast_GET_ITEM(seq, i))) {
                PyErr_Format(PyExc_TypeError,
                             "nic_map[%zd]: expected str, got %s", i,
                             Py_TYPE(PySequence_Fast_GET_ITEM(seq, i))
                                 ->tp_name);
                Py_DECREF(seq);
                return NULL;
            }
    }
    sep = PyUnicode_FromString(",");
    res = sep ? PyUnicode_Join(sep, seq) : NULL;
    Py_XDECREF(sep);
    Py_DECREF(seq);
    return res;
}

/* str, os.PathLike or None -> str ("" for None). */
static PyObject *path_str(PyObject *o, const char *what)
{
    PyObject *p;
    if (o == NULL || o == Py_None)
        return PyUnicode_FromString("");
    if (PyUnicode_Check(o))
        return Py_NewRef(o);
    p = PyOS_FSPath(o);
    if (p == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: expected str or None, got %s",
                     what, Py_TYPE(o)->tp_name);
        return NULL;
    }
    if (!PyUnicode_Check(p)) {
        PyObject *d = PyUnicode_DecodeFSDefaultAndSize(PyBytes_AsString(p),
                                                       PyBytes_Size(p));
        Py_DECREF(p);
        return d;
    }
    return p;
}

static int resolve_method(PyObject *o, int *method_p)
{
    int64_t m;
    if (o == NULL || o == Py_None) {
        int rc = ddstore_method_from_env(method_p);
        if (rc < 0) {
            pydds_raise(rc);
            return -1;
        }
        return 0;
    } else {
        if (pydds_as_i64(o, "method", &m) < 0)
            return -1;
        if (m < 0 || m > INT32_MAX || ddstore_backend_find((int)m) == NULL) {
            char list[512];
            ddstore_backend_list(list, sizeof list);
            PyErr_Format(PyExc_ValueError,
                         "method: expected one of %s, got %lld", list,
                         (long long)m);
            return -1;
        }
    }
    *method_p = (int)m;
    return 0;
}

PyObject *pydds_store_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"comm_or_none", "method", "handshake_dir",
                             "n_core", "nic_map", "rank", "size",
                             "exchange_ns", NULL};
    PyObject *comm_o = Py_None, *method_o = NULL, *hs_o = NULL,
             *ncore_o = NULL, *nic_o = NULL, *rank_o = Py_None,
             *size_o = NULL, *ns_o = NULL;
    PyObject *hs = NULL, *nic = NULL, *ns = NULL;
    pydds_store_obj *s = NULL;
    pydds_comm_res_t cres;
    ddstore_open_params_t op;
    dds_store_t *store = NULL;
    int method = 0, rc, settings_rc = 0;
    int64_t n_core = 0, rank = -1, size = 0;
    char settings_why[512];

    memset(&cres, 0, sizeof cres);
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOOOOOOO:PyDDStore", kwlist,
                                     &comm_o, &method_o, &hs_o, &ncore_o,
                                     &nic_o, &rank_o, &size_o, &ns_o))
        return NULL;
    /* Every setting read here is agreed on (below, over the communicator)
     * before anything else can block: a bad value on one rank fails every
     * rank with "rank R: VARIABLE='value': ...", none is left waiting. */
    if (method_o == NULL || method_o == Py_None)
        settings_rc = ddstore_method_from_env(&method);
    else if (resolve_method(method_o, &method) < 0)
        return NULL;
    if (settings_rc == 0) {
        ddstore_config_register_all();
        settings_rc = dds_config_validate_all();
    }
    if (settings_rc != 0) {
        snprintf(settings_why, sizeof settings_why, "%s", dds_last_error());
        method = 0;
    }
    if (ncore_o != NULL && ncore_o != Py_None &&
        pydds_as_i64(ncore_o, "n_core", &n_core) < 0)
        return NULL;
    if (rank_o != Py_None && pydds_as_i64(rank_o, "rank", &rank) < 0)
        return NULL;
    if (size_o != NULL && size_o != Py_None && pydds_as_i64(size_o, "size", &size) < 0)
        return NULL;
    if (n_core < 0 || rank < -1 || size < 0 || rank > INT32_MAX ||
        size > INT32_MAX || n_core > INT32_MAX) {
        PyErr_Format(PyExc_ValueError,
                     "n_core, rank, size: expected n_core >= 0, rank None "
                     "or >= 0, size >= 0; got %lld, %lld, %lld",
                     (long long)n_core, (long long)rank, (long long)size);
        return NULL;
    }
    hs = path_str(hs_o, "handshake_dir");
    ns = path_str(ns_o, "exchange_ns");
    nic = hs && ns ? nic_map_str(nic_o) : NULL;
    if (hs == NULL || ns == NULL || nic == NULL)
        goto fail;

    if ((ddstore_backend_find(method)->flags &
         DDSTORE_BACKEND_NEEDS_HANDSHAKE) &&
        n_core > 0 && comm_o == Py_None) {
        /* A method-2 reader needs no communicator: every process joins and
         * reads on its own (no MPI initialised for it). */
        rc = dds_comm_self(&cres.comm);
        if (rc < 0) {
            pydds_raise(rc);
            goto fail;
        }
        cres.have_comm = 1;
        cres.kind = PYDDS_COMM_SELF;
        cres.kind_name = "self";
    } else if (pydds_comm_resolve(comm_o, (int)rank, (int)size, &cres) < 0) {
        goto fail;
    }
    if (settings_rc != 0)
        dds_error(settings_rc, "%s", settings_why);
    if (cres.needs_gil) {
        rc = dds_comm_agree_named(&cres.comm, settings_rc);
    } else {
        Py_BEGIN_ALLOW_THREADS
        rc = dds_comm_agree_named(&cres.comm, settings_rc);
        Py_END_ALLOW_THREADS
    }
    if (rc < 0) {
        pydds_raise(rc);
        goto fail;
    }

    memset(&op, 0, sizeof op);
    op.field_mask = DDSTORE_OPEN_FIELD_METHOD | DDSTORE_OPEN_FIELD_COMM |
                    DDSTORE_OPEN_FIELD_COMM_KIND | DDSTORE_OPEN_FIELD_NIC_MAP |
                    DDSTORE_OPEN_FIELD_HANDSHAKE;
    op.method = method;
    op.comm = cres.comm;
#ifdef HAVE_MPI
    if (cres.kind == PYDDS_COMM_MPI) {
        op.field_mask |= DDSTORE_OPEN_FIELD_MPI_COMM;
        op.mpi_comm = &cres.mpi_comm;
    }
#endif
    op.comm_kind = cres.kind_name;
    op.handshake_dir = PyUnicode_AsUTF8(hs);
    op.n_core = (int)n_core;
    op.nic_map = PyUnicode_AsUTF8(nic);
    op.exchange_ns = PyUnicode_AsUTF8(ns);
    if (op.handshake_dir == NULL || op.nic_map == NULL ||
        op.exchange_ns == NULL)
        goto fail;

    /* the communicator moves to ddstore_open (the store's, or destroyed on
     * failure) */
    cres.have_comm = 0;
    if (cres.needs_gil) {
        rc = ddstore_open(&op, &store);
    } else {
        Py_BEGIN_ALLOW_THREADS
        rc = ddstore_open(&op, &store);
        Py_END_ALLOW_THREADS
    }
    if (rc < 0) {
        pydds_raise(rc);
        goto fail;
    }

    s = (pydds_store_obj *)type->tp_alloc(type, 0);
    if (s == NULL)
        goto fail;
    s->recv_bufs = PyDict_New();
    s->keep = PyDict_New();
    if (s->recv_bufs == NULL || s->keep == NULL)
        goto fail;
    rc = ddstore_pin_create(store, &s->pin);
    if (rc < 0) {
        pydds_raise(rc);
        goto fail;
    }
    store = NULL;
    s->method = method;
    s->rank = dds_store_rank(PYDDS_STORE(s));
    s->size = dds_store_size(PYDDS_STORE(s));
    s->comm_needs_gil = cres.needs_gil;
    s->pid = getpid();
    pydds_live_add(s);
    Py_DECREF(hs);
    Py_DECREF(ns);
    Py_DECREF(nic);
    DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_PY, "PyDDStore: rank %d of %d, method %d",
            s->rank, s->size, s->method);
    return (PyObject *)s;

fail:
    if (store != NULL) {
        /* Only reached when the object could not be allocated (local). */
        Py_BEGIN_ALLOW_THREADS
        dds_store_destroy(store);
        Py_END_ALLOW_THREADS
    }
    Py_XDECREF(s);
    pydds_comm_res_cleanup(&cres);
    Py_XDECREF(hs);
    Py_XDECREF(ns);
    Py_XDECREF(nic);
    return NULL;
}

