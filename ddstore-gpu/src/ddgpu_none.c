/* ddstore-gpu: the none backend (no GPU support; always builds).
 *
 * Without the test emulation every runtime call reports "no GPU" (the
 * common layer stops before reaching most of them), and every pointer is
 * host memory: the store runs its host path.
 *
 * TEST HOOK (compiled only with DDSTORE_TEST_HOOKS: Bazel's default, off
 * in release builds and in the CMake/pip build unless DDSTORE_TEST_HOOKS=1;
 * without it ddgpu_test_host_emulation returns -DDS_ENOSYS):
 * ddgpu_test_host_emulation(1) turns this backend into a host
 * emulation of one CUDA-like device so that staging logic can be tested
 * without a GPU (see gpu.h).  Everything below the "emulator" line exists
 * only for that.  Semantics kept from the CUDA runtime:
 *   - copies and memsets are queued on their stream and run in order, only
 *     when the host waits (stream or event synchronise, or a copy that the
 *     runtime makes synchronous); ddgpu_event_query never runs anything;
 *   - H2D from pageable host memory snapshots the source at enqueue (the
 *     caller may reuse it at once); D2H into pageable memory returns after
 *     the copy ran (both as cudaMemcpyAsync with pageable memory);
 *   - a stream waiting on an event runs the event's stream up to it first;
 *   - freeing device or pinned memory waits for every stream (cudaFree and
 *     cudaFreeHost do too);
 *   - directions are checked against the emulated allocations.
 * One mutex guards the emulator; copies run under it (tests only).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddgpu_internal.h"

#ifdef DDSTORE_TEST_HOOKS
static int emu_on;   /* atomic */
#endif

const char *ddgpu_rt_name(void) { return "none"; }

dds_mem_kind_t ddgpu_rt_kind(void)
{
    return ddgpu_rt_emulated() ? DDS_MEM_CUDA : DDS_MEM_HOST;
}

#ifdef DDSTORE_TEST_HOOKS
int ddgpu_rt_emulated(void) { return __atomic_load_n(&emu_on, __ATOMIC_ACQUIRE); }
#else
int ddgpu_rt_emulated(void) { return 0; }
#endif

static const char none_reason[] =
    "none: ddstore-gpu was built without GPU support (the none backend; "
    "build with --config=cuda or --config=rocm)";

int ddgpu_rt_probe(ddgpu_info_t *info, char *detail, size_t cap)
{
    (void)info;
    size_t n = strlen(none_reason);
    if (cap > 0) {
        if (n >= cap)
            n = cap - 1;
        memcpy(detail, none_reason, n);
        detail[n] = '\0';
    }
    return -DDS_ENOGPU;
}

static int no_gpu(const char *what)
{
    return dds_error(-DDS_ENOGPU, "%s: %s", what, none_reason);
}

/* ======================================================================== */
/* emulator (test hook) */
#ifdef DDSTORE_TEST_HOOKS

enum { EMU_PINNED = 1, EMU_DEVICE = 2 };

typedef struct emu_alloc {
    unsigned char *base;
    size_t len;
    int kind;
    struct emu_alloc *next;
} emu_alloc_t;

enum { OP_COPY = 0, OP_SET = 1, OP_WAIT = 2 };

struct emu_stream;

typedef struct emu_op {
    int type;
    void *dst;
    const void *src;
    void *owned;              /* snapshot of a pageable source (freed after) */
    size_t n;
    int value;
    struct emu_stream *ws;    /* OP_WAIT: run ws up to wseq first */
    uint64_t wseq;
} emu_op_t;

typedef struct emu_stream {
    emu_op_t *ops;
    size_t nops, cap;
    uint64_t base;            /* ops executed before ops[0]                */
    uint64_t done;            /* ops executed in total                     */
    int destroyed;
    struct emu_stream *next;  /* every stream, freed when emulation ends   */
} emu_stream_t;

typedef struct emu_event {
    emu_stream_t *s;          /* NULL: never recorded                      */
    uint64_t seq;
    struct emu_event *next;
} emu_event_t;

