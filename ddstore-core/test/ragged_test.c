/* store.h ragged variables through the fake in-process transport, and
 * plan.h's dds_plan_spans.
 *
 * Every scenario runs on N fake ranks (threads), each owning a store, as N
 * MPI processes would.  Payload bytes are a function of (global sample,
 * element row, byte, salt), so every byte read is checked against it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ddstore/plan.h"
#include "ddstore/store.h"
#include "fake_world.h"
#include "store_world.h"

/* float32 x 3: 12-byte element rows */
#define DISP 3
#define ISZ 4
#define RB 12
#define DT DDS_DTYPE_FLOAT32

/* ---- the data ----------------------------------------------------------- */

/* Samples per rank (rank 1 has none) and their lengths (zeros included). */
static const int64_t g_samples_of[] = {7, 0, 5, 9};

static int64_t sample_len(int64_t g)
{
    return (g * 7 + 3) % 6; /* 3, 4, 5, 0, 1, 2, 3, ... */
}

static unsigned char pay_byte(int64_t g, int64_t j, size_t b, int salt)
{
    return (unsigned char)(g * 131 + j * 17 + (int64_t)b * 7 + salt * 29 + 1);
}

static int64_t first_sample(int rank)
{
    int64_t f = 0;
    for (int r = 0; r < rank; r++)
        f += g_samples_of[r];
    return f;
}

/* A rank's lengths and payload (sample after sample). */
static int64_t make_local(int rank, int salt, int64_t **lengths_p,
                          unsigned char **data_p)
{
    const int64_t first = first_sample(rank), n = g_samples_of[rank];
    int64_t *len = malloc(sizeof(int64_t) * (size_t)(n + 1));
    int64_t elems = 0, k = 0;
    unsigned char *d;
    for (int64_t i = 0; i < n; i++) {
        len[i] = sample_len(first + i);
        elems += len[i];
    }
    d = malloc((size_t)elems * RB + 1);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < len[i]; j++, k++)
            for (size_t b = 0; b < RB; b++)
                d[(size_t)k * RB + b] = pay_byte(first + i, j, b, salt);
    *lengths_p = len;
    *data_p = d;
    return elems;
}

/* dst holds samples rows[0..n) packed; salt_of(g) gives each sample's salt. */
static int check_packed(const unsigned char *dst, const int64_t *rows,
                        size_t n, const int64_t *lengths, int64_t total,
                        int (*salt_of)(int64_t g))
{
    int64_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const int64_t g = rows[i];
        if (lengths[i] != sample_len(g)) {
            CHECK_FAIL_("sample %lld at position %zu: length %lld, want "
                        "%lld", (long long)g, i, (long long)lengths[i],
                        (long long)sample_len(g));
            return 1;
        }
        for (int64_t j = 0; j < lengths[i]; j++, k++)
            for (size_t b = 0; b < RB; b++)
                if (dst[(size_t)k * RB + b] != pay_byte(g, j, b, salt_of(g))) {
                    CHECK_FAIL_("sample %lld (position %zu) element %lld "
                                "byte %zu wrong", (long long)g, i,
                                (long long)j, b);
                    return 1;
                }
    }
    if (k != total) {
        CHECK_FAIL_("total %lld, want %lld", (long long)total, (long long)k);
        return 1;
    }
    CHECK_PASS_();
    return 0;
}

static int salt0(int64_t g)
{
    (void)g;
    return 0;
}

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* ---- add, sizes, batches ------------------------------------------------ */

