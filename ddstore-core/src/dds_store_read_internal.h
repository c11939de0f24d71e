/* ddstore-core: what the store's read files share (dds_store_read.c: the
 * read pipeline; dds_store_read_ragged.c: ragged reads on top of it). */
#ifndef DDS_STORE_READ_INTERNAL_H
#define DDS_STORE_READ_INTERNAL_H

#include "dds_store_internal.h"

/* ---- per-thread read context ------------------------------------------ */

struct mvar;

typedef struct tctx {
    dds_plan_t plan;
    void *staging;
    size_t staging_cap;
    int64_t *rows;          /* the batch's indices, copied once per read   */
    size_t rows_cap;
    /* ragged reads: the index step's plan, its rows (two prefix-sum
     * entries per sample) and entries read, each sample's owner, the
     * payload spans */
    dds_plan_t iplan;
    int64_t *irows, *ientries;
    size_t irows_cap, ientries_cap;
    int *owners;
    size_t owners_cap;
    dds_span_t *spans;
    size_t spans_cap;
    /* reads of several variables (get_batch_vars): one plan per distinct
     * layout, each variable's state, its executable ops and requests */
    dds_plan_t *mplans;
    size_t mplans_cap;
    struct mvar *mvars;
    size_t mvars_cap;
    dds_read_op_t *mops;
    size_t mops_cap;
    dds_read_req_t *mreqs;
    size_t mreqs_cap;
} tctx_t;

/* What a read did, for the profile.  total_ns: its share of the time when
 * several variables were read in one call (0: now - t0). */
typedef struct rd_acct {
    uint64_t t0, wait_ns, t_xfer, t_gpu, total_ns;
    size_t nops, local_bytes, staged;
} rd_acct_t;

/* Execute plan `pl` (built for v) into `dst`: local and mapped same-node
 * rows by memcpy, the rest through the transport (dds_store_read.c). */
int dds_rd_exec(dds_store_t *s, dds_reader_t *reader, dds_var_t *v,
                tctx_t *tc, dds_plan_t *pl, void *dst, size_t dbytes,
                const dds_mem_t *dst_mem, int route, rd_acct_t *a);
/* A read's profile: `calls` calls delivering `rows` rows of `bytes`. */
void dds_rd_account(dds_var_t *v, uint64_t calls, uint64_t rows,
                    uint64_t bytes, const rd_acct_t *a);
/* A read's start: 0 with the table's read lock held, or an error without. */
int dds_rd_begin(dds_store_t *s, dds_reader_t *reader, const char *name,
                 const dds_buf_t *dst, dds_var_t **v_p, int *route_p,
                 tctx_t **tc_p, rd_acct_t *a);
/* The caller's indices copied once into the thread's context. */
int dds_rd_copy_rows(tctx_t *tc, const char *name, const int64_t **rows_p,
                     size_t n);
/* The error for a read of the wrong kind of variable. */
int dds_rd_wrong_kind(const dds_var_t *v, const char *call);

#endif /* DDS_STORE_READ_INTERNAL_H */
