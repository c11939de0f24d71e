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
 * buffer and a copy of the batch's indices, reused by every read of that
 * thread and freed at thread exit.  No allocation on the read path after
 * warm-up.
 *
 * GPU memory (memops.h, docs/gpudirect.md): every buffer is routed once per
 * call (mem_route): host memory -> the host path; GPU memory the transport
 * reaches (DDS_TRANSPORT_CAP_HMEM_*) -> "direct": the transport reads into
 * it after a stream fence; other GPU memory -> "staged": through the
 * memsys's pinned staging buffers (destinations) or a pinned host mirror
 * (shards).  The core never links a GPU runtime and never synchronises a
 * device: it only calls the memsys table.
 *
 * Files (the objects and shared helpers: dds_store_internal.h), their calls
 * a DAG (ci/check_shape.py): dds_store.c on top, dds_store_common.c below all
 * but dds_store_life.c, a leaf:
 *   dds_store.c         create/destroy, accessors
 *   dds_store_common.c  small helpers, variable table lookups, released
 *                       names, the collectives-out-of-step protocol
 *   dds_store_var.c     variables: init/add/join/var_free/free, info
 *   dds_store_mem.c     memory routing, buffer checks, host mirrors, update
 *   dds_store_read.c    the read pipeline (get, get_batch)
 *   dds_store_recv.c    the registry of receive buffers
 *   dds_store_reader.c  readers, profile, epochs, coll_fail
 *   dds_store_life.c    the variables' lives as forked processes see them
 *                       (a read of a variable freed since the fork fails)
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

#include "dds_store_internal.h"
#include "ddstore/settings.h"

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

/* Core's settings (read once: given by the caller, else from the
 * environment) into the store's fields. */
static int store_settings(const dds_store_params_t *params, size_t *max_read_p,
                          size_t *merge_p, int *gpu_staging_p)
{
    dds_settings_t own;
    const dds_settings_t *st = &own;
    unsigned mask;
    int rc;

    if ((params->field_mask & DDS_STORE_PARAM_SETTINGS) &&
        params->settings != NULL) {
        st = params->settings;
    } else {
        dds_config_register_core();
        rc = dds_config_validate_all();
        if (rc == 0)
            rc = dds_settings_read(&own);
        if (rc != 0)
            return rc;
    }
    rc = dds_log_parse_subsys(st->log_subsys, &mask);
    if (rc != 0)
        return rc;
    *max_read_p = (size_t)st->max_read_bytes;
    *merge_p = (size_t)st->merge_row_bytes;
    *gpu_staging_p = st->gpu_staging;
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
        rc = store_settings(params, &maxr, &merge, &gpu_staging);
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
    dds_st_fork_watch();
    s->fork_gen = atomic_load_explicit(&dds_st_fork_gen, memory_order_relaxed);
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
            ms.ops != NULL ? dds_st_mem_name(ms.ops->kind) : "host path only",
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
        dds_st_var_release(s, v);
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
    vars = dds_st_detach_vars(s, &n);
    pthread_rwlock_unlock(&s->table_lock);
    abandon = dds_st_has_region_abandon(s);
    later = vars; /* reused in place: entry i is read before it is written */
    for (size_t i = 0; i < n; i++) {
        dds_var_t *v = vars[i];
        if (v->region == NULL || !abandon)
            later[nlater++] = v; /* the transport's destroy releases it */
        else
            dds_st_var_abandon(s, v);   /* peers may still read it: kept */
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
