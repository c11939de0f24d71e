/* ddstore-ofi: one-sided reads over libfabric, as a small standalone library.
 *
 * Depends on libfabric only (no ddstore-core, no MPI, no GPU runtime).  An
 * unrelated program can link it alone; ddstore's method-1 transport is a thin
 * adapter over it (ddstore-ofi/transport/).
 *
 * Objects (opaque, symmetric lifecycles; every close/deregister accepts NULL):
 *
 *   ddofi_fabric_t   provider + fabric + domain chosen from the parameters
 *                    (PROVIDER, IFACE, NIC_MAP ...: see Parameters)
 *   ddofi_ep_t       one RDM endpoint with its completion queue and address
 *                    vector.  A reader posts reads on it; a server endpoint
 *                    (DDOFI_EP_SERVE) is the target of other processes'
 *                    reads and, where the provider needs it, is driven by a
 *                    background progress thread that sleeps on a wait object
 *                    (never a spinning core).
 *   ddofi_mr_t       a memory registration (host memory or device memory
 *                    given as libfabric hmem iface + device id)
 *   ddofi_peer_t     a peer's address inserted into one endpoint
 *   ddofi_remote_t   a peer's exported region (base, key, size), a plain value
 *
 * Exchange: the library never moves addresses or keys itself.  The caller
 * gets opaque blobs (ddofi_ep_address, ddofi_mr_export), moves them however
 * it likes (MPI allgather, files, pipes, sockets), and turns them back into
 * handles on the other side (ddofi_peer_insert, ddofi_remote_import).
 *
 * Typical use:
 *
 *   server:  ddofi_fabric_open(&fp, &fab);
 *            ddofi_ep_open(fab, &(ddofi_ep_params_t){.field_mask =
 *                          DDOFI_EP_FIELD_FLAGS, .flags = DDOFI_EP_SERVE}, &srv);
 *            ddofi_mr_register(fab, &(ddofi_mr_params_t){... .ep = srv,
 *                          .access = DDOFI_ACCESS_REMOTE_READ}, &mr);
 *            send ddofi_ep_address(srv) and ddofi_mr_export(mr) to readers
 *   reader:  ddofi_fabric_open(&fp, &fab); ddofi_ep_open(fab, NULL, &ep);
 *            ddofi_peer_insert(ep, addr_blob, len, &peer);
 *            ddofi_remote_import(mr_blob, len, &remote);
 *            ddofi_read(ep, ops, nops, NULL);
 *
 * Errors: every function that can fail returns 0 or a negative code: a
 * negative errno (-EINVAL, -ENOMEM, -ETIMEDOUT, -ENOSYS ...) or -DDOFI_E*
 * below (from 256).  ddofi_strerror(rc) describes the code;
 * ddofi_last_error() holds the detail of the last failure on the calling
 * thread (which provider, which interface, the provider's completion error
 * message ...).  The library never exits, aborts or prints: messages go to
 * the sink set with ddofi_log_set_sink (none by default).
 *
 * Fork: objects are bound to the process that opened them.  In a child
 * created by fork() they are unusable (calls return -DDOFI_EFORKED); the
 * child opens a new fabric/endpoint and may close the inherited handles
 * (which then only frees the child's copy of the memory; the parent's
 * provider objects are untouched).  Call ddofi_env_prepare(1) before
 * libfabric starts when children will use libfabric (FORK_WORKERS).
 *
 * Thread-safety: see each object.  In short: a fabric may be shared by every
 * thread; endpoints may be shared too (reads from several threads on one
 * endpoint are correct, each call reaps its own completions), but one
 * endpoint per thread scales better; MR/peer/remote calls are thread-safe.
 */
#ifndef DDSTORE_OFI_H
#define DDSTORE_OFI_H

/* DDOFI_API marks the public API.  The library is compiled with
 * -fvisibility=hidden; a shared build for C users defines DDOFI_BUILD_SHARED
 * (or DDSTORE_BUILD_SHARED) and exports exactly these functions.  Linked
 * statically into a host (ddstore's Python extension), they stay hidden. */
