/* plan.h: planner edge cases. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ddstore/plan.h"
#include "plan_check.h"

static dds_plan_params_t params(const int64_t *off, int n, size_t rb,
                                size_t maxr, size_t merge)
{
    dds_plan_params_t p;
    memset(&p, 0, sizeof(p));
    p.nranks = n;
    p.offsets = off;
    p.row_bytes = rb;
    p.max_read_bytes = maxr;
    p.merge_row_bytes_max = merge;
    return p;
}

/* Verify the structure, then execute over real shards and compare. */
static void verify_and_run(const dds_plan_params_t *p, const int64_t *rows,
                           size_t n, const dds_plan_t *plan)
{
    char why[256];
    unsigned char **shards, *dst, *staging;
    int rc = pc_verify(p, n, plan, 1, why, sizeof(why));
    if (rc != 0) {
        CHECK_FAIL_("plan invalid: %s", why);
        return;
    }
    shards = pc_make_shards(p->offsets, p->nranks, p->row_bytes);
    dst = calloc(n * p->row_bytes + 1, 1);
    staging = calloc(plan->staging_bytes + 1, 1);
    pc_execute(plan, shards, dst, staging);
    for (size_t i = 0; i < n; i++)
        for (size_t b = 0; b < p->row_bytes; b++)
            if (dst[i * p->row_bytes + b] != pc_pattern(rows[i], b)) {
                CHECK_FAIL_("dst row %zu byte %zu wrong (row %lld)", i, b,
                            (long long)rows[i]);
                i = n;
                break;
            }
    free(dst);
    free(staging);
    pc_free_shards(shards, p->nranks);
}

static void test_empty_batch(void)
{
    const int64_t off[] = {0, 4, 8};
    dds_plan_params_t p = params(off, 2, 16, 0, 0);
    dds_plan_t plan;
    int64_t one = 3;
    dds_plan_init(&plan);
    CHECK_OK(dds_plan_batch(&p, &one, 1, &plan)); /* leave state behind */
    CHECK_OK(dds_plan_batch(&p, NULL, 0, &plan));
    CHECK_EQ(plan.nops, 0);
    CHECK_EQ(plan.ncopies, 0);
    CHECK_EQ(plan.nrows, 0);
    CHECK_EQ(plan.nrows_unique, 0);
    CHECK_EQ(plan.staging_bytes, 0);
    for (int r = 0; r <= 2; r++)
        CHECK_EQ(dds_plan_owner_first(&plan, r), 0);
    /* empty range, even at the very end */
    CHECK_OK(dds_plan_range(&p, 8, 0, &plan));
    CHECK_EQ(plan.nops, 0);
    dds_plan_fini(&plan);
    dds_plan_fini(&plan); /* fini twice is fine */
}

static void test_one_owner(void)
{
    const int64_t off[] = {0, 4, 12, 20};
    dds_plan_params_t p = params(off, 3, 8, 0, 0);
    const int64_t rows[] = {6, 7, 8, 9};
    dds_plan_t plan;
    dds_plan_init(&plan);
    CHECK_OK(dds_plan_batch(&p, rows, 4, &plan));
    CHECK_EQ(plan.nops, 1);
    CHECK_EQ(plan.ops[0].owner, 1);
    CHECK_EQ(plan.ops[0].staged, 0);
    CHECK_EQ(plan.ops[0].src_offset, 2 * 8);
    CHECK_EQ(plan.ops[0].len, 4 * 8);
    CHECK_EQ(plan.ops[0].dst_offset, 0);
    CHECK_EQ(plan.ncopies, 0);
    CHECK_EQ(dds_plan_owner_first(&plan, 0), 0);
    CHECK_EQ(dds_plan_owner_first(&plan, 1), 0);
    CHECK_EQ(dds_plan_owner_first(&plan, 2), 1);
    CHECK_EQ(dds_plan_owner_first(&plan, 3), 1);
    CHECK_EQ(plan.nrows_unique, 4);
    verify_and_run(&p, rows, 4, &plan);
    dds_plan_fini(&plan);
}

