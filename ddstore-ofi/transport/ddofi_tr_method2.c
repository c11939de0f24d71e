/* ddstore-ofi adapter: method 2, split jobs.
 *
 * A core job is method 1 plus, per variable, one record file in
 * handshake_dir (ddstore/handshake_transport.h) that rank 0 writes when the
 * variable is added (after every rank registered its shard) and removes
 * when it is freed.  A reader job (n_core > 0) has no shard, no server
 * endpoint and makes no collective call: join(name) waits for the record,
 * checks it (namespace, liveness of the core ranks on this host, rank
 * count, one core run per store), opens the fabric with the core job's
 * provider at the first join, and imports the regions.  Reads are then the
 * method-1 read path.
 *
 * A dead core job: records of an exited core process on this host are
 * stale (join keeps waiting for a fresh record until the timeout, then
 * fails naming the stale one); a core job that dies while a reader reads
 * makes the read fail within DDSTORE_READ_TIMEOUT_S (ddofi_read's bound).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "ddstore/config.h"
#include "ddstore/errors.h"
#include "ddstore/log.h"
#include "ddstore/comm_file.h"
#include "ddofi_tr_internal.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t random_id(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v || v == 0)
        v = (uint64_t)realtime_ns() ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ull;
    return v;
}

/* handshake_dir, namespace, timeout, host name. */
int ddofi_hs_params(ddofi_hs_t *hs, const ddofi_transport_params_t *tp)
{
    const char *dir = tp->handshake_dir, *ns = tp->exchange_ns;
    dds_filecomm_settings_t set;
    int rc = dds_filecomm_settings_read(&set);
    if (rc)
        return rc;
    if (!dir || !dir[0])
        dir = set.handshake_dir;
    if (!dir || !dir[0])
        return dds_error(-DDS_ECONFIG, "method 2 needs a handshake directory shared by the "
                         "core and reader jobs: handshake_dir= or DDSTORE_HANDSHAKE_DIR");
    if (strlen(dir) >= sizeof hs->dir)
        return dds_error(-DDS_ECONFIG, "handshake_dir is longer than %zu bytes",
                         sizeof hs->dir - 1);
    if (!ns || !ns[0])
        ns = set.exchange_ns;
    if (!ns)
        ns = "";
    if (strlen(ns) > DDOFI_HS_NS_MAX)
        return dds_error(-DDS_ECONFIG, "exchange_ns '%.20s...' is longer than %d bytes", ns,
                         DDOFI_HS_NS_MAX);
    hs->join_timeout_s = set.handshake_timeout_s; /* > 0 or inf (its declaration) */
    snprintf(hs->dir, sizeof hs->dir, "%s", dir);
    snprintf(hs->ns, sizeof hs->ns, "%s", ns);
    memset(hs->myhost, 0, sizeof hs->myhost);
    if (gethostname(hs->myhost, sizeof hs->myhost - 1))
        strcpy(hs->myhost, "?");
    hs->mypidns = ddofi_hs_self_pidns();
    hs->on = 1;
    hs->n_core = tp->n_core;
    return 0;
}

void ddofi_hs_free(ddofi_hs_t *hs)
{
    ddofi_tr_live_unmap(hs);
    free(hs->hosts);
    free(hs->pids);
    free(hs->ticks);
    hs->hosts = NULL;
    hs->pids = NULL;
    hs->ticks = NULL;
}

/* ---------------- core job ---------------- */

typedef struct hs_ident {
    uint64_t run_id;
    uint64_t ticks;
    int32_t pid;
    int32_t pad;
} hs_ident_t;

