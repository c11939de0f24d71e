/* libddstore: the backend table, the one list of methods and transports.
 *
 * Each row is a method number (DDSTORE_METHOD, PyDDStore(method=)), its
 * transport's package, what it needs (an MPI communicator, a handshake
 * directory), what it can do (readers per thread, forked readers), and the
 * package's functions: create the transport, register its settings, its
 * version.  ddstore_open(), DDSTORE_METHOD's validation, `ddstore-info`
 * (versions, settings) and pyddstore (pyddstore._core.backends()) iterate
 * the table; nothing above the hub names a transport.  Rows of transports
 * that this build lacks stay in the table (built = 0) so that their method
 * numbers give a clear error naming what is missing.
 *
 * Adding a transport: its own package (implementing core's transport.h),
 * one row in src/ddstore_backends.c, one build option (docs/design.md).
 */
#ifndef DDSTORE_BACKENDS_H
#define DDSTORE_BACKENDS_H

#include <stddef.h>
#include <stdint.h>

#include "ddstore/comm.h"
#include "ddstore/open.h"
#include "ddstore/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a row needs and can do (ddstore_backend_t.flags). */
enum {
    /* the transport is made over an MPI communicator (mpi_comm) */
    DDSTORE_BACKEND_NEEDS_MPI_COMM = 1u << 0,
    /* split jobs: needs handshake_dir; the core job writes meta.json and
     * runs as one group (pyddstore.torch.DistDataset) */
    DDSTORE_BACKEND_NEEDS_HANDSHAKE = 1u << 1,
    /* reader_open gives each worker thread its own endpoint
     * (ThreadDataLoader reads in parallel) */
    DDSTORE_BACKEND_THREAD_READERS = 1u << 2,
    /* forked DataLoader workers read only with DDSTORE_FORK_WORKERS=1 set
     * before the transport started (libfabric's memory hooks) */
    DDSTORE_BACKEND_FORK_NEEDS_ENV = 1u << 3,
    /* serves only ranks in one process (a test transport): more processes
     * fail ddstore_open naming the row */
    DDSTORE_BACKEND_ONE_PROCESS = 1u << 4,
    /* never chosen by default (ddstore_backend_default): tests only */
    DDSTORE_BACKEND_TEST_ONLY = 1u << 5
};

typedef struct ddstore_backend {
    int method;              /* DDSTORE_METHOD / PyDDStore(method=)          */
    const char *name;        /* "mpi", "ofi", "ofi-split", "loop"            */
    const char *library;     /* the transport's package, "ddstore-mpi"       */
    const char *help;        /* one line: what it is                         */
    uint64_t flags;          /* DDSTORE_BACKEND_*                            */
    int built;               /* 0: this build lacks it (why_not_built)       */
    const char *why_not_built;
    /* Make the transport over params->comm (set, borrowed), collective.
     * NULL when the row has create_comm instead. */
    int (*create)(const struct ddstore_backend *row,
                  const ddstore_open_params_t *params,
                  dds_transport_t *transport_p);
    /* A transport that needs only the communicator (borrowed). */
    int (*create_comm)(const dds_comm_t *comm, dds_transport_t *transport_p);
    void (*config_register)(void);   /* its settings (may be NULL)          */
    const char *(*version)(void);    /* its package's version (may be NULL) */
    /* The run-time library under it, for ddstore-info ("mpi library"):
     * writes a one-line description into buf; may be NULL. */
    const char *runtime_name;
    void (*runtime_version)(char *buf, size_t cap);
} ddstore_backend_t;

/* Rows, in method order: index 0..count-1 (NULL past the end). */
DDS_API size_t ddstore_backend_count(void);
DDS_API const ddstore_backend_t *ddstore_backend_at(size_t i);
/* The row of a method / a name, or NULL. */
DDS_API const ddstore_backend_t *ddstore_backend_find(int method);
DDS_API const ddstore_backend_t *ddstore_backend_by_name(const char *name);

/* The method PyDDStore(method=None) uses when DDSTORE_METHOD is unset: the
 * first row (test-only rows and split-job rows aside) whose needs the
 * communicator meets (have_mpi_comm: an MPI communicator was given). */
DDS_API int ddstore_backend_default(int have_mpi_comm);

/* "0 (MPI RMA), 1 (libfabric), ...": every row, for messages. */
DDS_API void ddstore_backend_list(char *buf, size_t cap);

/* Check a method number against the table: 0, or -DDS_EINVAL naming the
 * value and the methods there are (`what` starts the message, e.g.
 * "method"), or -DDS_ENOSYS when its row is not built. */
DDS_API int ddstore_backend_check(int method, const char *what);

/* Register every settings table: core's, the file communicator's and each
 * built row's (idempotent). */
DDS_API void ddstore_config_register_all(void);

/* Versions for ddstore-info: "libddstore", "ddstore-core", "ddstore-gpu",
 * then each row's package (once; "not built (...)" when absent) and
 * run-time library.  Fills up to `cap` entries, returns how many there are. */
typedef struct ddstore_version_entry {
    char name[64];
    char version[256];
} ddstore_version_entry_t;
DDS_API size_t ddstore_versions(ddstore_version_entry_t *out, size_t cap);

/* ---- the MPI lifetime of a process (ddstore-mpi; -DDS_ENOSYS without) --- */

/* MPI_Init_thread(MPI_THREAD_MULTIPLE) unless MPI is initialised;
 * *started_p = 1 when this call started it (ddmpi_init). */
DDS_API int ddstore_mpi_init(int *provided_p, int *started_p);
/* MPI_Finalize when ddstore_mpi_init started MPI (ddmpi_finalize_if_ours);
 * 0 without MPI. */
DDS_API int ddstore_mpi_finalize_if_ours(void);
/* The store's communicator over an MPI communicator ((const MPI_Comm *),
 * collective: a dup). */
DDS_API int ddstore_comm_from_mpi(const void *mpi_comm, dds_comm_t *comm_p);
/* The same over the caller's MPI communicator itself (ddmpi_comm_borrow:
 * no dup, not collective; the caller keeps it valid while comm_p lives). */
DDS_API int ddstore_comm_borrow_mpi(const void *mpi_comm, dds_comm_t *comm_p);

#ifdef __cplusplus
}
#endif
#endif
