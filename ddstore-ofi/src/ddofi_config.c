/* ddstore-ofi: value parsers, settings from the parameters (ddofi_param.c),
 * nic_map parsing and the fork settings. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ddofi_internal.h"

int ddofi_parse_size(const char *s, size_t *out)
{
    if (!s || !out)
        return -EINVAL;
    while (isspace((unsigned char)*s))
        s++;
    if (!isdigit((unsigned char)*s))
        return -EINVAL;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return -EINVAL;
    unsigned shift = 0;
    while (isspace((unsigned char)*end))
        end++;
    switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    case 'T': shift = 40; end++; break;
    default: return -EINVAL;
    }
    if (shift) {
        if (*end == 'i' || *end == 'I')
            end++;
        if (*end == 'b' || *end == 'B')
            end++;
    }
    while (isspace((unsigned char)*end))
        end++;
    if (*end != '\0')
        return -EINVAL;
    if (shift && v > (SIZE_MAX >> shift))
        return -EINVAL;
    if (v > SIZE_MAX)
        return -EINVAL;
    *out = (size_t)(v << shift);
    return 0;
}

int ddofi_parse_double(const char *s, double *out)
{
    if (!s || !out)
        return -EINVAL;
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (errno || end == s || isnan(v))
        return -EINVAL;
    while (isspace((unsigned char)*end))
        end++;
    if (*end != '\0')
        return -EINVAL;
    *out = v;
    return 0;
}

int ddofi_parse_bool(const char *s, int *out)
{
    if (!s || !out)
        return -EINVAL;
    static const char *t[] = {"1", "true", "yes", "on"};
    static const char *f[] = {"0", "false", "no", "off", ""};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcasecmp(s, t[i])) {
            *out = 1;
            return 0;
        }
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (!strcasecmp(s, f[i])) {
            *out = 0;
            return 0;
        }
    return -EINVAL;
}

/* Trimmed copy of [b, e) into out. */
static int copy_trim(const char *b, const char *e, char *out, size_t cap)
{
    while (b < e && isspace((unsigned char)*b))
        b++;
    while (e > b && isspace((unsigned char)e[-1]))
        e--;
    size_t n = (size_t)(e - b);
    if (n + 1 > cap)
        return -EINVAL;
    memcpy(out, b, n);
    out[n] = '\0';
    return 0;
}

int ddofi_nic_map_lookup(const char *map, int local_rank, char *out, size_t cap)
{
    if (!map || !out || cap == 0)
        return -EINVAL;
    char star[64] = "";
    char bare[64][64];
    size_t nbare = 0, nkeyed = 0;
    const char *p = map;
    while (*p) {
        const char *e = strchr(p, ',');
        if (!e)
            e = p + strlen(p);
        char entry[160];
        if (copy_trim(p, e, entry, sizeof entry))
            return ddofi_error(-EINVAL, "nic_map \"%s\": entry too long", map);
        if (entry[0]) {
            char *colon = strchr(entry, ':');
            if (colon) {
                char key[32], val[64];
                if (copy_trim(entry, colon, key, sizeof key) ||
                    copy_trim(colon + 1, entry + strlen(entry), val, sizeof val) ||
                    !key[0] || !val[0])
                    return ddofi_error(-EINVAL,
                                       "nic_map \"%s\": bad entry \"%s\" "
                                       "(expected LOCALRANK:DOMAIN)", map, entry);
                nkeyed++;
                if (!strcmp(key, "*")) {
                    snprintf(star, sizeof star, "%s", val);
                } else {
                    char *end = NULL;
                    errno = 0;
                    long r = strtol(key, &end, 10);
                    if (errno || *end || r < 0)
                        return ddofi_error(-EINVAL,
                                           "nic_map \"%s\": bad local rank \"%s\"",
                                           map, key);
                    if (r == local_rank) {
                        if (strlen(val) + 1 > cap)
                            return -EINVAL;
                        strcpy(out, val);
                        return 0;
                    }
                }
            } else {
                if (nbare == 64 || strlen(entry) >= 64)
                    return ddofi_error(-EINVAL, "nic_map \"%s\": too many or too long entries", map);
                strcpy(bare[nbare++], entry);
            }
        }
        p = *e ? e + 1 : e;
    }
    if (nkeyed && nbare)
        return ddofi_error(-EINVAL,
                           "nic_map \"%s\": mixes LOCALRANK:DOMAIN entries and bare names", map);
    if (star[0]) {
        if (strlen(star) + 1 > cap)
            return -EINVAL;
        strcpy(out, star);
        return 0;
    }
    if (nbare) {
        const char *v = bare[(size_t)(local_rank < 0 ? 0 : local_rank) % nbare];
        if (strlen(v) + 1 > cap)
            return -EINVAL;
        strcpy(out, v);
        return 0;
    }
    if (!nkeyed)
        return ddofi_error(-EINVAL, "nic_map is empty");
    return -ENOENT;
}

