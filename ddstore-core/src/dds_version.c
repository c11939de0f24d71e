/* ddstore-core: the library version.
 *
 * Bazel generates ddstore/core_version.h from VERSION
 * (#define DDS_CORE_VERSION "x.y.z").  Builds without it pass
 * -DDDS_CORE_VERSION='"x.y.z"'. */
#if defined(__has_include)
#if __has_include("ddstore/core_version.h")
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include "ddstore/core_version.h"
#endif
#endif

#include "ddstore/types.h"

#ifndef DDS_CORE_VERSION
#define DDS_CORE_VERSION "0.0.0-unknown"
#endif

const char *dds_core_version(void)
{
    return DDS_CORE_VERSION;
}
