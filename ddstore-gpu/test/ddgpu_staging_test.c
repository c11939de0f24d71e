/* ddstore-gpu: the staging engine, events and the memops table.
 *
 * Runs on a real device (cuda/hip builds with a GPU) or, in the none build,
 * on the host emulation (ddgpu_test_host_emulation), whose copies run only
 * when the host waits: so a missing wait, a buffer lent again while a copy
 * from it is pending, or a copy not ordered after an event shows up as
 * wrong data.  cuda/hip builds without a GPU print SKIP.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ddstore/errors.h"
#include "ddstore/gpu.h"

static int emulated;   /* 1: none build's emulation; 0: a real device */

static dds_mem_t on_stream(void *stream)
{
    dds_mem_t m = {ddgpu_backend_kind(), 0, stream};
    return m;
}

static unsigned char pat(int64_t row, size_t byte)
{
    return (unsigned char)((row * 131 + (int64_t)byte * 7 + 1) & 0xff);
}

/* Device bytes -> host, waiting for them (pageable D2H + stream sync). */
static int read_back(void *host, const void *dev, size_t bytes, void *stream)
{
    dds_mem_t on = on_stream(stream);
    int rc = ddgpu_copy_async(DDS_COPY_D2H, host, dev, bytes, &on);
    if (rc == 0)
        rc = ddgpu_stream_synchronize(&on);
    return rc;
}

static size_t count_not(const unsigned char *p, size_t n, unsigned char v)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += p[i] != v;
    return bad;
}

static void test_pool_basics(void)
{
    ddgpu_staging_params_t prm = {
        DDGPU_STAGING_PARAM_MIN_BUF_BYTES | DDGPU_STAGING_PARAM_MAX_BYTES,
        1 << 20, 4096};
    ddgpu_staging_t *st = NULL, *other = NULL;
    ddgpu_stage_buf_t *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(ddgpu_staging_create(&prm, &st));
    CHECK_OK(ddgpu_staging_create(NULL, &other));
    CHECK_OK(ddgpu_staging_acquire(st, 100, &a));
    CHECK_EQ(ddgpu_stage_buf_bytes(a), 4096);
    CHECK(ddgpu_stage_buf_host(a) != NULL);
    ddgpu_ptr_kind_t k = DDGPU_PTR_HOST;
    dds_mem_t m;
    CHECK_OK(ddgpu_pointer_kind(ddgpu_stage_buf_host(a), &k, &m));
    CHECK_EQ(k, DDGPU_PTR_HOST_PINNED);
    CHECK_EQ(m.kind, DDS_MEM_HOST);
    void *host_a = ddgpu_stage_buf_host(a);
    CHECK_RC(ddgpu_staging_release(other, a), -DDS_EINVAL);
    CHECK_OK(ddgpu_staging_release(st, a));
    CHECK_RC(ddgpu_staging_release(st, a), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "not lent");
    CHECK_RC(ddgpu_stage_buf_wait(a), -DDS_EINVAL);
    dds_memseg_t seg = {0, 0, 8};
    char dummy[8];
    CHECK_RC(ddgpu_stage_to_device(a, dummy, &seg, 1, NULL), -DDS_EINVAL);
    /* nothing pending: the same buffer comes back */
    CHECK_OK(ddgpu_staging_acquire(st, 4000, &b));
    CHECK(ddgpu_stage_buf_host(b) == host_a);
    /* a second one while the first is lent */
    CHECK_OK(ddgpu_staging_acquire(st, 5000, &c));
    CHECK_EQ(ddgpu_stage_buf_bytes(c), 8192);
    CHECK(ddgpu_stage_buf_host(c) != host_a);
    ddgpu_staging_stats_t s;
    CHECK_OK(ddgpu_staging_stats(st, &s));
    CHECK_EQ(s.acquires, 3);
    CHECK_EQ(s.allocs, 2);
    CHECK_EQ(s.buffers, 2);
    CHECK_EQ(s.lent, 2);
    CHECK_EQ(s.pinned_bytes, 4096 + 8192);
    CHECK_OK(ddgpu_staging_release(st, b));
    CHECK_OK(ddgpu_staging_release(st, c));
    CHECK_OK(ddgpu_staging_stats(st, &s));
    CHECK_EQ(s.lent, 0);
    CHECK_RC(ddgpu_staging_acquire(st, 0, &a), -DDS_EINVAL);
    ddgpu_staging_destroy(st);
    ddgpu_staging_destroy(other);
}

