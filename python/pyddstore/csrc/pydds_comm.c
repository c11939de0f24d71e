/* pyddstore._core: communicator resolution for PyDDStore(comm_or_none).
 *
 *   None                     MPI_COMM_WORLD (HAVE_MPI; MPI is started here,
 *                            never at import; of one rank while the
 *                            launcher says several: RuntimeError), else a
 *                            one-rank "self" communicator when size <= 1
 *   object with `_dds_comm`  a capsule PYDDSTORE_COMM_CAPSULE holding a
 *                            pyddstore_comm_provider_t (FileComm, torch
 *                            groups: ddstore/comm_provider.h)
 *   mpi4py communicator      its MPI_Comm through mpi4py.MPI._addressof
 *                            (mpi4py is imported only for such an object)
 *
 * and the borrowed mpi4py communicator of _core.Collective (no dup).
 */
#include "pydds.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int pydds_mpi_started_by_us = 0;
pid_t pydds_mpi_pid = 0;

/* ---- how many processes the launcher started ------------------------------
 *
 * The variables a launcher sets in every process it starts, naming the size
 * of *this* launch.  SLURM_NTASKS is not one: it is set in the whole
 * allocation, also for a one-task `python` in the batch script; srun sets
 * SLURM_STEP_NUM_TASKS for the tasks of its step. */
const pydds_launch_var_t pydds_launch_vars[] = {
    {"OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun"},
    {"PMI_SIZE",
     "a PMI launcher (MPICH's or Intel MPI's mpiexec, srun --mpi=pmi2)"},
    {"MV2_COMM_WORLD_SIZE", "MVAPICH's mpirun_rsh"},
    {"SLURM_STEP_NUM_TASKS", "srun"},
    {"WORLD_SIZE", "torchrun"},
    {NULL, NULL}};

long pydds_launch_env_size(const char *var)
{
    const char *v = getenv(var);
    char *end = NULL;
    long n;
    if (v == NULL || *v == '\0')
        return 0;
    n = strtol(v, &end, 10);
    if (end == v || *end != '\0' || n < 1)
        return 0;
    return n;
}

/* The launch variable naming the most processes (> 1; the first of equal
 * ones) and that number in *n_p, or NULL. */
static const pydds_launch_var_t *launch_most(long *n_p)
{
    const pydds_launch_var_t *lv, *most = NULL;
    *n_p = 1;
    for (lv = pydds_launch_vars; lv->var != NULL; lv++) {
        long k = pydds_launch_env_size(lv->var);
        if (k > *n_p) {
            *n_p = k;
            most = lv;
        }
    }
    return most;
}

/* _launch_check(kind, given, mpi_library): pyddstore.torch's comm=None (or
 * an explicit MPI.COMM_WORLD: `given`) resolved to a one-rank communicator
 * of `kind` ("mpi", "torch", "file") while the launcher says it started
 * several processes: RuntimeError saying so and how to fix it. */
PyObject *pydds_launch_check(PyObject *mod, PyObject *args)
{
    const char *kind, *given, *lib, *what, *fix;
    const pydds_launch_var_t *most;
    long n;
    PyObject *w;
    (void)mod;
    if (!PyArg_ParseTuple(args, "sss:_launch_check", &kind, &given, &lib))
        return NULL;
    if ((most = launch_most(&n)) == NULL)
        Py_RETURN_NONE;
    if (strcmp(kind, "mpi") == 0) {
        what = "MPI.COMM_WORLD has 1 rank: mpi4py/pyddstore's MPI (%s) did not see that launch";
        fix = strcmp(most->var, "WORLD_SIZE") == 0
                  ? "under torchrun call torch.distributed.init_process_group() before "
                    "(comm=None then uses the torch.distributed group, method 1), or "
                    "launch with the MPI's own launcher"
                  : "launch with the launcher of the MPI that mpi4py and pyddstore were "
                    "built with (not, e.g., MPICH's mpiexec for an Open MPI build; srun "
                    "with the PMI plugin that MPI needs)";
    } else if (strcmp(kind, "torch") == 0) {
        what = "the torch.distributed default group has 1 rank";
        fix = "initialise torch.distributed with every process (world_size, rank)";
    } else {
        what = "the FileComm has 1 rank (rank and size from SLURM_PROCID/SLURM_NTASKS, "
               "RANK/WORLD_SIZE, ...)";
        fix = "pass comm= explicitly (a pyddstore.FileComm with rank and size)";
    }
    w = PyUnicode_FromFormat(what, lib);
    if (w == NULL)
        return NULL;
    PyErr_Format(PyExc_RuntimeError,
                 "%s: %U, but %s=%ld says %s started %ld processes; each would hold a "
                 "one-rank store with the whole dataset.  Fix: %s; or pass "
                 "comm=MPI.COMM_SELF for a deliberate one-rank store per process",
                 given, w, most->var, n, most->launcher, n, fix);
    Py_DECREF(w);
    return NULL;
}

