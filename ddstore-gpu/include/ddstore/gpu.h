/* ddstore-gpu: GPU memory for the store (CUDA runtime | ROCm HIP | none).
 *
 * One library, three builds chosen at build time (exactly one backend is
 * linked): src/ddgpu_rt.c built for the CUDA runtime API or for HIP, or
 * src/ddgpu_none.c (no GPU support; always builds).  The API is the same in
 * all three.  It answers "what memory is this pointer", allocates pinned
 * staging memory, copies between host and device on the caller's stream,
 * orders work with events, and runs the staging engine that moves rows
 * between pinned host buffers and GPU memory.  It never synchronises a whole
 * device: waits are scoped to one event or one stream.
 *
 * "No GPU" (no driver, no device, CUDA_VISIBLE_DEVICES="", the none build,
 * or a process forked after the runtime was initialised) is reported by
 * every entry point as -DDS_ENOGPU with the runtime's error name in
 * dds_last_error(), e.g. "cuda: cudaGetDeviceCount:
 * cudaErrorInsufficientDriver (...)".  The runtime is probed once per
 * process; later calls cost a load and a compare.  Exceptions, which still
 * work without a GPU: ddgpu_version, ddgpu_backend_name, ddgpu_backend_kind,
 * ddgpu_ptr_kind_name, ddgpu_available (fills what it knows and returns
 * -DDS_ENOGPU), ddgpu_pointer_kind (every pointer is host memory then), the
 * destroy/free functions given NULL, and ddgpu_segs_coalesce.
 *
 * Errors: 0 or a negative DDS_E* code (ddstore/errors.h) with the detail in
 * dds_last_error().  Runtime errors are translated in one place per backend:
 * out of memory -> -DDS_ENOMEM, invalid value/device/handle -> -DDS_EINVAL,
 * no driver/device -> -DDS_ENOGPU, anything else -> -DDS_EIO; the detail
 * names the runtime call and the runtime's error name and string.  A failed
 * runtime call's (non-sticky) error is cleared from the runtime's
 * "last error" so it does not surface in the caller's next kernel check.
 *
 * Streams and devices: `on` (const dds_mem_t *) says where GPU work is
 * enqueued: on->stream (cudaStream_t / hipStream_t; NULL = the legacy
 * default stream) of device on->device when on->kind is this backend's
 * device kind (DDS_MEM_CUDA for cuda, DDS_MEM_ROCM for hip).  on->kind
 * DDS_MEM_HOST: on->stream of the calling thread's current device.  on NULL:
 * the current device's default stream.  The calling thread's current device
 * is switched for the call when needed and restored before returning.
 * Another backend's device kind is -DDS_EINVAL.
 *
 * Thread-safety: every function is safe from any thread.  Objects
 * (streams, events, staging pools) may be shared between threads; a staging
 * buffer (ddgpu_stage_buf_t) belongs to the thread that acquired it until it
 * is released.
 *
 * Fork: a child forked after this process initialised the GPU runtime
 * cannot use it (CUDA and HIP forbid it); every entry point then returns
 * -DDS_ENOGPU, ddgpu_pointer_kind included (a device pointer inherited from
 * the parent cannot be told from host memory there).
 */
#ifndef DDSTORE_GPU_H
#define DDSTORE_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "ddstore/memops.h"
#include "ddstore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* The memory-operations table the core store calls (no GPU runtime in core):
 * dds_memseg_t, dds_copy_dir_t, dds_memops_t, dds_memsys_t live in
 * ddstore-core's include/ddstore/memops.h (included above).  Every function
 * of the table has the semantics of the ddgpu_* function named beside it
 * there; ddgpu_memsys_create (below) fills one. */

/* ------------------------------------------------------------------------ */
/* Library and runtime */

/* "MAJOR.MINOR.PATCH" of ddstore-gpu (ddstore-gpu/VERSION). */
const char *ddgpu_version(void);

/* "cuda", "hip" or "none": the backend this library was built with. */
const char *ddgpu_backend_name(void);

/* DDS_MEM_CUDA (cuda), DDS_MEM_ROCM (hip), DDS_MEM_HOST (none; DDS_MEM_CUDA
 * while the test emulation below is on). */
