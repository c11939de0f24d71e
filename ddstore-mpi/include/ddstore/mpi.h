/* ddstore-mpi: MPI communicator and MPI RMA transport (method 0).
 *
 * This header is the only ddstore header that includes <mpi.h>; core's
 * headers stay free of MPI types.  The library provides
 *
 *   - MPI lifetime helpers (ddmpi_init / ddmpi_finalize_if_ours /
 *     ddmpi_finalized): MPI is started lazily, only when a method-0 store or
 *     an MPI communicator is created (never at import), with
 *     MPI_THREAD_MULTIPLE requested;
 *   - a core communicator (comm.h) over a duplicate of an MPI communicator;
 *   - a core transport (transport.h) doing one-sided reads with passive-target
 *     RMA: one window per variable (MPI_Win_create over the shard,
 *     disp_unit 1), MPI_Win_lock_all(MPI_MODE_NOCHECK) once at creation,
 *     reads = MPI_Get per planned read + MPI_Win_flush_local per owner.  No
 *     collective and no participation of the owner on the read path.
 *
 * Errors: every function returns 0 or a negative DDS_E* code (errors.h) with
 * the detail in dds_last_error(); MPI errors are translated by
 * ddmpi_translate_error (MPI_Error_string in the detail).  The library never
 * prints, exits or aborts; it logs through core's logger (subsystem MPI).
 *
 * Environment (registered in core's config registry, library "mpi"):
 *   DDSTORE_MPI_MAX_READ_BYTES  largest single MPI_Get in bytes (default 1G,
 *                               1 .. 2^31-1); larger reads are split.
 */
#ifndef DDSTORE_MPI_H
#define DDSTORE_MPI_H

#include "ddstore/visibility.h"
/* the public API of ddstore-mpi (see ddstore/visibility.h) */
#define DDMPI_API DDS_API

#include <mpi.h>

#include "ddstore/comm.h"
#include "ddstore/settings.h"
#include "ddstore/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Default (and upper bound of) the transport's max_read_bytes: 1 GiB keeps
 * every MPI count far below INT_MAX. */
#define DDMPI_MAX_READ_BYTES_DEFAULT ((size_t)1 << 30)

/* Start MPI if nobody has: MPI_Init_thread(MPI_THREAD_MULTIPLE) when
 * MPI_Initialized() is false; otherwise only query the thread level.
 *   provided_p           out (may be NULL): the thread level MPI provides
 *                        (MPI_THREAD_SINGLE .. MPI_THREAD_MULTIPLE).
 *   initialized_by_us_p  out (may be NULL): 1 if this library initialised
 *                        MPI (now or in an earlier call), else 0.
 * Returns 0; -DDS_EIO if MPI was already finalized (it cannot be restarted)
 * or MPI_Init_thread failed.  Local (MPI_Init_thread is collective over the
 * job only in the sense that every process must call it).  Thread-safe:
 * serialised by a process-wide mutex; call it from the thread that will be
 * MPI's main thread when the level may end up below MULTIPLE. */
DDMPI_API int ddmpi_init(int *provided_p, int *initialized_by_us_p);

/* MPI_Finalize if ddmpi_init started MPI and it is not finalized yet;
 * otherwise nothing (MPI started by mpi4py or the application is theirs to
 * finish).  Objects of this library may outlive it: windows still open are
 * closed by the finalize hook (see ddmpi_transport_create), and destroying
 * communicators, transports and regions afterwards frees local memory only.
 * Collective over the job like MPI_Finalize.  Returns 0 or the translated
 * MPI error.  Thread-safe (same mutex as ddmpi_init). */
DDMPI_API int ddmpi_finalize_if_ours(void);

/* Non-zero once MPI_Finalize has been called (MPI_Finalized); callable at any
 * time, from any thread. */
DDMPI_API int ddmpi_finalized(void);