static void test_every_owner(void)
{
    const int64_t off[] = {0, 3, 3, 7, 8, 8, 12};
    dds_plan_params_t p = params(off, 6, 5, 0, 0);
    int64_t rows[12];
    dds_plan_t plan;
    for (int i = 0; i < 12; i++)
        rows[i] = i;
    dds_plan_init(&plan);
    CHECK_OK(dds_plan_batch(&p, rows, 12, &plan));
    CHECK_EQ(plan.nops, 4); /* one per non-empty owner */
    CHECK_EQ(plan.ops[0].owner, 0);
    CHECK_EQ(plan.ops[1].owner, 2);
    CHECK_EQ(plan.ops[2].owner, 3);
    CHECK_EQ(plan.ops[3].owner, 5);
    CHECK_EQ(plan.ops[1].len, 4 * 5);
    CHECK_EQ(plan.ops[1].dst_offset, 3 * 5);
    CHECK_EQ(dds_plan_owner_first(&plan, 1), 1);
    CHECK_EQ(dds_plan_owner_first(&plan, 2), 1);
    CHECK_EQ(dds_plan_owner_first(&plan, 5), 3);
    CHECK_EQ(dds_plan_owner_first(&plan, 6), 4);
    verify_and_run(&p, rows, 12, &plan);
    /* the same as a range */
    CHECK_OK(dds_plan_range(&p, 0, 12, &plan));
    CHECK_EQ(plan.nops, 4);
    verify_and_run(&p, rows, 12, &plan);
    dds_plan_fini(&plan);
}

static void test_unsorted_staged(void)
{
    const int64_t off[] = {0, 10};
    dds_plan_params_t p = params(off, 1, 4, 0, 0);
    const int64_t rows[] = {5, 3, 4};
    dds_plan_t plan;
    dds_plan_init(&plan);
    CHECK_OK(dds_plan_batch(&p, rows, 3, &plan));
    /* rows 3,4,5 adjacent in the shard, slots 1,2,0: one staged read */
    CHECK_EQ(plan.nops, 1);
    CHECK_EQ(plan.ops[0].staged, 1);
    CHECK_EQ(plan.ops[0].src_offset, 12);
    CHECK_EQ(plan.ops[0].len, 12);
    CHECK_EQ(plan.staging_bytes, 12);
    /* rows 3,4 -> slots 1,2 merge into one copy; row 5 -> slot 0 */
    CHECK_EQ(plan.ncopies, 2);
    CHECK_EQ(plan.copies[0].from_staging, 1);
    CHECK_EQ(plan.copies[0].src_offset, 0);
    CHECK_EQ(plan.copies[0].dst_offset, 4);
    CHECK_EQ(plan.copies[0].len, 8);
    CHECK_EQ(plan.copies[1].src_offset, 8);
    CHECK_EQ(plan.copies[1].dst_offset, 0);
    verify_and_run(&p, rows, 3, &plan);
    dds_plan_fini(&plan);
}

