/* ddstore-core tests: check a plan's invariants and execute it over
 * in-memory shards (header-only, test code). */
#ifndef DDSTORE_TEST_PLAN_CHECK_H
#define DDSTORE_TEST_PLAN_CHECK_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddstore/plan.h"

/* Byte `b` of global row `row`. */
static inline unsigned char pc_pattern(int64_t row, size_t b)
{
    uint64_t x = (uint64_t)row * 0x9E3779B97F4A7C15ull + (uint64_t)b * 0x85EBCA6Bu;
    x ^= x >> 29;
    return (unsigned char)(x ^ (x >> 17));
}

static inline int pc_fail(char *why, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
    return -1;
}

/* Structural checks of `plan` for n destination rows.  Returns 0, or -1
 * with a reason in `why`.  When check_merge is set, also checks that no
 * two reads that could have been one were left apart. */
static inline int pc_verify(const dds_plan_params_t *p, size_t n,
                     const dds_plan_t *plan, int check_merge, char *why,
                     size_t whylen)
{
    size_t rb = p->row_bytes, maxr = p->max_read_bytes;
    size_t merge = p->merge_row_bytes_max ? p->merge_row_bytes_max
                                          : DDS_PLAN_MERGE_ROW_BYTES_DEFAULT;
    size_t dst_bytes = n * rb;
    int seen_repeat = 0;
    int direct = (p->field_mask & DDS_PLAN_PARAM_FLAGS) &&
                 (p->flags & DDS_PLAN_DIRECT);

    if (direct) {   /* no staging, no copies: a repeat is read again */
        if (plan->ncopies != 0 || plan->staging_bytes != 0)
            return pc_fail(why, whylen, "direct plan with %zu copies, %zu "
                           "staging bytes", plan->ncopies,
                           plan->staging_bytes);
        merge = 0;  /* so a staged op fails below */
    }

    if (plan->nrows != n)
        return pc_fail(why, whylen, "nrows %zu != %zu", plan->nrows, n);
    /* grouped by owner, owners ascending: what dds_plan_owner_first needs */
    for (size_t i = 0; i < plan->nops; i++)
        if (plan->ops[i].owner < 0 || plan->ops[i].owner >= p->nranks ||
            (i > 0 && plan->ops[i].owner < plan->ops[i - 1].owner))
            return pc_fail(why, whylen, "op %zu: owner %d after %d", i,
                           plan->ops[i].owner, i > 0 ? plan->ops[i - 1].owner : -1);
    if (dds_plan_owner_first(plan, 0) != 0 ||
        dds_plan_owner_first(plan, p->nranks) != plan->nops)
        return pc_fail(why, whylen, "owner_first ends %zu..%zu, nops %zu",
                       dds_plan_owner_first(plan, 0),
                       dds_plan_owner_first(plan, p->nranks), plan->nops);
    for (int r = 0; r < p->nranks; r++) {
        size_t a = dds_plan_owner_first(plan, r), b = dds_plan_owner_first(plan, r + 1);
        int64_t shard = (p->offsets[r + 1] - p->offsets[r]) * (int64_t)rb;
        if (a > b)
            return pc_fail(why, whylen, "owner_first decreases at %d", r);
        for (size_t i = a; i < b; i++) {
            const dds_read_op_t *op = &plan->ops[i];
            if (op->owner != r)
                return pc_fail(why, whylen, "op %zu has owner %d in group %d",
                               i, op->owner, r);
            if (op->len == 0 || (maxr != 0 && op->len > maxr))
                return pc_fail(why, whylen, "op %zu len %zu (max %zu)", i,
                               op->len, maxr);
            if (op->src_offset < 0 ||
                op->src_offset + (int64_t)op->len > shard)
                return pc_fail(why, whylen,
                               "op %zu reads [%lld, +%zu) of a %lld-byte shard",
                               i, (long long)op->src_offset, op->len,
                               (long long)shard);
            if (op->staged) {
                if (rb > merge)
                    return pc_fail(why, whylen, "op %zu staged %zu-byte rows",
                                   i, rb);
                if (op->dst_offset + op->len > plan->staging_bytes)
                    return pc_fail(why, whylen, "op %zu beyond staging", i);
            } else if (op->dst_offset + op->len > dst_bytes) {
                return pc_fail(why, whylen, "op %zu beyond dst", i);
            }
            if (i > a) {
                const dds_read_op_t *q = &plan->ops[i - 1];
                /* direct: a repeat's reads follow its first occurrence's */
                if (!direct &&
                    q->src_offset + (int64_t)q->len > op->src_offset)
                    return pc_fail(why, whylen,
                                   "ops %zu,%zu not sorted/disjoint by source",
                                   i - 1, i);
                if (check_merge && q->src_offset + (int64_t)q->len ==
                                       op->src_offset) {
                    int split = maxr != 0 && q->len == maxr &&
                                q->staged == op->staged &&
                                q->dst_offset + q->len == op->dst_offset;
                    int bigrows = rb > merge && !q->staged && !op->staged &&
                                  q->dst_offset + q->len != op->dst_offset;
                    if (!split && !bigrows)
                        return pc_fail(why, whylen,
                                       "ops %zu,%zu are adjacent in the shard "
                                       "but not merged",
                                       i - 1, i);
                }
            }
        }
    }
    for (size_t i = 0; i < plan->ncopies; i++) {
        const dds_copy_op_t *c = &plan->copies[i];
        if (c->len == 0 || c->dst_offset + c->len > dst_bytes)
            return pc_fail(why, whylen, "copy %zu out of dst", i);
        if (c->from_staging) {
            if (seen_repeat)
                return pc_fail(why, whylen, "staging copy %zu after a "
                                            "repeat copy", i);
            if (c->src_offset + c->len > plan->staging_bytes)
                return pc_fail(why, whylen, "copy %zu out of staging", i);
        } else {
            seen_repeat = 1;
            if (c->src_offset + c->len > dst_bytes)
                return pc_fail(why, whylen, "copy %zu source out of dst", i);
        }
    }
    /* every destination byte written exactly once (reads + copies) */
    if (dst_bytes <= (64u << 20)) {
        unsigned char *cnt = calloc(dst_bytes + 1, 1);
        int bad = 0;
        for (size_t i = 0; i < plan->nops && !bad; i++)
            if (!plan->ops[i].staged)
                for (size_t k = 0; k < plan->ops[i].len; k++)
                    cnt[plan->ops[i].dst_offset + k]++;
        for (size_t i = 0; i < plan->ncopies; i++)
            for (size_t k = 0; k < plan->copies[i].len; k++)
                cnt[plan->copies[i].dst_offset + k]++;
        for (size_t k = 0; k < dst_bytes; k++) {
            if (cnt[k] != 1) {
                bad = 1;
                pc_fail(why, whylen, "dst byte %zu written %d times", k,
                        cnt[k]);
                break;
            }
        }
        free(cnt);
        if (bad)
            return -1;
    }
    return 0;
}