/* A core communicator over MPI_Comm_dup(comm) with MPI_ERRORS_RETURN on the
 * duplicate.  ops->name is "mpi"; allgather (MPI_Iallgather of MPI_BYTE,
 * `bytes` <= INT_MAX), allreduce_i64 (MPI_Iallreduce of MPI_INT64_T,
 * n <= INT_MAX / 2), barrier (MPI_Ibarrier), each completed by MPI_Test in a
 * loop bounded by DDSTORE_COLLECTIVE_TIMEOUT_S (read at creation; comm.h's
 * dds_comm_timeout_s): a collective that not every rank entered in time
 * fails with -DDS_ETIMEDOUT on the ranks that did (MPI cannot tell which
 * ranks are missing, nor cancel the request: it and its internal buffers
 * are abandoned, the caller's memory is never touched afterwards), and the
 * communicator then refuses every later collective at once.  The loop spins
 * briefly, then yields, then sleeps (up to 1 ms) while it waits; after
 * DDSTORE_COLLECTIVE_WARN_S it logs once (WARN) which collective and store
 * call wait.  With DDSTORE_COLLECTIVE_TIMEOUT_S=inf the blocking MPI calls
 * are used instead (MPI's nonblocking allreduce costs about twice its
 * blocking one).  destroy frees the duplicate (skipped after MPI_Finalize,
 * and for a communicator whose collective timed out: its abandoned request
 * stays in MPI's progress engine, and freeing the communicator under it made
 * MPI_Finalize segfault) and the context.
 *   comm    in: any intracommunicator; the caller keeps it (the dup is
 *           independent of it).
 *   comm_p  out: filled on success (rank and size of `comm`); untouched on
 *           failure.
 * Collective over `comm` (MPI_Comm_dup).  MPI must be initialised
 * (ddmpi_init).  Returns 0, -DDS_EINVAL (NULL argument, MPI_COMM_NULL, MPI
 * not initialised or finalized), -DDS_ENOMEM (on any rank: every rank
 * fails), or a translated MPI error.
 * The ops follow comm.h: one thread per rank at a time, every rank in the
 * same order; after MPI_Finalize they return -DDS_EFREED ("MPI is already
 * finalized") without calling MPI. */
DDMPI_API int ddmpi_comm_create(MPI_Comm comm, dds_comm_t *comm_p);

/* The same communicator ops over the caller's `comm` itself, no dup: not
 * collective, no agreement (a bad DDSTORE_COLLECTIVE_* value means its
 * default here).  The caller keeps `comm` valid while comm_p lives and
 * frees it; destroy frees only the context.  Its collectives are in the
 * order of the caller's own on `comm` (what a Python layer over a user's
 * mpi4py communicator needs: pyddstore._core.Collective).  Returns 0 or
 * -DDS_EINVAL / -DDS_ENOMEM. */
DDMPI_API int ddmpi_comm_borrow(MPI_Comm comm, dds_comm_t *comm_p);

