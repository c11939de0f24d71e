/* ddstore-core: the store.
 *
 * A store holds named variables.  Each variable is a 2-D array of rows
 * (row = disp elements x itemsize bytes) sharded over the ranks of the
 * store's communicator: rank r holds rows [offsets[r], offsets[r+1]) of the
 * global array, and any rank reads any rows with one-sided reads through
 * the store's transport.
 *
 * Collective calls (create, var_init, var_add, ragged_init, ragged_add,
 * free, epoch_*, destroy when not yet freed) must be made by every rank in
 * the same order from one thread.  They agree on failure: one rank's bad
 * input fails every rank
 * with the same code (dds_comm_agree), none hangs.  A collective that not
 * every rank enters fails on the ranks that did after the communicator's
 * timeout (DDSTORE_COLLECTIVE_TIMEOUT_S, comm.h) with -DDS_ETIMEDOUT
 * naming the call and the variable; the store is then out of step: every
 * later collective call fails at once with -DDS_ETIMEDOUT, and free() /
 * destroy release local resources only (they never wait for peers; what
 * peers may still read is leaked until the process exits).  Reads keep
 * working.
 *
 * Collective calls made in a process forked after the store was created
 * (another pid than the creator's) fail at once with -DDS_ENOSYS, touching
 * nothing: the communicator is the parent's.  Reads work there (a
 * DDS_READER_FORKED reader).
 *
 * Local calls (var_update, get, get_batch, ragged_update, ragged_sizes,
 * ragged_get_batch, recv_*, info, profile, readers) are safe from any
 * number of threads at once.  Reads take the variable
 * table's read lock only (shared); no store-wide mutex is held while data
 * moves.  They must not race with a collective call that frees the variable
 * being read.
 *
 * Errors: 0 or negative DDS_E* codes (errors.h) with the detail in
 * dds_last_error().  Every read validates all its inputs before moving any
 * byte.  The store stays usable after every error.
 */
#ifndef DDSTORE_STORE_H
#define DDSTORE_STORE_H


#include "ddstore/visibility.h"
#include <stddef.h>
#include <stdint.h>

#include "ddstore/comm.h"
#include "ddstore/memops.h"
#include "ddstore/profile.h"
#include "ddstore/transport.h"
#include "ddstore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DDS_NAME_MAX 255

typedef struct dds_store dds_store_t;
typedef struct dds_reader dds_reader_t;

enum {
    DDS_STORE_PARAM_COMM = 1u << 0,
    DDS_STORE_PARAM_TRANSPORT = 1u << 1,
    DDS_STORE_PARAM_MEMSYS = 1u << 2,
    DDS_STORE_PARAM_SETTINGS = 1u << 3
};

typedef struct dds_store_params {
    uint64_t field_mask;          /* DDS_STORE_PARAM_* that are set           */
    dds_comm_t comm;              /* required; ownership moves to the store   */
    dds_transport_t transport;    /* required; ownership moves to the store   */
    /* DDS_STORE_PARAM_MEMSYS: GPU memory operations (memops.h) for one device kind (ops->kind).
     * Optional; ownership moves to the store (ops->destroy(ctx) when the
     * store is destroyed, or at once when creation fails).  Without it the
     * store reads into GPU memory only through a transport with
     * DDS_TRANSPORT_CAP_HMEM_* for that memory (docs/gpudirect.md). */
    dds_memsys_t memsys;
    /* DDS_STORE_PARAM_SETTINGS: core's settings as the caller read them
     * once (settings.h, dds_settings_read; copied).  Without it the store
     * reads them itself. */
    const struct dds_settings *settings;
} dds_store_params_t;

/* Collective.  On success the store owns comm, transport and memsys
 * (destroyed with it); on failure they are destroyed too. */
DDS_API int dds_store_create(const dds_store_params_t *params, dds_store_t **store_p);

/* Collective if variables are still live (frees them first).  Safe after
 * MPI_Finalize (local cleanup only).  NULL is a no-op. */
