/* pyddstore._core: error mapping between DDS_E* codes and Python exceptions
 * (docs/design.md, "Errors -> Python").  The exception objects are created
 * at module init (pydds_module.c). */
#include "pydds.h"

#include <stdarg.h>
#include <stdio.h>

PyObject *pydds_Error = NULL;
PyObject *pydds_KeyError = NULL;

/* libddstore's mapping (ddstore/exc.h), the torch extension's too. */
PyObject *pydds_exc_class(int rc)
{
    switch (ddstore_exc_of(rc)) {
    case DDSTORE_EXC_KEY:
        return pydds_KeyError;
    case DDSTORE_EXC_INDEX:
        return PyExc_IndexError;
    case DDSTORE_EXC_VALUE:
        return PyExc_ValueError;
    case DDSTORE_EXC_TYPE:
        return PyExc_TypeError;
    case DDSTORE_EXC_MEMORY:
        return PyExc_MemoryError;
    default:
        return pydds_Error;
    }
}

PyObject *pydds_raise(int rc)
{
    const char *msg = dds_last_error();
    if (msg == NULL || msg[0] == '\0')
        msg = dds_strerror(rc);
    PyErr_SetString(pydds_exc_class(rc), msg);
    return NULL;
}

PyObject *pydds_raise_fmt(int rc, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    PyErr_SetString(pydds_exc_class(rc), buf);
    return NULL;
}

int pydds_rc_from_pyerr(void)
{
    int rc;
    PyObject *type, *value, *tb;
    if (!PyErr_Occurred())
        return dds_error(-DDS_EINVAL, "unknown error");
    if (PyErr_ExceptionMatches(PyExc_KeyError))
        rc = -DDS_ENOENT;
    else if (PyErr_ExceptionMatches(PyExc_IndexError))
        rc = -DDS_ERANGE;
    else if (PyErr_ExceptionMatches(PyExc_TypeError))
        rc = -DDS_ETYPE;
    else if (PyErr_ExceptionMatches(PyExc_ValueError) ||
             PyErr_ExceptionMatches(PyExc_OverflowError))
        rc = -DDS_EINVAL;
    else if (PyErr_ExceptionMatches(PyExc_MemoryError))
        rc = -DDS_ENOMEM;
    else
        rc = -DDS_EIO;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    {
        PyObject *s = value ? PyObject_Str(value) : NULL;
        const char *txt = s ? PyUnicode_AsUTF8(s) : NULL;
        if (txt == NULL) {
            PyErr_Clear();
            txt = ((PyTypeObject *)type)->tp_name;
        }
        /* KeyError's str() quotes its message; ours do not. */
        dds_error(rc, "%s", txt);
        Py_XDECREF(s);
    }
    PyErr_Restore(type, value, tb);
    return rc;
}

