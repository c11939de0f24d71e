/* store.h: the store through the fake in-process transport.
 *
 * Every scenario runs on N fake ranks (threads) that each own a store over
 * the fake communicator and transport, exactly as N MPI processes would. */
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
#include "ddstore/log.h"
#include "ddstore/store.h"
#include "fake_world.h"
#include "store_world.h"

/* ---- helpers ---------------------------------------------------------- */

static void make_row(dds_dtype_t dt, size_t itemsize, size_t disp, int64_t g,
                     int salt, unsigned char *out)
{
    for (size_t j = 0; j < disp; j++) {
        unsigned char *e = out + j * itemsize;
        long long base = (long long)g * 1000 + (long long)j + salt * 7;
        switch (dt) {
        case DDS_DTYPE_BOOL: *e = (unsigned char)(base & 1); break;
        case DDS_DTYPE_UINT8: *e = (unsigned char)(base * 7); break;
        case DDS_DTYPE_INT32: {
            int32_t v = (int32_t)(base * 3 - 5);
            memcpy(e, &v, 4);
            break;
        }
        case DDS_DTYPE_INT64: {
            int64_t v = base * 1000003LL + ((int64_t)1 << 40);
            memcpy(e, &v, 8);
            break;
        }
        case DDS_DTYPE_FLOAT32: {
            float v = (float)base + 0.25f;
            memcpy(e, &v, 4);
            break;
        }
        case DDS_DTYPE_FLOAT64: {
            double v = (double)base * 1.5 + 1e-3;
            memcpy(e, &v, 8);
            break;
        }
        default:
            for (size_t b = 0; b < itemsize; b++)
                e[b] = (unsigned char)(base * 31 + (long long)b * 17 + salt);
            break;
        }
    }
}

/* A shard of `nrows` rows starting at global row `first`. */
static unsigned char *make_shard(dds_dtype_t dt, size_t itemsize, size_t disp,
                                 int64_t first, int64_t nrows, int salt)
{
    size_t rb = itemsize * disp;
    unsigned char *p = malloc((size_t)nrows * rb + 1);
    for (int64_t i = 0; i < nrows; i++)
        make_row(dt, itemsize, disp, first + i, salt, p + (size_t)i * rb);
    return p;
}

/* Check dst row i == row rows[i] (or start + i when rows is NULL). */
static int check_rows(dds_dtype_t dt, size_t itemsize, size_t disp,
                      const unsigned char *dst, const int64_t *rows,
                      int64_t start, size_t n, int salt)
{
    size_t rb = itemsize * disp;
    unsigned char *want = malloc(rb);
    int bad = 0;
    for (size_t i = 0; i < n && !bad; i++) {
        int64_t g = rows != NULL ? rows[i] : start + (int64_t)i;
        make_row(dt, itemsize, disp, g, salt, want);
        if (memcmp(want, dst + i * rb, rb) != 0) {
            CHECK_FAIL_("%s: dst row %zu (global row %lld) differs",
                        dds_dtype_name(dt), i, (long long)g);
            bad = 1;
        }
    }
    free(want);
    return bad;
}

static int64_t first_row(const int64_t *rows_of, int rank)
{
    int64_t f = 0;
    for (int r = 0; r < rank; r++)
        f += rows_of[r];
    return f;
}

static int64_t total_rows(const int64_t *rows_of, int n)
{
    return first_row(rows_of, n);
}

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* ---- every dtype, add/get/get_batch ----------------------------------- */

static void every_dtype_rank(fake_world_t *w, int rank, void *arg)
{
    static const int64_t rows_of[] = {5, 0, 7, 3};
    dds_store_t *s = NULL;
    int64_t total = total_rows(rows_of, w->n);
    uint64_t seed = 99 + (uint64_t)rank;
    (void)arg;

    CHECK_OK(fw_store_create(w, rank, &s));
    if (s == NULL)
        return;
    CHECK_EQ(dds_store_rank(s), rank);
    CHECK_EQ(dds_store_size(s), w->n);
    for (int dti = 0; dti < DDS_DTYPE_COUNT; dti++) {
        dds_dtype_t dt = (dds_dtype_t)dti;
        size_t isz = dt == DDS_DTYPE_RAW ? 12 : dds_dtype_size(dt);
        size_t disp = 3 + (size_t)dti;
        size_t rb = isz * disp;
        char name[32];
        unsigned char *shard, *dst;
        int64_t off[FW_MAX_RANKS + 1], rows[64];
        dds_var_info_t info;
        dds_buf_t b;

        snprintf(name, sizeof(name), "var_%s", dds_dtype_name(dt));
        shard = make_shard(dt, isz, disp, first_row(rows_of, rank),
                           rows_of[rank], 0);
        CHECK_OK(dds_store_var_add(s, name, shard, rows_of[rank], disp, isz,
                                   dt, NULL, DDS_ADD_COPY));
        /* a copy: the caller may reuse its buffer at once */
        memset(shard, 0x5A, (size_t)rows_of[rank] * rb);
        free(shard);

        CHECK_OK(dds_store_var_info(s, name, &info));
        CHECK_EQ(info.total_rows, total);
        CHECK_EQ(info.local_rows, rows_of[rank]);
        CHECK_EQ(info.local_first, first_row(rows_of, rank));
        CHECK_EQ(info.disp, disp);
        CHECK_EQ(info.itemsize, isz);
        CHECK_EQ(info.row_bytes, rb);
        CHECK_EQ(info.dtype, dt);
        CHECK_EQ(info.nranks, w->n);
        CHECK_OK(dds_store_var_offsets(s, name, off));
        for (int r = 0; r <= w->n; r++)
            CHECK_EQ(off[r], first_row(rows_of, r));

        /* everything in one get */
        dst = malloc((size_t)total * rb);
        b = buf_of(dst, total, rb, dt, isz);
        CHECK_OK(dds_store_get(s, NULL, name, &b, 0));
        check_rows(dt, isz, disp, dst, NULL, 0, (size_t)total, 0);
        /* shuffled batch with repeats */
        for (int i = 0; i < 64; i++)
            rows[i] = (int64_t)(rng(&seed) % (uint64_t)total);
        rows[10] = rows[3];
        rows[11] = rows[3];
        b.nrows = 64 < total ? 64 : total;
        free(dst);
        dst = malloc(64 * rb);
        b.ptr = dst;
        b.nrows = 64;
        CHECK_OK(dds_store_get_batch(s, NULL, name, &b, rows, 64));
        check_rows(dt, isz, disp, dst, rows, 0, 64, 0);
        /* a RAW view of a typed variable with the same itemsize works */
        b.dtype = DDS_DTYPE_RAW;
        CHECK_OK(dds_store_get_batch(s, NULL, name, &b, rows, 64));
        check_rows(dt, isz, disp, dst, rows, 0, 64, 0);
        free(dst);
    }
    dds_store_destroy(s); /* collective: frees the live variables */
}

