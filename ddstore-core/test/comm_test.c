/* comm.h: the self communicator and collective error agreement, over the
 * fake in-process world. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "ddstore/comm.h"
#include "fake_world.h"

static void test_self(void)
{
    dds_comm_t c;
    int64_t v[2] = {5, -3};
    char send[4] = "abc", recv[4] = {0};
    CHECK_OK(dds_comm_self(&c));
    CHECK_EQ(c.rank, 0);
    CHECK_EQ(c.size, 1);
    CHECK_STREQ(c.ops->name, "self");
    CHECK_OK(c.ops->allgather(c.ctx, send, 4, recv));
    CHECK_STREQ(recv, "abc");
    CHECK_OK(c.ops->allreduce_i64(c.ctx, v, 2, DDS_REDUCE_SUM));
    CHECK_EQ(v[0], 5);
    CHECK_OK(c.ops->barrier(c.ctx));
    CHECK_OK(dds_comm_agree(&c, 0));
    dds_error(-DDS_EINVAL, "only me");
    CHECK_RC(dds_comm_agree(&c, -DDS_EINVAL), -DDS_EINVAL);
    CHECK_STREQ(dds_last_error(), "only me");
    CHECK_RC(dds_comm_agree(&c, DDS_ERANGE), -DDS_ERANGE); /* sign fixed */
    dds_comm_destroy(&c);
    dds_comm_destroy(&c);
    dds_comm_destroy(NULL);
    CHECK_RC(dds_comm_self(NULL), -DDS_EINVAL);
    CHECK_RC(dds_comm_agree(NULL, 0), -DDS_EINVAL);
}

/* Which ranks fail (bit mask), with which code. */
typedef struct agree_case {
    unsigned fail_mask;
    int codes[FW_MAX_RANKS];
    int want_code;
    int want_rank;
} agree_case_t;

static void agree_rank(fake_world_t *w, int rank, void *arg)
{
    agree_case_t *c = arg;
    dds_comm_t comm = fw_comm(w, rank);
    int rc = 0, got;
    char want[128];

    dds_error_clear();
    if (c->fail_mask & (1u << rank))
        rc = dds_error(c->codes[rank], "rank %d could not do it", rank);
    got = dds_comm_agree(&comm, rc);
    CHECK_EQ(got, c->want_code);
    if (c->want_code == 0) {
        CHECK_STREQ(dds_last_error(), "");
    } else if (rank == c->want_rank) {
        /* the failing rank keeps its own detail */
        snprintf(want, sizeof(want), "rank %d could not do it", rank);
        CHECK_STREQ(dds_last_error(), want);
    } else {
        snprintf(want, sizeof(want), "rank %d: rank %d could not do it",
                 c->want_rank, c->want_rank);
        CHECK_STREQ(dds_last_error(), want);
    }
    /* a second agreement right after works and succeeds */
    CHECK_OK(dds_comm_agree(&comm, 0));
    dds_comm_destroy(&comm);
}

static void run_agree(int n, agree_case_t *c)
{
    fake_world_t w;
    fw_init(&w, n);
    fw_run(&w, agree_rank, c);
    CHECK_EQ(atomic_load(&w.protocol_errors), 0);
    CHECK_EQ(atomic_load(&w.comms_destroyed), n);
    fw_fini(&w);
}

static void test_agree_all_ok(void)
{
    agree_case_t c;
    memset(&c, 0, sizeof(c));
    run_agree(4, &c);
    run_agree(1, &c);
}

static void test_agree_one_fails(void)
{
    for (int n = 2; n <= 5; n++) {
        for (int r = 0; r < n; r++) {
            agree_case_t c;
            memset(&c, 0, sizeof(c));
            c.fail_mask = 1u << r;
            c.codes[r] = -DDS_EINVAL;
            c.want_code = -DDS_EINVAL;
            c.want_rank = r;
            run_agree(n, &c);
        }
    }
}

static void test_agree_lowest_rank_wins(void)
{
    agree_case_t c;
    memset(&c, 0, sizeof(c));
    c.fail_mask = (1u << 1) | (1u << 3) | (1u << 5);
    c.codes[1] = -DDS_ETYPE;
    c.codes[3] = -DDS_ENOMEM;
    c.codes[5] = -DDS_EINVAL;
    c.want_code = -DDS_ETYPE;
    c.want_rank = 1;
    run_agree(6, &c);
}

static void long_detail_rank(fake_world_t *w, int rank, void *arg)
{
    dds_comm_t comm = fw_comm(w, rank);
    char big[600];
    int rc = 0;
    (void)arg;
    memset(big, 'z', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    if (rank == 2)
        rc = dds_error(-DDS_EIO, "%s", big);
    CHECK_RC(dds_comm_agree(&comm, rc), -DDS_EIO);
    CHECK(strlen(dds_last_error()) < 512);
    if (rank != 2)
        CHECK(strncmp(dds_last_error(), "rank 2: zzzz", 12) == 0);
    dds_comm_destroy(&comm);
}

static void test_agree_long_detail(void)
{
    fake_world_t w;
    fw_init(&w, 3);
    fw_run(&w, long_detail_rank, NULL);
    fw_fini(&w);
}

static void exchange_fail_rank(fake_world_t *w, int rank, void *arg)
{
    dds_comm_t comm = fw_comm(w, rank);
    (void)arg;
    /* the first exchange fails on every rank: its error is returned */
    CHECK_RC(dds_comm_agree(&comm, 0), -DDS_EIO);
    CHECK_CONTAINS(dds_last_error(), "injected exchange failure");
    CHECK_OK(dds_comm_agree(&comm, 0));
    dds_comm_destroy(&comm);
}

static void test_agree_exchange_fails(void)
{
    fake_world_t w;
    fw_init(&w, 3);
    w.fail_exchange_at = 1;
    fw_run(&w, exchange_fail_rank, NULL);
    fw_fini(&w);
}

int main(void)
{
    RUN_TEST(test_self);
    RUN_TEST(test_agree_all_ok);
    RUN_TEST(test_agree_one_fails);
    RUN_TEST(test_agree_lowest_rank_wins);
    RUN_TEST(test_agree_long_detail);
    RUN_TEST(test_agree_exchange_fails);
    return CHECK_SUMMARY();
}
