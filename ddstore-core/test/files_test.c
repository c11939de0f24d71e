/* files.h: private directories, the strict atomic publish, the checked
 * non-blocking open for reading; the attacks they stop (a link planted at a
 * temporary or final name, a FIFO where a file is read, a directory or file
 * of another user's, a directory others may write to).  Tests that need a
 * second user (files owned by `nobody`) run as root only and say so. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mkdtemp, setenv */
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "ddstore/errors.h"
#include "ddstore/files.h"
#include "tmp_files.h"

#define NOBODY_UID 65534
#define NOBODY_GID 65534

/* chown to nobody; 0, or -1 after printing why the caller skips. */
static int give_to_nobody(const char *path, const char *test)
{
    if (geteuid() != 0) {
        printf("SKIP: %s: a file of another user needs root (chown to "
               "nobody)\n", test);
        return -1;
    }
    if (chown(path, NOBODY_UID, NOBODY_GID) != 0) {
        printf("SKIP: %s: chown(%s, nobody): %s (a user namespace without "
               "that uid?)\n", test, path, strerror(errno));
        return -1;
    }
    return 0;
}

static int mode_of(const char *path)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return -1;
    return (int)(st.st_mode & 07777);
}

/* ---- directories ------------------------------------------------------- */

static void test_dir_prepare(void)
{
    static const mode_t masks[] = {0, 022, 077, 0277, 0777};
    char dir[4400], sub[4500];
    unsigned flags = 99;
    mode_t old = umask(0);

    for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++) {
        umask(masks[m]);
        snprintf(dir, sizeof dir, "%s/mask%zu/a//b/", g_root, m);
        CHECK_OK(dds_dir_prepare(dir, "test directory", &flags));
        CHECK_EQ(flags, DDS_DIR_CREATED);
        umask(0);
        snprintf(sub, sizeof sub, "%s/mask%zu", g_root, m);
        CHECK_EQ(mode_of(sub), 0700);
        snprintf(sub, sizeof sub, "%s/mask%zu/a/b", g_root, m);
        CHECK_EQ(mode_of(sub), 0700);
        CHECK_OK(dds_dir_prepare(dir, "test directory", &flags));
        CHECK_EQ(flags, 0u);
        CHECK_OK(dds_dir_check(dir, NULL, NULL));
    }
    umask(0);

    /* writable by others: refused (sticky bit or not); by the group: flag */
    snprintf(dir, sizeof dir, "%s/o777", g_root);
    CHECK_OK(mkdir(dir, 0777));
    CHECK_RC(dds_dir_prepare(dir, "test directory", &flags), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), dir);
    CHECK_CONTAINS(dds_last_error(), "writable by others");
    CHECK_CONTAINS(dds_last_error(), "test directory");
    CHECK_RC(dds_dir_check(dir, NULL, NULL), -DDS_EINVAL);
    CHECK_EQ(mode_of(dir), 0777); /* never changed behind the user's back */
    snprintf(dir, sizeof dir, "%s/sticky", g_root);
    CHECK_OK(mkdir(dir, 01777));
    CHECK_RC(dds_dir_prepare(dir, NULL, NULL), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "writable by others");
    snprintf(dir, sizeof dir, "%s/g770", g_root);
    CHECK_OK(mkdir(dir, 0770));
    CHECK_OK(dds_dir_prepare(dir, NULL, &flags));
    CHECK_EQ(flags, DDS_DIR_GROUP_WRITABLE);
    CHECK_OK(dds_dir_check(dir, NULL, &flags));
    CHECK_EQ(flags, DDS_DIR_GROUP_WRITABLE);
    snprintf(dir, sizeof dir, "%s/o755", g_root);
    CHECK_OK(mkdir(dir, 0755));
    CHECK_OK(dds_dir_prepare(dir, NULL, &flags));
    CHECK_EQ(flags, 0u);
    umask(old);

    /* the path a link: ours is followed; another user's (root can make one)
     * is refused, its owner could re-point it */
    snprintf(sub, sizeof sub, "%s/link-to-o755", g_root);
    CHECK_OK(symlink(dir, sub));
    CHECK_OK(dds_dir_prepare(sub, NULL, &flags));
    CHECK_OK(dds_dir_check(sub, NULL, NULL));
    if (geteuid() == 0) {
        CHECK_OK(lchown(sub, 12345, 12345));
        CHECK_RC(dds_dir_prepare(sub, NULL, NULL), -DDS_EINVAL);
        CHECK_CONTAINS(dds_last_error(), "symbolic link owned by uid 12345");
        CHECK_RC(dds_dir_check(sub, NULL, NULL), -DDS_EINVAL);
    }

    /* not a directory; missing (check only); empty */
    snprintf(dir, sizeof dir, "%s/file", g_root);
    write_text(dir, "x");
    CHECK_RC(dds_dir_prepare(dir, NULL, NULL), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "not a directory");
    snprintf(sub, sizeof sub, "%s/below", dir);
    CHECK_RC(dds_dir_prepare(sub, NULL, NULL), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), dir);
    snprintf(dir, sizeof dir, "%s/missing", g_root);
    CHECK_RC(dds_dir_check(dir, NULL, NULL), -DDS_ENOENT);
    CHECK(access(dir, F_OK) != 0);
    CHECK_RC(dds_dir_prepare("", NULL, NULL), -DDS_EINVAL);
    CHECK_RC(dds_dir_prepare(NULL, NULL, NULL), -DDS_EINVAL);

    /* another user's directory (the attack: pre-created by someone else) */
    snprintf(dir, sizeof dir, "%s/nobodys", g_root);
    CHECK_OK(mkdir(dir, 0700));
    if (give_to_nobody(dir, "test_dir_prepare") != 0)
        return;
    CHECK_RC(dds_dir_prepare(dir, "FileComm directory", NULL), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), dir);
    CHECK_CONTAINS(dds_last_error(), "owned by uid 65534");
    CHECK_RC(dds_dir_check(dir, NULL, NULL), -DDS_EINVAL);
}