int ddofi_hs_core_setup(ddofi_tr_t *t, const ddofi_transport_params_t *tp, const char *hosts)
{
    const dds_comm_t *c = &t->comm;
    hs_ident_t me, *all = NULL;
    int rc = ddofi_hs_params(&t->hs, tp);
    if (!rc && t->rank == 0)
        rc = ddofi_hs_dir_prepare(t->hs.dir);
    if (!rc) {
        all = calloc((size_t)t->nranks, sizeof *all);
        t->hs.hosts = malloc((size_t)t->nranks * HOST_MAX);
        t->hs.pids = calloc((size_t)t->nranks, sizeof *t->hs.pids);
        t->hs.ticks = calloc((size_t)t->nranks, sizeof *t->hs.ticks);
        if (!all || !t->hs.hosts || !t->hs.pids || !t->hs.ticks)
            rc = dds_error(-DDS_ENOMEM, "method 2: out of memory");
    }
    rc = dds_comm_agree(c, rc);
    if (rc)
        goto out;
    memset(&me, 0, sizeof me);
    me.run_id = random_id();
    me.ticks = ddofi_hs_self_start_ticks();
    me.pid = (int32_t)getpid();
    rc = c->ops->allgather(c->ctx, &me, sizeof me, all);
    if (rc) {
        rc = dds_error(rc < 0 ? rc : -rc, "method 2: exchanging process identities: %s",
                       dds_last_error());
        goto out;
    }
    t->hs.run_id = all[0].run_id; /* rank 0's: one run id per core store */
    for (int i = 0; i < t->nranks; i++) {
        t->hs.pids[i] = all[i].pid;
        t->hs.ticks[i] = all[i].ticks;
    }
    memcpy(t->hs.hosts, hosts, (size_t)t->nranks * HOST_MAX);
    ddofi_tr_live_core_ref();
    t->hs.live_ref = 1;
    DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_OFI,
            "method 2 core job: run %016llx, namespace '%s', records in %s",
            (unsigned long long)t->hs.run_id, t->hs.ns, t->hs.dir);
out:
    free(all);
    return rc;
}

/* An address blob's length (ddofi_addr_blob_len); the whole slot (the
 * store's address stride) when no blob starts there (the reader's
 * ddofi_peer_insert then refuses it). */
static uint32_t addr_blob_len(const unsigned char *b, size_t slot)
{
    const size_t n = ddofi_addr_blob_len(b, slot);
    return n ? (uint32_t)n : (uint32_t)slot;
}

int ddofi_hs_publish(ddofi_tr_t *t, ddofi_tr_region_t *g, const dds_region_desc_t *d,
                   const unsigned char *mr_blobs)
{
    ddofi_hs_record_t rec;
    int rc;
    if (!d->offsets || d->nranks != t->nranks)
        return dds_error(-DDS_EINVAL, "variable '%s': method 2 needs the store's row layout "
                         "in region_create (a newer ddstore-core)", g->name);
    memset(&rec, 0, sizeof rec);
    rec.ranks = calloc((size_t)t->nranks, sizeof *rec.ranks);
    if (!rec.ranks)
        return dds_error(-DDS_ENOMEM, "variable '%s': out of memory", g->name);
    rec.nranks = (uint32_t)t->nranks;
    rec.run_id = t->hs.run_id;
    rec.ctime_ns = realtime_ns();
    rec.dtype = (int32_t)d->dtype;
    rec.flags = t->attr.local_only ? DDOFI_HS_FLAG_LOCAL_ONLY : 0; /* sockets on 127.0.0.1 */
    if (d->ragged)
        rec.flags |= DDOFI_HS_FLAG_RAGGED;
    rec.pidns = t->hs.mypidns;
    rec.itemsize = d->itemsize;
    rec.disp = d->itemsize ? d->row_bytes / d->itemsize : 0;
    rec.row_bytes = d->row_bytes;
    rec.total_rows = (uint64_t)d->offsets[t->nranks];
    snprintf(rec.name, sizeof rec.name, "%s", d->name);
    snprintf(rec.exchange_ns, sizeof rec.exchange_ns, "%s", t->hs.ns);
    snprintf(rec.provider, sizeof rec.provider, "%s", t->prov);
    snprintf(rec.domain, sizeof rec.domain, "%.*s", DDOFI_HS_DOMAIN_MAX, t->domain);
    for (int i = 0; i < t->nranks; i++) {
        ddofi_hs_rank_t *r = &rec.ranks[i];
        r->rows = d->offsets[i + 1] - d->offsets[i];
        r->base = g->remotes[i].base;
        r->key = g->remotes[i].key;
        r->bytes = d->ragged /* == the registered size */
                       ? dds_ragged_index_bytes(r->rows) +
                             (uint64_t)(d->elem_offsets[i + 1] - d->elem_offsets[i]) *
                                 d->row_bytes
                       : (uint64_t)r->rows * d->row_bytes;
        r->pid = t->hs.pids[i];
        r->start_ticks = t->hs.ticks[i];
        snprintf(r->host, sizeof r->host, "%s", t->hs.hosts + (size_t)i * HOST_MAX);
        memcpy(r->mr_blob, mr_blobs + (size_t)i * DDOFI_MR_BLOB_SIZE, DDOFI_HS_MR_BLOB);
        r->addr_len = addr_blob_len(ddofi_tr_addr(t, i), t->addr_stride);
        memcpy(r->addr, ddofi_tr_addr(t, i), r->addr_len);
    }
    rc = ddofi_hs_write(t->hs.dir, &rec);
    if (rc == 0) {
        g->published = 1;
        DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_OFI,
                "variable '%s': record published in %s (%lld rows on %d ranks)", g->name,
                t->hs.dir, (long long)rec.total_rows, t->nranks);
    } else {
        char saved[768];
        snprintf(saved, sizeof saved, "%s", dds_last_error());
        rc = dds_error(rc, "variable '%s': publishing its method-2 record: %s", g->name,
                       saved);
    }
    ddofi_hs_record_clear(&rec);
    return rc;
}

