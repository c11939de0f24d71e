/* store.h with GPU memory: the store driving a memops table (memops.h).
 *
 * N fake ranks (fake_world.h) whose stores get a real ddstore-gpu memsys
 * (ddgpu_memsys_create) wrapped in a counting proxy.  Without a GPU the
 * none backend's host emulation (ddgpu_test_host_emulation) stands in for
 * one CUDA device: "device" memory is tracked host memory, and copies are
 * deferred until the host waits on their stream or an event, so a missing
 * wait shows up as missing data and a wait the store should not make shows
 * up as data that is there too early.  With a real GPU (cuda/hip builds)
 * the same scenarios run on device 0, minus the ones that need a fake
 * transport writing device memory with memcpy (SKIP, with the reason).
 *
 * Covered: staged reads into device destinations (batches with repeats,
 * ranges across owners, own rows, split reads, several threads with their
 * own streams), stream order without host waits, staged bytes and GPU time
 * in the profile, DDSTORE_GPU_STAGING=0 errors, the FI_HMEM path (one
 * stream fence, no staging), GPU shards with a host mirror (add, update
 * from host and device memory, reads from every rank), GPU shards
 * registered in place with HMEM, kind mismatches, memsys parameter errors,
 * device pointers passed as host memory.
 *
 * Build without Bazel (see ddstore-core/BUILD):
 *   gcc -std=c11 -D_GNU_SOURCE -pthread -Iddstore-core/include
 *     -Iddstore-core/src -Iddstore-core/test -Iddstore-gpu/include
 *     -DDDGPU_VERSION='"x.y.z"' ddstore-core/test/store_gpu_test.c
 *     ddstore-core/src/dds_[a-z]*.c ddstore-gpu/src/ddgpu_[a-mo-z]*.c
 *     ddstore-gpu/src/ddgpu_none.c -lm   (every src file but ddgpu_rt.c)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "ddstore/gpu.h"
#include "ddstore/log.h"
#include "ddstore/memops.h"
#include "ddstore/store.h"
#include "fake_world.h"

/* ---- environment -------------------------------------------------------- */

static int g_emulated;     /* none build: host emulation of one device     */
static int g_real;         /* a real GPU (cuda / hip build)                */
static dds_mem_kind_t g_kind = DDS_MEM_CUDA;

/* ---- data helpers ------------------------------------------------------- */

static void make_row(size_t rb, int64_t g, int salt, unsigned char *out)
{
    for (size_t b = 0; b < rb; b++)
        out[b] = (unsigned char)(g * 31 + (int64_t)b * 17 + salt * 7 + 1);
}

static unsigned char *make_shard(size_t rb, int64_t first, int64_t nrows,
                                 int salt)
{
    unsigned char *p = malloc((size_t)nrows * rb + 1);
    for (int64_t i = 0; i < nrows; i++)
        make_row(rb, first + i, salt, p + (size_t)i * rb);
    return p;
}

/* host rows i == global row rows[i] (start + i when rows is NULL) */
static int check_rows(size_t rb, const unsigned char *dst,
                      const int64_t *rows, int64_t start, size_t n, int salt,
                      const char *what)
{
    unsigned char *want = malloc(rb);
    int bad = 0;
    for (size_t i = 0; i < n && !bad; i++) {
        int64_t g = rows != NULL ? rows[i] : start + (int64_t)i;
        make_row(rb, g, salt, want);
        if (memcmp(want, dst + i * rb, rb) != 0) {
            CHECK_FAIL_("%s: row %zu (global row %lld) differs", what, i,
                        (long long)g);
            bad = 1;
        }
    }
    free(want);
    return bad;
}

static int all_bytes(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            return 0;
    return 1;
}

static dds_buf_t buf_of(void *p, int64_t nrows, size_t rb, const dds_mem_t *m)
{
    dds_buf_t b;
    memset(&b, 0, sizeof(b));
    b.ptr = p;
    b.nrows = nrows;
    b.row_bytes = rb;
    b.dtype = DDS_DTYPE_RAW;
    b.itemsize = rb;
    if (m != NULL)
        b.mem = *m;
    return b;
}

static void barrier(dds_store_t *s)
{
    const dds_comm_t *c = dds_store_comm(s);
    c->ops->barrier(c->ctx);
}

/* ---- device helpers (ddstore-gpu) ---------------------------------------- */

static void *dalloc(size_t n)
{
    void *p = NULL;
    CHECK_OK(ddgpu_device_alloc(0, n, &p));
    return p;
}

static dds_mem_t dmem(void *stream)
{
    dds_mem_t m;
    m.kind = g_kind;
    m.device = 0;
    m.stream = stream;
    return m;
}

/* Fill device memory with `v` and wait (test setup, not the store). */
static void dpoison(void *d, size_t n, int v, const dds_mem_t *m)
{
    CHECK_OK(ddgpu_memset_async(d, v, n, m));
    CHECK_OK(ddgpu_stream_synchronize(m));
}

/* Device -> host after everything queued on m->stream (test check). */
static void d2h(void *h, const void *d, size_t n, const dds_mem_t *m)
{
    CHECK_OK(ddgpu_copy_async(DDS_COPY_D2H, h, d, n, m));
    CHECK_OK(ddgpu_stream_synchronize(m));
}

static void h2d(void *d, const void *h, size_t n, const dds_mem_t *m)
{
    CHECK_OK(ddgpu_copy_async(DDS_COPY_H2D, d, h, n, m));
    CHECK_OK(ddgpu_stream_synchronize(m));
}

/* ---- a counting proxy around the real memops table ---------------------- */

enum {
    P_POINTER_KIND, P_HOST_ALLOC, P_HOST_FREE, P_ACQUIRE, P_RELEASE, P_COPY,
    P_WAIT, P_FENCE, P_EV_RECORD, P_EV_QUERY, P_EV_WAIT, P_STREAM_WAIT,
    P_EV_RELEASE, P_COUNT
};

typedef struct proxy {
    dds_memops_t ops;
    dds_memsys_t inner;
    _Atomic long n[P_COUNT];
    _Atomic long h2d, d2h, d2d, copies_on_other_stream, h2d_with_buf;
    void *expect_stream;      /* stream that copies/fences must use        */
    _Atomic int destroyed;
    int64_t *scribble;        /* stream_fence overwrites these indices (a
                                 thread changing them during a read)       */
    size_t nscribble;
} proxy_t;

static proxy_t g_px[FW_MAX_RANKS];
static int g_with_memsys = 1;
static int g_read_multi;   /* the fake transport has read_multi */

#define PX(ctx) ((proxy_t *)(ctx))
#define IN(ctx) (PX(ctx)->inner)

