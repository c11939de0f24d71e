/* ddstore-ofi adapter: method 2's liveness table, so that a reader on the
 * core's host learns that a variable it joined was freed.
 *
 * Over the network a freed variable's registration is gone and reads fail.
 * On the same host they need not: direct reads (process_vm_readv) and shm's
 * copies read the core process's memory whatever became of it, so a reader
 * would read garbage.  Therefore every core process of a method-2 job keeps
 * one table in shared memory, /dev/shm/ddstore-live.<pid>.<start ticks>
 * (0600, LIVE_SLOTS slots of 64 bytes, reserved with posix_fallocate: a full
 * /dev/shm fails the add with -DDS_ENOMEM), with one slot per registered
 * variable: {gen, base, key, bytes, tag, fd}.  gen is unique in the process
 * (never reused) and non-zero while the variable is registered; tag and fd
 * say where a reader of this host can map the shard (core's node-local
 * shard service, ddstore/shard.h; tag 0: it cannot):
 *
 *   core, add:   fields, then gen (release)
 *   core, free:  gen = 0 and a full fence, before the memory is
 *                deregistered or freed
 *   reader, join: maps the table of each core rank on its host (same pid
 *                namespace), finds the slot whose {base, key, bytes} are the
 *                record's (a seqlock read: gen, fields, gen again) and keeps
 *                (slot, gen), and the shard's {tag, fd} to map it on the
 *                first read (the store does: file, size, tag checked)
 *   reader, read: after the copy has completed, a full fence, then each
 *                such slot must still hold its gen; else the read fails
 *                naming the variable (-DDS_ESTALE).
 *
 * If the reader's check sees the old gen, the core's gen = 0 (and so the
 * free after it) had not happened when the copy ended: the bytes are the
 * variable's.  A read racing a free is caught; the cost is one load per
 * same-host rank per read call.  The last core store of a process marks
 * every slot free and unlinks the file (readers keep their mapping: they see
 * the zeros); a killed core leaves it behind, and the next core process of
 * this user removes the tables of processes that no longer exist.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddstore/config.h"
#include "ddstore/errors.h"
#include "ddstore/log.h"
#include "ddofi_tr_internal.h"

#define LIVE_DIR "/dev/shm"
#define LIVE_PREFIX "ddstore-live."
#define LIVE_SLOTS 4096

typedef struct live_slot {
    _Atomic uint64_t gen;
    _Atomic uint64_t base, key, bytes;
    _Atomic uint64_t tag, fd;  /* the shard's memfd (ddstore/shard.h), tag 0: none */
    _Atomic uint64_t reserved[2];
} live_slot_t;

_Static_assert(sizeof(live_slot_t) == 64, "liveness slot layout");
#define LIVE_BYTES ((size_t)LIVE_SLOTS * sizeof(live_slot_t))

static struct {
    pthread_mutex_t lock;
    live_slot_t *tab;
    int users;             /* core stores of this process               */
    uint64_t next_gen;     /* never reset: a gen is never seen twice    */
    pid_t pid;             /* the process that made tab                 */
    char path[128];
} g_live = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 1, 0, ""};

static void live_path(char *out, size_t cap, int32_t pid, uint64_t ticks)
{
    snprintf(out, cap, LIVE_DIR "/" LIVE_PREFIX "%d.%" PRIu64, (int)pid, ticks);
}

/* Tables of processes that no longer exist, owned by this user. */
static void live_clean_stale(void)
{
    DIR *d = opendir(LIVE_DIR);
    if (!d)
        return;
    int dfd = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int pid = 0;
        uint64_t ticks = 0;
        char tail = 0;
        if (strncmp(e->d_name, LIVE_PREFIX, strlen(LIVE_PREFIX)) != 0 ||
            sscanf(e->d_name + strlen(LIVE_PREFIX), "%d.%" SCNu64 "%c", &pid, &ticks, &tail) !=
                2 ||
            pid <= 0)
            continue;
        struct stat st;
        if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
            st.st_uid != geteuid())
            continue;
        if (ddofi_hs_process_alive(pid, ticks) == 0 && unlinkat(dfd, e->d_name, 0) == 0)
            DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_OFI, "removed %s/%s (a core process that no "
                    "longer exists)", LIVE_DIR, e->d_name);
    }
    closedir(d);
}

