/* ddstore-core: dds_store_get_batch_vars, the fields of a batch in one
 * planned call, on a fake world (threads as ranks): every variable's rows
 * right (shared and separate plans, staging, repeats, split reads), one
 * transport call for all of them when the transport has read_multi (else
 * one read() per variable), checks before any byte moves naming the
 * variable, per-variable profiles, transport errors naming the variables.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ddstore/store.h"
#include "fake_world.h"
#include "store_world.h"

enum { NV = 4, NB = 14 };

/* a, b: int64 x 3, 5 rows a rank (one layout: one plan); c: uint8 x 7
 * (same rows, another row size); d: int32 x 2, 3 + rank rows a rank
 * (another distribution). */
static const char *const g_names[NV] = {"a", "b", "c", "d"};
static const size_t g_disp[NV] = {3, 3, 7, 2};
static const size_t g_isz[NV] = {8, 8, 1, 4};
static const dds_dtype_t g_dt[NV] = {DDS_DTYPE_INT64, DDS_DTYPE_INT64,
                                     DDS_DTYPE_UINT8, DDS_DTYPE_INT32};

static int64_t rows_of(int k, int rank)
{
    return k == 3 ? 3 + rank : 5;
}

static int64_t first_of(int k, int rank)
{
    int64_t f = 0;
    for (int r = 0; r < rank; r++)
        f += rows_of(k, r);
    return f;
}

/* Element j of global row g of variable k, stored in g_isz[k] bytes. */
static void put_elem(int k, int64_t g, size_t j, unsigned char *to)
{
    const int64_t v = (int64_t)k * 1000003 + g * 31 + (int64_t)j;
    if (g_isz[k] == 8) {
        memcpy(to, &v, 8);
    } else if (g_isz[k] == 4) {
        int32_t x = (int32_t)v;
        memcpy(to, &x, 4);
    } else {
        *to = (unsigned char)(v & 0xFF);
    }
}

static void fill_rows(int k, const int64_t *rows, size_t n, unsigned char *to)
{
    const size_t rb = g_disp[k] * g_isz[k];
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < g_disp[k]; j++)
            put_elem(k, rows[i], j, to + i * rb + j * g_isz[k]);
}

static void add_vars(dds_store_t *s, int rank)
{
    for (int k = 0; k < NV; k++) {
        const int64_t n = rows_of(k, rank), f = first_of(k, rank);
        int64_t *g = malloc((size_t)n * sizeof(*g));
        unsigned char *shard = malloc((size_t)n * g_disp[k] * g_isz[k]);
        for (int64_t i = 0; i < n; i++)
            g[i] = f + i;
        fill_rows(k, g, (size_t)n, shard);
        CHECK_OK(dds_store_var_add(s, g_names[k], shard, n, g_disp[k],
                                   g_isz[k], g_dt[k], NULL, DDS_ADD_COPY));
        free(shard);
        free(g);
    }
}

typedef struct vars_arg {
    int read_multi;       /* the world's transport has read_multi */
} vars_arg_t;

/* Rows of every rank (d has 12 with 3 ranks), scattered, with repeats and
 * runs (merged reads, staging). */
static const int64_t g_rows[NB] = {11, 0, 5, 5, 3, 10, 1, 2, 9, 4, 6, 7, 8, 11};

