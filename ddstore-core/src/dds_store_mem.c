/* ddstore-core: the store: memory routing (host, GPU direct or staged),
 * the checks of caller buffers, the pinned host mirrors of GPU shards,
 * var_update.
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

const char *dds_st_mem_name(dds_mem_kind_t k)
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
int dds_st_ms_serves(const dds_store_t *s, dds_mem_kind_t k)
{
    return s->ms.ops != NULL && s->ms.ops->kind == k;
}

/* How the store moves data into / out of memory `m`.  `shard`: the memory
 * is a shard (a mirror) rather than a destination (staging buffers), for
 * the messages.  0, or an error naming the requirement. */
int dds_st_mem_route(const dds_store_t *s, const dds_mem_t *m,
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
    kn = dds_st_mem_name(m->kind);
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
                         dds_st_mem_name(s->ms.ops->kind));
    *route_p = ROUTE_STAGED;
    return 0;
}

/* The transport advertised HMEM for `k` but refused such memory with
 * -DDS_ENOSYS (e.g. a provider with FI_HMEM whose registration of device
 * memory fails: no peer-memory / dma-buf support).  When staging can stand
 * in, remember it (every later buffer of that kind is staged) and return 1
 * so the caller retries staged; else 0 and the error stands. */
int dds_st_hmem_failed(dds_store_t *s, dds_mem_kind_t k, const char *what)
{
    if (!s->gpu_staging || !dds_st_ms_serves(s, k))
        return 0;
    if (!(atomic_fetch_or(&s->hmem_off, 1u << k) & (1u << k)))
        DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_CORE,
                "%s: transport '%s' advertises FI_HMEM for %s memory but "
                "refused it (%s); %s memory goes through pinned host memory "
                "from now on",
                what, s->tr.ops->name ? s->tr.ops->name : "?",
                dds_st_mem_name(k),
                dds_last_error(), dds_st_mem_name(k));
    dds_error_clear();
    return 1;
}

/* A host pointer that the GPU runtime knows as device memory is a caller's
 * mistake that a memcpy would turn into a crash.  Only checked where it is
 * cheap relative to the call (add, recv_register), and only with a memsys;
 * a failing query (e.g. a forked child) counts as host memory. */
int dds_st_check_host_ptr(const dds_store_t *s, const void *p,
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
                         what, dds_st_mem_name(pm.kind), pm.device);
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
int dds_st_check_buf(const dds_var_t *v, const dds_buf_t *b)
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
    if (b->row_bytes != v->row_bytes) {
        /* what the buffer's rows are made of: the caller's shape */
        size_t bsize = b->itemsize != 0 ? b->itemsize
                                         : dds_dtype_size(b->dtype);
        if (bsize != 0 && b->row_bytes % bsize == 0)
            return dds_error(-DDS_EINVAL,
                             "variable '%s': expected %zu bytes per row "
                             "(disp %zu x itemsize %zu), got %zu (%zu x %s)",
                             v->name, v->row_bytes, v->disp, v->itemsize,
                             b->row_bytes, b->row_bytes / bsize,
                             dds_dtype_name(b->dtype));
        return dds_error(-DDS_EINVAL,
                         "variable '%s': expected %zu bytes per row (disp "
                         "%zu x itemsize %zu), got %zu",
                         v->name, v->row_bytes, v->disp, v->itemsize,
                         b->row_bytes);
    }
    return 0;
}

int dds_st_mirror_create(dds_store_t *s, dds_var_t *v, const void *data)
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
                         v->name, v->shard_bytes, dds_st_mem_name(v->mem.kind),
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
                         v->name, dds_st_mem_name(v->mem.kind),
                         dds_last_error());
    DDS_LOG_ONCE(DDS_LOG_INFO, DDS_SUBSYS_CORE,
                 "GPU shards are served from pinned host mirrors: transport "
                 "'%s' cannot reach %s memory (no FI_HMEM)",
                 s->tr.ops->name ? s->tr.ops->name : "?",
                 dds_st_mem_name(v->mem.kind));
    return 0;
}

/* ---- variables: local ------------------------------------------------- */

/* var_update where the source or the shard is GPU memory: copies through
 * the memsys on one stream (the source's when it is GPU memory, else the
 * shard's), the host mirror refreshed, then a fence on that stream so the
 * rows are in place for every reader when this returns. */
static int update_gpu(dds_store_t *s, dds_var_t *v, const dds_buf_t *src,
                      size_t off)
{
    const dds_memops_t *o = s->ms.ops;
    const int src_gpu = src->mem.kind != DDS_MEM_HOST;
    const dds_mem_kind_t need = src_gpu ? src->mem.kind : v->mem.kind;
    const size_t n = (size_t)src->nrows * v->row_bytes;
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
                         v->name, dds_st_mem_name(src->mem.kind),
                         dds_st_mem_name(v->mem.kind));
    if (o->kind != need ||
        (src_gpu && v->mem.kind != DDS_MEM_HOST && v->mem.kind != need))
        return dds_error(-DDS_ENOSYS,
                         "variable '%s': update from %s memory into a %s "
                         "shard, but this process's GPU runtime ('%s') "
                         "drives %s memory",
                         v->name, dds_st_mem_name(src->mem.kind),
                         dds_st_mem_name(v->mem.kind), o->name ? o->name : "?",
                         dds_st_mem_name(o->kind));
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
                         v->name, dds_st_mem_name(src->mem.kind),
                         dds_st_mem_name(v->mem.kind), dds_last_error());
    return 0;
}

