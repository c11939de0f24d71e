/* ddstore-core: the node-local shard service (ddstore/shard.h has the
 * contract and the safety rules).  Moved here from the two transports'
 * private copies (ddstore-mpi's POSIX shared memory, ddstore-ofi's memfds):
 * one allocation, one record, one mapping and liveness check, one memcpy
 * path, used by every method through the store's read path. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create, F_ADD_SEALS */
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ddstore/errors.h"
#include "ddstore/log.h"
#include "ddstore/shard.h"

#define SHARD_MAGIC 0x64647368617264ULL /* "ddshard" */

typedef struct shard_trailer {
    uint64_t magic, tag, bytes;
} shard_trailer_t;

enum { KIND_NONE = 0, KIND_MEMFD = 1, KIND_ANON = 2, KIND_MALLOC = 3 };

struct dds_shard {
    void *base;
    size_t bytes;
    size_t maplen;             /* memfd / anonymous mapping length          */
    int kind;
    int fd;                    /* memfd: -1 otherwise                       */
    uint64_t tag;
};

typedef struct peer {
    dds_shard_rec_t rec;
    char *_Atomic base;        /* mapped in this process; NULL: not yet      */
    _Atomic int refused;       /* could not be mapped: the transport reads   */
    _Atomic int pidfd1;        /* the owner's pidfd + 1 (0: none: kill(pid, 0)) */
} peer_t;

struct dds_shard_peers {
    int n;
    _Atomic int logged;        /* a refusal was logged (this process)        */
    peer_t *peer;              /* n                                          */
    char name[128];
};

static _Atomic uint64_t g_ops, g_bytes;
static _Atomic int g_alloc_logged;
static _Atomic int g_memfds;   /* memfd shards alive in this process */

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

/* Shards that may hold a descriptor: a quarter of RLIMIT_NOFILE. */
static int memfd_budget(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return INT_MAX;
    return rl.rlim_cur / 4 > INT_MAX ? INT_MAX : (int)(rl.rlim_cur / 4);
}

static uint64_t new_tag(void)
{
    static _Atomic uint64_t counter;
    uint64_t tag = 0;
    if (getrandom(&tag, sizeof tag, GRND_NONBLOCK) != (ssize_t)sizeof tag) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        tag = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
              ((uint64_t)getpid() << 32) ^
              (atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15ULL);
    }
    return tag ? tag : 1;
}

/* ---- the node --------------------------------------------------------- */

static uint64_t g_node;
static pthread_once_t g_node_once = PTHREAD_ONCE_INIT;

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static void node_init(void)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    char buf[256];
    struct stat st;
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n > 0)
            h = fnv(h, buf, (size_t)n);
        close(fd);
    }
    memset(buf, 0, sizeof buf);
    if (gethostname(buf, sizeof buf - 1) == 0)
        h = fnv(h, buf, strlen(buf));
    if (stat("/proc/self/ns/pid", &st) == 0) {
        h = fnv(h, &st.st_dev, sizeof st.st_dev);
        h = fnv(h, &st.st_ino, sizeof st.st_ino);
    }
    g_node = h ? h : 1;
}

uint64_t dds_shard_node_id(void)
{
    pthread_once(&g_node_once, node_init);
    return g_node;
}

/* ---- owner ------------------------------------------------------------ */

/* The shard in a sealed memfd: 0, or -1 with `why` filled (nothing left). */
static int memfd_shard(dds_shard_t *s, size_t bytes, char *why, size_t cap)
{
    size_t len = map_len(bytes);
    const int budget = memfd_budget();
    if (atomic_fetch_add(&g_memfds, 1) >= budget) {
        atomic_fetch_sub(&g_memfds, 1);
        snprintf(why, cap, "%d shards of this process hold a descriptor "
                 "each already, a quarter of RLIMIT_NOFILE", budget);
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
    s->kind = KIND_MEMFD;
    return 0;
fail:
    snprintf(why, cap, "%s of %zu bytes: %s", step, len, strerror(err));
    if (fd >= 0)
        close(fd);
    atomic_fetch_sub(&g_memfds, 1);
    return -1;
}

int dds_shard_alloc(size_t bytes, int mappable, dds_shard_t **sh_p)
{
    dds_shard_t *s;
    char why[256];

    if (sh_p == NULL)
        return dds_error(-DDS_EINVAL, "dds_shard_alloc: NULL output");
    *sh_p = NULL;
    s = calloc(1, sizeof *s);
    if (s == NULL)
        return dds_error(-DDS_ENOMEM, "shard: out of memory");
    s->fd = -1;
    s->bytes = bytes;
    if (bytes > 0 && mappable && memfd_shard(s, bytes, why, sizeof why) != 0 &&
        !atomic_exchange(&g_alloc_logged, 1))
        DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_CORE,
                "a shard in shared memory could not be made (%s): same-node "
                "peers read this process's shards through the transport",
                why);
    if (bytes > 0 && s->base == NULL) {
        /* not mappable by peers: anonymous MAP_SHARED memory is still
         * shared with forked children (they see later updates) */
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p != MAP_FAILED) {
            s->base = p;
            s->maplen = bytes;
            s->kind = KIND_ANON;
        } else if ((s->base = malloc(bytes)) != NULL) {
            s->kind = KIND_MALLOC;
        } else {
            free(s);
            return dds_error(-DDS_ENOMEM, "shard: cannot allocate %zu bytes",
                             bytes);
        }
    }
    *sh_p = s;
    return 0;
}

