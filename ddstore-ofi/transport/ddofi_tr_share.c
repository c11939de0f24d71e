/* ddstore-ofi adapter: the fabric, domain and endpoints that the stores and
 * readers of one process share.
 *
 * Every endpoint of a provider costs private memory whatever the data size
 * (tcp;ofi_rxm posts its shared receive queue at 16 KiB a buffer: 64 MiB an
 * endpoint by default; shm maps a region per endpoint), and a store used to
 * open a fabric, a server endpoint (with its progress thread) and a reading
 * endpoint of its own: with three stores (train/val/test) in each process,
 * three of each.  Now the stores of a process whose fabric parameters are
 * the same share one ddofi_tr_share_t: one fabric and domain, one server
 * endpoint (the target of every store's registrations, one progress thread)
 * and one reading endpoint (every store's default reader and the forked
 * readers of a child process).  Each store keeps its own registrations and
 * keys (the fabric numbers keys across all of them) and its own table of
 * peers; the reading endpoint's address vector holds each distinct server
 * address once (the table below).  Explicit thread readers (reader_open)
 * still open an endpoint of their own on the shared fabric.
 *
 * A share is created by the first store (or forked reader) of a process that
 * needs it, counted, and closed with the last.  A child process never uses
 * its parent's shares (their pid is not its own): it makes its own; a copy
 * inherited across fork is freed (memory only) when the last inherited
 * object that counted it is released. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddstore/errors.h"
#include "ddstore/log.h"
#include "ddstore/ofi.h"
#include "ddstore/ofi_transport.h"
#include "ddofi_tr_internal.h"

typedef struct share_peer {
    unsigned char *blob; /* NULL: free slot */
    size_t len;
    uint64_t hash;
    ddofi_peer_t peer;
} share_peer_t;

struct ddofi_tr_share {
    struct ddofi_tr_share *next;
    pid_t pid;
    int refs;              /* under g_lock */
    char key[1024];
    ddofi_fabric_t *fab;
    pthread_mutex_t lock;  /* server / reader creation, the peer table */
    ddofi_ep_t *server;
    ddofi_ep_t *reader;
    share_peer_t *peers;   /* open addressing, cap a power of two */
    size_t npeers, cap;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static ddofi_tr_share_t *g_shares;
/* this process's live objects (test hook: ddofi_transport_shared_counts) */
static _Atomic int g_fabrics, g_endpoints;

/* A thread that forks while another holds g_lock must not leave the child
 * a lock that nobody will release. */
static void atfork_prepare(void) { pthread_mutex_lock(&g_lock); }
static void atfork_release(void) { pthread_mutex_unlock(&g_lock); }
static void atfork_child(void)
{
    /* the parent's shares are not the child's: counted from 0 here */
    atomic_store(&g_fabrics, 0);
    atomic_store(&g_endpoints, 0);
    pthread_mutex_unlock(&g_lock);
}
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;
static void atfork_once(void)
{
    (void)pthread_atfork(atfork_prepare, atfork_release, atfork_child);
}

/* Every field of the parameters, strings by value: shares match only when
 * a fabric opened with either would be the same. */
static void make_key(const ddofi_fabric_params_t *p, char *key, size_t cap)
{
    snprintf(key, cap, "m%llx|p%s|i%s|n%s|lr%d|sn%d|lo%d|h%d|mr%zu|to%.17g|pr%d|mo%zu",
             (unsigned long long)p->field_mask, p->provider ? p->provider : "",
             p->iface ? p->iface : "", p->nic_map ? p->nic_map : "", p->local_rank,
             p->single_node, p->local_only, p->hmem, p->max_read_bytes, p->read_timeout_s,
             (int)p->progress, p->max_outstanding);
}

int ddofi_tr_share_get(const ddofi_fabric_params_t *p, const char *what, ddofi_tr_share_t **s_p)
{
    char key[1024];
    make_key(p, key, sizeof key);
    pid_t me = getpid();
    pthread_once(&g_atfork_once, atfork_once);
    pthread_mutex_lock(&g_lock);
    for (ddofi_tr_share_t *s = g_shares; s; s = s->next) {
        if (s->pid == me && !strcmp(s->key, key)) {
            s->refs++;
            pthread_mutex_unlock(&g_lock);
            *s_p = s;
            return 0;
        }
    }
    ddofi_tr_share_t *s = calloc(1, sizeof *s);
    if (!s) {
        pthread_mutex_unlock(&g_lock);
        return dds_error(-DDS_ENOMEM, "%s: out of memory", what);
    }
    int rc = ddofi_fabric_open(p, &s->fab);
    if (rc) {
        pthread_mutex_unlock(&g_lock);
        free(s);
        return ddofi_transport_error(rc, what);
    }
    s->pid = me;
    s->refs = 1;
    snprintf(s->key, sizeof s->key, "%s", key);
    pthread_mutex_init(&s->lock, NULL);
    s->next = g_shares;
    g_shares = s;
    atomic_fetch_add(&g_fabrics, 1);
    pthread_mutex_unlock(&g_lock);
    DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_OFI, "fabric opened for this process (shared by its "
            "stores and readers)");
    *s_p = s;
    return 0;
}

