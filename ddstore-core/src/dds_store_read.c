/* ddstore-core: the store: the one planned read (dds_store_read_vars; get,
 * get_batch, get_batch_vars, ragged_get_batch and ragged_sizes are it with
 * one or more entries): validate every entry, plan, serve local rows, one
 * transport round for every variable (host and GPU destinations), host
 * copies, GPU staging; the per-thread read context
 * (dds_store_read_internal.h, shared with the ragged steps of
 * dds_store_read_ragged.c).
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
    free(c->staging);
    free(c->rows);
    for (size_t i = 0; i < c->plans_cap; i++)
        dds_plan_fini(&c->plans[i]);
    free(c->plans);
    free(c->vars);
    free(c->steps);
    free(c->ops);
    free(c->reqs);
    free(c->descs);
    free(c->irows);
    free(c->ientries);
    free(c->owners);
    free(c->spans);
    free(c);
    t_ctx = NULL;
}

static void tctx_key_init(void)
{
    g_tctx_key_ok = pthread_key_create(&g_tctx_key, tctx_free) == 0;
}

tctx_t *dds_rd_tctx(void)
{
    tctx_t *c = t_ctx;
    if (DDS_LIKELY(c != NULL))
        return c;
    pthread_once(&g_tctx_once, tctx_key_init);
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
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

static size_t align64(size_t x)
{
    return (x + 63) & ~(size_t)63;
}

/* Give back the staged steps' pinned buffers (their copies, if any, were
 * queued: the buffers' events keep them until the copies ran). */
static int release_staged(dds_store_t *s, rd_step_t *st, size_t ns, int rc)
{
    for (size_t i = 0; i < ns; i++) {
        uint64_t t0;
        int rc2;
        if (st[i].sbuf == NULL)
            continue;
        t0 = dds_prof_now();
        rc2 = s->ms.ops->staging_release(s->ms.ctx, st[i].sbuf);
        st[i].a->t_gpu += dds_prof_now() - t0;
        st[i].sbuf = NULL;
        if (rc == 0 && rc2 != 0)
            rc = dds_error(rc2 < 0 ? rc2 : -rc2,
                           "read of '%s': releasing the staging buffer: %s",
                           st[i].v->name, dds_last_error());
    }
    return rc;
}

/* Before any byte moves: a direct step waits for the work queued on its
 * stream (the NIC writes GPU memory that queued kernels may still use: one
 * event, never a device-wide synchronise; without a memsys for this memory
 * the caller orders); a staged step takes a pinned buffer laid out like
 * its destination, the plan's staging area behind it. */
static int exec_prepare(dds_store_t *s, rd_step_t *t)
{
    uint64_t t0;
    int rc;
    if (t->dbytes == 0)
        return 0;
    if (t->route == ROUTE_DIRECT && dds_st_ms_serves(s, t->mem->kind)) {
        t0 = dds_prof_now();
        rc = s->ms.ops->stream_fence(s->ms.ctx, t->mem);
        t->a->t_gpu += dds_prof_now() - t0;
        if (rc != 0)
            return dds_error(rc < 0 ? rc : -rc,
                             "read of '%s': waiting for the work queued on "
                             "the destination's stream: %s",
                             t->v->name, dds_last_error());
    } else if (t->route == ROUTE_STAGED) {
        const size_t total = align64(t->dbytes) + t->pl->staging_bytes;
        void *hp = NULL;
        t0 = dds_prof_now();
        rc = s->ms.ops->staging_acquire(s->ms.ctx, total, &t->sbuf, &hp);
        t->a->t_gpu += dds_prof_now() - t0;
        if (rc != 0) {
            t->sbuf = NULL;
            return dds_error(rc < 0 ? rc : -rc,
                             "read of '%s' into %s memory: cannot get a "
                             "pinned staging buffer of %zu bytes: %s",
                             t->v->name, dds_st_mem_name(t->mem->kind),
                             total, dds_last_error());
        }
        t->h = hp;
    }
    return 0;
}

/* Where step t's reads land: host: its destination and its area of the
 * thread's staging buffer; staged: the pinned buffer; direct: the GPU
 * destination (no staging: its plan has none). */
