/* ddstore-mpi: MPI lifetime helpers, error translation and the MPI
 * communicator (core's comm.h over an MPI_Comm_dup).
 *
 * Bazel generates ddstore/mpi_version.h from VERSION (#define DDMPI_VERSION
 * "x.y.z"); builds without it pass -DDDMPI_VERSION='"x.y.z"'. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* clock_gettime, nanosleep */
#endif
#if defined(__has_include)
#if __has_include("ddstore/mpi_version.h")
#include "ddstore/mpi_version.h"
#endif
#endif

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddstore/errors.h"
#include "ddstore/log.h"
#include "ddstore/mpi.h"
#include "ddmpi_internal.h"

/* ---- lifetime ----------------------------------------------------------- */

static pthread_mutex_t ddmpi_init_lock = PTHREAD_MUTEX_INITIALIZER;
static int ddmpi_inited_by_us;           /* guarded by ddmpi_init_lock */

static pthread_mutex_t ddmpi_serial_mutex = PTHREAD_MUTEX_INITIALIZER;

int ddmpi_finalized(void)
{
    int fin = 0;
    MPI_Finalized(&fin);
    return fin;
}

static int ddmpi_initialized(void)
{
    int init = 0;
    MPI_Initialized(&init);
    return init;
}

int ddmpi_init(int *provided_p, int *initialized_by_us_p)
{
    int provided = MPI_THREAD_SINGLE;
    int rc = 0;

    pthread_mutex_lock(&ddmpi_init_lock);
    if (ddmpi_finalized()) {
        rc = dds_error(-DDS_EIO, "MPI is already finalized; it cannot be "
                       "initialised again (create method-0 stores and MPI "
                       "communicators before MPI_Finalize)");
        goto out;
    }
    if (!ddmpi_initialized()) {
        int mrc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        if (mrc != MPI_SUCCESS) {
            rc = ddmpi_translate_error(mrc, "MPI_Init_thread");
            goto out;
        }
        ddmpi_inited_by_us = 1;
        DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_MPI,
                "MPI initialised by ddstore, thread level %d (MULTIPLE=%d)",
                provided, MPI_THREAD_MULTIPLE);
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided_p)
        *provided_p = provided;
    if (initialized_by_us_p)
        *initialized_by_us_p = ddmpi_inited_by_us;
out:
    pthread_mutex_unlock(&ddmpi_init_lock);
    return rc;
}

int ddmpi_finalize_if_ours(void)
{
    int rc = 0;

    pthread_mutex_lock(&ddmpi_init_lock);
    if (ddmpi_inited_by_us && ddmpi_initialized() && !ddmpi_finalized()) {
        int mrc = MPI_Finalize();
        if (mrc != MPI_SUCCESS)
            rc = ddmpi_translate_error(mrc, "MPI_Finalize");
    }
    pthread_mutex_unlock(&ddmpi_init_lock);
    return rc;
}

#ifndef DDMPI_VERSION
#define DDMPI_VERSION "0.0.0-unknown"
#endif

const char *ddmpi_version(void)
{
    return DDMPI_VERSION;
}

int ddmpi_translate_error(int mpi_rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING + 1];
    int len = 0, cls = mpi_rc, rc;

    if (mpi_rc == MPI_SUCCESS)
        return 0;
    if (!what)
        what = "MPI call";
    msg[0] = '\0';
    /* MPI_Error_class/_string are not guaranteed after MPI_Finalize. */
    if (ddmpi_initialized() && !ddmpi_finalized()) {
        if (MPI_Error_class(mpi_rc, &cls) != MPI_SUCCESS)
            cls = mpi_rc;
        if (MPI_Error_string(mpi_rc, msg, &len) != MPI_SUCCESS)
            len = 0;
        msg[len < 0 ? 0 : (len > MPI_MAX_ERROR_STRING ? MPI_MAX_ERROR_STRING : len)] = '\0';
    }
    switch (cls) {
    case MPI_ERR_NO_MEM:
        rc = -DDS_ENOMEM;
        break;
    case MPI_ERR_RMA_RANGE:
        rc = -DDS_ERANGE;
        break;
    default:
        rc = -DDS_EIO;
        break;
    }
    if (msg[0])
        return dds_error(rc, "%s: %s (MPI error class %d)", what, msg, cls);
    return dds_error(rc, "%s failed (MPI error code %d)", what, mpi_rc);
}

