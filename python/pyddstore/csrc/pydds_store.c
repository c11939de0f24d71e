/* pyddstore._core: the PyDDStore type.
 *
 * Threading.  Reads (get, get_batch, sizes, get_ragged, update,
 * update_ragged, recv_*) release the GIL and hold the object's life lock for
 * reading; collective calls (init, add, init_ragged, add_ragged, epoch_*)
 * too, unless the communicator calls back into Python
 * (comm_needs_gil), in which case they keep the GIL.  free() and the
 * destruction of the C store (deallocation, interpreter exit) hold the life
 * lock for writing, so they wait for reads in flight, and reads started
 * later see the released names (DDStoreError) or the destroyed store
 * (DDStoreError).  Cheap queries (info, get_profile, ...) run under the GIL
 * alone: PYDDS_STORE(s) only becomes NULL while the GIL is held.  The life
 * lock is libddstore's pin handle (ddstore/pin.h); the GIL handling is here.
 *
 * Collective calls agree on failure: a local failure (bad argument, bad
 * buffer) on one rank is sent through dds_comm_agree, which the other
 * ranks' collective call performs as its first step, so every rank raises
 * (the same class, with "rank R: <detail>"), none hangs.
 */
#include "pydds.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ddstore/config.h"
#include "ddstore/log.h"

/* ---- read windows (proof that reads run without the GIL) ---------------- */

static __thread uint64_t t_read_t0, t_read_t1;

static inline uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

PyObject *pydds_last_read_window(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return Py_BuildValue("(KK)", (unsigned long long)t_read_t0,
                         (unsigned long long)t_read_t1);
}

/* ---- life lock ---------------------------------------------------------- */

static int gone(void)
{
    return dds_error(-DDS_EFREED,
                     "this PyDDStore was destroyed (interpreter exit or "
                     "deallocation); create a new store");
}

/* With the GIL released: read lock; 0, or -DDS_EFREED (lock not held). */
static int enter_nogil(pydds_store_obj *s)
{
    ddstore_pin_acquire_any(s->pin);
    if (PYDDS_STORE(s) == NULL) {
        ddstore_pin_release(s->pin);
        return gone();
    }
    return 0;
}

int pydds_store_enter(pydds_store_obj *s)
{
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = enter_nogil(s);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        pydds_raise(rc);
        return -1;
    }
    return 0;
}

void pydds_store_leave(pydds_store_obj *s)
{
    ddstore_pin_release(s->pin);
}

void pydds_lock_write(pydds_store_obj *s)
{
    Py_BEGIN_ALLOW_THREADS
    ddstore_pin_lock(s->pin);
    Py_END_ALLOW_THREADS
}

/* Collective section: take the life lock (GIL released while waiting), then
 * keep the GIL released for the call unless the communicator needs it.
 * Returns 0 (lock held; *ts_p to pass to coll_leave) or -DDS_EFREED (lock
 * not held, GIL held). */
static int coll_enter(pydds_store_obj *s, int write, PyThreadState **ts_p)
{
    PyThreadState *ts = PyEval_SaveThread();
    if (write)
        ddstore_pin_lock(s->pin);
    else
        ddstore_pin_acquire_any(s->pin);
    if (PYDDS_STORE(s) == NULL) {
        ddstore_pin_release(s->pin);
        PyEval_RestoreThread(ts);
        *ts_p = NULL;
        return gone();
    }
    if (s->comm_needs_gil) {
        PyEval_RestoreThread(ts);
        ts = NULL;
    }
    *ts_p = ts;
    return 0;
}

static void coll_leave(pydds_store_obj *s, PyThreadState *ts)
{
    ddstore_pin_release(s->pin);
    if (ts != NULL)
        PyEval_RestoreThread(ts);
}

/* A collective call made in a process forked after the store was created:
 * raise before any argument is converted or agreed on (core refuses it too,
 * without touching the communicator, which is the parent's). */
static int forked(pydds_store_obj *s, const char *what)
{
    pid_t me = getpid();
    if (s->pid == me)
        return 0;
    dds_error(-DDS_ENOSYS,
              "PyDDStore.%s() in a forked child process (pid %d) of the "
              "process that created the store (pid %d): collective calls "
              "(init, add, init_ragged, add_ragged, free, epoch_begin, "
              "epoch_end) belong to the parent "
              "and would hang it; a forked process may only read "
              "(fork_reader(), as DataLoader workers do)",
              what, (int)me, (int)s->pid);
    pydds_raise(-DDS_ENOSYS);
    return -1;
}

/* A local failure before a collective call (Python exception set): let the
 * other ranks' collective call fail too, then raise it here. */
static PyObject *collective_fail(pydds_store_obj *s, dds_coll_t call)
{
    PyObject *t, *v, *tb;
    PyThreadState *ts;
    int rc = pydds_rc_from_pyerr();
    PyErr_Fetch(&t, &v, &tb);
    if (coll_enter(s, 0, &ts) == 0) {
        (void)dds_store_coll_fail(PYDDS_STORE(s), call, NULL, rc);
        coll_leave(s, ts);
    }
    PyErr_Restore(t, v, tb);
    return NULL;
}

/* ---- argument helpers --------------------------------------------------- */

/* UTF-8 name of a variable: str without NUL.  NULL + exception. */
static const char *var_name(PyObject *o)
{
    Py_ssize_t n;
    const char *s;
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "name: expected str, got %s",
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    s = PyUnicode_AsUTF8AndSize(o, &n);
    if (s == NULL)
        return NULL;
    if ((size_t)n != strlen(s)) {
        PyErr_SetString(PyExc_ValueError, "name: contains a NUL character");
        return NULL;
    }
    return s;
}

/* A Python int as int64 with a name for messages; -1 + exception. */
static int as_i64(PyObject *o, const char *what, int64_t *v_p)
{
    long long v;
    if (PyFloat_Check(o) || !PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s: expected an integer, got %s", what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s: does not fit in int64", what);
        }
        return -1;
    }
    *v_p = (int64_t)v;
    return 0;
}

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
        if (as_i64(o, "method", &m) < 0)
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

static PyObject *store_new(PyTypeObject *type, PyObject *args, PyObject *kw)
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
        as_i64(ncore_o, "n_core", &n_core) < 0)
        return NULL;
    if (rank_o != Py_None && as_i64(rank_o, "rank", &rank) < 0)
        return NULL;
    if (size_o != NULL && size_o != Py_None && as_i64(size_o, "size", &size) < 0)
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

/* ---- destruction -------------------------------------------------------- */

void pydds_store_destroy(pydds_store_obj *s)
{
    dds_store_t *st;
    PyObject *bufs, *keep;
    pydds_reader_obj *r, *next;

    if (s->pin == NULL || PYDDS_STORE(s) == NULL)
        return;
    if (s->pid != getpid()) {
        /* A forked child: the store is the parent's (its destruction is
         * collective over the parent's ranks).  Close the readers this
         * process opened and abandon the rest. */
        pydds_lock_write(s);
        for (r = s->readers; r; r = r->next)
            if (r->pid == getpid())
                pydds_reader_close_locked(r);
        (void)ddstore_pin_take(s->pin);
        ddstore_pin_unlock(s->pin);
        return;
    }
    pydds_lock_write(s);
    if (PYDDS_STORE(s) == NULL) {
        ddstore_pin_unlock(s->pin);
        return;
    }
    for (r = s->readers; r; r = next) {
        next = r->next;
        pydds_reader_close_locked(r);
        r->prev = r->next = NULL;
    }
    s->readers = NULL;
    if (s->recv_bufs != NULL) {
        Py_ssize_t pos = 0;
        PyObject *key, *val;
        while (PyDict_Next(s->recv_bufs, &pos, &key, &val)) {
            void *p = PyLong_AsVoidPtr(PyTuple_GET_ITEM(key, 0));
            size_t n = PyLong_AsSize_t(PyTuple_GET_ITEM(key, 1));
            if (PyErr_Occurred())
                PyErr_Clear();
            else
                (void)dds_store_recv_unregister(PYDDS_STORE(s), p, n);
        }
    }
    bufs = s->recv_bufs;
    keep = s->keep;
    s->recv_bufs = NULL;
    s->keep = NULL;
    st = ddstore_pin_take(s->pin);
    ddstore_pin_unlock(s->pin);
    /* Local, never collective: one rank may drop (or exit with) a store that
     * another keeps alive; only free() is collective (docs/concurrency.md). */
    if (s->comm_needs_gil) {
        dds_store_destroy_local(st);
    } else {
        Py_BEGIN_ALLOW_THREADS
        dds_store_destroy_local(st);
        Py_END_ALLOW_THREADS
    }
    Py_XDECREF(bufs);
    Py_XDECREF(keep);
    ddstore_pin_release_keeps(s->pin);   /* the torch extension's shards */
}

