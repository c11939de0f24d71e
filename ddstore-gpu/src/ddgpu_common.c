/* ddstore-gpu: the public API over one backend's runtime layer.
 *
 * Probing (once per process), the no-GPU / forked-child checks, argument
 * validation, the current-device guard, segment merging, the staging pool,
 * the event pool and the memops table for the core store.  The runtime
 * calls themselves are in ddgpu_{cuda,hip,none}.c (ddgpu_internal.h).
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
static int gpu_ready(const char *fn)
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
    int rc = gpu_ready("ddgpu_available");
    if (rc != 0 && info_p)
        info_p->device_count = 0;
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Current-device guard: switch the calling thread to the device of `on`
 * for one call and back. */

typedef struct ddgpu_guard {
    int device;      /* current device inside the guard */
    int prev;
    int switched;
    void *stream;
} ddgpu_guard_t;

static int guard_device(const char *fn, int device, ddgpu_guard_t *g)
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

static int guard_enter(const char *fn, const dds_mem_t *on, ddgpu_guard_t *g)
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
        return guard_device(fn, on->device, g);
    }
    if (on != NULL)
        g->stream = on->stream;
    int rc = ddgpu_rt_get_device(&g->device);
    if (rc == 0 && (g->device < 0 || g->device >= DDGPU_MAX_DEVICES))
        rc = dds_error(-DDS_EINVAL, "%s: current device %d outside [0, %d)",
                       fn, g->device, DDGPU_MAX_DEVICES);
    return rc;
}

static void guard_exit(ddgpu_guard_t *g)
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
        int rc = gpu_ready("ddgpu_pointer_kind");   /* forked child */
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
    int rc = gpu_ready("ddgpu_host_alloc");
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
    int rc = gpu_ready("ddgpu_host_free");
    return rc != 0 ? rc : ddgpu_rt_host_free(ptr);
}

int ddgpu_device_alloc(int device, size_t bytes, void **ptr_p)
{
    if (ptr_p == NULL || bytes == 0)
        return dds_error(-DDS_EINVAL,
                         "ddgpu_device_alloc: bytes must be > 0 (got %zu) and "
                         "ptr_p not NULL", bytes);
    int rc = gpu_ready("ddgpu_device_alloc");
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    memset(&g, 0, sizeof(g));
    rc = guard_device("ddgpu_device_alloc", device, &g);
    if (rc != 0)
        return rc;
    void *p = NULL;
    rc = ddgpu_rt_device_alloc(bytes, &p);
    guard_exit(&g);
    if (rc != 0)
        return rc;
    *ptr_p = p;
    return 0;
}

int ddgpu_device_free(void *ptr)
{
    if (ptr == NULL)
        return 0;
    int rc = gpu_ready("ddgpu_device_free");
    return rc != 0 ? rc : ddgpu_rt_device_free(ptr);
}

/* ------------------------------------------------------------------------ */
/* Streams and events */

int ddgpu_stream_create(int device, void **stream_p)
{
    if (stream_p == NULL)
        return dds_error(-DDS_EINVAL, "ddgpu_stream_create: stream_p is NULL");
    int rc = gpu_ready("ddgpu_stream_create");
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    memset(&g, 0, sizeof(g));
    rc = guard_device("ddgpu_stream_create", device, &g);
    if (rc != 0)
        return rc;
    void *s = NULL;
    rc = ddgpu_rt_stream_create(&s);
    guard_exit(&g);
    if (rc != 0)
        return rc;
    *stream_p = s;
    return 0;
}

int ddgpu_stream_destroy(void *stream)
{
    if (stream == NULL)
        return 0;
    int rc = gpu_ready("ddgpu_stream_destroy");
    return rc != 0 ? rc : ddgpu_rt_stream_destroy(stream);
}

int ddgpu_stream_synchronize(const dds_mem_t *on)
{
    int rc = gpu_ready("ddgpu_stream_synchronize");
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    rc = guard_enter("ddgpu_stream_synchronize", on, &g);
    if (rc == 0)
        rc = ddgpu_rt_stream_synchronize(g.stream);
    guard_exit(&g);
    return rc;
}

