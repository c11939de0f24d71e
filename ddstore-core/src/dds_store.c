/* ddstore-core: the store.
 *
 * Locks:
 *   coll_mutex   serialises collective calls (create/init/add/free/...).
 *   table_lock   rwlock over the variable table and the released-name
 *                list; collective calls take it for writing only to insert
 *                or detach variables, reads and local calls take it for
 *                reading for their whole duration (so a variable cannot be
 *                released under a read).  Writer-preferring on glibc, so a
 *                collective call is not starved by busy reader threads.
 *   reg_lock     rwlock over the registry of receive buffers.
 *   tmutex       serialises transport calls when the transport is not
 *                DDS_TRANSPORT_CAP_THREAD_SAFE.
 *   readers_mutex  the list of open readers.
 *
 * Per-thread state (process-wide, not per store): a cached plan, a staging
 * buffer and a scratch op array, reused by every read of that thread and
 * freed at thread exit.  No allocation on the read path after warm-up.
 *
 * GPU memory (memops.h, docs/gpudirect.md): every buffer is routed once per
 * call (mem_route): host memory -> the host path; GPU memory the transport
 * reaches (DDS_TRANSPORT_CAP_HMEM_*) -> "direct": the transport reads into
 * it after a stream fence; other GPU memory -> "staged": through the
 * memsys's pinned staging buffers (destinations) or a pinned host mirror
 * (shards).  The core never links a GPU runtime and never synchronises a
 * device: it only calls the memsys table.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "dds_internal.h"
#include "ddstore/config.h"
#include "ddstore/errors.h"
#include "ddstore/log.h"
#include "ddstore/plan.h"
#include "ddstore/store.h"

/* ---- objects ---------------------------------------------------------- */

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
    dds_mem_t mem;
    void *mirror;           /* pinned host copy of a GPU shard that the
                               transport cannot reach (memsys host_alloc);
                               registered with the transport instead      */
    void *region;
    int joined;             /* published by another job (var_join): no
                               shard here, owners are that job's ranks  */
    dds_prof_t prof;
} dds_var_t;

enum { RELEASED_BY_FREE = 0, RELEASED_BY_VAR_FREE = 1 };

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

/* Incremented in every child forked after the first store was created.
 * Pinned memory (the host mirrors of GPU shards) is not inherited by a
 * forked child (the GPU runtimes map it MADV_DONTFORK), so a child must not
 * touch a mirror: its own rows then go through the transport. */
static _Atomic unsigned g_fork_gen;
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;

static void fork_child(void)
{
    atomic_fetch_add_explicit(&g_fork_gen, 1, memory_order_relaxed);
}

static void fork_once(void)
{
    (void)pthread_atfork(NULL, NULL, fork_child);
}

/* ---- small helpers ---------------------------------------------------- */

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s != '\0'; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

static int grow_array(void **p, size_t *cap, size_t need, size_t elem)
{
    size_t c;
    void *q;
    if (need <= *cap)
        return 0;
    c = *cap > 0 ? 2 * *cap : 8;
    while (c < need)
        c *= 2;
    q = realloc(*p, c * elem);
    if (q == NULL)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

static uint64_t lock_read_timed(pthread_rwlock_t *l)
{
    uint64_t t0, t1;
    if (pthread_rwlock_tryrdlock(l) == 0)
        return 0;
    t0 = dds_prof_now();
    pthread_rwlock_rdlock(l);
    t1 = dds_prof_now();
    return t1 - t0;
}

static uint64_t lock_mutex_timed(pthread_mutex_t *m)
{
    uint64_t t0, t1;
    if (pthread_mutex_trylock(m) == 0)
        return 0;
    t0 = dds_prof_now();
    pthread_mutex_lock(m);
    t1 = dds_prof_now();
    return t1 - t0;
}

static void init_rwlock(pthread_rwlock_t *l)
{
    pthread_rwlockattr_t a;
    pthread_rwlockattr_init(&a);
#if defined(__GLIBC__)
    pthread_rwlockattr_setkind_np(&a,
                                  PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#endif
    pthread_rwlock_init(l, &a);
    pthread_rwlockattr_destroy(&a);
}

static int check_name(const char *name)
{
    size_t len;
    if (name == NULL)
        return dds_error(-DDS_EINVAL, "variable name is NULL");
    len = strnlen(name, DDS_NAME_MAX + 1);
    if (len == 0)
        return dds_error(-DDS_EINVAL, "variable name is empty");
    if (len > DDS_NAME_MAX)
        return dds_error(-DDS_EINVAL,
                         "variable name '%.40s...' is longer than %d bytes",
                         name, DDS_NAME_MAX);
    return 0;
}

/* Caller holds table_lock (read or write). */
static dds_var_t *find_var(const dds_store_t *s, const char *name,
                           size_t *index_p)
{
    uint64_t h = name_hash(name);
    for (size_t i = 0; i < s->nvars; i++) {
        dds_var_t *v = s->vars[i];
        if (v->hash == h && strcmp(v->name, name) == 0) {
            if (index_p != NULL)
                *index_p = i;
            return v;
        }
    }
    return NULL;
}

/* Caller holds table_lock. */
static released_t *find_released(const dds_store_t *s, const char *name)
{
    for (size_t i = 0; i < s->nreleased; i++)
        if (strcmp(s->released[i].name, name) == 0)
            return &s->released[i];
    return NULL;
}

/* Caller holds table_lock for writing. */
static void note_released(dds_store_t *s, const char *name, int how)
{
    released_t *r = find_released(s, name);
    char *copy;
    if (r != NULL) {
        r->how = how;
        return;
    }
    if (grow_array((void **)&s->released, &s->cap_released, s->nreleased + 1,
                   sizeof(released_t)) != 0)
        return; /* only costs the nicer message */
    copy = strdup(name);
    if (copy == NULL)
        return;
    s->released[s->nreleased].name = copy;
    s->released[s->nreleased].how = how;
    s->nreleased++;
}

/* Caller holds table_lock for writing. */
static void forget_released(dds_store_t *s, const char *name)
{
    for (size_t i = 0; i < s->nreleased; i++) {
        if (strcmp(s->released[i].name, name) == 0) {
            free(s->released[i].name);
            s->released[i] = s->released[--s->nreleased];
            return;
        }
    }
}

/* Caller holds table_lock.  The error for a name that is not live. */
static int not_live(const dds_store_t *s, const char *name)
{
    const released_t *r = find_released(s, name);
    if (r != NULL)
        return dds_error(-DDS_EFREED,
                         "variable '%s' was released by %s; add it again",
                         name, r->how == RELEASED_BY_FREE ? "free()"
                                                          : "var_free()");
    if (s->freed)
        return dds_error(-DDS_EFREED,
                         "variable '%s' is not live: the store was released "
                         "by free()",
                         name);
    return dds_error(-DDS_ENOENT, "no variable named '%s'", name);
}

static int has_region_abandon(const dds_store_t *s);

/* ---- collectives out of step -------------------------------------------
 *
 * A collective that not every rank entered times out in the communicator
 * (-DDS_ETIMEDOUT).  From then on the ranks are out of step: a later
 * collective could be matched with the wrong call of a peer, and a
 * collective release (MPI_Win_free) could wait forever.  The store remembers
 * it, refuses every later collective at once, and releases locally. */

enum {
    COLL_INIT = DDS_COLL_INIT,
    COLL_ADD = DDS_COLL_ADD,
    COLL_VAR_FREE = DDS_COLL_VAR_FREE,
    COLL_FREE = DDS_COLL_FREE,
    COLL_EPOCH_BEGIN = DDS_COLL_EPOCH_BEGIN,
    COLL_EPOCH_END = DDS_COLL_EPOCH_END
};

/* A collective call starts (coll_mutex held): its agreements carry a tag
 * (call number, kind), so that ranks in different calls fail instead of
 * matching each other's exchanges. */
static void coll_begin(dds_store_t *s, int kind)
{
    s->coll_seq++;
    s->coll_tag = (int64_t)(((s->coll_seq << 3) | (uint64_t)kind) &
                            (uint64_t)INT64_MAX);
}

static int coll_agree(dds_store_t *s, int rc)
{
    return dds_comm_agree_tag(&s->comm, rc, s->coll_tag);
}

/* A collective call's first check (coll_mutex held). */
static int coll_refuse(const dds_store_t *s, const char *what,
                       const char *name)
{
    if (s->broken[0] == '\0')
        return 0;
    return dds_error(-DDS_ETIMEDOUT,
                     "%s%s%s%s refused: an earlier collective call (%s) timed "
                     "out, so the ranks are out of step; free() now releases "
                     "local resources only",
                     what, name ? "('" : "()", name ? name : "",
                     name ? "')" : "", s->broken);
}

/* A collective call made in a process forked from the one that created the
 * store: its communicator (and the peers' view of the calls) belongs to the
 * parent, so taking part would hang the child and then the parent's next
 * collective.  Checked before any lock or state is touched. */
static int fork_refuse(const dds_store_t *s, const char *what,
                       const char *name)
{
    pid_t me = getpid();
    if (DDS_LIKELY(me == s->pid))
        return 0;
    return dds_error(-DDS_ENOSYS,
                     "%s%s%s%s in a forked child process (pid %d) of the "
                     "process that created the store (pid %d): collective "
                     "calls (add, init, free, epoch_*) belong to the parent, "
                     "whose communicator the child must not use; a forked "
                     "process may only read (a DDS_READER_FORKED reader: "
                     "PyDDStore.fork_reader())",
                     what, name ? "('" : "()", name ? name : "",
                     name ? "')" : "", (int)me, (int)s->pid);
}

/* A collective call's failure `rc` (its detail in dds_last_error()): a
 * timeout marks the store out of step and names the call.  Returns rc. */
static int coll_failed(dds_store_t *s, int rc, const char *what,
                       const char *name)
{
    char detail[512];
    if (rc != -DDS_ETIMEDOUT)
        return rc;
    snprintf(detail, sizeof detail, "%s", dds_last_error());
    if (s->broken[0] == '\0')
        snprintf(s->broken, sizeof s->broken, "%s%s%s%s", what,
                 name ? "('" : "()", name ? name : "", name ? "')" : "");
    DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_CORE,
            "%s%s%s%s: collective timed out; the store is out of step: %s",
            what, name ? "('" : "()", name ? name : "", name ? "')" : "",
            detail);
    return dds_error(rc, "%s%s%s%s: %s", what, name ? "('" : "()",
                     name ? name : "", name ? "')" : "", detail);
}

/* Out of step: forget v without any collective step.  Its region is
 * abandoned (the transport's region_abandon, or leaked) and its shard
 * leaked: peers may still read it until the process exits. */
static void var_abandon(dds_store_t *s, dds_var_t *v)
{
    if (v == NULL)
        return;
    if (v->region != NULL && has_region_abandon(s))
        s->tr.ops->region_abandon(s->tr.ctx, v->region);
    DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_CORE,
            "variable '%s': released locally (out of step); its shard of "
            "%zu bytes stays allocated until the process exits",
            v->name, v->shard_bytes);
    free(v->offsets);
    free(v);
}

static void var_release(dds_store_t *s, dds_var_t *v)
{
    if (v == NULL)
        return;
    if (v->mirror != NULL && s->ms.ops != NULL)
        (void)s->ms.ops->host_free(s->ms.ctx, v->mirror);
    if (v->shard_token != NULL)
        s->tr.ops->shard_free(s->tr.ctx, v->shard, v->shard_token);
    else if (v->shard_owned)
        free(v->shard);
    free(v->offsets);
    free(v);
}

static const char *mem_name(dds_mem_kind_t k)
{
    switch (k) {
    case DDS_MEM_HOST: return "host";
    case DDS_MEM_CUDA: return "CUDA";
    case DDS_MEM_ROCM: return "ROCm";
    default: return "unknown";
    }
}

/* Can the transport read into / out of memory of kind `k`? */
static int mem_supported(const dds_store_t *s, dds_mem_kind_t k)
{
    switch (k) {
    case DDS_MEM_HOST: return 1;
    case DDS_MEM_CUDA: return (s->tr.caps & DDS_TRANSPORT_CAP_HMEM_CUDA) != 0;
    case DDS_MEM_ROCM: return (s->tr.caps & DDS_TRANSPORT_CAP_HMEM_ROCM) != 0;
    default: return 0;
    }
}

/* Does the store's memsys drive memory of kind `k`? */
static int ms_serves(const dds_store_t *s, dds_mem_kind_t k)
{
    return s->ms.ops != NULL && s->ms.ops->kind == k;
}

