/* ddstore-core: the transport interface.
 *
 * A transport moves bytes from a peer's registered shard into local memory
 * with one-sided reads.  The store owns one transport (an ops table plus a
 * context) and calls it with planned reads (plan.h).  MPI RMA
 * (ddstore-mpi) and libfabric (ddstore-ofi's adapter) implement it.
 *
 * Threading: region_create / region_destroy / destroy / epoch_* are called
 * by the store from one thread (region_* are collective over the store's
 * communicator, which the transport received at creation).  read,
 * recv_register, recv_unregister, reader_open / reader_close may be called
 * from many threads at once when caps has DDS_TRANSPORT_CAP_THREAD_SAFE;
 * otherwise the store serialises them.
 */
#ifndef DDSTORE_TRANSPORT_H
#define DDSTORE_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "ddstore/plan.h"
#include "ddstore/profile.h"
#include "ddstore/shard.h"
#include "ddstore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    DDS_TRANSPORT_CAP_THREAD_SAFE = 1u << 0,  /* read() from many threads    */
    DDS_TRANSPORT_CAP_HMEM_CUDA = 1u << 1,    /* reads into/out of CUDA mem  */
    DDS_TRANSPORT_CAP_HMEM_ROCM = 1u << 2,    /* reads into/out of ROCm mem  */
    DDS_TRANSPORT_CAP_READERS = 1u << 3,      /* reader_open gives separate
                                                 endpoints (per thread/fork) */
    DDS_TRANSPORT_CAP_FORK = 1u << 4,         /* readers usable after fork   */
    DDS_TRANSPORT_CAP_LOCAL_SELF = 1u << 5,   /* store may memcpy own rank's
                                                 host shard itself          */
    /* The store allocates the host shards it owns (var_init, var_add with
     * DDS_ADD_COPY) with the node-local shard service (ddstore/shard.h):
     * MAP_SHARED memory, which processes forked later share (they see
     * var_update).  Takes precedence over shard_alloc. */
    DDS_TRANSPORT_CAP_NODE_SHARDS = 1u << 6,
    /* ... and makes them mappable by the processes of the same node: the
     * store exchanges their records at add (and asks region_shards at
     * join), serves the ops of owners whose shard is mapped here with
     * memcpy and hands read() only the others.  A transport leaves it
     * unset to turn same-node mapping off (its setting). */
    DDS_TRANSPORT_CAP_NODE_MAP = 1u << 7
};

/* A ragged variable's shard (docs/design.md "Ragged variables") is
 * [index | payload]: the index is nrows + 1 int64 element-row prefix sums
 * of its samples (the first 0), padded to 64 bytes, then the element rows
 * (row_bytes each), sample after sample.  The index's bytes for `nrows`
 * samples, 0 <= nrows <= DDS_RAGGED_MAX_ROWS: where the payload starts. */
#define DDS_RAGGED_MAX_ROWS (INT64_MAX / 8 - 16)
static inline uint64_t dds_ragged_index_bytes(int64_t nrows)
{
    return ((uint64_t)(nrows + 1) * 8u + 63u) & ~(uint64_t)63u;
}

enum {
    DDS_READER_THREAD = 0,   /* a reader for one thread of this process      */
    DDS_READER_FORKED = 1    /* a reader for a process forked after create   */
};

/* The local shard handed to region_create. */
typedef struct dds_region_desc {
    const char *name;        /* variable name                               */
    void *base;              /* may be NULL when bytes == 0                 */
    size_t bytes;
    size_t row_bytes;
    int64_t nrows;
    dds_dtype_t dtype;
    size_t itemsize;
    dds_mem_t mem;
    /* The token shard_alloc returned with `base`, or NULL when the store
     * allocated the shard itself (malloc, in place, mirror). */
    void *alloc_token;
    /* Every rank's first global row, nranks + 1 entries (the store's
     * layout of the variable, known when region_create is called). */
    const int64_t *offsets;
    int nranks;
    /* Ragged variables (else 0 and NULL): the shard is [index | payload]
     * (dds_ragged_index_bytes), nrows and offsets count samples, and
     * elem_offsets (nranks + 1) are the element-row prefix sums over ranks:
     * rank r's shard is dds_ragged_index_bytes(offsets[r+1] - offsets[r])
     * + (elem_offsets[r+1] - elem_offsets[r]) x row_bytes bytes. */
    int ragged;
    const int64_t *elem_offsets;
    /* The node-local shard service's shard at `base` (DDS_TRANSPORT_CAP_
     * NODE_SHARDS), or NULL: dds_shard_export gives its record (method 2
     * publishes it for reader jobs on the same node). */
    const dds_shard_t *shard;
} dds_region_desc_t;

