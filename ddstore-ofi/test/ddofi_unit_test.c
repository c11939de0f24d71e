/* ddstore-ofi unit tests without hardware or peers: version, error codes
 * and their mapping from libfabric, the thread-local detail, the logger,
 * size/bool/double parsing, nic_map, parameter/env resolution, the quirk
 * table, provider aliases, read splitting, the fork environment settings,
 * and selection errors (unknown provider, missing hardware, bad
 * interface) which only query libfabric. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/ddofi_internal.h"
#include "ddofi_test.h"

static void clear_env(void)
{
    static const char *vars[] = {
        "DDOFI_PROVIDER", "DDOFI_IFACE", "DDOFI_NIC_MAP", "DDOFI_MAX_READ_BYTES",
        "DDOFI_READ_TIMEOUT_S", "DDOFI_PROGRESS", "DDOFI_MAX_OUTSTANDING",
        "DDOFI_LOCAL_ONLY", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "PALS_LOCAL_RANKID",
        "MV2_COMM_WORLD_LOCAL_RANK", "DDOFI_FORK_WORKERS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

static void test_version(void)
{
    T_EQ_STR(ddofi_version(), DDOFI_VERSION_STRING);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", DDOFI_VERSION_MAJOR, DDOFI_VERSION_MINOR,
             DDOFI_VERSION_PATCH);
    T_EQ_STR(ddofi_version(), want);
    /* The VERSION file, when the build tells us where it is. */
    const char *vf = getenv("DDOFI_VERSION_FILE");
    if (vf) {
        FILE *f = fopen(vf, "r");
        T_OK(f != NULL);
        if (f) {
            char line[64] = "";
            if (fgets(line, sizeof line, f))
                line[strcspn(line, "\r\n")] = '\0';
            fclose(f);
            T_EQ_STR(line, DDOFI_VERSION_STRING);
        }
    }
    T_OK(strlen(ddofi_libfabric_version()) >= 3);
}

static void test_errors(void)
{
    for (int c = DDOFI_EBASE; c < DDOFI_ELAST; c++) {
        T_OK(ddofi_strerror(-c) != NULL);
        T_OK(strcmp(ddofi_strerror(-c), "unknown ddstore-ofi error") != 0);
        T_EQ_STR(ddofi_strerror(c), ddofi_strerror(-c));
        for (int d = DDOFI_EBASE; d < c; d++)
            T_OK(strcmp(ddofi_strerror(-c), ddofi_strerror(-d)) != 0);
    }
    T_EQ_STR(ddofi_strerror(0), "success");
    T_EQ_STR(ddofi_strerror(-ETIMEDOUT), "timed out");
    T_EQ_STR(ddofi_strerror(-9999), "unknown ddstore-ofi error");

    /* The one translation from libfabric's error space. */
    T_EQ_INT(ddofi_rc_from_fi(0), 0);
    T_EQ_INT(ddofi_rc_from_fi(-FI_ENOMEM), -ENOMEM);
    T_EQ_INT(ddofi_rc_from_fi(FI_ENOMEM), -ENOMEM);
    T_EQ_INT(ddofi_rc_from_fi(-FI_ENOSYS), -ENOSYS);
    T_EQ_INT(ddofi_rc_from_fi(-FI_EOPNOTSUPP), -ENOSYS);
    T_EQ_INT(ddofi_rc_from_fi(-FI_ETIMEDOUT), -ETIMEDOUT);
    T_EQ_INT(ddofi_rc_from_fi(-FI_EINVAL), -EINVAL);
    T_EQ_INT(ddofi_rc_from_fi(-FI_EAGAIN), -EAGAIN);
    T_EQ_INT(ddofi_rc_from_fi(-FI_ENODATA), -DDOFI_ENOPROV);
    T_EQ_INT(ddofi_rc_from_fi(-FI_ECONNREFUSED), -DDOFI_EPEER);
    T_EQ_INT(ddofi_rc_from_fi(-FI_ECONNRESET), -DDOFI_EPEER);
    T_EQ_INT(ddofi_rc_from_fi(-FI_EHOSTUNREACH), -DDOFI_EPEER);
    T_EQ_INT(ddofi_rc_from_fi(-ESRCH), -DDOFI_EPEER);
    T_EQ_INT(ddofi_rc_from_fi(-FI_ETRUNC), -DDOFI_EPROVIDER);
    T_EQ_INT(ddofi_rc_from_fi(-FI_EOTHER), -DDOFI_EPROVIDER);
    T_EQ_INT(ddofi_rc_from_fi(-FI_EIO), -DDOFI_EPROVIDER);
    T_EQ_INT(ddofi_rc_from_fi(-FI_EACCES), -DDOFI_EPROVIDER);

    /* Detail: our text + fi_strerror + the fi rc. */
    int rc = ddofi_error_fi(-FI_ECONNREFUSED, "fi_read(peer %d)", 3);
    T_EQ_INT(rc, -DDOFI_EPEER);
    T_CONTAINS(ddofi_last_error(), "fi_read(peer 3)");
    T_CONTAINS(ddofi_last_error(), fi_strerror(FI_ECONNREFUSED));
    T_CONTAINS(ddofi_last_error(), "fi rc -111");
    ddofi_error_clear();
    T_EQ_STR(ddofi_last_error(), "");
}

