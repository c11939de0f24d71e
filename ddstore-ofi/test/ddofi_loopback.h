/* Test-only helpers shared by the loopback tests (processes forked on this
 * host, exchanging blobs through pipes): whole-buffer pipe I/O and the
 * fabric parameters of a provider on 127.0.0.1 / this node.  Header-only,
 * static inline functions. */
#ifndef DDOFI_LOOPBACK_H
#define DDOFI_LOOPBACK_H

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddofi_test.h"
#include "ddstore/ofi.h"

/* Read / write exactly n bytes (EINTR retried).  0 or -1. */
static inline int ddofi_t_rd(int fd, void *p, size_t n)
{
    char *c = p;
    while (n) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

static inline int ddofi_t_wr(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t r = write(fd, c, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

/* `prov` on this node only (sockets on 127.0.0.1). */
static inline ddofi_fabric_params_t ddofi_t_fparams(const char *prov)
{
    ddofi_fabric_params_t p = {0};
    p.field_mask = DDOFI_FABRIC_FIELD_PROVIDER | DDOFI_FABRIC_FIELD_LOCAL_ONLY |
                   DDOFI_FABRIC_FIELD_SINGLE_NODE;
    p.provider = prov;
    p.local_only = 1;
    p.single_node = 1;
    return p;
}

/* Open a fabric for a test: 0, or 1 when the provider does not exist here
 * (a SKIP with the reason) or opening failed (a failure recorded). */
static inline int ddofi_t_open(const ddofi_fabric_params_t *p, ddofi_fabric_t **f_p)
{
    int rc = ddofi_fabric_open(p, f_p);
    if (rc == -DDOFI_ENOPROV) {
        T_SKIP("provider %s not available here: %s", p->provider, ddofi_last_error());
        return 1;
    }
    T_EQ_INT(rc, 0);
    return rc != 0;
}

/* A forked child with two pipes: it runs main_fn(arg, out_fd, cmd_fd) and
 * exits with its return value; the parent reads the child's first `hello`
 * bytes (its blobs) into hello.  Returns the pid (with *rep_r: the child's
 * output, *cmd_w: its commands) or -1 (the child reaped). */
static inline pid_t ddofi_t_spawn(int (*main_fn)(void *arg, int out_fd, int cmd_fd), void *arg,
                                  void *hello, size_t hello_len, int *rep_r, int *cmd_w)
{
    int up[2], down[2];
    if (pipe(up) || pipe(down))
        return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        _exit(main_fn(arg, up[1], down[0]));
    }
    close(up[1]);
    close(down[0]);
    *rep_r = up[0];
    *cmd_w = down[1];
    if (ddofi_t_rd(*rep_r, hello, hello_len)) {
        waitpid(pid, NULL, 0);
        close(up[0]);
        close(down[1]);
        return -1;
    }
    return pid;
}

#endif