/* ---- serialisation below MPI_THREAD_MULTIPLE ----------------------------- */

int ddmpi_need_serial(void)
{
    int provided = MPI_THREAD_SINGLE;

    MPI_Query_thread(&provided);
    if (provided >= MPI_THREAD_MULTIPLE)
        return 0;
    DDS_LOG_ONCE(DDS_LOG_WARN, DDS_SUBSYS_MPI,
                 "MPI provides thread level %d, not MPI_THREAD_MULTIPLE (%d): "
                 "method-0 reads from several threads are serialised on a "
                 "lock (initialise MPI with MPI_THREAD_MULTIPLE to read "
                 "concurrently)", provided, MPI_THREAD_MULTIPLE);
    return 1;
}

void ddmpi_serial_lock(int serial)
{
    if (serial)
        pthread_mutex_lock(&ddmpi_serial_mutex);
}

void ddmpi_serial_unlock(int serial)
{
    if (serial)
        pthread_mutex_unlock(&ddmpi_serial_mutex);
}

/* ---- the communicator ---------------------------------------------------- */

typedef struct ddmpi_comm {
    MPI_Comm comm;      /* our duplicate, or the caller's (borrowed)       */
    int borrowed;       /* ddmpi_comm_borrow: never freed here             */
    int serial;         /* MPI below THREAD_MULTIPLE: take the serial lock */
    double timeout_s;   /* DDSTORE_COLLECTIVE_TIMEOUT_S at creation        */
    double warn_s;      /* DDSTORE_COLLECTIVE_WARN_S at creation           */
    char broken[96];    /* set when a collective timed out: what it was    */
    void *scratch;      /* the buffers of the collective in flight         */
    size_t scratch_bytes;
} ddmpi_comm_t;

/* After MPI_Finalize the communicator is gone with MPI: -DDS_EFREED, so that
 * the store's free() can tell "peers are gone" from a real failure. */
static int ddmpi_comm_check_live(const char *what)
{
    if (ddmpi_finalized())
        return dds_error(-DDS_EFREED, "%s: MPI is already finalized", what);
    return 0;
}

static double ddmpi_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Buffers of a nonblocking collective: the communicator's scratch memory,
 * never the caller's.  MPI cannot cancel a collective request, so when one
 * times out its buffers must stay valid for as long as the process lives (a
 * late peer may still complete it): a timed-out communicator refuses every
 * later collective and never frees its scratch memory. */
typedef struct ddmpi_coll {
    MPI_Request req;
    void *buf;
} ddmpi_coll_t;

static void *ddmpi_scratch(ddmpi_comm_t *c, size_t bytes)
{
    if (bytes > c->scratch_bytes) {
        void *p = realloc(c->scratch, bytes);
        if (p == NULL)
            return NULL;
        c->scratch = p;
        c->scratch_bytes = bytes;
    }
    return c->scratch;
}

/* Complete c's pending request `co` within the communicator's timeout:
 * MPI_Test in a loop (progress), spinning for the first ~50 us, then
 * yielding, then sleeping with a backoff up to 1 ms so that a rank waiting
 * for a late peer does not take a core from it.  On timeout the
 * communicator is marked out of step (every later collective fails at once)
 * and -DDS_ETIMEDOUT is returned; the request and its buffer are leaked. */
/* DDSTORE_COLLECTIVE_WARN_S into a wait: said once, then the wait goes on.
 * MPI does not tell which ranks have not entered a collective. */
