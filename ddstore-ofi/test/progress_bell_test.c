/* ddstore-ofi: the progress bell (src/ddofi_bell.c) over shm, with a forked
 * server whose progress thread parks when idle.
 *
 * Reads go through the provider (DDOFI_CMA=0: no direct reads), in batches
 * that need the server's thread: larger than shm's command queue, and (in a
 * child process) with FI_SHM_DISABLE_CMA=1, where every read needs it.  The server parks for PARK_MS at most; with
 * PARK_MS at 10 minutes and the read timeout at 30 s, a read issued while
 * the server is parked completes only if the reader's ring wakes it: a
 * broken ring fails the read with -ETIMEDOUT.  Then:
 *   - the ring woke the thread (its ring wake-up count grew) and the rows
 *     are right, several rounds of park / read;
 *   - a reader that cannot map the bell (test seam: as if /proc refused)
 *     still reads, the server's thread waking on its own after PARK_MS
 *     (20 ms here) with no ring;
 *   - PROGRESS_WAIT=backoff: no bell in the address (format 1), never
 *     parks, reads work;
 *   - a parked server closes at once (close wakes its thread);
 *   - bad PARK_MS / PROGRESS_WAIT values fail the endpoint's open.
 *
 * No timing is asserted except bounds that only a hang would cross. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../src/ddofi_internal.h"
#include "ddofi_loopback.h"
#include "ddofi_test.h"

#define REGION (1u << 20)
/* More reads than shm's command queue holds (1024): with the provider's
 * own CMA reads a batch completes without the target until its queue is
 * full, then waits for the target to drain it. */
/* ThreadSanitizer (--config=tsan): the same checks on fewer reads (under it
 * each read through shm waits ~100x longer: 144 s for the full test). */
#if defined(__SANITIZE_THREAD__)
#define BELL_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BELL_TEST_TSAN 1
#endif
#endif
#ifdef BELL_TEST_TSAN
#define NROWS 1100
#define ROUNDS 1
#else
#define NROWS 4096
#define ROUNDS 3
#endif
#define ROWB 256u

static unsigned char pat(size_t i) { return (unsigned char)((i * 2654435761u) >> 13); }

typedef struct hello {
    uint32_t alen;
    unsigned char addr[DDOFI_ADDR_BLOB_MAX];
    unsigned char mr[DDOFI_MR_BLOB_SIZE];
} hello_t;

/* What the server reports: its thread's counters and the bell's rings. */
typedef struct counts {
    uint64_t loops, parks, wakes, rings;
} counts_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void snap(ddofi_ep_t *ep, counts_t *c)
{
    ddofi_ep_progress_counts(ep, &c->loops, &c->parks, &c->wakes);
    c->rings = ddofi_bell_rings(ep);
}

/* Commands: 'p' wait until the thread parks again (up to 20 s) and report,
 * 'c' report, 'q' close and exit. */
static int serve(void *arg, int out_fd, int cmd_fd)
{
    (void)arg;
    ddofi_fabric_params_t p = ddofi_t_fparams("shm");
    ddofi_fabric_t *f = NULL;
    ddofi_ep_t *ep = NULL;
    ddofi_mr_t *mr = NULL;
    unsigned char *buf = malloc(REGION);
    for (size_t i = 0; i < REGION; i++)
        buf[i] = pat(i);
    hello_t h;
    memset(&h, 0, sizeof h);
    size_t alen = sizeof h.addr;
    if (ddofi_fabric_open(&p, &f) ||
        ddofi_ep_open(f, &(ddofi_ep_params_t){DDOFI_EP_FIELD_FLAGS, DDOFI_EP_SERVE}, &ep) ||
        ddofi_mr_register(f, &(ddofi_mr_params_t){.field_mask = DDOFI_MR_FIELD_EP,
                                                   .buf = buf, .len = REGION,
                                                   .access = DDOFI_ACCESS_REMOTE_READ,
                                                   .ep = ep},
                          &mr) ||
        ddofi_ep_address(ep, h.addr, &alen) || ddofi_mr_export(mr, h.mr)) {
        fprintf(stderr, "server: %s\n", ddofi_last_error());
        return 2;
    }
    h.alen = (uint32_t)alen;
    if (forkcomm_write_all(out_fd, &h, sizeof h))
        return 2;
    for (;;) {
        char c;
        if (forkcomm_read_all(cmd_fd, &c, 1) || c == 'q')
            break;
        counts_t n;
        if (c == 'p') {
            counts_t before;
            snap(ep, &before);
            double t0 = now_s();
            do {
                struct timespec ts = {0, 1000000};
                nanosleep(&ts, NULL);
                snap(ep, &n);
            } while (n.parks == before.parks && now_s() - t0 < 20);
        }
        snap(ep, &n);
        if (forkcomm_write_all(out_fd, &n, sizeof n))
            break;
    }
    int rc = ddofi_mr_deregister(mr) | ddofi_ep_close(ep) | ddofi_fabric_close(f);
    free(buf);
    return rc ? 3 : 0;
}