static int store_traverse(pydds_store_obj *s, visitproc visit, void *arg)
{
    Py_VISIT(s->recv_bufs);
    Py_VISIT(s->keep);
    return 0;
}

static int store_clear(pydds_store_obj *s)
{
    /* Registered buffers and kept objects must outlive the C store: only
     * drop them once it is gone. */
    if (PYDDS_STORE(s) == NULL) {
        Py_CLEAR(s->recv_bufs);
        Py_CLEAR(s->keep);
    }
    return 0;
}

static void store_dealloc(pydds_store_obj *s)
{
    PyObject_GC_UnTrack(s);
    if (s->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)s);
    if (PYDDS_STORE(s) != NULL) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        pydds_store_destroy(s);
        PyErr_Restore(t, v, tb);
    }
    pydds_live_remove(s);
    Py_CLEAR(s->recv_bufs);
    Py_CLEAR(s->keep);
    ddstore_pin_destroy(s->pin);
    s->pin = NULL;
    Py_TYPE(s)->tp_free((PyObject *)s);
}

/* ---- reads (shared with readers) --------------------------------------- */

/* One read, run by read_nogil. */
enum { READ_GET, READ_BATCH, READ_SIZES, READ_RAGGED };

typedef struct read_req {
    int kind;                    /* READ_*                                    */
    const char *name;
    const dds_buf_t *dst;        /* GET, BATCH, RAGGED                        */
    int64_t start;               /* GET                                       */
    const int64_t *rows;         /* BATCH, SIZES, RAGGED                      */
    size_t n;
    int64_t *lengths;            /* SIZES, RAGGED: n lengths out              */
    int64_t total;               /* RAGGED: element rows of the samples (out) */
} read_req_t;

/* GIL released: read lock, pick the reader, run the read. */
static int read_nogil(pydds_store_obj *s, pydds_reader_obj *r, read_req_t *q)
{
    int rc = enter_nogil(s);
    dds_reader_t *rd = NULL;
    dds_store_t *st;
    if (rc < 0)
        return rc;
    if (r != NULL) {
        rd = r->reader;
        if (rd == NULL) {
            ddstore_pin_release(s->pin);
            return dds_error(-DDS_EFREED, "this reader was closed");
        }
    }
    st = PYDDS_STORE(s);
    t_read_t0 = mono_ns();
    switch (q->kind) {
    case READ_BATCH:
        rc = dds_store_get_batch(st, rd, q->name, q->dst, q->rows, q->n);
        break;
    case READ_SIZES:
        rc = dds_store_ragged_sizes(st, rd, q->name, q->rows, q->n,
                                    q->lengths);
        break;
    case READ_RAGGED:
        rc = dds_store_ragged_get_batch(st, rd, q->name, q->dst, q->rows, q->n,
                                        q->lengths, &q->total);
        break;
    default:
        rc = dds_store_get(st, rd, q->name, q->dst, q->start);
        break;
    }
    t_read_t1 = mono_ns();
    ddstore_pin_release(s->pin);
    return rc;
}

/* Run `q` with the GIL released. */
static int read_released(pydds_store_obj *s, pydds_reader_obj *r,
                         read_req_t *q)
{
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = read_nogil(s, r, q);
    Py_END_ALLOW_THREADS
    return rc;
}

PyObject *pydds_do_get(pydds_store_obj *s, pydds_reader_obj *r,
                       PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"name", "arr", "start", NULL};
    PyObject *name_o, *arr, *start_o = NULL;
    const char *name;
    int64_t start = 0;
    pydds_buffer_t b;
    read_req_t q = {0};
    int rc;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:get", kwlist, &name_o,
                                     &arr, &start_o))
        return NULL;
    if ((name = var_name(name_o)) == NULL)
        return NULL;
    if (start_o != NULL && as_i64(start_o, "start", &start) < 0) {
        /* an integer beyond int64 is out of range like any other start */
        if (PyErr_ExceptionMatches(PyExc_ValueError) && PyIndex_Check(start_o)) {
            PyErr_Clear();
            PyErr_Format(PyExc_IndexError,
                         "get('%s'): start=%R is out of range (rows are "
                         "numbered from 0 to the variable's total - 1)",
                         name, start_o);
        }
        return NULL;
    }
    if (pydds_buffer_get(arr, "arr", 1, &b) < 0)
        return NULL;
    q.kind = READ_GET;
    q.name = name;
    q.dst = &b.buf;
    q.start = start;
    rc = read_released(s, r, &q);
    pydds_buffer_release(&b);
    if (rc < 0)
        return pydds_raise(rc);
    Py_RETURN_NONE;
}

PyObject *pydds_do_get_batch(pydds_store_obj *s, pydds_reader_obj *r,
                             PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"name", "arr", "indices", NULL};
    PyObject *name_o, *arr, *idx_o;
    const char *name;
    pydds_buffer_t b;
    pydds_indices_t ix;
    read_req_t q = {0};
    int rc;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:get_batch", kwlist,
                                     &name_o, &arr, &idx_o))
        return NULL;
    if ((name = var_name(name_o)) == NULL)
        return NULL;
    if (pydds_buffer_get(arr, "arr", 1, &b) < 0)
        return NULL;
    if (pydds_indices_get(idx_o, &ix) < 0) {
        pydds_buffer_release(&b);
        return NULL;
    }
    if ((int64_t)ix.n != b.buf.nrows) {
        PyErr_Format(PyExc_ValueError,
                     "get_batch('%s'): len(arr) = %lld rows but "
                     "len(indices) = %zu; they must be equal",
                     name, (long long)b.buf.nrows, ix.n);
        pydds_indices_release(&ix);
        pydds_buffer_release(&b);
        return NULL;
    }
    q.kind = READ_BATCH;
    q.name = name;
    q.dst = &b.buf;
    q.rows = ix.rows;
    q.n = ix.n;
    rc = read_released(s, r, &q);
    pydds_indices_release(&ix);
    pydds_buffer_release(&b);
    if (rc < 0)
        return pydds_raise(rc);
    Py_RETURN_NONE;
}

/* ---- queries (GIL only) ------------------------------------------------- */

static dds_store_t *alive(pydds_store_obj *s)
{
    if (PYDDS_STORE(s) == NULL) {
        pydds_raise(gone());
        return NULL;
    }
    return PYDDS_STORE(s);
}

PyObject *pydds_do_info(pydds_store_obj *s, PyObject *name_o)
{
    dds_var_info_t vi;
    const char *name;
    dds_store_t *st;
    int rc;
    if ((name = var_name(name_o)) == NULL || (st = alive(s)) == NULL)
        return NULL;
    rc = dds_store_var_info(st, name, &vi);
    if (rc < 0)
        return pydds_raise(rc);
    return Py_BuildValue("(Lnn)", (long long)vi.total_rows,
                         (Py_ssize_t)vi.disp, (Py_ssize_t)vi.itemsize);
}

