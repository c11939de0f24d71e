/* ddstore-ofi adapter: objects shared by the method-1 transport
 * (ddofi_tr_transport.c) and method 2's handshake (ddofi_tr_method2.c).
 * Internal: not installed, not part of any public API. */
#ifndef DDSTORE_OFI_TR_INTERNAL_H
#define DDSTORE_OFI_TR_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "ddstore/comm.h"
#include "ddstore/handshake_transport.h"
#include "ddstore/ofi.h"
#include "ddstore/ofi_transport.h"
#include "ddstore/settings.h"
#include "ddstore/transport.h"

/* The adapter's settings, declared once (settings.h).  The library's own
 * parameters that ddstore does not own here are mirrored into the registry
 * as DDSTORE_OFI_<NAME> (ddofi_tr_settings.c). */
#define DDOFI_TR_SETTINGS(X)                                                   \
    X(fabric, "DDSTORE_FABRIC", STRING, "auto", NULL, "ofi",                   \
      "libfabric provider for methods 1/2: auto, cxi, verbs, efa, shm, tcp, "  \
      "hsn (tcp;ofi_rxm on a Slingshot interface) or any provider string")     \
    X(iface, "FABRIC_IFACE", STRING, NULL, NULL, "ofi",                        \
      "libfabric domain (interface) to use, e.g. cxi0, hsn0, mlx5_0, eth0, "   \
      "lo")                                                                    \
    X(nic_map, "DDSTORE_NIC_MAP", STRING, NULL, NULL, "ofi",                   \
      "local rank -> domain: \"0:cxi0,1:cxi1\" (\"*:dom\" for the rest) or a " \
      "list of names used round-robin")                                        \
    X(local_only, "DDSTORE_FABRIC_LOCAL_ONLY", ENUM, "auto", "auto|0|1",       \
      "ofi",                                                                   \
      "socket providers use 127.0.0.1 only; auto: when every rank is on this " \
      "host and no interface is named")                                        \
    X(hmem, "DDSTORE_OFI_HMEM", ENUM, "auto", "auto|0|1", "ofi",               \
      "open the provider with FI_HMEM (GPU memory): auto = where a NIC "       \
      "provider (cxi, verbs, efa) offers it, 1 = required")                    \
    X(thp, "DDSTORE_OFI_THP", BOOL, "1", NULL, "ofi",                          \
      "same-node direct reads (shm): back shards and registered destinations " \
      "with transparent huge pages (madvise; copies run ~3x faster with 2 "    \
      "MiB pages on both sides)")                                              \
    X(map_shards, "DDSTORE_OFI_MAP_SHARDS", BOOL, "1", NULL, "ofi",            \
      "method 1: host shards live in shared memory (memfd) that the ranks of " \
      "the same host and their forked readers map and read with memcpy, as "   \
      "method 0 does; 0 reads them through libfabric (shm: process_vm_readv)") \
    X(peers, "DDSTORE_OFI_PEERS", ENUM, "lazy", "lazy|eager", "ofi",           \
      "methods 1/2: when a reader puts a rank's address into its endpoint: "   \
      "lazy = at its first read from that rank (a reader holds only the "      \
      "peers it reads from), eager = every rank when the reader opens")        \
    X(fork_workers, "DDSTORE_FORK_WORKERS", BOOL, "0", NULL, "ofi",            \
      "forked DataLoader workers read with methods 1/2: sets "                 \
      "FI_MR_CACHE_MONITOR=memhooks (when unset or kdreg2) before libfabric "   \
      "starts (FI_CXI_DISABLE_HOST_REGISTER=1 is set unless given, either "    \
      "way)")                                                                  \
    X(rx_buffers, "DDSTORE_OFI_RX_BUFFERS", INT, "64", NULL, "ofi",            \
      "methods 1/2 over ofi_rxm (tcp, verbs): receive buffers (16 KiB each) "  \
      "an endpoint posts, set as FI_OFI_RXM_MSG_RX_SIZE before libfabric "     \
      "starts unless that is set (libfabric's default, 4096, costs 64 MiB "    \
      "an endpoint; reads use none); 0 leaves libfabric's default; at most "  \
      "4096")

typedef struct ddofi_tr_settings {
    DDS_SETTINGS_FIELDS(DDOFI_TR_SETTINGS)
} ddofi_tr_settings_t;

