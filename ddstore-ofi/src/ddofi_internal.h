/* ddstore-ofi internals: shared by the sources in src/ and the unit tests.  Not
 * installed; not part of the public API. */
#ifndef DDOFI_INTERNAL_H
#define DDOFI_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "ddstore/ofi.h"

#define DDOFI_FI_VERSION FI_VERSION(1, 9)

/* ---------------- errors and logging (ddofi_error.c) ---------------- */

/* Record the detail for this thread and return rc. */
int ddofi_error(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Same, with a libfabric return code: detail gets ": <fi_strerror> (fi rc)"
 * appended and the return value is ddofi_rc_from_fi(fi_rc). */
int ddofi_error_fi(int fi_rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ddofi_error_clear(void);

/* The one translation from libfabric's error space (negative or positive
 * FI_E* / errno) to ours: -ENOMEM, -ENOSYS, -ETIMEDOUT, -EINVAL, -EAGAIN,
 * -DDOFI_ENOPROV (FI_ENODATA), -DDOFI_EPEER (connection refused/reset,
 * unreachable, no such peer), else -DDOFI_EPROVIDER. */
int ddofi_rc_from_fi(int fi_rc);

extern _Atomic int ddofi_log_max_level;  /* -1 = silent */
void ddofi_log_write(ddofi_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
#define DDOFI_LOG(level, ...)                                                  \
    do {                                                                       \
        if ((int)(level) <= atomic_load_explicit(&ddofi_log_max_level,         \
                                                 memory_order_relaxed))        \
            ddofi_log_write((level), __VA_ARGS__);                             \
    } while (0)

/* ---------------- configuration (ddofi_config.c) ---------------- */

/* Parse a byte size: decimal with optional K/M/G/T suffix (x1024, "KiB"
 * and "KB" too).  Returns 0 or -EINVAL. */
int ddofi_parse_size(const char *s, size_t *out);
/* Parse a non-negative double ("60", "0.5").  0 or -EINVAL. */
int ddofi_parse_double(const char *s, double *out);
/* Parse a boolean (0/1, true/false, yes/no, on/off).  0 or -EINVAL. */
int ddofi_parse_bool(const char *s, int *out);

/* Look local_rank up in a nic_map string (see ofi.h).  Writes the domain
 * name to out (cap bytes).  Returns 0, -ENOENT (no entry for this rank),
 * -EINVAL (malformed: detail set). */
int ddofi_nic_map_lookup(const char *map, int local_rank, char *out, size_t cap);

/* Parameters (ddofi_param.c): the value of a declared parameter from the
 * environment (<prefix><name>), else its default.  0, or -DDOFI_ECONFIG
 * naming the variable and the value; -EINVAL for an undeclared name or the
 * wrong type.  ENUM: the position of the value in `choices`. */
int ddofi_param_get_bool(const char *name, int *value_p);
int ddofi_param_get_size(const char *name, size_t *value_p);
int ddofi_param_get_double(const char *name, double *value_p);
int ddofi_param_get_string(const char *name, const char **value_p);
int ddofi_param_get_enum(const char *name, int *index_p);
/* What to call a parameter in messages: its variable (<prefix><name>), or
 * for a host-owned one the host's variable when the host named it
 * ("PROVIDER=DDSTORE_FABRIC"), else the bare name.  Returns buf. */
const char *ddofi_param_label(const char *name, char *buf, size_t cap);

/* Test seam (tests only; no environment variable): behave as if every
 * provider required registered read destinations (FI_MR_LOCAL), so that the
 * paths verbs and efa need run on shm/tcp too. */
extern _Atomic int ddofi_test_mr_local;

/* Local rank from the launcher's environment, or 0. */
int ddofi_env_local_rank(void);

/* Resolved settings (params, then env, then defaults). */
typedef struct ddofi_settings {
    char provider[64];       /* as given, lower-cased aliases kept      */
    char iface[64];          /* "" = any                                */
    char iface_source[48];   /* "DDOFI_IFACE", "nic_map parameter" ...     */
    int local_rank;
    int single_node;
    int local_only;
    int hmem;
    size_t max_read_bytes;
    double read_timeout_s;
    ddofi_progress_t progress;
    size_t max_outstanding;
} ddofi_settings_t;

int ddofi_settings_resolve(const ddofi_fabric_params_t *p, ddofi_settings_t *s);

/* ---------------- provider quirks (ddofi_quirks.c) ---------------- */

enum {
    DDOFI_Q_NO_HINTS = 1u << 0,       /* fi_getinfo with NULL hints, filter  */
    DDOFI_Q_CLEAR_INJECT = 1u << 1,   /* clear FI_INJECT in tx op_flags      */
    DDOFI_Q_MR_BIND = 1u << 2,        /* bind+enable MRs even if the domain
                                         does not say FI_MR_ENDPOINT        */
    DDOFI_Q_MR_RELATIVE = 1u << 3,    /* RMA offsets relative to the MR even
                                         when VIRT_ADDR is not reported     */
    DDOFI_Q_SOCKETS = 1u << 4,        /* IP-socket based: honours local_only */
    DDOFI_Q_SINGLE_NODE = 1u << 5,    /* only reaches this node (shm)        */
    DDOFI_Q_HMEM_PREFER = 1u << 6,    /* NIC reads device memory: FI_HMEM is
                                         worth asking for (hmem = PREFER)   */
    DDOFI_Q_CMA = 1u << 7,            /* same-node peers: host reads may go
                                         straight through process_vm_readv,
                                         many rows per system call         */
    DDOFI_Q_KEEP_EP = 1u << 8         /* never close an endpoint under reads
                                         that timed out (a peer serving a
                                         read into a vanished endpoint can
                                         crash: shm): such reads are parked,
                                         not fenced                       */
};

typedef enum {
    DDOFI_QP_FROM_ATTR = 0,   /* thread iff data_progress == MANUAL          */
    DDOFI_QP_THREAD = 1,      /* needs target progress whatever it reports   */
    DDOFI_QP_HARDWARE = 2     /* hardware completes reads on its own         */
} ddofi_quirk_progress_t;

typedef enum {
    DDOFI_QW_FD = 0,          /* progress thread sleeps in fi_cq_sread on a
                                 FI_WAIT_FD CQ: woken by incoming requests */
    DDOFI_QW_BACKOFF = 1,     /* no cross-process wake-up: poll with an
                                 exponential backoff sleep up to a cap     */
    DDOFI_QW_BELL = 2         /* single-node providers: backoff, and when
                                 idle park on the endpoint's bell, which
                                 readers ring (ddofi_bell.c)               */
} ddofi_quirk_wait_t;

typedef struct ddofi_quirk {
    const char *name;         /* table key (for logs)                      */
    const char *match;        /* provider name: exact, or core name before
                                 ';' (e.g. "tcp" matches "tcp;ofi_rxm")    */
    unsigned flags;           /* DDOFI_Q_*                                 */
    ddofi_quirk_progress_t progress;
    ddofi_quirk_wait_t wait;
    unsigned backoff_max_us;  /* cap of the backoff sleep                  */
    const char *note;
} ddofi_quirk_t;

/* The entry for a provider name (never NULL: a default entry matches
 * everything). */
const ddofi_quirk_t *ddofi_quirk_lookup(const char *prov_name);
/* Table access for tools/tests. */
size_t ddofi_quirk_count(void);
const ddofi_quirk_t *ddofi_quirk_at(size_t i);

/* Whether a server endpoint of this provider needs a progress thread. */
int ddofi_quirk_needs_thread(const ddofi_quirk_t *q, int data_progress_manual,
                             ddofi_progress_t policy);

/* Provider alias -> libfabric provider string and interface prefix.
 * "tcp" -> "tcp;ofi_rxm"; "verbs" -> "verbs;ofi_rxm"; "hsn" ->
 * "tcp;ofi_rxm" + iface prefix "hsn"; others unchanged.  Returns 0 or
 * -EINVAL for an empty string. */
int ddofi_provider_alias(const char *given, char *prov, size_t cap,
                         const char **iface_prefix_p);

/* ---------------- splitting (ddofi_read.c) ---------------- */

/* Number of fi_read posts for len bytes with chunk size max (0 = no
 * split); 0 for len == 0. */
size_t ddofi_split_count(size_t len, size_t max);

/* ---------------- blobs (ddofi_mr.c / ddofi_ep.c) ---------------- */

uint32_t ddofi_fnv1a32(const void *p, size_t n);
uint32_t ddofi_prov_tag(const char *prov_name);

/* ---------------- /dev/shm (ddofi_shm.c) ---------------- */

/* Remove, once per process, the shm regions ("/dev/shm/<pid>:<d>:<e>") of
 * processes that no longer exist and that this user owns. */
void ddofi_shm_clean_stale(void);
/* Before an shm endpoint's region is created (under ddofi_shm_lock): 0, or
 * -ENOSPC with a detail naming /dev/shm, the space needed and free and the
 * ways out.  Cleans stale regions first. */
int ddofi_shm_space_check(void);
/* Serialises shm endpoint creation in this process around the check. */
void ddofi_shm_lock(void);
void ddofi_shm_unlock(void);
/* Why shm's fi_getinfo found nothing, when /dev/shm is too small for it:
 * writes a sentence to buf and returns 1; else 0. */
int ddofi_shm_explain(char *buf, size_t cap);
/* The pid of a region file name "<pid>:<d>:<e>" (decimal), else 0. */
int ddofi_shm_region_pid(const char *name);

/* ---------------- objects ---------------- */

struct ddofi_fabric {
    pid_t pid;                     /* opener: other pids may not use it    */
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    const ddofi_quirk_t *quirk;
    ddofi_settings_t set;
    uint64_t mr_mode;
    int hmem_on;                   /* opened with FI_HMEM                  */
    int progress_thread;
    size_t max_read;               /* effective split size (>0)            */
    size_t max_outstanding;
    uint32_t prov_tag;
    _Atomic uint64_t next_key;     /* requested keys without PROV_KEY      */
    _Atomic long refs;             /* open endpoints + MRs                 */
    /* endpoints closed while reads they gave up on (timeouts) may still be
     * processed by peers: their provider objects stay open until the
     * fabric closes (a peer serving a read into a vanished endpoint can
     * crash, e.g. shm) */
    pthread_mutex_t zlock;
    struct ddofi_ep *zombies;
    char prov_name[64];
    char fabric_name[128];
    char domain_name[64];
};

struct ddofi_ep {
    ddofi_fabric_t *fab;
    pid_t pid;
    unsigned flags;
    struct fid_ep *ep;
    struct fid_cq *cq;
    struct fid_av *av;
    int cq_wait_fd;                /* CQ opened with FI_WAIT_FD            */
    ddofi_quirk_wait_t wait_mode;  /* how a progress thread sleeps         */
    size_t park_ms;                /* PARK_MS (bell wait)                  */
    size_t backoff_max_us;         /* BACKOFF_MAX_US (0: the quirk's)      */
    _Atomic long mr_refs;          /* MRs bound to it                       */
    /* direct CMA reads (quirk DDOFI_Q_CMA): 1 usable, 0 off/refused */
    _Atomic int cma;
    _Atomic int *pid_by_addr;      /* DDOFI_PID_TABLE entries, by peer     */
    /* Lazy reader endpoints (CMA providers): the provider objects (and,
     * for shm, the 16 MiB region in /dev/shm that a process ending with
     * _exit leaves behind) are created only when a read needs the
     * provider.  Peers are then our indices into these tables. */
    int lazy;
    _Atomic int live;              /* provider objects exist              */
    pthread_mutex_t live_lock;     /* inserts and materialisation          */
    unsigned char **lazy_blob;     /* DDOFI_PID_TABLE address blobs        */
    size_t nlazy;
    _Atomic uint64_t *fiaddr;      /* DDOFI_PID_TABLE: index -> fi_addr_t  */
    /* progress thread */
    pthread_t thread;
    int thread_running;
    _Atomic int stop;
    _Atomic uint64_t progress_loops;
    _Atomic uint64_t parks;        /* times the thread parked on its bell   */
    _Atomic uint64_t bell_wakes;   /* ... and a reader's ring woke it       */
    /* progress bell (ddofi_bell.c): a serving endpoint's own (wait mode
     * DDOFI_QW_BELL), and a reader's view of its peers' bells (single-node
     * providers), DDOFI_PID_TABLE entries by peer key */
    struct ddofi_bell *bell;
    int bell_fd;
    struct { int pid; int32_t fd; uint64_t tag; } *bell_peer;
    _Atomic uintptr_t *bell_map;   /* 0 not yet mapped, 1 none, else mapped */
    struct ddofi_bell **bell_old;  /* mappings of replaced keys, till close */
    size_t nbell_old, cap_bell_old;
    _Atomic int bell_logged;
    unsigned char addr[DDOFI_ADDR_BLOB_MAX];
    size_t addr_len;               /* raw provider address                 */
    /* peers' process ids (from their address blobs), for providers whose
     * peers are processes of this node (quirk SINGLE_NODE): a dead peer is
     * detected without waiting for the timeout */
    pthread_mutex_t peer_lock;
    struct { uint64_t addr; int pid; } *peer_pids;
    size_t npeer_pids, cap_peer_pids;
    /* Fencing (reader endpoints of providers without KEEP_EP): a
     * read that times out with reads in flight closes the provider objects
     * (after which nothing can write into its destinations) and opens new
     * ones before it returns.  Reads, progress and peer changes hold
     * use_lock shared; the fence and materialisation hold it exclusive
     * (writer-preferring).  gen counts the provider objects' generations. */
    pthread_rwlock_t use_lock;
    uint64_t gen;
    int fence;                     /* this endpoint is fenced on timeouts   */
    /* Non-lazy endpoints: every peer's blob in insertion order, to insert
     * them again (same fi_addr_t) into the AV of new provider objects. */
    struct ddofi_peer_rec { unsigned char *blob; fi_addr_t fa; int removed; } *prec;
    size_t nprec, cap_prec;
    /* batches abandoned after a timeout (endpoints not fenced): freed at
     * close */
    pthread_mutex_t ab_lock;
    struct ddofi_batch *abandoned;
    struct ddofi_ep *znext;        /* fabric's zombie list                */
};

/* The fi_addr_t of a peer handle. */
static inline fi_addr_t ddofi_ep_fiaddr(ddofi_ep_t *ep, ddofi_peer_t peer)
{
    return ep->lazy ? (fi_addr_t)atomic_load_explicit(&ep->fiaddr[peer], memory_order_acquire)
                    : (fi_addr_t)peer;
}

/* Make sure the provider objects of a lazy endpoint exist. */
int ddofi_ep_ensure_live(ddofi_ep_t *ep);

/* Fence a reader endpoint after a timed-out read posted on generation
 * `gen` (taken under use_lock shared, released before the call): close the
 * provider objects, so that nothing they carried can write into a
 * destination any more, and open new ones with the same peers.  A no-op
 * when another thread fenced that generation already.  Returns 0 or the
 * error of reopening (the endpoint then reopens on its next read). */
int ddofi_ep_fence(ddofi_ep_t *ep, uint64_t gen);

/* Close an endpoint's provider objects and free it (no checks). */
int ddofi_ep_destroy_now(ddofi_ep_t *ep);
/* Free the memory of an endpoint inherited across fork (no provider calls). */
void ddofi_ep_free_inherited(ddofi_ep_t *ep);

struct ddofi_mr {
    ddofi_fabric_t *fab;
    ddofi_ep_t *ep;                /* bound endpoint (FI_MR_ENDPOINT)      */
    pid_t pid;
    struct fid_mr *mr;
    void *desc;
    void *buf;
    size_t len;
    unsigned access;
    int iface;
    uint64_t key;
};

/* Hand reaped completion entries to their batches. */
void ddofi_cq_dispatch(ddofi_ep_t *ep, const struct fi_cq_entry *ent, size_t n);
/* Read one error entry (after -FI_EAVAIL) and hand it to its batch. */
void ddofi_cq_error(ddofi_ep_t *ep);
/* Free batches abandoned by timeouts (after the endpoint is closed). */
void ddofi_abandoned_free(ddofi_ep_t *ep);

/* Reap completions on ep's CQ (shared by ddofi_read, ddofi_ep_progress and
 * the progress thread).  Returns the number reaped (>= 0) or a negative
 * code from the CQ itself. */
int ddofi_cq_reap(ddofi_ep_t *ep);

#define DDOFI_PID_TABLE 4096

/* ---------------- progress bell (ddofi_bell.c) ---------------- */

typedef struct ddofi_bell ddofi_bell_t;
/* A serving endpoint's bell (a page of a memfd): 0 or -errno. */
int ddofi_bell_create(ddofi_ep_t *ep);
/* Its descriptor and tag for the address blob (-1 / 0: none). */
void ddofi_bell_export(const ddofi_ep_t *ep, int32_t *fd_p, uint64_t *tag_p);
/* A reader's tables of its peers' bells: 0 or -ENOMEM. */
int ddofi_bell_tables(ddofi_ep_t *ep);
/* Peer `key` (pid) has the bell fd/tag (fd -1: none). */
void ddofi_bell_note_peer(ddofi_ep_t *ep, uint64_t key, int pid, int32_t fd, uint64_t tag);
/* After posting a read to peer: wake its progress thread if parked (maps
 * its bell on first use). */
void ddofi_bell_ring(ddofi_ep_t *ep, ddofi_peer_t peer);
/* Progress thread, sleeping on the bell: arm (raise the flag; returns the
 * ring count to wait on), poll, then wait (until a ring, a stop or max_ns;
 * 1 when rung; lowers the flag; `park`: counted as a park) or disarm (the
 * poll did work). */
uint32_t ddofi_bell_arm(ddofi_ep_t *ep);
int ddofi_bell_wait(ddofi_ep_t *ep, uint32_t seq, uint64_t max_ns, int park);
void ddofi_bell_disarm(ddofi_ep_t *ep);
/* Wake the endpoint's own parked thread (close). */
void ddofi_bell_wake_self(ddofi_ep_t *ep);
/* Rings the endpoint's own bell received. */
uint64_t ddofi_bell_rings(const ddofi_ep_t *ep);
/* Unmap and close everything (also in a forked child). */
void ddofi_bell_free(ddofi_ep_t *ep);
/* Test seam: readers refuse to map any bell (as if /proc said EACCES). */
extern _Atomic int ddofi_test_bell_refuse;
/* Test access: the progress thread's loops, parks and ring wake-ups. */
void ddofi_ep_progress_counts(ddofi_ep_t *ep, uint64_t *loops, uint64_t *parks,
                              uint64_t *bell_wakes);

/* Process id recorded for a peer (0 when unknown). */
int ddofi_peer_pid(ddofi_ep_t *ep, ddofi_peer_t peer);

/* Check that an object belongs to this process. */
int ddofi_check_pid(pid_t owner, const char *what);

uint64_t ddofi_now_ns(void);

#endif
