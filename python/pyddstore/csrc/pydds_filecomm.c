/* pyddstore._core: FileComm, a communicator over files in a shared
 * directory (ddstore-core's comm_file.h), for runs without MPI.
 *
 *   fc = FileComm(dir, rank=None, size=None, ns="", timeout=None)
 *   PyDDStore(fc, method=1)          # through the `_dds_comm` capsule
 *   fc.barrier(); fc.allgather_bytes(b) -> [bytes of rank 0, 1, ...]
 *
 * The object keeps one C communicator of its own for barrier() and
 * allgather_bytes(); every store made over it gets a fresh C communicator
 * from the capsule's create() (the n-th one of every rank talk together, so
 * ranks must create stores in the same order, as for any collective).
 * needs_gil = 0: the ops never touch Python.
 */
#include "pydds.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ddstore/comm_file.h"
#include "ddstore/wire.h"

typedef struct {
    PyObject_HEAD
    pyddstore_comm_provider_t provider; /* arg = this object */
    dds_comm_t comm;                    /* for barrier / allgather_bytes */
    int have_comm;
    char *dir;
    char *ns;
    double timeout_s;
    pid_t pid;
    PyThread_type_lock lock; /* one collective at a time on `comm` */
} pydds_filecomm_obj;

static PyTypeObject pydds_FileCommType;

static int filecomm_provider_create(void *arg, dds_comm_t *comm_p)
{
    pydds_filecomm_obj *self = arg;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = dds_comm_file_create(self->dir, self->comm.rank, self->comm.size,
                              self->ns, self->timeout_s, comm_p);
    Py_END_ALLOW_THREADS
    return rc;
}

static void capsule_destructor(PyObject *cap)
{
    PyObject *owner = PyCapsule_GetContext(cap);
    Py_XDECREF(owner);
}