#ifdef HAVE_MPI
/* comm_or_none=None or MPI.COMM_WORLD (`given`) gave MPI_COMM_WORLD of one
 * rank: an error when the launcher says the job has several (the MPI library
 * is not the launcher's, every process would hold a one-rank store).  0, or
 * -1 with RuntimeError. */
static int check_launch(const pydds_comm_res_t *res, const char *given)
{
    const pydds_launch_var_t *most;
    long n = 1;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING + 1];
    int len = 0;
    if (res->comm.size != 1 || (most = launch_most(&n)) == NULL)
        return 0;
    MPI_Get_library_version(lib, &len);
    lib[len < 0 ? 0 : len] = '\0';
    lib[strcspn(lib, "\n,")] = '\0';
    PyErr_Format(
        PyExc_RuntimeError,
        "PyDDStore(comm_or_none=%s): MPI_COMM_WORLD has 1 rank, but "
        "%s=%ld says %s started %ld processes: this pyddstore's MPI (%s) "
        "did not see that launch, so every process would hold a store of "
        "its own.  Launch with the launcher of the MPI pyddstore and "
        "mpi4py were built with (e.g. not MPICH's mpiexec for an Open MPI "
        "build; srun with the PMI plugin the MPI needs)%s, or pass "
        "comm_or_none=MPI.COMM_SELF for a deliberate one-rank store",
        given, most->var, n, most->launcher, n, lib,
        strcmp(most->var, "WORLD_SIZE") == 0
            ? "; under torchrun pass a torch.distributed group "
              "(pyddstore.torch.TorchComm(), methods 1 and 2)"
            : "");
    return -1;
}
#endif

static int raise_rc(int rc)
{
    pydds_raise(rc);
    return -1;
}

#ifdef HAVE_MPI
static int resolve_mpi(MPI_Comm comm, pydds_comm_res_t *res)
{
    int rc, ours = 0, provided = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = ddstore_mpi_init(&provided, &ours);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return raise_rc(rc);
    if (ours && !pydds_mpi_started_by_us) {
        pydds_mpi_started_by_us = 1;
        pydds_mpi_pid = getpid();
    }
    Py_BEGIN_ALLOW_THREADS
    rc = ddstore_comm_from_mpi(&comm, &res->comm);   /* collective: dup */
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return raise_rc(rc);
    res->kind = PYDDS_COMM_MPI;
    res->have_comm = 1;
    res->mpi_comm = comm;
    res->kind_name = "mpi";
    return 0;
}

/* mpi4py must use the MPI library we link (mpi4py 4 can load several). */
static int check_same_mpi(PyObject *MPI)
{
    char ours[MPI_MAX_LIBRARY_VERSION_STRING + 1];
    int len = 0;
    PyObject *v;
    const char *theirs;
    int same;
    MPI_Get_library_version(ours, &len);
    ours[len < 0 ? 0 : len] = '\0';
    v = PyObject_CallMethod(MPI, "Get_library_version", NULL);
    if (v == NULL)
        return -1;
    theirs = PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;
    if (theirs == NULL) {
        Py_DECREF(v);
        PyErr_Clear();
        return 0;   /* cannot tell: trust it */
    }
    {
        /* compare the first line (name + version) */
        size_t a = strcspn(ours, "\n,"), b = strcspn(theirs, "\n,");
        same = a == b && strncmp(ours, theirs, a) == 0;
    }
    if (!same)
        PyErr_Format(PyExc_TypeError,
                     "comm_or_none: mpi4py uses a different MPI library "
                     "(%.*s) than pyddstore (%.*s); use the same MPI for both",
                     (int)strcspn(theirs, "\n,"), theirs,
                     (int)strcspn(ours, "\n,"), ours);
    Py_DECREF(v);
    return same ? 0 : -1;
}
#endif

#ifdef HAVE_MPI
/* obj's MPI_Comm (an mpi4py intracommunicator over our MPI library, not
 * COMM_NULL), through mpi4py.MPI._addressof; 0 or -1 with an exception. */