static void *thread_err(void *arg)
{
    char *out = arg;
    snprintf(out, 64, "%s", ddofi_last_error()); /* must be empty here */
    ddofi_error(-EINVAL, "thread detail");
    return NULL;
}

static void test_error_thread_local(void)
{
    ddofi_error(-EINVAL, "main detail");
    char seen[64] = "x";
    pthread_t t;
    pthread_create(&t, NULL, thread_err, seen);
    pthread_join(t, NULL);
    T_EQ_STR(seen, "");
    T_EQ_STR(ddofi_last_error(), "main detail");
}

static int sink_calls;
static char sink_last[256];
static void sink(void *arg, ddofi_log_level_t level, const char *msg)
{
    (void)level;
    (*(int *)arg)++;
    snprintf(sink_last, sizeof sink_last, "%s", msg);
}

static void test_logger(void)
{
    /* Silent by default: nothing reaches a sink that is not installed and
     * the level gate is closed. */
    T_EQ_INT(atomic_load(&ddofi_log_max_level), -1);
    ddofi_log_set_sink(sink, &sink_calls, DDOFI_LOG_WARN);
    DDOFI_LOG(DDOFI_LOG_WARN, "hello %d", 42);
    DDOFI_LOG(DDOFI_LOG_DEBUG, "filtered");
    T_EQ_INT(sink_calls, 1);
    T_EQ_STR(sink_last, "hello 42");
    ddofi_log_set_sink(NULL, NULL, DDOFI_LOG_TRACE);
    DDOFI_LOG(DDOFI_LOG_ERROR, "not delivered");
    T_EQ_INT(sink_calls, 1);
    T_EQ_INT(atomic_load(&ddofi_log_max_level), -1);
}

static void test_parse(void)
{
    size_t v = 7;
    T_EQ_INT(ddofi_parse_size("0", &v), 0);
    T_EQ_INT(v, 0);
    T_EQ_INT(ddofi_parse_size("4096", &v), 0);
    T_EQ_INT(v, 4096);
    T_EQ_INT(ddofi_parse_size("64K", &v), 0);
    T_EQ_INT(v, 65536);
    T_EQ_INT(ddofi_parse_size("64k", &v), 0);
    T_EQ_INT(v, 65536);
    T_EQ_INT(ddofi_parse_size("1M", &v), 0);
    T_EQ_INT(v, 1048576);
    T_EQ_INT(ddofi_parse_size("1MiB", &v), 0);
    T_EQ_INT(v, 1048576);
    T_EQ_INT(ddofi_parse_size("2G", &v), 0);
    T_EQ_INT(v, 2147483648LL);
    T_EQ_INT(ddofi_parse_size(" 8 ", &v), 0);
    T_EQ_INT(v, 8);
    T_EQ_INT(ddofi_parse_size("", &v), -EINVAL);
    T_EQ_INT(ddofi_parse_size("x", &v), -EINVAL);
    T_EQ_INT(ddofi_parse_size("-1", &v), -EINVAL);
    T_EQ_INT(ddofi_parse_size("1Q", &v), -EINVAL);
    T_EQ_INT(ddofi_parse_size("1 M x", &v), -EINVAL);
    T_EQ_INT(ddofi_parse_size("99999999999999999999", &v), -EINVAL);
    T_EQ_INT(ddofi_parse_size("99999999999T", &v), -EINVAL);

    double d = 0;
    T_EQ_INT(ddofi_parse_double("60", &d), 0);
    T_OK(d == 60.0);
    T_EQ_INT(ddofi_parse_double("0.5", &d), 0);
    T_OK(d == 0.5);
    T_EQ_INT(ddofi_parse_double("abc", &d), -EINVAL);
    T_EQ_INT(ddofi_parse_double("1s", &d), -EINVAL);
    T_EQ_INT(ddofi_parse_double("nan", &d), -EINVAL);

    int b = -1;
    T_EQ_INT(ddofi_parse_bool("1", &b), 0);
    T_EQ_INT(b, 1);
    T_EQ_INT(ddofi_parse_bool("On", &b), 0);
    T_EQ_INT(b, 1);
    T_EQ_INT(ddofi_parse_bool("false", &b), 0);
    T_EQ_INT(b, 0);
    T_EQ_INT(ddofi_parse_bool("2", &b), -EINVAL);
}