static int px_pointer_kind(void *c, const void *p, dds_mem_t *m)
{
    atomic_fetch_add(&PX(c)->n[P_POINTER_KIND], 1);
    return IN(c).ops->pointer_kind(IN(c).ctx, p, m);
}
static int px_host_alloc(void *c, size_t b, void **p)
{
    atomic_fetch_add(&PX(c)->n[P_HOST_ALLOC], 1);
    return IN(c).ops->host_alloc(IN(c).ctx, b, p);
}
static int px_host_free(void *c, void *p)
{
    atomic_fetch_add(&PX(c)->n[P_HOST_FREE], 1);
    return IN(c).ops->host_free(IN(c).ctx, p);
}
static int px_acquire(void *c, size_t b, void **buf, void **host)
{
    atomic_fetch_add(&PX(c)->n[P_ACQUIRE], 1);
    return IN(c).ops->staging_acquire(IN(c).ctx, b, buf, host);
}
static int px_release(void *c, void *buf)
{
    atomic_fetch_add(&PX(c)->n[P_RELEASE], 1);
    return IN(c).ops->staging_release(IN(c).ctx, buf);
}
static int px_copy(void *c, dds_copy_dir_t dir, void *dst, const void *src,
                   const dds_memseg_t *segs, size_t nsegs,
                   const dds_mem_t *on, void *buf)
{
    proxy_t *p = PX(c);
    atomic_fetch_add(&p->n[P_COPY], 1);
    if (dir == DDS_COPY_H2D) {
        atomic_fetch_add(&p->h2d, 1);
        if (buf != NULL)
            atomic_fetch_add(&p->h2d_with_buf, 1);
    } else if (dir == DDS_COPY_D2H) {
        atomic_fetch_add(&p->d2h, 1);
    } else if (dir == DDS_COPY_D2D) {
        atomic_fetch_add(&p->d2d, 1);
    }
    void *want = __atomic_load_n(&p->expect_stream, __ATOMIC_RELAXED);
    if (want != NULL && (on == NULL || on->stream != want))
        atomic_fetch_add(&p->copies_on_other_stream, 1);
    return IN(c).ops->copy_async(IN(c).ctx, dir, dst, src, segs, nsegs, on,
                                 buf);
}
static int px_wait(void *c, void *buf)
{
    atomic_fetch_add(&PX(c)->n[P_WAIT], 1);
    return IN(c).ops->staging_wait(IN(c).ctx, buf);
}
static int px_fence(void *c, const dds_mem_t *on)
{
    proxy_t *p = PX(c);
    atomic_fetch_add(&p->n[P_FENCE], 1);
    for (size_t i = 0; i < p->nscribble; i++)
        p->scribble[i] = 0;
    void *want = __atomic_load_n(&p->expect_stream, __ATOMIC_RELAXED);
    if (want != NULL && (on == NULL || on->stream != want))
        atomic_fetch_add(&p->copies_on_other_stream, 1);
    return IN(c).ops->stream_fence(IN(c).ctx, on);
}
static int px_ev_record(void *c, const dds_mem_t *on, void **e)
{
    atomic_fetch_add(&PX(c)->n[P_EV_RECORD], 1);
    return IN(c).ops->event_record(IN(c).ctx, on, e);
}
static int px_ev_query(void *c, void *e, int *d)
{
    atomic_fetch_add(&PX(c)->n[P_EV_QUERY], 1);
    return IN(c).ops->event_query(IN(c).ctx, e, d);
}
static int px_ev_wait(void *c, void *e)
{
    atomic_fetch_add(&PX(c)->n[P_EV_WAIT], 1);
    return IN(c).ops->event_wait(IN(c).ctx, e);
}
static int px_stream_wait(void *c, const dds_mem_t *on, void *e)
{
    atomic_fetch_add(&PX(c)->n[P_STREAM_WAIT], 1);
    return IN(c).ops->stream_wait_event(IN(c).ctx, on, e);
}
static void px_ev_release(void *c, void *e)
{
    atomic_fetch_add(&PX(c)->n[P_EV_RELEASE], 1);
    IN(c).ops->event_release(IN(c).ctx, e);
}
static void px_destroy(void *c)
{
    proxy_t *p = PX(c);
    if (p->inner.ops != NULL)
        p->inner.ops->destroy(p->inner.ctx);
    p->inner.ops = NULL;
    atomic_fetch_add(&p->destroyed, 1);
}

static void proxy_init(proxy_t *p)
{
    dds_memops_t *o = &p->ops;
    o->size = sizeof(*o);
    o->name = p->inner.ops->name;
    o->kind = p->inner.ops->kind;
    o->pointer_kind = px_pointer_kind;
    o->host_alloc = px_host_alloc;
    o->host_free = px_host_free;
    o->staging_acquire = px_acquire;
    o->staging_release = px_release;
    o->copy_async = px_copy;
    o->staging_wait = px_wait;
    o->stream_fence = px_fence;
    o->event_record = px_ev_record;
    o->event_query = px_ev_query;
    o->event_wait = px_ev_wait;
    o->stream_wait_event = px_stream_wait;
    o->event_release = px_ev_release;
    o->destroy = px_destroy;
}

static void proxies_reset(void)
{
    for (int r = 0; r < FW_MAX_RANKS; r++) {
        for (int i = 0; i < P_COUNT; i++)
            atomic_store(&g_px[r].n[i], 0);
        atomic_store(&g_px[r].h2d, 0);
        atomic_store(&g_px[r].d2h, 0);
        atomic_store(&g_px[r].d2d, 0);
        atomic_store(&g_px[r].h2d_with_buf, 0);
        atomic_store(&g_px[r].copies_on_other_stream, 0);
        atomic_store(&g_px[r].destroyed, 0);
        __atomic_store_n(&g_px[r].expect_stream, NULL, __ATOMIC_RELAXED);
        g_px[r].inner.ops = NULL;
    }
}

/* Collective: a store over the fake world with (g_with_memsys) a memsys. */
static int gstore_create(fake_world_t *w, int rank, dds_store_t **s)
{
    dds_store_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = DDS_STORE_PARAM_COMM | DDS_STORE_PARAM_TRANSPORT;
    p.comm = fw_comm(w, rank);
    p.transport = fw_transport(w, rank);
    if (g_with_memsys) {
        proxy_t *px = &g_px[rank];
        CHECK_OK(ddgpu_memsys_create(NULL, &px->inner));
        if (px->inner.ops != NULL) {
            proxy_init(px);
            p.field_mask |= DDS_STORE_PARAM_MEMSYS;
            p.memsys.ops = &px->ops;
            p.memsys.ctx = px;
        }
    }
    return dds_store_create(&p, s);
}

#define HOST_ONLY (DDS_TRANSPORT_CAP_THREAD_SAFE | DDS_TRANSPORT_CAP_LOCAL_SELF | \
                   DDS_TRANSPORT_CAP_READERS)

static void run_world(int n, fw_rank_fn fn, void *arg, uint64_t caps,
                      size_t max_read)
{
    fake_world_t w;
    proxies_reset();
    fw_init(&w, n);
    w.caps = caps;
    w.max_read_bytes = max_read;
    w.with_read_multi = g_read_multi;
    fw_run(&w, fn, arg);
    CHECK_EQ(atomic_load(&w.protocol_errors), 0);
    CHECK_EQ(atomic_load(&w.bad_ops), 0);
    CHECK_EQ(atomic_load(&w.live_regions), 0);
    CHECK_EQ(atomic_load(&w.live_regs), 0);
    CHECK_EQ(atomic_load(&w.destroyed), n);
    for (int r = 0; r < n && g_with_memsys; r++) {
        /* the store owned the memsys and destroyed it exactly once; every
         * pinned mirror it allocated was freed */
        CHECK_EQ(atomic_load(&g_px[r].destroyed), 1);
        CHECK_EQ(atomic_load(&g_px[r].n[P_HOST_ALLOC]),
                 atomic_load(&g_px[r].n[P_HOST_FREE]));
        CHECK_EQ(atomic_load(&g_px[r].n[P_ACQUIRE]),
                 atomic_load(&g_px[r].n[P_RELEASE]));
        /* the host never waited on a staging buffer or an event */
        CHECK_EQ(atomic_load(&g_px[r].n[P_WAIT]), 0);
        CHECK_EQ(atomic_load(&g_px[r].n[P_EV_WAIT]), 0);
    }
    fw_fini(&w);
}

/* ---- staged reads into device memory ------------------------------------ */

typedef struct staged_arg {
    size_t rb;
    int threads;
} staged_arg_t;

static const int64_t g_rows_of[] = {20, 13, 0, 27};

static int64_t first_of(int rank)
{
    int64_t f = 0;
    for (int r = 0; r < rank; r++)
        f += g_rows_of[r];
    return f;
}

typedef struct reader_job {
    dds_store_t *s;
    int rank, tid;
    size_t rb;
    int64_t total;
    long calls;
    void *stream;            /* allocated and freed by the rank: freeing   */
    unsigned char *dev;      /* device memory drains every stream          */
} reader_job_t;

/* One reader thread: its own stream and device buffer, batches with
 * repeats, scattered slots, ranges across owners. */
