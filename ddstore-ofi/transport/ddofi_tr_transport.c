/* ddstore-ofi adapter: core's transport interface (method 1) over the
 * standalone ddstore-ofi library.
 *
 * Objects:
 *   ddofi_tr_t      one per store: every rank's server address, the default
 *                 reader, the variables.  The fabric, the server endpoint
 *                 (target of every variable; progress thread where the
 *                 provider needs one) and the reading endpoint are the
 *                 process's, shared by its stores (ddofi_tr_share.c).
 *   ddofi_tr_reader_t  every rank's peer on an endpoint: the default reader
 *                 reads on the shared endpoint, a thread reader
 *                 (reader_open) on one of its own; a forked reader on the
 *                 shared endpoint of the process that first reads with it,
 *                 opened then (the inherited fabric is unusable after fork).
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

/* ---------------- ops ---------------- */

static int t_region_create(void *ctx, const dds_region_desc_t *d, void **region_p)
{
    ddofi_tr_t *t = ctx;
    const dds_comm_t *c = &t->comm;
    ddofi_tr_region_t *g = calloc(1, sizeof *g);
    unsigned char *all = NULL;
    unsigned char blob[DDOFI_MR_BLOB_SIZE];
    int rc = 0;

    if (!g)
        rc = dds_error(-DDS_ENOMEM, "region: out of memory");
    if (!rc) {
        g->live_slot = -1;
        snprintf(g->name, sizeof g->name, "%s", d->name ? d->name : "?");
        g->bytes = d->bytes;
        g->remotes = calloc((size_t)t->nranks, sizeof *g->remotes);
        all = malloc((size_t)t->nranks * DDOFI_MR_BLOB_SIZE);
        if (!g->remotes || !all)
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
            /* method 2: readers on this host learn when it is freed, and
             * where to map the shard (core's node-local shard service) */
            ddofi_remote_t mine;
            dds_shard_rec_t mrec;
            dds_shard_export(t->set.map_shards && d->mem.kind == DDS_MEM_HOST &&
                                     d->bytes && d->base == dds_shard_base(d->shard)
                                 ? d->shard
                                 : NULL,
                             &mrec);
            if ((r = ddofi_remote_import(blob, DDOFI_MR_BLOB_SIZE, &mine)) != 0)
                rc = ddofi_transport_error(r, "region export");
            else
                rc = ddofi_tr_live_add(g, &mine, &mrec);
        }
    }
    rc = dds_comm_agree(c, rc);
    if (rc)
        goto fail;
    rc = c->ops->allgather(c->ctx, blob, sizeof blob, all);
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
    /* method 2: rank 0 writes the variable's record for reader jobs */
    if (!rc && t->hs.on && t->rank == 0)
        rc = ddofi_hs_publish(t, g, d, all);
    rc = dds_comm_agree(c, rc);
    if (rc)
        goto fail;
    free(all);
    ddofi_tr_region_link(t, g);
    DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_OFI, "variable '%s': %zu bytes registered (key 0x%llx)",
            g->name, d->bytes, (unsigned long long)g->remotes[t->rank].key);
    *region_p = g;
    return 0;