enum {
    ROUTE_HOST = 0,     /* host memory: memcpy and transport as is          */
    ROUTE_DIRECT = 1,   /* GPU memory the transport reaches (FI_HMEM)       */
    ROUTE_STAGED = 2    /* GPU memory through pinned host memory (memsys)   */
};

/* How the store moves data into / out of memory `m`.  `shard`: the memory
 * is a shard (a mirror) rather than a destination (staging buffers), for
 * the messages.  0, or an error naming the requirement. */
static int mem_route(const dds_store_t *s, const dds_mem_t *m,
                     const char *what, int shard, int *route_p)
{
    const char *tn = s->tr.ops->name ? s->tr.ops->name : "?";
    const char *kn, *how;
    if ((int)m->kind < DDS_MEM_HOST || (int)m->kind > DDS_MEM_ROCM)
        return dds_error(-DDS_EINVAL, "%s: unknown memory kind %d", what,
                         (int)m->kind);
    if (m->kind == DDS_MEM_HOST) {
        *route_p = ROUTE_HOST;
        return 0;
    }
    if (mem_supported(s, m->kind) &&
        !(atomic_load_explicit(&((dds_store_t *)s)->hmem_off,
                               memory_order_relaxed) &
          (1u << m->kind))) {
        *route_p = ROUTE_DIRECT;
        return 0;
    }
    kn = mem_name(m->kind);
    how = shard ? "a pinned host mirror of the shard"
                : "pinned host buffers";
    if (!s->gpu_staging)
        return dds_error(-DDS_ENOSYS,
                         "%s: %s memory needs a transport that reaches %s "
                         "memory directly (FI_HMEM, e.g. the cxi provider; "
                         "transport '%s' cannot) or staging through %s, "
                         "which DDSTORE_GPU_STAGING=0 disables",
                         what, kn, kn, tn, how);
    if (s->ms.ops == NULL)
        return dds_error(-DDS_ENOGPU,
                         "%s: %s memory needs a transport that reaches %s "
                         "memory directly (FI_HMEM, e.g. the cxi provider; "
                         "transport '%s' cannot) or staging through %s, "
                         "which needs a usable GPU runtime: this store has "
                         "none (no GPU)",
                         what, kn, kn, tn, how);
    if (s->ms.ops->kind != m->kind)
        return dds_error(-DDS_ENOSYS,
                         "%s: %s memory, but this process's GPU runtime "
                         "('%s') drives %s memory",
                         what, kn, s->ms.ops->name ? s->ms.ops->name : "?",
                         mem_name(s->ms.ops->kind));
    *route_p = ROUTE_STAGED;
    return 0;
}

/* The transport advertised HMEM for `k` but refused such memory with
 * -DDS_ENOSYS (e.g. a provider with FI_HMEM whose registration of device
 * memory fails: no peer-memory / dma-buf support).  When staging can stand
 * in, remember it (every later buffer of that kind is staged) and return 1
 * so the caller retries staged; else 0 and the error stands. */
static int hmem_failed(dds_store_t *s, dds_mem_kind_t k, const char *what)
{
    if (!s->gpu_staging || !ms_serves(s, k))
        return 0;
    if (!(atomic_fetch_or(&s->hmem_off, 1u << k) & (1u << k)))
        DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_CORE,
                "%s: transport '%s' advertises FI_HMEM for %s memory but "
                "refused it (%s); %s memory goes through pinned host memory "
                "from now on",
                what, s->tr.ops->name ? s->tr.ops->name : "?", mem_name(k),
                dds_last_error(), mem_name(k));
    dds_error_clear();
    return 1;
}

/* A host pointer that the GPU runtime knows as device memory is a caller's
 * mistake that a memcpy would turn into a crash.  Only checked where it is
 * cheap relative to the call (add, recv_register), and only with a memsys;
 * a failing query (e.g. a forked child) counts as host memory. */
static int check_host_ptr(const dds_store_t *s, const void *p,
                          const char *what)
{
    dds_mem_t pm;
    if (p == NULL || s->ms.ops == NULL || s->ms.ops->pointer_kind == NULL)
        return 0;
    memset(&pm, 0, sizeof(pm));
    if (s->ms.ops->pointer_kind(s->ms.ctx, p, &pm) != 0) {
        dds_error_clear();
        return 0;
    }
    if (pm.kind != DDS_MEM_HOST)
        return dds_error(-DDS_EINVAL,
                         "%s: the buffer is %s memory (device %d) but was "
                         "described as host memory; pass its dds_mem_t",
                         what, mem_name(pm.kind), pm.device);
    return 0;
}

/* dtype / itemsize of a caller's buffer against a variable. */
static int check_dtype(const dds_var_t *v, const dds_buf_t *b)
{
    size_t bsize;
    if ((int)b->dtype < 0 || (int)b->dtype >= DDS_DTYPE_COUNT)
        return dds_error(-DDS_ETYPE, "variable '%s': buffer has unknown "
                                     "dtype %d", v->name, (int)b->dtype);
    bsize = b->itemsize != 0 ? b->itemsize : dds_dtype_size(b->dtype);
    if (b->dtype != DDS_DTYPE_RAW && v->dtype != DDS_DTYPE_RAW) {
        if (b->dtype != v->dtype || bsize != dds_dtype_size(b->dtype))
            return dds_error(-DDS_ETYPE,
                             "variable '%s' holds %s, the buffer is %s "
                             "(itemsize %zu)",
                             v->name, dds_dtype_name(v->dtype),
                             dds_dtype_name(b->dtype), bsize);
        return 0;
    }
    if (bsize != v->itemsize)
        return dds_error(-DDS_ETYPE,
                         "variable '%s' has itemsize %zu (%s), the buffer "
                         "has itemsize %zu (%s)",
                         v->name, v->itemsize, dds_dtype_name(v->dtype),
                         bsize, dds_dtype_name(b->dtype));
    return 0;
}

/* One rule per class of mismatch: a buffer of another element type is
 * -DDS_ETYPE (TypeError) whatever its row size; one of the right type but
 * another row size is -DDS_EINVAL (ValueError). */
static int check_buf(const dds_var_t *v, const dds_buf_t *b)
{
    int rc = check_dtype(v, b);
    if (rc != 0)
        return rc;
    if (b->nrows < 0)
        return dds_error(-DDS_EINVAL, "variable '%s': buffer has %lld rows",
                         v->name, (long long)b->nrows);
    if (b->nrows > 0 && b->ptr == NULL)
        return dds_error(-DDS_EINVAL, "variable '%s': buffer pointer is NULL",
                         v->name);
    if (b->row_bytes != v->row_bytes)
        return dds_error(-DDS_EINVAL,
                         "variable '%s': expected %zu bytes per row (disp "
                         "%zu x itemsize %zu), got %zu",
                         v->name, v->row_bytes, v->disp, v->itemsize,
                         b->row_bytes);
    return 0;
}

/* ---- per-thread read context ------------------------------------------ */

typedef struct tctx {
    dds_plan_t plan;
    void *staging;
    size_t staging_cap;
    dds_read_op_t *xops;
    size_t xops_cap;
    int64_t *rows;          /* the batch's indices, copied once per read   */
    size_t rows_cap;
} tctx_t;

static pthread_once_t g_tctx_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_tctx_key;
static int g_tctx_key_ok;
static _Thread_local tctx_t *t_ctx;

static void tctx_free(void *p)
{
    tctx_t *c = p;
    if (c == NULL)
        return;
    dds_plan_fini(&c->plan);
    free(c->staging);
    free(c->xops);
    free(c->rows);
    free(c);
    t_ctx = NULL;
}

static void tctx_key_init(void)
{
    g_tctx_key_ok = pthread_key_create(&g_tctx_key, tctx_free) == 0;
}

static tctx_t *tctx_get(void)
{
    tctx_t *c = t_ctx;
    if (DDS_LIKELY(c != NULL))
        return c;
    pthread_once(&g_tctx_once, tctx_key_init);
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    dds_plan_init(&c->plan);
    if (g_tctx_key_ok)
        pthread_setspecific(g_tctx_key, c);
    t_ctx = c;
    return c;
}

static int tctx_staging(tctx_t *c, size_t bytes)
{
    size_t cap;
    void *p;
    if (bytes <= c->staging_cap)
        return 0;
    cap = 4096;
    while (cap < bytes)
        cap = cap > SIZE_MAX / 2 ? bytes : 2 * cap;
    if (posix_memalign(&p, 64, cap) != 0)
        return -1;
    free(c->staging);
    c->staging = p;
    c->staging_cap = cap;
    return 0;
}

/* ---- receive registry ------------------------------------------------- */

