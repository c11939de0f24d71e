/* ddstore-ofi adapter: core's transport interface (method 1) over the
 * standalone ddstore-ofi library.
 *
 * Objects:
 *   ddofi_tr_t      one per store: the fabric, the server endpoint (target of
 *                 every variable; progress thread where the provider needs
 *                 one), every rank's server address, the default reader.
 *   ddofi_tr_reader_t  an endpoint with every rank inserted as a peer.  Thread
 *                 readers share the store's fabric; a forked reader opens a
 *                 fabric of its own, lazily, in the process that first reads
 *                 with it (the inherited fabric is unusable after fork).
 *   ddofi_tr_region_t  one per variable: the local registration and every rank's
 *                 imported region (base, key, size).
 *   ddofi_tr_recv_t    a registered destination (recv_register).
 *
 * Threading: read / recv_* / reader_* are safe from many threads (caps
 * THREAD_SAFE); no lock is taken on the read path except the forked
 * reader's one-time open.  Per-thread scratch (the op array handed to
 * ddofi_read) is thread-local.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ddstore/comm_file.h"
#include "ddstore/config.h"
#include "ddstore/errors.h"
#include "ddstore/log.h"
#include "ddstore/ofi.h"
#include "ddstore/ofi_transport.h"
#include "ddstore/profile.h"
#include "ddstore/settings.h"
#include "ddofi_tr_internal.h"

static const dds_config_entry_t ddofi_tr_config_table[] = {
    DDS_SETTINGS_TABLE(DDOFI_TR_SETTINGS)};

static DDS_SETTINGS_READER(read_tr_settings, ddofi_tr_settings_t, DDOFI_TR_SETTINGS)

int ddofi_tr_settings_read(ddofi_tr_settings_t *s)
{
    ddofi_transport_register_config();
    return read_tr_settings(s);
}

int ddofi_transport_fork_workers(int *on_p)
{
    ddofi_tr_settings_t s;
    int rc = ddofi_tr_settings_read(&s);
    if (rc == 0 && on_p != NULL)
        *on_p = s.fork_workers;
    return rc;
}

/* The library's own parameters under ddstore's prefix: DDSTORE_OFI_<NAME>
 * (DDSTORE_OFI_PROGRESS, DDSTORE_OFI_CMA ...).  The ones that ddstore
 * declares above or in core (provider, interface, nic_map, local_only, read
 * size and timeout, fork workers) are passed as parameters instead
 * (ddofi_tr_read_settings), so the library does not read them itself. */
#define OFI_PARAM_PREFIX "DDSTORE_OFI_"
static const char *const ddofi_tr_host_owned[] = {
    "PROVIDER=DDSTORE_FABRIC",
    "IFACE=FABRIC_IFACE",
    "NIC_MAP=DDSTORE_NIC_MAP",
    "LOCAL_ONLY=DDSTORE_FABRIC_LOCAL_ONLY",
    "MAX_READ_BYTES=DDSTORE_MAX_READ_BYTES",
    "READ_TIMEOUT_S=DDSTORE_READ_TIMEOUT_S",
    "FORK_WORKERS=DDSTORE_FORK_WORKERS",
    NULL};
static dds_config_entry_t *g_lib_table; /* the rest, mirrored into core's registry */

static dds_config_type_t core_type(ddofi_param_type_t t)
{
    switch (t) {
    case DDOFI_PARAM_BOOL: return DDS_CONFIG_BOOL;
    case DDOFI_PARAM_SIZE: return DDS_CONFIG_INT;
    case DDOFI_PARAM_DOUBLE: return DDS_CONFIG_DOUBLE;
    case DDOFI_PARAM_ENUM: return DDS_CONFIG_ENUM;
    case DDOFI_PARAM_STRING: break;
    }
    return DDS_CONFIG_STRING;
}

static pthread_once_t g_cfg_once = PTHREAD_ONCE_INIT;
static void cfg_once(void)
{
    (void)dds_config_register(ddofi_tr_config_table,
                              sizeof ddofi_tr_config_table / sizeof ddofi_tr_config_table[0]);
    if (ddofi_param_set_prefix(OFI_PARAM_PREFIX, ddofi_tr_host_owned) != 0)
        return; /* a name above is not the library's: its unit test says which */
    /* One block, kept for the life of the process (registered tables are
     * not copied): the entries, then their names. */
    size_t n = ddofi_param_count(), k = 0;
    const size_t name_max = sizeof OFI_PARAM_PREFIX + 32;
    dds_config_entry_t *t = calloc(n, sizeof *t + name_max);
    if (!t)
        return;
    char *names = (char *)(t + n);
    for (size_t i = 0; i < n; i++) {
        const ddofi_param_t *p = ddofi_param_at(i);
        char *name = names + i * name_max;
        if (ddofi_param_env_name(p->name, name, name_max) != 0)
            continue; /* host-owned */
        t[k++] = (dds_config_entry_t){name, core_type(p->type), p->defval, p->choices, "ofi",
                                      p->help};
    }
    g_lib_table = t;
    (void)dds_config_register(t, k);
}
void ddofi_transport_register_config(void) { pthread_once(&g_cfg_once, cfg_once); }

int ddofi_transport_env_prepare(void)
{
    ddofi_transport_register_config();
    int rc = ddofi_tr_env_prepare(NULL);
    if (rc < 0) {
        /* keep the detail of the bad value; apply the rest */
        char why[256];
        snprintf(why, sizeof why, "%s", dds_last_error());
        (void)ddofi_env_prepare(0);
        return dds_error(rc, "%s", why);
    }
    return 0;
}