/* Reads every sample several ways and checks every byte. */
static void read_all_ways(dds_store_t *s, const char *name, int rank,
                          int64_t total, int (*salt_of)(int64_t))
{
    uint64_t seed = 777 + (uint64_t)rank * 13;
    int64_t rows[64], lengths[64], got = -1;
    unsigned char *dst = malloc(64 * 5 * RB + 64);
    dds_buf_t b;

    for (int iter = 0; iter < 40; iter++) {
        size_t n = (size_t)(rng(&seed) % 48);
        for (size_t i = 0; i < n; i++)
            rows[i] = (int64_t)(rng(&seed) % (uint64_t)total);
        if (iter % 4 == 1 && n > 3) { /* repeats, adjacent and not */
            rows[1] = rows[0];
            rows[n - 1] = rows[0];
        }
        if (iter % 4 == 2) /* every sample in order: merged reads */
            for (size_t i = 0; i < n; i++)
                rows[i] = (int64_t)i % total;
        memset(dst, 0xEE, 64 * 5 * RB + 64);
        b = buf_of(dst, 64 * 5, RB, DT, ISZ);
        CHECK_OK(dds_store_ragged_get_batch(s, NULL, name, &b, rows, n,
                                            lengths, &got));
        if (check_packed(dst, rows, n, lengths, got, salt_of))
            break;
        /* the rows after the total are untouched */
        CHECK_EQ(dst[(size_t)got * RB], 0xEE);
        memset(lengths, 0x55, sizeof(lengths));
        CHECK_OK(dds_store_ragged_sizes(s, NULL, name, rows, n, lengths));
        for (size_t i = 0; i < n; i++)
            if (lengths[i] != sample_len(rows[i])) {
                CHECK_FAIL_("sizes: position %zu", i);
                break;
            }
    }
    free(dst);
}

static void init_rank(fake_world_t *w, int rank, void *arg);

typedef struct basic_arg {
    int local_self;    /* transport has LOCAL_SELF: own rows by memcpy */
} basic_arg_t;

static int salt_updated(int64_t g)
{
    /* samples 1 and 2 of every rank were rewritten with salt 5 */
    for (int r = 0; r < 4; r++) {
        int64_t f = first_sample(r);
        if (g >= f + 1 && g < f + 3 && g < f + g_samples_of[r])
            return 5;
    }
    return 0;
}

