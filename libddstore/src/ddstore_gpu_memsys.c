/* libddstore: the store's lazy GPU memory system (open.h
 * ddstore_gpu_memsys_create).
 *
 * A wrapper around ddstore-gpu's ddgpu_memsys_create(): the GPU runtime is
 * only probed the first time a store moves GPU memory, so a CPU-only job on
 * a GPU node never initialises CUDA/HIP (no start-up cost, nothing
 * inherited by forked DataLoader workers).  The none build (no GPU support)
 * hands the store no memsys at all: its host path.
 */
#include "ddstore/open.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddstore/config.h"
#include "ddstore/errors.h"
#include "ddstore/gpu.h"
#include "ddstore/log.h"
#include "ddstore/memops.h"
#include "ddstore/settings.h"

/* ---- the lazy memsys ---------------------------------------------------- */

typedef struct lazy_ms {
    dds_memops_t ops;
    pthread_mutex_t mu;
    int state;                   /* 0 untried, 1 ready, -1 failed (atomic)   */
    int rc;
    char detail[512];
    dds_memsys_t real;
    ddgpu_staging_params_t params;
} lazy_ms_t;

/* The real table, created on first use (once; a failure is kept). */
static int lz_real(void *ctx, const dds_memsys_t **real_p)
{
    lazy_ms_t *z = ctx;
    int st = __atomic_load_n(&z->state, __ATOMIC_ACQUIRE);
    if (st == 0) {
        pthread_mutex_lock(&z->mu);
        if (z->state == 0) {
            int rc = ddgpu_memsys_create(&z->params, &z->real);
            if (rc != 0) {
                z->rc = rc;
                snprintf(z->detail, sizeof z->detail, "%s",
                         dds_last_error());
                __atomic_store_n(&z->state, -1, __ATOMIC_RELEASE);
                DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_PY,
                        "GPU memory operations unavailable: %s", z->detail);
            } else {
                __atomic_store_n(&z->state, 1, __ATOMIC_RELEASE);
                DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_PY,
                        "GPU memory operations: %s",
                        z->real.ops->name ? z->real.ops->name : "?");
            }
        }
        pthread_mutex_unlock(&z->mu);
        st = z->state;
    }
    if (st < 0)
        return dds_error(z->rc, "%s", z->detail);
    *real_p = &z->real;
    return 0;
}

#define LZ(call)                                                               \
    do {                                                                       \
        const dds_memsys_t *r_;                                                \
        int rc_ = lz_real(ctx, &r_);                                           \
        if (rc_ != 0)                                                          \
            return rc_;                                                        \
        return r_->ops->call;                                                  \
    } while (0)

