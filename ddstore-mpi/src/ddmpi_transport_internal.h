/* ddstore-mpi: what the MPI RMA transport's files share (not installed):
 *
 *   ddmpi_transport.c  settings, windows (region create/destroy, the
 *                      finalize hook), epochs, create/destroy, ops table
 *   ddmpi_shard.c      shards in POSIX shared memory (shard_alloc/_free)
 *   ddmpi_read.c       reads (MPI_Get or same-node memcpy; forked children)
 *
 * transport.c calls the other two; they call neither it nor each other.
 */
#ifndef DDMPI_TRANSPORT_INTERNAL_H
#define DDMPI_TRANSPORT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ddstore/mpi.h"
#include "ddstore/transport.h"
#include "ddmpi_internal.h"

#define DDMPI_NAME_MAX 127  /* variable names are kept for messages only */

typedef struct ddmpi_transport {
    MPI_Comm comm;          /* our duplicate                                 */
    int rank;
    int size;
    int serial;             /* MPI below THREAD_MULTIPLE: serialise calls    */
    size_t max_read;        /* largest MPI_Get count (<= INT_MAX)            */
    MPI_Comm node;          /* our ranks on this node (MPI_COMM_TYPE_SHARED) */
    int *node_rank;         /* per rank of comm: its rank in `node`, or -1  */
    ddmpi_cid_plan_t cids;  /* Open MPI 4.x: context ids of our windows     */
    int shm;                /* DDSTORE_MPI_SHM: map same-node shards        */
    uint64_t n_gets;        /* MPI_Get calls (atomic; for tests)            */
    uint64_t n_shm;         /* ops copied from a same-node peer's mapping   */
} ddmpi_transport_t;

/* shard_alloc's token: this rank's shard and its node peers' mappings. */
#define DDMPI_SHM_NAME 64
typedef struct ddmpi_shard {
    void *base;             /* this rank's shard                             */
    size_t bytes;
    int mapped;             /* base is a MAP_SHARED mapping (a POSIX shared
                               memory object, or anonymous), shared with
                               forked children; else malloc                */
    int nnode;              /* ranks of the node communicator                */
    const char **peer;      /* per node rank: its shard mapped here, or NULL */
    size_t *peer_bytes;
} ddmpi_shard_t;

typedef struct ddmpi_region {
    MPI_Win win;            /* MPI_WIN_NULL when not created                 */
    void *base;             /* local shard (not owned)                       */
    size_t bytes;
    uint64_t *shard_bytes;  /* every rank's shard size, for bounds checks    */
    const char **peer_base; /* per rank: its shard mapped here (same node,
                               shared window), or NULL: MPI_Get          */
    int *shared;            /* region_create scratch: ranks whose shard is
                               in a shared window                        */
    int local_only;         /* one-rank communicator: no window (all reads
                               are of our own shard)                         */
    int fork_bad;           /* -1: every rank's rows are in MAP_SHARED memory
                               mapped here, so a forked child reads them all
                               with memcpy; else the first rank whose
                               shard is not (on another node, no shared
                               memory, DDSTORE_MPI_SHM=0)                  */
    int serial;             /* the transport's serial flag                   */
    struct ddmpi_region *prev, *next;   /* live windows, creation order      */
    char name[DDMPI_NAME_MAX + 1];
} ddmpi_region_t;

/* ---- ddmpi_read.c ------------------------------------------------------- */

/* The transport's read (transport.h). */
int ddmpi_read(void *ctx, void *reader, void *region,
               const dds_read_op_t *ops, size_t nops, void *dst,
               void *dst_handle, const dds_mem_t *dst_mem, void *staging,
               void *staging_handle, dds_prof_t *prof);
/* Non-zero once MPI_Finalize started (ddmpi_set_gone, by the finalize
 * hook): no MPI call may be made then. */
int ddmpi_gone(void);
void ddmpi_set_gone(void);
/* Watch for fork (once per process): a forked child reads with memcpy
 * only. */
void ddmpi_fork_watch(void);

/* ---- ddmpi_shard.c ------------------------------------------------------ */

int ddmpi_shard_alloc(void *ctx, size_t bytes, void **base_p,
                      void **token_p);
void ddmpi_shard_free(void *ctx, void *base, void *token);

#endif