static void *staged_reader(void *p)
{
    reader_job_t *j = p;
    const size_t rb = j->rb, n = 40;
    void *stream = j->stream;
    unsigned char *dev = j->dev, *host;
    int64_t rows[40];
    dds_mem_t m;
    dds_buf_t b;
    proxy_t *px = &g_px[j->rank];

    m = dmem(stream);
    if (j->tid == 0)
        __atomic_store_n(&px->expect_stream, stream, __ATOMIC_RELAXED); /* single-threaded runs check it */
    host = malloc(n * rb);
    for (int it = 0; it < 6; it++) {
        size_t k = n - (size_t)it * 3;
        for (size_t i = 0; i < k; i++) /* adjacent, scattered, repeated */
            rows[i] = (int64_t)(((int64_t)i * 7 + it * 5 + j->tid) %
                                j->total);
        rows[k - 1] = rows[0];
        dpoison(dev, n * rb, 0xAB, &m);
        b = buf_of(dev, (int64_t)k, rb, &m);
        CHECK_OK(dds_store_get_batch(j->s, NULL, "g", &b, rows, k));
        /* the copy waits in the stream: nobody synced it */
        if (g_emulated)
            CHECK(all_bytes(dev, k * rb, 0xAB));
        d2h(host, dev, n * rb, &m);
        if (check_rows(rb, host, rows, 0, k, 5, "staged get_batch"))
            break;
        CHECK(all_bytes(host + k * rb, (n - k) * rb, 0xAB)); /* untouched */
        j->calls++;
        /* a range across every owner */
        dpoison(dev, n * rb, 0xAB, &m);
        b = buf_of(dev, j->total - 3 < 40 ? j->total - 3 : 40, rb, &m);
        CHECK_OK(dds_store_get(j->s, NULL, "g", &b, 3));
        d2h(host, dev, (size_t)b.nrows * rb, &m);
        if (check_rows(rb, host, NULL, 3, (size_t)b.nrows, 5, "staged get"))
            break;
        j->calls++;
    }
    free(host);
    return NULL;
}

static void staged_rank(fake_world_t *w, int rank, void *arg)
{
    staged_arg_t *a = arg;
    const size_t rb = a->rb;
    int64_t total = first_of(w->n);
    dds_store_t *s = NULL;
    unsigned char *shard;
    dds_profile_t prof;
    reader_job_t jobs[4];
    pthread_t th[4];
    long calls = 0;
    proxy_t *px = &g_px[rank];

    CHECK_OK(gstore_create(w, rank, &s));
    if (s == NULL)
        return;
    shard = make_shard(rb, first_of(rank), g_rows_of[rank], 5);
    CHECK_OK(dds_store_var_add(s, "g", shard, g_rows_of[rank], 1, rb,
                               DDS_DTYPE_RAW, NULL, DDS_ADD_COPY));
    free(shard);
    for (int t = 0; t < a->threads; t++) {
        jobs[t].s = s;
        jobs[t].rank = rank;
        jobs[t].tid = t;
        jobs[t].rb = rb;
        jobs[t].total = total;
        jobs[t].calls = 0;
        CHECK_OK(ddgpu_stream_create(0, &jobs[t].stream));
        jobs[t].dev = dalloc(40 * rb);
    }
    barrier(s); /* every rank allocated: no device free drains streams */
    for (int t = 0; t < a->threads; t++)
        pthread_create(&th[t], NULL, staged_reader, &jobs[t]);
    for (int t = 0; t < a->threads; t++) {
        pthread_join(th[t], NULL);
        calls += jobs[t].calls;
    }
    barrier(s);
    for (int t = 0; t < a->threads; t++) {
        CHECK_OK(ddgpu_device_free(jobs[t].dev));
        CHECK_OK(ddgpu_stream_destroy(jobs[t].stream));
    }
    CHECK_OK(dds_store_profile(s, "g", &prof));
    CHECK_EQ_U(prof.v[DDS_PROF_CALLS], (uint64_t)calls);
    /* every byte delivered went through a staging buffer */
    CHECK(prof.v[DDS_PROF_STAGED_BYTES] >= prof.v[DDS_PROF_BYTES]);
    if (g_rows_of[rank] > 0 && (w->caps & DDS_TRANSPORT_CAP_LOCAL_SELF))
        CHECK(prof.v[DDS_PROF_LOCAL_BYTES] > 0); /* own rows by memcpy */
    if (dds_prof_timing_enabled())
        CHECK(prof.v[DDS_PROF_NS_GPU_SYNC] > 0);
    /* per read: one staging buffer, one H2D copy from it on the caller's
     * stream, released without waiting; no fence (nothing but the copy
     * touches the destination) */
    CHECK_EQ(atomic_load(&px->n[P_ACQUIRE]), calls);
    CHECK_EQ(atomic_load(&px->n[P_RELEASE]), calls);
    CHECK_EQ(atomic_load(&px->h2d_with_buf), calls);
    CHECK_EQ(atomic_load(&px->n[P_COPY]), calls);
    CHECK_EQ(atomic_load(&px->n[P_FENCE]), 0);
    if (a->threads == 1)
        CHECK_EQ(atomic_load(&px->copies_on_other_stream), 0);
    barrier(s);
    dds_store_destroy(s);
}

static void test_staged_reads(void)
{
    staged_arg_t a = {24, 1};
    run_world(4, staged_rank, &a, HOST_ONLY, 0);
    a.rb = 3000;               /* rows above a split size */
    run_world(3, staged_rank, &a, HOST_ONLY, 1024);
    a.rb = 40;                 /* no LOCAL_SELF: own rows by the transport */
    run_world(2, staged_rank, &a, DDS_TRANSPORT_CAP_THREAD_SAFE, 0);
}

static void test_staged_reads_threads(void)
{
    staged_arg_t a = {96, 4};
    run_world(2, staged_rank, &a, HOST_ONLY, 0);
}

/* ---- stream order: the read comes after queued work, without waiting ---- */

static void order_rank(fake_world_t *w, int rank, void *arg)
{
    const size_t rb = 32, n = 12;
    int hmem = *(int *)arg;
    dds_store_t *s = NULL;
    unsigned char *shard, *dev, host[12 * 32];
    void *stream = NULL;
    int64_t rows[12];
    int64_t total = 2 * 10;
    dds_mem_t m;
    dds_buf_t b;
    proxy_t *px = &g_px[rank];

    CHECK_OK(gstore_create(w, rank, &s));
    if (s == NULL)
        return;
    shard = make_shard(rb, 10 * rank, 10, 9);
    CHECK_OK(dds_store_var_add(s, "o", shard, 10, 1, rb, DDS_DTYPE_RAW, NULL,
                               DDS_ADD_COPY));
    free(shard);
    CHECK_OK(ddgpu_stream_create(0, &stream));
    m = dmem(stream);
    __atomic_store_n(&px->expect_stream, stream, __ATOMIC_RELAXED);
    dev = dalloc(n * rb);
    dpoison(dev, n * rb, 0xAB, &m);
    for (size_t i = 0; i < n; i++)
        rows[i] = (int64_t)((i * 3 + 1) % (size_t)total);
    barrier(s); /* no rank frees device memory (draining every stream)
                   until every rank checked its own */
    /* "a kernel" still queued on the caller's stream writes the
     * destination; the read must land after it */
    CHECK_OK(ddgpu_memset_async(dev, 0xCD, n * rb, &m));
    b = buf_of(dev, (int64_t)n, rb, &m);
    CHECK_OK(dds_store_get_batch(s, NULL, "o", &b, rows, n));
    if (hmem) {
        /* FI_HMEM: the host waited for the queued work (one fence on this
         * stream), then the "NIC" wrote; nothing else */
        CHECK_EQ(atomic_load(&px->n[P_FENCE]), 1);
        CHECK_EQ(atomic_load(&px->n[P_ACQUIRE]), 0);
        CHECK_EQ(atomic_load(&px->n[P_COPY]), 0);
        CHECK(check_rows(rb, dev, rows, 0, n, 9, "hmem before sync") == 0);
    } else {
        /* staged: the H2D copy is queued behind the memset; nobody waited */
        CHECK_EQ(atomic_load(&px->n[P_FENCE]), 0);
        CHECK(all_bytes(dev, n * rb, 0xAB));
    }
    d2h(host, dev, n * rb, &m);
    check_rows(rb, host, rows, 0, n, 9, hmem ? "hmem" : "staged");
    CHECK_EQ(atomic_load(&px->copies_on_other_stream), 0);
    barrier(s);
    CHECK_OK(ddgpu_device_free(dev));
    CHECK_OK(ddgpu_stream_destroy(stream));
    barrier(s);
    dds_store_destroy(s);
}

