/* ddstore-ofi: the parameter registry.  Every setting the library reads from
 * the environment is declared once here (libfabric's FI_<PROV>_<NAME>
 * style): the variable is <prefix><name>, the prefix "DDOFI_" unless the host
 * sets its own (ddofi_param_set_prefix).  Values are parsed by the getters
 * below and a bad value is -DDOFI_ECONFIG naming the variable. */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ddofi_internal.h"

static const ddofi_param_t params[] = {
    {"PROVIDER", DDOFI_PARAM_STRING, "auto", NULL,
     "libfabric provider: auto, cxi, verbs, efa, shm, tcp, hsn (tcp;ofi_rxm on a "
     "Slingshot interface) or any provider string (ddofi_fabric_params_t.provider)"},
    {"IFACE", DDOFI_PARAM_STRING, NULL, NULL,
     "libfabric domain (interface) to use, e.g. cxi0, hsn0, mlx5_0, eth0, lo; wins over "
     "NIC_MAP"},
    {"NIC_MAP", DDOFI_PARAM_STRING, NULL, NULL,
     "local rank -> domain: \"0:cxi0,1:cxi1\" (\"*:dom\" for the rest) or a list of "
     "names used round-robin"},
    {"LOCAL_ONLY", DDOFI_PARAM_ENUM, "auto", "auto|0|1",
     "socket providers use 127.0.0.1 only; auto: when single_node is set and no "
     "interface is named"},
    {"MAX_READ_BYTES", DDOFI_PARAM_SIZE, "0", NULL,
     "split reads above this many bytes (0 = the endpoint's max_msg_size only; K/M/G "
     "suffixes)"},
    {"READ_TIMEOUT_S", DDOFI_PARAM_DOUBLE, "120", NULL,
     "seconds before a read that has not completed fails with -ETIMEDOUT (<= 0: no "
     "limit)"},
    {"PROGRESS", DDOFI_PARAM_ENUM, "auto", "auto|thread|none",
     "target-side progress thread: auto (where the provider needs one), thread "
     "(always), none"},
    {"PROGRESS_WAIT", DDOFI_PARAM_ENUM, "auto", "auto|fd|backoff|bell",
     "how the progress thread sleeps: wait fd (tcp), backoff sleep (net, udp), or bell "
     "(shm: backoff, and when idle it sleeps until a reader rings its shared-memory "
     "bell); auto = the provider's quirk entry"},
    {"PARK_MS", DDOFI_PARAM_SIZE, "50", NULL,
     "bell wait (shm): an idle progress thread sleeps until a reader rings, or at most "
     "this many milliseconds (what a reader that cannot ring waits); 0 = never sleeps "
     "longer than its backoff"},
    {"BACKOFF_MAX_US", DDOFI_PARAM_SIZE, "0", NULL,
     "longest backoff sleep of a polling progress thread in microseconds (0 = the "
     "provider's default, 1000 for shm)"},
    {"MAX_OUTSTANDING", DDOFI_PARAM_SIZE, "0", NULL,
     "reads in flight per read call (0 = the endpoint's transmit queue size)"},
    {"CMA", DDOFI_PARAM_BOOL, "1", NULL,
     "same-node direct reads (shm): host rows straight through process_vm_readv, up to "
     "1024 per system call; 0 = every read through the provider"},
    {"FORK_WORKERS", DDOFI_PARAM_BOOL, "0", NULL,
     "ddofi_env_prepare(-1): children created by fork() use libfabric, so set "
     "FI_MR_CACHE_MONITOR=memhooks (when unset or kdreg2) before libfabric starts"},
};
#define NPARAMS (sizeof params / sizeof params[0])

#define PREFIX_MAX 32
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_prefix[PREFIX_MAX] = DDOFI_PARAM_PREFIX_DEFAULT;
static unsigned char g_host_owned[NPARAMS];
static char g_host_label[NPARAMS][PREFIX_MAX + 32]; /* the host's variable, for messages */

/* "NAME" or "NAME=HOST_VARIABLE" (host_owned entries): the length of NAME. */
static size_t name_len(const char *entry) { return strcspn(entry, "="); }

static int index_of_n(const char *name, size_t len)
{
    for (size_t i = 0; i < NPARAMS; i++)
        if (strlen(params[i].name) == len && !strncmp(params[i].name, name, len))
            return (int)i;
    return -1;
}

static int index_of(const char *name) { return index_of_n(name, strlen(name)); }

int ddofi_param_set_prefix(const char *prefix, const char *const *host_owned)
{
    if (!prefix)
        prefix = DDOFI_PARAM_PREFIX_DEFAULT;
    if (strlen(prefix) >= PREFIX_MAX)
        return ddofi_error(-EINVAL, "parameter prefix \"%s\" is longer than %d bytes",
                           prefix, PREFIX_MAX - 1);
    for (size_t i = 0; host_owned && host_owned[i]; i++) {
        const char *e = host_owned[i];
        if (index_of_n(e, name_len(e)) < 0 ||
            (e[name_len(e)] && strlen(e + name_len(e) + 1) >= sizeof g_host_label[0]))
            return ddofi_error(-EINVAL, "host-owned parameter \"%s\": not a parameter, or "
                               "the variable named is too long", e);
    }
    pthread_mutex_lock(&g_lock);
    snprintf(g_prefix, sizeof g_prefix, "%s", prefix);
    memset(g_host_owned, 0, sizeof g_host_owned);
    memset(g_host_label, 0, sizeof g_host_label);
    for (size_t i = 0; host_owned && host_owned[i]; i++) {
        const char *e = host_owned[i];
        int k = index_of_n(e, name_len(e));
        g_host_owned[k] = 1;
        if (e[name_len(e)])
            snprintf(g_host_label[k], sizeof g_host_label[k], "%s", e + name_len(e) + 1);
    }
    pthread_mutex_unlock(&g_lock);
    return 0;
}