#if (defined(DDOFI_BUILD_SHARED) || defined(DDSTORE_BUILD_SHARED)) && \
    (defined(__GNUC__) || defined(__clang__))
#define DDOFI_API __attribute__((visibility("default")))
#else
#define DDOFI_API
#endif

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Version                                                             */

/* DDOFI_VERSION "x.y.z" and DDOFI_VERSION_MAJOR/_MINOR/_PATCH, generated
 * from ddstore-ofi/VERSION by the build (Bazel: dds_version_header; CMake:
 * cmake/ddstore_version.cmake) beside this header. */
#include "ddstore/ofi_version.h"
#define DDOFI_VERSION_STRING DDOFI_VERSION

/* "MAJOR.MINOR.PATCH" of the library actually linked (VERSION file). */
DDOFI_API const char *ddofi_version(void);

/* API version of the libfabric library linked at run time ("1.17";
 * fi_version()).  The pointer is thread-local. */
DDOFI_API const char *ddofi_libfabric_version(void);

/* ------------------------------------------------------------------ */
/* Errors                                                              */

enum {
    DDOFI_EBASE = 256,
    DDOFI_ENOPROV = 256,   /* no provider/domain fits the request          */
    DDOFI_EPROVIDER = 257, /* a libfabric call or a read failed (detail:
                              fi_strerror / the provider's message)       */
    DDOFI_ECONFIG = 258,   /* bad parameter or environment value (detail
                              names the variable)                          */
    DDOFI_EBLOB = 259,     /* address/region blob truncated, corrupted or
                              from another provider / library version      */
    DDOFI_EFORKED = 260,   /* object inherited across fork(): open a new
                              fabric/endpoint in this process              */
    DDOFI_ENOHMEM = 261,   /* device memory given, provider lacks FI_HMEM  */
    DDOFI_EPEER = 262,     /* peer unreachable, refused or gone            */
    DDOFI_ELAST = 263
};

/* Static description of a code (positive or negative accepted).  Never
 * NULL.  Thread-safe. */
DDOFI_API const char *ddofi_strerror(int rc);

/* Detail of the last failure recorded on the calling thread ("" if none).
 * Thread-local; valid until the next ddofi call on this thread. */
DDOFI_API const char *ddofi_last_error(void);

/* ------------------------------------------------------------------ */
/* Logging: silent unless a sink is set.                               */

typedef enum {
    DDOFI_LOG_ERROR = 0,
    DDOFI_LOG_WARN = 1,
    DDOFI_LOG_INFO = 2,
    DDOFI_LOG_DEBUG = 3,
    DDOFI_LOG_TRACE = 4
} ddofi_log_level_t;

/* Receives one formatted message (no trailing newline, no prefix).  May be
 * called from any thread, including the library's progress threads. */
typedef void (*ddofi_log_fn)(void *arg, ddofi_log_level_t level,
                             const char *msg);

/* Set the sink and the most verbose level passed to it (messages above
 * `max_level` cost one load and one compare).  fn == NULL: silent (the
 * default).  Call before other threads use the library. */
DDOFI_API void ddofi_log_set_sink(ddofi_log_fn fn, void *arg, ddofi_log_level_t max_level);

/* ------------------------------------------------------------------ */
/* Parameters: every environment variable the library reads            */

/* Each setting is declared once (name, type, default, accepted values,
 * help), in the style of libfabric's FI_<PROV>_<NAME>: the variable is
 * <prefix><name>, e.g. DDOFI_PROGRESS.  The prefix is "DDOFI_" unless the
 * host sets its own.  A field of ddofi_fabric_params_t whose bit is set in
 * field_mask is never read from the environment. */
typedef enum {
    DDOFI_PARAM_BOOL = 0,   /* 0/1, true/false, yes/no, on/off             */
    DDOFI_PARAM_SIZE = 1,   /* count; K/M/G/T suffixes (x1024)             */
    DDOFI_PARAM_DOUBLE = 2,
    DDOFI_PARAM_STRING = 3,
    DDOFI_PARAM_ENUM = 4    /* one of `choices` ("auto|0|1")               */
} ddofi_param_type_t;

