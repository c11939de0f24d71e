/* ddstore-gpu: the CUDA runtime backend (plain C, runtime API only).
 *
 * Build: gcc -std=c11 -I/usr/local/cuda/include ... -lcudart.
 * All CUDA errors are translated in cu_error(); nothing here validates
 * arguments or checks for a GPU (ddgpu_common.c does).
 */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "ddgpu_internal.h"

const char *ddgpu_rt_name(void) { return "cuda"; }

dds_mem_kind_t ddgpu_rt_kind(void) { return DDS_MEM_CUDA; }

int ddgpu_rt_emulated(void) { return 0; }

int ddgpu_rt_test_host_emulation(int enable)
{
    (void)enable;
    return dds_error(-DDS_ENOSYS,
                     "ddgpu_test_host_emulation: only the none build has the "
                     "host emulation (this is the cuda build)");
}

static int cu_code(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return 0;
    case cudaErrorMemoryAllocation:
        return -DDS_ENOMEM;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidMemcpyDirection:
        return -DDS_EINVAL;
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorInitializationError:
    case cudaErrorStubLibrary:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorSystemNotReady:
    case cudaErrorCompatNotSupportedOnDevice:
        return -DDS_ENOGPU;
    default:
        return -DDS_EIO;
    }
}

/* The one translation of CUDA errors: code, detail, and the runtime's
 * (non-sticky) last error cleared so it does not surface in the caller's
 * next cudaGetLastError / kernel launch check. */
static int cu_error(cudaError_t e, const char *what)
{
    (void)cudaGetLastError();
    return dds_error(cu_code(e), "cuda: %s: %s (%s)", what,
                     cudaGetErrorName(e), cudaGetErrorString(e));
}

#define CU_CALL(call, what)                                                    \
    do {                                                                       \
        cudaError_t e_ = (call);                                               \
        if (e_ != cudaSuccess)                                                 \
            return cu_error(e_, (what));                                       \
    } while (0)

int ddgpu_rt_probe(ddgpu_info_t *info, char *detail, size_t cap)
{
    int rv = 0, dv = 0, n = 0;
    if (cudaRuntimeGetVersion(&rv) == cudaSuccess)
        info->runtime_version = rv;
    if (cudaDriverGetVersion(&dv) == cudaSuccess)
        info->driver_version = dv;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(detail, cap, "cuda: cudaGetDeviceCount: %s (%s)",
                 cudaGetErrorName(e), cudaGetErrorString(e));
        return -DDS_ENOGPU;
    }
    if (n <= 0) {
        snprintf(detail, cap, "cuda: cudaGetDeviceCount: 0 devices");
        return -DDS_ENOGPU;
    }
    info->device_count = n;
    return 0;
}

int ddgpu_rt_pointer_kind(const void *ptr, ddgpu_ptr_kind_t *kind_p,
                          int *device_p)
{
    struct cudaPointerAttributes a;
    memset(&a, 0, sizeof(a));
    cudaError_t e = cudaPointerGetAttributes(&a, ptr);
    if (e == cudaErrorInvalidValue) {
        /* Before CUDA 11, unregistered host memory was an error. */
        (void)cudaGetLastError();
        *kind_p = DDGPU_PTR_HOST;
        *device_p = 0;
        return 0;
    }
    if (e != cudaSuccess)
        return cu_error(e, "cudaPointerGetAttributes");
    switch (a.type) {
    case cudaMemoryTypeHost:
        *kind_p = DDGPU_PTR_HOST_PINNED;
        *device_p = 0;
        break;
    case cudaMemoryTypeDevice:
        *kind_p = DDGPU_PTR_DEVICE;
        *device_p = a.device;
        break;
    case cudaMemoryTypeManaged:
        *kind_p = DDGPU_PTR_MANAGED;
        *device_p = a.device < 0 ? 0 : a.device;
        break;
    case cudaMemoryTypeUnregistered:
    default:
        *kind_p = DDGPU_PTR_HOST;
        *device_p = 0;
        break;
    }
    return 0;
}

int ddgpu_rt_get_device(int *device_p)
{
    CU_CALL(cudaGetDevice(device_p), "cudaGetDevice");
    return 0;
}

