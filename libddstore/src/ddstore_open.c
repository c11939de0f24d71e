/* libddstore: opening a store by method (open.h), the one place that knows
 * every backend.
 *
 *   method 0  MPI RMA (ddstore-mpi), needs an MPI communicator
 *   method 1  libfabric RDMA (ddstore-ofi's transport adapter)
 *   method 2  libfabric with a file handshake in handshake_dir (split jobs)
 *
 * No Python calls (pyddstore._core calls ddstore_open with the GIL
 * released).  Collective over the store's communicator (the transports
 * exchange addresses / create windows).
 */
#include "ddstore/open.h"

#include <stdlib.h>
#include <string.h>

#include "ddstore/config.h"
#include "ddstore/errors.h"

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

#ifdef HAVE_MPI
#include "ddstore/mpi.h"
#endif
#ifdef DDSTORE_HAVE_OFI
#include "ddstore/ofi.h"
#include "ddstore/ofi_transport.h"
#endif

const char *ddstore_version(void)
{
    return DDSTORE_HUB_VERSION;
}

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

static inline const char *str_or_empty(uint64_t mask, uint64_t bit, const char *s)
{
    return (mask & bit) && s != NULL ? s : "";
}

static int make_ofi(int method, const ddstore_open_params_t *args,
                    dds_transport_t *transport_p)
{
#ifdef DDSTORE_HAVE_OFI
    /* methods 1 and 2: ddstore-ofi's adapter, addresses exchanged over
     * args->comm (DDSTORE_FABRIC, FABRIC_IFACE, DDSTORE_NIC_MAP from the
     * environment; nic_map wins over DDSTORE_NIC_MAP).  Method 2 adds the
     * handshake records: a core job (n_core 0) publishes one per variable,
     * a reader job (n_core > 0) joins them. */
    uint64_t m = args->field_mask;
    const char *nic = str_or_empty(m, DDSTORE_OPEN_FIELD_NIC_MAP, args->nic_map);
    ddofi_transport_params_t p;
    memset(&p, 0, sizeof p);
    if (nic[0] != '\0') {
        p.field_mask |= DDOFI_TRANSPORT_FIELD_NIC_MAP;
        p.nic_map = nic;
    }
    if ((m & DDSTORE_OPEN_FIELD_PROVIDER) && args->provider != NULL &&
        args->provider[0] != '\0') {
        p.field_mask |= DDOFI_TRANSPORT_FIELD_PROVIDER;
        p.provider = args->provider;
    }
    if (method == DDSTORE_METHOD_OFI_SPLIT) {
        p.field_mask |= DDOFI_TRANSPORT_FIELD_HANDSHAKE;
        p.handshake_dir = str_or_empty(m, DDSTORE_OPEN_FIELD_HANDSHAKE,
                                       args->handshake_dir);
        p.exchange_ns = str_or_empty(m, DDSTORE_OPEN_FIELD_HANDSHAKE,
                                     args->exchange_ns);
        p.n_core = (m & DDSTORE_OPEN_FIELD_HANDSHAKE) ? args->n_core : 0;
    }
    return ddofi_transport_create(&args->comm, &p, transport_p);
#endif
    (void)args;
    (void)transport_p;
    return dds_error(-DDS_ENOSYS,
                     "method %d needs libfabric, and this build of ddstore "
                     "has none (built without libfabric or with "
                     "--config=noofi); use method 0",
                     method);
}

static int open_method(const ddstore_open_params_t *p, int *method_p)
{
    if (!(p->field_mask & DDSTORE_OPEN_FIELD_METHOD))
        return ddstore_method_from_env(method_p);
    *method_p = p->method;
    return 0;
}

int ddstore_transport_create(const ddstore_open_params_t *params,
                             dds_transport_t *transport_p)
{
    int method = 0, rc;
    if (params == NULL || transport_p == NULL)
        return dds_error(-DDS_EINVAL, "ddstore_transport_create: NULL argument");
    rc = open_method(params, &method);
    if (rc < 0)
        return rc;
    switch (method) {
    case DDSTORE_METHOD_MPI:
#ifdef HAVE_MPI
        if (!(params->field_mask & DDSTORE_OPEN_FIELD_MPI_COMM) ||
            params->mpi_comm == NULL)
            return dds_error(-DDS_EINVAL,
                             "method 0 (MPI RMA) needs an MPI communicator, "
                             "got a '%s' communicator; use method 1 or 2",
                             str_or_empty(params->field_mask,
                                          DDSTORE_OPEN_FIELD_COMM_KIND,
                                          params->comm_kind)[0]
                                 ? params->comm_kind
                                 : "non-MPI");
        return ddmpi_transport_create(*(const MPI_Comm *)params->mpi_comm,
                                      transport_p);
#else
        return dds_error(-DDS_ENOSYS,
                         "method 0 (MPI RMA) needs MPI, and this build of "
                         "ddstore has none (pyddstore.HAVE_MPI is False); "
                         "use method 1 or 2");
#endif
    case DDSTORE_METHOD_OFI:
    case DDSTORE_METHOD_OFI_SPLIT:
        return make_ofi(method, params, transport_p);
    default:
        return dds_error(-DDS_EINVAL,
                         "method: expected 0 (MPI RMA), 1 (libfabric) or 2 "
                         "(libfabric, split jobs), got %d",
                         method);
    }
}