void ddofi_hs_unpublish(ddofi_tr_t *t, ddofi_tr_region_t *g)
{
    ddofi_hs_record_t rec;
    int rc;
    if (!t->hs.on || t->hs.n_core > 0 || !g->published || getpid() != t->pid)
        return;
    g->published = 0;
    /* Only our own record goes: a record of another run under this name
     * and namespace (a second core job that replaced ours) stays. */
    rc = ddofi_hs_read_ns(t->hs.dir, t->hs.ns, g->name, &rec);
    if (rc == -DDS_ENOENT)
        return;
    if (rc == 0 && rec.run_id != t->hs.run_id) {
        DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_OFI,
                "variable '%s': its record in %s now belongs to core run %016llx (this "
                "run is %016llx): another core job publishes '%s' in namespace '%s'; "
                "its record is left in place",
                g->name, t->hs.dir, (unsigned long long)rec.run_id,
                (unsigned long long)t->hs.run_id, g->name, t->hs.ns);
        ddofi_hs_record_clear(&rec);
        return;
    }
    if (rc == 0)
        ddofi_hs_record_clear(&rec);
    else
        dds_error_clear();
    if (ddofi_hs_remove_ns(t->hs.dir, t->hs.ns, g->name) != 0)
        DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_OFI, "variable '%s': removing its record: %s",
                g->name, dds_last_error());
}

/* ---------------- reader job ---------------- */

/* 0: usable; 1: stale (`why` says why; keep waiting for a fresh record);
 * < 0: an error to report now. */
static int hs_check(ddofi_tr_t *t, const char *path, const ddofi_hs_record_t *rec, char *why,
                    size_t cap)
{
    const double age = (double)(realtime_ns() - rec->ctime_ns) * 1e-9;
    if (t->hs.ns[0] && strcmp(rec->exchange_ns, t->hs.ns) != 0) {
        snprintf(why, cap,
                 "%s was written by run namespace '%s' (core run %016llx, %.0f s ago); this "
                 "reader expects namespace '%s' (exchange_ns / DDSTORE_EXCHANGE_NS)",
                 path, rec->exchange_ns, (unsigned long long)rec->run_id, age, t->hs.ns);
        return 1;
    }
    /* pids mean something only on this host, in this pid namespace */
    const int same_ns = rec->pidns == 0 || rec->pidns == t->hs.mypidns;
    for (uint32_t i = 0; same_ns && i < rec->nranks; i++) {
        const ddofi_hs_rank_t *r = &rec->ranks[i];
        if (strcmp(r->host, t->hs.myhost) != 0)
            continue;
        if (ddofi_hs_process_alive(r->pid, r->start_ticks) == 0) {
            snprintf(why, cap,
                     "%s is stale: it was written %.0f s ago by core run %016llx, whose rank "
                     "%u (pid %d on %s) has exited",
                     path, age, (unsigned long long)rec->run_id, i, (int)r->pid, r->host);
            return 1;
        }
    }
    if (__atomic_load_n(&t->ready, __ATOMIC_ACQUIRE) && rec->run_id != t->hs.run_id) {
        snprintf(why, cap,
                 "%s belongs to core run %016llx, but this store reads core run %016llx "
                 "(variables joined before); one store reads one core job",
                 path, (unsigned long long)rec->run_id, (unsigned long long)t->hs.run_id);
        return 1;
    }
    if ((int64_t)rec->nranks != (int64_t)t->hs.n_core)
        return dds_error(-DDS_EINVAL,
                         "join('%s'): the core job that published it has %u ranks, but this "
                         "reader was created with n_core=%d (record %s)",
                         rec->name, rec->nranks, t->hs.n_core, path);
    return 0;
}