static void test_stream_order(void)
{
    int hmem = 0;
    if (!g_emulated) {
        printf("n/a test_stream_order: needs the host emulation (the check "
               "looks at device memory before synchronising)\n");
        return;
    }
    run_world(2, order_rank, &hmem, HOST_ONLY, 0);
    hmem = 1;
    run_world(2, order_rank, &hmem, HOST_ONLY | DDS_TRANSPORT_CAP_HMEM_CUDA,
              0);
}

/* ---- the FI_HMEM path --------------------------------------------------- */

/* A store with variable "h" (20 rows of rb bytes per rank), a stream and
 * 40 device rows to read into: the HMEM tests' start.  0, or -1 when the
 * store could not be made. */
static int hmem_start(fake_world_t *w, int rank, size_t rb, dds_store_t **s_p,
                      void **stream_p, unsigned char **dev_p, dds_mem_t *m_p)
{
    unsigned char *shard;
    CHECK_OK(gstore_create(w, rank, s_p));
    if (*s_p == NULL)
        return -1;
    shard = make_shard(rb, 20 * rank, 20, 5);
    CHECK_OK(dds_store_var_add(*s_p, "h", shard, 20, 1, rb, DDS_DTYPE_RAW,
                               NULL, DDS_ADD_COPY));
    free(shard);
    CHECK_OK(ddgpu_stream_create(0, stream_p));
    *m_p = dmem(*stream_p);
    *dev_p = dalloc(40 * rb);
    return 0;
}

static void hmem_rank(fake_world_t *w, int rank, void *arg)
{
    const size_t rb = 24;
    dds_store_t *s = NULL;
    unsigned char *dev;
    void *stream = NULL;
    int64_t rows[40];
    dds_profile_t prof;
    dds_mem_t m;
    dds_buf_t b;
    proxy_t *px = &g_px[rank];
    (void)arg;

    if (hmem_start(w, rank, rb, &s, &stream, &dev, &m) != 0)
        return;
    __atomic_store_n(&px->expect_stream, stream, __ATOMIC_RELAXED);
    for (int i = 0; i < 40; i++) /* adjacent rows, scattered slots, repeats */
        rows[i] = (int64_t)((i * 7) % 13 + (i % 2) * 20);
    b = buf_of(dev, 40, rb, &m);
    CHECK_OK(dds_store_recv_register(s, dev, 40 * rb, &m));
    CHECK_OK(dds_store_get_batch(s, NULL, "h", &b, rows, 40));
    CHECK(atomic_load(&w->last_dst_handle[rank]) != NULL); /* registered */
    check_rows(rb, dev, rows, 0, 40, 5, "hmem get_batch");
    b.nrows = 30;
    CHECK_OK(dds_store_get(s, NULL, "h", &b, 5));
    check_rows(rb, dev, NULL, 5, 30, 5, "hmem get");
    CHECK_EQ(atomic_load(&px->n[P_FENCE]), 2);      /* one per read */
    CHECK_EQ(atomic_load(&px->n[P_ACQUIRE]), 0);    /* no staging */
    CHECK_EQ(atomic_load(&px->n[P_COPY]), 0);
    CHECK_EQ(atomic_load(&px->copies_on_other_stream), 0);
    CHECK_OK(dds_store_profile(s, "h", &prof));
    CHECK_EQ_U(prof.v[DDS_PROF_STAGED_BYTES], 0);
    /* the fields of a batch in one call: a device destination (read as
     * get_batch reads it: its fence, direct) and a host one */
    {
        const char *const names[2] = {"h", "h"};
        unsigned char *host = malloc(40 * rb);
        dds_buf_t bs[2];
        bs[0] = buf_of(dev, 40, rb, &m);
        bs[1] = buf_of(host, 40, rb, NULL);
        memset(dev, 0, 40 * rb); /* host emulation: device memory is host */
        memset(host, 0, 40 * rb);
        CHECK_OK(dds_store_get_batch_vars(s, NULL, names, bs, 2, rows, 40));
        check_rows(rb, dev, rows, 0, 40, 5, "get_batch_vars, device");
        check_rows(rb, host, rows, 0, 40, 5, "get_batch_vars, host");
        CHECK_EQ(atomic_load(&px->n[P_FENCE]), 3);
        CHECK_EQ(atomic_load(&px->n[P_ACQUIRE]), 0);
        free(host);
    }
    CHECK_OK(dds_store_recv_unregister(s, dev, 40 * rb));
    CHECK_OK(ddgpu_device_free(dev));
    CHECK_OK(ddgpu_stream_destroy(stream));
    dds_store_destroy(s);
}

/* The caller's index array changes while the read runs (here: during the
 * stream fence, which comes after the plan and before the rows that repeat
 * are turned into device reads): the read uses the indices as they were when
 * it started, every row of them, never a mix. */
static void scribble_rank(fake_world_t *w, int rank, void *arg)
{
    const size_t rb = 24;
    dds_store_t *s = NULL;
    unsigned char *dev;
    void *stream = NULL;
    int64_t rows[40], orig[40];
    dds_mem_t m;
    dds_buf_t b;
    proxy_t *px = &g_px[rank];
    (void)arg;

    if (hmem_start(w, rank, rb, &s, &stream, &dev, &m) != 0)
        return;
    for (int i = 0; i < 40; i++) /* repeats: device ops per repeated row */
        rows[i] = orig[i] = (int64_t)(1 + (i * 7) % 13 + (i % 2) * 20);
    b = buf_of(dev, 40, rb, &m);
    px->scribble = rows;
    px->nscribble = 40;
    CHECK_OK(dds_store_get_batch(s, NULL, "h", &b, rows, 40));
    px->scribble = NULL;
    px->nscribble = 0;
    CHECK_EQ(rows[5], 0); /* the fence did change them */
    check_rows(rb, dev, orig, 0, 40, 5, "indices changed during the read");
    CHECK_OK(ddgpu_device_free(dev));
    CHECK_OK(ddgpu_stream_destroy(stream));
    dds_store_destroy(s);
}

static void test_indices_changed_during_read(void)
{
    if (!g_emulated) {
        printf("n/a test_indices_changed_during_read: the fake transport "
               "writes device memory with memcpy, which only the host "
               "emulation allows\n");
        return;
    }
    run_world(2, scribble_rank, NULL, HOST_ONLY | DDS_TRANSPORT_CAP_HMEM_CUDA,
              16);
}

static void test_hmem_path(void)
{
    if (!g_emulated) {
        printf("n/a test_hmem_path: the fake transport writes device memory "
               "with memcpy, which only the host emulation allows\n");
        return;
    }
    run_world(2, hmem_rank, NULL, HOST_ONLY | DDS_TRANSPORT_CAP_HMEM_CUDA, 16);
}

/* ---- ragged variables into device memory --------------------------------- */

/* Ragged "r": this rank's g_rows_of[rank] samples, sample g has g % 4
 * element rows; element row j is make_row's row g*100+j (salt 3). */
