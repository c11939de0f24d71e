/* ddstore-core: the store: the ragged steps of the one planned read
 * (dds_store_read.c executes them): each ragged variable's index plan, its
 * lengths from the entries read, its payload plan (samples packed in
 * request order).  Planning only: nothing here moves bytes. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dds_store_read_internal.h"

/* Variable m's index plan: the index entries of samples rows[0..n) (the
 * prefix sums at local sample l and l + 1 of its owner: two 8-byte rows of
 * the index plan, whose "shards" are each owner's index at the start of
 * its shard), into its slot of tc->irows / tc->owners. */
int dds_rd_ragged_index_plan(dds_store_t *s, tctx_t *tc, rd_var_t *m,
                      const int64_t *rows, size_t n)
{
    dds_var_t *v = m->v;
    const int64_t total_rows = v->offsets[v->nranks];
    int64_t *irows = tc->irows + 2 * n * m->ri;
    int *owners = tc->owners + n * m->ri;
    dds_plan_params_t pp;
    int rc;

    for (size_t i = 0; i < n; i++) {
        int64_t local;
        int owner;
        if (DDS_UNLIKELY((uint64_t)rows[i] >= (uint64_t)total_rows))
            return dds_error(-DDS_ERANGE,
                             "variable '%s': index %lld at position %zu is "
                             "out of range [0, %lld)",
                             v->name, (long long)rows[i], i,
                             (long long)total_rows);
        (void)dds_layout_locate(v->offsets, v->nranks, rows[i], &owner,
                                &local);
        owners[i] = owner;
        irows[2 * i] = v->index_offsets[owner] + local;
        irows[2 * i + 1] = v->index_offsets[owner] + local + 1;
    }
    pp.field_mask = 0;
    pp.nranks = v->nranks;
    pp.offsets = v->index_offsets;
    pp.row_bytes = sizeof(int64_t);
    pp.max_read_bytes = s->max_read_bytes;
    pp.merge_row_bytes_max = s->merge_row_bytes;
    rc = dds_plan_batch(&pp, irows, 2 * n, m->pl);
    if (rc != 0)
        return dds_error(rc, "variable '%s': index: %s", v->name,
                         dds_last_error());
    return 0;
}

/* Variable m's lengths from the entries read, checked; their sum. */
int dds_rd_ragged_lengths(tctx_t *tc, rd_var_t *m, const int64_t *rows,
                          size_t n)
{
    const dds_var_t *v = m->v;
    const int64_t *ent = tc->ientries + 2 * n * m->ri;
    const int *owners = tc->owners + n * m->ri;
    int64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        const int r = owners[i];
        const int64_t b = ent[2 * i], e = ent[2 * i + 1];
        const int64_t elems = v->elem_offsets[r + 1] - v->elem_offsets[r];
        if (b < 0 || e < b || e > elems)
            return dds_error(-DDS_EIO,
                             "ragged variable '%s': the index entry of "
                             "sample %lld (rank %d) reads element rows "
                             "[%lld, %lld) of the %lld that rank holds: the "
                             "index is damaged",
                             v->name, (long long)rows[i], r, (long long)b,
                             (long long)e, (long long)elems);
        if (e - b > INT64_MAX - sum)
            return dds_error(-DDS_EINVAL,
                             "ragged variable '%s': the %zu samples' "
                             "lengths sum above INT64_MAX (at position %zu)",
                             v->name, n, i);
        sum += e - b;
        if (m->d->lengths != NULL)
            m->d->lengths[i] = e - b;
    }
    m->d->total = sum;
    return 0;
}

int dds_rd_ragged_plan(dds_store_t *s, tctx_t *tc, rd_var_t *m, size_t n)
{
    const dds_var_t *v = m->v;
    const int64_t *ent = tc->ientries + 2 * n * m->ri;
    const int *owners = tc->owners + n * m->ri;
    const size_t rb = v->row_bytes;
    int rc;

    if (dds_st_grow_array((void **)&tc->spans, &tc->spans_cap, n,
                          sizeof(dds_span_t)) != 0)
        return dds_error(-DDS_ENOMEM,
                         "read of '%s': out of memory for %zu samples",
                         v->name, n);
    for (size_t i = 0; i < n; i++) {
        const int r = owners[i];
        const int64_t b = ent[2 * i], e = ent[2 * i + 1];
        dds_span_t *sp = &tc->spans[i];
        sp->owner = r;
        sp->src_offset =
            (int64_t)dds_st_ragged_index_bytes(v->offsets[r + 1] -
                                               v->offsets[r]) +
            b * (int64_t)rb;
        sp->len = (size_t)(e - b) * rb;
    }
    rc = dds_plan_spans(v->nranks, s->max_read_bytes, tc->spans, n, m->pl);
    if (rc != 0)
        return dds_error(rc, "variable '%s': %s", v->name, dds_last_error());
    return 0;
}