/* Caller holds reg_lock.  Index of the first entry with lo > p. */
static size_t reg_upper(const dds_store_t *s, uintptr_t p)
{
    size_t lo = 0, hi = s->nregs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->regs[mid].lo <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Caller holds reg_lock.  Exact (ptr, bytes) entry or -1. */
static long reg_exact(const dds_store_t *s, uintptr_t p, size_t bytes)
{
    size_t i = reg_upper(s, p);
    while (i > 0 && s->regs[i - 1].lo == p) {
        if (s->regs[i - 1].bytes == bytes)
            return (long)(i - 1);
        i--;
    }
    return -1;
}

/* Caller holds reg_lock.  1: (ptr, bytes) is not registered; 0: it is,
 * as memory of kind m->kind (registering it again is a no-op); < 0: it is,
 * as another kind of memory (error set). */
static int reg_again(const dds_store_t *s, const void *ptr, size_t bytes,
                     const dds_mem_t *m)
{
    long i = reg_exact(s, (uintptr_t)ptr, bytes);

    if (i < 0)
        return 1;
    if (s->regs[i].mem.kind != m->kind)
        return dds_error(-DDS_EINVAL, "recv_register: %zu bytes at %p are "
                         "already registered as %s memory, not %s", bytes,
                         ptr, mem_name(s->regs[i].mem.kind),
                         mem_name(m->kind));
    return 0;
}

/* Handle of a registration containing [p, p+bytes), or NULL. */
static void *reg_lookup(dds_store_t *s, const void *ptr, size_t bytes)
{
    uintptr_t p = (uintptr_t)ptr;
    void *h = NULL;
    size_t i;

    if (atomic_load_explicit(&s->reg_count, memory_order_relaxed) == 0 ||
        ptr == NULL)
        return NULL;
    pthread_rwlock_rdlock(&s->reg_lock);
    i = reg_upper(s, p);
    while (i > 0) {
        const reg_entry_t *e = &s->regs[--i];
        if (e->lo + s->reg_max_bytes < p + bytes)
            break; /* no earlier entry can reach that far */
        if (e->lo + e->bytes >= p + bytes) {
            h = e->handle;
            break;
        }
    }
    pthread_rwlock_unlock(&s->reg_lock);
    return h;
}

/* ---- create / destroy ------------------------------------------------- */

static void destroy_transport(dds_transport_t *t)
{
    if (t->ops != NULL && t->ops->destroy != NULL)
        t->ops->destroy(t->ctx);
    t->ops = NULL;
    t->ctx = NULL;
}

static void destroy_memsys(dds_memsys_t *m)
{
    if (m->ops != NULL && m->ops->destroy != NULL)
        m->ops->destroy(m->ctx);
    m->ops = NULL;
    m->ctx = NULL;
}

/* A memops table the store can use: known size, a GPU kind, and every
 * function the store calls. */
static int check_memsys(const dds_memsys_t *m)
{
    const dds_memops_t *o = m->ops;
    if (o == NULL || o->size < offsetof(dds_memops_t, destroy) +
                                   sizeof(o->destroy))
        return dds_error(-DDS_EINVAL,
                         "dds_store_create: DDS_STORE_PARAM_MEMSYS is set "
                         "but memsys.ops is NULL or too small");
    if (o->kind != DDS_MEM_CUDA && o->kind != DDS_MEM_ROCM)
        return dds_error(-DDS_EINVAL,
                         "dds_store_create: memsys '%s' serves memory kind "
                         "%d; expected CUDA or ROCm",
                         o->name ? o->name : "?", (int)o->kind);
    if (o->host_alloc == NULL || o->host_free == NULL ||
        o->staging_acquire == NULL || o->staging_release == NULL ||
        o->copy_async == NULL || o->stream_fence == NULL ||
        o->destroy == NULL)
        return dds_error(-DDS_EINVAL,
                         "dds_store_create: memsys '%s' lacks host_alloc, "
                         "host_free, staging_acquire, staging_release, "
                         "copy_async, stream_fence or destroy",
                         o->name ? o->name : "?");
    return 0;
}

static int read_store_config(size_t *max_read_p, size_t *merge_p,
                             int *gpu_staging_p)
{
    int64_t maxr = 0, merge = 0, gbytes = 0;
    double read_timeout = 0;
    unsigned mask;
    const char *subsys = NULL;
    int rc;

    dds_config_register_core();
    rc = dds_config_validate_all();
    if (rc != 0)
        return rc;
    if ((rc = dds_config_get_int("DDSTORE_MAX_READ_BYTES", &maxr)) != 0 ||
        (rc = dds_config_get_int("DDSTORE_MERGE_ROW_BYTES", &merge)) != 0 ||
        (rc = dds_config_get_string("DDSTORE_LOG_SUBSYS", &subsys)) != 0 ||
        (rc = dds_config_get_bool("DDSTORE_GPU_STAGING", gpu_staging_p)) !=
            0 ||
        (rc = dds_config_get_int("DDSTORE_GPU_STAGING_BYTES", &gbytes)) != 0 ||
        /* the transports read it; a value <= 0 is refused for every one */
        (rc = dds_config_get_seconds("DDSTORE_READ_TIMEOUT_S",
                                     &read_timeout)) != 0)
        return rc;
    if (gbytes < 0)
        return dds_error(-DDS_ECONFIG,
                         "DDSTORE_GPU_STAGING_BYTES='%lld': expected a byte "
                         "count >= 0 (0 = 256M)",
                         (long long)gbytes);
    if (maxr < 0)
        return dds_error(-DDS_ECONFIG,
                         "DDSTORE_MAX_READ_BYTES='%lld': expected a byte "
                         "count >= 0 (0 = the transport's limit)",
                         (long long)maxr);
    if (merge < 0)
        return dds_error(-DDS_ECONFIG,
                         "DDSTORE_MERGE_ROW_BYTES='%lld': expected a byte "
                         "count >= 0",
                         (long long)merge);
    rc = dds_log_parse_subsys(subsys, &mask);
    if (rc != 0)
        return rc;
    *max_read_p = (size_t)maxr;
    *merge_p = (size_t)merge;
    return 0;
}

int dds_store_create(const dds_store_params_t *params, dds_store_t **store_p)
{
    dds_comm_t comm = {0};
    dds_transport_t tr = {0};
    dds_memsys_t ms = {0};
    dds_store_t *s = NULL;
    size_t maxr = 0, merge = 0;
    int rc = 0, gpu_staging = 1;

    if (store_p == NULL || params == NULL) {
        if (params != NULL) {
            /* ownership moved to us: release what we were given */
            if (params->field_mask & DDS_STORE_PARAM_MEMSYS) {
                ms = params->memsys;
                destroy_memsys(&ms);
            }
            if (params->field_mask & DDS_STORE_PARAM_TRANSPORT) {
                tr = params->transport;
                destroy_transport(&tr);
            }
            if (params->field_mask & DDS_STORE_PARAM_COMM) {
                comm = params->comm;
                dds_comm_destroy(&comm);
            }
        }
        return dds_error(-DDS_EINVAL, "dds_store_create: NULL %s",
                         store_p == NULL ? "store_p" : "params");
    }
    *store_p = NULL;
    if (params->field_mask & DDS_STORE_PARAM_COMM)
        comm = params->comm;
    if (params->field_mask & DDS_STORE_PARAM_TRANSPORT)
        tr = params->transport;
    if (params->field_mask & DDS_STORE_PARAM_MEMSYS)
        ms = params->memsys;

    /* Without a usable communicator nothing can be agreed: fail locally. */
    if (!(params->field_mask & DDS_STORE_PARAM_COMM) || comm.ops == NULL ||
        comm.ops->allgather == NULL || comm.ops->allreduce_i64 == NULL ||
        comm.size < 1 || comm.rank < 0 || comm.rank >= comm.size) {
        rc = dds_error(-DDS_EINVAL,
                       "dds_store_create: a communicator with allgather and "
                       "allreduce_i64 and 0 <= rank < size is required");
        goto fail_local;
    }

    if (!(params->field_mask & DDS_STORE_PARAM_TRANSPORT) || tr.ops == NULL ||
        tr.ops->read == NULL || tr.ops->region_create == NULL ||
        tr.ops->region_destroy == NULL)
        rc = dds_error(-DDS_EINVAL,
                       "dds_store_create: a transport with region_create, "
                       "region_destroy and read is required");
    if (rc == 0 && (params->field_mask & DDS_STORE_PARAM_MEMSYS))
        rc = check_memsys(&ms);
    if (rc == 0)
        rc = read_store_config(&maxr, &merge, &gpu_staging);
    if (rc == 0) {
        s = calloc(1, sizeof(*s));
        if (s == NULL)
            rc = dds_error(-DDS_ENOMEM, "dds_store_create: out of memory");
    }
    rc = dds_comm_agree(&comm, rc);
    if (rc != 0)
        goto fail_local;

    s->comm = comm;
    s->tr = tr;
    s->serialize = (tr.caps & DDS_TRANSPORT_CAP_THREAD_SAFE) == 0;
    if (tr.max_read_bytes != 0 && (maxr == 0 || tr.max_read_bytes < maxr))
        maxr = tr.max_read_bytes;
    s->max_read_bytes = maxr;
    s->merge_row_bytes = merge;
    s->ms = ms;
    s->gpu_staging = gpu_staging;
    atomic_init(&s->hmem_off, 0);
    pthread_once(&g_fork_once, fork_once);
    s->fork_gen = atomic_load_explicit(&g_fork_gen, memory_order_relaxed);
    s->pid = getpid();
    pthread_mutex_init(&s->tmutex, NULL);
    pthread_mutex_init(&s->coll_mutex, NULL);
    pthread_mutex_init(&s->readers_mutex, NULL);
    init_rwlock(&s->table_lock);
    init_rwlock(&s->reg_lock);
    atomic_init(&s->reg_count, 0);
    if (!dds_log_rank_is_set())
        dds_log_set_rank(comm.rank);
    DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_CORE,
            "store created: %d ranks, comm '%s', transport '%s', caps 0x%llx, "
            "max read %zu B, merge rows <= %zu B",
            comm.size, comm.ops->name ? comm.ops->name : "?",
            tr.ops->name ? tr.ops->name : "?", (unsigned long long)tr.caps,
            maxr, merge ? merge : (size_t)DDS_PLAN_MERGE_ROW_BYTES_DEFAULT);
    DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_CORE,
            "GPU memory: memsys '%s' (%s); transport reaches CUDA memory: "
            "%s, ROCm memory: %s; staging %s",
            ms.ops != NULL && ms.ops->name ? ms.ops->name : "none",
            ms.ops != NULL ? mem_name(ms.ops->kind) : "host path only",
            (tr.caps & DDS_TRANSPORT_CAP_HMEM_CUDA) ? "yes" : "no",
            (tr.caps & DDS_TRANSPORT_CAP_HMEM_ROCM) ? "yes" : "no",
            gpu_staging ? "on" : "off (DDSTORE_GPU_STAGING=0)");
    *store_p = s;
    return 0;

fail_local:
    free(s);
    destroy_transport(&tr);
    destroy_memsys(&ms);
    dds_comm_destroy(&comm);
    return rc;
}

/* Caller holds table_lock for writing.  Takes the whole variable table
 * (insertion order; *n_p entries, the array the caller's to free). */
static dds_var_t **detach_vars(dds_store_t *s, size_t *n_p)
{
    dds_var_t **vars = s->vars;
    *n_p = s->nvars;
    s->vars = NULL;
    s->nvars = 0;
    s->cap_vars = 0;
    return vars;
}

/* Everything but the variables: registrations, readers, the transport, then
 * `later` (variables whose regions the transport's destroy released: their
 * memory goes now), the memsys and the communicator.  Local. */
static void store_teardown(dds_store_t *s, dds_var_t **later, size_t nlater)
{
    dds_reader_t *r;

    /* registrations left behind */
    for (size_t i = 0; i < s->nregs; i++)
        if (s->tr.ops->recv_unregister != NULL && s->regs[i].handle != NULL)
            (void)s->tr.ops->recv_unregister(s->tr.ctx, s->regs[i].handle);
    free(s->regs);
    /* readers left open */
    r = s->readers;
    if (r != NULL)
        DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_CORE,
                "store destroyed with readers still open; closing them");
    while (r != NULL) {
        dds_reader_t *next = r->next;
        if (r->treader != NULL && s->tr.ops->reader_close != NULL)
            s->tr.ops->reader_close(s->tr.ctx, r->treader);
        free(r);
        r = next;
    }
    destroy_transport(&s->tr);
    for (size_t i = 0; i < nlater; i++) {
        dds_var_t *v = later[i];
        if (v->shard_token != NULL) {
            /* shard_free needs the transport, which is gone */
            DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_CORE,
                    "variable '%s': its transport-allocated shard of %zu "
                    "bytes stays allocated until the process exits",
                    v->name, v->shard_bytes);
            v->shard_token = NULL;
            v->shard_owned = 0;
        }
        var_release(s, v);
    }
    /* after the transport: it may hold registrations of staging buffers */
    destroy_memsys(&s->ms);
    dds_comm_destroy(&s->comm);
    for (size_t i = 0; i < s->nreleased; i++)
        free(s->released[i].name);
    free(s->released);
    free(s->vars);
    pthread_mutex_destroy(&s->tmutex);
    pthread_mutex_destroy(&s->coll_mutex);
    pthread_mutex_destroy(&s->readers_mutex);
    pthread_rwlock_destroy(&s->table_lock);
    pthread_rwlock_destroy(&s->reg_lock);
    free(s);
}

void dds_store_destroy(dds_store_t *s)
{
    if (s == NULL)
        return;
    if (s->nvars > 0)
        (void)dds_store_free(s);
    store_teardown(s, NULL, 0);
}

void dds_store_destroy_local(dds_store_t *s)
{
    dds_var_t **vars, **later;
    size_t n, nlater = 0;
    int abandon;

    if (s == NULL)
        return;
    pthread_rwlock_wrlock(&s->table_lock);
    vars = detach_vars(s, &n);
    pthread_rwlock_unlock(&s->table_lock);
    abandon = has_region_abandon(s);
    later = vars; /* reused in place: entry i is read before it is written */
    for (size_t i = 0; i < n; i++) {
        dds_var_t *v = vars[i];
        if (v->region == NULL || !abandon)
            later[nlater++] = v; /* the transport's destroy releases it */
        else
            var_abandon(s, v);   /* peers may still read it: kept */
    }
    if (n > 0)
        DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_CORE,
                "store destroyed without free(): %zu variables released "
                "locally (%s)", n,
                abandon ? "regions abandoned, their shards kept until the "
                          "process exits"
                        : "regions released by the transport");
    store_teardown(s, later, nlater);
    free(vars);
}

int dds_store_rank(const dds_store_t *s)
{
    return s != NULL ? s->comm.rank : -1;
}

int dds_store_size(const dds_store_t *s)
{
    return s != NULL ? s->comm.size : 0;
}

const dds_comm_t *dds_store_comm(const dds_store_t *s)
{
    return s != NULL ? &s->comm : NULL;
}

const dds_transport_t *dds_store_transport(const dds_store_t *s)
{
    return s != NULL ? &s->tr : NULL;
}

/* ---- variables: collective -------------------------------------------- */

enum { MODE_INIT = 0, MODE_COPY = 1, MODE_IN_PLACE = 2 };

typedef struct var_desc {
    int64_t nrows;
    uint64_t disp;
    uint64_t itemsize;
    uint64_t name_hash;
    int32_t dtype;
    int32_t shard_alloc;    /* 1: this rank's shard waits for the
                               transport's collective shard_alloc       */
} var_desc_t;

/* The transport allocates host shards (collective shard_alloc). */
static int has_shard_alloc(const dds_store_t *s)
{
    const dds_transport_ops_t *o = s->tr.ops;
    return o->size >= offsetof(dds_transport_ops_t, shard_free) +
                          sizeof(o->shard_free) &&
           o->shard_alloc != NULL && o->shard_free != NULL;
}

