/* ddstore-core tests: N ranks simulated inside one process.
 *
 * A fake_world_t runs one thread per rank (fw_run).  Each rank gets
 *   - a fake communicator (allgather / allreduce_i64 / barrier through a
 *     shared buffer and a pthread barrier), and
 *   - a fake transport: region_create exchanges every rank's shard base
 *     and size through the same communicator, read() serves each op with
 *     memcpy from the owner's shard (checking it stays inside the shard),
 *     plus receive registrations, readers and epochs that only count.
 * Knobs inject failures: an exchange that fails on every rank, a
 * region_create that fails on one rank, reads that fail.  Counters let the
 * tests check that the store released everything it created.
 *
 * Test-only code, header-only (static functions) so that each test program
 * stays one source file.
 */
#ifndef DDSTORE_TEST_FAKE_WORLD_H
#define DDSTORE_TEST_FAKE_WORLD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddstore/comm.h"
#include "ddstore/wire.h"
#include "ddstore/errors.h"
#include "ddstore/store.h"
#include "ddstore/transport.h"

#define FW_MAX_RANKS 16

typedef struct fake_world {
    int n;
    pthread_barrier_t bar;
    char *buf;           /* exchange buffer, n * xbytes */
    size_t cap, xbytes;
    int exch_seq[FW_MAX_RANKS];
    _Atomic int protocol_errors; /* ranks disagreeing on a collective */

    /* failure injection */
    int fail_exchange_at;       /* every rank fails its k-th exchange     */
    int fail_region_rank;       /* this rank fails region_create number   */
    int fail_region_at;         /*   fail_region_at (1-based); 0 = never  */
    int region_calls[FW_MAX_RANKS];
    _Atomic int fail_reads;     /* > 0: that many next read() calls fail  */

    /* transport settings */
    uint64_t caps;
    size_t max_read_bytes;
    int no_readers;             /* reader_open / reader_close = NULL       */
    int reject_device;          /* read / recv_register of GPU memory fail
                                   with -DDS_ENOSYS (HMEM advertised, but
                                   the registration is refused)            */
    int with_abandon;           /* the transport has region_abandon        */
    int with_read_multi;        /* the transport has read_multi (counted
                                   in multi_calls / multi_reqs; its reads
                                   are not read_calls)                     */
    int with_shard_alloc;       /* the transport allocates host shards
                                   (shard_alloc / shard_free, like MPI's
                                   shared memory): malloc'ed, counted     */

    /* counters */
    _Atomic long read_calls, read_ops, local_ops, bad_ops, bytes_read;
    _Atomic long multi_calls, multi_reqs;
    _Atomic long live_regions, live_regs, live_readers, epochs, destroyed;
    _Atomic long comms_destroyed;
    _Atomic long live_shards;      /* shard_alloc'ed, not yet freed        */
    _Atomic long regions_at_destroy; /* released by the transport's destroy */
    _Atomic long regions_abandoned;
    void *_Atomic last_dst_handle[FW_MAX_RANKS];
    void *_Atomic last_staging_handle[FW_MAX_RANKS];
    _Atomic long unsafe_concurrent; /* read() overlap on a !THREAD_SAFE tr */
    _Atomic int in_read[FW_MAX_RANKS];
} fake_world_t;

static inline void fw_init(fake_world_t *w, int n)
{
    memset(w, 0, sizeof(*w));
    w->n = n;
    pthread_barrier_init(&w->bar, NULL, (unsigned)n);
    w->caps = DDS_TRANSPORT_CAP_THREAD_SAFE | DDS_TRANSPORT_CAP_LOCAL_SELF |
              DDS_TRANSPORT_CAP_READERS;
}

static inline void fw_fini(fake_world_t *w)
{
    pthread_barrier_destroy(&w->bar);
    free(w->buf);
}

/* ---- communicator ----------------------------------------------------- */

typedef struct fw_comm_ctx {
    fake_world_t *w;
    int rank;
} fw_comm_ctx_t;

