/* ddstore-ofi: provider and domain selection, fabric/domain lifetime. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddofi_internal.h"

extern _Atomic int ddofi_libfabric_started; /* ddofi_config.c */
_Atomic int ddofi_test_mr_local;

static int getinfo(const char *node, uint64_t flags, struct fi_info *hints,
                   struct fi_info **list_p)
{
    atomic_store(&ddofi_libfabric_started, 1);
    return fi_getinfo(DDOFI_FI_VERSION, node, NULL, flags, hints, list_p);
}

#define NEEDED_CAPS (FI_RMA | FI_READ | FI_REMOTE_READ)
#define MR_MODES_SUPPORTED                                                     \
    (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |          \
     FI_MR_ENDPOINT | FI_MR_HMEM)

static struct fi_info *make_hints(const char *prov, int hmem)
{
    struct fi_info *h = fi_allocinfo();
    if (!h)
        return NULL;
    h->ep_attr->type = FI_EP_RDM;
    h->caps = NEEDED_CAPS | (hmem ? FI_HMEM : 0);
    h->mode = FI_CONTEXT | FI_CONTEXT2;
    h->domain_attr->mr_mode = MR_MODES_SUPPORTED & ~(hmem ? 0 : FI_MR_HMEM);
    h->domain_attr->threading = FI_THREAD_SAFE;
    h->tx_attr->msg_order = FI_ORDER_NONE;
    h->rx_attr->msg_order = FI_ORDER_NONE;
    if (prov) {
        h->fabric_attr->prov_name = strdup(prov);
        if (!h->fabric_attr->prov_name) {
            fi_freeinfo(h);
            return NULL;
        }
    }
    return h;
}

/* Can we use this entry at all? */
static int usable(const struct fi_info *fi, int hmem)
{
    if (!fi->ep_attr || fi->ep_attr->type != FI_EP_RDM)
        return 0;
    if ((fi->caps & NEEDED_CAPS) != NEEDED_CAPS)
        return 0;
    if (hmem && !(fi->caps & FI_HMEM))
        return 0;
    if (fi->domain_attr->mr_mode & FI_MR_RAW)
        return 0; /* keys wider than 64 bits: not supported */
    if (fi->domain_attr->mr_key_size > 8)
        return 0;
    uint64_t modes_ok = FI_CONTEXT | FI_CONTEXT2 | FI_LOCAL_MR | FI_RX_CQ_DATA |
                        FI_MSG_PREFIX | FI_ASYNC_IOV | FI_BUFFERED_RECV |
                        FI_NOTIFY_FLAGS_ONLY | FI_RESTRICTED_COMP;
    if (fi->mode & ~modes_ok)
        return 0;
    return 1;
}

static int name_is(const char *a, const char *b) { return a && b && !strcmp(a, b); }

/* Pick an entry of `list` for provider `prov` and the interface rules. */
static struct fi_info *pick(struct fi_info *list, const char *prov, int exact_prov,
                            const char *iface, const char *iface_prefix, int hmem)
{
    struct fi_info *best = NULL;
    for (struct fi_info *fi = list; fi; fi = fi->next) {
        if (!usable(fi, hmem))
            continue;
        if (exact_prov && !name_is(fi->fabric_attr->prov_name, prov))
            continue;
        const char *dom = fi->domain_attr->name ? fi->domain_attr->name : "";
        if (iface && iface[0] && strcmp(dom, iface))
            continue;
        if (iface_prefix && strncmp(dom, iface_prefix, strlen(iface_prefix)))
            continue;
        if (!best)
            best = fi;
        /* Prefer IPv4 over IPv6 (link-local v6 addresses do not route). */
        if (best->addr_format == FI_SOCKADDR_IN6 && fi->addr_format != FI_SOCKADDR_IN6 &&
            name_is(best->domain_attr->name, fi->domain_attr->name)) {
            best = fi;
        }
        if (best->addr_format != FI_SOCKADDR_IN6)
            break;
    }
    return best;
}