/* The store's flow for get_batch into GPU memory through a host-only
 * transport: rows land in a pinned buffer laid out like the destination,
 * one H2D copy on the caller's stream, buffer released at once. */
static void test_stage_rows(void)
{
    enum { R = 64, SHARD = 200 };
    const size_t rb = 48;
    unsigned char *shard = malloc(SHARD * rb);
    unsigned char *check = malloc(R * rb);
    for (int64_t r = 0; r < SHARD; r++)
        for (size_t j = 0; j < rb; j++)
            shard[r * rb + j] = pat(r, j);
    int64_t idx[R];
    for (int i = 0; i < R; i++)
        idx[i] = (int64_t)((i * 37) % SHARD);
    idx[5] = idx[3];   /* repeats are allowed */

    ddgpu_staging_params_t prm = {DDGPU_STAGING_PARAM_MIN_BUF_BYTES, 0, 4096};
    ddgpu_staging_t *st = NULL;
    void *stream = NULL;
    unsigned char *dst = NULL, *dst2 = NULL;
    CHECK_OK(ddgpu_staging_create(&prm, &st));
    CHECK_OK(ddgpu_stream_create(0, &stream));
    CHECK_OK(ddgpu_device_alloc(0, R * rb, (void **)&dst));
    CHECK_OK(ddgpu_device_alloc(0, R * rb, (void **)&dst2));
    if (!st || !stream || !dst || !dst2)
        goto out;
    dds_mem_t on = on_stream(stream);
    ddgpu_ptr_kind_t k = DDGPU_PTR_HOST;
    dds_mem_t m;
    CHECK_OK(ddgpu_pointer_kind(dst + 7, &k, &m));
    CHECK_EQ(k, DDGPU_PTR_DEVICE);
    CHECK_EQ(m.kind, ddgpu_backend_kind());
    CHECK_EQ(m.device, 0);
    CHECK_OK(ddgpu_memset_async(dst, 0xEE, R * rb, &on));   /* poison */
    CHECK_OK(ddgpu_memset_async(dst2, 0xEE, R * rb, &on));
    CHECK_OK(ddgpu_stream_synchronize(&on));   /* the poison is in place */

    ddgpu_stage_buf_t *b1 = NULL, *b2 = NULL, *b3 = NULL;
    CHECK_OK(ddgpu_staging_acquire(st, R * rb, &b1));
    unsigned char *h1 = ddgpu_stage_buf_host(b1);
    dds_memseg_t segs[R];
    for (int i = 0; i < R; i++) {
        memcpy(h1 + i * rb, shard + idx[i] * rb, rb);   /* the "transport" */
        segs[i].src_offset = i * rb;
        segs[i].dst_offset = i * rb;
        segs[i].len = rb;
    }
    ddgpu_staging_stats_t s0, s1;
    CHECK_OK(ddgpu_staging_stats(st, &s0));
    CHECK_OK(ddgpu_stage_to_device(b1, dst, segs, R, &on));
    CHECK_OK(ddgpu_staging_stats(st, &s1));
    CHECK_EQ(s1.copies - s0.copies, 1);   /* 64 row segments merged into one */
    CHECK_EQ(s1.h2d_bytes - s0.h2d_bytes, R * rb);
    if (emulated) {
        /* nothing waited inside: the copy has not run yet */
        CHECK_EQ(count_not(dst, R * rb, 0xEE), 0);
    }
    CHECK_OK(ddgpu_staging_release(st, b1));   /* copy still pending */

    /* The next read: must not get b1 while its copy may be pending. */
    CHECK_OK(ddgpu_staging_acquire(st, R * rb, &b2));
    unsigned char *h2 = ddgpu_stage_buf_host(b2);
    if (emulated)
        CHECK(h2 != h1);
    if (h2 != h1)
        memset(h2, 0x11, ddgpu_stage_buf_bytes(b2));  /* would corrupt dst */
    /* scattered: staging row i -> destination row R-1-i (no merging) */
    for (int i = 0; i < R; i++) {
        memcpy(h2 + i * rb, shard + idx[i] * rb, rb);
        segs[i].src_offset = i * rb;
        segs[i].dst_offset = (size_t)(R - 1 - i) * rb;
        segs[i].len = rb;
    }
    CHECK_OK(ddgpu_staging_stats(st, &s0));
    CHECK_OK(ddgpu_stage_to_device(b2, dst2, segs, R, &on));
    CHECK_OK(ddgpu_staging_stats(st, &s1));
    CHECK_EQ(s1.copies - s0.copies, R);
    CHECK_OK(ddgpu_staging_release(st, b2));

    /* Reverse direction: D2H into pinned staging, wait, check. */
    CHECK_OK(ddgpu_staging_acquire(st, 2 * R * rb, &b3));
    unsigned char *h3 = ddgpu_stage_buf_host(b3);
    dds_memseg_t back[2] = {{0, 0, R * rb}, {0, R * rb, R * rb}};
    CHECK_OK(ddgpu_stage_from_device(b3, dst, &back[0], 1, &on));
    CHECK_OK(ddgpu_stage_from_device(b3, dst2, &back[1], 1, &on));
    CHECK_OK(ddgpu_stage_buf_wait(b3));
    size_t bad1 = 0, bad2 = 0;
    for (int i = 0; i < R; i++) {
        bad1 += memcmp(h3 + i * rb, shard + idx[i] * rb, rb) != 0;
        bad2 += memcmp(h3 + R * rb + (size_t)(R - 1 - i) * rb,
                       shard + idx[i] * rb, rb) != 0;
    }
    CHECK_EQ(bad1, 0);
    CHECK_EQ(bad2, 0);
    CHECK_OK(ddgpu_staging_release(st, b3));
    /* and through a plain pageable read-back */
    CHECK_OK(read_back(check, dst, R * rb, stream));
    CHECK_EQ(memcmp(check + 5 * rb, shard + idx[3] * rb, rb), 0);
out:
    ddgpu_staging_destroy(st);
    CHECK_OK(ddgpu_device_free(dst));
    CHECK_OK(ddgpu_device_free(dst2));
    CHECK_OK(ddgpu_stream_destroy(stream));
    free(shard);
    free(check);
}