static void test_duplicates(void)
{
    const int64_t off[] = {0, 6, 12};
    dds_plan_params_t p = params(off, 2, 3, 0, 0);
    const int64_t same[] = {7, 7, 7};
    const int64_t pairs[] = {2, 9, 2, 9};
    const int64_t sorted_rep[] = {1, 1, 2, 2, 3};
    dds_plan_t plan;
    dds_plan_init(&plan);

    CHECK_OK(dds_plan_batch(&p, same, 3, &plan));
    CHECK_EQ(plan.nops, 1);
    CHECK_EQ(plan.nrows_unique, 1);
    CHECK_EQ(plan.ncopies, 2);
    CHECK_EQ(plan.copies[0].from_staging, 0);
    CHECK_EQ(plan.copies[0].src_offset, 0);
    CHECK_EQ(plan.copies[0].dst_offset, 3);
    CHECK_EQ(plan.copies[1].dst_offset, 6);
    verify_and_run(&p, same, 3, &plan);

    CHECK_OK(dds_plan_batch(&p, pairs, 4, &plan));
    CHECK_EQ(plan.nops, 2);
    CHECK_EQ(plan.nrows_unique, 2);
    CHECK_EQ(plan.ncopies, 1); /* slots 0,1 -> 2,3 in one copy */
    CHECK_EQ(plan.copies[0].src_offset, 0);
    CHECK_EQ(plan.copies[0].dst_offset, 6);
    CHECK_EQ(plan.copies[0].len, 6);
    verify_and_run(&p, pairs, 4, &plan);

    CHECK_OK(dds_plan_batch(&p, sorted_rep, 5, &plan));
    CHECK_EQ(plan.nops, 1); /* rows 1..3 once, through staging */
    CHECK_EQ(plan.ops[0].staged, 1);
    CHECK_EQ(plan.nrows_unique, 3);
    verify_and_run(&p, sorted_rep, 5, &plan);
    dds_plan_fini(&plan);
}

/* DDS_PLAN_DIRECT (device destinations): no staging, no copies; a repeat
 * is read again and starts a new run, which later rows still join. */
static void test_direct(void)
{
    const int64_t off[] = {0, 6, 12};
    dds_plan_params_t p = params(off, 2, 3, 0, 0);
    const int64_t same[] = {7, 7, 7};
    const int64_t sorted_rep[] = {1, 1, 2, 2, 3};
    const int64_t mixed[] = {9, 2, 9, 3, 2, 10, 4};
    dds_plan_t plan;
    dds_plan_init(&plan);
    p.field_mask = DDS_PLAN_PARAM_FLAGS;
    p.flags = DDS_PLAN_DIRECT;

    CHECK_OK(dds_plan_batch(&p, same, 3, &plan));
    CHECK_EQ(plan.nops, 3);
    CHECK_EQ(plan.ncopies, 0);
    CHECK_EQ(plan.staging_bytes, 0);
    CHECK_EQ(plan.nrows_unique, 1);
    for (size_t i = 0; i < plan.nops; i++) {
        CHECK_EQ(plan.ops[i].owner, 1);
        CHECK_EQ(plan.ops[i].src_offset, 3);
        CHECK_EQ(plan.ops[i].dst_offset, 3 * i);
    }
    verify_and_run(&p, same, 3, &plan);

    CHECK_OK(dds_plan_batch(&p, sorted_rep, 5, &plan));
    CHECK_EQ(plan.nops, 3); /* 1 -> 0; 1,2 -> 1,2; 2,3 -> 3,4 */
    CHECK_EQ(plan.ncopies, 0);
    CHECK_EQ(plan.nrows_unique, 3);
    CHECK_EQ(plan.ops[1].src_offset, 3);
    CHECK_EQ(plan.ops[1].len, 6);
    CHECK_EQ(plan.ops[1].dst_offset, 3);
    CHECK_EQ(plan.ops[2].src_offset, 6);
    CHECK_EQ(plan.ops[2].dst_offset, 9);
    verify_and_run(&p, sorted_rep, 5, &plan);

    CHECK_OK(dds_plan_batch(&p, mixed, 7, &plan));
    CHECK_EQ(plan.ncopies, 0);
    CHECK_EQ(plan.nrows_unique, 5);
    verify_and_run(&p, mixed, 7, &plan);

    p.max_read_bytes = 4; /* rows of 3 bytes, reads split at 4 */
    CHECK_OK(dds_plan_batch(&p, mixed, 7, &plan));
    CHECK_EQ(plan.ncopies, 0);
    verify_and_run(&p, mixed, 7, &plan);
    dds_plan_fini(&plan);
}

