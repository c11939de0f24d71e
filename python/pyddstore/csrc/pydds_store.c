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
 *
 * The type's code is split by concern (pydds_store.h lists the files).
 */
#include "pydds_store.h"

#include <unistd.h>

#include "ddstore/config.h"

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
     * another keeps pydds_store_alive; only free() is collective (docs/concurrency.md). */
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
    pid_t me = pydds_pid();      /* per read: no getpid() system call */
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

static PyObject *store_get_batch(pydds_store_obj *s, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames)
{
    pydds_reader_obj *r;
    return read_reader(s, &r) < 0
               ? NULL
               : pydds_do_get_batch(s, r, args, nargs, kwnames);
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
    if ((name = pydds_var_name(name_o)) == NULL || (st = pydds_store_alive(s)) == NULL)
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
    if ((st = pydds_store_alive(s)) == NULL)
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
    if ((name = pydds_var_name(name_o)) == NULL || pydds_store_alive(s) == NULL)
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
    rc = pydds_store_enter_nogil(s);
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
    r = pydds_store_free(s, NULL);
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
    {"init", (PyCFunction)(void (*)(void))pydds_store_init,
     METH_VARARGS | METH_KEYWORDS,
     "init(name, nrows, disp, itemsize=1, dtype=None)\n\n"
     "Collective.  This rank's shard of `name`: `nrows` zeroed rows of "
     "`disp` elements of `itemsize` bytes.  Untyped ('raw') unless `dtype` "
     "(beyond: 'bool', 'uint8', 'int32', 'int64', 'float16', 'bfloat16', "
     "'float32', 'float64', a numpy dtype or a torch dtype) is given; raw "
     "variables accept any buffer whose element "
     "size is `itemsize`."},
    {"add", (PyCFunction)(void (*)(void))pydds_store_add,
     METH_VARARGS | METH_KEYWORDS,
     "add(name, arr)\n\n"
     "Collective.  This rank's shard of `name` = a copy of the C-contiguous "
     "buffer `arr` (1-D: rows of one element; N-D: shape[0] rows).  Global "
     "rows are the shards in rank order; zero-row shards are allowed.  A GPU "
     "array (__cuda_array_interface__: torch CUDA/ROCm tensor, cupy) is "
     "registered in place and kept alive by the store until free()."},
    {"update", (PyCFunction)(void (*)(void))pydds_store_update,
     METH_VARARGS | METH_KEYWORDS,
     "update(name, arr, offset)\n\n"
     "Local.  Overwrite rows [offset, offset+len(arr)) of this rank's shard."},
    {"add_ragged", (PyCFunction)(void (*)(void))pydds_store_add_ragged,
     METH_VARARGS | METH_KEYWORDS,
     "add_ragged(name, values, lengths)\n\n"
     "Collective.  A ragged variable: this rank's samples are `lengths` (a "
     "1-D integer array or list, each >= 0; may be empty) and their "
     "element rows `values` (C-contiguous, shape (sum(lengths), *trailing); "
     "1-D = rows of one element), sample after sample.  Global samples are "
     "the ranks' samples in rank order; dtype and trailing dims must be "
     "equal on every rank.  Read with sizes() and get_ragged()."},
    {"init_ragged", (PyCFunction)(void (*)(void))pydds_store_init_ragged,
     METH_VARARGS | METH_KEYWORDS,
     "init_ragged(name, lengths, disp, itemsize=1, dtype=None)\n\n"
     "Collective.  A ragged variable of samples of the given lengths, "
     "payload zeroed (fill it with update_ragged); disp, itemsize, dtype as "
     "for init."},
    {"update_ragged", (PyCFunction)(void (*)(void))pydds_store_update_ragged,
     METH_VARARGS | METH_KEYWORDS,
     "update_ragged(name, values, offset, count)\n\n"
     "Local.  Overwrite the payload of this rank's samples [offset, "
     "offset+count) (local sample numbers); len(values) must equal the sum "
     "of their lengths (lengths never change)."},
    {"_allgather_bytes", (PyCFunction)pydds_store_allgather_bytes, METH_O,
     "_allgather_bytes(b) -> bytes\n\nCollective, private: every rank's `b` "
     "(the same length everywhere) in rank order, over the store's own "
     "communicator (the package's steps around the store: snapshots)."},
    {"_barrier", (PyCFunction)pydds_store_barrier, METH_NOARGS,
     "_barrier()\n\nCollective, private: a barrier over the store's "
     "communicator."},
    {"_local_view", (PyCFunction)pydds_store_local_view, METH_O,
     "_local_view(name) -> (rows, index)\n\n"
     "Local, private (pyddstore.io's loaders and snapshots).  This rank's "
     "shard of `name` in place: a writable memoryview of its rows (a "
     "ragged variable's element rows) and a read-only one of a ragged "
     "variable's local_rows + 1 int64 prefix sums (None: fixed).  The "
     "views do not keep the variable alive: drop them before free()."},
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
     METH_FASTCALL | METH_KEYWORDS,
     "get_batch(name, arr, indices)\n\n"
     "Row i of `arr` <- global row indices[i] (any order, repeats allowed; "
     "every index is checked before anything is read).  `indices`: any "
     "integer buffer or sequence.  Releases the GIL."},
    {"register_recv", (PyCFunction)(void (*)(void))pydds_store_register_recv,
     METH_VARARGS | METH_KEYWORDS,
     "register_recv(name, arr)\n\n"
     "Register `arr` once so reads into it or any slice of it skip "
     "registration.  The store keeps `arr` alive until unregister_recv."},
    {"unregister_recv", (PyCFunction)(void (*)(void))pydds_store_unregister_recv,
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
    {"epoch_begin", (PyCFunction)pydds_store_epoch_begin, METH_NOARGS,
     "epoch_begin(): collective (every method).  When it returns, every "
     "update()/init() any rank finished before entering it is visible to "
     "every read this rank makes.  One agreement over the communicator."},
    {"epoch_end", (PyCFunction)pydds_store_epoch_end, METH_NOARGS,
     "epoch_end(): collective (every method).  When it returns, every rank "
     "has finished the reads it made before entering it, so later updates "
     "cannot change what they returned.  One agreement over the "
     "communicator."},
    {"free", (PyCFunction)pydds_store_free, METH_NOARGS,
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
     "True once the C store is pydds_store_gone (interpreter exit)", NULL},
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
    .tp_new = pydds_store_new,
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
