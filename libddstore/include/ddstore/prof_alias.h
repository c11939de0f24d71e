/* libddstore: the original DDStore's names of some read counters, for
 * bindings (get_profile dicts carry them next to ours, same values). */
#ifndef DDSTORE_PROF_ALIAS_H
#define DDSTORE_PROF_ALIAS_H

#include "ddstore/profile.h"
#include "ddstore/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The i-th alias ("lock_wait", "mr", "mr_miss", "read", "cq") and the
 * counter it names in *c; NULL past the last. */
DDS_API const char *ddstore_prof_alias(int i, dds_prof_counter_t *c);

#ifdef __cplusplus
}
#endif
#endif
