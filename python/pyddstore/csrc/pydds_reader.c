/* pyddstore._core: the Reader type.
 *
 * A reader is a separate read context (its own endpoints where the transport
 * has them) over a PyDDStore: fork_reader() for a process forked after the
 * store was created (DDS_READER_FORKED), open_reader() for one thread
 * (DDS_READER_THREAD).  It keeps its store object alive, reads like it
 * (get, get_batch, sizes, get_ragged) and answers the same queries; close() releases it
 * (idempotent).  Readers are closed before their store is destroyed.
 */
#include "pydds.h"

#include <unistd.h>

/* Caller holds the owner's life lock for writing (and the GIL). */
void pydds_reader_close_locked(pydds_reader_obj *r)
{
    ddstore_handle_drop(r->handle);   /* the torch extension's way in */
    r->handle = 0;
    if (r->reader != NULL && r->owner != NULL && PYDDS_STORE(r->owner) != NULL &&
        r->pid == getpid())
        dds_store_reader_close(PYDDS_STORE(r->owner), r->reader);
    r->reader = NULL;
}

static void unlink_reader(pydds_reader_obj *r)
{
    pydds_store_obj *s = r->owner;
    if (s == NULL)
        return;
    if (r->prev)
        r->prev->next = r->next;
    else if (s->readers == r)
        s->readers = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->prev = r->next = NULL;
}

PyObject *pydds_reader_new(pydds_store_obj *owner, int flags)
{
    pydds_reader_obj *r;
    dds_reader_t *rd = NULL;
    int rc;

    r = PyObject_GC_New(pydds_reader_obj, &pydds_ReaderType);
    if (r == NULL)
        return NULL;
    r->owner = NULL;
    r->reader = NULL;
    r->flags = flags;
    r->pid = getpid();
    r->handle = 0;
    r->weakreflist = NULL;
    r->prev = r->next = NULL;

    /* Open under the life lock (read) and keep it until the reader is in
     * the owner's list, so a concurrent destroy closes it. */
    Py_BEGIN_ALLOW_THREADS
    ddstore_pin_acquire_any(owner->pin);
    if (PYDDS_STORE(owner) == NULL)
        rc = dds_error(-DDS_EFREED,
                       "this PyDDStore was destroyed (interpreter exit or "
                       "deallocation); create a new store");
    else
        rc = dds_store_reader_open(PYDDS_STORE(owner), flags, &rd);
    if (rc == 0) {
        rc = ddstore_pin_reader_handle(owner->pin, rd, &r->handle);
        if (rc < 0)
            dds_store_reader_close(PYDDS_STORE(owner), rd);
    }
    if (rc < 0)
        ddstore_pin_release(owner->pin);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        Py_DECREF(r);
        return pydds_raise(rc);
    }
    Py_INCREF(owner);
    r->owner = owner;
    r->reader = rd;
    r->next = owner->readers;
    if (owner->readers)
        owner->readers->prev = r;
    owner->readers = r;
    ddstore_pin_release(owner->pin);
    PyObject_GC_Track(r);
    return (PyObject *)r;
}

static void reader_close_impl(pydds_reader_obj *r)
{
    pydds_store_obj *s = r->owner;
    if (s == NULL || r->reader == NULL) {
        if (s != NULL)
            unlink_reader(r);
        return;
    }
    pydds_lock_write(s);
    pydds_reader_close_locked(r);
    unlink_reader(r);
    ddstore_pin_unlock(s->pin);
}

static PyObject *reader_close(pydds_reader_obj *r, PyObject *unused)
{
    (void)unused;
    reader_close_impl(r);
    Py_RETURN_NONE;
}

static int reader_traverse(pydds_reader_obj *r, visitproc visit, void *arg)
{
    Py_VISIT(r->owner);
    return 0;
}

static int reader_clear(pydds_reader_obj *r)
{
    reader_close_impl(r);
    Py_CLEAR(r->owner);
    return 0;
}

