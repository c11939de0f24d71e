/* ddstore-core: the store: readers, profile counters, epochs, coll_fail.
 * Objects, locks and the helpers the store's files share:
 * dds_store_internal.h. */
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

#include "dds_store_internal.h"

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
    rc = dds_st_var_lookup(s, name, &v);
    if (rc != 0)
        return rc;
    dds_prof_snapshot(&v->prof, profile_p);
    pthread_rwlock_unlock(&s->table_lock);
    return 0;
}

int dds_store_profile_reset(dds_store_t *s, const char *name)
{
    dds_var_t *v;
    int rc;
    if (s == NULL)
        return dds_error(-DDS_EINVAL, "profile_reset: NULL store");
    rc = dds_st_var_lookup(s, name, &v);
    if (rc != 0)
        return rc;
    dds_prof_clear(&v->prof);
    pthread_rwlock_unlock(&s->table_lock);
    return 0;
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
    if (dds_st_fork_refuse(s, what, name) != 0)
        return dds_error(rc, "%s", detail); /* nobody waits for a child */
    pthread_mutex_lock(&s->coll_mutex);
    if (dds_st_coll_refuse(s, what, name) != 0) {
        dds_st_coll_unlock(s);
        return dds_error(rc, "%s", detail); /* nobody waits for us */
    }
    dds_st_coll_begin(s, (int)call);
    dds_error(rc, "%s", detail);
    arc = dds_st_coll_failed(s, dds_st_coll_agree(s, rc), what, name);
    dds_st_coll_unlock(s);
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
    rc = dds_st_fork_refuse(s, what, NULL);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&s->coll_mutex);
    rc = dds_st_coll_refuse(s, what, NULL);
    if (rc != 0) {
        dds_st_coll_unlock(s);
        return rc;
    }
    dds_st_coll_begin(s, begin ? COLL_EPOCH_BEGIN : COLL_EPOCH_END);
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
    rc = dds_st_coll_failed(s, dds_st_coll_agree(s, rc), what, NULL);
    atomic_thread_fence(memory_order_seq_cst);
    dds_st_coll_unlock(s);
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