static void test_nic_map(void)
{
    char out[64];
    T_EQ_INT(ddofi_nic_map_lookup("0:cxi0,1:cxi1", 1, out, sizeof out), 0);
    T_EQ_STR(out, "cxi1");
    T_EQ_INT(ddofi_nic_map_lookup("0:cxi0,1:cxi1", 0, out, sizeof out), 0);
    T_EQ_STR(out, "cxi0");
    T_EQ_INT(ddofi_nic_map_lookup("0:cxi0,1:cxi1", 2, out, sizeof out), -ENOENT);
    T_EQ_INT(ddofi_nic_map_lookup(" 0 : cxi0 , 3:cxi3 ", 3, out, sizeof out), 0);
    T_EQ_STR(out, "cxi3");
    T_EQ_INT(ddofi_nic_map_lookup("*:hsn0,0:cxi0", 5, out, sizeof out), 0);
    T_EQ_STR(out, "hsn0");
    T_EQ_INT(ddofi_nic_map_lookup("*:hsn0,0:cxi0", 0, out, sizeof out), 0);
    T_EQ_STR(out, "cxi0");
    T_EQ_INT(ddofi_nic_map_lookup("cxi0,cxi1", 3, out, sizeof out), 0);
    T_EQ_STR(out, "cxi1");
    T_EQ_INT(ddofi_nic_map_lookup("cxi0", 7, out, sizeof out), 0);
    T_EQ_STR(out, "cxi0");
    T_EQ_INT(ddofi_nic_map_lookup("0:", 0, out, sizeof out), -EINVAL);
    T_CONTAINS(ddofi_last_error(), "LOCALRANK:DOMAIN");
    T_EQ_INT(ddofi_nic_map_lookup("a:cxi0", 0, out, sizeof out), -EINVAL);
    T_CONTAINS(ddofi_last_error(), "bad local rank");
    T_EQ_INT(ddofi_nic_map_lookup("0:cxi0,cxi1", 1, out, sizeof out), -EINVAL);
    T_CONTAINS(ddofi_last_error(), "mixes");
    T_EQ_INT(ddofi_nic_map_lookup("", 0, out, sizeof out), -EINVAL);
    T_EQ_INT(ddofi_nic_map_lookup(" , ", 0, out, sizeof out), -EINVAL);
}

static void test_settings(void)
{
    ddofi_settings_t s;
    clear_env();
    T_EQ_INT(ddofi_settings_resolve(NULL, &s), 0);
    T_EQ_STR(s.provider, "auto");
    T_EQ_STR(s.iface, "");
    T_OK(s.read_timeout_s == 120.0); /* core's documented default */
    T_EQ_INT(s.max_read_bytes, 0);
    T_EQ_INT(s.progress, DDOFI_PROGRESS_AUTO);
    T_EQ_INT(s.local_only, 0);
    T_EQ_INT(s.local_rank, 0);

    /* Environment fallback. */
    setenv("DDOFI_PROVIDER", " TCP ", 1);
    setenv("DDOFI_MAX_READ_BYTES", "64K", 1);
    setenv("DDOFI_READ_TIMEOUT_S", "2.5", 1);
    setenv("DDOFI_PROGRESS", "thread", 1);
    setenv("DDOFI_LOCAL_ONLY", "1", 1);
    setenv("DDOFI_MAX_OUTSTANDING", "32", 1);
    T_EQ_INT(ddofi_settings_resolve(NULL, &s), 0);
    T_EQ_STR(s.provider, "tcp");
    T_EQ_INT(s.max_read_bytes, 65536);
    T_OK(s.read_timeout_s == 2.5);
    T_EQ_INT(s.progress, DDOFI_PROGRESS_THREAD);
    T_EQ_INT(s.local_only, 1);
    T_EQ_INT(s.max_outstanding, 32);

    /* Parameters win over the environment. */
    ddofi_fabric_params_t p = {0};
    p.field_mask = DDOFI_FABRIC_FIELD_PROVIDER | DDOFI_FABRIC_FIELD_MAX_READ_BYTES |
                   DDOFI_FABRIC_FIELD_READ_TIMEOUT | DDOFI_FABRIC_FIELD_PROGRESS |
                   DDOFI_FABRIC_FIELD_LOCAL_ONLY;
    p.provider = "shm";
    p.max_read_bytes = 1000;
    p.read_timeout_s = 0;
    p.progress = DDOFI_PROGRESS_NONE;
    p.local_only = 0;
    T_EQ_INT(ddofi_settings_resolve(&p, &s), 0);
    T_EQ_STR(s.provider, "shm");
    T_EQ_INT(s.max_read_bytes, 1000);
    T_OK(s.read_timeout_s == 0);
    T_EQ_INT(s.progress, DDOFI_PROGRESS_NONE);
    T_EQ_INT(s.local_only, 0);
    /* ... but a field without its bit is ignored. */
    p.field_mask = 0;
    T_EQ_INT(ddofi_settings_resolve(&p, &s), 0);
    T_EQ_STR(s.provider, "tcp");

    /* Bad values name the variable. */
    setenv("DDOFI_MAX_READ_BYTES", "lots", 1);
    T_EQ_INT(ddofi_settings_resolve(NULL, &s), -DDOFI_ECONFIG);
    T_CONTAINS(ddofi_last_error(), "DDOFI_MAX_READ_BYTES");
    setenv("DDOFI_MAX_READ_BYTES", "1M", 1);
    setenv("DDOFI_READ_TIMEOUT_S", "soon", 1);
    T_EQ_INT(ddofi_settings_resolve(NULL, &s), -DDOFI_ECONFIG);
    T_CONTAINS(ddofi_last_error(), "DDOFI_READ_TIMEOUT_S");
    setenv("DDOFI_READ_TIMEOUT_S", "60", 1);
    setenv("DDOFI_PROGRESS", "spin", 1);
    T_EQ_INT(ddofi_settings_resolve(NULL, &s), -DDOFI_ECONFIG);
    T_CONTAINS(ddofi_last_error(), "DDOFI_PROGRESS");
    setenv("DDOFI_PROGRESS", "auto", 1);
    setenv("DDOFI_LOCAL_ONLY", "maybe", 1);
    T_EQ_INT(ddofi_settings_resolve(NULL, &s), -DDOFI_ECONFIG);
    T_CONTAINS(ddofi_last_error(), "DDOFI_LOCAL_ONLY");
    unsetenv("DDOFI_LOCAL_ONLY");

    /* Interface: DDOFI_IFACE > DDOFI_NIC_MAP; params > env. */
    setenv("DDOFI_NIC_MAP", "0:cxi0,1:cxi1", 1);
    setenv("SLURM_LOCALID", "1", 1);
    T_EQ_INT(ddofi_settings_resolve(NULL, &s), 0);
    T_EQ_INT(s.local_rank, 1);
    T_EQ_STR(s.iface, "cxi1");
    T_EQ_STR(s.iface_source, "DDOFI_NIC_MAP");
    setenv("DDOFI_IFACE", "hsn0", 1);
    T_EQ_INT(ddofi_settings_resolve(NULL, &s), 0);
    T_EQ_STR(s.iface, "hsn0");
    T_EQ_STR(s.iface_source, "DDOFI_IFACE");
    p.field_mask = DDOFI_FABRIC_FIELD_NIC_MAP | DDOFI_FABRIC_FIELD_LOCAL_RANK;
    p.nic_map = "0:mlx5_0,1:mlx5_1,2:mlx5_2";
    p.local_rank = 2;
    T_EQ_INT(ddofi_settings_resolve(&p, &s), 0);
    T_EQ_STR(s.iface, "mlx5_2");
    p.local_rank = 3;
    T_EQ_INT(ddofi_settings_resolve(&p, &s), -DDOFI_ECONFIG);
    T_CONTAINS(ddofi_last_error(), "no entry for local rank 3");
    unsetenv("DDOFI_IFACE");
    setenv("DDOFI_NIC_MAP", "0:", 1);
    T_EQ_INT(ddofi_settings_resolve(NULL, &s), -DDOFI_ECONFIG);
    T_CONTAINS(ddofi_last_error(), "DDOFI_NIC_MAP");
    clear_env();
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "5", 1);
    T_EQ_INT(ddofi_env_local_rank(), 5);
    clear_env();
    T_EQ_INT(ddofi_env_local_rank(), 0);
}

