/* ddstore's C tests: a temporary directory of the test program's own and
 * small file helpers (files_test, comm_file_test, ddstore-ofi's
 * handshake_test).
 *
 *   make_root(tag)             g_root = a new directory
 *                              $TEST_TMPDIR/<tag>XXXXXX (/tmp without
 *                              TEST_TMPDIR); exits 2 if it cannot
 *   rm_rf(path)                removes a tree (says so when it cannot)
 *   count_files(path, first, cap)
 *                              entries other than . and .. in a directory,
 *                              -1 when it cannot be opened; the first one's
 *                              name goes to `first` when given
 *   write_text(path, text)     a file with that text (a failed check when
 *                              it cannot be created)
 *   read_text(path, out, cap)  a file's text, "" when it cannot be read
 */
#ifndef DDSTORE_TEST_TMP_FILES_H
#define DDSTORE_TEST_TMP_FILES_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static char g_root[4096];

static inline void make_root(const char *tag)
{
    const char *t = getenv("TEST_TMPDIR");
    snprintf(g_root, sizeof g_root, "%s/%sXXXXXX", t && t[0] ? t : "/tmp",
             tag);
    if (mkdtemp(g_root) == NULL) {
        perror("mkdtemp");
        exit(2);
    }
}

static inline void rm_rf(const char *path)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", path);
}

static inline int count_files(const char *path, char *first, size_t cap)
{
    DIR *d = opendir(path);
    struct dirent *de;
    int n = 0;
    if (d == NULL)
        return -1;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (n == 0 && first != NULL)
            snprintf(first, cap, "%s", de->d_name);
        n++;
    }
    closedir(d);
    return n;
}

static inline void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static inline void read_text(const char *path, char *out, size_t cap)
{
    FILE *f = fopen(path, "r");
    size_t n = 0;
    out[0] = '\0';
    if (f) {
        n = fread(out, 1, cap - 1, f);
        out[n] = '\0';
        fclose(f);
    }
}

#endif
