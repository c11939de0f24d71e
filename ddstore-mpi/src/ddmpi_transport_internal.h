/* ddstore-mpi: what the MPI RMA transport's files share (not installed):
 *
 *   ddmpi_transport.c  settings, windows (region create/destroy, the
 *                      finalize hook), epochs, create/destroy, ops table
 *   ddmpi_read.c       reads (MPI_Get; forked children)
 *
 * transport.c calls read.c, which does not call it.  Same-node shards are
 * core's node-local shard service (ddstore/shard.h): the store allocates,
 * maps and copies them; only the other ops reach ddmpi_read.
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
    int shm;                /* DDSTORE_MPI_SHM: same-node shards mapped
                               (DDS_TRANSPORT_CAP_NODE_MAP)               */
    uint64_t n_gets;        /* MPI_Get calls (atomic; for tests)            */
} ddmpi_transport_t;

typedef struct ddmpi_region {
    MPI_Win win;            /* MPI_WIN_NULL when not created                 */
    void *base;             /* local shard (not owned)                       */
    size_t bytes;
    uint64_t *shard_bytes;  /* every rank's shard size, for bounds checks    */
    int local_only;         /* one-rank communicator: no window (all reads
                               are of our own shard)                         */
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
/* read_multi (transport.h): every variable's MPI_Gets posted, then one
 * flush per window. */
int ddmpi_read_multi(void *ctx, void *reader, const dds_read_req_t *reqs,
                     size_t nreqs);
/* Non-zero once MPI_Finalize started (ddmpi_set_gone, by the finalize
 * hook): no MPI call may be made then. */
int ddmpi_gone(void);
void ddmpi_set_gone(void);
/* Watch for fork (once per process): a forked child reads with memcpy
 * only. */
void ddmpi_fork_watch(void);

#endif
