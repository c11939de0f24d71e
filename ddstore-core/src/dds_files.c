/* ddstore-core: files in shared directories (include/ddstore/files.h).
 * libc only.
 *
 * One strict way to prepare a directory, publish a file and open one for
 * reading, used by FileComm, method 2's handshake records and (through
 * pyddstore._core) pyddstore.torch's meta.json, so that no writer follows a
 * planted link or truncates a file it did not create, and no reader blocks
 * on a FIFO or trusts a file someone else could write.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_CLOEXEC, O_DIRECTORY, O_NOFOLLOW */
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "ddstore/errors.h"
#include "ddstore/files.h"

/* errno of a path problem (the caller's input) or of the system. */
static int path_code(int e)
{
    return e == ENOTDIR || e == ENAMETOOLONG || e == ELOOP ? -DDS_EINVAL
                                                           : -DDS_EIO;
}

static const char *kind_of(mode_t m)
{
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISSOCK(m))
        return "a socket";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISLNK(m))
        return "a symbolic link";
    if (S_ISREG(m))
        return "a regular file";
    return "not a regular file";
}

/* ---- directories ------------------------------------------------------- */

/* One mkdir; 1 = created (and set to 0700 whatever the umask), 0 = was
 * there, < 0 = error. */
static int mkdir_one(const char *path, const char *what)
{
    struct stat st;
    int e;
    if (mkdir(path, 0700) == 0) {
        if (chmod(path, 0700) < 0) {
            e = errno;
            return dds_error(-DDS_EIO, "%s %s: cannot set mode 0700: %s",
                             what, path, strerror(e));
        }
        return 1;
    }
    e = errno;
    if (e == EEXIST)
        return 0;
    /* some file systems say EACCES / EROFS for a directory that is there */
    if (e != ENOENT && e != ENOTDIR && stat(path, &st) == 0 &&
        S_ISDIR(st.st_mode))
        return 0;
    return dds_error(path_code(e), "%s: cannot create %s: %s", what, path,
                     strerror(e));
}

/* The checks of an existing directory; `shown` is the path as given. */
static int check_dir(const char *path, const char *shown, const char *what,
                     int need_write, int created, unsigned *flags_p)
{
    struct stat st;
    int e;
    /* A link as the last component is followed only when this user or root
     * owns it: another user's link could be re-pointed later. */
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode) &&
        st.st_uid != geteuid() && st.st_uid != 0)
        return dds_error(-DDS_EINVAL,
                         "%s %s is a symbolic link owned by uid %u, not by "
                         "this user (uid %u) or root: its owner could "
                         "re-point it; give the directory it points to, or "
                         "a link of your own",
                         what, shown, (unsigned)st.st_uid,
                         (unsigned)geteuid());
    if (stat(path, &st) < 0) {
        e = errno;
        if (e == ENOENT)
            return dds_error(-DDS_ENOENT, "%s %s does not exist", what, shown);
        return dds_error(path_code(e), "%s %s: %s", what, shown, strerror(e));
    }
    if (!S_ISDIR(st.st_mode))
        return dds_error(-DDS_EINVAL,
                         "%s %s exists and is not a directory (it is %s)",
                         what, shown, kind_of(st.st_mode));
    if (st.st_uid != geteuid())
        return dds_error(-DDS_EINVAL,
                         "%s %s is owned by uid %u, not by this user (uid "
                         "%u): its owner could replace the files in it; use "
                         "a directory of your own (mode 0700)",
                         what, shown, (unsigned)st.st_uid,
                         (unsigned)geteuid());
    if (st.st_mode & S_IWOTH)
        return dds_error(-DDS_EINVAL,
                         "%s %s (mode %04o) is writable by others: they "
                         "could replace the files in it; use a private "
                         "directory (chmod 0700)",
                         what, shown, (unsigned)(st.st_mode & 07777));
    if (access(path, need_write ? (W_OK | X_OK) : X_OK) < 0) {
        e = errno;
        return dds_error(-DDS_EINVAL, "%s %s is not %s: %s", what, shown,
                         need_write ? "writable" : "searchable", strerror(e));
    }
    if (flags_p != NULL) {
        *flags_p = created ? DDS_DIR_CREATED : 0;
        if (!created && (st.st_mode & S_IWGRP))
            *flags_p |= DDS_DIR_GROUP_WRITABLE;
    }
    return 0;
}