static void ddmpi_comm_warn(ddmpi_comm_t *c, const char *what, double waited)
{
    int rank = 0, size = 0;
    const char *call = dds_comm_what();
    MPI_Comm_rank(c->comm, &rank);
    MPI_Comm_size(c->comm, &size);
    DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_MPI,
            "rank %d of %d has waited %.0f s in %s%s%s: not every rank has entered it "
            "(a rank skipped the call, or is stuck or much slower; MPI cannot tell "
            "which); still waiting, up to %g s in all (DDSTORE_COLLECTIVE_WARN_S, "
            "DDSTORE_COLLECTIVE_TIMEOUT_S)",
            rank, size, waited, what, call[0] ? " of the store's " : "", call,
            c->timeout_s);
}

static int ddmpi_comm_wait(ddmpi_comm_t *c, ddmpi_coll_t *co, const char *what)
{
    const double t0 = ddmpi_now_s();
    const double deadline = t0 + c->timeout_s; /* inf: never */
    double warn_at = t0 + c->warn_s;           /* inf: never */
    long sleep_ns = 20000;
    unsigned spins = 0;
    int done = 0, mrc;

    for (;;) {
        ddmpi_serial_lock(c->serial);
        mrc = MPI_Test(&co->req, &done, MPI_STATUS_IGNORE);
        ddmpi_serial_unlock(c->serial);
        if (mrc != MPI_SUCCESS)
            return ddmpi_translate_error(mrc, what);
        if (done)
            return 0;
        spins++;
        if ((spins & 63) != 0)
            continue;
        double now = ddmpi_now_s();
        if (now > deadline) {
            int size = 0;
            MPI_Comm_size(c->comm, &size);
            snprintf(c->broken, sizeof c->broken, "%s", what);
            DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_MPI,
                    "%s timed out after %g s; the request is abandoned and "
                    "this communicator refuses further collectives",
                    what, c->timeout_s);
            return dds_error(-DDS_ETIMEDOUT,
                             "%s timed out after %g s: not every one of the "
                             "%d ranks entered it (a rank skipped the call, "
                             "or is stuck or much slower; "
                             "DDSTORE_COLLECTIVE_TIMEOUT_S)",
                             what, c->timeout_s, size);
        }
        if (now > warn_at) {
            ddmpi_comm_warn(c, what, now - t0);
            warn_at = INFINITY;
        }
        if (now - t0 < 50e-6)
            continue;
        if (now - t0 < 2e-3) {
            sched_yield();
            continue;
        }
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 1000000)
            sleep_ns *= 2;
    }
}

/* The checks every collective makes first: MPI alive, not out of step. */
static int ddmpi_comm_usable(ddmpi_comm_t *c, const char *what)
{
    int rc = ddmpi_comm_check_live(what);
    if (rc != 0)
        return rc;
    if (c->broken[0] != '\0')
        return dds_error(-DDS_ETIMEDOUT,
                         "%s refused: an earlier %s on this communicator "
                         "timed out, so its ranks are out of step",
                         what, c->broken);
    return 0;
}

