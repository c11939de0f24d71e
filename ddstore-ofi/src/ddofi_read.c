/* ddstore-ofi: batched one-sided reads (their completions: ddofi_cq.c).
 *
 * One ddofi_read call is a "batch": a heap block holding a reference count
 * (1 for the caller + one per read in flight), the first completion error,
 * and one context per posted fi_read.  Whoever reaps a completion (this
 * caller, another thread reading on the same endpoint, or the endpoint's
 * progress thread) records an error into the batch the context points to
 * and then drops one reference: the decrement is its last access, so the
 * caller may free the batch as soon as the count is back to 1.  No lock is
 * taken on this path.
 *
 * Timeouts: the caller gives up after read_timeout_s.  Reads still in
 * flight must not write into the caller's memory after ddofi_read returns
 * (a later batch in the same buffer, or the buffer freed): a reader
 * endpoint is fenced before the error returns (ddofi_ep_fence: its provider
 * objects are closed, which ends every transfer they carry, and new ones
 * are opened).  Where the endpoint must stay (a server endpoint, whose
 * address peers hold; shm, whose peers can crash serving a read into a
 * vanished endpoint: quirk KEEP_EP), the batch
 * is parked on the endpoint's abandoned list (their completions keep
 * decrementing it harmlessly) and freed when the endpoint is closed.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "ddofi_cq.h"
#include "ddofi_internal.h"

size_t ddofi_split_count(size_t len, size_t max)
{
    if (len == 0)
        return 0;
    if (max == 0 || max >= len)
        return 1;
    return len / max + (len % max ? 1 : 0);
}

/* ---------------- waiting ---------------- */

typedef struct waiter {
    uint64_t idle_since;   /* 0: not idle */
} waiter_t;

/* One step of waiting for completions: reap, and if nothing came, spin
 * briefly, then yield the CPU, then sleep in short naps (a loaded 2-core
 * node must still run the targets' progress threads).  Returns 0 or a CQ
 * error. */