/* The registry: a host's prefix, host-owned parameters, LOCAL_ONLY=auto. */
static void test_params(void)
{
    ddofi_settings_t s;
    char var[64];
    clear_env();
    T_OK(ddofi_param_count() >= 12);
    for (size_t i = 0; i < ddofi_param_count(); i++) {
        const ddofi_param_t *d = ddofi_param_at(i);
        T_OK(d && d->name && d->help);
        T_EQ_INT(ddofi_param_env_name(d->name, var, sizeof var), 0);
        T_OK(!strncmp(var, "DDOFI_", 6));
    }
    T_OK(ddofi_param_at(ddofi_param_count()) == NULL);
    T_EQ_INT(ddofi_param_env_name("NO_SUCH", var, sizeof var), -EINVAL);

    /* LOCAL_ONLY: auto (the default) = single_node and no interface named. */
    ddofi_fabric_params_t p = {.field_mask = DDOFI_FABRIC_FIELD_SINGLE_NODE, .single_node = 1};
    T_EQ_INT(ddofi_settings_resolve(&p, &s), 0);
    T_EQ_INT(s.local_only, 1);
    setenv("DDOFI_IFACE", "lo", 1);
    T_EQ_INT(ddofi_settings_resolve(&p, &s), 0);
    T_EQ_INT(s.local_only, 0);
    unsetenv("DDOFI_IFACE");
    setenv("DDOFI_LOCAL_ONLY", "0", 1);
    T_EQ_INT(ddofi_settings_resolve(&p, &s), 0);
    T_EQ_INT(s.local_only, 0);
    setenv("DDOFI_LOCAL_ONLY", "AUTO", 1);
    T_EQ_INT(ddofi_settings_resolve(&p, &s), 0);
    T_EQ_INT(s.local_only, 1);
    unsetenv("DDOFI_LOCAL_ONLY");

    /* A host's prefix; host-owned parameters are not read or listed. */
    static const char *const owned[] = {"PROVIDER=HOSTLIB_FABRIC", "READ_TIMEOUT_S", NULL};
    T_EQ_INT(ddofi_param_set_prefix("HOSTLIB_OFI_", owned), 0);
    T_EQ_INT(ddofi_param_env_name("PROGRESS", var, sizeof var), 0);
    T_EQ_STR(var, "HOSTLIB_OFI_PROGRESS");
    T_EQ_INT(ddofi_param_env_name("PROVIDER", var, sizeof var), -ENOENT);
    T_EQ_STR(ddofi_param_label("PROVIDER", var, sizeof var), "HOSTLIB_FABRIC");
    T_EQ_STR(ddofi_param_label("READ_TIMEOUT_S", var, sizeof var), "READ_TIMEOUT_S");
    T_EQ_STR(ddofi_param_label("CMA", var, sizeof var), "HOSTLIB_OFI_CMA");
    setenv("HOSTLIB_OFI_PROGRESS", "none", 1);
    setenv("HOSTLIB_OFI_PROVIDER", "tcp", 1);
    setenv("HOSTLIB_OFI_READ_TIMEOUT_S", "5", 1);
    setenv("DDOFI_MAX_OUTSTANDING", "7", 1); /* the old prefix is not read */
    T_EQ_INT(ddofi_settings_resolve(NULL, &s), 0);
    T_EQ_INT(s.progress, DDOFI_PROGRESS_NONE);
    T_EQ_STR(s.provider, "auto");
    T_OK(s.read_timeout_s == 120.0);
    T_EQ_INT(s.max_outstanding, 0);
    setenv("HOSTLIB_OFI_PROGRESS", "sometimes", 1);
    T_EQ_INT(ddofi_settings_resolve(NULL, &s), -DDOFI_ECONFIG);
    T_CONTAINS(ddofi_last_error(), "HOSTLIB_OFI_PROGRESS=\"sometimes\"");
    T_CONTAINS(ddofi_last_error(), "auto,thread,none");
    unsetenv("HOSTLIB_OFI_PROGRESS");
    unsetenv("HOSTLIB_OFI_PROVIDER");
    unsetenv("HOSTLIB_OFI_READ_TIMEOUT_S");
    unsetenv("DDOFI_MAX_OUTSTANDING");
    static const char *const bogus[] = {"NOT_A_PARAM", NULL};
    T_EQ_INT(ddofi_param_set_prefix("X_", bogus), -EINVAL);
    T_EQ_INT(ddofi_param_set_prefix("A_PREFIX_LONGER_THAN_THIRTY_ONE_BYTES_", NULL), -EINVAL);
    T_EQ_INT(ddofi_param_set_prefix(NULL, NULL), 0);
    T_EQ_INT(ddofi_param_env_name("PROVIDER", var, sizeof var), 0);
    T_EQ_STR(var, "DDOFI_PROVIDER");
}

