/* ddstore-ofi adapter: method 1's same-node shards, mapped and read with
 * memcpy (as method 0 reads MPI shared windows).
 *
 * shard_alloc puts a host shard in a memfd (mode 0600, sealed against
 * shrinking and growing) mapped MAP_SHARED, followed by one page that holds
 * a trailer: a magic, a random 64-bit tag and the shard's size.  At
 * region_create every rank exchanges (tag, size, pid, memfd number, uid)
 * with the registrations.  A rank on the same host (same host name, same
 * effective uid) maps a peer's shard on its first read of it, by opening
 * /proc/<pid>/fd/<fd> read-only (the kernel allows that to processes that
 * may ptrace-read the owner: the same uid), and checks the file (regular,
 * ours, the expected size) and the trailer (magic, tag, size) before it
 * serves a single row from it: a memfd number reused by another file, or a
 * pid reused by another process, is refused, never read.
 *
 * Safety:
 *   - A mapping keeps the memfd's pages alive: after the owner's var_free
 *     (or exit) a process that mapped the shard still reads the shard's last
 *     contents, never freed or reused memory.  Within the store every rank
 *     unmaps at region_destroy (collective, after every rank detached).
 *   - After the copies from a peer's mapping the read checks that the owner
 *     process has not exited (a pidfd opened when the shard was mapped,
 *     polled: a zombie counts as exited; kill(pid, 0) where pidfds do not
 *     exist): a read of a rank that exited fails with an error, as
 *     libfabric's reads do.
 *   - Forked readers (DDS_READER_FORKED) inherit the parent's mappings
 *     (MAP_SHARED: they see updates) and map the others themselves.
 *   - Whatever cannot be mapped (memfd refused, no memory, /proc refused,
 *     another uid or pid namespace, DDSTORE_OFI_MAP_SHARDS=0) is read
 *     through libfabric as before; the first such case of a variable is
 *     logged once per process (INFO).
 * Each memfd shard keeps one descriptor open in its owner (peers open it
 * through /proc): at most a quarter of RLIMIT_NOFILE's soft limit go to
 * shards, the rest are malloc'ed (and read through libfabric), so that the
 * shards never starve the process of descriptors.
 * memfd pages come from the kernel's internal tmpfs, not /dev/shm: a small
 * /dev/shm (Docker's 64 MB) does not limit shards.  Pages are reserved at
 * allocation (fallocate): a shortage is a fallback then, never a SIGBUS
 * later. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create, F_ADD_SEALS */
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ddstore/errors.h"
#include "ddstore/log.h"
#include "ddofi_tr_internal.h"

#define SHARD_MAGIC 0x64647368617264ULL /* "ddshard" */

typedef struct shard_trailer {
    uint64_t magic, tag, bytes;
} shard_trailer_t;

/* shard_alloc's token. */
typedef struct ddofi_tr_shard {
    uint64_t magic;
    void *base;
    size_t bytes;
    size_t maplen;             /* 0: malloc'ed (not mappable)               */
    int fd;                    /* -1: none                                  */
    uint64_t tag;
} ddofi_tr_shard_t;

static _Atomic uint64_t g_map_ops, g_map_bytes;
static _Atomic int g_alloc_logged;
static _Atomic int g_memfds; /* memfd shards alive in this process */

/* Shards that may hold a descriptor: a quarter of RLIMIT_NOFILE. */
static int memfd_budget(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return INT_MAX;
    return rl.rlim_cur / 4 > INT_MAX ? INT_MAX : (int)(rl.rlim_cur / 4);
}

void ddofi_tr_map_count(uint64_t ops, uint64_t bytes)
{
    atomic_fetch_add_explicit(&g_map_ops, ops, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_map_bytes, bytes, memory_order_relaxed);
}

void ddofi_tr_map_counts(uint64_t *ops, uint64_t *bytes)
{
    if (ops)
        *ops = atomic_load(&g_map_ops);
    if (bytes)
        *bytes = atomic_load(&g_map_bytes);
}

static size_t page_size(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

static size_t map_len(size_t bytes)
{
    size_t pg = page_size();
    return (bytes + pg - 1) / pg * pg + pg;
}

static uint64_t new_tag(void)
{
    static _Atomic uint64_t counter;
    uint64_t tag = 0;
    if (getrandom(&tag, sizeof tag, GRND_NONBLOCK) != (ssize_t)sizeof tag) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        tag = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
              ((uint64_t)getpid() << 32) ^ (atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15ULL);
    }
    return tag ? tag : 1;
}