/* Append "prov [dom, dom]; ..." of usable entries to buf. */
static void list_found(char *buf, size_t cap, int hmem)
{
    buf[0] = '\0';
    struct fi_info *hints = make_hints(NULL, hmem), *list = NULL, *nohints = NULL;
    if (hints) {
        if (getinfo(NULL, 0, hints, &list))
            list = NULL;
        fi_freeinfo(hints);
    }
    if (getinfo(NULL, 0, NULL, &nohints))
        nohints = NULL;
    struct fi_info *lists[2] = {list, nohints};
    char seen[64][96];
    size_t nseen = 0;
    for (int l = 0; l < 2; l++) {
        for (struct fi_info *fi = lists[l]; fi; fi = fi->next) {
            if (!usable(fi, hmem))
                continue;
            char key[96];
            snprintf(key, sizeof key, "%s [%s]", fi->fabric_attr->prov_name,
                     fi->domain_attr->name ? fi->domain_attr->name : "?");
            int dup = 0;
            for (size_t i = 0; i < nseen; i++)
                if (!strcmp(seen[i], key))
                    dup = 1;
            if (dup || nseen == 64)
                continue;
            strcpy(seen[nseen++], key);
        }
    }
    size_t n = 0;
    for (size_t i = 0; i < nseen && n + 1 < cap; i++) {
        int w = snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", seen[i]);
        if (w < 0)
            break;
        n += (size_t)w;
    }
    if (!nseen)
        snprintf(buf, cap, "none (no provider offers FI_EP_RDM with FI_RMA|FI_READ%s)",
                 hmem ? "|FI_HMEM" : "");
    if (list)
        fi_freeinfo(list);
    if (nohints)
        fi_freeinfo(nohints);
}

/* Try one provider.  Returns 0 with *info_p (a dup), -DDOFI_ENOPROV when
 * nothing fits, or another error. */
static int try_provider(const ddofi_settings_t *s, const char *prov,
                        const char *iface_prefix, struct fi_info **info_p)
{
    const ddofi_quirk_t *q = ddofi_quirk_lookup(prov);
    struct fi_info *list = NULL, *hints = NULL;
    int rc;
    int exact = 0;
    const char *node = NULL;
    uint64_t flags = 0;

    if (q->flags & DDOFI_Q_NO_HINTS) {
        rc = getinfo(NULL, 0, NULL, &list);
        exact = 1;
    } else {
        hints = make_hints(prov, s->hmem);
        if (!hints)
            return ddofi_error(-ENOMEM, "fi_allocinfo failed");
        if (s->local_only && (q->flags & DDOFI_Q_SOCKETS)) {
            node = "127.0.0.1";
            flags = FI_SOURCE;
        }
        rc = getinfo(node, flags, hints, &list);
        fi_freeinfo(hints);
    }
    if (rc == -FI_ENODATA || rc == -FI_ENOENT || (rc == 0 && !list))
        return -DDOFI_ENOPROV;
    if (rc)
        return ddofi_error_fi(rc, "fi_getinfo(%s)", prov);

    const char *iface = s->iface[0] ? s->iface : NULL;
    /* An interface named explicitly wins over an alias's prefix (hsn). */
    struct fi_info *fi = pick(list, prov, exact, iface, iface ? NULL : iface_prefix, s->hmem);
    if (!fi) {
        fi_freeinfo(list);
        return -DDOFI_ENOPROV;
    }
    struct fi_info *dup = fi_dupinfo(fi);
    fi_freeinfo(list);
    if (!dup)
        return ddofi_error(-ENOMEM, "fi_dupinfo failed");
    *info_p = dup;
    return 0;
}