static void reader_dealloc(pydds_reader_obj *r)
{
    PyObject *t, *v, *tb;
    PyObject_GC_UnTrack(r);
    if (r->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)r);
    PyErr_Fetch(&t, &v, &tb);
    reader_close_impl(r);
    PyErr_Restore(t, v, tb);
    Py_CLEAR(r->owner);
    PyObject_GC_Del(r);
}

/* The owner, or NULL + DDStoreError when the reader is closed. */
static pydds_store_obj *owner_of(pydds_reader_obj *r)
{
    if (r->owner == NULL || r->reader == NULL) {
        dds_error(-DDS_EFREED, "this reader was closed");
        pydds_raise(-DDS_EFREED);
        return NULL;
    }
    return r->owner;
}

static PyObject *reader_get(pydds_reader_obj *r, PyObject *args, PyObject *kw)
{
    pydds_store_obj *s = owner_of(r);
    return s ? pydds_do_get(s, r, args, kw) : NULL;
}

static PyObject *reader_get_batch(pydds_reader_obj *r,
                                  PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    pydds_store_obj *s = owner_of(r);
    return s ? pydds_do_get_batch(s, r, args, nargs, kwnames) : NULL;
}

static PyObject *reader_sizes(pydds_reader_obj *r, PyObject *args,
                              PyObject *kw)
{
    pydds_store_obj *s = owner_of(r);
    return s ? pydds_do_sizes(s, r, args, kw) : NULL;
}

static PyObject *reader_get_ragged(pydds_reader_obj *r, PyObject *args,
                                   PyObject *kw)
{
    pydds_store_obj *s = owner_of(r);
    return s ? pydds_do_get_ragged(s, r, args, kw) : NULL;
}

static PyObject *reader_info(pydds_reader_obj *r, PyObject *name)
{
    pydds_store_obj *s = owner_of(r);
    return s ? pydds_do_info(s, name) : NULL;
}

static PyObject *reader_info_full(pydds_reader_obj *r, PyObject *name)
{
    pydds_store_obj *s = owner_of(r);
    return s ? pydds_do_info_full(s, name) : NULL;
}

static PyObject *reader_offsets(pydds_reader_obj *r, PyObject *name)
{
    pydds_store_obj *s = owner_of(r);
    return s ? pydds_do_offsets(s, name) : NULL;
}

static PyObject *reader_get_profile(pydds_reader_obj *r, PyObject *name)
{
    pydds_store_obj *s = owner_of(r);
    return s ? pydds_do_profile(s, name) : NULL;
}

static PyObject *reader_enter(pydds_reader_obj *r, PyObject *unused)
{
    (void)unused;
    return Py_NewRef((PyObject *)r);
}

static PyObject *reader_exit(pydds_reader_obj *r, PyObject *args)
{
    (void)args;
    reader_close_impl(r);
    Py_RETURN_FALSE;
}

static PyObject *reader_get_store(pydds_reader_obj *r, void *c)
{
    (void)c;
    if (r->owner == NULL)
        Py_RETURN_NONE;
    return Py_NewRef((PyObject *)r->owner);
}

/* The reader's libddstore handle (ddstore/pin.h), by which the torch
 * extension finds and pins it; a closed reader's handle is stale
 * (-DDS_EFREED there), so this raises once it is closed. */
static PyObject *reader_get_handle(pydds_reader_obj *r, void *c)
{
    (void)c;
    if (r->handle == 0) {
        dds_error(-DDS_EFREED, "this reader was closed");
        return pydds_raise(-DDS_EFREED);
    }
    return PyLong_FromUnsignedLongLong((unsigned long long)r->handle);
}

static PyObject *reader_get_closed(pydds_reader_obj *r, void *c)
{
    (void)c;
    return PyBool_FromLong(r->reader == NULL);
}

static PyObject *reader_get_kind(pydds_reader_obj *r, void *c)
{
    (void)c;
    return PyUnicode_FromString(r->flags == DDS_READER_FORKED ? "forked"
                                                              : "thread");
}

static PyObject *reader_get_rank(pydds_reader_obj *r, void *c)
{
    (void)c;
    return PyLong_FromLong(r->owner ? r->owner->rank : -1);
}

