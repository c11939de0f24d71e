/* comm_file.h: FileComm over forked processes sharing a temporary
 * directory: allgather / allreduce / barrier over many rounds, timeout
 * naming the missing ranks, bad arguments, permissions, cleanup. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv, mkdtemp */
#endif
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "ddstore/comm.h"
#include "ddstore/comm_file.h"
#include "ddstore/errors.h"
#include "tmp_files.h"

typedef void (*rank_fn)(int rank, int size, const char *dir, void *arg);

/* Fork `size` ranks; each runs fn and exits with its failure count (capped).
 * `skip` (-1 none) names a rank that is not started.  Returns the number of
 * ranks that failed. */
static int run_ranks(int size, int skip, rank_fn fn, const char *dir,
                     void *arg)
{
    pid_t pids[16];
    int failed = 0;
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < size; r++) {
        pids[r] = -1;
        if (r == skip)
            continue;
        pids[r] = fork();
        if (pids[r] == 0) {
            int n;
            atomic_store(&check_failures_, 0); /* count this rank's own */
            fn(r, size, dir, arg);
            fflush(stderr);
            n = CHECK_FAILURES();
            _exit(n > 100 ? 100 : n);
        }
        CHECK(pids[r] > 0);
    }
    for (int r = 0; r < size; r++) {
        int st = 0;
        if (pids[r] <= 0)
            continue;
        if (waitpid(pids[r], &st, 0) != pids[r] || !WIFEXITED(st) ||
            WEXITSTATUS(st) != 0) {
            fprintf(stderr, "rank %d failed (status 0x%x)\n", r, st);
            failed++;
        }
    }
    return failed;
}

/* ---- collectives over many rounds ------------------------------------- */

#define ROUNDS 200

static void rounds_rank(int rank, int size, const char *dir, void *arg)
{
    dds_comm_t c;
    char path[4200];
    (void)arg;
    CHECK_OK(dds_comm_file_create(dir, rank, size, "rounds", 20, &c));
    if (CHECK_FAILURES())
        return;
    CHECK_STREQ(c.ops->name, "file");
    CHECK_EQ(c.rank, rank);
    CHECK_EQ(c.size, size);
    CHECK_STREQ(dds_comm_file_ns(&c), "rounds");
    snprintf(path, sizeof path, "%s/rounds", dir);
    CHECK_STREQ(dds_comm_file_path(&c), path);
    for (int k = 0; k < ROUNDS && !CHECK_FAILURES(); k++) {
        int64_t send[3], recv[16 * 3], v[3];
        size_t bytes = (size_t)(k % 3 + 1) * sizeof(int64_t);
        for (int i = 0; i < 3; i++)
            send[i] = (int64_t)rank * 1000000 + k * 10 + i;
        memset(recv, 0xff, sizeof recv);
        CHECK_OK(c.ops->allgather(c.ctx, send, bytes, recv));
        for (int j = 0; j < size; j++)
            for (size_t i = 0; i < bytes / sizeof(int64_t); i++)
                CHECK_EQ(((int64_t *)((char *)recv + (size_t)j * bytes))[i],
                         (int64_t)j * 1000000 + k * 10 + (int64_t)i);
        v[0] = rank + k;
        v[1] = -rank - k;
        v[2] = rank * 3 + 1;
        CHECK_OK(c.ops->allreduce_i64(c.ctx, v, 3, DDS_REDUCE_SUM));
        CHECK_EQ(v[0], (int64_t)size * (size - 1) / 2 + (int64_t)size * k);
        CHECK_EQ(v[1], -((int64_t)size * (size - 1) / 2 + (int64_t)size * k));
        CHECK_EQ(v[2], (int64_t)3 * size * (size - 1) / 2 + size);
        v[0] = rank - k;
        CHECK_OK(c.ops->allreduce_i64(c.ctx, v, 1, DDS_REDUCE_MIN));
        CHECK_EQ(v[0], -k);
        v[0] = rank - k;
        CHECK_OK(c.ops->allreduce_i64(c.ctx, v, 1, DDS_REDUCE_MAX));
        CHECK_EQ(v[0], size - 1 - k);
        CHECK_OK(c.ops->barrier(c.ctx));
        /* cleanup: at most two files per rank (this step's and the last) */
        if (k % 17 == 0) {
            int n = count_files(path, NULL, 0);
            CHECK(n >= (size > 1) && n <= 2 * size);
        }
    }
    /* error agreement over the file comm */
    dds_error_clear();
    CHECK_RC(dds_comm_agree(&c, rank == size - 1 ? dds_error(-DDS_EINVAL,
                                                            "last rank said no")
                                                 : 0),
             -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "last rank said no");
    CHECK_OK(c.ops->barrier(c.ctx));
    dds_comm_destroy(&c);
}

