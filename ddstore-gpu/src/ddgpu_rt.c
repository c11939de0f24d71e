/* ddstore-gpu: the CUDA and HIP runtime backend (plain C, runtime API only).
 *
 * One source for both runtimes: ddgpu_rt_shim.h maps RT(Name) onto
 * cudaName or hipName by DDSTORE_WITH_CUDA / DDSTORE_WITH_HIP.
 * Build: gcc -std=c11 -DDDSTORE_WITH_CUDA -I/usr/local/cuda/include ...
 * -lcudart, or gcc -std=c11 -DDDSTORE_WITH_HIP -D__HIP_PLATFORM_AMD__
 * [-I<rocm>/include] ... -lamdhip64 (Debian: headers in /usr/include/hip).
 * All runtime errors are translated in rt_error(); nothing here validates
 * arguments or checks for a GPU (ddgpu_common.c does).
 */
#include <stdio.h>
#include <string.h>

#include "ddgpu_internal.h"
#include "ddgpu_rt_shim.h"

const char *ddgpu_rt_name(void) { return RT_NAME; }

dds_mem_kind_t ddgpu_rt_kind(void) { return RT_MEM_KIND; }

int ddgpu_rt_emulated(void) { return 0; }

int ddgpu_rt_test_host_emulation(int enable)
{
    (void)enable;
    return dds_error(-DDS_ENOSYS,
                     "ddgpu_test_host_emulation: only the none build has the "
                     "host emulation (this is the " RT_NAME " build)");
}

static int rt_code(RT(Error_t) e)
{
    switch (e) {
    case RT(Success):
        return 0;
    case RT_ERROR_NOMEM:
        return -DDS_ENOMEM;
    case RT(ErrorInvalidValue):
    case RT(ErrorInvalidDevice):
    case RT(ErrorInvalidDevicePointer):
    case RT(ErrorInvalidResourceHandle):
    case RT(ErrorInvalidMemcpyDirection):
        return -DDS_EINVAL;
    case RT(ErrorInsufficientDriver):
    case RT(ErrorNoDevice):
    RT_NOGPU_CASES
        return -DDS_ENOGPU;
    default:
        return -DDS_EIO;
    }
}

/* The one translation of runtime errors: code, detail, and the runtime's
 * (non-sticky) last error cleared so it does not surface in the caller's
 * next GetLastError / kernel launch check. */
static int rt_error(RT(Error_t) e, const char *what)
{
    (void)RT(GetLastError)();
    return dds_error(rt_code(e), RT_NAME ": %s: %s (%s)", what,
                     RT(GetErrorName)(e), RT(GetErrorString)(e));
}

#define RT_CALL(call, what)                                                    \
    do {                                                                       \
        RT(Error_t) e_ = (call);                                               \
        if (e_ != RT(Success))                                                 \
            return rt_error(e_, (what));                                       \
    } while (0)

int ddgpu_rt_probe(ddgpu_info_t *info, char *detail, size_t cap)
{
    int rv = 0, dv = 0, n = 0;
    if (RT(RuntimeGetVersion)(&rv) == RT(Success))
        info->runtime_version = rv;
    if (RT(DriverGetVersion)(&dv) == RT(Success))
        info->driver_version = dv;
    RT(Error_t) e = RT(GetDeviceCount)(&n);
    if (e != RT(Success)) {
        (void)RT(GetLastError)();
        snprintf(detail, cap, RT_NAME ": " RT_S(GetDeviceCount) ": %s (%s)",
                 RT(GetErrorName)(e), RT(GetErrorString)(e));
        return -DDS_ENOGPU;
    }
    if (n <= 0) {
        snprintf(detail, cap, RT_NAME ": " RT_S(GetDeviceCount) ": 0 devices");
        return -DDS_ENOGPU;
    }
    info->device_count = n;
    return 0;
}