dds_mem_kind_t ddgpu_backend_kind(void);

typedef struct ddgpu_info {
    const char *backend;     /* ddgpu_backend_name()                        */
    dds_mem_kind_t kind;     /* ddgpu_backend_kind()                        */
    int device_count;        /* usable devices; 0 without a GPU              */
    int runtime_version;     /* cudaRuntimeGetVersion / hipRuntimeGetVersion;
                                0 when unknown                               */
    int driver_version;      /* 0 when there is no driver                    */
    int emulated;            /* 1: none build with the test emulation on     */
} ddgpu_info_t;

/* Is a GPU usable?  Returns 0 (device_count >= 1) or -DDS_ENOGPU with the
 * runtime's error in the detail.  `info_p` (may be NULL) is filled in both
 * cases.  Cheap after the first call (the probe is cached per process). */
int ddgpu_available(ddgpu_info_t *info_p);

typedef enum {
    DDGPU_PTR_HOST = 0,        /* pageable host memory (or unknown to the
                                  runtime)                                  */
    DDGPU_PTR_HOST_PINNED = 1, /* page-locked host memory (ddgpu_host_alloc,
                                  cudaHostAlloc, cudaHostRegister, ...)      */
    DDGPU_PTR_DEVICE = 2,      /* device memory of device N                  */
    DDGPU_PTR_MANAGED = 3      /* managed / unified memory (device N)        */
} ddgpu_ptr_kind_t;

/* "host", "pinned", "device", "managed" ("?" for other values). */
const char *ddgpu_ptr_kind_name(ddgpu_ptr_kind_t kind);

/* What memory `ptr` points into.  Outputs (either may be NULL):
 * *kind_p; *mem_p = {DDS_MEM_HOST, 0, NULL} for host and pinned memory,
 * {backend kind, device N, NULL} for device and managed memory.
 * Without a GPU every pointer is DDGPU_PTR_HOST and the call returns 0.
 * -DDS_EINVAL for NULL ptr; -DDS_ENOGPU in a forked child (see above). */
int ddgpu_pointer_kind(const void *ptr, ddgpu_ptr_kind_t *kind_p,
                       dds_mem_t *mem_p);

/* ------------------------------------------------------------------------ */
/* Memory */

/* Pinned (page-locked, portable across devices) host memory of `bytes`
 * (> 0).  The caller owns it until ddgpu_host_free.  Allocation is slow
 * (milliseconds); keep it off the per-read path (use a staging pool). */
int ddgpu_host_alloc(size_t bytes, void **ptr_p);
/* NULL is a no-op.  May wait for the device (the runtimes' free is not
 * stream-ordered): call it at teardown, not per read. */
int ddgpu_host_free(void *ptr);

/* Device memory of `bytes` (> 0) on `device`.  Caller owns it. */
int ddgpu_device_alloc(int device, size_t bytes, void **ptr_p);
/* NULL is a no-op. */
int ddgpu_device_free(void *ptr);

/* ------------------------------------------------------------------------ */
/* Streams and events (never a device-wide synchronise) */

/* A non-blocking stream (does not synchronise with the legacy default
 * stream) on `device`.  Caller owns it. */
int ddgpu_stream_create(int device, void **stream_p);
/* NULL is a no-op.  Work already queued still completes. */
int ddgpu_stream_destroy(void *stream);
/* The host waits for everything queued on on->stream. */
int ddgpu_stream_synchronize(const dds_mem_t *on);
/* The host waits for the work queued on on->stream *so far*, through an
 * event recorded now (work queued later by other threads is not waited
 * for).  Uses a pooled event; no allocation after warm-up. */
int ddgpu_stream_fence(const dds_mem_t *on);

/* An event without timing on `device` (events belong to a device: record
 * it only on streams of that device).  Caller owns it. */
int ddgpu_event_create(int device, void **event_p);
/* NULL is a no-op. */
int ddgpu_event_destroy(void *event);
/* Record `event` after the work queued on on->stream. */
int ddgpu_event_record(void *event, const dds_mem_t *on);
/* *done_p = 1 when the work before the last record finished (or the event
 * was never recorded), else 0.  Does not wait. */