int ddofi_fabric_open(const ddofi_fabric_params_t *params, ddofi_fabric_t **fabric_p)
{
    if (!fabric_p)
        return ddofi_error(-EINVAL, "ddofi_fabric_open: fabric_p is NULL");
    *fabric_p = NULL;
    ddofi_error_clear();

    ddofi_settings_t s;
    int rc = ddofi_settings_resolve(params, &s);
    if (rc)
        return rc;

    ddofi_fabric_t *f = calloc(1, sizeof *f);
    if (!f)
        return ddofi_error(-ENOMEM, "out of memory");
    f->pid = getpid();
    f->set = s;
    pthread_mutex_init(&f->zlock, NULL);

    /* Candidate providers. */
    const char *auto_list[] = {"cxi", "verbs", "efa", "shm", "tcp"};
    const char *one[1] = {s.provider};
    const char **cands = one;
    size_t ncands = 1;
    int is_auto = !strcmp(s.provider, "auto");
    if (is_auto) {
        cands = auto_list;
        ncands = sizeof auto_list / sizeof auto_list[0];
    }
    struct fi_info *info = NULL;
    char tried[256] = "";
    char shm_note[400] = "";
    char pvar[64]; /* what to call the provider setting in messages */
    ddofi_param_label("PROVIDER", pvar, sizeof pvar);
    size_t tn = 0;
    for (size_t i = 0; i < ncands && !info; i++) {
        char prov[64];
        const char *prefix = NULL;
        if (ddofi_provider_alias(cands[i], prov, sizeof prov, &prefix)) {
            rc = ddofi_error(-DDOFI_ECONFIG, "%s is empty", pvar);
            goto fail;
        }
        const ddofi_quirk_t *q = ddofi_quirk_lookup(prov);
        if (is_auto && (q->flags & DDOFI_Q_SINGLE_NODE) && !s.single_node)
            continue;
        int w = snprintf(tried + tn, sizeof tried - tn, "%s%s", tn ? ", " : "", prov);
        if (w > 0 && (size_t)w < sizeof tried - tn)
            tn += (size_t)w;
        /* Regions of killed processes fill /dev/shm (and make shm's own
         * space check refuse): removed before shm is asked. */
        if (q->flags & DDOFI_Q_SINGLE_NODE)
            ddofi_shm_clean_stale();
        ddofi_settings_t si = s;
        int want = s.hmem == DDOFI_FABRIC_HMEM_REQUIRE ||
                   (s.hmem == DDOFI_FABRIC_HMEM_PREFER && (q->flags & DDOFI_Q_HMEM_PREFER));
        si.hmem = want;
        rc = try_provider(&si, prov, prefix, &info);
        if (rc == -DDOFI_ENOPROV && want && s.hmem == DDOFI_FABRIC_HMEM_PREFER) {
            si.hmem = 0;
            want = 0;
            rc = try_provider(&si, prov, prefix, &info);
        }
        if (rc && rc != -DDOFI_ENOPROV)
            goto fail;
        if (rc && (q->flags & DDOFI_Q_SINGLE_NODE) &&
            ddofi_shm_explain(shm_note, sizeof shm_note)) {
            if (!is_auto) {
                rc = ddofi_error(-ENOSPC, "%s=%s: %s", pvar, s.provider, shm_note);
                goto fail;
            }
            DDOFI_LOG(DDOFI_LOG_WARN, "%s=auto: shm skipped: %s", pvar, shm_note);
        }
        if (!rc)
            f->hmem_on = want;
        if (!rc && prefix && !s.iface[0])
            DDOFI_LOG(DDOFI_LOG_INFO, "%s: using %s on %s", cands[i], prov,
                      info->domain_attr->name);
    }
    if (!info) {
        char found[1024];
        list_found(found, sizeof found, s.hmem == DDOFI_FABRIC_HMEM_REQUIRE);
        char want[200];
        if (s.iface[0])
            snprintf(want, sizeof want, " with domain \"%s\" (from %s)", s.iface,
                     s.iface_source);
        else if (!strcmp(s.provider, "hsn"))
            snprintf(want, sizeof want, " on a Slingshot interface (domain hsn*)");
        else
            want[0] = '\0';
        rc = ddofi_error(-DDOFI_ENOPROV,
                         "%s=%s: no libfabric provider fits (tried %s%s%s%s%s%s); "
                         "found with FI_EP_RDM + fi_read: %s",
                         pvar, s.provider, tried, want,
                         s.hmem == DDOFI_FABRIC_HMEM_REQUIRE ? ", FI_HMEM required" : "",
                         (is_auto && !s.single_node) ? ", shm skipped: peers not all on this node" : "",
                         shm_note[0] ? "; shm: " : "", shm_note, found);
        goto fail;
    }

    /* Adjust the chosen entry. */
    f->quirk = ddofi_quirk_lookup(info->fabric_attr->prov_name);
    if (f->quirk->flags & DDOFI_Q_CLEAR_INJECT)
        info->tx_attr->op_flags &= ~(uint64_t)FI_INJECT;
    /* Entries queried without hints carry the provider's default threading;
     * we read from several threads and a progress thread. */
    info->domain_attr->threading = FI_THREAD_SAFE;
    /* A batch waits for all of its reads: no ordering needed.  (shm only
     * uses its single-copy CMA path for RMA when no RMA ordering is
     * requested.) */
    if (info->tx_attr)
        info->tx_attr->msg_order = FI_ORDER_NONE;
    if (info->rx_attr)
        info->rx_attr->msg_order = FI_ORDER_NONE;
    info->caps = NEEDED_CAPS | (info->caps & (FI_LOCAL_COMM | FI_REMOTE_COMM)) |
                 (f->hmem_on ? FI_HMEM : 0);
    if (info->tx_attr)
        info->tx_attr->caps &= info->caps | FI_RMA | FI_READ;
    if (info->rx_attr)
        info->rx_attr->caps &= info->caps | FI_RMA | FI_REMOTE_READ;
    f->mr_mode = info->domain_attr->mr_mode;
    if (info->mode & FI_LOCAL_MR)
        f->mr_mode |= FI_MR_LOCAL;
    if (atomic_load(&ddofi_test_mr_local)) /* test seam (ddofi_internal.h) */
        f->mr_mode |= FI_MR_LOCAL;
    f->info = info;

    snprintf(f->prov_name, sizeof f->prov_name, "%s", info->fabric_attr->prov_name);
    snprintf(f->fabric_name, sizeof f->fabric_name, "%s",
             info->fabric_attr->name ? info->fabric_attr->name : "");
    snprintf(f->domain_name, sizeof f->domain_name, "%s",
             info->domain_attr->name ? info->domain_attr->name : "");
    f->prov_tag = ddofi_prov_tag(f->prov_name);
    f->progress_thread = ddofi_quirk_needs_thread(
        f->quirk, info->domain_attr->data_progress == FI_PROGRESS_MANUAL, s.progress);
    size_t mms = info->ep_attr->max_msg_size ? info->ep_attr->max_msg_size : SIZE_MAX;
    f->max_read = mms;
    if (s.max_read_bytes && s.max_read_bytes < f->max_read)
        f->max_read = s.max_read_bytes;
    size_t txs = info->tx_attr ? info->tx_attr->size : 0;
    f->max_outstanding = s.max_outstanding ? s.max_outstanding : (txs ? txs : 256);
    atomic_store(&f->next_key, 1);

    rc = fi_fabric(info->fabric_attr, &f->fabric, NULL);
    if (rc) {
        rc = ddofi_error_fi(rc, "fi_fabric(%s)", f->prov_name);
        goto fail;
    }
    rc = fi_domain(f->fabric, info, &f->domain, NULL);
    if (rc) {
        rc = ddofi_error_fi(rc, "fi_domain(%s, %s)", f->prov_name, f->domain_name);
        goto fail;
    }
    DDOFI_LOG(DDOFI_LOG_INFO,
              "provider %s, domain %s, fabric %s, mr_mode 0x%llx, max read %zu, "
              "outstanding %zu, progress thread %s (quirks: %s)",
              f->prov_name, f->domain_name, f->fabric_name,
              (unsigned long long)f->mr_mode, f->max_read, f->max_outstanding,
              f->progress_thread ? "yes" : "no", f->quirk->name);
    *fabric_p = f;
    return 0;

fail:
    if (f->domain)
        fi_close(&f->domain->fid);
    if (f->fabric)
        fi_close(&f->fabric->fid);
    if (f->info)
        fi_freeinfo(f->info);
    else if (info)
        fi_freeinfo(info);
    pthread_mutex_destroy(&f->zlock);
    free(f);
    return rc;
}

