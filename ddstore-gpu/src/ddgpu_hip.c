/* ddstore-gpu: the ROCm HIP backend (plain C, runtime API only).
 *
 * Build: gcc -std=c11 -D__HIP_PLATFORM_AMD__ [-I<rocm>/include] ...
 * -lamdhip64 (Debian: headers in /usr/include/hip).  All HIP errors are
 * translated in hip_error(); nothing here validates arguments or checks for
 * a GPU (ddgpu_common.c does).  Kept parallel to ddgpu_cuda.c.
 */
#include <stdio.h>
#include <string.h>

#include <hip/hip_runtime_api.h>

#include "ddgpu_internal.h"

#ifndef HIP_VERSION_MAJOR
#include <hip/hip_version.h>
#endif

const char *ddgpu_rt_name(void) { return "hip"; }

dds_mem_kind_t ddgpu_rt_kind(void) { return DDS_MEM_ROCM; }

int ddgpu_rt_emulated(void) { return 0; }

int ddgpu_rt_test_host_emulation(int enable)
{
    (void)enable;
    return dds_error(-DDS_ENOSYS,
                     "ddgpu_test_host_emulation: only the none build has the "
                     "host emulation (this is the hip build)");
}

static int hip_code(hipError_t e)
{
    switch (e) {
    case hipSuccess:
        return 0;
    case hipErrorOutOfMemory:
        return -DDS_ENOMEM;
    case hipErrorInvalidValue:
    case hipErrorInvalidDevice:
    case hipErrorInvalidDevicePointer:
    case hipErrorInvalidResourceHandle:
    case hipErrorInvalidMemcpyDirection:
        return -DDS_EINVAL;
    case hipErrorInsufficientDriver:
    case hipErrorNoDevice:
    case hipErrorNotInitialized:
        return -DDS_ENOGPU;
    default:
        return -DDS_EIO;
    }
}

/* The one translation of HIP errors: code, detail, and the runtime's last
 * error cleared so it does not surface in the caller's next check. */
static int hip_error(hipError_t e, const char *what)
{
    (void)hipGetLastError();
    return dds_error(hip_code(e), "hip: %s: %s (%s)", what,
                     hipGetErrorName(e), hipGetErrorString(e));
}

#define HIP_CALL(call, what)                                                   \
    do {                                                                       \
        hipError_t e_ = (call);                                                \
        if (e_ != hipSuccess)                                                  \
            return hip_error(e_, (what));                                      \
    } while (0)

int ddgpu_rt_probe(ddgpu_info_t *info, char *detail, size_t cap)
{
    int rv = 0, dv = 0, n = 0;
    if (hipRuntimeGetVersion(&rv) == hipSuccess)
        info->runtime_version = rv;
    if (hipDriverGetVersion(&dv) == hipSuccess)
        info->driver_version = dv;
    hipError_t e = hipGetDeviceCount(&n);
    if (e != hipSuccess) {
        (void)hipGetLastError();
        snprintf(detail, cap, "hip: hipGetDeviceCount: %s (%s)",
                 hipGetErrorName(e), hipGetErrorString(e));
        return -DDS_ENOGPU;
    }
    if (n <= 0) {
        snprintf(detail, cap, "hip: hipGetDeviceCount: 0 devices");
        return -DDS_ENOGPU;
    }
    info->device_count = n;
    return 0;
}

int ddgpu_rt_pointer_kind(const void *ptr, ddgpu_ptr_kind_t *kind_p,
                          int *device_p)
{
    hipPointerAttribute_t a;
    memset(&a, 0, sizeof(a));
    hipError_t e = hipPointerGetAttributes(&a, ptr);
    if (e == hipErrorInvalidValue) {
        /* ROCm < 6: unregistered host memory is an error. */
        (void)hipGetLastError();
        *kind_p = DDGPU_PTR_HOST;
        *device_p = 0;
        return 0;
    }
    if (e != hipSuccess)
        return hip_error(e, "hipPointerGetAttributes");
#if HIP_VERSION_MAJOR >= 6
    switch (a.type) {
    case hipMemoryTypeHost:
        *kind_p = DDGPU_PTR_HOST_PINNED;
        *device_p = 0;
        break;
    case hipMemoryTypeDevice:
    case hipMemoryTypeArray:
        *kind_p = DDGPU_PTR_DEVICE;
        *device_p = a.device;
        break;
    case hipMemoryTypeManaged:
    case hipMemoryTypeUnified:
        *kind_p = DDGPU_PTR_MANAGED;
        *device_p = a.device < 0 ? 0 : a.device;
        break;
    case hipMemoryTypeUnregistered:
    default:
        *kind_p = DDGPU_PTR_HOST;
        *device_p = 0;
        break;
    }
#else
    if (a.isManaged) {
        *kind_p = DDGPU_PTR_MANAGED;
        *device_p = a.device < 0 ? 0 : a.device;
        return 0;
    }
    switch (a.memoryType) {
    case hipMemoryTypeHost:
        *kind_p = DDGPU_PTR_HOST_PINNED;
        *device_p = 0;
        break;
    case hipMemoryTypeDevice:
    case hipMemoryTypeArray:
        *kind_p = DDGPU_PTR_DEVICE;
        *device_p = a.device;
        break;
    case hipMemoryTypeUnified:
        *kind_p = DDGPU_PTR_MANAGED;
        *device_p = a.device < 0 ? 0 : a.device;
        break;
    default:
        *kind_p = DDGPU_PTR_HOST;
        *device_p = 0;
        break;
    }
#endif
    return 0;
}