static int ddmpi_comm_allgather(void *ctx, const void *send, size_t bytes,
                                void *recv)
{
    ddmpi_comm_t *c = ctx;
    ddmpi_coll_t co;
    int rc, mrc, size = 0;

    if (!c || (bytes && (!send || !recv)))
        return dds_error(-DDS_EINVAL, "mpi allgather: NULL argument");
    if (bytes > (size_t)INT_MAX)
        return dds_error(-DDS_EINVAL, "mpi allgather: %zu bytes per rank "
                         "exceed INT_MAX", bytes);
    if ((rc = ddmpi_comm_usable(c, "MPI allgather")) != 0)
        return rc;
    MPI_Comm_size(c->comm, &size);
    /* [send | recv] in one buffer that outlives a timed-out request */
    co.buf = ddmpi_scratch(c, bytes + bytes * (size_t)size + 1);
    if (co.buf == NULL)
        return dds_error(-DDS_ENOMEM, "mpi allgather: out of memory");
    if (bytes)
        memcpy(co.buf, send, bytes);
    ddmpi_serial_lock(c->serial);
    if (isinf(c->timeout_s)) { /* no limit: MPI's (faster) blocking call */
        mrc = MPI_Allgather(co.buf, (int)bytes, MPI_BYTE,
                            (char *)co.buf + bytes, (int)bytes, MPI_BYTE,
                            c->comm);
        co.req = MPI_REQUEST_NULL;
    } else {
        mrc = MPI_Iallgather(co.buf, (int)bytes, MPI_BYTE,
                             (char *)co.buf + bytes, (int)bytes, MPI_BYTE,
                             c->comm, &co.req);
    }
    ddmpi_serial_unlock(c->serial);
    if (mrc != MPI_SUCCESS)
        return ddmpi_translate_error(mrc, "MPI_Iallgather");
    rc = ddmpi_comm_wait(c, &co, "MPI allgather");
    if (rc == 0 && bytes)
        memcpy(recv, (char *)co.buf + bytes, bytes * (size_t)size);
    return rc;
}

static int ddmpi_comm_allreduce_i64(void *ctx, int64_t *inout, size_t n,
                                    dds_reduce_op_t op)
{
    ddmpi_comm_t *c = ctx;
    ddmpi_coll_t co;
    MPI_Op mop;
    int rc, mrc;

    if (!c || (n && !inout))
        return dds_error(-DDS_EINVAL, "mpi allreduce: NULL argument");
    if (n > (size_t)INT_MAX / 2)
        return dds_error(-DDS_EINVAL, "mpi allreduce: %zu elements exceed "
                         "INT_MAX / 2", n);
    switch (op) {
    case DDS_REDUCE_MIN: mop = MPI_MIN; break;
    case DDS_REDUCE_MAX: mop = MPI_MAX; break;
    case DDS_REDUCE_SUM: mop = MPI_SUM; break;
    default:
        return dds_error(-DDS_EINVAL, "mpi allreduce: unknown op %d", (int)op);
    }
    if ((rc = ddmpi_comm_usable(c, "MPI allreduce")) != 0)
        return rc;
    /* [send | recv] */
    co.buf = ddmpi_scratch(c, 2 * n * sizeof(int64_t) + 1);
    if (co.buf == NULL)
        return dds_error(-DDS_ENOMEM, "mpi allreduce: out of memory");
    if (n)
        memcpy(co.buf, inout, n * sizeof(int64_t));
    ddmpi_serial_lock(c->serial);
    if (isinf(c->timeout_s)) {
        mrc = MPI_Allreduce(co.buf, (int64_t *)co.buf + n, (int)n,
                            MPI_INT64_T, mop, c->comm);
        co.req = MPI_REQUEST_NULL;
    } else {
        mrc = MPI_Iallreduce(co.buf, (int64_t *)co.buf + n, (int)n,
                             MPI_INT64_T, mop, c->comm, &co.req);
    }
    ddmpi_serial_unlock(c->serial);
    if (mrc != MPI_SUCCESS)
        return ddmpi_translate_error(mrc, "MPI_Iallreduce");
    rc = ddmpi_comm_wait(c, &co, "MPI allreduce");
    if (rc == 0 && n)
        memcpy(inout, (int64_t *)co.buf + n, n * sizeof(int64_t));
    return rc;
}

static int ddmpi_comm_barrier(void *ctx)
{
    ddmpi_comm_t *c = ctx;
    ddmpi_coll_t co;
    int rc, mrc;

    if (!c)
        return dds_error(-DDS_EINVAL, "mpi barrier: NULL communicator");
    if ((rc = ddmpi_comm_usable(c, "MPI barrier")) != 0)
        return rc;
    co.buf = NULL;
    ddmpi_serial_lock(c->serial);
    if (isinf(c->timeout_s)) {
        mrc = MPI_Barrier(c->comm);
        co.req = MPI_REQUEST_NULL;
    } else {
        mrc = MPI_Ibarrier(c->comm, &co.req);
    }
    ddmpi_serial_unlock(c->serial);
    if (mrc != MPI_SUCCESS)
        return ddmpi_translate_error(mrc, "MPI_Ibarrier");
    return ddmpi_comm_wait(c, &co, "MPI barrier");
}