/* Local checks of init/add arguments. */
static int check_var_args(dds_store_t *s, const char *name, const void *data,
                          int64_t nrows, size_t disp, size_t itemsize,
                          dds_dtype_t dtype, const dds_mem_t *mem, int mode,
                          size_t *bytes_p, int *route_p)
{
    size_t row_bytes;
    int rc = check_name(name);
    if (rc != 0)
        return rc;
    if (nrows < 0)
        return dds_error(-DDS_EINVAL, "variable '%s': nrows %lld < 0", name,
                         (long long)nrows);
    if (disp == 0)
        return dds_error(-DDS_EINVAL, "variable '%s': disp must be > 0",
                         name);
    if (itemsize == 0)
        return dds_error(-DDS_EINVAL, "variable '%s': itemsize must be > 0",
                         name);
    if ((int)dtype < 0 || (int)dtype >= DDS_DTYPE_COUNT)
        return dds_error(-DDS_ETYPE, "variable '%s': unknown dtype %d", name,
                         (int)dtype);
    if (dtype != DDS_DTYPE_RAW && dds_dtype_size(dtype) != itemsize)
        return dds_error(-DDS_ETYPE,
                         "variable '%s': dtype %s has itemsize %zu, got "
                         "itemsize %zu",
                         name, dds_dtype_name(dtype), dds_dtype_size(dtype),
                         itemsize);
    if (disp > SIZE_MAX / itemsize || disp * itemsize > (size_t)INT64_MAX)
        return dds_error(-DDS_EINVAL,
                         "variable '%s': disp %zu x itemsize %zu overflows",
                         name, disp, itemsize);
    row_bytes = disp * itemsize;
    if ((uint64_t)nrows > SIZE_MAX / row_bytes ||
        (uint64_t)nrows * row_bytes > (uint64_t)INT64_MAX)
        return dds_error(-DDS_EINVAL,
                         "variable '%s': %lld rows of %zu bytes overflow",
                         name, (long long)nrows, row_bytes);
    *route_p = ROUTE_HOST;
    if (mode != MODE_INIT) {
        char what[DDS_NAME_MAX + 32];
        snprintf(what, sizeof(what), "variable '%s'", name);
        if (data == NULL && nrows > 0)
            return dds_error(-DDS_EINVAL, "variable '%s': data is NULL",
                             name);
        if (mem != NULL) {
            if (mode == MODE_COPY && (int)mem->kind != DDS_MEM_HOST)
                return dds_error(-DDS_ENOSYS,
                                 "variable '%s': copying %s memory into a "
                                 "host shard is not supported; add it with "
                                 "DDS_ADD_IN_PLACE (registered in place) or "
                                 "copy it to host memory first",
                                 name, mem_name(mem->kind));
            rc = mem_route(s, mem, what, 1, route_p);
            if (rc != 0)
                return rc;
        }
        if (*route_p == ROUTE_HOST && nrows > 0) {
            rc = check_host_ptr(s, data, what);
            if (rc != 0)
                return rc;
        }
    }
    *bytes_p = (size_t)nrows * row_bytes;
    return 0;
}

/* The pinned host mirror of a GPU shard for a transport that cannot reach
 * GPU memory: allocate, copy after the work queued on the shard's stream,
 * and wait for that copy (one stream, not the device). */
static int mirror_create(dds_store_t *s, dds_var_t *v, const void *data)
{
    const dds_memops_t *o = s->ms.ops;
    dds_memseg_t seg;
    int rc;
    rc = o->host_alloc(s->ms.ctx, v->shard_bytes, &v->mirror);
    if (rc != 0) {
        v->mirror = NULL;
        return dds_error(rc < 0 ? rc : -rc,
                         "variable '%s': cannot allocate a pinned host "
                         "mirror of %zu bytes for the %s shard: %s",
                         v->name, v->shard_bytes, mem_name(v->mem.kind),
                         dds_last_error());
    }
    seg.src_offset = 0;
    seg.dst_offset = 0;
    seg.len = v->shard_bytes;
    rc = o->copy_async(s->ms.ctx, DDS_COPY_D2H, v->mirror, data, &seg, 1,
                       &v->mem, NULL);
    if (rc == 0)
        rc = o->stream_fence(s->ms.ctx, &v->mem);
    if (rc != 0)
        return dds_error(rc < 0 ? rc : -rc,
                         "variable '%s': copying the %s shard to its host "
                         "mirror failed: %s",
                         v->name, mem_name(v->mem.kind), dds_last_error());
    DDS_LOG_ONCE(DDS_LOG_INFO, DDS_SUBSYS_CORE,
                 "GPU shards are served from pinned host mirrors: transport "
                 "'%s' cannot reach %s memory (no FI_HMEM)",
                 s->tr.ops->name ? s->tr.ops->name : "?",
                 mem_name(v->mem.kind));
    return 0;
}

static int check_layout(const char *name, const var_desc_t *all, int n,
                        int64_t *offsets)
{
    const var_desc_t *d0 = &all[0];
    offsets[0] = 0;
    for (int r = 0; r < n; r++) {
        const var_desc_t *d = &all[r];
        if (d->name_hash != d0->name_hash)
            return dds_error(-DDS_EINVAL,
                             "variable '%s': rank %d passed a different "
                             "variable name than rank 0 (collective calls "
                             "must be made in the same order on every rank)",
                             name, r);
        if (d->disp != d0->disp || d->itemsize != d0->itemsize ||
            d->dtype != d0->dtype)
            return dds_error(
                -DDS_EINVAL,
                "variable '%s': disp, itemsize and dtype must be equal on "
                "every rank: rank %d gave disp %llu x itemsize %llu (%s), "
                "expected disp %llu x itemsize %llu (%s) as on rank 0",
                name, r, (unsigned long long)d->disp,
                (unsigned long long)d->itemsize,
                dds_dtype_name((dds_dtype_t)d->dtype),
                (unsigned long long)d0->disp,
                (unsigned long long)d0->itemsize,
                dds_dtype_name((dds_dtype_t)d0->dtype));
        if (d->nrows > INT64_MAX - offsets[r])
            return dds_error(-DDS_EINVAL,
                             "variable '%s': the total number of rows "
                             "overflows int64 at rank %d", name, r);
        offsets[r + 1] = offsets[r] + d->nrows;
    }
    if (offsets[n] > INT64_MAX / (int64_t)(d0->disp * d0->itemsize))
        return dds_error(-DDS_EINVAL,
                         "variable '%s': %lld rows of %llu bytes overflow "
                         "64-bit byte offsets",
                         name, (long long)offsets[n],
                         (unsigned long long)(d0->disp * d0->itemsize));
    return 0;
}

static int var_create(dds_store_t *s, const char *name, const void *data,
                      int64_t nrows, size_t disp, size_t itemsize,
                      dds_dtype_t dtype, const dds_mem_t *mem, int mode)
{
    const dds_comm_t *c = &s->comm;
    dds_var_t *v = NULL;
    var_desc_t mine, *all = NULL;
    dds_region_desc_t rd;
    size_t bytes = 0;
    int rc, created = 0, route = ROUTE_HOST, deferred = 0, all_shared;

    rc = fork_refuse(s, mode == MODE_INIT ? "init" : "add", name);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&s->coll_mutex);
    rc = coll_refuse(s, mode == MODE_INIT ? "init" : "add", name);
    if (rc != 0) {
        pthread_mutex_unlock(&s->coll_mutex);
        return rc;
    }
    coll_begin(s, mode == MODE_INIT ? COLL_INIT : COLL_ADD);

    /* 1. local checks and allocation */
    rc = check_var_args(s, name, data, nrows, disp, itemsize, dtype, mem,
                        mode, &bytes, &route);
    if (rc == 0) {
        /* room in the table now, so that publishing cannot fail later */
        pthread_rwlock_wrlock(&s->table_lock);
        if (find_var(s, name, NULL) != NULL)
            rc = dds_error(-DDS_EEXIST, "variable '%s' already exists", name);
        else if (grow_array((void **)&s->vars, &s->cap_vars, s->nvars + 1,
                            sizeof(dds_var_t *)) != 0)
            rc = dds_error(-DDS_ENOMEM, "variable '%s': out of memory", name);
        pthread_rwlock_unlock(&s->table_lock);
    }
    if (rc == 0) {
        v = calloc(1, sizeof(*v));
        all = calloc((size_t)c->size, sizeof(*all));
        if (v != NULL)
            v->offsets = calloc((size_t)c->size + 1, sizeof(int64_t));
        if (v == NULL || all == NULL || v->offsets == NULL)
            rc = dds_error(-DDS_ENOMEM, "variable '%s': out of memory", name);
    }
    if (rc == 0) {
        strcpy(v->name, name);
        v->hash = name_hash(name);
        v->dtype = dtype;
        v->itemsize = itemsize;
        v->disp = disp;
        v->row_bytes = disp * itemsize;
        v->nranks = c->size;
        v->local_rows = nrows;
        v->shard_bytes = bytes;
        v->mem.kind = DDS_MEM_HOST;
        if (mode == MODE_IN_PLACE) {
            v->shard = (void *)data;
            if (mem != NULL)
                v->mem = *mem;
            if (route == ROUTE_STAGED && bytes > 0) {
                rc = mirror_create(s, v, data);
            } else if (route == ROUTE_DIRECT && bytes > 0 &&
                       ms_serves(s, v->mem.kind)) {
                /* peers read the shard through the NIC as soon as add
                 * returns: the work that produces it, queued on its
                 * stream, must be done (one stream, not the device) */
                rc = s->ms.ops->stream_fence(s->ms.ctx, &v->mem);
                if (rc != 0)
                    rc = dds_error(rc < 0 ? rc : -rc,
                                   "variable '%s': waiting for the work "
                                   "queued on the shard's stream: %s",
                                   name, dds_last_error());
            }
        } else if (has_shard_alloc(s)) {
            /* allocated in step 2b, once everybody agreed */
            deferred = 1;
        } else if (bytes > 0) {
            v->shard = mode == MODE_INIT ? calloc(1, bytes) : malloc(bytes);
            v->shard_owned = 1;
            if (v->shard == NULL)
                rc = dds_error(-DDS_ENOMEM,
                               "variable '%s': cannot allocate a shard of "
                               "%zu bytes",
                               name, bytes);
            else if (mode == MODE_COPY)
                memcpy(v->shard, data, bytes);
        }
    }
    rc = coll_agree(s, rc);
    if (rc != 0)
        goto fail;

    /* 2. everyone's description -> offsets, consistency */
    memset(&mine, 0, sizeof(mine));
    mine.nrows = nrows;
    mine.disp = disp;
    mine.itemsize = itemsize;
    mine.name_hash = v->hash;
    mine.dtype = (int32_t)dtype;
    mine.shard_alloc = deferred;
    rc = c->ops->allgather(c->ctx, &mine, sizeof(mine), all);
    if (rc != 0)
        rc = dds_error(rc < 0 ? rc : -rc,
                       "variable '%s': exchanging descriptions failed: %s",
                       name, dds_last_error());
    else
        rc = check_layout(name, all, c->size, v->offsets);
    rc = coll_agree(s, rc);
    if (rc != 0)
        goto fail;
    v->local_first = v->offsets[c->rank];

    /* 2b. deferred shards: the transport's collective shard_alloc when every
     * rank asked for it (the descriptions are the same everywhere, so every
     * rank decides alike), else malloc here */
    all_shared = 1;
    for (int r = 0; r < c->size; r++)
        if (!all[r].shard_alloc)
            all_shared = 0;
    rc = 0;
    if (all_shared) {
        void *base = NULL, *tok = NULL;
        rc = s->tr.ops->shard_alloc(s->tr.ctx, bytes, &base, &tok);
        if (rc != 0) {
            rc = dds_error(rc < 0 ? rc : -rc,
                           "variable '%s': transport '%s' could not allocate "
                           "a shard of %zu bytes: %s",
                           name, s->tr.ops->name, bytes, dds_last_error());
        } else if (tok == NULL || (bytes > 0 && base == NULL)) {
            rc = dds_error(-DDS_EIO, "variable '%s': transport '%s' "
                           "shard_alloc returned no memory", name,
                           s->tr.ops->name);
        } else {
            v->shard_token = tok;
            v->shard = bytes > 0 ? base : NULL;
        }
    } else if (deferred && bytes > 0) {
        v->shard = malloc(bytes);
        if (v->shard == NULL)
            rc = dds_error(-DDS_ENOMEM,
                           "variable '%s': cannot allocate a shard of "
                           "%zu bytes",
                           name, bytes);
        else
            v->shard_owned = 1;
    }
    if (rc == 0 && deferred && bytes > 0) {
        if (mode == MODE_INIT)
            memset(v->shard, 0, bytes);
        else
            memcpy(v->shard, data, bytes);
    }
    rc = coll_agree(s, rc);
    if (rc != 0)
        goto fail;

    /* 3. the transport */
    memset(&rd, 0, sizeof(rd));
    rd.name = v->name;
    rd.base = v->mirror != NULL ? v->mirror : v->shard;
    rd.bytes = bytes;
    rd.row_bytes = v->row_bytes;
    rd.nrows = nrows;
    rd.dtype = dtype;
    rd.itemsize = itemsize;
    rd.mem = v->mem;
    rd.alloc_token = v->shard_token;
    rd.offsets = v->offsets;
    rd.nranks = c->size;
    if (v->mirror != NULL) {
        rd.mem.kind = DDS_MEM_HOST;
        rd.mem.device = 0;
        rd.mem.stream = NULL;
    }
    rc = s->tr.ops->region_create(s->tr.ctx, &rd, &v->region);
    if (rc != 0) {
        if (rc > 0)
            rc = -rc;
        if (dds_last_error()[0] == '\0')
            dds_error(rc, "variable '%s': transport '%s' could not register "
                          "the shard", name, s->tr.ops->name);
        v->region = NULL;
    } else {
        created = 1;
    }
    rc = coll_agree(s, rc);
    if (rc != 0)
        goto fail;

    /* 4. publish (room was made in step 1) */
    pthread_rwlock_wrlock(&s->table_lock);
    s->vars[s->nvars++] = v;
    forget_released(s, name);
    pthread_rwlock_unlock(&s->table_lock);
    free(all);
    DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_CORE,
            "variable '%s': %lld rows here (first %lld), %lld in all, %zu B "
            "per row, %s",
            name, (long long)nrows, (long long)v->local_first,
            (long long)v->offsets[c->size], v->row_bytes,
            dds_dtype_name(dtype));
    pthread_mutex_unlock(&s->coll_mutex);
    return 0;

