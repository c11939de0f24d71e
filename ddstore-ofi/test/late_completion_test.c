/* ddstore-ofi: a read that timed out must not write into the caller's
 * memory afterwards.
 *
 * Two processes (forked, blobs through a pipe).  The owner is stopped
 * (SIGSTOP) while a read from it is in flight; the read times out
 * (read_timeout_s); the owner resumes (SIGCONT) and answers the old request.
 * Then:
 *   - "later batch": the caller's buffer, meanwhile filled with other
 *     contents (what a later successful batch would have put there), must
 *     keep them while the reader goes on reading from the owner;
 *   - "freed buffer": the buffer is freed right after the timeout and its
 *     memory handed out again; nothing may write into it (under
 *     --config=asan a late write is a heap-use-after-free report).
 * Both fail without the fence (the endpoint of a timed-out read is closed
 * before the error returns and a fresh one opened).
 *
 * Provider: tcp (tcp;ofi_rxm on 127.0.0.1) by default, or the names given
 * as arguments.  shm is not fenced (quirk KEEP_EP); its reads from a
 * stopped owner complete anyway (CMA copies by the reader): see
 * docs/concurrency.md.
 * A provider missing here is a SKIP with the reason. */
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

#define R_BYTES (1u << 20)
#define BUF (64u << 10) /* below malloc's mmap threshold: a heap block */

static unsigned char pat(size_t i) { return (unsigned char)((i * 2654435761u) >> 13); }

typedef struct blobs {
    uint32_t alen;
    unsigned char addr[DDOFI_ADDR_BLOB_MAX];
    unsigned char r[DDOFI_MR_BLOB_SIZE];
} blobs_t;

static ddofi_fabric_params_t fparams(const char *prov, double tmo)
{
    ddofi_fabric_params_t p = ddofi_t_fparams(prov);
    p.field_mask |= DDOFI_FABRIC_FIELD_READ_TIMEOUT;
    p.read_timeout_s = tmo;
    return p;
}

/* The owner: one region, served by the library's progress thread, until
 * the pipe closes. */
static int owner_main(const char *prov, int out_fd, int cmd_fd)
{
    ddofi_fabric_params_t p = fparams(prov, 0);
    ddofi_fabric_t *f = NULL;
    ddofi_ep_t *ep = NULL;
    ddofi_mr_t *m = NULL;
    unsigned char *r = malloc(R_BYTES);
    for (size_t i = 0; i < R_BYTES; i++)
        r[i] = pat(i);
    blobs_t bl;
    memset(&bl, 0, sizeof bl);
    size_t alen = sizeof bl.addr;
    if (ddofi_fabric_open(&p, &f) ||
        ddofi_ep_open(f, &(ddofi_ep_params_t){DDOFI_EP_FIELD_FLAGS, DDOFI_EP_SERVE}, &ep) ||
        ddofi_mr_register(f, &(ddofi_mr_params_t){.field_mask = DDOFI_MR_FIELD_EP, .buf = r,
                                                  .len = R_BYTES,
                                                  .access = DDOFI_ACCESS_REMOTE_READ, .ep = ep},
                          &m) ||
        ddofi_ep_address(ep, bl.addr, &alen) || ddofi_mr_export(m, bl.r)) {
        fprintf(stderr, "owner(%s): %s\n", prov, ddofi_last_error());
        return 2;
    }
    bl.alen = (uint32_t)alen;
    if (forkcomm_write_all(out_fd, &bl, sizeof bl))
        return 2;
    char c;
    while (read(cmd_fd, &c, 1) < 0 && errno == EINTR)
        ;
    int rc = ddofi_mr_deregister(m) | ddofi_ep_close(ep) | ddofi_fabric_close(f);
    free(r);
    return rc ? 3 : 0;
}

typedef struct owner {
    pid_t pid;
    int cmd_w, rep_r;
    blobs_t bl;
} owner_t;

static int owner_child(void *arg, int out_fd, int cmd_fd)
{
    return owner_main(arg, out_fd, cmd_fd);
}

static int owner_start(const char *prov, owner_t *o)
{
    o->pid = forkcomm_spawn_piped(owner_child, (void *)prov, &o->bl, sizeof o->bl, &o->rep_r,
                           &o->cmd_w);
    return o->pid < 0 ? -1 : 0;
}