static void vars_rank(fake_world_t *w, int rank, void *arg)
{
    const vars_arg_t *va = arg;
    dds_store_t *s = NULL;
    unsigned char *dst[NV], *want[NV], *one[NV];
    dds_buf_t b[NV];
    dds_profile_t p;

    CHECK_OK(fw_store_create(w, rank, &s));
    if (s == NULL)
        return;
    add_vars(s, rank);
    for (int k = 0; k < NV; k++) {
        const size_t bytes = NB * g_disp[k] * g_isz[k];
        dst[k] = malloc(bytes);
        want[k] = malloc(bytes);
        one[k] = malloc(bytes);
        memset(dst[k], 0xAB, bytes);
        fill_rows(k, g_rows, NB, want[k]);
        b[k] = buf_of(dst[k], NB, g_disp[k] * g_isz[k], g_dt[k], g_isz[k]);
        CHECK_OK(dds_store_profile_reset(s, g_names[k]));
    }

    /* one rank at a time, so that the world's counters are this call's */
    for (int r = 0; r < w->n; r++) {
        barrier(s);
        if (r != rank)
            continue;
        const long rc0 = atomic_load(&w->read_calls);
        const long mc0 = atomic_load(&w->multi_calls);
        const long mq0 = atomic_load(&w->multi_reqs);
        CHECK_OK(dds_store_get_batch_vars(s, NULL, g_names, b, NV, g_rows,
                                          NB));
        if (va->read_multi) {
            /* every variable has rows of other ranks: one call for all */
            CHECK_EQ(atomic_load(&w->multi_calls) - mc0, 1);
            CHECK_EQ(atomic_load(&w->multi_reqs) - mq0, NV);
            CHECK_EQ(atomic_load(&w->read_calls) - rc0, 0);
        } else {
            CHECK_EQ(atomic_load(&w->multi_calls) - mc0, 0);
            CHECK_EQ(atomic_load(&w->read_calls) - rc0, NV);
        }
    }
    barrier(s);
    for (int k = 0; k < NV; k++) {
        const size_t bytes = NB * g_disp[k] * g_isz[k];
        CHECK_MEMEQ(dst[k], want[k], bytes);
        /* the same as get_batch of the variable alone */
        dds_buf_t ob = b[k];
        ob.ptr = one[k];
        CHECK_OK(dds_store_get_batch(s, NULL, g_names[k], &ob, g_rows, NB));
        CHECK_MEMEQ(one[k], want[k], bytes);
        /* the profile: one call of NB rows, as get_batch counts it */
        CHECK_OK(dds_store_profile(s, g_names[k], &p));
        CHECK_EQ(p.v[DDS_PROF_CALLS], 2);
        CHECK_EQ(p.v[DDS_PROF_ROWS], 2 * NB);
        CHECK_EQ(p.v[DDS_PROF_BYTES], 2 * bytes);
    }

    /* a name repeated, and nothing at all */
    {
        const char *const two[2] = {"c", "c"};
        dds_buf_t bb[2] = {b[2], b[2]};
        const size_t bytes = NB * g_disp[2];
        memset(dst[2], 0, bytes);
        memset(one[2], 0, bytes);
        bb[1].ptr = one[2];
        CHECK_OK(dds_store_get_batch_vars(s, NULL, two, bb, 2, g_rows, NB));
        CHECK_MEMEQ(dst[2], want[2], bytes);
        CHECK_MEMEQ(one[2], want[2], bytes);
        CHECK_OK(dds_store_get_batch_vars(s, NULL, two, bb, 0, g_rows, NB));
    }

    /* injected transport failure: the error names the variables, the
     * store stays usable */
    for (int r = 0; r < w->n; r++) {
        barrier(s);
        if (r != rank)
            continue;
        atomic_store(&w->fail_reads, 1);
        CHECK_RC(dds_store_get_batch_vars(s, NULL, g_names, b, NV, g_rows,
                                          NB), -DDS_EIO);
        CHECK_CONTAINS(dds_last_error(), "'a'");
        CHECK_CONTAINS(dds_last_error(), "injected read failure");
        atomic_store(&w->fail_reads, 0);
        CHECK_OK(dds_store_get_batch_vars(s, NULL, g_names, b, NV, g_rows,
                                          NB));
        for (int k = 0; k < NV; k++)
            CHECK_MEMEQ(dst[k], want[k], NB * g_disp[k] * g_isz[k]);
    }
    barrier(s);
    for (int k = 0; k < NV; k++) {
        free(dst[k]);
        free(want[k]);
        free(one[k]);
    }
    CHECK_OK(dds_store_free(s));
    dds_store_destroy(s);
}

static void test_rows_and_transport_calls(void)
{
    vars_arg_t a = {1};
    run_world_multi(3, vars_rank, &a, 0, 0, 1);
    /* reads split at 16 bytes (the fake checks every op) */
    run_world_multi(3, vars_rank, &a, 0, 16, 1);
    /* a transport without read_multi: one read() per variable */
    a.read_multi = 0;
    run_world_multi(3, vars_rank, &a, 0, 0, 0);
    /* own rows through the transport too (no LOCAL_SELF) */
    a.read_multi = 1;
    run_world_multi(3, vars_rank, &a, DDS_TRANSPORT_CAP_THREAD_SAFE, 0, 1);
}

/* ---- checks before any byte moves, naming the variable ------------------ */

