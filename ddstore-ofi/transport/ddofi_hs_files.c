/* ddstore-ofi adapter: method 2's handshake record files
 * (include/ddstore/handshake_transport.h): file names (the variable name
 * and namespace encoded), the directory, writing (a temporary file renamed
 * into place), reading (the directory and file checked before the bytes
 * are trusted, then ddofi_hs.c's parser), scanning and removing records,
 * and whether a record's writer process is still alive.  libc +
 * ddstore-core only, like the codec.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_CLOEXEC, O_DIRECTORY, O_NOFOLLOW */
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "ddstore/errors.h"
#include "ddstore/files.h"
#include "ddstore/handshake_transport.h"
#include "ddstore/log.h"
#include "ddofi_hs_internal.h"

/* ---- file names ------------------------------------------------------------ */

static int plain_byte(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
}

/* Bytes `s` takes once encoded. */
static size_t encoded_len(const char *s, size_t n)
{
    size_t need = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        need += plain_byte(ch) && !(i == 0 && ch == '.') ? 1 : 3;
    }
    return need;
}

static size_t encode_into(const char *s, size_t n, char *out)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (plain_byte(ch) && !(i == 0 && ch == '.')) {
            out[o++] = (char)ch;
        } else {
            out[o++] = '%';
            out[o++] = hex[ch >> 4];
            out[o++] = hex[ch & 15];
        }
    }
    return o;
}

int ddofi_hs_record_file_name(const char *ns, const char *name, char *out,
                            size_t cap)
{
    size_t n, nn = 0, need, o = 0;

    if (name == NULL || out == NULL)
        return dds_error(-DDS_EINVAL, "ddofi_hs_file_name: NULL argument");
    if (ns == NULL)
        ns = "";
    n = strnlen(name, (size_t)DDOFI_HS_NAME_MAX + 1);
    if (n == 0)
        return dds_error(-DDS_EINVAL,
                         "handshake record file name: the variable name is "
                         "empty");
    if (n > DDOFI_HS_NAME_MAX)
        return dds_error(-DDS_EINVAL,
                         "handshake record file name: the variable name is "
                         "longer than %d bytes",
                         DDOFI_HS_NAME_MAX);
    nn = strnlen(ns, (size_t)DDOFI_HS_NS_MAX + 1);
    if (nn > DDOFI_HS_NS_MAX)
        return dds_error(-DDS_EINVAL,
                         "handshake record file name: the namespace is "
                         "longer than %d bytes",
                         DDOFI_HS_NS_MAX);
    /* {ns}@{name}: '@' is never plain, so it separates unambiguously */
    need = (nn ? encoded_len(ns, nn) + 1 : 0) + encoded_len(name, n) +
           sizeof(DDOFI_HS_SUFFIX); /* suffix and NUL */
    if (need > cap)
        return dds_error(-DDS_EINVAL,
                         "handshake record file name for variable '%s'%s%s%s "
                         "is too long: %zu bytes, room for %zu",
                         name, nn ? " (namespace '" : "", nn ? ns : "",
                         nn ? "')" : "", need - 1, cap > 0 ? cap - 1 : 0);
    if (nn) {
        o += encode_into(ns, nn, out);
        out[o++] = '@';
    }
    o += encode_into(name, n, out + o);
    memcpy(out + o, DDOFI_HS_SUFFIX, sizeof(DDOFI_HS_SUFFIX));
    return 0;
}

int ddofi_hs_file_name(const char *name, char *out, size_t cap)
{
    return ddofi_hs_record_file_name("", name, out, cap);
}

/* ---- files ------------------------------------------------------------------ */

/* errno of a path problem (the caller's input) or of the system. */
static int path_errno_code(int e)
{
    return e == ENOTDIR || e == ENAMETOOLONG || e == ELOOP ? -DDS_EINVAL
                                                           : -DDS_EIO;
}

int ddofi_hs_dir_prepare(const char *dir)
{
    unsigned flags = 0;
    int rc = dds_dir_prepare(dir, "handshake directory", &flags);
    if (rc == 0 && (flags & DDS_DIR_GROUP_WRITABLE))
        DDS_LOG_ONCE(DDS_LOG_WARN, DDS_SUBSYS_OFI,
                     "handshake directory %s is writable by its group: its "
                     "members could replace the records; prefer a private "
                     "(0700) directory",
                     dir);
    return rc;
}

/* {dir}/{file name of ns, name}, and the file name alone; 0 or
 * -DDS_EINVAL. */