static int wait_step(ddofi_ep_t *ep, waiter_t *w, uint64_t now)
{
    int n = ddofi_cq_reap(ep);
    if (n != 0) {
        w->idle_since = 0;
        return n < 0 ? n : 0;
    }
    if (!w->idle_since) {
        w->idle_since = now;
        return 0;
    }
    uint64_t idle = now - w->idle_since;
    if (idle < 20000) {
        /* spin */
    } else if (idle < 2000000) {
        sched_yield();
    } else {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* Peers that are processes of this node (shm): is any peer of the ops
 * gone?  Returns the index of an op whose peer exited, or (size_t)-1. */
static size_t dead_peer_op(ddofi_ep_t *ep, const ddofi_read_op_t *ops, size_t nops, int *pid_p)
{
    int last_pid = -1;
    for (size_t i = 0; i < nops; i++) {
        if (!ops[i].len)
            continue;
        int pid = ddofi_peer_pid(ep, ops[i].peer);
        if (pid <= 0 || pid == last_pid)
            continue;
        last_pid = pid;
        if (kill(pid, 0) != 0 && errno == ESRCH) {
            *pid_p = pid;
            return i;
        }
    }
    return (size_t)-1;
}

/* ---------------- reads ---------------- */

static int validate(const ddofi_ep_t *ep, const ddofi_read_op_t *ops, size_t nops,
                    size_t *posts_p)
{
    const ddofi_fabric_t *f = ep->fab;
    int need_local = (f->mr_mode & FI_MR_LOCAL) != 0;
    size_t posts = 0;
    for (size_t i = 0; i < nops; i++) {
        const ddofi_read_op_t *o = &ops[i];
        if (o->len == 0)
            continue;
        if (!o->remote)
            return ddofi_error(-EINVAL, "read op %zu: remote is NULL", i);
        if (!o->dst)
            return ddofi_error(-EINVAL, "read op %zu: dst is NULL", i);
        if (o->remote->prov_tag != f->prov_tag)
            return ddofi_error(-DDOFI_EBLOB, "read op %zu: the remote region was exported "
                               "by another provider than this endpoint's (%s)", i,
                               f->prov_name);
        if (o->offset > o->remote->size || o->len > o->remote->size - o->offset)
            return ddofi_error(-EINVAL, "read op %zu: bytes [%llu, %llu) are outside the "
                               "remote region of %llu bytes", i,
                               (unsigned long long)o->offset,
                               (unsigned long long)(o->offset + o->len),
                               (unsigned long long)o->remote->size);
        if (o->dst_mr) {
            const ddofi_mr_t *m = o->dst_mr;
            if (m->pid != ep->pid || m->fab != f)
                return ddofi_error(-EINVAL, "read op %zu: dst_mr belongs to another "
                                   "fabric or process", i);
            uintptr_t d = (uintptr_t)o->dst, mb = (uintptr_t)m->buf;
            if (d < mb || d - mb > m->len || o->len > m->len - (d - mb))
                return ddofi_error(-EINVAL, "read op %zu: destination %p + %zu bytes is not "
                                   "inside dst_mr (%p + %zu)", i, o->dst, o->len, m->buf,
                                   m->len);
            if (!(m->access & DDOFI_ACCESS_LOCAL) && need_local)
                return ddofi_error(-EINVAL, "read op %zu: dst_mr was registered without "
                                   "DDOFI_ACCESS_LOCAL", i);
        } else if (need_local) {
            return ddofi_error(-EINVAL, "read op %zu: provider %s requires registered "
                               "destinations (FI_MR_LOCAL): pass dst_mr", i, f->prov_name);
        }
        posts += ddofi_split_count(o->len, f->max_read);
    }
    *posts_p = posts;
    return 0;
}

/* ---------------- direct same-node reads (quirk DDOFI_Q_CMA) ----------------
 *
 * shm's own read is process_vm_readv from the reader, one read per call
 * under the target region's spinlock, plus a command the target must
 * drain.  For host memory on both sides the library issues the same
 * system call itself with up to CMA_IOV rows per call.  Ops it cannot serve
 * (device memory, no virtual addressing, peer pid unknown) go to fi_read.
 * The first EPERM/ENOSYS (ptrace restrictions) turns the path off for the
 * endpoint. */

#define CMA_IOV 1024

typedef struct cma_batch {
    int pid;
    size_t n;
    struct iovec l[CMA_IOV], r[CMA_IOV];
    size_t idx[CMA_IOV];
} cma_batch_t;

/* Returns 0 (done), 1 (CMA refused: fall back), or a negative error. */
static int cma_flush(ddofi_ep_t *ep, cma_batch_t *cb, const ddofi_read_op_t *ops,
                     unsigned char *done, ddofi_read_stats_t *st)
{
    size_t k = 0, total = 0;
    for (size_t i = 0; i < cb->n; i++)
        total += cb->l[i].iov_len;
    uint64_t t0 = ddofi_now_ns();
    while (k < cb->n) {
        ssize_t r = process_vm_readv(cb->pid, cb->l + k, (unsigned long)(cb->n - k), cb->r + k,
                                     (unsigned long)(cb->n - k), 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            const ddofi_read_op_t *o = &ops[cb->idx[k]];
            if (e == EPERM || e == ENOSYS || e == EACCES) {
                if (atomic_exchange(&ep->cma, 0))
                    DDOFI_LOG(DDOFI_LOG_INFO, "process_vm_readv refused (%s): reads go "
                              "through the provider", strerror(e));
                return 1;
            }
            if (e == ESRCH)
                return ddofi_error(-DDOFI_EPEER, "peer process %d (op %zu, peer %llu) has "
                                   "exited (provider %s, direct read)", cb->pid, cb->idx[k],
                                   (unsigned long long)o->peer, ep->fab->prov_name);
            return ddofi_error(-DDOFI_EPROVIDER, "process_vm_readv from peer process %d "
                               "(op %zu: %zu bytes at offset %llu): %s", cb->pid, cb->idx[k],
                               o->len, (unsigned long long)o->offset, strerror(e));
        }
        if (r == 0)
            return ddofi_error(-DDOFI_EPROVIDER, "process_vm_readv from peer process %d made "
                               "no progress (op %zu)", cb->pid, cb->idx[k]);
        size_t left = (size_t)r;
        while (k < cb->n && left >= cb->l[k].iov_len) {
            left -= cb->l[k].iov_len;
            k++;
        }
        if (k < cb->n && left) {
            cb->l[k].iov_base = (char *)cb->l[k].iov_base + left;
            cb->l[k].iov_len -= left;
            cb->r[k].iov_base = (char *)cb->r[k].iov_base + left;
            cb->r[k].iov_len -= left;
        }
    }
    for (size_t i = 0; i < cb->n; i++)
        done[cb->idx[i]] = 1;
    if (st) {
        st->reads += cb->n;
        st->bytes += total;
        st->ns_post += ddofi_now_ns() - t0;
    }
    cb->n = 0;
    return 0;
}

/* Serve what can be served directly; done[i] = 1 for those ops. */
static int cma_pass(ddofi_ep_t *ep, const ddofi_read_op_t *ops, size_t nops,
                    unsigned char *done, size_t *ndone_p, ddofi_read_stats_t *st)
{
    cma_batch_t *cb = malloc(sizeof *cb);
    if (!cb)
        return 1;
    cb->n = 0;
    cb->pid = 0;
    int rc = 0;
    ddofi_peer_t last_peer = (ddofi_peer_t)-1;
    int last_pid = 0;
    for (size_t i = 0; i < nops && rc == 0; i++) {
        const ddofi_read_op_t *o = &ops[i];
        if (o->len == 0) {
            done[i] = 1;
            continue;
        }
        if (!(o->remote->flags & DDOFI_REMOTE_VIRT_ADDR) ||
            (o->remote->flags & DDOFI_REMOTE_DEVICE) ||
            (o->dst_mr && o->dst_mr->iface != DDOFI_HMEM_SYSTEM))
            continue;
        if (o->peer != last_peer) {
            last_peer = o->peer;
            last_pid = ddofi_peer_pid(ep, o->peer);
        }
        if (last_pid <= 0)
            continue;
        if (cb->n && (cb->pid != last_pid || cb->n == CMA_IOV))
            rc = cma_flush(ep, cb, ops, done, st);
        if (rc)
            break;
        cb->pid = last_pid;
        cb->l[cb->n] = (struct iovec){o->dst, o->len};
        cb->r[cb->n] = (struct iovec){(void *)(uintptr_t)(o->remote->base + o->offset), o->len};
        cb->idx[cb->n] = i;
        cb->n++;
    }
    if (rc == 0 && cb->n)
        rc = cma_flush(ep, cb, ops, done, st);
    free(cb);
    size_t nd = 0;
    for (size_t i = 0; i < nops; i++)
        nd += done[i];
    *ndone_p = nd;
    return rc;
}

static int read_fabric(ddofi_ep_t *ep, const ddofi_read_op_t *ops, size_t nops, size_t posts,
                       ddofi_read_stats_t *stats);

int ddofi_read(ddofi_ep_t *ep, const ddofi_read_op_t *ops, size_t nops,
               ddofi_read_stats_t *stats)
{
    if (!ep || (nops && !ops))
        return ddofi_error(-EINVAL, "ddofi_read: NULL argument");
    int rc = ddofi_check_pid(ep->pid, "endpoint");
    if (rc)
        return rc;
    size_t posts = 0;
    rc = validate(ep, ops, nops, &posts);
    if (rc || posts == 0)
        return rc;
    if (!atomic_load_explicit(&ep->cma, memory_order_relaxed))
        return read_fabric(ep, ops, nops, posts, stats);

    unsigned char small[256];
    unsigned char *done = nops <= sizeof small ? small : malloc(nops);
    if (!done)
        return read_fabric(ep, ops, nops, posts, stats);
    memset(done, 0, nops);
    size_t ndone = 0;
    rc = cma_pass(ep, ops, nops, done, &ndone, stats);
    if (rc < 0 || ndone == nops) {
        if (done != small)
            free(done);
        return rc < 0 ? rc : 0;
    }
    /* The rest through the provider. */
    ddofi_read_op_t *rest = malloc((nops - ndone) * sizeof *rest);
    if (!rest) {
        if (done != small)
            free(done);
        return ddofi_error(-ENOMEM, "ddofi_read: out of memory");
    }
    size_t nr = 0;
    for (size_t i = 0; i < nops; i++)
        if (!done[i])
            rest[nr++] = ops[i];
    if (done != small)
        free(done);
    rc = validate(ep, rest, nr, &posts);
    if (!rc && posts)
        rc = read_fabric(ep, rest, nr, posts, stats);
    free(rest);
    return rc;
}

static int read_fabric(ddofi_ep_t *ep, const ddofi_read_op_t *ops, size_t nops, size_t posts,
                       ddofi_read_stats_t *stats)
{
    int rc = 0;
    char lbl[64]; /* the read timeout's variable, for messages */
    const ddofi_fabric_t *f = ep->fab;
    ddofi_batch_t *b = malloc(sizeof *b + posts * sizeof(ddofi_ctx_t));
    if (!b)
        return ddofi_error(-ENOMEM, "ddofi_read: out of memory for %zu contexts", posts);
    /* The provider objects stay as they are until the lock is released (a
     * fence or a lazy endpoint's first use take it exclusive). */
    for (;;) {
        pthread_rwlock_rdlock(&ep->use_lock);
        if (atomic_load_explicit(&ep->live, memory_order_acquire))
            break;
        pthread_rwlock_unlock(&ep->use_lock);
        if ((rc = ddofi_ep_ensure_live(ep)) != 0) {
            free(b);
            return rc;
        }
    }
    const uint64_t gen = ep->gen;
    atomic_init(&b->refs, 1);
    atomic_init(&b->err_set, 0);
    b->fi_err = 0;
    b->msg[0] = '\0';
    b->next = NULL;

    const uint64_t t_start = ddofi_now_ns();
    const double tmo = f->set.read_timeout_s;
    /* The timeout bounds time without progress (no read accepted, none
     * completed), so a large batch on a loaded node is not cut short while a
     * dead or silent peer still fails within the bound. */
    /* <= 0 and inf (and beyond 584 years) wait for ever: no cast of an
     * out-of-range double */
    const uint64_t tmo_ns = tmo > 0 && tmo < 1.8e10 ? (uint64_t)(tmo * 1e9) : UINT64_MAX;
    uint64_t last_progress = t_start;
    long last_refs = 1;
#define STALLED(now)                                                           \
    (__extension__({                                                           \
        long cur_ = atomic_load_explicit(&b->refs, memory_order_relaxed);      \
        if (cur_ != last_refs) {                                               \
            last_refs = cur_;                                                  \
            last_progress = (now);                                             \
        }                                                                      \
        tmo_ns != UINT64_MAX && (now) - last_progress > tmo_ns;                \
    }))
    const long max_out = (long)(f->max_outstanding ? f->max_outstanding : 1);
    const size_t chunk = f->max_read;
    uint64_t ns_post = 0, reads = 0, bytes = 0, eagain = 0;
    size_t posted = 0;
    waiter_t w = {0};
    int timed_out = 0;
    uint64_t t_wait = 0;
    /* shm: check every 100 ms of silence whether a peer process exited
     * (the provider may never complete a read to a dead peer). */
    const int check_pids = (f->quirk->flags & DDOFI_Q_SINGLE_NODE) != 0;
    uint64_t next_pid_check = 0;
    /* Bells (single-node providers): every post rings its target's bell
     * when that thread sleeps on it; waiting without a completion rings
     * the batch's peers again every 100 us (the provider's later steps of
     * a read, a command it queued locally: the target's polls may not
     * count as work, and its sleep grows meanwhile). */
    const int bells = ep->bell_map != NULL;
    uint64_t next_ring = 0;
#define RING_AGAIN(now)                                                        \
    do {                                                                       \
        if (bells && w.idle_since && (now) - w.idle_since > 100000ull &&      \
            (now) > next_ring) {                                               \
            next_ring = (now) + 100000ull;                                     \
            for (size_t r_ = 0; r_ < nops; r_++)                               \
                if (r_ == 0 || ops[r_].peer != ops[r_ - 1].peer)               \
                    ddofi_bell_ring(ep, ops[r_].peer);                         \
        }                                                                      \
    } while (0)
    size_t dead_op = (size_t)-1;
    int dead_pid = 0;
#define DEAD_PEER_CHECK(now)                                                   \
    do {                                                                       \
        if (check_pids && w.idle_since && (now) - w.idle_since > 100000000ull && \
            (now) > next_pid_check) {                                          \
            next_pid_check = (now) + 100000000ull;                             \
            dead_op = dead_peer_op(ep, ops, nops, &dead_pid);                  \
            if (dead_op != (size_t)-1) {                                       \
                timed_out = 1;                                                 \
                goto drain_done;                                               \
            }                                                                  \
        }                                                                      \
    } while (0)

    for (size_t i = 0; i < nops && !rc; i++) {
        const ddofi_read_op_t *o = &ops[i];
        void *desc = o->dst_mr ? o->dst_mr->desc : NULL;
        for (size_t off = 0; off < o->len && !rc;) {
            size_t n = o->len - off < chunk ? o->len - off : chunk;
            for (;;) {
                if (atomic_load_explicit(&b->err_set, memory_order_acquire))
                    goto drain; /* a completion failed: post nothing more */
                uint64_t now = ddofi_now_ns();
                if (STALLED(now)) {
                    timed_out = 1;
                    goto drain;
                }
                DEAD_PEER_CHECK(now);
                RING_AGAIN(now);
                if (atomic_load_explicit(&b->refs, memory_order_acquire) - 1 >= max_out) {
                    rc = wait_step(ep, &w, now);
                    if (rc)
                        goto drain;
                    continue;
                }
                ddofi_ctx_t *c = &b->ctx[posted];
                c->batch = b;
                c->op = i;
                atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
                uint64_t t0 = ddofi_now_ns();
                ssize_t r = fi_read(ep->ep, (char *)o->dst + off, n, desc,
                                    ddofi_ep_fiaddr(ep, o->peer),
                                    o->remote->addr0 + o->offset + off, o->remote->key, c);
                ns_post += ddofi_now_ns() - t0;
                if (r == 0) {
                    if (bells)
                        ddofi_bell_ring(ep, o->peer);
                    posted++;
                    reads++;
                    last_progress = t0;
                    bytes += n;
                    w.idle_since = 0;
                    break;
                }
                atomic_fetch_sub_explicit(&b->refs, 1, memory_order_relaxed);
                if (r == -FI_EAGAIN) {
                    eagain++;
                    rc = wait_step(ep, &w, ddofi_now_ns());
                    if (rc)
                        goto drain;
                    continue;
                }
                rc = ddofi_error_fi((int)r, "fi_read(op %zu: %zu bytes at offset %llu of peer "
                                    "%llu, provider %s)", i, n,
                                    (unsigned long long)(o->offset + off),
                                    (unsigned long long)o->peer, f->prov_name);
                goto drain;
            }
            off += n;
        }
    }

drain:
    t_wait = ddofi_now_ns();
    while (atomic_load_explicit(&b->refs, memory_order_acquire) > 1) {
        uint64_t now = ddofi_now_ns();
        if (STALLED(now)) {
            timed_out = 1;
            break;
        }
        DEAD_PEER_CHECK(now);
        RING_AGAIN(now);
        int r = wait_step(ep, &w, now);
        if (r && !rc)
            rc = r;
    }
drain_done:;
#undef RING_AGAIN
#undef DEAD_PEER_CHECK
#undef STALLED
    uint64_t t_end = ddofi_now_ns();
    if (!t_wait)
        t_wait = t_end;
    if (stats) {
        stats->reads += reads;
        stats->bytes += bytes;
        stats->eagain += eagain;
        stats->ns_post += ns_post;
        stats->ns_wait += t_end - t_wait;
    }

    if (timed_out && atomic_load_explicit(&b->refs, memory_order_acquire) > 1) {
        long left = atomic_load(&b->refs) - 1;
        char fenced[320] = "";
        if (ep->fence) {
            /* Nothing of this batch may land after we return: close the
             * provider objects (no completion of theirs is reaped once the
             * lock is ours: the batch can go) and open new ones. */
            pthread_rwlock_unlock(&ep->use_lock);
            int frc = ddofi_ep_fence(ep, gen);
            free(b);
            snprintf(fenced, sizeof fenced, "; the reader's endpoint was closed so that they "
                     "cannot complete into the destination later%s%s",
                     frc ? ", and reopening it failed: " : " (a new one is open)",
                     frc ? ddofi_last_error() : "");
        } else {
            pthread_mutex_lock(&ep->ab_lock);
            b->next = ep->abandoned;
            ep->abandoned = b;
            pthread_mutex_unlock(&ep->ab_lock);
            pthread_rwlock_unlock(&ep->use_lock);
        }
        if (dead_op != (size_t)-1)
            return ddofi_error(-DDOFI_EPEER,
                               "peer process %d (op %zu, peer %llu) has exited; %ld of %zu "
                               "reads abandoned (provider %s)%s", dead_pid, dead_op,
                               (unsigned long long)ops[dead_op].peer, left, posted,
                               f->prov_name, fenced);
        return ddofi_error(-ETIMEDOUT,
                           "%ld of %zu reads still in flight, none completed for %.3g s "
                           "(%s) on provider %s: the peer may be gone "
                           "or not driving progress%s", left, posted, tmo,
                           ddofi_param_label("READ_TIMEOUT_S", lbl, sizeof lbl), f->prov_name,
                           fenced);
    }
    pthread_rwlock_unlock(&ep->use_lock);
    if (timed_out && !rc) {
        free(b);
        if (dead_op != (size_t)-1)
            return ddofi_error(-DDOFI_EPEER,
                               "peer process %d (op %zu, peer %llu) has exited (provider %s)",
                               dead_pid, dead_op, (unsigned long long)ops[dead_op].peer,
                               f->prov_name);
        return ddofi_error(-ETIMEDOUT,
                           "could not post reads for %.3g s (%s) on "
                           "provider %s: %zu of %zu posted; fi_read kept returning FI_EAGAIN "
                           "(transmit queue full, or no connection to the peer: is it alive "
                           "and driving progress?)",
                           tmo, ddofi_param_label("READ_TIMEOUT_S", lbl, sizeof lbl),
                           f->prov_name, posted, posts);
    }
    if (atomic_load_explicit(&b->err_set, memory_order_acquire) && !rc) {
        const ddofi_read_op_t *o = &ops[b->err_op];
        rc = ddofi_rc_from_fi(-b->fi_err);
        /* Socket providers report the socket's errno as prov_errno: a
         * reset/unconnected socket means the peer is gone. */
        if (rc != -DDOFI_EPEER && (f->quirk->flags & DDOFI_Q_SOCKETS) && b->prov_errno > 0 &&
            ddofi_rc_from_fi(-b->prov_errno) == -DDOFI_EPEER && b->prov_errno != ESRCH)
            rc = -DDOFI_EPEER;
        if (rc == -EAGAIN || rc == -EINVAL || rc == -ENOSYS)
            rc = -DDOFI_EPROVIDER;
        ddofi_error(rc, "read failed on provider %s (op %zu: peer %llu, %zu bytes at offset "
                    "%llu): %s", f->prov_name, b->err_op, (unsigned long long)o->peer, o->len,
                    (unsigned long long)o->offset, b->msg);
    }
    free(b);
    return rc;
}
