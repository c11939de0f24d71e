/* ddstore-ofi: the progress bell of single-node providers (shm).
 *
 * shm completes a read only when the target's progress thread drains its
 * command queue, and the provider has no cross-process wake-up object, so
 * the thread polls with a backoff sleep (up to 1 ms: about 1,100 wake-ups a
 * second per serving process).  On a node whose cores all read, those
 * wake-ups preempt the readers: method 1 read 3 KB rows at 0.89-0.95 of
 * method 0's speed with the thread polling, 1.0 without it, although with
 * mapped shards and direct CMA reads no read needed the thread at all.
 *
 * So a serving endpoint of such a provider owns a bell: one page of a memfd
 * {magic, tag, seq, parked}.  Its descriptor number and random tag travel in
 * the endpoint's address blob (format 2).  When the thread has found nothing
 * to do for a while it parks: parked = 1, one more poll, then FUTEX_WAIT on
 * seq for at most PARK_MS.  A reader that posts a read through the provider
 * maps the target's bell on its first read of that peer (opened through
 * /proc/<pid>/fd/<fd>: same user and pid namespace; file type, size and tag
 * checked, so a reused pid or descriptor number is never rung) and, when
 * parked is set, bumps seq and wakes it.  Lost wake-ups cannot happen: the
 * reader posts its command, then reads parked; the thread sets parked, then
 * polls (both with a full fence in between): one of the two sees the
 * other, and the futex wait fails when seq moved since it was read.
 *
 * A reader that cannot map the bell (another user, a refused /proc open)
 * still completes its reads: the parked thread wakes on its own after
 * PARK_MS at most, and then polls at full speed while reads come. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ddofi_internal.h"

#define BELL_MAGIC 0x6c6c6562696f6464ULL /* "ddoibell" */
#define BELL_BYTES 4096u

struct ddofi_bell {
    uint64_t magic, tag;
    _Atomic uint32_t seq;    /* bumped by a ring; the futex word         */
    _Atomic uint32_t parked; /* the thread waits (or is about to)        */
    _Atomic uint64_t rings;  /* rings received (tests, logs)             */
};

_Atomic int ddofi_test_bell_refuse;

static long futex(_Atomic uint32_t *w, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)w, op, val, ts, NULL, 0);
}

static void bell_unmap(ddofi_bell_t *b)
{
    if (b)
        munmap(b, BELL_BYTES);
}