static void test_zero_row_shards(void)
{
    const int64_t off[] = {0, 0, 4, 4, 8, 8};
    dds_plan_params_t p = params(off, 5, 2, 0, 0);
    const int64_t rows[] = {7, 0, 4, 3, 5};
    dds_plan_t plan;
    dds_plan_init(&plan);
    CHECK_OK(dds_plan_batch(&p, rows, 5, &plan));
    for (size_t i = 0; i < plan.nops; i++)
        CHECK(plan.ops[i].owner == 1 || plan.ops[i].owner == 3);
    CHECK_EQ(dds_plan_owner_first(&plan, 0), 0);
    CHECK_EQ(dds_plan_owner_first(&plan, 1), 0);
    CHECK_EQ(dds_plan_owner_first(&plan, 4), plan.nops);
    CHECK_EQ(dds_plan_owner_first(&plan, 5), plan.nops);
    verify_and_run(&p, rows, 5, &plan);
    CHECK_OK(dds_plan_range(&p, 2, 5, &plan));
    CHECK_EQ(plan.nops, 2);
    CHECK_EQ(plan.ops[0].owner, 1);
    CHECK_EQ(plan.ops[1].owner, 3);
    {
        const int64_t r2[] = {2, 3, 4, 5, 6};
        verify_and_run(&p, r2, 5, &plan);
    }
    dds_plan_fini(&plan);
}

static void test_huge_rows_split(void)
{
    /* 10 MiB rows, 4 MiB reads: planning only, nothing allocated */
    const size_t rb = 10u << 20, mx = 4u << 20;
    const int64_t off[] = {0, 100, 200};
    dds_plan_params_t p = params(off, 2, rb, mx, 0);
    const int64_t one[] = {150};
    const int64_t adj[] = {10, 11};
    const int64_t scat[] = {11, 50, 10};
    dds_plan_t plan;
    char why[256];
    dds_plan_init(&plan);

    CHECK_OK(dds_plan_batch(&p, one, 1, &plan));
    CHECK_EQ(plan.nops, 3);
    CHECK_EQ(plan.ops[0].len, mx);
    CHECK_EQ(plan.ops[1].len, mx);
    CHECK_EQ(plan.ops[2].len, rb - 2 * mx);
    CHECK_EQ(plan.ops[0].src_offset, 50 * (int64_t)rb);
    CHECK_EQ(plan.ops[2].src_offset, 50 * (int64_t)rb + 2 * (int64_t)mx);
    CHECK_EQ(plan.ops[2].dst_offset, 2 * mx);

    CHECK_OK(dds_plan_batch(&p, adj, 2, &plan));
    CHECK_EQ(plan.nops, 5); /* one 20 MiB run in 5 pieces */
    CHECK_OK(pc_verify(&p, 2, &plan, 1, why, sizeof(why)));

    /* adjacent rows 10,11 with scattered slots 2,0; rows > merge limit:
     * never staged, one direct read (3 pieces) per row */
    CHECK_OK(dds_plan_batch(&p, scat, 3, &plan));
    CHECK_EQ(plan.staging_bytes, 0);
    CHECK_EQ(plan.ncopies, 0);
    CHECK_EQ(plan.nops, 9);
    for (size_t i = 0; i < plan.nops; i++)
        CHECK_EQ(plan.ops[i].staged, 0);
    if (pc_verify(&p, 3, &plan, 1, why, sizeof(why)) != 0)
        CHECK_FAIL_("%s", why);

    /* big rows: sub-runs with consecutive slots are still merged */
    {
        const dds_plan_params_t q = params(off, 2, 100000, 0, 0);
        const int64_t rows[] = {20, 21, 22, 5, 23, 24};
        CHECK_OK(dds_plan_batch(&q, rows, 6, &plan));
        /* owner 0: row 5; rows 20,21,22 -> slots 0..2; 23,24 -> 4,5 */
        CHECK_EQ(plan.nops, 3);
        CHECK_EQ(plan.staging_bytes, 0);
        verify_and_run(&q, rows, 6, &plan);
    }
    dds_plan_fini(&plan);
}

