/* ddstore-mpi: the MPI RMA transport (method 0).
 *
 * One window per variable over the shard (MPI_Win_create, disp_unit 1),
 * opened once with MPI_Win_lock_all(MPI_MODE_NOCHECK) and closed when the
 * variable is freed.  A read posts one MPI_Get per planned op (the store
 * splits ops at our max_read_bytes <= INT_MAX, so int counts never
 * overflow: transport.h's contract, checked in ddmpi_read_check;
 * displacements are MPI_Aint bytes) and completes them with
 * MPI_Win_flush_local per owner: no
 * collective, no owner participation, any thread (with
 * MPI_THREAD_MULTIPLE).
 *
 * Same-node shards: the store allocates host shards (var_init, var_add with
 * DDS_ADD_COPY) with core's node-local shard service (ddstore/shard.h;
 * DDS_TRANSPORT_CAP_NODE_SHARDS), maps the shards of the owners on this node
 * and copies their rows itself (DDS_TRANSPORT_CAP_NODE_MAP, unless
 * DDSTORE_MPI_SHM=0): read() sees only the other owners' ops.  The RMA
 * window over the whole communicator is still created on that memory.
 * Shards change only by var_update on the owner: a reader sees an update
 * once the owner's call returned and the two synchronised, as with RMA.
 *
 * Forked children (DataLoader workers) never call MPI: the store serves
 * their own and same-node rows from the MAP_SHARED memory they inherited or
 * map; an op that still reaches read() there (another node, a shard not
 * mapped) fails with an error naming the alternatives (ddmpi_read_forked).
 *
 * Files: this one (settings, windows, epochs, create/destroy), ddmpi_read.c
 * (reads); ddmpi_transport_internal.h is what they share.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddstore/config.h"
#include "ddstore/errors.h"
#include "ddstore/log.h"
#include "ddstore/mpi.h"
#include "ddmpi_transport_internal.h"

static const dds_config_entry_t ddmpi_config_table[] = {
    DDS_SETTINGS_TABLE(DDMPI_SETTINGS)};

void ddmpi_config_register(void)
{
    dds_config_register(ddmpi_config_table, sizeof(ddmpi_config_table) /
                                                sizeof(ddmpi_config_table[0]));
}

static DDS_SETTINGS_READER(read_settings, ddmpi_settings_t, DDMPI_SETTINGS)

int ddmpi_settings_read(ddmpi_settings_t *s)
{
    int rc;
    if (!s)
        return dds_error(-DDS_EINVAL, "ddmpi_settings_read: NULL output");
    ddmpi_config_register();
    rc = read_settings(s);
    if (rc == 0 && (s->max_read_bytes < 1 || s->max_read_bytes > INT_MAX))
        rc = dds_error(-DDS_ECONFIG, "DDSTORE_MPI_MAX_READ_BYTES='%lld': "
                       "expected a byte count in [1, %d]",
                       (long long)s->max_read_bytes, INT_MAX);
    return rc;
}

/* ---- windows still open at MPI_Finalize --------------------------------------
 *
 * A store that is never freed (a Python program that exits without free())
 * would reach MPI_Finalize with its windows open and locked; MPICH over UCX
 * then aborts inside MPI_Finalize.  MPI_Finalize first deletes the
 * attributes of MPI_COMM_SELF, while MPI is still fully usable: our delete
 * callback unlocks and frees every window still open, in creation order
 * (every rank does the same, so the collective MPI_Win_free calls match, as
 * the creations did).  Later region_destroy calls find no window and free
 * local memory only. */

/* Lock order: ddmpi_live_lock before the serial lock (ddmpi_internal.h). */
static pthread_mutex_t ddmpi_live_lock = PTHREAD_MUTEX_INITIALIZER;
static ddmpi_region_t *ddmpi_live_head, *ddmpi_live_tail;
static int ddmpi_finalize_keyval = MPI_KEYVAL_INVALID;

static void ddmpi_window_close(ddmpi_region_t *r, int *rc_p)
{
    int mrc;

    mrc = MPI_Win_unlock_all(r->win);
    if (mrc != MPI_SUCCESS && rc_p && *rc_p == 0)
        *rc_p = ddmpi_translate_error(mrc, "MPI_Win_unlock_all");
    mrc = MPI_Win_free(&r->win);
    if (mrc != MPI_SUCCESS && rc_p && *rc_p == 0)
        *rc_p = ddmpi_translate_error(mrc, "MPI_Win_free");
    r->win = MPI_WIN_NULL;
}