static void test_rounds(void)
{
    char dir[4200], ns[4300];
    struct stat st;
    int sizes[] = {1, 2, 3, 5};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        snprintf(dir, sizeof dir, "%s/rounds%d/sub", g_root, sizes[i]);
        CHECK_EQ(run_ranks(sizes[i], -1, rounds_rank, dir, NULL), 0);
        /* directories 0700 (dir created with its missing parent) */
        CHECK_OK(stat(dir, &st));
        CHECK_EQ(st.st_mode & 0777, 0700);
        snprintf(ns, sizeof ns, "%s/rounds", dir);
        CHECK_OK(stat(ns, &st));
        CHECK_EQ(st.st_mode & 0777, 0700);
        /* after destroy: at most the last step's file of each rank */
        if (sizes[i] > 1)
            CHECK(count_files(ns, NULL, 0) <= sizes[i]);
        else
            CHECK_EQ(count_files(ns, NULL, 0), 0);
    }
}

/* ---- permissions of the files while a step is in flight ---------------- */

static void perm_rank(int rank, int size, const char *dir, void *arg)
{
    dds_comm_t c;
    (void)arg;
    CHECK_OK(dds_comm_file_create(dir, rank, size, "perm", 20, &c));
    if (CHECK_FAILURES())
        return;
    CHECK_OK(c.ops->barrier(c.ctx));
    /* every rank's file of step 0 exists until step 1 completes */
    for (int j = 0; j < size; j++) {
        char fn[4400];
        struct stat st;
        snprintf(fn, sizeof fn, "%s/perm/c0.0.%d", dir, j);
        CHECK_OK(stat(fn, &st));
        CHECK_EQ(st.st_mode & 0777, 0600);
    }
    CHECK_OK(c.ops->barrier(c.ctx));
    CHECK_OK(c.ops->barrier(c.ctx));
    dds_comm_destroy(&c);
}

static void test_permissions(void)
{
    char dir[4200];
    mode_t old = umask(0);   /* permissions must not depend on the umask */
    snprintf(dir, sizeof dir, "%s/perm", g_root);
    CHECK_EQ(run_ranks(3, -1, perm_rank, dir, NULL), 0);
    umask(old);
}

/* ---- timeout naming the missing ranks ---------------------------------- */