int ddgpu_event_create(int device, void **event_p)
{
    if (event_p == NULL)
        return dds_error(-DDS_EINVAL, "ddgpu_event_create: event_p is NULL");
    int rc = gpu_ready("ddgpu_event_create");
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    memset(&g, 0, sizeof(g));
    rc = guard_device("ddgpu_event_create", device, &g);
    if (rc != 0)
        return rc;
    void *e = NULL;
    rc = ddgpu_rt_event_create(&e);
    guard_exit(&g);
    if (rc != 0)
        return rc;
    *event_p = e;
    return 0;
}

int ddgpu_event_destroy(void *event)
{
    if (event == NULL)
        return 0;
    int rc = gpu_ready("ddgpu_event_destroy");
    return rc != 0 ? rc : ddgpu_rt_event_destroy(event);
}

int ddgpu_event_record(void *event, const dds_mem_t *on)
{
    if (event == NULL)
        return dds_error(-DDS_EINVAL, "ddgpu_event_record: event is NULL");
    int rc = gpu_ready("ddgpu_event_record");
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    rc = guard_enter("ddgpu_event_record", on, &g);
    if (rc == 0)
        rc = ddgpu_rt_event_record(event, g.stream);
    guard_exit(&g);
    return rc;
}

int ddgpu_event_query(void *event, int *done_p)
{
    if (event == NULL || done_p == NULL)
        return dds_error(-DDS_EINVAL,
                         "ddgpu_event_query: event and done_p must not be "
                         "NULL");
    int rc = gpu_ready("ddgpu_event_query");
    return rc != 0 ? rc : ddgpu_rt_event_query(event, done_p);
}

int ddgpu_event_synchronize(void *event)
{
    if (event == NULL)
        return dds_error(-DDS_EINVAL, "ddgpu_event_synchronize: event is NULL");
    int rc = gpu_ready("ddgpu_event_synchronize");
    return rc != 0 ? rc : ddgpu_rt_event_synchronize(event);
}

int ddgpu_stream_wait_event(const dds_mem_t *on, void *event)
{
    if (event == NULL)
        return dds_error(-DDS_EINVAL, "ddgpu_stream_wait_event: event is NULL");
    int rc = gpu_ready("ddgpu_stream_wait_event");
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    rc = guard_enter("ddgpu_stream_wait_event", on, &g);
    if (rc == 0)
        rc = ddgpu_rt_stream_wait_event(g.stream, event);
    guard_exit(&g);
    return rc;
}

/* A process-wide pool of events per device, for ddgpu_stream_fence and the
 * memops table (record/release without creating an event per call).  The
 * pooled events live until the process ends (or the test emulation is
 * turned off). */
typedef struct ddgpu_pevent {
    void *event;
    int device;
    struct ddgpu_pevent *next;
} ddgpu_pevent_t;

static pthread_mutex_t evpool_mu = PTHREAD_MUTEX_INITIALIZER;
static ddgpu_pevent_t *evpool_free[DDGPU_MAX_DEVICES];

/* Inside a guard (current device g->device). */
static int evpool_get(const ddgpu_guard_t *g, ddgpu_pevent_t **pe_p)
{
    ddgpu_pevent_t *pe;
    pthread_mutex_lock(&evpool_mu);
    pe = evpool_free[g->device];
    if (pe)
        evpool_free[g->device] = pe->next;
    pthread_mutex_unlock(&evpool_mu);
    if (pe == NULL) {
        pe = calloc(1, sizeof(*pe));
        if (pe == NULL)
            return dds_error(-DDS_ENOMEM, "ddgpu: out of memory (event)");
        int rc = ddgpu_rt_event_create(&pe->event);
        if (rc != 0) {
            free(pe);
            return rc;
        }
        pe->device = g->device;
    }
    pe->next = NULL;
    *pe_p = pe;
    return 0;
}

static void evpool_put(ddgpu_pevent_t *pe)
{
    if (pe == NULL)
        return;
    pthread_mutex_lock(&evpool_mu);
    pe->next = evpool_free[pe->device];
    evpool_free[pe->device] = pe;
    pthread_mutex_unlock(&evpool_mu);
}

