/* pyddstore._core: build information and the env registry, for
 * `python -m pyddstore.info` (./ddstore info) and docs/environment.md. */
#include "pydds.h"

#include <limits.h>

#include "ddstore/config.h"

static const char *type_name(dds_config_type_t t)
{
    switch (t) {
    case DDS_CONFIG_BOOL: return "bool";
    case DDS_CONFIG_INT: return "int";
    case DDS_CONFIG_DOUBLE: return "float";
    case DDS_CONFIG_STRING: return "string";
    case DDS_CONFIG_ENUM: return "enum";
    case DDS_CONFIG_SECONDS: return "seconds";
    case DDS_CONFIG_SIZE: return "size";
    }
    return "?";
}

static PyObject *opt_str(const char *s)
{
    if (s == NULL)
        Py_RETURN_NONE;
    return PyUnicode_FromString(s);
}

static PyObject *mod_config_entries(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    ddstore_config_register_all();
    size_t n = dds_config_count();
    PyObject *list = PyList_New(0);
    if (list == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const dds_config_entry_t *e = dds_config_at(i);
        if (e == NULL)
            continue;
        PyObject *d = Py_BuildValue("{s:N,s:s,s:N,s:N,s:N,s:N}", "name", opt_str(e->name),
                                    "type", type_name(e->type), "default", opt_str(e->defval),
                                    "choices", opt_str(e->choices), "library",
                                    opt_str(e->library), "help", opt_str(e->help));
        if (d == NULL || PyList_Append(list, d) < 0) {
            Py_XDECREF(d);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(d);
    }
    return list;
}

static PyObject *mod_build_info(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
#define PUT(k, v)                                                              \
    do {                                                                       \
        PyObject *o_ = (v);                                                    \
        if (o_ == NULL || PyDict_SetItemString(d, (k), o_) < 0) {              \
            Py_XDECREF(o_);                                                    \
            Py_DECREF(d);                                                      \
            return NULL;                                                       \
        }                                                                      \
        Py_DECREF(o_);                                                         \
    } while (0)
    ddstore_version_entry_t v[32];
    size_t n = ddstore_versions(v, sizeof v / sizeof v[0]);
    for (size_t i = 0; i < n && i < sizeof v / sizeof v[0]; i++)
        PUT(v[i].name, PyUnicode_FromString(v[i].version));
#undef PUT
    return d;
}

/* One row of the hub's backend table as a dict. */
static PyObject *backend_dict(const ddstore_backend_t *r)
{
#define FLAG(bit) ((r->flags & (bit)) ? Py_True : Py_False)
    return Py_BuildValue(
        "{s:i,s:s,s:s,s:s,s:O,s:z,s:O,s:O,s:O,s:O,s:O,s:O}", "method",
        r->method, "name", r->name, "library", r->library, "help", r->help,
        "built", r->built ? Py_True : Py_False, "why_not_built",
        r->built ? NULL : r->why_not_built, "needs_mpi_comm",
        FLAG(DDSTORE_BACKEND_NEEDS_MPI_COMM), "needs_handshake",
        FLAG(DDSTORE_BACKEND_NEEDS_HANDSHAKE), "thread_readers",
        FLAG(DDSTORE_BACKEND_THREAD_READERS), "fork_needs_env",
        FLAG(DDSTORE_BACKEND_FORK_NEEDS_ENV), "one_process",
        FLAG(DDSTORE_BACKEND_ONE_PROCESS), "test_only",
        FLAG(DDSTORE_BACKEND_TEST_ONLY));
#undef FLAG
}

static PyObject *mod_backends(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    size_t n = ddstore_backend_count();
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list != NULL && i < n; i++) {
        PyObject *d = backend_dict(ddstore_backend_at(i));
        if (d == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, d);
    }
    return list;
}

/* backend(method) -> the row's dict; ValueError listing the table. */
static PyObject *mod_backend(PyObject *m, PyObject *arg)
{
    (void)m;
    const ddstore_backend_t *r = NULL;
    if (PyLong_Check(arg)) {
        int overflow = 0;
        long method = PyLong_AsLongAndOverflow(arg, &overflow);
        if (method == -1 && PyErr_Occurred())
            return NULL;
        if (!overflow && method >= INT_MIN && method <= INT_MAX)
            r = ddstore_backend_find((int)method);
    }
    if (r != NULL)
        return backend_dict(r);
    PyObject *parts = PyList_New(0), *sep = PyUnicode_FromString(", "), *names = NULL;
    for (size_t i = 0; parts != NULL && sep != NULL && i < ddstore_backend_count(); i++) {
        const ddstore_backend_t *b = ddstore_backend_at(i);
        PyObject *one = PyUnicode_FromFormat("%d (%s)", b->method, b->help);
        if (one == NULL || PyList_Append(parts, one) < 0)
            Py_CLEAR(parts);
        Py_XDECREF(one);
    }
    if (parts != NULL && sep != NULL)
        names = PyUnicode_Join(sep, parts);
    if (names != NULL)
        PyErr_Format(PyExc_ValueError, "method must be one of %U, got %R", names, arg);
    Py_XDECREF(parts);
    Py_XDECREF(sep);
    Py_XDECREF(names);
    return NULL;
}

static PyObject *mod_default_method(PyObject *m, PyObject *arg)
{
    (void)m;
    int mpi = PyObject_IsTrue(arg);
    if (mpi < 0)
        return NULL;
    return PyLong_FromLong(ddstore_backend_default(mpi));
}

static PyObject *mod_method_from_env(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    int method = 0;
    int rc = ddstore_method_from_env(&method);
    return rc < 0 ? pydds_raise(rc) : PyLong_FromLong(method);
}

static PyObject *mod_check_method(PyObject *m, PyObject *arg)
{
    (void)m;
    long method = PyLong_AsLong(arg);
    if (method == -1 && PyErr_Occurred())
        return NULL;
    int rc = ddstore_backend_check((int)method, "method");
    return rc < 0 ? pydds_raise(rc) : PyLong_FromLong(method);
}

PyMethodDef pydds_info_methods[] = {
    {"config_entries", mod_config_entries, METH_NOARGS,
     "config_entries() -> list of dict(name, type, default, choices, library, "
     "help): every registered DDSTORE_* variable of every library built in."},
    {"build_info", mod_build_info, METH_NOARGS,
     "build_info() -> dict: versions of the libraries built into _core and the "
     "run-time libraries under them (the hub's list)."},
    {"backends", mod_backends, METH_NOARGS,
     "backends() -> list of dict(method, name, library, help, built, "
     "why_not_built, needs_mpi_comm, needs_handshake, thread_readers, "
     "fork_needs_env, one_process, test_only): the hub's backend table."},
    {"backend", mod_backend, METH_O,
     "backend(method) -> the row of `method` as backends() gives it; "
     "ValueError listing the methods when no row has it."},
    {"default_method", mod_default_method, METH_O,
     "default_method(have_mpi_comm) -> int: the method a store uses when "
     "neither method= nor DDSTORE_METHOD says one."},
    {"method_from_env", mod_method_from_env, METH_NOARGS,
     "method_from_env() -> int: DDSTORE_METHOD checked against the backend "
     "table (ValueError naming it otherwise; unset: 0)."},
    {"check_method", mod_check_method, METH_O,
     "check_method(method) -> method: ValueError when no row has it, "
     "DDStoreError when its row is not built."},
    {NULL, NULL, 0, NULL}};
