/* pyddstore._core: the PyDDStore methods that define and change variables:
 * the collective calls (init, init_ragged, add, add_ragged, free,
 * epoch_begin, epoch_end), which agree on failure across ranks, the local
 * writes (update, update_ragged, _local_view) and receive buffers
 * (register_recv, unregister_recv).
 */
#include "pydds_store.h"

#include <string.h>
#include <unistd.h>

/* ---- collective sections ------------------------------------------------ */

/* Take the life lock take the life lock (GIL released while waiting), then
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
        return pydds_store_gone();
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


/* ---- variables ---------------------------------------------------------- */

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
    if (have_isz && pydds_as_i64(itemsize_o, "itemsize", itemsize_p) < 0)
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

PyObject *pydds_store_init(pydds_store_obj *s, PyObject *args, PyObject *kw)
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
    if ((name = pydds_var_name(name_o)) == NULL ||
        pydds_as_i64(nrows_o, "nrows", &nrows) < 0 ||
        pydds_as_i64(disp_o, "disp", &disp) < 0 ||
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

PyObject *pydds_store_init_ragged(pydds_store_obj *s, PyObject *args,
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
    if ((name = pydds_var_name(name_o)) == NULL ||
        pydds_as_i64(disp_o, "disp", &disp) < 0 ||
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
    if ((name = pydds_var_name(name_o)) == NULL)
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

PyObject *pydds_store_add(pydds_store_obj *s, PyObject *args, PyObject *kw)
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

PyObject *pydds_store_add_ragged(pydds_store_obj *s, PyObject *args,
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
    if ((name = pydds_var_name(name_o)) == NULL)
        return NULL;
    if (off_o != NULL && pydds_as_i64(off_o, "offset", &offset) < 0)
        return NULL;
    if (count_o != NULL && pydds_as_i64(count_o, "count", &count) < 0)
        return NULL;
    if (pydds_buffer_get(arr, count_o ? "values" : "arr", 0, &b) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = pydds_store_enter_nogil(s);
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

PyObject *pydds_store_update(pydds_store_obj *s, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"name", "arr", "offset", NULL};
    PyObject *name_o, *arr, *off_o = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:update", kwlist, &name_o,
                                     &arr, &off_o))
        return NULL;
    return update_common(s, name_o, arr, off_o, NULL);
}

PyObject *pydds_store_update_ragged(pydds_store_obj *s, PyObject *args,
                                     PyObject *kw)
{
    static char *kwlist[] = {"name", "values", "offset", "count", NULL};
    PyObject *name_o, *arr, *off_o, *count_o;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO:update_ragged", kwlist,
                                     &name_o, &arr, &off_o, &count_o))
        return NULL;
    return update_common(s, name_o, arr, off_o, count_o);
}

/* _local_view(name) -> (rows, index): this rank's shard in place, for the
 * package's own loaders and snapshots (pyddstore/io): `rows` a writable
 * memoryview of its bytes (a ragged variable's element rows), `index` a
 * read-only one of a ragged variable's local_rows + 1 int64 prefix sums
 * (None for a fixed one).  The views do not keep the variable alive: the
 * caller drops them before free() (private for that reason). */
PyObject *pydds_store_local_view(pydds_store_obj *s, PyObject *name_o)
{
    static char empty[1];
    const char *name;
    void *base = NULL;
    size_t bytes = 0;
    const int64_t *index = NULL;
    dds_var_info_t info;
    int rc;
    if ((name = pydds_var_name(name_o)) == NULL)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = pydds_store_enter_nogil(s);
    if (rc == 0) {
        rc = dds_store_var_local(PYDDS_STORE(s), name, &base, &bytes, &index);
        if (rc == 0 && index != NULL)
            rc = dds_store_var_info(PYDDS_STORE(s), name, &info);
        ddstore_pin_release(s->pin);
    }
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return pydds_raise(rc);
    PyObject *rows = PyMemoryView_FromMemory(base ? (char *)base : empty,
                                             (Py_ssize_t)bytes, PyBUF_WRITE);
    PyObject *idx = index == NULL
                        ? Py_NewRef(Py_None)
                        : PyMemoryView_FromMemory(
                              (char *)index,
                              (Py_ssize_t)((info.local_rows + 1) * 8), PyBUF_READ);
    if (rows == NULL || idx == NULL) {
        Py_XDECREF(rows);
        Py_XDECREF(idx);
        return NULL;
    }
    return Py_BuildValue("(NN)", rows, idx);
}

/* _allgather_bytes(b) -> bytes / _barrier(): the store's own communicator
 * for the package's collective steps around it (snapshots: a byte mover
 * for _core.Collective).  Every rank passes the same number of bytes. */
PyObject *pydds_store_allgather_bytes(pydds_store_obj *s, PyObject *arg)
{
    Py_buffer in;
    PyThreadState *ts;
    PyObject *out;
    int rc;
    if (forked(s, "_allgather_bytes") < 0)
        return NULL;
    if (PyObject_GetBuffer(arg, &in, PyBUF_SIMPLE) < 0)
        return NULL;
    out = PyBytes_FromStringAndSize(NULL, in.len * (Py_ssize_t)s->size);
    if (out == NULL) {
        PyBuffer_Release(&in);
        return NULL;
    }
    if (coll_enter(s, 0, &ts) < 0) {
        Py_DECREF(out);
        PyBuffer_Release(&in);
        return pydds_raise(-DDS_EFREED);
    }
    const dds_comm_t *c = dds_store_comm(PYDDS_STORE(s));
    rc = c->ops->allgather(c->ctx, in.buf, (size_t)in.len, PyBytes_AS_STRING(out));
    coll_leave(s, ts);
    PyBuffer_Release(&in);
    if (rc != 0) {
        Py_DECREF(out);
        if (PyErr_Occurred())
            return NULL;
        return pydds_raise(rc < 0 ? rc : -rc);
    }
    return out;
}

PyObject *pydds_store_barrier(pydds_store_obj *s, PyObject *unused)
{
    PyThreadState *ts;
    int rc;
    (void)unused;
    if (forked(s, "_barrier") < 0)
        return NULL;
    if (coll_enter(s, 0, &ts) < 0)
        return pydds_raise(-DDS_EFREED);
    const dds_comm_t *c = dds_store_comm(PYDDS_STORE(s));
    rc = c->ops->barrier(c->ctx);
    coll_leave(s, ts);
    if (rc != 0) {
        if (PyErr_Occurred())
            return NULL;
        return pydds_raise(rc < 0 ? rc : -rc);
    }
    Py_RETURN_NONE;
}

PyObject *pydds_store_free(pydds_store_obj *s, PyObject *unused)
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

PyObject *pydds_store_epoch_begin(pydds_store_obj *s, PyObject *unused)
{
    (void)unused;
    return store_epoch(s, 1);
}

PyObject *pydds_store_epoch_end(pydds_store_obj *s, PyObject *unused)
{
    (void)unused;
    return store_epoch(s, 0);
}

PyObject *pydds_store_register_recv(pydds_store_obj *s, PyObject *args,
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
    if ((name = pydds_var_name(name_o)) == NULL || (st = pydds_store_alive(s)) == NULL)
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
    rc = pydds_store_enter_nogil(s);
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

PyObject *pydds_store_unregister_recv(pydds_store_obj *s, PyObject *args,
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
    if ((name = pydds_var_name(name_o)) == NULL)
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
    rc = pydds_store_enter_nogil(s);
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