static int lz_pointer_kind(void *ctx, const void *ptr, dds_mem_t *mem_p)
{
    lazy_ms_t *z = ctx;
    /* Not initialised yet: this store never touched GPU memory, and asking
     * would initialise the runtime; such a pointer counts as host memory. */
    if (__atomic_load_n(&z->state, __ATOMIC_ACQUIRE) != 1) {
        if (mem_p != NULL) {
            mem_p->kind = DDS_MEM_HOST;
            mem_p->device = 0;
            mem_p->stream = NULL;
        }
        return 0;
    }
    return z->real.ops->pointer_kind(z->real.ctx, ptr, mem_p);
}
static int lz_host_alloc(void *ctx, size_t b, void **p)
{
    LZ(host_alloc(r_->ctx, b, p));
}
static int lz_host_free(void *ctx, void *p) { LZ(host_free(r_->ctx, p)); }
static int lz_acquire(void *ctx, size_t b, void **buf, void **host)
{
    LZ(staging_acquire(r_->ctx, b, buf, host));
}
static int lz_release(void *ctx, void *buf)
{
    LZ(staging_release(r_->ctx, buf));
}
static int lz_copy(void *ctx, dds_copy_dir_t dir, void *dst, const void *src,
                   const dds_memseg_t *segs, size_t nsegs, const dds_mem_t *on,
                   void *buf)
{
    LZ(copy_async(r_->ctx, dir, dst, src, segs, nsegs, on, buf));
}
static int lz_wait(void *ctx, void *buf) { LZ(staging_wait(r_->ctx, buf)); }
static int lz_fence(void *ctx, const dds_mem_t *on)
{
    LZ(stream_fence(r_->ctx, on));
}
static int lz_ev_record(void *ctx, const dds_mem_t *on, void **e)
{
    LZ(event_record(r_->ctx, on, e));
}
static int lz_ev_query(void *ctx, void *e, int *d)
{
    LZ(event_query(r_->ctx, e, d));
}
static int lz_ev_wait(void *ctx, void *e) { LZ(event_wait(r_->ctx, e)); }
static int lz_stream_wait(void *ctx, const dds_mem_t *on, void *e)
{
    LZ(stream_wait_event(r_->ctx, on, e));
}
static void lz_ev_release(void *ctx, void *e)
{
    lazy_ms_t *z = ctx;
    if (__atomic_load_n(&z->state, __ATOMIC_ACQUIRE) == 1)
        z->real.ops->event_release(z->real.ctx, e);
}
static void lz_destroy(void *ctx)
{
    lazy_ms_t *z = ctx;
    if (z == NULL)
        return;
    if (__atomic_load_n(&z->state, __ATOMIC_ACQUIRE) == 1)
        z->real.ops->destroy(z->real.ctx);
    pthread_mutex_destroy(&z->mu);
    free(z);
}

int ddstore_gpu_memsys_create(dds_memsys_t *ms)
{
    return ddstore_gpu_memsys_open(NULL, ms);
}

int ddstore_gpu_memsys_open(const dds_settings_t *settings, dds_memsys_t *ms)
{
    dds_mem_kind_t kind = ddgpu_backend_kind();
    int64_t bytes = 0;
    lazy_ms_t *z;

    memset(ms, 0, sizeof *ms);
    if (kind != DDS_MEM_CUDA && kind != DDS_MEM_ROCM)
        return dds_error(-DDS_ENOGPU,
                         "ddstore was built without GPU support "
                         "(ddstore-gpu backend '%s')",
                         ddgpu_backend_name());
    z = calloc(1, sizeof *z);
    if (z == NULL)
        return dds_error(-DDS_ENOMEM, "GPU memsys: out of memory");
    pthread_mutex_init(&z->mu, NULL);
    /* DDSTORE_GPU_STAGING_BYTES: from the settings ddstore_open read once,
     * else its typed accessor (a bad value fails dds_store_create, by
     * name; here the default stays) */
    if (settings != NULL)
        bytes = settings->gpu_staging_bytes;
    else if (dds_setting_gpu_staging_bytes(&bytes) != 0)
        bytes = 0;
    if (bytes > 0) {
        z->params.field_mask = DDGPU_STAGING_PARAM_MAX_BYTES;
        z->params.max_bytes = (size_t)bytes;
    }
    dds_error_clear();
    z->ops.size = sizeof z->ops;
    z->ops.name = ddgpu_backend_name();
    z->ops.kind = kind;
    z->ops.pointer_kind = lz_pointer_kind;
    z->ops.host_alloc = lz_host_alloc;
    z->ops.host_free = lz_host_free;
    z->ops.staging_acquire = lz_acquire;
    z->ops.staging_release = lz_release;
    z->ops.copy_async = lz_copy;
    z->ops.staging_wait = lz_wait;
    z->ops.stream_fence = lz_fence;
    z->ops.event_record = lz_ev_record;
    z->ops.event_query = lz_ev_query;
    z->ops.event_wait = lz_ev_wait;
    z->ops.stream_wait_event = lz_stream_wait;
    z->ops.event_release = lz_ev_release;
    z->ops.destroy = lz_destroy;
    ms->ops = &z->ops;
    ms->ctx = z;
    return 0;
}

