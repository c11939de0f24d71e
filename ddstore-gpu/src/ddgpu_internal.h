/* ddstore-gpu internal: the runtime layer each backend implements.
 *
 * Exactly one of ddgpu_rt.c (cuda or hip), ddgpu_none.c is linked with
 * the API files (ddgpu_common.c and its siblings).  The backend translates its runtime's errors (one
 * function per backend) and knows nothing about pools, segments or
 * validation; ddgpu_common.c implements the public API on top of it:
 * probing once, the no-GPU and forked-child checks, argument checks, the
 * current-device guard, segment merging, the staging pool and the memops
 * table.
 *
 * Every ddgpu_rt_* below except probe/name/kind/emulated is only called
 * after a successful probe in this process.  Streams and events are the
 * runtime's handles (cudaStream_t, hipEvent_t, ...) as void *.  They return
 * 0 or a negative DDS_E* code with the detail set (dds_error).
 */
#ifndef DDGPU_INTERNAL_H
#define DDGPU_INTERNAL_H

#include <stddef.h>

#include "ddstore/errors.h"
#include "ddstore/gpu.h"
#include "ddstore/log.h"
#include "ddstore/types.h"

/* DDGPU_VERSION "x.y.z": from the header Bazel generates out of
 * ddstore-gpu/VERSION, or -DDDGPU_VERSION='"x.y.z"' in builds without Bazel
 * (ci/gpu-check.sh, setup builds). */
#if defined(__has_include)
#if __has_include("ddstore/gpu_version.h")
#include "ddstore/gpu_version.h"
#endif
#endif
#ifndef DDGPU_VERSION
#error "DDGPU_VERSION undefined: build with Bazel or pass -DDDGPU_VERSION='\"x.y.z\"' from ddstore-gpu/VERSION"
#endif

/* Most devices a process may use (bit masks in the staging pool). */
#define DDGPU_MAX_DEVICES 64

const char *ddgpu_rt_name(void);
dds_mem_kind_t ddgpu_rt_kind(void);
/* 1 when the none backend's test emulation is on (0 in cuda/hip). */
int ddgpu_rt_emulated(void);

/* Probe the runtime: fill `info` (device_count, versions) and return 0, or
 * return -DDS_ENOGPU with a one-line reason (runtime call, error name and
 * string) written into detail[cap].  Called once per process. */
int ddgpu_rt_probe(ddgpu_info_t *info, char *detail, size_t cap);

int ddgpu_rt_pointer_kind(const void *ptr, ddgpu_ptr_kind_t *kind_p,
                          int *device_p);

int ddgpu_rt_get_device(int *device_p);
int ddgpu_rt_set_device(int device);

int ddgpu_rt_host_alloc(size_t bytes, void **ptr_p);
int ddgpu_rt_host_free(void *ptr);
/* On the current device. */
int ddgpu_rt_device_alloc(size_t bytes, void **ptr_p);
int ddgpu_rt_device_free(void *ptr);

int ddgpu_rt_memcpy_async(dds_copy_dir_t dir, void *dst, const void *src,
                          size_t bytes, void *stream);
int ddgpu_rt_memset_async(void *dst, int value, size_t bytes, void *stream);

/* On the current device. */
int ddgpu_rt_stream_create(void **stream_p);
int ddgpu_rt_stream_destroy(void *stream);
int ddgpu_rt_stream_synchronize(void *stream);

/* On the current device, without timing. */
int ddgpu_rt_event_create(void **event_p);
int ddgpu_rt_event_destroy(void *event);
int ddgpu_rt_event_record(void *event, void *stream);
int ddgpu_rt_event_query(void *event, int *done_p);
int ddgpu_rt_event_synchronize(void *event);
int ddgpu_rt_stream_wait_event(void *stream, void *event);

/* ddgpu_test_host_emulation (none: the emulator; cuda/hip: -DDS_ENOSYS). */
int ddgpu_rt_test_host_emulation(int enable);

/* ---- shared by the files of the public API (ddgpu_common.c's map) ---- */

/* 0 when the runtime is usable in this process (probed once, not a forked
 * child of a process that used it), else the error naming `fn`. */
int ddgpu_gpu_ready(const char *fn);

/* Current-device guard: switch the calling thread to the device of `on`
 * for one call and back (ddgpu_common.c). */
typedef struct ddgpu_guard {
    int device;      /* current device inside the guard */
    int prev;
    int switched;
    void *stream;
} ddgpu_guard_t;
/* Switch to `device` (checked against the device count). */
int ddgpu_guard_device(const char *fn, int device, ddgpu_guard_t *g);
int ddgpu_guard_enter(const char *fn, const dds_mem_t *on, ddgpu_guard_t *g);
void ddgpu_guard_exit(ddgpu_guard_t *g);

/* The process-wide event pool (ddgpu_stream.c). */
typedef struct ddgpu_pevent {
    void *event;
    int device;
    struct ddgpu_pevent *next;
} ddgpu_pevent_t;
/* Inside a guard (current device g->device). */
int ddgpu_evpool_get(const ddgpu_guard_t *g, ddgpu_pevent_t **pe_p);
void ddgpu_evpool_put(ddgpu_pevent_t *pe);
void ddgpu_evpool_clear(void);

/* Segment lists (ddgpu_copy.c). */
/* Every segment inside [0, cap_src) and [0, cap_dst); the error names
 * `fn` and the segment. */
int ddgpu_segs_check(const char *fn, const dds_memseg_t *segs, size_t nsegs,
                     size_t cap_src, size_t cap_dst);
/* The copies of checked segments on `stream` (no checks); counts out. */
int ddgpu_segs_copy_raw(dds_copy_dir_t dir, void *dst, const void *src,
                        const dds_memseg_t *segs, size_t nsegs, void *stream,
                        size_t *ncopies_p, size_t *bytes_p);
int ddgpu_segs_nonempty(const dds_memseg_t *segs, size_t nsegs);

#endif