/* The start of an update (var_update, ragged_update): the variable, with
 * the table's read lock held, when it is this rank's, of the kind the call
 * updates, and src fits its rows; else an error without the lock. */
static int update_begin(dds_store_t *s, const char *name, const dds_buf_t *src,
                        int ragged, dds_var_t **v_p)
{
    const char *call = ragged ? "ragged_update" : "var_update";
    dds_var_t *v;
    int rc;

    if (s == NULL || src == NULL)
        return dds_error(-DDS_EINVAL, "dds_store_%s: NULL %s", call,
                         s == NULL ? "store" : "source buffer");
    rc = dds_st_var_lookup(s, name, &v);
    if (rc != 0)
        return rc;
    if (v->joined)
        rc = dds_error(-DDS_EINVAL,
                       "variable '%s' was published by another job and "
                       "joined here (method 2): it is read-only in this job",
                       name);
    else if (v->ragged && !ragged)
        rc = dds_error(-DDS_EINVAL,
                       "variable '%s' is ragged (samples of varying "
                       "length): var_update writes fixed-size rows; use "
                       "ragged_update", name);
    else if (!v->ragged && ragged)
        rc = dds_error(-DDS_EINVAL,
                       "variable '%s' has fixed-size rows, not ragged "
                       "samples: ragged_update writes ragged variables; use "
                       "var_update", name);
    else
        rc = dds_st_check_buf(v, src);
    if (rc != 0) {
        pthread_rwlock_unlock(&s->table_lock);
        return rc;
    }
    *v_p = v;
    return 0;
}

/* src's rows into this rank's shard at byte `off` (checked by the caller);
 * the table's read lock held. */
static int shard_write(dds_store_t *s, dds_var_t *v, const dds_buf_t *src,
                       size_t off)
{
    if (src->mem.kind != DDS_MEM_HOST || v->mem.kind != DDS_MEM_HOST)
        return update_gpu(s, v, src, off);
    if (src->nrows > 0)
        memmove((char *)v->shard + off, src->ptr,
                (size_t)src->nrows * v->row_bytes);
    return 0;
}

int dds_store_var_update(dds_store_t *s, const char *name,
                         const dds_buf_t *src, int64_t offset)
{
    dds_var_t *v;
    int rc;

    rc = update_begin(s, name, src, 0, &v);
    if (rc != 0)
        return rc;
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
    rc = shard_write(s, v, src, (size_t)offset * v->row_bytes);
out:
    pthread_rwlock_unlock(&s->table_lock);
    return rc;
}

int dds_store_ragged_update(dds_store_t *s, const char *name,
                            const dds_buf_t *src, int64_t offset,
                            int64_t nsamples)
{
    const int64_t *idx;
    int64_t elems;
    dds_var_t *v;
    int rc;

    rc = update_begin(s, name, src, 1, &v);
    if (rc != 0)
        return rc;
    if (offset < 0 || nsamples < 0 || offset > v->local_rows ||
        nsamples > v->local_rows - offset) {
        rc = dds_error(-DDS_ERANGE,
                       "ragged variable '%s': samples [%lld, %lld) are "
                       "outside this rank's %lld samples",
                       name, (long long)offset,
                       (long long)offset + (long long)nsamples,
                       (long long)v->local_rows);
        goto out;
    }
    idx = (const int64_t *)v->shard; /* the index: prefix sums */
    elems = idx[offset + nsamples] - idx[offset];
    if (src->nrows != elems) {
        rc = dds_error(-DDS_EINVAL,
                       "ragged variable '%s': samples [%lld, %lld) of this "
                       "rank hold %lld element rows, the source has %lld "
                       "(lengths never change)",
                       name, (long long)offset,
                       (long long)(offset + nsamples), (long long)elems,
                       (long long)src->nrows);
        goto out;
    }
    rc = shard_write(s, v, src,
                     dds_st_ragged_index_bytes(v->local_rows) +
                         (size_t)idx[offset] * v->row_bytes);
out:
    pthread_rwlock_unlock(&s->table_lock);
    return rc;
}

int dds_store_var_local(dds_store_t *s, const char *name, void **base_p,
                        size_t *bytes_p, const int64_t **index_p)
{
    dds_var_t *v;
    int rc;

    if (s == NULL || base_p == NULL || bytes_p == NULL)
        return dds_error(-DDS_EINVAL, "dds_store_var_local: NULL %s",
                         s == NULL ? "store" : "output");
    rc = dds_st_var_lookup(s, name, &v);
    if (rc != 0)
        return rc;
    if (v->joined)
        rc = dds_error(-DDS_EINVAL, "variable '%s' was published by another "
                       "job and joined here (method 2): it has no shard in "
                       "this process", name);
    else if (v->mem.kind != DDS_MEM_HOST)
        rc = dds_error(-DDS_EINVAL, "variable '%s': this rank's shard is in "
                       "%s memory, not host memory", name,
                       dds_st_mem_name(v->mem.kind));
    if (rc == 0) {
        size_t head = v->ragged ? dds_st_ragged_index_bytes(v->local_rows) : 0;
        *bytes_p = (size_t)v->local_elems * v->row_bytes;
        *base_p = *bytes_p > 0 ? (char *)v->shard + head : NULL;
        if (index_p != NULL)
            *index_p = v->ragged ? (const int64_t *)v->shard : NULL;
    }
    pthread_rwlock_unlock(&s->table_lock);
    return rc;
}