PyObject *pydds_do_info_full(pydds_store_obj *s, PyObject *name_o)
{
    dds_var_info_t vi;
    const char *name, *dt;
    dds_store_t *st;
    int rc;
    if ((name = var_name(name_o)) == NULL || (st = alive(s)) == NULL)
        return NULL;
    rc = dds_store_var_info(st, name, &vi);
    if (rc < 0)
        return pydds_raise(rc);
    dt = dds_dtype_name(vi.dtype);
    return Py_BuildValue(
        "{s:L,s:L,s:L,s:n,s:n,s:n,s:s,s:s,s:i,s:i,s:O,s:L,s:L}",
        "total_rows", (long long)vi.total_rows, "local_rows",
        (long long)vi.local_rows, "local_first", (long long)vi.local_first,
        "disp", (Py_ssize_t)vi.disp, "itemsize", (Py_ssize_t)vi.itemsize,
        "row_bytes", (Py_ssize_t)vi.row_bytes, "dtype", dt ? dt : "unknown",
        "mem", ddstore_mem_kind_name(vi.mem.kind), "device", vi.mem.device,
        "nranks", vi.nranks, "ragged", vi.ragged ? Py_True : Py_False,
        "total_elems", (long long)vi.total_elems, "local_elems",
        (long long)vi.local_elems);
}

PyObject *pydds_do_offsets(pydds_store_obj *s, PyObject *name_o)
{
    dds_var_info_t vi;
    const char *name;
    dds_store_t *st;
    int64_t *off;
    PyObject *t;
    int rc, i;
    if ((name = var_name(name_o)) == NULL || (st = alive(s)) == NULL)
        return NULL;
    rc = dds_store_var_info(st, name, &vi);
    if (rc < 0)
        return pydds_raise(rc);
    off = (int64_t *)calloc((size_t)vi.nranks + 1, sizeof *off);
    if (off == NULL)
        return PyErr_NoMemory();
    rc = dds_store_var_offsets(st, name, off);
    if (rc < 0) {
        free(off);
        return pydds_raise(rc);
    }
    t = PyTuple_New(vi.nranks + 1);
    for (i = 0; t != NULL && i <= vi.nranks; i++) {
        PyObject *v = PyLong_FromLongLong((long long)off[i]);
        if (v == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    free(off);
    return t;
}

/* ---- ragged reads (shared with readers) -------------------------------- */

/* numpy.empty(shape, dtype) for the arrays sizes() and get_ragged() return
 * (numpy is a dependency of the package; imported at the first call, so
 * importing pyddstore does not import it).  *ptr_p = its data. */
static PyObject *np_empty(PyObject *shape, const char *dtype, void **ptr_p)
{
    static PyObject *empty = NULL;     /* numpy.empty, kept once found */
    PyObject *arr;
    Py_buffer v;
    if (shape == NULL)
        return NULL;
    if (empty == NULL) {
        PyObject *np = PyImport_ImportModule("numpy");
        if (np == NULL)
            return NULL;
        empty = PyObject_GetAttrString(np, "empty");
        Py_DECREF(np);
        if (empty == NULL)
            return NULL;
    }
    arr = PyObject_CallFunction(empty, "Os", shape, dtype);
    if (arr == NULL)
        return NULL;
    /* numpy keeps the data while the array lives (ours: no resize) */
    if (PyObject_GetBuffer(arr, &v, PyBUF_WRITABLE) < 0) {
        Py_DECREF(arr);
        return NULL;
    }
    *ptr_p = v.buf;
    PyBuffer_Release(&v);
    return arr;
}

/* A new int64 array of n lengths. */
static PyObject *np_lengths(size_t n, int64_t **ptr_p)
{
    PyObject *shape = Py_BuildValue("(n)", (Py_ssize_t)n);
    PyObject *arr = np_empty(shape, "int64", (void **)ptr_p);
    Py_XDECREF(shape);
    return arr;
}

/* sizes() and get_ragged(): the variable, the indices, and a new array for
 * their lengths (returned; NULL + exception, nothing held). */
static PyObject *ragged_req(PyObject *name_o, PyObject *idx_o, int kind,
                            pydds_indices_t *ix, read_req_t *q)
{
    PyObject *lens;
    memset(q, 0, sizeof *q);
    if ((q->name = var_name(name_o)) == NULL ||
        pydds_indices_get(idx_o, ix) < 0)
        return NULL;
    lens = np_lengths(ix->n, &q->lengths);
    if (lens == NULL) {
        pydds_indices_release(ix);
        return NULL;
    }
    q->kind = kind;
    q->rows = ix->rows;
    q->n = ix->n;
    return lens;
}

PyObject *pydds_do_sizes(pydds_store_obj *s, pydds_reader_obj *r,
                         PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"name", "indices", NULL};
    PyObject *name_o, *idx_o, *lens;
    pydds_indices_t ix;
    read_req_t q;
    int rc;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:sizes", kwlist, &name_o,
                                     &idx_o))
        return NULL;
    if ((lens = ragged_req(name_o, idx_o, READ_SIZES, &ix, &q)) == NULL)
        return NULL;
    rc = read_released(s, r, &q);
    pydds_indices_release(&ix);
    if (rc < 0) {
        Py_DECREF(lens);
        return pydds_raise(rc);
    }
    return lens;
}

/* get_ragged without out=: a new array of the variable's element rows,
 * sized by a first read of the index entries (the "sizes first" step:
 * -DDS_ENOSPC with the lengths and the total, nothing read), then read. */
static PyObject *ragged_new_values(pydds_store_obj *s, pydds_reader_obj *r,
                                   read_req_t *q)
{
    dds_var_info_t vi;
    dds_buf_t dst;
    dds_store_t *st;
    PyObject *shape, *arr;
    const char *dt;
    int64_t cols;
    void *ptr = NULL;
    int rc;
    if ((st = alive(s)) == NULL)
        return NULL;
    rc = dds_store_var_info(st, q->name, &vi);
    if (rc < 0)
        return pydds_raise(rc);
    memset(&dst, 0, sizeof dst);
    dst.ptr = &dst;                  /* no row is written into it */
    dst.row_bytes = vi.row_bytes;
    dst.dtype = vi.dtype;
    dst.itemsize = vi.itemsize;
    dst.mem.kind = DDS_MEM_HOST;
    q->dst = &dst;
    rc = read_released(s, r, q);     /* a fixed variable: its error here */
    if (rc < 0 && rc != -DDS_ENOSPC)
        return pydds_raise(rc);
    dds_error_clear();
    if (vi.dtype == DDS_DTYPE_RAW) {
        dt = "uint8";
        cols = (int64_t)vi.row_bytes;
    } else if (vi.dtype == DDS_DTYPE_BFLOAT16) {
        return pydds_raise_fmt(-DDS_ETYPE,
                               "get_ragged('%s'): numpy has no bfloat16 to "
                               "return; pass out= (e.g. a torch.bfloat16 "
                               "tensor of at least %lld x %zu elements)",
                               q->name, (long long)q->total, vi.disp);
    } else {
        dt = dds_dtype_name(vi.dtype);
        cols = (int64_t)vi.disp;
    }
    shape = Py_BuildValue("(LL)", (long long)q->total, (long long)cols);
    arr = np_empty(shape, dt, &ptr);
    Py_XDECREF(shape);
    if (arr == NULL)
        return NULL;
    if (q->total == 0)
        return arr;
    dst.ptr = ptr;
    dst.nrows = q->total;
    rc = read_released(s, r, q);
    if (rc < 0) {
        Py_DECREF(arr);
        return pydds_raise(rc);
    }
    return arr;
}