typedef struct server {
    pid_t pid;
    int rep_r, cmd_w;
    hello_t h;
} server_t;

static counts_t ask(server_t *s, char c)
{
    counts_t n;
    memset(&n, 0, sizeof n);
    if (forkcomm_write_all(s->cmd_w, &c, 1) || forkcomm_read_all(s->rep_r, &n, sizeof n))
        T_OK(!"server answered");
    return n;
}

/* Start a server with the environment given (NAME=VALUE or NULL). */
static int start(server_t *s, const char *park_ms, const char *wait)
{
    setenv("DDOFI_PARK_MS", park_ms, 1);
    if (wait)
        setenv("DDOFI_PROGRESS_WAIT", wait, 1);
    else
        unsetenv("DDOFI_PROGRESS_WAIT");
    s->pid = forkcomm_spawn_piped(serve, NULL, &s->h, sizeof s->h, &s->rep_r, &s->cmd_w);
    unsetenv("DDOFI_PROGRESS_WAIT");
    return s->pid < 0 ? -1 : 0;
}

/* Close the server; its status (0: clean), and the seconds it took. */
static int stop(server_t *s, double *secs)
{
    double t0 = now_s();
    char q = 'q';
    (void)forkcomm_write_all(s->cmd_w, &q, 1);
    int st = 0;
    waitpid(s->pid, &st, 0);
    *secs = now_s() - t0;
    close(s->cmd_w);
    close(s->rep_r);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100;
}

typedef struct reader {
    ddofi_fabric_t *f;
    ddofi_ep_t *ep;
    ddofi_peer_t peer;
    ddofi_remote_t rem;
} reader_t;

static int reader_open(reader_t *r, const server_t *s)
{
    memset(r, 0, sizeof *r);
    ddofi_fabric_params_t p = ddofi_t_fparams("shm");
    int rc = ddofi_t_open(&p, &r->f);
    if (rc)
        return rc;
    rc = ddofi_ep_open(r->f, NULL, &r->ep);
    if (!rc)
        rc = ddofi_peer_insert(r->ep, s->h.addr, s->h.alen, &r->peer);
    if (!rc)
        rc = ddofi_remote_import(s->h.mr, DDOFI_MR_BLOB_SIZE, &r->rem);
    if (rc)
        fprintf(stderr, "reader: %s\n", ddofi_last_error());
    T_EQ_INT(rc, 0);
    return rc;
}

static void reader_close(reader_t *r)
{
    T_EQ_INT(ddofi_ep_close(r->ep), 0);
    T_EQ_INT(ddofi_fabric_close(r->f), 0);
}

/* n random rows of `row` bytes through the provider; the count of wrong
 * bytes, or -1 when the read failed. */
static long read_rows(reader_t *r, unsigned *seed, size_t n, size_t row)
{
    unsigned char *dst = calloc(n, row);
    ddofi_read_op_t *ops = calloc(n, sizeof *ops);
    for (size_t i = 0; i < n; i++) {
        size_t at = (size_t)rand_r(seed) % (REGION / row);
        ops[i] = (ddofi_read_op_t){r->peer, &r->rem, at * row, dst + i * row, row, NULL};
    }
    long bad = 0;
    int rc = ddofi_read(r->ep, ops, n, NULL);
    if (rc) {
        fprintf(stderr, "read: %s: %s\n", ddofi_strerror(rc), ddofi_last_error());
        bad = -1;
    }
    for (size_t i = 0; i < n && !rc; i++)
        for (size_t b = 0; b < row; b++)
            bad += dst[i * row + b] != pat(ops[i].offset + b);
    free(ops);
    free(dst);
    return bad;
}

/* The server's thread parked, then a read: it completes only by a ring. */
static void test_ring_wakes_parked_thread(void)
{
    server_t s;
    T_EQ_INT(start(&s, "600000", NULL), 0);
    T_EQ_INT(s.h.addr[4], 2); /* address format 2: it carries a bell */
    reader_t r;
    if (reader_open(&r, &s) == 0) {
        unsigned seed = 7;
        T_EQ_INT(read_rows(&r, &seed, NROWS, ROWB), 0); /* awake at start */
        for (int round = 0; round < ROUNDS; round++) {
            counts_t parked = ask(&s, 'p');
            T_OK(parked.parks > 0);
            double t0 = now_s();
            T_EQ_INT(read_rows(&r, &seed, NROWS, ROWB), 0);
            /* Not a speed check: without the ring it would be 10 minutes
             * (the read's 30 s timeout fails it first). */
            T_OK(now_s() - t0 < 25);
            counts_t after = ask(&s, 'c');
            T_OK(after.rings > parked.rings);
            T_OK(after.wakes > parked.wakes);
        }
        reader_close(&r);
    }
    double secs = 0;
    ask(&s, 'p'); /* parked again: close must wake it */
    T_EQ_INT(stop(&s, &secs), 0);
    T_OK(secs < 20);
}