/* Under g_live.lock: the table of this process, made on first use. */
static int live_table(void)
{
    if (g_live.tab && g_live.pid == getpid())
        return 0;
    live_clean_stale();
    live_path(g_live.path, sizeof g_live.path, (int32_t)getpid(), ddofi_hs_self_start_ticks());
    int fd = -1;
    for (int attempt = 0; attempt < 2 && fd < 0; attempt++) {
        fd = open(g_live.path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno == EEXIST)
            (void)unlink(g_live.path); /* ours by pid and start time: stale */
        else if (fd < 0)
            break;
    }
    if (fd < 0)
        return dds_error(-DDS_EIO, "method 2: creating the liveness table %s: %s", g_live.path,
                         strerror(errno));
    /* The pages are reserved now (posix_fallocate, not a sparse ftruncate):
     * a full /dev/shm is an error here, never a SIGBUS at the first slot
     * written. */
    void *p = MAP_FAILED;
    int e = posix_fallocate(fd, 0, (off_t)LIVE_BYTES);
    if (e == 0) {
        p = mmap(NULL, LIVE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED)
            e = errno;
    }
    close(fd);
    if (p == MAP_FAILED) {
        (void)unlink(g_live.path);
        if (e == ENOSPC)
            return dds_error(-DDS_ENOMEM, "method 2: no room in %s for the liveness table "
                             "%s (%zu KiB): free space in %s (or mount it larger)",
                             LIVE_DIR, g_live.path, LIVE_BYTES >> 10, LIVE_DIR);
        return dds_error(-DDS_EIO, "method 2: sizing or mapping the liveness table %s: %s",
                         g_live.path, strerror(e));
    }
    g_live.tab = p;
    g_live.pid = getpid();
    return 0;
}

void ddofi_tr_live_core_ref(void)
{
    pthread_mutex_lock(&g_live.lock);
    g_live.users++;
    pthread_mutex_unlock(&g_live.lock);
}

void ddofi_tr_live_core_unref(void)
{
    pthread_mutex_lock(&g_live.lock);
    if (g_live.users > 0 && --g_live.users == 0 && g_live.tab && g_live.pid == getpid()) {
        for (size_t i = 0; i < LIVE_SLOTS; i++)
            atomic_store(&g_live.tab[i].gen, 0);
        atomic_thread_fence(memory_order_seq_cst);
        munmap(g_live.tab, LIVE_BYTES);
        (void)unlink(g_live.path);
        g_live.tab = NULL;
    }
    pthread_mutex_unlock(&g_live.lock);
}

int ddofi_tr_live_add(ddofi_tr_region_t *g, const ddofi_remote_t *mine,
                      const dds_shard_rec_t *map)
{
    g->live_slot = -1;
    if (!mine->size)
        return 0; /* nothing to read here */
    pthread_mutex_lock(&g_live.lock);
    int rc = live_table();
    size_t i = 0;
    while (!rc && i < LIVE_SLOTS && atomic_load_explicit(&g_live.tab[i].gen,
                                                         memory_order_relaxed) != 0)
        i++;
    if (!rc && i == LIVE_SLOTS)
        rc = dds_error(-DDS_ENOMEM, "variable '%s': more than %d method-2 variables "
                       "registered in this process (liveness table %s is full)", g->name,
                       LIVE_SLOTS, g_live.path);
    if (!rc) {
        live_slot_t *s = &g_live.tab[i];
        atomic_store_explicit(&s->base, mine->base, memory_order_relaxed);
        atomic_store_explicit(&s->key, mine->key, memory_order_relaxed);
        atomic_store_explicit(&s->bytes, mine->size, memory_order_relaxed);
        atomic_store_explicit(&s->tag, map ? map->tag : 0, memory_order_relaxed);
        atomic_store_explicit(&s->fd, map && map->tag ? (uint64_t)map->fd : 0,
                              memory_order_relaxed);
        atomic_store_explicit(&s->gen, g_live.next_gen++, memory_order_release);
        g->live_slot = (int)i;
    }
    pthread_mutex_unlock(&g_live.lock);
    return rc;
}

void ddofi_tr_live_release(ddofi_tr_region_t *g)
{
    if (g->live_slot < 0)
        return;
    pthread_mutex_lock(&g_live.lock);
    if (g_live.tab && g_live.pid == getpid()) {
        atomic_store(&g_live.tab[g->live_slot].gen, 0);
        /* before any of the memory is deregistered or freed */
        atomic_thread_fence(memory_order_seq_cst);
    }
    pthread_mutex_unlock(&g_live.lock);
    g->live_slot = -1;
}

/* ---------------- reader ---------------- */

/* Map core rank i's table (read-only), once per store.  NULL when there is
 * none (an older core, or another /dev/shm): *why_p says why. */