static void evpool_clear(void)
{
    pthread_mutex_lock(&evpool_mu);
    for (int d = 0; d < DDGPU_MAX_DEVICES; d++) {
        while (evpool_free[d]) {
            ddgpu_pevent_t *pe = evpool_free[d];
            evpool_free[d] = pe->next;
            (void)ddgpu_rt_event_destroy(pe->event);
            free(pe);
        }
    }
    pthread_mutex_unlock(&evpool_mu);
}

int ddgpu_stream_fence(const dds_mem_t *on)
{
    int rc = gpu_ready("ddgpu_stream_fence");
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    ddgpu_pevent_t *pe = NULL;
    rc = guard_enter("ddgpu_stream_fence", on, &g);
    if (rc == 0)
        rc = evpool_get(&g, &pe);
    if (rc == 0)
        rc = ddgpu_rt_event_record(pe->event, g.stream);
    guard_exit(&g);
    if (rc == 0)
        rc = ddgpu_rt_event_synchronize(pe->event);
    evpool_put(pe);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Copies */

static int check_dir(const char *fn, dds_copy_dir_t dir)
{
    if (dir < DDS_COPY_DEFAULT || dir > DDS_COPY_D2D)
        return dds_error(-DDS_EINVAL, "%s: bad copy direction %d", fn,
                         (int)dir);
    return 0;
}

int ddgpu_copy_async(dds_copy_dir_t dir, void *dst, const void *src,
                     size_t bytes, const dds_mem_t *on)
{
    int rc = check_dir("ddgpu_copy_async", dir);
    if (rc != 0 || bytes == 0)
        return rc;
    if (dst == NULL || src == NULL)
        return dds_error(-DDS_EINVAL,
                         "ddgpu_copy_async: NULL %s for %zu bytes",
                         dst == NULL ? "dst" : "src", bytes);
    rc = gpu_ready("ddgpu_copy_async");
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    rc = guard_enter("ddgpu_copy_async", on, &g);
    if (rc == 0)
        rc = ddgpu_rt_memcpy_async(dir, dst, src, bytes, g.stream);
    guard_exit(&g);
    return rc;
}

size_t ddgpu_segs_coalesce(dds_memseg_t *segs, size_t nsegs)
{
    size_t out = 0;
    for (size_t i = 0; i < nsegs; i++) {
        if (segs[i].len == 0)
            continue;
        if (out > 0) {
            dds_memseg_t *p = &segs[out - 1];
            if (p->src_offset + p->len == segs[i].src_offset &&
                p->dst_offset + p->len == segs[i].dst_offset) {
                p->len += segs[i].len;
                continue;
            }
        }
        segs[out++] = segs[i];
    }
    return out;
}

/* Every segment's offsets + len fit size_t; with `cap_src` / `cap_dst`
 * (SIZE_MAX = unknown) also inside those extents. */
static int check_segs(const char *fn, const dds_memseg_t *segs, size_t nsegs,
                      size_t cap_src, size_t cap_dst)
{
    for (size_t i = 0; i < nsegs; i++) {
        const dds_memseg_t *s = &segs[i];
        if (s->len > SIZE_MAX - s->src_offset ||
            s->len > SIZE_MAX - s->dst_offset)
            return dds_error(-DDS_ERANGE,
                             "%s: segment %zu (src %zu, dst %zu, len %zu) "
                             "overflows", fn, i, s->src_offset, s->dst_offset,
                             s->len);
        if (s->len > 0 && s->src_offset + s->len > cap_src)
            return dds_error(-DDS_ERANGE,
                             "%s: segment %zu reads [%zu, %zu) outside the "
                             "%zu-byte source buffer",
                             fn, i, s->src_offset, s->src_offset + s->len,
                             cap_src);
        if (s->len > 0 && s->dst_offset + s->len > cap_dst)
            return dds_error(-DDS_ERANGE,
                             "%s: segment %zu writes [%zu, %zu) outside the "
                             "%zu-byte destination buffer",
                             fn, i, s->dst_offset, s->dst_offset + s->len,
                             cap_dst);
    }
    return 0;
}

/* Issue the (merged) copies; inside a guard.  *ncopies_p = copies issued,
 * also on failure. */
static int copy_segs_raw(dds_copy_dir_t dir, void *dst, const void *src,
                         const dds_memseg_t *segs, size_t nsegs, void *stream,
                         size_t *ncopies_p, size_t *bytes_p)
{
    size_t ncopies = 0, bytes = 0;
    int rc = 0;
    size_t i = 0;
    while (i < nsegs) {
        if (segs[i].len == 0) {
            i++;
            continue;
        }
        size_t so = segs[i].src_offset, d_o = segs[i].dst_offset;
        size_t len = segs[i].len;
        size_t j = i + 1;
        for (; j < nsegs; j++) {
            if (segs[j].len == 0)
                continue;
            if (segs[j].src_offset != so + len ||
                segs[j].dst_offset != d_o + len)
                break;
            len += segs[j].len;
        }
        rc = ddgpu_rt_memcpy_async(dir, (unsigned char *)dst + d_o,
                                   (const unsigned char *)src + so, len,
                                   stream);
        if (rc != 0)
            break;
        ncopies++;
        bytes += len;
        i = j;
    }
    if (ncopies_p)
        *ncopies_p = ncopies;
    if (bytes_p)
        *bytes_p = bytes;
    return rc;
}

static int segs_nonempty(const dds_memseg_t *segs, size_t nsegs)
{
    for (size_t i = 0; i < nsegs; i++)
        if (segs[i].len > 0)
            return 1;
    return 0;
}

int ddgpu_copy_segments_async(dds_copy_dir_t dir, void *dst, const void *src,
                              const dds_memseg_t *segs, size_t nsegs,
                              const dds_mem_t *on, size_t *ncopies_p)
{
    static const char fn[] = "ddgpu_copy_segments_async";
    if (ncopies_p)
        *ncopies_p = 0;
    int rc = check_dir(fn, dir);
    if (rc != 0)
        return rc;
    if (nsegs > 0 && segs == NULL)
        return dds_error(-DDS_EINVAL, "%s: segs is NULL (nsegs %zu)", fn,
                         nsegs);
    rc = check_segs(fn, segs, nsegs, SIZE_MAX, SIZE_MAX);
    if (rc != 0 || !segs_nonempty(segs, nsegs))
        return rc;
    if (dst == NULL || src == NULL)
        return dds_error(-DDS_EINVAL, "%s: %s is NULL", fn,
                         dst == NULL ? "dst" : "src");
    rc = gpu_ready(fn);
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    rc = guard_enter(fn, on, &g);
    if (rc == 0)
        rc = copy_segs_raw(dir, dst, src, segs, nsegs, g.stream, ncopies_p,
                           NULL);
    guard_exit(&g);
    return rc;
}

int ddgpu_memset_async(void *dst, int value, size_t bytes, const dds_mem_t *on)
{
    if (bytes == 0)
        return 0;
    if (dst == NULL)
        return dds_error(-DDS_EINVAL, "ddgpu_memset_async: dst is NULL");
    int rc = gpu_ready("ddgpu_memset_async");
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    rc = guard_enter("ddgpu_memset_async", on, &g);
    if (rc == 0)
        rc = ddgpu_rt_memset_async(dst, value, bytes, g.stream);
    guard_exit(&g);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The staging pool */

struct ddgpu_stage_buf {
    struct ddgpu_staging *pool;
    unsigned char *host;
    size_t cap;
    int lent;
    uint64_t pending;                    /* devices with a recorded event    */
    uint64_t stamp;                      /* order of the last record         */
    void *events[DDGPU_MAX_DEVICES];     /* per device, created on first use */
    struct ddgpu_stage_buf *next;
};

struct ddgpu_staging {
    pthread_mutex_t mu;
    size_t max_bytes;
    size_t min_buf;
    ddgpu_stage_buf_t *bufs;
    size_t pinned;         /* bytes held or being allocated                 */
    size_t nbufs;
    size_t nlent;
    int warned_over;
    uint64_t stamps;       /* record order, for waiting on the oldest      */
    /* counters: updated with relaxed atomics (some outside the lock) */
    uint64_t acquires, allocs, frees, waits, copies, h2d_bytes, d2h_bytes;
};

static void stat_add(uint64_t *c, uint64_t v)
{
    __atomic_fetch_add(c, v, __ATOMIC_RELAXED);
}

int ddgpu_staging_create(const ddgpu_staging_params_t *params,
                         ddgpu_staging_t **staging_p)
{
    static const char fn[] = "ddgpu_staging_create";
    if (staging_p == NULL)
        return dds_error(-DDS_EINVAL, "%s: staging_p is NULL", fn);
    size_t max_bytes = DDGPU_STAGING_MAX_BYTES_DEFAULT;
    size_t min_buf = DDGPU_STAGING_MIN_BUF_BYTES_DEFAULT;
    if (params) {
        if (params->field_mask & ~(uint64_t)(DDGPU_STAGING_PARAM_MAX_BYTES |
                                             DDGPU_STAGING_PARAM_MIN_BUF_BYTES))
            return dds_error(-DDS_EINVAL, "%s: unknown field_mask bits 0x%llx",
                             fn, (unsigned long long)params->field_mask);
        if (params->field_mask & DDGPU_STAGING_PARAM_MAX_BYTES)
            max_bytes = params->max_bytes;
        if (params->field_mask & DDGPU_STAGING_PARAM_MIN_BUF_BYTES) {
            if (params->min_buf_bytes == 0 ||
                params->min_buf_bytes > ((size_t)1 << 40))
                return dds_error(-DDS_EINVAL,
                                 "%s: min_buf_bytes must be in [1, 2^40] "
                                 "(got %zu)", fn, params->min_buf_bytes);
            min_buf = params->min_buf_bytes;
        }
    }
    int rc = gpu_ready(fn);
    if (rc != 0)
        return rc;
    ddgpu_staging_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return dds_error(-DDS_ENOMEM, "%s: out of memory", fn);
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        free(s);
        return dds_error(-DDS_ENOMEM, "%s: pthread_mutex_init failed", fn);
    }
    s->max_bytes = max_bytes;
    s->min_buf = min_buf;
    *staging_p = s;
    return 0;
}

/* Outside the pool lock (the buffer is lent or unlinked). */
static int buf_wait(ddgpu_stage_buf_t *b)
{
    int rc = 0;
    for (int d = 0; d < DDGPU_MAX_DEVICES && b->pending; d++) {
        if (!(b->pending & ((uint64_t)1 << d)))
            continue;
        int r = ddgpu_rt_event_synchronize(b->events[d]);
        if (r != 0) {
            if (rc == 0)
                rc = r;
            continue;   /* keep it pending: the copy's state is unknown */
        }
        b->pending &= ~((uint64_t)1 << d);
    }
    return rc;
}

/* Under the pool lock: clear the pending bits whose events completed. */
static void buf_poll(ddgpu_stage_buf_t *b)
{
    for (int d = 0; d < DDGPU_MAX_DEVICES && b->pending; d++) {
        if (!(b->pending & ((uint64_t)1 << d)))
            continue;
        int done = 0;
        if (ddgpu_rt_event_query(b->events[d], &done) == 0 && done)
            b->pending &= ~((uint64_t)1 << d);
    }
}

/* Unlinked buffer: wait, release events and memory. */
static void buf_free(ddgpu_stage_buf_t *b)
{
    if (buf_wait(b) != 0) {
        DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_GPU,
                "staging: a copy from a %zu-byte buffer failed; leaking it",
                b->cap);
        return;
    }
    for (int d = 0; d < DDGPU_MAX_DEVICES; d++)
        if (b->events[d])
            (void)ddgpu_rt_event_destroy(b->events[d]);
    (void)ddgpu_rt_host_free(b->host);
    free(b);
}

