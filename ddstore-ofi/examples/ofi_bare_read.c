/* ofi_bare_read: the reference a library read is compared against - a bare
 * fi_read loop written against libfabric directly, with no ddstore-ofi
 * code: fork, the child serves a registered buffer and drives progress,
 * the parent reads it.
 *
 *   ofi_bare_read [--provider "tcp;ofi_rxm"] [--size B] [--window N]
 *                 [--iters N] [--server-wait] [--no-local-only]
 *
 *   --provider P     libfabric provider string (default "tcp;ofi_rxm")
 *   --size B         bytes per read (default 4096)
 *   --window N       reads kept in flight (default 1 = latency; >1 = rate)
 *   --iters N        reads (default 20000)
 *   --server-wait    the server sleeps in fi_cq_sread on a FI_WAIT_FD CQ
 *                    (what ddstore-ofi's progress thread does) instead of
 *                    spinning in fi_cq_read (best case, burns a core)
 *   --no-local-only  socket providers on the default interface, not 127.0.0.1
 *
 * Prints "BARE provider=.. size=.. window=.. server=spin|wait us_per_read=..
 * gb_s=..".  Exit 0 on success (the last buffer is verified).
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define CHECK(call)                                                            \
    do {                                                                       \
        int rc_ = (int)(call);                                                 \
        if (rc_) {                                                             \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call,       \
                    fi_strerror(-rc_));                                        \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

typedef struct {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_ep *ep;
    struct fid_av *av;
    struct fid_cq *cq;
} res_t;

typedef struct {
    char addr[256];
    size_t alen;
    uint64_t key, base;
    int virt, waits;
} exch_t;

static const char *g_prov = "tcp;ofi_rxm";
static int g_local = 1;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Returns whether the CQ got a wait fd (shm has none: the server spins). */
static int setup(res_t *r, int wait_fd)
{
    struct fi_info *h = fi_allocinfo();
    h->ep_attr->type = FI_EP_RDM;
    h->caps = FI_RMA | FI_READ | FI_REMOTE_READ;
    h->mode = FI_CONTEXT | FI_CONTEXT2;
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                              FI_MR_ENDPOINT;
    h->domain_attr->threading = FI_THREAD_SAFE;
    h->tx_attr->msg_order = FI_ORDER_NONE;
    h->rx_attr->msg_order = FI_ORDER_NONE;
    h->fabric_attr->prov_name = strdup(g_prov);
    int sock = strncmp(g_prov, "shm", 3) != 0;
    CHECK(fi_getinfo(FI_VERSION(1, 9), (g_local && sock) ? "127.0.0.1" : NULL, NULL,
                     (g_local && sock) ? FI_SOURCE : 0, h, &r->info));
    fi_freeinfo(h);
    CHECK(fi_fabric(r->info->fabric_attr, &r->fabric, NULL));
    CHECK(fi_domain(r->fabric, r->info, &r->domain, NULL));
    struct fi_av_attr av = {.type = FI_AV_TABLE};
    CHECK(fi_av_open(r->domain, &av, &r->av, NULL));
    struct fi_cq_attr cq = {.format = FI_CQ_FORMAT_CONTEXT, .size = 4096,
                            .wait_obj = wait_fd ? FI_WAIT_FD : FI_WAIT_NONE};
    if (fi_cq_open(r->domain, &cq, &r->cq, NULL)) {
        cq.wait_obj = FI_WAIT_NONE;
        wait_fd = 0;
        CHECK(fi_cq_open(r->domain, &cq, &r->cq, NULL));
    }
    CHECK(fi_endpoint(r->domain, r->info, &r->ep, NULL));
    CHECK(fi_ep_bind(r->ep, &r->av->fid, 0));
    CHECK(fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV));
    CHECK(fi_enable(r->ep));
    return wait_fd;
}

static void teardown(res_t *r)
{
    fi_close(&r->ep->fid);
    fi_close(&r->cq->fid);
    fi_close(&r->av->fid);
    fi_close(&r->domain->fid);
    fi_close(&r->fabric->fid);
    fi_freeinfo(r->info);
}

