/* ddstore-core: the store: the read pipeline (get, get_batch, get_batch_vars): validate,
 * plan, serve local rows, transport reads, host copies, GPU staging; the
 * per-thread read context (dds_store_read_internal.h, shared with the
 * ragged reads of dds_store_read_ragged.c).
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

#include "dds_store_read_internal.h"

/* ---- per-thread read context ------------------------------------------ */


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
    dds_plan_fini(&c->iplan);
    free(c->staging);
    free(c->rows);
    free(c->irows);
    free(c->ientries);
    free(c->owners);
    free(c->spans);
    for (size_t i = 0; i < c->mplans_cap; i++)
        dds_plan_fini(&c->mplans[i]);
    free(c->mplans);
    free(c->mvars);
    free(c->mops);
    free(c->mreqs);
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
    dds_plan_init(&c->iplan);
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
    a = dds_plan_owner_first(pl, me);
    b = dds_plan_owner_first(pl, me + 1);
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
 * host-to-device copy on dst_mem->stream and give the buffer back without
 * waiting (its event keeps it from being reused before the copy ran). */
static int read_staged(dds_store_t *s, dds_reader_t *reader, dds_var_t *v,
                       const dds_plan_t *pl, dds_read_op_t *ops,
                       size_t *nops_p, void *dst, size_t dbytes,
                       const dds_mem_t *dst_mem, rd_acct_t *a)
{
    static const dds_mem_t host = {DDS_MEM_HOST, 0, NULL};
    const dds_memops_t *o = s->ms.ops;
    const size_t soff = (dbytes + 63) & ~(size_t)63;
    const size_t total = soff + pl->staging_bytes;
    void *sbuf = NULL, *hp = NULL;
    char *h, *stg;
    dds_memseg_t seg;
    uint64_t t0;
    size_t served = 0;
    int rc, rc2;

    if (dbytes == 0) {
        *nops_p = 0;
        return 0;
    }
    t0 = dds_prof_now();
    rc = o->staging_acquire(s->ms.ctx, total, &sbuf, &hp);
    a->t_gpu += dds_prof_now() - t0;
    if (rc != 0)
        return dds_error(rc < 0 ? rc : -rc,
                         "read of '%s' into %s memory: cannot get a pinned "
                         "staging buffer of %zu bytes: %s",
                         v->name, dds_st_mem_name(dst_mem->kind), total,
                         dds_last_error());
    h = hp;
    stg = pl->staging_bytes > 0 ? h + soff : NULL;
    a->local_bytes += serve_local(s, v, pl, ops, nops_p, h, stg);
    /* rows of same-node owners from their mapped shards */
    rc = dds_st_shard_serve(s, v, ops, nops_p, h, stg, &served);
    a->nops += served;
    if (rc == 0 && (*nops_p > 0 || served > 0)) /* served: the reader */
        rc = transport_read(s, reader, v, ops, *nops_p, h, NULL, &host, stg,
                            NULL, &a->wait_ns, &a->t_xfer);
    t0 = dds_prof_now();
    if (rc == 0) {
        host_copies(pl, h, stg);
        seg.src_offset = 0;
        seg.dst_offset = 0;
        seg.len = dbytes;
        rc = o->copy_async(s->ms.ctx, DDS_COPY_H2D, dst, h, &seg, 1, dst_mem,
                           sbuf);
        if (rc != 0)
            rc = dds_error(rc < 0 ? rc : -rc,
                           "read of '%s': copy from the staging buffer to "
                           "%s memory failed: %s",
                           v->name, dds_st_mem_name(dst_mem->kind),
                           dds_last_error());
    }
    rc2 = o->staging_release(s->ms.ctx, sbuf);
    a->t_gpu += dds_prof_now() - t0;
    if (rc == 0 && rc2 != 0)
        rc = dds_error(rc2 < 0 ? rc2 : -rc2,
                       "read of '%s': releasing the staging buffer: %s",
                       v->name, dds_last_error());
    if (rc == 0) {
        a->staged += dbytes + pl->staging_bytes;
        DDS_LOG_ONCE(DDS_LOG_WARN, DDS_SUBSYS_CORE,
                     "reads into %s memory go through pinned host staging "
                     "buffers: transport '%s' cannot reach %s memory (no "
                     "FI_HMEM); counted as staged_bytes in the profile; "
                     "DDSTORE_GPU_STAGING=0 makes this an error",
                     dds_st_mem_name(dst_mem->kind),
                     s->tr.ops->name ? s->tr.ops->name : "?",
                     dds_st_mem_name(dst_mem->kind));
    }
    return rc;
}

