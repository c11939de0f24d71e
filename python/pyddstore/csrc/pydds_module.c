/* pyddstore._core: module init, exceptions, interpreter exit and fork
 * handling (the error mapping is pydds_errors.c). */
#include "pydds.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ddstore/config.h"
#include "ddstore/gpu.h"
#include "ddstore/log.h"

/* ---- interpreter exit, fork --------------------------------------------- */

/* Registered with Python's atexit (which runs before mpi4py's Py_AtExit
 * finalisation): destroy this process's stores locally (no collective: a
 * peer may have dropped its copy of a store already, or still hold one it
 * never frees), then finalise MPI if we started it. */
static PyObject *mod_atexit(PyObject *m, PyObject *unused)
{
    pid_t me = getpid();
    (void)m;
    (void)unused;
    for (;;) {
        pydds_store_obj *s = pydds_live_next_own(me);
        if (s == NULL)
            break;
        Py_INCREF(s);
        pydds_store_destroy(s);
        Py_DECREF(s);
    }
    if (pydds_mpi_started_by_us && pydds_mpi_pid == me) {
#ifdef HAVE_MPI
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = ddstore_mpi_finalize_if_ours();
        Py_END_ALLOW_THREADS
        if (rc < 0)
            DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_PY, "MPI_Finalize at exit: %s",
                    dds_last_error());
#endif
        pydds_mpi_started_by_us = 0;
    }
    Py_RETURN_NONE;
}

/* In a forked child the life locks may have been held by threads that do
 * not exist there: start them afresh.  (The child never destroys the
 * parent's stores: their pid differs.) */
static void after_fork_child(void)
{
    pydds_live_after_fork();
}

/* ---- module functions --------------------------------------------------- */

static PyObject *mod_core_version(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyUnicode_FromString(dds_core_version());
}