int ddgpu_rt_get_device(int *device_p)
{
    HIP_CALL(hipGetDevice(device_p), "hipGetDevice");
    return 0;
}

int ddgpu_rt_set_device(int device)
{
    hipError_t e = hipSetDevice(device);
    if (e != hipSuccess) {
        char what[48];
        snprintf(what, sizeof(what), "hipSetDevice(%d)", device);
        return hip_error(e, what);
    }
    return 0;
}

int ddgpu_rt_host_alloc(size_t bytes, void **ptr_p)
{
    hipError_t e = hipHostMalloc(ptr_p, bytes, hipHostMallocPortable);
    if (e != hipSuccess) {
        char what[64];
        snprintf(what, sizeof(what), "hipHostMalloc(%zu bytes)", bytes);
        return hip_error(e, what);
    }
    return 0;
}

int ddgpu_rt_host_free(void *ptr)
{
    HIP_CALL(hipHostFree(ptr), "hipHostFree");
    return 0;
}

int ddgpu_rt_device_alloc(size_t bytes, void **ptr_p)
{
    hipError_t e = hipMalloc(ptr_p, bytes);
    if (e != hipSuccess) {
        char what[64];
        snprintf(what, sizeof(what), "hipMalloc(%zu bytes)", bytes);
        return hip_error(e, what);
    }
    return 0;
}

int ddgpu_rt_device_free(void *ptr)
{
    HIP_CALL(hipFree(ptr), "hipFree");
    return 0;
}

static hipMemcpyKind hip_kind(dds_copy_dir_t dir)
{
    switch (dir) {
    case DDS_COPY_H2D: return hipMemcpyHostToDevice;
    case DDS_COPY_D2H: return hipMemcpyDeviceToHost;
    case DDS_COPY_D2D: return hipMemcpyDeviceToDevice;
    case DDS_COPY_DEFAULT:
    default: return hipMemcpyDefault;
    }
}

int ddgpu_rt_memcpy_async(dds_copy_dir_t dir, void *dst, const void *src,
                          size_t bytes, void *stream)
{
    hipError_t e = hipMemcpyAsync(dst, src, bytes, hip_kind(dir),
                                  (hipStream_t)stream);
    if (e != hipSuccess) {
        char what[128];
        snprintf(what, sizeof(what), "hipMemcpyAsync(dst=%p, src=%p, %zu "
                 "bytes, kind %d)", dst, src, bytes, (int)hip_kind(dir));
        return hip_error(e, what);
    }
    return 0;
}

int ddgpu_rt_memset_async(void *dst, int value, size_t bytes, void *stream)
{
    HIP_CALL(hipMemsetAsync(dst, value, bytes, (hipStream_t)stream),
             "hipMemsetAsync");
    return 0;
}

int ddgpu_rt_stream_create(void **stream_p)
{
    hipStream_t s = NULL;
    HIP_CALL(hipStreamCreateWithFlags(&s, hipStreamNonBlocking),
             "hipStreamCreateWithFlags");
    *stream_p = (void *)s;
    return 0;
}

int ddgpu_rt_stream_destroy(void *stream)
{
    HIP_CALL(hipStreamDestroy((hipStream_t)stream), "hipStreamDestroy");
    return 0;
}

int ddgpu_rt_stream_synchronize(void *stream)
{
    HIP_CALL(hipStreamSynchronize((hipStream_t)stream),
             "hipStreamSynchronize");
    return 0;
}

int ddgpu_rt_event_create(void **event_p)
{
    hipEvent_t ev = NULL;
    HIP_CALL(hipEventCreateWithFlags(&ev, hipEventDisableTiming),
             "hipEventCreateWithFlags");
    *event_p = (void *)ev;
    return 0;
}

int ddgpu_rt_event_destroy(void *event)
{
    HIP_CALL(hipEventDestroy((hipEvent_t)event), "hipEventDestroy");
    return 0;
}

int ddgpu_rt_event_record(void *event, void *stream)
{
    HIP_CALL(hipEventRecord((hipEvent_t)event, (hipStream_t)stream),
             "hipEventRecord");
    return 0;
}

int ddgpu_rt_event_query(void *event, int *done_p)
{
    hipError_t e = hipEventQuery((hipEvent_t)event);
    if (e == hipSuccess) {
        *done_p = 1;
        return 0;
    }
    if (e == hipErrorNotReady) {
        (void)hipGetLastError();   /* HIP records every call's status */
        *done_p = 0;
        return 0;
    }
    return hip_error(e, "hipEventQuery");
}

int ddgpu_rt_event_synchronize(void *event)
{
    HIP_CALL(hipEventSynchronize((hipEvent_t)event), "hipEventSynchronize");
    return 0;
}

int ddgpu_rt_stream_wait_event(void *stream, void *event)
{
    HIP_CALL(hipStreamWaitEvent((hipStream_t)stream, (hipEvent_t)event, 0),
             "hipStreamWaitEvent");
    return 0;
}