/* What ddofi_hs_scan found besides the reader's own record file. */
typedef struct hs_scan_state {
    ddofi_tr_t *t;
    char why[6000];   /* the last unusable one, and why */
    char nss[1024];   /* the namespaces of the usable ones ("'a', 'b'") */
    char ns[DDOFI_HS_NS_MAX + 1]; /* the usable one's, when one */
    char path[4200];
    int usable;
} hs_scan_state_t;

static int hs_scan_one(void *arg, const char *path, int rc, const ddofi_hs_record_t *rec)
{
    hs_scan_state_t *st = arg;
    ddofi_tr_t *t = st->t;
    char why[6000];
    if (rc != 0) {
        snprintf(st->why, sizeof st->why, "%s", dds_last_error());
        dds_error_clear();
        return 0;
    }
    if (strcmp(rec->exchange_ns, t->hs.ns) == 0)
        return 0; /* the reader's own file: read directly */
    if (t->hs.ns[0]) {
        /* a reader with a namespace never joins another's: say so */
        const double age = (double)(realtime_ns() - rec->ctime_ns) * 1e-9;
        snprintf(st->why, sizeof st->why,
                 "%s was written by run namespace '%s' (core run %016llx, %.0f s ago); this "
                 "reader expects namespace '%s' (exchange_ns / DDSTORE_EXCHANGE_NS)",
                 path, rec->exchange_ns, (unsigned long long)rec->run_id, age, t->hs.ns);
        return 0;
    }
    /* a reader without a namespace accepts any one, if only one is usable */
    int c = hs_check(t, path, rec, why, sizeof why);
    if (c < 0)
        return c;
    if (c > 0) {
        memcpy(st->why, why, sizeof st->why);
        return 0;
    }
    size_t len = strlen(st->nss);
    snprintf(st->nss + len, sizeof st->nss - len, "%s'%s'", st->usable ? ", " : "",
             rec->exchange_ns);
    snprintf(st->ns, sizeof st->ns, "%s", rec->exchange_ns);
    snprintf(st->path, sizeof st->path, "%s", path);
    st->usable++;
    return 0;
}

/* Wait for a usable record of `name` (DDSTORE_HANDSHAKE_TIMEOUT_S); `path`
 * is its file, for the messages (updated when a reader without a namespace
 * takes the record of another namespace). */