static void ddmpi_comm_destroy(void *ctx)
{
    ddmpi_comm_t *c = ctx;

    if (!c)
        return;
    if (c->broken[0] == '\0') /* else a late peer may still write into it */
        free(c->scratch);
    /* MPI_Comm_free is local in effect (no synchronisation); after
     * MPI_Finalize it is not allowed, so only our memory goes.  A timed-out
     * communicator is never freed: its abandoned nonblocking collective is
     * still in MPI's progress engine (a late peer may complete it, also
     * inside MPI_Finalize), and Open MPI frees the collective module's state
     * with the communicator, so that MPI_Finalize's progress then segfaulted
     * (libnbc -> ob1 isend).  Kept, MPI_Finalize completes normally. */
    if (!c->borrowed && c->broken[0] == '\0' && c->comm != MPI_COMM_NULL &&
        ddmpi_initialized() &&
        !ddmpi_finalized()) {
        ddmpi_serial_lock(c->serial);
        MPI_Comm_free(&c->comm);
        ddmpi_serial_unlock(c->serial);
    }
    free(c);
}

static const dds_comm_ops_t ddmpi_comm_ops = {
    .size = sizeof(dds_comm_ops_t),
    .name = "mpi",
    .allgather = ddmpi_comm_allgather,
    .allreduce_i64 = ddmpi_comm_allreduce_i64,
    .barrier = ddmpi_comm_barrier,
    .destroy = ddmpi_comm_destroy,
};

/* ---- agreement before a communicator exists ---------------------------- */

static int blocking_allreduce_i64(void *ctx, int64_t *inout, size_t n,
                                  dds_reduce_op_t op)
{
    MPI_Op mop = op == DDS_REDUCE_MAX ? MPI_MAX
                 : op == DDS_REDUCE_SUM ? MPI_SUM
                                        : MPI_MIN;
    return ddmpi_translate_error(MPI_Allreduce(MPI_IN_PLACE, inout, (int)n,
                                               MPI_INT64_T, mop,
                                               *(MPI_Comm *)ctx),
                                 "error agreement");
}

static const dds_comm_ops_t blocking_ops = {
    .size = sizeof(dds_comm_ops_t),
    .name = "mpi-blocking",
    .allreduce_i64 = blocking_allreduce_i64,
};

int ddmpi_agree_named(MPI_Comm comm, int rc)
{
    dds_comm_t c = {0};
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    c.ops = &blocking_ops;
    c.ctx = &comm;
    c.rank = rank;
    c.size = size;
    return dds_comm_agree_named(&c, rc);
}

/* The arguments of ddmpi_comm_create / _borrow (`fn`). */
static int ddmpi_comm_check_args(MPI_Comm comm, const dds_comm_t *comm_p, const char *fn)
{
    if (!comm_p)
        return dds_error(-DDS_EINVAL, "%s: comm_p is NULL", fn);
    if (comm == MPI_COMM_NULL)
        return dds_error(-DDS_EINVAL, "%s: MPI_COMM_NULL", fn);
    if (!ddmpi_initialized() || ddmpi_finalized())
        return dds_error(-DDS_EINVAL, "%s: MPI is %s", fn,
                         ddmpi_finalized() ? "already finalized"
                                           : "not initialised (ddmpi_init)");
    return 0;
}

