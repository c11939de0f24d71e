/* libddstore: the exception class of a DDS_E* code, for bindings.
 *
 * One mapping for every binding in the process (pyddstore._core and the
 * torch extension raise the same Python exception for the same code;
 * docs/design.md, "Errors -> Python"):
 *
 *   DDS_ENOENT                                   DDSTORE_EXC_KEY     (DDStoreKeyError)
 *   DDS_ERANGE                                   DDSTORE_EXC_INDEX   (IndexError)
 *   DDS_EINVAL, EEXIST, ECONFIG, ENOSPC          DDSTORE_EXC_VALUE   (ValueError)
 *   DDS_ETYPE                                    DDSTORE_EXC_TYPE    (TypeError)
 *   DDS_ENOMEM                                   DDSTORE_EXC_MEMORY  (MemoryError)
 *   any other                                    DDSTORE_EXC_STORE   (DDStoreError)
 */
#ifndef DDSTORE_EXC_H
#define DDSTORE_EXC_H

#include "ddstore/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ddstore_exc {
    DDSTORE_EXC_STORE = 0,
    DDSTORE_EXC_KEY = 1,
    DDSTORE_EXC_INDEX = 2,
    DDSTORE_EXC_VALUE = 3,
    DDSTORE_EXC_TYPE = 4,
    DDSTORE_EXC_MEMORY = 5
} ddstore_exc_t;

/* The class of `rc` (negative or positive DDS_E* code). */
DDS_API ddstore_exc_t ddstore_exc_of(int rc);

#ifdef __cplusplus
}
#endif
#endif