fail:
    rc = coll_failed(s, rc, mode == MODE_INIT ? "init" : "add", name);
    if (s->broken[0] != '\0' && v != NULL) {
        /* out of step: nothing collective, and peers may still read */
        var_abandon(s, v);
        v = NULL;
    } else if (created) {
        char saved[512];
        snprintf(saved, sizeof(saved), "%s", dds_last_error());
        (void)s->tr.ops->region_destroy(s->tr.ctx, v->region);
        dds_error(rc, "%s", saved);
    }
    free(all);
    var_release(s, v);
    pthread_mutex_unlock(&s->coll_mutex);
    return rc;
}

int dds_store_var_init(dds_store_t *s, const char *name, int64_t nrows,
                       size_t disp, size_t itemsize, dds_dtype_t dtype)
{
    if (s == NULL)
        return dds_error(-DDS_EINVAL, "dds_store_var_init: NULL store");
    return var_create(s, name, NULL, nrows, disp, itemsize, dtype, NULL,
                      MODE_INIT);
}

int dds_store_var_add(dds_store_t *s, const char *name, const void *data,
                      int64_t nrows, size_t disp, size_t itemsize,
                      dds_dtype_t dtype, const dds_mem_t *mem, int flags)
{
    int mode;
    if (s == NULL)
        return dds_error(-DDS_EINVAL, "dds_store_var_add: NULL store");
    if (flags == DDS_ADD_COPY) {
        mode = MODE_COPY;
    } else if (flags == DDS_ADD_IN_PLACE) {
        mode = MODE_IN_PLACE;
    } else {
        /* still collective: agree so that nobody waits for us */
        int rc = fork_refuse(s, "add", name);
        if (rc != 0)
            return rc;
        rc = dds_error(-DDS_EINVAL, "variable '%s': unknown flags %d",
                       name ? name : "(null)", flags);
        pthread_mutex_lock(&s->coll_mutex);
        if (coll_refuse(s, "add", name) == 0) {
            coll_begin(s, COLL_ADD);
            rc = coll_failed(s, coll_agree(s, rc), "add", name);
        } else
            rc = -DDS_ETIMEDOUT;
        pthread_mutex_unlock(&s->coll_mutex);
        return rc;
    }
    return var_create(s, name, data, nrows, disp, itemsize, dtype, mem, mode);
}

static int has_region_abandon(const dds_store_t *s)
{
    const dds_transport_ops_t *o = s->tr.ops;
    return o->size >= offsetof(dds_transport_ops_t, region_abandon) +
                          sizeof(o->region_abandon) &&
           o->region_abandon != NULL;
}

static int has_region_join(const dds_store_t *s)
{
    const dds_transport_ops_t *o = s->tr.ops;
    return o->size >= offsetof(dds_transport_ops_t, region_join) +
                          sizeof(o->region_join) &&
           o->region_join != NULL;
}

/* The layout a transport's region_join returned, checked before the store
 * relies on it. */
static int check_joined_layout(const char *name, const dds_region_layout_t *l)
{
    if (l->nowners < 1 || l->offsets == NULL)
        return dds_error(-DDS_EIO, "join('%s'): the transport reported %d "
                         "owners", name, l->nowners);
    if ((unsigned)l->dtype >= (unsigned)DDS_DTYPE_COUNT || l->itemsize == 0 ||
        l->disp == 0 || l->row_bytes / l->itemsize != l->disp ||
        l->row_bytes % l->itemsize != 0)
        return dds_error(-DDS_EIO, "join('%s'): inconsistent row layout "
                         "(dtype %d, itemsize %zu, disp %zu, row bytes %zu)",
                         name, (int)l->dtype, l->itemsize, l->disp,
                         l->row_bytes);
    if (l->offsets[0] != 0)
        return dds_error(-DDS_EIO, "join('%s'): first row %lld, expected 0",
                         name, (long long)l->offsets[0]);
    for (int r = 0; r < l->nowners; r++)
        if (l->offsets[r + 1] < l->offsets[r])
            return dds_error(-DDS_EIO, "join('%s'): rows of owner %d are "
                             "negative", name, r);
    return 0;
}

int dds_store_var_join(dds_store_t *s, const char *name)
{
    dds_region_layout_t lay;
    void *region = NULL;
    dds_var_t *v = NULL;
    int rc;

    if (s == NULL)
        return dds_error(-DDS_EINVAL, "dds_store_var_join: NULL store");
    rc = check_name(name);
    if (rc != 0)
        return rc;
    if (!has_region_join(s))
        return dds_error(-DDS_ENOSYS,
                         "join('%s'): transport '%s' cannot read variables "
                         "published by another job (that is method 2's "
                         "reader)",
                         name, s->tr.ops->name);
    pthread_rwlock_rdlock(&s->table_lock);
    if (find_var(s, name, NULL) != NULL)
        rc = dds_error(-DDS_EEXIST, "variable '%s' already exists", name);
    pthread_rwlock_unlock(&s->table_lock);
    if (rc != 0)
        return rc;

    /* The wait happens here, without any store lock held. */
    memset(&lay, 0, sizeof lay);
    rc = s->tr.ops->region_join(s->tr.ctx, name, &lay, &region);
    if (rc != 0) {
        rc = rc < 0 ? rc : -rc;
        if (dds_last_error()[0] == '\0')
            dds_error(rc, "join('%s'): transport '%s' failed", name,
                      s->tr.ops->name);
        return rc;
    }
    rc = check_joined_layout(name, &lay);
    if (rc == 0) {
        v = calloc(1, sizeof(*v));
        if (v == NULL)
            rc = dds_error(-DDS_ENOMEM, "join('%s'): out of memory", name);
    }
    if (rc == 0) {
        strcpy(v->name, name);
        v->hash = name_hash(name);
        v->dtype = lay.dtype;
        v->itemsize = lay.itemsize;
        v->disp = lay.disp;
        v->row_bytes = lay.row_bytes;
        v->nranks = lay.nowners;
        v->offsets = lay.offsets;
        lay.offsets = NULL;
        v->mem.kind = DDS_MEM_HOST;
        v->region = region;
        v->joined = 1;
        pthread_rwlock_wrlock(&s->table_lock);
        if (find_var(s, name, NULL) != NULL)
            rc = dds_error(-DDS_EEXIST, "variable '%s' already exists", name);
        else if (grow_array((void **)&s->vars, &s->cap_vars, s->nvars + 1,
                            sizeof(dds_var_t *)) != 0)
            rc = dds_error(-DDS_ENOMEM, "join('%s'): out of memory", name);
        if (rc == 0) {
            s->vars[s->nvars++] = v;
            forget_released(s, name);
        }
        pthread_rwlock_unlock(&s->table_lock);
    }
    if (rc != 0) {
        char saved[512];
        snprintf(saved, sizeof(saved), "%s", dds_last_error());
        (void)s->tr.ops->region_destroy(s->tr.ctx, region);
        free(lay.offsets);
        if (v != NULL) {
            v->region = NULL;
            var_release(s, v);
        }
        dds_error(rc, "%s", saved);
        return rc;
    }
    DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_CORE,
            "join('%s'): %lld rows owned by %d ranks of another job, %zu B "
            "per row, %s",
            name, (long long)v->offsets[v->nranks], v->nranks, v->row_bytes,
            dds_dtype_name(v->dtype));
    return 0;
}

/* Release a detached variable's transport region and memory; returns the
 * region_destroy status. */
static int var_destroy(dds_store_t *s, dds_var_t *v)
{
    int rc = 0;
    if (v->region != NULL) {
        rc = s->tr.ops->region_destroy(s->tr.ctx, v->region);
        if (rc > 0)
            rc = -rc;
        if (rc != 0 && dds_last_error()[0] == '\0')
            dds_error(rc, "variable '%s': transport '%s' failed to release "
                          "the region", v->name, s->tr.ops->name);
    }
    var_release(s, v);
    return rc;
}

int dds_store_var_free(dds_store_t *s, const char *name)
{
    dds_var_t *v = NULL;
    size_t idx = 0;
    int rc;

    if (s == NULL)
        return dds_error(-DDS_EINVAL, "dds_store_var_free: NULL store");
    rc = fork_refuse(s, "free", name);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&s->coll_mutex);
    rc = check_name(name);
    if (rc == 0) {
        pthread_rwlock_rdlock(&s->table_lock);
        if (find_var(s, name, NULL) == NULL)
            rc = not_live(s, name);
        pthread_rwlock_unlock(&s->table_lock);
    }
    if (rc == 0)
        rc = coll_refuse(s, "free", name);
    if (s->broken[0] != '\0')
        goto out;
    coll_begin(s, COLL_VAR_FREE);
    rc = coll_failed(s, coll_agree(s, rc), "free", name);
    if (rc != 0)
        goto out;
    pthread_rwlock_wrlock(&s->table_lock);
    v = find_var(s, name, &idx);
    if (v != NULL) {
        memmove(&s->vars[idx], &s->vars[idx + 1],
                (s->nvars - idx - 1) * sizeof(dds_var_t *));
        s->nvars--;
        note_released(s, name, RELEASED_BY_VAR_FREE);
    }
    pthread_rwlock_unlock(&s->table_lock);
    rc = v != NULL ? var_destroy(s, v) : 0;
    rc = coll_failed(s, coll_agree(s, rc), "free", name);
out:
    pthread_mutex_unlock(&s->coll_mutex);
    return rc;
}

int dds_store_free(dds_store_t *s)
{
    dds_var_t **vars;
    size_t n;
    int rc = 0;

    if (s == NULL)
        return dds_error(-DDS_EINVAL, "dds_store_free: NULL store");
    rc = fork_refuse(s, "free", NULL);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&s->coll_mutex);
    pthread_rwlock_wrlock(&s->table_lock);
    vars = detach_vars(s, &n);
    s->freed = 1;
    for (size_t i = 0; i < n; i++)
        note_released(s, vars[i]->name, RELEASED_BY_FREE);
    pthread_rwlock_unlock(&s->table_lock);
    if (n == 0) { /* idempotent, and nothing collective to do */
        free(vars);
        pthread_mutex_unlock(&s->coll_mutex);
        return 0;
    }
    /* No rank may release its shard while a peer can still read it: every
     * rank stops reading before it enters free() (one thread makes the
     * collective calls), so one agreement here is the fence.  Its failure
     * (e.g. a communicator already finalized) does not stop the local
     * cleanup. */
    const int was_broken = s->broken[0] != '\0';
    if (!was_broken) {
        coll_begin(s, COLL_FREE);
        rc = coll_failed(s, coll_agree(s, 0), "free", NULL);
    }
    /* A communicator that reports -DDS_EFREED is gone (MPI finalized): the
     * peers are gone too, so free() is local cleanup and succeeds. */
    const int comm_gone = rc == -DDS_EFREED;
    if (comm_gone) {
        dds_error_clear();
        rc = 0;
    }
    if (s->broken[0] != '\0') {
        /* out of step: release locally, never wait for a peer; the
         * variables are gone here (later calls: DDStoreError "freed").
         * free() of a store already out of step succeeds; the free() whose
         * own agreement timed out reports that. */
        for (size_t i = 0; i < n; i++)
            var_abandon(s, vars[i]);
        free(vars);
        DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_CORE,
                "free(): %zu variables released locally (out of step since "
                "%s timed out)", n, s->broken);
        pthread_mutex_unlock(&s->coll_mutex);
        return was_broken ? 0 : rc;
    }
    /* Same order on every rank: the table keeps insertion order. */
    for (size_t i = 0; i < n; i++) {
        int r = var_destroy(s, vars[i]);
        if (r != 0 && rc == 0)
            rc = r;
    }
    free(vars);
    if (!comm_gone) {
        int arc = coll_failed(s, coll_agree(s, rc), "free", NULL);
        if (rc == 0)
            rc = arc;
    }
    DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_CORE, "free(): released %zu variables",
            n);
    pthread_mutex_unlock(&s->coll_mutex);
    return rc;
}

