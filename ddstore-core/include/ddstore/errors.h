/* ddstore-core: error codes, messages and the thread-local error detail.
 *
 * Every ddstore function that can fail returns 0 on success or a negative
 * code: -DDS_E* below.  Codes below 256 equal the errno value of the same
 * meaning; library-specific codes start at 256.  The human-readable detail
 * of the last failure on the calling thread (which variable, which index,
 * which provider message) is in dds_last_error().
 *
 * Thread-safety: all functions are safe from any thread; the detail buffer is
 * thread-local.
 */
#ifndef DDSTORE_ERRORS_H
#define DDSTORE_ERRORS_H


#include "ddstore/visibility.h"
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    DDS_OK = 0,
    DDS_ENOENT = 2,      /* unknown variable name                    -> KeyError   */
    DDS_EIO = 5,         /* transport failure (provider/MPI message)  -> DDStoreError */
    DDS_ENOMEM = 12,     /* allocation failed                        -> MemoryError */
    DDS_EBUSY = 16,      /* object in use (e.g. registered recv)      -> DDStoreError */
    DDS_EEXIST = 17,     /* variable name already live               -> ValueError */
    DDS_EINVAL = 22,     /* bad argument (shape, length, width)      -> ValueError */
    DDS_ENOSPC = 28,     /* destination too small (ragged reads)      -> ValueError */
    DDS_ERANGE = 34,     /* index / range outside [0, total)         -> IndexError */
    DDS_ENOSYS = 38,     /* not supported by this build/transport    -> DDStoreError */
    DDS_ETIMEDOUT = 110, /* read/handshake timed out                 -> DDStoreError */
    DDS_EBASE = 256,
    DDS_ETYPE = 256,     /* wrong / unsupported dtype or itemsize    -> TypeError */
    DDS_EFREED = 257,    /* store already freed                      -> DDStoreError */
    DDS_EPEER = 258,     /* another rank failed a collective call    -> same class as its code */
    DDS_ETRANSPORT = 259,/* transport/provider error                  -> DDStoreError */
    DDS_ENOGPU = 260,    /* no usable GPU runtime / device            -> DDStoreError */
    DDS_ESTALE = 261,    /* handshake record stale / foreign          -> DDStoreError */
    DDS_ECORRUPT = 262,  /* handshake record truncated / corrupted    -> DDStoreError */
    DDS_ECONFIG = 263,   /* bad DDSTORE_* environment value           -> ValueError */
    DDS_ELAST = 264
};

/* Static description of a code (positive or negative accepted).  Never NULL. */
DDS_API const char *dds_strerror(int rc);

/* Detail of the last failure recorded on this thread (empty string if none).
 * Valid until the next ddstore call on this thread. */
DDS_API const char *dds_last_error(void);

/* Record a failure detail for this thread and return `rc` (so that
 * `return dds_error(-DDS_EINVAL, "...", ...)` works).  printf-style. */
DDS_API int dds_error(int rc, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Clear this thread's detail. */
DDS_API void dds_error_clear(void);

#ifdef __cplusplus
}
#endif
#endif