static void basic_rank(fake_world_t *w, int rank, void *arg)
{
    basic_arg_t *ba = arg;
    const int64_t total = first_sample(w->n);
    int64_t *len, nel, all_elems = 0, off[FW_MAX_RANKS + 1], rows[4];
    int64_t lengths[4], got;
    unsigned char *data, dst[64 * RB], keep[64 * RB];
    dds_var_info_t info;
    dds_profile_t prof;
    dds_store_t *s = NULL;
    dds_buf_t b;

    for (int64_t g = 0; g < total; g++)
        all_elems += sample_len(g);
    CHECK_OK(fw_store_create(w, rank, &s));
    if (s == NULL)
        return;
    nel = make_local(rank, 0, &len, &data);
    CHECK_OK(dds_store_ragged_add(s, "g", data, nel, len, g_samples_of[rank],
                                  DISP, ISZ, DT, NULL, DDS_ADD_COPY));
    CHECK_OK(dds_store_var_info(s, "g", &info));
    CHECK_EQ(info.ragged, 1);
    CHECK_EQ(info.total_rows, total);
    CHECK_EQ(info.local_rows, g_samples_of[rank]);
    CHECK_EQ(info.local_first, first_sample(rank));
    CHECK_EQ(info.total_elems, all_elems);
    CHECK_EQ(info.local_elems, nel);
    CHECK_EQ_U(info.row_bytes, RB);
    CHECK_OK(dds_store_var_offsets(s, "g", off));
    for (int r = 0; r <= w->n; r++)
        CHECK_EQ(off[r], first_sample(r));
    CHECK_OK(dds_store_profile_reset(s, "g"));

    read_all_ways(s, "g", rank, total, salt0);
    CHECK_OK(dds_store_profile(s, "g", &prof));
    CHECK_EQ_U(prof.v[DDS_PROF_CALLS], 40);
    CHECK(prof.v[DDS_PROF_ROWS] > 0);
    CHECK(prof.v[DDS_PROF_BYTES] > 0);
    if (!ba->local_self || g_samples_of[rank] < total) /* remote owners */
        CHECK(prof.v[DDS_PROF_READS] > 0);
    if (ba->local_self && g_samples_of[rank] > 0)
        CHECK(prof.v[DDS_PROF_LOCAL_BYTES] > 0);
    if (!ba->local_self)
        CHECK_EQ_U(prof.v[DDS_PROF_LOCAL_BYTES], 0);

    /* empty batch */
    b = buf_of(dst, 0, RB, DT, ISZ);
    got = -1;
    CHECK_OK(dds_store_ragged_get_batch(s, NULL, "g", &b, NULL, 0, NULL,
                                        &got));
    CHECK_EQ(got, 0);
    CHECK_OK(dds_store_ragged_sizes(s, NULL, "g", NULL, 0, NULL));

    /* destination too small: lengths and total filled, nothing read */
    rows[0] = 0;               /* length 3 */
    rows[1] = total - 1;
    rows[2] = 2;               /* length 5 */
    rows[3] = 0;
    memset(dst, 0xAB, sizeof(dst));
    memcpy(keep, dst, sizeof(dst));
    {
        int64_t need = sample_len(0) * 2 + sample_len(total - 1) +
                       sample_len(2);
        char want[96];
        b = buf_of(dst, need - 1, RB, DT, ISZ);
        CHECK_RC(dds_store_ragged_get_batch(s, NULL, "g", &b, rows, 4,
                                            lengths, &got), -DDS_ENOSPC);
        snprintf(want, sizeof(want), "have %lld element rows", (long long)need);
        CHECK_CONTAINS(dds_last_error(), want);
        CHECK_EQ(got, need);
        for (int i = 0; i < 4; i++)
            CHECK_EQ(lengths[i], sample_len(rows[i]));
        CHECK_MEMEQ(dst, keep, sizeof(dst));
        b.nrows = need; /* exactly enough */
        CHECK_OK(dds_store_ragged_get_batch(s, NULL, "g", &b, rows, 4,
                                            lengths, &got));
        check_packed(dst, rows, 4, lengths, got, salt0);
    }

    /* index out of range: nothing read */
    memcpy(dst, keep, sizeof(dst));
    b = buf_of(dst, 64, RB, DT, ISZ);
    rows[3] = total;
    CHECK_RC(dds_store_ragged_get_batch(s, NULL, "g", &b, rows, 4, lengths,
                                        &got), -DDS_ERANGE);
    CHECK_CONTAINS(dds_last_error(), "at position 3");
    CHECK_MEMEQ(dst, keep, sizeof(dst));
    rows[3] = -1;
    CHECK_RC(dds_store_ragged_sizes(s, NULL, "g", rows, 4, lengths),
             -DDS_ERANGE);
    rows[3] = 0;

    /* wrong kind, both ways */
    b = buf_of(dst, 4, RB, DT, ISZ);
    CHECK_RC(dds_store_get_batch(s, NULL, "g", &b, rows, 4), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "ragged");
    CHECK_CONTAINS(dds_last_error(), "ragged_get_batch");
    CHECK_RC(dds_store_get(s, NULL, "g", &b, 0), -DDS_EINVAL);
    CHECK_RC(dds_store_var_update(s, "g", &b, 0), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "ragged_update");
    CHECK_MEMEQ(dst, keep, 4 * RB);
    {
        float fixed[2 * DISP] = {0};
        CHECK_OK(dds_store_var_add(s, "fixed", fixed, 2, DISP, ISZ, DT, NULL,
                                   DDS_ADD_COPY));
        CHECK_RC(dds_store_ragged_sizes(s, NULL, "fixed", rows, 1, lengths),
                 -DDS_EINVAL);
        CHECK_CONTAINS(dds_last_error(), "fixed-size rows");
        CHECK_CONTAINS(dds_last_error(), "get_batch");
        CHECK_RC(dds_store_ragged_get_batch(s, NULL, "fixed", &b, rows, 1,
                                            lengths, &got), -DDS_EINVAL);
        b = buf_of(dst, 0, RB, DT, ISZ);
        CHECK_RC(dds_store_ragged_update(s, "fixed", &b, 0, 0), -DDS_EINVAL);
        CHECK_CONTAINS(dds_last_error(), "var_update");
        CHECK_OK(dds_store_var_free(s, "fixed"));
    }

    /* update samples [1, 3) of this rank (where it has them) */
    {
        const int64_t n = g_samples_of[rank] >= 3 ? 2 : 0;
        const int64_t first = first_sample(rank);
        int64_t k = 0, el = n ? sample_len(first + 1) + sample_len(first + 2)
                               : 0;
        unsigned char *src = malloc((size_t)el * RB + 1);
        for (int64_t i = 1; i < 1 + n; i++)
            for (int64_t j = 0; j < sample_len(first + i); j++, k++)
                for (size_t x = 0; x < RB; x++)
                    src[(size_t)k * RB + x] = pay_byte(first + i, j, x, 5);
        b = buf_of(src, el + 1, RB, DT, ISZ);
        if (n > 0) {
            CHECK_RC(dds_store_ragged_update(s, "g", &b, 1, n), -DDS_EINVAL);
            CHECK_CONTAINS(dds_last_error(), "lengths never change");
        }
        b.nrows = el;
        CHECK_RC(dds_store_ragged_update(s, "g", &b, g_samples_of[rank], 1),
                 -DDS_ERANGE);
        CHECK_OK(dds_store_ragged_update(s, "g", &b, 1 > g_samples_of[rank]
                                                          ? 0 : 1, n));
        free(src);
    }
    barrier(s);
    read_all_ways(s, "g", rank, total, salt_updated);

    /* free, then the name works again (as a fixed variable) */
    barrier(s);
    CHECK_OK(dds_store_var_free(s, "g"));
    {
        float fixed[DISP] = {1, 2, 3};
        CHECK_OK(dds_store_var_add(s, "g", fixed, 1, DISP, ISZ, DT, NULL,
                                   DDS_ADD_COPY));
        CHECK_OK(dds_store_var_info(s, "g", &info));
        CHECK_EQ(info.ragged, 0);
        CHECK_EQ(info.total_elems, w->n);
    }
    free(len);
    free(data);
    dds_store_destroy(s);
}

