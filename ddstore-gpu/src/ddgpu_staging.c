/* ddstore-gpu: the pinned staging pool (the public API over the runtime layer;
 * ddgpu_common.c has the map of these files). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddgpu_internal.h"

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
    int rc = ddgpu_gpu_ready(fn);
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
    int rc = ddgpu_gpu_ready(fn);
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
    int rc = to_device ? ddgpu_segs_check(fn, segs, nsegs, buf->cap, SIZE_MAX)
                       : ddgpu_segs_check(fn, segs, nsegs, SIZE_MAX, buf->cap);
    if (rc != 0 || !ddgpu_segs_nonempty(segs, nsegs))
        return rc;
    if (dev == NULL)
        return dds_error(-DDS_EINVAL, "%s: device pointer is NULL", fn);
    rc = ddgpu_gpu_ready(fn);
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    rc = ddgpu_guard_enter(fn, on, &g);
    if (rc != 0) {
        ddgpu_guard_exit(&g);
        return rc;
    }
    int d = g.device;
    if (buf->events[d] == NULL) {
        rc = ddgpu_rt_event_create(&buf->events[d]);
        if (rc != 0) {
            ddgpu_guard_exit(&g);
            return rc;
        }
    }
    size_t ncopies = 0, bytes = 0;
    if (to_device)
        rc = ddgpu_segs_copy_raw(DDS_COPY_H2D, dev, buf->host, segs, nsegs,
                                 g.stream, &ncopies, &bytes);
    else
        rc = ddgpu_segs_copy_raw(DDS_COPY_D2H, buf->host, dev, segs, nsegs,
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
    ddgpu_guard_exit(&g);
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
    int rc = ddgpu_gpu_ready("ddgpu_stage_buf_wait");
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