static void test_every_dtype(void)
{
    run_world(4, every_dtype_rank, NULL, 0, 0);
}

/* ---- init, update, get across owners ----------------------------------- */

static void init_update_rank(fake_world_t *w, int rank, void *arg)
{
    static const int64_t rows_of[] = {4, 6, 0, 5};
    const dds_dtype_t dt = DDS_DTYPE_FLOAT32;
    const size_t disp = 7, isz = 4, rb = 28;
    int64_t total = total_rows(rows_of, w->n), first = first_row(rows_of, rank);
    dds_store_t *s = NULL;
    unsigned char *dst, *src;
    dds_buf_t b;
    (void)arg;

    CHECK_OK(fw_store_create(w, rank, &s));
    if (s == NULL)
        return;
    CHECK_OK(dds_store_var_init(s, "x", rows_of[rank], disp, isz, dt));
    dst = malloc((size_t)total * rb);
    memset(dst, 0xFF, (size_t)total * rb);
    b = buf_of(dst, total, rb, dt, isz);
    CHECK_OK(dds_store_get(s, NULL, "x", &b, 0));
    for (size_t i = 0; i < (size_t)total * rb; i++)
        if (dst[i] != 0) {
            CHECK_FAIL_("init: byte %zu is not zero", i);
            break;
        }
    barrier(s); /* everyone read zeros before anyone updates */

    /* update: two pieces, second one overlapping the first */
    src = make_shard(dt, isz, disp, first, rows_of[rank], 1);
    if (rows_of[rank] > 0) {
        dds_buf_t u = buf_of(src, 1, rb, dt, isz);
        CHECK_OK(dds_store_var_update(s, "x", &u, 0));
        u = buf_of(src, rows_of[rank], rb, dt, isz);
        CHECK_OK(dds_store_var_update(s, "x", &u, 0));
        u = buf_of(src + rb, rows_of[rank] - 1, rb, dt, isz);
        CHECK_OK(dds_store_var_update(s, "x", &u, 1));
    }
    {   /* bounds, width, dtype */
        dds_buf_t u = buf_of(src, 1, rb, dt, isz);
        CHECK_RC(dds_store_var_update(s, "x", &u, rows_of[rank]), -DDS_ERANGE);
        CHECK_CONTAINS(dds_last_error(), "outside this rank's shard");
        CHECK_RC(dds_store_var_update(s, "x", &u, -1), -DDS_ERANGE);
        u.nrows = rows_of[rank] + 1;
        CHECK_RC(dds_store_var_update(s, "x", &u, 0), -DDS_ERANGE);
        u = buf_of(src, 1, rb - 4, dt, isz);
        CHECK_RC(dds_store_var_update(s, "x", &u, 0), -DDS_EINVAL);
        CHECK_CONTAINS(dds_last_error(), "expected 28 bytes per row (disp 7 x "
                                         "itemsize 4), got 24");
        u = buf_of(src, 1, rb, DDS_DTYPE_INT32, 4);
        CHECK_RC(dds_store_var_update(s, "x", &u, 0), -DDS_ETYPE);
        CHECK_RC(dds_store_var_update(s, "nope", &u, 0), -DDS_ENOENT);
        u = buf_of(src, 0, rb, dt, isz);
        CHECK_OK(dds_store_var_update(s, "x", &u, rows_of[rank]));
    }
    free(src);
    barrier(s);

    /* every range: crossing owner boundaries, the empty shard included */
    for (int64_t start = 0; start <= total; start++) {
        for (int64_t len = 0; start + len <= total; len++) {
            b = buf_of(dst, len, rb, dt, isz);
            CHECK_OK(dds_store_get(s, NULL, "x", &b, start));
            if (check_rows(dt, isz, disp, dst, NULL, start, (size_t)len, 1))
                goto done;
        }
    }
    b = buf_of(dst, 2, rb, dt, isz);
    CHECK_RC(dds_store_get(s, NULL, "x", &b, total - 1), -DDS_ERANGE);
    CHECK_CONTAINS(dds_last_error(), "variable 'x'");
    CHECK_RC(dds_store_get(s, NULL, "x", &b, -1), -DDS_ERANGE);
done:
    free(dst);
    CHECK_OK(dds_store_free(s));
    dds_store_destroy(s);
}

static void test_init_update_get(void)
{
    run_world(4, init_update_rank, NULL, 0, 0);
}

/* ---- shuffled batches, profile counters --------------------------------- */

typedef struct batch_arg {
    int check_local; /* expect local bytes served by memcpy */
} batch_arg_t;

