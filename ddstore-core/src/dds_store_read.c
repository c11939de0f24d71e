/* ddstore-core: the store: the read pipeline (get, get_batch): validate,
 * plan, serve local rows, transport reads, host copies, GPU staging; the
 * per-thread read context.
 * Objects, locks and the helpers the store's files share:
 * dds_store_internal.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "dds_store_internal.h"

/* ---- per-thread read context ------------------------------------------ */

typedef struct tctx {
    dds_plan_t plan;
    void *staging;
    size_t staging_cap;
    int64_t *rows;          /* the batch's indices, copied once per read   */
    size_t rows_cap;
} tctx_t;

static pthread_once_t g_tctx_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_tctx_key;
static int g_tctx_key_ok;
static _Thread_local tctx_t *t_ctx;

static void tctx_free(void *p)
{
    tctx_t *c = p;
    if (c == NULL)
        return;
    dds_plan_fini(&c->plan);
    free(c->staging);
    free(c->rows);
    free(c);
    t_ctx = NULL;
}

static void tctx_key_init(void)
{
    g_tctx_key_ok = pthread_key_create(&g_tctx_key, tctx_free) == 0;
}

static tctx_t *tctx_get(void)
{
    tctx_t *c = t_ctx;
    if (DDS_LIKELY(c != NULL))
        return c;
    pthread_once(&g_tctx_once, tctx_key_init);
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    dds_plan_init(&c->plan);
    if (g_tctx_key_ok)
        pthread_setspecific(g_tctx_key, c);
    t_ctx = c;
    return c;
}

static int tctx_staging(tctx_t *c, size_t bytes)
{
    size_t cap;
    void *p;
    if (bytes <= c->staging_cap)
        return 0;
    cap = 4096;
    while (cap < bytes)
        cap = cap > SIZE_MAX / 2 ? bytes : 2 * cap;
    if (posix_memalign(&p, 64, cap) != 0)
        return -1;
    free(c->staging);
    c->staging = p;
    c->staging_cap = cap;
    return 0;
}

/* ---- reads ------------------------------------------------------------ */

/* Serve the planned ops of this rank from the host view of its shard (the
 * shard itself, or the host mirror of a GPU shard, except in a forked child)
 * with memcpy into `dst` / `staging`, and drop them from ops[0..*nops_p).
 * Only with DDS_TRANSPORT_CAP_LOCAL_SELF (this rank index owns the local
 * shard).  Returns the bytes served. */
static size_t serve_local(const dds_store_t *s, const dds_var_t *v,
                          const dds_plan_t *pl, dds_read_op_t *ops,
                          size_t *nops_p, char *dst, char *staging)
{
    const char *hv =
        v->mem.kind == DDS_MEM_HOST ? (const char *)v->shard
        : atomic_load_explicit(&dds_st_fork_gen, memory_order_relaxed) ==
                s->fork_gen
            ? (const char *)v->mirror
            : NULL;
    const int me = s->comm.rank;
    size_t a, b, bytes = 0;

    if (!(s->tr.caps & DDS_TRANSPORT_CAP_LOCAL_SELF) || hv == NULL ||
        me >= v->nranks)
        return 0;
    a = pl->owner_first[me];
    b = pl->owner_first[me + 1];
    if (b <= a)
        return 0;
    for (size_t i = a; i < b; i++) {
        const dds_read_op_t *op = &ops[i];
        char *to = op->staged ? staging : dst;
        memcpy(to + op->dst_offset, hv + op->src_offset, op->len);
        bytes += op->len;
    }
    memmove(&ops[a], &ops[b], (*nops_p - b) * sizeof(*ops));
    *nops_p -= b - a;
    return bytes;
}

/* The plan's copy ops on host memory: staging -> slot, then first
 * occurrence -> repeats, in order. */
static void host_copies(const dds_plan_t *pl, char *dst, const char *staging)
{
    const dds_copy_op_t *c = pl->copies;
    for (size_t i = 0; i < pl->ncopies; i++) {
        const char *from = c[i].from_staging ? staging : dst;
        memcpy(dst + c[i].dst_offset, from + c[i].src_offset, c[i].len);
    }
}