PyObject *pydds_do_get_ragged(pydds_store_obj *s, pydds_reader_obj *r,
                              PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"name", "indices", "out", NULL};
    PyObject *name_o, *idx_o, *out = Py_None, *lens, *values;
    pydds_indices_t ix;
    pydds_buffer_t b;
    read_req_t q;
    int rc;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:get_ragged", kwlist,
                                     &name_o, &idx_o, &out))
        return NULL;
    if ((lens = ragged_req(name_o, idx_o, READ_RAGGED, &ix, &q)) == NULL)
        return NULL;
    if (out == Py_None) {
        values = ragged_new_values(s, r, &q);
    } else if (pydds_buffer_get(out, "out", 1, &b) < 0) {
        values = NULL;
    } else {
        q.dst = &b.buf;
        rc = read_released(s, r, &q);
        pydds_buffer_release(&b);
        if (rc == -DDS_ENOSPC)
            values = pydds_raise_fmt(
                rc,
                "get_ragged('%s'): out has %lld rows, the %zu samples need "
                "%lld rows (nothing was read; sizes() gives the lengths)",
                q.name, (long long)b.buf.nrows, ix.n, (long long)q.total);
        else if (rc < 0)
            values = pydds_raise(rc);
        else if ((values = PySequence_GetSlice(out, 0, (Py_ssize_t)q.total)) ==
                     NULL &&
                 PyErr_ExceptionMatches(PyExc_TypeError)) {
            /* an array that cannot be sliced (a bare
             * __cuda_array_interface__): itself, its first `total` rows
             * written */
            PyErr_Clear();
            values = Py_NewRef(out);
        }
    }
    pydds_indices_release(&ix);
    if (values == NULL) {
        Py_DECREF(lens);
        return NULL;
    }
    return Py_BuildValue("(NN)", values, lens);
}

/* The original DDStore's counter names, next to ours (same values; times in
 * nanoseconds like ours).  calls and rows are already both. */
static const struct {
    const char *name;
    dds_prof_counter_t counter;
} pydds_orig_counters[] = {
    {"lock_wait", DDS_PROF_NS_LOCK_WAIT}, /* time waiting for locks        */
    {"mr", DDS_PROF_NS_REGISTER},         /* time registering memory       */
    {"mr_miss", DDS_PROF_REGISTRATIONS},  /* registrations not in registry */
    {"read", DDS_PROF_NS_POST},           /* time posting reads            */
    {"cq", DDS_PROF_NS_COMPLETE},         /* time waiting for completions  */
};

PyObject *pydds_do_profile(pydds_store_obj *s, PyObject *name_o)
{
    dds_profile_t p;
    const char *name;
    dds_store_t *st;
    PyObject *d;
    int rc, i;
    if ((name = var_name(name_o)) == NULL || (st = alive(s)) == NULL)
        return NULL;
    rc = dds_store_profile(st, name, &p);
    if (rc < 0)
        return pydds_raise(rc);
    d = PyDict_New();
    for (i = 0; d != NULL && i < DDS_PROF_COUNT; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(p.v[i]);
        if (v == NULL ||
            PyDict_SetItemString(d, dds_prof_counter_name((dds_prof_counter_t)i),
                                 v) < 0) {
            Py_XDECREF(v);
            Py_CLEAR(d);
            break;
        }
        Py_DECREF(v);
    }
    for (i = 0; d != NULL && i < (int)(sizeof(pydds_orig_counters) /
                                       sizeof(pydds_orig_counters[0]));
         i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(
            p.v[pydds_orig_counters[i].counter]);
        if (v == NULL ||
            PyDict_SetItemString(d, pydds_orig_counters[i].name, v) < 0) {
            Py_XDECREF(v);
            Py_CLEAR(d);
            break;
        }
        Py_DECREF(v);
    }
    return d;
}

/* ---- PyDDStore methods -------------------------------------------------- */

/* The reader of a store-level read (get, get_batch, sizes, get_ragged):
 * NULL (the store's own) in the process that created the store.  In a
 * process forked from it (DataLoader workers of a client that holds the
 * store) with methods 1/2 and DDSTORE_FORK_WORKERS=1: a forked reader of
 * this process's, opened at its first read and kept (closed when the store
 * is destroyed here).  Method 0, or the setting off: NULL, and core's error
 * after fork.  0, or -1 with an exception. */
static int read_reader(pydds_store_obj *s, pydds_reader_obj **r_p)
{
    pid_t me = getpid();
    int on = 0;
    PyObject *r;
    *r_p = NULL;
    if (s->pid == me || s->method == 0)
        return 0;
    if (s->fork_reader != NULL && s->fork_reader->pid == me) {
        *r_p = s->fork_reader;
        return 0;
    }
    if (ddstore_fork_workers(&on) < 0)
        on = 0; /* a bad value failed the store's creation already */
    if (!on)
        return 0;
    if ((r = pydds_reader_new(s, DDS_READER_FORKED)) == NULL)
        return -1;
    /* an inherited one is the parent's object: not ours to release */
    s->fork_reader = (pydds_reader_obj *)r;
    *r_p = s->fork_reader;
    return 0;
}

static PyObject *store_get(pydds_store_obj *s, PyObject *args, PyObject *kw)
{
    pydds_reader_obj *r;
    return read_reader(s, &r) < 0 ? NULL : pydds_do_get(s, r, args, kw);
}

static PyObject *store_get_batch(pydds_store_obj *s, PyObject *args,
                                 PyObject *kw)
{
    pydds_reader_obj *r;
    return read_reader(s, &r) < 0 ? NULL
                                  : pydds_do_get_batch(s, r, args, kw);
}

static PyObject *store_info(pydds_store_obj *s, PyObject *name)
{
    return pydds_do_info(s, name);
}

static PyObject *store_info_full(pydds_store_obj *s, PyObject *name)
{
    return pydds_do_info_full(s, name);
}

static PyObject *store_offsets(pydds_store_obj *s, PyObject *name)
{
    return pydds_do_offsets(s, name);
}

static PyObject *store_get_profile(pydds_store_obj *s, PyObject *name)
{
    return pydds_do_profile(s, name);
}

static PyObject *store_reset_profile(pydds_store_obj *s, PyObject *name_o)
{
    const char *name;
    dds_store_t *st;
    int rc;
    if ((name = var_name(name_o)) == NULL || (st = alive(s)) == NULL)
        return NULL;
    rc = dds_store_profile_reset(st, name);
    if (rc < 0)
        return pydds_raise(rc);
    Py_RETURN_NONE;
}

static void collect_name(void *arg, const char *name)
{
    PyObject *list = (PyObject *)arg, *v = PyUnicode_FromString(name);
    if (v == NULL || PyList_Append(list, v) < 0)
        PyErr_Clear();
    Py_XDECREF(v);
}

static PyObject *store_names(pydds_store_obj *s, PyObject *unused)
{
    dds_store_t *st;
    PyObject *list;
    int rc;
    (void)unused;
    if ((st = alive(s)) == NULL)
        return NULL;
    list = PyList_New(0);
    if (list == NULL)
        return NULL;
    rc = dds_store_var_foreach(st, collect_name, list);
    if (rc < 0) {
        Py_DECREF(list);
        return pydds_raise(rc);
    }
    return list;
}

/* init's and init_ragged's element type: dtype_o (None/NULL = raw; a name,
 * numpy dtype or type, torch dtype) and itemsize_o (None/NULL = the
 * dtype's size, else 1 for raw) -> *dt_p, *itemsize_p.  -1 + exception. */