static pthread_mutex_t emu_mu = PTHREAD_MUTEX_INITIALIZER;
static emu_alloc_t *emu_allocs;
static emu_stream_t emu_default_stream;
static emu_stream_t *emu_streams;
static emu_event_t *emu_events;

static emu_stream_t *S(void *stream)
{
    return stream ? (emu_stream_t *)stream : &emu_default_stream;
}

/* Under emu_mu. */
static emu_alloc_t *emu_find(const void *p, size_t n)
{
    const unsigned char *q = p;
    for (emu_alloc_t *a = emu_allocs; a; a = a->next)
        if (q >= a->base && q < a->base + a->len)
            return (n <= (size_t)(a->base + a->len - q)) ? a : NULL;
    return NULL;
}

static int emu_kind_of(const void *p)
{
    emu_alloc_t *a = emu_find(p, 1);
    return a ? a->kind : 0;
}

static void emu_drain(emu_stream_t *s, uint64_t upto)
{
    while (s->done < upto && s->done < s->base + s->nops) {
        emu_op_t *op = &s->ops[s->done - s->base];
        switch (op->type) {
        case OP_COPY:
            memmove(op->dst, op->owned ? op->owned : op->src, op->n);
            free(op->owned);
            op->owned = NULL;
            break;
        case OP_SET:
            memset(op->dst, op->value, op->n);
            break;
        case OP_WAIT:
            emu_drain(op->ws, op->wseq);
            break;
        }
        s->done++;
    }
    if (s->done == s->base + s->nops) {
        s->base = s->done;
        s->nops = 0;
    }
}

static void emu_drain_all(void)
{
    emu_drain(&emu_default_stream, UINT64_MAX);
    for (emu_stream_t *s = emu_streams; s; s = s->next)
        emu_drain(s, UINT64_MAX);
}

static int emu_push(emu_stream_t *s, const emu_op_t *op)
{
    if (s->nops == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        emu_op_t *ops = realloc(s->ops, cap * sizeof(*ops));
        if (ops == NULL)
            return dds_error(-DDS_ENOMEM, "emulated: out of memory (queue)");
        s->ops = ops;
        s->cap = cap;
    }
    s->ops[s->nops++] = *op;
    return 0;
}