static int ddmpi_at_finalize(MPI_Comm comm, int keyval, void *attr, void *extra)
{
    ddmpi_region_t *r, *next;
    int n = 0;

    (void)comm; (void)keyval; (void)attr; (void)extra;
    pthread_mutex_lock(&ddmpi_live_lock);
    ddmpi_set_gone();
    for (r = ddmpi_live_head; r; r = next) {
        next = r->next;
        if (r->win != MPI_WIN_NULL) {
            ddmpi_serial_lock(r->serial);
            ddmpi_window_close(r, NULL);
            ddmpi_serial_unlock(r->serial);
            n++;
        }
        r->prev = r->next = NULL;
    }
    ddmpi_live_head = ddmpi_live_tail = NULL;
    pthread_mutex_unlock(&ddmpi_live_lock);
    if (n)
        DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_MPI, "MPI_Finalize: closed %d "
                "window(s) of variables that were not freed", n);
    return MPI_SUCCESS;
}

/* Once per process (local, not collective). */
static int ddmpi_finalize_hook_install(int serial)
{
    int mrc = MPI_SUCCESS;

    pthread_mutex_lock(&ddmpi_live_lock);
    if (ddmpi_finalize_keyval == MPI_KEYVAL_INVALID) {
        int kv = MPI_KEYVAL_INVALID;

        ddmpi_serial_lock(serial);
        mrc = MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, ddmpi_at_finalize,
                                     &kv, NULL);
        if (mrc == MPI_SUCCESS) {
            mrc = MPI_Comm_set_attr(MPI_COMM_SELF, kv, NULL);
            if (mrc == MPI_SUCCESS)
                ddmpi_finalize_keyval = kv;
            else
                MPI_Comm_free_keyval(&kv);
        }
        ddmpi_serial_unlock(serial);
    }
    pthread_mutex_unlock(&ddmpi_live_lock);
    return ddmpi_translate_error(mrc, "mpi transport: MPI_Comm_set_attr"
                                 "(MPI_COMM_SELF) for the finalize hook");
}

static void ddmpi_live_link(ddmpi_region_t *r)
{
    r->prev = ddmpi_live_tail;
    r->next = NULL;
    if (ddmpi_live_tail)
        ddmpi_live_tail->next = r;
    else
        ddmpi_live_head = r;
    ddmpi_live_tail = r;
}

static void ddmpi_live_unlink(ddmpi_region_t *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else if (ddmpi_live_head == r)
        ddmpi_live_head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else if (ddmpi_live_tail == r)
        ddmpi_live_tail = r->prev;
    r->prev = r->next = NULL;
}

static void ddmpi_region_free_local(ddmpi_region_t *r)
{
    if (!r)
        return;
    free(r->shard_bytes);
    free(r);
}

/* ---- region_create -------------------------------------------------------- */

static int ddmpi_region_check_local(const ddmpi_transport_t *t,
                                    const dds_region_desc_t *local)
{
    (void)t;
    if (!local)
        return dds_error(-DDS_EINVAL, "mpi region_create: NULL description");
    if (local->mem.kind != DDS_MEM_HOST)
        return dds_error(-DDS_ENOSYS, "variable '%s': method 0 (MPI RMA) "
                         "needs host-memory shards; a GPU shard (memory kind "
                         "%d) is not supported by the MPI transport",
                         local->name ? local->name : "?", (int)local->mem.kind);
    if (local->bytes && !local->base)
        return dds_error(-DDS_EINVAL, "variable '%s': shard of %zu bytes has "
                         "a NULL base", local->name ? local->name : "?",
                         local->bytes);
    if ((uint64_t)local->bytes > (uint64_t)INT64_MAX)
        return dds_error(-DDS_EINVAL, "variable '%s': shard of %zu bytes is "
                         "too large for MPI_Aint", local->name ? local->name
                         : "?", local->bytes);
    return 0;
}

