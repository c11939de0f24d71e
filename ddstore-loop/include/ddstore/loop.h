/* ddstore-loop: an in-process loopback transport (core's transport.h).
 *
 * Reads are memcpy from the owners' shards: it serves ranks that share one
 * address space (a one-rank store, or several ranks as threads of one
 * process, e.g. over a FileComm or core's test world).  It is the hub's
 * method 3 ("loop", a test transport): one package, one row of the backend
 * table (libddstore/src/ddstore_backends.c), one build option
 * (//bazel/config:loop).
 *
 *   dds_transport_t tr;
 *   int rc = ddloop_transport_create(&comm, &tr);   // collective
 *   // hand tr to dds_store_create (store.h)
 */
#ifndef DDSTORE_LOOP_H
#define DDSTORE_LOOP_H

#include "ddstore/comm.h"
#include "ddstore/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Make the transport over `comm` (borrowed; the store keeps it alive for
 * the transport's lifetime).  Collective: every rank says which process it
 * is, and ranks of different processes fail on every rank together
 * (-DDS_ENOSYS naming the first foreign rank).  0 and *transport_p
 * (ownership to the caller: ops->destroy(ctx), or to a store), or a
 * negative DDS_E* with the detail in dds_last_error(). */
int ddloop_transport_create(const dds_comm_t *comm,
                            dds_transport_t *transport_p);

/* ddstore-loop's version (VERSION), at run time. */
const char *ddloop_version(void);

#ifdef __cplusplus
}
#endif
#endif