int ddgpu_event_query(void *event, int *done_p);
/* The host waits for the work before the last record of `event`. */
int ddgpu_event_synchronize(void *event);
/* Work queued on on->stream after this call waits for `event` (on the
 * device; the host does not wait). */
int ddgpu_stream_wait_event(const dds_mem_t *on, void *event);

/* ------------------------------------------------------------------------ */
/* Copies, enqueued on on->stream (asynchronous for the host where the
 * runtime allows: H2D/D2H with pinned host memory, D2D; with pageable host
 * memory the runtime may return only after the copy). */

/* `bytes` from src to dst.  bytes == 0 is a no-op (pointers may be NULL). */
int ddgpu_copy_async(dds_copy_dir_t dir, void *dst, const void *src,
                     size_t bytes, const dds_mem_t *on);

/* Every segment: len bytes from src + src_offset to dst + dst_offset,
 * in order.  Neighbouring segments contiguous on both sides are merged
 * into one runtime copy; *ncopies_p (may be NULL) = copies issued.
 * Zero-length segments are skipped.  Offsets + len must not overflow. */
int ddgpu_copy_segments_async(dds_copy_dir_t dir, void *dst, const void *src,
                              const dds_memseg_t *segs, size_t nsegs,
                              const dds_mem_t *on, size_t *ncopies_p);

/* `bytes` bytes of device memory at dst set to (unsigned char)value. */
int ddgpu_memset_async(void *dst, int value, size_t bytes,
                       const dds_mem_t *on);

/* Pure helper (no GPU needed): merge, in place, neighbouring segments that
 * are contiguous in both source and destination and drop empty ones;
 * returns the new count.  Order is kept. */
size_t ddgpu_segs_coalesce(dds_memseg_t *segs, size_t nsegs);

/* ------------------------------------------------------------------------ */
/* The staging engine: a pool of pinned host buffers whose reuse is ordered
 * by events, so a reader thread fills a buffer on the host (a host-only
 * transport reads into it), enqueues the copies to the GPU destination on
 * the caller's stream, releases the buffer and returns at once; the batch
 * is ready for the next kernel on that stream and nobody synchronised
 * anything.  The reverse direction (a GPU shard read into pinned memory to
 * be served or copied on the host) is ddgpu_stage_from_device followed by
 * ddgpu_stage_buf_wait. */

typedef struct ddgpu_staging ddgpu_staging_t;
typedef struct ddgpu_stage_buf ddgpu_stage_buf_t;

enum {
    DDGPU_STAGING_PARAM_MAX_BYTES = 1u << 0,
    DDGPU_STAGING_PARAM_MIN_BUF_BYTES = 1u << 1
};

typedef struct ddgpu_staging_params {
    uint64_t field_mask;     /* DDGPU_STAGING_PARAM_* that are set           */
    size_t max_bytes;        /* pinned bytes kept by the pool (soft limit:
                                exceeded, with a warning once, only when every
                                buffer is lent); default 256 MiB              */
    size_t min_buf_bytes;    /* smallest buffer; sizes are rounded up to a
                                power of two >= this; default 1 MiB           */
} ddgpu_staging_params_t;

#define DDGPU_STAGING_MAX_BYTES_DEFAULT ((size_t)256 << 20)
#define DDGPU_STAGING_MIN_BUF_BYTES_DEFAULT ((size_t)1 << 20)

/* A pool (params NULL = defaults).  No memory is pinned until the first
 * acquire.  -DDS_ENOGPU without a GPU. */
int ddgpu_staging_create(const ddgpu_staging_params_t *params,
                         ddgpu_staging_t **staging_p);
/* Waits (per buffer event) for pending copies, frees every buffer.  Every
 * buffer must have been released.  NULL is a no-op. */
void ddgpu_staging_destroy(ddgpu_staging_t *staging);

/* Lend a buffer of at least `bytes` (> 0) that no pending copy uses: an
 * idle buffer whose events completed, else a new one, else (over the
 * limit) an idle buffer after waiting for its events.  Thread-safe. */
