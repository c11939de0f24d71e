/* ddstore-core: the store's shared helpers, below every other dds_store*.c
 * file (dds_store.c describes the locks and lists the files): the fork
 * generation, small helpers (name hash, growing arrays, timed locks), the
 * variable table (lookups, released names) and the collectives-out-of-step
 * protocol.  Calls nothing of the other dds_store*.c files but the leaf
 * dds_store_life.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime */
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

#include "dds_store_internal.h"

_Atomic unsigned dds_st_fork_gen;

static void fork_child(void)
{
    atomic_fetch_add_explicit(&dds_st_fork_gen, 1, memory_order_relaxed);
}

static void fork_once(void)
{
    (void)pthread_atfork(NULL, NULL, fork_child);
}

void dds_st_fork_watch(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, fork_once);
}

/* ---- releasing a variable ------------------------------------------- */

int dds_st_has_region_abandon(const dds_store_t *s)
{
    const dds_transport_ops_t *o = s->tr.ops;
    return o->region_abandon != NULL;
}

/* Out of step: forget v without any collective step.  Its region is
 * abandoned (the transport's region_abandon, or leaked) and its shard
 * leaked: peers may still read it until the process exits. */
void dds_st_var_abandon(dds_store_t *s, dds_var_t *v)
{
    if (v == NULL)
        return;
    dds_st_life_end(&v->life);
    if (v->region != NULL && dds_st_has_region_abandon(s))
        s->tr.ops->region_abandon(s->tr.ctx, v->region);
    DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_CORE,
            "variable '%s': released locally (out of step); its shard of "
            "%zu bytes stays allocated until the process exits",
            v->name, v->shard_bytes);
    free(v->offsets);
    free(v->elem_offsets);
    free(v->index_offsets);
    free(v);
}

void dds_st_var_release(dds_store_t *s, dds_var_t *v)
{
    if (v == NULL)
        return;
    dds_st_life_end(&v->life);
    if (v->mirror != NULL && s->ms.ops != NULL)
        (void)s->ms.ops->host_free(s->ms.ctx, v->mirror);
    dds_shard_peers_free(v->peers);
    if (v->nshard != NULL)
        dds_shard_free(v->nshard);
    else if (v->shard_token != NULL)
        s->tr.ops->shard_free(s->tr.ctx, v->shard, v->shard_token);
    else if (v->shard_owned)
        free(v->shard);
    free(v->offsets);
    free(v->elem_offsets);
    free(v->index_offsets);
    free(v);
}

/* ---- small helpers ---------------------------------------------------- */

uint64_t dds_st_name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s != '\0'; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

int dds_st_grow_array(void **p, size_t *cap, size_t need, size_t elem)
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

uint64_t dds_st_lock_read_timed(pthread_rwlock_t *l)
{
    uint64_t t0, t1;
    if (pthread_rwlock_tryrdlock(l) == 0)
        return 0;
    t0 = dds_prof_now();
    pthread_rwlock_rdlock(l);
    t1 = dds_prof_now();
    return t1 - t0;
}

uint64_t dds_st_lock_mutex_timed(pthread_mutex_t *m)
{
    uint64_t t0, t1;
    if (pthread_mutex_trylock(m) == 0)
        return 0;
    t0 = dds_prof_now();
    pthread_mutex_lock(m);
    t1 = dds_prof_now();
    return t1 - t0;
}

int dds_st_check_name(const char *name)
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
dds_var_t *dds_st_find_var(const dds_store_t *s, const char *name,
                           size_t *index_p)
{
    uint64_t h = dds_st_name_hash(name);
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
void dds_st_note_released(dds_store_t *s, const char *name, int how)
{
    released_t *r = find_released(s, name);
    char *copy;
    if (r != NULL) {
        r->how = how;
        return;
    }
    if (dds_st_grow_array((void **)&s->released, &s->cap_released,
                          s->nreleased + 1, sizeof(released_t)) != 0)
        return; /* only costs the nicer message */
    copy = strdup(name);
    if (copy == NULL)
        return;
    s->released[s->nreleased].name = copy;
    s->released[s->nreleased].how = how;
    s->nreleased++;
}

/* Caller holds table_lock for writing. */
void dds_st_forget_released(dds_store_t *s, const char *name)
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
int dds_st_not_live(const dds_store_t *s, const char *name)
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

/* The live variable `name` for a local call: checks the name, takes
 * table_lock for reading and finds the variable.  0 with *v_p set and the
 * lock held (the caller unlocks it), or an error with the lock released. */
int dds_st_var_lookup(dds_store_t *s, const char *name, dds_var_t **v_p)
{
    int rc = dds_st_check_name(name);
    if (rc != 0)
        return rc;
    pthread_rwlock_rdlock(&s->table_lock);
    *v_p = dds_st_find_var(s, name, NULL);
    if (*v_p == NULL) {
        rc = dds_st_not_live(s, name);
        pthread_rwlock_unlock(&s->table_lock);
    }
    return rc;
}

dds_var_t **dds_st_detach_vars(dds_store_t *s, size_t *n_p)
{
    dds_var_t **vars = s->vars;
    *n_p = s->nvars;
    for (size_t i = 0; i < s->nvars; i++)
        dds_st_life_end(&vars[i]->life); /* forked readers: gone */
    s->vars = NULL;
    s->nvars = 0;
    s->cap_vars = 0;
    return vars;
}

/* ---- collectives out of step -------------------------------------------
 *
 * A collective that not every rank entered times out in the communicator
 * (-DDS_ETIMEDOUT).  From then on the ranks are out of step: a later
 * collective could be matched with the wrong call of a peer, and a
 * collective release (MPI_Win_free) could wait forever.  The store remembers
 * it, refuses every later collective at once, and releases locally. */

/* A collective call starts (coll_mutex held): its agreements carry a tag
 * (call number, kind), so that ranks in different calls fail instead of
 * matching each other's exchanges. */
void dds_st_coll_begin(dds_store_t *s, int kind)
{
    s->coll_seq++;
    s->coll_tag = (int64_t)(((s->coll_seq << 3) | (uint64_t)kind) &
                            (uint64_t)INT64_MAX);
}

int dds_st_coll_agree(dds_store_t *s, int rc)
{
    return dds_comm_agree_tag(&s->comm, rc, s->coll_tag);
}

/* The end of a collective call: coll_mutex released, the call no longer
 * named to the communicator (dds_comm_what). */
void dds_st_coll_unlock(dds_store_t *s)
{
    dds_comm_set_what(NULL, NULL);
    pthread_mutex_unlock(&s->coll_mutex);
}

/* A collective call's first check (coll_mutex held). */
int dds_st_coll_refuse(const dds_store_t *s, const char *what,
                       const char *name)
{
    if (s->broken[0] == '\0') {
        dds_comm_set_what(what, name); /* for a waiting communicator's WARN */
        return 0;
    }
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
int dds_st_fork_refuse(const dds_store_t *s, const char *what,
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
int dds_st_coll_failed(dds_store_t *s, int rc, const char *what,
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
