/* pyddstore._core: the C API capsule "pyddstore._core._C_API"
 * (ddstore/api.h), so the torch extension calls this module's copy of the
 * C libraries. */
#include "pydds.h"

#include "ddstore/log.h"

/* The store and reader behind obj, without locking.  -1 + exception. */
static int unwrap_impl(PyObject *obj, pydds_store_obj **s_p,
                       dds_store_t **store_p, dds_reader_t **reader_p)
{
    pydds_store_obj *s;
    dds_reader_t *rd = NULL;
    if (obj != NULL && PyObject_TypeCheck(obj, &pydds_StoreType)) {
        s = (pydds_store_obj *)obj;
    } else if (obj != NULL && PyObject_TypeCheck(obj, &pydds_ReaderType)) {
        pydds_reader_obj *r = (pydds_reader_obj *)obj;
        if (r->owner == NULL || r->reader == NULL) {
            dds_error(-DDS_EFREED, "this reader was closed");
            pydds_raise(-DDS_EFREED);
            return -1;
        }
        s = r->owner;
        rd = r->reader;
    } else {
        PyErr_Format(PyExc_TypeError,
                     "expected a pyddstore.PyDDStore or pyddstore.Reader, "
                     "got %s",
                     obj ? Py_TYPE(obj)->tp_name : "NULL");
        return -1;
    }
    if (PYDDS_STORE(s) == NULL) {
        dds_error(-DDS_EFREED,
                  "this PyDDStore was destroyed (interpreter exit or "
                  "deallocation); create a new store");
        pydds_raise(-DDS_EFREED);
        return -1;
    }
    *s_p = s;
    if (store_p)
        *store_p = PYDDS_STORE(s);
    if (reader_p)
        *reader_p = rd;
    return 0;
}

static int capi_unwrap(PyObject *obj, dds_store_t **store_p,
                       dds_reader_t **reader_p)
{
    pydds_store_obj *s;
    return unwrap_impl(obj, &s, store_p, reader_p);
}

static PyObject *capi_raise_error(int rc)
{
    return pydds_raise(rc);
}

static int capi_acquire(PyObject *obj, dds_store_t **store_p,
                        dds_reader_t **reader_p)
{
    pydds_store_obj *s;
    if (unwrap_impl(obj, &s, NULL, NULL) < 0)
        return -1;
    Py_INCREF(obj);
    if (pydds_store_enter(s) < 0) {
        Py_DECREF(obj);
        return -1;
    }
    /* Re-read under the lock (a reader may have been closed meanwhile). */
    if (PyObject_TypeCheck(obj, &pydds_ReaderType) &&
        ((pydds_reader_obj *)obj)->reader == NULL) {
        pydds_store_leave(s);
        Py_DECREF(obj);
        dds_error(-DDS_EFREED, "this reader was closed");
        pydds_raise(-DDS_EFREED);
        return -1;
    }
    if (store_p)
        *store_p = PYDDS_STORE(s);
    if (reader_p)
        *reader_p = PyObject_TypeCheck(obj, &pydds_ReaderType)
                        ? ((pydds_reader_obj *)obj)->reader
                        : NULL;
    return 0;
}

/* May run without the GIL: only unlocks.  The reference taken by acquire
 * is dropped with the GIL (PyGILState_Ensure). */
static void capi_release(PyObject *obj)
{
    pydds_store_obj *s;
    PyGILState_STATE g;
    if (obj == NULL)
        return;
    s = PyObject_TypeCheck(obj, &pydds_ReaderType)
            ? ((pydds_reader_obj *)obj)->owner
            : (pydds_store_obj *)obj;
    if (s != NULL)
        pydds_store_leave(s);
    g = PyGILState_Ensure();
    Py_DECREF(obj);
    PyGILState_Release(g);
}

static int capi_keep_alive(PyObject *obj, const char *name, PyObject *ref)
{
    pydds_store_obj *s;
    if (unwrap_impl(obj, &s, NULL, NULL) < 0)
        return -1;
    return pydds_store_keep(s, name, ref);
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

static int capi_indices(PyObject *obj, int64_t *(*alloc)(void *ctx, size_t n), void *ctx)
{
    pydds_indices_t ix;
    int64_t *dst;
    if (alloc == NULL) {
        PyErr_SetString(PyExc_SystemError, "pyddstore C API indices: NULL alloc");
        return -1;
    }
    if (pydds_indices_get(obj, &ix) != 0)
        return -1;
    dst = alloc(ctx, ix.n);
    if (dst == NULL) {
        pydds_indices_release(&ix);
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        return -1;
    }
    if (ix.n)
        memcpy(dst, ix.rows, ix.n * sizeof(int64_t));
    pydds_indices_release(&ix);
    return 0;
}

static const pyddstore_api_t capi_table = {
    .size = sizeof(pyddstore_api_t),
    .version = PYDDSTORE_API_VERSION,
    .unwrap = capi_unwrap,
    .raise_error = capi_raise_error,
    .var_info = dds_store_var_info,
    .var_offsets = dds_store_var_offsets,
    .var_add = dds_store_var_add,
    .get = dds_store_get,
    .get_batch = dds_store_get_batch,
    .recv_register = dds_store_recv_register,
    .recv_unregister = dds_store_recv_unregister,
    .profile = dds_store_profile,
    .last_error = dds_last_error,
    .strerror = dds_strerror,
    .log_write = dds_log_write,
    .log_enabled = dds_log_enabled,
    .var_update = dds_store_var_update,
    .acquire = capi_acquire,
    .release = capi_release,
    .keep_alive = capi_keep_alive,
    .error = dds_error,
    .indices = capi_indices,
    .ragged_sizes = dds_store_ragged_sizes,
    .ragged_get_batch = dds_store_ragged_get_batch,
};

PyObject *pydds_capi_capsule(void)
{
    return PyCapsule_New((void *)&capi_table, PYDDSTORE_API_CAPSULE, NULL);
}
