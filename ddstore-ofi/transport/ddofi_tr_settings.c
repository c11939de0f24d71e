/* ddstore-ofi adapter: its settings (core's registry), the library's
 * parameters mirrored as DDSTORE_OFI_<NAME>, the translation of the
 * library's errors and log lines into core's, and ddstore's settings into
 * the library's fabric parameters.  The bottom of the adapter: it calls no
 * other file of transport/. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddstore/comm_file.h"
#include "ddstore/config.h"
#include "ddstore/errors.h"
#include "ddstore/log.h"
#include "ddstore/ofi.h"
#include "ddstore/ofi_transport.h"
#include "ddstore/settings.h"
#include "ddofi_tr_internal.h"

static const dds_config_entry_t ddofi_tr_config_table[] = {
    DDS_SETTINGS_TABLE(DDOFI_TR_SETTINGS)};

static DDS_SETTINGS_READER(read_tr_settings, ddofi_tr_settings_t, DDOFI_TR_SETTINGS)

/* each setting's variable, by field: tr_name_<field> (for messages) */
#define TR_NAME_(f, name, type, def, choices, owner, help) \
    static const char tr_name_##f[] __attribute__((unused)) = name;
DDOFI_TR_SETTINGS(TR_NAME_)
#undef TR_NAME_

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
    case DDOFI_PARAM_SIZE: return DDS_CONFIG_SIZE; /* a count >= 0, as the library parses it */
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
    /* ofi_rxm (tcp, verbs) posts FI_OFI_RXM_MSG_RX_SIZE receive buffers of
     * 16 KiB on each endpoint's shared receive queue, 4096 by default: 64
     * MiB an endpoint, for messages that reads never send.  Read by the
     * provider when libfabric starts; the user's value wins. */
    /* at most libfabric's own default: 16 KiB each on every endpoint, so
     * 16,384 of them already cost 256 MiB an endpoint (OOM-killed in a 3 GiB
     * cgroup), and ofi_rxm refuses more than 65,536 with a message that
     * names no setting */
    if (given->rx_buffers < 0 || given->rx_buffers > 4096)
        return dds_error(-DDS_ECONFIG, "DDSTORE_OFI_RX_BUFFERS=%lld: must be 0 "
                         "(libfabric's default) to 4096 (receive buffers of 16 KiB on "
                         "every endpoint: 4096 is 64 MiB an endpoint)",
                         (long long)given->rx_buffers);
    if (given->rx_buffers > 0 && !getenv("FI_OFI_RXM_MSG_RX_SIZE")) {
        char v[32];
        snprintf(v, sizeof v, "%lld", (long long)given->rx_buffers);
        setenv("FI_OFI_RXM_MSG_RX_SIZE", v, 0);
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
    /* messages name what the user set: the argument or the variable */
    p->field_mask |= DDOFI_FABRIC_FIELD_IFACE_SOURCE;
    if (tp && (tp->field_mask & DDOFI_TRANSPORT_FIELD_NIC_MAP) && tp->nic_map &&
        tp->nic_map[0]) {
        p->field_mask |= DDOFI_FABRIC_FIELD_NIC_MAP;
        p->nic_map = tp->nic_map;
        p->iface_source = "nic_map argument";
        named_iface = 1;
    }
    if (!named_iface && set->iface && *set->iface) {
        p->field_mask |= DDOFI_FABRIC_FIELD_IFACE;
        p->iface = set->iface;
        p->iface_source = tr_name_iface;
        named_iface = 1;
    } else if (!named_iface && set->nic_map && *set->nic_map) {
        p->field_mask |= DDOFI_FABRIC_FIELD_NIC_MAP;
        p->nic_map = set->nic_map;
        p->iface_source = tr_name_nic_map;
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

void ddofi_tr_log_init(void) { pthread_once(&g_log_once, log_once); }