int ddgpu_rt_test_host_emulation(int enable)
{
    pthread_mutex_lock(&emu_mu);
    if (enable) {
        __atomic_store_n(&emu_on, 1, __ATOMIC_RELEASE);
    } else if (ddgpu_rt_emulated()) {
        emu_drain_all();
        while (emu_streams) {
            emu_stream_t *s = emu_streams;
            emu_streams = s->next;
            free(s->ops);
            free(s);
        }
        free(emu_default_stream.ops);
        memset(&emu_default_stream, 0, sizeof(emu_default_stream));
        while (emu_events) {
            emu_event_t *e = emu_events;
            emu_events = e->next;
            free(e);
        }
        __atomic_store_n(&emu_on, 0, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&emu_mu);
    return 0;
}

#define EMU_REQUIRED(what)                                                     \
    do {                                                                       \
        if (!ddgpu_rt_emulated())                                              \
            return no_gpu(what);                                               \
    } while (0)

int ddgpu_rt_pointer_kind(const void *ptr, ddgpu_ptr_kind_t *kind_p,
                          int *device_p)
{
    *kind_p = DDGPU_PTR_HOST;
    *device_p = 0;
    if (!ddgpu_rt_emulated())
        return 0;
    pthread_mutex_lock(&emu_mu);
    int k = emu_kind_of(ptr);
    pthread_mutex_unlock(&emu_mu);
    if (k == EMU_DEVICE)
        *kind_p = DDGPU_PTR_DEVICE;
    else if (k == EMU_PINNED)
        *kind_p = DDGPU_PTR_HOST_PINNED;
    return 0;
}

int ddgpu_rt_get_device(int *device_p)
{
    EMU_REQUIRED("ddgpu get device");
    *device_p = 0;
    return 0;
}

int ddgpu_rt_set_device(int device)
{
    EMU_REQUIRED("ddgpu set device");
    if (device != 0)
        return dds_error(-DDS_EINVAL, "emulated: no device %d (one device)",
                         device);
    return 0;
}

static int emu_alloc(size_t bytes, int kind, void **ptr_p)
{
    void *p = NULL;
    emu_alloc_t *a = malloc(sizeof(*a));
    if (a == NULL || posix_memalign(&p, 4096, bytes) != 0) {
        free(a);
        return dds_error(-DDS_ENOMEM, "emulated: cannot allocate %zu bytes",
                         bytes);
    }
    a->base = p;
    a->len = bytes;
    a->kind = kind;
    pthread_mutex_lock(&emu_mu);
    a->next = emu_allocs;
    emu_allocs = a;
    pthread_mutex_unlock(&emu_mu);
    *ptr_p = p;
    return 0;
}

static int emu_free(void *ptr, int kind, const char *what)
{
    pthread_mutex_lock(&emu_mu);
    emu_alloc_t **pp = &emu_allocs;
    while (*pp && !((*pp)->base == ptr && (*pp)->kind == kind))
        pp = &(*pp)->next;
    emu_alloc_t *a = *pp;
    if (a == NULL) {
        pthread_mutex_unlock(&emu_mu);
        return dds_error(-DDS_EINVAL, "emulated: %s(%p): not an emulated %s "
                         "allocation", what, ptr,
                         kind == EMU_DEVICE ? "device" : "pinned");
    }
    emu_drain_all();   /* like cudaFree / cudaFreeHost */
    *pp = a->next;
    pthread_mutex_unlock(&emu_mu);
    free(a->base);
    free(a);
    return 0;
}

int ddgpu_rt_host_alloc(size_t bytes, void **ptr_p)
{
    EMU_REQUIRED("ddgpu_host_alloc");
    return emu_alloc(bytes, EMU_PINNED, ptr_p);
}

int ddgpu_rt_host_free(void *ptr)
{
    EMU_REQUIRED("ddgpu_host_free");
    return emu_free(ptr, EMU_PINNED, "host free");
}

int ddgpu_rt_device_alloc(size_t bytes, void **ptr_p)
{
    EMU_REQUIRED("ddgpu_device_alloc");
    return emu_alloc(bytes, EMU_DEVICE, ptr_p);
}

int ddgpu_rt_device_free(void *ptr)
{
    EMU_REQUIRED("ddgpu_device_free");
    return emu_free(ptr, EMU_DEVICE, "device free");
}

static const char *dir_name(dds_copy_dir_t dir)
{
    switch (dir) {
    case DDS_COPY_H2D: return "H2D";
    case DDS_COPY_D2H: return "D2H";
    case DDS_COPY_D2D: return "D2D";
    default: return "default";
    }
}

int ddgpu_rt_memcpy_async(dds_copy_dir_t dir, void *dst, const void *src,
                          size_t bytes, void *stream)
{
    EMU_REQUIRED("ddgpu copy");
    pthread_mutex_lock(&emu_mu);
    emu_alloc_t *da = emu_find(dst, bytes), *sa = emu_find(src, bytes);
    int dk = emu_kind_of(dst), sk = emu_kind_of(src);
    int want_dst_dev = dir == DDS_COPY_H2D || dir == DDS_COPY_D2D;
    int want_src_dev = dir == DDS_COPY_D2H || dir == DDS_COPY_D2D;
    const char *bad = NULL;
    if (dir != DDS_COPY_DEFAULT) {
        if (want_dst_dev && !(da && da->kind == EMU_DEVICE))
            bad = "destination is not (entirely) emulated device memory";
        else if (!want_dst_dev && dk == EMU_DEVICE)
            bad = "destination is emulated device memory";
        else if (want_src_dev && !(sa && sa->kind == EMU_DEVICE))
            bad = "source is not (entirely) emulated device memory";
        else if (!want_src_dev && sk == EMU_DEVICE)
            bad = "source is emulated device memory";
    }
    if (bad) {
        pthread_mutex_unlock(&emu_mu);
        return dds_error(-DDS_EINVAL,
                         "emulated: %s copy of %zu bytes from %p to %p: %s",
                         dir_name(dir), bytes, src, dst, bad);
    }
    emu_op_t op;
    memset(&op, 0, sizeof(op));
    op.type = OP_COPY;
    op.dst = dst;
    op.src = src;
    op.n = bytes;
    if (sk == 0) {              /* pageable source: snapshot now */
        op.owned = malloc(bytes);
        if (op.owned == NULL) {
            pthread_mutex_unlock(&emu_mu);
            return dds_error(-DDS_ENOMEM, "emulated: out of memory (copy)");
        }
        memcpy(op.owned, src, bytes);
    }
    emu_stream_t *s = S(stream);
    int rc = emu_push(s, &op);
    if (rc != 0)
        free(op.owned);
    else if (dk == 0 && sk == EMU_DEVICE)   /* D2H into pageable: sync */
        emu_drain(s, s->base + s->nops);
    pthread_mutex_unlock(&emu_mu);
    return rc;
}

int ddgpu_rt_memset_async(void *dst, int value, size_t bytes, void *stream)
{
    EMU_REQUIRED("ddgpu memset");
    pthread_mutex_lock(&emu_mu);
    emu_alloc_t *da = emu_find(dst, bytes);
    if (!(da && da->kind == EMU_DEVICE)) {
        pthread_mutex_unlock(&emu_mu);
        return dds_error(-DDS_EINVAL,
                         "emulated: memset of %zu bytes at %p: not (entirely) "
                         "emulated device memory", bytes, dst);
    }
    emu_op_t op;
    memset(&op, 0, sizeof(op));
    op.type = OP_SET;
    op.dst = dst;
    op.n = bytes;
    op.value = value;
    int rc = emu_push(S(stream), &op);
    pthread_mutex_unlock(&emu_mu);
    return rc;
}

int ddgpu_rt_stream_create(void **stream_p)
{
    EMU_REQUIRED("ddgpu_stream_create");
    emu_stream_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return dds_error(-DDS_ENOMEM, "emulated: out of memory (stream)");
    pthread_mutex_lock(&emu_mu);
    s->next = emu_streams;
    emu_streams = s;
    pthread_mutex_unlock(&emu_mu);
    *stream_p = s;
    return 0;
}

int ddgpu_rt_stream_destroy(void *stream)
{
    EMU_REQUIRED("ddgpu_stream_destroy");
    pthread_mutex_lock(&emu_mu);
    emu_stream_t *s = S(stream);
    emu_drain(s, UINT64_MAX);   /* queued work still completes */
    s->destroyed = 1;           /* freed when the emulation ends */
    pthread_mutex_unlock(&emu_mu);
    return 0;
}

int ddgpu_rt_stream_synchronize(void *stream)
{
    EMU_REQUIRED("ddgpu_stream_synchronize");
    pthread_mutex_lock(&emu_mu);
    emu_stream_t *s = S(stream);
    emu_drain(s, UINT64_MAX);
    pthread_mutex_unlock(&emu_mu);
    return 0;
}

int ddgpu_rt_event_create(void **event_p)
{
    EMU_REQUIRED("ddgpu_event_create");
    emu_event_t *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return dds_error(-DDS_ENOMEM, "emulated: out of memory (event)");
    pthread_mutex_lock(&emu_mu);
    e->next = emu_events;
    emu_events = e;
    pthread_mutex_unlock(&emu_mu);
    *event_p = e;
    return 0;
}

int ddgpu_rt_event_destroy(void *event)
{
    EMU_REQUIRED("ddgpu_event_destroy");
    pthread_mutex_lock(&emu_mu);
    emu_event_t **pp = &emu_events;
    while (*pp && *pp != event)
        pp = &(*pp)->next;
    if (*pp)
        *pp = ((emu_event_t *)event)->next;
    pthread_mutex_unlock(&emu_mu);
    free(event);
    return 0;
}

int ddgpu_rt_event_record(void *event, void *stream)
{
    EMU_REQUIRED("ddgpu_event_record");
    pthread_mutex_lock(&emu_mu);
    emu_event_t *e = event;
    e->s = S(stream);
    e->seq = e->s->base + e->s->nops;
    pthread_mutex_unlock(&emu_mu);
    return 0;
}

int ddgpu_rt_event_query(void *event, int *done_p)
{
    EMU_REQUIRED("ddgpu_event_query");
    pthread_mutex_lock(&emu_mu);
    emu_event_t *e = event;
    *done_p = e->s == NULL || e->s->done >= e->seq;
    pthread_mutex_unlock(&emu_mu);
    return 0;
}

int ddgpu_rt_event_synchronize(void *event)
{
    EMU_REQUIRED("ddgpu_event_synchronize");
    pthread_mutex_lock(&emu_mu);
    emu_event_t *e = event;
    if (e->s)
        emu_drain(e->s, e->seq);
    pthread_mutex_unlock(&emu_mu);
    return 0;
}

int ddgpu_rt_stream_wait_event(void *stream, void *event)
{
    EMU_REQUIRED("ddgpu_stream_wait_event");
    pthread_mutex_lock(&emu_mu);
    emu_event_t *e = event;
    int rc = 0;
    if (e->s) {
        emu_op_t op;
        memset(&op, 0, sizeof(op));
        op.type = OP_WAIT;
        op.ws = e->s;
        op.wseq = e->seq;
        rc = emu_push(S(stream), &op);
    }
    pthread_mutex_unlock(&emu_mu);
    return rc;
}

#else /* !DDSTORE_TEST_HOOKS: no emulator; every runtime call is "no GPU" */

int ddgpu_rt_test_host_emulation(int enable)
{
    (void)enable;
    return dds_error(-DDS_ENOSYS,
                     "ddgpu_test_host_emulation: this build has no test hooks "
                     "(Bazel: --//bazel/config:test_hooks=true, the default "
                     "outside --config=release; CMake: DDSTORE_TEST_HOOKS=1)");
}

int ddgpu_rt_pointer_kind(const void *ptr, ddgpu_ptr_kind_t *kind_p,
                          int *device_p)
{
    (void)ptr;
    *kind_p = DDGPU_PTR_HOST;
    *device_p = 0;
    return 0;
}

#define NO_GPU_STUB(decl, what)                                                \
    int decl { return no_gpu(what); }

NO_GPU_STUB(ddgpu_rt_get_device(int *device_p), "ddgpu get device")
NO_GPU_STUB(ddgpu_rt_set_device(int device), "ddgpu set device")
NO_GPU_STUB(ddgpu_rt_host_alloc(size_t bytes, void **ptr_p), "ddgpu_host_alloc")
NO_GPU_STUB(ddgpu_rt_host_free(void *ptr), "ddgpu_host_free")
NO_GPU_STUB(ddgpu_rt_device_alloc(size_t bytes, void **ptr_p),
            "ddgpu_device_alloc")
NO_GPU_STUB(ddgpu_rt_device_free(void *ptr), "ddgpu_device_free")
NO_GPU_STUB(ddgpu_rt_memcpy_async(dds_copy_dir_t dir, void *dst,
                                  const void *src, size_t bytes, void *stream),
            "ddgpu copy")
NO_GPU_STUB(ddgpu_rt_memset_async(void *dst, int value, size_t bytes,
                                  void *stream),
            "ddgpu memset")
NO_GPU_STUB(ddgpu_rt_stream_create(void **stream_p), "ddgpu_stream_create")
NO_GPU_STUB(ddgpu_rt_stream_destroy(void *stream), "ddgpu_stream_destroy")
NO_GPU_STUB(ddgpu_rt_stream_synchronize(void *stream),
            "ddgpu_stream_synchronize")
NO_GPU_STUB(ddgpu_rt_event_create(void **event_p), "ddgpu_event_create")
NO_GPU_STUB(ddgpu_rt_event_destroy(void *event), "ddgpu_event_destroy")
NO_GPU_STUB(ddgpu_rt_event_record(void *event, void *stream),
            "ddgpu_event_record")
NO_GPU_STUB(ddgpu_rt_event_query(void *event, int *done_p),
            "ddgpu_event_query")
NO_GPU_STUB(ddgpu_rt_event_synchronize(void *event), "ddgpu_event_synchronize")
NO_GPU_STUB(ddgpu_rt_stream_wait_event(void *stream, void *event),
            "ddgpu_stream_wait_event")

#endif /* DDSTORE_TEST_HOOKS */