int ddofi_bell_create(ddofi_ep_t *ep)
{
    int fd = memfd_create("ddofi-bell", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    uint64_t tag = 0;
    while (tag == 0)
        if (getrandom(&tag, sizeof tag, 0) != (ssize_t)sizeof tag)
            tag = ddofi_now_ns() ^ ((uint64_t)getpid() << 32);
    void *p = MAP_FAILED;
    if (ftruncate(fd, BELL_BYTES) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 ||
        (p = mmap(NULL, BELL_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        int e = errno;
        close(fd);
        return -e;
    }
    ddofi_bell_t *b = p;
    b->magic = BELL_MAGIC;
    b->tag = tag;
    ep->bell = b;
    ep->bell_fd = fd;
    return 0;
}

void ddofi_bell_export(const ddofi_ep_t *ep, int32_t *fd_p, uint64_t *tag_p)
{
    *fd_p = ep->bell ? ep->bell_fd : -1;
    *tag_p = ep->bell ? ep->bell->tag : 0;
}

int ddofi_bell_tables(ddofi_ep_t *ep)
{
    ep->bell_peer = calloc(DDOFI_PID_TABLE, sizeof *ep->bell_peer);
    ep->bell_map = calloc(DDOFI_PID_TABLE, sizeof *ep->bell_map);
    return ep->bell_peer && ep->bell_map ? 0 : -ENOMEM;
}

void ddofi_bell_note_peer(ddofi_ep_t *ep, uint64_t key, int pid, int32_t fd, uint64_t tag)
{
    if (!ep->bell_map || key >= DDOFI_PID_TABLE)
        return;
    pthread_mutex_lock(&ep->peer_lock);
    uintptr_t old = atomic_exchange(&ep->bell_map[key], 0);
    if (old > 1) {
        /* The key names another peer now; a reader may still hold the old
         * mapping for a moment, so it is unmapped at close. */
        if (ep->nbell_old == ep->cap_bell_old) {
            size_t cap = ep->cap_bell_old ? 2 * ep->cap_bell_old : 8;
            void *np = realloc(ep->bell_old, cap * sizeof *ep->bell_old);
            if (np) {
                ep->bell_old = np;
                ep->cap_bell_old = cap;
            }
        }
        if (ep->nbell_old < ep->cap_bell_old)
            ep->bell_old[ep->nbell_old++] = (ddofi_bell_t *)old;
        /* else: left mapped for the process's life (a page) */
    }
    ep->bell_peer[key].pid = pid;
    ep->bell_peer[key].fd = fd;
    ep->bell_peer[key].tag = tag;
    pthread_mutex_unlock(&ep->peer_lock);
}

/* Map the bell of peer `key` (first ring): its mapping, or 1 (none). */
static uintptr_t bell_map_peer(ddofi_ep_t *ep, uint64_t key)
{
    pthread_mutex_lock(&ep->peer_lock);
    int pid = ep->bell_peer[key].pid;
    int32_t fd = ep->bell_peer[key].fd;
    uint64_t tag = ep->bell_peer[key].tag;
    pthread_mutex_unlock(&ep->peer_lock);
    if (fd < 0 || pid <= 0 || tag == 0) {
        /* A peer without a bell (its thread never parks). */
        uintptr_t z = 0;
        atomic_compare_exchange_strong(&ep->bell_map[key], &z, 1);
        return atomic_load(&ep->bell_map[key]);
    }
    const char *why = NULL;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, (int)fd);
    int f = atomic_load(&ddofi_test_bell_refuse) ? (errno = EACCES, -1)
                                                  : open(path, O_RDWR | O_CLOEXEC);
    void *p = MAP_FAILED;
    struct stat st;
    if (f < 0)
        why = strerror(errno);
    else if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != BELL_BYTES ||
             st.st_uid != geteuid())
        why = "not a bell (file type, size or owner differ)";
    else if ((p = mmap(NULL, BELL_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0)) ==
             MAP_FAILED)
        why = strerror(errno);
    if (f >= 0)
        close(f);
    ddofi_bell_t *b = p == MAP_FAILED ? NULL : p;
    if (b && (b->magic != BELL_MAGIC || b->tag != tag)) {
        why = "not this peer's bell (magic or tag differ: a reused pid or descriptor)";
        bell_unmap(b);
        b = NULL;
    }
    uintptr_t want = b ? (uintptr_t)b : 1, z = 0;
    if (!atomic_compare_exchange_strong(&ep->bell_map[key], &z, want)) {
        bell_unmap(b); /* another thread mapped it first */
        return z;
    }
    if (!b && !atomic_exchange(&ep->bell_logged, 1))
        DDOFI_LOG(DDOFI_LOG_INFO, "progress bell of peer pid %d (%s) not mapped: %s; reads "
                  "from it wait for its idle progress thread to wake on its own (PARK_MS)",
                  pid, path, why);
    return want;
}

void ddofi_bell_ring(ddofi_ep_t *ep, ddofi_peer_t peer)
{
    if (!ep->bell_map || peer >= DDOFI_PID_TABLE)
        return;
    uintptr_t m = atomic_load_explicit(&ep->bell_map[peer], memory_order_acquire);
    if (m == 0)
        m = bell_map_peer(ep, peer);
    if (m <= 1)
        return;
    ddofi_bell_t *b = (ddofi_bell_t *)m;
    /* The command just posted, then parked (the thread: parked, then its
     * queue). */
    atomic_thread_fence(memory_order_seq_cst);
    if (!atomic_load_explicit(&b->parked, memory_order_relaxed))
        return;
    atomic_fetch_add(&b->seq, 1);
    atomic_fetch_add_explicit(&b->rings, 1, memory_order_relaxed);
    futex(&b->seq, FUTEX_WAKE, INT_MAX, NULL);
}

uint32_t ddofi_bell_arm(ddofi_ep_t *ep)
{
    ddofi_bell_t *b = ep->bell;
    uint32_t s = atomic_load(&b->seq);
    atomic_store(&b->parked, 1);
    /* parked, then the queue (a reader: its command, then parked) */
    atomic_thread_fence(memory_order_seq_cst);
    return s;
}

void ddofi_bell_disarm(ddofi_ep_t *ep) { atomic_store(&ep->bell->parked, 0); }

int ddofi_bell_wait(ddofi_ep_t *ep, uint32_t seq, uint64_t max_ns, int park)
{
    ddofi_bell_t *b = ep->bell;
    struct timespec ts = {(time_t)(max_ns / 1000000000ull), (long)(max_ns % 1000000000ull)};
    if (park)
        atomic_fetch_add_explicit(&ep->parks, 1, memory_order_relaxed);
    /* Returns at once when seq moved since it was read (a ring between). */
    futex(&b->seq, FUTEX_WAIT, seq, &ts);
    atomic_store(&b->parked, 0);
    int rung = atomic_load(&b->seq) != seq;
    if (rung)
        atomic_fetch_add_explicit(&ep->bell_wakes, 1, memory_order_relaxed);
    return rung;
}

void ddofi_bell_wake_self(ddofi_ep_t *ep)
{
    if (!ep->bell)
        return;
    atomic_fetch_add(&ep->bell->seq, 1);
    futex(&ep->bell->seq, FUTEX_WAKE, INT_MAX, NULL);
}

uint64_t ddofi_bell_rings(const ddofi_ep_t *ep)
{
    return ep->bell ? atomic_load_explicit(&ep->bell->rings, memory_order_relaxed) : 0;
}

void ddofi_bell_free(ddofi_ep_t *ep)
{
    if (ep->bell) {
        bell_unmap(ep->bell);
        close(ep->bell_fd);
        ep->bell = NULL;
    }
    for (size_t i = 0; ep->bell_map && i < DDOFI_PID_TABLE; i++) {
        uintptr_t m = atomic_load(&ep->bell_map[i]);
        if (m > 1)
            bell_unmap((ddofi_bell_t *)m);
    }
    for (size_t i = 0; i < ep->nbell_old; i++)
        bell_unmap(ep->bell_old[i]);
    free(ep->bell_old);
    free((void *)ep->bell_map);
    free(ep->bell_peer);
    ep->bell_old = NULL;
    ep->bell_map = NULL;
    ep->bell_peer = NULL;
    ep->nbell_old = ep->cap_bell_old = 0;
}