static void test_quirks(void)
{
    const ddofi_quirk_t *q = ddofi_quirk_lookup("cxi");
    T_EQ_STR(q->name, "cxi");
    T_OK(q->flags & DDOFI_Q_NO_HINTS);
    T_OK(q->flags & DDOFI_Q_CLEAR_INJECT);
    T_OK(q->flags & DDOFI_Q_MR_BIND);
    T_OK(q->flags & DDOFI_Q_MR_RELATIVE);
    T_EQ_INT(q->progress, DDOFI_QP_HARDWARE);
    T_EQ_INT(ddofi_quirk_needs_thread(q, 1, DDOFI_PROGRESS_AUTO), 0);

    q = ddofi_quirk_lookup("tcp;ofi_rxm");
    T_EQ_STR(q->name, "tcp");
    T_OK(q->flags & DDOFI_Q_SOCKETS);
    T_EQ_INT(q->wait, DDOFI_QW_FD);
    T_EQ_INT(ddofi_quirk_needs_thread(q, 1, DDOFI_PROGRESS_AUTO), 1);
    T_EQ_INT(ddofi_quirk_needs_thread(q, 0, DDOFI_PROGRESS_AUTO), 1);
    T_EQ_INT(ddofi_quirk_needs_thread(q, 1, DDOFI_PROGRESS_NONE), 0);

    q = ddofi_quirk_lookup("verbs;ofi_rxm");
    T_EQ_STR(q->name, "verbs");
    T_EQ_INT(ddofi_quirk_needs_thread(q, 1, DDOFI_PROGRESS_AUTO), 0);
    T_EQ_INT(ddofi_quirk_needs_thread(q, 1, DDOFI_PROGRESS_THREAD), 1);

    q = ddofi_quirk_lookup("shm");
    T_EQ_STR(q->name, "shm");
    T_OK(q->flags & DDOFI_Q_SINGLE_NODE);
    T_EQ_INT(q->wait, DDOFI_QW_BELL);
    T_OK(q->backoff_max_us > 0 && q->backoff_max_us <= 1000);
    T_EQ_INT(ddofi_quirk_needs_thread(q, 0, DDOFI_PROGRESS_AUTO), 1);

    q = ddofi_quirk_lookup("sockets");
    T_EQ_STR(q->name, "sockets");
    T_EQ_INT(ddofi_quirk_needs_thread(q, 0, DDOFI_PROGRESS_AUTO), 0);
    T_EQ_INT(ddofi_quirk_needs_thread(q, 1, DDOFI_PROGRESS_AUTO), 1);

    T_EQ_STR(ddofi_quirk_lookup("net;ofi_rxm")->name, "net");
    T_EQ_STR(ddofi_quirk_lookup("udp;ofi_rxd")->name, "udp");
    T_EQ_STR(ddofi_quirk_lookup("efa")->name, "efa");
    T_EQ_STR(ddofi_quirk_lookup("psm3")->name, "psm");
    T_EQ_STR(ddofi_quirk_lookup("psmx")->name, "default");
    T_EQ_STR(ddofi_quirk_lookup("tcpx")->name, "default");
    T_EQ_STR(ddofi_quirk_lookup("made-up")->name, "default");
    T_EQ_STR(ddofi_quirk_lookup(NULL)->name, "default");
    T_EQ_STR(ddofi_quirk_lookup("shm;ofi_hook_perf")->name, "shm");

    /* Table sanity: names unique, every entry documented, default last. */
    size_t n = ddofi_quirk_count();
    T_OK(n >= 9);
    for (size_t i = 0; i < n; i++) {
        const ddofi_quirk_t *a = ddofi_quirk_at(i);
        T_OK(a->name && a->name[0] && a->note && strlen(a->note) > 10);
        for (size_t j = 0; j < i; j++)
            T_OK(strcmp(a->name, ddofi_quirk_at(j)->name) != 0);
    }
    T_EQ_STR(ddofi_quirk_at(n - 1)->match, "");
    T_OK(ddofi_quirk_at(n) == NULL);
}

