/* store.h: many threads reading at once (run it under -fsanitize=thread).
 *
 * Two fake ranks; on each, 8 threads read the same variables concurrently
 * (batches with repeats, ranges, own readers or the default one, receive
 * registrations, profile snapshots, ragged batches of a ragged variable)
 * and check every value, while the rank's main thread keeps making
 * collective calls (add/free of other variables). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ddstore/store.h"
#include "fake_world.h"

#define NTHREADS 8
#define ITERS 300
#define ROWS_PER_RANK 257
#define DISP 9

static double value(int64_t row, size_t j)
{
    return (double)row * 100.0 + (double)j + 0.5;
}

typedef struct reader_arg {
    dds_store_t *s;
    int rank, tid, nranks;
    long calls;
    _Atomic int *stop;
} reader_arg_t;

/* The ragged variable "r": sample g has g % 4 element rows of DISP
 * doubles; element row e of sample g holds value(g * 10 + e, j). */
static int64_t rlen(int64_t g)
{
    return g % 4;
}

static uint64_t rng(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void *reader_main(void *p)
{
    reader_arg_t *a = p;
    const int64_t total = (int64_t)ROWS_PER_RANK * a->nranks;
    const size_t rb = DISP * sizeof(double);
    uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(a->rank * 64 + a->tid + 1);
    dds_reader_t *rd = NULL;
    double *dst = malloc(128 * rb);
    int64_t rows[128];
    int registered = 0;

    if (a->tid % 2 == 0)
        CHECK_OK(dds_store_reader_open(a->s, DDS_READER_THREAD, &rd));
    if (a->tid % 4 == 1) {
        CHECK_OK(dds_store_recv_register(a->s, dst, 128 * rb, NULL));
        registered = 1;
    }
    for (int it = 0; it < ITERS; it++) {
        size_t n = 1 + (size_t)(rng(&seed) % 128);
        dds_buf_t b;
        int bad = 0;
        memset(&b, 0, sizeof(b));
        b.ptr = dst;
        b.nrows = (int64_t)n;
        b.row_bytes = rb;
        b.dtype = DDS_DTYPE_FLOAT64;
        b.itemsize = 8;
        if (it % 3 == 2) {
            int64_t start = (int64_t)(rng(&seed) % (uint64_t)(total - (int64_t)n + 1));
            CHECK_OK(dds_store_get(a->s, rd, "t", &b, start));
            for (size_t i = 0; i < n && !bad; i++)
                for (size_t j = 0; j < DISP; j++)
                    if (dst[i * DISP + j] != value(start + (int64_t)i, j))
                        bad = 1;
        } else {
            for (size_t i = 0; i < n; i++)
                rows[i] = (int64_t)(rng(&seed) % (uint64_t)total);
            if (n > 3)
                rows[n - 1] = rows[1];
            if (it % 3 == 1) /* crowded: staging + repeats */
                for (size_t i = 0; i < n; i++)
                    rows[i] = ROWS_PER_RANK - 5 + (int64_t)(rng(&seed) % 10);
            CHECK_OK(dds_store_get_batch(a->s, rd, "t", &b, rows, n));
            for (size_t i = 0; i < n && !bad; i++)
                for (size_t j = 0; j < DISP; j++)
                    if (dst[i * DISP + j] != value(rows[i], j))
                        bad = 1;
        }
        if (bad) {
            CHECK_FAIL_("rank %d thread %d iteration %d: wrong values",
                        a->rank, a->tid, it);
            break;
        }
        a->calls++;
        if (it % 4 == 3) { /* a ragged batch into the same buffer */
            int64_t lens[40], got = -1, k = 0;
            b.nrows = 128;
            for (size_t i = 0; i < 40; i++)
                rows[i] = (int64_t)(rng(&seed) % (uint64_t)total);
            CHECK_OK(dds_store_ragged_get_batch(a->s, rd, "r", &b, rows, 40,
                                                lens, &got));
            for (size_t i = 0; i < 40 && !bad; i++) {
                bad |= lens[i] != rlen(rows[i]);
                for (int64_t e = 0; e < rlen(rows[i]); e++, k++)
                    for (size_t j = 0; j < DISP; j++)
                        if (dst[(size_t)k * DISP + j] !=
                            value(rows[i] * 10 + e, j))
                            bad = 1;
            }
            if (bad || got != k) {
                CHECK_FAIL_("rank %d thread %d iteration %d: wrong ragged "
                            "values", a->rank, a->tid, it);
                break;
            }
        }
        if (it % 50 == 0) {
            dds_profile_t prof;
            CHECK_OK(dds_store_profile(a->s, "t", &prof));
        }
    }
    if (registered)
        CHECK_OK(dds_store_recv_unregister(a->s, dst, 128 * rb));
    if (rd != NULL)
        dds_store_reader_close(a->s, rd);
    free(dst);
    return NULL;
}

static void rank_main(fake_world_t *w, int rank, void *arg)
{
    const size_t rb = DISP * sizeof(double);
    dds_store_t *s = NULL;
    double *shard = malloc(ROWS_PER_RANK * rb);
    pthread_t th[NTHREADS];
    reader_arg_t ra[NTHREADS];
    dds_profile_t prof;
    long calls = 0;
    _Atomic int stop = 0;
    (void)arg;

    for (int64_t i = 0; i < ROWS_PER_RANK; i++)
        for (size_t j = 0; j < DISP; j++)
            shard[i * DISP + j] =
                value((int64_t)rank * ROWS_PER_RANK + i, j);
    CHECK_OK(fw_store_create(w, rank, &s));
    if (s == NULL)
        return;
    CHECK_OK(dds_store_var_add(s, "t", shard, ROWS_PER_RANK, DISP, 8,
                               DDS_DTYPE_FLOAT64, NULL, DDS_ADD_COPY));
    free(shard);
    {
        const int64_t first = (int64_t)rank * ROWS_PER_RANK;
        int64_t lens[ROWS_PER_RANK], nel = 0, k = 0;
        double *pay;
        for (int64_t i = 0; i < ROWS_PER_RANK; i++)
            nel += lens[i] = rlen(first + i);
        pay = malloc((size_t)nel * rb);
        for (int64_t i = 0; i < ROWS_PER_RANK; i++)
            for (int64_t e = 0; e < lens[i]; e++, k++)
                for (size_t j = 0; j < DISP; j++)
                    pay[(size_t)k * DISP + j] = value((first + i) * 10 + e, j);
        CHECK_OK(dds_store_ragged_add(s, "r", pay, nel, lens, ROWS_PER_RANK,
                                      DISP, 8, DDS_DTYPE_FLOAT64, NULL,
                                      DDS_ADD_COPY));
        free(pay);
    }
    for (int t = 0; t < NTHREADS; t++) {
        ra[t].s = s;
        ra[t].rank = rank;
        ra[t].tid = t;
        ra[t].nranks = w->n;
        ra[t].calls = 0;
        ra[t].stop = &stop;
        pthread_create(&th[t], NULL, reader_main, &ra[t]);
    }
    /* collective calls on other variables while the readers run */
    for (int k = 0; k < 20; k++) {
        int64_t one = k;
        CHECK_OK(dds_store_var_add(s, "side", &one, 1, 1, 8, DDS_DTYPE_INT64,
                                   NULL, DDS_ADD_COPY));
        CHECK_OK(dds_store_var_free(s, "side"));
    }
    for (int t = 0; t < NTHREADS; t++) {
        pthread_join(th[t], NULL);
        calls += ra[t].calls;
    }
    CHECK_OK(dds_store_profile(s, "t", &prof));
    CHECK_EQ_U(prof.v[DDS_PROF_CALLS], (uint64_t)calls);
    CHECK_OK(dds_store_free(s));
    dds_store_destroy(s);
}

static void run(uint64_t caps)
{
    fake_world_t w;
    fw_init(&w, 2);
    w.caps = caps;
    fw_run(&w, rank_main, NULL);
    CHECK_EQ(atomic_load(&w.bad_ops), 0);
    CHECK_EQ(atomic_load(&w.protocol_errors), 0);
    CHECK_EQ(atomic_load(&w.live_regions), 0);
    CHECK_EQ(atomic_load(&w.live_regs), 0);
    CHECK_EQ(atomic_load(&w.live_readers), 0);
    CHECK_EQ(atomic_load(&w.unsafe_concurrent), 0);
    CHECK(atomic_load(&w.read_calls) > 0);
    fw_fini(&w);
}

static void test_thread_safe_transport(void)
{
    run(DDS_TRANSPORT_CAP_THREAD_SAFE | DDS_TRANSPORT_CAP_LOCAL_SELF |
        DDS_TRANSPORT_CAP_READERS);
}

static void test_serialised_transport(void)
{
    /* not thread-safe: the store must never overlap read() calls */
    run(DDS_TRANSPORT_CAP_READERS);
}

int main(void)
{
    RUN_TEST(test_thread_safe_transport);
    RUN_TEST(test_serialised_transport);
    return CHECK_SUMMARY();
}