static void test_add_read(void)
{
    basic_arg_t a = {1};
    fake_world_t w;
    for (int n = 1; n <= 4; n++)
        run_world(n, basic_rank, &a, 0, 0);
    /* reads split at 20 bytes (not a multiple of the 12-byte rows, nor of
     * the 8-byte index entries) */
    run_world(3, basic_rank, &a, 0, 20);
    /* shards from the transport's shard_alloc (MPI: shared memory),
     * filled after the agreement */
    fw_init(&w, 3);
    w.with_shard_alloc = 1;
    fw_run(&w, basic_rank, &a);
    CHECK_EQ(atomic_load(&w.live_shards), 0);
    CHECK_EQ(atomic_load(&w.bad_ops), 0);
    CHECK_EQ(atomic_load(&w.live_regions), 0);
    fw_fini(&w);
    fw_init(&w, 2);
    w.with_shard_alloc = 1;
    fw_run(&w, init_rank, NULL);
    CHECK_EQ(atomic_load(&w.live_shards), 0);
    fw_fini(&w);
    /* own samples through the transport too */
    a.local_self = 0;
    fw_init(&w, 4);
    w.caps = DDS_TRANSPORT_CAP_THREAD_SAFE | DDS_TRANSPORT_CAP_READERS;
    fw_run(&w, basic_rank, &a);
    CHECK(atomic_load(&w.local_ops) > 0);
    CHECK_EQ(atomic_load(&w.bad_ops), 0);
    CHECK_EQ(atomic_load(&w.live_regions), 0);
    fw_fini(&w);
}

/* ---- init + update ------------------------------------------------------ */

static int salt9(int64_t g)
{
    (void)g;
    return 9;
}

static void init_rank(fake_world_t *w, int rank, void *arg)
{
    const int64_t total = first_sample(w->n);
    int64_t *len, nel, rows[64], lengths[64], got;
    unsigned char *data, *dst = malloc(64 * 5 * RB);
    dds_store_t *s = NULL;
    dds_buf_t b;
    (void)arg;

    CHECK_OK(fw_store_create(w, rank, &s));
    if (s == NULL)
        return;
    nel = make_local(rank, 9, &len, &data);
    CHECK_OK(dds_store_ragged_init(s, "z", len, g_samples_of[rank], DISP,
                                   ISZ, DT));
    for (int64_t i = 0; i < total && i < 64; i++)
        rows[i] = i;
    b = buf_of(dst, 64 * 5, RB, DT, ISZ);
    memset(dst, 0x11, 64 * 5 * RB);
    CHECK_OK(dds_store_ragged_get_batch(s, NULL, "z", &b, rows, (size_t)total,
                                        lengths, &got));
    for (int64_t k = 0; k < got * RB; k++)
        if (dst[k] != 0) {
            CHECK_FAIL_("init: byte %lld not zero", (long long)k);
            break;
        }
    barrier(s);
    b = buf_of(data, nel, RB, DT, ISZ);
    CHECK_OK(dds_store_ragged_update(s, "z", &b, 0, g_samples_of[rank]));
    barrier(s);
    b = buf_of(dst, 64 * 5, RB, DT, ISZ);
    CHECK_OK(dds_store_ragged_get_batch(s, NULL, "z", &b, rows, (size_t)total,
                                        lengths, &got));
    check_packed(dst, rows, (size_t)total, lengths, got, salt9);
    free(len);
    free(data);
    free(dst);
    dds_store_destroy(s);
}