int ddofi_fabric_close(ddofi_fabric_t *f)
{
    if (!f)
        return 0;
    if (f->pid != getpid()) {
        /* Inherited across fork: the provider objects belong to the parent
         * (closing them here could unlink the parent's shared memory). */
        for (ddofi_ep_t *z = f->zombies, *n; z; z = n) {
            n = z->znext;
            ddofi_ep_free_inherited(z);
        }
        fi_freeinfo(f->info);
        free(f);
        return 0;
    }
    long refs = atomic_load(&f->refs);
    if (refs)
        return ddofi_error(-EBUSY, "ddofi_fabric_close: %ld endpoint(s)/MR(s) still open",
                           refs);
    int rc = 0;
    pthread_mutex_lock(&f->zlock);
    ddofi_ep_t *z = f->zombies;
    f->zombies = NULL;
    pthread_mutex_unlock(&f->zlock);
    while (z) {
        ddofi_ep_t *n = z->znext;
        int r = ddofi_ep_destroy_now(z);
        if (r && !rc)
            rc = r;
        z = n;
    }
    if (f->domain) {
        int r = fi_close(&f->domain->fid);
        if (r)
            rc = ddofi_error_fi(r, "fi_close(domain)");
    }
    if (f->fabric) {
        int r = fi_close(&f->fabric->fid);
        if (r && !rc)
            rc = ddofi_error_fi(r, "fi_close(fabric)");
    }
    fi_freeinfo(f->info);
    pthread_mutex_destroy(&f->zlock);
    free(f);
    return rc;
}

