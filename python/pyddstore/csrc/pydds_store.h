/* pyddstore._core: what the PyDDStore files share (private to the extension).
 *
 * The type is split by concern; the calls between the files form a DAG
 * (ci/check_shape.py), from the top:
 *
 *   pydds_store.c       the type: method table, destruction, the wrappers
 *                       that pick a store-level reader, join, fork_reader
 *   pydds_store_new.c   the constructor (arguments, opening, registration)
 *   pydds_store_vars.c  init/add (and ragged), update, free, epochs,
 *                       receive buffers: collective calls agree on failure
 *   pydds_reader.c      the Reader type (calls the read bodies)
 *   pydds_store_read.c  read bodies and queries shared by store and readers
 *   pydds_life.c        the life lock and the list of live stores
 *
 * Argument helpers (names, integers) are pydds_buffer.c's.
 */
#ifndef PYDDS_STORE_H
#define PYDDS_STORE_H

#include "pydds.h"

/* ---- life lock (pydds_life.c) ------------------------------------------- */

/* Record "this PyDDStore was destroyed" (-DDS_EFREED) as dds_error detail
 * and return the code. */
int pydds_store_gone(void);
/* With the GIL released: the life lock for reading; 0, or -DDS_EFREED
 * (lock not held) when the store is destroyed. */
int pydds_store_enter_nogil(pydds_store_obj *s);
/* The C store, or NULL with DDStoreError set (destroyed); GIL held. */
dds_store_t *pydds_store_alive(pydds_store_obj *s);

/* ---- constructor (pydds_store_new.c) ------------------------------------ */

PyObject *pydds_store_new(PyTypeObject *type, PyObject *args, PyObject *kw);

/* ---- variables (pydds_store_vars.c): PyDDStore methods ------------------ */

PyObject *pydds_store_init(pydds_store_obj *s, PyObject *args, PyObject *kw);
PyObject *pydds_store_init_ragged(pydds_store_obj *s, PyObject *args,
                                  PyObject *kw);
PyObject *pydds_store_add(pydds_store_obj *s, PyObject *args, PyObject *kw);
PyObject *pydds_store_add_ragged(pydds_store_obj *s, PyObject *args,
                                 PyObject *kw);
PyObject *pydds_store_local_view(pydds_store_obj *s, PyObject *name_o);
PyObject *pydds_store_allgather_bytes(pydds_store_obj *s, PyObject *arg);
PyObject *pydds_store_barrier(pydds_store_obj *s, PyObject *unused);
PyObject *pydds_store_update(pydds_store_obj *s, PyObject *args,
                             PyObject *kw);
PyObject *pydds_store_update_ragged(pydds_store_obj *s, PyObject *args,
                                    PyObject *kw);
PyObject *pydds_store_free(pydds_store_obj *s, PyObject *unused);
PyObject *pydds_store_epoch_begin(pydds_store_obj *s, PyObject *unused);
PyObject *pydds_store_epoch_end(pydds_store_obj *s, PyObject *unused);
PyObject *pydds_store_register_recv(pydds_store_obj *s, PyObject *args,
                                    PyObject *kw);
PyObject *pydds_store_unregister_recv(pydds_store_obj *s, PyObject *args,
                                      PyObject *kw);

#endif
