/* ddstore-gpu: the public API over one backend's runtime layer, by concern:
 *
 *   ddgpu_common.c   probing (once per process), the no-GPU / forked-child
 *                    checks, the current-device guard, pointers and memory
 *   ddgpu_stream.c   streams, events and the event pool
 *   ddgpu_copy.c     copies, segment checks and merging
 *   ddgpu_staging.c  the pinned staging pool
 *   ddgpu_memsys.c   the memops table for the core store
 *
 * The runtime calls themselves are in ddgpu_rt.c / ddgpu_none.c
 * (ddgpu_internal.h, which also declares what these files share).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddgpu_internal.h"

/* ------------------------------------------------------------------------ */
/* Library and runtime */

const char *ddgpu_version(void) { return DDGPU_VERSION; }

const char *ddgpu_backend_name(void) { return ddgpu_rt_name(); }

dds_mem_kind_t ddgpu_backend_kind(void) { return ddgpu_rt_kind(); }

const char *ddgpu_ptr_kind_name(ddgpu_ptr_kind_t kind)
{
    switch (kind) {
    case DDGPU_PTR_HOST: return "host";
    case DDGPU_PTR_HOST_PINNED: return "pinned";
    case DDGPU_PTR_DEVICE: return "device";
    case DDGPU_PTR_MANAGED: return "managed";
    }
    return "?";
}

static pthread_once_t probe_once_ctl = PTHREAD_ONCE_INIT;
static int probe_rc;
static char probe_detail[512];
static ddgpu_info_t probe_info;
static int forked_child;   /* set in a child forked after a successful probe */

static void on_fork_child(void)
{
    if (probe_rc == 0)
        __atomic_store_n(&forked_child, 1, __ATOMIC_RELAXED);
}

static void probe_once(void)
{
    memset(&probe_info, 0, sizeof(probe_info));
    probe_detail[0] = '\0';
    probe_rc = ddgpu_rt_probe(&probe_info, probe_detail, sizeof(probe_detail));
    probe_info.backend = ddgpu_rt_name();
    probe_info.kind = ddgpu_rt_kind();
    if (probe_rc == 0 && probe_info.device_count > DDGPU_MAX_DEVICES) {
        DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_GPU,
                "%s: %d devices visible, only the first %d are used",
                ddgpu_rt_name(), probe_info.device_count, DDGPU_MAX_DEVICES);
        probe_info.device_count = DDGPU_MAX_DEVICES;
    }
    if (probe_rc != 0) {
        probe_info.device_count = 0;
        if (probe_detail[0] == '\0')
            strcpy(probe_detail, "no GPU");
        DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_GPU, "no usable GPU: %s",
                probe_detail);
    } else {
        DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_GPU,
                "%s: %d device(s), runtime %d, driver %d", ddgpu_rt_name(),
                probe_info.device_count, probe_info.runtime_version,
                probe_info.driver_version);
    }
    (void)pthread_atfork(NULL, NULL, on_fork_child);
}

static void probe(void) { (void)pthread_once(&probe_once_ctl, probe_once); }

static int device_count(void)
{
    if (ddgpu_rt_emulated())
        return 1;
    probe();
    return probe_rc == 0 ? probe_info.device_count : 0;
}

/* 0 when GPU calls may be made now, else -DDS_ENOGPU naming `fn`. */
int ddgpu_gpu_ready(const char *fn)
{
    if (ddgpu_rt_emulated())
        return 0;
    probe();
    if (probe_rc != 0)
        return dds_error(-DDS_ENOGPU, "%s: no usable GPU: %s", fn,
                         probe_detail);
    if (__atomic_load_n(&forked_child, __ATOMIC_RELAXED))
        return dds_error(-DDS_ENOGPU,
                         "%s: this process was forked after the %s runtime "
                         "was initialised; GPU calls are disabled in a "
                         "forked child (use threads for GPU destinations)",
                         fn, ddgpu_rt_name());
    return 0;
}