/* Copy `path` without trailing slashes into buf (PATH_MAX). */
static int dir_copy(const char *path, const char *what, char *buf)
{
    size_t len;
    if (path == NULL || path[0] == '\0')
        return dds_error(-DDS_EINVAL, "%s: path is empty", what);
    len = strlen(path);
    if (len >= PATH_MAX)
        return dds_error(-DDS_EINVAL,
                         "%s: path of %zu bytes is too long (PATH_MAX %d)",
                         what, len, PATH_MAX);
    memcpy(buf, path, len + 1);
    while (len > 1 && buf[len - 1] == '/')
        buf[--len] = '\0';
    return 0;
}

int dds_dir_prepare(const char *path, const char *what, unsigned *flags_p)
{
    char buf[PATH_MAX];
    int rc;

    if (what == NULL)
        what = "directory";
    if (flags_p != NULL)
        *flags_p = 0;
    rc = dir_copy(path, what, buf);
    if (rc < 0)
        return rc;
    for (char *q = buf + 1; *q != '\0'; q++) {
        if (*q != '/' || q[-1] == '/')
            continue;
        *q = '\0';
        rc = mkdir_one(buf, what);
        *q = '/';
        if (rc < 0)
            return rc;
    }
    rc = mkdir_one(buf, what);
    if (rc < 0)
        return rc;
    return check_dir(buf, path, what, 1, rc == 1, flags_p);
}

int dds_dir_check(const char *path, const char *what, unsigned *flags_p)
{
    char buf[PATH_MAX];
    int rc;
    if (what == NULL)
        what = "directory";
    if (flags_p != NULL)
        *flags_p = 0;
    rc = dir_copy(path, what, buf);
    if (rc < 0)
        return rc;
    return check_dir(buf, path, what, 0, 0, flags_p);
}

/* ---- writing ----------------------------------------------------------- */

static int write_all(int fd, const unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* fsync a directory; file systems that cannot (EINVAL, ENOTSUP, EROFS)
 * pass. */
static int fsync_dir(const char *dir, const char *what)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int e;
    if (fd < 0) {
        e = errno;
        return dds_error(-DDS_EIO, "%s: cannot open directory %s to fsync: %s",
                         what, dir, strerror(e));
    }
    if (fsync(fd) < 0 && errno != EINVAL && errno != ENOTSUP &&
        errno != EROFS) {
        e = errno;
        close(fd);
        return dds_error(-DDS_EIO, "%s: fsync of directory %s: %s", what, dir,
                         strerror(e));
    }
    close(fd);
    return 0;
}

static _Atomic unsigned g_tmp_seq;