int ddmpi_comm_create(MPI_Comm comm, dds_comm_t *comm_p)
{
    ddmpi_comm_t *c;
    MPI_Comm dup = MPI_COMM_NULL;
    int rank = 0, size = 0, serial, mrc, ok, settings_rc;
    double timeout_s = 0, warn_s = 0;
    char why[512];

    if ((mrc = ddmpi_comm_check_args(comm, comm_p, "ddmpi_comm_create")) != 0)
        return mrc;

    /* A bad value on some ranks fails every rank, with its name, value and
     * rank (agreed below, after the collective dup that every rank must
     * enter); meanwhile the defaults bound the agreement itself. */
    settings_rc = dds_comm_timeout_s(&timeout_s);
    if (settings_rc == 0)
        settings_rc = dds_comm_warn_s(&warn_s);
    if (settings_rc != 0) {
        snprintf(why, sizeof(why), "%s", dds_last_error());
        timeout_s = 1800;
        warn_s = 60;
    }
    serial = ddmpi_need_serial();
    c = calloc(1, sizeof(*c));
    ddmpi_serial_lock(serial);
    mrc = MPI_Comm_dup(comm, &dup);
    if (mrc != MPI_SUCCESS) {
        /* MPI_Comm_dup fails on every rank or aborts; nothing to agree. */
        ddmpi_serial_unlock(serial);
        free(c);
        return ddmpi_translate_error(mrc, "MPI_Comm_dup");
    }
    mrc = MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Comm_rank(dup, &rank);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Comm_size(dup, &size);
    /* Agree so that a local failure (allocation) fails every rank. */
    ok = (mrc == MPI_SUCCESS && c != NULL);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, dup);
    if (mrc != MPI_SUCCESS || !ok) {
        MPI_Comm_free(&dup);
        ddmpi_serial_unlock(serial);
        if (mrc != MPI_SUCCESS) {
            free(c);
            return ddmpi_translate_error(mrc, "ddmpi_comm_create");
        }
        if (!c)
            return dds_error(-DDS_ENOMEM, "ddmpi_comm_create: out of memory");
        free(c);
        return dds_error(-DDS_ENOMEM, "ddmpi_comm_create: out of memory on "
                         "another rank");
    }
    ddmpi_serial_unlock(serial);

    c->comm = dup;
    c->serial = serial;
    c->timeout_s = timeout_s;
    c->warn_s = warn_s;
    comm_p->ops = &ddmpi_comm_ops;
    comm_p->ctx = c;
    comm_p->rank = rank;
    comm_p->size = size;
    if (settings_rc != 0)
        dds_error(settings_rc, "%s", why);
    mrc = dds_comm_agree_named(comm_p, settings_rc);
    if (mrc != 0) {
        ddmpi_comm_destroy(c);
        comm_p->ops = NULL;
        comm_p->ctx = NULL;
        return mrc;
    }
    return 0;
}

int ddmpi_comm_borrow(MPI_Comm comm, dds_comm_t *comm_p)
{
    ddmpi_comm_t *c;
    int rank = 0, size = 0, rc;

    if ((rc = ddmpi_comm_check_args(comm, comm_p, "ddmpi_comm_borrow")) != 0)
        return rc;
    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS || MPI_Comm_size(comm, &size) != MPI_SUCCESS)
        return dds_error(-DDS_EINVAL, "ddmpi_comm_borrow: not a valid communicator");
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return dds_error(-DDS_ENOMEM, "ddmpi_comm_borrow: out of memory");
    /* No agreement here (it would be a collective): a bad setting is
     * checked where a store is created; until then the defaults bound the
     * waits, the same on every rank. */
    if (dds_comm_timeout_s(&c->timeout_s) != 0)
        c->timeout_s = 1800;
    if (dds_comm_warn_s(&c->warn_s) != 0)
        c->warn_s = 60;
    c->comm = comm;
    c->borrowed = 1;
    c->serial = ddmpi_need_serial();
    comm_p->ops = &ddmpi_comm_ops;
    comm_p->ctx = c;
    comm_p->rank = rank;
    comm_p->size = size;
    return 0;
}