static int parse_elem_type(const char *call, PyObject *dtype_o,
                           PyObject *itemsize_o, dds_dtype_t *dt_p,
                           int64_t *itemsize_p)
{
    int have_isz = itemsize_o != NULL && itemsize_o != Py_None;
    *dt_p = DDS_DTYPE_RAW;
    *itemsize_p = 1;
    if (have_isz && as_i64(itemsize_o, "itemsize", itemsize_p) < 0)
        return -1;
    if (dtype_o != NULL && dtype_o != Py_None) {
        /* 'float32', numpy.dtype('float32') (str), numpy.float32 (__name__) */
        PyObject *str = PyType_Check(dtype_o)
                            ? PyObject_GetAttrString(dtype_o, "__name__")
                            : PyObject_Str(dtype_o);
        const char *dn = str && PyUnicode_Check(str) ? PyUnicode_AsUTF8(str)
                                                     : NULL;
        if (dn == NULL) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "%s: dtype has no name", call);
            Py_XDECREF(str);
            return -1;
        }
        if (ddstore_dtype_from_name(dn, dt_p) < 0) {
            PyErr_Format(PyExc_TypeError,
                         "%s: unsupported dtype '%s'; expected raw, bool, "
                         "uint8, int32, int64, float16, bfloat16, float32 or "
                         "float64",
                         call, dn);
            Py_DECREF(str);
            return -1;
        }
        Py_DECREF(str);
        if (*dt_p != DDS_DTYPE_RAW) {
            size_t es = dds_dtype_size(*dt_p);
            if (!have_isz)
                *itemsize_p = (int64_t)es;
            else if ((size_t)*itemsize_p != es) {
                PyErr_Format(PyExc_ValueError,
                             "%s: itemsize %lld does not match dtype %s "
                             "(%zu bytes)",
                             call, (long long)*itemsize_p,
                             dds_dtype_name(*dt_p), es);
                return -1;
            }
        }
    }
    return 0;
}

static PyObject *store_init(pydds_store_obj *s, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"name", "nrows", "disp", "itemsize", "dtype",
                             NULL};
    PyObject *name_o, *nrows_o, *disp_o, *itemsize_o = NULL, *dtype_o = NULL;
    const char *name;
    int64_t nrows, disp, itemsize = 1;
    dds_dtype_t dt = DDS_DTYPE_RAW;
    PyThreadState *ts;
    int rc;
    if (forked(s, "init") < 0)
        return NULL;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|OO:init", kwlist, &name_o,
                                     &nrows_o, &disp_o, &itemsize_o, &dtype_o))
        return collective_fail(s, DDS_COLL_INIT);
    if ((name = var_name(name_o)) == NULL ||
        as_i64(nrows_o, "nrows", &nrows) < 0 ||
        as_i64(disp_o, "disp", &disp) < 0 ||
        parse_elem_type("init", dtype_o, itemsize_o, &dt, &itemsize) < 0)
        return collective_fail(s, DDS_COLL_INIT);
    if (nrows < 0 || disp < 1 || itemsize < 1) {
        PyErr_Format(PyExc_ValueError,
                     "init('%s'): expected nrows >= 0, disp >= 1, itemsize "
                     ">= 1; got nrows %lld, disp %lld, itemsize %lld",
                     name, (long long)nrows, (long long)disp,
                     (long long)itemsize);
        return collective_fail(s, DDS_COLL_INIT);
    }
    if ((rc = coll_enter(s, 0, &ts)) < 0)
        return pydds_raise(rc);
    rc = dds_store_var_init(PYDDS_STORE(s), name, nrows, (size_t)disp,
                            (size_t)itemsize, dt);
    coll_leave(s, ts);
    if (rc < 0)
        return pydds_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *store_init_ragged(pydds_store_obj *s, PyObject *args,
                                   PyObject *kw)
{
    static char *kwlist[] = {"name", "lengths", "disp", "itemsize", "dtype",
                             NULL};
    PyObject *name_o, *lens_o, *disp_o, *itemsize_o = NULL, *dtype_o = NULL;
    const char *name;
    int64_t disp, itemsize = 1;
    dds_dtype_t dt = DDS_DTYPE_RAW;
    pydds_indices_t lx;
    PyThreadState *ts;
    int rc;
    if (forked(s, "init_ragged") < 0)
        return NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|OO:init_ragged", kwlist,
                                     &name_o, &lens_o, &disp_o, &itemsize_o,
                                     &dtype_o))
        return collective_fail(s, DDS_COLL_INIT);
    if ((name = var_name(name_o)) == NULL ||
        as_i64(disp_o, "disp", &disp) < 0 ||
        parse_elem_type("init_ragged", dtype_o, itemsize_o, &dt, &itemsize) <
            0)
        return collective_fail(s, DDS_COLL_INIT);
    if (disp < 1 || itemsize < 1) {
        PyErr_Format(PyExc_ValueError,
                     "init_ragged('%s'): expected disp >= 1, itemsize >= 1; "
                     "got disp %lld, itemsize %lld",
                     name, (long long)disp, (long long)itemsize);
        return collective_fail(s, DDS_COLL_INIT);
    }
    if (pydds_lengths_get(lens_o, &lx) < 0)
        return collective_fail(s, DDS_COLL_INIT);
    if ((rc = coll_enter(s, 0, &ts)) < 0) {
        pydds_indices_release(&lx);
        return pydds_raise(rc);
    }
    rc = dds_store_ragged_init(PYDDS_STORE(s), name, lx.rows, (int64_t)lx.n,
                               (size_t)disp, (size_t)itemsize, dt);
    coll_leave(s, ts);
    pydds_indices_release(&lx);
    if (rc < 0)
        return pydds_raise(rc);
    Py_RETURN_NONE;
}

int pydds_store_keep(pydds_store_obj *s, const char *name, PyObject *ref)
{
    PyObject *list;
    if (s->keep == NULL) {
        PyErr_SetString(pydds_Error, "this PyDDStore was destroyed");
        return -1;
    }
    list = PyDict_GetItemString(s->keep, name);   /* borrowed */
    if (list == NULL) {
        int rc;
        list = PyList_New(0);
        if (list == NULL)
            return -1;
        rc = PyDict_SetItemString(s->keep, name, list);
        Py_DECREF(list);
        if (rc < 0)
            return -1;
    }
    return PyList_Append(list, ref);
}

/* GPU memory is registered in place: the store keeps `arr` alive until the
 * variable is released (free(), destruction).  Kept before the collective
 * call (add_keep: the name's keep list, a new reference, or NULL when
 * nothing is kept; -1 + exception), dropped again if it fails
 * (add_keep_done). */
static int add_keep(pydds_store_obj *s, const char *name, PyObject *arr,
                    const pydds_buffer_t *b, PyObject **list_p)
{
    *list_p = NULL;
    if (!b->gpu)
        return 0;
    if (pydds_store_keep(s, name, arr) < 0)
        return -1;
    *list_p = PyDict_GetItemString(s->keep, name);   /* borrowed */
    Py_XINCREF(*list_p);
    return 0;
}

static void add_keep_done(PyObject *list, PyObject *arr, int failed)
{
    if (list == NULL)
        return;
    if (failed && PyList_GET_SIZE(list) > 0 &&
        PyList_GET_ITEM(list, PyList_GET_SIZE(list) - 1) == arr) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        (void)PySequence_DelItem(list, PyList_GET_SIZE(list) - 1);
        PyErr_Clear();
        PyErr_Restore(t, v, tb);
    }
    Py_DECREF(list);
}