static int hs_wait(ddofi_tr_t *t, const char *name, char *path, size_t path_cap,
                   ddofi_hs_record_t *rec)
{
    char why[6000], stale[6000] = "";
    const double deadline = now_s() + t->hs.join_timeout_s;
    double nap = 0.01;
    int code = -DDS_ETIMEDOUT;
    int rc;
    for (;;) {
        rc = ddofi_hs_read_ns(t->hs.dir, t->hs.ns, name, rec);
        if (rc == -DDS_ENOENT) {
            /* none in our namespace: records of the variable in others */
            hs_scan_state_t *st = calloc(1, sizeof *st);
            if (!st)
                return dds_error(-DDS_ENOMEM, "join('%s'): out of memory", name);
            st->t = t;
            rc = ddofi_hs_scan(t->hs.dir, name, hs_scan_one, st);
            if (rc >= 0 && st->usable > 1)
                rc = dds_error(-DDS_EINVAL,
                               "join('%s'): records of '%s' from several core runs in %s, "
                               "namespaces %s: set exchange_ns (or DDSTORE_EXCHANGE_NS) to "
                               "the core job's to choose one",
                               name, name, t->hs.dir, st->nss);
            else if (rc >= 0 && st->usable == 1) {
                rc = ddofi_hs_read_ns(t->hs.dir, st->ns, name, rec);
                if (rc == 0) {
                    snprintf(path, path_cap, "%s", st->path);
                    rc = hs_check(t, path, rec, why, sizeof why);
                    if (rc == 0) {
                        free(st);
                        return 0;
                    }
                    ddofi_hs_record_clear(rec);
                    if (rc > 0) {
                        code = -DDS_ESTALE;
                        memcpy(stale, why, sizeof stale);
                        rc = -DDS_ENOENT;
                    }
                } /* gone meanwhile (-DDS_ENOENT): wait; else: report */
            } else if (rc >= 0 && st->why[0]) {
                memcpy(stale, st->why, sizeof stale);
                rc = -DDS_ENOENT;
                code = -DDS_ESTALE;
            } else if (rc >= 0) {
                rc = -DDS_ENOENT;
            }
            free(st);
            if (rc != -DDS_ENOENT)
                return rc;
            if (code != -DDS_ESTALE)
                snprintf(why, sizeof why, "%s does not exist (is the core job running with "
                         "method=2 and this handshake_dir%s, and has it added '%s'?)", path,
                         t->hs.ns[0] ? " and namespace" : "", name);
            else
                memcpy(why, stale, sizeof why);
        } else if (rc == 0) {
            rc = hs_check(t, path, rec, why, sizeof why);
            if (rc == 0)
                return 0;
            ddofi_hs_record_clear(rec);
            if (rc < 0)
                return rc;
            code = -DDS_ESTALE;
            memcpy(stale, why, sizeof stale);
        } else {
            return rc; /* corrupted, foreign format, unreadable: no waiting fixes it */
        }
        const double now = now_s();
        if (now >= deadline)
            return dds_error(code,
                             "join('%s'): no usable record after %g s "
                             "(DDSTORE_HANDSHAKE_TIMEOUT_S): %s%s%s%s",
                             name, t->hs.join_timeout_s, why,
                             stale[0] && code != -DDS_ESTALE ? " (before that: " : "",
                             stale[0] && code != -DDS_ESTALE ? stale : "",
                             stale[0] && code != -DDS_ESTALE ? ")" : "");
        double left = deadline - now, s = nap < left ? nap : left;
        struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
        nanosleep(&ts, NULL);
        nap = nap * 2 < 0.25 ? nap * 2 : 0.25;
    }
}

