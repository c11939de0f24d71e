/* ddstore-ofi: error codes, thread-local detail, libfabric error
 * translation, the logger hook and the version. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ddofi_internal.h"

#define DDOFI_ERR_CAP 1024

static _Thread_local char tl_err[DDOFI_ERR_CAP];

/* DDOFI_VERSION: ddstore/ofi_version.h (through ofi.h), generated from the
 * VERSION file; the unit test checks it against that file. */
const char *ddofi_version(void) { return DDOFI_VERSION; }

const char *ddofi_libfabric_version(void)
{
    static _Thread_local char buf[32];
    uint32_t v = fi_version();
    snprintf(buf, sizeof buf, "%u.%u", FI_MAJOR(v), FI_MINOR(v));
    return buf;
}

const char *ddofi_strerror(int rc)
{
    if (rc < 0)
        rc = -rc;
    switch (rc) {
    case 0: return "success";
    case DDOFI_ENOPROV: return "no libfabric provider/domain fits the request";
    case DDOFI_EPROVIDER: return "libfabric provider error";
    case DDOFI_ECONFIG: return "bad parameter or environment value";
    case DDOFI_EBLOB: return "malformed or foreign address/region blob";
    case DDOFI_EFORKED: return "object inherited across fork (open a new one in this process)";
    case DDOFI_ENOHMEM: return "provider lacks FI_HMEM (device memory)";
    case DDOFI_EPEER: return "peer unreachable or gone";
    case EINVAL: return "invalid argument";
    case ENOMEM: return "out of memory";
    case ETIMEDOUT: return "timed out";
    case ENOSYS: return "not supported";
    case EBUSY: return "object in use";
    case ENOSPC: return "buffer too small";
    case ENOENT: return "not found";
    case EAGAIN: return "resource temporarily unavailable";
    default: break;
    }
    if (rc < DDOFI_EBASE) {
        /* strerror is not guaranteed thread-safe; use a fixed text. */
        return "system error";
    }
    return "unknown ddstore-ofi error";
}

const char *ddofi_last_error(void) { return tl_err; }

void ddofi_error_clear(void) { tl_err[0] = '\0'; }

int ddofi_error(int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_err, sizeof tl_err, fmt, ap);
    va_end(ap);
    DDOFI_LOG(DDOFI_LOG_DEBUG, "error %d: %s", rc, tl_err);
    return rc;
}

int ddofi_rc_from_fi(int fi_rc)
{
    int e = fi_rc < 0 ? -fi_rc : fi_rc;
    switch (e) {
    case 0: return 0;
    case FI_ENOMEM: return -ENOMEM;
    case FI_ENOSYS:
    case FI_EOPNOTSUPP: return -ENOSYS;
    case FI_ETIMEDOUT: return -ETIMEDOUT;
    case FI_EINVAL: return -EINVAL;
    case FI_EAGAIN: return -EAGAIN;
    case FI_ENODATA: return -DDOFI_ENOPROV;
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENOTCONN:
    case EPIPE:
    case EADDRNOTAVAIL:
    case ESHUTDOWN:
    case ESRCH: /* shm: the peer process is gone (process_vm_readv) */
        return -DDOFI_EPEER;
    default: return -DDOFI_EPROVIDER;
    }
}

int ddofi_error_fi(int fi_rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tl_err, sizeof tl_err, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n < sizeof tl_err)
        snprintf(tl_err + n, sizeof tl_err - (size_t)n, ": %s (fi rc %d)",
                 fi_strerror(fi_rc < 0 ? -fi_rc : fi_rc), fi_rc);
    int rc = ddofi_rc_from_fi(fi_rc);
    DDOFI_LOG(DDOFI_LOG_DEBUG, "error %d: %s", rc, tl_err);
    return rc;
}

/* ---------------- logger ---------------- */

_Atomic int ddofi_log_max_level = -1;
static ddofi_log_fn log_fn;
static void *log_arg;

void ddofi_log_set_sink(ddofi_log_fn fn, void *arg, ddofi_log_level_t max_level)
{
    log_fn = fn;
    log_arg = arg;
    atomic_store(&ddofi_log_max_level, fn ? (int)max_level : -1);
}

void ddofi_log_write(ddofi_log_level_t level, const char *fmt, ...)
{
    ddofi_log_fn fn = log_fn;
    if (!fn)
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fn(log_arg, level, buf);
}

/* ---------------- misc ---------------- */

uint64_t ddofi_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int ddofi_check_pid(pid_t owner, const char *what)
{
    if (owner == getpid())
        return 0;
    return ddofi_error(-DDOFI_EFORKED,
                       "%s was opened by process %d and is used in process %d "
                       "(after fork): open a new fabric/endpoint here",
                       what, (int)owner, (int)getpid());
}

uint32_t ddofi_fnv1a32(const void *p, size_t n)
{
    const unsigned char *c = p;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= c[i];
        h *= 16777619u;
    }
    return h;
}

uint32_t ddofi_prov_tag(const char *prov_name)
{
    return ddofi_fnv1a32(prov_name, strlen(prov_name));
}
