/* ddstore-mpi: keeping the RMA windows of disjoint communicators apart under
 * Open MPI 4.x (osc/rdma).
 *
 * The problem.  Open MPI 4.1's osc/rdma component backs each window's state
 * with a shared-memory file per node, named
 *     <osc_rdma_backing_directory>/osc_rdma.<nodename>.<jobid hex>.<cid>
 * where <cid> is the context id of the window's internal duplicate of its
 * communicator.  Context ids are agreed within a communicator only: the
 * groups of an MPI_Comm_split take the same ids, so two groups that create
 * windows at the same time on one node open the same file.  MPI_Win_create
 * then fails (MPI_ERR_WIN) or, worse, two windows share their state.  The
 * backing directory is an MCA variable that cannot be changed at run time.
 *
 * The fix.  The window's internal duplicate takes the lowest context id free
 * on every member, which is the id a probe MPI_Comm_dup would get at that
 * moment.  Each communicator gets a residue `res` modulo `mod` that differs
 * from every other communicator sharing a node with it (below); before
 * MPI_Win_create we duplicate the communicator repeatedly, holding each
 * duplicate whose id is not congruent to `res`, free the first one that is,
 * create the window (it takes that id) and then free the held duplicates.
 * Every member takes the same decisions: the ids are agreed (and checked
 * with one allreduce per probe).
 *
 * Residues.  mod = OMPI_COMM_WORLD_LOCAL_SIZE.  When every node's part of the
 * communicator agrees on the smallest OMPI_COMM_WORLD_LOCAL_RANK of its
 * members there (true for communicators inside one node, and for those made
 * of whole nodes), res = that local rank: disjoint communicators on one node
 * have distinct smallest local ranks.  Otherwise (a communicator straddling
 * nodes) res = its smallest MPI_COMM_WORLD rank mod `mod`, which is the same
 * number under a block layout (world rank = node * mod + local rank) and
 * distinct for contiguous groups of any width (Split(rank // width, rank)).
 * Communicators that cover every rank of each node they touch (and
 * MPI_COMM_WORLD-sized ones) cannot meet another one on a node: nothing is
 * done for them.
 *
 * Observing the id.  Open MPI names every duplicate "MPI COMMUNICATOR <cid>
 * DUP FROM <parent cid>", but MPI_Comm_get_name returns "" for names the
 * user did not set.  The name is in the communicator's object (MPI_Comm is a
 * pointer to it): its offset is found once in MPI_COMM_WORLD's object
 * (padded to 512 bytes) by its name "MPI_COMM_WORLD", and checked against
 * MPI_COMM_SELF's "MPI_COMM_SELF" at the same offset.  If anything does not
 * match (another MPI, Open MPI 5 or later, a renamed MPI_COMM_WORLD, a name
 * that does not parse, environment variables missing) nothing is done and a
 * debug message says why.
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddstore/log.h"
#include "ddmpi_internal.h"

#if defined(OPEN_MPI) && OPEN_MPI

#define DDMPI_OMPI_PAD 512            /* PREDEFINED_COMMUNICATOR_PAD (4.x) */
#define DDMPI_OMPI_NAME MPI_MAX_OBJECT_NAME

static pthread_once_t ddmpi_ompi_once = PTHREAD_ONCE_INIT;
static long ddmpi_ompi_name_off = -1;  /* offset of c_name, or -1        */
static int ddmpi_ompi_ver = -1;        /* major version, -1: not Open MPI */
static const char *ddmpi_ompi_why = "not checked";

static int ddmpi_ompi_major(void)
{
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    const char *p;
    int len = 0, major = -1;

    if (MPI_Get_library_version(v, &len) != MPI_SUCCESS)
        return -1;
    v[len < (int)sizeof(v) ? (len < 0 ? 0 : len) : (int)sizeof(v) - 1] = '\0';
    p = strstr(v, "Open MPI v");
    if (!p || sscanf(p + 10, "%d", &major) != 1)
        return -1;
    return major;
}