void ddgpu_staging_destroy(ddgpu_staging_t *staging)
{
    if (staging == NULL)
        return;
    ddgpu_stage_buf_t *b = staging->bufs;
    while (b) {
        ddgpu_stage_buf_t *next = b->next;
        if (b->lent)
            DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_GPU,
                    "staging: destroyed with a %zu-byte buffer still lent; "
                    "leaking it", b->cap);
        else
            buf_free(b);
        b = next;
    }
    pthread_mutex_destroy(&staging->mu);
    free(staging);
}

static size_t round_buf(size_t bytes, size_t min_buf)
{
    size_t n = min_buf;
    while (n < bytes) {
        if (n > SIZE_MAX / 2)
            return bytes;
        n *= 2;
    }
    return n;
}

static void unlink_buf(ddgpu_staging_t *s, ddgpu_stage_buf_t *b)
{
    ddgpu_stage_buf_t **pp = &s->bufs;
    while (*pp && *pp != b)
        pp = &(*pp)->next;
    if (*pp)
        *pp = b->next;
    b->next = NULL;
    s->nbufs--;
    s->pinned -= b->cap;
}

int ddgpu_staging_acquire(ddgpu_staging_t *staging, size_t bytes,
                          ddgpu_stage_buf_t **buf_p)
{
    static const char fn[] = "ddgpu_staging_acquire";
    if (staging == NULL || buf_p == NULL || bytes == 0)
        return dds_error(-DDS_EINVAL,
                         "%s: staging and buf_p must not be NULL and bytes > 0 "
                         "(got %zu)", fn, bytes);
    int rc = gpu_ready(fn);
    if (rc != 0)
        return rc;
    ddgpu_staging_t *s = staging;
    size_t need = round_buf(bytes, s->min_buf);
    ddgpu_stage_buf_t *evict = NULL;   /* unlinked buffers to free */
    ddgpu_stage_buf_t *b = NULL;

    pthread_mutex_lock(&s->mu);
    ddgpu_stage_buf_t *best = NULL, *busy_fit = NULL;
    for (ddgpu_stage_buf_t *c = s->bufs; c; c = c->next) {
        if (c->lent)
            continue;
        if (c->cap < bytes)
            continue;
        if (c->pending)
            buf_poll(c);
        if (!c->pending) {
            if (best == NULL || c->cap < best->cap)
                best = c;
        } else if (busy_fit == NULL || c->stamp < busy_fit->stamp) {
            busy_fit = c;   /* the oldest pending copy finishes first */
        }
    }
    if (best) {                                /* 1. idle and finished     */
        b = best;
    } else if (s->pinned + need > s->max_bytes && busy_fit) {
        b = busy_fit;                          /* 2. over the limit: wait
                                                     for the oldest copy   */
        stat_add(&s->waits, 1);
    } else {
        /* 3. allocate; first evict idle buffers too small for this request
         * while over the limit (they may be waited for, outside the lock). */
        ddgpu_stage_buf_t *c = s->bufs;
        while (c && s->pinned + need > s->max_bytes) {
            ddgpu_stage_buf_t *next = c->next;
            if (!c->lent && c->cap < bytes) {
                unlink_buf(s, c);
                c->next = evict;
                evict = c;
            }
            c = next;
        }
        if (s->pinned + need > s->max_bytes && !s->warned_over) {
            s->warned_over = 1;
            DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_GPU,
                    "staging: %zu pinned bytes in %zu lent buffers plus %zu "
                    "requested exceed the pool limit of %zu bytes; allocating "
                    "anyway (logged once)", s->pinned, s->nlent, need,
                    s->max_bytes);
        }
        s->pinned += need;                     /* reserve                  */
        s->nbufs++;
    }
    if (b) {
        b->lent = 1;
        s->nlent++;
    }
    pthread_mutex_unlock(&s->mu);

    if (evict)
        DDS_LOG_ONCE(DDS_LOG_INFO, DDS_SUBSYS_GPU,
                     "staging: freeing smaller pinned buffers to stay within "
                     "the pool limit of %zu bytes (a larger limit avoids "
                     "this; freeing pinned memory can stall the device)",
                     s->max_bytes);
    while (evict) {
        ddgpu_stage_buf_t *next = evict->next;
        buf_free(evict);
        stat_add(&s->frees, 1);
        evict = next;
    }

    if (b) {
        rc = buf_wait(b);                      /* no-op unless case 2      */
        if (rc != 0) {
            (void)ddgpu_staging_release(s, b);
            return rc;
        }
        stat_add(&s->acquires, 1);
        *buf_p = b;
        return 0;
    }

    b = calloc(1, sizeof(*b));
    void *host = NULL;
    rc = b ? ddgpu_rt_host_alloc(need, &host)
           : dds_error(-DDS_ENOMEM, "%s: out of memory", fn);
    if (rc != 0) {
        free(b);
        pthread_mutex_lock(&s->mu);
        s->pinned -= need;
        s->nbufs--;
        pthread_mutex_unlock(&s->mu);
        return rc;
    }
    b->pool = s;
    b->host = host;
    b->cap = need;
    b->lent = 1;
    pthread_mutex_lock(&s->mu);
    b->next = s->bufs;
    s->bufs = b;
    s->nlent++;
    pthread_mutex_unlock(&s->mu);
    stat_add(&s->allocs, 1);
    stat_add(&s->acquires, 1);
    DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_GPU,
            "staging: pinned a %zu-byte buffer for %zu bytes", need, bytes);
    *buf_p = b;
    return 0;
}