size_t ddofi_param_count(void) { return NPARAMS; }

const ddofi_param_t *ddofi_param_at(size_t i) { return i < NPARAMS ? &params[i] : NULL; }

int ddofi_param_env_name(const char *name, char *buf, size_t cap)
{
    int i = name ? index_of(name) : -1;
    if (i < 0 || !buf)
        return -EINVAL;
    pthread_mutex_lock(&g_lock);
    int owned = g_host_owned[i];
    int n = snprintf(buf, cap, "%s%s", g_prefix, params[i].name);
    pthread_mutex_unlock(&g_lock);
    if (owned)
        return -ENOENT;
    return n < 0 || (size_t)n >= cap ? -ENOSPC : 0;
}

const char *ddofi_param_label(const char *name, char *buf, size_t cap)
{
    int i = index_of(name);
    int rc = ddofi_param_env_name(name, buf, cap);
    if (rc == -ENOENT && i >= 0) {
        pthread_mutex_lock(&g_lock);
        snprintf(buf, cap, "%s", g_host_label[i][0] ? g_host_label[i] : name);
        pthread_mutex_unlock(&g_lock);
    } else if (rc) {
        snprintf(buf, cap, "%s", name);
    }
    return buf;
}

/* The parameter's declaration and its text: the environment's value when set
 * and not blank (and not host-owned), else the default.  var gets the
 * variable's name for messages. */
static const ddofi_param_t *lookup(const char *name, ddofi_param_type_t type,
                                   const char **text_p, int *from_env_p, char *var,
                                   size_t cap)
{
    int i = index_of(name);
    if (i < 0 || params[i].type != type)
        return NULL; /* a programming error: every call site names a declared one */
    int rc = ddofi_param_env_name(name, var, cap);
    const char *v = rc == 0 ? getenv(var) : NULL;
    if (rc == -ENOENT)
        ddofi_param_label(name, var, cap);
    while (v && isspace((unsigned char)*v))
        v++;
    *from_env_p = v && *v;
    *text_p = *from_env_p ? v : params[i].defval;
    return &params[i];
}

#define LOOKUP(type)                                                           \
    char var[PREFIX_MAX + 32];                                                 \
    const char *text;                                                          \
    int from_env;                                                              \
    const ddofi_param_t *p = lookup(name, (type), &text, &from_env, var, sizeof var); \
    if (!p)                                                                    \
        return ddofi_error(-EINVAL, "%s is not a parameter of this type", name)

static int bad(const char *var, int from_env, const char *text, const char *want)
{
    return ddofi_error(-DDOFI_ECONFIG, "%s%s=\"%s\": expected %s", var,
                       from_env ? "" : " (default)", text, want);
}

/* A getter of a parsed type: the value, else the default; a bad value names
 * the variable. */
#define GETTER(fn, ptype, ctype, parse, want)                                  \
    int fn(const char *name, ctype *value_p)                                   \
    {                                                                          \
        LOOKUP(ptype);                                                         \
        ctype v = 0;                                                           \
        if (text && parse(text, &v))                                           \
            return bad(var, from_env, text, (want));                           \
        *value_p = v;                                                          \
        return 0;                                                              \
    }

GETTER(ddofi_param_get_bool, DDOFI_PARAM_BOOL, int, ddofi_parse_bool, "0 or 1")
GETTER(ddofi_param_get_size, DDOFI_PARAM_SIZE, size_t, ddofi_parse_size,
       "an integer >= 0 (suffixes K, M, G: e.g. 50, 1048576, 64K, 1M)")
GETTER(ddofi_param_get_double, DDOFI_PARAM_DOUBLE, double, ddofi_parse_double,
       "seconds (e.g. 120, 0.5, inf)")

int ddofi_param_get_string(const char *name, const char **value_p)
{
    LOOKUP(DDOFI_PARAM_STRING);
    *value_p = text;
    return 0;
}

int ddofi_param_get_enum(const char *name, int *index_p)
{
    LOOKUP(DDOFI_PARAM_ENUM);
    /* the position of the matching word of `choices` (case-insensitive) */
    const char *t = text ? text : "";
    size_t len = strlen(t);
    while (len && isspace((unsigned char)t[len - 1]))
        len--;
    int idx = 0;
    for (const char *c = p->choices; *c; idx++) {
        size_t wl = strcspn(c, "|");
        if (wl == len && !strncasecmp(t, c, len)) {
            *index_p = idx;
            return 0;
        }
        c += wl;
        if (*c == '|')
            c++;
    }
    char want[96];
    snprintf(want, sizeof want, "one of %s", p->choices);
    for (char *c = want; *c; c++)
        if (*c == '|')
            *c = ',';
    return bad(var, from_env, t, want);
}