static void test_max_read_splits(void)
{
    const int64_t off[] = {0, 20, 40};
    const int64_t rows[] = {3, 4, 5, 6, 30, 31, 39, 19};
    const int64_t scattered[] = {6, 4, 5, 3};
    dds_plan_t plan;
    dds_plan_init(&plan);
    for (size_t mx = 1; mx <= 40; mx++) {
        dds_plan_params_t p = params(off, 2, 7, mx, 0);
        CHECK_OK(dds_plan_batch(&p, rows, 8, &plan));
        verify_and_run(&p, rows, 8, &plan);
        CHECK_OK(dds_plan_batch(&p, scattered, 4, &plan));
        verify_and_run(&p, scattered, 4, &plan);
        CHECK_OK(dds_plan_range(&p, 15, 10, &plan));
        {
            int64_t r[10];
            for (int i = 0; i < 10; i++)
                r[i] = 15 + i;
            verify_and_run(&p, r, 10, &plan);
        }
    }
    {   /* 4 rows of 7 bytes at max 10: 28 bytes -> 10 + 10 + 8 */
        dds_plan_params_t p = params(off, 2, 7, 10, 0);
        const int64_t run[] = {3, 4, 5, 6};
        CHECK_OK(dds_plan_batch(&p, run, 4, &plan));
        CHECK_EQ(plan.nops, 3);
        CHECK_EQ(plan.ops[2].len, 8);
    }
    dds_plan_fini(&plan);
}

static void test_merge_row_limit(void)
{
    const int64_t off[] = {0, 10};
    const int64_t rows[] = {1, 0, 2};
    dds_plan_t plan;
    dds_plan_init(&plan);
    {   /* rows of 100 B > limit 50: no staging */
        dds_plan_params_t p = params(off, 1, 100, 0, 50);
        CHECK_OK(dds_plan_batch(&p, rows, 3, &plan));
        CHECK_EQ(plan.staging_bytes, 0);
        CHECK_EQ(plan.nops, 3); /* slots 1, 0, 2: no two consecutive */
        verify_and_run(&p, rows, 3, &plan);
    }
    {   /* limit 100: staged */
        dds_plan_params_t p = params(off, 1, 100, 0, 100);
        CHECK_OK(dds_plan_batch(&p, rows, 3, &plan));
        CHECK_EQ(plan.staging_bytes, 300);
        CHECK_EQ(plan.nops, 1);
        verify_and_run(&p, rows, 3, &plan);
    }
    dds_plan_fini(&plan);
}

