/* ofi-probe: "can ddstore read here, and how fast?"
 *
 * Like fi_info, but for what ddstore needs: for every provider it knows
 * (or the ones named on the command line) it opens the fabric the way
 * ddstore-ofi would, forks a process that serves a registered buffer, reads
 * it back with ddofi_read, checks the bytes, and measures the latency of
 * 4 KiB reads and the bandwidth of 1 MiB reads (batches of 16).
 *
 * "progress" says who makes a read complete: "target thread" (the owner's
 * progress thread, software providers), "not needed" (the NIC or the
 * provider's own thread), "direct (CMA)" (same-node reads straight from the
 * owner's memory with process_vm_readv; no owner involvement).
 *
 *   ofi-probe [--all-interfaces] [--quick] [PROVIDER ...]
 *
 *   --all-interfaces  socket providers use the default interface instead of
 *                     127.0.0.1 (still a same-host read)
 *   --quick           fewer reads (for tests)
 *
 * Uses only ddstore-ofi.  Exit status: 0 when at least one provider can
 * read, 1 otherwise.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ddstore/ofi.h"
#define FORKCOMM_PIPES_ONLY   /* the piped child only (no ddstore-core) */
#include "forkcomm.h"

#define BUF_BYTES (16u << 20)
#define LAT_SIZE 4096u
#define BW_SIZE (1u << 20)
#define BW_BATCH 16u

static int g_local_only = 1, g_quick = 0;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static ddofi_fabric_params_t params(const char *prov)
{
    ddofi_fabric_params_t p = {0};
    p.field_mask = DDOFI_FABRIC_FIELD_PROVIDER | DDOFI_FABRIC_FIELD_LOCAL_ONLY |
                   DDOFI_FABRIC_FIELD_SINGLE_NODE | DDOFI_FABRIC_FIELD_READ_TIMEOUT;
    p.provider = prov;
    p.local_only = g_local_only;
    p.single_node = 1;
    p.read_timeout_s = 10;
    return p;
}

typedef struct {
    int ok;
    uint32_t alen;
    unsigned char addr[DDOFI_ADDR_BLOB_MAX];
    unsigned char mr[DDOFI_MR_BLOB_SIZE];
    char err[512];
} hello_t;

static unsigned char pat(size_t i) { return (unsigned char)(i * 13 + (i >> 12)); }