typedef struct ddofi_param {
    const char *name;       /* suffix: "PROGRESS"                          */
    ddofi_param_type_t type;
    const char *defval;     /* default as text; NULL = unset               */
    const char *choices;    /* ENUM only, else NULL                        */
    const char *help;       /* one line                                    */
} ddofi_param_t;

#define DDOFI_PARAM_PREFIX_DEFAULT "DDOFI_"

/* Set the prefix of every variable (NULL: the default; at most 31 bytes),
 * and the parameters the host supplies itself (NULL-terminated names, or
 * NULL): those are no longer read from the environment (their default
 * applies unless the host passes a value) and ddofi_param_env_name reports
 * them as -ENOENT, so a host lists only what the library reads.  An entry
 * "NAME=VARIABLE" also names the host's own variable for that setting, which
 * the library's messages then use ("PROVIDER=MYAPP_FABRIC").  Call before
 * the first fabric is opened.  Returns 0 or -EINVAL (too long, unknown
 * name).  Thread-safe. */
DDOFI_API int ddofi_param_set_prefix(const char *prefix, const char *const *host_owned);

/* The declared parameters: index 0..count-1; NULL past the end. */
DDOFI_API size_t ddofi_param_count(void);
DDOFI_API const ddofi_param_t *ddofi_param_at(size_t i);

/* The environment variable of parameter `name` ("PROGRESS" ->
 * "DDOFI_PROGRESS") into buf.  0, -EINVAL (not a parameter), -ENOENT
 * (host-owned: not read from the environment), -ENOSPC. */
DDOFI_API int ddofi_param_env_name(const char *name, char *buf, size_t cap);

/* ------------------------------------------------------------------ */
/* Process environment (call before libfabric starts in this process)  */

/* Apply libfabric settings that must be in the environment before
 * libfabric initialises (it reads them once, at the first fi_getinfo):
 *   - always: FI_CXI_DISABLE_HOST_REGISTER=1 unless already set (GPU-runtime
 *     registration of CXI host buffers fails after fork);
 *   - fork_workers != 0: FI_MR_CACHE_MONITOR=memhooks when it is unset or
 *     "kdreg2" (kdreg2 does not work in forked processes; memhooks does).
 * fork_workers < 0: read parameter FORK_WORKERS (0/1, default 0).
 * Returns 0, -DDOFI_ECONFIG (bad FORK_WORKERS value), or 1 when it had
 * to change a setting after this library already started libfabric in
 * this process (applied, but probably too late; logged as a warning).
 * Not thread-safe (setenv): call from the main thread, early. */
DDOFI_API int ddofi_env_prepare(int fork_workers);

/* ------------------------------------------------------------------ */
/* Fabric: provider and domain selection                               */

typedef struct ddofi_fabric ddofi_fabric_t;

/* Progress policy for server endpoints. */
typedef enum {
    DDOFI_PROGRESS_AUTO = 0,  /* thread where the provider needs target
                                 progress (quirk table / data_progress)   */
    DDOFI_PROGRESS_THREAD = 1,/* always run a progress thread            */
    DDOFI_PROGRESS_NONE = 2   /* never: the caller calls ddofi_ep_progress */
} ddofi_progress_t;

enum {
    DDOFI_FABRIC_FIELD_PROVIDER = 1u << 0,
    DDOFI_FABRIC_FIELD_IFACE = 1u << 1,
    DDOFI_FABRIC_FIELD_NIC_MAP = 1u << 2,
    DDOFI_FABRIC_FIELD_LOCAL_RANK = 1u << 3,
    DDOFI_FABRIC_FIELD_SINGLE_NODE = 1u << 4,
    DDOFI_FABRIC_FIELD_LOCAL_ONLY = 1u << 5,
    DDOFI_FABRIC_FIELD_HMEM = 1u << 6,
    DDOFI_FABRIC_FIELD_MAX_READ_BYTES = 1u << 7,
    DDOFI_FABRIC_FIELD_READ_TIMEOUT = 1u << 8,
    DDOFI_FABRIC_FIELD_PROGRESS = 1u << 9,
    DDOFI_FABRIC_FIELD_MAX_OUTSTANDING = 1u << 10,
    DDOFI_FABRIC_FIELD_IFACE_SOURCE = 1u << 11
};

