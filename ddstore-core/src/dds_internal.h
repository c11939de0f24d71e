/* ddstore-core: private declarations shared by the core's source files.
 * Not installed; nothing outside ddstore-core/src includes this. */
#ifndef DDSTORE_SRC_DDS_INTERNAL_H
#define DDSTORE_SRC_DDS_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "ddstore/profile.h"

#if defined(__GNUC__)
#define DDS_LIKELY(x) __builtin_expect(!!(x), 1)
#define DDS_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define DDS_LIKELY(x) (x)
#define DDS_UNLIKELY(x) (x)
#endif

/* The per-variable accumulator behind the opaque dds_prof_t. */
struct dds_prof {
    _Atomic uint64_t v[DDS_PROF_COUNT];
};

/* Zero every counter (relaxed stores). */
void dds_prof_clear(dds_prof_t *p);
/* Copy every counter (relaxed loads). */
void dds_prof_snapshot(const dds_prof_t *p, dds_profile_t *out);

/* Parse a DDSTORE_LOG_SUBSYS value ("all" or a comma list of subsystem
 * names, case-insensitive, blanks ignored) into a bit mask.
 * Returns 0, or -DDS_ECONFIG with the detail naming the bad word. */
int dds_log_parse_subsys(const char *text, unsigned *mask_p);

/* Parse a DDSTORE_LOG_LEVEL value (case-insensitive name or digit 0-4).
 * Returns 0 or -1. */
int dds_log_parse_level(const char *text, int *level_p);

/* Non-zero once dds_log_set_rank() gave a rank (>= 0). */
int dds_log_rank_is_set(void);

#endif
