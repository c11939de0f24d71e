/* libddstore: open a store by method, the one place that knows every backend.
 *
 *   method 0  MPI RMA (ddstore-mpi), needs an MPI communicator
 *   method 1  libfabric RDMA (ddstore-ofi's transport adapter)
 *   method 2  libfabric with a file handshake in handshake_dir (split jobs)
 *
 * ddstore_open() makes the communicator (when given an MPI one), the
 * transport for the method, and the lazy GPU memory system, then creates the
 * store (store.h).  It is what pyddstore.PyDDStore(), tools/ddstore_bench and
 * examples/c/ open their stores with.
 *
 *   ddstore_env_prepare();                       // first, before MPI_Init
 *   MPI_Init(&argc, &argv);
 *   ddstore_open_params_t p = {0};
 *   MPI_Comm world = MPI_COMM_WORLD;
 *   p.field_mask = DDSTORE_OPEN_FIELD_METHOD | DDSTORE_OPEN_FIELD_MPI_COMM;
 *   p.method = 0;
 *   p.mpi_comm = &world;
 *   dds_store_t *store;
 *   int rc = ddstore_open(&p, &store);           // collective
 *   ...
 *   dds_store_destroy(store);                    // collective
 */
#ifndef DDSTORE_OPEN_H
#define DDSTORE_OPEN_H

#include <stddef.h>
#include <stdint.h>

#include "ddstore/comm.h"
#include "ddstore/errors.h"
#include "ddstore/memops.h"
#include "ddstore/settings.h"
#include "ddstore/store.h"
#include "ddstore/transport.h"
#include "ddstore/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The hub's version (libddstore/VERSION), at run time. */
DDS_API const char *ddstore_version(void);

/* ---- process start-up ---------------------------------------------------- */

/* Apply the libfabric settings that must be in the environment before
 * libfabric (or an MPI built on it) initialises: ddstore-ofi's
 * ddofi_env_prepare with ddstore's settings (FI_CXI_DISABLE_HOST_REGISTER=1
 * unless set; FI_MR_CACHE_MONITOR=memhooks under DDSTORE_FORK_WORKERS=1).  A
 * build without libfabric sets FI_CXI_DISABLE_HOST_REGISTER=1 unless set (its
 * MPI may run on libfabric) and returns 0.
 * Returns 0, 1 (applied after libfabric had started: probably too late,
 * logged), or -DDS_ECONFIG (bad DDSTORE_FORK_WORKERS; detail in
 * dds_last_error()).  Not thread-safe (setenv): call from the main thread,
 * first thing.  pyddstore._core calls it when it is imported. */
DDS_API int ddstore_env_prepare(void);

/* DDSTORE_FORK_WORKERS as the libfabric adapter declares it (read now):
 * whether a child created by fork() opens a reader of its own.  0 and
 * *on_p; without libfabric 0 and *on_p = 0; else the adapter's first bad
 * setting (-DDS_ECONFIG naming it). */
DDS_API int ddstore_fork_workers(int *on_p);

/* ---- opening a store ----------------------------------------------------- */

enum {
    DDSTORE_METHOD_MPI = 0,        /* MPI RMA                                */
    DDSTORE_METHOD_OFI = 1,        /* libfabric                              */
    DDSTORE_METHOD_OFI_SPLIT = 2   /* libfabric, file handshake (split jobs) */
};

enum {
    DDSTORE_OPEN_FIELD_METHOD = 1u << 0,    /* method                        */
    DDSTORE_OPEN_FIELD_COMM = 1u << 1,      /* comm                          */
    DDSTORE_OPEN_FIELD_MPI_COMM = 1u << 2,  /* mpi_comm                      */
    DDSTORE_OPEN_FIELD_NIC_MAP = 1u << 3,   /* nic_map                       */
    DDSTORE_OPEN_FIELD_HANDSHAKE = 1u << 4, /* handshake_dir, exchange_ns,
                                               n_core (method 2)             */
    DDSTORE_OPEN_FIELD_PROVIDER = 1u << 5,  /* provider (methods 1, 2)       */
    DDSTORE_OPEN_FIELD_COMM_KIND = 1u << 6, /* comm_kind                     */
    DDSTORE_OPEN_FIELD_NO_GPU = 1u << 7,    /* no GPU memory system          */
    DDSTORE_OPEN_FIELD_SETTINGS = 1u << 8   /* settings                      */
};