int ddstore_method_from_env(int *method_p)
{
    /* core's registry: DDSTORE_METHOD, enum 0|1|2, default 0 */
    const char *v = NULL;
    char *end = NULL;
    long long m;
    int rc;
    if (method_p == NULL)
        return dds_error(-DDS_EINVAL, "ddstore_method_from_env: NULL argument");
    dds_config_register_core();
    rc = dds_config_get_string("DDSTORE_METHOD", &v);
    if (rc == -DDS_ENOENT)
        v = getenv("DDSTORE_METHOD");
    else if (rc < 0)
        return rc;
    if (v == NULL || *v == '\0')
        v = "0";
    m = strtoll(v, &end, 10);
    if (end == v || *end != '\0' || m < 0 || m > 2)
        return dds_error(-DDS_EINVAL,
                         "DDSTORE_METHOD='%s': expected 0, 1 or 2", v);
    *method_p = (int)m;
    return 0;
}

int ddstore_open(const ddstore_open_params_t *params, dds_store_t **store_p)
{
    dds_store_params_t sp;
    dds_transport_t tr;
    int rc, have_tr;

    memset(&sp, 0, sizeof sp);
    if (params == NULL || store_p == NULL) {
        if (params != NULL && (params->field_mask & DDSTORE_OPEN_FIELD_COMM)) {
            dds_comm_t c = params->comm;
            dds_comm_destroy(&c);
        }
        return dds_error(-DDS_EINVAL, "ddstore_open: NULL argument");
    }
    *store_p = NULL;
    sp.field_mask = DDS_STORE_PARAM_COMM | DDS_STORE_PARAM_TRANSPORT;
    if (params->field_mask & DDSTORE_OPEN_FIELD_COMM) {
        sp.comm = params->comm;
    } else if ((params->field_mask & DDSTORE_OPEN_FIELD_MPI_COMM) &&
               params->mpi_comm != NULL) {
#ifdef HAVE_MPI
        rc = ddmpi_comm_create(*(const MPI_Comm *)params->mpi_comm, &sp.comm);
        if (rc < 0)
            return rc;
#else
        return dds_error(-DDS_ENOSYS,
                         "ddstore_open: an MPI communicator, and this build "
                         "of ddstore has no MPI");
#endif
    } else {
        return dds_error(-DDS_EINVAL,
                         "ddstore_open: no communicator (set comm or "
                         "mpi_comm)");
    }

    {
        /* the transport sees the communicator ddstore_open holds */
        ddstore_open_params_t tp = *params;
        tp.comm = sp.comm;
        memset(&tr, 0, sizeof tr);
        rc = ddstore_transport_create(&tp, &tr);
    }
    have_tr = rc == 0;
    rc = dds_comm_agree(&sp.comm, rc);
    if (rc < 0) {
        if (have_tr && tr.ops && tr.ops->destroy)
            tr.ops->destroy(tr.ctx);
        dds_comm_destroy(&sp.comm);
        return rc;
    }
    sp.transport = tr;
    /* GPU memory operations (lazy: nothing is probed until a GPU buffer is
     * used); none in a build without GPU support: the host path */
    if (!(params->field_mask & DDSTORE_OPEN_FIELD_NO_GPU)) {
        if (ddstore_gpu_memsys_create(&sp.memsys) == 0)
            sp.field_mask |= DDS_STORE_PARAM_MEMSYS;
        else
            dds_error_clear();
    }
    /* ownership of comm, transport and memsys moves to the store, even on
     * failure */
    return dds_store_create(&sp, store_p);
}

/* ---- names -------------------------------------------------------------- */

const char *ddstore_mem_kind_name(dds_mem_kind_t k)
{
    switch (k) {
    case DDS_MEM_HOST: return "host";
    case DDS_MEM_CUDA: return "cuda";
    case DDS_MEM_ROCM: return "rocm";
    default: return "unknown";
    }
}

int ddstore_dtype_from_name(const char *s, dds_dtype_t *dt_p)
{
    int i;
    if (s == NULL || dt_p == NULL)
        return dds_error(-DDS_EINVAL, "ddstore_dtype_from_name: NULL argument");
    if (strncmp(s, "torch.", 6) == 0)   /* str(torch.bfloat16) */
        s += 6;
    if (strcmp(s, "half") == 0)
        s = "float16";
    for (i = 0; i < DDS_DTYPE_COUNT; i++) {
        const char *n = dds_dtype_name((dds_dtype_t)i);
        if (n != NULL && strcmp(n, s) == 0) {
            *dt_p = (dds_dtype_t)i;
            return 0;
        }
    }
    if (strcmp(s, "bool_") == 0) {
        *dt_p = DDS_DTYPE_BOOL;
        return 0;
    }
    return -DDS_ETYPE;
}