static void test_alias(void)
{
    char prov[64];
    const char *prefix = (const char *)1;
    T_EQ_INT(ddofi_provider_alias("tcp", prov, sizeof prov, &prefix), 0);
    T_EQ_STR(prov, "tcp;ofi_rxm");
    T_OK(prefix == NULL);
    T_EQ_INT(ddofi_provider_alias("hsn", prov, sizeof prov, &prefix), 0);
    T_EQ_STR(prov, "tcp;ofi_rxm");
    T_EQ_STR(prefix, "hsn");
    T_EQ_INT(ddofi_provider_alias("verbs", prov, sizeof prov, &prefix), 0);
    T_EQ_STR(prov, "verbs;ofi_rxm");
    T_EQ_INT(ddofi_provider_alias("tcp;ofi_rxm", prov, sizeof prov, &prefix), 0);
    T_EQ_STR(prov, "tcp;ofi_rxm");
    T_EQ_INT(ddofi_provider_alias("cxi", prov, sizeof prov, &prefix), 0);
    T_EQ_STR(prov, "cxi");
    T_EQ_INT(ddofi_provider_alias("", prov, sizeof prov, &prefix), -EINVAL);
}

static void test_split(void)
{
    T_EQ_INT(ddofi_split_count(0, 100), 0);
    T_EQ_INT(ddofi_split_count(10, 0), 1);
    T_EQ_INT(ddofi_split_count(10, 10), 1);
    T_EQ_INT(ddofi_split_count(11, 10), 2);
    T_EQ_INT(ddofi_split_count(20, 10), 2);
    T_EQ_INT(ddofi_split_count(1u << 30, 1u << 20), 1024);
    T_EQ_INT(ddofi_split_count(((size_t)1 << 30) + 1, 1u << 20), 1025);
    T_EQ_INT(ddofi_split_count(1, SIZE_MAX), 1);
}

static void test_env_prepare(void)
{
    unsetenv("FI_MR_CACHE_MONITOR");
    unsetenv("FI_CXI_DISABLE_HOST_REGISTER");
    T_EQ_INT(ddofi_env_prepare(0), 0);
    T_EQ_STR(getenv("FI_CXI_DISABLE_HOST_REGISTER"), "1");
    T_OK(getenv("FI_MR_CACHE_MONITOR") == NULL);

    T_EQ_INT(ddofi_env_prepare(1), 0);
    T_EQ_STR(getenv("FI_MR_CACHE_MONITOR"), "memhooks");
    setenv("FI_MR_CACHE_MONITOR", "kdreg2", 1);
    T_EQ_INT(ddofi_env_prepare(1), 0);
    T_EQ_STR(getenv("FI_MR_CACHE_MONITOR"), "memhooks");
    setenv("FI_MR_CACHE_MONITOR", "userfaultfd", 1);
    T_EQ_INT(ddofi_env_prepare(1), 0);
    T_EQ_STR(getenv("FI_MR_CACHE_MONITOR"), "userfaultfd");
    setenv("FI_MR_CACHE_MONITOR", "kdreg2", 1);
    T_EQ_INT(ddofi_env_prepare(0), 0);
    T_EQ_STR(getenv("FI_MR_CACHE_MONITOR"), "kdreg2");
    setenv("FI_CXI_DISABLE_HOST_REGISTER", "0", 1);
    T_EQ_INT(ddofi_env_prepare(1), 0);
    T_EQ_STR(getenv("FI_CXI_DISABLE_HOST_REGISTER"), "0");

    /* -1: from DDOFI_FORK_WORKERS. */
    setenv("FI_MR_CACHE_MONITOR", "kdreg2", 1);
    unsetenv("DDOFI_FORK_WORKERS");
    T_EQ_INT(ddofi_env_prepare(-1), 0);
    T_EQ_STR(getenv("FI_MR_CACHE_MONITOR"), "kdreg2");
    setenv("DDOFI_FORK_WORKERS", "1", 1);
    T_EQ_INT(ddofi_env_prepare(-1), 0);
    T_EQ_STR(getenv("FI_MR_CACHE_MONITOR"), "memhooks");
    setenv("DDOFI_FORK_WORKERS", "perhaps", 1);
    T_EQ_INT(ddofi_env_prepare(-1), -DDOFI_ECONFIG);
    T_CONTAINS(ddofi_last_error(), "DDOFI_FORK_WORKERS");
    unsetenv("DDOFI_FORK_WORKERS");
    unsetenv("FI_MR_CACHE_MONITOR");
    unsetenv("FI_CXI_DISABLE_HOST_REGISTER");
}

