/* The variables' lives as forked processes see them (dds_store_life.c):
 * a child forked while a variable exists fails its reads of it once the
 * ranks freed it (var_free, free), whether or not the name was added again,
 * with -DDS_ESTALE naming the variable, never the old rows as if current
 * nor the next variable's; the other variables still read there; a child
 * forked after the rebuild reads the new rows; a child that destroys its
 * copy of the store ends none of its parent's variables.
 *
 * Two ranks of a fake world (threads); rank 0 forks the children.  In the
 * fake world a child reads its own copy of every shard, so without the
 * lives it would read the old rows silently. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "store_world.h"

#define NROWS 5
#define DISP 3

static void shard_of(int rank, int64_t gen, int64_t *out)
{
    for (int i = 0; i < NROWS; i++)
        for (int j = 0; j < DISP; j++)
            out[i * DISP + j] = gen * 1000000 + (rank * NROWS + i) * 100 + j;
}

static int add(dds_store_t *s, const char *name, int rank, int64_t gen)
{
    int64_t rows[NROWS * DISP];
    shard_of(rank, gen, rows);
    return dds_store_var_add(s, name, rows, NROWS, DISP, sizeof(int64_t),
                             DDS_DTYPE_INT64, NULL, DDS_ADD_COPY);
}

/* Every row of `name` (both ranks'): 0 when they are generation gen's, 1
 * when other rows came back, or the read's error code. */
static int read_all(dds_store_t *s, const char *name, int64_t gen)
{
    int64_t got[2 * NROWS * DISP], want[2 * NROWS * DISP];
    int64_t idx[2 * NROWS];
    for (int i = 0; i < 2 * NROWS; i++)
        idx[i] = 2 * NROWS - 1 - i; /* the peer's rows first */
    dds_buf_t b = buf_of(got, 2 * NROWS, DISP * sizeof(int64_t),
                         DDS_DTYPE_INT64, sizeof(int64_t));
    int rc = dds_store_get_batch(s, NULL, name, &b, idx, 2 * NROWS);
    if (rc != 0)
        return rc;
    for (int r = 0; r < 2; r++)
        shard_of(r, gen, want + r * NROWS * DISP);
    for (int i = 0; i < 2 * NROWS; i++)
        if (memcmp(got + i * DISP, want + idx[i] * DISP, DISP * sizeof(int64_t)))
            return 1;
    return 0;
}

enum { CHILD_STALE, CHILD_STALE_BOTH, CHILD_READS_X2, CHILD_READS_X1, CHILD_DESTROYS };

/* Fork a child that waits for a byte on *go_p (when go_p is not NULL),
 * then does `what` and exits 0 when it went as expected. */
static pid_t child(dds_store_t *s, int what, int *go_p)
{
    int p[2] = {-1, -1};
    if (go_p != NULL && pipe(p) != 0)
        return -1;
    pid_t pid = fork();
    if (pid != 0) {
        if (go_p != NULL) {
            close(p[0]);
            *go_p = p[1];
        }
        return pid;
    }
    char c;
    int code = 0;
    if (go_p != NULL) {
        close(p[1]);
        if (read(p[0], &c, 1) != 1)
            _exit(90);
    }
    switch (what) {
    case CHILD_STALE:
    case CHILD_STALE_BOTH: {
        int rc = read_all(s, "x", 1);
        if (rc != -DDS_ESTALE) {
            fprintf(stderr, "child: read of the freed x gave %d (%s), want "
                    "-DDS_ESTALE\n", rc, rc < 0 ? dds_last_error() : "rows");
            code = 1;
        } else if (!strstr(dds_last_error(), "'x'") ||
                   !strstr(dds_last_error(), "freed")) {
            fprintf(stderr, "child: message: %s\n", dds_last_error());
            code = 2;
        } else if ((rc = read_all(s, "z", 3)) !=
                   (what == CHILD_STALE ? 0 : -DDS_ESTALE)) {
            fprintf(stderr, "child: z: %d %s\n", rc, dds_last_error());
            code = 3;
        }
        break;
    }
    case CHILD_READS_X2:
    case CHILD_READS_X1: {
        int rc = read_all(s, "x", what == CHILD_READS_X2 ? 2 : 1);
        if (rc != 0) {
            fprintf(stderr, "child: read of x: %d %s\n", rc,
                    rc < 0 ? dds_last_error() : "other rows");
            code = 4;
        }
        break;
    }
    case CHILD_DESTROYS:
        dds_store_destroy_local(s);
        break;
    }
    _exit(code);
}

static int status_of(pid_t pid)
{
    int st = 0;
    if (pid <= 0 || waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static void lives_rank(fake_world_t *w, int rank, void *arg)
{
    const int readd_x = *(const int *)arg;
    dds_store_t *s = NULL;
    int go = -1;
    pid_t stale = -1;

    CHECK_OK(fw_store_create(w, rank, &s));
    if (s == NULL)
        return;
    CHECK_OK(add(s, "x", rank, 1));
    CHECK_OK(add(s, "z", rank, 3));
    if (rank == 0) {
        /* a child that destroys its copy of the store ends nothing of ours */
        CHECK_EQ(status_of(child(s, CHILD_DESTROYS, NULL)), 0);
        CHECK_EQ(status_of(child(s, CHILD_READS_X1, NULL)), 0);
        stale = child(s, readd_x ? CHILD_STALE : CHILD_STALE_BOTH, &go);
        CHECK(stale > 0);
    }
    barrier(s);
    if (readd_x) {
        CHECK_OK(dds_store_var_free(s, "x"));
    } else { /* everything, z too (added again: the child's z is stale) */
        CHECK_OK(dds_store_free(s));
        CHECK_OK(add(s, "z", rank, 3));
    }
    CHECK_OK(add(s, readd_x ? "x" : "y", rank, 2));
    barrier(s);
    if (rank == 0) {
        CHECK_EQ(write(go, "g", 1), 1);
        close(go);
        CHECK_EQ(status_of(stale), 0);
        if (readd_x) /* forked after the rebuild */
            CHECK_EQ(status_of(child(s, CHILD_READS_X2, NULL)), 0);
    }
    barrier(s);
    dds_store_destroy(s);
}

static void test_var_free_then_add_again(void)
{
    int readd_x = 1;
    run_world(2, lives_rank, &readd_x, 0, 0);
}

static void test_free_then_add_another(void)
{
    int readd_x = 0;
    run_world(2, lives_rank, &readd_x, 0, 0);
}

int main(void)
{
    RUN_TEST(test_var_free_then_add_again);
    RUN_TEST(test_free_then_add_another);
    return CHECK_SUMMARY();
}