static void ddmpi_ompi_calibrate(void)
{
    const char *w = (const char *)(void *)MPI_COMM_WORLD;
    const char *s = (const char *)(void *)MPI_COMM_SELF;
    static const char wn[] = "MPI_COMM_WORLD", sn[] = "MPI_COMM_SELF";
    int major = ddmpi_ompi_major();

    ddmpi_ompi_ver = major;
    if (major < 2 || major >= 5) {
        ddmpi_ompi_why = major < 0 ? "the library is not Open MPI"
                                   : "Open MPI 5 or later (ids not needed)";
        return;
    }
    for (long off = 0; off + DDMPI_OMPI_NAME <= DDMPI_OMPI_PAD; off++) {
        if (memcmp(w + off, wn, sizeof(wn)) != 0)
            continue;
        if (memcmp(s + off, sn, sizeof(sn)) == 0) {
            ddmpi_ompi_name_off = off;
            ddmpi_ompi_why = "";
        } else {
            ddmpi_ompi_why = "MPI_COMM_SELF's name is not where "
                             "MPI_COMM_WORLD's is";
        }
        return;
    }
    ddmpi_ompi_why = "MPI_COMM_WORLD's name not found in its object";
}

/* Context id of a duplicate made by MPI_Comm_dup, or -1. */
static long ddmpi_ompi_dup_cid(MPI_Comm c)
{
    char name[DDMPI_OMPI_NAME + 1];
    unsigned cid = 0, parent = 0;
    int used = -1;

    if (ddmpi_ompi_name_off < 0 || c == MPI_COMM_NULL)
        return -1;
    memcpy(name, (const char *)(void *)c + ddmpi_ompi_name_off,
           DDMPI_OMPI_NAME);
    name[DDMPI_OMPI_NAME] = '\0';
    if (sscanf(name, "MPI COMMUNICATOR %u DUP FROM %u%n", &cid, &parent,
               &used) != 2 || used < 0 || name[used] != '\0' ||
        cid > INT_MAX)
        return -1;
    return (long)cid;
}

static int ddmpi_env_int(const char *name, int *out)
{
    const char *v = getenv(name);
    char *end = NULL;
    long x;

    if (!v || !*v)
        return 0;
    x = strtol(v, &end, 10);
    if (!end || *end || x < 0 || x > INT_MAX)
        return 0;
    *out = (int)x;
    return 1;
}

void ddmpi_cid_plan_init(MPI_Comm comm, MPI_Comm node, ddmpi_cid_plan_t *plan)
{
    int lrank = -1, lsize = 0, wrank = 0, wsize = 0, csize = 0, nsize = 0;
    int ok, mrc, nmin;
    /* MIN over comm: ok, r, -r, M, -M, world rank, whole node */
    int v[7];
    const char *why;

    plan->mod = 0;
    plan->res = 0;
    if (comm == MPI_COMM_NULL || node == MPI_COMM_NULL)
        return;
    pthread_once(&ddmpi_ompi_once, ddmpi_ompi_calibrate);
    MPI_Comm_size(comm, &csize);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    if (ddmpi_ompi_ver < 2 || ddmpi_ompi_ver >= 5 || csize <= 1 ||
        csize >= wsize) {
        /* the same on every member: no collective */
        DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_MPI, "window context ids: not "
                "steered (%s)", csize <= 1 ? "one-rank communicator"
                : csize >= wsize ? "communicator as large as MPI_COMM_WORLD"
                : ddmpi_ompi_why);
        return;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(node, &nsize);
    ok = ddmpi_ompi_name_off >= 0 &&
         ddmpi_env_int("OMPI_COMM_WORLD_LOCAL_RANK", &lrank) &&
         ddmpi_env_int("OMPI_COMM_WORLD_LOCAL_SIZE", &lsize) &&
         lsize >= 1 && lrank < lsize && nsize <= lsize;
    if (!ok)
        lrank = lsize = 0;
    nmin = lrank;
    mrc = MPI_Allreduce(MPI_IN_PLACE, &nmin, 1, MPI_INT, MPI_MIN, node);
    v[0] = ok && mrc == MPI_SUCCESS;
    v[1] = nmin;
    v[2] = -nmin;
    v[3] = lsize;
    v[4] = -lsize;
    v[5] = wrank;
    v[6] = nsize == lsize;
    mrc = MPI_Allreduce(MPI_IN_PLACE, v, 7, MPI_INT, MPI_MIN, comm);
    if (mrc != MPI_SUCCESS || !v[0]) {
        why = mrc != MPI_SUCCESS ? "MPI_Allreduce failed"
              : ddmpi_ompi_name_off < 0 ? ddmpi_ompi_why
              : "OMPI_COMM_WORLD_LOCAL_RANK/_SIZE missing or invalid on a "
                "member";
        DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_MPI, "window context ids: not "
                "steered (%s)", why);
        return;
    }
    if (v[6]) {
        DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_MPI, "window context ids: not "
                "steered (the communicator holds every rank of its nodes)");
        return;
    }
    if (v[1] == -v[2] && v[3] == -v[4]) {
        plan->mod = v[3];
        plan->res = v[1];
    } else {
        plan->mod = -v[4];                      /* the largest local size */
        plan->res = v[5] % plan->mod;
    }
    if (plan->mod <= 1) {
        plan->mod = 0;
        return;
    }
    DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_MPI, "window context ids: Open MPI "
            "osc/rdma names window files by context id; this communicator's "
            "windows take ids = %d (mod %d)%s", plan->res, plan->mod,
            v[1] == -v[2] && v[3] == -v[4] ? ""
            : " (from the smallest world rank: nodes disagree)");
}