static void timeout_rank(int rank, int size, const char *dir, void *arg)
{
    dds_comm_t c;
    double t0;
    struct timespec ts;
    (void)arg;
    CHECK_OK(dds_comm_file_create(dir, rank, size, "to", 0.5, &c));
    if (CHECK_FAILURES())
        return;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t0 = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    CHECK_RC(c.ops->barrier(c.ctx), -DDS_ETIMEDOUT);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    CHECK((double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec - t0 < 10.0);
    CHECK_CONTAINS(dds_last_error(), "waiting for 2 of 4 ranks");
    CHECK_CONTAINS(dds_last_error(), "did not enter it: 1, 3");
    CHECK_CONTAINS(dds_last_error(), "FileComm timeout=");
    /* out of step from now on: the next collective fails at once */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t0 = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    CHECK_RC(c.ops->barrier(c.ctx), -DDS_ETIMEDOUT);
    CHECK_CONTAINS(dds_last_error(), "out of step");
    CHECK_CONTAINS(dds_last_error(), "barrier (step 0) timed out");
    clock_gettime(CLOCK_MONOTONIC, &ts);
    CHECK((double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec - t0 < 0.4);
    dds_comm_destroy(&c);
}

static void skip_two(int rank, int size, const char *dir, void *arg)
{
    if (rank == 1 || rank == 3) /* these ranks never show up */
        return;
    timeout_rank(rank, size, dir, arg);
}

static void test_timeout(void)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/timeout", g_root);
    CHECK_EQ(run_ranks(4, -1, skip_two, dir, NULL), 0);
}

/* The environment's timeout is used when the argument is <= 0. */
static void test_timeout_env(void)
{
    char dir[4200];
    dds_comm_t c;
    snprintf(dir, sizeof dir, "%s/tenv", g_root);
    setenv("DDSTORE_COLLECTIVE_TIMEOUT_S", "0.3", 1);
    CHECK_OK(dds_comm_file_create(dir, 0, 2, "x", 0, &c));
    CHECK_RC(c.ops->barrier(c.ctx), -DDS_ETIMEDOUT);
    CHECK_CONTAINS(dds_last_error(), "after 0.3 s");
    CHECK_CONTAINS(dds_last_error(), "1 of 2 ranks, which did not enter it: 1");
    CHECK_CONTAINS(dds_last_error(), "DDSTORE_COLLECTIVE_TIMEOUT_S");
    dds_comm_destroy(&c);
    /* a single rank fails at once; with peers see test_bad_setting */
    setenv("DDSTORE_COLLECTIVE_TIMEOUT_S", "soon", 1);
    CHECK_RC(dds_comm_file_create(dir, 0, 1, "x", 0, &c), -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), "DDSTORE_COLLECTIVE_TIMEOUT_S");
    setenv("DDSTORE_COLLECTIVE_TIMEOUT_S", "0", 1);
    CHECK_RC(dds_comm_file_create(dir, 0, 1, "x", 0, &c), -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), "must be > 0");
    setenv("DDSTORE_COLLECTIVE_TIMEOUT_S", "inf", 1);
    CHECK_OK(dds_comm_file_create(dir, 0, 1, "inf", 0, &c));
    CHECK_OK(c.ops->barrier(c.ctx));
    dds_comm_destroy(&c);
    unsetenv("DDSTORE_COLLECTIVE_TIMEOUT_S");
}

/* A bad setting on one rank of several (issue 23, item 4): its creation
 * succeeds, and the first collective and every later one fail on every rank
 * with the same "rank 1: VARIABLE='value': ..."; no rank waits for it. */
static void bad_setting_rank(int rank, int size, const char *dir, void *arg)
{
    dds_comm_t c;
    char first[300];
    int64_t v = 1;
    (void)arg;
    if (rank == 1)
        setenv("DDSTORE_COLLECTIVE_WARN_S", "soon", 1);
    else
        setenv("DDSTORE_COLLECTIVE_TIMEOUT_S", "20", 1);
    CHECK_OK(dds_comm_file_create(dir, rank, size, "bad", 0, &c));
    CHECK_RC(c.ops->barrier(c.ctx), -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), "rank 1: DDSTORE_COLLECTIVE_WARN_S='soon'");
    snprintf(first, sizeof first, "%s", dds_last_error());
    CHECK_RC(c.ops->allreduce_i64(c.ctx, &v, 1, DDS_REDUCE_SUM), -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), first);
    CHECK_RC(dds_comm_agree_named(&c, 0), -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), first);
    dds_comm_destroy(&c);
}

static void test_bad_setting(void)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/badset", g_root);
    CHECK_EQ(run_ranks(3, -1, bad_setting_rank, dir, NULL), 0);
}

/* ---- mismatched collectives -------------------------------------------- */

static void mismatch_rank(int rank, int size, const char *dir, void *arg)
{
    dds_comm_t c;
    int64_t send[2] = {1, 2}, recv[4];
    (void)arg;
    CHECK_OK(dds_comm_file_create(dir, rank, size, "mm", 5, &c));
    if (CHECK_FAILURES())
        return;
    CHECK_RC(c.ops->allgather(c.ctx, send, rank == 0 ? 8 : 16, recv),
             -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "collective mismatch");
    dds_comm_destroy(&c);
}

static void test_mismatch(void)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/mm", g_root);
    CHECK_EQ(run_ranks(2, -1, mismatch_rank, dir, NULL), 0);
}

/* ---- arguments and the environment ------------------------------------- */

