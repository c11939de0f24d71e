/* ddstore-core: files in shared directories, written and read safely.
 *
 * What FileComm (comm_file.h), method 2's handshake records and
 * pyddstore.torch's {name}.meta.json have in common: a directory that two
 * jobs (or the ranks of one job) share on a shared file system, files
 * published atomically into it, and files read from it that another
 * process wrote.  The trust model (docs/security.md): the directory is
 * private to the user that runs the jobs, and what is read from it is
 * validated before it is used.
 *
 *   dds_dir_prepare      create a missing directory 0700 (and its missing
 *                        parents); refuse one that is not a directory, is
 *                        owned by another user, or that others may write to
 *   dds_dir_check        the same checks without creating anything (readers)
 *   dds_file_publish     write a file atomically: a fresh temporary name
 *                        (O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, 0600 whatever
 *                        the umask), write, optionally fsync, then rename
 *                        (or link, for an exclusive create) and fsync the
 *                        directory
 *   dds_file_open_read   open a file for reading without blocking on a FIFO
 *                        or following a symbolic link
 *                        (O_RDONLY|O_NONBLOCK|O_NOFOLLOW|O_CLOEXEC) and check
 *                        it: a regular file owned by this user that others
 *                        may not write to
 *   dds_file_read        dds_file_open_read + read it all (bounded)
 *   dds_fd_read_upto     read until n bytes or EOF (EINTR retried)
 *
 * Errors: 0 or a negative code with dds_last_error() naming the path and
 * what was wrong.  -DDS_ENOENT for a missing file (readers poll for it),
 * -DDS_EINVAL for a path or directory the caller must fix (not a directory,
 * someone else's, writable by others, a symbolic link), -DDS_EIO for a
 * system failure or a file of the wrong kind (FIFO, device, directory,
 * another owner), -DDS_EEXIST for an exclusive create that met a file.
 *
 * Thread-safety: every function is reentrant.  Processes: none of them
 * prints or exits.
 */
#ifndef DDSTORE_FILES_H
#define DDSTORE_FILES_H


#include "ddstore/visibility.h"
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- directories ---------------------------------------------------- */

/* Flags set in *flags_p by dds_dir_prepare / dds_dir_check. */
enum {
    DDS_DIR_CREATED = 1u,        /* the directory itself was created (0700) */
    DDS_DIR_GROUP_WRITABLE = 2u, /* its group may write to it: the caller
                                    should warn (members of the group could
                                    replace the files) */
};

/* Create `path` (and missing parents) with mode 0700 whatever the umask,
 * or check the existing one.  The directory (symbolic links followed) must
 * be a directory owned by the effective user, not writable by others
 * (S_IWOTH: refused, even with the sticky bit), and writable and searchable
 * by this process.  A group-writable one is accepted with
 * DDS_DIR_GROUP_WRITABLE set.  Existing parents are not checked.
 *   path     the directory; trailing '/' allowed
 *   what     its role in messages ("handshake directory", "FileComm
 *            directory"); NULL = "directory"
 *   flags_p  out, may be NULL: DDS_DIR_* flags
 * Returns 0, -DDS_EINVAL (empty/too long, not a directory, another owner,
 * writable by others, not writable), -DDS_EIO (mkdir/stat failed). */
DDS_API int dds_dir_prepare(const char *path, const char *what, unsigned *flags_p);

/* dds_dir_prepare's checks of an existing directory, creating nothing and
 * not requiring write access (a reader's).  -DDS_ENOENT when it does not
 * exist (yet). */
DDS_API int dds_dir_check(const char *path, const char *what, unsigned *flags_p);

/* ---- writing ----------------------------------------------------------- */

/* One piece of a file's contents. */
typedef struct dds_file_part {
    const void *data;
    size_t bytes;
} dds_file_part_t;

enum {
    DDS_FILE_FSYNC = 1u,     /* fsync the file before publishing it and the
                                directory after */
    DDS_FILE_EXCLUSIVE = 2u, /* create `name` only if nothing is there:
                                link(2) instead of rename(2); -DDS_EEXIST
                                when a file (or a link) is there */
};

/* Publish dir/name with the concatenation of parts[0..nparts): written to a
 * temporary file of a fresh name in `dir` (".ddtmp.<pid>.<n>"; never an
 * existing file or link), mode 0600, then renamed over dir/name (replacing
 * a file or a symbolic link there, never writing through it).  A reader
 * sees the old file, the new one or none, never a partial one.  On failure
 * the temporary file is removed.
 *   dir      existing directory (dds_dir_prepare)
 *   name     a file name (no '/'), at most 255 bytes
 *   what     what the file is, for messages (NULL = the path)
 *   flags    DDS_FILE_* flags
 * Returns 0, -DDS_EINVAL (bad name, path too long), -DDS_EEXIST
 * (DDS_FILE_EXCLUSIVE), -DDS_EIO. */
DDS_API int dds_file_publish(const char *dir, const char *name,
                     const dds_file_part_t *parts, size_t nparts,
                     unsigned flags, const char *what);

/* ---- reading ----------------------------------------------------------- */

/* Open `path` for reading and check it before anything is read: opened with
 * O_NONBLOCK (a FIFO never blocks the open) and O_NOFOLLOW (a symbolic link
 * is refused), then fstat: it must be a regular file owned by the effective
 * user and not writable by others.  The descriptor is blocking again when
 * returned (reads of a regular file never block anyway).
 *   what     what the file is, for messages (NULL = "file")
 *   fd_p     out: the descriptor (close it)
 *   size_p   out, may be NULL: its size in bytes
 * Returns 0, -DDS_ENOENT (no such file: the detail names it), -DDS_EINVAL
 * (a symbolic link, a path component not a directory), -DDS_EIO (not a
 * regular file, another owner, writable by others, open/fstat failed). */
DDS_API int dds_file_open_read(const char *path, const char *what, int *fd_p,
                       uint64_t *size_p);

/* dds_file_open_read, then read the whole file into a fresh buffer (one
 * byte more, NUL, so text can be parsed in place).  A file larger than
 * `max_bytes` fails with -DDS_ECORRUPT before it is read; one that changes
 * size while being read fails with -DDS_ECORRUPT too.
 *   buf_p, len_p  out: the contents (free()) and their length
 * Returns 0 or the codes above, -DDS_ENOMEM. */
DDS_API int dds_file_read(const char *path, const char *what, size_t max_bytes,
                  void **buf_p, size_t *len_p);

/* Reads up to n bytes from fd into buf, until EOF (retrying EINTR); the
 * count read, or -1 with errno set. */
DDS_API ssize_t dds_fd_read_upto(int fd, void *buf, size_t n);

/* ---- processes ----------------------------------------------------------- */

/* This process's start time in clock ticks since boot (/proc/self/stat
 * field 22); 0 when unknown. */
DDS_API uint64_t dds_proc_self_start_ticks(void);

/* Whether process `pid` (on this host, in this pid namespace) is alive and,
 * when start_ticks != 0, started at that time (a reused pid is another
 * process): 1 alive, 0 gone (or a zombie, or pid <= 0), -1 cannot tell. */
DDS_API int dds_proc_alive(int32_t pid, uint64_t start_ticks);

#ifdef __cplusplus
}
#endif
#endif