/* The launchers' node-local rank, the first set of: Slurm, Open MPI, MPICH
 * (Hydra), PMI, Cray PALS, MVAPICH2, torchrun.  The same list, in the same
 * order, as pyddstore.torch.env.local_rank (test_env_registry.py checks). */
int ddofi_env_local_rank(void)
{
    static const char *vars[] = {"SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK",
                                 "MPI_LOCALRANKID", "PMI_LOCAL_RANK",
                                 "PALS_LOCAL_RANKID", "MV2_COMM_WORLD_LOCAL_RANK",
                                 "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) {
            char *end = NULL;
            long r = strtol(v, &end, 10);
            if (!*end && r >= 0 && r < 1 << 20)
                return (int)r;
        }
    }
    return 0;
}

/* A parameter's value into a settings field; the error names the variable. */
#define GET(kind, name, out)                                                   \
    do {                                                                       \
        int rc_ = ddofi_param_get_##kind((name), (out));                       \
        if (rc_)                                                               \
            return rc_;                                                        \
    } while (0)

int ddofi_settings_resolve(const ddofi_fabric_params_t *p, ddofi_settings_t *s)
{
    static const ddofi_fabric_params_t none = {0};
    if (!p)
        p = &none;
    uint64_t m = p->field_mask;
    memset(s, 0, sizeof *s);

    /* provider */
    const char *prov = NULL;
    if (m & DDOFI_FABRIC_FIELD_PROVIDER)
        prov = p->provider;
    else
        GET(string, "PROVIDER", &prov);
    if (!prov || !*prov)
        prov = "auto";
    if (strlen(prov) >= sizeof s->provider)
        return ddofi_error(-DDOFI_ECONFIG, "provider \"%s\": too long", prov);
    for (size_t i = 0; prov[i]; i++)
        s->provider[i] = (char)tolower((unsigned char)prov[i]);
    /* trim */
    char tmp[64];
    if (copy_trim(s->provider, s->provider + strlen(s->provider), tmp, sizeof tmp) == 0)
        strcpy(s->provider, tmp);
    if (!s->provider[0])
        strcpy(s->provider, "auto");

    /* local rank */
    s->local_rank = (m & DDOFI_FABRIC_FIELD_LOCAL_RANK) && p->local_rank >= 0
                        ? p->local_rank : ddofi_env_local_rank();

    /* interface: iface param > nic_map param > IFACE > NIC_MAP */
    const char *iface = (m & DDOFI_FABRIC_FIELD_IFACE) ? p->iface : NULL;
    const char *map = (m & DDOFI_FABRIC_FIELD_NIC_MAP) ? p->nic_map : NULL;
    char iface_src[48] = "iface parameter";
    char map_src[48] = "nic_map parameter";
    if ((m & DDOFI_FABRIC_FIELD_IFACE_SOURCE) && p->iface_source && *p->iface_source) {
        snprintf(iface_src, sizeof iface_src, "%s", p->iface_source);
        snprintf(map_src, sizeof map_src, "%s", p->iface_source);
    }
    if (!(iface && *iface) && !(map && *map)) {
        GET(string, "IFACE", &iface);
        if (ddofi_param_env_name("IFACE", iface_src, sizeof iface_src))
            snprintf(iface_src, sizeof iface_src, "IFACE");
        if (!(iface && *iface)) {
            GET(string, "NIC_MAP", &map);
            if (ddofi_param_env_name("NIC_MAP", map_src, sizeof map_src))
                snprintf(map_src, sizeof map_src, "NIC_MAP");
        }
    }
    if (iface && *iface) {
        if (strlen(iface) >= sizeof s->iface)
            return ddofi_error(-DDOFI_ECONFIG, "%s=\"%s\": too long", iface_src, iface);
        strcpy(s->iface, iface);
        snprintf(s->iface_source, sizeof s->iface_source, "%s", iface_src);
    } else if (map && *map) {
        int rc = ddofi_nic_map_lookup(map, s->local_rank, s->iface, sizeof s->iface);
        if (rc == -ENOENT)
            return ddofi_error(-DDOFI_ECONFIG,
                               "%s=\"%s\" has no entry for local rank %d "
                               "(add \"%d:DOMAIN\" or \"*:DOMAIN\")",
                               map_src, map, s->local_rank, s->local_rank);
        if (rc) {
            char detail[512];
            snprintf(detail, sizeof detail, "%s", ddofi_last_error());
            return ddofi_error(-DDOFI_ECONFIG, "%s: %s", map_src, detail);
        }
        snprintf(s->iface_source, sizeof s->iface_source, "%s", map_src);
    }

    s->single_node = (m & DDOFI_FABRIC_FIELD_SINGLE_NODE) ? (p->single_node != 0) : 0;
    s->hmem = DDOFI_FABRIC_HMEM_OFF;
    if (m & DDOFI_FABRIC_FIELD_HMEM) {
        if (p->hmem < DDOFI_FABRIC_HMEM_OFF || p->hmem > DDOFI_FABRIC_HMEM_PREFER)
            return ddofi_error(-DDOFI_ECONFIG, "hmem=%d: expected DDOFI_FABRIC_HMEM_*", p->hmem);
        s->hmem = p->hmem;
    }

    if (m & DDOFI_FABRIC_FIELD_LOCAL_ONLY) {
        s->local_only = p->local_only != 0;
    } else {
        int lo = 0; /* auto | 0 | 1 */
        GET(enum, "LOCAL_ONLY", &lo);
        s->local_only = lo == 0 ? s->single_node && !s->iface[0] : lo == 2;
    }

    if (m & DDOFI_FABRIC_FIELD_MAX_READ_BYTES)
        s->max_read_bytes = p->max_read_bytes;
    else
        GET(size, "MAX_READ_BYTES", &s->max_read_bytes);

    if (m & DDOFI_FABRIC_FIELD_READ_TIMEOUT)
        s->read_timeout_s = p->read_timeout_s;
    else
        GET(double, "READ_TIMEOUT_S", &s->read_timeout_s);
    if (!(s->read_timeout_s == s->read_timeout_s))
        return ddofi_error(-DDOFI_ECONFIG, "read timeout is NaN");

    s->progress = DDOFI_PROGRESS_AUTO;
    if (m & DDOFI_FABRIC_FIELD_PROGRESS) {
        if (p->progress < DDOFI_PROGRESS_AUTO || p->progress > DDOFI_PROGRESS_NONE)
            return ddofi_error(-DDOFI_ECONFIG, "progress=%d: expected DDOFI_PROGRESS_*",
                               (int)p->progress);
        s->progress = p->progress;
    } else {
        int pr = 0; /* auto | thread | none, in ddofi_progress_t's order */
        GET(enum, "PROGRESS", &pr);
        s->progress = (ddofi_progress_t)pr;
    }

    if (m & DDOFI_FABRIC_FIELD_MAX_OUTSTANDING)
        s->max_outstanding = p->max_outstanding;
    else
        GET(size, "MAX_OUTSTANDING", &s->max_outstanding);
    return 0;
}