static int mpi4py_handle(PyObject *obj, MPI_Comm *comm_p)
{
    PyObject *MPI = NULL, *cls = NULL, *null = NULL, *addr = NULL;
    void *p;
    int r, rc = -1;
    MPI = PyImport_ImportModule("mpi4py.MPI");
    if (MPI == NULL)
        return -1;
    null = PyObject_GetAttrString(MPI, "COMM_NULL");
    if (null == NULL)
        goto out;
    r = PyObject_RichCompareBool(obj, null, Py_EQ);
    if (r < 0) {
        PyErr_Clear();   /* not comparable: not COMM_NULL */
        r = 0;
    }
    if (r) {
        PyErr_SetString(PyExc_ValueError,
                        "comm_or_none: got MPI.COMM_NULL");
        goto out;
    }
    cls = PyObject_GetAttrString(MPI, "Intracomm");
    if (cls == NULL)
        goto out;
    r = PyObject_IsInstance(obj, cls);
    if (r < 0)
        goto out;
    if (r == 0) {
        PyErr_Format(PyExc_TypeError,
                     "comm_or_none: expected an mpi4py intracommunicator, "
                     "got %s",
                     Py_TYPE(obj)->tp_name);
        goto out;
    }
    if (check_same_mpi(MPI) < 0)
        goto out;
    addr = PyObject_CallMethod(MPI, "_addressof", "O", obj);
    if (addr == NULL)
        goto out;
    p = PyLong_AsVoidPtr(addr);
    if (p == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError,
                            "comm_or_none: mpi4py returned a NULL address");
        goto out;
    }
    *comm_p = *(MPI_Comm *)p;
    rc = 0;
out:
    Py_XDECREF(MPI);
    Py_XDECREF(cls);
    Py_XDECREF(null);
    Py_XDECREF(addr);
    return rc;
}
#endif

static int resolve_mpi4py(PyObject *obj, pydds_comm_res_t *res)
{
#ifdef HAVE_MPI
    MPI_Comm comm;
    int rc = mpi4py_handle(obj, &comm);
    if (rc == 0)
        rc = resolve_mpi(comm, res);
    if (rc == 0 && comm == MPI_COMM_WORLD &&
        check_launch(res, "MPI.COMM_WORLD") < 0) {
        pydds_comm_res_cleanup(res);
        rc = -1;
    }
    return rc;
#else
    (void)res;
    PyErr_Format(PyExc_ValueError,
                 "comm_or_none: got an mpi4py communicator (%s), but this "
                 "build of pyddstore has no MPI (pyddstore.HAVE_MPI is "
                 "False); pass a FileComm or a torch.distributed group",
                 Py_TYPE(obj)->tp_name);
    return -1;
#endif
}

int pydds_comm_borrow_mpi4py(PyObject *obj, dds_comm_t *comm_p)
{
#ifdef HAVE_MPI
    MPI_Comm comm;
    int rc;
    if (mpi4py_handle(obj, &comm) < 0)
        return -1;
    rc = ddstore_comm_borrow_mpi(&comm, comm_p);
    return rc < 0 ? raise_rc(rc) : 0;
#else
    return resolve_mpi4py(obj, NULL);
#endif
}

/* mpi_same_library() -> True when this build has MPI and mpi4py's MPI
 * library is the one linked here (the first line of the version string). */