static int ddmpi_region_create(void *ctx, const dds_region_desc_t *local,
                               void **region_p)
{
    ddmpi_transport_t *t = ctx;
    ddmpi_region_t *r = NULL;
    MPI_Info info = MPI_INFO_NULL;
    int rc, mrc, agree[2], created = 0, locked = 0;
    int64_t lrc;
    uint64_t mybytes;

    if (!t || !region_p)
        return dds_error(-DDS_EINVAL, "mpi region_create: NULL argument");
    if (ddmpi_finalized())
        return dds_error(-DDS_EIO, "mpi region_create: MPI is already "
                         "finalized");

    /* validate + allocate locally, then agree before any window exists */
    rc = ddmpi_region_check_local(t, local);
    if (rc == 0) {
        r = calloc(1, sizeof(*r));
        if (r) {
            r->shard_bytes = calloc((size_t)t->size, sizeof(uint64_t));
        }
        if (!r || !r->shard_bytes)
            rc = dds_error(-DDS_ENOMEM, "mpi region_create: out of memory");
    }

    ddmpi_serial_lock(t->serial);
    {
        /* agree on the lowest failing rank: MIN of (rc != 0 ? rank : size) */
        int64_t v[1];
        v[0] = rc ? t->rank : t->size;
        mrc = MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_INT64_T, MPI_MIN, t->comm);
        if (mrc != MPI_SUCCESS) {
            ddmpi_serial_unlock(t->serial);
            ddmpi_region_free_local(r);
            return ddmpi_translate_error(mrc, "mpi region_create: "
                                         "MPI_Allreduce");
        }
        if (v[0] < t->size) {
            int64_t bad = v[0];
            /* tell everybody the failing rank's code */
            lrc = rc;
            mrc = MPI_Bcast(&lrc, 1, MPI_INT64_T, (int)bad, t->comm);
            ddmpi_serial_unlock(t->serial);
            ddmpi_region_free_local(r);
            if (rc)
                return rc;
            if (mrc != MPI_SUCCESS)
                return ddmpi_translate_error(mrc, "mpi region_create: "
                                             "MPI_Bcast");
            return dds_error((int)lrc, "rank %lld: mpi region_create of '%s' "
                             "failed: %s", (long long)bad,
                             local && local->name ? local->name : "?",
                             dds_strerror((int)lrc));
        }
    }

    r->win = MPI_WIN_NULL;
    r->base = local->bytes ? local->base : NULL;
    r->bytes = local->bytes;
    snprintf(r->name, sizeof(r->name), "%s", local->name ? local->name : "");

    /* every rank's shard size, for bounds checks on the read path */
    mybytes = (uint64_t)local->bytes;
    mrc = MPI_Allgather(&mybytes, 1, MPI_UINT64_T, r->shard_bytes, 1,
                        MPI_UINT64_T, t->comm);
    if (mrc != MPI_SUCCESS) {
        ddmpi_serial_unlock(t->serial);
        ddmpi_region_free_local(r);
        return ddmpi_translate_error(mrc, "mpi region_create: MPI_Allgather");
    }

    rc = 0;
    if (t->size == 1) {
        /* A window over one rank would only serve our own reads, which are
         * memcpys; Open MPI also refuses MPI_Win_create in a lone process
         * (no RDMA-capable BTL without peers).  No window then. */
        r->local_only = 1;
        created = 1;
    } else {
        MPI_Comm *held = NULL;
        int nheld;
        char label[DDMPI_NAME_MAX + 16];

        if (MPI_Info_create(&info) == MPI_SUCCESS) {
            MPI_Info_set(info, "no_locks", "false");
            MPI_Info_set(info, "same_disp_unit", "true");
        } else {
            info = MPI_INFO_NULL;
        }
        /* Open MPI 4.x: a context id no other group on this node uses */
        snprintf(label, sizeof(label), "variable '%s'", r->name);
        nheld = ddmpi_cid_steer(t->comm, &t->cids, label, &held);
        mrc = MPI_Win_create(r->base, (MPI_Aint)r->bytes, 1, info, t->comm,
                             &r->win);
        ddmpi_cid_release(held, nheld);
        if (info != MPI_INFO_NULL)
            MPI_Info_free(&info);
        if (mrc != MPI_SUCCESS) {
            char what[DDMPI_NAME_MAX + 160];

            snprintf(what, sizeof(what), "variable '%s': MPI_Win_create"
#ifdef OPEN_MPI
                     " (Open MPI on one node needs the vader BTL for "
                     "one-sided windows: OMPI_MCA_btl=self,vader)"
#endif
                     , r->name);
            rc = ddmpi_translate_error(mrc, what);
            r->win = MPI_WIN_NULL;
        } else {
            created = 1;
            mrc = MPI_Win_set_errhandler(r->win, MPI_ERRORS_RETURN);
            if (mrc == MPI_SUCCESS)
                mrc = MPI_Win_lock_all(MPI_MODE_NOCHECK, r->win);
            if (mrc != MPI_SUCCESS)
                rc = ddmpi_translate_error(mrc, "MPI_Win_lock_all");
            else
                locked = 1;
        }
    }

    /* agree: every window created (min created) and every rank ok */
    agree[0] = created;
    agree[1] = rc == 0;
    mrc = MPI_Allreduce(MPI_IN_PLACE, agree, 2, MPI_INT, MPI_MIN, t->comm);
    if (mrc != MPI_SUCCESS && rc == 0)
        rc = ddmpi_translate_error(mrc, "mpi region_create: MPI_Allreduce");
    if (mrc == MPI_SUCCESS && !agree[1] && rc == 0)
        rc = dds_error(-DDS_EIO, "mpi region_create of '%s': the window "
                       "could not be created on another rank", r->name);
    if (rc != 0) {
        if (locked)
            MPI_Win_unlock_all(r->win);
        if (r->local_only) {
            /* nothing was created */
        } else if (created && mrc == MPI_SUCCESS && agree[0]) {
            MPI_Win_free(&r->win);        /* collective: all ranks have one */
        } else if (created) {
            DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_MPI, "variable '%s': window "
                    "left allocated after a partial MPI_Win_create failure "
                    "(freeing it would hang)", r->name);
        }
        ddmpi_serial_unlock(t->serial);
        ddmpi_region_free_local(r);
        return rc;
    }
    ddmpi_serial_unlock(t->serial);

    r->serial = t->serial;
    if (!r->local_only) {
        pthread_mutex_lock(&ddmpi_live_lock);
        ddmpi_live_link(r);
        pthread_mutex_unlock(&ddmpi_live_lock);
    }

    DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_MPI, "variable '%s': window over %zu "
            "bytes created", r->name, r->bytes);
    *region_p = r;
    return 0;
}