int ddgpu_rt_set_device(int device)
{
    char what[48];
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        snprintf(what, sizeof(what), "cudaSetDevice(%d)", device);
        return cu_error(e, what);
    }
    return 0;
}

int ddgpu_rt_host_alloc(size_t bytes, void **ptr_p)
{
    cudaError_t e = cudaHostAlloc(ptr_p, bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        char what[64];
        snprintf(what, sizeof(what), "cudaHostAlloc(%zu bytes)", bytes);
        return cu_error(e, what);
    }
    return 0;
}

int ddgpu_rt_host_free(void *ptr)
{
    CU_CALL(cudaFreeHost(ptr), "cudaFreeHost");
    return 0;
}

int ddgpu_rt_device_alloc(size_t bytes, void **ptr_p)
{
    cudaError_t e = cudaMalloc(ptr_p, bytes);
    if (e != cudaSuccess) {
        char what[64];
        snprintf(what, sizeof(what), "cudaMalloc(%zu bytes)", bytes);
        return cu_error(e, what);
    }
    return 0;
}

int ddgpu_rt_device_free(void *ptr)
{
    CU_CALL(cudaFree(ptr), "cudaFree");
    return 0;
}

static enum cudaMemcpyKind cu_kind(dds_copy_dir_t dir)
{
    switch (dir) {
    case DDS_COPY_H2D: return cudaMemcpyHostToDevice;
    case DDS_COPY_D2H: return cudaMemcpyDeviceToHost;
    case DDS_COPY_D2D: return cudaMemcpyDeviceToDevice;
    case DDS_COPY_DEFAULT:
    default: return cudaMemcpyDefault;
    }
}

int ddgpu_rt_memcpy_async(dds_copy_dir_t dir, void *dst, const void *src,
                          size_t bytes, void *stream)
{
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cu_kind(dir),
                                    (cudaStream_t)stream);
    if (e != cudaSuccess) {
        char what[128];
        snprintf(what, sizeof(what), "cudaMemcpyAsync(dst=%p, src=%p, %zu "
                 "bytes, kind %d)", dst, src, bytes, (int)cu_kind(dir));
        return cu_error(e, what);
    }
    return 0;
}

int ddgpu_rt_memset_async(void *dst, int value, size_t bytes, void *stream)
{
    CU_CALL(cudaMemsetAsync(dst, value, bytes, (cudaStream_t)stream),
            "cudaMemsetAsync");
    return 0;
}

int ddgpu_rt_stream_create(void **stream_p)
{
    cudaStream_t s = NULL;
    CU_CALL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags");
    *stream_p = (void *)s;
    return 0;
}

int ddgpu_rt_stream_destroy(void *stream)
{
    CU_CALL(cudaStreamDestroy((cudaStream_t)stream), "cudaStreamDestroy");
    return 0;
}

int ddgpu_rt_stream_synchronize(void *stream)
{
    CU_CALL(cudaStreamSynchronize((cudaStream_t)stream),
            "cudaStreamSynchronize");
    return 0;
}

int ddgpu_rt_event_create(void **event_p)
{
    cudaEvent_t ev = NULL;
    CU_CALL(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming),
            "cudaEventCreateWithFlags");
    *event_p = (void *)ev;
    return 0;
}

int ddgpu_rt_event_destroy(void *event)
{
    CU_CALL(cudaEventDestroy((cudaEvent_t)event), "cudaEventDestroy");
    return 0;
}

int ddgpu_rt_event_record(void *event, void *stream)
{
    CU_CALL(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream),
            "cudaEventRecord");
    return 0;
}

int ddgpu_rt_event_query(void *event, int *done_p)
{
    cudaError_t e = cudaEventQuery((cudaEvent_t)event);
    if (e == cudaSuccess) {
        *done_p = 1;
        return 0;
    }
    if (e == cudaErrorNotReady) {   /* not an error; not recorded as one */
        *done_p = 0;
        return 0;
    }
    return cu_error(e, "cudaEventQuery");
}

int ddgpu_rt_event_synchronize(void *event)
{
    CU_CALL(cudaEventSynchronize((cudaEvent_t)event), "cudaEventSynchronize");
    return 0;
}

int ddgpu_rt_stream_wait_event(void *stream, void *event)
{
    CU_CALL(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0),
            "cudaStreamWaitEvent");
    return 0;
}