static PyObject *reader_get_size(pydds_reader_obj *r, void *c)
{
    (void)c;
    return PyLong_FromLong(r->owner ? r->owner->size : 0);
}

static PyObject *reader_get_method(pydds_reader_obj *r, void *c)
{
    (void)c;
    return PyLong_FromLong(r->owner ? r->owner->method : -1);
}

static PyObject *reader_repr(pydds_reader_obj *r)
{
    return PyUnicode_FromFormat(
        "<pyddstore.Reader %s, rank %d of %d%s>",
        r->flags == DDS_READER_FORKED ? "forked" : "thread",
        r->owner ? r->owner->rank : -1, r->owner ? r->owner->size : 0,
        r->reader ? "" : ", closed");
}

static PyMethodDef reader_methods[] = {
    {"get", (PyCFunction)(void (*)(void))reader_get,
     METH_VARARGS | METH_KEYWORDS,
     "get(name, arr, start=0): as PyDDStore.get, through this reader."},
    {"get_batch", (PyCFunction)(void (*)(void))reader_get_batch,
     METH_FASTCALL | METH_KEYWORDS,
     "get_batch(name, arr, indices): as PyDDStore.get_batch, through this "
     "reader."},
    {"sizes", (PyCFunction)(void (*)(void))reader_sizes,
     METH_VARARGS | METH_KEYWORDS,
     "sizes(name, indices): as PyDDStore.sizes, through this reader."},
    {"get_ragged", (PyCFunction)(void (*)(void))reader_get_ragged,
     METH_VARARGS | METH_KEYWORDS,
     "get_ragged(name, indices, out=None): as PyDDStore.get_ragged, through "
     "this reader."},
    {"info", (PyCFunction)reader_info, METH_O,
     "info(name) -> (total_rows, disp, itemsize)"},
    {"info_full", (PyCFunction)reader_info_full, METH_O,
     "info_full(name) -> dict (see PyDDStore.info_full)"},
    {"offsets", (PyCFunction)reader_offsets, METH_O,
     "offsets(name) -> tuple of nranks+1 ints"},
    {"get_profile", (PyCFunction)reader_get_profile, METH_O,
     "get_profile(name) -> dict (summed over the store and its readers)"},
    {"close", (PyCFunction)reader_close, METH_NOARGS,
     "close(): release the reader (idempotent)."},
    {"__enter__", (PyCFunction)reader_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)reader_exit, METH_VARARGS,
     "close() on leaving a with-block."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef reader_getset[] = {
    {"store", (getter)reader_get_store, NULL, "the PyDDStore read from", NULL},
    {"closed", (getter)reader_get_closed, NULL, "True after close()", NULL},
    {"_handle", (getter)reader_get_handle, NULL,
     "libddstore handle of this reader (for the torch extension)", NULL},
    {"kind", (getter)reader_get_kind, NULL, "'thread' or 'forked'", NULL},
    {"rank", (getter)reader_get_rank, NULL, "the store's rank", NULL},
    {"size", (getter)reader_get_size, NULL, "the store's size", NULL},
    {"method", (getter)reader_get_method, NULL, "the store's method", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject pydds_ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyddstore.Reader",
    .tp_basicsize = sizeof(pydds_reader_obj),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A read context over a PyDDStore (PyDDStore.fork_reader(), "
              "PyDDStore.open_reader()): get, get_batch, sizes, get_ragged, "
              "info, info_full, "
              "offsets, get_profile, close.",
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_traverse = (traverseproc)reader_traverse,
    .tp_clear = (inquiry)reader_clear,
    .tp_methods = reader_methods,
    .tp_getset = reader_getset,
    .tp_repr = (reprfunc)reader_repr,
    .tp_weaklistoffset = offsetof(pydds_reader_obj, weakreflist),
};

int pydds_reader_type_ready(PyObject *module)
{
    if (PyType_Ready(&pydds_ReaderType) < 0)
        return -1;
    Py_INCREF(&pydds_ReaderType);
    if (PyModule_AddObject(module, "Reader", (PyObject *)&pydds_ReaderType) <
        0) {
        Py_DECREF(&pydds_ReaderType);
        return -1;
    }
    return 0;
}