void *dds_shard_base(const dds_shard_t *sh)
{
    return sh != NULL && sh->bytes > 0 ? sh->base : NULL;
}

void dds_shard_export(const dds_shard_t *sh, dds_shard_rec_t *rec)
{
    memset(rec, 0, sizeof *rec);
    if (sh == NULL || sh->kind != KIND_MEMFD || sh->bytes == 0)
        return;
    rec->tag = sh->tag;
    rec->bytes = sh->bytes;
    rec->node = dds_shard_node_id();
    rec->pid = (int32_t)getpid();
    rec->fd = sh->fd;
    rec->uid = (uint32_t)geteuid();
}

void dds_shard_free(dds_shard_t *sh)
{
    if (sh == NULL)
        return;
    if (sh->kind == KIND_MEMFD) {
        munmap(sh->base, sh->maplen);
        close(sh->fd);
        atomic_fetch_sub(&g_memfds, 1);
    } else if (sh->kind == KIND_ANON) {
        munmap(sh->base, sh->maplen);
    } else {
        free(sh->base);
    }
    free(sh);
}

/* ---- peers ------------------------------------------------------------ */

int dds_shard_peers_new(const char *name, int n, const void *recs,
                        size_t stride, const uint64_t *want_bytes, int self,
                        dds_shard_peers_t **p_p)
{
    dds_shard_peers_t *p = NULL;
    const uint64_t node = dds_shard_node_id();
    const uint32_t uid = (uint32_t)geteuid();

    *p_p = NULL;
    for (int i = 0; i < n; i++) {
        dds_shard_rec_t rec;
        memcpy(&rec, (const char *)recs + (size_t)i * stride, sizeof rec);
        if (i == self || !rec.tag || rec.node != node || rec.uid != uid ||
            rec.bytes == 0 || rec.pid <= 0 || rec.fd < 0 ||
            (want_bytes != NULL && rec.bytes != want_bytes[i]))
            continue;
        if (p == NULL) {
            p = calloc(1, sizeof *p);
            if (p != NULL && (p->peer = calloc((size_t)n, sizeof *p->peer)) == NULL) {
                free(p);
                p = NULL;
            }
            if (p == NULL)
                return dds_error(-DDS_ENOMEM, "variable '%s': out of memory",
                                 name ? name : "?");
            p->n = n;
            snprintf(p->name, sizeof p->name, "%s", name ? name : "?");
        }
        p->peer[i].rec = rec;
    }
    *p_p = p;
    return 0;
}

void dds_shard_peers_free(dds_shard_peers_t *p)
{
    if (p == NULL)
        return;
    /* what this process mapped (or inherited from its parent's mappings) */
    for (int i = 0; i < p->n; i++) {
        char *b = atomic_load(&p->peer[i].base);
        if (b)
            munmap(b, map_len((size_t)p->peer[i].rec.bytes));
        int pfd1 = atomic_load(&p->peer[i].pidfd1);
        if (pfd1 > 0)
            close(pfd1 - 1);
    }
    free(p->peer);
    free(p);
}

static const char *refuse(dds_shard_peers_t *p, int owner, const char *why)
{
    atomic_store(&p->peer[owner].refused, 1);
    if (!atomic_exchange(&p->logged, 1))
        DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_CORE,
                "variable '%s': the shard of rank %d (process %d) cannot be "
                "mapped here (%s): same-node reads of it go through the "
                "transport", p->name, owner, (int)p->peer[owner].rec.pid, why);
    return NULL;
}

