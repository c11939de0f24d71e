/* pyddstore._core: values from the C registries, so that Python reads
 * every setting (the C libraries' and its own, declared in C with the owner
 * "torch") through the one declaration and the one parser: the registry's
 * view is pyddstore/torch/env.py's Settings (by attribute, never by name). */
#include "pydds.h"

#include "ddstore/config.h"

/* The entry named by `arg`, every table registered first; NULL with an
 * exception set when it is not a registered name. */
static const dds_config_entry_t *entry_of(PyObject *arg, const char **name_p)
{
    const char *name = PyUnicode_AsUTF8(arg);
    if (name == NULL)
        return NULL;
    ddstore_config_register_all();   /* the hub: every library built in */
    const dds_config_entry_t *e = dds_config_find(name);
    if (e == NULL)
        pydds_raise_fmt(-DDS_ENOENT, "%s is not a registered variable", name);
    *name_p = name;
    return e;
}

/* The value of `e` as a Python object (the registry's parse and check). */
static PyObject *value_of(const dds_config_entry_t *e)
{
    const char *name = e->name;
    int rc = 0, b = 0;
    int64_t i64 = 0;
    double d = 0;
    const char *s = NULL;
    switch (e->type) {
    case DDS_CONFIG_BOOL:
        if ((rc = dds_config_get_bool(name, &b)) == 0)
            return PyBool_FromLong(b);
        break;
    case DDS_CONFIG_INT:
    case DDS_CONFIG_SIZE:
        if ((rc = dds_config_get_int(name, &i64)) == 0)
            return PyLong_FromLongLong((long long)i64);
        break;
    case DDS_CONFIG_DOUBLE:
        if ((rc = dds_config_get_double(name, &d)) == 0)
            return PyFloat_FromDouble(d);
        break;
    case DDS_CONFIG_SECONDS:
        if ((rc = dds_config_get_seconds(name, &d)) == 0)
            return PyFloat_FromDouble(d);
        break;
    case DDS_CONFIG_STRING:
    case DDS_CONFIG_ENUM:
        if ((rc = dds_config_get_string(name, &s)) == 0) {
            if (s == NULL)
                Py_RETURN_NONE;
            return PyUnicode_FromString(s);
        }
        break;
    }
    return pydds_raise(rc);
}

static PyObject *mod_config_get(PyObject *m, PyObject *arg)
{
    (void)m;
    const char *name = NULL;
    const dds_config_entry_t *e = entry_of(arg, &name);
    return e == NULL ? NULL : value_of(e);
}

static PyObject *mod_settings(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    ddstore_config_register_all();   /* the hub: every library built in */
    size_t n = dds_config_count();
    PyObject *d = PyDict_New();
    for (size_t i = 0; d != NULL && i < n; i++) {
        const dds_config_entry_t *e = dds_config_at(i);
        if (e == NULL || e->name == NULL)
            continue;
        PyObject *v = value_of(e);
        if (v == NULL || PyDict_SetItemString(d, e->name, v) < 0) {
            Py_XDECREF(v);
            Py_CLEAR(d);
            break;
        }
        Py_DECREF(v);
    }
    return d;
}

static PyObject *mod_parse_bool(PyObject *m, PyObject *arg)
{
    (void)m;
    int v = 0;
    const char *s = PyUnicode_AsUTF8(arg);
    if (s == NULL)
        return NULL;
    if (dds_config_parse_bool(s, &v) != 0) {
        PyErr_Format(PyExc_ValueError, "'%s': expected a boolean (0/1, "
                     "true/false, yes/no, on/off)", s);
        return NULL;
    }
    return PyBool_FromLong(v);
}

static PyObject *mod_config_get_seconds(PyObject *m, PyObject *arg)
{
    (void)m;
    const char *name = NULL;
    double d = 0;
    if (entry_of(arg, &name) == NULL)
        return NULL;
    int rc = dds_config_get_seconds(name, &d);
    return rc ? pydds_raise(rc) : PyFloat_FromDouble(d);
}

PyMethodDef pydds_config_methods[] = {
    {"config_get", mod_config_get, METH_O,
     "config_get(name) -> bool | int | float | str | None: the value of a "
     "registered DDSTORE_* variable (the environment's, else the default), "
     "parsed and validated by the C registry.  ValueError names the variable "
     "and the bad value; KeyError: not registered in this build."},
    {"config_get_seconds", mod_config_get_seconds, METH_O,
     "config_get_seconds(name) -> float: a duration variable, > 0 or inf "
     "(core's rule for timeouts; 0 and negative values are a ValueError)."},
    {"settings", mod_settings, METH_NOARGS,
     "settings() -> dict: every registered DDSTORE_* setting of every "
     "library built in, name -> value (the environment's, else the "
     "default), parsed and checked by the C registry; ValueError names the "
     "first bad value."},
    {"parse_bool", mod_parse_bool, METH_O,
     "parse_bool(text) -> bool: the one boolean rule of ddstore's C "
     "libraries (1/true/yes/on/y/t, 0/false/no/off/n/f, any case); "
     "ValueError otherwise."},
    {NULL, NULL, 0, NULL}};