/* ---- the strict publish ---------------------------------------------- */

static void test_publish(void)
{
    char dir[4400], path[4600], target[4600], link_[4600], buf[256];
    dds_file_part_t parts[3] = {{"hello ", 6}, {NULL, 0}, {"world", 5}};
    mode_t old;

    snprintf(dir, sizeof dir, "%s/pub", g_root);
    CHECK_OK(dds_dir_prepare(dir, NULL, NULL));
    snprintf(path, sizeof path, "%s/f", dir);

    old = umask(0);
    CHECK_OK(dds_file_publish(dir, "f", parts, 3, DDS_FILE_FSYNC, NULL));
    umask(old);
    read_text(path, buf, sizeof buf);
    CHECK_STREQ(buf, "hello world");
    CHECK_EQ(mode_of(path), 0600);
    CHECK_EQ(count_files(dir, NULL, 0), 1); /* no temporary file left */

    /* replacing: the new contents, atomically */
    parts[0].data = "HELLO ";
    CHECK_OK(dds_file_publish(dir, "f", parts, 3, 0, NULL));
    read_text(path, buf, sizeof buf);
    CHECK_STREQ(buf, "HELLO world");

    /* exclusive: only when nothing is there */
    CHECK_RC(dds_file_publish(dir, "f", parts, 1, DDS_FILE_EXCLUSIVE, "claim"),
             -DDS_EEXIST);
    CHECK_CONTAINS(dds_last_error(), "exists");
    read_text(path, buf, sizeof buf);
    CHECK_STREQ(buf, "HELLO world");
    CHECK_OK(dds_file_publish(dir, "g", parts, 1, DDS_FILE_EXCLUSIVE, NULL));
    CHECK_EQ(count_files(dir, NULL, 0), 2);

    /* links planted at the temporary names this process will try next and
     * at the final name: nothing is written through them */
    snprintf(target, sizeof target, "%s/victim", g_root);
    write_text(target, "precious");
    for (int i = 0; i < 64; i++) {
        snprintf(link_, sizeof link_, "%s/.ddtmp.%ld.%d", dir, (long)getpid(),
                 i);
        (void)unlink(link_);
        CHECK_OK(symlink(target, link_));
    }
    snprintf(link_, sizeof link_, "%s/final", dir);
    CHECK_OK(symlink(target, link_));
    CHECK_OK(dds_file_publish(dir, "final", parts, 3, DDS_FILE_FSYNC, NULL));
    read_text(target, buf, sizeof buf);
    CHECK_STREQ(buf, "precious");
    read_text(link_, buf, sizeof buf); /* the link itself was replaced */
    CHECK_STREQ(buf, "HELLO world");
    {
        struct stat st;
        CHECK_OK(lstat(link_, &st));
        CHECK(S_ISREG(st.st_mode));
    }
    /* bad names, missing directory */
    CHECK_RC(dds_file_publish(dir, "a/b", parts, 1, 0, NULL), -DDS_EINVAL);
    CHECK_RC(dds_file_publish(dir, "..", parts, 1, 0, NULL), -DDS_EINVAL);
    CHECK_RC(dds_file_publish(dir, "", parts, 1, 0, NULL), -DDS_EINVAL);
    snprintf(path, sizeof path, "%s/nodir", g_root);
    CHECK_RC(dds_file_publish(path, "x", parts, 1, 0, NULL), -DDS_EIO);
    CHECK_CONTAINS(dds_last_error(), path);
}

/* ---- the checked open ---------------------------------------------------- */

/* fn() in a child that must finish within 10 s: 0 when it did and
 * returned 0. */