static char *step_dst(const rd_step_t *t)
{
    return t->route == ROUTE_STAGED ? t->h : (char *)t->dst;
}

static char *step_staging(const tctx_t *tc, const rd_step_t *t)
{
    if (t->pl->staging_bytes == 0)
        return NULL;
    if (t->route == ROUTE_STAGED)
        return t->h + align64(t->dbytes);
    return tc->staging != NULL ? (char *)tc->staging + t->soff : NULL;
}

/* Step t's ops (copied to ops[]): own and mapped same-node rows by memcpy
 * (host memory only), the rest as a request in *q when any is left (or
 * when some were served: the transport may refuse the reader, an inherited
 * one in a forked child). */
static int exec_serve(dds_store_t *s, tctx_t *tc, rd_step_t *t,
                      dds_read_op_t *ops, dds_read_req_t *q)
{
    static const dds_mem_t host = {DDS_MEM_HOST, 0, NULL};
    char *dst = step_dst(t), *stg = step_staging(tc, t);
    int rc;

    t->nops = t->pl->nops;
    t->served = t->local = 0;
    t->has_req = 0;
    memcpy(ops, t->pl->ops, t->pl->nops * sizeof(*ops));
    if (t->route == ROUTE_STAGED && t->dbytes == 0) {
        t->nops = 0;
        return 0;
    }
    if (t->route != ROUTE_DIRECT) {
        t->local = serve_local(s, t->v, t->pl, ops, &t->nops, dst, stg);
        rc = dds_st_shard_serve(s, t->v, ops, &t->nops, dst, stg, &t->served);
        if (rc != 0)
            return rc;
    }
    if (t->nops == 0 && t->served == 0)
        return 0;
    q->region = t->v->region;
    q->name = t->v->name;
    q->ops = ops;
    q->nops = t->nops;
    q->dst = dst;
    q->dst_mem = t->route == ROUTE_STAGED ? &host : t->mem;
    q->dst_handle =
        t->route == ROUTE_STAGED ? NULL : dds_st_reg_lookup(s, dst, t->dbytes);
    q->staging = stg;
    q->staging_handle =
        t->route == ROUTE_HOST && stg != NULL
            ? dds_st_reg_lookup(s, stg, t->pl->staging_bytes)
            : NULL;
    q->prof = &t->v->prof;
    t->has_req = 1;
    return 0;
}

/* After the transport: the plans' copies on host memory, and each staged
 * step's one asynchronous host-to-device copy on its stream. */
static int exec_finish(dds_store_t *s, tctx_t *tc, rd_step_t *t)
{
    dds_memseg_t seg;
    uint64_t t0;
    int rc;
    if (t->route == ROUTE_HOST) {
        host_copies(t->pl, (char *)t->dst, step_staging(tc, t));
        t->a->staged += t->pl->staging_bytes;
    } else if (t->route == ROUTE_STAGED && t->sbuf != NULL) {
        host_copies(t->pl, t->h, step_staging(tc, t));
        seg.src_offset = 0;
        seg.dst_offset = 0;
        seg.len = t->dbytes;
        t0 = dds_prof_now();
        rc = s->ms.ops->copy_async(s->ms.ctx, DDS_COPY_H2D, t->dst, t->h,
                                   &seg, 1, t->mem, t->sbuf);
        t->a->t_gpu += dds_prof_now() - t0;
        if (rc != 0)
            return dds_error(rc < 0 ? rc : -rc,
                             "read of '%s': copy from the staging buffer to "
                             "%s memory failed: %s",
                             t->v->name, dds_st_mem_name(t->mem->kind),
                             dds_last_error());
        t->a->staged += t->dbytes + t->pl->staging_bytes;
        DDS_LOG_ONCE(DDS_LOG_WARN, DDS_SUBSYS_CORE,
                     "reads into %s memory go through pinned host staging "
                     "buffers: transport '%s' cannot reach %s memory (no "
                     "FI_HMEM); counted as staged_bytes in the profile; "
                     "DDSTORE_GPU_STAGING=0 makes this an error",
                     dds_st_mem_name(t->mem->kind),
                     s->tr.ops->name ? s->tr.ops->name : "?",
                     dds_st_mem_name(t->mem->kind));
    }
    t->a->local_bytes += t->local;
    t->a->nops += t->served + t->nops;
    return 0;
}

