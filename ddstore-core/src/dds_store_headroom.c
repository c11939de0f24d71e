/* ddstore-core: the memory a new host shard can have, checked before the
 * store (or the transport's shard_alloc) reserves it.
 *
 * A shard bigger than the machine is refused with -DDS_ENOMEM up front:
 * reserving it page by page (calloc, memfd + fallocate, shared memory) only
 * ends when the OOM killer runs, and it may kill another process first.  The
 * limit is the least of
 *   - the host's MemAvailable + SwapFree (/proc/meminfo),
 *   - for each cgroup v2 level of this process (from ours up to the mount's
 *     root) that has a memory.max: memory.max - memory.current + the file
 *     cache it could reclaim (active_file + inactive_file of memory.stat),
 *   - cgroup v1's memory.limit_in_bytes - memory.usage_in_bytes (+ cache).
 * memfd and anonymous shared pages are charged to the cgroup like any other
 * memory; they do not come from /dev/shm (method 0's /dev/shm objects fall
 * back to private shared memory when /dev/shm is full, method 2's liveness
 * table reserves its pages with posix_fallocate), so /dev/shm's free space
 * does not limit a shard.  The check is per process: ranks of one host that
 * each ask for most of its memory all pass it, and the kernel decides. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dds_store_internal.h"

#define CG2_ROOT "/sys/fs/cgroup"

/* The value of `key` (a "Key: N kB" line of /proc/meminfo, or "key N" of a
 * memory.stat) in bytes; 0 when it cannot be read. */
static int read_keyed(const char *path, const char *key, uint64_t unit, uint64_t *out)
{
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return 0;
    char line[256];
    size_t kl = strlen(key);
    int found = 0;
    while (!found && fgets(line, sizeof line, f) != NULL) {
        unsigned long long v;
        if (strncmp(line, key, kl) == 0 && (line[kl] == ':' || line[kl] == ' ') &&
            sscanf(line + kl + 1, " %llu", &v) == 1) {
            *out = (uint64_t)v * unit;
            found = 1;
        }
    }
    fclose(f);
    return found;
}

/* One number in a file ("max" reads as "no limit": 0 returned). */
static int read_u64(const char *path, uint64_t *out)
{
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return 0;
    unsigned long long v;
    int ok = fscanf(f, "%llu", &v) == 1;
    fclose(f);
    if (ok)
        *out = (uint64_t)v;
    return ok;
}

static uint64_t file_cache(const char *dir)
{
    char p[4200];
    uint64_t a = 0, i = 0;
    snprintf(p, sizeof p, "%s/memory.stat", dir);
    (void)read_keyed(p, "active_file", 1, &a);
    (void)read_keyed(p, "inactive_file", 1, &i);
    (void)read_keyed(p, "total_active_file", 1, &a); /* v1 */
    (void)read_keyed(p, "total_inactive_file", 1, &i);
    return a + i;
}

/* The room of the cgroup in `dir` (limit file, usage file): 1 and *room, or
 * 0 when it has no limit. */
static int cg_room(const char *dir, const char *limit_f, const char *usage_f,
                   uint64_t *room, uint64_t *limit)
{
    char p[4200];
    uint64_t lim = 0, cur = 0;
    snprintf(p, sizeof p, "%s/%s", dir, limit_f);
    if (!read_u64(p, &lim) || lim >= (UINT64_C(1) << 62))
        return 0; /* "max", or v1's "unlimited" (a huge number) */
    snprintf(p, sizeof p, "%s/%s", dir, usage_f);
    if (!read_u64(p, &cur))
        return 0;
    cur -= file_cache(dir) < cur ? file_cache(dir) : cur;
    *room = lim > cur ? lim - cur : 0;
    *limit = lim;
    return 1;
}

/* This process's cgroup path (v2: "0::/x", v1: "N:...memory...:/x"). */
static int my_cgroup(int v1, char *out, size_t cap)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (f == NULL)
        return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f) != NULL) {
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c2 == NULL)
            continue;
        *c2 = '\0';
        int is_v2 = strncmp(line, "0:", 2) == 0 && c1[1] == '\0';
        int is_mem = strstr(c1 + 1, "memory") != NULL;
        if ((!v1 && is_v2) || (v1 && is_mem)) {
            snprintf(out, cap, "%s", c2 + 1);
            out[strcspn(out, "\n")] = '\0';
            found = 1;
        }
    }
    fclose(f);
    return found;
}

static void take(uint64_t *best, uint64_t room, char *what, size_t cap, const char *why)
{
    if (room < *best) {
        *best = room;
        snprintf(what, cap, "%s", why);
    }
}

int dds_st_mem_headroom(uint64_t *room_p, char *what, size_t cap)
{
    uint64_t best = UINT64_MAX, avail = 0, swap = 0;
    if (read_keyed("/proc/meminfo", "MemAvailable", 1024, &avail)) {
        (void)read_keyed("/proc/meminfo", "SwapFree", 1024, &swap);
        take(&best, avail + swap, what, cap, "the host's MemAvailable + SwapFree");
    }
    char cg[4096], dir[4200], why[4400];
    if (my_cgroup(0, cg, sizeof cg)) {
        /* ours, then each parent up to the root of the mount */
        for (;;) {
            uint64_t room = 0, lim = 0;
            snprintf(dir, sizeof dir, CG2_ROOT "%s", strcmp(cg, "/") == 0 ? "" : cg);
            if (cg_room(dir, "memory.max", "memory.current", &room, &lim)) {
                snprintf(why, sizeof why, "the room left in cgroup %s (memory.max %" PRIu64
                         " bytes)", dir, lim);
                take(&best, room, what, cap, why);
            }
            char *slash = strrchr(cg, '/');
            if (slash == NULL || strcmp(cg, "/") == 0)
                break;
            if (slash == cg)
                cg[1] = '\0';
            else
                *slash = '\0';
        }
    }
    if (my_cgroup(1, cg, sizeof cg)) {
        uint64_t room = 0, lim = 0;
        snprintf(dir, sizeof dir, CG2_ROOT "/memory%s", strcmp(cg, "/") == 0 ? "" : cg);
        if (cg_room(dir, "memory.limit_in_bytes", "memory.usage_in_bytes", &room, &lim)) {
            snprintf(why, sizeof why, "the room left in cgroup %s (memory.limit_in_bytes %"
                     PRIu64 " bytes)", dir, lim);
            take(&best, room, what, cap, why);
        }
    }
    *room_p = best;
    return best != UINT64_MAX;
}

int dds_st_mem_check(const char *name, size_t bytes)
{
    uint64_t room = 0;
    char what[256] = "";
    if (bytes == 0 || !dds_st_mem_headroom(&room, what, sizeof what) || bytes <= room)
        return 0;
    return dds_error(-DDS_ENOMEM,
                     "variable '%s': a shard of %zu bytes (%.1f GiB) does not fit in the "
                     "memory this process can have: %" PRIu64 " bytes (%.1f GiB), %s",
                     name, bytes, (double)bytes / (1 << 30), room, (double)room / (1 << 30),
                     what);
}