static void test_init_update(void)
{
    run_world(4, init_rank, NULL, 0, 0);
    run_world(2, init_rank, NULL, 0, 0);
}

/* ---- bad input: every rank fails together, the store stays usable ------- */

static void bad_rank(fake_world_t *w, int rank, void *arg)
{
    const int last = w->n - 1;
    int64_t len[3] = {2, 1, 0}, bad[3] = {2, -4, 1};
    int64_t big[2] = {INT64_MAX, 1}, rows[2] = {0, 1}, lengths[2], got;
    unsigned char data[3 * RB], dst[3 * RB];
    dds_store_t *s = NULL;
    dds_buf_t b;
    (void)arg;

    memset(data, 7, sizeof(data));
    CHECK_OK(fw_store_create(w, rank, &s));
    if (s == NULL)
        return;
    /* a negative length on the last rank */
    CHECK_RC(dds_store_ragged_add(s, "b", data, 3,
                                  rank == last ? bad : len, 3, DISP, ISZ, DT,
                                  NULL, DDS_ADD_COPY), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "length -4");
    {
        char want[32];
        snprintf(want, sizeof(want), "rank %d", last);
        CHECK_CONTAINS(dds_last_error(), want);
    }
    /* lengths that do not sum to the values' rows, on rank 0 */
    CHECK_RC(dds_store_ragged_add(s, "b", data, rank == 0 ? 2 : 3, len, 3,
                                  DISP, ISZ, DT, NULL, DDS_ADD_COPY),
             -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "sum to 3 element rows");
    CHECK_CONTAINS(dds_last_error(), "rank 0");
    /* a sum above INT64_MAX */
    CHECK_RC(dds_store_ragged_add(s, "b", data, 3, rank == last ? big : len,
                                  rank == last ? 2 : 3, DISP, ISZ, DT, NULL,
                                  DDS_ADD_COPY), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "INT64_MAX");
    /* nrows < 0 */
    CHECK_RC(dds_store_ragged_add(s, "b", data, 3, len, rank == last ? -1 : 3,
                                  DISP, ISZ, DT, NULL, DDS_ADD_COPY),
             -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "nrows -1");
    CHECK_RC(dds_store_ragged_init(s, "b", len, rank == last ? -2 : 3, DISP,
                                   ISZ, DT), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "nrows -2");
    if (w->n > 1) {
        /* disp, then dtype, differing across ranks */
        CHECK_RC(dds_store_ragged_add(s, "b", data, 3, len, 3,
                                      rank == 1 ? 1 : DISP,
                                      rank == 1 ? 3 * ISZ : ISZ,
                                      rank == 1 ? DDS_DTYPE_RAW : DT, NULL,
                                      DDS_ADD_COPY), -DDS_EINVAL);
        CHECK_CONTAINS(dds_last_error(), "rank 1");
        CHECK_RC(dds_store_ragged_add(s, "b", data, 3, len, 3, DISP, ISZ,
                                      rank == 1 ? DDS_DTYPE_INT32 : DT, NULL,
                                      DDS_ADD_COPY), -DDS_EINVAL);
        CHECK_CONTAINS(dds_last_error(), "int32");
        /* ragged on one rank, fixed on another */
        if (rank == 1)
            CHECK_RC(dds_store_var_add(s, "b", data, 3, DISP, ISZ, DT, NULL,
                                       DDS_ADD_COPY), -DDS_EINVAL);
        else
            CHECK_RC(dds_store_ragged_add(s, "b", data, 3, len, 3, DISP, ISZ,
                                          DT, NULL, DDS_ADD_COPY),
                     -DDS_EINVAL);
        CHECK_CONTAINS(dds_last_error(), "ragged");
    }
    /* GPU payloads, in place, unknown flags */
    {
        dds_mem_t gpu = {DDS_MEM_CUDA, 0, NULL};
        CHECK_RC(dds_store_ragged_add(s, "b", data, 3, len, 3, DISP, ISZ, DT,
                                      &gpu, DDS_ADD_IN_PLACE), -DDS_ENOSYS);
        CHECK_CONTAINS(dds_last_error(), "host payloads only");
        CHECK_RC(dds_store_ragged_add(s, "b", data, 3, len, 3, DISP, ISZ, DT,
                                      NULL, DDS_ADD_IN_PLACE), -DDS_ENOSYS);
        CHECK_CONTAINS(dds_last_error(), "DDS_ADD_COPY");
        CHECK_RC(dds_store_ragged_add(s, "b", data, 3, len, 3, DISP, ISZ, DT,
                                      NULL, 7), -DDS_EINVAL);
        CHECK_RC(dds_store_ragged_add(s, "b", NULL, 3, len, 3, DISP, ISZ, DT,
                                      NULL, DDS_ADD_COPY), -DDS_EINVAL);
        CHECK_RC(dds_store_ragged_add(s, "b", data, 3, NULL, 3, DISP, ISZ, DT,
                                      NULL, DDS_ADD_COPY), -DDS_EINVAL);
        CHECK_CONTAINS(dds_last_error(), "lengths are NULL");
    }
    /* nothing was left behind: the name is free, and a good add works */
    CHECK_RC(dds_store_ragged_sizes(s, NULL, "b", rows, 1, lengths),
             -DDS_ENOENT);
    CHECK_OK(dds_store_ragged_add(s, "b", data, 3, len, 3, DISP, ISZ, DT,
                                  NULL, DDS_ADD_COPY));
    CHECK_RC(dds_store_ragged_add(s, "b", data, 3, len, 3, DISP, ISZ, DT,
                                  NULL, DDS_ADD_COPY), -DDS_EEXIST);
    rows[0] = 3 * (int64_t)w->n - 3; /* the last rank's first sample */
    rows[1] = 1;
    b = buf_of(dst, 3, RB, DT, ISZ);
    CHECK_OK(dds_store_ragged_get_batch(s, NULL, "b", &b, rows, 2, lengths,
                                        &got));
    CHECK_EQ(got, 3);
    CHECK_EQ(lengths[0], 2);
    CHECK_EQ(lengths[1], 1);
    CHECK_MEMEQ(dst, data, 3 * RB);
    /* a ragged_update source of another row size */
    b = buf_of(data, 2, 8, DT, ISZ);
    CHECK_RC(dds_store_ragged_update(s, "b", &b, 0, 1), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "bytes per row");
    dds_store_destroy(s);
}

