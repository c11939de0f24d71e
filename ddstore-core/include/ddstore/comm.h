/* ddstore-core: the communicator interface.
 *
 * The store and the transports do every collective through this small ops
 * table: MPI (ddstore-mpi), files in a shared directory (FileComm),
 * torch.distributed (through Python callbacks) implement it.  All calls are
 * collective over the communicator's ranks and must be called by every rank
 * in the same order, from one thread per rank at a time.
 */
#ifndef DDSTORE_COMM_H
#define DDSTORE_COMM_H


#include "ddstore/visibility.h"
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DDS_REDUCE_MIN = 0, DDS_REDUCE_MAX = 1, DDS_REDUCE_SUM = 2 } dds_reduce_op_t;

typedef struct dds_comm_ops {
    size_t size;        /* sizeof(dds_comm_ops_t) as compiled by the implementer */
    const char *name;   /* "mpi", "file", "torch", "self" */
    /* Every rank contributes `bytes` bytes; `recv` receives nranks*bytes in
     * rank order. */
    int (*allgather)(void *ctx, const void *send, size_t bytes, void *recv);
    /* Element-wise reduction of `n` int64 values in place. */
    int (*allreduce_i64)(void *ctx, int64_t *inout, size_t n, dds_reduce_op_t op);
    int (*barrier)(void *ctx);
    /* Release ctx (not collective).  May be NULL. */
    void (*destroy)(void *ctx);
} dds_comm_ops_t;

typedef struct dds_comm {
    const dds_comm_ops_t *ops;
    void *ctx;
    int rank;
    int size;
} dds_comm_t;

/* A one-rank communicator (rank 0 of 1) for tests and single-process use. */
DDS_API int dds_comm_self(dds_comm_t *comm_p);

/* Collective error agreement: every rank passes its local status (0 or a
 * negative code, with the detail in dds_last_error()).  Returns 0 on every
 * rank if all succeeded; otherwise every rank returns the code of the
 * lowest failing rank and its dds_last_error() reads "rank R: <detail>"
 * (the failing rank keeps its own detail).  If the exchange itself fails the
 * exchange's error is returned. */
DDS_API int dds_comm_agree(const dds_comm_t *comm, int rc);

/* dds_comm_agree that also checks that every rank is in the same collective
 * call: `tag` (>= 0) names the call (e.g. a sequence number and a kind), and
 * when the ranks' tags differ every rank returns -DDS_ETIMEDOUT ("collective
 * mismatch": a rank skipped, added or reordered a collective call, so the
 * ranks are out of step) without a second exchange.  Same cost as
 * dds_comm_agree on success (one allreduce of three int64). */
DDS_API int dds_comm_agree_tag(const dds_comm_t *comm, int rc, int64_t tag);

/* dds_comm_agree where the failing rank's own detail reads "rank R: ..."
 * too, so that every rank reports the same message: for settings read at
 * creation ("rank 1: DDSTORE_X='abc': expected ..."), where the rank that
 * has the bad value must be named on every rank. */
DDS_API int dds_comm_agree_named(const dds_comm_t *comm, int rc);

/* The agreement protocol behind the three calls above, for any record:
 * every rank passes its status, 0 (rec ignored) or a negative code with a
 * record of `len` bytes (the store's: its dds_last_error() text;
 * pyddstore's Python layer: a wire message naming an exception,
 * ddstore/wire.h; at most DDS_AGREE_RECORD_MAX bytes, the rest is cut).
 * Returns 0 on every rank when all passed; else on every rank the code of
 * the lowest failing rank, its rank in *frank_p and a copy of its record in
 * *rec_p / *len_p (malloc'ed and NUL-terminated, the caller frees; NULL
 * when the record could not be carried).  When the exchange itself fails
 * (or the tags differ: "collective mismatch", -DDS_ETIMEDOUT) its error is
 * returned with *frank_p = -1.  tag: as dds_comm_agree_tag.  One allreduce
 * of three int64 on success (as dds_comm_agree), two more on failure (the
 * record's length, then at most 2047 int64 words of it). */
#define DDS_AGREE_RECORD_MAX 16376
DDS_API int dds_comm_agree_record(const dds_comm_t *comm, int rc, int64_t tag,
                                  const void *rec, size_t len, int *frank_p,
                                  void **rec_p, size_t *len_p);

/* How long a collective may wait for the other ranks:
 * DDSTORE_COLLECTIVE_TIMEOUT_S (seconds, > 0; "inf" = no limit; default
 * 1800).  Implementations of this interface (MPI, FileComm, torch) read it
 * when they are created and fail a collective that not every rank entered
 * within that time with -DDS_ETIMEDOUT; such a communicator is then out of
 * step and fails every later collective at once (-DDS_ETIMEDOUT, naming the
 * collective that timed out).  Returns 0 or -DDS_ECONFIG (bad value, the
 * detail names the variable). */
DDS_API int dds_comm_timeout_s(double *timeout_s_p);

/* When a waiting collective says so: DDSTORE_COLLECTIVE_WARN_S (seconds,
 * > 0; "inf" = never; default 60).  A communicator whose collective has
 * waited that long logs once, at WARN, which collective is waiting (and the
 * store call it serves, dds_comm_what) and, where it can tell, which ranks
 * have not entered it; it then waits on up to the timeout.  0 or
 * -DDS_ECONFIG. */
DDS_API int dds_comm_warn_s(double *warn_s_p);

/* The store's collective call the calling thread is in, e.g. "add('x')"
 * ("" outside one): set by the store, read by a communicator for its
 * messages.  what == NULL clears it. */
DDS_API void dds_comm_set_what(const char *what, const char *name);
DDS_API const char *dds_comm_what(void);

/* Destroy via ops->destroy (NULL-safe). */
DDS_API void dds_comm_destroy(dds_comm_t *comm);

#ifdef __cplusplus
}
#endif
#endif