ddofi_fabric_t *ddofi_tr_share_fabric(const ddofi_tr_share_t *s) { return s ? s->fab : NULL; }

/* The share's endpoint *slot, opened now if not yet (serve: the server). */
static int share_ep(ddofi_tr_share_t *s, ddofi_ep_t **slot, int serve, ddofi_ep_t **ep_p)
{
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    if (!*slot) {
        rc = serve ? ddofi_ep_open(s->fab,
                                   &(ddofi_ep_params_t){DDOFI_EP_FIELD_FLAGS, DDOFI_EP_SERVE},
                                   slot)
                   : ddofi_ep_open(s->fab, NULL, slot);
        if (!rc)
            atomic_fetch_add(&g_endpoints, 1);
    }
    *ep_p = *slot;
    pthread_mutex_unlock(&s->lock);
    return rc ? ddofi_transport_error(rc, serve ? "server endpoint" : "reading endpoint") : 0;
}

int ddofi_tr_share_server(ddofi_tr_share_t *s, ddofi_ep_t **ep_p)
{
    return share_ep(s, &s->server, 1, ep_p);
}

int ddofi_tr_share_reader(ddofi_tr_share_t *s, ddofi_ep_t **ep_p)
{
    return share_ep(s, &s->reader, 0, ep_p);
}

static uint64_t blob_hash(const unsigned char *b, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static share_peer_t *peer_slot(share_peer_t *tab, size_t cap, const unsigned char *b, size_t len,
                               uint64_t h)
{
    for (size_t i = (size_t)h & (cap - 1);; i = (i + 1) & (cap - 1))
        if (!tab[i].blob || (tab[i].hash == h && tab[i].len == len &&
                             !memcmp(tab[i].blob, b, len)))
            return &tab[i];
}

int ddofi_tr_share_peer(ddofi_tr_share_t *s, const void *blob, size_t len, const char *what,
                        ddofi_peer_t *peer_p)
{
    const unsigned char *b = blob;
    uint64_t h = blob_hash(b, len);
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    if (2 * (s->npeers + 1) > s->cap) { /* grow: at most half full */
        size_t cap = s->cap ? 2 * s->cap : 64;
        share_peer_t *tab = calloc(cap, sizeof *tab);
        if (!tab) {
            pthread_mutex_unlock(&s->lock);
            return dds_error(-DDS_ENOMEM, "%s: out of memory", what);
        }
        for (size_t i = 0; i < s->cap; i++)
            if (s->peers[i].blob)
                *peer_slot(tab, cap, s->peers[i].blob, s->peers[i].len, s->peers[i].hash) =
                    s->peers[i];
        free(s->peers);
        s->peers = tab;
        s->cap = cap;
    }
    share_peer_t *e = peer_slot(s->peers, s->cap, b, len, h);
    if (!e->blob) {
        unsigned char *copy = malloc(len);
        ddofi_peer_t pe;
        if (!copy) {
            rc = dds_error(-DDS_ENOMEM, "%s: out of memory", what);
        } else if ((rc = ddofi_peer_insert(s->reader, b, len, &pe)) != 0) {
            rc = ddofi_transport_error(rc, what);
            free(copy);
        } else {
            memcpy(copy, b, len);
            *e = (share_peer_t){copy, len, h, pe};
            s->npeers++;
        }
    }
    if (!rc)
        *peer_p = e->peer;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

void ddofi_tr_share_put(ddofi_tr_share_t *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&g_lock);
    if (--s->refs > 0) {
        pthread_mutex_unlock(&g_lock);
        return;
    }
    for (ddofi_tr_share_t **pp = &g_shares; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    const int mine = s->pid == getpid(); /* else a copy inherited across fork */
    if (mine) {
        atomic_fetch_sub(&g_fabrics, 1);
        atomic_fetch_sub(&g_endpoints, (s->server != NULL) + (s->reader != NULL));
    }
    pthread_mutex_unlock(&g_lock);
    /* In a process that did not open them, these only free memory. */
    if (ddofi_ep_close(s->reader))
        DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_OFI, "closing the reading endpoint: %s",
                ddofi_last_error());
    if (ddofi_ep_close(s->server))
        DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_OFI, "closing the server endpoint: %s",
                ddofi_last_error());
    if (ddofi_fabric_close(s->fab))
        DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_OFI, "closing the fabric: %s", ddofi_last_error());
    for (size_t i = 0; i < s->cap; i++)
        free(s->peers[i].blob);
    free(s->peers);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void ddofi_transport_shared_counts(int *fabrics_p, int *endpoints_p)
{
    if (fabrics_p)
        *fabrics_p = atomic_load(&g_fabrics);
    if (endpoints_p)
        *endpoints_p = atomic_load(&g_endpoints);
}