/* Over the pool limit, acquire waits for a pending buffer instead of
 * pinning more. */
static void test_limit_wait(void)
{
    const size_t B = 4096;
    enum { N = 6 };
    ddgpu_staging_params_t prm = {
        DDGPU_STAGING_PARAM_MIN_BUF_BYTES | DDGPU_STAGING_PARAM_MAX_BYTES,
        2 * B, B};
    ddgpu_staging_t *st = NULL;
    void *stream = NULL;
    unsigned char *dst = NULL;
    unsigned char *check = malloc(N * B);
    CHECK_OK(ddgpu_staging_create(&prm, &st));
    CHECK_OK(ddgpu_stream_create(0, &stream));
    CHECK_OK(ddgpu_device_alloc(0, N * B, (void **)&dst));
    if (!st || !stream || !dst)
        goto out;
    dds_mem_t on = on_stream(stream);
    for (int i = 0; i < N; i++) {
        ddgpu_stage_buf_t *b = NULL;
        CHECK_OK(ddgpu_staging_acquire(st, B, &b));
        if (!b)
            break;
        memset(ddgpu_stage_buf_host(b), 0x30 + i, B);
        dds_memseg_t seg = {0, (size_t)i * B, B};
        CHECK_OK(ddgpu_stage_to_device(b, dst, &seg, 1, &on));
        CHECK_OK(ddgpu_staging_release(st, b));
    }
    ddgpu_staging_stats_t s;
    CHECK_OK(ddgpu_staging_stats(st, &s));
    CHECK(s.buffers <= 2);
    CHECK(s.pinned_bytes <= 2 * B);
    if (emulated) {
        CHECK_EQ(s.allocs, 2);
        CHECK_EQ(s.waits, N - 2);
    }
    CHECK_OK(read_back(check, dst, N * B, stream));
    for (int i = 0; i < N; i++)
        CHECK_EQ(count_not(check + (size_t)i * B, B, (unsigned char)(0x30 + i)), 0);
    /* A request bigger than every idle buffer, over the limit: the small
     * idle buffers are evicted, then a big one is pinned. */
    ddgpu_stage_buf_t *big = NULL;
    CHECK_OK(ddgpu_staging_acquire(st, 2 * B, &big));
    CHECK_OK(ddgpu_staging_stats(st, &s));
    CHECK_EQ(s.buffers, 1);
    CHECK_EQ(s.pinned_bytes, 2 * B);
    CHECK(s.frees >= 1);
    CHECK_OK(ddgpu_staging_release(st, big));
out:
    ddgpu_staging_destroy(st);
    CHECK_OK(ddgpu_device_free(dst));
    CHECK_OK(ddgpu_stream_destroy(stream));
    free(check);
}