/* One transport read; the error names the variable and the transport. */
static int transport_read(dds_store_t *s, dds_reader_t *reader, dds_var_t *v,
                          const dds_read_op_t *ops, size_t nops, void *dst,
                          void *dh, const dds_mem_t *dst_mem, void *staging,
                          void *sh, uint64_t *wait_ns, uint64_t *t_xfer)
{
    void *treader = reader != NULL ? reader->treader : NULL;
    uint64_t t1, t2;
    int rc;
    if (s->serialize)
        *wait_ns += dds_st_lock_mutex_timed(&s->tmutex);
    t1 = dds_prof_now();
    rc = s->tr.ops->read(s->tr.ctx, treader, v->region, ops, nops, dst, dh,
                         dst_mem, staging, sh, &v->prof);
    t2 = dds_prof_now();
    *t_xfer += t2 - t1;
    if (s->serialize)
        pthread_mutex_unlock(&s->tmutex);
    if (rc != 0) {
        if (rc > 0)
            rc = -rc;
        rc = dds_error(rc, "read of '%s' through transport '%s': %s", v->name,
                       s->tr.ops->name ? s->tr.ops->name : "?",
                       dds_last_error()[0] ? dds_last_error()
                                           : dds_strerror(rc));
    }
    return rc;
}

/* A GPU destination the transport cannot reach: read into a pinned staging
 * buffer laid out like the destination (plus the plan's own staging area
 * behind it), do the plan's copies on the host, then one asynchronous
 * host-to-device copy on dst->mem.stream and give the buffer back without
 * waiting (its event keeps it from being reused before the copy ran). */
static int read_staged(dds_store_t *s, dds_reader_t *reader, dds_var_t *v,
                       tctx_t *tc, dds_read_op_t *ops, size_t *nops_p,
                       const dds_buf_t *dst, size_t *local_bytes_p,
                       size_t *staged_p, uint64_t *wait_ns, uint64_t *t_xfer,
                       uint64_t *t_gpu)
{
    static const dds_mem_t host = {DDS_MEM_HOST, 0, NULL};
    const dds_memops_t *o = s->ms.ops;
    const size_t dbytes = (size_t)dst->nrows * v->row_bytes;
    const size_t soff = (dbytes + 63) & ~(size_t)63;
    const size_t total = soff + tc->plan.staging_bytes;
    void *sbuf = NULL, *hp = NULL;
    char *h, *stg;
    dds_memseg_t seg;
    uint64_t t0;
    int rc, rc2;

    if (dbytes == 0) {
        *nops_p = 0;
        return 0;
    }
    t0 = dds_prof_now();
    rc = o->staging_acquire(s->ms.ctx, total, &sbuf, &hp);
    *t_gpu += dds_prof_now() - t0;
    if (rc != 0)
        return dds_error(rc < 0 ? rc : -rc,
                         "read of '%s' into %s memory: cannot get a pinned "
                         "staging buffer of %zu bytes: %s",
                         v->name, dds_st_mem_name(dst->mem.kind), total,
                         dds_last_error());
    h = hp;
    stg = tc->plan.staging_bytes > 0 ? h + soff : NULL;
    *local_bytes_p = serve_local(s, v, &tc->plan, ops, nops_p, h, stg);
    rc = 0;
    if (*nops_p > 0)
        rc = transport_read(s, reader, v, ops, *nops_p, h, NULL, &host, stg,
                            NULL, wait_ns, t_xfer);
    t0 = dds_prof_now();
    if (rc == 0) {
        host_copies(&tc->plan, h, stg);
        seg.src_offset = 0;
        seg.dst_offset = 0;
        seg.len = dbytes;
        rc = o->copy_async(s->ms.ctx, DDS_COPY_H2D, dst->ptr, h, &seg, 1,
                           &dst->mem, sbuf);
        if (rc != 0)
            rc = dds_error(rc < 0 ? rc : -rc,
                           "read of '%s': copy from the staging buffer to "
                           "%s memory failed: %s",
                           v->name, dds_st_mem_name(dst->mem.kind),
                           dds_last_error());
    }
    rc2 = o->staging_release(s->ms.ctx, sbuf);
    *t_gpu += dds_prof_now() - t0;
    if (rc == 0 && rc2 != 0)
        rc = dds_error(rc2 < 0 ? rc2 : -rc2,
                       "read of '%s': releasing the staging buffer: %s",
                       v->name, dds_last_error());
    if (rc == 0) {
        *staged_p = dbytes + tc->plan.staging_bytes;
        DDS_LOG_ONCE(DDS_LOG_WARN, DDS_SUBSYS_CORE,
                     "reads into %s memory go through pinned host staging "
                     "buffers: transport '%s' cannot reach %s memory (no "
                     "FI_HMEM); counted as staged_bytes in the profile; "
                     "DDSTORE_GPU_STAGING=0 makes this an error",
                     dds_st_mem_name(dst->mem.kind),
                     s->tr.ops->name ? s->tr.ops->name : "?",
                     dds_st_mem_name(dst->mem.kind));
    }
    return rc;
}

