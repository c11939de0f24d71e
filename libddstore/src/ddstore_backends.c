/* libddstore: the backend table (backends.h).  One row per method; the
 * only file of the hub that names a transport package.
 *
 *   method 0  mpi        MPI RMA (ddstore-mpi), needs an MPI communicator
 *   method 1  ofi        libfabric RDMA (ddstore-ofi's transport adapter)
 *   method 2  ofi-split  libfabric with a file handshake in handshake_dir
 *
 * Adding a transport: one row below (its header included next to it), one
 * build option (bazel/config), its package as the hub's dependency.
 */
#include "ddstore/backends.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddstore/comm_file.h"
#include "ddstore/config.h"
#include "ddstore/errors.h"
#include "ddstore/gpu.h"

#ifdef HAVE_MPI
#include "ddstore/mpi.h"
#endif
#ifdef DDSTORE_HAVE_OFI
#include "ddstore/ofi.h"
#include "ddstore/ofi_transport.h"
#endif
#ifdef DDSTORE_HAVE_LOOP
#include "ddstore/loop.h"
#endif

/* Bazel and CMake generate ddstore/hub_version.h from VERSION; builds
 * without it (tools/dev-build.sh) pass -DDDSTORE_HUB_VERSION='"x.y.z"'. */
#if defined(__has_include)
#if __has_include("ddstore/hub_version.h")
#include "ddstore/hub_version.h"
#endif
#endif
#ifndef DDSTORE_HUB_VERSION
#define DDSTORE_HUB_VERSION "0.0.0-unknown"
#endif

const char *ddstore_version(void)
{
    return DDSTORE_HUB_VERSION;
}

static inline const char *str_or_empty(uint64_t mask, uint64_t bit, const char *s)
{
    return (mask & bit) && s != NULL ? s : "";
}

/* ---- method 0: MPI RMA -------------------------------------------------- */

#ifdef HAVE_MPI
static int make_mpi(const ddstore_backend_t *row,
                    const ddstore_open_params_t *p, dds_transport_t *tr)
{
    if (!(p->field_mask & DDSTORE_OPEN_FIELD_MPI_COMM) || p->mpi_comm == NULL) {
        const char *kind =
            str_or_empty(p->field_mask, DDSTORE_OPEN_FIELD_COMM_KIND,
                         p->comm_kind);
        return dds_error(-DDS_EINVAL,
                         "method %d (%s) needs an MPI communicator, got a "
                         "'%s' communicator; use method 1 or 2",
                         row->method, row->help, kind[0] ? kind : "non-MPI");
    }
    return ddmpi_transport_create(*(const MPI_Comm *)p->mpi_comm, tr);
}

static void mpi_library(char *buf, size_t cap)
{
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    lib[len < 0 ? 0 : (len < (int)sizeof lib ? len : (int)sizeof lib - 1)] =
        '\0';
    lib[strcspn(lib, "\n")] = '\0';
    snprintf(buf, cap, "%s", lib);
}
#define MPI_ROW 1, NULL, make_mpi, NULL, ddmpi_config_register, ddmpi_version, \
                "mpi library", mpi_library
#else
#define MPI_ROW 0, "no MPI: built without it or with --config=nompi", NULL, \
                NULL, NULL, NULL, NULL, NULL
#endif

/* ---- methods 1 and 2: libfabric ----------------------------------------- */

#ifdef DDSTORE_HAVE_OFI
/* ddstore-ofi's adapter, addresses exchanged over p->comm (DDSTORE_FABRIC,
 * FABRIC_IFACE, DDSTORE_NIC_MAP from the environment; nic_map wins over
 * DDSTORE_NIC_MAP).  Method 2 adds the handshake records: a core job
 * (n_core 0) publishes one per variable, a reader job (n_core > 0) joins
 * them. */
