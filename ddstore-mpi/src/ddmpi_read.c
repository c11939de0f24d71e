/* ddstore-mpi: the read path of the MPI RMA transport (method 0): one
 * MPI_Get per planned op completed with one MPI_Win_flush_local (one owner)
 * or MPI_Win_flush_local_all (several: an MPI that moves an owner's gets
 * only inside its flush, as Open MPI's osc/ucx over tcp does, would else pay
 * one round trip per owner, in turn; docs/scale.md).  Same-node owners'
 * rows never come here: the store copies them from their mapped shards
 * (core's node-local shard service); in a forked child every op that does
 * come is refused (ddmpi_transport.c's top comment describes the
 * transport).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ddstore/errors.h"
#include "ddmpi_transport_internal.h"

/* ---- MPI_Finalize started -------------------------------------------------
 *
 * Set by ddmpi_transport.c's finalize hook when MPI_Finalize starts: the
 * read path tests this flag instead of calling MPI_Finalized, which takes a
 * process-wide lock in some MPIs. */
static int ddmpi_mpi_gone;

int ddmpi_gone(void)
{
    return __atomic_load_n(&ddmpi_mpi_gone, __ATOMIC_ACQUIRE);
}

void ddmpi_set_gone(void)
{
    __atomic_store_n(&ddmpi_mpi_gone, 1, __ATOMIC_RELEASE);
}

/* ---- read ------------------------------------------------------------------ */

/* The ops against the region, and transport.h's contract on what the store
 * plans: every op within max_read_bytes (so one MPI_Get each) and none of
 * our own shard (the store serves those itself:
 * DDS_TRANSPORT_CAP_LOCAL_SELF). */
static int ddmpi_read_check(const ddmpi_transport_t *t, const ddmpi_region_t *r,
                            const dds_read_op_t *ops, size_t nops, void *dst,
                            void *staging)
{
    size_t i;

    for (i = 0; i < nops; i++) {
        const dds_read_op_t *op = &ops[i];
        uint64_t have;

        if (op->owner < 0 || op->owner >= t->size)
            return dds_error(-DDS_EINVAL, "variable '%s': read op %zu: owner "
                             "%d outside [0, %d)", r->name, i, op->owner,
                             t->size);
        if (op->len == 0)
            continue;
        if (op->len > t->max_read)
            return dds_error(-DDS_EINVAL, "variable '%s': read op %zu of %zu "
                             "bytes: above max_read_bytes %zu (the store "
                             "splits reads there: transport.h)", r->name, i,
                             op->len, t->max_read);
        have = r->shard_bytes[op->owner];
        if (op->src_offset < 0 || (uint64_t)op->len > have ||
            (uint64_t)op->src_offset > have - (uint64_t)op->len)
            return dds_error(-DDS_ERANGE, "variable '%s': read op %zu: bytes "
                             "[%lld, +%zu) outside rank %d's shard of %llu "
                             "bytes", r->name, i, (long long)op->src_offset,
                             op->len, op->owner, (unsigned long long)have);
        if (op->staged ? !staging : !dst)
            return dds_error(-DDS_EINVAL, "variable '%s': read op %zu: NULL "
                             "%s buffer", r->name, i,
                             op->staged ? "staging" : "destination");
        if (op->owner == t->rank)
            return dds_error(-DDS_EINVAL, "variable '%s': read op %zu: rows "
                             "of this rank's own shard, which the store "
                             "serves itself (DDS_TRANSPORT_CAP_LOCAL_SELF, "
                             "transport.h)", r->name, i);
    }
    return 0;
}

/* ---- reads in a forked child ------------------------------------------------
 *
 * A process forked from a rank (a DataLoader worker) must not call MPI.  The
 * store serves what it can without MPI: this rank's rows and those of the
 * same-node ranks whose shards it maps (MAP_SHARED: the child sees every
 * update).  An op that reaches us here is of a shard that is not mapped
 * (another node, an in-place or GPU shard, DDSTORE_MPI_SHM=0): refused with
 * an error naming the alternatives (nothing is copied). */

static int ddmpi_in_child;

static void ddmpi_fork_child(void)
{
    __atomic_store_n(&ddmpi_in_child, 1, __ATOMIC_RELAXED);
}

static void ddmpi_fork_hook(void)
{
    (void)pthread_atfork(NULL, NULL, ddmpi_fork_child);
}

void ddmpi_fork_watch(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, ddmpi_fork_hook);
}