static int record_path(const char *dir, const char *ns, const char *name,
                       char *out, size_t cap, char *fname, size_t fcap)
{
    int rc, n;

    if (dir == NULL || dir[0] == '\0')
        return dds_error(-DDS_EINVAL, "handshake directory: path is empty");
    rc = ddofi_hs_record_file_name(ns, name, fname, fcap);
    if (rc < 0)
        return rc;
    if (strlen(fname) > 255)
        return dds_error(-DDS_EINVAL,
                         "handshake record file name %s of variable '%s' is "
                         "longer than 255 bytes",
                         fname, name);
    n = snprintf(out, cap, "%s/%s", dir, fname);
    if (n < 0 || (size_t)n >= cap)
        return dds_error(-DDS_EINVAL,
                         "handshake record path %s/%s is too long (PATH_MAX "
                         "%zu)",
                         dir, fname, cap);
    return 0;
}

int ddofi_hs_write(const char *dir, const ddofi_hs_record_t *r)
{
    char path[PATH_MAX], fname[NAME_MAX + 1], what[PATH_MAX + 32];
    dds_file_part_t part;
    void *buf = NULL;
    size_t len = 0;
    int rc;

    if (r == NULL)
        return dds_error(-DDS_EINVAL, "ddofi_hs_write: NULL record");
    rc = ddofi_hs_encode(r, &buf, &len);
    if (rc < 0)
        return rc;
    rc = record_path(dir, r->exchange_ns, r->name, path, sizeof path, fname,
                     sizeof fname);
    if (rc == 0) {
        snprintf(what, sizeof what, "handshake record %s", path);
        part.data = buf;
        part.bytes = len;
        /* the strict publish: fresh O_EXCL|O_NOFOLLOW temporary file, 0600,
         * fsync, rename, directory fsync */
        rc = dds_file_publish(dir, fname, &part, 1, DDS_FILE_FSYNC, what);
    }
    free(buf);
    return rc;
}

/* Read and parse one record file; `ns` NULL: any namespace (the record's
 * own must then name this file). */
static int read_file(const char *dir, const char *fname, const char *path,
                     const char *ns, const char *name, ddofi_hs_record_t *r)
{
    char what[PATH_MAX + 32], want[NAME_MAX + 1];
    unsigned char *buf = NULL;
    uint64_t size = 0;
    ssize_t got;
    int rc, fd, e;

    snprintf(what, sizeof what, "handshake record %s", path);
    /* the directory first: someone else's, or one others may write to, is
     * not trusted (-DDS_ENOENT while it does not exist yet) */
    rc = dds_dir_check(dir, "handshake directory", NULL);
    if (rc < 0)
        return rc;
    rc = dds_file_open_read(path, "handshake record", &fd, &size);
    if (rc < 0) {
        if (rc == -DDS_ENOENT)
            return dds_error(-DDS_ENOENT, "%s does not exist (yet)", what);
        return rc;
    }
    if (size > HS_MAX_FILE_BYTES) {
        close(fd);
        return dds_error(-DDS_ECORRUPT,
                         "%s: %llu bytes, more than the largest record "
                         "(%llu bytes for %d ranks)",
                         what, (unsigned long long)size,
                         (unsigned long long)HS_MAX_FILE_BYTES,
                         DDOFI_HS_MAX_RANKS);
    }
    buf = malloc((size_t)size + 1); /* +1: notices a file that grew */
    if (buf == NULL) {
        close(fd);
        return dds_error(-DDS_ENOMEM, "%s: out of memory (%llu bytes)", what,
                         (unsigned long long)size);
    }
    got = dds_fd_read_upto(fd, buf, (size_t)size + 1);
    e = errno;
    close(fd);
    if (got < 0) {
        rc = dds_error(-DDS_EIO, "%s: read: %s", what, strerror(e));
    } else if ((uint64_t)got != size) {
        rc = dds_error(-DDS_ECORRUPT,
                       "%s: changed size while being read (%llu bytes, then "
                       "%zd): written in place instead of renamed?",
                       what, (unsigned long long)size, got);
    } else {
        rc = ddofi_hs_parse_named(buf, (size_t)size, r, what);
        if (rc == 0 && strcmp(r->name, name) != 0) {
            rc = dds_error(-DDS_ECORRUPT,
                           "%s holds variable '%s', expected '%s'", what,
                           r->name, name);
        } else if (rc == 0 && ns != NULL && strcmp(r->exchange_ns, ns) != 0) {
            rc = dds_error(-DDS_ECORRUPT,
                           "%s holds namespace '%s', expected '%s'", what,
                           r->exchange_ns, ns);
        } else if (rc == 0 && ns == NULL &&
                   (ddofi_hs_record_file_name(r->exchange_ns, r->name, want,
                                            sizeof want) != 0 ||
                    strcmp(want, fname) != 0)) {
            rc = dds_error(-DDS_ECORRUPT,
                           "%s holds namespace '%s', whose records are "
                           "named %s",
                           what, r->exchange_ns, want);
        }
        if (rc != 0)
            ddofi_hs_record_clear(r);
    }
    free(buf);
    return rc;
}