/* Execute: reads from shards[owner], then copies in order. */
static inline void pc_execute(const dds_plan_t *plan, unsigned char *const *shards,
                       unsigned char *dst, unsigned char *staging)
{
    for (size_t i = 0; i < plan->nops; i++) {
        const dds_read_op_t *op = &plan->ops[i];
        memcpy((op->staged ? staging : dst) + op->dst_offset,
               shards[op->owner] + op->src_offset, op->len);
    }
    for (size_t i = 0; i < plan->ncopies; i++) {
        const dds_copy_op_t *c = &plan->copies[i];
        memcpy(dst + c->dst_offset,
               (c->from_staging ? staging : dst) + c->src_offset, c->len);
    }
}

/* Shards filled with pc_pattern for a layout (caller frees each + array). */
static inline unsigned char **pc_make_shards(const int64_t *off, int nranks,
                                      size_t rb)
{
    unsigned char **s = calloc((size_t)nranks, sizeof(*s));
    for (int r = 0; r < nranks; r++) {
        size_t rows = (size_t)(off[r + 1] - off[r]);
        s[r] = malloc(rows * rb + 1);
        for (size_t i = 0; i < rows; i++)
            for (size_t b = 0; b < rb; b++)
                s[r][i * rb + b] = pc_pattern(off[r] + (int64_t)i, b);
    }
    return s;
}

static inline void pc_free_shards(unsigned char **s, int nranks)
{
    for (int r = 0; r < nranks; r++)
        free(s[r]);
    free(s);
}

/* Symbolic execution for layouts too big to allocate: tracks which global
 * row lands in each destination row.  Needs row-aligned ops (max_read_bytes
 * 0 or a multiple of row_bytes).  Returns 0 if dst row i <- rows[i] for all
 * i, else -1 with a reason. */
static inline int pc_symbolic(const dds_plan_params_t *p, const int64_t *rows,
                       size_t n, const dds_plan_t *plan, char *why,
                       size_t whylen)
{
    size_t rb = p->row_bytes, nst = plan->staging_bytes / rb;
    int64_t *d = malloc((n + 1) * sizeof(int64_t));
    int64_t *st = malloc((nst + 1) * sizeof(int64_t));
    int rc = 0;
    for (size_t i = 0; i < n; i++)
        d[i] = -1;
    for (size_t i = 0; i < nst; i++)
        st[i] = -1;
    for (size_t i = 0; i < plan->nops && rc == 0; i++) {
        const dds_read_op_t *op = &plan->ops[i];
        if (op->len % rb || (size_t)op->src_offset % rb || op->dst_offset % rb) {
            rc = pc_fail(why, whylen, "op %zu not row-aligned", i);
            break;
        }
        for (size_t k = 0; k < op->len / rb; k++) {
            int64_t id = p->offsets[op->owner] + op->src_offset / (int64_t)rb +
                         (int64_t)k;
            (op->staged ? st : d)[op->dst_offset / rb + k] = id;
        }
    }
    for (size_t i = 0; i < plan->ncopies && rc == 0; i++) {
        const dds_copy_op_t *c = &plan->copies[i];
        for (size_t k = 0; k < c->len / rb; k++)
            d[c->dst_offset / rb + k] =
                (c->from_staging ? st : d)[c->src_offset / rb + k];
    }
    for (size_t i = 0; i < n && rc == 0; i++)
        if (d[i] != rows[i])
            rc = pc_fail(why, whylen, "dst row %zu got row %lld, wanted %lld",
                         i, (long long)d[i], (long long)rows[i]);
    free(d);
    free(st);
    return rc;
}

#endif