static int server(size_t bytes, int wait_fd, int out_fd, int cmd_fd)
{
    res_t r;
    wait_fd = setup(&r, wait_fd);
    char *buf = aligned_alloc(4096, bytes);
    for (size_t i = 0; i < bytes; i++)
        buf[i] = (char)(i * 7 + 3);
    struct fid_mr *mr;
    CHECK(fi_mr_reg(r.domain, buf, bytes, FI_REMOTE_READ, 0, 1, 0, &mr, NULL));
    if (r.info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
        CHECK(fi_mr_bind(mr, &r.ep->fid, 0));
        CHECK(fi_mr_enable(mr));
    }
    exch_t x = {0};
    x.alen = sizeof x.addr;
    CHECK(fi_getname(&r.ep->fid, x.addr, &x.alen));
    x.key = fi_mr_key(mr);
    x.base = (uint64_t)(uintptr_t)buf;
    x.waits = wait_fd;
    x.virt = (r.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
    if (write(out_fd, &x, sizeof x) != (ssize_t)sizeof x)
        return 1;
    struct pollfd pfd = {.fd = cmd_fd, .events = POLLIN};
    struct fi_cq_entry e[16];
    for (unsigned long it = 0;; it++) {
        if (wait_fd)
            (void)fi_cq_sread(r.cq, e, 16, NULL, 100);
        else
            (void)fi_cq_read(r.cq, e, 16);
        if ((wait_fd || (it & 1023) == 0) && poll(&pfd, 1, 0) > 0)
            break;
    }
    fi_close(&mr->fid);
    teardown(&r);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    size_t size = 4096, window = 1, iters = 20000;
    int wait_fd = 0;
    static const struct option lo[] = {{"provider", required_argument, 0, 'p'},
                                       {"size", required_argument, 0, 's'},
                                       {"window", required_argument, 0, 'w'},
                                       {"iters", required_argument, 0, 'i'},
                                       {"server-wait", no_argument, 0, 'W'},
                                       {"no-local-only", no_argument, 0, 'L'},
                                       {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'p': g_prov = optarg; break;
        case 's': size = strtoull(optarg, NULL, 0); break;
        case 'w': window = strtoull(optarg, NULL, 0); break;
        case 'i': iters = strtoull(optarg, NULL, 0); break;
        case 'W': wait_fd = 1; break;
        case 'L': g_local = 0; break;
        default:
            fprintf(stderr, "usage: ofi_bare_read [--provider P] [--size B] [--window N] "
                            "[--iters N] [--server-wait] [--no-local-only]\n");
            return 2;
        }
    }
    if (!size || !window || window > 4096 || !iters)
        return 2;
    size_t slots = 64, bytes = size * slots;
    int up[2], down[2];
    if (pipe(up) || pipe(down))
        return 1;
    pid_t pid = fork();
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        _exit(server(bytes, wait_fd, up[1], down[0]));
    }
    close(up[1]);
    close(down[0]);
    exch_t x;
    if (read(up[0], &x, sizeof x) != (ssize_t)sizeof x) {
        fprintf(stderr, "server failed\n");
        return 1;
    }
    res_t r;
    setup(&r, 0);
    fi_addr_t peer;
    if (fi_av_insert(r.av, x.addr, 1, &peer, 0, NULL) != 1) {
        fprintf(stderr, "fi_av_insert failed\n");
        return 1;
    }
    char *dst = aligned_alloc(4096, size * window);
    struct fid_mr *lmr;
    CHECK(fi_mr_reg(r.domain, dst, size * window, FI_READ, 0, 2, 0, &lmr, NULL));
    void *desc = fi_mr_desc(lmr);
    struct fi_context2 *ctx = calloc(window, sizeof *ctx);
    uint64_t addr0 = x.virt ? x.base : 0;

    /* warm-up (connects), then the timed loop */
    double t0 = 0;
    size_t posted = 0, done = 0, total = iters + 100;
    while (done < total) {
        while (posted < total && posted - done < window) {
            size_t slot = posted % window;
            ssize_t rc = fi_read(r.ep, dst + slot * size, size, desc, peer,
                                 addr0 + (posted % slots) * size, x.key, &ctx[slot]);
            if (rc == -FI_EAGAIN)
                break;
            if (rc) {
                fprintf(stderr, "fi_read: %s\n", fi_strerror((int)-rc));
                return 1;
            }
            posted++;
        }
        struct fi_cq_entry e[16];
        ssize_t n = fi_cq_read(r.cq, e, 16);
        if (n > 0) {
            done += (size_t)n;
            if (done >= 100 && t0 == 0)
                t0 = now_s();
        } else if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry ee = {0};
            fi_cq_readerr(r.cq, &ee, 0);
            fprintf(stderr, "read error: %s\n", fi_strerror(ee.err));
            return 1;
        }
    }
    double dt = now_s() - t0;
    /* verify the last read's slot */
    size_t last = total - 1, slot = last % window, off = (last % slots) * size;
    int bad = 0;
    for (size_t i = 0; i < size; i++)
        bad |= dst[slot * size + i] != (char)((off + i) * 7 + 3);
    if (write(down[1], "q", 1) != 1)
        bad = 1;
    int st;
    waitpid(pid, &st, 0);
    fi_close(&lmr->fid);
    teardown(&r);
    double n = (double)(total - 100);
    printf("BARE provider=%s size=%zu window=%zu server=%s us_per_read=%.2f gb_s=%.3f%s\n",
           g_prov, size, window, x.waits ? "wait" : "spin", dt / n * 1e6,
           n * (double)size / dt / 1e9, bad ? " VERIFY-FAILED" : "");
    return bad;
}
