/* ddstore-core: FileComm, a communicator over files in a shared directory
 * (include/ddstore/comm_file.h).  libc + pthreads only.
 *
 * Layout under dir/<ns>/ (0700, owned by the user, never writable by
 * others: dds_dir_prepare):
 *   c<inst>.<seq>.<rank>        one file per rank and collective step (0600),
 *                               published with dds_file_publish (a fresh
 *                               O_EXCL|O_NOFOLLOW temporary file, renamed)
 * and beside it, in dir/:
 *   <ns>@rank<r>.claim          this run's claim on rank r of the namespace
 *                               ('@' never occurs in a namespace), created
 *                               exclusively (link(2)) by the first
 *                               communicator of the process; holds a random
 *                               nonce, pid, start time and host
 * <inst> numbers the communicators a process created for (dir, ns), so that
 * several stores over one FileComm never read each other's files.
 *
 * Two runs never mix: a second run whose rank r meets a live claim of
 * another process fails at creation (-DDS_EBUSY naming the holder), and
 * every step file carries its writer's claim nonce: a peer's file whose
 * nonce is not the one in the peer's current claim (a file a crashed run
 * left behind) is not read, only waited past.
 *
 * A file: a fixed header (magic, seq, rank, size, op, payload bytes, the
 * writer's nonce) then the payload.  Every collective is an allgather of the payload: allreduce_i64
 * gathers the vectors and reduces locally, barrier gathers nothing.
 * Cleanup: after step k+1 completed here, every rank has written its file of
 * step k+1 and so has finished reading step k: our file of step k goes.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "ddstore/comm.h"
#include "ddstore/comm_file.h"
#include "ddstore/config.h"
#include "ddstore/errors.h"
#include "ddstore/files.h"
#include "ddstore/log.h"
#include "ddstore/wire.h"
#include "dds_comm_file_internal.h"

/* ---- configuration ---------------------------------------------------- */

static const dds_config_entry_t filecomm_table[] = {
    DDS_SETTINGS_TABLE(DDS_FILECOMM_SETTINGS)};

static DDS_SETTINGS_READER(read_settings, dds_filecomm_settings_t,
                           DDS_FILECOMM_SETTINGS)

static pthread_once_t g_cfg_once = PTHREAD_ONCE_INIT;

static void register_cfg_once(void)
{
    (void)dds_config_register(filecomm_table, sizeof(filecomm_table) /
                                                  sizeof(filecomm_table[0]));
}

void dds_comm_file_register_config(void)
{
    pthread_once(&g_cfg_once, register_cfg_once);
}

int dds_filecomm_settings_read(dds_filecomm_settings_t *s)
{
    if (s == NULL)
        return dds_error(-DDS_EINVAL, "dds_filecomm_settings_read: NULL");
    dds_comm_file_register_config();
    return read_settings(s);
}

/* ---- per-process instance numbers per (dir, ns) ----------------------- */

typedef struct inst_ent {
    char *path;
    unsigned next;
    struct inst_ent *nx;
} inst_ent_t;

static pthread_mutex_t g_inst_mu = PTHREAD_MUTEX_INITIALIZER;
static inst_ent_t *g_inst = NULL;

static int next_instance(const char *path, unsigned *inst_p)
{
    inst_ent_t *e;
    pthread_mutex_lock(&g_inst_mu);
    for (e = g_inst; e; e = e->nx)
        if (strcmp(e->path, path) == 0)
            break;
    if (e == NULL) {
        e = calloc(1, sizeof *e);
        if (e == NULL || (e->path = strdup(path)) == NULL) {
            free(e);
            pthread_mutex_unlock(&g_inst_mu);
            return dds_error(-DDS_ENOMEM, "FileComm: out of memory");
        }
        e->nx = g_inst;
        g_inst = e;
    }
    *inst_p = e->next++;
    pthread_mutex_unlock(&g_inst_mu);
    return 0;
}


/* ---- the communicator ------------------------------------------------- */