static void test_bad_args(void)
{
    dds_comm_t c;
    char dir[4200], file[4300];
    FILE *f;
    snprintf(dir, sizeof dir, "%s/args", g_root);
    CHECK_RC(dds_comm_file_create(dir, 0, 1, "a", 1, NULL), -DDS_EINVAL);
    CHECK_RC(dds_comm_file_create(NULL, 0, 1, "a", 1, &c), -DDS_EINVAL);
    CHECK_RC(dds_comm_file_create("", 0, 1, "a", 1, &c), -DDS_EINVAL);
    CHECK_RC(dds_comm_file_create(dir, 0, 0, "a", 1, &c), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "size must be >= 1, got 0");
    CHECK_RC(dds_comm_file_create(dir, 2, 2, "a", 1, &c), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "rank must be in [0, 2), got 2");
    CHECK_RC(dds_comm_file_create(dir, 0, 2, "a/b", 1, &c), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "ns 'a/b'");
    CHECK_RC(dds_comm_file_create(dir, 0, 2, "..", 1, &c), -DDS_EINVAL);
    /* a file where the directory should be */
    snprintf(file, sizeof file, "%s/plainfile", g_root);
    f = fopen(file, "w");
    CHECK(f != NULL);
    if (f)
        fclose(f);
    CHECK_RC(dds_comm_file_create(file, 0, 2, "a", 1, &c), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "plainfile");
    /* a directory we may not write (root ignores the mode: skip then) */
    if (geteuid() != 0) {
        char ro[4300];
        snprintf(ro, sizeof ro, "%s/ro", g_root);
        CHECK_OK(mkdir(ro, 0500));
        CHECK_RC(dds_comm_file_create(ro, 0, 2, "a", 1, &c), -DDS_EINVAL);
        CHECK_CONTAINS(dds_last_error(), "not writable");
        chmod(ro, 0700);
    }

    /* rank/size from the environment */
    unsetenv("SLURM_PROCID");
    unsetenv("SLURM_NTASKS");
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMI_RANK");
    unsetenv("PMI_SIZE");
    unsetenv("SLURM_JOB_ID");
    unsetenv("SLURM_STEP_ID");
    CHECK_RC(dds_comm_file_create(dir, -1, -1, NULL, 1, &c), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "SLURM_PROCID");
    setenv("PMI_RANK", "1", 1);
    setenv("PMI_SIZE", "4", 1);
    CHECK_OK(dds_comm_file_create(dir, -1, -1, NULL, 1, &c));
    CHECK_EQ(c.rank, 1);
    CHECK_EQ(c.size, 4);
    CHECK_STREQ(dds_comm_file_ns(&c), "default");
    dds_comm_destroy(&c);
    setenv("SLURM_PROCID", "2", 1);
    setenv("SLURM_NTASKS", "3", 1);
    setenv("SLURM_JOB_ID", "777", 1);
    setenv("SLURM_STEP_ID", "4", 1);
    CHECK_OK(dds_comm_file_create(dir, -1, -1, "", 1, &c));
    CHECK_EQ(c.rank, 2);
    CHECK_EQ(c.size, 3);
    CHECK_STREQ(dds_comm_file_ns(&c), "777.4");
    dds_comm_destroy(&c);
    setenv("SLURM_PROCID", "x", 1);
    CHECK_RC(dds_comm_file_create(dir, -1, -1, "n", 1, &c), -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), "SLURM_PROCID=x");
    setenv("SLURM_PROCID", "5", 1);
    CHECK_RC(dds_comm_file_create(dir, -1, -1, "n", 1, &c), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "rank must be in [0, 3), got 5");
    unsetenv("SLURM_PROCID");
    unsetenv("SLURM_NTASKS");
    unsetenv("SLURM_JOB_ID");
    unsetenv("SLURM_STEP_ID");
    unsetenv("PMI_RANK");
    unsetenv("PMI_SIZE");
    CHECK(dds_comm_file_ns(NULL) == NULL);
    CHECK_OK(dds_comm_self(&c));
    CHECK(dds_comm_file_path(&c) == NULL);
}

/* ---- several communicators over one (dir, ns), leftovers --------------- */

