/* ddstore-core: what the store's read files share (dds_store_read.c: the
 * one planned read, dds_store_read_vars, and its execution; 
 * dds_store_read_ragged.c: the ragged variables' index step and payload
 * plans inside it). */
#ifndef DDS_STORE_READ_INTERNAL_H
#define DDS_STORE_READ_INTERNAL_H

#include "dds_store_internal.h"

/* What a read did, for the profile.  total_ns: its share of the time when
 * several variables were read in one call (0: now - t0). */
typedef struct rd_acct {
    uint64_t t0, wait_ns, t_xfer, t_gpu, total_ns;
    size_t nops, local_bytes, staged;
} rd_acct_t;

/* One variable of a planned read. */
typedef struct rd_var {
    dds_read_var_t *d;      /* the caller's descriptor                      */
    dds_var_t *v;
    int route;              /* of d->dst (ROUTE_*)                          */
    dds_plan_t *pl;         /* its plan (fixed variables of one layout and
                               route share one); ragged: the index plan,
                               then the payload's                           */
    size_t ri;              /* ragged: its slot in the ragged arrays        */
    rd_acct_t a;
} rd_var_t;

/* One plan executed into one destination: a variable's share of a
 * transport round (dds_rd_exec). */
typedef struct rd_step {
    dds_var_t *v;
    dds_plan_t *pl;
    void *dst;
    size_t dbytes;
    const dds_mem_t *mem;
    int route;
    rd_acct_t *a;
    /* dds_rd_exec's own */
    size_t soff, nops, served, local;
    void *sbuf;             /* staged: the pinned buffer, its host address  */
    char *h;
    int has_req;
} rd_step_t;

/* ---- per-thread read context ------------------------------------------ */

typedef struct tctx {
    void *staging;
    size_t staging_cap;
    int64_t *rows;          /* the batch's indices, copied once per read   */
    size_t rows_cap;
    dds_plan_t *plans;      /* one slot per variable of the call           */
    size_t plans_cap;
    rd_var_t *vars;
    size_t vars_cap;
    rd_step_t *steps;
    size_t steps_cap;
    dds_read_op_t *ops;     /* the executable ops of every step            */
    size_t ops_cap;
    dds_read_req_t *reqs;
    size_t reqs_cap;
    dds_read_var_t *descs;  /* the one-variable calls' descriptors         */
    size_t descs_cap;
    /* ragged variables: per variable (slot ri) 2n index rows and entries,
     * n owners; the payload spans of one variable at a time */
    int64_t *irows, *ientries;
    size_t irows_cap, ientries_cap;
    int *owners;
    size_t owners_cap;
    dds_span_t *spans;
    size_t spans_cap;
} tctx_t;

/* The calling thread's read context (NULL: out of memory). */
tctx_t *dds_rd_tctx(void);
/* The caller's indices copied once into the thread's context. */
int dds_rd_copy_rows(tctx_t *tc, const char *name, const int64_t **rows_p,
                     size_t n);

/* Execute steps st[0..ns) as one transport round: every step's own and
 * mapped same-node rows by memcpy (host and staged destinations), GPU
 * destinations fenced (direct) or given a pinned staging buffer (staged),
 * then every remaining read in one transport call (read_multi; read() per
 * step without it or for one step), then the plans' copies and the
 * staged host-to-device copies.  wait_ns / t_xfer: the round's lock wait
 * and transport time (the caller shares them). */
int dds_rd_exec(dds_store_t *s, dds_reader_t *reader, tctx_t *tc,
                rd_step_t *st, size_t ns, uint64_t *wait_ns,
                uint64_t *t_xfer);
/* A read's profile: `calls` calls delivering `rows` rows of `bytes`. */
void dds_rd_account(dds_var_t *v, uint64_t calls, uint64_t rows,
                    uint64_t bytes, const rd_acct_t *a);
/* The error for a read of the wrong kind of variable. */
int dds_rd_wrong_kind(const dds_var_t *v, const char *call);

/* The ragged steps (dds_store_read_ragged.c).  m's index plan (into
 * m->pl): the index entries of samples rows[0..n) (checked: -DDS_ERANGE
 * names the variable and the position), its rows in m's slot of
 * tc->irows / tc->owners (grown by the caller for every ragged variable). */
int dds_rd_ragged_index_plan(dds_store_t *s, tctx_t *tc, rd_var_t *m,
                             const int64_t *rows, size_t n);
/* m's lengths (m->d->lengths, m->d->total) from its entries in
 * tc->ientries, checked (a damaged index is -DDS_EIO). */
int dds_rd_ragged_lengths(tctx_t *tc, rd_var_t *m, const int64_t *rows,
                          size_t n);
/* m's payload plan (into m->pl) from its index entries: samples packed in
 * request order. */
int dds_rd_ragged_plan(dds_store_t *s, tctx_t *tc, rd_var_t *m, size_t n);

#endif /* DDS_STORE_READ_INTERNAL_H */