static int make_ofi(const ddstore_backend_t *row,
                    const ddstore_open_params_t *args, dds_transport_t *tr)
{
    uint64_t m = args->field_mask;
    const char *nic = str_or_empty(m, DDSTORE_OPEN_FIELD_NIC_MAP, args->nic_map);
    ddofi_transport_params_t p;
    memset(&p, 0, sizeof p);
    if ((m & DDSTORE_OPEN_FIELD_SETTINGS) && args->settings != NULL) {
        /* core's settings, read once by ddstore_open */
        p.field_mask |= DDOFI_TRANSPORT_FIELD_SETTINGS;
        p.settings = args->settings;
    }
    if (nic[0] != '\0') {
        p.field_mask |= DDOFI_TRANSPORT_FIELD_NIC_MAP;
        p.nic_map = nic;
    }
    if ((m & DDSTORE_OPEN_FIELD_PROVIDER) && args->provider != NULL &&
        args->provider[0] != '\0') {
        p.field_mask |= DDOFI_TRANSPORT_FIELD_PROVIDER;
        p.provider = args->provider;
    }
    if (row->flags & DDSTORE_BACKEND_NEEDS_HANDSHAKE) {
        p.field_mask |= DDOFI_TRANSPORT_FIELD_HANDSHAKE;
        p.handshake_dir = str_or_empty(m, DDSTORE_OPEN_FIELD_HANDSHAKE,
                                       args->handshake_dir);
        p.exchange_ns = str_or_empty(m, DDSTORE_OPEN_FIELD_HANDSHAKE,
                                     args->exchange_ns);
        p.n_core = (m & DDSTORE_OPEN_FIELD_HANDSHAKE) ? args->n_core : 0;
    }
    return ddofi_transport_create(&args->comm, &p, tr);
}
#define OFI_ROW 1, NULL, make_ofi, NULL, ddofi_transport_register_config, \
                ddofi_version, NULL, NULL
#else
#define OFI_ROW 0, "no libfabric: built without it or with --config=noofi", \
                NULL, NULL, NULL, NULL, NULL, NULL
#endif

/* ---- the table ---------------------------------------------------------- */

#define OFI_FLAGS (DDSTORE_BACKEND_THREAD_READERS | DDSTORE_BACKEND_FORK_NEEDS_ENV)

static const ddstore_backend_t g_rows[] = {
    {0, "mpi", "ddstore-mpi", "MPI RMA",
     DDSTORE_BACKEND_NEEDS_MPI_COMM, MPI_ROW},
    {1, "ofi", "ddstore-ofi", "libfabric", OFI_FLAGS, OFI_ROW},
    {2, "ofi-split", "ddstore-ofi",
     "libfabric with a file handshake (split jobs)",
     OFI_FLAGS | DDSTORE_BACKEND_NEEDS_HANDSHAKE, OFI_ROW},
#ifdef DDSTORE_HAVE_LOOP
    {3, "loop", "ddstore-loop", "in-process loopback, for tests",
     DDSTORE_BACKEND_THREAD_READERS | DDSTORE_BACKEND_ONE_PROCESS |
         DDSTORE_BACKEND_TEST_ONLY,
     1, NULL, NULL, ddloop_transport_create, NULL, ddloop_version, NULL, NULL},
#endif
};

#define NROWS (sizeof g_rows / sizeof g_rows[0])

size_t ddstore_backend_count(void)
{
    return NROWS;
}

const ddstore_backend_t *ddstore_backend_at(size_t i)
{
    return i < NROWS ? &g_rows[i] : NULL;
}

const ddstore_backend_t *ddstore_backend_find(int method)
{
    for (size_t i = 0; i < NROWS; i++)
        if (g_rows[i].method == method)
            return &g_rows[i];
    return NULL;
}

const ddstore_backend_t *ddstore_backend_by_name(const char *name)
{
    for (size_t i = 0; name != NULL && i < NROWS; i++)
        if (strcmp(g_rows[i].name, name) == 0)
            return &g_rows[i];
    return NULL;
}

int ddstore_backend_default(int have_mpi_comm)
{
    for (size_t i = 0; i < NROWS; i++) {
        const ddstore_backend_t *r = &g_rows[i];
        if (r->flags & (DDSTORE_BACKEND_TEST_ONLY |
                        DDSTORE_BACKEND_NEEDS_HANDSHAKE))
            continue;
        if ((r->flags & DDSTORE_BACKEND_NEEDS_MPI_COMM) && !have_mpi_comm)
            continue;
        return r->method;
    }
    return g_rows[0].method;
}

void ddstore_backend_list(char *buf, size_t cap)
{
    size_t n = 0;
    if (cap == 0)
        return;
    buf[0] = '\0';
    for (size_t i = 0; i < NROWS && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%d (%s)", i ? ", " : "",
                              g_rows[i].method, g_rows[i].help);
}

int ddstore_backend_check(int method, const char *what)
{
    const ddstore_backend_t *r = ddstore_backend_find(method);
    char list[512];
    if (r != NULL && r->built)
        return 0;
    if (r != NULL)
        return dds_error(-DDS_ENOSYS,
                         "%s %d (%s) needs %s, and this build of ddstore has "
                         "none (%s); `ddstore-info` lists the built methods",
                         what, method, r->help, r->library, r->why_not_built);
    ddstore_backend_list(list, sizeof list);
    return dds_error(-DDS_EINVAL, "%s: expected one of %s, got %d", what, list,
                     method);
}