int ddofi_hs_read_ns(const char *dir, const char *ns, const char *name,
                   ddofi_hs_record_t *r)
{
    char path[PATH_MAX], fname[NAME_MAX + 1];
    int rc;

    if (r == NULL)
        return dds_error(-DDS_EINVAL, "ddofi_hs_read: NULL output record");
    memset(r, 0, sizeof *r);
    if (ns == NULL)
        ns = "";
    rc = record_path(dir, ns, name, path, sizeof path, fname, sizeof fname);
    if (rc < 0)
        return rc;
    return read_file(dir, fname, path, ns, name, r);
}

int ddofi_hs_read(const char *dir, const char *name, ddofi_hs_record_t *r)
{
    return ddofi_hs_read_ns(dir, "", name, r);
}

int ddofi_hs_scan(const char *dir, const char *name, ddofi_hs_scan_fn fn,
                void *arg)
{
    char enc[NAME_MAX + 1], path[PATH_MAX];
    size_t elen, slen = sizeof(DDOFI_HS_SUFFIX) - 1;
    struct dirent *de;
    DIR *d;
    int rc = 0, n = 0;

    if (fn == NULL)
        return dds_error(-DDS_EINVAL, "ddofi_hs_scan: NULL callback");
    rc = ddofi_hs_record_file_name("", name, enc, sizeof enc);
    if (rc < 0)
        return rc;
    elen = strlen(enc); /* {name}.ddshs */
    rc = dds_dir_check(dir, "handshake directory", NULL);
    if (rc < 0)
        return rc == -DDS_ENOENT ? 0 : rc;
    d = opendir(dir);
    if (d == NULL) {
        int e = errno;
        return dds_error(-DDS_EIO, "handshake directory %s: opendir: %s", dir,
                         strerror(e));
    }
    while ((de = readdir(d)) != NULL) {
        const char *f = de->d_name;
        size_t fl = strlen(f);
        ddofi_hs_record_t rec;
        int r;
        if (fl < elen || strcmp(f + fl - elen, enc) != 0 || fl <= slen)
            continue;
        if (fl > elen && f[fl - elen - 1] != '@')
            continue; /* another variable whose name ends like this one */
        if (snprintf(path, sizeof path, "%s/%s", dir, f) >= (int)sizeof path)
            continue;
        r = read_file(dir, f, path, NULL, name, &rec);
        n++;
        rc = fn(arg, path, r, r == 0 ? &rec : NULL);
        if (r == 0)
            ddofi_hs_record_clear(&rec);
        if (rc != 0)
            break;
    }
    closedir(d);
    return rc < 0 ? rc : n;
}

int ddofi_hs_remove_ns(const char *dir, const char *ns, const char *name)
{
    char path[PATH_MAX], fname[NAME_MAX + 1];
    int rc = record_path(dir, ns, name, path, sizeof path, fname,
                         sizeof fname),
        e;
    if (rc < 0)
        return rc;
    if (unlink(path) < 0 && errno != ENOENT) {
        e = errno;
        return dds_error(path_errno_code(e),
                         "handshake record %s: cannot remove: %s", path,
                         strerror(e));
    }
    return 0;
}

int ddofi_hs_remove(const char *dir, const char *name)
{
    return ddofi_hs_remove_ns(dir, "", name);
}

/* ---- processes -------------------------------------------------------------- */

uint32_t ddofi_hs_self_pidns(void)
{
    struct stat st;
    if (stat("/proc/self/ns/pid", &st) != 0)
        return 0;
    return (uint32_t)st.st_ino;
}

uint64_t ddofi_hs_self_start_ticks(void)
{
    return dds_proc_self_start_ticks();
}

int ddofi_hs_process_alive(int32_t pid, uint64_t start_ticks)
{
    return dds_proc_alive(pid, start_ticks);
}
