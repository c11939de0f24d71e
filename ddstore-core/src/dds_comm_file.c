/* ddstore-core: FileComm, a communicator over files in a shared directory
 * (include/ddstore/comm_file.h).  libc + pthreads only.
 *
 * Layout under dir/<ns>/ (0700):
 *   c<inst>.<seq>.<rank>        one file per rank and collective step (0600)
 *   .tmp.c<inst>.<seq>.<rank>   written first, then renamed (atomic)
 * <inst> numbers the communicators a process created for (dir, ns), so that
 * several stores over one FileComm never read each other's files.
 *
 * A file: a fixed header (magic, seq, rank, size, op, payload bytes) then the
 * payload.  Every collective is an allgather of the payload: allreduce_i64
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
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "ddstore/comm.h"
#include "ddstore/comm_file.h"
#include "ddstore/config.h"
#include "ddstore/errors.h"
#include "ddstore/log.h"

/* ---- configuration ---------------------------------------------------- */

static const dds_config_entry_t filecomm_table[] = {
    {"DDSTORE_HANDSHAKE_TIMEOUT_S", DDS_CONFIG_DOUBLE, "120", NULL, "core",
     "seconds a method-2 join waits for the core job's records before "
     "failing with a timeout naming them (FileComm collectives: "
     "DDSTORE_COLLECTIVE_TIMEOUT_S)"},
    {"DDSTORE_FILECOMM_FSYNC", DDS_CONFIG_BOOL, "0", NULL, "core",
     "FileComm: fsync each file before publishing it (for shared file "
     "systems that need it)"},
};

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

#define FC_MAGIC "DDSFCOM1"

enum { FC_OP_ALLGATHER = 1, FC_OP_BARRIER = 2, FC_OP_ALLREDUCE = 16 };

typedef struct fc_header {
    char magic[8];
    uint64_t seq;
    uint32_t rank;
    uint32_t size;
    uint32_t op;
    uint32_t reserved;
    uint64_t bytes;
} fc_header_t;

typedef struct fc_ctx {
    char *path; /* dir/ns */
    char *ns;
    int rank, size;
    unsigned inst;
    uint64_t seq;
    double timeout_s;
    int timeout_from_env; /* timeout_s is DDSTORE_COLLECTIVE_TIMEOUT_S */
    int fsync;
    unsigned char *got; /* size flags */
    char broken[200];   /* set when a step timed out: the ranks are out of
                           step from then on, every later call fails */
} fc_ctx_t;

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

static void file_name(const fc_ctx_t *c, char *buf, size_t n, int tmp,
                      uint64_t seq, int rank)
{
    snprintf(buf, n, "%s/%sc%u.%llu.%d", c->path, tmp ? ".tmp." : "", c->inst,
             (unsigned long long)seq, rank);
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        b += w;
        n -= (size_t)w;
    }
    return 0;
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
    char tmp[PATH_MAX], fin[PATH_MAX];
    fc_header_t h;
    int fd, e;

    memset(&h, 0, sizeof h);
    memcpy(h.magic, FC_MAGIC, 8);
    h.seq = c->seq;
    h.rank = (uint32_t)c->rank;
    h.size = (uint32_t)c->size;
    h.op = op;
    h.bytes = bytes;
    file_name(c, tmp, sizeof tmp, 1, c->seq, c->rank);
    file_name(c, fin, sizeof fin, 0, c->seq, c->rank);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        e = errno;
        return dds_error(-DDS_EIO, "FileComm: cannot create %s: %s", tmp,
                         strerror(e));
    }
    (void)fchmod(fd, 0600);
    if (write_all(fd, &h, sizeof h) < 0 ||
        (bytes > 0 && write_all(fd, data, bytes) < 0) ||
        (c->fsync && fsync(fd) < 0)) {
        e = errno;
        close(fd);
        unlink(tmp);
        return dds_error(-DDS_EIO, "FileComm: cannot write %s: %s", tmp,
                         strerror(e));
    }
    if (close(fd) < 0 || rename(tmp, fin) < 0) {
        e = errno;
        unlink(tmp);
        return dds_error(-DDS_EIO, "FileComm: cannot publish %s: %s", fin,
                         strerror(e));
    }
    return 0;
}

