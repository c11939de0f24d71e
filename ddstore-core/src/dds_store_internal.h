/* ddstore-core: private declarations shared by the store's source files
 * (dds_store*.c): the objects behind the opaque handles, the per-process
 * fork generation, and the helpers more than one of those files calls.
 * Not installed; nothing outside ddstore-core/src includes this.  Locks and
 * the read path's design: the comment at the top of dds_store.c. */
#ifndef DDSTORE_SRC_DDS_STORE_INTERNAL_H
#define DDSTORE_SRC_DDS_STORE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dds_internal.h"
#include "ddstore/config.h"
#include "ddstore/errors.h"
#include "ddstore/log.h"
#include "ddstore/plan.h"
#include "ddstore/shard.h"
#include "ddstore/store.h"

/* ---- objects ---------------------------------------------------------- */

/* A variable's life as processes forked from its creator see it
 * (dds_store_life.c): *word == gen while it lives. */
typedef struct dds_life {
    _Atomic uint64_t *word; /* in pages shared with forked children; NULL:
                               none (ended, or never taken)             */
    uint64_t gen;
    pid_t pid;              /* the process that took it (and ends it)   */
} dds_life_t;

typedef struct dds_var {
    char name[DDS_NAME_MAX + 1];
    uint64_t hash;
    dds_dtype_t dtype;
    size_t itemsize, disp, row_bytes;
    int nranks;
    int64_t *offsets;       /* nranks + 1 */
    int64_t local_rows, local_first;
    void *shard;
    size_t shard_bytes;
    int shard_owned;
    void *shard_token;      /* transport shard_alloc token: the shard is
                               released with shard_free, not free()      */
    dds_shard_t *nshard;    /* the node-local shard service's (the shard
                               is its memory), or NULL                    */
    dds_shard_peers_t *peers; /* owners' same-node shards this process may
                               map (dds_store_shard.c), or NULL          */
    dds_mem_t mem;
    void *mirror;           /* pinned host copy of a GPU shard that the
                               transport cannot reach (memsys host_alloc);
                               registered with the transport instead      */
    void *region;
    int joined;             /* published by another job (var_join): no
                               shard here, owners are that job's ranks  */
    /* Ragged variables (docs/design.md "Ragged variables"): rows are
     * samples; each shard is [index | payload]: the index is local_rows + 1
     * int64 element-row prefix sums of this rank's samples (the first 0),
     * padded to dds_st_ragged_index_bytes(local_rows), then the element
     * rows (row_bytes each).  Per rank O(local samples + ranks). */
    int ragged;
    int64_t local_elems, total_elems;
    int64_t *elem_offsets;  /* nranks + 1 element-row prefix sums          */
    int64_t *index_offsets; /* nranks + 1: offsets[r] + r (index entries)  */
    dds_life_t life;        /* dds_store_life.c                           */
    dds_prof_t prof;
} dds_var_t;

typedef struct released {
    char *name;
    int how;
} released_t;

typedef struct reg_entry {
    uintptr_t lo;
    size_t bytes;
    dds_mem_t mem;
    void *handle;
} reg_entry_t;

struct dds_reader {
    dds_store_t *store;
    void *treader;        /* transport reader; NULL = the default one */
    int flags;
    struct dds_reader *prev, *next;
};

struct dds_store {
    dds_comm_t comm;
    dds_transport_t tr;
    int serialize; /* transport calls need tmutex */
    pthread_mutex_t tmutex;
    pthread_mutex_t coll_mutex;
    pthread_rwlock_t table_lock;
    dds_var_t **vars;
    size_t nvars, cap_vars;
    released_t *released;
    size_t nreleased, cap_released;
    int freed;
    size_t max_read_bytes;  /* effective: min of env and transport, 0 none */
    size_t merge_row_bytes; /* 0 = planner default */
    pthread_rwlock_t reg_lock;
    reg_entry_t *regs;
    size_t nregs, cap_regs, reg_max_bytes;
    _Atomic size_t reg_count;
    pthread_mutex_t readers_mutex;
    dds_reader_t *readers;
    dds_memsys_t ms;        /* GPU memory operations; ms.ops NULL = none    */
    int gpu_staging;        /* DDSTORE_GPU_STAGING                          */
    _Atomic unsigned hmem_off; /* bit (1 << kind): the transport advertised
                                  HMEM for that kind, but registering such
                                  memory failed (-DDS_ENOSYS): staged since */
    unsigned fork_gen;      /* g_fork_gen when the store was created       */
    pid_t pid;              /* process that created the store: collective
                               calls are refused in any other (fork)      */
    char broken[200];       /* a collective timed out (coll_failed): which;
                               the ranks are out of step from then on      */
    uint64_t coll_seq;      /* collective calls made (coll_begin)          */
    int64_t coll_tag;       /* the current call's tag for its agreements   */
};

/* ---- shared state and helpers ----------------------------------------- */

