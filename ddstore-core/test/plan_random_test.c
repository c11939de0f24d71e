/* plan.h: randomized planner check against a naive reference.
 *
 * Each case draws a layout (1-9 ranks, zero-row shards included), a row
 * size, max_read_bytes, merge limit and a batch from one of several shapes
 * (uniform, sorted, reversed, clustered runs, heavy repeats, all equal,
 * windows), checks the plan's structure, executes it over real shards and
 * compares every byte with a direct per-row copy.  Ranges too, and every
 * fourth case with DDS_PLAN_DIRECT (no staging, no copies). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ddstore/plan.h"
#include "plan_check.h"

static uint64_t rng_state = 0x1234567ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int64_t rnd_below(int64_t n)
{
    return n <= 0 ? 0 : (int64_t)(rnd() % (uint64_t)n);
}

static void fill_batch(int64_t *rows, size_t n, int64_t total, int shape)
{
    switch (shape) {
    case 0: /* uniform */
        for (size_t i = 0; i < n; i++)
            rows[i] = rnd_below(total);
        break;
    case 1: /* sorted ascending, maybe with repeats */
        for (size_t i = 0; i < n; i++)
            rows[i] = rnd_below(total);
        for (size_t i = 1; i < n; i++)
            for (size_t j = i; j > 0 && rows[j - 1] > rows[j]; j--) {
                int64_t t = rows[j];
                rows[j] = rows[j - 1];
                rows[j - 1] = t;
            }
        break;
    case 2: { /* consecutive range, reversed */
        int64_t s = rnd_below(total);
        for (size_t i = 0; i < n; i++)
            rows[i] = (s + (int64_t)(n - 1 - i)) % total;
        break;
    }
    case 3: /* clustered runs, shuffled */
        for (size_t i = 0; i < n;) {
            int64_t s = rnd_below(total);
            size_t len = 1 + (size_t)rnd_below(8);
            for (size_t k = 0; k < len && i < n; k++, i++)
                rows[i] = (s + (int64_t)k) % total;
        }
        for (size_t i = n; i > 1; i--) {
            size_t j = (size_t)rnd_below((int64_t)i);
            int64_t t = rows[i - 1];
            rows[i - 1] = rows[j];
            rows[j] = t;
        }
        break;
    case 4: /* heavy repeats from a few rows */
        for (size_t i = 0; i < n; i++)
            rows[i] = rnd_below(total < 4 ? total : 4) * (total / 4 + 1) %
                      total;
        break;
    case 5: /* all equal */
        for (size_t i = 0; i < n; i++)
            rows[i] = total - 1;
        break;
    default: { /* windows: starts s, rows s..s+w-1 (WindowedDataset) */
        size_t w = 1 + (size_t)rnd_below(4);
        for (size_t i = 0; i < n;) {
            int64_t s = rnd_below(total);
            for (size_t k = 0; k < w && i < n; k++, i++)
                rows[i] = (s + (int64_t)k) % total;
        }
        break;
    }
    }
}