/* First join: open the fabric the core job serves with, its ranks as peers. */
static int hs_attach_locked(ddofi_tr_t *t, const ddofi_hs_record_t *rec)
{
    const int n = (int)rec->nranks;
    int same_host = 1, rc;
    for (int i = 0; i < n; i++)
        same_host &= !strcmp(rec->ranks[i].host, t->hs.myhost);
    if (!same_host && (rec->flags & DDOFI_HS_FLAG_LOCAL_ONLY))
        return dds_error(-DDS_ECONFIG,
                         "join('%s'): the core job serves on 127.0.0.1 only (all its ranks "
                         "run on %s and no interface was named), but this reader runs on "
                         "%s: name an interface in the core job (FABRIC_IFACE) or set "
                         "DDSTORE_FABRIC_LOCAL_ONLY=0 there",
                         rec->name, rec->ranks[0].host, t->hs.myhost);
    if (!same_host && !strcmp(rec->provider, "shm"))
        return dds_error(-DDS_ECONFIG,
                         "join('%s'): the core job serves with provider shm (same host "
                         "only) on %s, but this reader runs on %s: set DDSTORE_FABRIC "
                         "(cxi, verbs, tcp ...) in the core job",
                         rec->name, rec->ranks[0].host, t->hs.myhost);

    ddofi_transport_params_t tp;
    memset(&tp, 0, sizeof tp);
    if (t->hs.nic_map[0]) {
        tp.field_mask |= DDOFI_TRANSPORT_FIELD_NIC_MAP;
        tp.nic_map = t->hs.nic_map;
    }
    ddofi_fabric_params_t fp;
    rc = ddofi_tr_read_settings(t, &tp, same_host, 0, &fp);
    if (rc)
        return rc;
    fp.field_mask &= ~(uint64_t)DDOFI_FABRIC_FIELD_LOCAL_RANK; /* the launcher's */
    fp.local_only = (rec->flags & DDOFI_HS_FLAG_LOCAL_ONLY) ? 1 : 0;
    const char *want = t->set.fabric;
    const int forced = want && want[0] && strcmp(want, "auto") != 0;
    if (!forced) {
        fp.field_mask |= DDOFI_FABRIC_FIELD_PROVIDER;
        fp.provider = rec->provider;
    }
    const int named = (fp.field_mask & (DDOFI_FABRIC_FIELD_IFACE | DDOFI_FABRIC_FIELD_NIC_MAP)) != 0;
    if (!named && rec->domain[0]) {
        fp.field_mask |= DDOFI_FABRIC_FIELD_IFACE;
        fp.iface = rec->domain;
    }
    rc = ddofi_tr_share_get(&fp, "method 2: opening the core job's fabric", &t->share);
    if (rc)
        return rc;
    t->fab = ddofi_tr_share_fabric(t->share);
    ddofi_fabric_query(t->fab, &t->attr);
    if (strcmp(t->attr.provider, rec->provider) != 0) {
        rc = dds_error(-DDS_ECONFIG,
                       "join('%s'): the core job serves with provider '%s', this reader's "
                       "DDSTORE_FABRIC=%s opened '%s': unset DDSTORE_FABRIC here or set the "
                       "same provider in both jobs",
                       rec->name, rec->provider, want, t->attr.provider);
        goto fail;
    }
    t->fparams = fp;
    t->fparams.provider = NULL; /* pointed into the record */
    t->fparams.iface = NULL;
    t->fparams.nic_map = t->hs.nic_map[0] ? t->hs.nic_map : NULL;
    snprintf(t->prov, sizeof t->prov, "%s", t->attr.provider);
    snprintf(t->domain, sizeof t->domain, "%s", t->attr.domain);
    t->need_local_mr = t->attr.mr_local;
    t->thp = t->set.thp;
    t->addr_stride = 1;
    for (int i = 0; i < n; i++)
        if (rec->ranks[i].addr_len > t->addr_stride)
            t->addr_stride = rec->ranks[i].addr_len;
    t->addrs = calloc((size_t)n, t->addr_stride);
    if (!t->addrs) {
        rc = dds_error(-DDS_ENOMEM, "method 2: out of memory");
        goto fail;
    }
    for (int i = 0; i < n; i++)
        memcpy((unsigned char *)ddofi_tr_addr(t, i), rec->ranks[i].addr,
               rec->ranks[i].addr_len);
    t->nranks = n;
    t->hs.run_id = rec->run_id;
    /* the default reader first: nobody sees `ready` before it exists */
    t->attacher = pthread_self();
    __atomic_store_n(&t->attaching, 1, __ATOMIC_RELEASE);
    rc = ddofi_tr_reader_new(t, DDS_READER_THREAD, 1, 1, &t->dflt);
    __atomic_store_n(&t->attaching, 0, __ATOMIC_RELEASE);
    if (rc)
        goto fail;
    __atomic_store_n(&t->ready, 1, __ATOMIC_RELEASE);
    DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_OFI,
            "method 2 reader: core run %016llx, %d ranks, provider %s, domain %s", 
            (unsigned long long)rec->run_id, n, t->attr.provider, t->attr.domain);
    return 0;
fail: {
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", dds_last_error());
    ddofi_tr_share_put(t->share);
    t->share = NULL;
    t->fab = NULL;
    memset(&t->attr, 0, sizeof t->attr);
    free(t->addrs);
    t->addrs = NULL;
    t->nranks = 0;
    dds_error(rc, "%s", saved);
    return rc;
}
}