int ddgpu_available(ddgpu_info_t *info_p)
{
    if (ddgpu_rt_emulated()) {
        if (info_p) {
            memset(info_p, 0, sizeof(*info_p));
            info_p->backend = ddgpu_rt_name();
            info_p->kind = ddgpu_rt_kind();
            info_p->device_count = 1;
            info_p->emulated = 1;
        }
        return 0;
    }
    probe();
    if (info_p)
        *info_p = probe_info;
    int rc = ddgpu_gpu_ready("ddgpu_available");
    if (rc != 0 && info_p)
        info_p->device_count = 0;
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Current-device guard: switch the calling thread to the device of `on`
 * for one call and back. */

int ddgpu_guard_device(const char *fn, int device, ddgpu_guard_t *g)
{
    int n = device_count();
    if (device < 0 || device >= n)
        return dds_error(-DDS_EINVAL, "%s: device %d outside [0, %d)", fn,
                         device, n);
    int cur = 0;
    int rc = ddgpu_rt_get_device(&cur);
    if (rc != 0)
        return rc;
    g->device = cur;
    if (cur != device) {
        rc = ddgpu_rt_set_device(device);
        if (rc != 0)
            return rc;
        g->prev = cur;
        g->switched = 1;
        g->device = device;
    }
    return 0;
}

int ddgpu_guard_enter(const char *fn, const dds_mem_t *on, ddgpu_guard_t *g)
{
    memset(g, 0, sizeof(*g));
    if (on != NULL && on->kind != DDS_MEM_HOST) {
        if (on->kind != ddgpu_rt_kind())
            return dds_error(-DDS_EINVAL,
                             "%s: memory kind %d is not this build's device "
                             "kind %d (backend %s)",
                             fn, (int)on->kind, (int)ddgpu_rt_kind(),
                             ddgpu_rt_name());
        g->stream = on->stream;
        return ddgpu_guard_device(fn, on->device, g);
    }
    if (on != NULL)
        g->stream = on->stream;
    int rc = ddgpu_rt_get_device(&g->device);
    if (rc == 0 && (g->device < 0 || g->device >= DDGPU_MAX_DEVICES))
        rc = dds_error(-DDS_EINVAL, "%s: current device %d outside [0, %d)",
                       fn, g->device, DDGPU_MAX_DEVICES);
    return rc;
}

void ddgpu_guard_exit(ddgpu_guard_t *g)
{
    if (g->switched && ddgpu_rt_set_device(g->prev) != 0)
        DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_GPU,
                "could not restore the current device to %d", g->prev);
    g->switched = 0;
}

/* ------------------------------------------------------------------------ */
/* Pointers and memory */

int ddgpu_pointer_kind(const void *ptr, ddgpu_ptr_kind_t *kind_p,
                       dds_mem_t *mem_p)
{
    if (ptr == NULL)
        return dds_error(-DDS_EINVAL, "ddgpu_pointer_kind: ptr is NULL");
    ddgpu_ptr_kind_t kind = DDGPU_PTR_HOST;
    int device = 0;
    if (ddgpu_rt_emulated() || (probe(), probe_rc == 0)) {
        int rc = ddgpu_gpu_ready("ddgpu_pointer_kind");   /* forked child */
        if (rc != 0)
            return rc;
        rc = ddgpu_rt_pointer_kind(ptr, &kind, &device);
        if (rc != 0)
            return rc;
    }
    if (kind_p)
        *kind_p = kind;
    if (mem_p) {
        int dev = kind == DDGPU_PTR_DEVICE || kind == DDGPU_PTR_MANAGED;
        mem_p->kind = dev ? ddgpu_rt_kind() : DDS_MEM_HOST;
        mem_p->device = dev ? device : 0;
        mem_p->stream = NULL;
    }
    return 0;
}

int ddgpu_host_alloc(size_t bytes, void **ptr_p)
{
    if (ptr_p == NULL || bytes == 0)
        return dds_error(-DDS_EINVAL,
                         "ddgpu_host_alloc: bytes must be > 0 (got %zu) and "
                         "ptr_p not NULL", bytes);
    int rc = ddgpu_gpu_ready("ddgpu_host_alloc");
    if (rc != 0)
        return rc;
    void *p = NULL;
    rc = ddgpu_rt_host_alloc(bytes, &p);
    if (rc != 0)
        return rc;
    *ptr_p = p;
    return 0;
}

int ddgpu_host_free(void *ptr)
{
    if (ptr == NULL)
        return 0;
    int rc = ddgpu_gpu_ready("ddgpu_host_free");
    return rc != 0 ? rc : ddgpu_rt_host_free(ptr);
}

int ddgpu_device_alloc(int device, size_t bytes, void **ptr_p)
{
    if (ptr_p == NULL || bytes == 0)
        return dds_error(-DDS_EINVAL,
                         "ddgpu_device_alloc: bytes must be > 0 (got %zu) and "
                         "ptr_p not NULL", bytes);
    int rc = ddgpu_gpu_ready("ddgpu_device_alloc");
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    memset(&g, 0, sizeof(g));
    rc = ddgpu_guard_device("ddgpu_device_alloc", device, &g);
    if (rc != 0)
        return rc;
    void *p = NULL;
    rc = ddgpu_rt_device_alloc(bytes, &p);
    ddgpu_guard_exit(&g);
    if (rc != 0)
        return rc;
    *ptr_p = p;
    return 0;
}

int ddgpu_device_free(void *ptr)
{
    if (ptr == NULL)
        return 0;
    int rc = ddgpu_gpu_ready("ddgpu_device_free");
    return rc != 0 ? rc : ddgpu_rt_device_free(ptr);
}

