/* libddstore: communicators implemented by a binding's objects.
 *
 * pyddstore.PyDDStore(comm) accepts any object with an attribute
 * `_dds_comm`: a Python capsule named PYDDSTORE_COMM_CAPSULE whose pointer
 * is a pyddstore_comm_provider_t that stays valid while the capsule lives
 * (pyddstore.FileComm, the torch.distributed adapter of the torch
 * extension, _core's one-rank "self" communicator).  This is an object
 * protocol (how an object says "I am a communicator"), not an API table
 * between modules: the provider's create() fills a core dds_comm_t.
 * _core calls create() once per store, with the GIL held; the communicator
 * it fills belongs to the store from then on (dds_comm_destroy when the
 * store is destroyed, possibly without the GIL: use PyGILState_Ensure in
 * ops that touch Python objects).  needs_gil != 0: the ops call back into
 * Python, so _core keeps the GIL held around every call that may reach
 * them (collectives, destroy) instead of releasing it.  No Python header
 * is needed to fill one.
 */
#ifndef DDSTORE_COMM_PROVIDER_H
#define DDSTORE_COMM_PROVIDER_H

#include <stddef.h>

#include "ddstore/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
#endif