DDS_API void dds_store_destroy(dds_store_t *store);

/* Local: destroy the store without any collective step and without waiting
 * for a peer, whatever the other ranks do (for a binding's garbage
 * collection, where one rank may keep its store alive while another drops
 * it: only an explicit dds_store_free() is collective).  Variables still
 * live are released locally: with a transport that has region_abandon
 * (MPI) each region is abandoned and its shard stays allocated until the
 * process exits (peers may still read it; MPI windows stay open, also at
 * MPI_Finalize); otherwise the transport's destroy releases the regions
 * (libfabric: the registrations are closed, so a peer's later read of them
 * fails with an error) and the shards are freed after it.  Readers,
 * registrations, transport, memsys and communicator are destroyed as in
 * dds_store_destroy.  No other call on the store may be in flight.  NULL
 * is a no-op. */
DDS_API void dds_store_destroy_local(dds_store_t *store);

DDS_API int dds_store_rank(const dds_store_t *store);
DDS_API int dds_store_size(const dds_store_t *store);
DDS_API const dds_comm_t *dds_store_comm(const dds_store_t *store);
DDS_API const dds_transport_t *dds_store_transport(const dds_store_t *store);

/* Collective: a zeroed shard of `nrows` rows x `disp` elements x `itemsize`
 * bytes, dtype `dtype` (DDS_DTYPE_RAW with any itemsize, or a typed dtype
 * whose size equals itemsize).  nrows may be 0.  disp and itemsize must be
 * equal on every rank (else -DDS_EINVAL on all ranks naming both values).
 * -DDS_EEXIST if `name` is live. */
DDS_API int dds_store_var_init(dds_store_t *store, const char *name, int64_t nrows,
                       size_t disp, size_t itemsize, dds_dtype_t dtype);

enum {
    DDS_ADD_COPY = 0,        /* copy host data into a store-owned shard      */
    DDS_ADD_IN_PLACE = 1     /* register `data` itself (GPU tensors); the
                                caller keeps it alive until var_free/free     */
};

/* Collective: this rank's shard = `nrows` rows of `disp` x `itemsize` bytes
 * at `data` (in memory `mem`, NULL = host).  Same checks as var_init.
 * GPU memory (mem->kind CUDA/ROCm) needs DDS_ADD_IN_PLACE; the transport
 * registers it directly when it has DDS_TRANSPORT_CAP_HMEM_* for that kind,
 * otherwise the store keeps a pinned host mirror (memsys required,
 * DDSTORE_GPU_STAGING=1), copied at add after the work queued on
 * mem->stream, and refreshed by var_update. */
DDS_API int dds_store_var_add(dds_store_t *store, const char *name, const void *data,
                      int64_t nrows, size_t disp, size_t itemsize,
                      dds_dtype_t dtype, const dds_mem_t *mem, int flags);

/* Collective: release one variable (its name may be added again). */
DDS_API int dds_store_var_free(dds_store_t *store, const char *name);

/* Collective: release every variable.  Idempotent.  Reads of a released
 * name then fail with -DDS_EFREED until that name is added again. */
DDS_API int dds_store_free(dds_store_t *store);

/* A caller's buffer: `nrows` rows of `row_bytes`, element type dtype /
 * itemsize (DDS_DTYPE_RAW: only itemsize is checked). */
typedef struct dds_buf {
    void *ptr;
    int64_t nrows;
    size_t row_bytes;
    dds_dtype_t dtype;
    size_t itemsize;
    dds_mem_t mem;
} dds_buf_t;

/* Local: overwrite rows [offset, offset+src->nrows) of this rank's shard.
 * Host or GPU source into a host or GPU shard (GPU: through the memsys, on
 * the source's stream when it is GPU memory, else the shard's; returns after
 * the copies and the shard's host mirror are done, waiting on that stream
 * only). */
DDS_API int dds_store_var_update(dds_store_t *store, const char *name,
                         const dds_buf_t *src, int64_t offset);