static void add_ragged_r(dds_store_t *s, int rank, size_t rb)
{
    const int64_t first = first_of(rank);
    int64_t lens[27], nel = 0, k = 0;
    unsigned char *data;
    for (int64_t i = 0; i < g_rows_of[rank]; i++)
        nel += lens[i] = (first + i) % 4;
    data = malloc((size_t)nel * rb + 1);
    for (int64_t i = 0; i < g_rows_of[rank]; i++)
        for (int64_t j = 0; j < lens[i]; j++, k++)
            make_row(rb, (first + i) * 100 + j, 3, data + (size_t)k * rb);
    CHECK_OK(dds_store_ragged_add(s, "r", data, nel, lens, g_rows_of[rank],
                                  1, rb, DDS_DTYPE_RAW, NULL, DDS_ADD_COPY));
    free(data);
}

/* Sample g: g % 4 element rows; element row j is make_row's row g*100+j. */
static void ragged_gpu_rank(fake_world_t *w, int rank, void *arg)
{
    const size_t rb = 24;
    const int64_t total = first_of(w->n);
    int64_t k = 0, rows[30], lengths[30], got = 0;
    unsigned char *host, *dev;
    dds_store_t *s = NULL;
    void *stream = NULL;
    dds_mem_t m;
    dds_buf_t b;
    (void)arg;

    CHECK_OK(gstore_create(w, rank, &s));
    if (s == NULL)
        return;
    add_ragged_r(s, rank, rb);
    CHECK_OK(ddgpu_stream_create(0, &stream));
    m = dmem(stream);
    dev = dalloc(100 * rb);
    host = malloc(100 * rb);
    barrier(s);
    for (int it = 0; it < 4; it++) {
        for (int i = 0; i < 30; i++) /* every owner, repeats, zeros */
            rows[i] = (int64_t)((i * 11 + it * 3 + rank) % total);
        rows[29] = rows[0];
        dpoison(dev, 100 * rb, 0xAB, &m);
        b = buf_of(dev, 100, rb, &m);
        CHECK_OK(dds_store_ragged_get_batch(s, NULL, "r", &b, rows, 30,
                                            lengths, &got));
        d2h(host, dev, 100 * rb, &m);
        k = 0;
        for (int i = 0; i < 30; i++) {
            CHECK_EQ(lengths[i], rows[i] % 4);
            for (int64_t j = 0; j < lengths[i]; j++, k++) {
                unsigned char want[24];
                make_row(rb, rows[i] * 100 + j, 3, want);
                if (memcmp(want, host + (size_t)k * rb, rb) != 0) {
                    CHECK_FAIL_("ragged into device memory: sample %lld "
                                "element %lld differs", (long long)rows[i],
                                (long long)j);
                    it = 4;
                    break;
                }
            }
        }
        CHECK_EQ(got, k);
        CHECK(all_bytes(host + (size_t)got * rb, (size_t)(100 - got) * rb,
                        0xAB)); /* after the total: untouched */
    }
    barrier(s);
    CHECK_OK(ddgpu_device_free(dev));
    CHECK_OK(ddgpu_stream_destroy(stream));
    free(host);
    dds_store_destroy(s);
}

static void test_ragged_device_destination(void)
{
    run_world(4, ragged_gpu_rank, NULL, HOST_ONLY, 0); /* staged */
    if (!g_emulated) {
        printf("n/a test_ragged_device_destination (HMEM): the fake "
               "transport writes device memory with memcpy, which only the "
               "host emulation allows\n");
        return;
    }
    run_world(3, ragged_gpu_rank, NULL,
              HOST_ONLY | DDS_TRANSPORT_CAP_HMEM_CUDA, 16);
}

/* ---- fixed and ragged variables, host and device, in one planned call -- */

/* Device memory for a ragged entry once core knows its total. */
static int grow_device(void *arg, dds_read_var_t *var)
{
    void **keep = arg;
    *keep = dalloc((size_t)var->total * var->dst.row_bytes + 1);
    if (*keep == NULL)
        return -DDS_ENOMEM;
    var->dst.ptr = *keep;
    var->dst.nrows = var->total;
    return 0;
}

/* "h" (20 rows a rank) into device and host memory, ragged "r" (sample g:
 * g % 4 element rows) into device memory allocated by the grow callback,
 * and r's sizes: one dds_store_read_vars, two transport calls (the index
 * entries; everything else), bytes compared with the source rows. */
static void mixed_gpu_rank(fake_world_t *w, int rank, void *arg)
{
    const size_t rb = 24;
    const int64_t rtotal = first_of(w->n);
    int64_t k = 0, rows[40], lr[40], lz[40];
    unsigned char *dev, *host, *hr, *back;
    void *stream = NULL, *grown = NULL;
    proxy_t *px = &g_px[rank];
    dds_read_var_t e[4];
    dds_store_t *s = NULL;
    dds_mem_t m;
    (void)arg;

    if (hmem_start(w, rank, rb, &s, &stream, &dev, &m) != 0)
        return;
    add_ragged_r(s, rank, rb);
    host = malloc(40 * rb);
    back = malloc(40 * rb);
    for (int i = 0; i < 40; i++) /* every owner of both, repeats */
        rows[i] = (int64_t)((i * 11 + rank) % rtotal);
    memset(e, 0, sizeof(e));
    e[0].name = "h";
    e[0].kind = DDS_READ_FIXED;
    e[0].dst = buf_of(dev, 40, rb, &m);
    e[1].name = "r";
    e[1].kind = DDS_READ_RAGGED;
    e[1].dst = buf_of(NULL, 0, rb, &m); /* no room: grow gives it */
    e[1].lengths = lr;
    e[1].grow = grow_device;
    e[1].grow_arg = &grown;
    e[2].name = "h";
    e[2].kind = DDS_READ_FIXED;
    e[2].dst = buf_of(host, 40, rb, NULL);
    e[3].name = "r";
    e[3].kind = DDS_READ_SIZES;
    e[3].lengths = lz;
    dpoison(dev, 40 * rb, 0xAB, &m);
    for (int r = 0; r < w->n; r++) {
        barrier(s);
        if (r != rank)
            continue;
        const long mc0 = atomic_load(&w->multi_calls);
        const long rc0 = atomic_load(&w->read_calls);
        const long f0 = atomic_load(&px->n[P_FENCE]);
        const long a0 = atomic_load(&px->n[P_ACQUIRE]);
        CHECK_OK(dds_store_read_vars(s, NULL, e, 4, rows, 40));
        CHECK_EQ(atomic_load(&w->multi_calls) - mc0, 2);
        CHECK_EQ(atomic_load(&w->read_calls) - rc0, 0);
        if (w->caps & DDS_TRANSPORT_CAP_HMEM_CUDA) {
            CHECK_EQ(atomic_load(&px->n[P_FENCE]) - f0, 2); /* one a dst */
            CHECK_EQ(atomic_load(&px->n[P_ACQUIRE]) - a0, 0);
        } else {
            CHECK_EQ(atomic_load(&px->n[P_ACQUIRE]) - a0, 2); /* staged */
        }
    }
    barrier(s);
    d2h(back, dev, 40 * rb, &m);
    check_rows(rb, back, rows, 0, 40, 5, "read_vars, fixed into device");
    check_rows(rb, host, rows, 0, 40, 5, "read_vars, fixed into host");
    CHECK(grown != NULL && e[1].dst.ptr == grown);
    hr = malloc((size_t)e[1].total * rb + 1);
    if (e[1].total > 0)
        d2h(hr, grown, (size_t)e[1].total * rb, &m);
    k = 0;
    for (int i = 0; i < 40; i++) {
        CHECK_EQ(lr[i], rows[i] % 4);
        CHECK_EQ(lz[i], rows[i] % 4);
        for (int64_t j = 0; j < lr[i] && k < e[1].total; j++, k++) {
            unsigned char want[24];
            make_row(rb, rows[i] * 100 + j, 3, want);
            if (memcmp(want, hr + (size_t)k * rb, rb) != 0) {
                CHECK_FAIL_("read_vars, ragged into device: sample %lld "
                            "element %lld differs", (long long)rows[i],
                            (long long)j);
                i = 40;
                break;
            }
        }
    }
    CHECK_EQ(k, e[1].total);
    CHECK_EQ(e[3].total, e[1].total);
    free(hr);
    CHECK_OK(ddgpu_device_free(grown));
    CHECK_OK(ddgpu_device_free(dev));
    CHECK_OK(ddgpu_stream_destroy(stream));
    free(host);
    free(back);
    dds_store_destroy(s);
}