static inline int fw_exchange(fake_world_t *w, int rank, const void *send,
                       size_t bytes, void *recv)
{
    int seq = ++w->exch_seq[rank];
    int ok = 1;

    pthread_barrier_wait(&w->bar);
    if (rank == 0) {
        size_t need = (size_t)w->n * bytes;
        if (need > w->cap) {
            w->buf = realloc(w->buf, need);
            w->cap = need;
        }
        w->xbytes = bytes;
    }
    pthread_barrier_wait(&w->bar);
    if (w->xbytes != bytes) {
        atomic_fetch_add(&w->protocol_errors, 1);
        ok = 0;
    } else if (bytes > 0) {
        memcpy(w->buf + (size_t)rank * bytes, send, bytes);
    }
    pthread_barrier_wait(&w->bar);
    if (ok && bytes > 0)
        memcpy(recv, w->buf, (size_t)w->n * bytes);
    else if (bytes > 0)
        memset(recv, 0, (size_t)w->n * bytes);
    pthread_barrier_wait(&w->bar);
    if (!ok)
        return dds_error(-DDS_EIO, "fake comm: ranks disagree on a "
                                   "collective");
    if (w->fail_exchange_at != 0 && seq == w->fail_exchange_at)
        return dds_error(-DDS_EIO, "fake comm: injected exchange failure "
                                   "(exchange %d)", seq);
    return 0;
}

static inline int fw_allgather(void *ctx, const void *send, size_t bytes, void *recv)
{
    fw_comm_ctx_t *c = ctx;
    return fw_exchange(c->w, c->rank, send, bytes, recv);
}

static inline int fw_allreduce_i64(void *ctx, int64_t *inout, size_t n,
                            dds_reduce_op_t op)
{
    fw_comm_ctx_t *c = ctx;
    int64_t *all = malloc((size_t)c->w->n * n * sizeof(int64_t) + 1);
    int rc = fw_exchange(c->w, c->rank, inout, n * sizeof(int64_t), all);
    if (rc == 0)
        dds_reduce_i64(all, c->w->n, n, op, inout);
    free(all);
    return rc;
}

static inline int fw_barrier(void *ctx)
{
    fw_comm_ctx_t *c = ctx;
    pthread_barrier_wait(&c->w->bar);
    return 0;
}

static inline void fw_comm_destroy(void *ctx)
{
    fw_comm_ctx_t *c = ctx;
    atomic_fetch_add(&c->w->comms_destroyed, 1);
    free(c);
}

static const dds_comm_ops_t fw_comm_ops = {
    sizeof(dds_comm_ops_t), "fake", fw_allgather, fw_allreduce_i64,
    fw_barrier, fw_comm_destroy};

static inline dds_comm_t fw_comm(fake_world_t *w, int rank)
{
    dds_comm_t c;
    fw_comm_ctx_t *ctx = malloc(sizeof(*ctx));
    ctx->w = w;
    ctx->rank = rank;
    c.ops = &fw_comm_ops;
    c.ctx = ctx;
    c.rank = rank;
    c.size = w->n;
    return c;
}

/* ---- transport -------------------------------------------------------- */

typedef struct fw_region {
    int n;
    const char *base[FW_MAX_RANKS];
    size_t bytes[FW_MAX_RANKS];
    struct fw_region *prev, *next;   /* the transport's live regions */
} fw_region_t;

typedef struct fw_tr {
    fake_world_t *w;
    int rank;
    fw_region_t *live;
} fw_tr_t;

/* Abandoned regions stay here (like an MPI window left open): what peers
 * may read stays reachable until the process exits. */
static fw_region_t *fw_graveyard;

static inline void fw_region_unlink(fw_tr_t *t, fw_region_t *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        t->live = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->prev = r->next = NULL;
}

typedef struct fw_reg {
    void *buf;
    size_t bytes;
} fw_reg_t;

static inline int fw_region_create(void *ctx, const dds_region_desc_t *local,
                            void **region_p)
{
    fw_tr_t *t = ctx;
    fake_world_t *w = t->w;
    struct {
        const void *base;
        size_t bytes;
    } mine = {local->base, local->bytes}, all[FW_MAX_RANKS];
    fw_region_t *r;
    int rc;

    rc = fw_exchange(w, t->rank, &mine, sizeof(mine), all);
    if (rc != 0)
        return rc;
    if (w->fail_region_at != 0 && t->rank == w->fail_region_rank &&
        ++w->region_calls[t->rank] == w->fail_region_at)
        return dds_error(-DDS_EIO, "fake transport: injected region_create "
                                   "failure for '%s' on rank %d",
                         local->name, t->rank);
    r = calloc(1, sizeof(*r));
    r->n = w->n;
    for (int i = 0; i < w->n; i++) {
        r->base[i] = all[i].base;
        r->bytes[i] = all[i].bytes;
    }
    atomic_fetch_add(&w->live_regions, 1);
    r->next = t->live;
    if (t->live)
        t->live->prev = r;
    t->live = r;
    *region_p = r;
    return 0;
}