/* What region_join found: a variable published by another job. */
typedef struct dds_region_layout {
    int nowners;             /* ranks of the publishing job (>= 1)          */
    int64_t *offsets;        /* nowners + 1 first rows (malloc'ed by the
                                transport; the store takes ownership)      */
    size_t row_bytes, disp, itemsize;
    dds_dtype_t dtype;
    /* Ragged variables (else 0 and NULL): offsets count samples and
     * elem_offsets (nowners + 1, malloc'ed by the transport; the store takes
     * ownership) the element rows, as in dds_region_desc_t. */
    int ragged;
    int64_t *elem_offsets;
} dds_region_layout_t;

/* One variable's share of a read_multi call: what read() takes, per
 * variable.  `name` is the variable's (for errors). */
typedef struct dds_read_req {
    void *region;
    const char *name;
    const dds_read_op_t *ops;
    size_t nops;
    void *dst, *dst_handle;
    const dds_mem_t *dst_mem;
    void *staging, *staging_handle;
    dds_prof_t *prof;
} dds_read_req_t;

typedef struct dds_transport_ops {
    size_t size;             /* sizeof(dds_transport_ops_t) of the implementer */
    const char *name;        /* "mpi", "ofi"                                 */

    /* Collective: register the local shard, exchange with every peer.
     * *region_p is the transport's handle for this variable. */
    int (*region_create)(void *ctx, const dds_region_desc_t *local,
                         void **region_p);
    /* Collective: release the region (after MPI_Finalize: local cleanup
     * only, no error). */
    int (*region_destroy)(void *ctx, void *region);

    /* Readers: independent read contexts (endpoints).  NULL reader in read()
     * means the transport's default reader.  May be NULL ops when the
     * transport has no separate readers. */
    int (*reader_open)(void *ctx, int flags, void **reader_p);
    void (*reader_close)(void *ctx, void *reader);

    /* Execute reads: for each op, copy `len` bytes at `src_offset` of owner
     * `owner`'s shard of `region` to (op.staged ? staging : dst) +
     * dst_offset.  dst_handle / staging_handle: registrations returned by
     * recv_register covering the buffer, or NULL.  Must not return before
     * every posted read completed or was cancelled.  Adds to `prof`.
     * What the store (its planner, dds_plan.h) guarantees, so that a
     * transport need not check or redo it:
     *   - every op's len <= dds_transport_t.max_read_bytes when that is set
     *     (the store splits at the smaller of it and DDSTORE_MAX_READ_BYTES);
     *   - ops are grouped by owner (the ops of one owner are consecutive);
     *   - with DDS_TRANSPORT_CAP_LOCAL_SELF, ops of this rank's own shard
     *     never reach read() when the store has a host view of it: a host
     *     shard, or the pinned host mirror of a GPU shard (not in a process
     *     forked after the store was created: mirrors are not inherited);
     *     the store serves those with memcpy;
     *   - with DDS_TRANSPORT_CAP_NODE_MAP, ops of an owner whose shard the
     *     store mapped (same node) never reach read() when they land in
     *     host memory (a host destination or staging); the store serves
     *     those with memcpy (ddstore/shard.h) and then calls read() with
     *     the rest, also with nops == 0 (read may refuse the reader: one it
     *     cannot use in this process);
     *   - no GPU destination (dst_mem) unless the transport advertised the
     *     matching DDS_TRANSPORT_CAP_HMEM_* (else the store stages it). */
    int (*read)(void *ctx, void *reader, void *region,
                const dds_read_op_t *ops, size_t nops,
                void *dst, void *dst_handle, const dds_mem_t *dst_mem,
                void *staging, void *staging_handle, dds_prof_t *prof);

    /* Register a destination buffer for repeated reads (may be NULL ops). */
    int (*recv_register)(void *ctx, void *buf, size_t bytes,
                         const dds_mem_t *mem, void **handle_p);
    int (*recv_unregister)(void *ctx, void *handle);

    /* Drive progress once (may be NULL). */
    int (*progress)(void *ctx);

    /* Epoch boundaries (may be NULL): local steps the store runs before
     * it synchronises the ranks in dds_store_epoch_begin/end, e.g. to make
     * this rank's var_update stores visible to one-sided reads (MPI:
     * MPI_Win_sync).  Not collective. */
    int (*epoch_begin)(void *ctx);
    int (*epoch_end)(void *ctx);

    /* Release everything (after MPI_Finalize: local cleanup only).
     * Regions still alive (a store destroyed without free(), see
     * dds_store_destroy_local) are released locally, without any peer:
     * after destroy returns no peer can read them any more, and the store
     * frees their shards.  A transport whose region_abandon is set never
     * sees them (they were abandoned). */
    void (*destroy)(void *ctx);

    /* Optional (may be NULL; both or neither).  Collective over the
     * store's communicator, called by every rank in the same order (also
     * with bytes == 0) once the store agreed that every rank allocates its
     * host shard this way (var_init, var_add with DDS_ADD_COPY).  Returns
     * 0 on every rank or an error on every rank (then nothing is
     * allocated).  *base_p receives `bytes` of host memory (undefined
     * contents; may be NULL when bytes == 0) that the transport can serve
     * cheaply to peers (MPI: shared memory mapped by the ranks of the
     * same node); *token_p is handed back in dds_region_desc_t
     * .alloc_token and to shard_free.  The memory is read by peers without
     * the owner's participation: it changes only by var_update on the
     * owner, and a reader sees an update once the owner's update returned
     * and the two synchronised (as with RMA).  shard_free is collective in
     * the same way, called after region_destroy; after MPI_Finalize it is
     * local cleanup only. */
    int (*shard_alloc)(void *ctx, size_t bytes, void **base_p,
                       void **token_p);
    void (*shard_free)(void *ctx, void *base, void *token);

    /* Optional (may be NULL): join a variable that another job published
     * (method 2 readers).  Local, not collective; may wait (the transport's
     * own timeout).  On success *layout_p describes the variable and
     * *region_p is the handle for read(); region_destroy releases it
     * locally.  On failure nothing is allocated. */
    int (*region_join)(void *ctx, const char *name,
                       dds_region_layout_t *layout_p, void **region_p);

    /* Optional (may be NULL): forget a region without talking to any peer.
     * The store calls it instead of region_destroy once its communicator is
     * out of step (a collective timed out), when a collective release could
     * wait forever.  Local, never blocks; whatever peers may still read (the
     * registered shard) stays valid until the process exits, so the
     * transport may leak it (MPI: the window is left open and is not closed
     * at MPI_Finalize either).  When NULL the store leaks the region. */
    void (*region_abandon)(void *ctx, void *region);

    /* Optional (may be NULL; both are used only for joined regions, with
     * DDS_TRANSPORT_CAP_NODE_MAP).  region_shards: the records
     * (ddstore/shard.h) of a joined region's owners, nowners entries, tag 0
     * for those that cannot be mapped here; the store then serves the
     * mapped ones with memcpy.  region_check: called after the store
     * copied rows of the region from mapped shards, before the read
     * returns: 0, or an error when the bytes copied may not be the
     * variable's (method 2: the core job freed it meanwhile).  Local. */
    int (*region_shards)(void *ctx, void *region, dds_shard_rec_t *recs,
                         int nowners);
    int (*region_check)(void *ctx, void *region);

    /* Optional (may be NULL; used only when `size` covers it): the reads of
     * several variables (regions) at once, each request as read() takes
     * them and with read()'s guarantees, through one reader: post every
     * request's reads before waiting for any, so that a batch of F
     * variables costs one round trip per owner, not F.  Must not return
     * before every posted read completed or was cancelled; an error names
     * the variable(s) it concerns.  Requests with nops == 0 may come (the
     * store served their ops: see read()).  When NULL the store calls
     * read() once per request. */
    int (*read_multi)(void *ctx, void *reader, const dds_read_req_t *reqs,
                      size_t nreqs);
} dds_transport_ops_t;

typedef struct dds_transport {
    const dds_transport_ops_t *ops;
    void *ctx;
    uint64_t caps;           /* DDS_TRANSPORT_CAP_*                         */
    size_t max_read_bytes;   /* largest single read; 0 = unlimited          */
} dds_transport_t;

#ifdef __cplusplus
}
#endif
#endif