static void test_range_errors(void)
{
    ddgpu_staging_t *st = NULL;
    void *stream = NULL;
    unsigned char *dst = NULL;
    ddgpu_staging_params_t prm = {DDGPU_STAGING_PARAM_MIN_BUF_BYTES, 0, 4096};
    CHECK_OK(ddgpu_staging_create(&prm, &st));
    CHECK_OK(ddgpu_stream_create(0, &stream));
    CHECK_OK(ddgpu_device_alloc(0, 8192, (void **)&dst));
    if (!st || !stream || !dst)
        goto out;
    dds_mem_t on = on_stream(stream);
    CHECK_OK(ddgpu_memset_async(dst, 0x77, 8192, &on));
    ddgpu_stage_buf_t *b = NULL;
    CHECK_OK(ddgpu_staging_acquire(st, 4096, &b));
    memset(ddgpu_stage_buf_host(b), 1, 4096);
    ddgpu_staging_stats_t s0, s1;
    CHECK_OK(ddgpu_staging_stats(st, &s0));
    /* the first segment is fine, the second reads past the buffer: nothing
     * may be enqueued */
    dds_memseg_t segs[2] = {{0, 0, 100}, {4000, 200, 100}};
    CHECK_RC(ddgpu_stage_to_device(b, dst, segs, 2, &on), -DDS_ERANGE);
    CHECK_CONTAINS(dds_last_error(), "segment 1");
    CHECK_CONTAINS(dds_last_error(), "4096-byte");
    dds_memseg_t wr = {0, 4090, 10};
    CHECK_RC(ddgpu_stage_from_device(b, dst, &wr, 1, &on), -DDS_ERANGE);
    CHECK_RC(ddgpu_stage_to_device(b, NULL, segs, 1, &on), -DDS_EINVAL);
    CHECK_RC(ddgpu_stage_to_device(b, dst, NULL, 1, &on), -DDS_EINVAL);
    CHECK_OK(ddgpu_stage_to_device(b, dst, segs, 0, &on));   /* nothing to do */
    CHECK_OK(ddgpu_staging_stats(st, &s1));
    CHECK_EQ(s1.copies, s0.copies);
    unsigned char check[8192];
    CHECK_OK(read_back(check, dst, 8192, stream));
    CHECK_EQ(count_not(check, 8192, 0x77), 0);
    CHECK_OK(ddgpu_staging_release(st, b));
out:
    ddgpu_staging_destroy(st);
    CHECK_OK(ddgpu_device_free(dst));
    CHECK_OK(ddgpu_stream_destroy(stream));
}