static int in_child_within(int (*fn)(const char *), const char *arg)
{
    pid_t pid;
    int st = 0;
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
        alarm(10);
        _exit(fn(arg) == 0 ? 0 : 1);
    }
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return -1;
    if (WIFSIGNALED(st)) {
        fprintf(stderr, "child killed by signal %d (blocked?)\n",
                WTERMSIG(st));
        return -1;
    }
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static int read_fifo(const char *path)
{
    void *buf = NULL;
    size_t len = 0;
    int rc = dds_file_read(path, "meta file", 1 << 20, &buf, &len);
    if (rc != -DDS_EIO || strstr(dds_last_error(), path) == NULL ||
        strstr(dds_last_error(), "a FIFO") == NULL) {
        fprintf(stderr, "rc %d: %s\n", rc, dds_last_error());
        return -1;
    }
    return 0;
}

static void test_open_read(void)
{
    char dir[4400], path[4600], other[4600];
    void *buf = NULL;
    size_t len = 0;
    int fd = -1;
    uint64_t size = 0;

    snprintf(dir, sizeof dir, "%s/rd", g_root);
    CHECK_OK(dds_dir_prepare(dir, NULL, NULL));

    /* a plain file: read, NUL-terminated */
    snprintf(path, sizeof path, "%s/ok", dir);
    write_text(path, "0123456789");
    CHECK_OK(dds_file_read(path, NULL, 100, &buf, &len));
    CHECK_EQ(len, 10u);
    CHECK_STREQ((char *)buf, "0123456789");
    free(buf);
    CHECK_OK(dds_file_open_read(path, NULL, &fd, &size));
    CHECK(fd >= 0);
    CHECK_EQ(size, 10u);
    CHECK_EQ(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    close(fd);
    /* too large: refused before reading */
    CHECK_RC(dds_file_read(path, "meta file", 9, &buf, &len), -DDS_ECORRUPT);
    CHECK_CONTAINS(dds_last_error(), path);
    /* missing */
    snprintf(other, sizeof other, "%s/none", dir);
    CHECK_RC(dds_file_read(other, "meta file", 9, &buf, &len), -DDS_ENOENT);
    CHECK_CONTAINS(dds_last_error(), other);

    /* a FIFO: a clear error at once, never a blocked open */
    snprintf(other, sizeof other, "%s/fifo", dir);
    CHECK_OK(mkfifo(other, 0600));
    CHECK_OK(in_child_within(read_fifo, other));

    /* a symbolic link: refused, not followed */
    snprintf(other, sizeof other, "%s/link", dir);
    CHECK_OK(symlink(path, other));
    /* a planted file, as a FIFO: DDS_EIO (DDStoreError), not DDS_EINVAL */
    CHECK_RC(dds_file_open_read(other, "record", &fd, NULL), -DDS_EIO);
    CHECK_CONTAINS(dds_last_error(), "symbolic link");
    CHECK_EQ(fd, -1);
    /* a directory */
    snprintf(other, sizeof other, "%s/sub", dir);
    CHECK_OK(mkdir(other, 0700));
    CHECK_RC(dds_file_open_read(other, "record", &fd, NULL), -DDS_EIO);
    CHECK_CONTAINS(dds_last_error(), "not a regular file");
    /* writable by others */
    snprintf(other, sizeof other, "%s/o666", dir);
    write_text(other, "x");
    CHECK_OK(chmod(other, 0666));
    CHECK_RC(dds_file_open_read(other, "record", &fd, NULL), -DDS_EIO);
    CHECK_CONTAINS(dds_last_error(), "writable by others");

    snprintf(other, sizeof other, "%s/nobodys", dir);
    write_text(other, "planted");
    if (give_to_nobody(other, "test_open_read") != 0)
        return;
    CHECK_RC(dds_file_read(other, "record", 100, &buf, &len), -DDS_EIO);
    CHECK_CONTAINS(dds_last_error(), other);
    CHECK_CONTAINS(dds_last_error(), "owned by uid 65534");
}

/* ---- processes ------------------------------------------------------------ */

static void test_proc(void)
{
    pid_t pid;
    int st;
    uint64_t me = dds_proc_self_start_ticks();
    CHECK_EQ(dds_proc_alive((int32_t)getpid(), me), 1);
    CHECK_EQ(dds_proc_alive((int32_t)getpid(), 0), 1);
    if (me != 0)
        CHECK_EQ(dds_proc_alive((int32_t)getpid(), me + 1), 0); /* reused pid */
    CHECK_EQ(dds_proc_alive(0, 0), 0);
    CHECK_EQ(dds_proc_alive(-5, 0), 0);
    pid = fork();
    if (pid == 0)
        _exit(0);
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK_EQ(dds_proc_alive((int32_t)pid, 0), 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    make_root("files");
    RUN_TEST(test_dir_prepare);
    RUN_TEST(test_publish);
    RUN_TEST(test_open_read);
    RUN_TEST(test_proc);
    if (CHECK_FAILURES() == 0)
        rm_rf(g_root);
    else
        fprintf(stderr, "kept %s\n", g_root);
    return CHECK_SUMMARY();
}