/* Register and read the adapter's settings: 0 or -DDS_ECONFIG naming the
 * variable and the value. */
int ddofi_tr_settings_read(ddofi_tr_settings_t *s);

#define HOST_MAX 64

typedef struct ddofi_tr ddofi_tr_t;

typedef struct ddofi_tr_share ddofi_tr_share_t;

typedef struct ddofi_tr_reader {
    ddofi_tr_t *tr;
    int flags;                 /* DDS_READER_*                               */
    int shared;                /* reads on the process's shared endpoint (the
                                  default reader, forked readers); else an
                                  endpoint of its own (reader_open)          */
    ddofi_tr_share_t *share;   /* forked: the child's share it holds, or NULL */
    pid_t pid;                 /* process whose endpoint this is (0: none)   */
    ddofi_fabric_t *fab;       /* tr->fab, or its own (forked)               */
    ddofi_ep_t *ep;
    /* nranks: each rank's peer on `ep`, DDOFI_TR_NO_PEER until the first
     * read from it inserts it (DDSTORE_OFI_PEERS=lazy) or all at open
     * (eager); read and set with __atomic builtins, set under peer_lock */
    ddofi_peer_t *peers;
    pthread_mutex_t peer_lock;
    pthread_mutex_t open_lock; /* lazy (re)open: forked readers, and method-2
                                  readers opened before the first join       */
} ddofi_tr_reader_t;
#define DDOFI_TR_NO_PEER UINT64_MAX /* never a fi_addr_t (FI_ADDR_NOTAVAIL) */

typedef struct ddofi_tr_region {
    ddofi_mr_t *mr;            /* NULL when the shard is empty or joined     */
    ddofi_remote_t *remotes;   /* nranks                                     */
    size_t bytes;
    int joined;                /* method-2 reader: another job's variable    */
    int published;             /* method-2 core: rank 0 wrote its record     */
    int live_slot;             /* method-2 core: slot in the liveness table
                                  (ddofi_tr_live.c), -1: none                 */
    struct ddofi_tr_live_ref {      /* method-2 reader: same-host core ranks      */
        const _Atomic uint64_t *word;
        uint64_t gen;
        int rank;
        int32_t pid;
    } *live;
    int nlive;
    dds_shard_rec_t *shards;   /* method-2 reader: the same-host core ranks'
                                  shard records (nshards = nranks), or NULL:
                                  handed to the store (region_shards)       */
    int nshards;
    struct ddofi_tr_region *prev, *next;
    char name[256];
} ddofi_tr_region_t;

typedef struct ddofi_tr_recv {
    ddofi_mr_t *mr;            /* NULL: the provider needs no registration  */
    ddofi_fabric_t *fab;
    pid_t pid;
} ddofi_tr_recv_t;

/* Method 2's state (handshake_dir given). */
typedef struct ddofi_hs {
    int on;                    /* method 2                                   */
    int n_core;                /* 0: core job; > 0: reader of n_core ranks   */
    char dir[4096];
    char ns[DDOFI_HS_NS_MAX + 1];
    char myhost[HOST_MAX];
    uint32_t mypidns;          /* ddofi_hs_self_pidns()                        */
    uint64_t run_id;           /* core: this job's; reader: the joined job's */
    double join_timeout_s;     /* DDSTORE_HANDSHAKE_TIMEOUT_S                */
    char *hosts;               /* core: nranks x HOST_MAX                    */
    int32_t *pids;             /* core: nranks                               */
    uint64_t *ticks;           /* core: nranks, process start times          */
    char nic_map[256];         /* reader: the creation params' nic_map ("")  */
    int live_ref;              /* core: holds a reference on the liveness table */
    const void **live_maps;    /* reader: n_core core ranks' liveness tables
                                  (mapped at the first join that needs one)  */
} ddofi_hs_t;