/* The MPI RMA transport (ops->name "mpi") over MPI_Comm_dup(comm).
 *   transport_p  out: ops, ctx, caps and max_read_bytes; untouched on
 *                failure.
 * caps: DDS_TRANSPORT_CAP_LOCAL_SELF always; DDS_TRANSPORT_CAP_THREAD_SAFE
 * only when MPI_Query_thread() == MPI_THREAD_MULTIPLE (otherwise read() and
 * the transport's collective calls are serialised on a process-wide mutex
 * shared with the communicator, and a warning is logged once).
 * max_read_bytes = DDSTORE_MPI_MAX_READ_BYTES (default 1 GiB).
 *
 * The ops (see transport.h for the contract):
 *   region_create   collective: MPI_Win_create over the shard (base may be
 *                   NULL when bytes == 0), info no_locks=false,
 *                   same_disp_unit=true, MPI_ERRORS_RETURN, then
 *                   MPI_Win_lock_all(MPI_MODE_NOCHECK) for the window's whole
 *                   life.  Over a one-rank communicator no window is made
 *                   (every read is of the own shard, a memcpy; Open MPI
 *                   cannot create a window in a lone process anyway).  Host
 *                   shards only: a GPU shard on any rank fails every rank
 *                   with -DDS_ENOSYS.  A failure on one rank fails all ranks
 *                   (the lowest failing rank's code).
 *   region_destroy  collective: MPI_Win_unlock_all + MPI_Win_free; after
 *                   MPI_Finalize frees local memory only and returns 0.
 *   region_abandon  local: the window is left open (not freed, also not at
 *                   MPI_Finalize), the region's own memory freed.
 *   read            local, no owner participation, any thread: every op is
 *                   checked first (owner in range, bytes inside the owner's
 *                   shard: -DDS_EINVAL / -DDS_ERANGE, nothing posted), then
 *                   one MPI_Get per op (MPI_BYTE; split at max_read_bytes;
 *                   displacement MPI_Aint bytes; the own rank's bytes are
 *                   memcpy'd), then MPI_Win_flush_local once per run of ops
 *                   with the same owner (the planner groups ops by owner).
 *                   Everything posted is completed before returning, also
 *                   after an error.  Host destinations only (-DDS_ENOSYS for
 *                   GPU memory; staging comes with the GPU layer);
 *                   dst_handle / staging_handle are ignored (MPI needs no
 *                   registration).  Adds DDS_PROF_NS_POST (posting the gets)
 *                   and DDS_PROF_NS_COMPLETE (the flushes) to `prof` (the
 *                   store counts DDS_PROF_READS).  Once MPI_Finalize has
 *                   started: -DDS_EIO.  There is no read timeout: MPI has no
 *                   way to cancel a posted get, and a dead peer is handled by
 *                   MPI's own fault handling (usually the job aborts).
 *   epoch_begin/end local: MPI_Win_sync on every open window, so that
 *                   the rows this rank wrote (var_update) are in the
 *                   window's public copy before the store's synchronising
 *                   step (the store then agrees over its communicator: see
 *                   store.h).  The passive-target epoch itself stays open
 *                   (lock_all at creation); each read completes its own gets
 *                   with flush_local.
 *   destroy         frees the communicator duplicate (unless finalized).
 *   reader_open/close, recv_register/unregister, progress: NULL (one
 *                   default reader; nothing to register; MPI progresses
 *                   inside MPI_Win_flush_local).
 *
 * MPI_Finalize with windows still open (a program that never called free):
 * the first transport created installs a delete callback on an attribute of
 * MPI_COMM_SELF, which MPI_Finalize runs first; it unlocks and frees every
 * open window in creation order (the same on every rank), so MPI_Finalize
 * does not meet open windows (MPICH over UCX aborts on them).
 *
 * Collective over `comm`; MPI must be initialised.  Returns 0, -DDS_EINVAL,
 * -DDS_ENOMEM, -DDS_ECONFIG (bad DDSTORE_MPI_MAX_READ_BYTES on any rank:
 * every rank fails) or a translated MPI error. */
DDMPI_API int ddmpi_transport_create(MPI_Comm comm, dds_transport_t *transport_p);

/* Version of this library at run time, "MAJOR.MINOR.PATCH" from
 * ddstore-mpi/VERSION (Bazel generates ddstore/mpi_version.h with
 * DDMPI_VERSION; other builds pass -DDDMPI_VERSION='"x.y.z"', else
 * "0.0.0-unknown").  Never NULL. */
DDMPI_API const char *ddmpi_version(void);

/* Translate an MPI return code: MPI_SUCCESS -> 0; otherwise records
 * "<what>: <MPI_Error_string> (MPI error class C)" in dds_last_error() and
 * returns -DDS_ENOMEM for MPI_ERR_NO_MEM, -DDS_ERANGE for MPI_ERR_RMA_RANGE,
 * else -DDS_EIO.  `what` names the call (may be NULL).  Safe after
 * MPI_Finalize (the MPI message is then omitted).  Thread-safe. */
DDMPI_API int ddmpi_translate_error(int mpi_rc, const char *what);

/* This library's settings, declared once (settings.h). */
#define DDMPI_SETTINGS(X)                                                      \
    X(max_read_bytes, "DDSTORE_MPI_MAX_READ_BYTES", SIZE, "1G", NULL, "mpi",   \
      "largest single MPI_Get of method 0 in bytes (1 .. 2147483647); larger " \
      "reads are split")                                                       \
    X(shm, "DDSTORE_MPI_SHM", BOOL, "1", NULL, "mpi",                          \
      "method 0: map the shards of ranks on this node (memfd shared memory) "  \
      "and read them with memcpy, also from forked DataLoader workers; 0 "     \
      "reads them with MPI_Get as if they were on other nodes")

typedef struct ddmpi_settings {
    DDS_SETTINGS_FIELDS(DDMPI_SETTINGS)
} ddmpi_settings_t;

/* Register this library's DDSTORE_* variables with core's config registry
 * (idempotent; done by the create functions, exposed for ddstore-info). */
DDMPI_API void ddmpi_config_register(void);

/* Register and read this library's settings (read once by
 * ddmpi_transport_create).  0 or -DDS_ECONFIG naming the variable. */
DDMPI_API int ddmpi_settings_read(ddmpi_settings_t *s);

#ifdef __cplusplus
}
#endif
#endif