int ddgpu_staging_release(ddgpu_staging_t *staging, ddgpu_stage_buf_t *buf)
{
    if (staging == NULL || buf == NULL || buf->pool != staging)
        return dds_error(-DDS_EINVAL,
                         "ddgpu_staging_release: buffer %p does not belong to "
                         "pool %p", (void *)buf, (void *)staging);
    pthread_mutex_lock(&staging->mu);
    int was_lent = buf->lent;
    if (was_lent) {
        buf->lent = 0;
        staging->nlent--;
    }
    pthread_mutex_unlock(&staging->mu);
    if (!was_lent)
        return dds_error(-DDS_EINVAL,
                         "ddgpu_staging_release: buffer %p is not lent",
                         (void *)buf);
    return 0;
}

void *ddgpu_stage_buf_host(const ddgpu_stage_buf_t *buf)
{
    return buf ? buf->host : NULL;
}

size_t ddgpu_stage_buf_bytes(const ddgpu_stage_buf_t *buf)
{
    return buf ? buf->cap : 0;
}

static int stage_copy(const char *fn, ddgpu_stage_buf_t *buf, int to_device,
                      void *dev, const dds_memseg_t *segs, size_t nsegs,
                      const dds_mem_t *on)
{
    if (buf == NULL || !buf->lent)
        return dds_error(-DDS_EINVAL, "%s: buffer %p is not lent", fn,
                         (void *)buf);
    if (nsegs > 0 && segs == NULL)
        return dds_error(-DDS_EINVAL, "%s: segs is NULL (nsegs %zu)", fn,
                         nsegs);
    int rc = to_device ? check_segs(fn, segs, nsegs, buf->cap, SIZE_MAX)
                       : check_segs(fn, segs, nsegs, SIZE_MAX, buf->cap);
    if (rc != 0 || !segs_nonempty(segs, nsegs))
        return rc;
    if (dev == NULL)
        return dds_error(-DDS_EINVAL, "%s: device pointer is NULL", fn);
    rc = gpu_ready(fn);
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    rc = guard_enter(fn, on, &g);
    if (rc != 0) {
        guard_exit(&g);
        return rc;
    }
    int d = g.device;
    if (buf->events[d] == NULL) {
        rc = ddgpu_rt_event_create(&buf->events[d]);
        if (rc != 0) {
            guard_exit(&g);
            return rc;
        }
    }
    size_t ncopies = 0, bytes = 0;
    if (to_device)
        rc = copy_segs_raw(DDS_COPY_H2D, dev, buf->host, segs, nsegs, g.stream,
                           &ncopies, &bytes);
    else
        rc = copy_segs_raw(DDS_COPY_D2H, buf->host, dev, segs, nsegs,
                           g.stream, &ncopies, &bytes);
    if (ncopies > 0) {
        /* Also after a failure: copies already queued read/write the
         * buffer, which must not be lent again before they finish. */
        int r = ddgpu_rt_event_record(buf->events[d], g.stream);
        if (r == 0) {
            buf->pending |= (uint64_t)1 << d;
            buf->stamp = __atomic_add_fetch(&buf->pool->stamps, 1,
                                            __ATOMIC_RELAXED);
        } else {
            if (rc == 0)
                rc = r;
            /* Could not record: wait for those copies here instead. */
            (void)ddgpu_rt_stream_synchronize(g.stream);
        }
    }
    guard_exit(&g);
    ddgpu_staging_t *s = buf->pool;
    stat_add(&s->copies, ncopies);
    stat_add(to_device ? &s->h2d_bytes : &s->d2h_bytes, bytes);
    return rc;
}

