/* ddstore-ofi: /dev/shm housekeeping for libfabric's shm provider.
 *
 * The provider backs every endpoint with a region file "/dev/shm/<pid>:<d>:<e>"
 * (16 MiB at its default queue sizes), created sparse: its pages are taken
 * from the tmpfs when first touched, and a touch that finds the tmpfs full
 * is a SIGBUS in the process (Docker's default --shm-size is 64 MB).  And a
 * process killed without cleanup leaves its regions behind for good.  So:
 *
 *   - once per process, before shm is first used, the regions of processes
 *     that no longer exist (name of that form, regular file, owned by this
 *     user, pid not alive) are removed;
 *   - before an endpoint's region is created, the free space must hold the
 *     new region plus what the regions of running processes may still
 *     claim (their size minus their pages); else the endpoint is refused
 *     with an error naming /dev/shm, the space needed and free, and the ways
 *     out.  Endpoint creation of this process is serialised around the check
 *     (ddofi_shm_lock), so threads opening readers together are counted;
 *     other processes creating regions at the same moment are not.
 *
 * Liveness is kill(pid, 0) in this pid namespace: processes sharing a
 * /dev/shm are assumed to share the pid namespace (libfabric's shm needs
 * that for its CMA path too). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "ddofi_internal.h"

#define SHM_DIR "/dev/shm"
/* Region size of libfabric 1.17's shm at its default tx/rx sizes: the
 * estimate until a region of this user is seen. */
#define SHM_REGION_DEFAULT ((uint64_t)16 << 20)

static pthread_mutex_t g_shm_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_clean_once = PTHREAD_ONCE_INIT;

void ddofi_shm_lock(void) { pthread_mutex_lock(&g_shm_lock); }
void ddofi_shm_unlock(void) { pthread_mutex_unlock(&g_shm_lock); }

/* "<pid>:<d>:<e>", decimal numbers only: the pid, else 0. */
int ddofi_shm_region_pid(const char *name)
{
    const char *p = name;
    long pid = 0;
    for (int field = 0; field < 3; field++) {
        if (*p < '0' || *p > '9')
            return 0;
        long v = 0;
        while (*p >= '0' && *p <= '9') {
            v = v * 10 + (*p - '0');
            if (v > 0x7fffffff)
                return 0;
            p++;
        }
        if (field == 0)
            pid = v;
        if (field < 2 && *p++ != ':')
            return 0;
    }
    return *p == '\0' && pid > 0 ? (int)pid : 0;
}

static int pid_alive(int pid)
{
    return kill(pid, 0) == 0 || errno != ESRCH;
}

typedef struct scan {
    size_t regions;            /* of running processes                    */
    uint64_t unclaimed;        /* their size minus their pages            */
    uint64_t largest_mine;     /* largest region of this user (0: none)   */
    size_t removed;
    uint64_t removed_bytes;
} scan_t;

static void shm_scan(int clean, scan_t *s)
{
    memset(s, 0, sizeof *s);
    DIR *d = opendir(SHM_DIR);
    if (!d)
        return;
    int dfd = dirfd(d);
    uid_t me = geteuid();
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int pid = ddofi_shm_region_pid(e->d_name);
        if (!pid)
            continue;
        struct stat st;
        if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        uint64_t size = (uint64_t)st.st_size, used = (uint64_t)st.st_blocks * 512;
        if (pid_alive(pid)) {
            s->regions++;
            s->unclaimed += size > used ? size - used : 0;
            if (st.st_uid == me && size > s->largest_mine)
                s->largest_mine = size;
        } else if (clean && st.st_uid == me && pid != (int)getpid()) {
            if (unlinkat(dfd, e->d_name, 0) == 0) {
                s->removed++;
                s->removed_bytes += used;
            }
        }
    }
    closedir(d);
}

static void clean_once(void)
{
    scan_t s;
    shm_scan(1, &s);
    if (s.removed)
        DDOFI_LOG(DDOFI_LOG_INFO, "shm: removed %zu region(s) of processes that no longer "
                  "exist from " SHM_DIR " (%.1f MiB)", s.removed,
                  (double)s.removed_bytes / 1048576.0);
}

void ddofi_shm_clean_stale(void) { pthread_once(&g_clean_once, clean_once); }

static uint64_t shm_free(int *ok_p)
{
    struct statvfs v;
    *ok_p = statvfs(SHM_DIR, &v) == 0;
    return *ok_p ? (uint64_t)v.f_bavail * (uint64_t)v.f_frsize : 0;
}

int ddofi_shm_space_check(void)
{
    ddofi_shm_clean_stale();
    int ok;
    uint64_t avail = shm_free(&ok);
    if (!ok)
        return 0; /* no /dev/shm to ask: the provider will say */
    scan_t s;
    shm_scan(0, &s);
    uint64_t region = s.largest_mine ? s.largest_mine : SHM_REGION_DEFAULT;
    uint64_t need = region + s.unclaimed;
    if (avail >= need)
        return 0;
    char pvar[64], cvar[64];
    ddofi_param_label("PROVIDER", pvar, sizeof pvar);
    ddofi_param_label("CMA", cvar, sizeof cvar);
    return ddofi_error(-ENOSPC,
                       SHM_DIR " has %.1f MiB free, a new shm endpoint needs %.1f MiB (its "
                       "%.1f MiB region, plus %.1f MiB that the %zu regions of running "
                       "processes may still fill): a full " SHM_DIR " would end the process "
                       "with SIGBUS.  Use %s=tcp, or a bigger " SHM_DIR " (docker "
                       "run --shm-size=1g, or remount it larger); with %s=1 "
                       "(the default) readers open no shm endpoint of their own",
                       (double)avail / 1048576.0, (double)need / 1048576.0,
                       (double)region / 1048576.0, (double)s.unclaimed / 1048576.0,
                       s.regions, pvar, cvar);
}

int ddofi_shm_explain(char *buf, size_t cap)
{
    int ok;
    uint64_t avail = shm_free(&ok);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1)
        ncpu = 1;
    /* libfabric 1.17's shm refuses to list itself unless the free space
     * holds one region per online CPU. */
    uint64_t want = (uint64_t)ncpu * SHM_REGION_DEFAULT;
    if (!ok || avail >= want)
        return 0;
    char pvar[64];
    ddofi_param_label("PROVIDER", pvar, sizeof pvar);
    snprintf(buf, cap,
             "libfabric's shm provider needs %.0f MiB free in " SHM_DIR " (%ld CPUs x "
             "%.0f MiB) and finds %.1f MiB: use %s=tcp, or a bigger " SHM_DIR
             " (docker run --shm-size=1g, or remount it larger)",
             (double)want / 1048576.0, ncpu, (double)SHM_REGION_DEFAULT / 1048576.0,
             (double)avail / 1048576.0, pvar);
    return 1;
}
