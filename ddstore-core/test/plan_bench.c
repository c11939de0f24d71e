/* Micro-benchmark of the batched-read planner (a program, not a test).
 *
 *   plan_bench [iterations]
 *
 * Prints ns per planned batch for random batches of 128 and 1024 rows of
 * 3136 B (MNIST-sized float32 rows) over 4 owners of 15000 rows each, plus
 * a few other shapes for context.  Batches are drawn in advance (256
 * different ones, cycled) so that the branch predictor cannot learn one.
 * Last, a ragged variable's batched read against memcpy of its payload. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddstore/plan.h"
#include "ddstore/store.h"
#include "fake_world.h"

#define NBATCH 256

static uint64_t rng_state = 88172645463325252ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Thread CPU time: on a shared, oversubscribed machine wall time also
 * counts the time this thread was not running. */
static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

typedef enum { UNIFORM, SORTED, CROWDED, REPEATS } shape_t;

static const char *shape_name(shape_t s)
{
    switch (s) {
    case UNIFORM: return "random";
    case SORTED: return "sorted random";
    case CROWDED: return "random in 4*n rows";
    default: return "random, 25% repeats";
    }
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void bench(const dds_plan_params_t *p, size_t n, shape_t shape,
                  long iters)
{
    int64_t total = p->offsets[p->nranks];
    int64_t *rows = malloc(NBATCH * n * sizeof(int64_t));
    dds_plan_t plan;
    double t0, t1, best = 1e30;
    size_t ops = 0, copies = 0;

    for (size_t b = 0; b < NBATCH; b++) {
        int64_t *r = rows + b * n;
        int64_t base = (int64_t)(rnd() % (uint64_t)(total - 4 * (int64_t)n));
        for (size_t i = 0; i < n; i++) {
            switch (shape) {
            case CROWDED: r[i] = base + (int64_t)(rnd() % (4 * n)); break;
            case REPEATS:
                r[i] = (i > 0 && rnd() % 4 == 0) ? r[rnd() % i]
                                                 : (int64_t)(rnd() % (uint64_t)total);
                break;
            default: r[i] = (int64_t)(rnd() % (uint64_t)total); break;
            }
        }
        if (shape == SORTED)
            qsort(r, n, sizeof(int64_t), cmp64);
    }
    dds_plan_init(&plan);
    for (size_t b = 0; b < NBATCH; b++) /* warm-up: grow the buffers */
        if (dds_plan_batch(p, rows + b * n, n, &plan) != 0) {
            fprintf(stderr, "plan failed\n");
            exit(1);
        }
    for (int rep = 0; rep < 5; rep++) {
        t0 = now_ns();
        for (long it = 0; it < iters; it++) {
            dds_plan_batch(p, rows + (size_t)(it % NBATCH) * n, n, &plan);
            ops += plan.nops;
            copies += plan.ncopies;
        }
        t1 = now_ns();
        if ((t1 - t0) / (double)iters < best)
            best = (t1 - t0) / (double)iters;
    }
    printf("%5zu rows x %zu B, %-22s %8.0f ns/batch  %6.2f ns/row  "
           "(%.1f reads, %.1f copies per batch)\n",
           n, p->row_bytes, shape_name(shape), best, best / (double)n,
           (double)ops / (5.0 * (double)iters),
           (double)copies / (5.0 * (double)iters));
    dds_plan_fini(&plan);
    free(rows);
}

static void bench_range(const dds_plan_params_t *p, int64_t n, long iters)
{
    dds_plan_t plan;
    double t0, t1;
    int64_t total = p->offsets[p->nranks];
    dds_plan_init(&plan);
    dds_plan_range(p, 0, n, &plan);
    t0 = now_ns();
    for (long it = 0; it < iters; it++)
        dds_plan_range(p, (it * 7919) % (total - n), n, &plan);
    t1 = now_ns();
    printf("%5lld rows x %zu B, %-22s %8.0f ns/batch\n", (long long)n,
           p->row_bytes, "range", (t1 - t0) / (double)iters);
    dds_plan_fini(&plan);
}

/* The whole read path of one rank reading its own shard (validation, plan,
 * local memcpy, profile), next to a plain per-row memcpy of the same rows:
 * the difference is the store's overhead per call. */
/* A one-rank store over the fake transport (own rows by memcpy). */
static dds_store_t *bench_store_create(fake_world_t *w)
{
    dds_store_params_t sp;
    dds_store_t *s = NULL;
    fw_init(w, 1);
    memset(&sp, 0, sizeof(sp));
    sp.field_mask = DDS_STORE_PARAM_COMM | DDS_STORE_PARAM_TRANSPORT;
    dds_comm_self(&sp.comm);
    sp.transport = fw_transport(w, 0);
    if (dds_store_create(&sp, &s) != 0) {
        fprintf(stderr, "store setup failed: %s\n", dds_last_error());
        exit(1);
    }
    return s;
}

/* A float32 destination of nrows rows of rb bytes. */
static dds_buf_t f32_buf(void *p, int64_t nrows, size_t rb)
{
    dds_buf_t b;
    memset(&b, 0, sizeof(b));
    b.ptr = p;
    b.nrows = nrows;
    b.row_bytes = rb;
    b.dtype = DDS_DTYPE_FLOAT32;
    b.itemsize = 4;
    return b;
}

static void bench_store(size_t n, long iters)
{
    const size_t rb = 3136, nrows = 60000;
    fake_world_t w;
    dds_store_t *s;
    unsigned char *shard = calloc(nrows, rb), *dst = malloc(n * rb);
    int64_t *rows = malloc(NBATCH * n * sizeof(int64_t));
    dds_buf_t b;
    double t0, t1, best = 1e30, best_ref = 1e30;

    memset(shard, 1, nrows * rb); /* real pages, not the shared zero page */
    s = bench_store_create(&w);
    if (dds_store_var_add(s, "x", shard, (int64_t)nrows, 784, 4,
                          DDS_DTYPE_FLOAT32, NULL, DDS_ADD_COPY) != 0) {
        fprintf(stderr, "store setup failed: %s\n", dds_last_error());
        exit(1);
    }
    for (size_t i = 0; i < NBATCH * n; i++)
        rows[i] = (int64_t)(rnd() % nrows);
    b = f32_buf(dst, (int64_t)n, rb);
    for (int rep = 0; rep < 5; rep++) {
        t0 = now_ns();
        for (long it = 0; it < iters; it++)
            if (dds_store_get_batch(s, NULL, "x", &b,
                                    rows + (size_t)(it % NBATCH) * n, n) != 0)
                exit(1);
        t1 = now_ns();
        if ((t1 - t0) / (double)iters < best)
            best = (t1 - t0) / (double)iters;
        t0 = now_ns();
        for (long it = 0; it < iters; it++) {
            const int64_t *r = rows + (size_t)(it % NBATCH) * n;
            for (size_t i = 0; i < n; i++)
                memcpy(dst + i * rb, shard + (size_t)r[i] * rb, rb);
        }
        t1 = now_ns();
        if ((t1 - t0) / (double)iters < best_ref)
            best_ref = (t1 - t0) / (double)iters;
    }
    printf("store get_batch, %4zu local rows x %zu B: %8.0f ns/call; "
           "per-row memcpy of the same rows %8.0f ns\n",
           n, rb, best, best_ref);
    dds_store_destroy(s);
    fw_fini(&w);
    free(shard);
    free(dst);
    free(rows);
}

/* A ragged variable on one rank (every read is local: index and payload
 * by memcpy): ragged_get_batch of n random samples (5..500 element rows of
 * 64 float32, long-tailed) against one memcpy per sample of the same
 * payload, and ragged_sizes alone.  What the two-step read costs on top of
 * the copies. */
static void bench_ragged_store(size_t n, long iters)
{
    const size_t rb = 256, ns = 1000;
    int64_t *len = malloc(ns * sizeof(int64_t)), *start = malloc(ns * sizeof(int64_t));
    int64_t *rows = malloc(NBATCH * n * sizeof(int64_t)), *lens = malloc(n * sizeof(int64_t));
    int64_t nel = 0, got;
    fake_world_t w;
    dds_store_t *s;
    unsigned char *data, *dst;
    double t0, t1, best = 1e30, best_ref = 1e30, best_sizes = 1e30, bytes = 0;
    dds_buf_t b;

    for (size_t i = 0; i < ns; i++) {
        double u = (double)(rnd() % 1000000) / 1e6;
        len[i] = 5 + (int64_t)(495.0 * u * u * u);
        start[i] = nel;
        nel += len[i];
    }
    data = malloc((size_t)nel * rb);
    dst = malloc(n * 500 * rb);
    memset(data, 1, (size_t)nel * rb);
    s = bench_store_create(&w);
    if (dds_store_ragged_add(s, "g", data, nel, len, (int64_t)ns, 64, 4,
                             DDS_DTYPE_FLOAT32, NULL, DDS_ADD_COPY) != 0) {
        fprintf(stderr, "store setup failed: %s\n", dds_last_error());
        exit(1);
    }
    for (size_t i = 0; i < NBATCH * n; i++)
        rows[i] = (int64_t)(rnd() % ns);
    for (size_t i = 0; i < NBATCH * n; i++)
        bytes += (double)len[rows[i]] * (double)rb;
    bytes /= NBATCH;
    b = f32_buf(dst, (int64_t)(n * 500), rb);
    for (int rep = 0; rep < 5; rep++) {
        t0 = now_ns();
        for (long it = 0; it < iters; it++)
            if (dds_store_ragged_get_batch(s, NULL, "g", &b,
                                           rows + (size_t)(it % NBATCH) * n,
                                           n, lens, &got) != 0)
                exit(1);
        t1 = now_ns();
        if ((t1 - t0) / (double)iters < best)
            best = (t1 - t0) / (double)iters;
        t0 = now_ns();
        for (long it = 0; it < iters; it++) {
            const int64_t *r = rows + (size_t)(it % NBATCH) * n;
            size_t o = 0;
            for (size_t i = 0; i < n; i++) {
                memcpy(dst + o, data + (size_t)start[r[i]] * rb,
                       (size_t)len[r[i]] * rb);
                o += (size_t)len[r[i]] * rb;
            }
        }
        t1 = now_ns();
        if ((t1 - t0) / (double)iters < best_ref)
            best_ref = (t1 - t0) / (double)iters;
        t0 = now_ns();
        for (long it = 0; it < iters; it++)
            if (dds_store_ragged_sizes(s, NULL, "g",
                                       rows + (size_t)(it % NBATCH) * n, n,
                                       lens) != 0)
                exit(1);
        t1 = now_ns();
        if ((t1 - t0) / (double)iters < best_sizes)
            best_sizes = (t1 - t0) / (double)iters;
    }
    printf("store ragged_get_batch, %4zu local samples (%.0f KB): %8.0f "
           "ns/call; per-sample memcpy of the same payload %8.0f ns; "
           "ragged_sizes %6.0f ns\n",
           n, bytes / 1e3, best, best_ref, best_sizes);
    dds_store_destroy(s);
    fw_fini(&w);
    free(len);
    free(start);
    free(rows);
    free(lens);
    free(data);
    free(dst);
}

int main(int argc, char **argv)
{
    static const int64_t off[] = {0, 15000, 30000, 45000, 60000};
    long iters = argc > 1 ? atol(argv[1]) : 200000;
    dds_plan_params_t p;

    memset(&p, 0, sizeof(p));
    p.nranks = 4;
    p.offsets = off;
    p.row_bytes = 3136;
    printf("planner: 4 owners x 15000 rows, row 3136 B, no read limit, "
           "best of 5 x %ld batches (thread CPU time)\n", iters);
    bench(&p, 128, UNIFORM, iters);
    bench(&p, 1024, UNIFORM, iters / 8);
    bench(&p, 128, SORTED, iters);
    bench(&p, 128, CROWDED, iters);
    bench(&p, 128, REPEATS, iters);
    bench(&p, 1024, CROWDED, iters / 8);
    bench(&p, 32, UNIFORM, iters);
    bench_range(&p, 128, iters);
    p.max_read_bytes = 1u << 20;
    printf("with max_read_bytes = 1 MiB:\n");
    bench(&p, 1024, CROWDED, iters / 8);
    bench_store(128, iters / 10);
    bench_store(1024, iters / 80);
    bench_ragged_store(128, iters / 200);
    return 0;
}