int ddgpu_stage_to_device(ddgpu_stage_buf_t *buf, void *dst,
                          const dds_memseg_t *segs, size_t nsegs,
                          const dds_mem_t *on)
{
    return stage_copy("ddgpu_stage_to_device", buf, 1, dst, segs, nsegs, on);
}

int ddgpu_stage_from_device(ddgpu_stage_buf_t *buf, const void *src,
                            const dds_memseg_t *segs, size_t nsegs,
                            const dds_mem_t *on)
{
    return stage_copy("ddgpu_stage_from_device", buf, 0, (void *)src, segs,
                      nsegs, on);
}

int ddgpu_stage_buf_wait(ddgpu_stage_buf_t *buf)
{
    if (buf == NULL || !buf->lent)
        return dds_error(-DDS_EINVAL,
                         "ddgpu_stage_buf_wait: buffer %p is not lent",
                         (void *)buf);
    if (!buf->pending)
        return 0;
    int rc = gpu_ready("ddgpu_stage_buf_wait");
    return rc != 0 ? rc : buf_wait(buf);
}

int ddgpu_staging_stats(ddgpu_staging_t *staging,
                        ddgpu_staging_stats_t *stats_p)
{
    if (staging == NULL || stats_p == NULL)
        return dds_error(-DDS_EINVAL,
                         "ddgpu_staging_stats: staging and stats_p must not "
                         "be NULL");
    ddgpu_staging_t *s = staging;
    memset(stats_p, 0, sizeof(*stats_p));
    stats_p->acquires = __atomic_load_n(&s->acquires, __ATOMIC_RELAXED);
    stats_p->allocs = __atomic_load_n(&s->allocs, __ATOMIC_RELAXED);
    stats_p->frees = __atomic_load_n(&s->frees, __ATOMIC_RELAXED);
    stats_p->waits = __atomic_load_n(&s->waits, __ATOMIC_RELAXED);
    stats_p->copies = __atomic_load_n(&s->copies, __ATOMIC_RELAXED);
    stats_p->h2d_bytes = __atomic_load_n(&s->h2d_bytes, __ATOMIC_RELAXED);
    stats_p->d2h_bytes = __atomic_load_n(&s->d2h_bytes, __ATOMIC_RELAXED);
    pthread_mutex_lock(&s->mu);
    /* pinned counts reservations in flight; report held buffers only */
    size_t held = 0;
    for (ddgpu_stage_buf_t *b = s->bufs; b; b = b->next)
        held += b->cap;
    stats_p->pinned_bytes = held;
    stats_p->buffers = 0;
    for (ddgpu_stage_buf_t *b = s->bufs; b; b = b->next)
        stats_p->buffers++;
    stats_p->lent = s->nlent;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

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
    *host_p = b->host;
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
    if (dir == DDS_COPY_H2D && src == b->host)
        return ddgpu_stage_to_device(b, dst, segs, nsegs, on);
    if (dir == DDS_COPY_D2H && dst == b->host)
        return ddgpu_stage_from_device(b, src, segs, nsegs, on);
    return dds_error(-DDS_EINVAL,
                     "memops.copy_async: with a staging buffer the copy must "
                     "be H2D from it or D2H into it (dir %d, src %p, dst %p, "
                     "buffer %p)", (int)dir, src, dst, (void *)b->host);
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
    int rc = gpu_ready(fn);
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    ddgpu_pevent_t *pe = NULL;
    rc = guard_enter(fn, on, &g);
    if (rc == 0)
        rc = evpool_get(&g, &pe);
    if (rc == 0)
        rc = ddgpu_rt_event_record(pe->event, g.stream);
    guard_exit(&g);
    if (rc != 0) {
        evpool_put(pe);
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
    evpool_put(event);
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

/* ------------------------------------------------------------------------ */

int ddgpu_test_host_emulation(int enable)
{
    if (!enable && ddgpu_rt_emulated())
        evpool_clear();   /* pooled emulated events die with the emulator */
    return ddgpu_rt_test_host_emulation(enable);
}
