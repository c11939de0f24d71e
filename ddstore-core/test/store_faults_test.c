/* store.h under faults: a store dropped on one rank while another keeps
 * it, collective calls in a forked child, durations of 0.
 *
 *   - dds_store_destroy_local never enters a collective (the fake
 *     communicator counts every exchange of the rank), so a rank that drops
 *     its store while a peer keeps its own alive goes on with fresh stores;
 *     regions are abandoned (peers keep reading the shard) or, without
 *     region_abandon, released by the transport's destroy.
 *   - collective calls in a forked child fail at once naming the fork and
 *     leave the communicator alone; reads work there; the parent's next
 *     collective call works.
 *   - DDSTORE_READ_TIMEOUT_S <= 0 fails create naming the variable.
 *
 * Tag "fault" (ddstore-core/BUILD): also run by the asan stage.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "ddstore/store.h"
#include "fake_world.h"

#define RB 16
#define ROWS 4

static void fill(unsigned char *p, int rank, int tag)
{
    for (int i = 0; i < ROWS * RB; i++)
        p[i] = (unsigned char)(rank * 64 + tag * 8 + i);
}

static int add_var(dds_store_t *s, const char *name, int rank, int tag)
{
    unsigned char shard[ROWS * RB];
    fill(shard, rank, tag);
    return dds_store_var_add(s, name, shard, ROWS, 1, RB, DDS_DTYPE_RAW, NULL,
                             DDS_ADD_COPY);
}

/* Reads every row of `name` and checks it against fill(). */
static void check_all(dds_store_t *s, const char *name, int nranks, int tag)
{
    unsigned char got[FW_MAX_RANKS * ROWS * RB], want[ROWS * RB];
    dds_buf_t b = {got, (int64_t)nranks * ROWS, RB, DDS_DTYPE_RAW, RB, {0}};
    CHECK_OK(dds_store_get(s, NULL, name, &b, 0));
    for (int r = 0; r < nranks; r++) {
        fill(want, r, tag);
        CHECK_MEMEQ(got + (size_t)r * ROWS * RB, want, ROWS * RB);
    }
}

/* ---- dropped on one rank, kept on the other ---------------------------- */

static void drop_rank(fake_world_t *w, int rank, void *arg)
{
    dds_store_t *a = NULL, *b = NULL;
    (void)arg;
    CHECK_OK(fw_store_create(w, rank, &a));
    CHECK_OK(add_var(a, "x", rank, 1));
    CHECK_OK(add_var(a, "y", rank, 2));
    pthread_barrier_wait(&w->bar);
    if (rank == 0) {
        int before = w->exch_seq[rank];
        dds_store_destroy_local(a); /* rank 1 keeps its store */
        a = NULL;
        CHECK_EQ(w->exch_seq[rank], before); /* no collective step */
    }
    /* every rank goes on with a fresh store: the exchanges match */
    CHECK_OK(fw_store_create(w, rank, &b));
    CHECK_OK(add_var(b, "z", rank, 3));
    CHECK_OK(dds_store_epoch_begin(b));
    check_all(b, "z", w->n, 3);
    if (a != NULL && w->with_abandon)
        check_all(a, "x", w->n, 1); /* rank 0's shard was kept for us */
    CHECK_OK(dds_store_free(b));
    dds_store_destroy(b);
    if (a != NULL) {
        int before = w->exch_seq[rank];
        dds_store_destroy_local(a);
        CHECK_EQ(w->exch_seq[rank], before);
    }
}

static void test_destroy_local(int with_abandon)
{
    fake_world_t w;
    fw_init(&w, 2);
    w.with_abandon = with_abandon;
    fw_run(&w, drop_rank, NULL);
    CHECK_EQ(atomic_load(&w.protocol_errors), 0);
    CHECK_EQ(atomic_load(&w.bad_ops), 0);
    CHECK_EQ(atomic_load(&w.live_regions), 0);
    CHECK_EQ(atomic_load(&w.destroyed), 4);
    CHECK_EQ(atomic_load(&w.comms_destroyed), 4);
    /* two variables on each of two ranks, released locally */
    if (with_abandon) {
        CHECK_EQ(atomic_load(&w.regions_abandoned), 4);
        CHECK_EQ(atomic_load(&w.regions_at_destroy), 0);
    } else {
        CHECK_EQ(atomic_load(&w.regions_abandoned), 0);
        CHECK_EQ(atomic_load(&w.regions_at_destroy), 4);
    }
    fw_fini(&w);
}

static void test_destroy_local_transport_releases(void)
{
    test_destroy_local(0);
}

static void test_destroy_local_abandons(void)
{
    test_destroy_local(1);
}