/* The joined variable's region and layout. */
static int hs_region(ddofi_tr_t *t, const char *path, const ddofi_hs_record_t *rec,
                     dds_region_layout_t *lay, void **region_p)
{
    const int n = (int)rec->nranks;
    const int ragged = (rec->flags & DDOFI_HS_FLAG_RAGGED) != 0;
    ddofi_tr_region_t *g = calloc(1, sizeof *g);
    int64_t *off = malloc(((size_t)n + 1) * sizeof *off);
    int64_t *eoff = ragged ? malloc(((size_t)n + 1) * sizeof *eoff) : NULL;
    int rc = 0;
    if (!g || !off || (ragged && !eoff) ||
        !(g->remotes = calloc((size_t)n, sizeof *g->remotes))) {
        rc = dds_error(-DDS_ENOMEM, "join('%s'): out of memory", rec->name);
        goto fail;
    }
    snprintf(g->name, sizeof g->name, "%s", rec->name);
    g->joined = 1;
    off[0] = 0;
    if (eoff)
        eoff[0] = 0;
    for (int i = 0; i < n; i++) {
        const ddofi_hs_rank_t *r = &rec->ranks[i];
        int e = ddofi_remote_import(r->mr_blob, DDOFI_HS_MR_BLOB, &g->remotes[i]);
        if (e) {
            char what[5600];
            snprintf(what, sizeof what, "join('%s'): record %s: region of rank %d", rec->name,
                     path, i);
            rc = ddofi_transport_error(e, what);
            if (e == -DDOFI_EBLOB)
                rc = dds_error(-DDS_ECORRUPT, "%s", dds_last_error());
            goto fail;
        }
        if (g->remotes[i].size != r->bytes || g->remotes[i].key != r->key ||
            g->remotes[i].base != r->base) {
            rc = dds_error(-DDS_ECORRUPT,
                           "join('%s'): record %s: rank %d's region blob (base 0x%llx, key "
                           "0x%llx, %llu bytes) disagrees with its entry (base 0x%llx, key "
                           "0x%llx, %llu bytes)",
                           rec->name, path, i, (unsigned long long)g->remotes[i].base,
                           (unsigned long long)g->remotes[i].key,
                           (unsigned long long)g->remotes[i].size,
                           (unsigned long long)r->base, (unsigned long long)r->key,
                           (unsigned long long)r->bytes);
            goto fail;
        }
        off[i + 1] = off[i] + r->rows;
        if (eoff) /* the parser checked: a whole number of element rows */
            eoff[i + 1] = eoff[i] + (int64_t)((r->bytes - dds_ragged_index_bytes(r->rows)) /
                                              rec->row_bytes);
    }
    g->live_slot = -1;
    if ((rc = ddofi_tr_live_join(t, path, rec, g)) != 0)
        goto fail;
    lay->nowners = n;
    lay->offsets = off;
    lay->row_bytes = rec->row_bytes;
    lay->disp = rec->disp;
    lay->itemsize = rec->itemsize;
    lay->dtype = (dds_dtype_t)rec->dtype;
    lay->ragged = ragged;
    lay->elem_offsets = eoff;
    ddofi_tr_region_link(t, g);
    *region_p = g;
    return 0;
fail:
    free(off);
    free(eoff);
    if (g) {
        free(g->live);
        free(g->remotes);
    }
    free(g);
    return rc;
}

int ddofi_hs_region_join(void *ctx, const char *name, dds_region_layout_t *lay, void **region_p)
{
    ddofi_tr_t *t = ctx;
    ddofi_hs_record_t rec;
    char path[5200], fname[1024];
    int rc;
    if (!t->hs.on)
        return dds_error(-DDS_EINVAL, "join('%s'): only method-2 readers join variables of "
                         "another job; this store uses method 1", name);
    if (t->hs.n_core == 0)
        return dds_error(-DDS_EINVAL,
                         "join('%s'): this is a method-2 core store (n_core=0): it publishes "
                         "its variables; a reader job creates its store with n_core = the "
                         "core job's rank count", name);
    if (getpid() != t->pid)
        return dds_error(-DDS_EINVAL, "join('%s'): a store cannot join variables in a forked "
                         "process", name);
    if ((rc = ddofi_hs_record_file_name(t->hs.ns, name, fname, sizeof fname)))
        return rc;
    snprintf(path, sizeof path, "%s/%s", t->hs.dir, fname);
    memset(&rec, 0, sizeof rec);
    rc = hs_wait(t, name, path, sizeof path, &rec);
    if (rc)
        return rc;
    pthread_mutex_lock(&t->lock);
    if (!__atomic_load_n(&t->ready, __ATOMIC_ACQUIRE))
        rc = hs_attach_locked(t, &rec);
    else if (rec.run_id != t->hs.run_id)
        rc = dds_error(-DDS_ESTALE,
                       "join('%s'): %s belongs to core run %016llx, but this store reads "
                       "core run %016llx; one store reads one core job",
                       name, path, (unsigned long long)rec.run_id,
                       (unsigned long long)t->hs.run_id);
    pthread_mutex_unlock(&t->lock);
    if (!rc)
        rc = hs_region(t, path, &rec, lay, region_p);
    ddofi_hs_record_clear(&rec);
    return rc;
}