static void multi_rank(int rank, int size, const char *dir, void *arg)
{
    dds_comm_t a, b;
    int64_t v;
    (void)arg;
    CHECK_OK(dds_comm_file_create(dir, rank, size, "m", 10, &a));
    CHECK_OK(dds_comm_file_create(dir, rank, size, "m", 10, &b));
    if (CHECK_FAILURES())
        return;
    /* interleaved use of two communicators never mixes their files */
    for (int k = 0; k < 20; k++) {
        v = rank + 1;
        CHECK_OK(a.ops->allreduce_i64(a.ctx, &v, 1, DDS_REDUCE_SUM));
        CHECK_EQ(v, (int64_t)size * (size + 1) / 2);
        if (k % 2 == 0) {
            v = rank;
            CHECK_OK(b.ops->allreduce_i64(b.ctx, &v, 1, DDS_REDUCE_MAX));
            CHECK_EQ(v, size - 1);
        }
    }
    dds_comm_destroy(&a);
    dds_comm_destroy(&b);
}

static void test_multi(void)
{
    char dir[4200], ns[4300], junk[4400];
    FILE *f;
    snprintf(dir, sizeof dir, "%s/multi", g_root);
    snprintf(ns, sizeof ns, "%s/m", dir);
    CHECK_OK(mkdir(dir, 0700));
    CHECK_OK(mkdir(ns, 0700));
    /* a crashed earlier run's files of rank 1: removed by rank 1 at create */
    snprintf(junk, sizeof junk, "%s/c0.5.1", ns);
    f = fopen(junk, "w");
    if (f)
        fclose(f);
    snprintf(junk, sizeof junk, "%s/.tmp.c1.9.1", ns);
    f = fopen(junk, "w");
    if (f)
        fclose(f);
    CHECK_EQ(run_ranks(3, -1, multi_rank, dir, NULL), 0);
    snprintf(junk, sizeof junk, "%s/c0.5.1", ns);
    CHECK(access(junk, F_OK) != 0);
    snprintf(junk, sizeof junk, "%s/.tmp.c1.9.1", ns);
    CHECK(access(junk, F_OK) != 0);
    CHECK(count_files(ns, NULL, 0) <= 6);
}


/* ---- attacks on the shared directory ------------------------------------ */

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Links planted (after create) at every temporary name a step could use,
 * the old ".tmp.c0.<seq>.<rank>" ones and the publish helper's: barrier()
 * never writes through them. */
static void links_rank(int rank, int size, const char *dir, void *arg)
{
    const char *target = arg;
    char ns[4300], fn[4500];
    dds_comm_t c;
    CHECK_OK(dds_comm_file_create(dir, rank, size, "links", 20, &c));
    if (CHECK_FAILURES())
        return;
    snprintf(ns, sizeof ns, "%s/links", dir);
    for (int seq = 0; seq < 6; seq++) {
        snprintf(fn, sizeof fn, "%s/.tmp.c0.%d.%d", ns, seq, rank);
        CHECK_OK(symlink(target, fn));
    }
    for (int n = 0; n < 40; n++) {
        snprintf(fn, sizeof fn, "%s/.ddtmp.%ld.%d", ns, (long)getpid(), n);
        CHECK_OK(symlink(target, fn));
    }
    for (int k = 0; k < 5; k++)
        CHECK_OK(c.ops->barrier(c.ctx));
    dds_comm_destroy(&c);
}

static void test_planted_links(void)
{
    char dir[4200], target[4300], buf[64];
    snprintf(dir, sizeof dir, "%s/links", g_root);
    snprintf(target, sizeof target, "%s/victim", g_root);
    write_text(target, "precious");
    CHECK_EQ(run_ranks(2, -1, links_rank, dir, target), 0);
    read_text(target, buf, sizeof buf);
    CHECK_STREQ(buf, "precious");
}

/* A FIFO where a peer's step file is read: an error naming it at once,
 * never an open() that blocks forever. */
static void fifo_rank(int rank, int size, const char *dir, void *arg)
{
    char fn[4400];
    dds_comm_t c;
    double t0;
    (void)arg;
    alarm(20); /* a blocked open() kills this rank: the test fails */
    CHECK_OK(dds_comm_file_create(dir, rank, size, "fifo", 10, &c));
    if (CHECK_FAILURES())
        return;
    snprintf(fn, sizeof fn, "%s/fifo/c0.0.1", dir);
    CHECK_OK(mkfifo(fn, 0600));
    t0 = mono_s();
    CHECK_RC(c.ops->barrier(c.ctx), -DDS_EIO);
    CHECK(mono_s() - t0 < 5.0);
    CHECK_CONTAINS(dds_last_error(), fn);
    CHECK_CONTAINS(dds_last_error(), "not a regular file");
    dds_comm_destroy(&c);
}