/* Non-zero in a process forked after the first transport was created. */
static int ddmpi_forked(void)
{
    return __atomic_load_n(&ddmpi_in_child, __ATOMIC_RELAXED);
}

static int ddmpi_read_forked(const ddmpi_transport_t *t,
                             const ddmpi_region_t *r, const dds_read_op_t *ops,
                             size_t nops)
{
    size_t i;

    if (r->win == MPI_WIN_NULL && !r->local_only)
        return dds_error(-DDS_EIO, "variable '%s': read in a forked process "
                         "after the window was freed", r->name);
    for (i = 0; i < nops && ops[i].len == 0; i++)
        ;
    if (i == nops)
        return 0;
    return dds_error(-DDS_ENOSYS, "variable '%s': a forked process (a "
                     "DataLoader worker) cannot read it with method 0: "
                     "rank %d's shard is not in shared memory on this "
                     "node (%s), and MPI cannot be used after fork. Use "
                     "ThreadDataLoader (threads), or method=1 with "
                     "DDSTORE_FORK_WORKERS=1 for forked workers",
                     r->name, ops[i].owner,
                     ops[i].owner == t->rank
                     ? "no shared memory for it"
                     : t->shm ? "another node, or no shared memory"
                              : "DDSTORE_MPI_SHM=0");
}

/* The gets of one request (a variable), posted; its owners noted for the
 * flush.  0, or the error of the MPI_Get that failed (the earlier ones are
 * in flight: the caller flushes them). */
static int ddmpi_post(const ddmpi_region_t *r, const dds_read_req_t *q,
                      uint64_t *ngets, int *owners, int *nowners_p,
                      int *more_p)
{
    int prev_owner = -1;

    for (size_t i = 0; i < q->nops; i++) {
        const dds_read_op_t *op = &q->ops[i];
        char *to = (char *)(op->staged ? q->staging : q->dst) + op->dst_offset;
        int mrc;

        if (op->len == 0)
            continue;
        /* op->len <= max_read <= INT_MAX (ddmpi_read_check) */
        mrc = MPI_Get(to, (int)op->len, MPI_BYTE, op->owner,
                      (MPI_Aint)op->src_offset, (int)op->len, MPI_BYTE,
                      r->win);
        if (mrc != MPI_SUCCESS) {
            char what[DDMPI_NAME_MAX + 64];

            snprintf(what, sizeof(what), "variable '%s': MPI_Get from "
                     "rank %d", r->name, op->owner);
            return ddmpi_translate_error(mrc, what);
        }
        (*ngets)++;       /* op i is in flight: flush its owner */
        if (op->owner != prev_owner) { /* the planner groups ops by owner */
            prev_owner = op->owner;
            if (*nowners_p < 8)
                owners[(*nowners_p)++] = op->owner;
            else
                *more_p = 1;
        }
    }
    return 0;
}

/* Complete the gets posted on one request's window, even after an error:
 * one flush (flush_local_all where several owners have gets in flight; it
 * may also wait for other threads' gets on this window, never less). */
static int ddmpi_flush(const ddmpi_region_t *r, const int *owners,
                       int nowners, int more_owners)
{
    char what[DDMPI_NAME_MAX + 160];
    int mrc, n;

    if (nowners == 0)
        return 0;
    mrc = nowners == 1 ? MPI_Win_flush_local(owners[0], r->win)
                       : MPI_Win_flush_local_all(r->win);
    if (mrc == MPI_SUCCESS)
        return 0;
    n = snprintf(what, sizeof(what), "variable '%s': %s (reading from rank%s",
                 r->name, nowners == 1 ? "MPI_Win_flush_local"
                                       : "MPI_Win_flush_local_all",
                 nowners == 1 ? "" : "s");
    for (int k = 0; k < nowners && n > 0 && (size_t)n < sizeof(what); k++)
        n += snprintf(what + n, sizeof(what) - (size_t)n, "%s %d", k ? "," : "",
                      owners[k]);
    if (n > 0 && (size_t)n < sizeof(what))
        snprintf(what + n, sizeof(what) - (size_t)n, "%s)", more_owners ? ", ..." : "");
    return ddmpi_translate_error(mrc, what);
}

/* Checks of one request, before anything is posted (0: post it; 1: nothing
 * to read; else an error). */