static void batches_rank(fake_world_t *w, int rank, void *arg)
{
    static const int64_t rows_of[] = {40, 33, 1, 60};
    batch_arg_t *ba = arg;
    const size_t disp = 784, isz = 4, rb = 3136; /* MNIST-sized rows */
    const dds_dtype_t dt = DDS_DTYPE_FLOAT32;
    int64_t total = total_rows(rows_of, w->n);
    uint64_t seed = 1234567 + (uint64_t)rank * 77;
    dds_store_t *s = NULL;
    unsigned char *shard, *dst;
    int64_t rows[128];
    dds_profile_t prof;
    uint64_t calls = 0, nrows = 0;

    CHECK_OK(fw_store_create(w, rank, &s));
    if (s == NULL)
        return;
    shard = make_shard(dt, isz, disp, first_row(rows_of, rank), rows_of[rank],
                       3);
    CHECK_OK(dds_store_var_add(s, "img", shard, rows_of[rank], disp, isz, dt,
                               NULL, DDS_ADD_COPY));
    free(shard);
    dst = malloc(128 * rb);
    for (int iter = 0; iter < 60; iter++) {
        size_t n = 1 + (size_t)(rng(&seed) % 128);
        dds_buf_t b = buf_of(dst, (int64_t)n, rb, dt, isz);
        for (size_t i = 0; i < n; i++)
            rows[i] = (int64_t)(rng(&seed) % (uint64_t)total);
        if (iter % 3 == 0)
            for (size_t i = 0; i < n; i++)
                rows[i] = (int64_t)((rng(&seed) % 12) + 30); /* crowded */
        if (iter % 5 == 0 && n > 4) {
            rows[n - 1] = rows[0];
            rows[n - 2] = rows[0];
        }
        CHECK_OK(dds_store_get_batch(s, NULL, "img", &b, rows, n));
        if (check_rows(dt, isz, disp, dst, rows, 0, n, 3))
            break;
        calls++;
        nrows += n;
    }
    CHECK_OK(dds_store_profile(s, "img", &prof));
    CHECK_EQ_U(prof.v[DDS_PROF_CALLS], calls);
    CHECK_EQ_U(prof.v[DDS_PROF_ROWS], nrows);
    CHECK_EQ_U(prof.v[DDS_PROF_BYTES], nrows * rb);
    CHECK(prof.v[DDS_PROF_READS] > 0);
    CHECK(prof.v[DDS_PROF_STAGED_BYTES] > 0); /* crowded batches stage */
    CHECK(prof.v[DDS_PROF_NS_TOTAL] > 0);
    CHECK(prof.v[DDS_PROF_NS_TOTAL] >= prof.v[DDS_PROF_NS_OTHER]);
    if (ba->check_local)
        CHECK(prof.v[DDS_PROF_LOCAL_BYTES] > 0 || rows_of[rank] < 2);
    else
        CHECK_EQ_U(prof.v[DDS_PROF_LOCAL_BYTES], 0);
    CHECK_OK(dds_store_profile_reset(s, "img"));
    CHECK_OK(dds_store_profile(s, "img", &prof));
    for (int c = 0; c < DDS_PROF_COUNT; c++)
        CHECK_EQ_U(prof.v[c], 0);
    CHECK_STREQ(dds_prof_counter_name(DDS_PROF_NS_LOCK_WAIT), "lock_wait_ns");
    free(dst);
    dds_store_destroy(s);
}

static void test_shuffled_batches_with_repeats(void)
{
    batch_arg_t a = {1};
    fake_world_t w;
    run_world(4, batches_rank, &a, 0, 0);
    /* without LOCAL_SELF, own rows go through the transport; a transport
     * that is not thread-safe gets serialised calls */
    a.check_local = 0;
    fw_init(&w, 3);
    w.caps = DDS_TRANSPORT_CAP_READERS;
    fw_run(&w, batches_rank, &a);
    CHECK(atomic_load(&w.local_ops) > 0);
    CHECK_EQ(atomic_load(&w.bad_ops), 0);
    CHECK_EQ(atomic_load(&w.live_regions), 0);
    fw_fini(&w);
    /* transport read limit: every op <= 1000 bytes (the fake checks) */
    a.check_local = 1;
    run_world(2, batches_rank, &a, 0, 1000);
}

/* ---- errors: validated before any byte moves, store stays usable -------- */

