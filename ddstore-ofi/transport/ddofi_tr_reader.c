/* ddstore-ofi adapter: readers (endpoints that read, with every rank's
 * server as a peer) and the per-thread scratch of the read path.  See
 * ddofi_tr_transport.c for the objects; calls ddofi_tr_settings.c and
 * ddofi_tr_share.c only. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddstore/errors.h"
#include "ddstore/ofi.h"
#include "ddofi_tr_internal.h"

/* ---------------- thread-local scratch ---------------- */

typedef struct scratch {
    ddofi_read_op_t *ops;
    size_t cap;
} scratch_t;

static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
static void scratch_free(void *p)
{
    scratch_t *s = p;
    if (s) {
        free(s->ops);
        free(s);
    }
}
static void scratch_key_make(void) { (void)pthread_key_create(&g_scratch_key, scratch_free); }

ddofi_read_op_t *ddofi_tr_scratch_ops(size_t n)
{
    pthread_once(&g_scratch_once, scratch_key_make);
    scratch_t *s = pthread_getspecific(g_scratch_key);
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s || pthread_setspecific(g_scratch_key, s)) {
            free(s);
            return NULL;
        }
    }
    if (n > s->cap) {
        size_t cap = n < 64 ? 64 : n;
        ddofi_read_op_t *o = realloc(s->ops, cap * sizeof *o);
        if (!o)
            return NULL;
        s->ops = o;
        s->cap = cap;
    }
    return s->ops;
}

/* ---------------- readers ---------------- */

/* The share whose endpoint the reader reads on, or NULL: its own. */
static ddofi_tr_share_t *reader_share(const ddofi_tr_reader_t *r)
{
    if (!r->shared)
        return NULL;
    return r->flags == DDS_READER_FORKED ? r->share : r->tr->share;
}