static void test_fifo(void)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/fifo", g_root);
    CHECK_EQ(run_ranks(2, 1, fifo_rank, dir, NULL), 0); /* rank 1 never runs */
}

/* Directories the user does not control are refused before anything is
 * read from them. */
static void test_unsafe_dirs(void)
{
    char dir[4200], ns[4300];
    dds_comm_t c;
    mode_t old = umask(0);
    snprintf(dir, sizeof dir, "%s/o777", g_root);
    CHECK_OK(mkdir(dir, 0777));
    CHECK_RC(dds_comm_file_create(dir, 0, 2, "x", 1, &c), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), dir);
    CHECK_CONTAINS(dds_last_error(), "writable by others");
    snprintf(dir, sizeof dir, "%s/nsopen", g_root);
    CHECK_OK(mkdir(dir, 0700));
    snprintf(ns, sizeof ns, "%s/x", dir);
    CHECK_OK(mkdir(ns, 0777));
    CHECK_RC(dds_comm_file_create(dir, 0, 2, "x", 1, &c), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), ns);
    CHECK_CONTAINS(dds_last_error(), "writable by others");
    umask(old);
    /* another user pre-created dir/ns (to plant files posing as a rank) */
    snprintf(dir, sizeof dir, "%s/foreign", g_root);
    CHECK_OK(mkdir(dir, 0700));
    snprintf(ns, sizeof ns, "%s/x", dir);
    CHECK_OK(mkdir(ns, 0700));
    if (geteuid() != 0 || chown(ns, 65534, 65534) != 0) {
        printf("SKIP: test_unsafe_dirs: a namespace directory of another "
               "user needs root and a mapped uid 65534 (chown to nobody)\n");
        return;
    }
    CHECK_RC(dds_comm_file_create(dir, 0, 2, "x", 1, &c), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), ns);
    CHECK_CONTAINS(dds_last_error(), "owned by uid 65534");
}

/* Two runs on one (dir, ns): the second meets the first's claims and fails
 * at create, naming the holder; once the first is gone the namespace is
 * free again. */
static void test_two_runs(void)
{
    char dir[4200], go[4300], ready[4300];
    pid_t a[2];
    dds_comm_t c;
    snprintf(dir, sizeof dir, "%s/two", g_root);
    snprintf(go, sizeof go, "%s/two-go", g_root);
    snprintf(ready, sizeof ready, "%s/two-ready", g_root);
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < 2; r++) {
        a[r] = fork();
        if (a[r] == 0) {
            dds_comm_t m;
            int bad = dds_comm_file_create(dir, r, 2, "shared", 20, &m) != 0;
            bad = bad || m.ops->barrier(m.ctx) != 0;
            if (r == 0)
                write_text(ready, "1");
            for (int i = 0; i < 2000 && access(go, F_OK) != 0; i++)
                usleep(10000);
            bad = bad || m.ops->barrier(m.ctx) != 0;
            dds_comm_destroy(&m);
            _exit(bad);
        }
    }
    for (int i = 0; i < 2000 && access(ready, F_OK) != 0; i++)
        usleep(10000);
    /* run B, rank 0 and rank 1 (this process plays both, one at a time) */
    for (int r = 0; r < 2; r++) {
        char claim[4400];
        snprintf(claim, sizeof claim, "%s/shared@rank%d.claim", dir, r);
        CHECK_RC(dds_comm_file_create(dir, r, 2, "shared", 1, &c), -DDS_EBUSY);
        CHECK_CONTAINS(dds_last_error(), "held by another run");
        CHECK_CONTAINS(dds_last_error(), claim);
        CHECK_CONTAINS(dds_last_error(), "its own ns");
    }
    write_text(go, "1");
    for (int r = 0; r < 2; r++) {
        int st = 0;
        CHECK(waitpid(a[r], &st, 0) == a[r]);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    /* run A is gone (claims released): the namespace is free */
    CHECK_OK(dds_comm_file_create(dir, 1, 2, "shared", 1, &c));
    dds_comm_destroy(&c);
}

/* What a crashed run leaves behind: its claim of a process that has exited
 * is taken over; its step file is not read once the peer of the new run
 * holds the claim (the file carries another nonce): it is waited past. */