static inline int fw_region_destroy(void *ctx, void *region)
{
    fw_tr_t *t = ctx;
    if (region != NULL) {
        fw_region_unlink(t, region);
        atomic_fetch_sub(&t->w->live_regions, 1);
        free(region);
    }
    return 0;
}

static inline void fw_region_abandon(void *ctx, void *region)
{
    fw_tr_t *t = ctx;
    fw_region_t *r = region;
    if (r == NULL)
        return;
    fw_region_unlink(t, r);
    atomic_fetch_sub(&t->w->live_regions, 1);
    atomic_fetch_add(&t->w->regions_abandoned, 1);
    r->next = fw_graveyard;
    fw_graveyard = r;
}

static inline int fw_reader_open(void *ctx, int flags, void **reader_p)
{
    fw_tr_t *t = ctx;
    (void)flags;
    *reader_p = malloc(8);
    atomic_fetch_add(&t->w->live_readers, 1);
    return 0;
}

static inline void fw_reader_close(void *ctx, void *reader)
{
    fw_tr_t *t = ctx;
    atomic_fetch_sub(&t->w->live_readers, 1);
    free(reader);
}

static inline int fw_read_ops(void *ctx, void *region,
                   const dds_read_op_t *ops, size_t nops, void *dst,
                   const dds_mem_t *dst_mem, void *staging, dds_prof_t *prof);

/* A read call starts: the overlap check of a transport that is not
 * thread-safe, an injected failure; fw_leave ends it. */
static inline int fw_enter(fw_tr_t *t)
{
    fake_world_t *w = t->w;
    if (!(w->caps & DDS_TRANSPORT_CAP_THREAD_SAFE) &&
        atomic_fetch_add(&w->in_read[t->rank], 1) != 0)
        atomic_fetch_add(&w->unsafe_concurrent, 1);
    if (atomic_load(&w->fail_reads) > 0) {
        atomic_fetch_sub(&w->fail_reads, 1);
        return dds_error(-DDS_EIO, "fake transport: injected read failure");
    }
    return 0;
}

static inline void fw_leave(fw_tr_t *t)
{
    if (!(t->w->caps & DDS_TRANSPORT_CAP_THREAD_SAFE))
        atomic_fetch_sub(&t->w->in_read[t->rank], 1);
}

static inline int fw_read(void *ctx, void *reader, void *region,
                   const dds_read_op_t *ops, size_t nops, void *dst,
                   void *dst_handle, const dds_mem_t *dst_mem, void *staging,
                   void *staging_handle, dds_prof_t *prof)
{
    fw_tr_t *t = ctx;
    int rc;
    (void)reader;
    atomic_fetch_add(&t->w->read_calls, 1);
    atomic_store(&t->w->last_dst_handle[t->rank], dst_handle);
    atomic_store(&t->w->last_staging_handle[t->rank], staging_handle);
    rc = fw_enter(t);
    if (rc == 0)
        rc = fw_read_ops(ctx, region, ops, nops, dst, dst_mem, staging, prof);
    fw_leave(t);
    return rc;
}

/* read_multi: each request as read() does it, in one call. */
static inline int fw_read_multi(void *ctx, void *reader,
                                const dds_read_req_t *reqs, size_t nreqs)
{
    fw_tr_t *t = ctx;
    int rc;
    (void)reader;
    atomic_fetch_add(&t->w->multi_calls, 1);
    atomic_fetch_add(&t->w->multi_reqs, (long)nreqs);
    rc = fw_enter(t);
    for (size_t i = 0; i < nreqs && rc == 0; i++)
        rc = fw_read_ops(ctx, reqs[i].region, reqs[i].ops, reqs[i].nops,
                         reqs[i].dst, reqs[i].dst_mem, reqs[i].staging,
                         reqs[i].prof);
    fw_leave(t);
    return rc;
}

