/* ddstore-ofi: endpoints, address blobs, peers and the target-side
 * progress thread. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "ddofi_internal.h"

/* ---------------- address blob ----------------
 *  0 u32 magic "DDOA"      4 u16 version    6 u16 addr_len
 *  8 u32 provider tag     12 u32 addr_format
 * 16 u32 checksum (FNV-1a of bytes 0..15, 20..end)
 * 20 u32 pid (informational)
 * 24 char[24] provider name (truncated, NUL-padded)
 * version 1: 48 raw provider address (addr_len bytes)
 * version 2 (an endpoint with a progress bell, ddofi_bell.c):
 * 48 i32 bell descriptor in process `pid`   52 u32 0
 * 56 u64 bell tag                            64 raw provider address
 */
#define ADDR_MAGIC 0x414f4444u /* "DDOA" little-endian */
#define ADDR_VERSION 1u
#define ADDR_VERSION_BELL 2u
#define ADDR_HDR 48u
#define ADDR_HDR_BELL 64u

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static void put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}
static uint16_t get16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}
static uint64_t get64(const unsigned char *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* Header length of a checked blob (its version). */
static size_t blob_hdr(const unsigned char *b)
{
    return get16(b + 4) == ADDR_VERSION_BELL ? ADDR_HDR_BELL : ADDR_HDR;
}

static uint32_t addr_checksum(const unsigned char *b, size_t total)
{
    uint32_t h1 = ddofi_fnv1a32(b, 16);
    uint32_t h2 = ddofi_fnv1a32(b + 20, total - 20);
    return h1 ^ (h2 * 16777619u);
}

int ddofi_ep_address(const ddofi_ep_t *cep, void *buf, size_t *len_p)
{
    if (!cep || !len_p)
        return ddofi_error(-EINVAL, "ddofi_ep_address: NULL argument");
    /* A lazy endpoint gets its provider address now. */
    ddofi_ep_t *ep = (ddofi_ep_t *)cep;
    int rc = ddofi_check_pid(ep->pid, "endpoint");
    if (rc)
        return rc;
    if ((rc = ddofi_ep_ensure_live(ep)) != 0)
        return rc;
    pthread_rwlock_rdlock(&ep->use_lock); /* a fence changes the address */
    int32_t bell_fd;
    uint64_t bell_tag;
    ddofi_bell_export(ep, &bell_fd, &bell_tag);
    const size_t hdr = bell_fd >= 0 ? ADDR_HDR_BELL : ADDR_HDR;
    size_t need = hdr + ep->addr_len;
    if (!buf || *len_p < need) {
        pthread_rwlock_unlock(&ep->use_lock);
        *len_p = need;
        return ddofi_error(-ENOSPC, "ddofi_ep_address: need %zu bytes", need);
    }
    unsigned char *b = buf;
    memset(b, 0, hdr);
    put32(b, ADDR_MAGIC);
    put16(b + 4, bell_fd >= 0 ? ADDR_VERSION_BELL : ADDR_VERSION);
    put16(b + 6, (uint16_t)ep->addr_len);
    put32(b + 8, ep->fab->prov_tag);
    put32(b + 12, ep->fab->info->addr_format);
    put32(b + 20, (uint32_t)ep->pid);
    {
        size_t pl = strlen(ep->fab->prov_name);
        memcpy(b + 24, ep->fab->prov_name, pl > 23 ? 23 : pl);
    }
    if (bell_fd >= 0) {
        put32(b + 48, (uint32_t)bell_fd);
        put32(b + 56, (uint32_t)bell_tag);
        put32(b + 60, (uint32_t)(bell_tag >> 32));
    }
    memcpy(b + hdr, ep->addr, ep->addr_len);
    pthread_rwlock_unlock(&ep->use_lock);
    put32(b + 16, addr_checksum(b, need));
    *len_p = need;
    return 0;
}

size_t ddofi_addr_blob_len(const void *blob, size_t cap)
{
    const unsigned char *b = blob;
    if (!b || cap < ADDR_HDR || get32(b) != ADDR_MAGIC ||
        (get16(b + 4) != ADDR_VERSION && get16(b + 4) != ADDR_VERSION_BELL))
        return 0;
    size_t n = blob_hdr(b) + get16(b + 6);
    return n <= cap ? n : 0;
}

/* Check a peer's address blob against this endpoint.  0 or -DDOFI_EBLOB. */
static int blob_check(const ddofi_ep_t *ep, const unsigned char *b, size_t len)
{
    if (len < ADDR_HDR)
        return ddofi_error(-DDOFI_EBLOB, "address blob truncated: %zu bytes, header is %u",
                           len, ADDR_HDR);
    if (get32(b) != ADDR_MAGIC)
        return ddofi_error(-DDOFI_EBLOB, "address blob: bad magic 0x%08x (not a ddstore-ofi "
                           "address)", get32(b));
    if (get16(b + 4) != ADDR_VERSION && get16(b + 4) != ADDR_VERSION_BELL)
        return ddofi_error(-DDOFI_EBLOB, "address blob: format version %u, this library "
                           "reads %u and %u", get16(b + 4), ADDR_VERSION, ADDR_VERSION_BELL);
    const size_t hdr = blob_hdr(b);
    if (len < hdr)
        return ddofi_error(-DDOFI_EBLOB, "address blob truncated: %zu bytes, header is %zu",
                           len, hdr);
    size_t alen = get16(b + 6);
    if (alen == 0 || alen > DDOFI_ADDR_BLOB_MAX - hdr || len < hdr + alen)
        return ddofi_error(-DDOFI_EBLOB, "address blob: address length %zu does not fit "
                           "the %zu-byte blob", alen, len);
    if (get32(b + 16) != addr_checksum(b, hdr + alen))
        return ddofi_error(-DDOFI_EBLOB, "address blob: checksum mismatch (corrupted)");
    if (get32(b + 8) != ep->fab->prov_tag) {
        char other[25], lbl[64];
        memcpy(other, b + 24, 24);
        other[24] = '\0';
        return ddofi_error(-DDOFI_EBLOB,
                           "address blob from provider \"%s\", this endpoint uses \"%s\" "
                           "(every process must select the same %s)",
                           other, ep->fab->prov_name,
                           ddofi_param_label("PROVIDER", lbl, sizeof lbl));
    }
    if (get32(b + 12) != ep->fab->info->addr_format)
        return ddofi_error(-DDOFI_EBLOB, "address blob: address format %u, endpoint uses %u",
                           get32(b + 12), (unsigned)ep->fab->info->addr_format);
    return 0;
}

static int av_insert_blob(ddofi_ep_t *ep, const unsigned char *b, fi_addr_t *fa_p)
{
    fi_addr_t fa = FI_ADDR_NOTAVAIL;
    int n = fi_av_insert(ep->av, b + blob_hdr(b), 1, &fa, 0, NULL);
    if (n != 1)
        return ddofi_error_fi(n < 0 ? n : -FI_EADDRNOTAVAIL,
                              "fi_av_insert (peer pid %u, provider %s)", get32(b + 20),
                              ep->fab->prov_name);
    *fa_p = fa;
    return 0;
}

static void remember_pid(ddofi_ep_t *ep, uint64_t key, const unsigned char *b)
{
    int pid = (int)get32(b + 20);
    if (ep->pid_by_addr && key < DDOFI_PID_TABLE)
        atomic_store_explicit(&ep->pid_by_addr[key], pid, memory_order_release);
    if (get16(b + 4) == ADDR_VERSION_BELL)
        ddofi_bell_note_peer(ep, key, pid, (int32_t)get32(b + 48), get64(b + 56));
    else
        ddofi_bell_note_peer(ep, key, pid, -1, 0);
    if (!(ep->fab->quirk->flags & DDOFI_Q_SINGLE_NODE))
        return;
    pthread_mutex_lock(&ep->peer_lock);
    if (ep->npeer_pids == ep->cap_peer_pids) {
        size_t cap = ep->cap_peer_pids ? 2 * ep->cap_peer_pids : 16;
        void *np = realloc(ep->peer_pids, cap * sizeof ep->peer_pids[0]);
        if (np) {
            ep->peer_pids = np;
            ep->cap_peer_pids = cap;
        }
    }
    if (ep->npeer_pids < ep->cap_peer_pids) {
        ep->peer_pids[ep->npeer_pids].addr = key;
        ep->peer_pids[ep->npeer_pids].pid = pid;
        ep->npeer_pids++;
    }
    pthread_mutex_unlock(&ep->peer_lock);
}

int ddofi_peer_insert(ddofi_ep_t *ep, const void *blob, size_t len, ddofi_peer_t *peer_p)
{
    if (!ep || !blob || !peer_p)
        return ddofi_error(-EINVAL, "ddofi_peer_insert: NULL argument");
    int rc = ddofi_check_pid(ep->pid, "endpoint");
    if (rc)
        return rc;
    const unsigned char *b = blob;
    if ((rc = blob_check(ep, b, len)) != 0)
        return rc;
    size_t blen = blob_hdr(b) + get16(b + 6);
    unsigned char *copy = malloc(blen);
    if (!copy)
        return ddofi_error(-ENOMEM, "ddofi_peer_insert: out of memory");
    memcpy(copy, b, blen);
    if (!ep->lazy && (rc = ddofi_ep_ensure_live(ep)) != 0) {
        free(copy);
        return rc;
    }
    pthread_rwlock_rdlock(&ep->use_lock);
    if (!ep->lazy) {
        /* The blob is kept to insert the peer again into the AV of new
         * provider objects (a fenced timeout). */
        fi_addr_t fa;
        pthread_mutex_lock(&ep->live_lock);
        if (!atomic_load(&ep->live)) {
            rc = ddofi_error(-DDOFI_EPROVIDER, "ddofi_peer_insert: the endpoint is being "
                             "reopened after a timed-out read; try again");
            goto unlock;
        }
        if (ep->nprec == ep->cap_prec) {
            size_t cap = ep->cap_prec ? 2 * ep->cap_prec : 16;
            void *np = realloc(ep->prec, cap * sizeof ep->prec[0]);
            if (!np) {
                rc = ddofi_error(-ENOMEM, "ddofi_peer_insert: out of memory");
                goto unlock;
            }
            ep->prec = np;
            ep->cap_prec = cap;
        }
        if ((rc = av_insert_blob(ep, b, &fa)) != 0)
            goto unlock;
        ep->prec[ep->nprec++] = (struct ddofi_peer_rec){copy, fa, 0};
        copy = NULL;
        *peer_p = (ddofi_peer_t)fa;
        remember_pid(ep, (uint64_t)fa, b);
    unlock:
        pthread_mutex_unlock(&ep->live_lock);
        pthread_rwlock_unlock(&ep->use_lock);
        free(copy);
        return rc;
    }
    /* Lazy: keep the blob; insert it when the provider objects exist. */
    pthread_mutex_lock(&ep->live_lock);
    size_t idx = ep->nlazy;
    if (idx >= DDOFI_PID_TABLE) {
        pthread_mutex_unlock(&ep->live_lock);
        pthread_rwlock_unlock(&ep->use_lock);
        free(copy);
        return ddofi_error(-ENOSPC, "ddofi_peer_insert: more than %d peers on one endpoint",
                           DDOFI_PID_TABLE);
    }
    if (atomic_load(&ep->live)) {
        fi_addr_t fa;
        if ((rc = av_insert_blob(ep, b, &fa)) != 0) {
            pthread_mutex_unlock(&ep->live_lock);
            pthread_rwlock_unlock(&ep->use_lock);
            free(copy);
            return rc;
        }
        atomic_store_explicit(&ep->fiaddr[idx], (uint64_t)fa, memory_order_release);
    }
    ep->lazy_blob[idx] = copy;
    ep->nlazy++;
    pthread_mutex_unlock(&ep->live_lock);
    pthread_rwlock_unlock(&ep->use_lock);
    *peer_p = (ddofi_peer_t)idx;
    remember_pid(ep, (uint64_t)idx, b);
    return 0;
}

int ddofi_peer_check(const ddofi_ep_t *ep, const void *blob, size_t len)
{
    if (!ep || !blob)
        return ddofi_error(-EINVAL, "ddofi_peer_check: NULL argument");
    return blob_check(ep, blob, len);
}

int ddofi_peer_pid(ddofi_ep_t *ep, ddofi_peer_t peer)
{
    if (ep->pid_by_addr && peer < DDOFI_PID_TABLE) {
        int p = atomic_load_explicit(&ep->pid_by_addr[peer], memory_order_acquire);
        if (p)
            return p;
    }
    int pid = 0;
    pthread_mutex_lock(&ep->peer_lock);
    for (size_t i = ep->npeer_pids; i-- > 0;)
        if (ep->peer_pids[i].addr == (uint64_t)peer) {
            pid = ep->peer_pids[i].pid;
            break;
        }
    pthread_mutex_unlock(&ep->peer_lock);
    return pid;
}

int ddofi_peer_remove(ddofi_ep_t *ep, ddofi_peer_t peer)
{
    if (!ep)
        return ddofi_error(-EINVAL, "ddofi_peer_remove: NULL endpoint");
    int rc = ddofi_check_pid(ep->pid, "endpoint");
    if (rc)
        return rc;
    pthread_rwlock_rdlock(&ep->use_lock);
    pthread_mutex_lock(&ep->live_lock);
    if (ep->lazy) {
        if (peer >= ep->nlazy || !ep->lazy_blob[peer]) {
            rc = ddofi_error(-EINVAL, "ddofi_peer_remove: unknown peer %llu",
                             (unsigned long long)peer);
            goto unlock;
        }
        if (atomic_load(&ep->live)) {
            fi_addr_t fa = (fi_addr_t)atomic_load(&ep->fiaddr[peer]);
            rc = fi_av_remove(ep->av, &fa, 1, 0);
        }
        free(ep->lazy_blob[peer]);
        ep->lazy_blob[peer] = NULL;
    } else {
        fi_addr_t fa = (fi_addr_t)peer;
        size_t i = 0;
        while (i < ep->nprec && (ep->prec[i].fa != fa || ep->prec[i].removed))
            i++;
        if (i == ep->nprec) {
            rc = ddofi_error(-EINVAL, "ddofi_peer_remove: unknown peer %llu",
                             (unsigned long long)peer);
            goto unlock;
        }
        if (atomic_load(&ep->live))
            rc = fi_av_remove(ep->av, &fa, 1, 0);
        if (!rc)
            ep->prec[i].removed = 1;
    }
    if (rc)
        rc = ddofi_error_fi(rc, "fi_av_remove");
unlock:
    pthread_mutex_unlock(&ep->live_lock);
    pthread_rwlock_unlock(&ep->use_lock);
    if (rc)
        return rc;
    if (ep->pid_by_addr && peer < DDOFI_PID_TABLE)
        atomic_store(&ep->pid_by_addr[peer], 0);
    pthread_mutex_lock(&ep->peer_lock);
    for (size_t i = 0; i < ep->npeer_pids; i++)
        if (ep->peer_pids[i].addr == (uint64_t)peer) {
            ep->peer_pids[i] = ep->peer_pids[--ep->npeer_pids];
            break;
        }
    pthread_mutex_unlock(&ep->peer_lock);
    return 0;
}

/* ---------------- progress thread ---------------- */

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    nanosleep(&ts, NULL);
}