static const char *map_peer(dds_shard_peers_t *p, int owner)
{
    peer_t *m = &p->peer[owner];
    const size_t len = map_len((size_t)m->rec.bytes);
    char path[64], why[160];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)m->rec.pid,
             (int)m->rec.fd);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, sizeof why, "opening %s: %s", path, strerror(errno));
        return refuse(p, owner, why);
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (uint64_t)st.st_size != (uint64_t)len) {
        close(fd);
        snprintf(why, sizeof why, "%s is not the shard's memfd of this user",
                 path);
        return refuse(p, owner, why);
    }
    char *b = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);
    if (b == MAP_FAILED) {
        snprintf(why, sizeof why, "mmap of %zu bytes: %s", len, strerror(err));
        return refuse(p, owner, why);
    }
    shard_trailer_t tr;
    memcpy(&tr, b + len - page_size(), sizeof tr);
    if (tr.magic != SHARD_MAGIC || tr.tag != m->rec.tag ||
        tr.bytes != m->rec.bytes) {
        munmap(b, len);
        snprintf(why, sizeof why, "%s holds another shard", path);
        return refuse(p, owner, why);
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
    if (!atomic_compare_exchange_strong(&m->base, &expect, b)) {
        munmap(b, len); /* another thread mapped it meanwhile */
        return expect;
    }
    DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_CORE,
            "variable '%s': the shard of rank %d (%llu bytes) is mapped: "
            "same-node reads by memcpy", p->name, owner,
            (unsigned long long)m->rec.bytes);
    return b;
}

const char *dds_shard_peer_base(dds_shard_peers_t *p, int owner)
{
    if (p == NULL || owner < 0 || owner >= p->n)
        return NULL;
    peer_t *m = &p->peer[owner];
    char *b = atomic_load_explicit(&m->base, memory_order_acquire);
    if (b || !m->rec.tag ||
        atomic_load_explicit(&m->refused, memory_order_relaxed))
        return b;
    return map_peer(p, owner);
}

int dds_shard_peer_alive(dds_shard_peers_t *p, int owner)
{
    pid_t pid = (pid_t)p->peer[owner].rec.pid;
    int pfd1 = atomic_load_explicit(&p->peer[owner].pidfd1,
                                    memory_order_acquire);
    if (pfd1 > 0) {
        struct pollfd pf = {pfd1 - 1, POLLIN, 0};
        if (poll(&pf, 1, 0) <= 0 || !(pf.revents & POLLIN))
            return 0; /* running (an interrupted poll: the next read asks) */
    } else if (kill(pid, 0) == 0 || errno != ESRCH) {
        return 0;
    }
    return dds_error(-DDS_EIO, "variable '%s': rank %d (process %d on this "
                     "node) has exited: its rows cannot be read", p->name,
                     owner, (int)pid);
}

int dds_shard_serve(dds_shard_peers_t *p, dds_read_op_t *ops, size_t *nops_p,
                    char *dst, char *staging, size_t *served_ops,
                    size_t *served_bytes)
{
    const size_t nops = *nops_p;
    size_t k = 0, sops = 0, sbytes = 0;
    int cur = -1, cur_copied = 0, rc = 0;
    const char *mb = NULL;

    *served_ops = 0;
    *served_bytes = 0;
    if (p == NULL)
        return 0;
    for (size_t i = 0; i < nops; i++) {
        const dds_read_op_t *op = &ops[i];
        if (op->owner != cur) { /* ops come grouped by owner */
            if (cur_copied && (rc = dds_shard_peer_alive(p, cur)) != 0)
                goto out;
            cur = op->owner;
            cur_copied = 0;
            mb = dds_shard_peer_base(p, cur);
        }
        if (mb == NULL) {
            if (k != i)
                ops[k] = *op;
            k++;
            continue;
        }
        const uint64_t sb = p->peer[cur].rec.bytes;
        if (op->src_offset < 0 || (uint64_t)op->src_offset > sb ||
            (uint64_t)op->len > sb - (uint64_t)op->src_offset) {
            rc = dds_error(-DDS_ERANGE, "variable '%s': read of %zu bytes at "
                           "%lld beyond rank %d's shard (%llu bytes)",
                           p->name, op->len, (long long)op->src_offset, cur,
                           (unsigned long long)sb);
            goto out;
        }
        memcpy((op->staged ? staging : dst) + op->dst_offset,
               mb + op->src_offset, op->len);
        cur_copied = 1;
        sops++;
        sbytes += op->len;
    }
    if (cur_copied)
        rc = dds_shard_peer_alive(p, cur);
out:
    if (rc == 0)
        *nops_p = k;
    if (sops) {
        atomic_fetch_add_explicit(&g_ops, sops, memory_order_relaxed);
        atomic_fetch_add_explicit(&g_bytes, sbytes, memory_order_relaxed);
    }
    *served_ops = sops;
    *served_bytes = sbytes;
    return rc;
}

void dds_shard_counts(uint64_t *ops, uint64_t *bytes)
{
    if (ops)
        *ops = atomic_load(&g_ops);
    if (bytes)
        *bytes = atomic_load(&g_bytes);
}