enum {
    DDOFI_FABRIC_HMEM_OFF = 0,
    DDOFI_FABRIC_HMEM_REQUIRE = 1,
    DDOFI_FABRIC_HMEM_PREFER = 2
};

/* Every field is used only when its bit is set in field_mask; otherwise the
 * parameter named beside it is read from the environment (<prefix><NAME>,
 * see ddofi_param_set_prefix), else the default.
 * Strings are copied; the struct may be freed after ddofi_fabric_open. */
typedef struct ddofi_fabric_params {
    uint64_t field_mask;
    /* PROVIDER (default "auto"): auto | cxi | verbs | efa | shm | tcp |
     * hsn | any libfabric provider string ("tcp;ofi_rxm", "udp;ofi_rxd",
     * "sockets" ...).  tcp = "tcp;ofi_rxm", verbs = "verbs;ofi_rxm",
     * hsn = "tcp;ofi_rxm" on a Slingshot interface (domain hsn*).
     * auto tries cxi > verbs > efa > shm (only when single_node) >
     * tcp;ofi_rxm and takes the first that has a fitting domain. */
    const char *provider;
    /* IFACE: libfabric domain name to use ("cxi0", "mlx5_0", "eth0",
     * "hsn0", "lo").  Wins over nic_map when both are given. */
    const char *iface;
    /* NIC_MAP: local rank -> domain, comma-separated entries
     * "LOCALRANK:DOMAIN" ("0:cxi0,1:cxi1,2:cxi2,3:cxi3"); an entry "*:DOMAIN"
     * matches ranks without their own entry; a list of bare names
     * ("cxi0,cxi1") is used round-robin (local_rank % count). */
    const char *nic_map;
    /* Local rank for nic_map (default: SLURM_LOCALID,
     * OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, PMI_LOCAL_RANK,
     * PALS_LOCAL_RANKID, else 0). */
    int local_rank;
    /* Non-zero when every peer runs on this node: lets auto pick shm
     * (default 0). */
    int single_node;
    /* Non-zero: socket providers (tcp, udp, net, sockets) use 127.0.0.1
     * only (FI_SOURCE + node "127.0.0.1").  Unset: LOCAL_ONLY = auto | 0 |
     * 1 (default auto: when single_node and no iface/nic_map is given). */
    int local_only;
    /* Device memory (FI_HMEM): DDOFI_FABRIC_HMEM_OFF (default),
     * DDOFI_FABRIC_HMEM_REQUIRE (only providers with FI_HMEM), or
     * DDOFI_FABRIC_HMEM_PREFER (with FI_HMEM where a NIC provider - cxi,
     * verbs, efa - offers it, else without). */
    int hmem;
    /* MAX_READ_BYTES: split reads above this size (default 0 = the
     * endpoint's max_msg_size only).  K/M/G suffixes accepted. */
    size_t max_read_bytes;
    /* READ_TIMEOUT_S: a ddofi_read that has not completed after this
     * many seconds returns -ETIMEDOUT (default 120; <= 0 or inf: wait for
     * ever). */
    double read_timeout_s;
    /* PROGRESS = auto | thread | none (default auto). */
    ddofi_progress_t progress;
    /* MAX_OUTSTANDING: reads in flight per ddofi_read call
     * (default 0 = the endpoint's transmit queue size). */
    size_t max_outstanding;
    /* What the caller calls the iface / nic_map it gives, in messages (an
     * environment variable of its own, "FABRIC_IFACE"; default "iface
     * parameter" / "nic_map parameter"). */
    const char *iface_source;
} ddofi_fabric_params_t;

/* Choose a provider and domain and open them.
 * params may be NULL (everything from the environment).
 * Returns 0, -DDOFI_ENOPROV (nothing fits: the detail lists the requested
 * provider/interface and every provider/domain found that can do fi_read),
 * -DDOFI_ECONFIG (bad value; detail names the variable), -DDOFI_EPROVIDER,
 * -ENOMEM.  On success *fabric_p is owned by the caller
 * (ddofi_fabric_close).  Thread-safe. */