static const live_slot_t *live_map(ddofi_tr_t *t, const ddofi_hs_rank_t *r, int i, char *why,
                                   size_t cap)
{
    if (!t->hs.live_maps) {
        t->hs.live_maps = calloc((size_t)t->hs.n_core, sizeof *t->hs.live_maps);
        if (!t->hs.live_maps) {
            snprintf(why, cap, "out of memory");
            return NULL;
        }
    }
    if (i >= t->hs.n_core) {
        snprintf(why, cap, "rank %d outside n_core %d", i, t->hs.n_core);
        return NULL;
    }
    if (t->hs.live_maps[i])
        return t->hs.live_maps[i];
    char path[128];
    live_path(path, sizeof path, r->pid, r->start_ticks);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        snprintf(why, cap, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) != 0)
        snprintf(why, cap, "%s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (size_t)st.st_size != LIVE_BYTES)
        snprintf(why, cap, "%s is not a liveness table of this user (%lld bytes, owner %u)",
                 path, (long long)st.st_size, (unsigned)st.st_uid);
    else if ((p = mmap(NULL, LIVE_BYTES, PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED)
        snprintf(why, cap, "%s: %s", path, strerror(errno));
    close(fd);
    if (p == MAP_FAILED)
        return NULL;
    t->hs.live_maps[i] = p;
    return p;
}

void ddofi_tr_live_unmap(ddofi_hs_t *hs)
{
    for (int i = 0; hs->live_maps && i < hs->n_core; i++)
        if (hs->live_maps[i])
            munmap((void *)hs->live_maps[i], LIVE_BYTES);
    free(hs->live_maps);
    hs->live_maps = NULL;
}

int ddofi_tr_live_join(ddofi_tr_t *t, const char *path, const ddofi_hs_record_t *rec, ddofi_tr_region_t *g)
{
    const int same_ns = rec->pidns == 0 || rec->pidns == t->hs.mypidns;
    const int needed = t->attr.direct_reads || !strcmp(t->attr.quirks, "shm");
    const int map_on = t->set.map_shards;
    g->live = calloc(rec->nranks, sizeof *g->live);
    dds_shard_rec_t *maps = map_on ? calloc(rec->nranks, sizeof *maps) : NULL;
    int nmaps = 0;
    if (!g->live || (map_on && !maps)) {
        free(maps);
        return dds_error(-DDS_ENOMEM, "join('%s'): out of memory", rec->name);
    }
    g->nlive = 0;
    for (uint32_t i = 0; same_ns && i < rec->nranks; i++) {
        const ddofi_hs_rank_t *r = &rec->ranks[i];
        if (!r->bytes || strcmp(r->host, t->hs.myhost) != 0)
            continue;
        char why[400] = "";
        const live_slot_t *tab = live_map(t, r, (int)i, why, sizeof why);
        if (!tab) {
            if (!needed)
                continue; /* reads from it fail by themselves once it is freed */
            free(maps);
            return dds_error(-DDS_EIO,
                             "join('%s'): rank %u of the core job (pid %d) runs on this host "
                             "and is read through shared memory, but its liveness table "
                             "cannot be read (%s): a freed variable could not be told from "
                             "data.  Are both jobs the same ddstore version, sharing "
                             "/dev/shm?  (record %s)", rec->name, i, (int)r->pid, why, path);
        }
        size_t k = 0;
        uint64_t gen = 0, tag = 0, fd = 0;
        for (; k < LIVE_SLOTS; k++) {
            const live_slot_t *s = &tab[k];
            uint64_t g1 = atomic_load_explicit(&s->gen, memory_order_acquire);
            if (!g1)
                continue;
            int same = atomic_load_explicit(&s->base, memory_order_relaxed) == r->base &&
                       atomic_load_explicit(&s->key, memory_order_relaxed) == r->key &&
                       atomic_load_explicit(&s->bytes, memory_order_relaxed) == r->bytes;
            tag = atomic_load_explicit(&s->tag, memory_order_relaxed);
            fd = atomic_load_explicit(&s->fd, memory_order_relaxed);
            atomic_thread_fence(memory_order_acquire);
            if (same && atomic_load_explicit(&s->gen, memory_order_relaxed) == g1) {
                gen = g1;
                break;
            }
        }
        if (!gen) {
            free(maps);
            return dds_error(-DDS_ESTALE,
                             "join('%s'): the core job has freed it (rank %u, pid %d: no "
                             "registration of it in its liveness table); record %s",
                             rec->name, i, (int)r->pid, path);
        }
        if (maps && tag && fd <= INT32_MAX) {
            /* the store maps it on the first read (core's shard service:
             * file, size and tag checked); the liveness check after each
             * read stays (region_check).  Same host name and pid namespace:
             * this node. */
            maps[i].tag = tag;
            maps[i].bytes = r->bytes;
            maps[i].node = dds_shard_node_id();
            maps[i].pid = r->pid;
            maps[i].fd = (int32_t)fd;
            maps[i].uid = (uint32_t)geteuid();
            nmaps++;
        }
        g->live[g->nlive].word = &tab[k].gen;
        g->live[g->nlive].gen = gen;
        g->live[g->nlive].rank = (int)i;
        g->live[g->nlive].pid = r->pid;
        g->nlive++;
    }
    if (nmaps) {
        g->shards = maps;
        g->nshards = (int)rec->nranks;
    } else {
        free(maps);
    }
    return 0;
}

int ddofi_tr_live_check_slow(const ddofi_tr_region_t *g)
{
    for (int k = 0; k < g->nlive; k++)
        if (atomic_load_explicit(g->live[k].word, memory_order_relaxed) != g->live[k].gen)
            return dds_error(-DDS_ESTALE,
                             "variable '%s': the core job freed it (rank %d, pid %d) while "
                             "this reader had it joined: the bytes read are not its rows.  "
                             "join() it again once the core job has added it again",
                             g->name, g->live[k].rank, (int)g->live[k].pid);
    return 0;
}