/* Execute plan `pl` (built for v) into `dst` (dbytes, memory dst_mem,
 * moved by `route`): this rank's rows and those of same-node owners whose
 * shards are mapped here (host and staged routes) by memcpy, the rest
 * through the transport, then the plan's copies; GPU destinations direct or staged.
 * Both the fixed-row and the ragged reads (each of its steps) end here. */
int dds_rd_exec(dds_store_t *s, dds_reader_t *reader, dds_var_t *v,
                tctx_t *tc, dds_plan_t *pl, void *dst, size_t dbytes,
                const dds_mem_t *dst_mem, int route, rd_acct_t *a)
{
    dds_read_op_t *ops = pl->ops;
    size_t nops = pl->nops;
    int rc = 0;

    if (route == ROUTE_HOST) {
        void *dh, *sh = NULL;
        if (pl->staging_bytes > 0 &&
            tctx_staging(tc, pl->staging_bytes) != 0)
            return dds_error(-DDS_ENOMEM,
                             "read of '%s': cannot allocate %zu staging "
                             "bytes", v->name, pl->staging_bytes);
        /* rows of this rank straight from the local shard's host view */
        a->local_bytes += serve_local(s, v, pl, ops, &nops, (char *)dst,
                                      (char *)tc->staging);
        /* rows of same-node owners from their mapped shards */
        size_t served = 0;
        rc = dds_st_shard_serve(s, v, ops, &nops, (char *)dst,
                                (char *)tc->staging, &served);
        a->nops += served;
        if (rc != 0)
            return rc;
        /* also with no op left when some were served: the transport may
         * refuse the reader (an inherited one in a forked child) */
        if (nops > 0 || served > 0) {
            dh = dds_st_reg_lookup(s, dst, dbytes);
            if (pl->staging_bytes > 0)
                sh = dds_st_reg_lookup(s, tc->staging, pl->staging_bytes);
            rc = transport_read(s, reader, v, ops, nops, dst, dh, dst_mem,
                                tc->staging, sh, &a->wait_ns, &a->t_xfer);
            if (rc != 0)
                return rc;
        }
        host_copies(pl, (char *)dst, (const char *)tc->staging);
        a->staged += pl->staging_bytes;
    } else if (route == ROUTE_DIRECT) {
        /* The NIC writes into GPU memory: queued kernels that still use the
         * destination must be done first.  One event on the caller's
         * stream, never a device-wide synchronise.  Without a memsys for
         * this memory the caller orders (C users, tests). */
        if (dbytes > 0 && dds_st_ms_serves(s, dst_mem->kind)) {
            uint64_t tg = dds_prof_now();
            rc = s->ms.ops->stream_fence(s->ms.ctx, dst_mem);
            a->t_gpu += dds_prof_now() - tg;
            if (rc != 0)
                return dds_error(rc < 0 ? rc : -rc,
                                 "read of '%s': waiting for the work queued "
                                 "on the destination's stream: %s",
                                 v->name, dds_last_error());
        }
        if (nops > 0) {
            void *dh = dds_st_reg_lookup(s, dst, dbytes);
            rc = transport_read(s, reader, v, ops, nops, dst, dh, dst_mem,
                                NULL, NULL, &a->wait_ns, &a->t_xfer);
            if (rc == -DDS_ENOSYS &&
                dds_st_hmem_failed(s, dst_mem->kind, v->name)) {
                /* the registration result says no: the same read, staged */
                rc = read_staged(s, reader, v, pl, ops, &nops, dst, dbytes,
                                 dst_mem, a);
            }
            if (rc != 0)
                return rc;
        }
    } else {
        rc = read_staged(s, reader, v, pl, ops, &nops, dst, dbytes, dst_mem,
                         a);
        if (rc != 0)
            return rc;
    }
    a->nops += nops;
    return 0;
}

