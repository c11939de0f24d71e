/* ddstore-mpi: private helpers shared by ddmpi_comm.c and
 * ddmpi_transport.c (not installed). */
#ifndef DDMPI_INTERNAL_H
#define DDMPI_INTERNAL_H

#include <mpi.h>

/* Non-zero if MPI provides less than MPI_THREAD_MULTIPLE: then every MPI call
 * of this library (communicator ops, region create/destroy, reads) runs under
 * one process-wide mutex so that threads never enter MPI at once.  Logs a
 * warning once.  MPI must be initialised. */
int ddmpi_need_serial(void);

/* The process-wide mutex (no-ops when `serial` is 0).  It is the innermost
 * lock: nothing else is acquired while it is held (ddmpi_transport.c takes
 * its list of live windows before it). */
void ddmpi_serial_lock(int serial);
void ddmpi_serial_unlock(int serial);

/* Open MPI 4.x osc/rdma names the shared-memory file of a window after the
 * context id of the window's communicator, which disjoint communicators
 * (the groups of a split) share: windows of two groups created at once on
 * one node collide (ddmpi_ompi_cid.c).  A plan gives this communicator's
 * windows context ids = res (mod mod); mod 0: nothing to do (another MPI,
 * Open MPI 5+, a communicator that cannot meet another one on a node, or
 * anything unexpected; a debug message says which). */
typedef struct ddmpi_cid_plan {
    int mod;
    int res;
} ddmpi_cid_plan_t;

/* Collective over comm (node: comm's ranks on this node).  Never fails:
 * problems disable the plan on every member alike. */
void ddmpi_cid_plan_init(MPI_Comm comm, MPI_Comm node, ddmpi_cid_plan_t *plan);

/* Collective over comm, just before MPI_Win_create(comm): duplicates comm
 * until the next duplicate's context id matches the plan, holding the
 * others.  Returns how many are held in *held_p (free them with
 * ddmpi_cid_release after MPI_Win_create).  Never fails (a miss is only
 * logged); every member takes the same decisions. */
int ddmpi_cid_steer(MPI_Comm comm, const ddmpi_cid_plan_t *plan,
                    const char *what, MPI_Comm **held_p);
void ddmpi_cid_release(MPI_Comm *held, int n);

/* Test hook (ddmpi_transport.c): MPI_Get calls of the transport, and ops
 * the store served by memcpy from same-node peers' mapped shards (core's
 * dds_shard_counts: process-wide). */
#include <stdint.h>
#include "ddstore/transport.h"
void ddmpi_transport_counts(const dds_transport_t *tr, uint64_t *gets,
                            uint64_t *shm);

/* dds_comm_agree_named over `comm` with blocking MPI_Allreduce (for the
 * create functions, before a dds_comm_t exists): 0 everywhere, or every
 * rank returns the lowest failing rank's code with "rank R: <detail>". */
int ddmpi_agree_named(MPI_Comm comm, int rc);

#endif