static void test_int64_rows_beyond_2g(void)
{
    /* 9e9 rows of 3136 B (28 TB): offsets beyond 4 GiB, planning only */
    const int64_t off[] = {0, 3000000000LL, 6000000000LL, 9000000000LL};
    const size_t rb = 3136;
    dds_plan_params_t p = params(off, 3, rb, 0, 0);
    const int64_t rows[] = {2147483648LL, 2147483647LL, 4000000000LL,
                            2999999999LL, 8999999999LL, 4000000000LL,
                            6000000000LL, 2147483649LL, 0};
    const size_t n = sizeof(rows) / sizeof(rows[0]);
    dds_plan_t plan;
    char why[256];
    int found = 0;
    dds_plan_init(&plan);
    CHECK_OK(dds_plan_batch(&p, rows, n, &plan));
    if (pc_verify(&p, n, &plan, 1, why, sizeof(why)) != 0)
        CHECK_FAIL_("%s", why);
    if (pc_symbolic(&p, rows, n, &plan, why, sizeof(why)) != 0)
        CHECK_FAIL_("%s", why);
    for (size_t i = 0; i < plan.nops; i++)
        if (plan.ops[i].owner == 1 &&
            plan.ops[i].src_offset == (4000000000LL - 3000000000LL) * 3136LL)
            found = 1;
    CHECK(found);
    CHECK_EQ(plan.nrows_unique, n - 1);

    /* range straddling 2^31 and an owner boundary */
    CHECK_OK(dds_plan_range(&p, 2999999990LL, 20, &plan));
    CHECK_EQ(plan.nops, 2);
    CHECK_EQ(plan.ops[0].src_offset, 2999999990LL * 3136LL);
    CHECK_EQ(plan.ops[1].owner, 1);
    CHECK_EQ(plan.ops[1].src_offset, 0);
    CHECK_EQ(plan.ops[1].dst_offset, 10 * rb);

    /* wide packed keys: rows spread over 2^40 (40 + 10 bits, 7 radix
     * passes) */
    {
        const int64_t wide[] = {0, (int64_t)1 << 39, (int64_t)1 << 40};
        dds_plan_params_t q = params(wide, 2, 4, 0, 0);
        enum { M = 1000 };
        static int64_t r[M];
        uint64_t x = 777;
        for (int i = 0; i < M; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            r[i] = (int64_t)(x >> 24);
            if (i % 7 == 3)
                r[i] = r[i / 3];
            if (i % 7 == 4 && r[i - 1] + 1 < ((int64_t)1 << 40))
                r[i] = r[i - 1] + 1;
        }
        CHECK_OK(dds_plan_batch(&q, r, M, &plan));
        if (pc_verify(&q, M, &plan, 1, why, sizeof(why)) != 0)
            CHECK_FAIL_("%s", why);
        if (pc_symbolic(&q, r, M, &plan, why, sizeof(why)) != 0)
            CHECK_FAIL_("%s", why);
    }

    /* keys that do not fit in 64 bits: 2^62 rows of 1 byte, random rows */
    {
        const int64_t wide[] = {0, (int64_t)1 << 61, (int64_t)1 << 62};
        dds_plan_params_t q = params(wide, 2, 1, 0, 0);
        enum { M = 3000 };
        static int64_t r[M];
        uint64_t x = 12345;
        for (int i = 0; i < M; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            r[i] = (int64_t)(x >> 2);
            if (i % 10 == 3)
                r[i] = r[i / 2]; /* some repeats */
            if (i % 10 == 4 && r[i - 1] + 1 < ((int64_t)1 << 62))
                r[i] = r[i - 1] + 1; /* some adjacent */
        }
        CHECK_OK(dds_plan_batch(&q, r, M, &plan));
        if (pc_verify(&q, M, &plan, 1, why, sizeof(why)) != 0)
            CHECK_FAIL_("%s", why);
        if (pc_symbolic(&q, r, M, &plan, why, sizeof(why)) != 0)
            CHECK_FAIL_("%s", why);
    }
    dds_plan_fini(&plan);
}

static void test_errors(void)
{
    const int64_t off[] = {0, 5, 10};
    dds_plan_params_t p = params(off, 2, 4, 0, 0);
    const int64_t bad_hi[] = {1, 2, 3, 10};
    const int64_t bad_neg[] = {1, -1};
    dds_plan_t plan;
    dds_plan_init(&plan);
    CHECK_RC(dds_plan_batch(&p, bad_hi, 4, &plan), -DDS_ERANGE);
    CHECK_CONTAINS(dds_last_error(), "index 10 at position 3");
    CHECK_CONTAINS(dds_last_error(), "[0, 10)");
    CHECK_RC(dds_plan_batch(&p, bad_neg, 2, &plan), -DDS_ERANGE);
    CHECK_CONTAINS(dds_last_error(), "index -1 at position 1");
    CHECK_RC(dds_plan_batch(&p, NULL, 2, &plan), -DDS_EINVAL);
    CHECK_RC(dds_plan_range(&p, -1, 2, &plan), -DDS_ERANGE);
    CHECK_RC(dds_plan_range(&p, 9, 2, &plan), -DDS_ERANGE);
    CHECK_RC(dds_plan_range(&p, 0, -1, &plan), -DDS_ERANGE);
    CHECK_RC(dds_plan_range(&p, 11, 0, &plan), -DDS_ERANGE);
    CHECK_RC(dds_plan_range(&p, INT64_MAX, 1, &plan), -DDS_ERANGE);
    {
        dds_plan_params_t q = p;
        q.row_bytes = 0;
        CHECK_RC(dds_plan_batch(&q, bad_neg, 1, &plan), -DDS_EINVAL);
        q = p;
        q.nranks = 0;
        CHECK_RC(dds_plan_batch(&q, bad_neg, 1, &plan), -DDS_EINVAL);
        q = p;
        q.offsets = NULL;
        CHECK_RC(dds_plan_range(&q, 0, 1, &plan), -DDS_EINVAL);
        CHECK_RC(dds_plan_batch(NULL, bad_neg, 1, &plan), -DDS_EINVAL);
        CHECK_RC(dds_plan_batch(&p, bad_neg, 1, NULL), -DDS_EINVAL);
    }
    {   /* byte offsets overflowing int64 */
        const int64_t big[] = {0, (int64_t)1 << 60};
        dds_plan_params_t q = params(big, 1, 16, 0, 0);
        const int64_t r[] = {1};
        CHECK_RC(dds_plan_batch(&q, r, 1, &plan), -DDS_EINVAL);
        CHECK_CONTAINS(dds_last_error(), "overflow");
    }
    dds_plan_fini(&plan);
}