/* The shard in a sealed memfd: 0, or -1 with `why` filled (nothing left). */
static int memfd_shard(ddofi_tr_shard_t *s, size_t bytes, char *why, size_t cap)
{
    size_t len = map_len(bytes);
    const int budget = memfd_budget();
    if (atomic_fetch_add(&g_memfds, 1) >= budget) {
        atomic_fetch_sub(&g_memfds, 1);
        snprintf(why, cap, "%d shards of this process hold a descriptor each already, a "
                 "quarter of RLIMIT_NOFILE", budget);
        return -1;
    }
    const char *step = "memfd_create";
    int fd = memfd_create("ddstore-shard", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    int err = 0;
    void *p = MAP_FAILED;
    if (fd < 0) {
        err = errno;
        goto fail;
    }
    step = "fchmod 0600";
    if (fchmod(fd, 0600) != 0) {
        err = errno;
        goto fail;
    }
    step = "ftruncate";
    if (ftruncate(fd, (off_t)len) != 0) {
        err = errno;
        goto fail;
    }
    step = "reserving the pages (fallocate)";
    if ((err = posix_fallocate(fd, 0, (off_t)len)) != 0)
        goto fail;
    step = "sealing";
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        err = errno;
        goto fail;
    }
    step = "mmap";
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        err = errno;
        goto fail;
    }
    s->tag = new_tag();
    shard_trailer_t tr = {SHARD_MAGIC, s->tag, (uint64_t)bytes};
    memcpy((char *)p + len - page_size(), &tr, sizeof tr);
    s->base = p;
    s->maplen = len;
    s->fd = fd;
    return 0;
fail:
    snprintf(why, cap, "%s of %zu bytes: %s", step, len, strerror(err));
    if (fd >= 0)
        close(fd);
    atomic_fetch_sub(&g_memfds, 1);
    return -1;
}

int ddofi_tr_shard_alloc(void *ctx, size_t bytes, void **base_p, void **token_p)
{
    ddofi_tr_t *t = ctx;
    ddofi_tr_shard_t *s = calloc(1, sizeof *s);
    int rc = 0;
    if (!s) {
        rc = dds_error(-DDS_ENOMEM, "shard_alloc: out of memory");
    } else {
        s->magic = SHARD_MAGIC;
        s->fd = -1;
        s->bytes = bytes;
        char why[256];
        if (bytes > 0 && t->map_on && memfd_shard(s, bytes, why, sizeof why) != 0 &&
            !atomic_exchange(&g_alloc_logged, 1))
            DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_OFI,
                    "method 1: a shard in shared memory could not be made (%s): same-node "
                    "peers read this process's shards through libfabric", why);
        if (bytes > 0 && !s->base && !(s->base = malloc(bytes)))
            rc = dds_error(-DDS_ENOMEM, "shard_alloc: cannot allocate %zu bytes", bytes);
    }
    rc = dds_comm_agree(&t->comm, rc);
    if (rc) {
        if (s)
            ddofi_tr_shard_free(ctx, s->base, s);
        return rc;
    }
    *base_p = s->base;
    *token_p = s;
    return 0;
}

void ddofi_tr_shard_free(void *ctx, void *base, void *token)
{
    (void)ctx;
    (void)base;
    ddofi_tr_shard_t *s = token;
    if (!s)
        return;
    if (s->maplen) {
        munmap(s->base, s->maplen);
        close(s->fd);
        atomic_fetch_sub(&g_memfds, 1);
    } else {
        free(s->base);
    }
    free(s);
}

void ddofi_tr_map_export(const ddofi_tr_t *t, const dds_region_desc_t *d, ddofi_tr_map_rec_t *rec)
{
    memset(rec, 0, sizeof *rec);
    const ddofi_tr_shard_t *s = d->alloc_token;
    if (!t->map_on || !s || s->magic != SHARD_MAGIC || !s->maplen || d->bytes == 0 ||
        d->base != s->base || d->bytes != s->bytes || d->mem.kind != DDS_MEM_HOST)
        return;
    rec->tag = s->tag;
    rec->bytes = s->bytes;
    rec->pid = (int32_t)getpid();
    rec->fd = s->fd;
    rec->uid = (uint32_t)geteuid();
}

/* Rank i's shard size by the store's layout (a ragged shard is its index
 * then its element rows); `rec_bytes` when the layout is not given. */
static uint64_t shard_bytes_of(const dds_region_desc_t *d, int nranks, int i, uint64_t rec_bytes)
{
    if (!d->offsets || d->nranks != nranks)
        return rec_bytes;
    const int64_t rows = d->offsets[i + 1] - d->offsets[i];
    if (!d->ragged)
        return (uint64_t)rows * d->row_bytes;
    if (!d->elem_offsets)
        return rec_bytes;
    return dds_ragged_index_bytes(rows) +
           (uint64_t)(d->elem_offsets[i + 1] - d->elem_offsets[i]) * d->row_bytes;
}

