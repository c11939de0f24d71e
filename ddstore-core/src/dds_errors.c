/* ddstore-core: error strings and the thread-local error detail. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ddstore/errors.h"

#define DDS_ERROR_DETAIL_MAX 512

static _Thread_local char t_detail[DDS_ERROR_DETAIL_MAX];

const char *dds_strerror(int rc)
{
    if (rc == INT_MIN)
        return "unknown error";
    if (rc < 0)
        rc = -rc;
    switch (rc) {
    case DDS_OK: return "success";
    case DDS_ENOENT: return "no such variable";
    case DDS_EIO: return "input/output error in the transport";
    case DDS_ENOMEM: return "out of memory";
    case DDS_EBUSY: return "object in use";
    case DDS_EEXIST: return "variable already exists";
    case DDS_EINVAL: return "invalid argument";
    case DDS_ERANGE: return "index out of range";
    case DDS_ENOSYS: return "not supported by this build or transport";
    case DDS_ETIMEDOUT: return "timed out";
    case DDS_ETYPE: return "wrong or unsupported dtype or itemsize";
    case DDS_EFREED: return "store or variable already freed";
    case DDS_EPEER: return "another rank failed a collective call";
    case DDS_ETRANSPORT: return "transport or provider error";
    case DDS_ENOGPU: return "no usable GPU runtime or device";
    case DDS_ESTALE: return "handshake record stale or foreign";
    case DDS_ECORRUPT: return "handshake record truncated or corrupted";
    case DDS_ECONFIG: return "bad DDSTORE_* environment value";
    default: return "unknown error";
    }
}

const char *dds_last_error(void)
{
    return t_detail;
}

int dds_error(int rc, const char *fmt, ...)
{
    /* Format into a local buffer first: the arguments may point into
     * t_detail itself (e.g. re-prefixing dds_last_error()). */
    char tmp[DDS_ERROR_DETAIL_MAX];
    va_list ap;
    int n;

    if (fmt == NULL) {
        t_detail[0] = '\0';
        return rc;
    }
    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0) {
        tmp[0] = '\0';
    } else if ((size_t)n >= sizeof(tmp)) {
        /* Truncated: mark it so that nobody mistakes it for the whole. */
        memcpy(tmp + sizeof(tmp) - 4, "...", 4);
    }
    memcpy(t_detail, tmp, sizeof(tmp));
    return rc;
}

void dds_error_clear(void)
{
    t_detail[0] = '\0';
}