typedef struct dds_var_info {
    int64_t total_rows;
    int64_t local_rows;
    int64_t local_first;     /* first global row of this rank               */
    size_t disp;
    size_t itemsize;
    size_t row_bytes;
    dds_dtype_t dtype;
    dds_mem_t mem;           /* where this rank's shard lives               */
    int nranks;
    /* Ragged variables (below): ragged = 1, rows are samples of varying
     * length, `disp` x `itemsize` (row_bytes) is one *element row* and
     * total_elems / local_elems count element rows.  Fixed variables:
     * ragged = 0, total_elems = total_rows, local_elems = local_rows. */
    int ragged;
    int64_t total_elems;
    int64_t local_elems;
} dds_var_info_t;

DDS_API int dds_store_var_info(dds_store_t *store, const char *name,
                       dds_var_info_t *info_p);

/* Local.  This rank's shard of `name` in host memory, for filling or
 * saving it where it lies (files in, snapshots out: no copy through a
 * buffer): *base_p = its rows (a ragged variable's element rows, after its
 * index), *bytes_p = their size (local_elems x row_bytes; 0 with *base_p
 * NULL for an empty shard); *index_p (may be NULL) = a ragged variable's
 * local_rows + 1 element-row prefix sums (NULL for a fixed one), read-only.
 * The memory is the store's until the variable is freed; writes into it
 * are seen by reads as var_update's are (epochs).  -DDS_EINVAL for a
 * joined variable (another job's) or a shard in GPU memory; the lookup's
 * errors as var_info's. */
DDS_API int dds_store_var_local(dds_store_t *store, const char *name,
                                void **base_p, size_t *bytes_p,
                                const int64_t **index_p);

/* Owner offsets (nranks+1 prefix sums) copied into `offsets` (nranks+1). */
DDS_API int dds_store_var_offsets(dds_store_t *store, const char *name,
                          int64_t *offsets);

/* Local: rows [0, dst->nrows) of dst <- global rows [start, start+nrows).
 * A range crossing owner boundaries is read from every owner.  `reader`
 * NULL = the store's default reader.
 * GPU destinations (dst->mem.kind CUDA/ROCm): with a transport that has
 * DDS_TRANSPORT_CAP_HMEM_* for that kind the NIC writes into them after
 * the host waited for the work queued so far on dst->mem.stream (an event,
 * never a device-wide synchronise); otherwise (memsys required,
 * DDSTORE_GPU_STAGING=1) rows are read into a pinned staging buffer and
 * copied with one asynchronous host-to-device copy on dst->mem.stream: the
 * call returns without waiting for it, and the rows are ready for the next
 * kernel queued on that stream. */
DDS_API int dds_store_get(dds_store_t *store, dds_reader_t *reader, const char *name,
                  const dds_buf_t *dst, int64_t start);

/* Local: row i of dst <- global row rows[i]; n must equal dst->nrows.
 * `rows` is read once, at the start (copied): another thread changing the
 * array during the call cannot make the checked and the read indices
 * differ. */
DDS_API int dds_store_get_batch(dds_store_t *store, dds_reader_t *reader,
                        const char *name, const dds_buf_t *dst,
                        const int64_t *rows, size_t n);

/* ---- the one planned read ----------------------------------------------
 *
 * Every read (get, get_batch, get_batch_vars, ragged_get_batch,
 * ragged_sizes) is this call with one or more variables: one entry per
 * variable saying what to read (fixed rows, ragged samples, or ragged
 * lengths only) and where (dst: host or GPU memory, dst.mem).  The same
 * rows[0..n) of every variable. */
typedef enum {
    DDS_READ_FIXED = 0,      /* dst row i <- row rows[i] (dst.nrows == n)    */
    DDS_READ_RAGGED = 1,     /* samples rows[0..n) packed in request order
                                into dst (element rows; dst.nrows is its
                                room), as ragged_get_batch                  */
    DDS_READ_SIZES = 2,      /* lengths only, as ragged_sizes (dst unused)  */
    DDS_READ_RANGE = 3       /* dst rows <- rows [start, start+dst.nrows),
                                as get (rows[] unused)                      */
} dds_read_kind_t;