/* Bytes of a ragged shard's index for `nrows` samples (transport.h's
 * dds_ragged_index_bytes: the payload's offset in the shard, the same on
 * every rank and in a method-2 reader).  nrows <= DDS_RAGGED_MAX_ROWS. */
static inline size_t dds_st_ragged_index_bytes(int64_t nrows)
{
    return (size_t)dds_ragged_index_bytes(nrows);
}

/* Collective calls' kinds (coll_begin tags, coll_fail). */
enum {
    COLL_INIT = DDS_COLL_INIT,
    COLL_ADD = DDS_COLL_ADD,
    COLL_VAR_FREE = DDS_COLL_VAR_FREE,
    COLL_FREE = DDS_COLL_FREE,
    COLL_EPOCH_BEGIN = DDS_COLL_EPOCH_BEGIN,
    COLL_EPOCH_END = DDS_COLL_EPOCH_END
};

/* How the store moves data into / out of a buffer (mem_route). */
enum {
    ROUTE_HOST = 0,     /* host memory: memcpy and transport as is          */
    ROUTE_DIRECT = 1,   /* GPU memory the transport reaches (FI_HMEM)       */
    ROUTE_STAGED = 2    /* GPU memory through pinned host memory (memsys)   */
};

enum { RELEASED_BY_FREE = 0, RELEASED_BY_VAR_FREE = 1 };

/* Incremented in every child forked after the first store was created
 * (dds_store_common.c).  Pinned memory (the host mirrors of GPU shards) is not
 * inherited by a forked child (the GPU runtimes map it MADV_DONTFORK), so a
 * child must not touch a mirror: its own rows then go through the
 * transport. */
extern _Atomic unsigned dds_st_fork_gen;
/* Count forks in dds_st_fork_gen from now on (once per process). */
void dds_st_fork_watch(void);

/* "host", "cuda", "rocm" ... for messages. */
const char *dds_st_mem_name(dds_mem_kind_t k);

/* The memory a new host shard can have (dds_store_headroom.c): 1 and
 * *room (bytes) with `what` naming the limit, 0 when nothing is known. */
int dds_st_mem_headroom(uint64_t *room, char *what, size_t cap);
/* 0, or -DDS_ENOMEM naming variable `name`, `bytes` and the limit when a
 * shard of `bytes` cannot fit (local; the caller agrees). */
int dds_st_mem_check(const char *name, size_t bytes);

/* Release a variable's mirror, shard and memory (its region is gone). */
void dds_st_var_release(dds_store_t *s, dds_var_t *v);

/* Out of step: forget v without any collective step (dds_store_var.c). */
void dds_st_var_abandon(dds_store_t *s, dds_var_t *v);

/* 0, or -DDS_EINVAL naming what is wrong with a variable name. */
int dds_st_check_name(const char *name);

/* The transport's ops table is long enough for `field` and sets it. */
#define DDS_ST_HAS_OP(s, field)                                               \
    ((s)->tr.ops->size >= offsetof(dds_transport_ops_t, field) +              \
                              sizeof((s)->tr.ops->field) &&                   \
     (s)->tr.ops->field != NULL)

/* Caller holds table_lock (read or write). */
dds_var_t *dds_st_find_var(const dds_store_t *s, const char *name,
                           size_t *index_p);

/* Caller holds table_lock.  The error for a name that is not live. */
int dds_st_not_live(const dds_store_t *s, const char *name);

/* The live variable `name` for a local call: checks the name, takes
 * table_lock for reading and finds the variable.  0 with *v_p set and the
 * lock held (the caller unlocks it), or an error with the lock released. */
int dds_st_var_lookup(dds_store_t *s, const char *name, dds_var_t **v_p);

/* Lock; returns the nanoseconds waited (0 when uncontended). */
uint64_t dds_st_lock_mutex_timed(pthread_mutex_t *m);

/* Read-lock; returns the nanoseconds waited (0 when uncontended). */
uint64_t dds_st_lock_read_timed(pthread_rwlock_t *l);

/* One rule per class of mismatch: a buffer of another element type is
 * -DDS_ETYPE (TypeError) whatever its row size; one of the right type but
 * another row size is -DDS_EINVAL (ValueError). */
int dds_st_check_buf(const dds_var_t *v, const dds_buf_t *b);

/* How the store moves data into / out of memory `m`.  `shard`: the memory
 * is a shard (a mirror) rather than a destination (staging buffers), for
 * the messages.  0, or an error naming the requirement. */
int dds_st_mem_route(const dds_store_t *s, const dds_mem_t *m,
                     const char *what, int shard, int *route_p);

/* Handle of a registration containing [p, p+bytes), or NULL. */
void *dds_st_reg_lookup(dds_store_t *s, const void *ptr, size_t bytes);

/* Does the store's memsys drive memory of kind `k`? */
int dds_st_ms_serves(const dds_store_t *s, dds_mem_kind_t k);