static void test_mixed_one_call(void)
{
    g_read_multi = 1;
    run_world(3, mixed_gpu_rank, NULL, HOST_ONLY, 0); /* staged */
    run_world(3, mixed_gpu_rank, NULL, HOST_ONLY, 40); /* split reads */
    if (!g_emulated) {
        printf("n/a test_mixed_one_call (HMEM): the fake transport writes "
               "device memory with memcpy, which only the host emulation "
               "allows\n");
    } else {
        run_world(3, mixed_gpu_rank, NULL,
                  HOST_ONLY | DDS_TRANSPORT_CAP_HMEM_CUDA, 16);
    }
    g_read_multi = 0;
}

/* ---- HMEM advertised, registration refused: staged from then on --------- */

static void refused_rank(fake_world_t *w, int rank, void *arg)
{
    const size_t rb = 48;
    int via_register = *(int *)arg;
    dds_store_t *s = NULL;
    unsigned char *shard, *dev, host[16 * 48];
    void *stream = NULL;
    int64_t rows[16];
    dds_mem_t m;
    dds_buf_t b;
    proxy_t *px = &g_px[rank];

    CHECK_OK(gstore_create(w, rank, &s));
    if (s == NULL)
        return;
    shard = make_shard(rb, 8 * rank, 8, 4);
    CHECK_OK(dds_store_var_add(s, "r", shard, 8, 1, rb, DDS_DTYPE_RAW, NULL,
                               DDS_ADD_COPY));
    free(shard);
    CHECK_OK(ddgpu_stream_create(0, &stream));
    m = dmem(stream);
    dev = dalloc(16 * rb);
    for (int i = 0; i < 16; i++)
        rows[i] = (i * 5) % 16;
    b = buf_of(dev, 16, rb, &m);
    if (via_register) {
        /* the registration is refused: recorded, not registered */
        CHECK_OK(dds_store_recv_register(s, dev, 16 * rb, &m));
        CHECK_EQ(atomic_load(&w->live_regs), 0);
    }
    dpoison(dev, 16 * rb, 0xAB, &m);
    CHECK_OK(dds_store_get_batch(s, NULL, "r", &b, rows, 16));
    d2h(host, dev, 16 * rb, &m);
    check_rows(rb, host, rows, 0, 16, 4, "refused hmem -> staged");
    /* registering first: staged at once (no fence, no failed attempt);
     * reading first: fence, the refused read, then the same read staged */
    CHECK_EQ(atomic_load(&px->n[P_FENCE]), via_register ? 0 : 1);
    CHECK_EQ(atomic_load(&px->n[P_ACQUIRE]), 1);
    /* from now on staged directly */
    CHECK_OK(dds_store_get(s, NULL, "r", &b, 0));
    d2h(host, dev, 16 * rb, &m);
    check_rows(rb, host, NULL, 0, 16, 4, "staged after refusal");
    CHECK_EQ(atomic_load(&px->n[P_FENCE]), via_register ? 0 : 1);
    CHECK_EQ(atomic_load(&px->n[P_ACQUIRE]), 2);
    if (via_register)
        CHECK_OK(dds_store_recv_unregister(s, dev, 16 * rb));
    barrier(s);
    CHECK_OK(ddgpu_device_free(dev));
    CHECK_OK(ddgpu_stream_destroy(stream));
    dds_store_destroy(s);
}

static void refused_nostaging_rank(fake_world_t *w, int rank, void *arg)
{
    dds_store_t *s = NULL;
    unsigned char *shard, *dev;
    int64_t rows[2] = {0, 3};
    dds_mem_t m = dmem(NULL);
    dds_buf_t b;
    (void)arg;
    CHECK_OK(gstore_create(w, rank, &s));
    if (s == NULL)
        return;
    shard = make_shard(8, 2 * rank, 2, 1);
    CHECK_OK(dds_store_var_add(s, "r", shard, 2, 1, 8, DDS_DTYPE_RAW, NULL,
                               DDS_ADD_COPY));
    free(shard);
    dev = dalloc(16);
    b = buf_of(dev, 2, 8, &m);
    CHECK_RC(dds_store_get_batch(s, NULL, "r", &b, rows, 2), -DDS_ENOSYS);
    CHECK_CONTAINS(dds_last_error(), "registering device memory failed");
    CHECK_RC(dds_store_recv_register(s, dev, 16, &m), -DDS_ENOSYS);
    barrier(s);
    CHECK_OK(ddgpu_device_free(dev));
    dds_store_destroy(s);
}

static void run_refused(fw_rank_fn fn, int arg)
{
    fake_world_t w;
    proxies_reset();
    fw_init(&w, 2);
    w.caps = HOST_ONLY | DDS_TRANSPORT_CAP_HMEM_CUDA;
    w.reject_device = 1;
    fw_run(&w, fn, &arg);
    CHECK_EQ(atomic_load(&w.bad_ops), 0);
    CHECK_EQ(atomic_load(&w.live_regions), 0);
    CHECK_EQ(atomic_load(&w.live_regs), 0);
    CHECK_EQ(atomic_load(&w.destroyed), 2);
    fw_fini(&w);
}

static void test_hmem_refused(void)
{
    run_refused(refused_rank, 0);
    run_refused(refused_rank, 1);
    setenv("DDSTORE_GPU_STAGING", "0", 1);
    run_refused(refused_nostaging_rank, 0);
    unsetenv("DDSTORE_GPU_STAGING");
}

/* ---- GPU shards --------------------------------------------------------- */