/* CPU time of the calling thread: a progress call that was preempted on a
 * busy node takes long in wall time but not in CPU time, so only CPU time
 * tells a call that served a read from an empty one. */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return ddofi_now_ns();
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One progress call of a polling thread: did it work?  Activity cannot be
 * observed directly (a target gets no completion for a remote read), so a
 * call that used clearly more CPU than an empty one counts as work done.
 * CPU time, not wall time: on a node whose cores are all busy (the readers
 * of every rank) a call preempted midway is not work, and counting it as
 * work kept the thread at its shortest sleep, taking a quarter of a core
 * from the readers (issue 25: method 1 at half the speed of method 0 on
 * one 2-core node).  *n_p: the completions reaped (or the CQ's error). */
static int poll_work(ddofi_ep_t *ep, uint64_t *idle_cost, int *n_p, int *warned)
{
    uint64_t t0 = thread_cpu_ns();
    int n = ddofi_cq_reap(ep);
    uint64_t dt = thread_cpu_ns() - t0;
    if (dt < *idle_cost)
        *idle_cost = dt;
    if (n < 0 && !(*warned)++)
        DDOFI_LOG(DDOFI_LOG_WARN, "progress thread: fi_cq_read: %s", fi_strerror(-n));
    *n_p = n;
    return n > 0 || dt > 4 * *idle_cost + 5000;
}

static void *progress_main(void *arg)
{
    ddofi_ep_t *ep = arg;
    const ddofi_quirk_t *q = ep->fab->quirk;
    /* Fine-grained sleeps for the backoff (default slack is 50 us). */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    uint64_t max_us = ep->backoff_max_us ? ep->backoff_max_us
                      : q->backoff_max_us ? q->backoff_max_us : 1000;
    const uint64_t max_ns = max_us * 1000, min_ns = max_ns < 2000 ? max_ns : 2000;
    uint64_t backoff = min_ns;
    uint64_t idle_cost = UINT64_MAX; /* cheapest empty progress call seen */
    int warned = 0;
    /* Bell: park after PARK_AFTER idle sleeps at the longest backoff, for
     * at most PARK_MS (0: never park). */
    enum { PARK_AFTER = 8 };
    const uint64_t BELL_SLEEP_NS = 64000;
    const uint64_t park_ns = (uint64_t)ep->park_ms * 1000000ull;
    unsigned idle_at_max = 0;
    while (!atomic_load_explicit(&ep->stop, memory_order_acquire)) {
        atomic_fetch_add_explicit(&ep->progress_loops, 1, memory_order_relaxed);
        if (ep->cq_wait_fd) {
            struct fi_cq_entry ent[16];
            ssize_t n = fi_cq_sread(ep->cq, ent, 16, NULL, 100);
            if (n > 0 || n == -FI_EAGAIN || n == -FI_ETIMEDOUT || n == -FI_EINTR)
                ddofi_cq_dispatch(ep, ent, n > 0 ? (size_t)n : 0);
            else if (n == -FI_EAVAIL)
                ddofi_cq_error(ep);
            else if (n < 0) {
                if (!warned++)
                    DDOFI_LOG(DDOFI_LOG_WARN, "progress thread: fi_cq_sread: %s",
                              fi_strerror((int)-n));
                sleep_ns(1000000);
            }
            continue;
        }
        /* Backoff mode: poll, sleep, double the sleep while idle up to
         * max_ns.  With a bell, a sleep of BELL_SLEEP_NS or more is a wait
         * on it that a reader's ring cuts short, and after PARK_AFTER idle
         * sleeps at max_ns the thread parks there for up to PARK_MS.  The
         * flag goes up before the poll: a read posted before the reader
         * could see it is served by that poll. */
        const int parking = ep->bell && park_ns && idle_at_max >= PARK_AFTER;
        const int on_bell = parking || (ep->bell && backoff >= BELL_SLEEP_NS);
        uint32_t seq = on_bell ? ddofi_bell_arm(ep) : 0;
        int n = 0;
        int work = poll_work(ep, &idle_cost, &n, &warned);
        if (on_bell && !work && !atomic_load_explicit(&ep->stop, memory_order_acquire)) {
            if (ddofi_bell_wait(ep, seq, parking ? park_ns : backoff, parking)) {
                backoff = min_ns; /* rung: reads are coming */
                idle_at_max = 0;
            } else if (parking) {
                /* PARK_MS without a ring: park again (its poll first
                 * serves a reader that cannot ring) */
            } else {
                if (backoff == max_ns)
                    idle_at_max++;
                backoff = backoff * 2 > max_ns ? max_ns : backoff * 2;
            }
            continue;
        }
        if (on_bell)
            ddofi_bell_disarm(ep);
        if (work) {
            /* A quarter of the sleep, not the shortest at once: a reader's
             * burst of reads brings it down within a few calls, and a call
             * that only looked like work (a cold cache after a sleep, an
             * interrupt) costs one shorter sleep, not a climb back up from
             * 2 us that keeps the thread at thousands of wake-ups a second. */
            backoff = backoff / 4 > min_ns ? backoff / 4 : min_ns;
            idle_at_max = 0;
            if (n > 0 || backoff == min_ns)
                continue;
            sleep_ns(backoff);
            continue;
        }
        if (backoff)
            sleep_ns(backoff);
        if (backoff == max_ns)
            idle_at_max++;
        backoff = backoff * 2 > max_ns ? max_ns : backoff * 2;
    }
    return NULL;
}

void ddofi_ep_progress_counts(ddofi_ep_t *ep, uint64_t *loops, uint64_t *parks,
                              uint64_t *bell_wakes)
{
    *loops = atomic_load(&ep->progress_loops);
    *parks = atomic_load(&ep->parks);
    *bell_wakes = atomic_load(&ep->bell_wakes);
}

/* ---------------- open / close ---------------- */

static void ep_free_memory(ddofi_ep_t *ep)
{
    ddofi_bell_free(ep);
    for (size_t i = 0; i < ep->nprec; i++)
        free(ep->prec[i].blob);
    free(ep->prec);
    pthread_rwlock_destroy(&ep->use_lock);
    if (ep->lazy_blob)
        for (size_t i = 0; i < ep->nlazy; i++)
            free(ep->lazy_blob[i]);
    free(ep->lazy_blob);
    free((void *)ep->fiaddr);
    free(ep->peer_pids);
    free((void *)ep->pid_by_addr);
    pthread_mutex_destroy(&ep->ab_lock);
    pthread_mutex_destroy(&ep->peer_lock);
    pthread_mutex_destroy(&ep->live_lock);
    free(ep);
}

/* shm: the endpoint's region name is "fi_shm://<pid>:..." (before
 * fi_enable).  When it starts with this process's pid, remove
 * /dev/shm/<name>, a leftover of a dead process that had our pid.  Returns 1
 * when the endpoint should be made again. */
static int remove_stale_shm(struct fid_ep *e)
{
    char name[256], me[32], path[300];
    size_t len = sizeof name - 1;
    if (fi_getname(&e->fid, name, &len) != 0 || len >= sizeof name)
        return 0;
    name[len] = '\0';
    const char *n = strncmp(name, "fi_shm://", 9) == 0 ? name + 9 : name;
    snprintf(me, sizeof me, "%d:", (int)getpid());
    if (strncmp(n, me, strlen(me)) != 0 || strchr(n, '/') != NULL)
        return 0;
    snprintf(path, sizeof path, "/dev/shm/%s", n);
    if (unlink(path) == 0)
        DDOFI_LOG(DDOFI_LOG_WARN, "shm: removed %s, left behind by a dead process that had "
                  "this pid", path);
    return 1;
}

/* How a server's progress thread sleeps: the quirk entry's way, or the
 * PROGRESS_WAIT parameter's (auto | fd | backoff | bell).  A bell needs
 * every reader on this node: elsewhere it means backoff. */
static int wait_mode(const ddofi_fabric_t *f, ddofi_quirk_wait_t *mode_p)
{
    int wait = 0;
    int rc = ddofi_param_get_enum("PROGRESS_WAIT", &wait);
    if (rc)
        return rc;
    ddofi_quirk_wait_t m = wait == 1   ? DDOFI_QW_FD
                           : wait == 2 ? DDOFI_QW_BACKOFF
                           : wait == 3 ? DDOFI_QW_BELL
                                       : f->quirk->wait;
    if (m == DDOFI_QW_BELL && !(f->quirk->flags & DDOFI_Q_SINGLE_NODE))
        m = DDOFI_QW_BACKOFF;
    *mode_p = m;
    return 0;
}

/* PARK_MS, checked when the endpoint opens (a bad value is an error then,
 * not a default in the thread). */
static int park_ms(size_t *ms_p)
{
    size_t ms = 50;
    int rc = ddofi_param_get_size("PARK_MS", &ms);
    if (rc)
        return rc;
    if (ms > 3600000) {
        char lbl[64];
        return ddofi_error(-DDOFI_ECONFIG, "%s=%zu: at most 3600000 (an hour, in ms)",
                           ddofi_param_label("PARK_MS", lbl, sizeof lbl), ms);
    }
    *ms_p = ms;
    return 0;
}

/* BACKOFF_MAX_US, checked when the endpoint opens like PARK_MS (it was
 * read in the thread, where a bad value fell back to the default). */
static int backoff_max_us(size_t *us_p)
{
    size_t us = 0;
    int rc = ddofi_param_get_size("BACKOFF_MAX_US", &us);
    if (rc)
        return rc;
    if (us > 1000000) {
        char lbl[64];
        return ddofi_error(-DDOFI_ECONFIG, "%s=%zu: at most 1000000 (a second, in us)",
                           ddofi_param_label("BACKOFF_MAX_US", lbl, sizeof lbl), us);
    }
    *us_p = us;
    return 0;
}

/* Open the provider objects (AV, CQ, endpoint), insert the peers a lazy
 * endpoint collected, start the progress thread of a server endpoint. */
static int ep_materialize(ddofi_ep_t *ep)
{
    ddofi_fabric_t *f = ep->fab;
    int rc, shm_locked = 0;
    int want_thread = (ep->flags & DDOFI_EP_SERVE) && f->progress_thread;

    struct fi_av_attr av_attr = {0};
    av_attr.type = f->info->domain_attr->av_type != FI_AV_UNSPEC ? f->info->domain_attr->av_type
                                                                 : FI_AV_TABLE;
    rc = fi_av_open(f->domain, &av_attr, &ep->av, NULL);
    if (rc) {
        rc = ddofi_error_fi(rc, "fi_av_open(%s)", f->prov_name);
        goto fail;
    }

    struct fi_cq_attr cq_attr = {0};
    cq_attr.format = FI_CQ_FORMAT_CONTEXT;
    cq_attr.size = f->info->tx_attr && f->info->tx_attr->size ? f->info->tx_attr->size : 1024;
    cq_attr.wait_obj = FI_WAIT_NONE;
    if (want_thread && ep->wait_mode == DDOFI_QW_FD) {
        cq_attr.wait_obj = FI_WAIT_FD;
        rc = fi_cq_open(f->domain, &cq_attr, &ep->cq, NULL);
        if (rc == 0) {
            ep->cq_wait_fd = 1;
        } else {
            DDOFI_LOG(DDOFI_LOG_INFO, "%s: CQ with FI_WAIT_FD not available (%s); progress "
                      "thread uses a backoff sleep", f->prov_name, fi_strerror(-rc));
            cq_attr.wait_obj = FI_WAIT_NONE;
            ep->cq = NULL;
        }
    }
    if (!ep->cq) {
        rc = fi_cq_open(f->domain, &cq_attr, &ep->cq, NULL);
        if (rc) {
            rc = ddofi_error_fi(rc, "fi_cq_open(%s)", f->prov_name);
            goto fail;
        }
    }

    /* shm names its region "<pid>:<n>:<m>" in /dev/shm.  A process killed
     * without cleanup leaves its regions behind, and a later process that
     * gets the same pid fails fi_enable with EBUSY on the same name: that
     * file belongs to a dead process (the pid is ours now, and the
     * provider's counter never repeats a name in one process), so it is
     * removed and the endpoint made again (the next one has a new name). */
    /* And its region is a sparse file: a touch that finds /dev/shm full is
     * a SIGBUS, so the space is checked first (creation serialised in this
     * process so that threads opening endpoints together are counted). */
    if (f->quirk->flags & DDOFI_Q_SINGLE_NODE) {
        ddofi_shm_lock();
        shm_locked = 1;
        if ((rc = ddofi_shm_space_check()) != 0)
            goto fail;
    }
    for (int attempt = 0;; attempt++) {
        rc = fi_endpoint(f->domain, f->info, &ep->ep, NULL);
        if (rc) {
            rc = ddofi_error_fi(rc, "fi_endpoint(%s, %s)", f->prov_name, f->domain_name);
            goto fail;
        }
        rc = fi_ep_bind(ep->ep, &ep->av->fid, 0);
        if (rc) {
            rc = ddofi_error_fi(rc, "fi_ep_bind(av)");
            goto fail;
        }
        rc = fi_ep_bind(ep->ep, &ep->cq->fid, FI_TRANSMIT | FI_RECV);
        if (rc) {
            rc = ddofi_error_fi(rc, "fi_ep_bind(cq)");
            goto fail;
        }
        rc = fi_enable(ep->ep);
        if (rc == -FI_EBUSY && (f->quirk->flags & DDOFI_Q_SINGLE_NODE) && attempt < 8 &&
            remove_stale_shm(ep->ep)) {
            fi_close(&ep->ep->fid);
            ep->ep = NULL;
            continue;
        }
        if (rc) {
            rc = ddofi_error_fi(rc, "fi_enable(endpoint)");
            goto fail;
        }
        break;
    }
    if (shm_locked) {
        ddofi_shm_unlock();
        shm_locked = 0;
    }
    size_t alen = sizeof ep->addr - ADDR_HDR_BELL;
    rc = fi_getname(&ep->ep->fid, ep->addr, &alen);
    if (rc) {
        rc = ddofi_error_fi(rc, "fi_getname (address of %zu bytes)", alen);
        goto fail;
    }
    ep->addr_len = alen;
    for (size_t i = 0; ep->lazy && i < ep->nlazy; i++) {
        if (!ep->lazy_blob[i])
            continue;
        fi_addr_t fa;
        if ((rc = av_insert_blob(ep, ep->lazy_blob[i], &fa)) != 0)
            goto fail;
        atomic_store_explicit(&ep->fiaddr[i], (uint64_t)fa, memory_order_release);
    }
    /* New provider objects after a fence: the same peers at the same
     * fi_addr_t (an AV table numbers them in insertion order; removed ones
     * are inserted and removed again to keep the numbering). */
    for (size_t i = 0; i < ep->nprec; i++) {
        fi_addr_t fa;
        if ((rc = av_insert_blob(ep, ep->prec[i].blob, &fa)) != 0)
            goto fail;
        if (fa != ep->prec[i].fa) {
            rc = ddofi_error(-DDOFI_EPROVIDER, "reopening the endpoint: provider %s gave "
                             "peer %zu the address %llu, it had %llu", f->prov_name, i,
                             (unsigned long long)fa, (unsigned long long)ep->prec[i].fa);
            goto fail;
        }
    }
    for (size_t i = 0; i < ep->nprec; i++)
        if (ep->prec[i].removed && (rc = fi_av_remove(ep->av, &ep->prec[i].fa, 1, 0)) != 0) {
            rc = ddofi_error_fi(rc, "fi_av_remove (reopening the endpoint)");
            goto fail;
        }

    if (want_thread) {
        rc = pthread_create(&ep->thread, NULL, progress_main, ep);
        if (rc) {
            rc = ddofi_error(-rc, "pthread_create(progress thread): error %d", rc);
            goto fail;
        }
        ep->thread_running = 1;
    }
    atomic_store_explicit(&ep->live, 1, memory_order_release);
    DDOFI_LOG(DDOFI_LOG_DEBUG, "endpoint open (%s%s, cq wait %s%s)",
              (ep->flags & DDOFI_EP_SERVE) ? "serve" : "read",
              want_thread ? ", progress thread" : "", ep->cq_wait_fd ? "fd" : "none",
              ep->lazy ? ", on first use" : "");
    return 0;

fail:
    if (shm_locked)
        ddofi_shm_unlock();
    if (ep->ep)
        fi_close(&ep->ep->fid);
    if (ep->cq)
        fi_close(&ep->cq->fid);
    if (ep->av)
        fi_close(&ep->av->fid);
    ep->ep = NULL;
    ep->cq = NULL;
    ep->av = NULL;
    ep->cq_wait_fd = 0;
    return rc;
}

int ddofi_ep_ensure_live(ddofi_ep_t *ep)
{
    if (atomic_load_explicit(&ep->live, memory_order_acquire))
        return 0;
    pthread_rwlock_wrlock(&ep->use_lock);
    pthread_mutex_lock(&ep->live_lock);
    int rc = atomic_load(&ep->live) ? 0 : ep_materialize(ep);
    pthread_mutex_unlock(&ep->live_lock);
    pthread_rwlock_unlock(&ep->use_lock);
    return rc;
}

/* Close the provider objects (no thread: never a server endpoint). */
static void ep_close_objects(ddofi_ep_t *ep)
{
    int r;
    if (ep->ep && (r = fi_close(&ep->ep->fid)) != 0)
        DDOFI_LOG(DDOFI_LOG_WARN, "fence: fi_close(endpoint): %s", fi_strerror(-r));
    if (ep->cq && (r = fi_close(&ep->cq->fid)) != 0)
        DDOFI_LOG(DDOFI_LOG_WARN, "fence: fi_close(cq): %s", fi_strerror(-r));
    if (ep->av && (r = fi_close(&ep->av->fid)) != 0)
        DDOFI_LOG(DDOFI_LOG_WARN, "fence: fi_close(av): %s", fi_strerror(-r));
    ep->ep = NULL;
    ep->cq = NULL;
    ep->av = NULL;
    ep->cq_wait_fd = 0;
}

int ddofi_ep_fence(ddofi_ep_t *ep, uint64_t gen)
{
    pthread_rwlock_wrlock(&ep->use_lock);
    if (ep->gen != gen) {
        /* Another read of this generation fenced it already. */
        pthread_rwlock_unlock(&ep->use_lock);
        return 0;
    }
    pthread_mutex_lock(&ep->live_lock);
    atomic_store_explicit(&ep->live, 0, memory_order_release);
    ep_close_objects(ep);
    ep->gen++;
    /* A failure leaves the endpoint closed: the next read tries again. */
    int rc = ep_materialize(ep);
    pthread_mutex_unlock(&ep->live_lock);
    pthread_rwlock_unlock(&ep->use_lock);
    if (rc == 0)
        DDOFI_LOG(DDOFI_LOG_INFO, "endpoint closed after a timed-out read and opened again");
    return rc;
}

int ddofi_ep_open(ddofi_fabric_t *f, const ddofi_ep_params_t *params, ddofi_ep_t **ep_p)
{
    if (!f || !ep_p)
        return ddofi_error(-EINVAL, "ddofi_ep_open: NULL argument");
    *ep_p = NULL;
    int rc = ddofi_check_pid(f->pid, "fabric");
    if (rc)
        return rc;
    unsigned flags = (params && (params->field_mask & DDOFI_EP_FIELD_FLAGS)) ? params->flags : 0;
    ddofi_ep_t *ep = calloc(1, sizeof *ep);
    if (!ep)
        return ddofi_error(-ENOMEM, "out of memory");
    ep->fab = f;
    ep->pid = f->pid;
    ep->flags = flags;
    pthread_mutex_init(&ep->ab_lock, NULL);
    pthread_mutex_init(&ep->peer_lock, NULL);
    pthread_mutex_init(&ep->live_lock, NULL);
    {
        /* writer-preferring: a fence is not starved by readers of other
         * peers that keep the lock shared */
        pthread_rwlockattr_t ra;
        pthread_rwlockattr_init(&ra);
        pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
        pthread_rwlock_init(&ep->use_lock, &ra);
        pthread_rwlockattr_destroy(&ra);
    }
    ep->fence = !(flags & DDOFI_EP_SERVE) && !(f->quirk->flags & DDOFI_Q_KEEP_EP);
    ep->bell_fd = -1;
    if ((rc = wait_mode(f, &ep->wait_mode)) != 0 || (rc = park_ms(&ep->park_ms)) != 0 ||
        (rc = backoff_max_us(&ep->backoff_max_us)) != 0)
        goto fail;
    if (f->quirk->flags & DDOFI_Q_SINGLE_NODE) {
        /* Readers ring their peers' bells; a server with a thread that
         * parks has one. */
        if (ddofi_bell_tables(ep) != 0) {
            rc = ddofi_error(-ENOMEM, "out of memory");
            goto fail;
        }
        if ((flags & DDOFI_EP_SERVE) && f->progress_thread && ep->wait_mode == DDOFI_QW_BELL &&
            (rc = ddofi_bell_create(ep)) != 0) {
            DDOFI_LOG(DDOFI_LOG_INFO, "%s: no progress bell (memfd: %s); the progress thread "
                      "polls with its backoff sleep", f->prov_name, strerror(-rc));
            ep->wait_mode = DDOFI_QW_BACKOFF;
            rc = 0;
        }
    }
    if (f->quirk->flags & DDOFI_Q_CMA) {
        int on = 1;
        if ((rc = ddofi_param_get_bool("CMA", &on)))
            goto fail;
        ep->pid_by_addr = calloc(DDOFI_PID_TABLE, sizeof *ep->pid_by_addr);
        if (!ep->pid_by_addr) {
            rc = ddofi_error(-ENOMEM, "out of memory");
            goto fail;
        }
        atomic_store(&ep->cma, on);
        /* A reader that can read directly opens the provider only when a
         * read needs it. */
        if (on && !(flags & DDOFI_EP_SERVE)) {
            ep->lazy = 1;
            ep->lazy_blob = calloc(DDOFI_PID_TABLE, sizeof *ep->lazy_blob);
            ep->fiaddr = calloc(DDOFI_PID_TABLE, sizeof *ep->fiaddr);
            if (!ep->lazy_blob || !ep->fiaddr) {
                rc = ddofi_error(-ENOMEM, "out of memory");
                goto fail;
            }
        }
    }
    if (!ep->lazy && (rc = ep_materialize(ep)) != 0)
        goto fail;
    atomic_fetch_add(&f->refs, 1);
    *ep_p = ep;
    return 0;

fail:
    ep_free_memory(ep);
    return rc;
}

int ddofi_ep_close(ddofi_ep_t *ep)
{
    if (!ep)
        return 0;
    if (ep->pid != getpid()) {
        /* Inherited: no thread exists here, the provider objects are the
         * parent's. */
        ep_free_memory(ep);
        return 0;
    }
    long mrs = atomic_load(&ep->mr_refs);
    if (mrs)
        return ddofi_error(-EBUSY, "ddofi_ep_close: %ld MR(s) still bound to the endpoint",
                           mrs);
    if (ep->thread_running) {
        atomic_store_explicit(&ep->stop, 1, memory_order_release);
        if (ep->cq_wait_fd)
            fi_cq_signal(ep->cq);
        ddofi_bell_wake_self(ep);
        pthread_join(ep->thread, NULL);
        ep->thread_running = 0;
    }
    pthread_mutex_lock(&ep->ab_lock);
    int park = ep->abandoned != NULL;
    pthread_mutex_unlock(&ep->ab_lock);
    atomic_fetch_sub(&ep->fab->refs, 1);
    if (park) {
        ddofi_fabric_t *f = ep->fab;
        DDOFI_LOG(DDOFI_LOG_INFO, "endpoint closed with abandoned reads: kept open until "
                  "the fabric is closed");
        pthread_mutex_lock(&f->zlock);
        ep->znext = f->zombies;
        f->zombies = ep;
        pthread_mutex_unlock(&f->zlock);
        return 0;
    }
    return ddofi_ep_destroy_now(ep);
}

int ddofi_ep_destroy_now(ddofi_ep_t *ep)
{
    int rc = 0, r;
    if (ep->ep && (r = fi_close(&ep->ep->fid)) && !rc)
        rc = ddofi_error_fi(r, "fi_close(endpoint)");
    /* Completions of abandoned reads (timeouts) can no longer arrive. */
    ddofi_abandoned_free(ep);
    if (ep->cq && (r = fi_close(&ep->cq->fid)) && !rc)
        rc = ddofi_error_fi(r, "fi_close(cq)");
    if (ep->av && (r = fi_close(&ep->av->fid)) && !rc)
        rc = ddofi_error_fi(r, "fi_close(av)");
    ep_free_memory(ep);
    return rc;
}

/* Free the memory of an endpoint inherited across fork (no provider calls). */
void ddofi_ep_free_inherited(ddofi_ep_t *ep) { ep_free_memory(ep); }

int ddofi_ep_progress(ddofi_ep_t *ep)
{
    if (!ep)
        return ddofi_error(-EINVAL, "ddofi_ep_progress: NULL endpoint");
    int rc = ddofi_check_pid(ep->pid, "endpoint");
    if (rc)
        return rc;
    pthread_rwlock_rdlock(&ep->use_lock);
    int n = atomic_load_explicit(&ep->live, memory_order_acquire) ? ddofi_cq_reap(ep) : 0;
    pthread_rwlock_unlock(&ep->use_lock);
    return n < 0 ? n : 0;
}