/* A read's profile: `calls` calls delivering `rows` rows of `bytes`. */
void dds_rd_account(dds_var_t *v, uint64_t calls, uint64_t rows,
                    uint64_t bytes, const rd_acct_t *a)
{
    dds_prof_add(&v->prof, DDS_PROF_CALLS, calls);
    dds_prof_add(&v->prof, DDS_PROF_ROWS, rows);
    dds_prof_add(&v->prof, DDS_PROF_BYTES, bytes);
    dds_prof_add(&v->prof, DDS_PROF_READS, (uint64_t)a->nops);
    dds_prof_add(&v->prof, DDS_PROF_LOCAL_BYTES, a->local_bytes);
    dds_prof_add(&v->prof, DDS_PROF_STAGED_BYTES, a->staged);
    dds_prof_add(&v->prof, DDS_PROF_NS_LOCK_WAIT, a->wait_ns);
    dds_prof_add(&v->prof, DDS_PROF_NS_GPU_SYNC, a->t_gpu);
    if (a->t0 != 0) {
        uint64_t total = a->total_ns != 0 ? a->total_ns : dds_prof_now() - a->t0;
        uint64_t known = a->wait_ns + a->t_xfer + a->t_gpu;
        dds_prof_add(&v->prof, DDS_PROF_NS_OTHER,
                     total > known ? total - known : 0);
        dds_prof_add(&v->prof, DDS_PROF_NS_TOTAL, total);
    }
}

/* A read's start, for every kind: checks the arguments (dst may be NULL:
 * a ragged size query), takes the table's read lock, finds the variable,
 * checks the destination and its route, gets the thread's context.  0 with
 * the lock held, or an error without it. */
int dds_rd_begin(dds_store_t *s, dds_reader_t *reader, const char *name,
                 const dds_buf_t *dst, dds_var_t **v_p, int *route_p,
                 tctx_t **tc_p, rd_acct_t *a)
{
    dds_var_t *v;
    int rc;

    memset(a, 0, sizeof(*a));
    a->t0 = dds_prof_now();
    *route_p = ROUTE_HOST;
    if (DDS_UNLIKELY(s == NULL))
        return dds_error(-DDS_EINVAL, "read: NULL store");
    rc = dds_st_check_name(name);
    if (rc != 0)
        return rc;
    if (reader != NULL && reader->store != s)
        return dds_error(-DDS_EINVAL,
                         "read of '%s': the reader belongs to another store",
                         name);
    a->wait_ns = dds_st_lock_read_timed(&s->table_lock);

    /* validate everything before any byte moves */
    v = dds_st_find_var(s, name, NULL);
    if (v == NULL) {
        rc = dds_st_not_live(s, name);
        goto fail;
    }
    if (dst != NULL) {
        rc = dds_st_check_buf(v, dst);
        if (rc != 0)
            goto fail;
        if (dst->mem.kind != DDS_MEM_HOST) {
            char what[DDS_NAME_MAX + 32];
            snprintf(what, sizeof(what), "read of '%s'", name);
            rc = dds_st_mem_route(s, &dst->mem, what, 0, route_p);
            if (rc != 0)
                goto fail;
        }
    }
    *tc_p = tctx_get();
    if (*tc_p == NULL) {
        rc = dds_error(-DDS_ENOMEM, "read of '%s': out of memory", name);
        goto fail;
    }
    *v_p = v;
    return 0;
fail:
    pthread_rwlock_unlock(&s->table_lock);
    return rc;
}

/* The caller's indices, read once, here: the plan passes over them several
 * times (check, sort, walk) and the GPU path once more, so an array that
 * another thread changes meanwhile would otherwise be checked in one state
 * and read in another.  *rows_p then points at the copy. */
int dds_rd_copy_rows(tctx_t *tc, const char *name, const int64_t **rows_p,
                     size_t n)
{
    if (n == 0)
        return 0;
    if (*rows_p == NULL)
        return dds_error(-DDS_EINVAL, "variable '%s': indices are NULL",
                         name);
    if (n > SIZE_MAX / sizeof(int64_t) ||
        dds_st_grow_array((void **)&tc->rows, &tc->rows_cap, n,
                          sizeof(int64_t)) != 0)
        return dds_error(-DDS_ENOMEM,
                         "read of '%s': out of memory for %zu indices", name,
                         n);
    memcpy(tc->rows, *rows_p, n * sizeof(int64_t));
    *rows_p = tc->rows;
    return 0;
}