/* Run fn() with stdout/stderr captured; return how many captured lines do
 * NOT come from libfabric itself (its own warnings start with "libfabric:"
 * and are governed by FI_LOG_LEVEL, not by this library). */
static size_t foreign_output_lines(void (*fn)(void))
{
    fflush(stdout);
    fflush(stderr);
    char path[] = "/tmp/ddofi_unit_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return (size_t)-1;
    int o1 = dup(1), o2 = dup(2);
    dup2(fd, 1);
    dup2(fd, 2);
    fn();
    fflush(stdout);
    fflush(stderr);
    dup2(o1, 1);
    dup2(o2, 2);
    close(o1);
    close(o2);
    close(fd);
    size_t bad = 0;
    FILE *f = fopen(path, "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "libfabric:", 10)) {
            fprintf(stderr, "unexpected output: %s", line);
            bad++;
        }
    if (f)
        fclose(f);
    unlink(path);
    return bad;
}

static int sel_rc[4];
static char sel_msg[4][2048];

static void try_selections(void)
{
    ddofi_fabric_t *f = NULL;
    ddofi_fabric_params_t p = {0};
    p.field_mask = DDOFI_FABRIC_FIELD_PROVIDER;
    p.provider = "no-such-provider";
    sel_rc[0] = ddofi_fabric_open(&p, &f);
    snprintf(sel_msg[0], sizeof sel_msg[0], "%s", ddofi_last_error());
    ddofi_fabric_close(f);
    f = NULL;
    p.provider = "cxi";
    sel_rc[1] = ddofi_fabric_open(&p, &f);
    snprintf(sel_msg[1], sizeof sel_msg[1], "%s", ddofi_last_error());
    ddofi_fabric_close(f);
    f = NULL;
    p.provider = "hsn";
    sel_rc[2] = ddofi_fabric_open(&p, &f);
    snprintf(sel_msg[2], sizeof sel_msg[2], "%s", ddofi_last_error());
    ddofi_fabric_close(f);
    f = NULL;
    p.field_mask |= DDOFI_FABRIC_FIELD_IFACE;
    p.provider = "tcp";
    p.iface = "nosuchnic7";
    sel_rc[3] = ddofi_fabric_open(&p, &f);
    snprintf(sel_msg[3], sizeof sel_msg[3], "%s", ddofi_last_error());
    ddofi_fabric_close(f);
}