static PyObject *mod_strerror(PyObject *m, PyObject *arg)
{
    long rc = PyLong_AsLong(arg);
    (void)m;
    if (rc == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(dds_strerror((int)rc));
}

/* Test hooks (underscored): raise the documented exception for a code;
 * the calling thread's last read window; the monotonic clock. */
static PyObject *mod_raise(PyObject *m, PyObject *args)
{
    int rc;
    const char *msg = "";
    (void)m;
    if (!PyArg_ParseTuple(args, "i|s", &rc, &msg))
        return NULL;
    dds_error(rc, "%s", msg);
    return pydds_raise(rc);
}

extern PyObject *pydds_last_read_window(PyObject *m, PyObject *unused);
extern int pydds_filecomm_type_ready(PyObject *module); /* pydds_filecomm.c */
extern PyMethodDef pydds_info_methods[];
extern PyMethodDef pydds_config_methods[];
extern PyMethodDef pydds_handshake_methods[];
extern PyMethodDef pydds_files_methods[];

static PyObject *mod_now_ns(PyObject *m, PyObject *unused)
{
    struct timespec ts;
    (void)m;
    (void)unused;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return PyLong_FromUnsignedLongLong((unsigned long long)ts.tv_sec *
                                           1000000000ull +
                                       (unsigned long long)ts.tv_nsec);
}

static PyObject *mod_mpi_state(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
#ifdef HAVE_MPI
    {
        int init = 0, fin = 0;
        MPI_Initialized(&init);
        MPI_Finalized(&fin);
        return Py_BuildValue("{s:O,s:O,s:O}", "initialized",
                             init ? Py_True : Py_False, "finalized",
                             fin ? Py_True : Py_False, "started_by_pyddstore",
                             pydds_mpi_started_by_us ? Py_True : Py_False);
    }
#else
    return Py_BuildValue("{s:O,s:O,s:O}", "initialized", Py_False,
                         "finalized", Py_False, "started_by_pyddstore",
                         Py_False);
#endif
}

/* A communicator provider over dds_comm_self() (one rank): the same path
 * FileComm and torch groups take (tests; single-process use). */
static int self_comm_create(void *arg, dds_comm_t *comm_p)
{
    (void)arg;
    return dds_comm_self(comm_p);
}

static const pyddstore_comm_provider_t self_comm_provider = {
    sizeof(pyddstore_comm_provider_t), "self", 0, self_comm_create, NULL};

static PyObject *mod_self_comm(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyCapsule_New((void *)&self_comm_provider, PYDDSTORE_COMM_CAPSULE,
                         NULL);
}

/* _launch_env() -> [(variable, size, launcher)] for the launch variables
 * set to a positive integer (pydds_launch_vars order). */
static PyObject *mod_launch_env(PyObject *m, PyObject *unused)
{
    const pydds_launch_var_t *lv;
    PyObject *out = PyList_New(0);
    (void)m;
    (void)unused;
    if (out == NULL)
        return NULL;
    for (lv = pydds_launch_vars; lv->var != NULL; lv++) {
        long n = pydds_launch_env_size(lv->var);
        PyObject *t;
        if (n < 1)
            continue;
        t = Py_BuildValue("(sls)", lv->var, n, lv->launcher);
        if (t == NULL || PyList_Append(out, t) < 0) {
            Py_XDECREF(t);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(t);
    }
    return out;
}

/* _fabric_env() -> {name: value} of the libfabric settings that
 * ddstore_env_prepare may have set at import (set in the C environment;
 * pyddstore/__init__.py copies them into os.environ, which Python
 * snapshotted at start-up). */
static PyObject *mod_fabric_env(PyObject *m, PyObject *unused)
{
    static const char *const names[] = {"FI_CXI_DISABLE_HOST_REGISTER",
                                        "FI_MR_CACHE_MONITOR", "FI_OFI_RXM_MSG_RX_SIZE",
                                        NULL};
    PyObject *d = PyDict_New();
    int i;
    (void)m;
    (void)unused;
    for (i = 0; d != NULL && names[i] != NULL; i++) {
        const char *v = getenv(names[i]);
        PyObject *o;
        if (v == NULL)
            continue;
        o = PyUnicode_DecodeFSDefault(v);
        if (o == NULL || PyDict_SetItemString(d, names[i], o) < 0) {
            Py_XDECREF(o);
            Py_CLEAR(d);
            break;
        }
        Py_DECREF(o);
    }
    return d;
}

static PyMethodDef mod_methods[] = {
    {"_fabric_env", mod_fabric_env, METH_NOARGS,
     "_fabric_env() -> {name: value}: FI_CXI_DISABLE_HOST_REGISTER and "
     "FI_MR_CACHE_MONITOR as the C environment has them (set at import by "
     "libddstore's ddstore_env_prepare unless the user set them)."},
    {"_launch_check", pydds_launch_check, METH_VARARGS,
     "_launch_check(kind, given, mpi_library): RuntimeError when a one-rank "
     "communicator of kind mpi/torch/file (from `given`) meets a launch of several "
     "processes (pyddstore.torch's comm=None)."},
    {"_launch_env", mod_launch_env, METH_NOARGS,
     "_launch_env() -> [(variable, size, launcher)]: the launch variables "
     "(OMPI_COMM_WORLD_SIZE, PMI_SIZE, MV2_COMM_WORLD_SIZE, "
     "SLURM_STEP_NUM_TASKS, WORLD_SIZE) set to a positive integer; "
     "comm_or_none=None with a one-rank MPI_COMM_WORLD while one says more "
     "is an error."},
    {"_self_comm", mod_self_comm, METH_NOARGS,
     "A '_dds_comm' capsule for a one-rank communicator (what an object "
     "passed as comm_or_none exposes; see ddstore/comm_provider.h)."},
    {"core_version", mod_core_version, METH_NOARGS,
     "core_version() -> str: version of ddstore-core linked into _core."},
    {"strerror", mod_strerror, METH_O,
     "strerror(code) -> str: static description of a DDS_E* code."},
    {"_atexit", mod_atexit, METH_NOARGS,
     "Destroy every store of this process (creation order), then finalise MPI "
     "if pyddstore started it.  Registered with atexit at import."},
    {"_raise", mod_raise, METH_VARARGS,
     "_raise(code, msg='') raises the exception documented for a DDS_E* code "
     "(tests of the error mapping)."},
    {"_last_read_window", pydds_last_read_window, METH_NOARGS,
     "(t0_ns, t1_ns) of the calling thread's last get/get_batch, taken with "
     "the GIL released (CLOCK_MONOTONIC)."},
    {"_now_ns", mod_now_ns, METH_NOARGS, "CLOCK_MONOTONIC in ns."},
    {"_mpi_state", mod_mpi_state, METH_NOARGS,
     "{'initialized', 'finalized', 'started_by_pyddstore'} without "
     "initialising MPI."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT, "pyddstore._core",
    "pyddstore's CPython extension: PyDDStore over the buffer protocol and "
    "the exceptions (the C libraries are libddstore.so, shared with the torch "
    "extension).",
    -1, mod_methods, NULL, NULL, NULL, NULL};

static int add_exceptions(PyObject *m)
{
    PyObject *bases = NULL, *dict = NULL, *str = NULL;

    pydds_Error = PyErr_NewExceptionWithDoc(
        "pyddstore.DDStoreError",
        "ddstore failure: transport or provider error, timeout, dead peer, "
        "freed or destroyed store, feature not built (RuntimeError).",
        PyExc_RuntimeError, NULL);
    if (pydds_Error == NULL)
        return -1;

    /* DDStoreKeyError(KeyError, IndexError) with BaseException's __str__, so
     * the message is not quoted like a plain KeyError's. */
    bases = PyTuple_Pack(2, PyExc_KeyError, PyExc_IndexError);
    dict = PyDict_New();
    if (bases == NULL || dict == NULL)
        goto fail;
    str = PyObject_GetAttrString(PyExc_BaseException, "__str__");
    if (str == NULL || PyDict_SetItemString(dict, "__str__", str) < 0)
        goto fail;
    pydds_KeyError = PyErr_NewExceptionWithDoc(
        "pyddstore.DDStoreKeyError",
        "Unknown variable name.  A KeyError and, for older code, an "
        "IndexError.",
        bases, dict);
    if (pydds_KeyError == NULL)
        goto fail;
    Py_DECREF(bases);
    Py_DECREF(dict);
    Py_DECREF(str);

    Py_INCREF(pydds_Error);
    if (PyModule_AddObject(m, "DDStoreError", pydds_Error) < 0) {
        Py_DECREF(pydds_Error);
        return -1;
    }
    Py_INCREF(pydds_KeyError);
    if (PyModule_AddObject(m, "DDStoreKeyError", pydds_KeyError) < 0) {
        Py_DECREF(pydds_KeyError);
        return -1;
    }
    return 0;
fail:
    Py_XDECREF(bases);
    Py_XDECREF(dict);
    Py_XDECREF(str);
    return -1;
}

static int register_atexit(PyObject *m)
{
    PyObject *atexit = NULL, *fn = NULL, *res = NULL;
    atexit = PyImport_ImportModule("atexit");
    if (atexit == NULL)
        return -1;
    fn = PyObject_GetAttrString(m, "_atexit");
    if (fn != NULL)
        res = PyObject_CallMethod(atexit, "register", "O", fn);
    Py_DECREF(atexit);
    Py_XDECREF(fn);
    if (res == NULL)
        return -1;
    Py_DECREF(res);
    return 0;
}

PyMODINIT_FUNC PyInit__core(void)
{
    static int forked_registered = 0;
    PyObject *m;
    /* First: the libfabric settings that libfabric (or an MPI built on it)
     * reads once when it starts; importing pyddstore starts neither.  A bad
     * DDSTORE_FORK_WORKERS is logged and ignored here (the settings it
     * would add are optional). */
    if (ddstore_env_prepare() < 0)
        DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_PY, "%s", dds_last_error());
    m = PyModule_Create(&core_module);
    if (m == NULL)
        return NULL;
    if (add_exceptions(m) < 0)
        goto fail;
    if (pydds_store_type_ready(m) < 0 || pydds_reader_type_ready(m) < 0 ||
        pydds_filecomm_type_ready(m) < 0 || pydds_coll_ready(m) < 0)
        goto fail;
#ifdef HAVE_MPI
    if (PyModule_AddObject(m, "HAVE_MPI", Py_NewRef(Py_True)) < 0)
        goto fail;
#else
    if (PyModule_AddObject(m, "HAVE_MPI", Py_NewRef(Py_False)) < 0)
        goto fail;
#endif
    {
        /* the public flag: libfabric's rows (methods 1 and 2) are built */
        const ddstore_backend_t *ofi = ddstore_backend_by_name("ofi");
        if (PyModule_AddObject(m, "HAVE_OFI", Py_NewRef(ofi != NULL &&
                                                         ofi->built
                                                     ? Py_True
                                                     : Py_False)) < 0)
            goto fail;
    }
    if (PyModule_AddStringConstant(m, "__version__", PYDDSTORE_VERSION) < 0)
        goto fail;
    /* ddstore-gpu's backend compiled in: "cuda", "hip" or "none" (no GPU
     * support); does not probe the GPU (see _gpu_info()) */
    if (PyModule_AddStringConstant(m, "GPU_BACKEND", ddgpu_backend_name()) < 0 ||
        PyModule_AddFunctions(m, pydds_gpu_methods) < 0 ||
        PyModule_AddFunctions(m, pydds_info_methods) < 0 ||
        PyModule_AddFunctions(m, pydds_config_methods) < 0 ||
        PyModule_AddFunctions(m, pydds_handshake_methods) < 0 ||
        PyModule_AddFunctions(m, pydds_files_methods) < 0)
        goto fail;
    if (register_atexit(m) < 0)
        goto fail;
    dds_config_register_core();   /* DDSTORE_METHOD & co. (idempotent) */
    if (!forked_registered) {
        pthread_atfork(NULL, NULL, after_fork_child);
        forked_registered = 1;
    }
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
