/* ddstore-core: the store: the registry of receive buffers (recv_register,
 * recv_unregister) and its lookup on the read path.
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
                         ptr, dds_st_mem_name(s->regs[i].mem.kind),
                         dds_st_mem_name(m->kind));
    return 0;
}

/* Handle of a registration containing [p, p+bytes), or NULL. */
void *dds_st_reg_lookup(dds_store_t *s, const void *ptr, size_t bytes)
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
        rc = dds_st_mem_route(s, &m, "recv_register", 0, &route);
        if (rc != 0)
            return rc;
    }
    if (route == ROUTE_HOST) {
        rc = dds_st_check_host_ptr(s, ptr, "recv_register");
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
            dds_st_hmem_failed(s, m.kind, "recv_register")) {
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
        if (dds_st_grow_array((void **)&s->regs, &s->cap_regs, s->nregs + 1,
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