/* A direct read refused with -DDS_ENOSYS although the transport advertised
 * HMEM: when staging stands in for that memory (dds_st_hmem_failed), the
 * direct steps of that kind go staged.  1 when any did. */
static int exec_hmem_fallback(dds_store_t *s, rd_step_t *st, size_t ns)
{
    int any = 0;
    for (size_t i = 0; i < ns; i++) {
        rd_step_t *t = &st[i];
        if (t->route != ROUTE_DIRECT)
            continue;
        if (dds_st_hmem_failed(s, t->mem->kind, t->v->name)) {
            t->route = ROUTE_STAGED;
            any = 1;
        }
    }
    return any;
}

int dds_rd_exec(dds_store_t *s, dds_reader_t *reader, tctx_t *tc,
                rd_step_t *st, size_t ns, uint64_t *wait_ns,
                uint64_t *t_xfer)
{
    int retried = 0, rc;

again:;
    size_t stotal = 0, tops = 0, o = 0, nreqs = 0;
    for (size_t i = 0; i < ns; i++) {
        st[i].sbuf = NULL;
        st[i].h = NULL;
        st[i].soff = 0;
        if (st[i].route == ROUTE_HOST) {
            st[i].soff = stotal;
            stotal += align64(st[i].pl->staging_bytes);
        }
        tops += st[i].pl->nops;
    }
    if ((stotal > 0 && tctx_staging(tc, stotal) != 0) ||
        dds_st_grow_array((void **)&tc->ops, &tc->ops_cap, tops + 1,
                          sizeof(dds_read_op_t)) != 0 ||
        dds_st_grow_array((void **)&tc->reqs, &tc->reqs_cap, ns + 1,
                          sizeof(dds_read_req_t)) != 0)
        return dds_error(-DDS_ENOMEM, "read of '%s': out of memory for %zu "
                         "staging bytes and %zu read ops", st[0].v->name,
                         stotal, tops);
    rc = 0;
    for (size_t i = 0; i < ns && rc == 0; i++)
        rc = exec_prepare(s, &st[i]);
    for (size_t i = 0; i < ns && rc == 0; i++) {
        rc = exec_serve(s, tc, &st[i], &tc->ops[o], &tc->reqs[nreqs]);
        o += st[i].pl->nops;
        nreqs += st[i].has_req;
    }
    if (rc == 0 && nreqs > 1 && DDS_ST_HAS_OP(s, read_multi)) {
        rc = transport_read_multi(s, reader, tc->reqs, nreqs, wait_ns,
                                  t_xfer);
    } else if (rc == 0) {
        const dds_read_req_t *q = tc->reqs;
        for (size_t i = 0; i < ns && rc == 0; i++) {
            if (!st[i].has_req)
                continue;
            rc = transport_read(s, reader, st[i].v, q->ops, q->nops, q->dst,
                                q->dst_handle, q->dst_mem, q->staging,
                                q->staging_handle, wait_ns, t_xfer);
            q++;
        }
    }
    if (rc == -DDS_ENOSYS && !retried && exec_hmem_fallback(s, st, ns)) {
        /* the registration result says no: the same round, those staged */
        release_staged(s, st, ns, 0);
        retried = 1;
        goto again;
    }
    for (size_t i = 0; i < ns && rc == 0; i++)
        rc = exec_finish(s, tc, &st[i]);
    return release_staged(s, st, ns, rc);
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

static int grow_plans(tctx_t *tc, size_t need)
{
    dds_plan_t *p;
    size_t cap;
    if (need <= tc->plans_cap)
        return 0;
    cap = need < 8 ? 8 : need;
    if (cap > SIZE_MAX / sizeof(*p))
        return -1;
    p = realloc(tc->plans, cap * sizeof(*p));
    if (p == NULL)
        return -1;
    for (size_t i = tc->plans_cap; i < cap; i++)
        dds_plan_init(&p[i]);
    tc->plans = p;
    tc->plans_cap = cap;
    return 0;
}

/* ---- the one planned read --------------------------------------------- */

/* The call a kind of entry stands for, in messages. */
static const char *kind_call(int kind)
{
    return kind == DDS_READ_RAGGED ? "ragged_get_batch"
           : kind == DDS_READ_SIZES ? "ragged_sizes"
           : kind == DDS_READ_RANGE ? "get"
                                    : "get_batch";
}

/* Fixed-row entries (FIXED, RANGE); ragged ones (RAGGED, SIZES). */
static int is_fixed(int kind)
{
    return kind == DDS_READ_FIXED || kind == DDS_READ_RANGE;
}

static int is_ragged(int kind)
{
    return kind == DDS_READ_RAGGED || kind == DDS_READ_SIZES;
}

/* Every entry checked before any byte moves; the caller holds the table's
 * read lock. */
static int vars_check(dds_store_t *s, dds_read_var_t *vars, size_t nvars,
                      size_t n, rd_var_t *mv, size_t *nragged_p)
{
    size_t nr = 0;
    for (size_t k = 0; k < nvars; k++) {
        rd_var_t *m = &mv[k];
        dds_read_var_t *d = &vars[k];
        const char *call = kind_call(d->kind);
        int rc;
        memset(m, 0, sizeof(*m));
        m->d = d;
        m->route = ROUTE_HOST;
        m->v = dds_st_find_var(s, d->name, NULL);
        if (m->v == NULL)
            return dds_st_not_live(s, d->name);
        rc = dds_st_life_check(s, m->v);
        if (rc != 0)
            return rc;
        if (!is_fixed(d->kind) && d->kind != DDS_READ_RAGGED &&
            d->kind != DDS_READ_SIZES)
            return dds_error(-DDS_EINVAL, "read of '%s': unknown kind %d "
                             "(DDS_READ_FIXED, _RAGGED, _SIZES or _RANGE)",
                             d->name, d->kind);
        if (is_fixed(d->kind) == (m->v->ragged != 0))
            return dds_rd_wrong_kind(m->v, call);
        if (d->kind == DDS_READ_SIZES) {
            if (n > 0 && d->lengths == NULL)
                return dds_error(-DDS_EINVAL, "%s('%s'): lengths_out is NULL",
                                 call, d->name);
            m->ri = nr++;
            continue;
        }
        if (d->kind == DDS_READ_FIXED &&
            (n > (uint64_t)INT64_MAX || (int64_t)n != d->dst.nrows))
            return dds_error(-DDS_EINVAL,
                             "variable '%s': %zu indices for a buffer of "
                             "%lld rows",
                             d->name, n, (long long)d->dst.nrows);
        rc = dds_st_check_buf(m->v, &d->dst);
        if (rc != 0)
            return rc;
        if (d->dst.mem.kind != DDS_MEM_HOST) {
            char what[DDS_NAME_MAX + 32];
            snprintf(what, sizeof(what), "read of '%s'", d->name);
            rc = dds_st_mem_route(s, &d->dst.mem, what, 0, &m->route);
            if (rc != 0)
                return rc;
        }
        if (d->kind == DDS_READ_RAGGED)
            m->ri = nr++;
    }
    *nragged_p = nr;
    return 0;
}

/* The same plan serves both: same row distribution, row size and route. */
static int same_layout(const rd_var_t *a, const rd_var_t *b)
{
    return a->route == b->route && a->v->nranks == b->v->nranks &&
           a->v->row_bytes == b->v->row_bytes &&
           (a->v->offsets == b->v->offsets ||
            memcmp(a->v->offsets, b->v->offsets,
                   (size_t)(a->v->nranks + 1) * sizeof(int64_t)) == 0);
}

/* The fixed entries' plans (checking their indices): one per distinct
 * layout, the owner lookup and sort done once for those that share it. */
static int vars_plan_fixed(dds_store_t *s, tctx_t *tc, rd_var_t *mv,
                           size_t nvars, const int64_t *rows, size_t n)
{
    for (size_t k = 0; k < nvars; k++) {
        rd_var_t *m = &mv[k];
        dds_plan_params_t pp;
        int rc;
        if (!is_fixed(m->d->kind))
            continue;
        for (size_t j = 0; j < k && m->d->kind == DDS_READ_FIXED; j++)
            if (mv[j].d->kind == DDS_READ_FIXED && same_layout(&mv[j], m)) {
                m->pl = mv[j].pl;
                break;
            }
        if (m->pl != NULL)
            continue;
        m->pl = &tc->plans[k];
        pp.field_mask = 0;
        pp.nranks = m->v->nranks;
        pp.offsets = m->v->offsets;
        pp.row_bytes = m->v->row_bytes;
        pp.max_read_bytes = s->max_read_bytes;
        pp.merge_row_bytes_max = s->merge_row_bytes;
        /* GPU memory the transport writes: no host copies into it, every
         * row is read into its own slot (the staged fallback takes the
         * same plan) */
        if (m->route == ROUTE_DIRECT) {
            pp.field_mask |= DDS_PLAN_PARAM_FLAGS;
            pp.flags = DDS_PLAN_DIRECT;
        }
        rc = m->d->kind == DDS_READ_RANGE
                 ? dds_plan_range(&pp, m->d->start, m->d->dst.nrows, m->pl)
                 : dds_plan_batch(&pp, rows, n, m->pl);
        if (rc != 0)
            return dds_error(rc, "variable '%s': %s", m->v->name,
                             dds_last_error());
    }
    return 0;
}

/* The ragged entries' index entries, all in one round (the only step
 * before the data round); each one's d->total and d->lengths set. */
static int vars_index(dds_store_t *s, dds_reader_t *reader, tctx_t *tc,
                      rd_var_t *mv, size_t nvars, size_t nragged,
                      const int64_t *rows, size_t n, uint64_t *wait_ns,
                      uint64_t *t_xfer)
{
    static const dds_mem_t host = {DDS_MEM_HOST, 0, NULL};
    size_t ns = 0;
    int rc;

    for (size_t k = 0; k < nvars; k++)
        if (is_ragged(mv[k].d->kind)) {
            mv[k].d->total = 0;
            mv[k].pl = &tc->plans[k];
        }
    if (n == 0)
        return 0;
    if (n > SIZE_MAX / (2 * sizeof(int64_t)) / nragged ||
        dds_st_grow_array((void **)&tc->irows, &tc->irows_cap,
                          2 * n * nragged, sizeof(int64_t)) != 0 ||
        dds_st_grow_array((void **)&tc->ientries, &tc->ientries_cap,
                          2 * n * nragged, sizeof(int64_t)) != 0 ||
        dds_st_grow_array((void **)&tc->owners, &tc->owners_cap,
                          n * nragged, sizeof(int)) != 0 ||
        dds_st_grow_array((void **)&tc->steps, &tc->steps_cap, nragged,
                          sizeof(rd_step_t)) != 0)
        return dds_error(-DDS_ENOMEM,
                         "read of '%s': out of memory for %zu samples",
                         mv[0].v->name, n);
    /* every ragged entry's indices checked and planned, then one round */
    for (size_t k = 0; k < nvars; k++) {
        rd_var_t *m = &mv[k];
        rd_step_t *t;
        if (!is_ragged(m->d->kind))
            continue;
        rc = dds_rd_ragged_index_plan(s, tc, m, rows, n);
        if (rc != 0)
            return rc;
        t = &tc->steps[ns++];
        memset(t, 0, sizeof(*t));
        t->v = m->v;
        t->pl = m->pl;
        t->dst = tc->ientries + 2 * n * m->ri;
        t->dbytes = 2 * n * sizeof(int64_t);
        t->mem = &host;
        t->route = ROUTE_HOST;
        t->a = &m->a;
    }
    rc = dds_rd_exec(s, reader, tc, tc->steps, ns, wait_ns, t_xfer);
    for (size_t k = 0; k < nvars && rc == 0; k++)
        if (is_ragged(mv[k].d->kind))
            rc = dds_rd_ragged_lengths(tc, &mv[k], rows, n);
    return rc;
}

/* Every ragged destination has room for its samples (or gets it from its
 * grow callback); else -DDS_ENOSPC naming the first without. */
static int vars_room(dds_store_t *s, rd_var_t *mv, size_t nvars, size_t n)
{
    for (size_t k = 0; k < nvars; k++) {
        rd_var_t *m = &mv[k];
        dds_read_var_t *d = m->d;
        int rc;
        if (d->kind != DDS_READ_RAGGED || d->total <= d->dst.nrows)
            continue;
        if (d->grow != NULL) {
            rc = d->grow(d->grow_arg, d);
            if (rc < 0)
                return dds_error(rc, "ragged_get_batch('%s'): no destination "
                                 "for %lld element rows: %s", d->name,
                                 (long long)d->total,
                                 dds_last_error()[0] ? dds_last_error()
                                                     : dds_strerror(rc));
            rc = dds_st_check_buf(m->v, &d->dst);
            if (rc == 0 && d->dst.mem.kind != DDS_MEM_HOST) {
                char what[DDS_NAME_MAX + 32];
                snprintf(what, sizeof(what), "read of '%s'", d->name);
                rc = dds_st_mem_route(s, &d->dst.mem, what, 0, &m->route);
            } else if (rc == 0) {
                m->route = ROUTE_HOST;
            }
            if (rc != 0)
                return rc;
            if (d->total <= d->dst.nrows)
                continue;
        }
        return dds_error(-DDS_ENOSPC,
                         "ragged_get_batch('%s'): the %zu samples have %lld "
                         "element rows, the destination has room for %lld "
                         "(lengths and the total are filled; nothing was "
                         "read)",
                         d->name, n, (long long)d->total,
                         (long long)d->dst.nrows);
    }
    return 0;
}

/* The data round: every fixed and ragged entry's rows. */
static int vars_read(dds_store_t *s, dds_reader_t *reader, tctx_t *tc,
                     rd_var_t *mv, size_t nvars, size_t n, uint64_t *wait_ns,
                     uint64_t *t_xfer)
{
    size_t ns = 0;
    int rc;
    if (dds_st_grow_array((void **)&tc->steps, &tc->steps_cap, nvars,
                          sizeof(rd_step_t)) != 0)
        return dds_error(-DDS_ENOMEM, "read of '%s': out of memory",
                         mv[0].v->name);
    for (size_t k = 0; k < nvars; k++) {
        rd_var_t *m = &mv[k];
        rd_step_t *t = &tc->steps[ns];
        if (m->d->kind == DDS_READ_SIZES)
            continue;
        if (m->d->kind == DDS_READ_RAGGED) {
            rc = dds_rd_ragged_plan(s, tc, m, n);
            if (rc != 0)
                return rc;
        }
        memset(t, 0, sizeof(*t));
        t->v = m->v;
        t->pl = m->pl;
        t->dst = m->d->dst.ptr;
        t->dbytes = (size_t)(m->d->kind == DDS_READ_RAGGED
                                 ? m->d->total
                                 : m->d->dst.nrows) *
                    m->v->row_bytes;
        t->mem = &m->d->dst.mem;
        t->route = m->route;
        t->a = &m->a;
        ns++;
    }
    return ns > 0 ? dds_rd_exec(s, reader, tc, tc->steps, ns, wait_ns, t_xfer)
                  : 0;
}

/* Each variable's profile as its one-variable call counts it; the
 * variables share the call's time equally. */
static void vars_account(rd_var_t *mv, size_t nvars, size_t n, uint64_t t0,
                         uint64_t wait_ns, uint64_t t_xfer)
{
    const uint64_t elapsed = dds_prof_now() - t0;
    for (size_t k = 0; k < nvars; k++) {
        rd_var_t *m = &mv[k];
        const dds_read_var_t *d = m->d;
        uint64_t rows = 0, bytes = 0;
        m->a.t0 = t0;
        m->a.wait_ns += wait_ns / nvars;
        m->a.t_xfer += t_xfer / nvars;
        m->a.total_ns = nvars > 1 ? elapsed / nvars + 1 : 0;
        if (is_fixed(d->kind)) {
            rows = (uint64_t)d->dst.nrows;
            bytes = rows * (uint64_t)m->v->row_bytes;
        } else if (d->kind == DDS_READ_RAGGED) {
            rows = (uint64_t)n;
            bytes = (uint64_t)d->total * (uint64_t)m->v->row_bytes;
        }
        dds_rd_account(m->v, d->kind != DDS_READ_SIZES, rows, bytes, &m->a);
    }
}

/* In a process forked from the store's (DataLoader workers)? */
static int forked(const dds_store_t *s)
{
    return atomic_load_explicit(&dds_st_fork_gen, memory_order_relaxed) !=
           s->fork_gen;
}

/* A forked process, after the read's copies (done or failed): had every
 * variable's life ended meanwhile, its bytes may be another variable's
 * (dds_store_life.c); that error then replaces the read's own. */
static int vars_lived(const dds_store_t *s, const rd_var_t *mv, size_t nvars,
                      int rc)
{
    atomic_thread_fence(memory_order_seq_cst);
    for (size_t k = 0; k < nvars; k++) {
        int r = dds_st_life_check(s, mv[k].v);
        if (r != 0)
            return r;
    }
    return rc;
}

int dds_store_read_vars(dds_store_t *s, dds_reader_t *reader,
                        dds_read_var_t *vars, size_t nvars,
                        const int64_t *rows, size_t n)
{
    uint64_t t0, wait_ns, t_xfer = 0;
    size_t nragged = 0;
    rd_var_t *mv;
    tctx_t *tc;
    int rc, checked = 0;

    if (DDS_UNLIKELY(s == NULL))
        return dds_error(-DDS_EINVAL, "read_vars: NULL store");
    if (nvars == 0)
        return 0;
    if (vars == NULL)
        return dds_error(-DDS_EINVAL, "read_vars: NULL variables");
    for (size_t k = 0; k < nvars; k++) {
        rc = dds_st_check_name(vars[k].name);
        if (rc != 0)
            return rc;
    }
    if (reader != NULL && reader->store != s)
        return dds_error(-DDS_EINVAL,
                         "read of '%s': the reader belongs to another store",
                         vars[0].name);
    t0 = dds_prof_now();
    wait_ns = dds_st_lock_read_timed(&s->table_lock);
    tc = dds_rd_tctx();
    if (tc == NULL ||
        dds_st_grow_array((void **)&tc->vars, &tc->vars_cap, nvars,
                          sizeof(rd_var_t)) != 0 ||
        grow_plans(tc, nvars) != 0) {
        rc = dds_error(-DDS_ENOMEM, "read of '%s': out of memory",
                       vars[0].name);
        goto out;
    }
    mv = tc->vars;
    rc = vars_check(s, vars, nvars, n, mv, &nragged);
    checked = rc == 0;
    if (rc == 0)
        rc = dds_rd_copy_rows(tc, vars[0].name, &rows, n);
    if (rc == 0)
        rc = vars_plan_fixed(s, tc, mv, nvars, rows, n);
    if (rc == 0 && nragged > 0)
        rc = vars_index(s, reader, tc, mv, nvars, nragged, rows, n,
                        &wait_ns, &t_xfer);
    if (rc == 0 && nragged > 0)
        rc = vars_room(s, mv, nvars, n);
    if (rc == 0)
        rc = vars_read(s, reader, tc, mv, nvars, n, &wait_ns, &t_xfer);
    if (checked && forked(s))
        rc = vars_lived(s, mv, nvars, rc);
    if (rc == 0)
        vars_account(mv, nvars, n, t0, wait_ns, t_xfer);
out:
    pthread_rwlock_unlock(&s->table_lock);
    return rc;
}

/* A one-entry read (the thread's descriptor). */
static int read_one(dds_store_t *s, dds_reader_t *reader, const char *name,
                    int kind, const dds_buf_t *dst, const int64_t *rows,
                    size_t n, int64_t start, int64_t *lengths,
                    int64_t *total_out)
{
    dds_read_var_t d;
    int rc;
    memset(&d, 0, sizeof(d));
    d.name = name;
    d.kind = kind;
    if (dst != NULL)
        d.dst = *dst;
    d.lengths = lengths;
    d.start = start;
    rc = dds_store_read_vars(s, reader, &d, 1, rows, n);
    if (total_out != NULL && (rc == 0 || rc == -DDS_ENOSPC))
        *total_out = d.total;
    return rc;
}

int dds_store_get(dds_store_t *s, dds_reader_t *reader, const char *name,
                  const dds_buf_t *dst, int64_t start)
{
    if (DDS_UNLIKELY(s == NULL || dst == NULL))
        return dds_error(-DDS_EINVAL, "read: NULL %s",
                         s == NULL ? "store" : "destination buffer");
    return read_one(s, reader, name, DDS_READ_RANGE, dst, NULL, 0, start,
                    NULL, NULL);
}

int dds_store_get_batch(dds_store_t *s, dds_reader_t *reader,
                        const char *name, const dds_buf_t *dst,
                        const int64_t *rows, size_t n)
{
    if (DDS_UNLIKELY(s == NULL || dst == NULL))
        return dds_error(-DDS_EINVAL, "read: NULL %s",
                         s == NULL ? "store" : "destination buffer");
    return read_one(s, reader, name, DDS_READ_FIXED, dst, rows, n, 0, NULL,
                    NULL);
}

int dds_store_ragged_sizes(dds_store_t *s, dds_reader_t *reader,
                           const char *name, const int64_t *rows, size_t n,
                           int64_t *lengths_out)
{
    if (DDS_UNLIKELY(s == NULL))
        return dds_error(-DDS_EINVAL, "read: NULL store");
    return read_one(s, reader, name, DDS_READ_SIZES, NULL, rows, n, 0,
                    lengths_out, NULL);
}

int dds_store_ragged_get_batch(dds_store_t *s, dds_reader_t *reader,
                               const char *name, const dds_buf_t *dst,
                               const int64_t *rows, size_t n,
                               int64_t *lengths_out, int64_t *total_out)
{
    if (DDS_UNLIKELY(s == NULL))
        return dds_error(-DDS_EINVAL, "read: NULL store");
    if (DDS_UNLIKELY(dst == NULL))
        return dds_error(-DDS_EINVAL, "ragged_get_batch: NULL destination "
                                      "buffer");
    if (total_out == NULL)
        return dds_error(-DDS_EINVAL, "ragged_get_batch('%s'): total_out is "
                                      "NULL", name != NULL ? name : "?");
    return read_one(s, reader, name, DDS_READ_RAGGED, dst, rows, n, 0,
                    lengths_out, total_out);
}

int dds_store_get_batch_vars(dds_store_t *s, dds_reader_t *reader,
                             const char *const *names, const dds_buf_t *dsts,
                             size_t nvars, const int64_t *rows, size_t n)
{
    tctx_t *tc;
    if (DDS_UNLIKELY(s == NULL))
        return dds_error(-DDS_EINVAL, "get_batch_vars: NULL store");
    if (nvars == 0)
        return 0;
    if (names == NULL || dsts == NULL)
        return dds_error(-DDS_EINVAL, "get_batch_vars: NULL %s",
                         names == NULL ? "names" : "destinations");
    tc = dds_rd_tctx();
    if (tc == NULL ||
        dds_st_grow_array((void **)&tc->descs, &tc->descs_cap, nvars,
                          sizeof(dds_read_var_t)) != 0)
        return dds_error(-DDS_ENOMEM, "get_batch_vars: out of memory for %zu "
                         "variables", nvars);
    memset(tc->descs, 0, nvars * sizeof(dds_read_var_t));
    for (size_t k = 0; k < nvars; k++) {
        tc->descs[k].name = names[k];
        tc->descs[k].kind = DDS_READ_FIXED;
        tc->descs[k].dst = dsts[k];
    }
    return dds_store_read_vars(s, reader, tc->descs, nvars, rows, n);
}