static int ddmpi_req_check(ddmpi_transport_t *t, const dds_read_req_t *q)
{
    const ddmpi_region_t *r = q->region;
    int rc;

    if (!r || (q->nops && !q->ops))
        return dds_error(-DDS_EINVAL, "mpi read: NULL argument");
    /* nops == 0: the store served every op (same-node mappings) and asks
     * whether it may; after MPI_Finalize rows of other ranks are refused,
     * as they always were */
    if (q->nops == 0 && !ddmpi_gone())
        return 1;
    if (q->nops && q->dst_mem && q->dst_mem->kind != DDS_MEM_HOST)
        return dds_error(-DDS_ENOSYS, "variable '%s': method 0 (MPI RMA) "
                         "reads only into host memory; GPU destinations "
                         "(memory kind %d) need staging, which the MPI "
                         "transport does not do yet", r->name,
                         (int)q->dst_mem->kind);
    if (ddmpi_forked()) {
        rc = ddmpi_read_forked(t, r, q->ops, q->nops);
        return rc != 0 ? rc : 1;
    }
    if ((r->win == MPI_WIN_NULL && !r->local_only) || ddmpi_gone())
        return dds_error(-DDS_EIO, "variable '%s': mpi read after %s",
                         r->name, ddmpi_gone() ? "MPI_Finalize"
                                               : "the window was freed");
    return ddmpi_read_check(t, r, q->ops, q->nops, q->dst, q->staging);
}

int ddmpi_read_multi(void *ctx, void *reader, const dds_read_req_t *reqs,
                     size_t nreqs)
{
    enum { NQ = 64 };
    ddmpi_transport_t *t = ctx;
    uint64_t t0, t1, t2, ngets = 0;
    size_t i, nposted = 0;
    int rc = 0, rc2;
    /* per request: owners with gets in flight (named by errors) */
    int owners[NQ][8], nowners[NQ], more[NQ], post[NQ];

    (void)reader;          /* one default reader: MPI has no endpoints     */
    if (!t || (nreqs && !reqs))
        return dds_error(-DDS_EINVAL, "mpi read: NULL argument");
    if (nreqs > NQ) {      /* in slices of NQ variables */
        for (i = 0; i < nreqs && rc == 0; i += NQ)
            rc = ddmpi_read_multi(ctx, reader, reqs + i,
                                  nreqs - i < NQ ? nreqs - i : NQ);
        return rc;
    }
    for (i = 0; i < nreqs; i++) {
        rc = ddmpi_req_check(t, &reqs[i]);
        if (rc < 0)
            return rc;
        post[i] = rc == 0;
        nowners[i] = more[i] = 0;
    }
    rc = 0;

    ddmpi_serial_lock(t->serial);
    t0 = dds_prof_now();
    for (i = 0; i < nreqs && rc == 0; i++) {
        if (!post[i])
            continue;
        rc = ddmpi_post(reqs[i].region, &reqs[i], &ngets, owners[i],
                        &nowners[i], &more[i]);
        nposted = i + 1;
    }
    t1 = dds_prof_now();
    /* complete everything posted, even after an error: one flush per
     * window (variable) */
    for (i = 0; i < nposted; i++) {
        rc2 = ddmpi_flush(reqs[i].region, owners[i], nowners[i], more[i]);
        if (rc == 0)
            rc = rc2;
    }
    t2 = dds_prof_now();
    ddmpi_serial_unlock(t->serial);
    if (ngets)
        __atomic_add_fetch(&t->n_gets, ngets, __ATOMIC_RELAXED);

    /* the store counts DDS_PROF_READS (one per op it hands us; its ops are
     * already split at our max_read_bytes, so that is our MPI_Get count);
     * the variables share the time */
    if (t0 && nreqs) {
        for (i = 0; i < nreqs; i++) {
            dds_prof_add(reqs[i].prof, DDS_PROF_NS_POST, (t1 - t0) / nreqs);
            dds_prof_add(reqs[i].prof, DDS_PROF_NS_COMPLETE,
                         (t2 - t1) / nreqs);
        }
    }
    return rc;
}

int ddmpi_read(void *ctx, void *reader, void *region,
               const dds_read_op_t *ops, size_t nops, void *dst,
               void *dst_handle, const dds_mem_t *dst_mem, void *staging,
               void *staging_handle, dds_prof_t *prof)
{
    const ddmpi_region_t *r = region;
    dds_read_req_t q;

    q.region = region;
    q.name = r ? r->name : "?";
    q.ops = ops;
    q.nops = nops;
    q.dst = dst;
    q.dst_handle = dst_handle;   /* MPI needs no registration of destinations */
    q.dst_mem = dst_mem;
    q.staging = staging;
    q.staging_handle = staging_handle;
    q.prof = prof;
    return ddmpi_read_multi(ctx, reader, &q, 1);
}