/* Put rank `owner`'s server address into the reader's endpoint (once). */
int ddofi_tr_reader_insert(ddofi_tr_reader_t *r, int owner, ddofi_peer_t *peer_p)
{
    ddofi_tr_t *t = r->tr;
    int rc = 0;
    pthread_mutex_lock(&r->peer_lock);
    ddofi_peer_t pe = r->peers[owner];
    if (pe == DDOFI_TR_NO_PEER) {
        char what[64];
        snprintf(what, sizeof what, "reader: address of rank %d", owner);
        ddofi_tr_share_t *s = reader_share(r);
        if (s) { /* the process's endpoint: each address once, whichever store */
            rc = ddofi_tr_share_peer(s, ddofi_tr_addr(t, owner), t->addr_stride, what, &pe);
        } else {
            rc = ddofi_peer_insert(r->ep, ddofi_tr_addr(t, owner), t->addr_stride, &pe);
            if (rc)
                rc = ddofi_transport_error(rc, what);
        }
        if (!rc)
            __atomic_store_n(&r->peers[owner], pe, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&r->peer_lock);
    *peer_p = pe;
    return rc;
}

/* Open the reader's endpoint (and, for forked readers, its fabric) in this
 * process.  Every rank's address blob is checked now (a rank of another
 * provider fails here, not at a read); the peers are inserted at their first
 * read (DDSTORE_OFI_PEERS=lazy, docs/scale.md) or all now (eager). */
static int reader_connect(ddofi_tr_reader_t *r)
{
    ddofi_tr_t *t = r->tr;
    int rc;
    if (r->flags == DDS_READER_FORKED) {
        ddofi_fabric_params_t p = t->fparams;
        /* The same provider and domain as the store's fabric. */
        p.field_mask |= DDOFI_FABRIC_FIELD_PROVIDER | DDOFI_FABRIC_FIELD_IFACE;
        p.provider = t->prov;
        p.iface = t->domain;
        p.field_mask &= ~(uint64_t)DDOFI_FABRIC_FIELD_NIC_MAP;
        /* this process's share (every forked reader of the child's stores) */
        rc = ddofi_tr_share_get(&p, "forked reader: opening the fabric", &r->share);
        if (rc)
            return rc;
        r->fab = ddofi_tr_share_fabric(r->share);
    } else {
        /* ready, or the first join of a method-2 reader making its default
         * reader (t->lock held by this thread) */
        if (!__atomic_load_n(&t->ready, __ATOMIC_ACQUIRE) &&
            !(__atomic_load_n(&t->attaching, __ATOMIC_ACQUIRE) &&
              pthread_equal(t->attacher, pthread_self())))
            return dds_error(-DDS_EINVAL, "reader: no variable has been joined yet "
                             "(method 2: join() opens the fabric)");
        r->fab = t->fab;
    }
    /* One peer per rank of the store (a method-2 reader opened before the
     * first join knew no ranks yet). */
    ddofi_peer_t *np = malloc((size_t)(t->nranks > 0 ? t->nranks : 1) * sizeof *np);
    if (!np) {
        rc = dds_error(-DDS_ENOMEM, "reader: out of memory");
        goto fail;
    }
    for (int i = 0; i < t->nranks; i++)
        np[i] = DDOFI_TR_NO_PEER;
    free(r->peers);
    r->peers = np;
    if (r->shared) {
        rc = ddofi_tr_share_reader(reader_share(r), &r->ep);
        if (rc)
            goto fail;
    } else if ((rc = ddofi_ep_open(r->fab, NULL, &r->ep)) != 0) {
        rc = ddofi_transport_error(rc, "reader: opening an endpoint");
        goto fail;
    }
    for (int i = 0; i < t->nranks; i++) {
        ddofi_peer_t pe;
        rc = t->eager_peers ? ddofi_tr_reader_insert(r, i, &pe)
                            : ddofi_peer_check(r->ep, ddofi_tr_addr(t, i), t->addr_stride);
        if (rc) {
            char what[64];
            snprintf(what, sizeof what, "reader: address of rank %d", i);
            rc = t->eager_peers ? rc : ddofi_transport_error(rc, what);
            goto fail;
        }
    }
    __atomic_store_n(&r->pid, getpid(), __ATOMIC_RELEASE);
    return 0;
fail:
    if (!r->shared)
        ddofi_ep_close(r->ep);
    r->ep = NULL;
    ddofi_tr_share_put(r->share);
    r->share = NULL;
    r->fab = NULL;
    return rc;
}

static void reader_disconnect(ddofi_tr_reader_t *r)
{
    /* In a process that did not open them, these only free memory (a
     * share inherited across fork: its copy, with the last reference). */
    if (r->ep && !r->shared)
        ddofi_ep_close(r->ep);
    ddofi_tr_share_put(r->share);
    r->share = NULL;
    r->ep = NULL;
    r->fab = NULL;
    r->pid = 0;
}

int ddofi_tr_reader_new(ddofi_tr_t *t, int flags, int shared, int connect_now,
                        ddofi_tr_reader_t **r_p)
{
    ddofi_tr_reader_t *r = calloc(1, sizeof *r);
    if (!r)
        return dds_error(-DDS_ENOMEM, "reader: out of memory");
    r->peers = calloc((size_t)t->nranks, sizeof *r->peers);
    if (!r->peers) {
        free(r);
        return dds_error(-DDS_ENOMEM, "reader: out of memory");
    }
    r->tr = t;
    r->flags = flags;
    r->shared = shared || flags == DDS_READER_FORKED;
    pthread_mutex_init(&r->open_lock, NULL);
    pthread_mutex_init(&r->peer_lock, NULL);
    if (connect_now) {
        int rc = reader_connect(r);
        if (rc) {
            pthread_mutex_destroy(&r->peer_lock);
            pthread_mutex_destroy(&r->open_lock);
            free(r->peers);
            free(r);
            return rc;
        }
    }
    *r_p = r;
    return 0;
}

void ddofi_tr_reader_free(ddofi_tr_reader_t *r)
{
    if (!r)
        return;
    reader_disconnect(r);
    pthread_mutex_destroy(&r->peer_lock);
    pthread_mutex_destroy(&r->open_lock);
    free(r->peers);
    free(r);
}

/* The reader to use in this process, connected. */
int ddofi_tr_reader_ready(ddofi_tr_reader_t *r)
{
    pid_t me = getpid();
    pid_t was = __atomic_load_n(&r->pid, __ATOMIC_ACQUIRE);
    if (was == me)
        return 0;
    if (r->flags != DDS_READER_FORKED && was != 0) {
        return dds_error(-DDS_EINVAL,
                         "this reader was opened in process %d and cannot be used in "
                         "process %d (after fork): set DDSTORE_FORK_WORKERS=1 before "
                         "libfabric starts (the job script, or os.environ before "
                         "importing pyddstore), so that the store's reads in a forked "
                         "process (DataLoader workers) open a reader of their own; or "
                         "open one there yourself (PyDDStore.fork_reader(), "
                         "DDS_READER_FORKED)",
                         (int)was, (int)me);
    }
    pthread_mutex_lock(&r->open_lock);
    int rc = 0;
    if (r->pid != me) {
        if (r->pid != 0)
            reader_disconnect(r); /* inherited: frees the copy only */
        rc = reader_connect(r);
    }
    pthread_mutex_unlock(&r->open_lock);
    return rc;
}

/* Put a region on the transport's list (released by destroy if the store
 * did not). */
void ddofi_tr_region_link(ddofi_tr_t *t, ddofi_tr_region_t *g)
{
    pthread_mutex_lock(&t->lock);
    g->next = t->regions;
    if (t->regions)
        t->regions->prev = g;
    t->regions = g;
    pthread_mutex_unlock(&t->lock);
}
