/* ddstore-core: shared small types (dtypes, memory kinds). */
#ifndef DDSTORE_TYPES_H
#define DDSTORE_TYPES_H


#include "ddstore/visibility.h"
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types.  DDS_DTYPE_RAW: untyped bytes of `itemsize` (init() with an
 * itemsize, numpy structured records).  FLOAT16 is IEEE 754 binary16 (numpy
 * float16, torch.float16); BFLOAT16 is bfloat16 (torch.bfloat16).  The store
 * moves bytes: both are copied bit-exact (NaN payloads, -0.0).  New values are
 * only ever added before DDS_DTYPE_COUNT (the number is in method 2's
 * handshake records). */
typedef enum {
    DDS_DTYPE_RAW = 0,
    DDS_DTYPE_BOOL = 1,
    DDS_DTYPE_UINT8 = 2,
    DDS_DTYPE_INT32 = 3,
    DDS_DTYPE_INT64 = 4,
    DDS_DTYPE_FLOAT32 = 5,
    DDS_DTYPE_FLOAT64 = 6,
    DDS_DTYPE_FLOAT16 = 7,
    DDS_DTYPE_BFLOAT16 = 8,
    DDS_DTYPE_COUNT = 9
} dds_dtype_t;

/* "raw", "bool", "uint8", "int32", "int64", "float32", "float64", "float16",
 * "bfloat16"; "unknown" outside [0, DDS_DTYPE_COUNT). */
DDS_API const char *dds_dtype_name(dds_dtype_t dt);
/* Element size in bytes (RAW: 0 = given by itemsize). */
DDS_API size_t dds_dtype_size(dds_dtype_t dt);

/* Where a buffer lives.  Device ids are runtime ordinals. */
typedef enum {
    DDS_MEM_HOST = 0,
    DDS_MEM_CUDA = 1,
    DDS_MEM_ROCM = 2
} dds_mem_kind_t;

typedef struct dds_mem {
    dds_mem_kind_t kind;
    int device;           /* device ordinal for CUDA/ROCM; 0 for host      */
    void *stream;         /* cudaStream_t / hipStream_t the caller orders on;
                             NULL = the runtime's default (legacy) stream   */
} dds_mem_t;

/* Library version, "MAJOR.MINOR.PATCH". */
DDS_API const char *dds_core_version(void);

#ifdef __cplusplus
}
#endif
#endif