struct ddofi_tr {
    dds_comm_t comm;           /* copy; the store owns the communicator     */
    int rank, nranks;
    pid_t pid;
    ddofi_fabric_params_t fparams; /* as opened (forked readers reopen them) */
    char prov[64], domain[64];
    ddofi_tr_share_t *share;   /* fabric, server, reading endpoint shared by
                                  the process's stores (ddofi_tr_share.c)    */
    ddofi_fabric_t *fab;       /* share's; method-2 reader: NULL until the
                                  first join                                 */
    ddofi_fabric_attr_t attr;
    ddofi_ep_t *server;        /* share's; NULL for a method-2 reader        */
    unsigned char *addrs;      /* nranks x addr_stride: address blobs        */
    size_t addr_stride;        /* the longest blob of any rank (<= DDOFI_ADDR_BLOB_MAX) */
    int eager_peers;           /* DDSTORE_OFI_PEERS=eager                    */
    dds_settings_t core_set;   /* core's settings, read once at creation     */
    ddofi_tr_settings_t set;   /* the adapter's, read once at creation       */
    ddofi_tr_reader_t *dflt;
    int need_local_mr;         /* FI_MR_LOCAL                                */
    int thp;                   /* DDSTORE_OFI_THP                            */
    int ready;                 /* fabric, addrs, dflt set (atomic access)    */
    int attaching;             /* method-2 reader: the first join is making
                                  the default reader (under lock)           */
    pthread_t attacher;        /* ... on this thread                         */
    pthread_mutex_t lock;      /* regions list; method-2 reader's first join */
    ddofi_tr_region_t *regions;
    ddofi_hs_t hs;
};

/* Rank i's address blob (addr_stride bytes). */
static inline const unsigned char *ddofi_tr_addr(const ddofi_tr_t *t, int i)
{
    return t->addrs + (size_t)i * t->addr_stride;
}

/* The files of the adapter call downwards only (no circle):
 *   ddofi_tr_transport.c  core's ops, creation, release
 *     -> ddofi_tr_method2.c (method 2's core setup, publish, join)
 *     -> ddofi_tr_reader.c  -> ddofi_tr_share.c  -> ddofi_tr_settings.c
 *   (method2.c calls reader.c, share.c and settings.c too)
 *   ddofi_tr_live.c / ddofi_hs.c: leaves.
 * Same-node shards are core's (ddstore/shard.h): the store allocates,
 * maps and copies them; the adapter only publishes their records for
 * method-2 readers and hands a joined region's records to the store. */

/* ddofi_tr_transport.c */
extern const dds_transport_ops_t ddofi_tr_ops;
void ddofi_tr_fill(ddofi_tr_t *t, dds_transport_t *transport_p);
void ddofi_tr_free(ddofi_tr_t *t);

/* ddofi_tr_settings.c */
/* ddofi_env_prepare with DDSTORE_FORK_WORKERS from `set` (NULL: read now):
 * 0 or a dds error. */
int ddofi_tr_env_prepare(const ddofi_tr_settings_t *set);
/* Core's settings (tp's when given, else read) and the adapter's into t,
 * once, at creation. */
int ddofi_tr_settings_load(ddofi_tr_t *t, const ddofi_transport_params_t *tp);
/* t's settings (ddofi_tr_settings_load) into the library's params. */
int ddofi_tr_read_settings(const ddofi_tr_t *t, const ddofi_transport_params_t *tp,
                           int single_node, int local_rank, ddofi_fabric_params_t *p);
/* The library's log lines into core's logger (once per process). */
void ddofi_tr_log_init(void);

/* ddofi_tr_share.c: one fabric, server endpoint and reading endpoint per
 * process and fabric parameters, counted (see the file's comment).  dds
 * error codes; `what` prefixes the detail. */
int ddofi_tr_share_get(const ddofi_fabric_params_t *p, const char *what, ddofi_tr_share_t **s_p);
void ddofi_tr_share_put(ddofi_tr_share_t *s);
ddofi_fabric_t *ddofi_tr_share_fabric(const ddofi_tr_share_t *s);
/* The share's server / reading endpoint, opened at the first call. */
int ddofi_tr_share_server(ddofi_tr_share_t *s, ddofi_ep_t **ep_p);
int ddofi_tr_share_reader(ddofi_tr_share_t *s, ddofi_ep_t **ep_p);
/* The peer of a server address on the share's reading endpoint (inserted
 * once per process, whichever store asks). */
int ddofi_tr_share_peer(ddofi_tr_share_t *s, const void *blob, size_t len, const char *what,
                        ddofi_peer_t *peer_p);

/* ddofi_tr_reader.c */
/* shared: read on the share's endpoint (t's default reader; forked readers
 * always do), else open an endpoint of its own. */
int ddofi_tr_reader_new(ddofi_tr_t *t, int flags, int shared, int connect_now,
                        ddofi_tr_reader_t **r_p);