/* The transport advertised HMEM for `k` but refused such memory with
 * -DDS_ENOSYS (e.g. a provider with FI_HMEM whose registration of device
 * memory fails: no peer-memory / dma-buf support).  When staging can stand
 * in, remember it (every later buffer of that kind is staged) and return 1
 * so the caller retries staged; else 0 and the error stands. */
int dds_st_hmem_failed(dds_store_t *s, dds_mem_kind_t k, const char *what);

/* A collective call made in a process forked from the one that created the
 * store: its communicator (and the peers' view of the calls) belongs to the
 * parent, so taking part would hang the child and then the parent's next
 * collective.  Checked before any lock or state is touched. */
int dds_st_fork_refuse(const dds_store_t *s, const char *what,
                       const char *name);

/* A collective call's first check (coll_mutex held). */
int dds_st_coll_refuse(const dds_store_t *s, const char *what,
                       const char *name);

/* A collective call starts (coll_mutex held): its agreements carry a tag
 * (call number, kind), so that ranks in different calls fail instead of
 * matching each other's exchanges. */
void dds_st_coll_begin(dds_store_t *s, int kind);

/* A collective call's failure `rc` (its detail in dds_last_error()): a
 * timeout marks the store out of step and names the call.  Returns rc. */
int dds_st_coll_failed(dds_store_t *s, int rc, const char *what,
                       const char *name);

/* Combine every rank's rc under the current call's tag (coll_begin). */
int dds_st_coll_agree(dds_store_t *s, int rc);
/* Release coll_mutex at the end of a collective call (clears the call's
 * name for the communicator's messages). */
void dds_st_coll_unlock(dds_store_t *s);

/* A host pointer that the GPU runtime knows as device memory is a caller's
 * mistake that a memcpy would turn into a crash.  Only checked where it is
 * cheap relative to the call (add, recv_register), and only with a memsys;
 * a failing query (e.g. a forked child) counts as host memory. */
int dds_st_check_host_ptr(const dds_store_t *s, const void *p,
                          const char *what);

/* Grow *p (capacity *cap elements of elem bytes) to hold need; 0 or -1. */
int dds_st_grow_array(void **p, size_t *cap, size_t need, size_t elem);

/* The transport has region_abandon (ops table long enough, set). */
int dds_st_has_region_abandon(const dds_store_t *s);

/* FNV-1a of a variable name. */
uint64_t dds_st_name_hash(const char *s);

/* The pinned host mirror of v's GPU shard, filled from data. */
int dds_st_mirror_create(dds_store_t *s, dds_var_t *v, const void *data);

/* ---- the node-local shard service (dds_store_shard.c) ---------------- */

/* The transport asks for shards of the service (CAP_NODE_SHARDS). */
int dds_st_node_shards(const dds_store_t *s);
/* v's host shard of `bytes` (> 0) from the service: v->nshard, v->shard. */
int dds_st_shard_alloc(dds_store_t *s, dds_var_t *v, size_t bytes);
/* v's record for its peers (tag 0 unless CAP_NODE_MAP and mappable). */
void dds_st_shard_rec(const dds_store_t *s, const dds_var_t *v,
                      dds_shard_rec_t *rec);
/* v->peers from every rank's record (recs[r] at recs + r * stride), with
 * CAP_NODE_MAP; v's layout must be set.  0 or -DDS_ENOMEM. */
int dds_st_shard_peers(dds_store_t *s, dds_var_t *v, const void *recs,
                       size_t stride);
/* A joined variable's v->peers from the transport's region_shards. */
int dds_st_shard_join(dds_store_t *s, dds_var_t *v);
/* Serve the ops of v's mapped same-node owners with memcpy and drop them
 * from ops[0..*nops_p); *served_p: ops served.  0 or an error. */
int dds_st_shard_serve(dds_store_t *s, dds_var_t *v, dds_read_op_t *ops,
                       size_t *nops_p, char *dst, char *staging,
                       size_t *served_p);

/* ---- variables' lives, for forked processes (dds_store_life.c) ------ */

/* A new life for variable `name` (its word, a new gen).  0 or
 * -DDS_ENOMEM. */
int dds_st_life_take(dds_life_t *l, const char *name);
/* The variable is gone: its word is 0 for every process forked from this
 * one, with a full fence.  Idempotent; a no-op in any process but the one
 * that took it. */
void dds_st_life_end(dds_life_t *l);
/* 0 while v lives, else -DDS_ESTALE naming it (v was freed by the store's
 * process after this one was forked from it).  After a read's copies, a
 * full fence comes first (the caller's). */
int dds_st_life_check(const dds_store_t *s, const dds_var_t *v);

/* Caller holds table_lock for writing. */
void dds_st_forget_released(dds_store_t *s, const char *name);

/* Caller holds table_lock for writing. */
void dds_st_note_released(dds_store_t *s, const char *name, int how);

/* Caller holds table_lock for writing.  Takes the whole variable table
 * (insertion order; *n_p entries, the array the caller's to free). */
dds_var_t **dds_st_detach_vars(dds_store_t *s, size_t *n_p);

#endif