fail:
    free(all);
    if (g) {
        ddofi_hs_unpublish(t, g);
        ddofi_tr_live_release(g);
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
        free(g->shards);
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
    int rc = ddofi_tr_reader_new(t, flags, 0,
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

/* Request q's ops into o[*k_p ..), with its destinations' registrations:
 * the caller's (recv_register) when made on this reader's fabric, else on
 * the fly where the provider needs them (FI_MR_LOCAL, or device memory
 * with FI_MR_HMEM), left in tmp[0..2) for the caller to deregister.  The
 * owners read are noted for the error message. */
static int t_fill(ddofi_tr_t *t, ddofi_tr_reader_t *r, const dds_read_req_t *q,
                  ddofi_read_op_t *o, size_t *k_p, ddofi_mr_t **tmp, int *owners,
                  int *nowners_p, int *more_p)
{
    int dev = q->dst_mem && q->dst_mem->kind != DDS_MEM_HOST;
    size_t k0 = *k_p, k = k0, dmax = 0, smax = 0;
    int rc;
    for (size_t i = 0; i < q->nops; i++) {
        const dds_read_op_t *p = &q->ops[i];
        if ((unsigned)p->owner >= (unsigned)t->nranks)
            return dds_error(-DDS_EINVAL, "read of '%s': owner %d outside [0, %d)", q->name,
                             p->owner, t->nranks);
        size_t end = p->dst_offset + p->len;
        if (p->staged)
            smax = end > smax ? end : smax;
        else
            dmax = end > dmax ? end : dmax;
        if ((rc = ddofi_tr_reader_peer(r, p->owner, &o[k].peer)) != 0)
            return rc;
        int seen = 0; /* ops come grouped by owner (per request) */
        for (int j = 0; j < *nowners_p && !seen; j++)
            seen = owners[j] == p->owner;
        if (!seen) {
            if (*nowners_p < 8)
                owners[(*nowners_p)++] = p->owner;
            else
                *more_p = 1;
        }
        o[k].remote = &((ddofi_tr_region_t *)q->region)->remotes[p->owner];
        o[k].offset = (uint64_t)p->src_offset;
        o[k].dst = (char *)(p->staged ? q->staging : q->dst) + p->dst_offset;
        o[k].len = p->len;
        o[k].dst_mr = p->staged ? (ddofi_mr_t *)o : NULL; /* marks staged: replaced below */
        k++;
    }
    int need = t->need_local_mr || (dev && t->attr.mr_hmem);
    ddofi_tr_recv_t *dh = q->dst_handle, *sh = q->staging_handle;
    ddofi_mr_t *dmr = (dh && dh->fab == r->fab && dh->pid == r->pid) ? dh->mr : NULL;
    ddofi_mr_t *smr = (sh && sh->fab == r->fab && sh->pid == r->pid) ? sh->mr : NULL;
    if (need && !dmr && dmax) {
        rc = reg_temp(r, q->dst, dmax, q->dst_mem, &tmp[0], q->prof);
        if (rc)
            return rc;
        dmr = tmp[0];
    }
    if (t->need_local_mr && !smr && smax) {
        rc = reg_temp(r, q->staging, smax, NULL, &tmp[1], q->prof);
        if (rc)
            return rc;
        smr = tmp[1];
    }
    for (size_t i = k0; i < k; i++)
        o[i].dst_mr = o[i].dst_mr ? smr : dmr;
    *k_p = k;
    return 0;
}

/* Every request's reads posted on reader r, then waited for together: one
 * round trip per owner for all the variables (read_multi), or one
 * variable's (read). */
static int t_read_reqs(ddofi_tr_t *t, ddofi_tr_reader_t *r, const dds_read_req_t *q,
                       size_t nq)
{
    size_t nops = 0, k = 0;
    int rc = ddofi_tr_reader_ready(r);
    if (rc)
        return rc;
    for (size_t j = 0; j < nq; j++)
        nops += q[j].nops;
    if (nops == 0)
        return 0;
    ddofi_read_op_t *o = ddofi_tr_scratch_ops(nops);
    ddofi_mr_t *tmp_small[8] = {0}, **tmp = tmp_small;
    if (!o)
        return dds_error(-DDS_ENOMEM, "read: out of memory for %zu ops", nops);
    if (2 * nq > sizeof tmp_small / sizeof tmp_small[0] && !(tmp = calloc(2 * nq, sizeof *tmp)))
        return dds_error(-DDS_ENOMEM, "read: out of memory for %zu variables", nq);

    /* Same-node shards the store mapped never come here (it copies them:
     * DDS_TRANSPORT_CAP_NODE_MAP); every op goes to libfabric. */
    int owners[8], nowners = 0, more_owners = 0; /* of o[], named by an error */
    for (size_t j = 0; j < nq && rc == 0; j++)
        rc = t_fill(t, r, &q[j], o, &k, &tmp[2 * j], owners, &nowners, &more_owners);
    if (rc)
        goto out;

    ddofi_read_stats_t st = {0};
    rc = ddofi_read(r->ep, o, k, &st);
    for (size_t j = 0; j < nq; j++) { /* the variables share the time */
        dds_prof_add(q[j].prof, DDS_PROF_NS_POST, st.ns_post / nq);
        dds_prof_add(q[j].prof, DDS_PROF_NS_COMPLETE, st.ns_wait / nq);
    }
    if (rc) {
        /* the library names its peers by address index: name the ranks */
        char what[600];
        int n = snprintf(what, sizeof what, "variable%s", nq > 1 ? "s" : "");
        for (size_t j = 0; j < nq && n > 0 && (size_t)n < sizeof what - 100; j++)
            n += snprintf(what + n, sizeof what - (size_t)n, "%s'%s'", j ? ", " : " ",
                          q[j].name ? q[j].name : "?");
        if (n > 0 && (size_t)n < sizeof what)
            n += snprintf(what + n, sizeof what - (size_t)n, ", reading from rank%s",
                          nowners > 1 ? "s" : "");
        for (int i = 0; i < nowners && n > 0 && (size_t)n < sizeof what; i++)
            n += snprintf(what + n, sizeof what - (size_t)n, "%s%d", i ? ", " : " ", owners[i]);
        if (more_owners && n > 0 && (size_t)n < sizeof what)
            snprintf(what + n, sizeof what - (size_t)n, ", ...");
        rc = ddofi_transport_error(rc, what);
    } else {
        for (size_t j = 0; j < nq && rc == 0; j++) /* method 2: freed by the core job? */
            rc = ddofi_tr_live_check(q[j].region);
    }
out:
    for (size_t j = 0; j < 2 * nq; j++) {
        if (!tmp[j])
            continue;
        uint64_t t0 = dds_prof_now();
        ddofi_mr_deregister(tmp[j]);
        if (t0)
            dds_prof_add(q[j / 2].prof, DDS_PROF_NS_REGISTER, dds_prof_now() - t0);
    }
    if (tmp != tmp_small)
        free(tmp);
    return rc;
}

static int t_read(void *ctx, void *reader, void *region, const dds_read_op_t *ops, size_t nops,
                  void *dst, void *dst_handle, const dds_mem_t *dst_mem, void *staging,
                  void *staging_handle, dds_prof_t *prof)
{
    ddofi_tr_t *t = ctx;
    dds_read_req_t q = {region, region ? ((ddofi_tr_region_t *)region)->name : "?", ops, nops, dst,
                        dst_handle, dst_mem, staging, staging_handle, prof};
    return t_read_reqs(t, reader ? reader : t->dflt, &q, 1);
}

static int t_read_multi(void *ctx, void *reader, const dds_read_req_t *reqs, size_t nreqs)
{
    ddofi_tr_t *t = ctx;
    return t_read_reqs(t, reader ? reader : t->dflt, reqs, nreqs);
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
        ddofi_mr_deregister(g->mr);
        free(g->shards);
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
    /* the process's fabric and endpoints: closed with the last store */
    ddofi_tr_share_put(t->share);
    t->share = NULL;
    t->server = NULL;
    t->fab = NULL;
    pthread_mutex_destroy(&t->lock);
    ddofi_hs_free(&t->hs);
    free(t->addrs);
    free(t);
}

static void t_destroy(void *ctx) { ddofi_tr_free(ctx); }

/* A joined (method-2) region's same-node shards, as the liveness table
 * gave them at join (ddofi_tr_live.c). */
static int t_region_shards(void *ctx, void *region, dds_shard_rec_t *recs, int nowners)
{
    (void)ctx;
    ddofi_tr_region_t *g = region;
    if (g && g->shards)
        for (int i = 0; i < nowners && i < g->nshards; i++)
            recs[i] = g->shards[i];
    return 0;
}

/* After the store copied rows from mapped shards: method 2, freed by the
 * core job meanwhile? */
static int t_region_check(void *ctx, void *region)
{
    (void)ctx;
    return region ? ddofi_tr_live_check(region) : 0;
}

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
    .region_shards = t_region_shards,
    .region_check = t_region_check,
    .read_multi = t_read_multi,
};

/* ---------------- create ---------------- */

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
                        DDS_TRANSPORT_CAP_NODE_SHARDS |
                        (t->set.map_shards ? DDS_TRANSPORT_CAP_NODE_MAP : 0) |
                        (t->attr.hmem ? DDS_TRANSPORT_CAP_HMEM_CUDA | DDS_TRANSPORT_CAP_HMEM_ROCM
                                      : 0);
    transport_p->max_read_bytes =
        t->attr.max_read_bytes == SIZE_MAX ? 0 : t->attr.max_read_bytes;
}

