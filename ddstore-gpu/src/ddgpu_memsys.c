/* ddstore-gpu: the memops table for the core store (the public API over the runtime layer;
 * ddgpu_common.c has the map of these files). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddgpu_internal.h"

/* ------------------------------------------------------------------------ */
/* The memops table */

typedef struct ddgpu_memsys_ctx {
    dds_memops_t ops;
    ddgpu_staging_t *staging;
} ddgpu_memsys_ctx_t;

static int mo_pointer_kind(void *ctx, const void *ptr, dds_mem_t *mem_p)
{
    (void)ctx;
    return ddgpu_pointer_kind(ptr, NULL, mem_p);
}

static int mo_host_alloc(void *ctx, size_t bytes, void **ptr_p)
{
    (void)ctx;
    return ddgpu_host_alloc(bytes, ptr_p);
}

static int mo_host_free(void *ctx, void *ptr)
{
    (void)ctx;
    return ddgpu_host_free(ptr);
}

static int mo_staging_acquire(void *ctx, size_t bytes, void **buf_p,
                              void **host_p)
{
    ddgpu_memsys_ctx_t *c = ctx;
    if (buf_p == NULL || host_p == NULL)
        return dds_error(-DDS_EINVAL,
                         "memops.staging_acquire: buf_p and host_p must not "
                         "be NULL");
    ddgpu_stage_buf_t *b = NULL;
    int rc = ddgpu_staging_acquire(c->staging, bytes, &b);
    if (rc != 0)
        return rc;
    *buf_p = b;
    *host_p = ddgpu_stage_buf_host(b);
    return 0;
}

static int mo_staging_release(void *ctx, void *buf)
{
    ddgpu_memsys_ctx_t *c = ctx;
    return ddgpu_staging_release(c->staging, buf);
}

static int mo_copy_async(void *ctx, dds_copy_dir_t dir, void *dst,
                         const void *src, const dds_memseg_t *segs,
                         size_t nsegs, const dds_mem_t *on, void *buf)
{
    (void)ctx;
    if (buf == NULL)
        return ddgpu_copy_segments_async(dir, dst, src, segs, nsegs, on, NULL);
    ddgpu_stage_buf_t *b = buf;
    if (dir == DDS_COPY_H2D && src == ddgpu_stage_buf_host(b))
        return ddgpu_stage_to_device(b, dst, segs, nsegs, on);
    if (dir == DDS_COPY_D2H && dst == ddgpu_stage_buf_host(b))
        return ddgpu_stage_from_device(b, src, segs, nsegs, on);
    return dds_error(-DDS_EINVAL,
                     "memops.copy_async: with a staging buffer the copy must "
                     "be H2D from it or D2H into it (dir %d, src %p, dst %p, "
                     "buffer %p)", (int)dir, src, dst,
                     ddgpu_stage_buf_host(b));
}

static int mo_staging_wait(void *ctx, void *buf)
{
    (void)ctx;
    return ddgpu_stage_buf_wait(buf);
}

static int mo_stream_fence(void *ctx, const dds_mem_t *on)
{
    (void)ctx;
    return ddgpu_stream_fence(on);
}

static int mo_event_record(void *ctx, const dds_mem_t *on, void **event_p)
{
    (void)ctx;
    static const char fn[] = "memops.event_record";
    if (event_p == NULL)
        return dds_error(-DDS_EINVAL, "%s: event_p is NULL", fn);
    int rc = ddgpu_gpu_ready(fn);
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    ddgpu_pevent_t *pe = NULL;
    rc = ddgpu_guard_enter(fn, on, &g);
    if (rc == 0)
        rc = ddgpu_evpool_get(&g, &pe);
    if (rc == 0)
        rc = ddgpu_rt_event_record(pe->event, g.stream);
    ddgpu_guard_exit(&g);
    if (rc != 0) {
        ddgpu_evpool_put(pe);
        return rc;
    }
    *event_p = pe;
    return 0;
}

static int mo_event_query(void *ctx, void *event, int *done_p)
{
    (void)ctx;
    if (event == NULL)
        return dds_error(-DDS_EINVAL, "memops.event_query: event is NULL");
    return ddgpu_event_query(((ddgpu_pevent_t *)event)->event, done_p);
}

static int mo_event_wait(void *ctx, void *event)
{
    (void)ctx;
    if (event == NULL)
        return dds_error(-DDS_EINVAL, "memops.event_wait: event is NULL");
    return ddgpu_event_synchronize(((ddgpu_pevent_t *)event)->event);
}

static int mo_stream_wait_event(void *ctx, const dds_mem_t *on, void *event)
{
    (void)ctx;
    if (event == NULL)
        return dds_error(-DDS_EINVAL,
                         "memops.stream_wait_event: event is NULL");
    return ddgpu_stream_wait_event(on, ((ddgpu_pevent_t *)event)->event);
}

static void mo_event_release(void *ctx, void *event)
{
    (void)ctx;
    ddgpu_evpool_put(event);
}

static void mo_destroy(void *ctx)
{
    ddgpu_memsys_ctx_t *c = ctx;
    if (c == NULL)
        return;
    ddgpu_staging_destroy(c->staging);
    free(c);
}

int ddgpu_memsys_create(const ddgpu_staging_params_t *params,
                        dds_memsys_t *memsys_p)
{
    if (memsys_p == NULL)
        return dds_error(-DDS_EINVAL, "ddgpu_memsys_create: memsys_p is NULL");
    ddgpu_memsys_ctx_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return dds_error(-DDS_ENOMEM, "ddgpu_memsys_create: out of memory");
    int rc = ddgpu_staging_create(params, &c->staging);
    if (rc != 0) {
        free(c);
        return rc;
    }
    dds_memops_t *o = &c->ops;
    o->size = sizeof(*o);
    o->name = ddgpu_rt_name();
    o->kind = ddgpu_rt_kind();
    o->pointer_kind = mo_pointer_kind;
    o->host_alloc = mo_host_alloc;
    o->host_free = mo_host_free;
    o->staging_acquire = mo_staging_acquire;
    o->staging_release = mo_staging_release;
    o->copy_async = mo_copy_async;
    o->staging_wait = mo_staging_wait;
    o->stream_fence = mo_stream_fence;
    o->event_record = mo_event_record;
    o->event_query = mo_event_query;
    o->event_wait = mo_event_wait;
    o->stream_wait_event = mo_stream_wait_event;
    o->event_release = mo_event_release;
    o->destroy = mo_destroy;
    memsys_p->ops = o;
    memsys_p->ctx = c;
    return 0;
}