DDOFI_API int ddofi_fabric_open(const ddofi_fabric_params_t *params,
                      ddofi_fabric_t **fabric_p);

/* Close: every endpoint and MR of the fabric must be closed first (else
 * -EBUSY and nothing is closed).  NULL accepted.  In a forked child only the
 * child's memory is released. */
DDOFI_API int ddofi_fabric_close(ddofi_fabric_t *fabric);

/* What was chosen (pointers valid until the fabric is closed). */
typedef struct ddofi_fabric_attr {
    const char *provider;       /* "tcp;ofi_rxm", "shm", "cxi" ...        */
    const char *fabric;         /* libfabric fabric name                  */
    const char *domain;         /* libfabric domain name ("cxi0", "lo")   */
    const char *quirks;         /* name of the quirk-table entry used     */
    int mr_local;               /* FI_MR_LOCAL: read destinations must be
                                   registered (ddofi_read_op_t.dst_mr)    */
    int mr_virt_addr;           /* FI_MR_VIRT_ADDR                        */
    int mr_prov_key;            /* FI_MR_PROV_KEY                         */
    int mr_endpoint;            /* FI_MR_ENDPOINT                         */
    int mr_hmem;                /* FI_MR_HMEM: device buffers need a
                                   registration even for local use        */
    int hmem;                   /* FI_HMEM capability                     */
    int progress_thread;        /* server endpoints run a progress thread */
    size_t max_msg_size;        /* endpoint max message size              */
    size_t max_read_bytes;      /* reads are split above this             */
    size_t max_outstanding;     /* reads in flight per call               */
    size_t tx_size;             /* transmit queue depth                   */
    double read_timeout_s;
    int direct_reads;           /* same-node host reads go straight
                                   through process_vm_readv (shm; see
                                   parameter CMA)                        */
    int local_only;             /* a socket provider bound to 127.0.0.1
                                   (local_only asked for and applicable)  */
} ddofi_fabric_attr_t;

/* Fill *attr_p.  Returns 0 or -EINVAL. */
DDOFI_API int ddofi_fabric_query(const ddofi_fabric_t *fabric, ddofi_fabric_attr_t *attr_p);

/* ------------------------------------------------------------------ */
/* Endpoints                                                           */

typedef struct ddofi_ep ddofi_ep_t;

enum {
    DDOFI_EP_SERVE = 1u << 0   /* target of remote reads; progress thread
                                  when the provider needs one            */
};

enum { DDOFI_EP_FIELD_FLAGS = 1u << 0 };

typedef struct ddofi_ep_params {
    uint64_t field_mask;
    unsigned flags;            /* DDOFI_EP_*; default 0 (reader only)    */
} ddofi_ep_params_t;

/* Open an endpoint (caps FI_RMA|FI_READ, plus FI_REMOTE_READ when SERVE).
 * params may be NULL.  Returns 0, -DDOFI_EPROVIDER, -ENOMEM,
 * -DDOFI_EFORKED.  Thread-safe. */
DDOFI_API int ddofi_ep_open(ddofi_fabric_t *fabric, const ddofi_ep_params_t *params,
                  ddofi_ep_t **ep_p);

/* Stop the progress thread, close.  MRs bound to it (FI_MR_ENDPOINT) must
 * be deregistered first (else -EBUSY).  No read may be running on it.
 * NULL accepted. */
DDOFI_API int ddofi_ep_close(ddofi_ep_t *ep);

/* Largest address blob (bytes): size buffers for ddofi_ep_address with it,
 * or exchange fixed-size slots of this size. */
#define DDOFI_ADDR_BLOB_MAX 320

/* Write this endpoint's address blob to buf (capacity *len_p in, bytes
 * written out).  -ENOSPC (with *len_p = size needed) when too small.  A
 * reader endpoint's address changes when a timed-out read fences it (see
 * ddofi_read); a server endpoint's never changes. */
DDOFI_API int ddofi_ep_address(const ddofi_ep_t *ep, void *buf, size_t *len_p);