typedef struct fc_header_copy {
    char magic[8];
    uint64_t seq;
    uint32_t rank, size, op, reserved;
    uint64_t bytes, nonce;
} fc_header_copy_t;

static void put_claim(const char *dir, int rank, long pid, const char *nonce,
                      const char *host)
{
    char fn[4400], text[600];
    snprintf(fn, sizeof fn, "%s/x@rank%d.claim", dir, rank);
    snprintf(text, sizeof text,
             "ddstore FileComm claim 1\nrank %d size 2 pid %ld ticks 0 "
             "nonce %s time 1 state live\nhost %s\n",
             rank, pid, nonce, host);
    write_text(fn, text);
    chmod(fn, 0600);
}

static void test_leftovers_of_crashed_run(void)
{
    char dir[4200], fn[4400], host[256] = "";
    pid_t dead;
    int st = 0;
    dds_comm_t c;
    fc_header_copy_t h;
    FILE *f;
    const int before = CHECK_FAILURES();

    snprintf(dir, sizeof dir, "%s/crash", g_root);
    gethostname(host, sizeof host - 1);
    dead = fork();
    if (dead == 0)
        _exit(0);
    CHECK(waitpid(dead, &st, 0) == dead);
    CHECK_OK(mkdir(dir, 0700));
    snprintf(fn, sizeof fn, "%s/x", dir);
    CHECK_OK(mkdir(fn, 0700));
    /* the crashed run's claim of rank 0 (its process has exited) and its
     * step file of rank 1; rank 1 of the new run (alive: our parent stands
     * in for it) holds rank 1's claim */
    put_claim(dir, 0, (long)dead, "0000000000000011", host);
    put_claim(dir, 1, (long)getppid(), "0000000000000099", host);
    memset(&h, 0, sizeof h);
    memcpy(h.magic, "DDSFCOM2", 8);
    h.seq = 0;
    h.rank = 1;
    h.size = 2;
    h.op = 2; /* barrier */
    h.nonce = 0x12;
    snprintf(fn, sizeof fn, "%s/x/c0.0.1", dir);
    f = fopen(fn, "wb");
    CHECK(f != NULL);
    if (f) {
        CHECK_EQ(fwrite(&h, sizeof h, 1, f), 1u);
        fclose(f);
    }
    chmod(fn, 0600);
    /* rank 0 of the new run takes over the dead claim ... */
    CHECK_OK(dds_comm_file_create(dir, 0, 2, "x", 1.0, &c));
    if (CHECK_FAILURES() != before)
        return;
    /* ... and never reads the crashed run's file: it waits, then times out */
    CHECK_RC(c.ops->barrier(c.ctx), -DDS_ETIMEDOUT);
    CHECK_CONTAINS(dds_last_error(), "did not enter it: 1");
    CHECK_CONTAINS(dds_last_error(), "written by another run");
    dds_comm_destroy(&c);
    /* a live claim of a running process of this host: refused */
    CHECK_RC(dds_comm_file_create(dir, 1, 2, "x", 1.0, &c), -DDS_EBUSY);
    CHECK_CONTAINS(dds_last_error(), "it is running");
    /* the claim of rank 0 is released (kept, with its nonce) after destroy,
     * and taken over by the next run */
    snprintf(fn, sizeof fn, "%s/x@rank0.claim", dir);
    {
        char text[600];
        read_text(fn, text, sizeof text);
        CHECK_CONTAINS(text, "state released");
    }
    CHECK_OK(dds_comm_file_create(dir, 0, 2, "x", 1.0, &c));
    dds_comm_destroy(&c);
}

int main(void)
{
    make_root("fc");
    RUN_TEST(test_bad_args);
    RUN_TEST(test_rounds);
    RUN_TEST(test_permissions);
    RUN_TEST(test_timeout);
    RUN_TEST(test_timeout_env);
    RUN_TEST(test_bad_setting);
    RUN_TEST(test_mismatch);
    RUN_TEST(test_multi);
    RUN_TEST(test_planted_links);
    RUN_TEST(test_fifo);
    RUN_TEST(test_unsafe_dirs);
    RUN_TEST(test_two_runs);
    RUN_TEST(test_leftovers_of_crashed_run);
    if (CHECK_FAILURES() == 0)
        rm_rf(g_root);
    else
        fprintf(stderr, "left %s for inspection\n", g_root);
    return CHECK_SUMMARY();
}
