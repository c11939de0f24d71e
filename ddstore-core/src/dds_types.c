/* ddstore-core: dtype names and sizes. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include "ddstore/types.h"

static const char *const dtype_names[DDS_DTYPE_COUNT] = {
    "raw",     "bool",    "uint8",   "int32",   "int64",
    "float32", "float64", "float16", "bfloat16"};

static const size_t dtype_sizes[DDS_DTYPE_COUNT] = {0, 1, 1, 4, 8, 4, 8, 2, 2};

const char *dds_dtype_name(dds_dtype_t dt)
{
    if ((int)dt < 0 || (int)dt >= DDS_DTYPE_COUNT)
        return "unknown";
    return dtype_names[dt];
}

size_t dds_dtype_size(dds_dtype_t dt)
{
    if ((int)dt < 0 || (int)dt >= DDS_DTYPE_COUNT)
        return 0;
    return dtype_sizes[dt];
}
