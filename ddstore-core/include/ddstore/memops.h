/* ddstore-core: the memory-operations table (GPU memory without a GPU
 * runtime in core).
 *
 * The core store never links a GPU runtime.  Whoever creates a store and can
 * drive GPU memory (pyddstore._core with ddstore-gpu: ddgpu_memsys_create)
 * hands it a dds_memsys_t through dds_store_params_t (DDS_STORE_PARAM_MEMSYS);
 * the store then reads into GPU destinations through pinned staging buffers
 * when its transport cannot reach that memory (no FI_HMEM), keeps pinned
 * host mirrors of GPU shards for such transports, and orders every copy on
 * the caller's stream (docs/gpudirect.md).  Without a table the store runs
 * its host path only.
 *
 * The block below is ddstore-gpu's table, moved here unchanged with the same
 * include guard (ddstore/gpu.h includes this header).  The table only grows
 * at the end; `size` is sizeof(dds_memops_t) of the implementer.  Every
 * function has the semantics of the ddgpu_* function named beside it
 * (ddstore-gpu/include/ddstore/gpu.h): 0 or a negative DDS_E* code with the
 * detail in dds_last_error(); none of them synchronises a whole device.
 */
#ifndef DDSTORE_MEMOPS_H
#define DDSTORE_MEMOPS_H

#include <stddef.h>
#include <stdint.h>

#include "ddstore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One contiguous piece of a copy: `len` bytes from src + src_offset to
 * dst + dst_offset. */
typedef struct dds_memseg {
    size_t src_offset;
    size_t dst_offset;
    size_t len;
} dds_memseg_t;

typedef enum {
    DDS_COPY_DEFAULT = 0,   /* inferred from the pointers (unified addressing) */
    DDS_COPY_H2D = 1,
    DDS_COPY_D2H = 2,
    DDS_COPY_D2D = 3
} dds_copy_dir_t;

typedef struct dds_memops {
    size_t size;            /* sizeof(dds_memops_t) of the implementer       */
    const char *name;       /* "cuda", "hip", "none"                          */
    dds_mem_kind_t kind;    /* device kind served (DDS_MEM_CUDA / _ROCM)     */

    /* ddgpu_pointer_kind (mem only). */
    int (*pointer_kind)(void *ctx, const void *ptr, dds_mem_t *mem_p);

    /* ddgpu_host_alloc / ddgpu_host_free: long-lived pinned host memory
     * (e.g. the host mirror of a GPU shard served by a host-only
     * transport). */
    int (*host_alloc)(void *ctx, size_t bytes, void **ptr_p);
    int (*host_free)(void *ctx, void *ptr);

    /* ddgpu_staging_acquire / _release on the context's pool: a pinned
     * buffer of at least `bytes` that no pending copy uses; *buf_p is the
     * handle, *host_p its host address. */
    int (*staging_acquire)(void *ctx, size_t bytes, void **buf_p,
                           void **host_p);
    int (*staging_release)(void *ctx, void *buf);

    /* ddgpu_copy_segments_async; when `buf` (a staging handle) is not NULL
     * the host side of the copy lies in that buffer, every segment is
     * checked against its size, and an event recorded after the copies
     * keeps the buffer from being reused before they finished
     * (ddgpu_stage_to_device / ddgpu_stage_from_device). */
    int (*copy_async)(void *ctx, dds_copy_dir_t dir, void *dst,
                      const void *src, const dds_memseg_t *segs, size_t nsegs,
                      const dds_mem_t *on, void *buf);

    /* ddgpu_stage_buf_wait: the host waits for the copies recorded on a
     * staging buffer (e.g. before reading what a D2H copy put there). */
    int (*staging_wait)(void *ctx, void *buf);

    /* ddgpu_stream_fence: the host waits for the work queued so far on
     * on->stream (an event, not a device-wide synchronise).  Use before a
     * NIC (GPUDirect) writes into GPU memory that queued kernels may still
     * use. */
    int (*stream_fence)(void *ctx, const dds_mem_t *on);

    /* Pooled events (ddgpu_event_*): record on a stream, query, wait, make
     * another stream wait, give back. */
    int (*event_record)(void *ctx, const dds_mem_t *on, void **event_p);
    int (*event_query)(void *ctx, void *event, int *done_p);
    int (*event_wait)(void *ctx, void *event);
    int (*stream_wait_event)(void *ctx, const dds_mem_t *on, void *event);
    void (*event_release)(void *ctx, void *event);

    /* Release the context (waits for its pending copies first). */
    void (*destroy)(void *ctx);
} dds_memops_t;

typedef struct dds_memsys {
    const dds_memops_t *ops;
    void *ctx;
} dds_memsys_t;

#ifdef __cplusplus
}
#endif
#endif /* DDSTORE_MEMOPS_H */