/* The length of the address blob that starts at `blob` (read from its
 * header, so a blob kept in a fixed-size slot of `cap` bytes can be handed
 * on at its own length), or 0 when no blob of this library starts there or
 * it does not fit in cap.  Not a validity check: ddofi_peer_insert does
 * that. */
DDOFI_API size_t ddofi_addr_blob_len(const void *blob, size_t cap);

/* A peer's address inserted into an endpoint (libfabric fi_addr_t). */
typedef uint64_t ddofi_peer_t;

/* Insert a peer's address blob (from ddofi_ep_address in another process
 * or this one) into `ep`.  The blob is validated (magic, version, provider):
 * -DDOFI_EBLOB names what does not match.  Thread-safe. */
DDOFI_API int ddofi_peer_insert(ddofi_ep_t *ep, const void *blob, size_t len,
                      ddofi_peer_t *peer_p);

/* Check a peer's address blob as ddofi_peer_insert would (magic, version,
 * checksum, provider, address format) without inserting it: for callers
 * that insert peers when they first read from them and want a wrong blob
 * refused up front.  0 or -DDOFI_EBLOB naming what does not match. */
DDOFI_API int ddofi_peer_check(const ddofi_ep_t *ep, const void *blob, size_t len);

/* Remove a peer from the endpoint (no read to it may be in flight). */
DDOFI_API int ddofi_peer_remove(ddofi_ep_t *ep, ddofi_peer_t peer);

/* Drive the endpoint's progress once (reap completions, serve remote
 * reads).  Needed only with DDOFI_PROGRESS_NONE.  Thread-safe. */
DDOFI_API int ddofi_ep_progress(ddofi_ep_t *ep);

/* ------------------------------------------------------------------ */
/* Memory registration                                                 */

typedef struct ddofi_mr ddofi_mr_t;

/* Memory interfaces: the values of libfabric's enum fi_hmem_iface. */
enum {
    DDOFI_HMEM_SYSTEM = 0,
    DDOFI_HMEM_CUDA = 1,
    DDOFI_HMEM_ROCR = 2,
    DDOFI_HMEM_ZE = 3
};

enum {
    DDOFI_ACCESS_LOCAL = 1u << 0,       /* destination of local reads    */
    DDOFI_ACCESS_REMOTE_READ = 1u << 1  /* target of remote reads        */
};

enum {
    DDOFI_MR_FIELD_IFACE = 1u << 0,
    DDOFI_MR_FIELD_DEVICE = 1u << 1,
    DDOFI_MR_FIELD_EP = 1u << 2
};

typedef struct ddofi_mr_params {
    uint64_t field_mask;
    void *buf;                 /* may be NULL when len == 0              */
    size_t len;
    unsigned access;           /* DDOFI_ACCESS_*                         */
    int iface;                 /* DDOFI_HMEM_* (default SYSTEM)          */
    int device;                /* device ordinal for iface != SYSTEM     */
    ddofi_ep_t *ep;            /* server endpoint to bind to where the
                                  provider wants FI_MR_ENDPOINT (required
                                  then for REMOTE_READ registrations)     */
} ddofi_mr_params_t;

/* Register memory.  Honours FI_MR_LOCAL, FI_MR_VIRT_ADDR, FI_MR_PROV_KEY
 * (else a unique key is chosen), FI_MR_ENDPOINT (bind to params->ep and
 * enable), FI_MR_ALLOCATED (the memory must be allocated), FI_MR_HMEM.
 * len == 0 gives a valid MR that covers nothing (exports size 0).
 * Device memory without FI_HMEM: -DDOFI_ENOHMEM.  The caller keeps the
 * memory alive until ddofi_mr_deregister.  Thread-safe. */
DDOFI_API int ddofi_mr_register(ddofi_fabric_t *fabric, const ddofi_mr_params_t *params,
                      ddofi_mr_t **mr_p);

/* NULL accepted.  No read into/out of it may be in flight. */
DDOFI_API int ddofi_mr_deregister(ddofi_mr_t *mr);

/* Region blob: fixed size. */
#define DDOFI_MR_BLOB_SIZE 48

