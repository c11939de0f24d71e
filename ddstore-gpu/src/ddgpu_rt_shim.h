/* ddstore-gpu internal: the runtime shim under ddgpu_rt.c.
 *
 * ddgpu_rt.c is the one CUDA/HIP backend; this header maps its RT(...)
 * names onto one runtime, chosen by the build's public define:
 * DDSTORE_WITH_CUDA (--config=cuda) or DDSTORE_WITH_HIP (--config=rocm,
 * with -D__HIP_PLATFORM_AMD__).  RT(Name) is cudaName / hipName, RT_S(Name)
 * the string "cudaName" / "hipName" (for messages).  The rest are the few
 * places where the two APIs differ in more than the prefix.
 */
#ifndef DDGPU_RT_SHIM_H
#define DDGPU_RT_SHIM_H

#if defined(DDSTORE_WITH_CUDA) && defined(DDSTORE_WITH_HIP)
#error "ddgpu_rt.c: DDSTORE_WITH_CUDA and DDSTORE_WITH_HIP are exclusive"
#elif defined(DDSTORE_WITH_CUDA)

#include <cuda_runtime_api.h>

#define RT(name) cuda##name
#define RT_NAME "cuda"
#define RT_S(name) "cuda" #name
#define RT_MEM_KIND DDS_MEM_CUDA
typedef struct cudaPointerAttributes rt_pointer_attr_t;
typedef enum cudaMemcpyKind rt_memcpy_kind_t;
#define RT_ERROR_NOMEM cudaErrorMemoryAllocation
/* Runtime states that mean "no usable GPU" besides InsufficientDriver and
 * NoDevice. */
#define RT_NOGPU_CASES                                                         \
    case cudaErrorInitializationError:                                         \
    case cudaErrorStubLibrary:                                                 \
    case cudaErrorDevicesUnavailable:                                          \
    case cudaErrorSystemDriverMismatch:                                        \
    case cudaErrorSystemNotReady:                                              \
    case cudaErrorCompatNotSupportedOnDevice:
/* Memory types beyond Device / Managed that mean the same. */
#define RT_DEVICE_EXTRA_CASES
#define RT_MANAGED_EXTRA_CASES
/* cudaPointerGetAttributes has a.type (CUDA >= 10). */
#define RT_LEGACY_POINTER_ATTRS 0
#define RT_HOST_ALLOC(ptr_p, bytes)                                            \
    cudaHostAlloc((ptr_p), (bytes), cudaHostAllocPortable)
#define RT_HOST_ALLOC_S "cudaHostAlloc"
#define RT_HOST_FREE cudaFreeHost
#define RT_HOST_FREE_S "cudaFreeHost"
/* cudaErrorNotReady from a query is not recorded as the last error. */
#define RT_NOT_READY_RECORDED 0

#elif defined(DDSTORE_WITH_HIP)

#include <hip/hip_runtime_api.h>
#ifndef HIP_VERSION_MAJOR
#include <hip/hip_version.h>
#endif

#define RT(name) hip##name
#define RT_NAME "hip"
#define RT_S(name) "hip" #name
#define RT_MEM_KIND DDS_MEM_ROCM
typedef hipPointerAttribute_t rt_pointer_attr_t;
typedef hipMemcpyKind rt_memcpy_kind_t;
#define RT_ERROR_NOMEM hipErrorOutOfMemory
#define RT_NOGPU_CASES case hipErrorNotInitialized:
#define RT_DEVICE_EXTRA_CASES case hipMemoryTypeArray:
#define RT_MANAGED_EXTRA_CASES case hipMemoryTypeUnified:
/* ROCm < 6: a.memoryType and a.isManaged instead of a.type. */
#define RT_LEGACY_POINTER_ATTRS (HIP_VERSION_MAJOR < 6)
#define RT_HOST_ALLOC(ptr_p, bytes)                                            \
    hipHostMalloc((ptr_p), (bytes), hipHostMallocPortable)
#define RT_HOST_ALLOC_S "hipHostMalloc"
#define RT_HOST_FREE hipHostFree
#define RT_HOST_FREE_S "hipHostFree"
/* HIP records every call's status, hipErrorNotReady included. */
#define RT_NOT_READY_RECORDED 1

#else
#error "ddgpu_rt.c is the cuda/hip backend: build with DDSTORE_WITH_CUDA or DDSTORE_WITH_HIP (none builds use ddgpu_none.c)"
#endif

#endif