typedef struct dds_read_var {
    const char *name;
    int kind;                /* dds_read_kind_t                              */
    dds_buf_t dst;
    int64_t start;           /* RANGE: the first row                         */
    /* RAGGED / SIZES: out, n lengths (RAGGED: may be NULL) and their sum */
    int64_t *lengths;
    int64_t total;
    /* RAGGED, optional: called once the lengths are known and dst.nrows <
     * total, before any payload or fixed row moves, to give dst room for
     * `total` element rows (set var->dst; it is checked again).  Called
     * with the store's table lock held for reading: it must not call the
     * store.  A return < 0 fails the read with that code.  NULL: the read
     * fails with -DDS_ENOSPC as ragged_get_batch does. */
    int (*grow)(void *arg, struct dds_read_var *var);
    void *grow_arg;
} dds_read_var_t;

/* Local: vars[k] for rows[0..n), k in [0, nvars), in one planned call.
 * Every entry is checked before any byte moves (variable live and of the
 * entry's kind (FIXED and RANGE: fixed rows), destination against the variable, indices in range: an
 * error names the variable and nothing is read).  Ragged entries first
 * read their index entries, all of them in one transport round (the only
 * step before payload); a ragged destination without room then fails
 * with -DDS_ENOSPC, every ragged entry's lengths and total filled and no
 * payload nor fixed row read (unless `grow` gives room).  Then every
 * entry's rows in one round: fixed rows planned once per distinct layout
 * (same row distribution, row size and route), ragged payloads packed per
 * sample; this rank's and mapped same-node owners' rows by memcpy; every
 * remaining read of every entry, host or GPU destination (direct: the
 * transport writes GPU memory after one fence on dst.mem.stream; staged:
 * through a pinned buffer and one asynchronous host-to-device copy per
 * entry on dst.mem.stream, not waited for), in one transport call
 * (read_multi: one round trip per owner, not per variable; read() per
 * variable without it).  So a batch of fixed and ragged fields is one
 * round (two with ragged fields: their index, then everything).
 * Profile per variable as the one-variable calls count it (FIXED, RANGE:
 * one call of dst.nrows rows; RAGGED: one call, n rows, the payload's bytes; SIZES: reads
 * and times only); the variables share the call's time.  nvars == 0 is a
 * no-op; a name may repeat.  dds_last_error() names the variable(s). */
DDS_API int dds_store_read_vars(dds_store_t *store, dds_reader_t *reader,
                                dds_read_var_t *vars, size_t nvars,
                                const int64_t *rows, size_t n);

/* Local: dsts[k] row i <- global row rows[i] of variable names[k], for
 * k in [0, nvars): dds_store_read_vars with DDS_READ_FIXED entries. */
DDS_API int dds_store_get_batch_vars(dds_store_t *store, dds_reader_t *reader,
                                     const char *const *names,
                                     const dds_buf_t *dsts, size_t nvars,
                                     const int64_t *rows, size_t n);

/* Register a destination so reads into it or any slice of it skip
 * registration.  Registering exactly this range again is a no-op that
 * returns 0 (registrations are not counted: one unregister removes it), or
 * -DDS_EINVAL if it was registered as another kind of memory.  Overlapping
 * ranges are separate registrations.  GPU memory that the transport cannot
 * reach (staged reads) is recorded without a transport registration. */
DDS_API int dds_store_recv_register(dds_store_t *store, void *ptr, size_t bytes,
                            const dds_mem_t *mem);
/* -DDS_ENOENT if (ptr, bytes) is not registered (never was, or was
 * unregistered already). */
DDS_API int dds_store_recv_unregister(dds_store_t *store, void *ptr, size_t bytes);

/* Readers: separate read contexts (endpoints) for threads or forked
 * processes (flags: DDS_READER_THREAD / DDS_READER_FORKED).  Transports
 * without readers return a reader that shares the default. */
