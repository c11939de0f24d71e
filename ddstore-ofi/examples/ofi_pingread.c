/* ofi_pingread: serve a buffer in one process, read it from another with
 * ddstore-ofi only, verify every byte, print latency and bandwidth.
 *
 *   ofi_pingread [options]                 fork: the child serves, the parent reads
 *   ofi_pingread --serve FILE [options]    serve; write the blobs to FILE, wait for
 *                                          FILE.done (written by the reader)
 *   ofi_pingread --read FILE [options]     read from the server that wrote FILE
 *
 * Options:
 *   --provider P      provider (default: DDOFI_PROVIDER, else auto)
 *   --iface I         domain (default: DDOFI_IFACE)
 *   --local-only      socket providers stay on 127.0.0.1
 *   --single-node     let auto choose shm
 *   --lat-size B      bytes per latency read (default 4096)
 *   --bw-size B       bytes per bandwidth read (default 1048576)
 *   --batch N         reads per ddofi_read call in the bandwidth test (default 16)
 *   --iters N         latency reads (default 2000); bandwidth uses enough
 *                     batches to move >= 256 MiB or 2 s
 *   --row-size B      bytes per row in the batched-rows test (default 3136)
 *   --rows N          rows per ddofi_read call in that test (default 128): random
 *                     rows, one read each, for 1 s
 *   --thp             back both buffers with transparent huge pages
 *                     (madvise MADV_HUGEPAGE): same-node direct reads copy
 *                     several times faster with 2 MiB pages on both sides
 *   --quiet           only the RESULT line
 *   -v                library log to stderr (debug)
 *
 * Output: human lines, then one line
 *   RESULT ok=1 provider=... domain=... progress_thread=0|1 lat_us=... bw_gbs=...
 *          row_us=... (per row, batched)
 * Exit status 0 when the bytes read matched, 1 on a mismatch or error, 2 on
 * bad usage.  Uses only <ddstore/ofi.h> (and libc).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ddstore/ofi.h"

typedef struct opts {
    const char *provider, *iface, *serve_file, *read_file;
    int local_only, single_node, quiet, verbose, thp;
    size_t lat_size, bw_size, batch, iters, row_size, rows;
} opts_t;

#define BLOB_BYTES (sizeof(uint32_t) + DDOFI_ADDR_BLOB_MAX + DDOFI_MR_BLOB_SIZE)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void log_sink(void *arg, ddofi_log_level_t level, const char *msg)
{
    (void)arg;
    fprintf(stderr, "ddofi[%d] %d: %s\n", (int)getpid(), (int)level, msg);
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "ofi_pingread[%d]: %s: %s: %s\n", (int)getpid(), what, ddofi_strerror(rc),
            ddofi_last_error());
    return 1;
}

/* Anonymous memory, optionally advised to use transparent huge pages. */
static void *alloc_buf(size_t bytes, int thp)
{
    size_t align = (size_t)2 << 20;
    size_t len = thp ? bytes + align : bytes;
    unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (thp) {
        unsigned char *a = (unsigned char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
        madvise(a, bytes, MADV_HUGEPAGE);
        return a; /* the mapping is kept for the process's lifetime */
    }
    return p;
}

static unsigned char pattern(size_t i) { return (unsigned char)((i * 131u + 7u) ^ (i >> 13)); }

static int open_fabric(const opts_t *o, ddofi_fabric_t **fab)
{
    ddofi_fabric_params_t fp = {0};
    if (o->provider) {
        fp.field_mask |= DDOFI_FABRIC_FIELD_PROVIDER;
        fp.provider = o->provider;
    }
    if (o->iface) {
        fp.field_mask |= DDOFI_FABRIC_FIELD_IFACE;
        fp.iface = o->iface;
    }
    if (o->local_only) {
        fp.field_mask |= DDOFI_FABRIC_FIELD_LOCAL_ONLY;
        fp.local_only = 1;
    }
    fp.field_mask |= DDOFI_FABRIC_FIELD_SINGLE_NODE;
    fp.single_node = o->single_node;
    return ddofi_fabric_open(&fp, fab);
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n)
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

/* ---------------- server ---------------- */

/* Serve until `wait_done` returns. */
static int serve(const opts_t *o, size_t bytes, int out_fd, const char *out_file,
                 int (*wait_done)(void *), void *arg)
{
    ddofi_fabric_t *fab = NULL;
    ddofi_ep_t *ep = NULL;
    ddofi_mr_t *mr = NULL;
    int rc = open_fabric(o, &fab);
    if (rc)
        return fail("server: ddofi_fabric_open", rc);
    unsigned char *buf = alloc_buf(bytes, o->thp);
    if (!buf) {
        ddofi_fabric_close(fab);
        return fail("server: mmap", -ENOMEM);
    }
    for (size_t i = 0; i < bytes; i++)
        buf[i] = pattern(i);
    rc = ddofi_ep_open(fab, &(ddofi_ep_params_t){.field_mask = DDOFI_EP_FIELD_FLAGS,
                                                 .flags = DDOFI_EP_SERVE}, &ep);
    if (rc) {
        fail("server: ddofi_ep_open", rc);
        goto out;
    }
    ddofi_mr_params_t mp = {.field_mask = DDOFI_MR_FIELD_EP, .buf = buf, .len = bytes,
                            .access = DDOFI_ACCESS_REMOTE_READ, .ep = ep};
    rc = ddofi_mr_register(fab, &mp, &mr);
    if (rc) {
        fail("server: ddofi_mr_register", rc);
        goto out;
    }
    unsigned char blob[BLOB_BYTES];
    memset(blob, 0, sizeof blob);
    size_t alen = DDOFI_ADDR_BLOB_MAX;
    rc = ddofi_ep_address(ep, blob + 4, &alen);
    if (!rc)
        rc = ddofi_mr_export(mr, blob + 4 + DDOFI_ADDR_BLOB_MAX);
    if (rc) {
        fail("server: export", rc);
        goto out;
    }
    uint32_t l32 = (uint32_t)alen;
    memcpy(blob, &l32, 4);
    if (out_file) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", out_file);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || write_all(fd, blob, sizeof blob) || fsync(fd) || close(fd) ||
            rename(tmp, out_file)) {
            perror("server: writing the blob file");
            rc = 1;
            goto out;
        }
    } else if (write_all(out_fd, blob, sizeof blob)) {
        perror("server: pipe");
        rc = 1;
        goto out;
    }
    rc = wait_done(arg);
    if (out_file)
        unlink(out_file);