int ddmpi_cid_steer(MPI_Comm comm, const ddmpi_cid_plan_t *plan,
                    const char *what, MPI_Comm **held_p)
{
    MPI_Comm *held;
    int n = 0, limit, found = 0, last = -1;

    *held_p = NULL;
    if (!plan || plan->mod <= 1)
        return 0;
    limit = 2 * plan->mod + 8;
    /* Without memory for the list a member frees each probe at once: the
     * ids stay agreed (MPI agrees on them), so every member still takes the
     * same decisions; only the steering may miss. */
    held = malloc(sizeof(MPI_Comm) * (size_t)limit);
    for (int i = 0; i < limit; i++) {
        MPI_Comm p = MPI_COMM_NULL;
        long cid = -1;
        int v[2], mrc;

        mrc = MPI_Comm_dup(comm, &p);
        if (mrc == MPI_SUCCESS)
            cid = ddmpi_ompi_dup_cid(p);
        v[0] = cid < 0 ? -1 : (int)cid;
        v[1] = cid < 0 ? 0 : -(int)cid;
        mrc = MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_INT, MPI_MIN, comm);
        if (mrc != MPI_SUCCESS || v[0] < 0 || v[0] != -v[1]) {
            if (p != MPI_COMM_NULL)
                MPI_Comm_free(&p);
            DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_MPI, "%s: window context id "
                    "not steered (probe %d: %s)", what, i,
                    mrc != MPI_SUCCESS ? "MPI_Allreduce failed"
                    : v[0] < 0 ? "a duplicate's name did not parse"
                               : "members disagree on the id");
            break;
        }
        last = v[0];
        if (v[0] % plan->mod == plan->res) {
            MPI_Comm_free(&p);
            found = 1;
            break;
        }
        if (held)
            held[n++] = p;
        else
            MPI_Comm_free(&p);
    }
    if (found)
        DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_MPI, "%s: window takes context "
                "id %d (= %d mod %d) after %d probe duplicate(s)", what,
                last, plan->res, plan->mod, n);
    else if (last >= 0)
        DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_MPI, "%s: no context id = %d "
                "(mod %d) in %d probes; window created as is", what,
                plan->res, plan->mod, limit);
    *held_p = held;
    return n;
}

#else /* not Open MPI: nothing to steer */

void ddmpi_cid_plan_init(MPI_Comm comm, MPI_Comm node, ddmpi_cid_plan_t *plan)
{
    (void)comm;
    (void)node;
    plan->mod = 0;
    plan->res = 0;
}

int ddmpi_cid_steer(MPI_Comm comm, const ddmpi_cid_plan_t *plan,
                    const char *what, MPI_Comm **held_p)
{
    (void)comm;
    (void)plan;
    (void)what;
    *held_p = NULL;
    return 0;
}

#endif

void ddmpi_cid_release(MPI_Comm *held, int n)
{
    for (int i = n - 1; held && i >= 0; i--)
        if (held[i] != MPI_COMM_NULL)
            MPI_Comm_free(&held[i]);
    free(held);
}