int ddgpu_staging_acquire(ddgpu_staging_t *staging, size_t bytes,
                          ddgpu_stage_buf_t **buf_p);
/* Give the buffer back; copies still pending on it keep it from being lent
 * again until they finish (nobody waits here). */
int ddgpu_staging_release(ddgpu_staging_t *staging, ddgpu_stage_buf_t *buf);

/* Host address and size (>= the bytes acquired) of a lent buffer. */
void *ddgpu_stage_buf_host(const ddgpu_stage_buf_t *buf);
size_t ddgpu_stage_buf_bytes(const ddgpu_stage_buf_t *buf);

/* Enqueue H2D copies buffer + seg.src_offset -> dst + seg.dst_offset on
 * on->stream, then record the buffer's event there.  Returns without
 * waiting.  Segments outside the buffer: -DDS_ERANGE before anything is
 * enqueued. */
int ddgpu_stage_to_device(ddgpu_stage_buf_t *buf, void *dst,
                          const dds_memseg_t *segs, size_t nsegs,
                          const dds_mem_t *on);
/* Enqueue D2H copies src + seg.src_offset -> buffer + seg.dst_offset on
 * on->stream, then record the buffer's event.  The host bytes are valid
 * after ddgpu_stage_buf_wait. */
int ddgpu_stage_from_device(ddgpu_stage_buf_t *buf, const void *src,
                            const dds_memseg_t *segs, size_t nsegs,
                            const dds_mem_t *on);
/* The host waits for the copies recorded on the buffer (its events only). */
int ddgpu_stage_buf_wait(ddgpu_stage_buf_t *buf);

typedef struct ddgpu_staging_stats {
    uint64_t acquires;       /* buffers lent                                */
    uint64_t allocs;         /* pinned allocations                          */
    uint64_t frees;          /* pinned buffers freed (evicted over limit)   */
    uint64_t waits;          /* acquires that had to wait for an event      */
    uint64_t copies;         /* runtime copies issued (after merging)       */
    uint64_t h2d_bytes;
    uint64_t d2h_bytes;
    uint64_t pinned_bytes;   /* pinned bytes held now                       */
    uint64_t buffers;        /* buffers held now                            */
    uint64_t lent;           /* buffers lent now                            */
} ddgpu_staging_stats_t;

int ddgpu_staging_stats(ddgpu_staging_t *staging,
                        ddgpu_staging_stats_t *stats_p);

/* ------------------------------------------------------------------------ */
/* The table for the core store */

/* Fill *memsys_p with this backend's dds_memops_t and a context owning a
 * staging pool (params as ddgpu_staging_create) and an event pool.  The
 * receiver (the store) releases it with memsys_p->ops->destroy(ctx).
 * -DDS_ENOGPU without a GPU: the store then runs its host path. */
int ddgpu_memsys_create(const ddgpu_staging_params_t *params,
                        dds_memsys_t *memsys_p);

/* ------------------------------------------------------------------------ */
/* TEST HOOK (none build only; -DDS_ENOSYS in the cuda and hip builds).
 *
 * enable = 1 turns the none backend into a host emulation of one CUDA-like
 * device, so that staging logic (this library's and the core store's) runs
 * in tests on machines without a GPU: ddgpu_available reports one device
 * with info.emulated = 1 and kind DDS_MEM_CUDA; "device" and "pinned"
 * allocations are malloc'd and tracked, so ddgpu_pointer_kind reports them;
 * copies check their direction against those allocations (an H2D whose
 * destination is not emulated device memory is -DDS_EINVAL) and are
 * *deferred*: queued on the emulated stream and executed only when the host
 * waits on that stream or on an event recorded after them (or a stream
 * waiting on such an event is drained), never by ddgpu_event_query.  So a
 * missing wait shows up as data that is not there.
 * enable = 0 turns it off and frees every emulated stream and queue (not
 * the emulated allocations, whose owners free them).  Not for production. */
int ddgpu_test_host_emulation(int enable);

#ifdef __cplusplus
}
#endif
#endif