static void test_bad_input(void)
{
    run_world(1, bad_rank, NULL, 0, 0);
    run_world(3, bad_rank, NULL, 0, 0);
}

/* ---- dds_plan_spans ----------------------------------------------------- */

/* Execute the plan over shards whose byte k of owner r is (r * 37 + k). */
static void spans_run(const dds_span_t *sp, size_t n, const dds_plan_t *pl,
                      int nranks, size_t maxr)
{
    size_t total = 0, k = 0;
    unsigned char *dst;
    for (size_t i = 0; i < n; i++)
        total += sp[i].len;
    dst = calloc(total + 1, 1);
    CHECK_EQ_U(pl->ncopies, 0);
    CHECK_EQ_U(pl->staging_bytes, 0);
    CHECK_EQ_U(pl->owner_first[0], 0);
    CHECK_EQ_U(pl->owner_first[nranks], pl->nops);
    for (int r = 0; r < nranks; r++)
        for (size_t o = pl->owner_first[r]; o < pl->owner_first[r + 1]; o++) {
            const dds_read_op_t *op = &pl->ops[o];
            CHECK_EQ(op->owner, r);
            CHECK_EQ(op->staged, 0);
            CHECK(op->len > 0);
            if (maxr != 0)
                CHECK(op->len <= maxr);
            CHECK(op->dst_offset + op->len <= total);
            for (size_t x = 0; x < op->len; x++)
                dst[op->dst_offset + x] =
                    (unsigned char)(r * 37 + op->src_offset + (int64_t)x);
        }
    for (size_t i = 0; i < n; i++)
        for (size_t x = 0; x < sp[i].len; x++, k++)
            if (dst[k] != (unsigned char)(sp[i].owner * 37 + sp[i].src_offset +
                                          (int64_t)x)) {
                CHECK_FAIL_("span %zu byte %zu wrong", i, x);
                free(dst);
                return;
            }
    CHECK_PASS_();
    free(dst);
}

