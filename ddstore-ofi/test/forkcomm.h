/* Forked processes for tests and tools, two harnesses:
 *
 * Piped child (tests and tools/ofi-probe.c): a child with two pipes, one
 * up (its output: a "hello" of its blobs first) and one down (commands).
 *   pid = forkcomm_spawn_piped(main_fn, arg, hello, len, &rep_r, &cmd_w)
 *   forkcomm_read_all(fd, p, n) / forkcomm_write_all(fd, p, n)
 *
 * Fork world (tests): N ranks as forked processes with a communicator over
 * shared memory (core's dds_comm_t: allgather, allreduce_i64, barrier
 * through a MAP_SHARED area and a process-shared barrier).  No MPI, no
 * files.  Not compiled with FORKCOMM_PIPES_ONLY defined (code that uses
 * only the pipes and not ddstore-core, like ofi-probe).
 *   forkcomm_world_t *w = forkcomm_world(n);     before fork
 *   pid = forkcomm_spawn(w, rank, fn, arg)       child runs fn(&comm, arg)
 *   forkcomm_wait(w, pids, n, timeout_s)          exit statuses
 * A rank that dies leaves the others blocked in the barrier: the parent
 * kills every rank after timeout_s.
 *
 * Header-only, static functions.
 */
#ifndef DDOFI_FORKCOMM_H
#define DDOFI_FORKCOMM_H

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- piped child ---------------------------------------------------------- */

/* Read / write exactly n bytes (EINTR retried).  0 or -1. */
static inline int forkcomm_read_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

static inline int forkcomm_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t r = write(fd, c, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

/* A forked child with two pipes: it runs main_fn(arg, out_fd, cmd_fd) and
 * exits with its return value; the parent reads the child's first `hello`
 * bytes (its blobs) into hello.  Returns the pid (with *rep_r: the child's
 * output, *cmd_w: its commands) or -1 (the child reaped). */
static inline pid_t forkcomm_spawn_piped(int (*main_fn)(void *arg, int out_fd, int cmd_fd),
                                         void *arg, void *hello, size_t hello_len,
                                         int *rep_r, int *cmd_w)
{
    int up[2], down[2];
    if (pipe(up) || pipe(down))
        return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        _exit(main_fn(arg, up[1], down[0]));
    }
    close(up[1]);
    close(down[0]);
    *rep_r = up[0];
    *cmd_w = down[1];
    if (forkcomm_read_all(*rep_r, hello, hello_len)) {
        waitpid(pid, NULL, 0);
        close(up[0]);
        close(down[1]);
        return -1;
    }
    return pid;
}

/* ---- fork world ----------------------------------------------------------- */
#ifndef FORKCOMM_PIPES_ONLY

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "ddstore/comm.h"
#include "ddstore/errors.h"

#define FORKCOMM_SLOT (64u << 10)
#define FORKCOMM_MAX 16

typedef struct forkcomm_world {
    pthread_barrier_t bar;
    int n;
    _Atomic int passed, failed;   /* test counters summed over ranks */
    _Atomic int pids[FORKCOMM_MAX];  /* each rank's process id          */
    unsigned char data[];         /* n * FORKCOMM_SLOT               */
} forkcomm_world_t;

typedef struct forkcomm_ctx {
    forkcomm_world_t *w;
    int rank;
} forkcomm_ctx_t;

static forkcomm_world_t *forkcomm_world(int n)
{
    size_t bytes = sizeof(forkcomm_world_t) + (size_t)n * FORKCOMM_SLOT;
    forkcomm_world_t *w = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                               -1, 0);
    if (w == MAP_FAILED)
        return NULL;
    memset(w, 0, sizeof *w);
    w->n = n;
    pthread_barrierattr_t a;
    pthread_barrierattr_init(&a);
    pthread_barrierattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_barrier_init(&w->bar, &a, (unsigned)n);
    pthread_barrierattr_destroy(&a);
    return w;
}

static void forkcomm_world_free(forkcomm_world_t *w)
{
    pthread_barrier_destroy(&w->bar);
    munmap(w, sizeof(forkcomm_world_t) + (size_t)w->n * FORKCOMM_SLOT);
}