/* ---- variables: local ------------------------------------------------- */

/* var_update where the source or the shard is GPU memory: copies through
 * the memsys on one stream (the source's when it is GPU memory, else the
 * shard's), the host mirror refreshed, then a fence on that stream so the
 * rows are in place for every reader when this returns. */
static int update_gpu(dds_store_t *s, dds_var_t *v, const dds_buf_t *src,
                      int64_t offset)
{
    const dds_memops_t *o = s->ms.ops;
    const int src_gpu = src->mem.kind != DDS_MEM_HOST;
    const dds_mem_kind_t need = src_gpu ? src->mem.kind : v->mem.kind;
    const size_t n = (size_t)src->nrows * v->row_bytes;
    const size_t off = (size_t)offset * v->row_bytes;
    const dds_mem_t *on;
    dds_memseg_t seg;
    int rc;

    if ((int)src->mem.kind < DDS_MEM_HOST || (int)src->mem.kind > DDS_MEM_ROCM)
        return dds_error(-DDS_EINVAL, "variable '%s': update: unknown "
                                      "memory kind %d",
                         v->name, (int)src->mem.kind);
    if (o == NULL)
        return dds_error(-DDS_ENOGPU,
                         "variable '%s': update from %s memory into a %s "
                         "shard needs a usable GPU runtime; this store has "
                         "none (no GPU)",
                         v->name, mem_name(src->mem.kind),
                         mem_name(v->mem.kind));
    if (o->kind != need ||
        (src_gpu && v->mem.kind != DDS_MEM_HOST && v->mem.kind != need))
        return dds_error(-DDS_ENOSYS,
                         "variable '%s': update from %s memory into a %s "
                         "shard, but this process's GPU runtime ('%s') "
                         "drives %s memory",
                         v->name, mem_name(src->mem.kind),
                         mem_name(v->mem.kind), o->name ? o->name : "?",
                         mem_name(o->kind));
    if (n == 0)
        return 0;
    seg.src_offset = 0;
    seg.dst_offset = off;
    seg.len = n;
    if (v->mem.kind != DDS_MEM_HOST) {
        on = src_gpu ? &src->mem : &v->mem;
        rc = o->copy_async(s->ms.ctx, src_gpu ? DDS_COPY_D2D : DDS_COPY_H2D,
                           v->shard, src->ptr, &seg, 1, on, NULL);
        if (rc == 0 && v->mirror != NULL) {
            if (src_gpu)
                rc = o->copy_async(s->ms.ctx, DDS_COPY_D2H, v->mirror,
                                   src->ptr, &seg, 1, on, NULL);
            else
                memcpy((char *)v->mirror + off, src->ptr, n);
        }
    } else {
        on = &src->mem;
        rc = o->copy_async(s->ms.ctx, DDS_COPY_D2H, v->shard, src->ptr, &seg,
                           1, on, NULL);
    }
    if (rc == 0)
        rc = o->stream_fence(s->ms.ctx, on);
    if (rc != 0)
        return dds_error(rc < 0 ? rc : -rc,
                         "variable '%s': update from %s memory into the %s "
                         "shard: %s",
                         v->name, mem_name(src->mem.kind),
                         mem_name(v->mem.kind), dds_last_error());
    return 0;
}

int dds_store_var_update(dds_store_t *s, const char *name,
                         const dds_buf_t *src, int64_t offset)
{
    dds_var_t *v;
    int rc;

    if (s == NULL || src == NULL)
        return dds_error(-DDS_EINVAL, "dds_store_var_update: NULL %s",
                         s == NULL ? "store" : "source buffer");
    rc = check_name(name);
    if (rc != 0)
        return rc;
    pthread_rwlock_rdlock(&s->table_lock);
    v = find_var(s, name, NULL);
    if (v == NULL) {
        rc = not_live(s, name);
        goto out;
    }
    if (v->joined) {
        rc = dds_error(-DDS_EINVAL,
                       "variable '%s' was published by another job and "
                       "joined here (method 2): it is read-only in this job",
                       name);
        goto out;
    }
    rc = check_buf(v, src);
    if (rc != 0)
        goto out;
    if (offset < 0 || offset > v->local_rows ||
        src->nrows > v->local_rows - offset) {
        rc = dds_error(-DDS_ERANGE,
                       "variable '%s': rows [%lld, %lld) are outside this "
                       "rank's shard of %lld rows",
                       name, (long long)offset,
                       (long long)offset + (long long)src->nrows,
                       (long long)v->local_rows);
        goto out;
    }
    if (src->mem.kind != DDS_MEM_HOST || v->mem.kind != DDS_MEM_HOST) {
        rc = update_gpu(s, v, src, offset);
        goto out;
    }
    if (src->nrows > 0)
        memmove((char *)v->shard + (size_t)offset * v->row_bytes, src->ptr,
                (size_t)src->nrows * v->row_bytes);
out:
    pthread_rwlock_unlock(&s->table_lock);
    return rc;
}

int dds_store_var_info(dds_store_t *s, const char *name,
                       dds_var_info_t *info_p)
{
    dds_var_t *v;
    int rc;
    if (s == NULL || info_p == NULL)
        return dds_error(-DDS_EINVAL, "dds_store_var_info: NULL argument");
    rc = check_name(name);
    if (rc != 0)
        return rc;
    pthread_rwlock_rdlock(&s->table_lock);
    v = find_var(s, name, NULL);
    if (v == NULL) {
        rc = not_live(s, name);
    } else {
        info_p->total_rows = v->offsets[v->nranks];
        info_p->local_rows = v->local_rows;
        info_p->local_first = v->local_first;
        info_p->disp = v->disp;
        info_p->itemsize = v->itemsize;
        info_p->row_bytes = v->row_bytes;
        info_p->dtype = v->dtype;
        info_p->mem = v->mem;
        info_p->nranks = v->nranks;
    }
    pthread_rwlock_unlock(&s->table_lock);
    return rc;
}

int dds_store_var_offsets(dds_store_t *s, const char *name, int64_t *offsets)
{
    dds_var_t *v;
    int rc;
    if (s == NULL || offsets == NULL)
        return dds_error(-DDS_EINVAL, "dds_store_var_offsets: NULL argument");
    rc = check_name(name);
    if (rc != 0)
        return rc;
    pthread_rwlock_rdlock(&s->table_lock);
    v = find_var(s, name, NULL);
    if (v == NULL)
        rc = not_live(s, name);
    else
        memcpy(offsets, v->offsets, ((size_t)v->nranks + 1) * sizeof(int64_t));
    pthread_rwlock_unlock(&s->table_lock);
    return rc;
}

int dds_store_var_foreach(dds_store_t *s,
                          void (*fn)(void *arg, const char *name), void *arg)
{
    if (s == NULL || fn == NULL)
        return dds_error(-DDS_EINVAL, "dds_store_var_foreach: NULL argument");
    pthread_rwlock_rdlock(&s->table_lock);
    for (size_t i = 0; i < s->nvars; i++)
        fn(arg, s->vars[i]->name);
    pthread_rwlock_unlock(&s->table_lock);
    return 0;
}

/* ---- reads ------------------------------------------------------------ */

/* For a destination the core cannot memcpy into (device memory), turn the
 * plan into reads only: every direct read is kept, staged reads are
 * dropped, and every row that a copy would have written is read straight
 * into its slot. */
static int device_ops(tctx_t *tc, const dds_var_t *v, const int64_t *rows,
                      size_t maxr, dds_read_op_t **ops_p, size_t *nops_p)
{
    const dds_plan_t *pl = &tc->plan;
    size_t rb = v->row_bytes, per_row = 1, need = 0, n = 0;

    if (maxr != 0)
        per_row = (rb + maxr - 1) / maxr;
    for (size_t i = 0; i < pl->nops; i++)
        need += !pl->ops[i].staged;
    for (size_t i = 0; i < pl->ncopies; i++)
        need += (pl->copies[i].len / rb) * per_row;
    if (need > tc->xops_cap) {
        size_t cap = need < 64 ? 64 : need;
        dds_read_op_t *x = realloc(tc->xops, cap * sizeof(*x));
        if (x == NULL)
            return dds_error(-DDS_ENOMEM, "variable '%s': out of memory",
                             v->name);
        tc->xops = x;
        tc->xops_cap = cap;
    }
    for (size_t i = 0; i < pl->nops; i++)
        if (!pl->ops[i].staged)
            tc->xops[n++] = pl->ops[i];
    for (size_t i = 0; i < pl->ncopies; i++) {
        const dds_copy_op_t *c = &pl->copies[i];
        for (size_t q = c->dst_offset / rb; q < (c->dst_offset + c->len) / rb;
             q++) {
            int owner = 0;
            int64_t local = 0;
            size_t left = rb, done = 0;
            (void)dds_layout_locate(v->offsets, v->nranks, rows[q], &owner,
                                    &local);
            while (left > 0) {
                size_t piece = maxr != 0 && left > maxr ? maxr : left;
                dds_read_op_t *op = &tc->xops[n++];
                op->owner = owner;
                op->staged = 0;
                op->src_offset = local * (int64_t)rb + (int64_t)done;
                op->len = piece;
                op->dst_offset = q * rb + done;
                done += piece;
                left -= piece;
            }
        }
    }
    *ops_p = tc->xops;
    *nops_p = n;
    return 0;
}

/* Serve the planned ops of this rank from the host view of its shard (the
 * shard itself, or the host mirror of a GPU shard, except in a forked child)
 * with memcpy into `dst` / `staging`, and drop them from ops[0..*nops_p).
 * Only with DDS_TRANSPORT_CAP_LOCAL_SELF (this rank index owns the local
 * shard).  Returns the bytes served. */
static size_t serve_local(const dds_store_t *s, const dds_var_t *v,
                          const dds_plan_t *pl, dds_read_op_t *ops,
                          size_t *nops_p, char *dst, char *staging)
{
    const char *hv =
        v->mem.kind == DDS_MEM_HOST ? (const char *)v->shard
        : atomic_load_explicit(&g_fork_gen, memory_order_relaxed) ==
                s->fork_gen
            ? (const char *)v->mirror
            : NULL;
    const int me = s->comm.rank;
    size_t a, b, bytes = 0;

    if (!(s->tr.caps & DDS_TRANSPORT_CAP_LOCAL_SELF) || hv == NULL ||
        me >= v->nranks)
        return 0;
    a = pl->owner_first[me];
    b = pl->owner_first[me + 1];
    if (b <= a)
        return 0;
    for (size_t i = a; i < b; i++) {
        const dds_read_op_t *op = &ops[i];
        char *to = op->staged ? staging : dst;
        memcpy(to + op->dst_offset, hv + op->src_offset, op->len);
        bytes += op->len;
    }
    memmove(&ops[a], &ops[b], (*nops_p - b) * sizeof(*ops));
    *nops_p -= b - a;
    return bytes;
}

/* The plan's copy ops on host memory: staging -> slot, then first
 * occurrence -> repeats, in order. */
static void host_copies(const dds_plan_t *pl, char *dst, const char *staging)
{
    const dds_copy_op_t *c = pl->copies;
    for (size_t i = 0; i < pl->ncopies; i++) {
        const char *from = c[i].from_staging ? staging : dst;
        memcpy(dst + c[i].dst_offset, from + c[i].src_offset, c[i].len);
    }
}