/* A method-2 reader transport (no collective): its fabric opens at the
 * first join (ddofi_tr_method2.c). */
static int hs_reader_create(const dds_comm_t *comm, const ddofi_transport_params_t *tp,
                            dds_transport_t *transport_p)
{
    ddofi_tr_t *t = calloc(1, sizeof *t);
    int rc;
    if (!t)
        return dds_error(-DDS_ENOMEM, "method 2: out of memory");
    t->comm = *comm;
    t->rank = comm->rank;
    t->nranks = 0;
    t->pid = getpid();
    pthread_mutex_init(&t->lock, NULL);
    rc = ddofi_hs_params(&t->hs, tp);
    if (!rc && (tp->field_mask & DDOFI_TRANSPORT_FIELD_NIC_MAP) && tp->nic_map &&
        tp->nic_map[0]) {
        if (strlen(tp->nic_map) >= sizeof t->hs.nic_map)
            rc = dds_error(-DDS_ECONFIG, "nic_map is longer than %zu bytes",
                           sizeof t->hs.nic_map - 1);
        snprintf(t->hs.nic_map, sizeof t->hs.nic_map, "%s", tp->nic_map);
    }
    if (!rc)
        rc = ddofi_tr_settings_load(t, tp);
    if (!rc) {
        /* libfabric reads its fork settings once, at its first use */
        rc = ddofi_tr_env_prepare(&t->set);
    }
    if (rc) {
        char saved[768];
        snprintf(saved, sizeof saved, "%s", dds_last_error());
        ddofi_tr_free(t);
        return dds_error(rc, "%s", saved);
    }
    DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_OFI,
            "method 2 reader of %d core ranks: records in %s, namespace '%s'", t->hs.n_core,
            t->hs.dir, t->hs.ns[0] ? t->hs.ns : "(any)");
    ddofi_tr_fill(t, transport_p);
    return 0;
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
    ddofi_tr_log_init();
    const int method2 = tp && (tp->field_mask & DDOFI_TRANSPORT_FIELD_HANDSHAKE);
    if (method2 && tp->n_core < 0)
        return dds_error(-DDS_EINVAL, "method 2: n_core must be >= 0, got %d", tp->n_core);
    if (method2 && tp->n_core > 0)
        return hs_reader_create(comm, tp, transport_p);

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
    for (int i = 0; i < comm->size; i++) {
        int same = !strncmp(hosts + (size_t)i * HOST_MAX, me, HOST_MAX);
        single &= same;
        if (same && i < comm->rank)
            local_rank++;
    }

    rc = ddofi_tr_read_settings(t, tp, single, local_rank, &t->fparams);
    if (!rc) {
        rc = ddofi_tr_share_get(&t->fparams, "method 1", &t->share);
        if (!rc)
            t->fab = ddofi_tr_share_fabric(t->share);
    }
    if (!rc) {
        ddofi_fabric_query(t->fab, &t->attr);
        snprintf(t->prov, sizeof t->prov, "%s", t->attr.provider);
        snprintf(t->domain, sizeof t->domain, "%s", t->attr.domain);
        t->need_local_mr = t->attr.mr_local;
        t->thp = t->set.thp;
        rc = ddofi_tr_share_server(t->share, &t->server);
        int r = rc ? 0 : ddofi_ep_address(t->server, mine, &mine_len);
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
    rc = ddofi_tr_reader_new(t, DDS_READER_THREAD, 1, 1, &t->dflt);
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