/* Ordering across streams with an event, no host wait in between. */
static void test_two_streams(void)
{
    const size_t n = 3000;
    void *s1 = NULL, *s2 = NULL, *ev = NULL;
    unsigned char *d = NULL, *e = NULL;
    ddgpu_staging_t *st = NULL;
    CHECK_OK(ddgpu_stream_create(0, &s1));
    CHECK_OK(ddgpu_stream_create(0, &s2));
    CHECK_OK(ddgpu_event_create(0, &ev));
    CHECK_OK(ddgpu_device_alloc(0, n, (void **)&d));
    CHECK_OK(ddgpu_device_alloc(0, n, (void **)&e));
    CHECK_OK(ddgpu_staging_create(NULL, &st));
    if (!s1 || !s2 || !ev || !d || !e || !st)
        goto out;
    dds_mem_t on1 = on_stream(s1), on2 = on_stream(s2);
    int done = -1;
    CHECK_OK(ddgpu_event_query(ev, &done));   /* never recorded: complete */
    CHECK_EQ(done, 1);
    ddgpu_stage_buf_t *in = NULL, *outb = NULL;
    CHECK_OK(ddgpu_staging_acquire(st, n, &in));
    CHECK_OK(ddgpu_staging_acquire(st, n, &outb));
    unsigned char *hi = ddgpu_stage_buf_host(in);
    for (size_t i = 0; i < n; i++)
        hi[i] = pat(3, i);
    dds_memseg_t seg = {0, 0, n};
    CHECK_OK(ddgpu_memset_async(d, 0, n, &on1));
    CHECK_OK(ddgpu_memset_async(e, 0xEE, n, &on2));
    CHECK_OK(ddgpu_stage_to_device(in, d, &seg, 1, &on1));
    CHECK_OK(ddgpu_event_record(ev, &on1));
    if (emulated) {
        CHECK_OK(ddgpu_event_query(ev, &done));
        CHECK_EQ(done, 0);   /* the emulation never completes without a wait */
    }
    CHECK_OK(ddgpu_stream_wait_event(&on2, ev));
    CHECK_OK(ddgpu_copy_async(DDS_COPY_D2D, e, d, n, &on2));
    CHECK_OK(ddgpu_stage_from_device(outb, e, &seg, 1, &on2));
    CHECK_OK(ddgpu_stage_buf_wait(outb));
    CHECK_EQ(memcmp(ddgpu_stage_buf_host(outb), hi, n), 0);
    CHECK_OK(ddgpu_event_synchronize(ev));
    CHECK_OK(ddgpu_event_query(ev, &done));
    CHECK_EQ(done, 1);
    /* the fence waits for what is queued on the stream */
    CHECK_OK(ddgpu_memset_async(d, 0x42, n, &on1));
    CHECK_OK(ddgpu_stream_fence(&on1));
    if (emulated)
        CHECK_EQ(count_not(d, n, 0x42), 0);
    CHECK_OK(ddgpu_stream_fence(NULL));   /* the default stream */
    CHECK_OK(ddgpu_stream_synchronize(NULL));
    CHECK_OK(ddgpu_staging_release(st, in));
    CHECK_OK(ddgpu_staging_release(st, outb));
out:
    ddgpu_staging_destroy(st);
    CHECK_OK(ddgpu_device_free(d));
    CHECK_OK(ddgpu_device_free(e));
    CHECK_OK(ddgpu_event_destroy(ev));
    CHECK_OK(ddgpu_stream_destroy(s1));
    CHECK_OK(ddgpu_stream_destroy(s2));
}

/* The table the core store calls. */
static void test_memsys(void)
{
    const size_t n = 5000;
    dds_memsys_t ms = {NULL, NULL};
    ddgpu_staging_params_t prm = {DDGPU_STAGING_PARAM_MIN_BUF_BYTES, 0, 4096};
    void *stream = NULL, *stream2 = NULL;
    unsigned char *shard = NULL;
    CHECK_OK(ddgpu_memsys_create(&prm, &ms));
    CHECK_OK(ddgpu_stream_create(0, &stream));
    CHECK_OK(ddgpu_stream_create(0, &stream2));
    CHECK_OK(ddgpu_device_alloc(0, n, (void **)&shard));
    if (!ms.ops || !stream || !stream2 || !shard)
        goto out;
    const dds_memops_t *o = ms.ops;
    void *ctx = ms.ctx;
    CHECK_EQ(o->size, sizeof(dds_memops_t));
    CHECK_STREQ(o->name, ddgpu_backend_name());
    CHECK_EQ(o->kind, ddgpu_backend_kind());
    dds_mem_t on = on_stream(stream), on2 = on_stream(stream2);
    dds_mem_t m;
    CHECK_OK(o->pointer_kind(ctx, shard + 100, &m));
    CHECK_EQ(m.kind, ddgpu_backend_kind());
    CHECK_EQ(m.device, 0);

    /* H2D through a staging buffer */
    void *buf = NULL, *host = NULL;
    CHECK_OK(o->staging_acquire(ctx, n, &buf, &host));
    CHECK_OK(o->pointer_kind(ctx, host, &m));
    CHECK_EQ(m.kind, DDS_MEM_HOST);
    for (size_t i = 0; i < n; i++)
        ((unsigned char *)host)[i] = pat(9, i);
    dds_memseg_t segs[2] = {{0, 0, n / 2}, {n / 2, n / 2, n - n / 2}};
    CHECK_OK(o->copy_async(ctx, DDS_COPY_H2D, shard, host, segs, 2, &on, buf));
    char other[16];
    CHECK_RC(o->copy_async(ctx, DDS_COPY_H2D, shard, other, segs, 1, &on, buf),
         -DDS_EINVAL);
    CHECK_RC(o->copy_async(ctx, DDS_COPY_D2D, shard, host, segs, 1, &on, buf),
         -DDS_EINVAL);
    CHECK_OK(o->staging_release(ctx, buf));

    /* events: record, make another stream wait, query, wait, release */
    void *ev = NULL;
    CHECK_OK(o->event_record(ctx, &on, &ev));
    CHECK_OK(o->stream_wait_event(ctx, &on2, ev));
    CHECK_OK(o->event_wait(ctx, ev));
    int done = 0;
    CHECK_OK(o->event_query(ctx, ev, &done));
    CHECK_EQ(done, 1);
    o->event_release(ctx, ev);

    /* A GPU shard served by a host-only transport: long-lived pinned
     * mirror, D2H on the stream, fence, then the host serves it. */
    void *mirror = NULL;
    CHECK_OK(o->host_alloc(ctx, n, &mirror));
    CHECK_OK(o->pointer_kind(ctx, mirror, &m));
    CHECK_EQ(m.kind, DDS_MEM_HOST);
    dds_memseg_t whole = {0, 0, n};
    CHECK_OK(o->copy_async(ctx, DDS_COPY_D2H, mirror, shard, &whole, 1, &on2,
                       NULL));
    CHECK_OK(o->stream_fence(ctx, &on2));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += ((unsigned char *)mirror)[i] != pat(9, i);
    CHECK_EQ(bad, 0);
    CHECK_OK(o->host_free(ctx, mirror));

    /* D2H into a staging buffer, then staging_wait */
    CHECK_OK(o->staging_acquire(ctx, 100, &buf, &host));
    dds_memseg_t piece = {200, 0, 100};
    CHECK_OK(o->copy_async(ctx, DDS_COPY_D2H, host, shard, &piece, 1, &on, buf));
    CHECK_OK(o->staging_wait(ctx, buf));
    bad = 0;
    for (size_t i = 0; i < 100; i++)
        bad += ((unsigned char *)host)[i] != pat(9, 200 + i);
    CHECK_EQ(bad, 0);
    CHECK_OK(o->staging_release(ctx, buf));
    CHECK_RC(o->staging_acquire(ctx, 100, NULL, &host), -DDS_EINVAL);
out:
    if (ms.ops)
        ms.ops->destroy(ms.ctx);
    CHECK_OK(ddgpu_device_free(shard));
    CHECK_OK(ddgpu_stream_destroy(stream));
    CHECK_OK(ddgpu_stream_destroy(stream2));
}