/* ---------------- errors ---------------- */

int ddofi_transport_error(int rc, const char *what)
{
    if (rc == 0)
        return 0;
    int code;
    switch (-rc) {
    case DDOFI_ENOPROV:
    case DDOFI_ECONFIG: code = -DDS_ECONFIG; break;
    case DDOFI_EPEER: code = -DDS_EIO; break;
    case DDOFI_ENOHMEM:
    case ENOSYS: code = -DDS_ENOSYS; break;
    case DDOFI_EFORKED:
    case EINVAL: code = -DDS_EINVAL; break;
    case ETIMEDOUT: code = -DDS_ETIMEDOUT; break;
    case ENOMEM: code = -DDS_ENOMEM; break;
    case EBUSY: code = -DDS_EBUSY; break;
    default: code = -DDS_ETRANSPORT; break;
    }
    const char *d = ddofi_last_error();
    return dds_error(code, "%s%s%s", what ? what : "", what ? ": " : "",
                     d[0] ? d : ddofi_strerror(rc));
}

static int mem_iface(const dds_mem_t *m)
{
    if (!m)
        return DDOFI_HMEM_SYSTEM;
    switch (m->kind) {
    case DDS_MEM_CUDA: return DDOFI_HMEM_CUDA;
    case DDS_MEM_ROCM: return DDOFI_HMEM_ROCR;
    default: return DDOFI_HMEM_SYSTEM;
    }
}

/* ---------------- huge pages for same-node direct reads ----------------
 *
 * process_vm_readv copies page by page: with 4 KiB pages on either side it
 * tops out near 6-7 GB/s here, with 2 MiB pages on both sides at memcpy
 * speed.  For host shards and registered destinations of at least 2 MiB,
 * advise transparent huge pages and collapse what is already populated
 * (MADV_COLLAPSE, Linux 6.1+; older kernels: the advice alone, which
 * khugepaged applies over time).  Contents are unchanged. */
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

static void thp_advise(const ddofi_tr_t *t, void *buf, size_t bytes)
{
    if (!t->attr.direct_reads || !t->thp || bytes < ((size_t)2 << 20))
        return;
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t lo = ((uintptr_t)buf + huge - 1) & ~(huge - 1);
    uintptr_t hi = ((uintptr_t)buf + bytes) & ~(huge - 1);
    if (hi <= lo)
        return;
    if (madvise((void *)lo, hi - lo, MADV_HUGEPAGE) == 0)
        (void)madvise((void *)lo, hi - lo, MADV_COLLAPSE);
}

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

static ddofi_read_op_t *scratch_ops(size_t n)
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

