/* ddstore-core: global row lookup and the batched-read planner.
 *
 * Pure functions: reentrant, no global state, safe from any thread.
 *
 * Layout: the global rows of a variable are the shards concatenated in rank
 * order; `offsets[r]` is the first global row of rank r and offsets[nranks]
 * the total (nranks+1 entries, non-decreasing; zero-row shards allowed).
 *
 * Plan: given N global rows (any order, repeats allowed) the planner
 * produces
 *   - read ops grouped by owner (ops of owner r are
 *     ops[owner_first[r] .. owner_first[r+1])), sorted by source offset;
 *     rows adjacent in the owner's shard are merged into one read; each read
 *     is split at max_read_bytes;
 *   - each read lands either straight in the caller's destination (when the
 *     merged rows are also consecutive there, or a single row) or in a
 *     staging buffer of staging_bytes (merged rows whose destination slots
 *     are scattered);
 *   - copy ops, to be executed in order after every read completed: staging
 *     -> destination slot, then first occurrence -> repeats.
 * With DDS_PLAN_DIRECT (device destinations) there is no staging and there
 * are no copies: every row is read into its own slot.
 */
#ifndef DDSTORE_PLAN_H
#define DDSTORE_PLAN_H


#include "ddstore/visibility.h"
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Owner and row within the owner's shard of global `row`.
 * Returns 0, or -DDS_ERANGE when row is outside [0, offsets[nranks]).
 * O(log nranks); zero-row shards are never returned as owners. */
DDS_API int dds_layout_locate(const int64_t *offsets, int nranks, int64_t row,
                      int *owner_p, int64_t *local_row_p);

/* dds_plan_params_t.field_mask: which members after the first ones are
 * set (a caller that zeroes field_mask gets the defaults). */
enum {
    DDS_PLAN_PARAM_FLAGS = 1u << 0   /* `flags` is set                       */
};

/* dds_plan_params_t.flags */
enum {
    /* Every row is read straight into its own destination slot: no staging
     * and no copy ops (plan.staging_bytes == 0, plan.ncopies == 0).  For a
     * destination the caller cannot memcpy into (device memory written by
     * the transport).  A repeated row is read once per occurrence; rows
     * adjacent in the owner's shard whose slots are consecutive are still
     * one read.  Ops stay grouped by owner, sorted by source offset except
     * that the reads of a repeated row follow those of its first
     * occurrence (and overlap them). */
    DDS_PLAN_DIRECT = 1u << 0
};

typedef struct dds_plan_params {
    uint64_t field_mask;          /* DDS_PLAN_PARAM_* bits, or 0             */
    int nranks;
    const int64_t *offsets;       /* nranks+1 prefix sums                     */
    size_t row_bytes;             /* > 0                                      */
    size_t max_read_bytes;        /* split reads above this; 0 = never        */
    size_t merge_row_bytes_max;   /* rows above this size are never staged;
                                     0 = DDS_PLAN_MERGE_ROW_BYTES_DEFAULT     */
    unsigned flags;               /* DDS_PLAN_* (DDS_PLAN_PARAM_FLAGS)        */
} dds_plan_params_t;

#define DDS_PLAN_MERGE_ROW_BYTES_DEFAULT (64u * 1024u)

typedef struct dds_read_op {
    int owner;
    int staged;           /* 1: dst_offset is into staging; 0: into dst     */
    int64_t src_offset;   /* bytes from the start of the owner's shard      */
    size_t len;           /* bytes, <= max_read_bytes when that is set      */
    size_t dst_offset;    /* bytes into dst or staging                      */
} dds_read_op_t;

typedef struct dds_copy_op {
    int from_staging;     /* 1: src_offset into staging; 0: into dst       */
    size_t src_offset;
    size_t dst_offset;    /* always into dst                                */
    size_t len;
} dds_copy_op_t;

typedef struct dds_plan {
    dds_read_op_t *ops;
    size_t nops;
    size_t *owner_first;  /* nranks+1 entries                               */
    dds_copy_op_t *copies;
    size_t ncopies;
    size_t staging_bytes;
    size_t nrows;         /* rows requested                                 */
    size_t nrows_unique;  /* distinct rows read                             */
    /* private: capacities and scratch, reused across builds */
    size_t cap_ops, cap_copies, cap_owners, cap_scratch;
    void *scratch;
} dds_plan_t;

/* Zero a plan before first use. */
DDS_API void dds_plan_init(dds_plan_t *plan);

/* Release a plan's memory (the struct itself is the caller's). */
DDS_API void dds_plan_fini(dds_plan_t *plan);

/* Plan a batch: destination row i <- global row rows[i], i in [0, n).
 * Every row is checked before anything is planned: a row outside
 * [0, total) gives -DDS_ERANGE naming the position and value.  n == 0 gives
 * an empty plan.  Reuses the plan's arrays (grows them as needed); -DDS_ENOMEM
 * on allocation failure. */
DDS_API int dds_plan_batch(const dds_plan_params_t *params, const int64_t *rows,
                   size_t n, dds_plan_t *plan);

/* Plan a range: destination rows [0, nrows) <- global rows
 * [start, start+nrows), read straight into dst, split at owner boundaries
 * and at max_read_bytes.  -DDS_ERANGE if the range is not inside
 * [0, total) (negative start included). */
DDS_API int dds_plan_range(const dds_plan_params_t *params, int64_t start,
                   int64_t nrows, dds_plan_t *plan);

/* A byte span of one owner's shard (ragged reads: one sample's payload). */
typedef struct dds_span {
    int owner;            /* in [0, nranks)                                  */
    int64_t src_offset;   /* bytes from the start of the owner's shard (>= 0) */
    size_t len;           /* bytes; 0 = nothing to read                       */
} dds_span_t;

/* Plan spans packed in request order: span i lands at destination offset
 * dst_i = len_0 + ... + len_{i-1} (no staging, no copies; repeats are read
 * again).  Ops are grouped by owner (ops of owner r are
 * ops[owner_first[r] .. owner_first[r+1]), in request order within an
 * owner); a span that continues the previous span of the same owner both in
 * the owner's shard and in the destination is merged into its read; every
 * read is split at max_read_bytes (0 = never); zero-length spans give no
 * read.  plan.nrows = plan.nrows_unique = n.  -DDS_EINVAL naming the
 * position for an owner outside [0, nranks), a negative source offset, or a
 * destination offset or read end beyond SIZE_MAX / INT64_MAX; -DDS_ENOMEM.
 * O(n + nranks); reuses the plan's arrays. */
DDS_API int dds_plan_spans(int nranks, size_t max_read_bytes,
                           const dds_span_t *spans, size_t n,
                           dds_plan_t *plan);

#ifdef __cplusplus
}
#endif
#endif