/* One transport read; the error names the variable and the transport. */
static int transport_read(dds_store_t *s, dds_reader_t *reader, dds_var_t *v,
                          const dds_read_op_t *ops, size_t nops, void *dst,
                          void *dh, const dds_mem_t *dst_mem, void *staging,
                          void *sh, uint64_t *wait_ns, uint64_t *t_xfer)
{
    void *treader = reader != NULL ? reader->treader : NULL;
    uint64_t t1, t2;
    int rc;
    if (s->serialize)
        *wait_ns += lock_mutex_timed(&s->tmutex);
    t1 = dds_prof_now();
    rc = s->tr.ops->read(s->tr.ctx, treader, v->region, ops, nops, dst, dh,
                         dst_mem, staging, sh, &v->prof);
    t2 = dds_prof_now();
    *t_xfer += t2 - t1;
    if (s->serialize)
        pthread_mutex_unlock(&s->tmutex);
    if (rc != 0) {
        if (rc > 0)
            rc = -rc;
        rc = dds_error(rc, "read of '%s' through transport '%s': %s", v->name,
                       s->tr.ops->name ? s->tr.ops->name : "?",
                       dds_last_error()[0] ? dds_last_error()
                                           : dds_strerror(rc));
    }
    return rc;
}

/* A GPU destination the transport cannot reach: read into a pinned staging
 * buffer laid out like the destination (plus the plan's own staging area
 * behind it), do the plan's copies on the host, then one asynchronous
 * host-to-device copy on dst->mem.stream and give the buffer back without
 * waiting (its event keeps it from being reused before the copy ran). */
static int read_staged(dds_store_t *s, dds_reader_t *reader, dds_var_t *v,
                       tctx_t *tc, dds_read_op_t *ops, size_t *nops_p,
                       const dds_buf_t *dst, size_t *local_bytes_p,
                       size_t *staged_p, uint64_t *wait_ns, uint64_t *t_xfer,
                       uint64_t *t_gpu)
{
    static const dds_mem_t host = {DDS_MEM_HOST, 0, NULL};
    const dds_memops_t *o = s->ms.ops;
    const size_t dbytes = (size_t)dst->nrows * v->row_bytes;
    const size_t soff = (dbytes + 63) & ~(size_t)63;
    const size_t total = soff + tc->plan.staging_bytes;
    void *sbuf = NULL, *hp = NULL;
    char *h, *stg;
    dds_memseg_t seg;
    uint64_t t0;
    int rc, rc2;

    if (dbytes == 0) {
        *nops_p = 0;
        return 0;
    }
    t0 = dds_prof_now();
    rc = o->staging_acquire(s->ms.ctx, total, &sbuf, &hp);
    *t_gpu += dds_prof_now() - t0;
    if (rc != 0)
        return dds_error(rc < 0 ? rc : -rc,
                         "read of '%s' into %s memory: cannot get a pinned "
                         "staging buffer of %zu bytes: %s",
                         v->name, mem_name(dst->mem.kind), total,
                         dds_last_error());
    h = hp;
    stg = tc->plan.staging_bytes > 0 ? h + soff : NULL;
    *local_bytes_p = serve_local(s, v, &tc->plan, ops, nops_p, h, stg);
    rc = 0;
    if (*nops_p > 0)
        rc = transport_read(s, reader, v, ops, *nops_p, h, NULL, &host, stg,
                            NULL, wait_ns, t_xfer);
    t0 = dds_prof_now();
    if (rc == 0) {
        host_copies(&tc->plan, h, stg);
        seg.src_offset = 0;
        seg.dst_offset = 0;
        seg.len = dbytes;
        rc = o->copy_async(s->ms.ctx, DDS_COPY_H2D, dst->ptr, h, &seg, 1,
                           &dst->mem, sbuf);
        if (rc != 0)
            rc = dds_error(rc < 0 ? rc : -rc,
                           "read of '%s': copy from the staging buffer to "
                           "%s memory failed: %s",
                           v->name, mem_name(dst->mem.kind), dds_last_error());
    }
    rc2 = o->staging_release(s->ms.ctx, sbuf);
    *t_gpu += dds_prof_now() - t0;
    if (rc == 0 && rc2 != 0)
        rc = dds_error(rc2 < 0 ? rc2 : -rc2,
                       "read of '%s': releasing the staging buffer: %s",
                       v->name, dds_last_error());
    if (rc == 0) {
        *staged_p = dbytes + tc->plan.staging_bytes;
        DDS_LOG_ONCE(DDS_LOG_WARN, DDS_SUBSYS_CORE,
                     "reads into %s memory go through pinned host staging "
                     "buffers: transport '%s' cannot reach %s memory (no "
                     "FI_HMEM); counted as staged_bytes in the profile; "
                     "DDSTORE_GPU_STAGING=0 makes this an error",
                     mem_name(dst->mem.kind),
                     s->tr.ops->name ? s->tr.ops->name : "?",
                     mem_name(dst->mem.kind));
    }
    return rc;
}

static int store_read(dds_store_t *s, dds_reader_t *reader, const char *name,
                      const dds_buf_t *dst, const int64_t *rows, size_t n,
                      int64_t start, int is_batch)
{
    uint64_t t0 = dds_prof_now(), wait_ns, t_xfer = 0, t_gpu = 0;
    dds_plan_params_t pp;
    dds_read_op_t *ops;
    size_t nops, local_bytes = 0, staged = 0;
    dds_var_t *v;
    tctx_t *tc;
    int rc, route = ROUTE_HOST;

    if (DDS_UNLIKELY(s == NULL || dst == NULL))
        return dds_error(-DDS_EINVAL, "read: NULL %s",
                         s == NULL ? "store" : "destination buffer");
    rc = check_name(name);
    if (rc != 0)
        return rc;
    if (reader != NULL && reader->store != s)
        return dds_error(-DDS_EINVAL,
                         "read of '%s': the reader belongs to another store",
                         name);
    wait_ns = lock_read_timed(&s->table_lock);

    /* validate everything before any byte moves */
    v = find_var(s, name, NULL);
    if (v == NULL) {
        rc = not_live(s, name);
        goto out;
    }
    rc = check_buf(v, dst);
    if (rc != 0)
        goto out;
    if (is_batch && (n > (uint64_t)INT64_MAX || (int64_t)n != dst->nrows)) {
        rc = dds_error(-DDS_EINVAL,
                       "variable '%s': %zu indices for a buffer of %lld rows",
                       name, n, (long long)dst->nrows);
        goto out;
    }
    if (is_batch && n > 0 && rows == NULL) {
        rc = dds_error(-DDS_EINVAL, "variable '%s': indices are NULL", name);
        goto out;
    }
    if (dst->mem.kind != DDS_MEM_HOST) {
        char what[DDS_NAME_MAX + 32];
        snprintf(what, sizeof(what), "read of '%s'", name);
        rc = mem_route(s, &dst->mem, what, 0, &route);
        if (rc != 0)
            goto out;
    }
    tc = tctx_get();
    if (tc == NULL) {
        rc = dds_error(-DDS_ENOMEM, "read of '%s': out of memory", name);
        goto out;
    }
    if (is_batch && n > 0) {
        /* The caller's indices are read once, here: the plan passes over
         * them several times (check, sort, walk) and the GPU path once
         * more, so an array that another thread changes meanwhile would
         * otherwise be checked in one state and read in another. */
        if (n > tc->rows_cap) {
            int64_t *p = n > SIZE_MAX / sizeof(int64_t)
                             ? NULL
                             : realloc(tc->rows, n * sizeof(int64_t));
            if (p == NULL) {
                rc = dds_error(-DDS_ENOMEM,
                               "read of '%s': out of memory for %zu indices",
                               name, n);
                goto out;
            }
            tc->rows = p;
            tc->rows_cap = n;
        }
        memcpy(tc->rows, rows, n * sizeof(int64_t));
        rows = tc->rows;
    }
    pp.field_mask = 0;
    pp.nranks = v->nranks;
    pp.offsets = v->offsets;
    pp.row_bytes = v->row_bytes;
    pp.max_read_bytes = s->max_read_bytes;
    pp.merge_row_bytes_max = s->merge_row_bytes;
    rc = is_batch ? dds_plan_batch(&pp, rows, n, &tc->plan)
                  : dds_plan_range(&pp, start, dst->nrows, &tc->plan);
    if (rc != 0) {
        rc = dds_error(rc, "variable '%s': %s", name, dds_last_error());
        goto out;
    }
    ops = tc->plan.ops;
    nops = tc->plan.nops;

    if (route == ROUTE_HOST) {
        void *dh, *sh = NULL;
        if (tc->plan.staging_bytes > 0 &&
            tctx_staging(tc, tc->plan.staging_bytes) != 0) {
            rc = dds_error(-DDS_ENOMEM,
                           "read of '%s': cannot allocate %zu staging bytes",
                           name, tc->plan.staging_bytes);
            goto out;
        }
        /* rows of this rank straight from the local shard's host view */
        local_bytes = serve_local(s, v, &tc->plan, ops, &nops,
                                  (char *)dst->ptr, (char *)tc->staging);
        if (nops > 0) {
            dh = reg_lookup(s, dst->ptr, (size_t)dst->nrows * v->row_bytes);
            if (tc->plan.staging_bytes > 0)
                sh = reg_lookup(s, tc->staging, tc->plan.staging_bytes);
            rc = transport_read(s, reader, v, ops, nops, dst->ptr, dh,
                                &dst->mem, tc->staging, sh, &wait_ns,
                                &t_xfer);
            if (rc != 0)
                goto out;
        }
        host_copies(&tc->plan, (char *)dst->ptr, (const char *)tc->staging);
        staged = tc->plan.staging_bytes;
    } else if (route == ROUTE_DIRECT) {
        /* The NIC writes into GPU memory: queued kernels that still use the
         * destination must be done first.  One event on the caller's
         * stream, never a device-wide synchronise.  Without a memsys for
         * this memory the caller orders (C users, tests). */
        if (dst->nrows > 0 && ms_serves(s, dst->mem.kind)) {
            uint64_t tg = dds_prof_now();
            rc = s->ms.ops->stream_fence(s->ms.ctx, &dst->mem);
            t_gpu += dds_prof_now() - tg;
            if (rc != 0) {
                rc = dds_error(rc < 0 ? rc : -rc,
                               "read of '%s': waiting for the work queued on "
                               "the destination's stream: %s",
                               name, dds_last_error());
                goto out;
            }
        }
        /* no host copies into device memory: every row is read in place */
        if (tc->plan.ncopies > 0) {
            rc = device_ops(tc, v, rows, s->max_read_bytes, &ops, &nops);
            if (rc != 0)
                goto out;
        }
        if (nops > 0) {
            void *dh = reg_lookup(s, dst->ptr,
                                  (size_t)dst->nrows * v->row_bytes);
            rc = transport_read(s, reader, v, ops, nops, dst->ptr, dh,
                                &dst->mem, NULL, NULL, &wait_ns, &t_xfer);
            if (rc == -DDS_ENOSYS && hmem_failed(s, dst->mem.kind, name)) {
                /* the registration result says no: the same read, staged */
                ops = tc->plan.ops;
                nops = tc->plan.nops;
                rc = read_staged(s, reader, v, tc, ops, &nops, dst,
                                 &local_bytes, &staged, &wait_ns, &t_xfer,
                                 &t_gpu);
            }
            if (rc != 0)
                goto out;
        }
    } else {
        rc = read_staged(s, reader, v, tc, ops, &nops, dst, &local_bytes,
                         &staged, &wait_ns, &t_xfer, &t_gpu);
        if (rc != 0)
            goto out;
    }

    dds_prof_add(&v->prof, DDS_PROF_CALLS, 1);
    dds_prof_add(&v->prof, DDS_PROF_ROWS, (uint64_t)dst->nrows);
    dds_prof_add(&v->prof, DDS_PROF_BYTES,
                 (uint64_t)dst->nrows * (uint64_t)v->row_bytes);
    dds_prof_add(&v->prof, DDS_PROF_READS, (uint64_t)nops);
    dds_prof_add(&v->prof, DDS_PROF_LOCAL_BYTES, local_bytes);
    dds_prof_add(&v->prof, DDS_PROF_STAGED_BYTES, staged);
    dds_prof_add(&v->prof, DDS_PROF_NS_LOCK_WAIT, wait_ns);
    dds_prof_add(&v->prof, DDS_PROF_NS_GPU_SYNC, t_gpu);
    if (t0 != 0) {
        uint64_t total = dds_prof_now() - t0;
        uint64_t known = wait_ns + t_xfer + t_gpu;
        dds_prof_add(&v->prof, DDS_PROF_NS_OTHER,
                     total > known ? total - known : 0);
        dds_prof_add(&v->prof, DDS_PROF_NS_TOTAL, total);
    }
out:
    pthread_rwlock_unlock(&s->table_lock);
    return rc;
}