int dds_file_publish(const char *dir, const char *name,
                     const dds_file_part_t *parts, size_t nparts,
                     unsigned flags, const char *what)
{
    char path[PATH_MAX], tmp[PATH_MAX];
    int fd = -1, rc, e, n;

    if (dir == NULL || dir[0] == '\0' || name == NULL)
        return dds_error(-DDS_EINVAL, "dds_file_publish: %s is empty",
                         name == NULL ? "the file name" : "the directory");
    if (name[0] == '\0' || strchr(name, '/') != NULL ||
        strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
        strlen(name) > 255)
        return dds_error(-DDS_EINVAL,
                         "dds_file_publish: '%.300s' is not a file name",
                         name);
    if (nparts > 0 && parts == NULL)
        return dds_error(-DDS_EINVAL, "dds_file_publish: NULL parts");
    n = snprintf(path, sizeof path, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof path)
        return dds_error(-DDS_EINVAL, "%s/%s: path too long (PATH_MAX %d)",
                         dir, name, PATH_MAX);
    if (what == NULL)
        what = path;

    /* A fresh name: O_EXCL fails on anything there (a file, a link, a
     * FIFO), so nothing planted is ever opened or written through. */
    for (int tries = 0; fd < 0; tries++) {
        unsigned seq = atomic_fetch_add(&g_tmp_seq, 1u);
        n = snprintf(tmp, sizeof tmp, "%s/.ddtmp.%ld.%u", dir, (long)getpid(),
                     seq);
        if (n < 0 || (size_t)n >= sizeof tmp)
            return dds_error(-DDS_EINVAL, "%s: directory %s: path too long",
                             what, dir);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  0600);
        if (fd < 0 && (errno != EEXIST || tries >= 100)) {
            e = errno;
            return dds_error(path_code(e),
                             "%s: cannot create temporary file %s: %s", what,
                             tmp, strerror(e));
        }
    }
    /* 0600 whatever the umask */
    if (fchmod(fd, 0600) < 0)
        goto fail_io;
    for (size_t i = 0; i < nparts; i++)
        if (parts[i].bytes > 0 &&
            write_all(fd, (const unsigned char *)parts[i].data,
                      parts[i].bytes) < 0)
            goto fail_io;
    if ((flags & DDS_FILE_FSYNC) && fsync(fd) < 0)
        goto fail_io;
    rc = close(fd);
    fd = -1;
    if (rc < 0)
        goto fail_io;
    if (flags & DDS_FILE_EXCLUSIVE) {
        if (link(tmp, path) < 0) {
            e = errno;
            (void)unlink(tmp);
            if (e == EEXIST)
                return dds_error(-DDS_EEXIST, "%s: %s exists", what, path);
            return dds_error(path_code(e), "%s: cannot create %s: %s", what,
                             path, strerror(e));
        }
        (void)unlink(tmp);
    } else if (rename(tmp, path) < 0) {
        e = errno;
        (void)unlink(tmp);
        return dds_error(path_code(e), "%s: cannot rename %s to %s: %s", what,
                         tmp, path, strerror(e));
    }
    if (flags & DDS_FILE_FSYNC)
        return fsync_dir(dir, what);
    return 0;

fail_io:
    e = errno;
    if (fd >= 0)
        close(fd);
    (void)unlink(tmp);
    return dds_error(-DDS_EIO, "%s: cannot write %s: %s", what, tmp,
                     strerror(e));
}

/* ---- reading ----------------------------------------------------------- */

int dds_file_open_read(const char *path, const char *what, int *fd_p,
                       uint64_t *size_p)
{
    struct stat st;
    int fd, e, fl;

    if (what == NULL)
        what = "file";
    if (fd_p == NULL || path == NULL || path[0] == '\0')
        return dds_error(-DDS_EINVAL, "dds_file_open_read: %s",
                         fd_p == NULL ? "NULL output" : "empty path");
    *fd_p = -1;
    fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        e = errno;
        if (e == ENOENT)
            return dds_error(-DDS_ENOENT, "%s %s does not exist", what, path);
        if (e == ELOOP) /* a planted file, like a FIFO: DDS_EIO */
            return dds_error(-DDS_EIO,
                             "%s %s is a symbolic link: refused (links are "
                             "never followed in a shared directory)",
                             what, path);
        return dds_error(path_code(e), "%s %s: cannot open: %s", what, path,
                         strerror(e));
    }
    if (fstat(fd, &st) < 0) {
        e = errno;
        close(fd);
        return dds_error(-DDS_EIO, "%s %s: fstat: %s", what, path,
                         strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return dds_error(-DDS_EIO,
                         "%s %s is not a regular file (it is %s): refused",
                         what, path, kind_of(st.st_mode));
    }
    if (st.st_uid != geteuid()) {
        close(fd);
        return dds_error(-DDS_EIO,
                         "%s %s is owned by uid %u, not by this user (uid "
                         "%u): refused (only files this user wrote are "
                         "trusted)",
                         what, path, (unsigned)st.st_uid,
                         (unsigned)geteuid());
    }
    if (st.st_mode & S_IWOTH) {
        close(fd);
        return dds_error(-DDS_EIO,
                         "%s %s (mode %04o) is writable by others: refused",
                         what, path, (unsigned)(st.st_mode & 07777));
    }
    fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        e = errno;
        close(fd);
        return dds_error(-DDS_EIO, "%s %s: fcntl: %s", what, path,
                         strerror(e));
    }
    if (size_p != NULL)
        *size_p = st.st_size < 0 ? 0 : (uint64_t)st.st_size;
    *fd_p = fd;
    return 0;
}