void ddstore_config_register_all(void)
{
    dds_config_register_core();
    dds_comm_file_register_config();
    for (size_t i = 0; i < NROWS; i++)
        if (g_rows[i].built && g_rows[i].config_register != NULL)
            g_rows[i].config_register();
}

size_t ddstore_versions(ddstore_version_entry_t *out, size_t cap)
{
    size_t n = 0;
#define PUT(k, ...)                                                            \
    do {                                                                       \
        if (n < cap) {                                                         \
            snprintf(out[n].name, sizeof out[n].name, "%s", (k));              \
            snprintf(out[n].version, sizeof out[n].version, __VA_ARGS__);      \
        }                                                                      \
        n++;                                                                   \
    } while (0)
    PUT("libddstore", "%s", ddstore_version());
    PUT("ddstore-core", "%s", dds_core_version());
    PUT("ddstore-gpu", "%s (backend %s)", ddgpu_version(),
        ddgpu_backend_name());
    for (size_t i = 0; i < NROWS; i++) {
        const ddstore_backend_t *r = &g_rows[i];
        int seen = 0;
        for (size_t j = 0; j < i; j++)
            seen |= strcmp(g_rows[j].library, r->library) == 0;
        if (seen)
            continue;
        if (!r->built)
            PUT(r->library, "not built (%s)", r->why_not_built);
        else
            PUT(r->library, "%s", r->version ? r->version() : "?");
        if (r->built && r->runtime_name != NULL && r->runtime_version != NULL &&
            n < cap) {
            snprintf(out[n].name, sizeof out[n].name, "%s", r->runtime_name);
            r->runtime_version(out[n].version, sizeof out[n].version);
            n++;
        } else if (r->built && r->runtime_name != NULL) {
            n++;
        }
    }
#undef PUT
    return n;
}

/* ---- process start-up and MPI lifetime ---------------------------------- */

int ddstore_env_prepare(void)
{
#ifdef DDSTORE_HAVE_OFI
    /* ddstore's prefix and DDSTORE_FORK_WORKERS (core's registry), not the
     * standalone library's DDOFI_ names */
    return ddofi_transport_env_prepare();
#else
    /* No libfabric of ours, but the MPI may sit on one (Cray MPICH on
     * Slingshot): the one setting ddofi_env_prepare makes for every build,
     * as pyddstore did before the hub (the user's value wins). */
    (void)setenv("FI_CXI_DISABLE_HOST_REGISTER", "1", 0);
    return 0;
#endif
}

int ddstore_fork_workers(int *on_p)
{
    if (on_p == NULL)
        return dds_error(-DDS_EINVAL, "ddstore_fork_workers: NULL argument");
    *on_p = 0;
#ifdef DDSTORE_HAVE_OFI
    return ddofi_transport_fork_workers(on_p);
#else
    return 0;
#endif
}

/* ---- MPI lifetime ------------------------------------------------------- */

int ddstore_mpi_init(int *provided_p, int *started_p)
{
#ifdef HAVE_MPI
    return ddmpi_init(provided_p, started_p);
#else
    (void)provided_p;
    (void)started_p;
    return dds_error(-DDS_ENOSYS, "this build of ddstore has no MPI");
#endif
}

int ddstore_mpi_finalize_if_ours(void)
{
#ifdef HAVE_MPI
    return ddmpi_finalize_if_ours();
#else
    return 0;
#endif
}

/* ddmpi_comm_create (a dup, collective) or ddmpi_comm_borrow (`fn`). */
static int comm_of_mpi(const void *mpi_comm, dds_comm_t *comm_p, int borrow, const char *fn)
{
#ifdef HAVE_MPI
    if (mpi_comm == NULL)
        return dds_error(-DDS_EINVAL, "%s: NULL argument", fn);
    return borrow ? ddmpi_comm_borrow(*(const MPI_Comm *)mpi_comm, comm_p)
                  : ddmpi_comm_create(*(const MPI_Comm *)mpi_comm, comm_p);
#else
    (void)mpi_comm;
    (void)comm_p;
    (void)borrow;
    (void)fn;
    return dds_error(-DDS_ENOSYS,
                     "an MPI communicator, and this build of ddstore has no "
                     "MPI");
#endif
}

int ddstore_comm_from_mpi(const void *mpi_comm, dds_comm_t *comm_p)
{
    return comm_of_mpi(mpi_comm, comm_p, 0, "ddstore_comm_from_mpi");
}

int ddstore_comm_borrow_mpi(const void *mpi_comm, dds_comm_t *comm_p)
{
    return comm_of_mpi(mpi_comm, comm_p, 1, "ddstore_comm_borrow_mpi");
}