PyObject *pydds_mpi_same_library(PyObject *mod, PyObject *unused)
{
#ifdef HAVE_MPI
    PyObject *MPI = PyImport_ImportModule("mpi4py.MPI");
    int rc;
    (void)mod;
    (void)unused;
    if (MPI == NULL)
        return NULL;
    rc = check_same_mpi(MPI);
    Py_DECREF(MPI);
    if (rc < 0 && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    if (rc < 0)
        return NULL;
    Py_RETURN_TRUE;
#else
    (void)mod;
    (void)unused;
    Py_RETURN_FALSE;
#endif
}

static int resolve_provider(PyObject *cap, pydds_comm_res_t *res)
{
    const pyddstore_comm_provider_t *pv;
    int rc;
    if (!PyCapsule_IsValid(cap, PYDDSTORE_COMM_CAPSULE)) {
        PyErr_Format(PyExc_TypeError,
                     "comm_or_none._dds_comm: expected a capsule named '%s'",
                     PYDDSTORE_COMM_CAPSULE);
        return -1;
    }
    pv = (const pyddstore_comm_provider_t *)PyCapsule_GetPointer(
        cap, PYDDSTORE_COMM_CAPSULE);
    if (pv == NULL)
        return -1;
    if (pv->size < offsetof(pyddstore_comm_provider_t, arg) + sizeof(pv->arg) ||
        pv->create == NULL) {
        PyErr_SetString(PyExc_TypeError,
                        "comm_or_none._dds_comm: incomplete communicator "
                        "provider");
        return -1;
    }
    /* With the GIL: create() may call into Python. */
    memset(&res->comm, 0, sizeof res->comm);
    rc = pv->create(pv->arg, &res->comm);
    if (rc < 0) {
        if (!PyErr_Occurred())
            pydds_raise(rc);
        return -1;
    }
    if (res->comm.ops == NULL || res->comm.size < 1 || res->comm.rank < 0 ||
        res->comm.rank >= res->comm.size) {
        dds_comm_destroy(&res->comm);
        PyErr_SetString(PyExc_ValueError,
                        "comm_or_none._dds_comm: the provider returned an "
                        "invalid communicator");
        return -1;
    }
    res->kind = PYDDS_COMM_PROVIDER;
    res->have_comm = 1;
    res->needs_gil = pv->needs_gil != 0;
    res->kind_name = pv->name ? pv->name : "provider";
    return 0;
}

int pydds_is_mpi4py(PyObject *obj)
{
    PyObject *mod = PyObject_GetAttrString((PyObject *)Py_TYPE(obj),
                                           "__module__");
    int r = 0;
    if (mod == NULL) {
        PyErr_Clear();
        return 0;
    }
    if (PyUnicode_Check(mod)) {
        const char *s = PyUnicode_AsUTF8(mod);
        r = s != NULL && strncmp(s, "mpi4py", 6) == 0;
        if (s == NULL)
            PyErr_Clear();
    }
    Py_DECREF(mod);
    return r;
}

int pydds_comm_resolve(PyObject *obj, int rank, int size,
                       pydds_comm_res_t *res)
{
    int rc;
    memset(res, 0, sizeof *res);
    if (obj == NULL || obj == Py_None) {
#ifdef HAVE_MPI
        (void)rank;
        rc = resolve_mpi(MPI_COMM_WORLD, res);
        if (rc == 0 && check_launch(res, "None") < 0) {
            pydds_comm_res_cleanup(res);
            return -1;
        }
#else
        if (size > 1) {
            PyErr_SetString(PyExc_ValueError,
                            "comm_or_none=None: this build of pyddstore has "
                            "no MPI (HAVE_MPI is False); pass a communicator "
                            "(pyddstore.FileComm or a torch.distributed "
                            "group)");
            return -1;
        }
        rc = dds_comm_self(&res->comm);
        if (rc < 0)
            return raise_rc(rc);
        res->kind = PYDDS_COMM_SELF;
        res->have_comm = 1;
        res->kind_name = "self";
        rc = 0;
#endif
    } else {
        PyObject *cap = PyObject_GetAttrString(obj, "_dds_comm");
        if (cap != NULL) {
            rc = resolve_provider(cap, res);
            Py_DECREF(cap);
        } else if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            return -1;
        } else {
            PyErr_Clear();
            if (pydds_is_mpi4py(obj)) {
                rc = resolve_mpi4py(obj, res);
            } else {
                PyErr_Format(PyExc_TypeError,
                             "comm_or_none: expected None, an mpi4py "
                             "communicator or a ddstore communicator "
                             "(pyddstore.FileComm, torch.distributed group), "
                             "got %s",
                             Py_TYPE(obj)->tp_name);
                return -1;
            }
        }
    }
    if (rc < 0)
        return -1;
    /* The constructor's hints must agree with the communicator. */
    if ((rank >= 0 && rank != res->comm.rank) ||
        (size > 0 && size != res->comm.size)) {
        PyErr_Format(PyExc_ValueError,
                     "rank/size: given rank %d, size %d, but the %s "
                     "communicator has rank %d of %d",
                     rank, size, res->kind_name, res->comm.rank,
                     res->comm.size);
        pydds_comm_res_cleanup(res);
        return -1;
    }
    return 0;
}

void pydds_comm_res_cleanup(pydds_comm_res_t *res)
{
    if (res->have_comm) {
        dds_comm_destroy(&res->comm);
        res->have_comm = 0;
    }
}
