/* ddstore-ofi: core's transport interface (ddstore/transport.h) over the
 * standalone ddstore-ofi library (method 1).
 *
 * One fabric per process; one server endpoint per process that is the
 * target of every variable's reads (with a progress thread where the
 * provider needs target progress); one reader endpoint per reader (the
 * default reader, one per reader_open: per thread, or per forked process
 * with a fabric of its own).  Server addresses are exchanged once at
 * creation with an allgather over core's communicator; each variable's
 * registration (base, key, size) with one allgather in region_create.
 *
 * Caps: THREAD_SAFE | READERS | FORK | LOCAL_SELF, plus HMEM_CUDA /
 * HMEM_ROCM when the provider was opened with FI_HMEM.
 */
#ifndef DDSTORE_OFI_TRANSPORT_H
#define DDSTORE_OFI_TRANSPORT_H


#include "ddstore/visibility.h"
#include <stddef.h>
#include <stdint.h>

#include "ddstore/comm.h"
#include "ddstore/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    DDOFI_TRANSPORT_FIELD_NIC_MAP = 1u << 0,
    DDOFI_TRANSPORT_FIELD_PROVIDER = 1u << 1,
    DDOFI_TRANSPORT_FIELD_HANDSHAKE = 1u << 2,
    DDOFI_TRANSPORT_FIELD_SETTINGS = 1u << 3
};

struct dds_settings;

typedef struct ddofi_transport_params {
    uint64_t field_mask;
    /* Local rank -> domain map (see ddstore/ofi.h); "" or unset:
     * DDSTORE_NIC_MAP.  The local rank is this rank's index among the
     * communicator's ranks on the same host. */
    const char *nic_map;
    /* DDSTORE_FABRIC value; unset: the environment (default auto). */
    const char *provider;
    /* Method 2 (split jobs), when DDOFI_TRANSPORT_FIELD_HANDSHAKE is set:
     *   n_core == 0  a core job: method 1, plus one record file per
     *                variable in handshake_dir (ddstore/handshake_transport.h)
     *                written by rank 0 when the variable is added, removed
     *                when it is freed;
     *   n_core > 0   a reader job of n_core core ranks: no shard of its own,
     *                no collective, no server endpoint; the fabric opens at
     *                the first join, with the provider the core job uses.
     * handshake_dir: "" or NULL = DDSTORE_HANDSHAKE_DIR (required).
     * exchange_ns: run namespace ("" or NULL = DDSTORE_EXCHANGE_NS; at most
     * 63 bytes): a core job writes it into its records, a reader with a
     * namespace accepts only records carrying the same one. */
    const char *handshake_dir;
    const char *exchange_ns;
    int n_core;
    /* DDOFI_TRANSPORT_FIELD_SETTINGS: core's settings as the caller read
     * them once (ddstore/settings.h; copied); else read at creation. */
    const struct dds_settings *settings;
} ddofi_transport_params_t;

/* Create the method-1 (or method-2) transport.  Collective over `comm`:
 * every rank opens the same provider (a rank that cannot fails every rank
 * with its reason) - except a method-2 reader (n_core > 0), which makes no
 * collective call and opens its fabric at the first join.
 * `comm` is copied (its ops and ctx pointers, not its state): it must stay
 * valid until the transport is destroyed (a store owns both and destroys
 * the transport first).  params may be NULL.
 *
 * Environment (core's registry, listed by ddstore-info --env):
 * DDSTORE_FABRIC, FABRIC_IFACE, DDSTORE_NIC_MAP, DDSTORE_OFI_PROGRESS,
 * DDSTORE_OFI_PROGRESS_WAIT, DDSTORE_OFI_PARK_MS, DDSTORE_OFI_BACKOFF_MAX_US,
 * DDSTORE_OFI_MAX_OUTSTANDING, DDSTORE_OFI_HMEM, DDSTORE_OFI_CMA,
 * DDSTORE_OFI_THP, DDSTORE_OFI_RX_BUFFERS, DDSTORE_FABRIC_LOCAL_ONLY,
 * DDSTORE_FORK_WORKERS, and
 * core's DDSTORE_READ_TIMEOUT_S (time without progress) /
 * DDSTORE_MAX_READ_BYTES.
 *
 * Returns 0 or -DDS_E*: -DDS_ECONFIG (bad value, or no provider/domain
 * fits: the detail lists what exists), -DDS_ETRANSPORT (provider failure),
 * -DDS_ENOMEM, -DDS_EINVAL.  On failure *transport_p is untouched. */
DDS_API int ddofi_transport_create(const dds_comm_t *comm, const ddofi_transport_params_t *params,
                           dds_transport_t *transport_p);

/* Register the adapter's environment variables with core's registry
 * (idempotent; ddofi_transport_create calls it). */
DDS_API void ddofi_transport_register_config(void);

/* ddofi_env_prepare with ddstore's settings, at start-up before libfabric
 * or MPI initialise: registers the adapter's settings (the DDSTORE_OFI_
 * prefix) and passes DDSTORE_FORK_WORKERS from core's registry.  0, or a
 * negative DDS_E* code with dds_error() detail (a bad DDSTORE_FORK_WORKERS:
 * what does not depend on it is applied all the same). */
DDS_API int ddofi_transport_env_prepare(void);

/* The stores and readers of a process share one fabric (and domain), one
 * server endpoint and one reading endpoint per set of fabric parameters,
 * created by the first and closed with the last.  How many fabrics and
 * shared endpoints this process holds open now (a debug/test hook; NULL
 * pointers accepted). */
DDS_API void ddofi_transport_shared_counts(int *fabrics_p, int *endpoints_p);

/* DDSTORE_FORK_WORKERS (the adapter's declaration, read with its settings):
 * whether a forked child opens a reader of its own.  0 and *on_p, or the
 * first bad value of the adapter's settings (-DDS_ECONFIG naming it). */
DDS_API int ddofi_transport_fork_workers(int *on_p);

/* Translate a ddstore-ofi return code to a core code (0 stays 0), copying
 * ddofi_last_error() into dds_last_error() with `what` as a prefix. */
DDS_API int ddofi_transport_error(int ddofi_rc, const char *what);

#ifdef __cplusplus
}
#endif
#endif
