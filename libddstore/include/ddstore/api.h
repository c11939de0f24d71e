/* libddstore: the C API table that pyddstore._core exports as the capsule
 * "pyddstore._core._C_API" (the pattern numpy uses for its C API).
 * Headers only (//libddstore:api): the table is filled by _core
 * (python/pyddstore/csrc/pydds_capi.c).
 *
 * The torch extension imports this table instead of linking the C libraries
 * a second time, so that there is one copy of the library state and a store
 * created by either module is the same object.  A change that grows the
 * table appends at the end and bumps PYDDSTORE_API_VERSION; the import
 * below accepts exactly its own version (both extensions are built
 * together).  Version 2 appended ragged_sizes and ragged_get_batch.
 *
 *   const pyddstore_api_t *api = pyddstore_api_import();   // NULL + exception
 */
#ifndef DDSTORE_API_H
#define DDSTORE_API_H

#include <Python.h>

#include "ddstore/errors.h"
#include "ddstore/log.h"
#include "ddstore/store.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PYDDSTORE_API_CAPSULE "pyddstore._core._C_API"
#define PYDDSTORE_API_VERSION 2

typedef struct pyddstore_api {
    size_t size;        /* sizeof(pyddstore_api_t) in _core */
    int version;        /* PYDDSTORE_API_VERSION of _core   */

    /* The store behind a PyDDStore or reader object, and the reader to read
     * with (NULL = the store's default reader).  On a wrong object or a
     * freed store: return -1 with a Python exception set. */
    int (*unwrap)(PyObject *obj, dds_store_t **store_p, dds_reader_t **reader_p);

    /* Set the documented Python exception for `rc` (message from
     * dds_last_error()) and return NULL. */
    PyObject *(*raise_error)(int rc);

    /* The store functions of store.h, called through _core's copy. */
    int (*var_info)(dds_store_t *, const char *, dds_var_info_t *);
    int (*var_offsets)(dds_store_t *, const char *, int64_t *);
    int (*var_add)(dds_store_t *, const char *, const void *, int64_t, size_t,
                   size_t, dds_dtype_t, const dds_mem_t *, int);
    int (*get)(dds_store_t *, dds_reader_t *, const char *, const dds_buf_t *,
               int64_t);
    int (*get_batch)(dds_store_t *, dds_reader_t *, const char *,
                     const dds_buf_t *, const int64_t *, size_t);
    int (*recv_register)(dds_store_t *, void *, size_t, const dds_mem_t *);
    int (*recv_unregister)(dds_store_t *, void *, size_t);
    int (*profile)(dds_store_t *, const char *, dds_profile_t *);
    const char *(*last_error)(void);
    const char *(*strerror)(int);
    void (*log_write)(dds_log_level_t, dds_log_subsys_t, const char *, ...);
    int (*log_enabled)(dds_log_level_t, dds_log_subsys_t);

    /* Local: overwrite rows [offset, offset+src->nrows) of this rank's
     * shard (store.h dds_store_var_update). */
    int (*var_update)(dds_store_t *, const char *, const dds_buf_t *, int64_t);

    /* Like unwrap, and pins the store against destruction (a PyDDStore is
     * destroyed at interpreter exit, or when it is deallocated) until
     * release(obj).  Call with the GIL held (acquire drops it while it
     * waits); then release the GIL for the read; call release(obj) after
     * the read (with or without the GIL).  -1 + exception as unwrap. */
    int (*acquire)(PyObject *obj, dds_store_t **store_p,
                   dds_reader_t **reader_p);
    void (*release)(PyObject *obj);

    /* Keep `ref` alive until the store releases variable `name` (free(),
     * destroy): for shards registered in place (DDS_ADD_IN_PLACE).  `obj`
     * is a PyDDStore or reader.  GIL held.  0, or -1 + exception. */
    int (*keep_alive)(PyObject *obj, const char *name, PyObject *ref);

    /* errors.h dds_error in _core's copy: record the detail that the next
     * raise_error / last_error reports (a communicator implemented outside
     * _core explains its failures this way).  Returns rc. */
    int (*error)(int rc, const char *fmt, ...);

    /* The one converter of row indices (_core's, used by get_batch too):
     * any 1-D integer buffer (numpy array of any integer width, array.array,
     * memoryview), a host DLPack tensor, or a sequence of Python integers
     * (floats refused), each value as int64 (an unsigned one above INT64_MAX
     * is an IndexError).  alloc(ctx, n) returns room for the n rows (NULL =
     * out of memory, with an exception set), which are copied there.  GIL
     * held.  0, or -1 + exception (TypeError / ValueError / IndexError). */
    int (*indices)(PyObject *obj, int64_t *(*alloc)(void *ctx, size_t n), void *ctx);

    /* Version 2: ragged variables (store.h dds_store_ragged_sizes and
     * dds_store_ragged_get_batch; -DDS_ENOSPC from get_batch when dst is
     * smaller than the samples' total, with the lengths and the total
     * filled and nothing read).  Local; call them between acquire and
     * release with the GIL released, like get_batch. */
    int (*ragged_sizes)(dds_store_t *, dds_reader_t *, const char *,
                        const int64_t *, size_t, int64_t *);
    int (*ragged_get_batch)(dds_store_t *, dds_reader_t *, const char *,
                            const dds_buf_t *, const int64_t *, size_t,
                            int64_t *, int64_t *);
} pyddstore_api_t;

/* Communicators implemented outside _core (pyddstore.FileComm, a
 * torch.distributed group adapter) are passed to PyDDStore(comm) as any
 * object with an attribute `_dds_comm`: a capsule named
 * PYDDSTORE_COMM_CAPSULE whose pointer is a pyddstore_comm_provider_t that
 * stays valid while the capsule lives.  _core calls create() once per store,
 * with the GIL held; the communicator it fills belongs to the store from
 * then on (dds_comm_destroy when the store is destroyed, possibly without
 * the GIL: use PyGILState_Ensure in ops that touch Python objects).
 * needs_gil != 0: the ops call back into Python, so _core keeps the GIL
 * held around every call that may reach them (collectives, destroy)
 * instead of releasing it. */
#define PYDDSTORE_COMM_CAPSULE "pyddstore._dds_comm"

typedef struct pyddstore_comm_provider {
    size_t size;            /* sizeof(pyddstore_comm_provider_t)           */
    const char *name;       /* "file", "torch", ...                        */
    int needs_gil;
    /* Collective over the communicator's ranks: fill *comm_p (rank, size,
     * ops, ctx).  0, or a negative DDS_E* code with dds_error() detail. */
    int (*create)(void *arg, dds_comm_t *comm_p);
    void *arg;
} pyddstore_comm_provider_t;

static inline const pyddstore_api_t *pyddstore_api_import(void)
{
    const pyddstore_api_t *api =
        (const pyddstore_api_t *)PyCapsule_Import(PYDDSTORE_API_CAPSULE, 0);
    if (api == NULL)
        return NULL;
    if (api->version != PYDDSTORE_API_VERSION ||
        api->size != sizeof(pyddstore_api_t)) {
        PyErr_Format(PyExc_ImportError,
                     "pyddstore._core C API version %d (%zu bytes), expected "
                     "%d (%zu bytes): rebuild both extensions together",
                     api->version, api->size, PYDDSTORE_API_VERSION,
                     sizeof(pyddstore_api_t));
        return NULL;
    }
    return api;
}

#ifdef __cplusplus
}
#endif
#endif
