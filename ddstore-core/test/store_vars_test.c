/* ddstore-core: dds_store_get_batch_vars and dds_store_read_vars, the
 * fields of a batch (fixed and ragged) in one planned call, on a fake world (threads as ranks): every variable's rows
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

static int all_eq(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            return 0;
    return 1;
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

/* ---- dds_store_read_vars: fixed and ragged entries in one call --------- */

/* Ragged "r": 3 + rank samples a rank, sample g has g % 3 element rows of
 * two int64 (g * 100 + j * 10 + e); ragged "s": 2 + 2 * rank samples, g % 5
 * element rows of one uint8 (g * 7 + j). */
static int64_t rg_samples(int k, int rank)
{
    return k == 0 ? 3 + rank : 2 + 2 * rank;
}

static int64_t rg_len(int k, int64_t g)
{
    return k == 0 ? g % 3 : g % 5;
}

static size_t rg_rb(int k)
{
    return k == 0 ? 16 : 1;
}

static void rg_elem(int k, int64_t g, int64_t j, unsigned char *to)
{
    if (k == 0) {
        int64_t v[2] = {g * 100 + j * 10, g * 100 + j * 10 + 1};
        memcpy(to, v, 16);
    } else {
        *to = (unsigned char)(g * 7 + j);
    }
}

static void add_ragged(dds_store_t *s, int rank)
{
    static const char *const nm[2] = {"r", "s"};
    for (int k = 0; k < 2; k++) {
        int64_t first = 0, n = rg_samples(k, rank), nel = 0, e = 0;
        for (int r = 0; r < rank; r++)
            first += rg_samples(k, r);
        int64_t *lens = malloc((size_t)n * sizeof(*lens));
        for (int64_t i = 0; i < n; i++)
            nel += lens[i] = rg_len(k, first + i);
        unsigned char *data = malloc((size_t)nel * rg_rb(k) + 1);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < lens[i]; j++, e++)
                rg_elem(k, first + i, j, data + (size_t)e * rg_rb(k));
        CHECK_OK(dds_store_ragged_add(s, nm[k], data, nel, lens, n,
                                      k == 0 ? 2 : 1, k == 0 ? 8 : 1,
                                      k == 0 ? DDS_DTYPE_INT64
                                             : DDS_DTYPE_UINT8,
                                      NULL, DDS_ADD_COPY));
        free(data);
        free(lens);
    }
}

/* The packed samples rows[0..n) of ragged k, as the source has them. */
static int64_t rg_want(int k, const int64_t *rows, size_t n,
                       unsigned char *to)
{
    int64_t e = 0;
    for (size_t i = 0; i < n; i++)
        for (int64_t j = 0; j < rg_len(k, rows[i]); j++, e++)
            rg_elem(k, rows[i], j, to + (size_t)e * rg_rb(k));
    return e;
}

static dds_read_var_t entry(const char *name, int kind, dds_buf_t dst,
                            int64_t *lengths)
{
    dds_read_var_t e;
    memset(&e, 0, sizeof(e));
    e.name = name;
    e.kind = kind;
    e.dst = dst;
    e.lengths = lengths;
    return e;
}

/* A grow callback: malloc'ed room (kept in arg, freed by the test). */
static int grow_malloc(void *arg, dds_read_var_t *var)
{
    void **keep = arg;
    free(*keep);
    *keep = malloc((size_t)var->total * var->dst.row_bytes + 1);
    if (*keep == NULL)
        return -DDS_ENOMEM;
    var->dst.ptr = *keep;
    var->dst.nrows = var->total;
    return 0;
}

enum { NR = 12 }; /* samples of r with 3 ranks: 3 + 4 + 5 */