/* The emulation checks copy directions (a core bug would be caught). */
static void test_emulated_directions(void)
{
    unsigned char *d = NULL, host[64];
    CHECK_OK(ddgpu_device_alloc(0, 64, (void **)&d));
    if (!d)
        return;
    CHECK_RC(ddgpu_copy_async(DDS_COPY_H2D, host, host + 32, 16, NULL),
         -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "destination is not");
    CHECK_RC(ddgpu_copy_async(DDS_COPY_D2H, host, host + 32, 16, NULL),
         -DDS_EINVAL);
    CHECK_RC(ddgpu_copy_async(DDS_COPY_H2D, d + 60, host, 16, NULL), -DDS_EINVAL);
    CHECK_RC(ddgpu_memset_async(host, 0, 16, NULL), -DDS_EINVAL);
    CHECK_OK(ddgpu_copy_async(DDS_COPY_DEFAULT, d, host, 16, NULL));
    CHECK_RC(ddgpu_device_free(host), -DDS_EINVAL);
    CHECK_RC(ddgpu_host_free(d), -DDS_EINVAL);
    CHECK_OK(ddgpu_device_free(d));
}

int main(void)
{
    const char *name = "ddgpu_staging_test";
#ifndef DDSTORE_TEST_HOOKS
    if (strcmp(ddgpu_backend_name(), "none") == 0) {
        CHECK_SKIP(name, "the none build has no host emulation without "
               "DDSTORE_TEST_HOOKS (a release build)");
        return check_finish(name);
    }
#endif
    if (strcmp(ddgpu_backend_name(), "none") == 0) {
        CHECK_OK(ddgpu_test_host_emulation(1));
        emulated = 1;
        printf("none build: running on the host emulation\n");
    } else if (ddgpu_available(NULL) != 0) {
        CHECK_SKIP(name, "no usable GPU for the %s build (%s); the same logic "
               "runs on the none build's emulation", ddgpu_backend_name(),
               dds_last_error());
        return check_finish(name);
    }
    test_pool_basics();
    test_stage_rows();
    test_limit_wait();
    test_range_errors();
    test_two_streams();
    test_memsys();
    if (emulated) {
        test_emulated_directions();
        CHECK_OK(ddgpu_test_host_emulation(0));
    }
    return check_finish(name);
}