/* ---- region_destroy ------------------------------------------------------- */

static int ddmpi_region_destroy(void *ctx, void *region)
{
    ddmpi_region_t *r = region;
    int rc = 0;

    (void)ctx;
    if (!r)
        return 0;
    pthread_mutex_lock(&ddmpi_live_lock);
    ddmpi_live_unlink(r);
    /* after MPI_Finalize the window went with MPI (closed by the finalize
     * hook): local memory only */
    if (r->win != MPI_WIN_NULL && !ddmpi_finalized()) {
        ddmpi_serial_lock(r->serial);
        ddmpi_window_close(r, &rc);
        ddmpi_serial_unlock(r->serial);
    }
    pthread_mutex_unlock(&ddmpi_live_lock);
    ddmpi_region_free_local(r);
    return rc;
}

/* Out of step (a collective of the store timed out): no MPI_Win_free, which
 * is collective and could wait forever.  The window stays open (and off the
 * finalize hook's list, which would free it); the shard it exposes is the
 * store's, which leaks it too. */
static void ddmpi_region_abandon(void *ctx, void *region)
{
    ddmpi_region_t *r = region;

    (void)ctx;
    if (!r)
        return;
    pthread_mutex_lock(&ddmpi_live_lock);
    ddmpi_live_unlink(r);
    pthread_mutex_unlock(&ddmpi_live_lock);
    if (r->win != MPI_WIN_NULL)
        DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_MPI,
                "variable '%s': window abandoned (not freed) after a "
                "collective timed out", r->name);
    ddmpi_region_free_local(r);
}

/* ---- epochs, destroy, create ---------------------------------------------- */

