/* ddstore-ofi: a small /dev/shm and the regions killed processes leave in it.
 *
 * Each case runs in a child with a private mount namespace and a tmpfs of
 * its own size on /dev/shm (unshare(CLONE_NEWNS), as root; without the
 * privilege the test is a SKIP with the reason):
 *
 *   tiny     8 MiB: explicit shm fails with -ENOSPC naming /dev/shm, the
 *            space and DDOFI_PROVIDER=tcp (not "no libfabric provider
 *            fits"); auto picks tcp.
 *   small    room for shm's own check (one region per CPU) plus half a
 *            region: server endpoints open until /dev/shm is used up, then
 *            -ENOSPC with the explanation - never a SIGBUS; 16 threads
 *            opening endpoints at once get the same (no thread dies).
 *   stale    regions "<pid>:<d>:<e>" of a dead process are removed when
 *            shm is first used; those of a live process, of another user,
 *            and files of other names stay.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/ddofi_internal.h"
#include "ddofi_loopback.h"
#include "ddofi_test.h"

#define MIB ((size_t)1 << 20)

static long ncpu(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n;
}

#define fparams ddofi_t_fparams

/* The shm fabric: 0, or 1 (a SKIP or failure recorded). */
static int open_shm(ddofi_fabric_t **f)
{
    ddofi_fabric_params_t p = fparams("shm");
    return ddofi_t_open(&p, f);
}

/* A tmpfs of `bytes` on /dev/shm in this process's mount namespace. */
static int shm_mount(size_t bytes)
{
    char opt[64];
    snprintf(opt, sizeof opt, "size=%zu,mode=1777", bytes);
    return mount("tmpfs", "/dev/shm", "tmpfs", 0, opt);
}

static void check_message(const char *msg)
{
    T_CONTAINS(msg, "/dev/shm");
    T_CONTAINS(msg, "MiB free");
    T_CONTAINS(msg, "DDOFI_PROVIDER=tcp"); /* the standalone library's variable */
    T_OK(strstr(msg, "no libfabric provider fits") == NULL);
}

/* ---------------- cases (each in its own process) ---------------- */

static void case_tiny(void)
{
    if (shm_mount(8 * MIB)) {
        T_OK(!"mount tmpfs");
        return;
    }
    ddofi_fabric_params_t p = fparams("shm");
    ddofi_fabric_t *f = NULL;
    int rc = ddofi_fabric_open(&p, &f);
    if (rc == 0) {
        /* A libfabric without shm's own space check: the endpoint is
         * refused instead. */
        ddofi_ep_t *ep = NULL;
        rc = ddofi_ep_open(f, &(ddofi_ep_params_t){DDOFI_EP_FIELD_FLAGS, DDOFI_EP_SERVE}, &ep);
        T_OK(ep == NULL);
        ddofi_fabric_close(f);
    }
    T_EQ_INT(rc, -ENOSPC);
    printf("   tiny, shm: %s\n", ddofi_last_error());
    check_message(ddofi_last_error());
    /* auto: shm does not fit, tcp does */
    p = fparams("auto");
    rc = ddofi_fabric_open(&p, &f);
    T_EQ_INT(rc, 0);
    if (rc == 0) {
        ddofi_fabric_attr_t at;
        ddofi_fabric_query(f, &at);
        T_OK(strncmp(at.provider, "tcp", 3) == 0);
        printf("   tiny, auto: %s\n", at.provider);
        ddofi_fabric_close(f);
    }
}

typedef struct opener {
    ddofi_fabric_t *f;
    ddofi_ep_t *ep;
    int rc;
    char msg[512];
} opener_t;

static void *open_thread(void *arg)
{
    opener_t *o = arg;
    o->rc = ddofi_ep_open(o->f, &(ddofi_ep_params_t){DDOFI_EP_FIELD_FLAGS, DDOFI_EP_SERVE},
                          &o->ep);
    snprintf(o->msg, sizeof o->msg, "%s", ddofi_last_error());
    return NULL;
}

static void case_small(void)
{
    size_t bytes = (size_t)ncpu() * 16 * MIB + 8 * MIB;
    if (shm_mount(bytes)) {
        T_OK(!"mount tmpfs");
        return;
    }
    ddofi_fabric_t *f = NULL;
    if (open_shm(&f))
        return;
    /* One after the other. */
    int rc = 0;
    enum { MAXEP = 1024 };
    ddofi_ep_t **eps = calloc(MAXEP, sizeof *eps);
    size_t n = 0, limit = bytes / (16 * MIB) + 16;
    while (n < limit && n < MAXEP &&
           (rc = ddofi_ep_open(f, &(ddofi_ep_params_t){DDOFI_EP_FIELD_FLAGS, DDOFI_EP_SERVE},
                               &eps[n])) == 0)
        n++;
    printf("   small (%zu MiB): %zu endpoints, then %s\n", bytes / MIB, n, ddofi_last_error());
    T_EQ_INT(rc, -ENOSPC);
    check_message(ddofi_last_error());
    T_OK(n >= 1 && n <= bytes / (16 * MIB));
    while (n)
        T_EQ_INT(ddofi_ep_close(eps[--n]), 0);
    /* Sixteen threads at once: each opens or gets the error. */
    opener_t o[16];
    pthread_t th[16];
    for (int i = 0; i < 16; i++) {
        o[i] = (opener_t){f, NULL, 0, ""};
        pthread_create(&th[i], NULL, open_thread, &o[i]);
    }
    size_t opened = 0, refused = 0;
    for (int i = 0; i < 16; i++) {
        pthread_join(th[i], NULL);
        if (o[i].rc == 0) {
            opened++;
        } else {
            refused += o[i].rc == -ENOSPC && strstr(o[i].msg, "/dev/shm") != NULL;
        }
    }
    printf("   small, 16 threads: %zu opened, %zu refused\n", opened, refused);
    T_EQ_INT(opened + refused, 16);
    T_OK(opened >= 1 && refused >= 1);
    for (int i = 0; i < 16; i++)
        if (o[i].ep)
            T_EQ_INT(ddofi_ep_close(o[i].ep), 0);
    free(eps);
    T_EQ_INT(ddofi_fabric_close(f), 0);
}