static void test_reuse_no_realloc(void)
{
    const int64_t off[] = {0, 500, 1000};
    dds_plan_params_t p = params(off, 2, 64, 0, 0);
    int64_t rows[128];
    dds_plan_t plan;
    void *ops, *copies, *scratch;
    dds_plan_init(&plan);
    srand(3);
    for (int i = 0; i < 128; i++)
        rows[i] = rand() % 1000;
    CHECK_OK(dds_plan_batch(&p, rows, 128, &plan));
    ops = plan.ops;
    copies = plan.copies;
    scratch = plan.scratch;
    for (int iter = 0; iter < 100; iter++) {
        for (int i = 0; i < 128; i++)
            rows[i] = rand() % 1000;
        CHECK_OK(dds_plan_batch(&p, rows, 128, &plan));
        verify_and_run(&p, rows, 128, &plan);
        CHECK_OK(dds_plan_batch(&p, rows, 17, &plan));
    }
    CHECK(plan.ops == ops);
    CHECK(plan.copies == copies);
    CHECK(plan.scratch == scratch);
    dds_plan_fini(&plan);
}

static void test_large_batch(void)
{
    /* 200k random rows (radix sort, 6 passes with positions) */
    const int64_t off[] = {0, 300000, 300000, 1000000};
    dds_plan_params_t p = params(off, 3, 2, 0, 0);
    enum { M = 200000 };
    int64_t *rows = malloc(M * sizeof(int64_t));
    uint64_t x = 4242;
    dds_plan_t plan;
    for (int i = 0; i < M; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        rows[i] = (int64_t)(x % 1000000u);
    }
    dds_plan_init(&plan);
    CHECK_OK(dds_plan_batch(&p, rows, M, &plan));
    verify_and_run(&p, rows, M, &plan);
    CHECK(plan.nrows_unique < M); /* birthday repeats */
    dds_plan_fini(&plan);
    free(rows);
}

int main(void)
{
    RUN_TEST(test_empty_batch);
    RUN_TEST(test_one_owner);
    RUN_TEST(test_every_owner);
    RUN_TEST(test_unsorted_staged);
    RUN_TEST(test_duplicates);
    RUN_TEST(test_direct);
    RUN_TEST(test_zero_row_shards);
    RUN_TEST(test_huge_rows_split);
    RUN_TEST(test_max_read_splits);
    RUN_TEST(test_merge_row_limit);
    RUN_TEST(test_int64_rows_beyond_2g);
    RUN_TEST(test_errors);
    RUN_TEST(test_reuse_no_realloc);
    RUN_TEST(test_large_batch);
    return CHECK_SUMMARY();
}