static void test_destroy_local_null_and_empty(void)
{
    fake_world_t w;
    dds_store_t *s = NULL;
    dds_store_destroy_local(NULL);
    fw_init(&w, 1);
    CHECK_OK(fw_store_create(&w, 0, &s));
    CHECK_OK(add_var(s, "x", 0, 1));
    CHECK_OK(dds_store_free(s)); /* freed: nothing left to release */
    dds_store_destroy_local(s);
    CHECK_EQ(atomic_load(&w.live_regions), 0);
    CHECK_EQ(atomic_load(&w.regions_at_destroy), 0);
    CHECK_EQ(atomic_load(&w.destroyed), 1);
    fw_fini(&w);
}

/* ---- collective calls in a forked child -------------------------------- */

/* In the child: every collective call fails at once, naming the fork,
 * without one exchange; reads work.  Exit status = number of failed
 * checks. */
static int child_checks(fake_world_t *w, dds_store_t *s)
{
    int bad = 0, seq = w->exch_seq[0];
    unsigned char row[RB], want[ROWS * RB];
    dds_buf_t b = {row, 1, RB, DDS_DTYPE_RAW, RB, {0}};

#define EXPECT_FORK(expr)                                                      \
    do {                                                                       \
        int rc_ = (expr);                                                      \
        if (rc_ != -DDS_ENOSYS ||                                              \
            strstr(dds_last_error(), "forked child") == NULL) {                \
            fprintf(stderr, "child: %s -> %d (%s)\n", #expr, rc_,              \
                    dds_last_error());                                         \
            bad++;                                                             \
        }                                                                      \
    } while (0)
    EXPECT_FORK(add_var(s, "y", 0, 2));
    EXPECT_FORK(dds_store_var_init(s, "y", 2, 1, RB, DDS_DTYPE_RAW));
    EXPECT_FORK(dds_store_var_free(s, "x"));
    EXPECT_FORK(dds_store_free(s));
    EXPECT_FORK(dds_store_epoch_begin(s));
    EXPECT_FORK(dds_store_epoch_end(s));
#undef EXPECT_FORK
    dds_error(-DDS_EINVAL, "bad argument");
    if (dds_store_coll_fail(s, DDS_COLL_ADD, "y", -DDS_EINVAL) !=
        -DDS_EINVAL)
        bad++;
    if (w->exch_seq[0] != seq) {
        fprintf(stderr, "child: %d exchanges made\n", w->exch_seq[0] - seq);
        bad++;
    }
    /* the variable is still there, and readable */
    fill(want, 0, 1);
    if (dds_store_get(s, NULL, "x", &b, 2) != 0 ||
        memcmp(row, want + 2 * RB, RB) != 0) {
        fprintf(stderr, "child: read failed: %s\n", dds_last_error());
        bad++;
    }
    return bad;
}

static void test_fork_refuses_collectives(void)
{
    fake_world_t w;
    dds_store_t *s = NULL;
    int status = 0;
    pid_t pid;

    fw_init(&w, 1);
    CHECK_OK(fw_store_create(&w, 0, &s));
    CHECK_OK(add_var(s, "x", 0, 1));
    fflush(NULL);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0)
        _exit(child_checks(&w, s) > 0 ? 1 : 0);
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    /* the parent's collective calls are unaffected */
    CHECK_OK(add_var(s, "y", 0, 2));
    CHECK_OK(dds_store_epoch_begin(s));
    check_all(s, "y", 1, 2);
    CHECK_OK(dds_store_free(s));
    dds_store_destroy(s);
    CHECK_EQ(atomic_load(&w.protocol_errors), 0);
    CHECK_EQ(atomic_load(&w.live_regions), 0);
    fw_fini(&w);
}

/* ---- DDSTORE_READ_TIMEOUT_S <= 0 ----------------------------------------- */

static void test_read_timeout_not_positive(void)
{
    static const char *bad[] = {"0", "-5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fake_world_t w;
        dds_store_t *s = NULL;
        fw_init(&w, 1);
        setenv("DDSTORE_READ_TIMEOUT_S", bad[i], 1);
        CHECK_RC(fw_store_create(&w, 0, &s), -DDS_ECONFIG);
        CHECK_CONTAINS(dds_last_error(), "DDSTORE_READ_TIMEOUT_S");
        CHECK_CONTAINS(dds_last_error(), bad[i]);
        CHECK(s == NULL);
        CHECK_EQ(atomic_load(&w.destroyed), 1); /* ownership honoured */
        fw_fini(&w);
    }
    setenv("DDSTORE_READ_TIMEOUT_S", "inf", 1);
    {
        fake_world_t w;
        dds_store_t *s = NULL;
        fw_init(&w, 1);
        CHECK_OK(fw_store_create(&w, 0, &s));
        dds_store_destroy(s);
        fw_fini(&w);
    }
    unsetenv("DDSTORE_READ_TIMEOUT_S");
}

int main(void)
{
    RUN_TEST(test_destroy_local_transport_releases);
    RUN_TEST(test_destroy_local_abandons);
    RUN_TEST(test_destroy_local_null_and_empty);
    RUN_TEST(test_fork_refuses_collectives);
    RUN_TEST(test_read_timeout_not_positive);
    return CHECK_SUMMARY();
}