static int store_read(dds_store_t *s, dds_reader_t *reader, const char *name,
                      const dds_buf_t *dst, const int64_t *rows, size_t n,
                      int64_t start, int is_batch)
{
    uint64_t t0 = dds_prof_now(), wait_ns, t_xfer = 0, t_gpu = 0;
    dds_plan_params_t pp;
    dds_read_op_t *ops;
    size_t nops, local_bytes = 0, staged = 0;
    dds_var_t *v;
    tctx_t *tc;
    int rc, route = ROUTE_HOST;

    if (DDS_UNLIKELY(s == NULL || dst == NULL))
        return dds_error(-DDS_EINVAL, "read: NULL %s",
                         s == NULL ? "store" : "destination buffer");
    rc = dds_st_check_name(name);
    if (rc != 0)
        return rc;
    if (reader != NULL && reader->store != s)
        return dds_error(-DDS_EINVAL,
                         "read of '%s': the reader belongs to another store",
                         name);
    wait_ns = dds_st_lock_read_timed(&s->table_lock);

    /* validate everything before any byte moves */
    v = dds_st_find_var(s, name, NULL);
    if (v == NULL) {
        rc = dds_st_not_live(s, name);
        goto out;
    }
    rc = dds_st_check_buf(v, dst);
    if (rc != 0)
        goto out;
    if (is_batch && (n > (uint64_t)INT64_MAX || (int64_t)n != dst->nrows)) {
        rc = dds_error(-DDS_EINVAL,
                       "variable '%s': %zu indices for a buffer of %lld rows",
                       name, n, (long long)dst->nrows);
        goto out;
    }
    if (is_batch && n > 0 && rows == NULL) {
        rc = dds_error(-DDS_EINVAL, "variable '%s': indices are NULL", name);
        goto out;
    }
    if (dst->mem.kind != DDS_MEM_HOST) {
        char what[DDS_NAME_MAX + 32];
        snprintf(what, sizeof(what), "read of '%s'", name);
        rc = dds_st_mem_route(s, &dst->mem, what, 0, &route);
        if (rc != 0)
            goto out;
    }
    tc = tctx_get();
    if (tc == NULL) {
        rc = dds_error(-DDS_ENOMEM, "read of '%s': out of memory", name);
        goto out;
    }
    if (is_batch && n > 0) {
        /* The caller's indices are read once, here: the plan passes over
         * them several times (check, sort, walk) and the GPU path once
         * more, so an array that another thread changes meanwhile would
         * otherwise be checked in one state and read in another. */
        if (n > tc->rows_cap) {
            int64_t *p = n > SIZE_MAX / sizeof(int64_t)
                             ? NULL
                             : realloc(tc->rows, n * sizeof(int64_t));
            if (p == NULL) {
                rc = dds_error(-DDS_ENOMEM,
                               "read of '%s': out of memory for %zu indices",
                               name, n);
                goto out;
            }
            tc->rows = p;
            tc->rows_cap = n;
        }
        memcpy(tc->rows, rows, n * sizeof(int64_t));
        rows = tc->rows;
    }
    pp.field_mask = 0;
    pp.nranks = v->nranks;
    pp.offsets = v->offsets;
    pp.row_bytes = v->row_bytes;
    pp.max_read_bytes = s->max_read_bytes;
    pp.merge_row_bytes_max = s->merge_row_bytes;
    /* GPU memory the transport writes: no host copies into it, every row
     * is read into its own slot (the staged fallback below takes the same
     * plan) */
    if (route == ROUTE_DIRECT) {
        pp.field_mask |= DDS_PLAN_PARAM_FLAGS;
        pp.flags = DDS_PLAN_DIRECT;
    }
    rc = is_batch ? dds_plan_batch(&pp, rows, n, &tc->plan)
                  : dds_plan_range(&pp, start, dst->nrows, &tc->plan);
    if (rc != 0) {
        rc = dds_error(rc, "variable '%s': %s", name, dds_last_error());
        goto out;
    }
    ops = tc->plan.ops;
    nops = tc->plan.nops;

    if (route == ROUTE_HOST) {
        void *dh, *sh = NULL;
        if (tc->plan.staging_bytes > 0 &&
            tctx_staging(tc, tc->plan.staging_bytes) != 0) {
            rc = dds_error(-DDS_ENOMEM,
                           "read of '%s': cannot allocate %zu staging bytes",
                           name, tc->plan.staging_bytes);
            goto out;
        }
        /* rows of this rank straight from the local shard's host view */
        local_bytes = serve_local(s, v, &tc->plan, ops, &nops,
                                  (char *)dst->ptr, (char *)tc->staging);
        if (nops > 0) {
            dh = dds_st_reg_lookup(s, dst->ptr,
                                   (size_t)dst->nrows * v->row_bytes);
            if (tc->plan.staging_bytes > 0)
                sh = dds_st_reg_lookup(s, tc->staging, tc->plan.staging_bytes);
            rc = transport_read(s, reader, v, ops, nops, dst->ptr, dh,
                                &dst->mem, tc->staging, sh, &wait_ns,
                                &t_xfer);
            if (rc != 0)
                goto out;
        }
        host_copies(&tc->plan, (char *)dst->ptr, (const char *)tc->staging);
        staged = tc->plan.staging_bytes;
    } else if (route == ROUTE_DIRECT) {
        /* The NIC writes into GPU memory: queued kernels that still use the
         * destination must be done first.  One event on the caller's
         * stream, never a device-wide synchronise.  Without a memsys for
         * this memory the caller orders (C users, tests). */
        if (dst->nrows > 0 && dds_st_ms_serves(s, dst->mem.kind)) {
            uint64_t tg = dds_prof_now();
            rc = s->ms.ops->stream_fence(s->ms.ctx, &dst->mem);
            t_gpu += dds_prof_now() - tg;
            if (rc != 0) {
                rc = dds_error(rc < 0 ? rc : -rc,
                               "read of '%s': waiting for the work queued on "
                               "the destination's stream: %s",
                               name, dds_last_error());
                goto out;
            }
        }
        if (nops > 0) {
            void *dh = dds_st_reg_lookup(s, dst->ptr,
                                         (size_t)dst->nrows * v->row_bytes);
            rc = transport_read(s, reader, v, ops, nops, dst->ptr, dh,
                                &dst->mem, NULL, NULL, &wait_ns, &t_xfer);
            if (rc == -DDS_ENOSYS &&
                dds_st_hmem_failed(s, dst->mem.kind, name)) {
                /* the registration result says no: the same read, staged */
                rc = read_staged(s, reader, v, tc, ops, &nops, dst,
                                 &local_bytes, &staged, &wait_ns, &t_xfer,
                                 &t_gpu);
            }
            if (rc != 0)
                goto out;
        }
    } else {
        rc = read_staged(s, reader, v, tc, ops, &nops, dst, &local_bytes,
                         &staged, &wait_ns, &t_xfer, &t_gpu);
        if (rc != 0)
            goto out;
    }

    dds_prof_add(&v->prof, DDS_PROF_CALLS, 1);
    dds_prof_add(&v->prof, DDS_PROF_ROWS, (uint64_t)dst->nrows);
    dds_prof_add(&v->prof, DDS_PROF_BYTES,
                 (uint64_t)dst->nrows * (uint64_t)v->row_bytes);
    dds_prof_add(&v->prof, DDS_PROF_READS, (uint64_t)nops);
    dds_prof_add(&v->prof, DDS_PROF_LOCAL_BYTES, local_bytes);
    dds_prof_add(&v->prof, DDS_PROF_STAGED_BYTES, staged);
    dds_prof_add(&v->prof, DDS_PROF_NS_LOCK_WAIT, wait_ns);
    dds_prof_add(&v->prof, DDS_PROF_NS_GPU_SYNC, t_gpu);
    if (t0 != 0) {
        uint64_t total = dds_prof_now() - t0;
        uint64_t known = wait_ns + t_xfer + t_gpu;
        dds_prof_add(&v->prof, DDS_PROF_NS_OTHER,
                     total > known ? total - known : 0);
        dds_prof_add(&v->prof, DDS_PROF_NS_TOTAL, total);
    }
out:
    pthread_rwlock_unlock(&s->table_lock);
    return rc;
}

int dds_store_get(dds_store_t *s, dds_reader_t *reader, const char *name,
                  const dds_buf_t *dst, int64_t start)
{
    return store_read(s, reader, name, dst, NULL, 0, start, 0);
}

int dds_store_get_batch(dds_store_t *s, dds_reader_t *reader,
                        const char *name, const dds_buf_t *dst,
                        const int64_t *rows, size_t n)
{
    return store_read(s, reader, name, dst, rows, n, 0, 1);
}

