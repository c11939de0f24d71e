/* plan.h: dds_layout_locate. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "ddstore/plan.h"

static void expect(const int64_t *off, int n, int64_t row, int owner,
                   int64_t local)
{
    int o = -1;
    int64_t l = -1;
    CHECK_OK(dds_layout_locate(off, n, row, &o, &l));
    CHECK_EQ(o, owner);
    CHECK_EQ(l, local);
}

static void test_simple(void)
{
    const int64_t off[] = {0, 10, 20, 25};
    expect(off, 3, 0, 0, 0);
    expect(off, 3, 9, 0, 9);
    expect(off, 3, 10, 1, 0);
    expect(off, 3, 19, 1, 9);
    expect(off, 3, 20, 2, 0);
    expect(off, 3, 24, 2, 4);
    CHECK_RC(dds_layout_locate(off, 3, 25, NULL, NULL), -DDS_ERANGE);
    CHECK_CONTAINS(dds_last_error(), "25");
    CHECK_RC(dds_layout_locate(off, 3, -1, NULL, NULL), -DDS_ERANGE);
    CHECK_RC(dds_layout_locate(off, 3, INT64_MIN, NULL, NULL), -DDS_ERANGE);
    CHECK_RC(dds_layout_locate(NULL, 3, 0, NULL, NULL), -DDS_EINVAL);
    CHECK_RC(dds_layout_locate(off, 0, 0, NULL, NULL), -DDS_EINVAL);
}

static void test_zero_row_shards(void)
{
    /* ranks 0, 2, 3 and 6 are empty */
    const int64_t off[] = {0, 0, 5, 5, 5, 7, 12, 12};
    expect(off, 7, 0, 1, 0);
    expect(off, 7, 4, 1, 4);
    expect(off, 7, 5, 4, 0);
    expect(off, 7, 6, 4, 1);
    expect(off, 7, 7, 5, 0);
    expect(off, 7, 11, 5, 4);
    CHECK_RC(dds_layout_locate(off, 7, 12, NULL, NULL), -DDS_ERANGE);
    /* everything empty */
    const int64_t none[] = {0, 0, 0};
    CHECK_RC(dds_layout_locate(none, 2, 0, NULL, NULL), -DDS_ERANGE);
}

static void test_one_rank_and_big_rows(void)
{
    const int64_t one[] = {0, 3};
    const int64_t big[] = {0, 3000000000LL, 3000000000LL, 9000000000LL,
                           (int64_t)1 << 40};
    expect(one, 1, 2, 0, 2);
    expect(big, 4, 2147483647LL, 0, 2147483647LL);
    expect(big, 4, 2999999999LL, 0, 2999999999LL);
    expect(big, 4, 3000000000LL, 2, 0);
    expect(big, 4, 4294967296LL + 5, 2, 4294967296LL + 5 - 3000000000LL);
    expect(big, 4, 9000000000LL, 3, 0);
    expect(big, 4, ((int64_t)1 << 40) - 1, 3,
           ((int64_t)1 << 40) - 1 - 9000000000LL);
}

static void test_random_against_linear(void)
{
    enum { N = 257 };
    static int64_t off[N + 1];
    srand(7);
    for (int iter = 0; iter < 50; iter++) {
        int n = 1 + rand() % N;
        off[0] = 0;
        for (int r = 0; r < n; r++)
            off[r + 1] = off[r] + (rand() % 3 == 0 ? 0 : rand() % 100);
        for (int64_t row = 0; row < off[n]; row += 1 + rand() % 7) {
            int want = -1;
            for (int r = 0; r < n; r++)
                if (row >= off[r] && row < off[r + 1])
                    want = r;
            expect(off, n, row, want, row - off[want]);
        }
        if (CHECK_FAILURES() > 0)
            break;
    }
}

int main(void)
{
    RUN_TEST(test_simple);
    RUN_TEST(test_zero_row_shards);
    RUN_TEST(test_one_rank_and_big_rows);
    RUN_TEST(test_random_against_linear);
    return CHECK_SUMMARY();
}