static inline int fw_read_ops(void *ctx, void *region,
                   const dds_read_op_t *ops, size_t nops, void *dst,
                   const dds_mem_t *dst_mem, void *staging, dds_prof_t *prof)
{
    fw_tr_t *t = ctx;
    fake_world_t *w = t->w;
    fw_region_t *r = region;
    int rc = 0;
    if (w->reject_device && dst_mem != NULL && dst_mem->kind != DDS_MEM_HOST)
        return dds_error(-DDS_ENOSYS, "fake transport: registering device "
                                      "memory failed (injected)");
    for (size_t i = 0; i < nops; i++) {
        const dds_read_op_t *op = &ops[i];
        if (op->owner < 0 || op->owner >= r->n || op->src_offset < 0 ||
            (size_t)op->src_offset + op->len > r->bytes[op->owner] ||
            (w->max_read_bytes != 0 && op->len > w->max_read_bytes) ||
            (op->staged && staging == NULL)) {
            atomic_fetch_add(&w->bad_ops, 1);
            return dds_error(-DDS_EIO, "fake transport: bad op %zu (owner "
                                       "%d, src %lld, len %zu)",
                             i, op->owner, (long long)op->src_offset,
                             op->len);
        }
        if (op->owner == t->rank)
            atomic_fetch_add(&w->local_ops, 1);
        memcpy((op->staged ? (char *)staging : (char *)dst) + op->dst_offset,
               r->base[op->owner] + op->src_offset, op->len);
        atomic_fetch_add(&w->bytes_read, (long)op->len);
    }
    atomic_fetch_add(&w->read_ops, (long)nops);
    dds_prof_add(prof, DDS_PROF_NS_POST, 1);
    return rc;
}

static inline int fw_recv_register(void *ctx, void *buf, size_t bytes,
                            const dds_mem_t *mem, void **handle_p)
{
    fw_tr_t *t = ctx;
    fw_reg_t *h;
    if (t->w->reject_device && mem != NULL && mem->kind != DDS_MEM_HOST)
        return dds_error(-DDS_ENOSYS, "fake transport: registering device "
                                      "memory failed (injected)");
    h = malloc(sizeof(*h));
    h->buf = buf;
    h->bytes = bytes;
    atomic_fetch_add(&t->w->live_regs, 1);
    *handle_p = h;
    return 0;
}

static inline int fw_recv_unregister(void *ctx, void *handle)
{
    fw_tr_t *t = ctx;
    atomic_fetch_sub(&t->w->live_regs, 1);
    free(handle);
    return 0;
}

static inline int fw_epoch(void *ctx)
{
    fw_tr_t *t = ctx;
    atomic_fetch_add(&t->w->epochs, 1);
    pthread_barrier_wait(&t->w->bar);
    return 0;
}

static inline void fw_tr_destroy(void *ctx)
{
    fw_tr_t *t = ctx;
    /* regions of variables never freed (dds_store_destroy_local): released
     * here, locally */
    while (t->live != NULL) {
        fw_region_t *r = t->live;
        fw_region_unlink(t, r);
        atomic_fetch_sub(&t->w->live_regions, 1);
        atomic_fetch_add(&t->w->regions_at_destroy, 1);
        free(r);
    }
    atomic_fetch_add(&t->w->destroyed, 1);
    free(t);
}

/* shard_alloc: collective in the real transports; here the agreement the
 * store made before is enough.  Uninitialised contents (poisoned), so a
 * store that forgets to fill the shard reads garbage. */
static inline int fw_shard_alloc(void *ctx, size_t bytes, void **base_p,
                                 void **token_p)
{
    fw_tr_t *t = ctx;
    void *p = malloc(bytes + 1);
    if (p == NULL)
        return dds_error(-DDS_ENOMEM, "fake transport: shard_alloc");
    memset(p, 0xC5, bytes + 1);
    atomic_fetch_add(&t->w->live_shards, 1);
    *base_p = p;
    *token_p = p;
    return 0;
}

static inline void fw_shard_free(void *ctx, void *base, void *token)
{
    fw_tr_t *t = ctx;
    (void)base;
    atomic_fetch_sub(&t->w->live_shards, 1);
    free(token);
}

static const dds_transport_ops_t fw_tr_ops_shard_alloc = {
    sizeof(dds_transport_ops_t), "fake", fw_region_create, fw_region_destroy,
    fw_reader_open, fw_reader_close, fw_read, fw_recv_register,
    fw_recv_unregister, NULL, fw_epoch, fw_epoch, fw_tr_destroy,
    fw_shard_alloc, fw_shard_free, NULL /* region_join */, NULL, NULL, NULL,
    NULL /* read_multi */};