static void test_plan_spans(void)
{
    /* owner 1: two spans continuing each other in shard and destination
     * (one read), then a span continuing them in the shard but not in the
     * destination (owner 0's span is between: a read of its own); a
     * zero-length span; a repeat (read again) */
    const dds_span_t sp[] = {
        {1, 100, 10}, {1, 110, 6}, {0, 0, 4}, {1, 116, 5}, {2, 7, 0},
        {0, 0, 4},    {2, 50, 30},
    };
    const size_t n = sizeof(sp) / sizeof(sp[0]);
    dds_span_t bad[2] = {{0, 0, 1}, {3, 0, 1}};
    dds_plan_t pl;

    dds_plan_init(&pl);
    CHECK_OK(dds_plan_spans(3, 0, sp, n, &pl));
    CHECK_EQ_U(pl.nops, 5); /* owner 0: 2; owner 1: 2; owner 2: 1 */
    CHECK_EQ_U(pl.owner_first[1], 2);
    CHECK_EQ_U(pl.owner_first[2], 4);
    CHECK_EQ_U(pl.ops[2].len, 16);      /* the merged pair */
    CHECK_EQ_U(pl.ops[2].dst_offset, 0);
    CHECK_EQ_U(pl.ops[3].dst_offset, 20);
    CHECK_EQ_U(pl.nrows, n);
    spans_run(sp, n, &pl, 3, 0);
    /* split at 7 bytes */
    CHECK_OK(dds_plan_spans(3, 7, sp, n, &pl));
    CHECK(pl.nops > 5);
    spans_run(sp, n, &pl, 3, 7);
    /* empty, then errors; the plan is reused */
    CHECK_OK(dds_plan_spans(3, 0, NULL, 0, &pl));
    CHECK_EQ_U(pl.nops, 0);
    CHECK_EQ_U(pl.owner_first[3], 0);
    CHECK_RC(dds_plan_spans(3, 0, bad, 2, &pl), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "span 1: owner 3");
    bad[1].owner = 0;
    bad[1].src_offset = -5;
    CHECK_RC(dds_plan_spans(3, 0, bad, 2, &pl), -DDS_EINVAL);
    bad[1].src_offset = INT64_MAX;
    CHECK_RC(dds_plan_spans(3, 0, bad, 2, &pl), -DDS_EINVAL);
    CHECK_RC(dds_plan_spans(0, 0, bad, 2, &pl), -DDS_EINVAL);
    CHECK_RC(dds_plan_spans(3, 0, NULL, 2, &pl), -DDS_EINVAL);
    /* random spans over 5 owners */
    {
        dds_span_t r[200];
        uint64_t seed = 42;
        for (int it = 0; it < 50; it++) {
            size_t m = (size_t)(rng(&seed) % 200);
            for (size_t i = 0; i < m; i++) {
                r[i].owner = (int)(rng(&seed) % 5);
                r[i].src_offset = (int64_t)(rng(&seed) % 64);
                r[i].len = (size_t)(rng(&seed) % 9);
                if (i > 0 && rng(&seed) % 3 == 0) { /* a continuation */
                    r[i].owner = r[i - 1].owner;
                    r[i].src_offset = r[i - 1].src_offset +
                                      (int64_t)r[i - 1].len;
                }
            }
            CHECK_OK(dds_plan_spans(5, it % 2 ? 5 : 0, r, m, &pl));
            spans_run(r, m, &pl, 5, it % 2 ? 5 : 0);
        }
    }
    dds_plan_fini(&pl);
}

int main(void)
{
    unsetenv("DDSTORE_MAX_READ_BYTES");
    unsetenv("DDSTORE_MERGE_ROW_BYTES");
    RUN_TEST(test_plan_spans);
    RUN_TEST(test_add_read);
    RUN_TEST(test_init_update);
    RUN_TEST(test_bad_input);
    return CHECK_SUMMARY();
}