static const char *op_name(uint32_t op)
{
    if (op == FC_OP_ALLGATHER)
        return "allgather";
    if (op == FC_OP_BARRIER)
        return "barrier";
    if (op >= FC_OP_ALLREDUCE && op < FC_OP_ALLREDUCE + 3)
        return "allreduce_i64";
    return "?";
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void file_name(const fc_ctx_t *c, char *buf, size_t n, uint64_t seq,
                      int rank)
{
    snprintf(buf, n, "%s/c%u.%llu.%d", c->path, c->inst,
             (unsigned long long)seq, rank);
}

static int read_all(int fd, void *p, size_t n)
{
    char *b = p;
    while (n > 0) {
        ssize_t r = read(fd, b, n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            return 1; /* short */
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

static int publish(fc_ctx_t *c, uint32_t op, const void *data, size_t bytes)
{
    char fin[PATH_MAX];
    fc_header_t h;
    dds_file_part_t parts[2];

    memset(&h, 0, sizeof h);
    memcpy(h.magic, FC_MAGIC, 8);
    h.seq = c->seq;
    h.rank = (uint32_t)c->rank;
    h.size = (uint32_t)c->size;
    h.op = op;
    h.bytes = bytes;
    h.nonce = c->nonce;
    file_name(c, fin, sizeof fin, c->seq, c->rank);
    parts[0].data = &h;
    parts[0].bytes = sizeof h;
    parts[1].data = data;
    parts[1].bytes = bytes;
    /* the strict publish: a fresh O_EXCL|O_NOFOLLOW temporary file (never
     * one planted there), 0600, renamed over the step's name */
    return dds_file_publish(c->path, strrchr(fin, '/') + 1, parts, 2,
                            c->fsync ? DDS_FILE_FSYNC : 0, "FileComm");
}

/* 1 = read into dst, 0 = not there yet, < 0 = error. */
static int try_read(fc_ctx_t *c, int peer, uint32_t op, size_t bytes,
                    void *dst)
{
    char fn[PATH_MAX];
    fc_header_t h;
    saved_error_t saved;
    int fd, r, e;

    file_name(c, fn, sizeof fn, c->seq, peer);
    /* never blocks (a FIFO), never follows a link, this user's regular
     * files only */
    dds_fc_error_save(&saved);
    r = dds_file_open_read(fn, "FileComm file", &fd, NULL);
    if (r == -DDS_ENOENT) {
        dds_fc_error_restore(&saved);
        return 0;
    }
    if (r < 0)
        return r;
    r = read_all(fd, &h, sizeof h);
    if (r < 0) {
        e = errno;
        close(fd);
        return dds_error(-DDS_EIO, "FileComm: cannot read %s: %s", fn,
                         strerror(e));
    }
    if (r > 0 || memcmp(h.magic, FC_MAGIC, 8) != 0) {
        close(fd);
        return dds_error(-DDS_ECORRUPT,
                         "FileComm: %s is not a FileComm file (truncated or "
                         "foreign)",
                         fn);
    }
    if (h.nonce == 0 || h.nonce != c->peer_nonce[peer]) {
        /* a file of another run (left behind by a crashed one), or the
         * peer's claim is new to us */
        c->peer_nonce[peer] = dds_fc_peer_claim(c, peer);
        if (h.nonce == 0 || h.nonce != c->peer_nonce[peer]) {
            if (c->peer_nonce[peer] != 0)
                snprintf(c->skipped, sizeof c->skipped,
                         "%.400s was written by another run than the one "
                         "holding rank %d's claim (a leftover): not read",
                         fn, peer);
            close(fd);
            return 0;
        }
    }
    if (h.seq != c->seq || h.rank != (uint32_t)peer ||
        h.size != (uint32_t)c->size) {
        close(fd);
        return dds_error(-DDS_ESTALE,
                         "FileComm: %s belongs to another run (step %llu, "
                         "rank %u of %u; expected step %llu, rank %d of %d): "
                         "use a fresh ns per run",
                         fn, (unsigned long long)h.seq, h.rank, h.size,
                         (unsigned long long)c->seq, peer, c->size);
    }
    if (h.op != op || h.bytes != (uint64_t)bytes) {
        close(fd);
        return dds_error(-DDS_EINVAL,
                         "FileComm: collective mismatch at step %llu: rank %d "
                         "called %s with %llu bytes, rank %d called %s with "
                         "%zu bytes",
                         (unsigned long long)c->seq, peer, op_name(h.op),
                         (unsigned long long)h.bytes, c->rank, op_name(op),
                         bytes);
    }
    r = bytes > 0 ? read_all(fd, dst, bytes) : 0;
    e = errno;
    close(fd);
    if (r != 0)
        return r < 0 ? dds_error(-DDS_EIO, "FileComm: cannot read %s: %s", fn,
                                 strerror(e))
                     : dds_error(-DDS_ECORRUPT, "FileComm: %s is truncated",
                                 fn);
    return 1;
}

/* The ranks whose file of this step was not read yet ("1, 4, ..."): the
 * count, and the first 16 in `list`. */
static int missing_ranks(const fc_ctx_t *c, char *list, size_t cap)
{
    size_t len = 0;
    int nmiss = 0, shown = 0;
    list[0] = '\0';
    for (int j = 0; j < c->size; j++) {
        if (c->got[j])
            continue;
        nmiss++;
        if (shown < 16 && len < cap - 16) {
            int w = snprintf(list + len, cap - len, "%s%d", shown ? ", " : "", j);
            if (w > 0)
                len += (size_t)w;
            shown++;
        }
    }
    if (nmiss > shown && len < cap - 8)
        snprintf(list + len, cap - len, ", ...");
    return nmiss;
}

/* DDSTORE_COLLECTIVE_WARN_S into a step: said once, then the wait goes on. */
static void waiting_warn(const fc_ctx_t *c, uint32_t op, double waited)
{
    char list[512];
    const char *call = dds_comm_what();
    int nmiss = missing_ranks(c, list, sizeof list);
    DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_CORE,
            "FileComm %s: rank %d has waited %.0f s in %s (step %llu)%s%s%s for %d of %d "
            "ranks, which have not entered it: %s; still waiting, up to %g s in all "
            "(DDSTORE_COLLECTIVE_WARN_S, DDSTORE_COLLECTIVE_TIMEOUT_S)",
            c->path, c->rank, waited, op_name(op), (unsigned long long)c->seq,
            call[0] ? " of the store's " : "", call, call[0] ? "," : "", nmiss, c->size,
            list, c->timeout_s);
}

static int timeout_error(fc_ctx_t *c, uint32_t op)
{
    char list[512];
    int nmiss = missing_ranks(c, list, sizeof list);
    snprintf(c->broken, sizeof c->broken, "%s (step %llu) timed out",
             op_name(op), (unsigned long long)c->seq);
    return dds_error(-DDS_ETIMEDOUT,
                     "FileComm %s: %s (step %llu) timed out after %g s "
                     "waiting for %d of %d ranks, which did not enter it: %s "
                     "(%s)%s%s",
                     c->path, op_name(op), (unsigned long long)c->seq,
                     c->timeout_s, nmiss, c->size, list,
                     c->timeout_from_env
                         ? dds_setting_entry_collective_timeout_s()->name
                         : "FileComm timeout=",
                     c->skipped[0] ? "; last seen: " : "", c->skipped);
}

/* The one exchange behind every collective.  recv: size*bytes, or NULL when
 * bytes == 0. */
static int exchange_step(fc_ctx_t *c, uint32_t op, const void *send,
                         size_t bytes, void *recv)
{
    double deadline;
    long sleep_ns = 20000;
    int remaining = c->size - 1, rc = 0;

    if (c->size == 1) {
        if (bytes > 0 && recv != send)
            memmove(recv, send, bytes);
        c->seq++;
        return 0;
    }
    if (c->broken[0] != '\0')
        return dds_error(-DDS_ETIMEDOUT,
                         "FileComm %s: %s refused: an earlier %s, so the "
                         "ranks are out of step; create a new FileComm (a "
                         "fresh ns)",
                         c->path, op_name(op), c->broken);
    rc = publish(c, op, send, bytes);
    if (rc < 0)
        return rc;
    if (bytes > 0 && (char *)recv + (size_t)c->rank * bytes != send)
        memmove((char *)recv + (size_t)c->rank * bytes, send, bytes);
    memset(c->got, 0, (size_t)c->size);
    c->got[c->rank] = 1;
    c->skipped[0] = '\0';
    const double t0 = now_s();
    deadline = t0 + c->timeout_s;
    double warn_at = t0 + c->warn_s; /* inf: never */
    while (remaining > 0) {
        int progress = 0;
        for (int j = 0; j < c->size; j++) {
            if (c->got[j])
                continue;
            rc = try_read(c, j, op,
                          bytes, bytes ? (char *)recv + (size_t)j * bytes : NULL);
            if (rc < 0)
                goto out;
            if (rc == 1) {
                c->got[j] = 1;
                remaining--;
                progress = 1;
            }
        }
        rc = 0;
        if (remaining == 0)
            break;
        const double now = now_s();
        if (now > deadline) {
            rc = timeout_error(c, op);
            goto out;
        }
        if (now > warn_at) {
            waiting_warn(c, op, now - t0);
            warn_at = INFINITY;
        }
        if (progress) {
            sleep_ns = 20000;
        } else {
            struct timespec ts = {0, sleep_ns};
            nanosleep(&ts, NULL);
            if (sleep_ns < 5000000)
                sleep_ns *= 2;
        }
    }
    /* every rank has finished the previous step: our file of it goes */
    if (c->seq > 0) {
        char fn[PATH_MAX];
        file_name(c, fn, sizeof fn, c->seq - 1, c->rank);
        (void)unlink(fn);
    }
out:
    /* advance even on failure: a late peer still finds our file of this
     * step, and the next call does not collide with it */
    c->seq++;
    return rc;
}

/* One rank's settings error, as the first step exchanges it. */
typedef struct fc_settings_rec {
    int32_t rc;
    char why[244];
} fc_settings_rec_t;

/* The first collective carries every rank's settings error in front of
 * its payload (the same step, so seq numbers and timeout messages are
 * those of the caller's collective); the lowest failing rank's error fails
 * every rank, now and on every later call.  Keeps the caller's error detail
 * on success. */
static int exchange(fc_ctx_t *c, uint32_t op, const void *send, size_t bytes,
                    void *recv)
{
    fc_settings_rec_t mine;
    const size_t rb = sizeof mine + bytes;
    unsigned char *s2, *r2;
    saved_error_t saved;
    int rc;

    if (c->refused_rc != 0)
        return dds_error(c->refused_rc, "%s", c->refused);
    if (c->settings_agreed || c->size == 1)
        return exchange_step(c, op, send, bytes, recv);
    c->settings_agreed = 1;
    if (bytes > SIZE_MAX / (size_t)c->size - sizeof mine)
        return dds_error(-DDS_EINVAL, "FileComm %s: too large", op_name(op));
    s2 = calloc(1, rb);
    r2 = calloc((size_t)c->size, rb);
    if (s2 == NULL || r2 == NULL) {
        free(s2);
        free(r2);
        return dds_error(-DDS_ENOMEM, "FileComm: out of memory");
    }
    memset(&mine, 0, sizeof mine);
    mine.rc = c->settings_rc;
    snprintf(mine.why, sizeof mine.why, "%s", c->settings_why);
    memcpy(s2, &mine, sizeof mine);
    if (bytes > 0)
        memcpy(s2 + sizeof mine, send, bytes);
    dds_fc_error_save(&saved);
    rc = exchange_step(c, op, s2, rb, r2);
    if (rc == 0) {
        for (int j = 0; j < c->size && c->refused_rc == 0; j++) {
            fc_settings_rec_t peer;
            memcpy(&peer, r2 + (size_t)j * rb, sizeof peer);
            if (peer.rc == 0)
                continue;
            peer.why[sizeof peer.why - 1] = '\0';
            c->refused_rc = peer.rc < 0 ? peer.rc : -DDS_ECONFIG;
            snprintf(c->refused, sizeof c->refused, "rank %d: %s", j,
                     peer.why);
        }
        for (int j = 0; j < c->size && bytes > 0; j++)
            memcpy((char *)recv + (size_t)j * bytes,
                   r2 + (size_t)j * rb + sizeof mine, bytes);
    }
    free(s2);
    free(r2);
    if (rc < 0)
        return rc;
    if (c->refused_rc != 0)
        return dds_error(c->refused_rc, "%s", c->refused);
    dds_fc_error_restore(&saved);
    return 0;
}

static int fc_allgather(void *ctx, const void *send, size_t bytes,
                        void *recv)
{
    if (bytes > 0 && (send == NULL || recv == NULL))
        return dds_error(-DDS_EINVAL, "FileComm allgather: NULL buffer");
    return exchange(ctx, FC_OP_ALLGATHER, send, bytes, recv);
}

static int fc_barrier(void *ctx)
{
    return exchange(ctx, FC_OP_BARRIER, NULL, 0, NULL);
}

static int fc_allreduce_i64(void *ctx, int64_t *inout, size_t n,
                            dds_reduce_op_t op)
{
    fc_ctx_t *c = ctx;
    int64_t *all;
    int rc;
    if (op != DDS_REDUCE_MIN && op != DDS_REDUCE_MAX && op != DDS_REDUCE_SUM)
        return dds_error(-DDS_EINVAL, "FileComm allreduce_i64: bad op %d",
                         (int)op);
    if (n > 0 && inout == NULL)
        return dds_error(-DDS_EINVAL, "FileComm allreduce_i64: NULL buffer");
    if (n > SIZE_MAX / sizeof(int64_t) / (size_t)c->size)
        return dds_error(-DDS_EINVAL, "FileComm allreduce_i64: n too large");
    all = n ? malloc(n * sizeof(int64_t) * (size_t)c->size) : NULL;
    if (n && all == NULL)
        return dds_error(-DDS_ENOMEM, "FileComm allreduce_i64: out of memory");
    rc = exchange(c, FC_OP_ALLREDUCE + (uint32_t)op, inout,
                  n * sizeof(int64_t), all);
    if (rc == 0)
        dds_reduce_i64(all, c->size, n, op, inout);
    free(all);
    return rc;
}

static void fc_destroy(void *ctx)
{
    fc_ctx_t *c = ctx;
    if (c == NULL)
        return;
    if (c->path != NULL && c->dir != NULL && c->ns != NULL)
        dds_fc_claim_release(c);
    free(c->dir);
    free(c->path);
    free(c->ns);
    free(c->got);
    free(c->peer_nonce);
    free(c);
}

static const dds_comm_ops_t file_ops = {
    sizeof(dds_comm_ops_t), "file", fc_allgather, fc_allreduce_i64,
    fc_barrier, fc_destroy};

const char *dds_comm_file_ns(const dds_comm_t *comm)
{
    if (comm == NULL || comm->ops != &file_ops || comm->ctx == NULL)
        return NULL;
    return ((fc_ctx_t *)comm->ctx)->ns;
}

const char *dds_comm_file_path(const dds_comm_t *comm)
{
    if (comm == NULL || comm->ops != &file_ops || comm->ctx == NULL)
        return NULL;
    return ((fc_ctx_t *)comm->ctx)->path;
}

/* ---- creation --------------------------------------------------------- */

/* 1 = parsed, 0 = unset, < 0 = bad value */
static int env_int(const char *name, int *v)
{
    const char *s = getenv(name);
    char *end;
    long x;
    if (s == NULL || s[0] == '\0')
        return 0;
    errno = 0;
    x = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || x < INT_MIN || x > INT_MAX)
        return dds_error(-DDS_ECONFIG, "FileComm: %s=%s is not an integer",
                         name, s);
    *v = (int)x;
    return 1;
}

static int resolve_env(int *rank, int *size)
{
    static const char *const pairs[][2] = {
        {"SLURM_PROCID", "SLURM_NTASKS"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
        {"PMI_RANK", "PMI_SIZE"}};
    int need_rank = *rank < 0, need_size = *size < 0;
    for (size_t i = 0; i < 3 && (need_rank || need_size); i++) {
        int rc;
        if (need_rank) {
            rc = env_int(pairs[i][0], rank);
            if (rc < 0)
                return rc;
            need_rank = rc == 0;
        }
        if (need_size) {
            rc = env_int(pairs[i][1], size);
            if (rc < 0)
                return rc;
            need_size = rc == 0;
        }
    }
    if (need_rank)
        return dds_error(-DDS_EINVAL,
                         "FileComm: rank not given and none of SLURM_PROCID, "
                         "OMPI_COMM_WORLD_RANK, PMI_RANK is set");
    if (need_size)
        return dds_error(-DDS_EINVAL,
                         "FileComm: size not given and none of SLURM_NTASKS, "
                         "OMPI_COMM_WORLD_SIZE, PMI_SIZE is set");
    return 0;
}

static int resolve_ns(const char *ns, char *out, size_t n)
{
    if (ns == NULL || ns[0] == '\0') {
        const char *job = getenv("SLURM_JOB_ID");
        const char *step = getenv("SLURM_STEP_ID");
        if (job != NULL && job[0] != '\0') {
            if (step != NULL && step[0] != '\0')
                snprintf(out, n, "%s.%s", job, step);
            else
                snprintf(out, n, "%s", job);
        } else {
            snprintf(out, n, "default");
        }
        ns = out;
    } else {
        if (strlen(ns) >= n)
            return dds_error(-DDS_EINVAL, "FileComm: ns is too long (%zu > %zu)",
                             strlen(ns), n - 1);
        snprintf(out, n, "%s", ns);
    }
    if (strcmp(out, ".") == 0 || strcmp(out, "..") == 0)
        return dds_error(-DDS_EINVAL, "FileComm: ns '%s' is not a name", out);
    for (const char *p = out; *p; p++) {
        char ch = *p;
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
              (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
              ch == '-'))
            return dds_error(-DDS_EINVAL,
                             "FileComm: ns '%s' may hold only letters, digits, "
                             "'.', '_' and '-'",
                             out);
    }
    return 0;
}

/* mkdir -p with 0700 for what we create; the result must be a directory of
 * this user's that others may not write to (dds_dir_prepare). */
static int make_dir(const char *path, const char *what)
{
    unsigned flags = 0;
    int rc = dds_dir_prepare(path, what, &flags);
    if (rc < 0) {
        char detail[1024];
        snprintf(detail, sizeof detail, "%s", dds_last_error());
        return dds_error(rc, "FileComm: %s", detail);
    }
    if (flags & DDS_DIR_GROUP_WRITABLE)
        DDS_LOG_ONCE(DDS_LOG_WARN, DDS_SUBSYS_CORE,
                     "FileComm: %s %s is writable by its group: its members "
                     "could replace the files; prefer a private (0700) "
                     "directory",
                     what, path);
    return 0;
}

/* Remove this rank's files of this instance left by an earlier run. */
static void remove_leftovers(const fc_ctx_t *c)
{
    DIR *d = opendir(c->path);
    struct dirent *de;
    char fn[PATH_MAX];
    if (d == NULL)
        return;
    while ((de = readdir(d)) != NULL) {
        unsigned inst;
        unsigned long long seq;
        int rank, used = 0;
        const char *name = de->d_name;
        if (strncmp(name, ".tmp.", 5) == 0)
            name += 5;
        if (sscanf(name, "c%u.%llu.%d%n", &inst, &seq, &rank, &used) == 3 &&
            name[used] == '\0' && inst == c->inst && rank == c->rank) {
            snprintf(fn, sizeof fn, "%s/%s", c->path, de->d_name);
            (void)unlink(fn);
        }
    }
    closedir(d);
}

/* A SECONDS setting's default, for a rank whose value did not parse. */
static double default_seconds(const dds_config_entry_t *e, double fallback)
{
    char *end;
    double v;
    if (e == NULL || e->defval == NULL)
        return fallback;
    v = strtod(e->defval, &end);
    return end != e->defval && *end == '\0' && v > 0 ? v : fallback;
}

int dds_comm_file_create(const char *dir, int rank, int size, const char *ns,
                         double timeout_s, dds_comm_t *comm_p)
{
    char nsbuf[256], path[PATH_MAX];
    fc_ctx_t *c;
    int rc, fsync_on = 0, from_env = 0;
    dds_filecomm_settings_t set;

    dds_comm_file_register_config();
    if (comm_p == NULL)
        return dds_error(-DDS_EINVAL, "dds_comm_file_create: NULL output");
    if (dir == NULL || dir[0] == '\0')
        return dds_error(-DDS_EINVAL, "FileComm: dir is empty");
    rc = resolve_env(&rank, &size);
    if (rc < 0)
        return rc;
    if (size < 1)
        return dds_error(-DDS_EINVAL, "FileComm: size must be >= 1, got %d",
                         size);
    if (rank < 0 || rank >= size)
        return dds_error(-DDS_EINVAL,
                         "FileComm: rank must be in [0, %d), got %d", size,
                         rank);
    rc = resolve_ns(ns, nsbuf, sizeof nsbuf);
    if (rc < 0)
        return rc;
    /* A bad setting fails here only for a single rank; with peers it is
     * kept (the default used meanwhile) and fails every rank's first
     * collective together (settings_agree). */
    int settings_rc = 0;
    char settings_why[240] = "";
    if (timeout_s <= 0) {
        from_env = 1;
        rc = dds_comm_timeout_s(&timeout_s);
        if (rc < 0) {
            settings_rc = rc;
            snprintf(settings_why, sizeof settings_why, "%s", dds_last_error());
            timeout_s = default_seconds(dds_setting_entry_collective_timeout_s(), 1800);
        }
    }
    rc = dds_filecomm_settings_read(&set);
    if (rc < 0 && settings_rc == 0) {
        settings_rc = rc;
        snprintf(settings_why, sizeof settings_why, "%s", dds_last_error());
    }
    fsync_on = rc < 0 ? 0 : set.fsync;
    double warn_s = 0;
    rc = dds_comm_warn_s(&warn_s);
    if (rc < 0) {
        if (settings_rc == 0) {
            settings_rc = rc;
            snprintf(settings_why, sizeof settings_why, "%s",
                     dds_last_error());
        }
        warn_s = default_seconds(dds_setting_entry_collective_warn_s(), 60);
    }
    if (settings_rc != 0 && size == 1)
        return dds_error(settings_rc, "%s", settings_why);
    rc = make_dir(dir, "directory");
    if (rc < 0)
        return rc;
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, nsbuf) >=
        sizeof path - 64)
        return dds_error(-DDS_EINVAL, "FileComm: path %s/%s is too long", dir,
                         nsbuf);
    rc = make_dir(path, "namespace directory");
    if (rc < 0)
        return rc;

    c = calloc(1, sizeof *c);
    if (c == NULL)
        return dds_error(-DDS_ENOMEM, "FileComm: out of memory");
    c->dir = strdup(dir);
    c->path = strdup(path);
    c->ns = strdup(nsbuf);
    c->got = calloc((size_t)size, 1);
    c->peer_nonce = calloc((size_t)size, sizeof *c->peer_nonce);
    if (c->dir == NULL || c->path == NULL || c->ns == NULL || c->got == NULL ||
        c->peer_nonce == NULL) {
        fc_destroy(c);
        return dds_error(-DDS_ENOMEM, "FileComm: out of memory");
    }
    c->rank = rank;
    c->size = size;
    c->timeout_s = timeout_s;
    c->timeout_from_env = from_env;
    c->warn_s = warn_s;
    c->fsync = fsync_on;
    c->settings_rc = settings_rc;
    snprintf(c->settings_why, sizeof c->settings_why, "%s", settings_why);
    if (gethostname(c->host, sizeof c->host - 1) != 0)
        snprintf(c->host, sizeof c->host, "?");
    /* one run per namespace: claim our rank (a single rank exchanges no
     * file) */
    if (size > 1) {
        rc = dds_fc_claim_take(c);
        if (rc < 0) {
            fc_destroy(c);
            return rc;
        }
    }
    rc = next_instance(path, &c->inst);
    if (rc < 0) {
        fc_destroy(c);
        return rc;
    }
    remove_leftovers(c);
    DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_CORE,
            "FileComm %s: rank %d of %d, instance %u, timeout %g s", path,
            rank, size, c->inst, timeout_s);
    comm_p->ops = &file_ops;
    comm_p->ctx = c;
    comm_p->rank = rank;
    comm_p->size = size;
    return 0;
}