/* Write the export blob (DDOFI_MR_BLOB_SIZE bytes) of a REMOTE_READ
 * registration: base address, key, size, addressing mode, provider tag. */
DDOFI_API int ddofi_mr_export(const ddofi_mr_t *mr, void *blob);

/* A peer's region as seen by a reader.  Plain value: copy it freely.
 * Fill it with ddofi_remote_import (fields are documented for logging and
 * bounds checks; do not construct it by hand). */
typedef struct ddofi_remote {
    uint64_t base;        /* peer's virtual address of byte 0            */
    uint64_t key;         /* remote key                                  */
    uint64_t size;        /* bytes readable                              */
    uint64_t addr0;       /* RMA address of byte 0: base (FI_MR_VIRT_ADDR)
                             or 0 (offsets relative to the region)       */
    uint32_t prov_tag;    /* provider tag the blob was made with         */
    uint32_t flags;       /* DDOFI_REMOTE_*                              */
} ddofi_remote_t;

enum {
    DDOFI_REMOTE_VIRT_ADDR = 1u << 0, /* RMA addresses are virtual addresses */
    DDOFI_REMOTE_DEVICE = 1u << 1     /* the region is device memory         */
};

/* Decode a region blob.  -DDOFI_EBLOB when truncated/corrupted/foreign. */
DDOFI_API int ddofi_remote_import(const void *blob, size_t len, ddofi_remote_t *remote_p);

/* ------------------------------------------------------------------ */
/* Batched reads                                                       */

typedef struct ddofi_read_op {
    ddofi_peer_t peer;              /* owner of the remote region          */
    const ddofi_remote_t *remote;   /* its region                          */
    uint64_t offset;                /* bytes from the region's start       */
    void *dst;                      /* local destination                   */
    size_t len;                     /* bytes (0: nothing to do)            */
    ddofi_mr_t *dst_mr;             /* registration covering dst..dst+len,
                                       or NULL (required with FI_MR_LOCAL
                                       and for device destinations)       */
} ddofi_read_op_t;

/* Optional per-call figures (added to, never reset). */
typedef struct ddofi_read_stats {
    uint64_t reads;       /* fi_read calls that were accepted            */
    uint64_t bytes;
    uint64_t eagain;      /* fi_read returned -FI_EAGAIN                 */
    uint64_t ns_post;     /* time in fi_read                             */
    uint64_t ns_wait;     /* time reaping completions                    */
} ddofi_read_stats_t;

/* Read every op: each is split at the fabric's max_read_bytes, posted with
 * at most max_outstanding reads in flight (FI_EAGAIN is handled by driving
 * progress), and completions are reaped with per-request contexts.  Every
 * op is validated before anything is posted (offset+len within the remote
 * size, dst_mr present where needed and covering dst).  On a failure
 * nothing more is posted, everything in flight is drained, and the first
 * error is returned with the provider's message in ddofi_last_error()
 * (-DDOFI_EPROVIDER, -DDOFI_EPEER ...).  When the reads have not finished
 * after read_timeout_s: -ETIMEDOUT.  Reads still in flight then are fenced
 * before it returns on a reader endpoint (not DDOFI_EP_SERVE) of a provider
 * whose reads the reader's endpoint carries (tcp, verbs, cxi, efa ...): its
 * provider objects are closed, so no late completion can write into any
 * destination, and new ones are opened with the same peers (the endpoint's
 * address changes; other threads' reads on it that were in flight fail or
 * time out too).  The destinations are the caller's again at once.  Not
 * fenced, and their destinations may still be written until the endpoint is
 * closed: reads on a server endpoint, and shm's (its endpoints stay open:
 * a peer serving a read into a vanished one can crash; its reads from a
 * stopped peer are CMA copies by the reader and complete anyway, a timeout
 * there means a full command queue, with nothing in flight).  Thread-safe (several threads may read on one endpoint).  stats may be
 * NULL. */
DDOFI_API int ddofi_read(ddofi_ep_t *ep, const ddofi_read_op_t *ops, size_t nops,
               ddofi_read_stats_t *stats);

#ifdef __cplusplus
}
#endif
#endif