/* add (lengths NULL) and add_ragged: this rank's rows `arr`. */
static PyObject *add_common(pydds_store_obj *s, PyObject *name_o,
                            PyObject *arr, PyObject *lens_o)
{
    PyObject *list = NULL;
    const char *name;
    pydds_buffer_t b;
    pydds_indices_t lx;
    PyThreadState *ts;
    int rc;
    memset(&lx, 0, sizeof lx);
    if ((name = var_name(name_o)) == NULL)
        return collective_fail(s, DDS_COLL_ADD);
    if (pydds_buffer_get(arr, lens_o ? "values" : "arr", 0, &b) < 0)
        return collective_fail(s, DDS_COLL_ADD);
    if (lens_o != NULL && pydds_lengths_get(lens_o, &lx) < 0) {
        pydds_buffer_release(&b);
        return collective_fail(s, DDS_COLL_ADD);
    }
    if (add_keep(s, name, arr, &b, &list) < 0) {
        pydds_indices_release(&lx);
        pydds_buffer_release(&b);
        return collective_fail(s, DDS_COLL_ADD);
    }
    if ((rc = coll_enter(s, 0, &ts)) == 0) {
        const dds_mem_t *mem = b.gpu ? &b.buf.mem : NULL;
        int flags = b.gpu ? DDS_ADD_IN_PLACE : DDS_ADD_COPY;
        size_t disp = b.buf.row_bytes / b.buf.itemsize;
        if (lens_o != NULL)
            rc = dds_store_ragged_add(PYDDS_STORE(s), name, b.buf.ptr,
                                      b.buf.nrows, lx.rows, (int64_t)lx.n,
                                      disp, b.buf.itemsize, b.buf.dtype, mem,
                                      flags);
        else
            rc = dds_store_var_add(PYDDS_STORE(s), name, b.buf.ptr,
                                   b.buf.nrows, disp, b.buf.itemsize,
                                   b.buf.dtype, mem, flags);
        coll_leave(s, ts);
    }
    pydds_indices_release(&lx);
    pydds_buffer_release(&b);
    if (rc < 0)
        pydds_raise(rc);
    add_keep_done(list, arr, rc < 0);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *store_add(pydds_store_obj *s, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"name", "arr", NULL};
    PyObject *name_o, *arr;
    if (forked(s, "add") < 0)
        return NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:add", kwlist, &name_o,
                                     &arr))
        return collective_fail(s, DDS_COLL_ADD);
    return add_common(s, name_o, arr, NULL);
}

static PyObject *store_add_ragged(pydds_store_obj *s, PyObject *args,
                                  PyObject *kw)
{
    static char *kwlist[] = {"name", "values", "lengths", NULL};
    PyObject *name_o, *arr, *lens_o;
    if (forked(s, "add_ragged") < 0)
        return NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:add_ragged", kwlist,
                                     &name_o, &arr, &lens_o))
        return collective_fail(s, DDS_COLL_ADD);
    return add_common(s, name_o, arr, lens_o);
}

/* update (count NULL: fixed rows) and update_ragged (samples). */
static PyObject *update_common(pydds_store_obj *s, PyObject *name_o,
                               PyObject *arr, PyObject *off_o,
                               PyObject *count_o)
{
    const char *name;
    int64_t offset = 0, count = 0;
    pydds_buffer_t b;
    int rc;
    if ((name = var_name(name_o)) == NULL)
        return NULL;
    if (off_o != NULL && as_i64(off_o, "offset", &offset) < 0)
        return NULL;
    if (count_o != NULL && as_i64(count_o, "count", &count) < 0)
        return NULL;
    if (pydds_buffer_get(arr, count_o ? "values" : "arr", 0, &b) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = enter_nogil(s);
    if (rc == 0) {
        if (count_o != NULL)
            rc = dds_store_ragged_update(PYDDS_STORE(s), name, &b.buf, offset,
                                         count);
        else
            rc = dds_store_var_update(PYDDS_STORE(s), name, &b.buf, offset);
        ddstore_pin_release(s->pin);
    }
    Py_END_ALLOW_THREADS
    pydds_buffer_release(&b);
    if (rc < 0)
        return pydds_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *store_update(pydds_store_obj *s, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"name", "arr", "offset", NULL};
    PyObject *name_o, *arr, *off_o = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:update", kwlist, &name_o,
                                     &arr, &off_o))
        return NULL;
    return update_common(s, name_o, arr, off_o, NULL);
}

static PyObject *store_update_ragged(pydds_store_obj *s, PyObject *args,
                                     PyObject *kw)
{
    static char *kwlist[] = {"name", "values", "offset", "count", NULL};
    PyObject *name_o, *arr, *off_o, *count_o;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO:update_ragged", kwlist,
                                     &name_o, &arr, &off_o, &count_o))
        return NULL;
    return update_common(s, name_o, arr, off_o, count_o);
}

static PyObject *store_sizes(pydds_store_obj *s, PyObject *args, PyObject *kw)
{
    pydds_reader_obj *r;
    return read_reader(s, &r) < 0 ? NULL : pydds_do_sizes(s, r, args, kw);
}

static PyObject *store_get_ragged(pydds_store_obj *s, PyObject *args,
                                  PyObject *kw)
{
    pydds_reader_obj *r;
    return read_reader(s, &r) < 0 ? NULL
                                  : pydds_do_get_ragged(s, r, args, kw);
}