out:
    if (mr)
        ddofi_mr_deregister(mr);
    if (ep)
        ddofi_ep_close(ep);
    ddofi_fabric_close(fab);
    if (!o->thp)
        munmap(buf, bytes);
    return rc ? 1 : 0;
}

static int wait_pipe(void *arg)
{
    char c;
    return read_all(*(int *)arg, &c, 1) ? 1 : 0; /* EOF or a byte: reader done */
}

static int wait_file(void *arg)
{
    const char *done = arg;
    double t0 = now_s();
    while (access(done, F_OK)) {
        if (now_s() - t0 > 600) {
            fprintf(stderr, "server: no reader after 600 s\n");
            return 1;
        }
        usleep(10000);
    }
    unlink(done);
    return 0;
}

/* ---------------- reader ---------------- */

static int reader(const opts_t *o, size_t bytes, const unsigned char *blob, double *lat_us,
                  double *bw_gbs, double *row_us, ddofi_fabric_attr_t *attr_out, char *prov,
                  char *dom)
{
    ddofi_fabric_t *fab = NULL;
    ddofi_ep_t *ep = NULL;
    ddofi_mr_t *lmr = NULL;
    unsigned char *dst = NULL;
    int ret = 1;
    int rc = open_fabric(o, &fab);
    if (rc)
        return fail("reader: ddofi_fabric_open", rc);
    ddofi_fabric_attr_t attr;
    ddofi_fabric_query(fab, &attr);
    *attr_out = attr;
    snprintf(prov, 64, "%s", attr.provider);
    snprintf(dom, 64, "%s", attr.domain);
    rc = ddofi_ep_open(fab, NULL, &ep);
    if (rc) {
        fail("reader: ddofi_ep_open", rc);
        goto out;
    }
    uint32_t alen;
    memcpy(&alen, blob, 4);
    ddofi_peer_t peer;
    rc = ddofi_peer_insert(ep, blob + 4, alen, &peer);
    if (rc) {
        fail("reader: ddofi_peer_insert", rc);
        goto out;
    }
    ddofi_remote_t remote;
    rc = ddofi_remote_import(blob + 4 + DDOFI_ADDR_BLOB_MAX, DDOFI_MR_BLOB_SIZE, &remote);
    if (rc) {
        fail("reader: ddofi_remote_import", rc);
        goto out;
    }
    size_t dbytes = o->bw_size * o->batch;
    if (dbytes < o->lat_size)
        dbytes = o->lat_size;
    if (dbytes < o->row_size * o->rows)
        dbytes = o->row_size * o->rows;
    dst = alloc_buf(dbytes, o->thp);
    if (!dst) {
        fail("reader: mmap", -ENOMEM);
        goto out;
    }
    memset(dst, 0, dbytes);
    /* Register the destination once (needed with FI_MR_LOCAL, harmless
     * otherwise). */
    rc = ddofi_mr_register(fab, &(ddofi_mr_params_t){.buf = dst, .len = dbytes,
                                                     .access = DDOFI_ACCESS_LOCAL}, &lmr);
    if (rc) {
        fail("reader: ddofi_mr_register(destination)", rc);
        goto out;
    }

    /* Correctness: the whole buffer in bw_size pieces, then a byte-exact check. */
    size_t nver = (bytes + o->bw_size - 1) / o->bw_size;
    for (size_t k = 0; k < nver; k += o->batch) {
        ddofi_read_op_t ops[256];
        size_t n = 0;
        for (; n < o->batch && k + n < nver; n++) {
            size_t off = (k + n) * o->bw_size;
            size_t len = bytes - off < o->bw_size ? bytes - off : o->bw_size;
            ops[n] = (ddofi_read_op_t){peer, &remote, off, dst + n * o->bw_size, len, lmr};
        }
        rc = ddofi_read(ep, ops, n, NULL);
        if (rc) {
            fail("reader: ddofi_read (verify)", rc);
            goto out;
        }
        for (size_t j = 0; j < n; j++)
            for (size_t i = 0; i < ops[j].len; i++)
                if (dst[j * o->bw_size + i] != pattern(ops[j].offset + i)) {
                    fprintf(stderr, "reader: MISMATCH at byte %zu: got %u, want %u\n",
                            ops[j].offset + i, dst[j * o->bw_size + i],
                            pattern(ops[j].offset + i));
                    goto out;
                }
    }

    /* Latency: one read of lat_size per call, rotating offsets. */
    size_t slots = bytes / o->lat_size;
    for (size_t i = 0; i < 100; i++) { /* warm-up */
        ddofi_read_op_t op = {peer, &remote, (i % slots) * o->lat_size, dst, o->lat_size, lmr};
        if ((rc = ddofi_read(ep, &op, 1, NULL))) {
            fail("reader: ddofi_read (latency)", rc);
            goto out;
        }
    }
    double t0 = now_s();
    for (size_t i = 0; i < o->iters; i++) {
        ddofi_read_op_t op = {peer, &remote, (i % slots) * o->lat_size, dst, o->lat_size, lmr};
        if ((rc = ddofi_read(ep, &op, 1, NULL))) {
            fail("reader: ddofi_read (latency)", rc);
            goto out;
        }
    }
    *lat_us = (now_s() - t0) / (double)o->iters * 1e6;
    size_t last = ((o->iters - 1) % slots) * o->lat_size;
    for (size_t i = 0; i < o->lat_size; i++)
        if (dst[i] != pattern(last + i)) {
            fprintf(stderr, "reader: MISMATCH in latency read at byte %zu\n", last + i);
            goto out;
        }

    /* Bandwidth: batches of `batch` reads of bw_size. */
    size_t bslots = bytes / o->bw_size;
    double moved = 0;
    t0 = now_s();
    size_t iter = 0;
    while (moved < 256.0 * 1048576 && now_s() - t0 < 2.0) {
        ddofi_read_op_t ops[256];
        for (size_t n = 0; n < o->batch; n++)
            ops[n] = (ddofi_read_op_t){peer, &remote, ((iter + n) % bslots) * o->bw_size,
                                       dst + n * o->bw_size, o->bw_size, lmr};
        iter += o->batch;
        if ((rc = ddofi_read(ep, ops, o->batch, NULL))) {
            fail("reader: ddofi_read (bandwidth)", rc);
            goto out;
        }
        moved += (double)(o->batch * o->bw_size);
    }
    *bw_gbs = moved / (now_s() - t0) / 1e9;

    /* Batched rows: `rows` random rows of row_size per call. */
    {
        size_t nrows_src = bytes / o->row_size;
        ddofi_read_op_t *rops = calloc(o->rows, sizeof *rops);
        unsigned seed = 12345;
        double nrows_done = 0;
        t0 = now_s();
        while (now_s() - t0 < 1.0) {
            for (size_t k = 0; k < o->rows; k++)
                rops[k] = (ddofi_read_op_t){peer, &remote,
                                            (size_t)rand_r(&seed) % nrows_src * o->row_size,
                                            dst + k * o->row_size, o->row_size, lmr};
            if ((rc = ddofi_read(ep, rops, o->rows, NULL))) {
                free(rops);
                fail("reader: ddofi_read (rows)", rc);
                goto out;
            }
            nrows_done += (double)o->rows;
        }
        *row_us = (now_s() - t0) / nrows_done * 1e6;
        for (size_t k = 0; k < o->rows; k++)
            for (size_t i = 0; i < o->row_size; i++)
                if (dst[k * o->row_size + i] != pattern(rops[k].offset + i)) {
                    fprintf(stderr, "reader: MISMATCH in row %zu\n", k);
                    free(rops);
                    goto out;
                }
        free(rops);
    }
    ret = 0;
out:
    ddofi_mr_deregister(lmr);
    ddofi_ep_close(ep);
    ddofi_fabric_close(fab);
    if (dst && !o->thp)
        munmap(dst, dbytes);
    return ret;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: ofi_pingread [--serve FILE | --read FILE] [--provider P] [--iface I]\n"
            "                    [--local-only] [--single-node] [--lat-size B] [--bw-size B]\n"
            "                    [--batch N] [--iters N] [--row-size B] [--rows N] [--thp]\n"
            "                    [--quiet] [-v]\n");
}