/* The error for a read of the wrong kind of variable. */
int dds_rd_wrong_kind(const dds_var_t *v, const char *call)
{
    if (v->ragged)
        return dds_error(-DDS_EINVAL,
                         "variable '%s' is ragged (samples of varying "
                         "length): %s reads fixed-size rows; use "
                         "ragged_get_batch / ragged_sizes (update: "
                         "ragged_update)",
                         v->name, call);
    return dds_error(-DDS_EINVAL,
                     "variable '%s' has fixed-size rows, not ragged samples: "
                     "%s reads ragged variables; use get / get_batch "
                     "(update: var_update)",
                     v->name, call);
}

static int store_read(dds_store_t *s, dds_reader_t *reader, const char *name,
                      const dds_buf_t *dst, const int64_t *rows, size_t n,
                      int64_t start, int is_batch)
{
    dds_plan_params_t pp;
    rd_acct_t a;
    dds_var_t *v;
    tctx_t *tc;
    int rc, route;

    if (DDS_UNLIKELY(s == NULL || dst == NULL))
        return dds_error(-DDS_EINVAL, "read: NULL %s",
                         s == NULL ? "store" : "destination buffer");
    rc = dds_rd_begin(s, reader, name, dst, &v, &route, &tc, &a);
    if (rc != 0)
        return rc;
    if (v->ragged) {
        rc = dds_rd_wrong_kind(v, is_batch ? "get_batch" : "get");
        goto out;
    }
    if (is_batch && (n > (uint64_t)INT64_MAX || (int64_t)n != dst->nrows)) {
        rc = dds_error(-DDS_EINVAL,
                       "variable '%s': %zu indices for a buffer of %lld rows",
                       name, n, (long long)dst->nrows);
        goto out;
    }
    if (is_batch) {
        rc = dds_rd_copy_rows(tc, name, &rows, n);
        if (rc != 0)
            goto out;
    }
    pp.field_mask = 0;
    pp.nranks = v->nranks;
    pp.offsets = v->offsets;
    pp.row_bytes = v->row_bytes;
    pp.max_read_bytes = s->max_read_bytes;
    pp.merge_row_bytes_max = s->merge_row_bytes;
    /* GPU memory the transport writes: no host copies into it, every row
     * is read into its own slot (the staged fallback takes the same plan) */
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
    rc = dds_rd_exec(s, reader, v, tc, &tc->plan, dst->ptr,
                   (size_t)dst->nrows * v->row_bytes, &dst->mem, route, &a);
    if (rc == 0)
        dds_rd_account(v, 1, (uint64_t)dst->nrows,
                     (uint64_t)dst->nrows * (uint64_t)v->row_bytes, &a);
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

/* ---- several variables in one planned call ---------------------------- */

/* One variable of a get_batch_vars call. */
typedef struct mvar {
    dds_var_t *v;
    const dds_buf_t *dst;
    int route;
    int has_req;          /* host route: it has a request in tc->mreqs     */
    dds_plan_t *pl;       /* its plan (shared by host variables of one
                             layout: the plan is read-only, its ops are
                             copied into tc->mops) */
    size_t soff;          /* its staging area in tc->staging (host route) */
    size_t op0, nops;     /* its executable ops: tc->mops[op0 .. op0+nops) */
    rd_acct_t a;
} mvar_t;

/* The same plan serves both: same row distribution, row size and route. */
static int same_layout(const mvar_t *a, const mvar_t *b)
{
    return a->route == b->route && a->v->nranks == b->v->nranks &&
           a->v->row_bytes == b->v->row_bytes &&
           (a->v->offsets == b->v->offsets ||
            memcmp(a->v->offsets, b->v->offsets,
                   (size_t)(a->v->nranks + 1) * sizeof(int64_t)) == 0);
}

static int grow_plans(tctx_t *tc, size_t need)
{
    dds_plan_t *p;
    size_t cap;
    if (need <= tc->mplans_cap)
        return 0;
    cap = need < 8 ? 8 : need;
    if (cap > SIZE_MAX / sizeof(*p))
        return -1;
    p = realloc(tc->mplans, cap * sizeof(*p));
    if (p == NULL)
        return -1;
    for (size_t i = tc->mplans_cap; i < cap; i++)
        dds_plan_init(&p[i]);
    tc->mplans = p;
    tc->mplans_cap = cap;
    return 0;
}

/* The requests of several variables in one transport call (read_multi);
 * the error names every variable of the call. */
static int transport_read_multi(dds_store_t *s, dds_reader_t *reader,
                                const dds_read_req_t *reqs, size_t nreqs,
                                uint64_t *wait_ns, uint64_t *t_xfer)
{
    void *treader = reader != NULL ? reader->treader : NULL;
    uint64_t t1;
    int rc;
    if (s->serialize)
        *wait_ns += dds_st_lock_mutex_timed(&s->tmutex);
    t1 = dds_prof_now();
    rc = s->tr.ops->read_multi(s->tr.ctx, treader, reqs, nreqs);
    *t_xfer += dds_prof_now() - t1;
    if (s->serialize)
        pthread_mutex_unlock(&s->tmutex);
    if (rc != 0) {
        char names[512];
        size_t len = 0;
        if (rc > 0)
            rc = -rc;
        names[0] = '\0';
        for (size_t i = 0; i < nreqs && len + 8 < sizeof(names); i++) {
            int w = snprintf(names + len, sizeof(names) - len, "%s'%s'",
                             i ? ", " : "", reqs[i].name);
            if (w < 0)
                break;
            len += (size_t)w;
        }
        rc = dds_error(rc, "read of variables %s through transport '%s': %s",
                       names, s->tr.ops->name ? s->tr.ops->name : "?",
                       dds_last_error()[0] ? dds_last_error()
                                           : dds_strerror(rc));
    }
    return rc;
}

/* The checks of get_batch_vars, every variable before any byte moves; the
 * caller holds the table's read lock. */
static int vars_check(dds_store_t *s, const char *const *names,
                      const dds_buf_t *dsts, size_t nvars, size_t n,
                      mvar_t *mv)
{
    for (size_t k = 0; k < nvars; k++) {
        mvar_t *m = &mv[k];
        int rc;
        memset(m, 0, sizeof(*m));
        m->dst = &dsts[k];
        m->route = ROUTE_HOST;
        m->v = dds_st_find_var(s, names[k], NULL);
        if (m->v == NULL)
            return dds_st_not_live(s, names[k]);
        if (m->v->ragged)
            return dds_rd_wrong_kind(m->v, "get_batch");
        if (n > (uint64_t)INT64_MAX || (int64_t)n != dsts[k].nrows)
            return dds_error(-DDS_EINVAL,
                             "variable '%s': %zu indices for a buffer of "
                             "%lld rows",
                             names[k], n, (long long)dsts[k].nrows);
        rc = dds_st_check_buf(m->v, &dsts[k]);
        if (rc != 0)
            return rc;
        if (dsts[k].mem.kind != DDS_MEM_HOST) {
            char what[DDS_NAME_MAX + 32];
            snprintf(what, sizeof(what), "read of '%s'", names[k]);
            rc = dds_st_mem_route(s, &dsts[k].mem, what, 0, &m->route);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

/* Plan every variable: one plan per distinct layout among the host ones
 * (the owner lookup and sort done once for them), one each for the GPU
 * ones; the host ones' staging areas laid out in one buffer. */
static int vars_plan(dds_store_t *s, tctx_t *tc, mvar_t *mv, size_t nvars,
                     const int64_t *rows, size_t n, size_t *stotal_p,
                     size_t *tops_p)
{
    size_t nplans = 0, stotal = 0, tops = 0;
    if (grow_plans(tc, nvars) != 0)
        return dds_error(-DDS_ENOMEM, "read of '%s': out of memory for %zu "
                         "plans", mv[0].v->name, nvars);
    for (size_t k = 0; k < nvars; k++) {
        mvar_t *m = &mv[k];
        for (size_t j = 0; j < k && m->route == ROUTE_HOST; j++)
            if (same_layout(&mv[j], m)) {
                m->pl = mv[j].pl;
                break;
            }
        if (m->pl == NULL) {
            dds_plan_params_t pp;
            int rc;
            m->pl = &tc->mplans[nplans++];
            pp.field_mask = 0;
            pp.nranks = m->v->nranks;
            pp.offsets = m->v->offsets;
            pp.row_bytes = m->v->row_bytes;
            pp.max_read_bytes = s->max_read_bytes;
            pp.merge_row_bytes_max = s->merge_row_bytes;
            if (m->route == ROUTE_DIRECT) {
                pp.field_mask |= DDS_PLAN_PARAM_FLAGS;
                pp.flags = DDS_PLAN_DIRECT;
            }
            rc = dds_plan_batch(&pp, rows, n, m->pl);
            if (rc != 0)
                return dds_error(rc, "variable '%s': %s", m->v->name,
                                 dds_last_error());
        }
        if (m->route == ROUTE_HOST) {
            m->soff = stotal;
            stotal += (m->pl->staging_bytes + 63) & ~(size_t)63;
            tops += m->pl->nops;
        }
    }
    *stotal_p = stotal;
    *tops_p = tops;
    return 0;
}

/* The host variables: own and same-node rows by memcpy, the rest of all of
 * them in one transport call (read_multi, else read() per variable), then
 * each plan's copies. */
static int vars_read_host(dds_store_t *s, dds_reader_t *reader, tctx_t *tc,
                          mvar_t *mv, size_t nvars, size_t stotal,
                          size_t tops, uint64_t *wait_ns, uint64_t *t_xfer,
                          size_t *nhost_p)
{
    size_t o = 0, nreqs = 0, nhost = 0;
    int rc = 0;

    for (size_t k = 0; k < nvars; k++)
        nhost += mv[k].route == ROUTE_HOST;
    *nhost_p = nhost;
    if (nhost == 0)
        return 0;
    if ((stotal > 0 && tctx_staging(tc, stotal) != 0) ||
        dds_st_grow_array((void **)&tc->mops, &tc->mops_cap, tops + 1,
                          sizeof(dds_read_op_t)) != 0 ||
        dds_st_grow_array((void **)&tc->mreqs, &tc->mreqs_cap, nhost,
                          sizeof(dds_read_req_t)) != 0)
        return dds_error(-DDS_ENOMEM, "read of '%s': out of memory for %zu "
                         "staging bytes and %zu read ops", mv[0].v->name,
                         stotal, tops);
    for (size_t k = 0; k < nvars; k++) {
        mvar_t *m = &mv[k];
        const dds_plan_t *pl = m->pl;
        char *dst = m->dst->ptr;
        char *stg = tc->staging != NULL ? (char *)tc->staging + m->soff
                                        : NULL;
        dds_read_op_t *ops = &tc->mops[o];
        size_t served = 0;
        if (m->route != ROUTE_HOST)
            continue;
        memcpy(ops, pl->ops, pl->nops * sizeof(*ops));
        m->op0 = o;
        m->nops = pl->nops;
        o += pl->nops;
        m->a.local_bytes += serve_local(s, m->v, pl, ops, &m->nops, dst, stg);
        rc = dds_st_shard_serve(s, m->v, ops, &m->nops, dst, stg, &served);
        if (rc != 0)
            return rc;
        m->a.nops += served + m->nops;
        /* also with no op left when some were served: the transport may
         * refuse the reader (an inherited one in a forked child) */
        if (m->nops > 0 || served > 0) {
            const size_t dbytes = (size_t)m->dst->nrows * m->v->row_bytes;
            dds_read_req_t *q = &tc->mreqs[nreqs++];
            q->region = m->v->region;
            q->name = m->v->name;
            q->ops = ops;
            q->nops = m->nops;
            q->dst = dst;
            q->dst_handle = dds_st_reg_lookup(s, dst, dbytes);
            q->dst_mem = &m->dst->mem;
            q->staging = stg;
            q->staging_handle = pl->staging_bytes > 0
                                    ? dds_st_reg_lookup(s, stg,
                                                        pl->staging_bytes)
                                    : NULL;
            q->prof = &m->v->prof;
            m->has_req = 1;
        }
    }
    if (nreqs > 1 && DDS_ST_HAS_OP(s, read_multi)) {
        rc = transport_read_multi(s, reader, tc->mreqs, nreqs, wait_ns,
                                  t_xfer);
    } else {
        const dds_read_req_t *q = tc->mreqs;
        for (size_t k = 0; k < nvars && rc == 0; k++) {
            if (!mv[k].has_req)
                continue;
            rc = transport_read(s, reader, mv[k].v, q->ops, q->nops, q->dst,
                                q->dst_handle, q->dst_mem, q->staging,
                                q->staging_handle, wait_ns, t_xfer);
            q++;
        }
    }
    if (rc != 0)
        return rc;
    for (size_t k = 0; k < nvars; k++) {
        mvar_t *m = &mv[k];
        if (m->route != ROUTE_HOST)
            continue;
        host_copies(m->pl, (char *)m->dst->ptr,
                    tc->staging != NULL ? (char *)tc->staging + m->soff
                                        : NULL);
        m->a.staged += m->pl->staging_bytes;
    }
    return 0;
}

int dds_store_get_batch_vars(dds_store_t *s, dds_reader_t *reader,
                             const char *const *names, const dds_buf_t *dsts,
                             size_t nvars, const int64_t *rows, size_t n)
{
    uint64_t t0, lock_ns, wait_ns = 0, t_xfer = 0, host_ns;
    size_t stotal = 0, tops = 0, nhost = 0;
    mvar_t *mv;
    tctx_t *tc;
    int rc;

    if (DDS_UNLIKELY(s == NULL))
        return dds_error(-DDS_EINVAL, "get_batch_vars: NULL store");
    if (nvars == 0)
        return 0;
    if (names == NULL || dsts == NULL)
        return dds_error(-DDS_EINVAL, "get_batch_vars: NULL %s",
                         names == NULL ? "names" : "destinations");
    for (size_t k = 0; k < nvars; k++) {
        rc = dds_st_check_name(names[k]);
        if (rc != 0)
            return rc;
    }
    if (reader != NULL && reader->store != s)
        return dds_error(-DDS_EINVAL,
                         "read of '%s': the reader belongs to another store",
                         names[0]);
    t0 = dds_prof_now();
    lock_ns = dds_st_lock_read_timed(&s->table_lock);
    tc = tctx_get();
    if (tc == NULL ||
        dds_st_grow_array((void **)&tc->mvars, &tc->mvars_cap, nvars,
                          sizeof(mvar_t)) != 0) {
        rc = dds_error(-DDS_ENOMEM, "read of '%s': out of memory", names[0]);
        goto out;
    }
    mv = tc->mvars;
    rc = vars_check(s, names, dsts, nvars, n, mv);
    if (rc == 0)
        rc = dds_rd_copy_rows(tc, names[0], &rows, n);
    if (rc == 0)
        rc = vars_plan(s, tc, mv, nvars, rows, n, &stotal, &tops);
    if (rc == 0)
        rc = vars_read_host(s, reader, tc, mv, nvars, stotal, tops, &wait_ns,
                            &t_xfer, &nhost);
    if (rc != 0)
        goto out;
    host_ns = dds_prof_now() - t0;
    /* GPU destinations: per variable, as get_batch reads them */
    for (size_t k = 0; k < nvars && rc == 0; k++) {
        mvar_t *m = &mv[k];
        if (m->route == ROUTE_HOST)
            continue;
        m->a.t0 = dds_prof_now();
        rc = dds_rd_exec(s, reader, m->v, tc, m->pl, m->dst->ptr,
                       (size_t)m->dst->nrows * m->v->row_bytes,
                       &m->dst->mem, m->route, &m->a);
    }
    if (rc != 0)
        goto out;
    /* each variable's profile counts one call, as get_batch; the host
     * variables share the time of their common call equally */
    for (size_t k = 0; k < nvars; k++) {
        mvar_t *m = &mv[k];
        if (m->route == ROUTE_HOST) {
            m->a.t0 = t0;
            m->a.wait_ns = (lock_ns + wait_ns) / nhost;
            m->a.t_xfer = t_xfer / nhost;
            m->a.total_ns = host_ns / nhost + 1;
        }
        dds_rd_account(m->v, 1, (uint64_t)n,
                     (uint64_t)n * (uint64_t)m->v->row_bytes, &m->a);
    }
out:
    pthread_rwlock_unlock(&s->table_lock);
    return rc;
}