/* 1 = read into dst, 0 = not there yet, < 0 = error. */
static int try_read(fc_ctx_t *c, int peer, uint32_t op, size_t bytes,
                    void *dst)
{
    char fn[PATH_MAX];
    fc_header_t h;
    int fd, r, e;

    file_name(c, fn, sizeof fn, 0, c->seq, peer);
    fd = open(fn, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        e = errno;
        if (e == ENOENT)
            return 0;
        return dds_error(-DDS_EIO, "FileComm: cannot open %s: %s", fn,
                         strerror(e));
    }
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

static int timeout_error(fc_ctx_t *c, uint32_t op)
{
    char list[512];
    size_t len = 0;
    int nmiss = 0, shown = 0;
    list[0] = '\0';
    for (int j = 0; j < c->size; j++) {
        if (c->got[j])
            continue;
        nmiss++;
        if (shown < 16 && len < sizeof list - 16) {
            int w = snprintf(list + len, sizeof list - len, "%s%d",
                             shown ? ", " : "", j);
            if (w > 0)
                len += (size_t)w;
            shown++;
        }
    }
    if (nmiss > shown && len < sizeof list - 8)
        snprintf(list + len, sizeof list - len, ", ...");
    snprintf(c->broken, sizeof c->broken, "%s (step %llu) timed out",
             op_name(op), (unsigned long long)c->seq);
    return dds_error(-DDS_ETIMEDOUT,
                     "FileComm %s: %s (step %llu) timed out after %g s "
                     "waiting for %d of %d ranks, which did not enter it: %s "
                     "(%s)",
                     c->path, op_name(op), (unsigned long long)c->seq,
                     c->timeout_s, nmiss, c->size, list,
                     c->timeout_from_env ? "DDSTORE_COLLECTIVE_TIMEOUT_S"
                                         : "FileComm timeout=");
}

/* The one exchange behind every collective.  recv: size*bytes, or NULL when
 * bytes == 0. */
static int exchange(fc_ctx_t *c, uint32_t op, const void *send, size_t bytes,
                    void *recv)
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
    deadline = now_s() + c->timeout_s;
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
        if (now_s() > deadline) {
            rc = timeout_error(c, op);
            goto out;
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
        file_name(c, fn, sizeof fn, 0, c->seq - 1, c->rank);
        (void)unlink(fn);
    }
out:
    /* advance even on failure: a late peer still finds our file of this
     * step, and the next call does not collide with it */
    c->seq++;
    return rc;
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
    if (rc == 0) {
        for (size_t i = 0; i < n; i++) {
            int64_t v = all[i];
            for (int j = 1; j < c->size; j++) {
                int64_t x = all[(size_t)j * n + i];
                if (op == DDS_REDUCE_MIN)
                    v = x < v ? x : v;
                else if (op == DDS_REDUCE_MAX)
                    v = x > v ? x : v;
                else
                    v = (int64_t)((uint64_t)v + (uint64_t)x); /* wraps */
            }
            inout[i] = v;
        }
    }
    free(all);
    return rc;
}

static void fc_destroy(void *ctx)
{
    fc_ctx_t *c = ctx;
    if (c == NULL)
        return;
    free(c->path);
    free(c->ns);
    free(c->got);
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

/* mkdir -p with 0700 for what we create; the result must be a writable
 * directory. */
static int make_dir(const char *path, const char *what)
{
    char buf[PATH_MAX];
    struct stat st;
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof buf)
        return dds_error(-DDS_EINVAL, "FileComm: %s path is empty or too long",
                         what);
    memcpy(buf, path, len + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0700) < 0 && errno != EEXIST) {
            int e = errno;
            return dds_error(-DDS_EINVAL, "FileComm: cannot create %s %s: %s",
                             what, buf, strerror(e));
        }
        *p = '/';
    }
    if (mkdir(buf, 0700) < 0 && errno != EEXIST) {
        int e = errno;
        return dds_error(-DDS_EINVAL, "FileComm: cannot create %s %s: %s",
                         what, buf, strerror(e));
    }
    if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
        return dds_error(-DDS_EINVAL, "FileComm: %s %s is not a directory",
                         what, path);
    if (access(path, W_OK | X_OK) < 0) {
        int e = errno;
        return dds_error(-DDS_EINVAL, "FileComm: %s %s is not writable: %s",
                         what, path, strerror(e));
    }
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

int dds_comm_file_create(const char *dir, int rank, int size, const char *ns,
                         double timeout_s, dds_comm_t *comm_p)
{
    char nsbuf[256], path[PATH_MAX];
    fc_ctx_t *c;
    int rc, fsync_on = 0, from_env = 0;

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
    if (timeout_s <= 0) {
        rc = dds_comm_timeout_s(&timeout_s);
        if (rc < 0)
            return rc;
        from_env = 1;
    }
    rc = dds_config_get_bool("DDSTORE_FILECOMM_FSYNC", &fsync_on);
    if (rc < 0)
        return rc;
    rc = make_dir(dir, "dir");
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
    c->path = strdup(path);
    c->ns = strdup(nsbuf);
    c->got = calloc((size_t)size, 1);
    if (c->path == NULL || c->ns == NULL || c->got == NULL) {
        fc_destroy(c);
        return dds_error(-DDS_ENOMEM, "FileComm: out of memory");
    }
    c->rank = rank;
    c->size = size;
    c->timeout_s = timeout_s;
    c->timeout_from_env = from_env;
    c->fsync = fsync_on;
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