typedef struct ddstore_open_params {
    uint64_t field_mask;       /* DDSTORE_OPEN_FIELD_* that are set          */
    /* DDSTORE_METHOD_*; unset: DDSTORE_METHOD from the environment (core's
     * registry; default 0). */
    int method;
    /* The store's communicator; ownership moves to ddstore_open (to the
     * store, or destroyed on failure).  Unset: made from mpi_comm
     * (ddmpi_comm_create). */
    dds_comm_t comm;
    /* (const MPI_Comm *), borrowed for the call: method 0's window
     * communicator, and the store's communicator when comm is unset.  MPI
     * types stay out of this header. */
    const void *mpi_comm;
    const char *comm_kind;     /* "mpi", "file", "torch", ... (messages)     */
    const char *nic_map;       /* comma-separated interfaces; "" = none      */
    const char *handshake_dir; /* method 2                                   */
    const char *exchange_ns;   /* method 2; "" = none                        */
    int n_core;                /* method 2: ranks of the core job (0 = all)  */
    const char *provider;      /* libfabric provider (else DDSTORE_FABRIC)   */
    /* core's settings (ddstore/settings.h) for the transport; ddstore_open
     * reads them once and sets this itself */
    const struct dds_settings *settings;
} ddstore_open_params_t;

/* Open a store: communicator, transport for the method, GPU memory system
 * (lazy: the GPU runtime is probed on the first GPU operation; none in a
 * build without GPU support, or with DDSTORE_OPEN_FIELD_NO_GPU), then
 * dds_store_create.  Collective over the communicator; every rank gets the
 * same result (a rank that cannot make its transport fails every rank).
 * Returns 0 and *store_p (destroy with dds_store_destroy), or a negative
 * DDS_E* code with the detail in dds_last_error(): -DDS_EINVAL (bad
 * params, no communicator, method 0 without an MPI communicator),
 * -DDS_ENOSYS (method not built: no MPI / no libfabric), the transport's
 * and dds_store_create's codes.  No Python calls; thread-safe (different
 * communicators). */
DDS_API int ddstore_open(const ddstore_open_params_t *params, dds_store_t **store_p);

/* The method DDSTORE_METHOD names (core's registry, an int; unset or
 * empty: 0), checked against the backend table (backends.h).  0, or
 * -DDS_ECONFIG naming the value and listing the methods. */
DDS_API int ddstore_method_from_env(int *method_p);
/* The same check of a value already read (dds_settings_t.method). */
DDS_API int ddstore_method_check(int64_t value, int *method_p);

/* Only the transport of ddstore_open (for callers that build the store
 * themselves).  Collective over params->comm, which must be set (borrowed).
 * 0 and *transport_p (ownership to the caller), or a negative DDS_E*. */
DDS_API int ddstore_transport_create(const ddstore_open_params_t *params,
                             dds_transport_t *transport_p);

/* The lazy GPU memory system ddstore_open hands to the store: wraps
 * ddstore-gpu's ddgpu_memsys_create(), called the first time a store moves
 * GPU memory (a CPU-only job never initialises CUDA/HIP).
 * DDSTORE_GPU_STAGING_BYTES sets the staging limit.  0 and *ms (ownership to
 * the caller: ms->ops->destroy(ms->ctx), or to a store), or -DDS_ENOGPU in
 * a build without GPU support, -DDS_ENOMEM. */
DDS_API int ddstore_gpu_memsys_create(dds_memsys_t *ms);
/* The same with core's settings already read (ddstore_open hands down the
 * struct it read once; NULL reads DDSTORE_GPU_STAGING_BYTES here). */
DDS_API int ddstore_gpu_memsys_open(const dds_settings_t *settings,
                                    dds_memsys_t *ms);

/* ---- names --------------------------------------------------------------- */

/* "host", "cuda", "rocm", or "unknown". */
DDS_API const char *ddstore_mem_kind_name(dds_mem_kind_t kind);
/* dtype from its name: dds_dtype_name()'s names, plus "torch.<name>",
 * "half" (float16) and "bool_" (numpy).  0, or -DDS_ETYPE. */
DDS_API int ddstore_dtype_from_name(const char *name, dds_dtype_t *dtype_p);

#ifdef __cplusplus
}
#endif
#endif