static size_t parse_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end == 'K' || *end == 'k')
        v <<= 10;
    else if (*end == 'M' || *end == 'm')
        v <<= 20;
    else if (*end == 'G' || *end == 'g')
        v <<= 30;
    return (size_t)v;
}

int main(int argc, char **argv)
{
    opts_t o = {0};
    o.lat_size = 4096;
    o.bw_size = 1 << 20;
    o.batch = 16;
    o.iters = 2000;
    o.row_size = 3136;
    o.rows = 128;
    static const struct option lo[] = {
        {"serve", required_argument, 0, 'S'},   {"read", required_argument, 0, 'R'},
        {"provider", required_argument, 0, 'p'}, {"iface", required_argument, 0, 'i'},
        {"local-only", no_argument, 0, 'l'},    {"single-node", no_argument, 0, 'n'},
        {"lat-size", required_argument, 0, 'L'}, {"bw-size", required_argument, 0, 'B'},
        {"batch", required_argument, 0, 'b'},   {"iters", required_argument, 0, 'I'},
        {"quiet", no_argument, 0, 'q'},         {"help", no_argument, 0, 'h'},
        {"row-size", required_argument, 0, 'r'}, {"rows", required_argument, 0, 'N'},
        {"thp", no_argument, 0, 'T'},
        {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "vqh", lo, NULL)) != -1) {
        switch (c) {
        case 'S': o.serve_file = optarg; break;
        case 'R': o.read_file = optarg; break;
        case 'p': o.provider = optarg; break;
        case 'i': o.iface = optarg; break;
        case 'l': o.local_only = 1; break;
        case 'n': o.single_node = 1; break;
        case 'L': o.lat_size = parse_size(optarg); break;
        case 'B': o.bw_size = parse_size(optarg); break;
        case 'b': o.batch = parse_size(optarg); break;
        case 'I': o.iters = parse_size(optarg); break;
        case 'q': o.quiet = 1; break;
        case 'v': o.verbose = 1; break;
        case 'r': o.row_size = parse_size(optarg); break;
        case 'T': o.thp = 1; break;
        case 'N': o.rows = parse_size(optarg); break;
        default: usage(); return 2;
        }
    }
    if (!o.lat_size || !o.bw_size || !o.batch || o.batch > 256 || !o.iters || !o.row_size ||
        !o.rows ||
        (o.serve_file && o.read_file)) {
        usage();
        return 2;
    }
    if (o.verbose)
        ddofi_log_set_sink(log_sink, NULL, DDOFI_LOG_DEBUG);
    ddofi_env_prepare(-1);

    /* Served buffer: several bandwidth reads' worth so reads rotate. */
    size_t bytes = o.bw_size * 8;
    if (bytes < o.lat_size * 64)
        bytes = o.lat_size * 64;
    if (bytes < o.row_size * 1024)
        bytes = o.row_size * 1024;

    if (o.serve_file) {
        char done[4096];
        snprintf(done, sizeof done, "%s.done", o.serve_file);
        unlink(done);
        if (!o.quiet)
            printf("serving %zu bytes; blobs in %s\n", bytes, o.serve_file);
        fflush(stdout);
        return serve(&o, bytes, -1, o.serve_file, wait_file, done);
    }

    unsigned char blob[BLOB_BYTES];
    pid_t child = -1;
    int done_fd = -1;
    if (o.read_file) {
        double t0 = now_s();
        int fd;
        while ((fd = open(o.read_file, O_RDONLY)) < 0) {
            if (now_s() - t0 > 60) {
                fprintf(stderr, "reader: %s did not appear within 60 s\n", o.read_file);
                return 1;
            }
            usleep(10000);
        }
        int r = read_all(fd, blob, sizeof blob);
        close(fd);
        if (r) {
            fprintf(stderr, "reader: %s is truncated\n", o.read_file);
            return 1;
        }
    } else {
        int up[2], down[2];
        if (pipe(up) || pipe(down)) {
            perror("pipe");
            return 1;
        }
        fflush(stdout);
        child = fork();
        if (child < 0) {
            perror("fork");
            return 1;
        }
        if (child == 0) {
            close(up[0]);
            close(down[1]);
            _exit(serve(&o, bytes, up[1], NULL, wait_pipe, &down[0]));
        }
        close(up[1]);
        close(down[0]);
        done_fd = down[1];
        if (read_all(up[0], blob, sizeof blob)) {
            fprintf(stderr, "reader: the server exited before sending its address\n");
            waitpid(child, NULL, 0);
            return 1;
        }
        close(up[0]);
    }

    double lat = 0, bw = 0, rowus = 0;
    ddofi_fabric_attr_t attr;
    memset(&attr, 0, sizeof attr);
    char prov[64] = "?", dom[64] = "?";
    int rc = reader(&o, bytes, blob, &lat, &bw, &rowus, &attr, prov, dom);

    if (o.read_file) {
        char done[4096];
        snprintf(done, sizeof done, "%s.done", o.read_file);
        int fd = open(done, O_WRONLY | O_CREAT, 0600);
        if (fd >= 0)
            close(fd);
    } else {
        (void)write_all(done_fd, "x", 1);
        close(done_fd);
        int st = 0;
        waitpid(child, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st))
            rc = 1;
    }
    if (rc) {
        printf("RESULT ok=0 provider=%s domain=%s\n", prov, dom);
        return 1;
    }
    if (!o.quiet) {
        printf("provider %s, domain %s, progress thread on the server: %s, max read %zu\n",
               prov, dom, attr.progress_thread ? "yes" : "no", attr.max_read_bytes);
        printf("verified %zu bytes\n", bytes);
        printf("latency   %8zu B reads: %8.2f us/read (%zu reads)\n", o.lat_size, lat, o.iters);
        printf("bandwidth %8zu B reads: %8.2f GB/s (batches of %zu)\n", o.bw_size, bw, o.batch);
        printf("rows      %8zu B rows:  %8.3f us/row (random rows, %zu per call)\n", o.row_size,
               rowus, o.rows);
    }
    printf("RESULT ok=1 provider=%s domain=%s progress_thread=%d lat_us=%.2f bw_gbs=%.3f "
           "row_us=%.3f\n", prov, dom, attr.progress_thread, lat, bw, rowus);
    return 0;
}