static void errors_rank(fake_world_t *w, int rank, void *arg)
{
    dds_store_t *s = NULL;
    unsigned char *dst[NV], *keep[NV];
    int64_t rows[NB];
    int64_t len[2] = {1, 2};
    int64_t rdata[3] = {1, 2, 3};
    dds_buf_t b[NV];
    const char *names[NV];
    (void)w;
    (void)arg;

    CHECK_OK(fw_store_create(w, rank, &s));
    if (s == NULL)
        return;
    add_vars(s, rank);
    CHECK_OK(dds_store_ragged_add(s, "r", rdata, 3, len, 2, 1, 8,
                                  DDS_DTYPE_INT64, NULL, DDS_ADD_COPY));
    memcpy(rows, g_rows, sizeof(rows));
    memcpy(names, g_names, sizeof(names));
    for (int k = 0; k < NV; k++) {
        const size_t bytes = NB * g_disp[k] * g_isz[k];
        dst[k] = malloc(bytes);
        keep[k] = malloc(bytes);
        memset(dst[k], 0x5A, bytes);
        memcpy(keep[k], dst[k], bytes);
        b[k] = buf_of(dst[k], NB, g_disp[k] * g_isz[k], g_dt[k], g_isz[k]);
    }
#define UNTOUCHED()                                                           \
    for (int k = 0; k < NV; k++)                                              \
    CHECK_MEMEQ(dst[k], keep[k], NB * g_disp[k] * g_isz[k])

    names[2] = "nope";
    CHECK_RC(dds_store_get_batch_vars(s, NULL, names, b, NV, rows, NB),
             -DDS_ENOENT);
    CHECK_CONTAINS(dds_last_error(), "'nope'");
    UNTOUCHED();
    names[2] = "r";
    CHECK_RC(dds_store_get_batch_vars(s, NULL, names, b, NV, rows, NB),
             -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "'r' is ragged");
    UNTOUCHED();
    names[2] = "c";
    b[3].row_bytes = 4; /* d's rows are 8 bytes */
    CHECK_RC(dds_store_get_batch_vars(s, NULL, names, b, NV, rows, NB),
             -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "variable 'd'");
    UNTOUCHED();
    b[3].row_bytes = 8;
    b[1].dtype = DDS_DTYPE_FLOAT64;
    CHECK_RC(dds_store_get_batch_vars(s, NULL, names, b, NV, rows, NB),
             -DDS_ETYPE);
    CHECK_CONTAINS(dds_last_error(), "'b'");
    UNTOUCHED();
    b[1].dtype = DDS_DTYPE_INT64;
    b[2].nrows = NB - 1;
    CHECK_RC(dds_store_get_batch_vars(s, NULL, names, b, NV, rows, NB),
             -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "variable 'c': 14 indices for a "
                                     "buffer of 13 rows");
    UNTOUCHED();
    b[2].nrows = NB;
    /* 12 is past d's rows (12 with 3 ranks), not a's (15): d names it */
    rows[5] = 12;
    CHECK_RC(dds_store_get_batch_vars(s, NULL, names, b, NV, rows, NB),
             -DDS_ERANGE);
    CHECK_CONTAINS(dds_last_error(), "'d'");
    CHECK_CONTAINS(dds_last_error(), "index 12 at position 5");
    UNTOUCHED();
    rows[5] = 10;
    CHECK_RC(dds_store_get_batch_vars(s, NULL, names, b, NV, NULL, NB),
             -DDS_EINVAL);
    UNTOUCHED();
    CHECK_RC(dds_store_get_batch_vars(s, NULL, NULL, b, NV, rows, NB),
             -DDS_EINVAL);
    CHECK_RC(dds_store_get_batch_vars(NULL, NULL, names, b, NV, rows, NB),
             -DDS_EINVAL);
    /* still usable */
    CHECK_OK(dds_store_get_batch_vars(s, NULL, names, b, NV, rows, NB));
    for (int k = 0; k < NV; k++) {
        fill_rows(k, rows, NB, keep[k]);
        CHECK_MEMEQ(dst[k], keep[k], NB * g_disp[k] * g_isz[k]);
        free(dst[k]);
        free(keep[k]);
    }
#undef UNTOUCHED
    CHECK_OK(dds_store_free(s));
    dds_store_destroy(s);
}

static void test_errors_before_any_byte(void)
{
    run_world_multi(3, errors_rank, NULL, 0, 0, 1);
}

int main(void)
{
    unsetenv("DDSTORE_MAX_READ_BYTES");
    unsetenv("DDSTORE_MERGE_ROW_BYTES");
    RUN_TEST(test_rows_and_transport_calls);
    RUN_TEST(test_errors_before_any_byte);
    return CHECK_SUMMARY();
}