ssize_t dds_fd_read_upto(int fd, void *buf, size_t n)
{
    unsigned char *p = buf;
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

int dds_file_read(const char *path, const char *what, size_t max_bytes,
                  void **buf_p, size_t *len_p)
{
    unsigned char *buf;
    uint64_t size = 0;
    ssize_t got;
    int fd, rc, e;

    if (what == NULL)
        what = "file";
    if (buf_p == NULL || len_p == NULL)
        return dds_error(-DDS_EINVAL, "dds_file_read: NULL output");
    *buf_p = NULL;
    *len_p = 0;
    rc = dds_file_open_read(path, what, &fd, &size);
    if (rc < 0)
        return rc;
    if (size > (uint64_t)max_bytes || size >= (uint64_t)SIZE_MAX) {
        close(fd);
        return dds_error(-DDS_ECORRUPT,
                         "%s %s: %llu bytes, more than the %zu bytes such a "
                         "file can have",
                         what, path, (unsigned long long)size, max_bytes);
    }
    buf = malloc((size_t)size + 1); /* +1: notices a file that grew */
    if (buf == NULL) {
        close(fd);
        return dds_error(-DDS_ENOMEM, "%s %s: out of memory (%llu bytes)",
                         what, path, (unsigned long long)size);
    }
    got = dds_fd_read_upto(fd, buf, (size_t)size + 1);
    e = errno;
    close(fd);
    if (got < 0) {
        free(buf);
        return dds_error(-DDS_EIO, "%s %s: read: %s", what, path,
                         strerror(e));
    }
    if ((uint64_t)got != size) {
        free(buf);
        return dds_error(-DDS_ECORRUPT,
                         "%s %s: changed size while being read (%llu bytes, "
                         "then %zd): written in place instead of renamed?",
                         what, path, (unsigned long long)size, got);
    }
    buf[size] = '\0';
    *buf_p = buf;
    *len_p = (size_t)size;
    return 0;
}

/* ---- processes ------------------------------------------------------------ */

/* /proc/<who>/stat: the state (field 3) and the start time (field 22).
 * Field 2 (comm) is in parentheses and may hold spaces and ')': parse after
 * the last ')'.  0, -ENOENT (no such file), or -1 (other failure). */
static int read_proc_stat(const char *path, char *state_p, uint64_t *start_p)
{
    char buf[4096];
    const char *s;
    char *end;
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    unsigned long long v;

    if (fd < 0)
        return errno == ENOENT || errno == ESRCH ? -ENOENT : -1;
    n = dds_fd_read_upto(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return n == 0 ? -ENOENT : -1; /* an empty file: the task is gone */
    buf[n] = '\0';
    s = strrchr(buf, ')');
    if (s == NULL || s[1] != ' ' || s[2] == '\0')
        return -1;
    s += 2;
    *state_p = *s;
    /* s is at field 3; field 22 is 19 fields further */
    for (int f = 3; f < 22; f++) {
        s = strchr(s, ' ');
        if (s == NULL)
            return -1;
        s++;
    }
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || (*end != ' ' && *end != '\n' && *end != '\0'))
        return -1;
    *start_p = (uint64_t)v;
    return 0;
}

uint64_t dds_proc_self_start_ticks(void)
{
    char state;
    uint64_t t = 0;
    if (read_proc_stat("/proc/self/stat", &state, &t) < 0)
        return 0;
    return t;
}

int dds_proc_alive(int32_t pid, uint64_t start_ticks)
{
    char path[64], state = '?';
    uint64_t t = 0;
    int rc;

    if (pid <= 0)
        return 0; /* no process has such a pid (and kill() would mean a group) */
    if (kill((pid_t)pid, 0) < 0) {
        if (errno == ESRCH)
            return 0;
        if (errno != EPERM)
            return -1;
        /* EPERM: it exists, it is someone else's */
    }
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    rc = read_proc_stat(path, &state, &t);
    if (rc == -ENOENT) {
        /* gone since kill(), or no /proc at all */
        if (access("/proc/self/stat", R_OK) == 0)
            return 0;
        return start_ticks != 0 ? -1 : 1;
    }
    if (rc < 0)
        return start_ticks != 0 ? -1 : 1;
    if (state == 'Z' || state == 'X' || state == 'x')
        return 0; /* exited, not yet reaped */
    if (start_ticks != 0 && t != start_ticks)
        return 0; /* the pid was reused */
    return 1;
}