/* Set by ddofi_fabric.c the first time fi_getinfo runs (defined here, where
 * it is read, so that this file calls nothing of ddofi_fabric.c, which calls
 * it). */
_Atomic int ddofi_libfabric_started;

int ddofi_env_prepare(int fork_workers)
{
    if (fork_workers < 0)
        GET(bool, "FORK_WORKERS", &fork_workers);
    int changed = 0;
    /* Keep an explicit user value, including an empty one. */
    if (!getenv("FI_CXI_DISABLE_HOST_REGISTER")) {
        setenv("FI_CXI_DISABLE_HOST_REGISTER", "1", 0);
        changed = 1;
    }
    if (fork_workers) {
        const char *mon = getenv("FI_MR_CACHE_MONITOR");
        if (!mon || !*mon || !strcasecmp(mon, "kdreg2")) {
            if (mon && *mon)
                DDOFI_LOG(DDOFI_LOG_INFO,
                          "fork_workers: FI_MR_CACHE_MONITOR=%s does not work "
                          "in forked processes; using memhooks", mon);
            setenv("FI_MR_CACHE_MONITOR", "memhooks", 1);
            changed = 1;
        }
    }
    if (changed && atomic_load(&ddofi_libfabric_started)) {
        DDOFI_LOG(DDOFI_LOG_WARN,
                  "ddofi_env_prepare changed FI_* settings after libfabric started in this "
                  "process: FI_MR_CACHE_MONITOR / FI_CXI_DISABLE_HOST_REGISTER may not take "
                  "effect (set them before the first fabric is opened)");
        return 1;
    }
    return 0;
}
