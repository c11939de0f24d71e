/* ddstore-core: the read-time profiler.
 *
 * Per-variable counters, summed over every reader and thread of a store.
 * Updates are relaxed atomic adds (no lock); timing uses CLOCK_MONOTONIC and
 * is skipped entirely when DDSTORE_PROFILE=0.
 */
#ifndef DDSTORE_PROFILE_H
#define DDSTORE_PROFILE_H


#include "ddstore/visibility.h"
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    DDS_PROF_CALLS = 0,        /* get / get_batch calls                          */
    DDS_PROF_ROWS,             /* rows delivered to callers                      */
    DDS_PROF_BYTES,            /* bytes delivered to callers                     */
    DDS_PROF_READS,            /* remote reads posted (after merge and split)    */
    DDS_PROF_LOCAL_BYTES,      /* bytes served from this rank's own shard        */
    DDS_PROF_STAGED_BYTES,     /* bytes that went through a staging buffer       */
    DDS_PROF_REGISTRATIONS,    /* on-the-fly destination registrations           */
    DDS_PROF_NS_LOCK_WAIT,     /* waiting for locks on the read path             */
    DDS_PROF_NS_REGISTER,      /* memory registration                            */
    DDS_PROF_NS_POST,          /* posting reads                                  */
    DDS_PROF_NS_COMPLETE,      /* waiting for completions                        */
    DDS_PROF_NS_GPU_SYNC,      /* GPU stream/event ordering and staging copies   */
    DDS_PROF_NS_OTHER,         /* planning, local copies, scatter                */
    DDS_PROF_NS_TOTAL,         /* wall time inside reads                         */
    DDS_PROF_COUNT
} dds_prof_counter_t;

/* "calls", "rows", "bytes", "reads", "local_bytes", "staged_bytes",
 * "registrations", "lock_wait_ns", "register_ns", "post_ns", "complete_ns",
 * "gpu_sync_ns", "other_ns", "total_ns". */
DDS_API const char *dds_prof_counter_name(dds_prof_counter_t c);

/* A per-variable accumulator (owned by the store). */
typedef struct dds_prof dds_prof_t;

/* Add `v` to counter `c`.  NULL `p` is a no-op.  Thread-safe, lock-free. */
DDS_API void dds_prof_add(dds_prof_t *p, dds_prof_counter_t c, uint64_t v);

/* Non-zero when timing is on (DDSTORE_PROFILE, default 1). */
DDS_API int dds_prof_timing_enabled(void);

/* CLOCK_MONOTONIC in ns, or 0 when timing is disabled. */
DDS_API uint64_t dds_prof_now(void);

/* Snapshot of all counters. */
typedef struct dds_profile {
    uint64_t v[DDS_PROF_COUNT];
} dds_profile_t;

#ifdef __cplusplus
}
#endif
#endif