DDS_API int dds_store_reader_open(dds_store_t *store, int flags,
                          dds_reader_t **reader_p);
DDS_API void dds_store_reader_close(dds_store_t *store, dds_reader_t *reader);

/* Counters for one variable (summed over readers and threads). */
DDS_API int dds_store_profile(dds_store_t *store, const char *name,
                      dds_profile_t *profile_p);
DDS_API int dds_store_profile_reset(dds_store_t *store, const char *name);

/* Epochs (the original DDStore's fences), collective for every method and
 * cheap: the transport's local epoch step (MPI: MPI_Win_sync), then one
 * agreement over the communicator (one allreduce of one int64: the
 * synchronisation and the error agreement in one step).
 *   epoch_begin  when it returns, every var_update / var_init that any rank
 *                finished before it entered epoch_begin is visible to every
 *                read this rank makes afterwards.
 *   epoch_end    when it returns, every rank has finished the reads it made
 *                before it entered epoch_end, so an update made afterwards
 *                cannot change what those reads returned.
 * A one-rank communicator (a method-2 reader) synchronises nothing. */
DDS_API int dds_store_epoch_begin(dds_store_t *store);
DDS_API int dds_store_epoch_end(dds_store_t *store);

/* The store's collective calls, as dds_store_coll_fail names them
 * (ragged_add is DDS_COLL_ADD, ragged_init DDS_COLL_INIT). */
typedef enum {
    DDS_COLL_INIT = 1,
    DDS_COLL_ADD = 2,
    DDS_COLL_VAR_FREE = 3,
    DDS_COLL_FREE = 4,
    DDS_COLL_EPOCH_BEGIN = 5,
    DDS_COLL_EPOCH_END = 6
} dds_coll_t;

/* For a caller whose own checks failed before it could make collective
 * call `call` (e.g. a binding that could not convert its arguments): takes
 * part in that call's first agreement with `rc` (< 0, detail in
 * dds_last_error()), exactly as the call would have, so the ranks that did
 * make it fail together with this one and the calls stay numbered alike.
 * Returns rc (or the agreement's own failure). */
DDS_API int dds_store_coll_fail(dds_store_t *store, dds_coll_t call, const char *name,
                        int rc);

/* ---- ragged variables ------------------------------------------------
 *
 * A ragged variable's rows (samples) vary in length along their first axis:
 * sample i is lengths[i] >= 0 *element rows* of `disp` elements x
 * `itemsize` bytes (the trailing dims and the dtype are fixed; equal on
 * every rank, as for var_add).  Rank r holds the samples [offsets[r],
 * offsets[r+1]) (var_offsets: sample rows) and their element rows.
 *
 * The index is distributed: each rank keeps the entries of its own samples
 * only (local_rows + 1 int64 element-row prefix sums, at the start of its
 * shard, before the payload), plus two prefix-sum arrays over ranks
 * (samples and element rows), so per-rank metadata is O(local rows +
 * ranks).  A read of samples first reads their index entries from their
 * owners (batched per owner like payload rows; this rank's own entries by
 * memcpy, same-node owners' as the transport serves them), then the
 * payload.  Cost model: docs/design.md "Ragged variables".
 *
 * Fixed-row reads (get, get_batch, var_update) of a ragged variable, and
 * ragged reads of a fixed variable, fail with -DDS_EINVAL naming the kind
 * and the call to use.  var_free, free, profile, var_info (ragged = 1),
 * var_offsets (sample rows), readers, var_join (method 2) work on ragged
 * variables as on fixed ones. */

/* Collective: this rank's samples are `nrows` lengths (each >= 0) and their
 * payload: sum(lengths) element rows of disp x itemsize at `data`, sample
 * after sample (data may be NULL when nelems is 0).  The payload is copied
 * into a store-owned host shard: `mem` NULL or host memory, `flags`
 * DDS_ADD_COPY; GPU memory and DDS_ADD_IN_PLACE fail on every rank with
 * -DDS_ENOSYS (copy a GPU payload to host memory first).  Bad input (nrows
 * < 0, a negative length, a sum above INT64_MAX or not equal to `nelems`,
 * disp / itemsize / dtype differing across ranks, a rank calling var_add
 * where another calls ragged_add) fails on every rank with -DDS_EINVAL
 * naming the value and the rank; the name stays free. */