static int forkcomm_allgather(void *ctx, const void *send, size_t bytes, void *recv)
{
    forkcomm_ctx_t *c = ctx;
    forkcomm_world_t *w = c->w;
    for (size_t off = 0; off < bytes || (bytes == 0 && off == 0); off += FORKCOMM_SLOT) {
        size_t n = bytes - off < FORKCOMM_SLOT ? bytes - off : FORKCOMM_SLOT;
        memcpy(w->data + (size_t)c->rank * FORKCOMM_SLOT, (const char *)send + off, n);
        pthread_barrier_wait(&w->bar);
        for (int r = 0; r < w->n; r++)
            memcpy((char *)recv + (size_t)r * bytes + off, w->data + (size_t)r * FORKCOMM_SLOT, n);
        pthread_barrier_wait(&w->bar);
        if (bytes == 0)
            break;
    }
    return 0;
}

static int forkcomm_allreduce(void *ctx, int64_t *inout, size_t n, dds_reduce_op_t op)
{
    forkcomm_ctx_t *c = ctx;
    int64_t *all = malloc(n * sizeof(int64_t) * (size_t)c->w->n);
    if (!all)
        return -DDS_ENOMEM;
    int rc = forkcomm_allgather(ctx, inout, n * sizeof(int64_t), all);
    for (size_t i = 0; i < n && !rc; i++) {
        int64_t v = all[i];
        for (int r = 1; r < c->w->n; r++) {
            int64_t x = all[(size_t)r * n + i];
            v = op == DDS_REDUCE_MIN ? (x < v ? x : v) : op == DDS_REDUCE_MAX ? (x > v ? x : v)
                                                                            : v + x;
        }
        inout[i] = v;
    }
    free(all);
    return rc;
}

static int forkcomm_barrier(void *ctx)
{
    forkcomm_ctx_t *c = ctx;
    pthread_barrier_wait(&c->w->bar);
    return 0;
}

static void forkcomm_destroy(void *ctx) { free(ctx); }

static const dds_comm_ops_t forkcomm_ops = {
    sizeof(dds_comm_ops_t), "fork", forkcomm_allgather, forkcomm_allreduce, forkcomm_barrier,
    forkcomm_destroy};

static dds_comm_t forkcomm_comm(forkcomm_world_t *w, int rank)
{
    forkcomm_ctx_t *c = calloc(1, sizeof *c);
    c->w = w;
    c->rank = rank;
    dds_comm_t comm = {&forkcomm_ops, c, rank, w->n};
    return comm;
}

static pid_t forkcomm_spawn(forkcomm_world_t *w, int rank,
                            int (*fn)(dds_comm_t *comm, void *arg), void *arg)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        atomic_store(&w->pids[rank], (int)getpid());
        dds_comm_t comm = forkcomm_comm(w, rank);
        int rc = fn(&comm, arg);
        fflush(stdout);
        fflush(stderr);
        exit(rc); /* atexit handlers run: leak checkers see the rank */
    }
    return pid;
}

/* Wait for every rank; kill all after timeout_s.  Returns the number of
 * ranks that did not exit with 0. */
static int forkcomm_wait(pid_t *pids, int n, double timeout_s)
{
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int left = n, bad = 0;
    int done[FORKCOMM_MAX] = {0};
    while (left) {
        for (int i = 0; i < n; i++) {
            if (done[i])
                continue;
            int st;
            pid_t p = waitpid(pids[i], &st, WNOHANG);
            if (p == pids[i]) {
                done[i] = 1;
                left--;
                if (!WIFEXITED(st) || WEXITSTATUS(st)) {
                    bad++;
                    fprintf(stderr, "rank %d: %s %d\n", i,
                            WIFEXITED(st) ? "exit status" : "signal",
                            WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
                }
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        double el = (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9;
        if (left && el > timeout_s) {
            fprintf(stderr, "timeout after %.0f s: killing %d rank(s)\n", timeout_s, left);
            for (int i = 0; i < n; i++)
                if (!done[i])
                    kill(pids[i], SIGKILL);
            for (int i = 0; i < n; i++)
                if (!done[i]) {
                    waitpid(pids[i], NULL, 0);
                    bad++;
                }
            break;
        }
        if (left) {
            struct timespec ts = {0, 10000000};
            nanosleep(&ts, NULL);
        }
    }
    return bad;
}

#endif /* FORKCOMM_PIPES_ONLY */

#endif
