/* ddstore-gpu: streams, events and the event pool (the public API over the runtime layer;
 * ddgpu_common.c has the map of these files). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddgpu_internal.h"

/* ------------------------------------------------------------------------ */
/* Streams and events */

int ddgpu_stream_create(int device, void **stream_p)
{
    if (stream_p == NULL)
        return dds_error(-DDS_EINVAL, "ddgpu_stream_create: stream_p is NULL");
    int rc = ddgpu_gpu_ready("ddgpu_stream_create");
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    memset(&g, 0, sizeof(g));
    rc = ddgpu_guard_device("ddgpu_stream_create", device, &g);
    if (rc != 0)
        return rc;
    void *s = NULL;
    rc = ddgpu_rt_stream_create(&s);
    ddgpu_guard_exit(&g);
    if (rc != 0)
        return rc;
    *stream_p = s;
    return 0;
}

int ddgpu_stream_destroy(void *stream)
{
    if (stream == NULL)
        return 0;
    int rc = ddgpu_gpu_ready("ddgpu_stream_destroy");
    return rc != 0 ? rc : ddgpu_rt_stream_destroy(stream);
}

int ddgpu_stream_synchronize(const dds_mem_t *on)
{
    int rc = ddgpu_gpu_ready("ddgpu_stream_synchronize");
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    rc = ddgpu_guard_enter("ddgpu_stream_synchronize", on, &g);
    if (rc == 0)
        rc = ddgpu_rt_stream_synchronize(g.stream);
    ddgpu_guard_exit(&g);
    return rc;
}

int ddgpu_event_create(int device, void **event_p)
{
    if (event_p == NULL)
        return dds_error(-DDS_EINVAL, "ddgpu_event_create: event_p is NULL");
    int rc = ddgpu_gpu_ready("ddgpu_event_create");
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    memset(&g, 0, sizeof(g));
    rc = ddgpu_guard_device("ddgpu_event_create", device, &g);
    if (rc != 0)
        return rc;
    void *e = NULL;
    rc = ddgpu_rt_event_create(&e);
    ddgpu_guard_exit(&g);
    if (rc != 0)
        return rc;
    *event_p = e;
    return 0;
}

int ddgpu_event_destroy(void *event)
{
    if (event == NULL)
        return 0;
    int rc = ddgpu_gpu_ready("ddgpu_event_destroy");
    return rc != 0 ? rc : ddgpu_rt_event_destroy(event);
}

int ddgpu_event_record(void *event, const dds_mem_t *on)
{
    if (event == NULL)
        return dds_error(-DDS_EINVAL, "ddgpu_event_record: event is NULL");
    int rc = ddgpu_gpu_ready("ddgpu_event_record");
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    rc = ddgpu_guard_enter("ddgpu_event_record", on, &g);
    if (rc == 0)
        rc = ddgpu_rt_event_record(event, g.stream);
    ddgpu_guard_exit(&g);
    return rc;
}

int ddgpu_event_query(void *event, int *done_p)
{
    if (event == NULL || done_p == NULL)
        return dds_error(-DDS_EINVAL,
                         "ddgpu_event_query: event and done_p must not be "
                         "NULL");
    int rc = ddgpu_gpu_ready("ddgpu_event_query");
    return rc != 0 ? rc : ddgpu_rt_event_query(event, done_p);
}

int ddgpu_event_synchronize(void *event)
{
    if (event == NULL)
        return dds_error(-DDS_EINVAL, "ddgpu_event_synchronize: event is NULL");
    int rc = ddgpu_gpu_ready("ddgpu_event_synchronize");
    return rc != 0 ? rc : ddgpu_rt_event_synchronize(event);
}

int ddgpu_stream_wait_event(const dds_mem_t *on, void *event)
{
    if (event == NULL)
        return dds_error(-DDS_EINVAL, "ddgpu_stream_wait_event: event is NULL");
    int rc = ddgpu_gpu_ready("ddgpu_stream_wait_event");
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    rc = ddgpu_guard_enter("ddgpu_stream_wait_event", on, &g);
    if (rc == 0)
        rc = ddgpu_rt_stream_wait_event(g.stream, event);
    ddgpu_guard_exit(&g);
    return rc;
}

/* A process-wide pool of events per device, for ddgpu_stream_fence and the
 * memops table (record/release without creating an event per call).  The
 * pooled events live until the process ends (or the test emulation is
 * turned off). */
static pthread_mutex_t evpool_mu = PTHREAD_MUTEX_INITIALIZER;
static ddgpu_pevent_t *evpool_free[DDGPU_MAX_DEVICES];

/* Inside a guard (current device g->device). */
int ddgpu_evpool_get(const ddgpu_guard_t *g, ddgpu_pevent_t **pe_p)
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

void ddgpu_evpool_put(ddgpu_pevent_t *pe)
{
    if (pe == NULL)
        return;
    pthread_mutex_lock(&evpool_mu);
    pe->next = evpool_free[pe->device];
    evpool_free[pe->device] = pe;
    pthread_mutex_unlock(&evpool_mu);
}

void ddgpu_evpool_clear(void)
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
    int rc = ddgpu_gpu_ready("ddgpu_stream_fence");
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    ddgpu_pevent_t *pe = NULL;
    rc = ddgpu_guard_enter("ddgpu_stream_fence", on, &g);
    if (rc == 0)
        rc = ddgpu_evpool_get(&g, &pe);
    if (rc == 0)
        rc = ddgpu_rt_event_record(pe->event, g.stream);
    ddgpu_guard_exit(&g);
    if (rc == 0)
        rc = ddgpu_rt_event_synchronize(pe->event);
    ddgpu_evpool_put(pe);
    return rc;
}

/* ------------------------------------------------------------------------ */

int ddgpu_test_host_emulation(int enable)
{
    if (!enable && ddgpu_rt_emulated())
        ddgpu_evpool_clear();   /* pooled emulated events die with the emulator */
    return ddgpu_rt_test_host_emulation(enable);
}