DDS_API int dds_store_ragged_add(dds_store_t *store, const char *name,
                                 const void *data, int64_t nelems,
                                 const int64_t *lengths, int64_t nrows,
                                 size_t disp, size_t itemsize,
                                 dds_dtype_t dtype, const dds_mem_t *mem,
                                 int flags);

/* Collective: samples of the given lengths, payload zeroed (then filled
 * with ragged_update). */
DDS_API int dds_store_ragged_init(dds_store_t *store, const char *name,
                                  const int64_t *lengths, int64_t nrows,
                                  size_t disp, size_t itemsize,
                                  dds_dtype_t dtype);

/* Local: overwrite the payload of this rank's samples [offset,
 * offset+nsamples) (local sample rows) with src; src->nrows must equal the
 * sum of their stored lengths (else -DDS_EINVAL naming both; lengths never
 * change); samples outside this rank's: -DDS_ERANGE.  A GPU source is
 * copied as var_update copies it.  Visibility to other ranks' reads: as
 * var_update (epochs). */
DDS_API int dds_store_ragged_update(dds_store_t *store, const char *name,
                                    const dds_buf_t *src, int64_t offset,
                                    int64_t nsamples);

/* Local: lengths_out[i] <- length (element rows) of global sample rows[i].
 * Reads index entries only, never payload.  Same index checks as
 * get_batch (-DDS_ERANGE naming the position and value).  Profile: reads,
 * local bytes and times are counted, not calls / rows / bytes. */
DDS_API int dds_store_ragged_sizes(dds_store_t *store, dds_reader_t *reader,
                                   const char *name, const int64_t *rows,
                                   size_t n, int64_t *lengths_out);

/* Local: samples rows[0..n) packed in request order (repeats allowed) into
 * dst (element rows: dst->row_bytes = disp x itemsize), their lengths into
 * lengths_out[0..n) and their sum into *total_out.  dst->nrows may exceed
 * the sum (the rows after it are untouched).  When dst->nrows is smaller
 * than the sum, returns -DDS_ENOSPC with lengths_out and *total_out filled
 * and no payload read (the caller allocates and calls again: the "sizes
 * first" two-step without a second call).  lengths_out may be NULL (the
 * total alone); total_out may not.  A total above INT64_MAX: -DDS_EINVAL.
 * Destinations in GPU memory follow get_batch's routes (the payload step
 * reads straight into the destination, or through staging).  Profile: one
 * call, n rows (samples), the payload's bytes; reads and local bytes of
 * both steps. */
DDS_API int dds_store_ragged_get_batch(dds_store_t *store,
                                       dds_reader_t *reader, const char *name,
                                       const dds_buf_t *dst,
                                       const int64_t *rows, size_t n,
                                       int64_t *lengths_out,
                                       int64_t *total_out);

/* Names of live variables: calls fn for each (under the table's read lock;
 * fn must not call back into the store). */
DDS_API int dds_store_var_foreach(dds_store_t *store,
                          void (*fn)(void *arg, const char *name), void *arg);

/* Local (not collective): make variable `name`, published by another job,
 * readable here (method 2 readers; the transport's region_join waits for
 * the publisher within its timeout).  The variable has no shard on this
 * rank (read-only here: var_update fails), its rows are owned by the
 * publishing job's ranks (var_info's nranks), and var_free releases it
 * like any variable.  -DDS_ENOSYS when the transport cannot join,
 * -DDS_EEXIST when the name is live, the transport's codes otherwise
 * (-DDS_ETIMEDOUT, -DDS_ESTALE, -DDS_ECORRUPT, -DDS_EINVAL ...). */
DDS_API int dds_store_var_join(dds_store_t *store, const char *name);

#ifdef __cplusplus
}
#endif
#endif