/* Put rank `owner`'s server address into the reader's endpoint (once). */
static int reader_insert(ddofi_tr_reader_t *r, int owner, ddofi_peer_t *peer_p)
{
    ddofi_tr_t *t = r->tr;
    int rc = 0;
    pthread_mutex_lock(&r->peer_lock);
    ddofi_peer_t pe = r->peers[owner];
    if (pe == DDOFI_TR_NO_PEER) {
        rc = ddofi_peer_insert(r->ep, ddofi_tr_addr(t, owner), t->addr_stride, &pe);
        if (rc) {
            char what[64];
            snprintf(what, sizeof what, "reader: address of rank %d", owner);
            rc = ddofi_transport_error(rc, what);
        } else {
            __atomic_store_n(&r->peers[owner], pe, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&r->peer_lock);
    *peer_p = pe;
    return rc;
}

/* Rank `owner`'s peer on the reader's endpoint, inserted on first use. */
static inline int reader_peer(ddofi_tr_reader_t *r, int owner, ddofi_peer_t *peer_p)
{
    ddofi_peer_t pe = __atomic_load_n(&r->peers[owner], __ATOMIC_ACQUIRE);
    if (pe != DDOFI_TR_NO_PEER) {
        *peer_p = pe;
        return 0;
    }
    return reader_insert(r, owner, peer_p);
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
        rc = ddofi_fabric_open(&p, &r->fab);
        if (rc)
            return ddofi_transport_error(rc, "forked reader: opening the fabric");
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
    rc = ddofi_ep_open(r->fab, NULL, &r->ep);
    if (rc) {
        rc = ddofi_transport_error(rc, "reader: opening an endpoint");
        goto fail;
    }
    for (int i = 0; i < t->nranks; i++) {
        ddofi_peer_t pe;
        rc = t->eager_peers ? reader_insert(r, i, &pe)
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
    ddofi_ep_close(r->ep);
    r->ep = NULL;
    if (r->flags == DDS_READER_FORKED)
        ddofi_fabric_close(r->fab);
    r->fab = NULL;
    return rc;
}

static void reader_disconnect(ddofi_tr_reader_t *r)
{
    /* In a process that did not open them, these only free memory. */
    if (r->ep)
        ddofi_ep_close(r->ep);
    if (r->flags == DDS_READER_FORKED && r->fab)
        ddofi_fabric_close(r->fab);
    r->ep = NULL;
    r->fab = NULL;
    r->pid = 0;
}

int ddofi_tr_reader_new(ddofi_tr_t *t, int flags, int connect_now, ddofi_tr_reader_t **r_p)
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
static int reader_ready(ddofi_tr_reader_t *r)
{
    pid_t me = getpid();
    pid_t was = __atomic_load_n(&r->pid, __ATOMIC_ACQUIRE);
    if (was == me)
        return 0;
    if (r->flags != DDS_READER_FORKED && was != 0) {
        return dds_error(-DDS_EINVAL,
                         "this reader was opened in process %d and cannot be used in "
                         "process %d (after fork): open a reader for forked processes "
                         "(PyDDStore.fork_reader(), DDS_READER_FORKED) in the child",
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

/* ---------------- ops ---------------- */

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

static int t_region_create(void *ctx, const dds_region_desc_t *d, void **region_p)
{
    ddofi_tr_t *t = ctx;
    const dds_comm_t *c = &t->comm;
    ddofi_tr_region_t *g = calloc(1, sizeof *g);
    unsigned char *all = NULL, *xall = NULL;
    /* what every rank sends: its registration, then its same-node record */
    enum { XREC = DDOFI_MR_BLOB_SIZE + sizeof(ddofi_tr_map_rec_t) };
    unsigned char blob[XREC];
    int rc = 0;

    if (!g)
        rc = dds_error(-DDS_ENOMEM, "region: out of memory");
    if (!rc) {
        g->live_slot = -1;
        snprintf(g->name, sizeof g->name, "%s", d->name ? d->name : "?");
        g->bytes = d->bytes;
        g->remotes = calloc((size_t)t->nranks, sizeof *g->remotes);
        all = malloc((size_t)t->nranks * DDOFI_MR_BLOB_SIZE);
        xall = malloc((size_t)t->nranks * XREC);
        if (!g->remotes || !all || !xall)
            rc = dds_error(-DDS_ENOMEM, "region: out of memory");
    }
    if (!rc && getpid() != t->pid)
        rc = dds_error(-DDS_EINVAL, "variable '%s': a store cannot add variables in a "
                       "forked process", g->name);
    if (!rc && t->hs.on && t->hs.n_core > 0)
        rc = dds_error(-DDS_EINVAL, "variable '%s': this store reads another job's "
                       "variables (method 2 with n_core=%d) and cannot publish its own; "
                       "join() them, or create the core job's store with n_core=0",
                       g->name, t->hs.n_core);
    if (!rc) {
        ddofi_mr_params_t mp = {0};
        mp.field_mask = DDOFI_MR_FIELD_IFACE | DDOFI_MR_FIELD_DEVICE | DDOFI_MR_FIELD_EP;
        mp.buf = d->bytes ? d->base : NULL;
        mp.len = d->bytes;
        mp.access = DDOFI_ACCESS_REMOTE_READ;
        mp.iface = mem_iface(&d->mem);
        mp.device = d->mem.device;
        mp.ep = t->server;
        if (d->bytes && d->mem.kind == DDS_MEM_HOST)
            thp_advise(t, d->base, d->bytes);
        int r = ddofi_mr_register(t->fab, &mp, &g->mr);
        if (r) {
            char what[320];
            snprintf(what, sizeof what, "variable '%s': registering %zu bytes", g->name,
                     d->bytes);
            rc = ddofi_transport_error(r, what);
        } else if ((r = ddofi_mr_export(g->mr, blob)) != 0) {
            rc = ddofi_transport_error(r, "region export");
        } else if (t->hs.on) {
            /* method 2: readers on this host learn when it is freed */
            ddofi_remote_t mine;
            ddofi_tr_map_rec_t mrec;
            ddofi_tr_map_export(t, d, &mrec);
            if ((r = ddofi_remote_import(blob, DDOFI_MR_BLOB_SIZE, &mine)) != 0)
                rc = ddofi_transport_error(r, "region export");
            else
                rc = ddofi_tr_live_add(g, &mine, &mrec);
        }
    }
    rc = dds_comm_agree(c, rc);
    if (rc)
        goto fail;
    ddofi_tr_map_rec_t mrec;
    ddofi_tr_map_export(t, d, &mrec);
    memcpy(blob + DDOFI_MR_BLOB_SIZE, &mrec, sizeof mrec);
    rc = c->ops->allgather(c->ctx, blob, sizeof blob, xall);
    for (int i = 0; i < t->nranks && !rc; i++)
        memcpy(all + (size_t)i * DDOFI_MR_BLOB_SIZE, xall + (size_t)i * XREC,
               DDOFI_MR_BLOB_SIZE);
    if (rc) {
        rc = dds_error(rc < 0 ? rc : -rc, "variable '%s': exchanging registrations: %s",
                       g->name, dds_last_error());
    } else {
        for (int i = 0; i < t->nranks && !rc; i++) {
            int r = ddofi_remote_import(all + (size_t)i * DDOFI_MR_BLOB_SIZE,
                                        DDOFI_MR_BLOB_SIZE, &g->remotes[i]);
            if (r) {
                char what[320];
                snprintf(what, sizeof what, "variable '%s': registration of rank %d",
                         g->name, i);
                rc = ddofi_transport_error(r, what);
            }
        }
    }
    if (!rc)
        rc = ddofi_tr_map_import(t, g, d, xall + DDOFI_MR_BLOB_SIZE, XREC);
    /* method 2: rank 0 writes the variable's record for reader jobs */
    if (!rc && t->hs.on && t->rank == 0)
        rc = ddofi_hs_publish(t, g, d, all);
    rc = dds_comm_agree(c, rc);
    if (rc)
        goto fail;
    free(all);
    free(xall);
    ddofi_tr_region_link(t, g);
    DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_OFI, "variable '%s': %zu bytes registered (key 0x%llx)",
            g->name, d->bytes, (unsigned long long)g->remotes[t->rank].key);
    *region_p = g;
    return 0;
fail:
    free(all);
    free(xall);
    if (g) {
        ddofi_hs_unpublish(t, g);
        ddofi_tr_live_release(g);
        ddofi_tr_map_release(g);
        ddofi_mr_deregister(g->mr);
        free(g->remotes);
        free(g);
    }
    return rc;
}

static int t_region_destroy(void *ctx, void *region)
{
    ddofi_tr_t *t = ctx;
    ddofi_tr_region_t *g = region;
    if (!g)
        return 0;
    pthread_mutex_lock(&t->lock);
    if (g->prev)
        g->prev->next = g->next;
    else if (t->regions == g)
        t->regions = g->next;
    if (g->next)
        g->next->prev = g->prev;
    pthread_mutex_unlock(&t->lock);
    if (g->joined) { /* another job's variable: nothing registered here */
        ddofi_tr_map_release(g);
        free(g->live);
        free(g->remotes);
        free(g);
        return 0;
    }
    /* method 2: no new reader finds the variable from now on, and readers
     * that joined it fail their next read */
    ddofi_hs_unpublish(t, g);
    ddofi_tr_live_release(g);
    /* Every rank has detached the variable before anyone deregisters, so no
     * read of it is in flight anywhere.  A failing barrier (after
     * MPI_Finalize, a dead peer) still releases the local registration. */
    if (getpid() == t->pid && t->nranks > 1 && t->comm.ops->barrier)
        (void)t->comm.ops->barrier(t->comm.ctx);
    ddofi_tr_map_release(g);
    int rc = ddofi_mr_deregister(g->mr);
    if (rc)
        rc = ddofi_transport_error(rc, "deregistering a variable");
    free(g->remotes);
    free(g);
    return rc;
}

static int t_reader_open(void *ctx, int flags, void **reader_p)
{
    ddofi_tr_t *t = ctx;
    ddofi_tr_reader_t *r = NULL;
    if (flags != DDS_READER_THREAD && flags != DDS_READER_FORKED)
        return dds_error(-DDS_EINVAL, "reader_open: unknown flags %d", flags);
    /* A thread reader connects now; a forked reader connects in the process
     * that first reads with it. */
    int rc = ddofi_tr_reader_new(t, flags,
                            flags == DDS_READER_THREAD &&
                                __atomic_load_n(&t->ready, __ATOMIC_ACQUIRE),
                            &r);
    if (rc)
        return rc;
    *reader_p = r;
    return 0;
}

static void t_reader_close(void *ctx, void *reader)
{
    (void)ctx;
    ddofi_tr_reader_free(reader);
}

/* Register [buf, buf+len) for this read only. */
static int reg_temp(ddofi_tr_reader_t *r, void *buf, size_t len, const dds_mem_t *mem,
                    ddofi_mr_t **mr_p, dds_prof_t *prof)
{
    uint64_t t0 = dds_prof_now();
    ddofi_mr_params_t mp = {0};
    mp.field_mask = DDOFI_MR_FIELD_IFACE | DDOFI_MR_FIELD_DEVICE;
    mp.buf = buf;
    mp.len = len;
    mp.access = DDOFI_ACCESS_LOCAL;
    mp.iface = mem_iface(mem);
    mp.device = mem ? mem->device : 0;
    int rc = ddofi_mr_register(r->fab, &mp, mr_p);
    if (rc)
        return ddofi_transport_error(rc, "registering a destination");
    dds_prof_add(prof, DDS_PROF_REGISTRATIONS, 1);
    if (t0)
        dds_prof_add(prof, DDS_PROF_NS_REGISTER, dds_prof_now() - t0);
    return 0;
}

static int t_read(void *ctx, void *reader, void *region, const dds_read_op_t *ops, size_t nops,
                  void *dst, void *dst_handle, const dds_mem_t *dst_mem, void *staging,
                  void *staging_handle, dds_prof_t *prof)
{
    ddofi_tr_t *t = ctx;
    ddofi_tr_region_t *g = region;
    ddofi_tr_reader_t *r = reader ? reader : t->dflt;
    int rc = reader_ready(r);
    if (rc)
        return rc;
    if (nops == 0)
        return 0;
    ddofi_read_op_t *o = scratch_ops(nops);
    if (!o)
        return dds_error(-DDS_ENOMEM, "read: out of memory for %zu ops", nops);

    /* Same-node host shards mapped here (ddofi_tr_map.c) are copied now,
     * into host destinations; the other ops go to libfabric (o[0..k)). */
    int dev = dst_mem && dst_mem->kind != DDS_MEM_HOST;
    size_t k = 0, dmax = 0, smax = 0;
    uint64_t tm0 = g->maps ? dds_prof_now() : 0, mops = 0, mbytes = 0;
    int cur = -1, cur_copied = 0;
    const char *mb = NULL;
    int owners[8], nowners = 0, more_owners = 0; /* of o[], named by an error */
    for (size_t i = 0; i < nops; i++) {
        const dds_read_op_t *p = &ops[i];
        if ((unsigned)p->owner >= (unsigned)t->nranks)
            return dds_error(-DDS_EINVAL, "read: owner %d outside [0, %d)", p->owner, t->nranks);
        if (g->maps && p->owner < g->maps_n && (p->staged || !dev)) {
            if (p->owner != cur) { /* ops come grouped by owner */
                if (cur_copied && (rc = ddofi_tr_map_alive(g, cur)) != 0)
                    return rc;
                cur = p->owner;
                cur_copied = 0;
                mb = ddofi_tr_map_base(g, cur);
            }
            if (mb) {
                const uint64_t sb = g->maps[cur].rec.bytes;
                if (p->src_offset < 0 || (uint64_t)p->src_offset > sb ||
                    p->len > sb - (uint64_t)p->src_offset)
                    return dds_error(-DDS_EINVAL, "variable '%s': read of %zu bytes at %zu "
                                     "beyond rank %d's shard (%llu bytes)", g->name, p->len,
                                     (size_t)p->src_offset, cur,
                                     (unsigned long long)g->maps[cur].rec.bytes);
                memcpy((char *)(p->staged ? staging : dst) + p->dst_offset, mb + p->src_offset,
                       p->len);
                cur_copied = 1;
                mops++;
                mbytes += p->len;
                continue;
            }
        }
        size_t end = p->dst_offset + p->len;
        if (p->staged)
            smax = end > smax ? end : smax;
        else
            dmax = end > dmax ? end : dmax;
        if ((rc = reader_peer(r, p->owner, &o[k].peer)) != 0)
            return rc;
        if (!nowners || owners[nowners - 1] != p->owner) { /* ops come grouped by owner */
            if (nowners < (int)(sizeof owners / sizeof owners[0]))
                owners[nowners++] = p->owner;
            else
                more_owners = 1;
        }
        o[k].remote = &g->remotes[p->owner];
        o[k].offset = (uint64_t)p->src_offset;
        o[k].dst = (char *)(p->staged ? staging : dst) + p->dst_offset;
        o[k].len = p->len;
        o[k].dst_mr = p->staged ? (ddofi_mr_t *)o : NULL; /* marks staged: replaced below */
        k++;
    }
    if (mops) {
        if (cur_copied && (rc = ddofi_tr_map_alive(g, cur)) != 0)
            return rc;
        ddofi_tr_map_count(mops, mbytes);
        if (tm0)
            dds_prof_add(prof, DDS_PROF_NS_POST, dds_prof_now() - tm0);
        if (k == 0) /* method 2: freed by the core job meanwhile? */
            return ddofi_tr_live_check(g);
    }

    /* Registrations of the destinations: the caller's (recv_register) when
     * made on this reader's fabric, else on the fly where the provider
     * needs them (FI_MR_LOCAL, or device memory with FI_MR_HMEM). */
    int need = t->need_local_mr || (dev && t->attr.mr_hmem);
    ddofi_tr_recv_t *dh = dst_handle, *sh = staging_handle;
    ddofi_mr_t *dmr = (dh && dh->fab == r->fab && dh->pid == r->pid) ? dh->mr : NULL;
    ddofi_mr_t *smr = (sh && sh->fab == r->fab && sh->pid == r->pid) ? sh->mr : NULL;
    ddofi_mr_t *tmp_d = NULL, *tmp_s = NULL;
    if (need && !dmr && dmax) {
        rc = reg_temp(r, dst, dmax, dst_mem, &tmp_d, prof);
        if (rc)
            return rc;
        dmr = tmp_d;
    }
    if (t->need_local_mr && !smr && smax) {
        rc = reg_temp(r, staging, smax, NULL, &tmp_s, prof);
        if (rc)
            goto out;
        smr = tmp_s;
    }
    for (size_t i = 0; i < k; i++)
        o[i].dst_mr = o[i].dst_mr ? smr : dmr;

    ddofi_read_stats_t st = {0};
    rc = ddofi_read(r->ep, o, k, &st);
    dds_prof_add(prof, DDS_PROF_NS_POST, st.ns_post);
    dds_prof_add(prof, DDS_PROF_NS_COMPLETE, st.ns_wait);
    if (rc) {
        /* the library names its peers by address index: name the ranks */
        char what[400];
        int n = snprintf(what, sizeof what, "variable '%s', reading from rank%s", g->name,
                         nowners > 1 ? "s" : "");
        for (int i = 0; i < nowners && n > 0 && (size_t)n < sizeof what; i++)
            n += snprintf(what + n, sizeof what - (size_t)n, "%s%d", i ? ", " : " ", owners[i]);
        if (more_owners && n > 0 && (size_t)n < sizeof what)
            snprintf(what + n, sizeof what - (size_t)n, ", ...");
        rc = ddofi_transport_error(rc, what);
    } else {
        rc = ddofi_tr_live_check(g); /* method 2: freed by the core job meanwhile? */
    }
out:
    if (tmp_d || tmp_s) {
        uint64_t t0 = dds_prof_now();
        ddofi_mr_deregister(tmp_d);
        ddofi_mr_deregister(tmp_s);
        if (t0)
            dds_prof_add(prof, DDS_PROF_NS_REGISTER, dds_prof_now() - t0);
    }
    return rc;
}

static int t_recv_register(void *ctx, void *buf, size_t bytes, const dds_mem_t *mem,
                           void **handle_p)
{
    ddofi_tr_t *t = ctx;
    ddofi_tr_recv_t *h = calloc(1, sizeof *h);
    if (!h)
        return dds_error(-DDS_ENOMEM, "recv_register: out of memory");
    h->fab = t->fab;
    h->pid = getpid();
    int dev = mem && mem->kind != DDS_MEM_HOST;
    if (!dev)
        thp_advise(t, buf, bytes);
    if (h->pid != t->pid || !__atomic_load_n(&t->ready, __ATOMIC_ACQUIRE)) {
        /* A forked process: its readers have fabrics of their own, and a
         * registration on the inherited fabric is impossible.  (A method-2
         * reader before its first join has no fabric yet.)  Reads
         * register on the fly where needed. */
        h->fab = NULL;
    } else if (t->need_local_mr || (dev && t->attr.mr_hmem)) {
        ddofi_mr_params_t mp = {0};
        mp.field_mask = DDOFI_MR_FIELD_IFACE | DDOFI_MR_FIELD_DEVICE;
        mp.buf = buf;
        mp.len = bytes;
        mp.access = DDOFI_ACCESS_LOCAL;
        mp.iface = mem_iface(mem);
        mp.device = mem ? mem->device : 0;
        int rc = ddofi_mr_register(t->fab, &mp, &h->mr);
        if (rc) {
            free(h);
            return ddofi_transport_error(rc, "recv_register");
        }
    }
    *handle_p = h;
    return 0;
}

static int t_recv_unregister(void *ctx, void *handle)
{
    (void)ctx;
    ddofi_tr_recv_t *h = handle;
    if (!h)
        return 0;
    int rc = ddofi_mr_deregister(h->mr);
    free(h);
    return rc ? ddofi_transport_error(rc, "recv_unregister") : 0;
}

static int t_progress(void *ctx)
{
    ddofi_tr_t *t = ctx;
    if (getpid() != t->pid || !t->server)
        return 0;
    int rc = ddofi_ep_progress(t->server);
    return rc ? ddofi_transport_error(rc, "progress") : 0;
}

/* Release everything (NULL members accepted: also a half-created
 * transport). */
void ddofi_tr_free(ddofi_tr_t *t)
{
    if (!t)
        return;
    ddofi_tr_reader_free(t->dflt);
    t->dflt = NULL;
    /* Variables the store did not release (it normally does). */
    ddofi_tr_region_t *g = t->regions;
    while (g) {
        ddofi_tr_region_t *next = g->next;
        if (!g->joined) {
            ddofi_hs_unpublish(t, g);
            ddofi_tr_live_release(g);
        }
        ddofi_tr_map_release(g);
        ddofi_mr_deregister(g->mr);
        free(g->live);
        free(g->remotes);
        free(g);
        g = next;
    }
    t->regions = NULL;
    if (t->hs.live_ref) {
        ddofi_tr_live_core_unref();
        t->hs.live_ref = 0;
    }
    int rc = ddofi_ep_close(t->server);
    if (rc)
        DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_OFI, "closing the server endpoint: %s",
                ddofi_last_error());
    rc = ddofi_fabric_close(t->fab);
    if (rc)
        DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_OFI, "closing the fabric: %s", ddofi_last_error());
    pthread_mutex_destroy(&t->lock);
    ddofi_hs_free(&t->hs);
    free(t->same_host);
    free(t->addrs);
    free(t);
}

static void t_destroy(void *ctx) { ddofi_tr_free(ctx); }

const dds_transport_ops_t ddofi_tr_ops = {
    .size = sizeof(dds_transport_ops_t),
    .name = "ofi",
    .region_create = t_region_create,
    .region_destroy = t_region_destroy,
    .reader_open = t_reader_open,
    .reader_close = t_reader_close,
    .read = t_read,
    .recv_register = t_recv_register,
    .recv_unregister = t_recv_unregister,
    .progress = t_progress,
    .epoch_begin = NULL,
    .epoch_end = NULL,
    .destroy = t_destroy,
    .region_join = ddofi_hs_region_join,
    .shard_alloc = ddofi_tr_shard_alloc,
    .shard_free = ddofi_tr_shard_free,
};

/* ---------------- create ---------------- */

static void ddofi_log_to_core(void *arg, ddofi_log_level_t level, const char *msg)
{
    (void)arg;
    dds_log_level_t l = level == DDOFI_LOG_ERROR  ? DDS_LOG_ERROR
                        : level == DDOFI_LOG_WARN ? DDS_LOG_WARN
                        : level == DDOFI_LOG_INFO ? DDS_LOG_INFO
                        : level == DDOFI_LOG_DEBUG ? DDS_LOG_DEBUG
                                                   : DDS_LOG_TRACE;
    DDS_LOG(l, DDS_SUBSYS_OFI, "%s", msg);
}

static pthread_once_t g_log_once = PTHREAD_ONCE_INIT;
static void log_once(void)
{
    ddofi_log_level_t max = DDOFI_LOG_TRACE;
    while ((int)max > 0 && !dds_log_enabled((dds_log_level_t)max, DDS_SUBSYS_OFI))
        max = (ddofi_log_level_t)((int)max - 1);
    if (dds_log_enabled((dds_log_level_t)max, DDS_SUBSYS_OFI))
        ddofi_log_set_sink(ddofi_log_to_core, NULL, max);
}

/* libfabric's fork settings (read once, at its first use) with
 * DDSTORE_FORK_WORKERS from core's registry. */
int ddofi_tr_env_prepare(const ddofi_tr_settings_t *given)
{
    ddofi_tr_settings_t set;
    int rc = 0;
    if (!given) {
        rc = ddofi_tr_settings_read(&set);
        if (rc)
            return rc;
        given = &set;
    }
    rc = ddofi_env_prepare(given->fork_workers);
    return rc < 0 ? ddofi_transport_error(rc, NULL) : 0;
}

int ddofi_tr_settings_load(ddofi_tr_t *t, const ddofi_transport_params_t *tp)
{
    int rc = 0;
    if (tp && (tp->field_mask & DDOFI_TRANSPORT_FIELD_SETTINGS) && tp->settings)
        t->core_set = *tp->settings;
    else
        rc = dds_settings_read(&t->core_set);
    if (!rc)
        rc = ddofi_tr_settings_read(&t->set);
    if (!rc)
        t->eager_peers = !strcmp(t->set.peers, "eager");
    return rc;
}

/* ddstore's typed settings (core's and the adapter's, read once into t)
 * into the library's params: the library does not read its own variables
 * for them.  DDSTORE_READ_TIMEOUT_S has core's one meaning (> 0, or inf for
 * no limit); the library's "no limit" is 0. */
int ddofi_tr_read_settings(const ddofi_tr_t *t, const ddofi_transport_params_t *tp,
                           int single_node, int local_rank, ddofi_fabric_params_t *p)
{
    const dds_settings_t *core = &t->core_set;
    const ddofi_tr_settings_t *set = &t->set;
    memset(p, 0, sizeof *p);
    p->field_mask = DDOFI_FABRIC_FIELD_READ_TIMEOUT | DDOFI_FABRIC_FIELD_MAX_READ_BYTES |
                    DDOFI_FABRIC_FIELD_SINGLE_NODE | DDOFI_FABRIC_FIELD_LOCAL_RANK |
                    DDOFI_FABRIC_FIELD_HMEM;
    p->read_timeout_s = isinf(core->read_timeout_s) ? 0 : core->read_timeout_s;
    p->max_read_bytes = (size_t)core->max_read_bytes;
    p->single_node = single_node;
    p->local_rank = local_rank;
    if (tp && (tp->field_mask & DDOFI_TRANSPORT_FIELD_PROVIDER) && tp->provider &&
        tp->provider[0]) {
        p->field_mask |= DDOFI_FABRIC_FIELD_PROVIDER;
        p->provider = tp->provider;
    }
    int named_iface = 0;
    if (tp && (tp->field_mask & DDOFI_TRANSPORT_FIELD_NIC_MAP) && tp->nic_map &&
        tp->nic_map[0]) {
        p->field_mask |= DDOFI_FABRIC_FIELD_NIC_MAP;
        p->nic_map = tp->nic_map;
        named_iface = 1;
    }
    if (!named_iface && set->iface && *set->iface) {
        p->field_mask |= DDOFI_FABRIC_FIELD_IFACE;
        p->iface = set->iface;
        named_iface = 1;
    } else if (!named_iface && set->nic_map && *set->nic_map) {
        p->field_mask |= DDOFI_FABRIC_FIELD_NIC_MAP;
        p->nic_map = set->nic_map;
        named_iface = 1;
    }
    if (!(p->field_mask & DDOFI_FABRIC_FIELD_PROVIDER)) {
        p->field_mask |= DDOFI_FABRIC_FIELD_PROVIDER;
        p->provider = set->fabric && *set->fabric ? set->fabric : "auto";
    }
    p->field_mask |= DDOFI_FABRIC_FIELD_LOCAL_ONLY;
    if (!strcmp(set->local_only, "1"))
        p->local_only = 1;
    else if (!strcmp(set->local_only, "0"))
        p->local_only = 0;
    else
        p->local_only = single_node && !named_iface;
    p->hmem = !strcmp(set->hmem, "1")   ? DDOFI_FABRIC_HMEM_REQUIRE
              : !strcmp(set->hmem, "0") ? DDOFI_FABRIC_HMEM_OFF
                                       : DDOFI_FABRIC_HMEM_PREFER;
    return 0;
}

/* The transport handle for `t`.  A method-2 reader's fabric opens at the
 * first join: until then max_read_bytes is 0 (ddofi_read splits at the
 * endpoint's limit anyway) and HMEM is not advertised. */
void ddofi_tr_fill(ddofi_tr_t *t, dds_transport_t *transport_p)
{
    memset(transport_p, 0, sizeof *transport_p);
    transport_p->ops = &ddofi_tr_ops;
    transport_p->ctx = t;
    transport_p->caps = DDS_TRANSPORT_CAP_THREAD_SAFE | DDS_TRANSPORT_CAP_READERS |
                        DDS_TRANSPORT_CAP_FORK | DDS_TRANSPORT_CAP_LOCAL_SELF |
                        (t->attr.hmem ? DDS_TRANSPORT_CAP_HMEM_CUDA | DDS_TRANSPORT_CAP_HMEM_ROCM
                                      : 0);
    transport_p->max_read_bytes =
        t->attr.max_read_bytes == SIZE_MAX ? 0 : t->attr.max_read_bytes;
}

int ddofi_transport_create(const dds_comm_t *comm, const ddofi_transport_params_t *tp,
                           dds_transport_t *transport_p)
{
    if (!comm || !comm->ops || !comm->ops->allgather || !transport_p || comm->size < 1 ||
        comm->rank < 0 || comm->rank >= comm->size)
        return dds_error(-DDS_EINVAL, "ddofi_transport_create: a communicator with "
                         "allgather and 0 <= rank < size, and transport_p, are required");
    ddofi_transport_register_config();
    dds_config_register_core();
    dds_comm_file_register_config();
    pthread_once(&g_log_once, log_once);
    const int method2 = tp && (tp->field_mask & DDOFI_TRANSPORT_FIELD_HANDSHAKE);
    if (method2 && tp->n_core < 0)
        return dds_error(-DDS_EINVAL, "method 2: n_core must be >= 0, got %d", tp->n_core);
    if (method2 && tp->n_core > 0)
        return ddofi_hs_reader_create(comm, tp, transport_p);

    ddofi_tr_t *t = calloc(1, sizeof *t);
    char *hosts = NULL;
    unsigned char mine[DDOFI_ADDR_BLOB_MAX] = {0};
    size_t mine_len = sizeof mine;
    int rc = 0;
    if (!t)
        rc = dds_error(-DDS_ENOMEM, "ddofi_transport_create: out of memory");
    if (!rc) {
        t->comm = *comm;
        t->rank = comm->rank;
        t->nranks = comm->size;
        t->pid = getpid();
        pthread_mutex_init(&t->lock, NULL);
        hosts = calloc((size_t)comm->size, HOST_MAX);
        if (!hosts)
            rc = dds_error(-DDS_ENOMEM, "ddofi_transport_create: out of memory");
    }
    /* Validate the environment on every rank before any collective. */
    if (!rc)
        rc = ddofi_tr_settings_load(t, tp);
    if (!rc)
        rc = ddofi_tr_env_prepare(&t->set);
    rc = dds_comm_agree(comm, rc);
    if (rc)
        goto fail;

    /* Which ranks share this host: single_node and the local rank. */
    char me[HOST_MAX];
    memset(me, 0, sizeof me);
    if (gethostname(me, sizeof me - 1))
        strcpy(me, "?");
    rc = comm->ops->allgather(comm->ctx, me, HOST_MAX, hosts);
    if (rc) {
        rc = dds_error(rc < 0 ? rc : -rc, "exchanging host names: %s", dds_last_error());
        goto fail;
    }
    int single = 1, local_rank = 0;
    t->same_host = calloc((size_t)comm->size, 1);
    for (int i = 0; i < comm->size; i++) {
        int same = !strncmp(hosts + (size_t)i * HOST_MAX, me, HOST_MAX);
        if (t->same_host)
            t->same_host[i] = (unsigned char)same;
        single &= same;
        if (same && i < comm->rank)
            local_rank++;
    }

    rc = ddofi_tr_read_settings(t, tp, single, local_rank, &t->fparams);
    if (!rc) {
        int r = ddofi_fabric_open(&t->fparams, &t->fab);
        if (r)
            rc = ddofi_transport_error(r, "method 1");
    }
    if (!rc) {
        ddofi_fabric_query(t->fab, &t->attr);
        snprintf(t->prov, sizeof t->prov, "%s", t->attr.provider);
        snprintf(t->domain, sizeof t->domain, "%s", t->attr.domain);
        t->need_local_mr = t->attr.mr_local;
        t->thp = t->set.thp;
        t->map_on = t->set.map_shards && t->same_host != NULL;
        int r = ddofi_ep_open(t->fab, &(ddofi_ep_params_t){DDOFI_EP_FIELD_FLAGS, DDOFI_EP_SERVE},
                              &t->server);
        if (!r)
            r = ddofi_ep_address(t->server, mine, &mine_len);
        if (r)
            rc = ddofi_transport_error(r, "method 1: server endpoint");
    }
    rc = dds_comm_agree(comm, rc);
    if (rc)
        goto fail;

    /* Every rank's server address, in slots of the longest one's length. */
    int64_t stride = (int64_t)mine_len;
    rc = comm->ops->allreduce_i64(comm->ctx, &stride, 1, DDS_REDUCE_MAX);
    if (!rc && (stride <= 0 || stride > DDOFI_ADDR_BLOB_MAX))
        rc = dds_error(-DDS_EIO, "exchanging endpoint addresses: a rank's address is %lld "
                       "bytes (at most %d)", (long long)stride, DDOFI_ADDR_BLOB_MAX);
    if (!rc) {
        t->addr_stride = (size_t)stride;
        t->addrs = calloc((size_t)comm->size, t->addr_stride);
        rc = t->addrs ? 0 : dds_error(-DDS_ENOMEM, "ddofi_transport_create: out of memory");
    }
    rc = dds_comm_agree(comm, rc);
    if (!rc)
        rc = comm->ops->allgather(comm->ctx, mine, t->addr_stride, t->addrs);
    if (rc) {
        rc = dds_error(rc < 0 ? rc : -rc, "exchanging endpoint addresses: %s",
                       dds_last_error());
        goto fail;
    }
    __atomic_store_n(&t->ready, 1, __ATOMIC_RELEASE);
    rc = ddofi_tr_reader_new(t, DDS_READER_THREAD, 1, &t->dflt);
    rc = dds_comm_agree(comm, rc);
    if (rc)
        goto fail;
    /* method 2's core job: collective, agreed inside */
    if (method2 && (rc = ddofi_hs_core_setup(t, tp, hosts)) != 0)
        goto fail;
    free(hosts);

    DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_OFI,
            "method %d: provider %s, domain %s, %d ranks (%s), progress thread %s, max read "
            "%zu B, FI_MR_LOCAL %d, FI_HMEM %d",
            method2 ? 2 : 1, t->attr.provider, t->attr.domain, t->nranks, single ? "one host" : "several hosts",
            t->attr.progress_thread ? "yes" : "no", t->attr.max_read_bytes, t->attr.mr_local,
            t->attr.hmem);
    ddofi_tr_fill(t, transport_p);
    return 0;

fail:
    free(hosts);
    if (t) {
        char saved[1024];
        snprintf(saved, sizeof saved, "%s", dds_last_error());
        ddofi_tr_free(t);
        dds_error(rc, "%s", saved);
    }
    return rc;
}