/* For each rank of comm: its rank in node (a sub-communicator), or -1. */
static int ddmpi_node_ranks(MPI_Comm comm, MPI_Comm node, int n, int *out)
{
    MPI_Group gc = MPI_GROUP_NULL, gn = MPI_GROUP_NULL;
    int *in, mrc, i;

    in = malloc(sizeof(int) * (size_t)n);
    if (!in)
        return MPI_ERR_NO_MEM;
    for (i = 0; i < n; i++)
        in[i] = i;
    mrc = MPI_Comm_group(comm, &gc);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Comm_group(node, &gn);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Group_translate_ranks(gc, n, in, gn, out);
    if (mrc == MPI_SUCCESS)
        for (i = 0; i < n; i++)
            if (out[i] == MPI_UNDEFINED)
                out[i] = -1;
    if (gc != MPI_GROUP_NULL)
        MPI_Group_free(&gc);
    if (gn != MPI_GROUP_NULL)
        MPI_Group_free(&gn);
    free(in);
    return mrc;
}

/* The passive-target epoch of every window is opened once at region_create
 * (MPI_Win_lock_all) and each read completes its own gets with
 * MPI_Win_flush_local.  What an epoch boundary needs from the transport is
 * that this rank's own stores into its shards (var_update) reach the
 * windows' public copies: MPI_Win_sync on every open window (a memory
 * barrier in MPI's unified model, a copy in the separate one).  Local; the
 * store synchronises the ranks afterwards. */
static int ddmpi_epoch_sync(void *ctx)
{
    ddmpi_region_t *r;
    int rc = 0;

    (void)ctx;
    pthread_mutex_lock(&ddmpi_live_lock);
    if (!ddmpi_gone()) {
        for (r = ddmpi_live_head; r && rc == 0; r = r->next) {
            if (r->win == MPI_WIN_NULL)
                continue;
            ddmpi_serial_lock(r->serial);
            int mrc = MPI_Win_sync(r->win);
            ddmpi_serial_unlock(r->serial);
            if (mrc != MPI_SUCCESS)
                rc = ddmpi_translate_error(mrc, "MPI_Win_sync");
        }
    }
    pthread_mutex_unlock(&ddmpi_live_lock);
    return rc;
}

void ddmpi_transport_counts(const dds_transport_t *tr, uint64_t *gets,
                            uint64_t *shm)
{
    ddmpi_transport_t *t = tr ? tr->ctx : NULL;

    if (gets)
        *gets = t ? __atomic_load_n(&t->n_gets, __ATOMIC_RELAXED) : 0;
    if (shm) /* copies of same-node rows: core's, process-wide */
        dds_shard_counts(shm, NULL);
}

static void ddmpi_transport_destroy(void *ctx)
{
    ddmpi_transport_t *t = ctx;

    if (!t)
        return;
    if (!ddmpi_finalized()) {
        ddmpi_serial_lock(t->serial);
        if (t->node != MPI_COMM_NULL)
            MPI_Comm_free(&t->node);
        if (t->comm != MPI_COMM_NULL)
            MPI_Comm_free(&t->comm);
        ddmpi_serial_unlock(t->serial);
    }
    free(t->node_rank);
    free(t);
}

static const dds_transport_ops_t ddmpi_transport_ops = {
    .size = sizeof(dds_transport_ops_t),
    .name = "mpi",
    .region_create = ddmpi_region_create,
    .region_destroy = ddmpi_region_destroy,
    .reader_open = NULL,
    .reader_close = NULL,
    .read = ddmpi_read,
    .recv_register = NULL,
    .recv_unregister = NULL,
    .progress = NULL,
    .epoch_begin = ddmpi_epoch_sync,
    .epoch_end = ddmpi_epoch_sync,
    .destroy = ddmpi_transport_destroy,
    .region_join = NULL,
    .region_abandon = ddmpi_region_abandon,
    .read_multi = ddmpi_read_multi,
};