static int run_case(int iter, dds_plan_t *plan)
{
    static const size_t row_sizes[] = {1, 2, 3, 4, 8, 13, 64, 100, 1000, 3136};
    int64_t off[10];
    int nranks = 1 + (int)rnd_below(9);
    size_t rb, n, maxr, merge;
    int64_t *rows, total;
    unsigned char **shards, *dst, *ref, *staging;
    dds_plan_params_t p;
    char why[256];
    int shape, bad = 0, is_range = rnd_below(5) == 0;
    int64_t start = 0;

    off[0] = 0;
    for (int r = 0; r < nranks; r++)
        off[r + 1] = off[r] + (rnd_below(4) == 0 ? 0 : rnd_below(40));
    if (off[nranks] == 0)
        off[nranks] = 1 + rnd_below(5);
    total = off[nranks];
    rb = row_sizes[rnd_below(sizeof(row_sizes) / sizeof(row_sizes[0]))];
    if (rnd_below(50) == 0)
        rb = 70000; /* above the default merge limit */
    switch (rnd_below(4)) {
    case 0: maxr = 0; break;
    case 1: maxr = 1 + (size_t)rnd_below((int64_t)rb * 3); break;
    case 2: maxr = rb * (1 + (size_t)rnd_below(4)); break;
    default: maxr = 1 + (size_t)rnd_below(64); break;
    }
    merge = rnd_below(3) == 0 ? (size_t)rnd_below((int64_t)rb * 2) : 0;
    n = (size_t)rnd_below(rnd_below(10) == 0 ? 600 : 140);
    shape = (int)rnd_below(7);

    memset(&p, 0, sizeof(p));
    p.nranks = nranks;
    p.offsets = off;
    p.row_bytes = rb;
    p.max_read_bytes = maxr;
    p.merge_row_bytes_max = merge;
    if (iter % 4 == 3) { /* device destinations: no staging, no copies */
        p.field_mask = DDS_PLAN_PARAM_FLAGS;
        p.flags = DDS_PLAN_DIRECT;
    }

    if (is_range) {
        n = (size_t)rnd_below(total + 1);
        start = rnd_below(total - (int64_t)n + 1);
    }
    rows = malloc((n + 1) * sizeof(int64_t));
    if (is_range) {
        for (size_t i = 0; i < n; i++)
            rows[i] = start + (int64_t)i;
        CHECK_OK(dds_plan_range(&p, start, (int64_t)n, plan));
    } else {
        fill_batch(rows, n, total, shape);
        CHECK_OK(dds_plan_batch(&p, rows, n, plan));
    }
    if (pc_verify(&p, n, plan, 1, why, sizeof(why)) != 0) {
        CHECK_FAIL_("case %d (%s%s, %d ranks, rb %zu, n %zu, shape %d, max "
                    "%zu, merge %zu): %s",
                    iter, is_range ? "range" : "batch",
                    p.flags & DDS_PLAN_DIRECT ? " direct" : "", nranks, rb, n,
                    shape, maxr, merge, why);
        bad = 1;
    }
    if (!is_range && plan->nrows_unique > n)
        bad = 1;
    if (!bad) {
        shards = pc_make_shards(off, nranks, rb);
        dst = malloc(n * rb + 1);
        ref = malloc(n * rb + 1);
        staging = malloc(plan->staging_bytes + 1);
        memset(dst, 0xEE, n * rb);
        pc_execute(plan, shards, dst, staging);
        for (size_t i = 0; i < n; i++) { /* naive reference */
            int o = 0;
            int64_t l = 0;
            CHECK_OK(dds_layout_locate(off, nranks, rows[i], &o, &l));
            memcpy(ref + i * rb, shards[o] + (size_t)l * rb, rb);
        }
        if (n > 0 && memcmp(dst, ref, n * rb) != 0) {
            CHECK_FAIL_("case %d: result differs from the reference (%d "
                        "ranks, rb %zu, n %zu, shape %d, max %zu, merge %zu)",
                        iter, nranks, rb, n, shape, maxr, merge);
            bad = 1;
        }
        free(dst);
        free(ref);
        free(staging);
        pc_free_shards(shards, nranks);
    }
    free(rows);
    return bad;
}

static void test_random_cases(void)
{
    dds_plan_t plan;
    int fails = 0;
    dds_plan_init(&plan);
    for (int iter = 0; iter < 6000 && fails < 5; iter++)
        fails += run_case(iter, &plan);
    dds_plan_fini(&plan);
}

/* Same, with a fresh plan every time (no state carried over). */
static void test_random_fresh_plans(void)
{
    int fails = 0;
    for (int iter = 0; iter < 1000 && fails < 5; iter++) {
        dds_plan_t plan;
        dds_plan_init(&plan);
        fails += run_case(iter, &plan);
        dds_plan_fini(&plan);
    }
}

int main(void)
{
    RUN_TEST(test_random_cases);
    RUN_TEST(test_random_fresh_plans);
    return CHECK_SUMMARY();
}