static int plant(const char *name, size_t bytes, size_t written)
{
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    int fd = open(path, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0)
        return -1;
    int rc = ftruncate(fd, (off_t)bytes);
    char *buf = calloc(1, written ? written : 1);
    memset(buf, 1, written);
    if (!rc && written && write(fd, buf, written) != (ssize_t)written)
        rc = -1;
    free(buf);
    close(fd);
    return rc;
}

static int present(const char *name)
{
    char path[128];
    struct stat st;
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    return lstat(path, &st) == 0;
}

static void case_stale(void)
{
    size_t bytes = (size_t)ncpu() * 16 * MIB + 96 * MIB;
    if (shm_mount(bytes)) {
        T_OK(!"mount tmpfs");
        return;
    }
    /* A pid that is gone. */
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    waitpid(dead, NULL, 0);
    if (kill(dead, 0) == 0 || errno != ESRCH) {
        T_SKIP("pid %d was reused at once", (int)dead);
        return;
    }
    char d0[64], d1[64], dother[64], dodd[64], live[64];
    snprintf(d0, sizeof d0, "%d:0:0", (int)dead);
    snprintf(d1, sizeof d1, "%d:0:1", (int)dead);
    snprintf(dother, sizeof dother, "%d:0:2", (int)dead);
    snprintf(dodd, sizeof dodd, "%d:0:x", (int)dead);
    snprintf(live, sizeof live, "%d:0:7", (int)getppid());
    T_EQ_INT(plant(d0, 16 * MIB, 4 * MIB), 0);
    T_EQ_INT(plant(d1, 16 * MIB, 0), 0);
    T_EQ_INT(plant(dother, 16 * MIB, 0), 0);
    T_EQ_INT(plant(dodd, 4096, 0), 0);
    T_EQ_INT(plant(live, 16 * MIB, 0), 0);
    int other_user = 0;
    {
        char path[128];
        snprintf(path, sizeof path, "/dev/shm/%s", dother);
        other_user = geteuid() == 0 && chown(path, 65534, 65534) == 0;
    }
    T_EQ_INT(ddofi_shm_region_pid(d0), dead);
    T_EQ_INT(ddofi_shm_region_pid(dodd), 0);
    T_EQ_INT(ddofi_shm_region_pid("12:3"), 0);
    T_EQ_INT(ddofi_shm_region_pid("12:3:4:5"), 0);
    T_EQ_INT(ddofi_shm_region_pid("0:3:4"), 0);

    ddofi_fabric_t *f = NULL;
    ddofi_ep_t *ep = NULL;
    if (open_shm(&f))
        return;
    T_EQ_INT(ddofi_ep_open(f, &(ddofi_ep_params_t){DDOFI_EP_FIELD_FLAGS, DDOFI_EP_SERVE}, &ep),
             0);
    T_OK(!present(d0));
    T_OK(!present(d1));
    T_OK(present(dodd));
    T_OK(present(live));
    if (other_user)
        T_OK(present(dother));
    else
        T_SKIP("stale region of another user: needs root to chown");
    /* This process's own region is there. */
    char mine[32];
    snprintf(mine, sizeof mine, "%d:", (int)getpid());
    unsigned char blob[DDOFI_ADDR_BLOB_MAX];
    size_t len = sizeof blob;
    T_EQ_INT(ddofi_ep_address(ep, blob, &len), 0);
    T_EQ_INT(ddofi_ep_close(ep), 0);
    T_EQ_INT(ddofi_fabric_close(f), 0);
}

/* ---------------- driver ---------------- */

typedef void (*case_fn)(void);

/* Run fn in a child with its own mount namespace; its result comes back
 * as the exit status (0 pass, 1 fail, 2 skipped, 3 no namespace). */
static void run_case(const char *name, case_fn fn)
{
    printf("== %s\n", name);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        if (unshare(CLONE_NEWNS) != 0) {
            fprintf(stderr, "SKIP: unshare(CLONE_NEWNS): %s (needs root or CAP_SYS_ADMIN)\n",
                    strerror(errno));
            _exit(3);
        }
        if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
            fprintf(stderr, "SKIP: making / private: %s\n", strerror(errno));
            _exit(3);
        }
        fn();
        fflush(stdout);
        _exit(ddofi_t_fail ? 1 : ddofi_t_skip ? 2 : 0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFSIGNALED(st)) {
        fprintf(stderr, "FAIL %s: killed by signal %d\n", name, WTERMSIG(st));
        ddofi_t_fail++;
    } else if (WEXITSTATUS(st) == 1) {
        ddofi_t_fail++;
    } else if (WEXITSTATUS(st) >= 2) {
        T_SKIP("%s: %s", name, WEXITSTATUS(st) == 3 ? "no private mount namespace here"
                                                     : "skipped inside (see above)");
    } else {
        ddofi_t_pass++;
    }
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    run_case("tiny /dev/shm", case_tiny);
    run_case("small /dev/shm", case_small);
    run_case("stale regions", case_stale);
    return ddofi_test_summary("shm_space_test");
}