int ddmpi_transport_create(MPI_Comm comm, dds_transport_t *transport_p)
{
    ddmpi_transport_t *t = NULL;
    MPI_Comm dup = MPI_COMM_NULL, node = MPI_COMM_NULL;
    ddmpi_settings_t set;
    int rc = 0, mrc, serial, fin, init = 0, v[2];

    if (!transport_p)
        return dds_error(-DDS_EINVAL, "ddmpi_transport_create: transport_p "
                         "is NULL");
    if (comm == MPI_COMM_NULL)
        return dds_error(-DDS_EINVAL, "ddmpi_transport_create: "
                         "MPI_COMM_NULL");
    MPI_Initialized(&init);
    fin = ddmpi_finalized();
    if (!init || fin)
        return dds_error(-DDS_EINVAL, "ddmpi_transport_create: MPI is %s",
                         fin ? "already finalized"
                             : "not initialised (ddmpi_init)");

    /* local checks first; agreed on below so that no rank is left alone */
    rc = ddmpi_settings_read(&set);
    if (rc == 0) {
        t = calloc(1, sizeof(*t));
        if (!t)
            rc = dds_error(-DDS_ENOMEM, "ddmpi_transport_create: out of "
                           "memory");
    }

    serial = ddmpi_need_serial();
    if (rc == 0)
        rc = ddmpi_finalize_hook_install(serial);
    ddmpi_serial_lock(serial);
    mrc = MPI_Comm_dup(comm, &dup);
    if (mrc != MPI_SUCCESS) {
        ddmpi_serial_unlock(serial);
        free(t);
        return ddmpi_translate_error(mrc, "MPI_Comm_dup");
    }
    mrc = MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    /* the ranks of this node (collective: called even after a local
     * failure; freed below if anything failed anywhere) */
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Comm_split_type(dup, MPI_COMM_TYPE_SHARED, 0,
                                  MPI_INFO_NULL, &node);
    if (mrc == MPI_SUCCESS && node != MPI_COMM_NULL)
        MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN);
    if (rc == 0 && mrc == MPI_SUCCESS) {
        int n = 0;

        MPI_Comm_size(dup, &n);
        t->node_rank = malloc(sizeof(int) * (size_t)n);
        if (!t->node_rank)
            rc = dds_error(-DDS_ENOMEM, "ddmpi_transport_create: out of "
                           "memory");
        else
            mrc = ddmpi_node_ranks(dup, node, n, t->node_rank);
    }
    /* agree: v[0] = lowest failing rank's code (codes are negative, so MIN
     * picks one of them), v[1] = MPI ok everywhere */
    v[0] = rc;
    v[1] = mrc == MPI_SUCCESS;
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_INT, MPI_MIN, dup);
    /* a rank failed: every rank gets its detail, "rank R: ..." (a bad
     * setting names the variable, the value and the rank that has it) */
    if (mrc == MPI_SUCCESS && v[1] && v[0] != 0)
        rc = ddmpi_agree_named(dup, rc);
    if (mrc != MPI_SUCCESS || v[0] != 0 || !v[1]) {
        if (node != MPI_COMM_NULL)
            MPI_Comm_free(&node);
        MPI_Comm_free(&dup);
        ddmpi_serial_unlock(serial);
        if (t)
            free(t->node_rank);
        free(t);
        if (rc)
            return rc;
        if (mrc != MPI_SUCCESS)
            return ddmpi_translate_error(mrc, "ddmpi_transport_create");
        if (v[0] != 0)
            return dds_error(v[0], "ddmpi_transport_create failed on another "
                             "rank: %s", dds_strerror(v[0]));
        return dds_error(-DDS_EIO, "ddmpi_transport_create: MPI error on "
                         "another rank");
    }
    MPI_Comm_rank(dup, &t->rank);
    MPI_Comm_size(dup, &t->size);
    ddmpi_cid_plan_init(dup, node, &t->cids);
    ddmpi_serial_unlock(serial);

    t->comm = dup;
    t->node = node;
    t->serial = serial;
    t->shm = set.shm;
    t->max_read = (size_t)set.max_read_bytes;
    ddmpi_fork_watch();

    transport_p->ops = &ddmpi_transport_ops;
    transport_p->ctx = t;
    /* same-node shards: core's node-local shard service (mapped unless
     * DDSTORE_MPI_SHM=0); forked children read them with memcpy */
    transport_p->caps = DDS_TRANSPORT_CAP_LOCAL_SELF |
                        DDS_TRANSPORT_CAP_FORK |
                        DDS_TRANSPORT_CAP_NODE_SHARDS |
                        (t->shm ? DDS_TRANSPORT_CAP_NODE_MAP : 0) |
                        (serial ? 0 : DDS_TRANSPORT_CAP_THREAD_SAFE);
    transport_p->max_read_bytes = t->max_read;
    DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_MPI, "transport created: rank %d of "
            "%d, max_read_bytes %zu, thread-safe %s", t->rank, t->size,
            t->max_read, serial ? "no" : "yes");
    return 0;
}