static void mixed_rank(fake_world_t *w, int rank, void *arg)
{
    const vars_arg_t *va = arg;
    /* a (fixed), r (ragged), d (fixed), s (ragged), r (sizes), a (range) */
    enum { NE = 6 };
    unsigned char fa[NB * 24], fd[NB * 8], ga[7 * 24], wa[NB * 24],
        wd[NB * 8], wga[7 * 24];
    unsigned char pr[64 * 16], ps[64], wr[64 * 16], ws[64];
    int64_t lr[NB], ls[NB], lz[NB], rows[NB], g7[7];
    dds_read_var_t e[NE];
    dds_store_t *s = NULL;
    dds_profile_t p;
    void *grown = NULL;
    int64_t tr, ts;

    CHECK_OK(fw_store_create(w, rank, &s));
    if (s == NULL)
        return;
    add_vars(s, rank);
    add_ragged(s, rank);
    memcpy(rows, g_rows, sizeof(rows));
    fill_rows(0, rows, NB, wa);
    fill_rows(3, rows, NB, wd);
    for (int i = 0; i < 7; i++)
        g7[i] = 3 + i;
    fill_rows(0, g7, 7, wga);
    tr = rg_want(0, rows, NB, wr);
    ts = rg_want(1, rows, NB, ws);
    e[0] = entry("a", DDS_READ_FIXED, buf_of(fa, NB, 24, DDS_DTYPE_INT64, 8),
                 NULL);
    e[1] = entry("r", DDS_READ_RAGGED, buf_of(pr, 64, 16, DDS_DTYPE_INT64, 8),
                 lr);
    e[2] = entry("d", DDS_READ_FIXED, buf_of(fd, NB, 8, DDS_DTYPE_INT32, 4),
                 NULL);
    e[3] = entry("s", DDS_READ_RAGGED, buf_of(ps, 64, 1, DDS_DTYPE_UINT8, 1),
                 ls);
    e[4] = entry("r", DDS_READ_SIZES, buf_of(NULL, 0, 16, DDS_DTYPE_INT64, 8),
                 lz);
    e[5] = entry("a", DDS_READ_RANGE, buf_of(ga, 7, 24, DDS_DTYPE_INT64, 8),
                 NULL);
    e[5].start = 3;
    for (int k = 0; k < NV; k++)
        CHECK_OK(dds_store_profile_reset(s, g_names[k]));
    CHECK_OK(dds_store_profile_reset(s, "r"));

    /* one rank at a time: the world's counters are this call's */
    for (int r = 0; r < w->n; r++) {
        barrier(s);
        if (r != rank)
            continue;
        const long rc0 = atomic_load(&w->read_calls);
        const long mc0 = atomic_load(&w->multi_calls);
        memset(fa, 0xAB, sizeof(fa));
        memset(pr, 0xAB, sizeof(pr));
        memset(ps, 0xAB, sizeof(ps));
        CHECK_OK(dds_store_read_vars(s, NULL, e, NE, rows, NB));
        if (va->read_multi) {
            /* every ragged entry's index entries in one call, then every
             * entry's rows in one */
            CHECK_EQ(atomic_load(&w->multi_calls) - mc0, 2);
            CHECK_EQ(atomic_load(&w->read_calls) - rc0, 0);
        } else {
            CHECK_EQ(atomic_load(&w->multi_calls) - mc0, 0);
            CHECK_EQ(atomic_load(&w->read_calls) - rc0, 3 + 5);
        }
    }
    barrier(s);
    CHECK_MEMEQ(fa, wa, sizeof(wa));
    CHECK_MEMEQ(fd, wd, sizeof(wd));
    CHECK_MEMEQ(ga, wga, sizeof(wga));
    CHECK_EQ(e[1].total, tr);
    CHECK_EQ(e[3].total, ts);
    CHECK_EQ(e[4].total, tr);
    CHECK_MEMEQ(pr, wr, (size_t)tr * 16);
    CHECK_MEMEQ(ps, ws, (size_t)ts);
    CHECK(pr[tr * 16] == 0xAB && ps[ts] == 0xAB); /* after the total */
    for (int i = 0; i < NB; i++) {
        CHECK_EQ(lr[i], rg_len(0, rows[i]));
        CHECK_EQ(lz[i], rg_len(0, rows[i]));
        CHECK_EQ(ls[i], rg_len(1, rows[i]));
    }
    /* profiles as the one-variable calls count them */
    CHECK_OK(dds_store_profile(s, "r", &p));
    CHECK_EQ(p.v[DDS_PROF_CALLS], 1);    /* the sizes entry is no call */
    CHECK_EQ(p.v[DDS_PROF_ROWS], NB);
    CHECK_EQ(p.v[DDS_PROF_BYTES], tr * 16);
    CHECK_OK(dds_store_profile(s, "a", &p));
    CHECK_EQ(p.v[DDS_PROF_CALLS], 2);
    CHECK_EQ(p.v[DDS_PROF_ROWS], NB + 7);

    /* a ragged destination without room: every ragged entry's lengths and
     * total, nothing else read (fixed rows and payloads untouched) */
    memset(fa, 0x11, sizeof(fa));
    memset(pr, 0x22, sizeof(pr));
    memset(ps, 0x33, sizeof(ps));
    memset(lr, 0, sizeof(lr));
    e[4].total = e[1].total = -1;
    e[3].dst.nrows = ts - 1;
    CHECK_RC(dds_store_read_vars(s, NULL, e, NE, rows, NB), -DDS_ENOSPC);
    CHECK_CONTAINS(dds_last_error(), "'s'");
    CHECK_EQ(e[1].total, tr);
    CHECK_EQ(e[3].total, ts);
    CHECK_EQ(lr[NB - 1], rg_len(0, rows[NB - 1]));
    CHECK(all_eq(fa, sizeof(fa), 0x11) && all_eq(pr, sizeof(pr), 0x22) &&
          all_eq(ps, sizeof(ps), 0x33));
    /* ... unless a grow callback gives it room */
    e[3].grow = grow_malloc;
    e[3].grow_arg = &grown;
    CHECK_OK(dds_store_read_vars(s, NULL, e, NE, rows, NB));
    CHECK(e[3].dst.ptr == grown);
    CHECK_MEMEQ(grown, ws, (size_t)ts);
    CHECK_MEMEQ(pr, wr, (size_t)tr * 16);
    CHECK_MEMEQ(fa, wa, sizeof(wa));
    free(grown);
    e[3].dst = buf_of(ps, 64, 1, DDS_DTYPE_UINT8, 1);
    e[3].grow = NULL;

    /* checks before any byte moves, naming the entry */
    memset(fa, 0x44, sizeof(fa));
    rows[5] = NR; /* in a's range (15 rows), past r's 12 samples */
    CHECK_RC(dds_store_read_vars(s, NULL, e, 2, rows, NB), -DDS_ERANGE);
    CHECK_CONTAINS(dds_last_error(), "'r'");
    CHECK_CONTAINS(dds_last_error(), "position 5");
    CHECK(all_eq(fa, sizeof(fa), 0x44));
    rows[5] = g_rows[5];
    e[1].kind = DDS_READ_FIXED;
    CHECK_RC(dds_store_read_vars(s, NULL, e, 2, rows, NB), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "'r' is ragged");
    e[1].kind = DDS_READ_RAGGED;
    e[0].kind = DDS_READ_RAGGED;
    CHECK_RC(dds_store_read_vars(s, NULL, e, 2, rows, NB), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "fixed-size rows");
    e[0].kind = 9;
    CHECK_RC(dds_store_read_vars(s, NULL, e, 2, rows, NB), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "unknown kind");
    e[0].kind = DDS_READ_FIXED;
    e[1].dst.row_bytes = 8;
    CHECK_RC(dds_store_read_vars(s, NULL, e, 2, rows, NB), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "variable 'r'");
    CHECK(all_eq(fa, sizeof(fa), 0x44));
    e[1].dst.row_bytes = 16;
    /* still usable; the one-variable calls give the same bytes */
    CHECK_OK(dds_store_read_vars(s, NULL, e, NE, rows, NB));
    CHECK_MEMEQ(fa, wa, sizeof(wa));
    {
        int64_t got = 0, l1[NB];
        dds_buf_t b1 = buf_of(pr, 64, 16, DDS_DTYPE_INT64, 8);
        memset(pr, 0, sizeof(pr));
        CHECK_OK(dds_store_ragged_get_batch(s, NULL, "r", &b1, rows, NB, l1,
                                            &got));
        CHECK_EQ(got, tr);
        CHECK_MEMEQ(pr, wr, (size_t)tr * 16);
    }
    barrier(s);
    CHECK_OK(dds_store_free(s));
    dds_store_destroy(s);
}

static void test_fixed_and_ragged_in_one_call(void)
{
    vars_arg_t a = {1};
    run_world_multi(3, mixed_rank, &a, 0, 0, 1);
    run_world_multi(3, mixed_rank, &a, 0, 16, 1); /* split reads */
    /* own rows through the transport too (no LOCAL_SELF) */
    run_world_multi(3, mixed_rank, &a, DDS_TRANSPORT_CAP_THREAD_SAFE, 0, 1);
    a.read_multi = 0;
    run_world_multi(3, mixed_rank, &a, 0, 0, 0);
}

int main(void)
{
    unsetenv("DDSTORE_MAX_READ_BYTES");
    unsetenv("DDSTORE_MERGE_ROW_BYTES");
    RUN_TEST(test_rows_and_transport_calls);
    RUN_TEST(test_errors_before_any_byte);
    RUN_TEST(test_fixed_and_ragged_in_one_call);
    return CHECK_SUMMARY();
}