static void test_selection_errors(void)
{
    /* Errors never print (the library has no default sink). */
    T_EQ_INT(foreign_output_lines(try_selections), 0);
    T_EQ_INT(sel_rc[0], -DDOFI_ENOPROV);
    T_CONTAINS(sel_msg[0], "DDOFI_PROVIDER=no-such-provider");
    T_CONTAINS(sel_msg[0], "found with FI_EP_RDM + fi_read:");
    T_EQ_INT(sel_rc[1], -DDOFI_ENOPROV);
    T_CONTAINS(sel_msg[1], "DDOFI_PROVIDER=cxi");
    T_EQ_INT(sel_rc[2], -DDOFI_ENOPROV);
    T_CONTAINS(sel_msg[2], "hsn*");
    T_EQ_INT(sel_rc[3], -DDOFI_ENOPROV);
    T_CONTAINS(sel_msg[3], "\"nosuchnic7\" (from iface parameter)");
    /* The list of what exists names the tcp provider on this machine
     * (every libfabric build here has it). */
    T_CONTAINS(sel_msg[3], "tcp;ofi_rxm [");
    /* hsn with an interface named explicitly uses that interface. */
    {
        ddofi_fabric_t *hf = NULL;
        ddofi_fabric_params_t hp = {0};
        hp.field_mask = DDOFI_FABRIC_FIELD_PROVIDER | DDOFI_FABRIC_FIELD_IFACE;
        hp.provider = "hsn";
        hp.iface = "lo";
        T_EQ_INT(ddofi_fabric_open(&hp, &hf), 0);
        ddofi_fabric_attr_t ha;
        if (hf) {
            T_EQ_INT(ddofi_fabric_query(hf, &ha), 0);
            T_EQ_STR(ha.provider, "tcp;ofi_rxm");
            T_EQ_STR(ha.domain, "lo");
            T_EQ_INT(ha.progress_thread, 1);
            T_EQ_STR(ha.quirks, "tcp");
        }
        T_EQ_INT(ddofi_fabric_close(hf), 0);
        /* nic_map through the real selection: local rank 5 -> "*" -> lo */
        hp.field_mask = DDOFI_FABRIC_FIELD_PROVIDER | DDOFI_FABRIC_FIELD_NIC_MAP |
                        DDOFI_FABRIC_FIELD_LOCAL_RANK;
        hp.provider = "tcp";
        hp.nic_map = "0:nosuchnic0,*:lo";
        hp.local_rank = 5;
        hf = NULL;
        T_EQ_INT(ddofi_fabric_open(&hp, &hf), 0);
        if (hf) {
            ddofi_fabric_query(hf, &ha);
            T_EQ_STR(ha.domain, "lo");
        }
        ddofi_fabric_close(hf);
        hp.local_rank = 0; /* -> nosuchnic0: a clear error naming the map */
        hf = NULL;
        T_EQ_INT(ddofi_fabric_open(&hp, &hf), -DDOFI_ENOPROV);
        T_CONTAINS(ddofi_last_error(), "\"nosuchnic0\" (from nic_map parameter)");
        /* auto on one node picks shm; on several, tcp;ofi_rxm (no cxi,
         * verbs or efa here) */
        hp.field_mask = DDOFI_FABRIC_FIELD_PROVIDER | DDOFI_FABRIC_FIELD_SINGLE_NODE;
        hp.provider = "auto";
        hp.single_node = 1;
        hf = NULL;
        if (ddofi_fabric_open(&hp, &hf) == 0) {
            ddofi_fabric_query(hf, &ha);
            T_EQ_STR(ha.provider, "shm");
        } else {
            T_SKIP("auto on one node: %s", ddofi_last_error());
        }
        ddofi_fabric_close(hf);
        hp.single_node = 0;
        hf = NULL;
        if (ddofi_fabric_open(&hp, &hf) == 0) {
            ddofi_fabric_query(hf, &ha);
            T_OK(!strcmp(ha.provider, "tcp;ofi_rxm") || !strcmp(ha.provider, "cxi") ||
                 !strcmp(ha.provider, "verbs;ofi_rxm") || !strcmp(ha.provider, "efa"));
        } else {
            T_SKIP("auto on several nodes: %s", ddofi_last_error());
        }
        ddofi_fabric_close(hf);
    }
    printf("example selection error: %s\n", sel_msg[1]);

    /* A bad env value fails open with the variable's name. */
    setenv("DDOFI_READ_TIMEOUT_S", "x", 1);
    ddofi_fabric_t *f = NULL;
    T_EQ_INT(ddofi_fabric_open(NULL, &f), -DDOFI_ECONFIG);
    T_OK(f == NULL);
    T_CONTAINS(ddofi_last_error(), "DDOFI_READ_TIMEOUT_S");
    unsetenv("DDOFI_READ_TIMEOUT_S");
    T_EQ_INT(ddofi_fabric_open(NULL, NULL), -EINVAL);
    T_EQ_INT(ddofi_fabric_close(NULL), 0);
    T_EQ_INT(ddofi_ep_close(NULL), 0);
    T_EQ_INT(ddofi_mr_deregister(NULL), 0);

    /* After libfabric started, env_prepare says it is late when it has to
     * change something, and is quiet when everything is already set. */
    unsetenv("FI_CXI_DISABLE_HOST_REGISTER");
    T_EQ_INT(ddofi_env_prepare(0), 1);
    T_EQ_INT(ddofi_env_prepare(0), 0);
    unsetenv("FI_CXI_DISABLE_HOST_REGISTER");
}

static void test_blob_import_errors(void)
{
    unsigned char blob[DDOFI_MR_BLOB_SIZE];
    ddofi_remote_t r;
    memset(blob, 0, sizeof blob);
    T_EQ_INT(ddofi_remote_import(blob, sizeof blob, &r), -DDOFI_EBLOB);
    T_CONTAINS(ddofi_last_error(), "magic");
    T_EQ_INT(ddofi_remote_import(blob, 10, &r), -DDOFI_EBLOB);
    T_CONTAINS(ddofi_last_error(), "truncated");
    T_EQ_INT(ddofi_remote_import(NULL, 48, &r), -EINVAL);
}

/* An address blob's length from its header: format 1 (48-byte header) and
 * format 2 (64, with a progress bell); 0 for anything else or too long. */
static void test_addr_blob_len(void)
{
    unsigned char b[DDOFI_ADDR_BLOB_MAX];
    memset(b, 0, sizeof b);
    T_EQ_INT((long)ddofi_addr_blob_len(b, sizeof b), 0); /* no magic */
    memcpy(b, "DDOA", 4);
    b[4] = 1;  /* version 1 */
    b[6] = 16; /* a 16-byte provider address */
    T_EQ_INT((long)ddofi_addr_blob_len(b, sizeof b), 64);
    T_EQ_INT((long)ddofi_addr_blob_len(b, 64), 64);
    T_EQ_INT((long)ddofi_addr_blob_len(b, 63), 0);
    b[4] = 2;
    T_EQ_INT((long)ddofi_addr_blob_len(b, sizeof b), 80);
    b[4] = 3;
    T_EQ_INT((long)ddofi_addr_blob_len(b, sizeof b), 0);
    b[4] = 1;
    T_EQ_INT((long)ddofi_addr_blob_len(b, 20), 0); /* not even a header */
    T_EQ_INT((long)ddofi_addr_blob_len(NULL, sizeof b), 0);
}

int main(void)
{
    clear_env();
    test_addr_blob_len();
    test_version();
    test_errors();
    test_error_thread_local();
    test_logger();
    test_parse();
    test_nic_map();
    test_settings();
    test_params();
    test_quirks();
    test_alias();
    test_split();
    test_env_prepare(); /* before anything starts libfabric */
    test_blob_import_errors();
    test_selection_errors();
    return ddofi_test_summary("ddofi_unit_test");
}