void ddofi_tr_reader_free(ddofi_tr_reader_t *r);
/* The reader connected in this process (a forked reader opens here at its
 * first use): 0 or a dds error. */
int ddofi_tr_reader_ready(ddofi_tr_reader_t *r);
/* Put rank `owner`'s server address into the reader's endpoint (once). */
int ddofi_tr_reader_insert(ddofi_tr_reader_t *r, int owner, ddofi_peer_t *peer_p);
/* Rank `owner`'s peer on the reader's endpoint, inserted on first use. */
static inline int ddofi_tr_reader_peer(ddofi_tr_reader_t *r, int owner, ddofi_peer_t *peer_p)
{
    ddofi_peer_t pe = __atomic_load_n(&r->peers[owner], __ATOMIC_ACQUIRE);
    if (pe != DDOFI_TR_NO_PEER) {
        *peer_p = pe;
        return 0;
    }
    return ddofi_tr_reader_insert(r, owner, peer_p);
}
/* This thread's op array for ddofi_read, at least n long (NULL: no memory). */
ddofi_read_op_t *ddofi_tr_scratch_ops(size_t n);
/* Put a region on the transport's list (released by destroy if the store
 * did not). */
void ddofi_tr_region_link(ddofi_tr_t *t, ddofi_tr_region_t *g);

/* ddofi_tr_method2.c */
/* handshake_dir, namespace, timeout, host name into hs: 0 or a dds error. */
int ddofi_hs_params(ddofi_hs_t *hs, const ddofi_transport_params_t *tp);
/* Creation (collective for a core job): handshake_dir, namespace, run id,
 * every rank's pid/start time/host (hosts: nranks x HOST_MAX, gathered by
 * the caller).  Called after the server addresses are exchanged. */
int ddofi_hs_core_setup(ddofi_tr_t *t, const ddofi_transport_params_t *tp, const char *hosts);
/* Core rank 0: write the record of a registered variable (mr_blobs: every
 * rank's DDOFI_MR_BLOB_SIZE export). */
int ddofi_hs_publish(ddofi_tr_t *t, ddofi_tr_region_t *g, const dds_region_desc_t *d,
                   const unsigned char *mr_blobs);
/* Core rank 0: remove the record (errors logged, not returned). */
void ddofi_hs_unpublish(ddofi_tr_t *t, ddofi_tr_region_t *g);
int ddofi_hs_region_join(void *ctx, const char *name, dds_region_layout_t *layout_p,
                       void **region_p);
void ddofi_hs_free(ddofi_hs_t *hs);

/* ddofi_tr_live.c: method 2's liveness table (a reader on the core's host
 * learns that a joined variable was freed). */
/* Core: a store of this process uses the table (ref), or no longer (unref:
 * the last one marks every slot free and removes the file). */
void ddofi_tr_live_core_ref(void);
void ddofi_tr_live_core_unref(void);
/* Core: a slot for this rank's registration `mine` of g (none for an empty
 * shard), with where readers of this host can map it (`map`: tag 0 or NULL:
 * they cannot).  0 or -DDS_EIO / -DDS_ENOMEM. */
int ddofi_tr_live_add(ddofi_tr_region_t *g, const ddofi_remote_t *mine,
                      const dds_shard_rec_t *map);
/* Core: mark g's slot free; call before its memory is deregistered. */
void ddofi_tr_live_release(ddofi_tr_region_t *g);
/* Reader: g->live for the record's ranks on this host (and g->shards for
 * the shards the store may map, DDSTORE_OFI_MAP_SHARDS).  0, or -DDS_ESTALE
 * (freed already), -DDS_EIO (the table is needed but unreadable). */
int ddofi_tr_live_join(ddofi_tr_t *t, const char *path, const ddofi_hs_record_t *rec, ddofi_tr_region_t *g);
/* Reader: unmap the tables (store release). */
void ddofi_tr_live_unmap(ddofi_hs_t *hs);
/* Reader, after a read has completed: 0, or -DDS_ESTALE naming the variable
 * when a core rank freed it. */
int ddofi_tr_live_check_slow(const ddofi_tr_region_t *g);
static inline int ddofi_tr_live_check(const ddofi_tr_region_t *g)
{
    if (!g->nlive)
        return 0;
    /* the copy is complete before the words are read (pairs with the core's
     * fence between marking and freeing) */
    atomic_thread_fence(memory_order_seq_cst);
    return ddofi_tr_live_check_slow(g);
}

#endif