int ddofi_tr_map_import(ddofi_tr_t *t, ddofi_tr_region_t *g, const dds_region_desc_t *d,
                        const void *recs, size_t stride)
{
    g->maps = NULL;
    if (!t->map_on || !t->same_host)
        return 0;
    ddofi_tr_map_peer_t *m = NULL;
    for (int i = 0; i < t->nranks; i++) {
        ddofi_tr_map_rec_t rec;
        memcpy(&rec, (const char *)recs + (size_t)i * stride, sizeof rec);
        uint64_t want = shard_bytes_of(d, t->nranks, i, rec.bytes);
        if (i == t->rank || !t->same_host[i] || !rec.tag || rec.uid != (uint32_t)geteuid() ||
            rec.bytes != want || rec.pid <= 0 || rec.fd < 0)
            continue;
        if (!m && !(m = calloc((size_t)t->nranks, sizeof *m)))
            return dds_error(-DDS_ENOMEM, "variable '%s': out of memory", g->name);
        m[i].rec = rec;
    }
    g->maps = m;
    g->maps_n = m ? t->nranks : 0;
    return 0;
}

void ddofi_tr_map_release(ddofi_tr_region_t *g)
{
    if (!g->maps)
        return;
    /* what this process mapped (or inherited from its parent's mappings) */
    for (int i = 0; i < g->maps_n; i++) {
        char *b = atomic_load(&g->maps[i].base);
        if (b)
            munmap(b, map_len((size_t)g->maps[i].rec.bytes));
        int pfd1 = atomic_load(&g->maps[i].pidfd1);
        if (pfd1 > 0)
            close(pfd1 - 1);
    }
    free(g->maps);
    g->maps = NULL;
    g->maps_n = 0;
}

static const char *map_refuse(ddofi_tr_region_t *g, int owner, const char *why)
{
    atomic_store(&g->maps[owner].refused, 1);
    if (!atomic_exchange(&g->map_logged, 1))
        DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_OFI,
                "variable '%s': the shard of rank %d (process %d) cannot be mapped here "
                "(%s): same-node reads of it go through libfabric", g->name, owner,
                (int)g->maps[owner].rec.pid, why);
    return NULL;
}

const char *ddofi_tr_map_base_slow(ddofi_tr_region_t *g, int owner)
{
    ddofi_tr_map_peer_t *m = &g->maps[owner];
    const size_t len = map_len((size_t)m->rec.bytes);
    char path[64], why[160];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)m->rec.pid, (int)m->rec.fd);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, sizeof why, "opening %s: %s", path, strerror(errno));
        return map_refuse(g, owner, why);
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (uint64_t)st.st_size != (uint64_t)len) {
        close(fd);
        snprintf(why, sizeof why, "%s is not the shard's memfd of this user", path);
        return map_refuse(g, owner, why);
    }
    char *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);
    if (p == MAP_FAILED) {
        snprintf(why, sizeof why, "mmap of %zu bytes: %s", len, strerror(err));
        return map_refuse(g, owner, why);
    }
    shard_trailer_t tr;
    memcpy(&tr, p + len - page_size(), sizeof tr);
    if (tr.magic != SHARD_MAGIC || tr.tag != m->rec.tag || tr.bytes != m->rec.bytes) {
        munmap(p, len);
        snprintf(why, sizeof why, "%s holds another shard", path);
        return map_refuse(g, owner, why);
    }
    /* the owner's pidfd (it lives: the open above went through its fd
     * table), before the mapping is published */
#ifdef SYS_pidfd_open
    int pfd = (int)syscall(SYS_pidfd_open, (pid_t)m->rec.pid, 0);
    if (pfd >= 0) {
        (void)fcntl(pfd, F_SETFD, FD_CLOEXEC);
        int none = 0;
        if (!atomic_compare_exchange_strong(&m->pidfd1, &none, pfd + 1))
            close(pfd); /* another thread's is there */
    }
#endif
    char *expect = NULL;
    if (!atomic_compare_exchange_strong(&m->base, &expect, p)) {
        munmap(p, len); /* another thread mapped it meanwhile */
        return expect;
    }
    DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_OFI,
            "variable '%s': the shard of rank %d (%llu bytes) is mapped: same-node reads "
            "by memcpy", g->name, owner, (unsigned long long)m->rec.bytes);
    return p;
}

int ddofi_tr_map_alive(ddofi_tr_region_t *g, int owner)
{
    pid_t pid = (pid_t)g->maps[owner].rec.pid;
    int pfd1 = atomic_load_explicit(&g->maps[owner].pidfd1, memory_order_acquire);
    if (pfd1 > 0) {
        struct pollfd pf = {pfd1 - 1, POLLIN, 0};
        if (poll(&pf, 1, 0) <= 0 || !(pf.revents & POLLIN))
            return 0; /* running (an interrupted poll: the next read asks again) */
    } else if (kill(pid, 0) == 0 || errno != ESRCH) {
        return 0;
    }
    return dds_error(-DDS_EIO, "variable '%s': rank %d (process %d on this host) has exited: "
                     "its rows cannot be read", g->name, owner, (int)pid);
}