/* A reader that cannot map the bell: reads complete (the thread wakes on
 * its own after PARK_MS), and nothing rang. */
static void test_unmapped_bell_bounded(void)
{
    server_t s;
    T_EQ_INT(start(&s, "20", NULL), 0);
    reader_t r;
    atomic_store(&ddofi_test_bell_refuse, 1);
    if (reader_open(&r, &s) == 0) {
        unsigned seed = 11;
        counts_t parked = ask(&s, 'p');
        T_OK(parked.parks > 0);
        /* Small batches: without shm's CMA (the child) each wake-up on its
         * own serves a few reads only (docs: a reader that cannot ring). */
        T_EQ_INT(read_rows(&r, &seed, 64, ROWB), 0);
        T_EQ_INT(read_rows(&r, &seed, 64, ROWB), 0);
        counts_t after = ask(&s, 'c');
        T_EQ_INT((long)after.rings, 0);
        T_EQ_INT((long)after.wakes, 0);
        reader_close(&r);
    }
    atomic_store(&ddofi_test_bell_refuse, 0);
    double secs = 0;
    T_EQ_INT(stop(&s, &secs), 0);
}

/* PROGRESS_WAIT=backoff: format 1 address, the thread never parks. */
static void test_backoff_never_parks(void)
{
    server_t s;
    T_EQ_INT(start(&s, "50", "backoff"), 0);
    T_EQ_INT(s.h.addr[4], 1);
    reader_t r;
    if (reader_open(&r, &s) == 0) {
        unsigned seed = 13;
        T_EQ_INT(read_rows(&r, &seed, 256, ROWB), 0);
        struct timespec ts = {0, 100000000}; /* 100 ms idle: 2x PARK_MS */
        nanosleep(&ts, NULL);
        T_EQ_INT(read_rows(&r, &seed, 256, ROWB), 0);
        counts_t c = ask(&s, 'c');
        T_EQ_INT((long)c.parks, 0);
        T_OK(c.loops > 0);
        reader_close(&r);
    }
    double secs = 0;
    T_EQ_INT(stop(&s, &secs), 0);
}

/* Bad PARK_MS / BACKOFF_MAX_US / PROGRESS_WAIT values fail the endpoint's
 * open, naming the variable; the fabric stays usable. */
static void test_bad_settings(ddofi_fabric_t *f)
{
    static const struct { const char *var, *val, *says; } bad[] = {
        {"DDOFI_PARK_MS", "soon", "DDOFI_PARK_MS"},
        {"DDOFI_PARK_MS", "99999999", "at most"},
        {"DDOFI_PARK_MS", "-1", "an integer >= 0"},       /* not "a byte count" */
        {"DDOFI_BACKOFF_MAX_US", "-1", "DDOFI_BACKOFF_MAX_US"},  /* was accepted */
        {"DDOFI_BACKOFF_MAX_US", "5000000", "at most"},
        {"DDOFI_PROGRESS_WAIT", "sometimes", "DDOFI_PROGRESS_WAIT"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv(bad[i].var, bad[i].val, 1);
        ddofi_ep_t *ep = NULL;
        T_EQ_INT(ddofi_ep_open(f, &(ddofi_ep_params_t){DDOFI_EP_FIELD_FLAGS, DDOFI_EP_SERVE},
                               &ep), -DDOFI_ECONFIG);
        T_CONTAINS(ddofi_last_error(), bad[i].says);
        T_OK(ep == NULL);
        unsetenv(bad[i].var);
    }
    ddofi_ep_t *ep = NULL;
    T_EQ_INT(ddofi_ep_open(f, &(ddofi_ep_params_t){DDOFI_EP_FIELD_FLAGS, DDOFI_EP_SERVE}, &ep),
             0);
    T_EQ_INT(ddofi_ep_close(ep), 0);
}

static void run_all(void)
{
    ddofi_fabric_params_t p = ddofi_t_fparams("shm");
    ddofi_fabric_t *f = NULL;
    if (ddofi_t_open(&p, &f) == 0) {
        test_bad_settings(f);
        ddofi_fabric_close(f);
        test_ring_wakes_parked_thread();
        test_unmapped_bell_bounded();
        test_backoff_never_parks();
    }
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setenv("DDOFI_CMA", "0", 1);            /* every read through the provider */
    setenv("DDOFI_READ_TIMEOUT_S", "30", 1);
    /* First in a child, before libfabric starts here: shm without its CMA
     * path, where every read is served by the target's thread. */
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("FI_SHM_DISABLE_CMA", "1", 1);
        run_all();
        _exit(ddofi_test_summary("progress_bell_test (FI_SHM_DISABLE_CMA=1)"));
    }
    int st = -1;
    T_OK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    run_all();
    return ddofi_test_summary("progress_bell_test");
}