static int owner_stop(owner_t *o)
{
    kill(o->pid, SIGCONT);
    close(o->cmd_w);
    int st = 0;
    waitpid(o->pid, &st, 0);
    close(o->rep_r);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static void stop_owner(pid_t pid)
{
    kill(pid, SIGSTOP);
    int st;
    waitpid(pid, &st, WUNTRACED); /* stopped for sure */
}

/* Give the resumed owner time to answer the old requests while this side
 * keeps its endpoint progressing and reads on (into `other`), so that any
 * late data has every chance to land.  Returns the number of failed reads. */
static int keep_reading(ddofi_ep_t *ep, ddofi_peer_t peer, const ddofi_remote_t *rem,
                        unsigned char *other, size_t *bad_p)
{
    int fails = 0;
    struct timespec nap = {0, 20 * 1000 * 1000};
    for (int i = 0; i < 25; i++) {
        ddofi_read_op_t op = {peer, rem, (uint64_t)BUF * (1 + i % 4), other, BUF, NULL};
        memset(other, 0, BUF);
        if (ddofi_read(ep, &op, 1, NULL)) {
            fails++;
            fprintf(stderr, "   read after the timeout: %s\n", ddofi_last_error());
        } else {
            for (size_t k = 0; k < BUF; k++)
                *bad_p += other[k] != pat(op.offset + k);
        }
        (void)ddofi_ep_progress(ep);
        nanosleep(&nap, NULL);
    }
    return fails;
}

static size_t count_not(const unsigned char *p, size_t n, unsigned char v)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += p[i] != v;
    return bad;
}

static void run(const char *prov)
{
    printf("== provider %s\n", prov);
    fflush(stdout);
    ddofi_fabric_params_t p = fparams(prov, 1.0);
    ddofi_fabric_t *f = NULL;
    if (ddofi_t_open(&p, &f))
        return;
    int rc;
    ddofi_fabric_attr_t at;
    ddofi_fabric_query(f, &at);
    if (ddofi_quirk_lookup(at.provider)->progress == DDOFI_QP_HARDWARE) {
        T_SKIP("provider %s completes reads in hardware: a stopped owner does not stall "
               "them", at.provider);
        ddofi_fabric_close(f);
        return;
    }
    owner_t o;
    if (owner_start(prov, &o)) {
        T_OK(!"owner start");
        ddofi_fabric_close(f);
        return;
    }
    ddofi_ep_t *ep = NULL;
    ddofi_peer_t peer = 0;
    ddofi_remote_t rem;
    T_EQ_INT(ddofi_ep_open(f, NULL, &ep), 0);
    T_EQ_INT(ddofi_peer_insert(ep, o.bl.addr, o.bl.alen, &peer), 0);
    T_EQ_INT(ddofi_remote_import(o.bl.r, DDOFI_MR_BLOB_SIZE, &rem), 0);
    unsigned char *other = malloc(BUF);

    /* Connected and working. */
    unsigned char *buf = malloc(BUF);
    ddofi_read_op_t op = {peer, &rem, 0, buf, BUF, NULL};
    T_EQ_INT(ddofi_read(ep, &op, 1, NULL), 0);
    size_t wrong = 0;
    for (size_t k = 0; k < BUF; k++)
        wrong += buf[k] != pat(k);
    T_EQ_INT(wrong, 0);

    /* 1. Later batch: the buffer gets other contents after the timeout. */
    stop_owner(o.pid);
    memset(buf, 0, BUF);
    rc = ddofi_read(ep, &op, 1, NULL);
    T_EQ_INT(rc, -ETIMEDOUT);
    T_CONTAINS(ddofi_last_error(), "DDSTORE_READ_TIMEOUT_S");
    printf("   stopped owner: %s\n", ddofi_last_error());
    memset(buf, 0xA5, BUF); /* what the next batch put there */
    kill(o.pid, SIGCONT);
    size_t bad = 0;
    T_EQ_INT(keep_reading(ep, peer, &rem, other, &bad), 0);
    T_EQ_INT(bad, 0);
    size_t late = count_not(buf, BUF, 0xA5);
    if (late)
        fprintf(stderr, "   %zu bytes of the later batch overwritten by the timed-out read\n",
                late);
    T_EQ_INT(late, 0);

    /* 2. Freed buffer: its memory is handed out again at once. */
    stop_owner(o.pid);
    op.dst = buf;
    rc = ddofi_read(ep, &op, 1, NULL);
    T_EQ_INT(rc, -ETIMEDOUT);
    free(buf);
    enum { NB = 8 };
    unsigned char *blk[NB];
    for (int i = 0; i < NB; i++) {
        blk[i] = malloc(BUF);
        memset(blk[i], 0x3C, BUF);
    }
    kill(o.pid, SIGCONT);
    bad = 0;
    T_EQ_INT(keep_reading(ep, peer, &rem, other, &bad), 0);
    T_EQ_INT(bad, 0);
    late = 0;
    for (int i = 0; i < NB; i++) {
        late += count_not(blk[i], BUF, 0x3C);
        free(blk[i]);
    }
    T_EQ_INT(late, 0);

    free(other);
    T_EQ_INT(ddofi_ep_close(ep), 0);
    T_EQ_INT(ddofi_fabric_close(f), 0);
    T_EQ_INT(owner_stop(&o), 0);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc > 1)
        for (int i = 1; i < argc; i++)
            run(argv[i]);
    else
        run("tcp");
    return ddofi_test_summary("late_completion_test");
}