int ddofi_fabric_query(const ddofi_fabric_t *f, ddofi_fabric_attr_t *a)
{
    if (!f || !a)
        return ddofi_error(-EINVAL, "ddofi_fabric_query: NULL argument");
    memset(a, 0, sizeof *a);
    a->provider = f->prov_name;
    a->fabric = f->fabric_name;
    a->domain = f->domain_name;
    a->quirks = f->quirk->name;
    a->mr_local = (f->mr_mode & FI_MR_LOCAL) != 0;
    a->mr_virt_addr = (f->mr_mode & FI_MR_VIRT_ADDR) != 0;
    a->mr_prov_key = (f->mr_mode & FI_MR_PROV_KEY) != 0;
    a->mr_endpoint = (f->mr_mode & FI_MR_ENDPOINT) != 0 ||
                     (f->quirk->flags & DDOFI_Q_MR_BIND) != 0;
    a->mr_hmem = (f->mr_mode & FI_MR_HMEM) != 0;
    a->hmem = (f->info->caps & FI_HMEM) != 0;
    a->progress_thread = f->progress_thread;
    a->max_msg_size = f->info->ep_attr->max_msg_size;
    a->max_read_bytes = f->max_read;
    a->max_outstanding = f->max_outstanding;
    a->tx_size = f->info->tx_attr ? f->info->tx_attr->size : 0;
    a->read_timeout_s = f->set.read_timeout_s;
    a->local_only = f->set.local_only && (f->quirk->flags & DDOFI_Q_SOCKETS) != 0;
    if (f->quirk->flags & DDOFI_Q_CMA) {
        int on = 1;
        if (ddofi_param_get_bool("CMA", &on))
            on = 0;
        a->direct_reads = on;
    }
    return 0;
}
