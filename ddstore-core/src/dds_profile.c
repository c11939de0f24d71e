/* ddstore-core: the read-time profiler (relaxed atomic counters). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "dds_internal.h"
#include "ddstore/config.h"
#include "ddstore/errors.h"
#include "ddstore/log.h"
#include "ddstore/profile.h"
#include "ddstore/settings.h"

static const char *const counter_names[DDS_PROF_COUNT] = {
    "calls",        "rows",          "bytes",         "reads",
    "local_bytes",  "staged_bytes",  "registrations", "lock_wait_ns",
    "register_ns",  "post_ns",       "complete_ns",   "gpu_sync_ns",
    "other_ns",     "total_ns"};

const char *dds_prof_counter_name(dds_prof_counter_t c)
{
    if ((int)c < 0 || (int)c >= DDS_PROF_COUNT)
        return "unknown";
    return counter_names[c];
}

void dds_prof_add(dds_prof_t *p, dds_prof_counter_t c, uint64_t v)
{
    if (p == NULL || (unsigned)c >= DDS_PROF_COUNT || v == 0)
        return;
    atomic_fetch_add_explicit(&p->v[c], v, memory_order_relaxed);
}

void dds_prof_clear(dds_prof_t *p)
{
    if (p == NULL)
        return;
    for (int i = 0; i < DDS_PROF_COUNT; i++)
        atomic_store_explicit(&p->v[i], 0, memory_order_relaxed);
}

void dds_prof_snapshot(const dds_prof_t *p, dds_profile_t *out)
{
    for (int i = 0; i < DDS_PROF_COUNT; i++)
        out->v[i] = p == NULL ? 0
                              : atomic_load_explicit(
                                    (_Atomic uint64_t *)&p->v[i],
                                    memory_order_relaxed);
}

/* DDSTORE_PROFILE, read once (its typed accessor, settings.h). */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_timing = 1;

static void timing_init(void)
{
    int on = 1;
    if (dds_setting_profile(&on) != 0) {
        DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_CORE, "%s; timing stays on",
                dds_last_error());
        on = 1;
    }
    g_timing = on;
}

int dds_prof_timing_enabled(void)
{
    pthread_once(&g_once, timing_init);
    return g_timing;
}

uint64_t dds_prof_now(void)
{
    struct timespec ts;
    if (!dds_prof_timing_enabled())
        return 0;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