static PyObject *store_free(pydds_store_obj *s, PyObject *unused)
{
    PyThreadState *ts;
    PyObject *keep = NULL;
    int rc;
    (void)unused;
    if (forked(s, "free") < 0)
        return NULL;
    if (coll_enter(s, 1, &ts) < 0) {
        /* destroyed: nothing left to release */
        dds_error_clear();
        Py_RETURN_NONE;
    }
    rc = dds_store_free(PYDDS_STORE(s));
    coll_leave(s, ts);
    if (s->keep != NULL && PyDict_Size(s->keep) > 0) {
        keep = s->keep;
        s->keep = PyDict_New();
    }
    Py_XDECREF(keep);
    ddstore_pin_release_keeps(s->pin);
    if (rc < 0)
        return pydds_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *store_epoch(pydds_store_obj *s, int begin)
{
    PyThreadState *ts;
    int rc;
    if (forked(s, begin ? "epoch_begin" : "epoch_end") < 0)
        return NULL;
    if ((rc = coll_enter(s, 0, &ts)) < 0)
        return pydds_raise(rc);
    rc = begin ? dds_store_epoch_begin(PYDDS_STORE(s)) : dds_store_epoch_end(PYDDS_STORE(s));
    coll_leave(s, ts);
    if (rc < 0)
        return pydds_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *store_epoch_begin(pydds_store_obj *s, PyObject *unused)
{
    (void)unused;
    return store_epoch(s, 1);
}

static PyObject *store_epoch_end(pydds_store_obj *s, PyObject *unused)
{
    (void)unused;
    return store_epoch(s, 0);
}

static PyObject *store_register_recv(pydds_store_obj *s, PyObject *args,
                                     PyObject *kw)
{
    static char *kwlist[] = {"name", "arr", NULL};
    PyObject *name_o, *arr, *key = NULL;
    const char *name;
    dds_var_info_t vi;
    pydds_buffer_t b;
    dds_store_t *st;
    int rc;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:register_recv", kwlist,
                                     &name_o, &arr))
        return NULL;
    if ((name = var_name(name_o)) == NULL || (st = alive(s)) == NULL)
        return NULL;
    rc = dds_store_var_info(st, name, &vi);
    if (rc < 0)
        return pydds_raise(rc);
    if (pydds_buffer_get(arr, "arr", 1, &b) < 0)
        return NULL;
    key = Py_BuildValue("(Nn)", PyLong_FromVoidPtr(b.buf.ptr),
                        (Py_ssize_t)b.nbytes);
    if (key == NULL) {
        pydds_buffer_release(&b);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = enter_nogil(s);
    if (rc == 0) {
        rc = dds_store_recv_register(PYDDS_STORE(s), b.buf.ptr, b.nbytes,
                                     &b.buf.mem);
        ddstore_pin_release(s->pin);
    }
    Py_END_ALLOW_THREADS
    pydds_buffer_release(&b);
    if (rc < 0) {
        Py_DECREF(key);
        return pydds_raise(rc);
    }
    /* registered (or already was: a no-op) */
    if (s->recv_bufs != NULL && PyDict_SetItem(s->recv_bufs, key, arr) < 0) {
        Py_DECREF(key);
        return NULL;
    }
    Py_DECREF(key);
    Py_RETURN_NONE;
}

static PyObject *store_unregister_recv(pydds_store_obj *s, PyObject *args,
                                       PyObject *kw)
{
    static char *kwlist[] = {"name", "arr", NULL};
    PyObject *name_o, *arr, *key = NULL;
    const char *name;
    pydds_buffer_t b;
    int rc;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:unregister_recv", kwlist,
                                     &name_o, &arr))
        return NULL;
    if ((name = var_name(name_o)) == NULL)
        return NULL;
    if (pydds_buffer_get(arr, "arr", 0, &b) < 0)
        return NULL;
    key = Py_BuildValue("(Nn)", PyLong_FromVoidPtr(b.buf.ptr),
                        (Py_ssize_t)b.nbytes);
    if (key == NULL) {
        pydds_buffer_release(&b);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = enter_nogil(s);
    if (rc == 0) {
        rc = dds_store_recv_unregister(PYDDS_STORE(s), b.buf.ptr, b.nbytes);
        ddstore_pin_release(s->pin);
    }
    Py_END_ALLOW_THREADS
    pydds_buffer_release(&b);
    if (rc == 0 && s->recv_bufs != NULL &&
        PyDict_DelItem(s->recv_bufs, key) < 0)
        PyErr_Clear();
    Py_DECREF(key);
    if (rc == -DDS_ENOENT)
        return pydds_raise_fmt(-DDS_EINVAL,
                               "unregister_recv('%s'): this buffer was not "
                               "registered with register_recv",
                               name);
    if (rc < 0)
        return pydds_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *store_fork_reader(pydds_store_obj *s, PyObject *unused)
{
    (void)unused;
    return pydds_reader_new(s, DDS_READER_FORKED);
}

static PyObject *store_open_reader(pydds_store_obj *s, PyObject *unused)
{
    (void)unused;
    return pydds_reader_new(s, DDS_READER_THREAD);
}

static PyObject *store_join(pydds_store_obj *s, PyObject *name_o)
{
    const char *name;
    if ((name = var_name(name_o)) == NULL || alive(s) == NULL)
        return NULL;
    int rc;
    if (!(ddstore_backend_find(s->method)->flags &
          DDSTORE_BACKEND_NEEDS_HANDSHAKE))
        return pydds_raise_fmt(-DDS_EINVAL,
                               "join('%s'): only method=2 readers join a "
                               "core job's variables; this store uses "
                               "method %d",
                               name, s->method);
    /* Local; may wait for the core job (DDSTORE_HANDSHAKE_TIMEOUT_S) */
    Py_BEGIN_ALLOW_THREADS
    rc = enter_nogil(s);
    if (rc == 0) {
        rc = dds_store_var_join(PYDDS_STORE(s), name);
        ddstore_pin_release(s->pin);
    }
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return pydds_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *store_enter(pydds_store_obj *s, PyObject *unused)
{
    (void)unused;
    return Py_NewRef((PyObject *)s);
}

static PyObject *store_exit(pydds_store_obj *s, PyObject *args)
{
    PyObject *r;
    (void)args;
    r = store_free(s, NULL);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyObject *store_get_rank(pydds_store_obj *s, void *c)
{
    (void)c;
    return PyLong_FromLong(s->rank);
}

static PyObject *store_get_size(pydds_store_obj *s, void *c)
{
    (void)c;
    return PyLong_FromLong(s->size);
}

static PyObject *store_get_method(pydds_store_obj *s, void *c)
{
    (void)c;
    return PyLong_FromLong(s->method);
}

/* The store's libddstore handle (ddstore/pin.h), by which the torch
 * extension finds and pins it (stale once destroyed: -DDS_EFREED there). */
static PyObject *store_get_handle(pydds_store_obj *s, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLongLong(
        (unsigned long long)ddstore_pin_handle(s->pin));
}

static PyObject *store_get_destroyed(pydds_store_obj *s, void *c)
{
    (void)c;
    return PyBool_FromLong(PYDDS_STORE(s) == NULL);
}

static PyObject *store_repr(pydds_store_obj *s)
{
    return PyUnicode_FromFormat("<%s rank %d of %d, method %d%s>",
                                Py_TYPE(s)->tp_name, s->rank, s->size,
                                s->method, PYDDS_STORE(s) ? "" : ", destroyed");
}

static PyMethodDef store_methods[] = {
    {"init", (PyCFunction)(void (*)(void))store_init,
     METH_VARARGS | METH_KEYWORDS,
     "init(name, nrows, disp, itemsize=1, dtype=None)\n\n"
     "Collective.  This rank's shard of `name`: `nrows` zeroed rows of "
     "`disp` elements of `itemsize` bytes.  Untyped ('raw') unless `dtype` "
     "(beyond: 'bool', 'uint8', 'int32', 'int64', 'float16', 'bfloat16', "
     "'float32', 'float64', a numpy dtype or a torch dtype) is given; raw "
     "variables accept any buffer whose element "
     "size is `itemsize`."},
    {"add", (PyCFunction)(void (*)(void))store_add,
     METH_VARARGS | METH_KEYWORDS,
     "add(name, arr)\n\n"
     "Collective.  This rank's shard of `name` = a copy of the C-contiguous "
     "buffer `arr` (1-D: rows of one element; N-D: shape[0] rows).  Global "
     "rows are the shards in rank order; zero-row shards are allowed.  A GPU "
     "array (__cuda_array_interface__: torch CUDA/ROCm tensor, cupy) is "
     "registered in place and kept alive by the store until free()."},
    {"update", (PyCFunction)(void (*)(void))store_update,
     METH_VARARGS | METH_KEYWORDS,
     "update(name, arr, offset)\n\n"
     "Local.  Overwrite rows [offset, offset+len(arr)) of this rank's shard."},
    {"add_ragged", (PyCFunction)(void (*)(void))store_add_ragged,
     METH_VARARGS | METH_KEYWORDS,
     "add_ragged(name, values, lengths)\n\n"
     "Collective.  A ragged variable: this rank's samples are `lengths` (a "
     "1-D integer array or list, each >= 0; may be empty) and their "
     "element rows `values` (C-contiguous, shape (sum(lengths), *trailing); "
     "1-D = rows of one element), sample after sample.  Global samples are "
     "the ranks' samples in rank order; dtype and trailing dims must be "
     "equal on every rank.  Read with sizes() and get_ragged()."},
    {"init_ragged", (PyCFunction)(void (*)(void))store_init_ragged,
     METH_VARARGS | METH_KEYWORDS,
     "init_ragged(name, lengths, disp, itemsize=1, dtype=None)\n\n"
     "Collective.  A ragged variable of samples of the given lengths, "
     "payload zeroed (fill it with update_ragged); disp, itemsize, dtype as "
     "for init."},
    {"update_ragged", (PyCFunction)(void (*)(void))store_update_ragged,
     METH_VARARGS | METH_KEYWORDS,
     "update_ragged(name, values, offset, count)\n\n"
     "Local.  Overwrite the payload of this rank's samples [offset, "
     "offset+count) (local sample numbers); len(values) must equal the sum "
     "of their lengths (lengths never change)."},
    {"sizes", (PyCFunction)(void (*)(void))store_sizes,
     METH_VARARGS | METH_KEYWORDS,
     "sizes(name, indices) -> numpy int64 array\n\n"
     "The lengths (element rows) of the ragged variable's samples "
     "`indices`; reads index entries only, never payload.  Releases the "
     "GIL."},
    {"get_ragged", (PyCFunction)(void (*)(void))store_get_ragged,
     METH_VARARGS | METH_KEYWORDS,
     "get_ragged(name, indices, out=None) -> (values, lengths)\n\n"
     "The samples `indices` (any order, repeats allowed) of a ragged "
     "variable packed in request order, and their lengths (numpy int64).  "
     "Without `out`: values is a new numpy array (total, disp) of the "
     "variable's dtype (uint8 rows for raw variables).  With `out` (a "
     "C-contiguous array or tensor of the variable's rows, at least the "
     "total): its first `total` rows are written and values = out[:total]; "
     "`out` too small is a ValueError naming the rows needed (nothing "
     "read).  Releases the GIL."},
    {"get", (PyCFunction)(void (*)(void))store_get,
     METH_VARARGS | METH_KEYWORDS,
     "get(name, arr, start=0)\n\n"
     "Read len(arr) consecutive global rows from `start` into `arr` (across "
     "owners if needed).  Releases the GIL.  `arr` may be a GPU array "
     "(__cuda_array_interface__): the rows are ready for the next kernel on "
     "its stream (docs/gpudirect.md)."},
    {"get_batch", (PyCFunction)(void (*)(void))store_get_batch,
     METH_VARARGS | METH_KEYWORDS,
     "get_batch(name, arr, indices)\n\n"
     "Row i of `arr` <- global row indices[i] (any order, repeats allowed; "
     "every index is checked before anything is read).  `indices`: any "
     "integer buffer or sequence.  Releases the GIL."},
    {"register_recv", (PyCFunction)(void (*)(void))store_register_recv,
     METH_VARARGS | METH_KEYWORDS,
     "register_recv(name, arr)\n\n"
     "Register `arr` once so reads into it or any slice of it skip "
     "registration.  The store keeps `arr` alive until unregister_recv."},
    {"unregister_recv", (PyCFunction)(void (*)(void))store_unregister_recv,
     METH_VARARGS | METH_KEYWORDS,
     "unregister_recv(name, arr)\n\nUndo register_recv(name, arr)."},
    {"get_profile", (PyCFunction)store_get_profile, METH_O,
     "get_profile(name) -> dict of read counters (calls, rows, bytes, reads, "
     "local_bytes, staged_bytes, registrations, and *_ns times; also the "
     "original's names lock_wait, mr, mr_miss, read, cq), summed over "
     "every reader and thread."},
    {"reset_profile", (PyCFunction)store_reset_profile, METH_O,
     "reset_profile(name): zero the counters of `name` (beyond)."},
    {"info", (PyCFunction)store_info, METH_O,
     "info(name) -> (total_rows, disp, itemsize); a ragged variable's "
     "total_rows counts samples."},
    {"info_full", (PyCFunction)store_info_full, METH_O,
     "info_full(name) -> dict (beyond): total_rows, local_rows, local_first, "
     "disp, itemsize, row_bytes, dtype ('raw', 'bool', 'uint8', 'int32', "
     "'int64', 'float32', 'float64', 'float16', 'bfloat16'), mem ('host', "
     "'cuda', 'rocm'), device, nranks, ragged (bool), total_elems and "
     "local_elems (element rows of a ragged variable; = the rows of a fixed "
     "one)."},
    {"offsets", (PyCFunction)store_offsets, METH_O,
     "offsets(name) -> tuple of nranks+1 ints (beyond): rank r owns global "
     "rows [offsets[r], offsets[r+1]) (samples of a ragged variable)."},
    {"names", (PyCFunction)store_names, METH_NOARGS,
     "names() -> list of live variable names (beyond)."},
    {"epoch_begin", (PyCFunction)store_epoch_begin, METH_NOARGS,
     "epoch_begin(): collective (every method).  When it returns, every "
     "update()/init() any rank finished before entering it is visible to "
     "every read this rank makes.  One agreement over the communicator."},
    {"epoch_end", (PyCFunction)store_epoch_end, METH_NOARGS,
     "epoch_end(): collective (every method).  When it returns, every rank "
     "has finished the reads it made before entering it, so later updates "
     "cannot change what they returned.  One agreement over the "
     "communicator."},
    {"free", (PyCFunction)store_free, METH_NOARGS,
     "free()\n\nCollective.  Release every variable; idempotent.  Reads of a "
     "released name raise DDStoreError until it is added again."},
    {"fork_reader", (PyCFunction)store_fork_reader, METH_NOARGS,
     "fork_reader() -> Reader with its own endpoints, for a process forked "
     "after the store was created (DataLoader workers)."},
    {"open_reader", (PyCFunction)store_open_reader, METH_NOARGS,
     "open_reader() -> Reader with its own endpoints for one thread "
     "(beyond)."},
    {"join", (PyCFunction)store_join, METH_O,
     "join(name): method-2 readers: wait for the core job's record of "
     "`name` (DDSTORE_HANDSHAKE_TIMEOUT_S), check it, then read it like any "
     "variable (read-only here).  DDStoreError on timeout, a stale or "
     "damaged record; ValueError for a wrong n_core."},
    {"__enter__", (PyCFunction)store_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)store_exit, METH_VARARGS,
     "free() on leaving a with-block."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef store_getset[] = {
    {"rank", (getter)store_get_rank, NULL, "this rank in the store", NULL},
    {"size", (getter)store_get_size, NULL, "number of ranks", NULL},
    {"method", (getter)store_get_method, NULL,
     "0 MPI RMA, 1 libfabric, 2 libfabric split jobs", NULL},
    {"destroyed", (getter)store_get_destroyed, NULL,
     "True once the C store is gone (interpreter exit)", NULL},
    {"_handle", (getter)store_get_handle, NULL,
     "libddstore handle of this store (for the torch extension)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject pydds_StoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyddstore.PyDDStore",
    .tp_basicsize = sizeof(pydds_store_obj),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc =
        "PyDDStore(comm_or_none=None, method=0, handshake_dir='', n_core=0, "
        "nic_map=None, rank=None, size=0, exchange_ns='')\n\n"
        "A distributed in-memory store: each rank holds a shard of every "
        "variable and reads any global row with one-sided reads.\n"
        "comm_or_none: None (MPI_COMM_WORLD; MPI starts here, not at import), "
        "an mpi4py communicator, or a ddstore communicator (FileComm, "
        "torch group).  method: 0 MPI RMA, 1 libfabric, 2 libfabric split "
        "jobs; None = DDSTORE_METHOD (default 0).  nic_map: None, a str or a "
        "sequence of interface names.  rank/size: when given, checked "
        "against the communicator.\n"
        "Method 2: n_core=0 is a core job (every add/init publishes a record "
        "in handshake_dir, default DDSTORE_HANDSHAKE_DIR); n_core=N > 0 a "
        "reader of a core job of N ranks (comm_or_none None: a one-rank "
        "communicator, no MPI) that join()s the core job's variables; "
        "exchange_ns (default DDSTORE_EXCHANGE_NS) names the run.\n"
        "Collective calls (constructor, init, add, free, epoch_*) must be "
        "made by every rank in the same order; they fail on every rank "
        "together.  Use free() (or a with-block) before dropping a store: "
        "destroying a store with live variables is collective.",
    .tp_new = store_new,
    .tp_dealloc = (destructor)store_dealloc,
    .tp_traverse = (traverseproc)store_traverse,
    .tp_clear = (inquiry)store_clear,
    .tp_methods = store_methods,
    .tp_getset = store_getset,
    .tp_repr = (reprfunc)store_repr,
    .tp_weaklistoffset = offsetof(pydds_store_obj, weakreflist),
};

int pydds_store_type_ready(PyObject *module)
{
    if (PyType_Ready(&pydds_StoreType) < 0)
        return -1;
    Py_INCREF(&pydds_StoreType);
    if (PyModule_AddObject(module, "PyDDStore",
                           (PyObject *)&pydds_StoreType) < 0) {
        Py_DECREF(&pydds_StoreType);
        return -1;
    }
    return 0;
}