static void read_errors_rank(fake_world_t *w, int rank, void *arg)
{
    const size_t disp = 5, isz = 8, rb = 40;
    const dds_dtype_t dt = DDS_DTYPE_INT64;
    const int64_t nloc = 10, total = 10 * (int64_t)w->n;
    dds_store_t *s = NULL;
    unsigned char *shard, dst[8 * 40], keep[8 * 40];
    int64_t rows[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    dds_buf_t b;
    char want[128];
    (void)arg;

    CHECK_OK(fw_store_create(w, rank, &s));
    if (s == NULL)
        return;
    shard = make_shard(dt, isz, disp, nloc * rank, nloc, 0);
    CHECK_OK(dds_store_var_add(s, "v", shard, nloc, disp, isz, dt, NULL,
                               DDS_ADD_COPY));
    free(shard);
    memset(dst, 0xAB, sizeof(dst));
    memcpy(keep, dst, sizeof(dst));
    b = buf_of(dst, 8, rb, dt, isz);

    rows[7] = total; /* last index bad: nothing may be written */
    CHECK_RC(dds_store_get_batch(s, NULL, "v", &b, rows, 8), -DDS_ERANGE);
    snprintf(want, sizeof(want), "index %lld at position 7", (long long)total);
    CHECK_CONTAINS(dds_last_error(), want);
    CHECK_CONTAINS(dds_last_error(), "'v'");
    CHECK_MEMEQ(dst, keep, sizeof(dst));
    rows[7] = -3;
    CHECK_RC(dds_store_get_batch(s, NULL, "v", &b, rows, 8), -DDS_ERANGE);
    CHECK_CONTAINS(dds_last_error(), "index -3 at position 7");
    CHECK_MEMEQ(dst, keep, sizeof(dst));
    rows[7] = 8;

    CHECK_RC(dds_store_get_batch(s, NULL, "nope", &b, rows, 8), -DDS_ENOENT);
    CHECK_CONTAINS(dds_last_error(), "'nope'");
    b.row_bytes = 32;
    CHECK_RC(dds_store_get_batch(s, NULL, "v", &b, rows, 8), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(),
                   "expected 40 bytes per row (disp 5 x itemsize 8), got 32");
    b.row_bytes = rb;
    b.dtype = DDS_DTYPE_FLOAT64;
    CHECK_RC(dds_store_get_batch(s, NULL, "v", &b, rows, 8), -DDS_ETYPE);
    CHECK_CONTAINS(dds_last_error(), "int64");
    CHECK_CONTAINS(dds_last_error(), "float64");
    b.dtype = DDS_DTYPE_RAW;
    b.itemsize = 4; /* raw view, wrong itemsize */
    CHECK_RC(dds_store_get_batch(s, NULL, "v", &b, rows, 8), -DDS_ETYPE);
    CHECK_CONTAINS(dds_last_error(), "itemsize");
    b.dtype = (dds_dtype_t)77;
    CHECK_RC(dds_store_get_batch(s, NULL, "v", &b, rows, 8), -DDS_ETYPE);
    b = buf_of(dst, 8, rb, dt, isz);
    CHECK_RC(dds_store_get_batch(s, NULL, "v", &b, rows, 7), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "7 indices for a buffer of 8 rows");
    b.ptr = NULL;
    CHECK_RC(dds_store_get_batch(s, NULL, "v", &b, rows, 8), -DDS_EINVAL);
    b.ptr = dst;
    CHECK_RC(dds_store_get_batch(s, NULL, "v", &b, NULL, 8), -DDS_EINVAL);
    CHECK_RC(dds_store_get_batch(s, NULL, NULL, &b, rows, 8), -DDS_EINVAL);
    CHECK_RC(dds_store_get_batch(s, NULL, "", &b, rows, 8), -DDS_EINVAL);
    CHECK_RC(dds_store_get_batch(s, NULL, "v", NULL, rows, 8), -DDS_EINVAL);
    CHECK_RC(dds_store_get_batch(NULL, NULL, "v", &b, rows, 8), -DDS_EINVAL);
    b.nrows = -1;
    CHECK_RC(dds_store_get(s, NULL, "v", &b, 0), -DDS_EINVAL);
    b.nrows = 8;
    CHECK_RC(dds_store_get(s, NULL, "v", &b, total - 7), -DDS_ERANGE);
    CHECK_MEMEQ(dst, keep, sizeof(dst));
    {   /* a GPU destination needs a transport that can write GPU memory,
         * or a GPU runtime (memsys) for staging; this store has neither */
        dds_buf_t g = b;
        g.mem.kind = DDS_MEM_CUDA;
        CHECK_RC(dds_store_get_batch(s, NULL, "v", &g, rows, 8), -DDS_ENOGPU);
        CHECK_CONTAINS(dds_last_error(), "CUDA");
        CHECK_CONTAINS(dds_last_error(), "FI_HMEM");
        CHECK_CONTAINS(dds_last_error(), "no GPU");
        g.mem.kind = (dds_mem_kind_t)9;
        CHECK_RC(dds_store_get_batch(s, NULL, "v", &g, rows, 8), -DDS_EINVAL);
    }
    /* a transport failure is reported, and the next read works */
    if (rank == 0)
        atomic_store(&w->fail_reads, 1);
    barrier(s);
    if (rank == 0) {
        rows[0] = total - 1; /* remote for rank 0 */
        CHECK_RC(dds_store_get_batch(s, NULL, "v", &b, rows, 8), -DDS_EIO);
        CHECK_CONTAINS(dds_last_error(), "injected read failure");
        CHECK_CONTAINS(dds_last_error(), "'v'");
    }
    barrier(s);
    /* and after all that the store works */
    CHECK_OK(dds_store_get_batch(s, NULL, "v", &b, rows, 8));
    check_rows(dt, isz, disp, dst, rows, 0, 8, 0);
    b.nrows = 0;
    CHECK_OK(dds_store_get_batch(s, NULL, "v", &b, NULL, 0));
    CHECK_OK(dds_store_get(s, NULL, "v", &b, total));
    dds_store_destroy(s);
}

static void test_read_errors(void)
{
    run_world(3, read_errors_rank, NULL, 0, 0);
}

/* ---- collective errors: every rank fails together ----------------------- */

static void coll_errors_rank(fake_world_t *w, int rank, void *arg)
{
    dds_store_t *s = NULL;
    char longname[300], want[160];
    int64_t data[64];
    (void)arg;

    memset(data, 0, sizeof(data));
    memset(longname, 'n', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    CHECK_OK(fw_store_create(w, rank, &s));
    if (s == NULL)
        return;

    /* the same bad input everywhere */
    CHECK_RC(dds_store_var_init(s, longname, 1, 1, 1, DDS_DTYPE_RAW),
             -DDS_EINVAL);
    CHECK_RC(dds_store_var_init(s, "", 1, 1, 1, DDS_DTYPE_RAW), -DDS_EINVAL);
    CHECK_RC(dds_store_var_init(s, NULL, 1, 1, 1, DDS_DTYPE_RAW), -DDS_EINVAL);
    CHECK_RC(dds_store_var_init(s, "a", -1, 1, 1, DDS_DTYPE_RAW), -DDS_EINVAL);
    CHECK_RC(dds_store_var_init(s, "a", 1, 0, 1, DDS_DTYPE_RAW), -DDS_EINVAL);
    CHECK_RC(dds_store_var_init(s, "a", 1, 1, 0, DDS_DTYPE_RAW), -DDS_EINVAL);
    CHECK_RC(dds_store_var_init(s, "a", 1, 2, 4, DDS_DTYPE_FLOAT64),
             -DDS_ETYPE);
    CHECK_CONTAINS(dds_last_error(), "float64");
    CHECK_RC(dds_store_var_init(s, "a", 1, 1, 4, (dds_dtype_t)42), -DDS_ETYPE);
    CHECK_RC(dds_store_var_add(s, "a", NULL, 2, 1, 8, DDS_DTYPE_INT64, NULL,
                               DDS_ADD_COPY),
             -DDS_EINVAL);
    CHECK_RC(dds_store_var_add(s, "a", data, 2, 1, 8, DDS_DTYPE_INT64, NULL,
                               7),
             -DDS_EINVAL);
    CHECK_RC(dds_store_var_init(s, "a", INT64_MAX / 2, 4, 8,
                                DDS_DTYPE_FLOAT64),
             -DDS_EINVAL);

    /* bad input on one rank only: everyone fails with that rank's detail */
    CHECK_RC(dds_store_var_init(s, "b", 3, rank == 1 ? 0 : 2, 4,
                                DDS_DTYPE_INT32),
             -DDS_EINVAL);
    if (rank != 1)
        CHECK_CONTAINS(dds_last_error(), "rank 1: variable 'b': disp must be");
    else
        CHECK_CONTAINS(dds_last_error(), "variable 'b': disp must be");

    /* valid locally, inconsistent across ranks */
    CHECK_RC(dds_store_var_init(s, "c", 3, rank == 2 ? 5 : 4, 4,
                                DDS_DTYPE_FLOAT32),
             -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "rank 2 gave disp 5 x itemsize 4 "
                                     "(float32), expected disp 4 x itemsize "
                                     "4 (float32)");
    CHECK_RC(dds_store_var_init(s, "c", 3, 4, 4,
                                rank == 1 ? DDS_DTYPE_INT32
                                          : DDS_DTYPE_FLOAT32),
             -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "rank 1 gave");
    CHECK_RC(dds_store_var_init(s, rank == 0 ? "d" : "e", 3, 4, 4,
                                DDS_DTYPE_FLOAT32),
             -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "different variable name");

    /* nothing half-created anywhere */
    {
        dds_var_info_t info;
        CHECK_RC(dds_store_var_info(s, "b", &info), -DDS_ENOENT);
        CHECK_RC(dds_store_var_info(s, "c", &info), -DDS_ENOENT);
        CHECK_RC(dds_store_var_info(s, "d", &info), -DDS_ENOENT);
    }

    /* EEXIST, then the store still works */
    CHECK_OK(dds_store_var_add(s, "ok", data, 8, 1, 8, DDS_DTYPE_INT64, NULL,
                               DDS_ADD_COPY));
    CHECK_RC(dds_store_var_init(s, "ok", 8, 1, 8, DDS_DTYPE_INT64),
             -DDS_EEXIST);
    CHECK_CONTAINS(dds_last_error(), "'ok' already exists");
    /* EEXIST on one rank only */
    CHECK_RC(dds_store_var_init(s, rank == 0 ? "ok" : "fresh", 8, 1, 8,
                                DDS_DTYPE_INT64),
             -DDS_EEXIST);
    if (rank != 0)
        CHECK_CONTAINS(dds_last_error(), "rank 0: variable 'ok' already");

    /* the transport's region_create fails on the last rank only */
    w->fail_region_rank = w->n - 1;
    w->fail_region_at = 1;
    barrier(s);
    CHECK_RC(dds_store_var_init(s, "r", 4, 2, 8, DDS_DTYPE_FLOAT64),
             -DDS_EIO);
    snprintf(want, sizeof(want), "injected region_create failure for 'r' on "
                                 "rank %d", w->n - 1);
    CHECK_CONTAINS(dds_last_error(), want);
    barrier(s);
    if (rank == 0)
        CHECK_EQ(atomic_load(&w->live_regions), w->n); /* only "ok" */
    barrier(s);
    CHECK_OK(dds_store_var_init(s, "r", 4, 2, 8, DDS_DTYPE_FLOAT64));

    /* an exchange failing on every rank */
    if (rank == 0)
        w->fail_exchange_at = w->exch_seq[0] + 2;
    barrier(s);
    CHECK(dds_store_var_init(s, "x", 4, 2, 8, DDS_DTYPE_FLOAT64) != 0);
    CHECK_RC(dds_store_var_info(s, "x", &(dds_var_info_t){0}), -DDS_ENOENT);
    CHECK_OK(dds_store_var_init(s, "x", 4, 2, 8, DDS_DTYPE_FLOAT64));
    {
        int64_t out[8];
        dds_buf_t b = buf_of(out, 8, 8, DDS_DTYPE_INT64, 8);
        CHECK_OK(dds_store_get(s, NULL, "ok", &b, 0));
    }
    dds_store_destroy(s);
}

static void test_collective_errors(void)
{
    run_world(3, coll_errors_rank, NULL, 0, 0);
}

/* ---- free, use after free, double free, re-add -------------------------- */

static void names_cb(void *arg, const char *name)
{
    char *acc = arg;
    strcat(acc, name);
    strcat(acc, ",");
}

static void free_rank(fake_world_t *w, int rank, void *arg)
{
    dds_store_t *s = NULL;
    int32_t a[6] = {1, 2, 3, 4, 5, 6}, out[6];
    dds_buf_t b = buf_of(out, 2, 12, DDS_DTYPE_INT32, 4);
    dds_profile_t prof;
    char names[64] = "";
    (void)arg;

    CHECK_OK(fw_store_create(w, rank, &s));
    if (s == NULL)
        return;
    CHECK_OK(dds_store_var_add(s, "a", a, 2, 3, 4, DDS_DTYPE_INT32, NULL,
                               DDS_ADD_COPY));
    CHECK_OK(dds_store_var_add(s, "b", a, 1, 3, 4, DDS_DTYPE_INT32, NULL,
                               DDS_ADD_COPY));
    CHECK_OK(dds_store_var_init(s, "c", 1, 3, 4, DDS_DTYPE_INT32));
    CHECK_OK(dds_store_var_foreach(s, names_cb, names));
    CHECK_STREQ(names, "a,b,c,");
    CHECK_OK(dds_store_get(s, NULL, "a", &b, 0));

    /* var_free of one */
    CHECK_OK(dds_store_var_free(s, "b"));
    CHECK_RC(dds_store_get(s, NULL, "b", &b, 0), -DDS_EFREED);
    CHECK_CONTAINS(dds_last_error(), "'b' was released by var_free()");
    CHECK_RC(dds_store_var_free(s, "b"), -DDS_EFREED);
    CHECK_RC(dds_store_var_free(s, "zz"), -DDS_ENOENT);
    CHECK_RC(dds_store_var_free(s, rank == 1 ? "zz" : "a"), -DDS_ENOENT);
    if (rank != 1)
        CHECK_CONTAINS(dds_last_error(), "rank 1: no variable named 'zz'");
    CHECK_OK(dds_store_get(s, NULL, "a", &b, 0)); /* untouched */

    /* free everything */
    CHECK_OK(dds_store_free(s));
    CHECK_EQ(atomic_load(&w->live_regions) >= 0, 1);
    CHECK_RC(dds_store_get(s, NULL, "a", &b, 0), -DDS_EFREED);
    CHECK_CONTAINS(dds_last_error(),
                   "variable 'a' was released by free(); add it again");
    CHECK_RC(dds_store_get_batch(s, NULL, "c", &b, (int64_t[]){0, 1}, 2),
             -DDS_EFREED);
    CHECK_RC(dds_store_get(s, NULL, "b", &b, 0), -DDS_EFREED);
    CHECK_RC(dds_store_get(s, NULL, "never", &b, 0), -DDS_EFREED);
    CHECK_CONTAINS(dds_last_error(), "'never' is not live");
    CHECK_RC(dds_store_profile(s, "a", &prof), -DDS_EFREED);
    CHECK_RC(dds_store_var_update(s, "a", &b, 0), -DDS_EFREED);
    names[0] = '\0';
    CHECK_OK(dds_store_var_foreach(s, names_cb, names));
    CHECK_STREQ(names, "");
    CHECK_OK(dds_store_free(s)); /* idempotent */
    CHECK_OK(dds_store_free(s));
    barrier(s);
    if (rank == 0)
        CHECK_EQ(atomic_load(&w->live_regions), 0);
    barrier(s);

    /* re-add: the name is live again, reads work */
    a[0] = 100 + rank;
    CHECK_OK(dds_store_var_add(s, "a", a, 2, 3, 4, DDS_DTYPE_INT32, NULL,
                               DDS_ADD_COPY));
    b.nrows = 1;
    CHECK_OK(dds_store_get(s, NULL, "a", &b, 2 * (int64_t)(w->n - 1)));
    CHECK_EQ(out[0], 100 + w->n - 1);
    CHECK_OK(dds_store_profile(s, "a", &prof));
    CHECK_EQ_U(prof.v[DDS_PROF_CALLS], 1); /* a fresh variable */
    dds_store_destroy(s); /* frees "a" collectively */
}

static void test_free_and_readd(void)
{
    run_world(2, free_rank, NULL, 0, 0);
}

/* ---- receive registry, readers, epochs ---------------------------------- */

static void registry_rank(fake_world_t *w, int rank, void *arg)
{
    dds_store_t *s = NULL;
    uint8_t data[100], big[1000], other[100];
    dds_buf_t b;
    dds_reader_t *rd = NULL, *rd2 = NULL;
    void *h_big;
    (void)arg;

    for (int i = 0; i < 100; i++)
        data[i] = (uint8_t)(rank * 100 + i);
    CHECK_OK(fw_store_create(w, rank, &s));
    if (s == NULL)
        return;
    CHECK_OK(dds_store_var_add(s, "u", data, 100, 1, 1, DDS_DTYPE_UINT8, NULL,
                               DDS_ADD_COPY));
    CHECK_OK(dds_store_recv_register(s, big, sizeof(big), NULL));
    /* again: a no-op (one transport registration: run_world checks that
     * none is left; one unregister removes it, below) */
    CHECK_OK(dds_store_recv_register(s, big, sizeof(big), NULL));
    CHECK_OK(dds_store_recv_register(s, big + 10, 50, NULL)); /* overlaps */
    CHECK_RC(dds_store_recv_register(s, NULL, 5, NULL), -DDS_EINVAL);
    CHECK_RC(dds_store_recv_register(s, big, 0, NULL), -DDS_EINVAL);

    /* a read into a slice of `big` gets big's handle */
    b = buf_of(big + 500, 100, 1, DDS_DTYPE_UINT8, 1);
    CHECK_OK(dds_store_get(s, NULL, "u", &b, 100 * (int64_t)(1 - rank)));
    h_big = atomic_load(&w->last_dst_handle[rank]);
    CHECK(h_big != NULL);
    CHECK(((fw_reg_t *)h_big)->buf == big);
    CHECK_EQ(big[500], (1 - rank) * 100);
    /* the small registration covers [10, 60): a read there uses one of the
     * two (both contain it) */
    b = buf_of(big + 20, 30, 1, DDS_DTYPE_UINT8, 1);
    CHECK_OK(dds_store_get(s, NULL, "u", &b, 100 * (int64_t)(1 - rank)));
    CHECK(atomic_load(&w->last_dst_handle[rank]) != NULL);
    /* past the end of every registration: none */
    b = buf_of(big + 950, 60, 1, DDS_DTYPE_UINT8, 1);
    b.ptr = other;
    CHECK_OK(dds_store_get(s, NULL, "u", &b, 100 * (int64_t)(1 - rank)));
    CHECK(atomic_load(&w->last_dst_handle[rank]) == NULL);

    CHECK_OK(dds_store_recv_unregister(s, big + 10, 50));
    CHECK_RC(dds_store_recv_unregister(s, big + 10, 50), -DDS_ENOENT);
    CHECK_RC(dds_store_recv_unregister(s, big, 999), -DDS_ENOENT);
    CHECK_OK(dds_store_recv_register(s, big + 10, 50, NULL)); /* again */
    CHECK_OK(dds_store_recv_unregister(s, big + 10, 50));

    /* readers */
    CHECK_OK(dds_store_reader_open(s, DDS_READER_THREAD, &rd));
    CHECK(rd != NULL);
    CHECK_OK(dds_store_reader_open(s, DDS_READER_THREAD, &rd2));
    b = buf_of(other, 100, 1, DDS_DTYPE_UINT8, 1);
    CHECK_OK(dds_store_get(s, rd, "u", &b, 100 * (int64_t)(1 - rank)));
    CHECK_EQ(other[99], (1 - rank) * 100 + 99);
    CHECK_RC(dds_store_reader_open(s, DDS_READER_FORKED, &rd2), -DDS_ENOSYS);
    CHECK_RC(dds_store_reader_open(s, 5, &rd2), -DDS_EINVAL);
    dds_store_reader_close(s, rd);
    /* rd2 left open: destroy closes it */

    /* epochs are collective calls into the transport */
    CHECK_OK(dds_store_epoch_begin(s));
    CHECK_OK(dds_store_epoch_end(s));
    barrier(s);
    if (rank == 0)
        CHECK_EQ(atomic_load(&w->epochs), 2 * w->n);
    /* `big` stays registered: destroy unregisters it */
    dds_store_destroy(s);
}

static _Atomic int warnings;

static void count_warnings(void *arg, dds_log_level_t level,
                           dds_log_subsys_t subsys, const char *line)
{
    (void)arg;
    (void)subsys;
    if (level == DDS_LOG_WARN && strstr(line, "readers still open") != NULL)
        atomic_fetch_add(&warnings, 1);
}

static void test_registry_readers_epochs(void)
{
    atomic_store(&warnings, 0);
    dds_log_set_sink(count_warnings, NULL);
    run_world(2, registry_rank, NULL, 0, 0);
    dds_log_set_sink(NULL, NULL);
    CHECK_EQ(atomic_load(&warnings), 2); /* one per rank */
}

static void noreaders_rank(fake_world_t *w, int rank, void *arg)
{
    dds_store_t *s = NULL;
    double data[4] = {1, 2, 3, 4}, out[4];
    dds_reader_t *rd = NULL;
    dds_buf_t b = buf_of(out, 4, 16, DDS_DTYPE_FLOAT64, 8);
    (void)arg;
    CHECK_OK(fw_store_create(w, rank, &s));
    if (s == NULL)
        return;
    CHECK_OK(dds_store_var_add(s, "d", data, 2, 2, 8, DDS_DTYPE_FLOAT64, NULL,
                               DDS_ADD_IN_PLACE));
    /* no reader ops: a reader sharing the default */
    CHECK_OK(dds_store_reader_open(s, DDS_READER_THREAD, &rd));
    b.nrows = 2;
    CHECK_OK(dds_store_get(s, rd, "d", &b, 2 * (int64_t)(1 - rank)));
    CHECK(out[0] == 1.0 && out[3] == 4.0);
    /* no recv_register op: still tracked */
    CHECK_OK(dds_store_recv_register(s, out, sizeof(out), NULL));
    CHECK_OK(dds_store_recv_register(s, out, sizeof(out), NULL)); /* no-op */
    CHECK_OK(dds_store_epoch_begin(s)); /* no epoch ops: no-op */
    CHECK_OK(dds_store_epoch_end(s));
    dds_store_reader_close(s, rd);
    CHECK_OK(dds_store_recv_unregister(s, out, sizeof(out)));
    barrier(s); /* the in-place shard lives on this stack until both read */
    dds_store_destroy(s);
}

static void test_transport_without_optional_ops(void)
{
    fake_world_t w;
    fw_init(&w, 2);
    w.no_readers = 1;
    fw_run(&w, noreaders_rank, NULL);
    CHECK_EQ(atomic_load(&w.live_regions), 0);
    CHECK_EQ(atomic_load(&w.destroyed), 2);
    fw_fini(&w);
}

/* ---- device destinations: plans without host copies -------------------- */

static void device_rank(fake_world_t *w, int rank, void *arg)
{
    const size_t rb = 24;
    dds_store_t *s = NULL;
    unsigned char *shard, dst[40 * 24];
    int64_t rows[40];
    dds_buf_t b;
    (void)arg;
    CHECK_OK(fw_store_create(w, rank, &s));
    if (s == NULL)
        return;
    shard = make_shard(DDS_DTYPE_RAW, 24, 1, 20 * rank, 20, 5);
    CHECK_OK(dds_store_var_add(s, "g", shard, 20, 1, 24, DDS_DTYPE_RAW, NULL,
                               DDS_ADD_COPY));
    free(shard);
    for (int i = 0; i < 40; i++) /* adjacent rows, scattered slots, repeats */
        rows[i] = (int64_t)((i * 7) % 13 + (i % 2) * 20);
    /* the fake transport "supports CUDA" and reads with memcpy, so host
     * memory stands in for device memory; it fails any staged op because
     * the store passes no staging buffer for device destinations */
    b = buf_of(dst, 40, rb, DDS_DTYPE_RAW, 24);
    b.mem.kind = DDS_MEM_CUDA;
    CHECK_OK(dds_store_get_batch(s, NULL, "g", &b, rows, 40));
    check_rows(DDS_DTYPE_RAW, 24, 1, dst, rows, 0, 40, 5);
    b.nrows = 30;
    CHECK_OK(dds_store_get(s, NULL, "g", &b, 5));
    check_rows(DDS_DTYPE_RAW, 24, 1, dst, NULL, 5, 30, 5);
    dds_store_destroy(s);
}

static void test_device_destination(void)
{
    run_world(2, device_rank, NULL,
              DDS_TRANSPORT_CAP_THREAD_SAFE | DDS_TRANSPORT_CAP_LOCAL_SELF |
                  DDS_TRANSPORT_CAP_HMEM_CUDA,
              16);
}

/* ---- create: configuration and parameters ------------------------------ */

typedef struct create_arg {
    int want;
    const char *detail;
} create_arg_t;

static void create_fail_rank(fake_world_t *w, int rank, void *arg)
{
    create_arg_t *a = arg;
    dds_store_t *s = (dds_store_t *)0x1;
    CHECK_RC(fw_store_create(w, rank, &s), a->want);
    CHECK(s == NULL);
    CHECK_CONTAINS(dds_last_error(), a->detail);
}

static void test_create_errors(void)
{
    fake_world_t w;
    create_arg_t a = {-DDS_ECONFIG, "DDSTORE_MAX_READ_BYTES='abc'"};
    dds_store_params_t p;
    dds_store_t *s = NULL;

    setenv("DDSTORE_MAX_READ_BYTES", "abc", 1);
    fw_init(&w, 2);
    fw_run(&w, create_fail_rank, &a);
    /* ownership moved: both destroyed on failure */
    CHECK_EQ(atomic_load(&w.destroyed), 2);
    CHECK_EQ(atomic_load(&w.comms_destroyed), 2);
    fw_fini(&w);
    setenv("DDSTORE_MAX_READ_BYTES", "-5", 1);
    a.detail = "DDSTORE_MAX_READ_BYTES='-5'";
    fw_init(&w, 2);
    fw_run(&w, create_fail_rank, &a);
    fw_fini(&w);
    unsetenv("DDSTORE_MAX_READ_BYTES");
    setenv("DDSTORE_LOG_SUBSYS", "core,nonsense", 1);
    a.detail = "nonsense";
    fw_init(&w, 1);
    fw_run(&w, create_fail_rank, &a);
    fw_fini(&w);
    unsetenv("DDSTORE_LOG_SUBSYS");

    /* missing pieces */
    CHECK_RC(dds_store_create(NULL, &s), -DDS_EINVAL);
    memset(&p, 0, sizeof(p));
    CHECK_RC(dds_store_create(&p, &s), -DDS_EINVAL);
    fw_init(&w, 1);
    p.field_mask = DDS_STORE_PARAM_COMM | DDS_STORE_PARAM_TRANSPORT;
    p.comm = fw_comm(&w, 0);
    p.transport = fw_transport(&w, 0);
    CHECK_RC(dds_store_create(&p, NULL), -DDS_EINVAL);
    CHECK_EQ(atomic_load(&w.destroyed), 1);
    CHECK_EQ(atomic_load(&w.comms_destroyed), 1);
    p.field_mask = DDS_STORE_PARAM_COMM;
    p.comm = fw_comm(&w, 0);
    CHECK_RC(dds_store_create(&p, &s), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "transport");
    CHECK_EQ(atomic_load(&w.comms_destroyed), 2);
    fw_fini(&w);
    dds_store_destroy(NULL);
}

/* ---- the one-rank communicator ----------------------------------------- */

static void test_comm_self(void)
{
    fake_world_t w;
    dds_store_params_t p;
    dds_store_t *s = NULL;
    float data[6] = {0, 1, 2, 3, 4, 5}, out[6];
    dds_buf_t b = buf_of(out, 3, 8, DDS_DTYPE_FLOAT32, 4);
    int64_t rows[3] = {2, 0, 2};

    fw_init(&w, 1);
    memset(&p, 0, sizeof(p));
    p.field_mask = DDS_STORE_PARAM_COMM | DDS_STORE_PARAM_TRANSPORT;
    CHECK_OK(dds_comm_self(&p.comm));
    p.transport = fw_transport(&w, 0);
    CHECK_OK(dds_store_create(&p, &s));
    CHECK_OK(dds_store_var_add(s, "f", data, 3, 2, 4, DDS_DTYPE_FLOAT32, NULL,
                               DDS_ADD_COPY));
    CHECK_OK(dds_store_get_batch(s, NULL, "f", &b, rows, 3));
    CHECK(out[0] == 4 && out[1] == 5 && out[2] == 0 && out[4] == 4);
    /* LOCAL_SELF: everything by memcpy, the transport is never called */
    CHECK_EQ(atomic_load(&w.read_calls), 0);
    dds_store_destroy(s);
    CHECK_EQ(atomic_load(&w.live_regions), 0);
    fw_fini(&w);
}

/* ---- DDSTORE_PROFILE=0: counters kept, clocks skipped ------------------ */

static void profile_off_rank(fake_world_t *w, int rank, void *arg)
{
    dds_store_t *s = NULL;
    int64_t data[4] = {1, 2, 3, 4}, out[4], rows[3] = {3, 0, 3};
    dds_buf_t b = buf_of(out, 3, 8, DDS_DTYPE_INT64, 8);
    dds_profile_t prof;
    (void)arg;
    CHECK_OK(fw_store_create(w, rank, &s));
    if (s == NULL)
        return;
    CHECK_OK(dds_store_var_add(s, "p", data, 4, 1, 8, DDS_DTYPE_INT64, NULL,
                               DDS_ADD_COPY));
    CHECK_OK(dds_store_get_batch(s, NULL, "p", &b, rows, 3));
    CHECK(out[0] == 4 && out[1] == 1 && out[2] == 4);
    CHECK_OK(dds_store_profile(s, "p", &prof));
    CHECK_EQ_U(prof.v[DDS_PROF_CALLS], 1);
    CHECK_EQ_U(prof.v[DDS_PROF_ROWS], 3);
    CHECK_EQ_U(prof.v[DDS_PROF_LOCAL_BYTES], 16); /* rows 0 and 3, once */
    CHECK_EQ_U(prof.v[DDS_PROF_NS_TOTAL], 0);
    CHECK_EQ_U(prof.v[DDS_PROF_NS_OTHER], 0);
    dds_store_destroy(s);
}

static void test_profile_disabled(void)
{
    pid_t pid;
    int status = 0;
    fflush(stdout);
    fflush(stderr);
    pid = fork(); /* the setting is read once per process */
    if (pid == 0) {
        fake_world_t w;
        setenv("DDSTORE_PROFILE", "0", 1);
        CHECK_EQ(dds_prof_timing_enabled(), 0);
        CHECK_EQ_U(dds_prof_now(), 0);
        fw_init(&w, 1);
        fw_run(&w, profile_off_rank, NULL);
        fw_fini(&w);
        _exit(CHECK_FAILURES() > 0 ? 1 : 0);
    }
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(dds_prof_timing_enabled(), 1); /* default here */
    CHECK(dds_prof_now() > 0);
}

int main(void)
{
    unsetenv("DDSTORE_MAX_READ_BYTES");
    unsetenv("DDSTORE_MERGE_ROW_BYTES");
    unsetenv("DDSTORE_PROFILE");
    RUN_TEST(test_profile_disabled); /* first: the child must read it fresh */
    RUN_TEST(test_every_dtype);
    RUN_TEST(test_init_update_get);
    RUN_TEST(test_shuffled_batches_with_repeats);
    RUN_TEST(test_read_errors);
    RUN_TEST(test_collective_errors);
    RUN_TEST(test_free_and_readd);
    RUN_TEST(test_registry_readers_epochs);
    RUN_TEST(test_transport_without_optional_ops);
    RUN_TEST(test_device_destination);
    RUN_TEST(test_create_errors);
    RUN_TEST(test_comm_self);
    return CHECK_SUMMARY();
}