static void shard_rank(fake_world_t *w, int rank, void *arg)
{
    const size_t rb = 40;
    const int64_t rows_of[3] = {9, 0, 14};
    int hmem = *(int *)arg;
    int64_t mine = rows_of[rank], total = 23, first = rank == 0 ? 0 : 9;
    dds_store_t *s = NULL;
    unsigned char *host, *dshard = NULL, *ddst, *src, *out;
    void *stream = NULL;
    int64_t rows[23];
    dds_var_info_t vi;
    dds_profile_t prof;
    dds_mem_t m;
    dds_buf_t b;
    proxy_t *px = &g_px[rank];

    CHECK_OK(gstore_create(w, rank, &s));
    if (s == NULL)
        return;
    CHECK_OK(ddgpu_stream_create(0, &stream));
    m = dmem(stream);
    /* the shard is produced on the stream and not yet there when add is
     * called: add must order its mirror copy after it */
    host = make_shard(rb, first, mine, 2);
    if (mine > 0) {
        dshard = dalloc((size_t)mine * rb);
        CHECK_OK(ddgpu_copy_async(DDS_COPY_H2D, dshard, host,
                                  (size_t)mine * rb, &m));
    }
    CHECK_OK(dds_store_var_add(s, "d", dshard, mine, 1, rb, DDS_DTYPE_RAW, &m,
                               DDS_ADD_IN_PLACE));
    CHECK_OK(dds_store_var_info(s, "d", &vi));
    CHECK_EQ(vi.mem.kind, g_kind);
    CHECK_EQ(vi.total_rows, total);
    /* host-only transport: a pinned mirror (none for an empty shard);
     * HMEM: the device memory itself */
    CHECK_EQ(atomic_load(&px->n[P_HOST_ALLOC]), !hmem && mine > 0);
    for (int64_t i = 0; i < total; i++)
        rows[i] = (total - 1 - i * 5 % total + total) % total;
    out = malloc((size_t)total * rb);
    /* every rank reads every row into host memory */
    memset(out, 0xAB, (size_t)total * rb);
    b = buf_of(out, total, rb, NULL);
    CHECK_OK(dds_store_get_batch(s, NULL, "d", &b, rows, (size_t)total));
    check_rows(rb, out, rows, 0, (size_t)total, 2, "gpu shard -> host");
    /* and into device memory */
    ddst = dalloc((size_t)total * rb);
    dpoison(ddst, (size_t)total * rb, 0xAB, &m);
    b = buf_of(ddst, total, rb, &m);
    if (!hmem || g_emulated) {
        CHECK_OK(dds_store_get(s, NULL, "d", &b, 0));
        d2h(out, ddst, (size_t)total * rb, &m);
        check_rows(rb, out, NULL, 0, (size_t)total, 2, "gpu shard -> device");
    }
    CHECK_OK(dds_store_profile(s, "d", &prof));
    if (!hmem && mine > 0 && (w->caps & DDS_TRANSPORT_CAP_LOCAL_SELF))
        CHECK(prof.v[DDS_PROF_LOCAL_BYTES] > 0); /* own rows: the mirror */
    barrier(s);
    /* A forked child must not touch the pinned mirror (not inherited by a
     * child on a real GPU): its own rows go through the transport.  (The
     * fake transport copies from the mirror in-process, which only the
     * emulation's malloc'd "pinned" memory survives.) */
    if (g_emulated && !hmem && rank == 0 && mine > 0 &&
        (w->caps & DDS_TRANSPORT_CAP_LOCAL_SELF)) {
        pid_t pid = fork();
        if (pid == 0) {
            long before = atomic_load(&w->local_ops);
            dds_profile_t p2;
            int bad = 0;
            b = buf_of(out, mine, rb, NULL);
            memset(out, 0, (size_t)mine * rb);
            bad |= dds_store_get(s, NULL, "d", &b, first) != 0;
            bad |= check_rows(rb, out, NULL, first, (size_t)mine, 2,
                              "forked child, own rows");
            bad |= atomic_load(&w->local_ops) <= before; /* by transport */
            bad |= dds_store_profile(s, "d", &p2) != 0 ||
                   p2.v[DDS_PROF_LOCAL_BYTES] != prof.v[DDS_PROF_LOCAL_BYTES];
            _exit(bad ? 1 : 0);
        }
        int status = 0;
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    barrier(s);

    /* update: rows [1, 3) from host memory, then row 0 from device memory;
     * salt 7 marks the new rows */
    if (mine >= 3) {
        src = make_shard(rb, first + 1, 2, 7);
        b = buf_of(src, 2, rb, NULL);
        CHECK_OK(dds_store_var_update(s, "d", &b, 1));
        free(src);
        src = make_shard(rb, first, 1, 7);
        h2d(ddst, src, rb, &m);
        b = buf_of(ddst, 1, rb, &m);
        CHECK_OK(dds_store_var_update(s, "d", &b, 0));
        free(src);
        /* the device shard has them */
        d2h(out, dshard, 3 * rb, &m);
        check_rows(rb, out, NULL, first, 3, 7, "updated device shard");
    }
    barrier(s);
    /* every rank sees the updates (through the mirror, or HMEM) */
    b = buf_of(out, total, rb, NULL);
    CHECK_OK(dds_store_get(s, NULL, "d", &b, 0));
    for (int r = 0; r < 3; r++) {
        int64_t f = r == 0 ? 0 : 9, k = rows_of[r];
        if (k >= 3) {
            check_rows(rb, out + (size_t)f * rb, NULL, f, 3, 7, "update seen");
            check_rows(rb, out + (size_t)(f + 3) * rb, NULL, f + 3,
                       (size_t)(k - 3), 2, "rows kept");
        }
    }
    /* out of the shard */
    b = buf_of(out, 2, rb, NULL);
    CHECK_RC(dds_store_var_update(s, "d", &b, mine), -DDS_ERANGE);
    barrier(s);
    CHECK_OK(dds_store_free(s)); /* mirror released here */
    CHECK_EQ(atomic_load(&px->n[P_HOST_FREE]),
             atomic_load(&px->n[P_HOST_ALLOC]));
    free(out);
    free(host);
    CHECK_OK(ddgpu_device_free(ddst));
    if (dshard != NULL)
        CHECK_OK(ddgpu_device_free(dshard));
    CHECK_OK(ddgpu_stream_destroy(stream));
    dds_store_destroy(s);
}

static void test_gpu_shards(void)
{
    int hmem = 0;
    run_world(3, shard_rank, &hmem, HOST_ONLY, 0);
    run_world(3, shard_rank, &hmem, DDS_TRANSPORT_CAP_THREAD_SAFE, 0);
    if (!g_emulated) {
        printf("n/a test_gpu_shards (HMEM part): the fake transport reads "
               "device memory with memcpy, which only the host emulation "
               "allows\n");
        return;
    }
    hmem = 1;
    run_world(3, shard_rank, &hmem, HOST_ONLY | DDS_TRANSPORT_CAP_HMEM_CUDA, 0);
}

/* ---- DDSTORE_GPU_STAGING=0 and missing GPU runtime ---------------------- */

static void disabled_rank(fake_world_t *w, int rank, void *arg)
{
    const size_t rb = 16;
    int expect = *(int *)arg;
    dds_store_t *s = NULL;
    unsigned char *shard, *dev, host[8 * 16];
    void *stream = NULL;
    int64_t rows[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    dds_mem_t m;
    dds_buf_t b;
    proxy_t *px = &g_px[rank];

    CHECK_OK(gstore_create(w, rank, &s));
    if (s == NULL)
        return;
    shard = make_shard(rb, 4 * rank, 4, 1);
    CHECK_OK(dds_store_var_add(s, "x", shard, 4, 1, rb, DDS_DTYPE_RAW, NULL,
                               DDS_ADD_COPY));
    CHECK_OK(ddgpu_stream_create(0, &stream));
    m = dmem(stream);
    dev = dalloc(8 * rb);
    dpoison(dev, 8 * rb, 0xAB, &m);
    b = buf_of(dev, 8, rb, &m);
    CHECK_RC(dds_store_get_batch(s, NULL, "x", &b, rows, 8), expect);
    CHECK_CONTAINS(dds_last_error(), "read of 'x'");
    CHECK_CONTAINS(dds_last_error(), "FI_HMEM");
    CHECK_CONTAINS(dds_last_error(), expect == -DDS_ENOSYS
                                         ? "DDSTORE_GPU_STAGING=0"
                                         : "no GPU");
    CHECK_RC(dds_store_get(s, NULL, "x", &b, 0), expect);
    CHECK_RC(dds_store_recv_register(s, dev, 8 * rb, &m), expect);
    /* nothing moved, nothing was asked of the GPU runtime */
    d2h(host, dev, 8 * rb, &m);
    CHECK(all_bytes(host, 8 * rb, 0xAB));
    CHECK_EQ(atomic_load(&px->n[P_ACQUIRE]), 0);
    CHECK_EQ(atomic_load(&px->n[P_COPY]), 0);
    /* a GPU shard fails on every rank alike (collective) */
    CHECK_RC(dds_store_var_add(s, "y", rank == 0 ? dev : shard, 4, 1, rb,
                               DDS_DTYPE_RAW, rank == 0 ? &m : NULL,
                               DDS_ADD_IN_PLACE),
             expect);
    CHECK_CONTAINS(dds_last_error(), "mirror");
    /* the store stays usable: host reads work */
    b = buf_of(host, 8, rb, NULL);
    CHECK_OK(dds_store_get_batch(s, NULL, "x", &b, rows, 8));
    check_rows(rb, host, rows, 0, 8, 1, "host read after errors");
    free(shard);
    CHECK_OK(ddgpu_device_free(dev));
    CHECK_OK(ddgpu_stream_destroy(stream));
    barrier(s);
    dds_store_destroy(s);
}

static void test_staging_disabled(void)
{
    int expect = -DDS_ENOSYS;
    setenv("DDSTORE_GPU_STAGING", "0", 1);
    run_world(2, disabled_rank, &expect, HOST_ONLY, 0);
    unsetenv("DDSTORE_GPU_STAGING");
    /* a store without a memsys (no GPU runtime) says "no GPU" */
    expect = -DDS_ENOGPU;
    g_with_memsys = 0;
    run_world(2, disabled_rank, &expect, HOST_ONLY, 0);
    g_with_memsys = 1;
    /* a bad value fails store creation on every rank */
    setenv("DDSTORE_GPU_STAGING_BYTES", "-5", 1);
    {
        fake_world_t w;
        fw_init(&w, 1);
        dds_store_t *s = NULL;
        proxies_reset();
        CHECK_RC(gstore_create(&w, 0, &s), -DDS_ECONFIG);
        CHECK_CONTAINS(dds_last_error(), "DDSTORE_GPU_STAGING_BYTES");
        CHECK(s == NULL);
        CHECK_EQ(atomic_load(&g_px[0].destroyed), 1); /* ownership moved */
        fw_fini(&w);
    }
    unsetenv("DDSTORE_GPU_STAGING_BYTES");
}

/* ---- kinds, parameters, pointer checks ---------------------------------- */

static void misc_rank(fake_world_t *w, int rank, void *arg)
{
    const size_t rb = 8;
    dds_store_t *s = NULL;
    unsigned char *shard, *dev;
    int64_t rows[2] = {0, 1};
    dds_mem_t m = dmem(NULL), other = dmem(NULL);
    dds_buf_t b;
    (void)arg;

    CHECK_OK(gstore_create(w, rank, &s));
    if (s == NULL)
        return;
    shard = make_shard(rb, 2 * rank, 2, 3);
    CHECK_OK(dds_store_var_add(s, "m", shard, 2, 1, rb, DDS_DTYPE_RAW, NULL,
                               DDS_ADD_COPY));
    dev = dalloc(4 * rb);
    /* the other vendor's memory: the runtime here cannot drive it */
    other.kind = g_kind == DDS_MEM_CUDA ? DDS_MEM_ROCM : DDS_MEM_CUDA;
    b = buf_of(dev, 2, rb, &other);
    CHECK_RC(dds_store_get_batch(s, NULL, "m", &b, rows, 2), -DDS_ENOSYS);
    CHECK_CONTAINS(dds_last_error(), "drives");
    /* device memory described as host memory is caught, not memcpy'd */
    CHECK_RC(dds_store_recv_register(s, dev, 4 * rb, NULL), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "described as host memory");
    CHECK_RC(dds_store_var_add(s, "n", rank == 0 ? (void *)dev : shard, 2, 1,
                               rb, DDS_DTYPE_RAW, NULL, DDS_ADD_COPY),
             -DDS_EINVAL);
    /* copying GPU memory into a host shard is not done: in place only */
    CHECK_RC(dds_store_var_add(s, "n", dev, 2, 1, rb, DDS_DTYPE_RAW, &m,
                               DDS_ADD_COPY),
             -DDS_ENOSYS);
    /* staged destinations are only recorded, not registered */
    CHECK_OK(dds_store_recv_register(s, dev, 4 * rb, &m));
    CHECK_EQ(atomic_load(&w->live_regs), 0);
    CHECK_OK(dds_store_recv_unregister(s, dev, 4 * rb));
    free(shard);
    CHECK_OK(ddgpu_device_free(dev));
    barrier(s);
    dds_store_destroy(s);
}

static void test_kinds_and_pointers(void)
{
    run_world(2, misc_rank, NULL, HOST_ONLY, 0);
}

static void bad_memsys_rank(fake_world_t *w, int rank, void *arg)
{
    dds_store_params_t p;
    dds_store_t *s = NULL;
    proxy_t *px = &g_px[rank];
    int which = *(int *)arg;
    memset(&p, 0, sizeof(p));
    p.field_mask = DDS_STORE_PARAM_COMM | DDS_STORE_PARAM_TRANSPORT |
                   DDS_STORE_PARAM_MEMSYS;
    p.comm = fw_comm(w, rank);
    p.transport = fw_transport(w, rank);
    CHECK_OK(ddgpu_memsys_create(NULL, &px->inner));
    proxy_init(px);
    if (which == 0 && rank == 0)
        px->ops.copy_async = NULL;       /* incomplete table on one rank */
    else if (which == 1 && rank == 0)
        px->ops.kind = DDS_MEM_HOST;     /* not a GPU kind */
    p.memsys.ops = &px->ops;
    p.memsys.ctx = px;
    CHECK_RC(dds_store_create(&p, &s), -DDS_EINVAL);
    CHECK(s == NULL);
    CHECK_EQ(atomic_load(&px->destroyed), 1);
    /* NULL ops: an error, nothing to destroy */
    memset(&p, 0, sizeof(p));
    p.field_mask = DDS_STORE_PARAM_COMM | DDS_STORE_PARAM_TRANSPORT |
                   DDS_STORE_PARAM_MEMSYS;
    p.comm = fw_comm(w, rank);
    p.transport = fw_transport(w, rank);
    CHECK_RC(dds_store_create(&p, &s), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "memsys");
    /* NULL store_p: everything handed over is released */
    px->destroyed = 0;
    CHECK_OK(ddgpu_memsys_create(NULL, &px->inner));
    memset(&p, 0, sizeof(p));
    p.field_mask = DDS_STORE_PARAM_MEMSYS;
    p.memsys.ops = &px->ops;
    p.memsys.ctx = px;
    px->ops.copy_async = px_copy;
    px->ops.kind = px->inner.ops->kind;
    CHECK_RC(dds_store_create(&p, NULL), -DDS_EINVAL);
    CHECK_EQ(atomic_load(&px->destroyed), 1);
}

static void test_memsys_params(void)
{
    for (int which = 0; which < 2; which++) {
        fake_world_t w;
        proxies_reset();
        fw_init(&w, 2);
        fw_run(&w, bad_memsys_rank, &which);
        CHECK_EQ(atomic_load(&w.destroyed), 4);
        CHECK_EQ(atomic_load(&w.comms_destroyed), 4);
        fw_fini(&w);
    }
}

/* ---- main --------------------------------------------------------------- */

int main(void)
{
    ddgpu_info_t info;
    int rc;

    unsetenv("DDSTORE_GPU_STAGING");
    unsetenv("DDSTORE_GPU_STAGING_BYTES");
    unsetenv("DDSTORE_MAX_READ_BYTES");
    unsetenv("DDSTORE_MERGE_ROW_BYTES");
    rc = ddgpu_test_host_emulation(1);
    if (rc == 0) {
        g_emulated = 1;
    } else if (ddgpu_available(&info) == 0) {
        g_real = 1;
    } else {
        const char *strict = getenv("DDSTORE_TEST_STRICT");
        printf("SKIP: store_gpu_test: no GPU and no host emulation (%s)\n",
               dds_last_error());
        return strict != NULL && strcmp(strict, "1") == 0 ? 1 : 0;
    }
    CHECK_OK(ddgpu_available(&info));
    g_kind = info.kind;
    printf("store_gpu_test: %s backend, %s\n", ddgpu_backend_name(),
           g_emulated ? "host emulation" : "real device 0");
    RUN_TEST(test_staged_reads);
    RUN_TEST(test_staged_reads_threads);
    RUN_TEST(test_stream_order);
    RUN_TEST(test_hmem_path);
    RUN_TEST(test_indices_changed_during_read);
    RUN_TEST(test_hmem_refused);
    RUN_TEST(test_ragged_device_destination);
    RUN_TEST(test_mixed_one_call);
    RUN_TEST(test_gpu_shards);
    RUN_TEST(test_staging_disabled);
    RUN_TEST(test_kinds_and_pointers);
    RUN_TEST(test_memsys_params);
    if (g_emulated)
        ddgpu_test_host_emulation(0);
    return CHECK_SUMMARY();
}
