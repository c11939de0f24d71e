/* libddstore: the original DDStore's counter names (prof_alias.h). */
#include "ddstore/prof_alias.h"

#include <stddef.h>

static const struct {
    const char *name;
    dds_prof_counter_t counter;
} aliases[] = {
    {"lock_wait", DDS_PROF_NS_LOCK_WAIT}, /* time waiting for locks        */
    {"mr", DDS_PROF_NS_REGISTER},         /* time registering memory       */
    {"mr_miss", DDS_PROF_REGISTRATIONS},  /* registrations not in registry */
    {"read", DDS_PROF_NS_POST},           /* time posting reads            */
    {"cq", DDS_PROF_NS_COMPLETE},         /* time waiting for completions  */
};

const char *ddstore_prof_alias(int i, dds_prof_counter_t *c)
{
    if (i < 0 || (size_t)i >= sizeof(aliases) / sizeof(aliases[0]))
        return NULL;
    if (c != NULL)
        *c = aliases[i].counter;
    return aliases[i].name;
}
