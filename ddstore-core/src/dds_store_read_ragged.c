/* ddstore-core: the store: ragged reads (ragged_sizes, ragged_get_batch):
 * the index step, then the payload spans, both through the read pipeline
 * of dds_store_read.c. */
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

/* ---- ragged reads ----------------------------------------------------- */

/* Step 1 of a ragged read: the index entries of samples rows[0..n) (the
 * prefix sums at local sample l and l + 1 of its owner: two 8-byte rows of
 * the index plan, whose "shards" are each owner's index at the start of
 * its shard), read through the same pipeline as rows (own entries by
 * memcpy, the rest batched per owner).  Leaves tc->ientries[2i, 2i+1] and
 * tc->owners[i]; the lengths, their sum, checked. */
static int ragged_index(dds_store_t *s, dds_reader_t *reader, dds_var_t *v,
                        tctx_t *tc, const int64_t *rows, size_t n,
                        int64_t *lengths_out, int64_t *total_p, rd_acct_t *a)
{
    static const dds_mem_t host = {DDS_MEM_HOST, 0, NULL};
    const int64_t total_rows = v->offsets[v->nranks];
    dds_plan_params_t pp;
    int64_t sum = 0;
    int rc;

    *total_p = 0;
    if (n == 0)
        return 0;
    if (n > SIZE_MAX / (2 * sizeof(int64_t)) ||
        dds_st_grow_array((void **)&tc->irows, &tc->irows_cap, 2 * n,
                          sizeof(int64_t)) != 0 ||
        dds_st_grow_array((void **)&tc->ientries, &tc->ientries_cap, 2 * n,
                          sizeof(int64_t)) != 0 ||
        dds_st_grow_array((void **)&tc->owners, &tc->owners_cap, n,
                          sizeof(int)) != 0)
        return dds_error(-DDS_ENOMEM,
                         "read of '%s': out of memory for %zu samples",
                         v->name, n);
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
        tc->owners[i] = owner;
        tc->irows[2 * i] = v->index_offsets[owner] + local;
        tc->irows[2 * i + 1] = v->index_offsets[owner] + local + 1;
    }
    pp.field_mask = 0;
    pp.nranks = v->nranks;
    pp.offsets = v->index_offsets;
    pp.row_bytes = sizeof(int64_t);
    pp.max_read_bytes = s->max_read_bytes;
    pp.merge_row_bytes_max = s->merge_row_bytes;
    rc = dds_plan_batch(&pp, tc->irows, 2 * n, &tc->iplan);
    if (rc != 0)
        return dds_error(rc, "variable '%s': index: %s", v->name,
                         dds_last_error());
    rc = dds_rd_exec(s, reader, v, tc, &tc->iplan, tc->ientries,
                   2 * n * sizeof(int64_t), &host, ROUTE_HOST, a);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        const int r = tc->owners[i];
        const int64_t b = tc->ientries[2 * i], e = tc->ientries[2 * i + 1];
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
        if (lengths_out != NULL)
            lengths_out[i] = e - b;
    }
    *total_p = sum;
    return 0;
}

/* sizes (dst NULL) or get_batch of a ragged variable. */
static int ragged_read(dds_store_t *s, dds_reader_t *reader,
                       const char *name, const dds_buf_t *dst,
                       const int64_t *rows, size_t n, int64_t *lengths_out,
                       int64_t *total_out)
{
    const char *call = dst != NULL ? "ragged_get_batch" : "ragged_sizes";
    int64_t total = 0;
    rd_acct_t a;
    dds_var_t *v;
    tctx_t *tc;
    size_t rb;
    int rc, route;

    rc = dds_rd_begin(s, reader, name, dst, &v, &route, &tc, &a);
    if (rc != 0)
        return rc;
    if (!v->ragged) {
        rc = dds_rd_wrong_kind(v, call);
        goto out;
    }
    if (n > 0 && lengths_out == NULL && dst == NULL) {
        rc = dds_error(-DDS_EINVAL, "%s('%s'): lengths_out is NULL", call,
                       name);
        goto out;
    }
    if (dst != NULL && total_out == NULL) {
        rc = dds_error(-DDS_EINVAL, "%s('%s'): total_out is NULL", call,
                       name);
        goto out;
    }
    rc = dds_rd_copy_rows(tc, name, &rows, n);
    if (rc == 0)
        rc = ragged_index(s, reader, v, tc, rows, n, lengths_out, &total, &a);
    if (rc != 0)
        goto out;
    if (total_out != NULL)
        *total_out = total;
    if (dst == NULL) {
        dds_rd_account(v, 0, 0, 0, &a);
        goto out;
    }
    if (total > dst->nrows) {
        rc = dds_error(-DDS_ENOSPC,
                       "%s('%s'): the %zu samples have %lld element rows, "
                       "the destination has room for %lld (lengths and the "
                       "total are filled; nothing was read)",
                       call, name, n, (long long)total,
                       (long long)dst->nrows);
        goto out;
    }

    /* step 2: the payload, packed in request order */
    rb = v->row_bytes;
    if (dds_st_grow_array((void **)&tc->spans, &tc->spans_cap, n,
                          sizeof(dds_span_t)) != 0) {
        rc = dds_error(-DDS_ENOMEM,
                       "read of '%s': out of memory for %zu samples", name,
                       n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const int r = tc->owners[i];
        const int64_t b = tc->ientries[2 * i], e = tc->ientries[2 * i + 1];
        dds_span_t *sp = &tc->spans[i];
        sp->owner = r;
        sp->src_offset =
            (int64_t)dds_st_ragged_index_bytes(v->offsets[r + 1] -
                                               v->offsets[r]) +
            b * (int64_t)rb;
        sp->len = (size_t)(e - b) * rb;
    }
    rc = dds_plan_spans(v->nranks, s->max_read_bytes, tc->spans, n,
                        &tc->plan);
    if (rc != 0) {
        rc = dds_error(rc, "variable '%s': %s", name, dds_last_error());
        goto out;
    }
    rc = dds_rd_exec(s, reader, v, tc, &tc->plan, dst->ptr,
                   (size_t)total * rb, &dst->mem, route, &a);
    if (rc == 0)
        dds_rd_account(v, 1, (uint64_t)n, (uint64_t)total * (uint64_t)rb, &a);
out:
    pthread_rwlock_unlock(&s->table_lock);
    return rc;
}

int dds_store_ragged_sizes(dds_store_t *s, dds_reader_t *reader,
                           const char *name, const int64_t *rows, size_t n,
                           int64_t *lengths_out)
{
    return ragged_read(s, reader, name, NULL, rows, n, lengths_out, NULL);
}

int dds_store_ragged_get_batch(dds_store_t *s, dds_reader_t *reader,
                               const char *name, const dds_buf_t *dst,
                               const int64_t *rows, size_t n,
                               int64_t *lengths_out, int64_t *total_out)
{
    if (DDS_UNLIKELY(dst == NULL))
        return dds_error(-DDS_EINVAL, "ragged_get_batch: NULL destination "
                                      "buffer");
    return ragged_read(s, reader, name, dst, rows, n, lengths_out,
                       total_out);
}