int ddgpu_rt_pointer_kind(const void *ptr, ddgpu_ptr_kind_t *kind_p,
                          int *device_p)
{
    rt_pointer_attr_t a;
    memset(&a, 0, sizeof(a));
    RT(Error_t) e = RT(PointerGetAttributes)(&a, ptr);
    if (e == RT(ErrorInvalidValue)) {
        /* Before CUDA 11 and ROCm 6, unregistered host memory was an
         * error. */
        (void)RT(GetLastError)();
        *kind_p = DDGPU_PTR_HOST;
        *device_p = 0;
        return 0;
    }
    if (e != RT(Success))
        return rt_error(e, RT_S(PointerGetAttributes));
#if RT_LEGACY_POINTER_ATTRS
    if (a.isManaged) {
        *kind_p = DDGPU_PTR_MANAGED;
        *device_p = a.device < 0 ? 0 : a.device;
        return 0;
    }
    switch (a.memoryType) {
    case RT(MemoryTypeHost):
        *kind_p = DDGPU_PTR_HOST_PINNED;
        *device_p = 0;
        break;
    case RT(MemoryTypeDevice):
    RT_DEVICE_EXTRA_CASES
        *kind_p = DDGPU_PTR_DEVICE;
        *device_p = a.device;
        break;
    RT_MANAGED_EXTRA_CASES
        *kind_p = DDGPU_PTR_MANAGED;
        *device_p = a.device < 0 ? 0 : a.device;
        break;
    default:
        *kind_p = DDGPU_PTR_HOST;
        *device_p = 0;
        break;
    }
#else
    switch (a.type) {
    case RT(MemoryTypeHost):
        *kind_p = DDGPU_PTR_HOST_PINNED;
        *device_p = 0;
        break;
    case RT(MemoryTypeDevice):
    RT_DEVICE_EXTRA_CASES
        *kind_p = DDGPU_PTR_DEVICE;
        *device_p = a.device;
        break;
    case RT(MemoryTypeManaged):
    RT_MANAGED_EXTRA_CASES
        *kind_p = DDGPU_PTR_MANAGED;
        *device_p = a.device < 0 ? 0 : a.device;
        break;
    case RT(MemoryTypeUnregistered):
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
    RT_CALL(RT(GetDevice)(device_p), RT_S(GetDevice));
    return 0;
}

int ddgpu_rt_set_device(int device)
{
    RT(Error_t) e = RT(SetDevice)(device);
    if (e != RT(Success)) {
        char what[48];
        snprintf(what, sizeof(what), RT_S(SetDevice) "(%d)", device);
        return rt_error(e, what);
    }
    return 0;
}

int ddgpu_rt_host_alloc(size_t bytes, void **ptr_p)
{
    RT(Error_t) e = RT_HOST_ALLOC(ptr_p, bytes);
    if (e != RT(Success)) {
        char what[64];
        snprintf(what, sizeof(what), RT_HOST_ALLOC_S "(%zu bytes)", bytes);
        return rt_error(e, what);
    }
    return 0;
}

int ddgpu_rt_host_free(void *ptr)
{
    RT_CALL(RT_HOST_FREE(ptr), RT_HOST_FREE_S);
    return 0;
}

int ddgpu_rt_device_alloc(size_t bytes, void **ptr_p)
{
    RT(Error_t) e = RT(Malloc)(ptr_p, bytes);
    if (e != RT(Success)) {
        char what[64];
        snprintf(what, sizeof(what), RT_S(Malloc) "(%zu bytes)", bytes);
        return rt_error(e, what);
    }
    return 0;
}

int ddgpu_rt_device_free(void *ptr)
{
    RT_CALL(RT(Free)(ptr), RT_S(Free));
    return 0;
}

static rt_memcpy_kind_t rt_kind(dds_copy_dir_t dir)
{
    switch (dir) {
    case DDS_COPY_H2D: return RT(MemcpyHostToDevice);
    case DDS_COPY_D2H: return RT(MemcpyDeviceToHost);
    case DDS_COPY_D2D: return RT(MemcpyDeviceToDevice);
    case DDS_COPY_DEFAULT:
    default: return RT(MemcpyDefault);
    }
}

int ddgpu_rt_memcpy_async(dds_copy_dir_t dir, void *dst, const void *src,
                          size_t bytes, void *stream)
{
    RT(Error_t) e = RT(MemcpyAsync)(dst, src, bytes, rt_kind(dir),
                                    (RT(Stream_t))stream);
    if (e != RT(Success)) {
        char what[128];
        snprintf(what, sizeof(what), RT_S(MemcpyAsync) "(dst=%p, src=%p, %zu "
                 "bytes, kind %d)", dst, src, bytes, (int)rt_kind(dir));
        return rt_error(e, what);
    }
    return 0;
}

int ddgpu_rt_memset_async(void *dst, int value, size_t bytes, void *stream)
{
    RT_CALL(RT(MemsetAsync)(dst, value, bytes, (RT(Stream_t))stream),
            RT_S(MemsetAsync));
    return 0;
}

int ddgpu_rt_stream_create(void **stream_p)
{
    RT(Stream_t) s = NULL;
    RT_CALL(RT(StreamCreateWithFlags)(&s, RT(StreamNonBlocking)),
            RT_S(StreamCreateWithFlags));
    *stream_p = (void *)s;
    return 0;
}

int ddgpu_rt_stream_destroy(void *stream)
{
    RT_CALL(RT(StreamDestroy)((RT(Stream_t))stream), RT_S(StreamDestroy));
    return 0;
}

int ddgpu_rt_stream_synchronize(void *stream)
{
    RT_CALL(RT(StreamSynchronize)((RT(Stream_t))stream),
            RT_S(StreamSynchronize));
    return 0;
}

int ddgpu_rt_event_create(void **event_p)
{
    RT(Event_t) ev = NULL;
    RT_CALL(RT(EventCreateWithFlags)(&ev, RT(EventDisableTiming)),
            RT_S(EventCreateWithFlags));
    *event_p = (void *)ev;
    return 0;
}

int ddgpu_rt_event_destroy(void *event)
{
    RT_CALL(RT(EventDestroy)((RT(Event_t))event), RT_S(EventDestroy));
    return 0;
}

int ddgpu_rt_event_record(void *event, void *stream)
{
    RT_CALL(RT(EventRecord)((RT(Event_t))event, (RT(Stream_t))stream),
            RT_S(EventRecord));
    return 0;
}

int ddgpu_rt_event_query(void *event, int *done_p)
{
    RT(Error_t) e = RT(EventQuery)((RT(Event_t))event);
    if (e == RT(Success)) {
        *done_p = 1;
        return 0;
    }
    if (e == RT(ErrorNotReady)) {   /* not an error */
#if RT_NOT_READY_RECORDED
        (void)RT(GetLastError)();
#endif
        *done_p = 0;
        return 0;
    }
    return rt_error(e, RT_S(EventQuery));
}

int ddgpu_rt_event_synchronize(void *event)
{
    RT_CALL(RT(EventSynchronize)((RT(Event_t))event), RT_S(EventSynchronize));
    return 0;
}

int ddgpu_rt_stream_wait_event(void *stream, void *event)
{
    RT_CALL(RT(StreamWaitEvent)((RT(Stream_t))stream, (RT(Event_t))event, 0),
            RT_S(StreamWaitEvent));
    return 0;
}