static void server(const char *prov, int out_fd, int cmd_fd)
{
    hello_t h;
    memset(&h, 0, sizeof h);
    ddofi_fabric_params_t p = params(prov);
    ddofi_fabric_t *f = NULL;
    ddofi_ep_t *ep = NULL;
    ddofi_mr_t *mr = NULL;
    unsigned char *buf = mmap(NULL, BUF_BYTES, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    for (size_t i = 0; i < BUF_BYTES; i++)
        buf[i] = pat(i);
    int rc = ddofi_fabric_open(&p, &f);
    if (!rc)
        rc = ddofi_ep_open(f, &(ddofi_ep_params_t){DDOFI_EP_FIELD_FLAGS, DDOFI_EP_SERVE}, &ep);
    if (!rc)
        rc = ddofi_mr_register(f, &(ddofi_mr_params_t){.field_mask = DDOFI_MR_FIELD_EP,
                                                       .buf = buf, .len = BUF_BYTES,
                                                       .access = DDOFI_ACCESS_REMOTE_READ,
                                                       .ep = ep}, &mr);
    size_t alen = sizeof h.addr;
    if (!rc)
        rc = ddofi_ep_address(ep, h.addr, &alen);
    if (!rc)
        rc = ddofi_mr_export(mr, h.mr);
    h.ok = rc == 0;
    h.alen = (uint32_t)alen;
    if (rc)
        snprintf(h.err, sizeof h.err, "server: %s", ddofi_last_error());
    if (write(out_fd, &h, sizeof h) != (ssize_t)sizeof h)
        h.ok = 0;
    if (h.ok) {
        char c;
        (void)forkcomm_read_all(cmd_fd, &c, 1);
    }
    ddofi_mr_deregister(mr);
    ddofi_ep_close(ep);
    ddofi_fabric_close(f);
}

typedef struct {
    char domain[64];
    char progress[32];
    double lat_us, bw_gbs;
    char err[600];
} result_t;

static int server_main(void *prov, int out_fd, int cmd_fd)
{
    server((const char *)prov, out_fd, cmd_fd);
    return 0;
}

static int measure(const char *prov, result_t *res)
{
    hello_t h;
    int rep_r, cmd_w;
    pid_t pid = forkcomm_spawn_piped(server_main, (void *)prov, &h, sizeof h, &rep_r, &cmd_w);
    if (pid < 0) {
        snprintf(res->err, sizeof res->err, "server died");
        return -1;
    }
    int ok = 0;
    ddofi_fabric_t *f = NULL;
    ddofi_ep_t *ep = NULL;
    ddofi_mr_t *lmr = NULL;
    unsigned char *dst = NULL;
    if (!h.ok) {
        snprintf(res->err, sizeof res->err, "%s", h.err);
        goto out;
    }
    ddofi_fabric_params_t p = params(prov);
    ddofi_peer_t peer;
    ddofi_remote_t rem;
    int rc = ddofi_fabric_open(&p, &f);
    if (!rc)
        rc = ddofi_ep_open(f, NULL, &ep);
    if (!rc)
        rc = ddofi_peer_insert(ep, h.addr, h.alen, &peer);
    if (!rc)
        rc = ddofi_remote_import(h.mr, sizeof h.mr, &rem);
    dst = malloc(BW_SIZE * BW_BATCH);
    if (!rc)
        rc = ddofi_mr_register(f, &(ddofi_mr_params_t){.buf = dst, .len = BW_SIZE * BW_BATCH,
                                                       .access = DDOFI_ACCESS_LOCAL}, &lmr);
    if (rc) {
        snprintf(res->err, sizeof res->err, "%s", ddofi_last_error());
        goto out;
    }
    ddofi_fabric_attr_t at;
    ddofi_fabric_query(f, &at);
    snprintf(res->domain, sizeof res->domain, "%s", at.domain);
    snprintf(res->progress, sizeof res->progress, "%s",
             at.direct_reads ? "direct (CMA)" : at.progress_thread ? "target thread"
                                                                   : "not needed");
    /* correctness */
    for (size_t off = 0; off < BUF_BYTES; off += BW_SIZE * BW_BATCH) {
        ddofi_read_op_t ops[BW_BATCH];
        for (size_t k = 0; k < BW_BATCH; k++)
            ops[k] = (ddofi_read_op_t){peer, &rem, off + k * BW_SIZE, dst + k * BW_SIZE,
                                       BW_SIZE, lmr};
        if ((rc = ddofi_read(ep, ops, BW_BATCH, NULL))) {
            snprintf(res->err, sizeof res->err, "%s", ddofi_last_error());
            goto out;
        }
        for (size_t i = 0; i < BW_SIZE * BW_BATCH; i++)
            if (dst[i] != pat(off + i)) {
                snprintf(res->err, sizeof res->err, "wrong byte at %zu", off + i);
                goto out;
            }
    }
    /* latency */
    size_t n = g_quick ? 200 : 2000;
    double t0 = 0;
    for (size_t i = 0; i < n + 50; i++) {
        if (i == 50)
            t0 = now_s();
        ddofi_read_op_t op = {peer, &rem, (i % 512) * LAT_SIZE, dst, LAT_SIZE, lmr};
        if ((rc = ddofi_read(ep, &op, 1, NULL))) {
            snprintf(res->err, sizeof res->err, "%s", ddofi_last_error());
            goto out;
        }
    }
    res->lat_us = (now_s() - t0) / (double)n * 1e6;
    /* bandwidth */
    double moved = 0, limit = g_quick ? 0.2 : 1.0;
    t0 = now_s();
    for (size_t it = 0; now_s() - t0 < limit; it++) {
        ddofi_read_op_t ops[BW_BATCH];
        for (size_t k = 0; k < BW_BATCH; k++)
            ops[k] = (ddofi_read_op_t){peer, &rem, ((it + k) % 16) * BW_SIZE, dst + k * BW_SIZE,
                                       BW_SIZE, lmr};
        if ((rc = ddofi_read(ep, ops, BW_BATCH, NULL))) {
            snprintf(res->err, sizeof res->err, "%s", ddofi_last_error());
            goto out;
        }
        moved += BW_SIZE * BW_BATCH;
    }
    res->bw_gbs = moved / (now_s() - t0) / 1e9;
    ok = 1;
out:
    ddofi_mr_deregister(lmr);
    ddofi_ep_close(ep);
    ddofi_fabric_close(f);
    free(dst);
    if (write(cmd_w, "q", 1) != 1) { /* server exits on EOF too */
    }
    close(cmd_w);
    close(rep_r);
    int st;
    waitpid(pid, &st, 0);
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    const char *defaults[] = {"cxi", "verbs", "efa", "shm", "tcp;ofi_rxm", "udp;ofi_rxd",
                              "net;ofi_rxm", "sockets", "psm3", "psm2"};
    const char *list[64];
    int n = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--all-interfaces"))
            g_local_only = 0;
        else if (!strcmp(argv[i], "--quick"))
            g_quick = 1;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: ofi-probe [--all-interfaces] [--quick] [PROVIDER ...]\n");
            return 2;
        } else if (n < 64)
            list[n++] = argv[i];
    }
    if (!n)
        for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
            list[n++] = defaults[i];
    ddofi_env_prepare(-1);
    printf("ddstore-ofi %s, libfabric API %s: can ddstore read here, and how fast?\n",
           ddofi_version(), ddofi_libfabric_version());
    printf("(same-host reads between two processes%s; 4 KiB: one read per call; "
           "1 MiB: batches of %u)\n\n", g_local_only ? " over 127.0.0.1 for socket providers" : "",
           BW_BATCH);
    printf("%-14s %-8s %-7s %-14s %12s %12s\n", "provider", "domain", "fi_read", "progress",
           "4KiB lat us", "1MiB GB/s");
    int any = 0;
    for (int i = 0; i < n; i++) {
        ddofi_fabric_params_t p = params(list[i]);
        ddofi_fabric_t *f = NULL;
        int rc = ddofi_fabric_open(&p, &f);
        if (rc) {
            const char *e = ddofi_last_error();
            const char *cut = strstr(e, "; found");
            printf("%-14s %-8s %-7s %-14s %12s %12s  %s\n", list[i], "-", "no", "-", "-", "-",
                   rc == -DDOFI_ENOPROV ? "not on this machine" : ddofi_strerror(rc));
            if (rc != -DDOFI_ENOPROV)
                printf("    %.*s\n", cut ? (int)(cut - e) : (int)strlen(e), e);
            continue;
        }
        ddofi_fabric_close(f);
        result_t r;
        memset(&r, 0, sizeof r);
        if (measure(list[i], &r) == 0) {
            any = 1;
            printf("%-14s %-8s %-7s %-14s %12.2f %12.2f\n", list[i], r.domain, "yes", r.progress,
                   r.lat_us, r.bw_gbs);
        } else {
            printf("%-14s %-8s %-7s %-14s %12s %12s  %s\n", list[i], r.domain[0] ? r.domain : "?",
                   "FAILED", r.progress[0] ? r.progress : "-", "-", "-", r.err);
        }
        fflush(stdout);
    }
    printf("\nDDSTORE_FABRIC=auto picks the first available of cxi > verbs > efa > shm "
           "(single node) > tcp;ofi_rxm.\n");
    return any ? 0 : 1;
}