int dds_store_get(dds_store_t *s, dds_reader_t *reader, const char *name,
                  const dds_buf_t *dst, int64_t start)
{
    return store_read(s, reader, name, dst, NULL, 0, start, 0);
}

int dds_store_get_batch(dds_store_t *s, dds_reader_t *reader,
                        const char *name, const dds_buf_t *dst,
                        const int64_t *rows, size_t n)
{
    return store_read(s, reader, name, dst, rows, n, 0, 1);
}

/* ---- receive buffers -------------------------------------------------- */

int dds_store_recv_register(dds_store_t *s, void *ptr, size_t bytes,
                            const dds_mem_t *mem)
{
    dds_mem_t m = {DDS_MEM_HOST, 0, NULL};
    void *handle = NULL;
    size_t pos;
    int rc, route = ROUTE_HOST;

    if (s == NULL || ptr == NULL || bytes == 0)
        return dds_error(-DDS_EINVAL, "recv_register: NULL store, NULL "
                                      "pointer or zero bytes");
    if ((uintptr_t)ptr > UINTPTR_MAX - bytes)
        return dds_error(-DDS_EINVAL, "recv_register: range wraps around");
    if (mem != NULL) {
        m = *mem;
        rc = mem_route(s, &m, "recv_register", 0, &route);
        if (rc != 0)
            return rc;
    }
    if (route == ROUTE_HOST) {
        rc = check_host_ptr(s, ptr, "recv_register");
        if (rc != 0)
            return rc;
    }
    /* Exactly this range again: a no-op (as in the original), unless it
     * was registered as another kind of memory. */
    pthread_rwlock_rdlock(&s->reg_lock);
    rc = reg_again(s, ptr, bytes, &m);
    pthread_rwlock_unlock(&s->reg_lock);
    if (rc != 1)
        return rc;
    /* Staged GPU memory is never touched by the transport: only recorded. */
    if (route != ROUTE_STAGED && s->tr.ops->recv_register != NULL) {
        if (s->serialize)
            pthread_mutex_lock(&s->tmutex);
        rc = s->tr.ops->recv_register(s->tr.ctx, ptr, bytes, &m, &handle);
        if (s->serialize)
            pthread_mutex_unlock(&s->tmutex);
        if (rc > 0)
            rc = -rc;
        if (rc == -DDS_ENOSYS && route == ROUTE_DIRECT &&
            hmem_failed(s, m.kind, "recv_register")) {
            rc = 0;              /* recorded only: reads of it are staged */
            handle = NULL;
        }
        if (rc != 0)
            return rc;
    }
    pthread_rwlock_wrlock(&s->reg_lock);
    rc = reg_again(s, ptr, bytes, &m);
    if (rc == 0) {
        rc = -DDS_EEXIST;  /* another thread registered it meanwhile: ours
                              goes (below) and the call is a no-op */
    } else if (rc == 1) {
        rc = 0;
        if (grow_array((void **)&s->regs, &s->cap_regs, s->nregs + 1,
                       sizeof(reg_entry_t)) != 0) {
            rc = dds_error(-DDS_ENOMEM, "recv_register: out of memory");
        } else {
            pos = reg_upper(s, (uintptr_t)ptr);
            memmove(&s->regs[pos + 1], &s->regs[pos],
                    (s->nregs - pos) * sizeof(reg_entry_t));
            s->regs[pos].lo = (uintptr_t)ptr;
            s->regs[pos].bytes = bytes;
            s->regs[pos].mem = m;
            s->regs[pos].handle = handle;
            s->nregs++;
            if (bytes > s->reg_max_bytes)
                s->reg_max_bytes = bytes;
            atomic_store_explicit(&s->reg_count, s->nregs,
                                  memory_order_relaxed);
        }
    } /* else: registered meanwhile as another kind (error set) */
    pthread_rwlock_unlock(&s->reg_lock);
    if (rc != 0 && handle != NULL && s->tr.ops->recv_unregister != NULL) {
        if (s->serialize)
            pthread_mutex_lock(&s->tmutex);
        (void)s->tr.ops->recv_unregister(s->tr.ctx, handle);
        if (s->serialize)
            pthread_mutex_unlock(&s->tmutex);
    }
    return rc == -DDS_EEXIST ? 0 : rc;
}

int dds_store_recv_unregister(dds_store_t *s, void *ptr, size_t bytes)
{
    void *handle;
    long i;
    int rc = 0;

    if (s == NULL || ptr == NULL)
        return dds_error(-DDS_EINVAL, "recv_unregister: NULL argument");
    pthread_rwlock_wrlock(&s->reg_lock);
    i = reg_exact(s, (uintptr_t)ptr, bytes);
    if (i < 0) {
        pthread_rwlock_unlock(&s->reg_lock);
        return dds_error(-DDS_ENOENT,
                         "recv_unregister: %zu bytes at %p were not "
                         "registered", bytes, ptr);
    }
    handle = s->regs[i].handle;
    memmove(&s->regs[i], &s->regs[i + 1],
            (s->nregs - (size_t)i - 1) * sizeof(reg_entry_t));
    s->nregs--;
    s->reg_max_bytes = 0;
    for (size_t k = 0; k < s->nregs; k++)
        if (s->regs[k].bytes > s->reg_max_bytes)
            s->reg_max_bytes = s->regs[k].bytes;
    atomic_store_explicit(&s->reg_count, s->nregs, memory_order_relaxed);
    pthread_rwlock_unlock(&s->reg_lock);
    if (handle != NULL && s->tr.ops->recv_unregister != NULL) {
        if (s->serialize)
            pthread_mutex_lock(&s->tmutex);
        rc = s->tr.ops->recv_unregister(s->tr.ctx, handle);
        if (s->serialize)
            pthread_mutex_unlock(&s->tmutex);
        if (rc > 0)
            rc = -rc;
    }
    return rc;
}

/* ---- readers ---------------------------------------------------------- */

int dds_store_reader_open(dds_store_t *s, int flags, dds_reader_t **reader_p)
{
    dds_reader_t *r;
    int rc = 0;

    if (s == NULL || reader_p == NULL)
        return dds_error(-DDS_EINVAL, "reader_open: NULL argument");
    *reader_p = NULL;
    if (flags != DDS_READER_THREAD && flags != DDS_READER_FORKED)
        return dds_error(-DDS_EINVAL, "reader_open: unknown flags %d", flags);
    if (flags == DDS_READER_FORKED &&
        !(s->tr.caps & DDS_TRANSPORT_CAP_FORK))
        return dds_error(-DDS_ENOSYS,
                         "reader_open: transport '%s' has no readers for "
                         "forked processes",
                         s->tr.ops->name ? s->tr.ops->name : "?");
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return dds_error(-DDS_ENOMEM, "reader_open: out of memory");
    r->store = s;
    r->flags = flags;
    if (s->tr.ops->reader_open != NULL) {
        if (s->serialize)
            pthread_mutex_lock(&s->tmutex);
        rc = s->tr.ops->reader_open(s->tr.ctx, flags, &r->treader);
        if (s->serialize)
            pthread_mutex_unlock(&s->tmutex);
        if (rc != 0) {
            free(r);
            return rc > 0 ? -rc : rc;
        }
    }
    pthread_mutex_lock(&s->readers_mutex);
    r->next = s->readers;
    if (s->readers != NULL)
        s->readers->prev = r;
    s->readers = r;
    pthread_mutex_unlock(&s->readers_mutex);
    *reader_p = r;
    return 0;
}

void dds_store_reader_close(dds_store_t *s, dds_reader_t *r)
{
    if (s == NULL || r == NULL || r->store != s)
        return;
    pthread_mutex_lock(&s->readers_mutex);
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        s->readers = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    pthread_mutex_unlock(&s->readers_mutex);
    if (r->treader != NULL && s->tr.ops->reader_close != NULL) {
        if (s->serialize)
            pthread_mutex_lock(&s->tmutex);
        s->tr.ops->reader_close(s->tr.ctx, r->treader);
        if (s->serialize)
            pthread_mutex_unlock(&s->tmutex);
    }
    free(r);
}

/* ---- profile, epochs -------------------------------------------------- */

int dds_store_profile(dds_store_t *s, const char *name,
                      dds_profile_t *profile_p)
{
    dds_var_t *v;
    int rc;
    if (s == NULL || profile_p == NULL)
        return dds_error(-DDS_EINVAL, "profile: NULL argument");
    rc = check_name(name);
    if (rc != 0)
        return rc;
    pthread_rwlock_rdlock(&s->table_lock);
    v = find_var(s, name, NULL);
    if (v == NULL)
        rc = not_live(s, name);
    else
        dds_prof_snapshot(&v->prof, profile_p);
    pthread_rwlock_unlock(&s->table_lock);
    return rc;
}

int dds_store_profile_reset(dds_store_t *s, const char *name)
{
    dds_var_t *v;
    int rc;
    if (s == NULL)
        return dds_error(-DDS_EINVAL, "profile_reset: NULL store");
    rc = check_name(name);
    if (rc != 0)
        return rc;
    pthread_rwlock_rdlock(&s->table_lock);
    v = find_var(s, name, NULL);
    if (v == NULL)
        rc = not_live(s, name);
    else
        dds_prof_clear(&v->prof);
    pthread_rwlock_unlock(&s->table_lock);
    return rc;
}

static const char *coll_name(dds_coll_t call)
{
    switch (call) {
    case DDS_COLL_INIT: return "init";
    case DDS_COLL_ADD: return "add";
    case DDS_COLL_VAR_FREE: return "free";
    case DDS_COLL_FREE: return "free";
    case DDS_COLL_EPOCH_BEGIN: return "epoch_begin";
    case DDS_COLL_EPOCH_END: return "epoch_end";
    }
    return "collective";
}

int dds_store_coll_fail(dds_store_t *s, dds_coll_t call, const char *name,
                        int rc)
{
    const char *what = coll_name(call);
    char detail[512];
    int arc;
    if (s == NULL)
        return dds_error(-DDS_EINVAL, "dds_store_coll_fail: NULL store");
    if (rc >= 0)
        rc = dds_error(-DDS_EINVAL, "dds_store_coll_fail: rc must be < 0");
    snprintf(detail, sizeof detail, "%s", dds_last_error());
    if (fork_refuse(s, what, name) != 0)
        return dds_error(rc, "%s", detail); /* nobody waits for a child */
    pthread_mutex_lock(&s->coll_mutex);
    if (coll_refuse(s, what, name) != 0) {
        pthread_mutex_unlock(&s->coll_mutex);
        return dds_error(rc, "%s", detail); /* nobody waits for us */
    }
    coll_begin(s, (int)call);
    dds_error(rc, "%s", detail);
    arc = coll_failed(s, coll_agree(s, rc), what, name);
    pthread_mutex_unlock(&s->coll_mutex);
    if (arc == rc)
        dds_error(rc, "%s", detail); /* our own detail, not "rank R: ..." */
    return arc;
}

static int epoch_call(dds_store_t *s, int begin)
{
    int (*fn)(void *);
    const char *what = begin ? "epoch_begin" : "epoch_end";
    int rc;
    if (s == NULL)
        return dds_error(-DDS_EINVAL, "epoch: NULL store");
    fn = begin ? s->tr.ops->epoch_begin : s->tr.ops->epoch_end;
    rc = fork_refuse(s, what, NULL);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&s->coll_mutex);
    rc = coll_refuse(s, what, NULL);
    if (rc != 0) {
        pthread_mutex_unlock(&s->coll_mutex);
        return rc;
    }
    coll_begin(s, begin ? COLL_EPOCH_BEGIN : COLL_EPOCH_END);
    /* 1. local: this rank's updates into the transport's public copies */
    rc = fn != NULL ? fn(s->tr.ctx) : 0;
    if (rc > 0)
        rc = -rc;
    /* 2. one agreement: every rank's step 1 happened before any rank
     * returns (the allreduce cannot complete earlier), and a failure on one
     * rank fails every rank.  The fences order this thread's plain stores
     * and later reads around the exchange (shared-memory peers read our
     * shards with memcpy). */
    atomic_thread_fence(memory_order_seq_cst);
    rc = coll_failed(s, coll_agree(s, rc), what, NULL);
    atomic_thread_fence(memory_order_seq_cst);
    pthread_mutex_unlock(&s->coll_mutex);
    return rc;
}

int dds_store_epoch_begin(dds_store_t *s)
{
    return epoch_call(s, 1);
}

int dds_store_epoch_end(dds_store_t *s)
{
    return epoch_call(s, 0);
}