static const dds_transport_ops_t fw_tr_ops = {
    sizeof(dds_transport_ops_t), "fake", fw_region_create, fw_region_destroy,
    fw_reader_open, fw_reader_close, fw_read, fw_recv_register,
    fw_recv_unregister, NULL, fw_epoch, fw_epoch, fw_tr_destroy,
    NULL /* shard_alloc */, NULL /* shard_free */, NULL /* region_join */,
    NULL /* region_abandon */, NULL /* region_shards */,
    NULL /* region_check */, NULL /* read_multi */};

static const dds_transport_ops_t fw_tr_ops_multi = {
    sizeof(dds_transport_ops_t), "fake", fw_region_create, fw_region_destroy,
    fw_reader_open, fw_reader_close, fw_read, fw_recv_register,
    fw_recv_unregister, NULL, fw_epoch, fw_epoch, fw_tr_destroy,
    NULL /* shard_alloc */, NULL /* shard_free */, NULL /* region_join */,
    NULL /* region_abandon */, NULL /* region_shards */,
    NULL /* region_check */, fw_read_multi};

static const dds_transport_ops_t fw_tr_ops_abandon = {
    sizeof(dds_transport_ops_t), "fake", fw_region_create, fw_region_destroy,
    fw_reader_open, fw_reader_close, fw_read, fw_recv_register,
    fw_recv_unregister, NULL, fw_epoch, fw_epoch, fw_tr_destroy,
    NULL /* shard_alloc */, NULL /* shard_free */, NULL /* region_join */,
    fw_region_abandon, NULL, NULL, NULL};

static const dds_transport_ops_t fw_tr_ops_noreaders = {
    sizeof(dds_transport_ops_t), "fake", fw_region_create, fw_region_destroy,
    NULL, NULL, fw_read, NULL, NULL, NULL, NULL, NULL, fw_tr_destroy, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL};

static inline dds_transport_t fw_transport(fake_world_t *w, int rank)
{
    dds_transport_t t;
    fw_tr_t *ctx = malloc(sizeof(*ctx));
    ctx->w = w;
    ctx->rank = rank;
    ctx->live = NULL;
    t.ops = w->no_readers         ? &fw_tr_ops_noreaders
            : w->with_abandon     ? &fw_tr_ops_abandon
            : w->with_shard_alloc ? &fw_tr_ops_shard_alloc
            : w->with_read_multi  ? &fw_tr_ops_multi
                                  : &fw_tr_ops;
    t.ctx = ctx;
    t.caps = w->caps;
    t.max_read_bytes = w->max_read_bytes;
    return t;
}

/* Collective over the world: a store on fake comm + fake transport. */
static inline int fw_store_create(fake_world_t *w, int rank, dds_store_t **store_p)
{
    dds_store_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = DDS_STORE_PARAM_COMM | DDS_STORE_PARAM_TRANSPORT;
    p.comm = fw_comm(w, rank);
    p.transport = fw_transport(w, rank);
    return dds_store_create(&p, store_p);
}

/* ---- running ranks ---------------------------------------------------- */

typedef void (*fw_rank_fn)(fake_world_t *w, int rank, void *arg);

typedef struct fw_thread_arg {
    fake_world_t *w;
    int rank;
    fw_rank_fn fn;
    void *arg;
} fw_thread_arg_t;

static inline void *fw_thread_main(void *p)
{
    fw_thread_arg_t *a = p;
    a->fn(a->w, a->rank, a->arg);
    return NULL;
}

/* Run fn(w, rank, arg) on w->n threads and wait for all. */
static inline void fw_run(fake_world_t *w, fw_rank_fn fn, void *arg)
{
    pthread_t th[FW_MAX_RANKS];
    fw_thread_arg_t a[FW_MAX_RANKS];
    for (int r = 0; r < w->n; r++) {
        a[r].w = w;
        a[r].rank = r;
        a[r].fn = fn;
        a[r].arg = arg;
        pthread_create(&th[r], NULL, fw_thread_main, &a[r]);
    }
    for (int r = 0; r < w->n; r++)
        pthread_join(th[r], NULL);
}

#endif