static int filecomm_init(pydds_filecomm_obj *self, PyObject *args,
                         PyObject *kw)
{
    static char *kwlist[] = {"dir", "rank", "size", "ns", "timeout", NULL};
    PyObject *dir_obj = NULL, *rank_obj = Py_None, *size_obj = Py_None,
             *timeout_obj = Py_None, *dir_bytes = NULL;
    const char *ns = "";
    int rank = -1, size = -1, rc;
    double timeout_s = 0;

    if (self->have_comm) {
        PyErr_SetString(PyExc_RuntimeError, "FileComm: already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OOzO:FileComm", kwlist,
                                     &dir_obj, &rank_obj, &size_obj, &ns,
                                     &timeout_obj))
        return -1;
    if (ns == NULL)
        ns = "";
    if (!PyUnicode_FSConverter(dir_obj, &dir_bytes))
        return -1;
    if (rank_obj != Py_None) {
        long v = PyLong_AsLong(rank_obj);
        if (v == -1 && PyErr_Occurred())
            goto fail;
        if (v < 0 || v > INT32_MAX) {
            PyErr_Format(PyExc_ValueError,
                         "FileComm: rank must be >= 0, got %ld", v);
            goto fail;
        }
        rank = (int)v;
    }
    if (size_obj != Py_None) {
        long v = PyLong_AsLong(size_obj);
        if (v == -1 && PyErr_Occurred())
            goto fail;
        if (v < 1 || v > INT32_MAX) {
            PyErr_Format(PyExc_ValueError,
                         "FileComm: size must be >= 1, got %ld", v);
            goto fail;
        }
        size = (int)v;
    }
    if (timeout_obj != Py_None) {
        timeout_s = PyFloat_AsDouble(timeout_obj);
        if (timeout_s == -1 && PyErr_Occurred())
            goto fail;
        if (!(timeout_s > 0)) {
            /* PyErr_Format knows no %g: format the number here */
            char num[64];
            snprintf(num, sizeof num, "%g", timeout_s);
            PyErr_Format(PyExc_ValueError,
                         "FileComm: timeout must be > 0 seconds, got %s", num);
            goto fail;
        }
    }
    {
        const char *dir = PyBytes_AS_STRING(dir_bytes);
        Py_BEGIN_ALLOW_THREADS
        rc = dds_comm_file_create(dir, rank, size, ns, timeout_s,
                                  &self->comm);
        Py_END_ALLOW_THREADS
    }
    if (rc < 0) {
        pydds_raise(rc);
        goto fail;
    }
    self->have_comm = 1;
    self->dir = strdup(PyBytes_AS_STRING(dir_bytes));
    self->ns = strdup(dds_comm_file_ns(&self->comm));
    self->lock = PyThread_allocate_lock();
    if (self->dir == NULL || self->ns == NULL || self->lock == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    self->timeout_s = timeout_s;
    self->pid = getpid();
    self->provider.size = sizeof(pyddstore_comm_provider_t);
    self->provider.name = "file";
    self->provider.needs_gil = 0;
    self->provider.create = filecomm_provider_create;
    self->provider.arg = self;
    Py_DECREF(dir_bytes);
    return 0;
fail:
    Py_XDECREF(dir_bytes);
    return -1;
}

static void filecomm_dealloc(pydds_filecomm_obj *self)
{
    if (self->have_comm)
        dds_comm_destroy(&self->comm);
    if (self->lock)
        PyThread_free_lock(self->lock);
    free(self->dir);
    free(self->ns);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int check_ready(pydds_filecomm_obj *self)
{
    if (!self->have_comm) {
        PyErr_SetString(PyExc_RuntimeError,
                        "FileComm: not initialised (call FileComm(dir, ...))");
        return -1;
    }
    return 0;
}

/* One collective on the object's own communicator, GIL released. */
static PyObject *filecomm_barrier(pydds_filecomm_obj *self,
                                  PyObject *unused)
{
    int rc;
    (void)unused;
    if (check_ready(self) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(self->lock, WAIT_LOCK);
    rc = self->comm.ops->barrier(self->comm.ctx);
    PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return pydds_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *filecomm_allgather_bytes(pydds_filecomm_obj *self,
                                          PyObject *arg)
{
    Py_buffer view;
    size_t *lens, at = 0;
    void *recv = NULL;
    PyObject *out = NULL;
    int rc;

    if (check_ready(self) < 0)
        return NULL;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    lens = PyMem_RawCalloc((size_t)self->comm.size, sizeof *lens);
    if (lens == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(self->lock, WAIT_LOCK);
    rc = dds_comm_allgatherv(&self->comm, view.buf, (size_t)view.len, &recv, lens);
    PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (rc < 0) {
        pydds_raise(rc);
        goto out;
    }
    out = PyList_New(self->comm.size);
    for (int i = 0; out != NULL && i < self->comm.size; at += lens[i], i++) {
        PyObject *b = PyBytes_FromStringAndSize(recv ? (char *)recv + at : "",
                                                (Py_ssize_t)lens[i]);
        if (b == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, b);
    }
out:
    PyMem_RawFree(lens);
    free(recv);
    return out;
}

/* obj's own communicator and lock when obj is a FileComm (1), else 0. */
int pydds_filecomm_comm(PyObject *obj, dds_comm_t **comm_p, PyThread_type_lock *lock_p)
{
    pydds_filecomm_obj *self;
    if (!PyObject_TypeCheck(obj, &pydds_FileCommType))
        return 0;
    self = (pydds_filecomm_obj *)obj;
    if (check_ready(self) < 0)
        return 0;
    *comm_p = &self->comm;
    *lock_p = self->lock;
    return 1;
}

static PyObject *filecomm_get_rank(pydds_filecomm_obj *self, void *c)
{
    (void)c;
    if (check_ready(self) < 0)
        return NULL;
    return PyLong_FromLong(self->comm.rank);
}

static PyObject *filecomm_get_size(pydds_filecomm_obj *self, void *c)
{
    (void)c;
    if (check_ready(self) < 0)
        return NULL;
    return PyLong_FromLong(self->comm.size);
}

static PyObject *filecomm_get_dir(pydds_filecomm_obj *self, void *c)
{
    (void)c;
    if (check_ready(self) < 0)
        return NULL;
    return PyUnicode_DecodeFSDefault(self->dir);
}

static PyObject *filecomm_get_ns(pydds_filecomm_obj *self, void *c)
{
    (void)c;
    if (check_ready(self) < 0)
        return NULL;
    return PyUnicode_DecodeFSDefault(self->ns);
}

static PyObject *filecomm_get_path(pydds_filecomm_obj *self, void *c)
{
    (void)c;
    if (check_ready(self) < 0)
        return NULL;
    return PyUnicode_DecodeFSDefault(dds_comm_file_path(&self->comm));
}

static PyObject *filecomm_get_timeout(pydds_filecomm_obj *self, void *c)
{
    (void)c;
    if (check_ready(self) < 0)
        return NULL;
    if (self->timeout_s > 0)
        return PyFloat_FromDouble(self->timeout_s);
    Py_RETURN_NONE;
}

static PyObject *filecomm_get_capsule(pydds_filecomm_obj *self, void *c)
{
    PyObject *cap;
    (void)c;
    if (check_ready(self) < 0)
        return NULL;
    cap = PyCapsule_New(&self->provider, PYDDSTORE_COMM_CAPSULE,
                        capsule_destructor);
    if (cap == NULL)
        return NULL;
    /* the capsule keeps the provider (inside this object) alive */
    Py_INCREF(self);
    if (PyCapsule_SetContext(cap, self) < 0) {
        Py_DECREF(self);
        Py_DECREF(cap);
        return NULL;
    }
    return cap;
}

static PyObject *filecomm_repr(pydds_filecomm_obj *self)
{
    if (!self->have_comm)
        return PyUnicode_FromString("<FileComm (uninitialised)>");
    return PyUnicode_FromFormat("<FileComm rank %d of %d in %s>",
                                self->comm.rank, self->comm.size,
                                dds_comm_file_path(&self->comm));
}

static PyMethodDef filecomm_methods[] = {
    {"barrier", (PyCFunction)filecomm_barrier, METH_NOARGS,
     "barrier(): wait until every rank has called barrier() (collective; "
     "DDStoreError on timeout naming the missing ranks)."},
    {"allgather_bytes", (PyCFunction)filecomm_allgather_bytes, METH_O,
     "allgather_bytes(b) -> list of bytes: every rank's `b` in rank order "
     "(collective; lengths may differ)."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef filecomm_getset[] = {
    {"rank", (getter)filecomm_get_rank, NULL, "this rank", NULL},
    {"size", (getter)filecomm_get_size, NULL, "number of ranks", NULL},
    {"dir", (getter)filecomm_get_dir, NULL, "the shared directory", NULL},
    {"ns", (getter)filecomm_get_ns, NULL,
     "the namespace (a subdirectory of dir) naming this run", NULL},
    {"path", (getter)filecomm_get_path, NULL,
     "dir/ns: where the files are", NULL},
    {"timeout", (getter)filecomm_get_timeout, NULL,
     "seconds a collective waits for peers (None: "
     "DDSTORE_COLLECTIVE_TIMEOUT_S)",
     NULL},
    {"_dds_comm", (getter)filecomm_get_capsule, NULL,
     "capsule 'pyddstore._dds_comm' (ddstore/comm_provider.h): how PyDDStore makes "
     "its communicator",
     NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject pydds_FileCommType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pyddstore.FileComm",
    .tp_basicsize = sizeof(pydds_filecomm_obj),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc =
        "FileComm(dir, rank=None, size=None, ns='', timeout=None)\n\n"
        "A communicator over files in a shared directory, for runs without "
        "MPI: pass it to PyDDStore(comm, method=1 or 2).  rank/size default "
        "to SLURM_PROCID/SLURM_NTASKS (then OMPI_COMM_WORLD_RANK/SIZE, "
        "PMI_RANK/PMI_SIZE); ns defaults to SLURM_JOB_ID.SLURM_STEP_ID, else "
        "'default', and must differ between runs sharing `dir` (a second run "
        "on a namespace in use fails with DDStoreError naming the holder); "
        "timeout defaults to DDSTORE_COLLECTIVE_TIMEOUT_S (1800 s).  `dir` "
        "and dir/ns must be the user's own and not writable by others "
        "(ValueError otherwise; docs/security.md).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)filecomm_init,
    .tp_dealloc = (destructor)filecomm_dealloc,
    .tp_repr = (reprfunc)filecomm_repr,
    .tp_methods = filecomm_methods,
    .tp_getset = filecomm_getset,
};

int pydds_filecomm_type_ready(PyObject *module)
{
    dds_comm_file_register_config();   /* listed by pyddstore.info --env */
    if (PyType_Ready(&pydds_FileCommType) < 0)
        return -1;
    Py_INCREF(&pydds_FileCommType);
    if (PyModule_AddObject(module, "FileComm",
                           (PyObject *)&pydds_FileCommType) < 0) {
        Py_DECREF(&pydds_FileCommType);
        return -1;
    }
    return 0;
}
