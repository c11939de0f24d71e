/* pyddstore._core: the Python layer's error agreement (pyddstore.torch.comm's
 * agree / run_agreed), over Collective.agree (pydds_coll.c: core's
 * dds_comm_agree_record and wire codec):
 *
 *   agree(comm, exc, what='')      comm: size and collective() (a Collective)
 *   run_agreed(comm, fn, what='')  fn() on every rank, its error on every rank
 *
 * A failing rank sends (module, qualname, message) of its exception and
 * raises its own; the others rebuild it: a built-in or pyddstore exception
 * class (else RuntimeError) with "rank R (what): message".
 */
#include "pydds.h"

#include <string.h>

/* The exception class a peer named, or NULL: a built-in or a pyddstore
 * exception (a subclass of Exception), looked up by its qualified name. */
static PyObject *agreed_class(PyObject *module, PyObject *qualname)
{
    PyObject *ns = NULL, *cls = NULL;
    if (!PyUnicode_Check(module) || !PyUnicode_Check(qualname))
        return NULL;
    const char *m = PyUnicode_AsUTF8(module);
    if (m != NULL && strcmp(m, "builtins") == 0)
        ns = PyImport_ImportModule("builtins");
    else if (m != NULL && strncmp(m, "pyddstore", 9) == 0)
        ns = PyImport_ImportModule("pyddstore");
    if (ns != NULL)
        cls = PyObject_GetAttr(ns, qualname);
    PyErr_Clear();
    Py_XDECREF(ns);
    if (cls != NULL && !(PyType_Check(cls) &&
                         PyType_IsSubtype((PyTypeObject *)cls, (PyTypeObject *)PyExc_Exception)))
        Py_CLEAR(cls);
    return cls;
}

/* Raise exc again (its traceback kept, as `raise exc`). */
static PyObject *reraise(PyObject *exc)
{
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), Py_NewRef(exc),
                  PyException_GetTraceback(exc));
    return NULL;
}

/* The error of rank `failed`[0] on this rank: its class (built-in or
 * pyddstore, else RuntimeError) with "rank R (what): message". */
static PyObject *agreed_error(PyObject *failed, const char *what)
{
    PyObject *info = PyTuple_GET_ITEM(failed, 1), *where, *cls, *msg, *err;
    where = *what ? PyUnicode_FromFormat("rank %S (%s)", PyTuple_GET_ITEM(failed, 0), what)
                  : PyUnicode_FromFormat("rank %S", PyTuple_GET_ITEM(failed, 0));
    if (where == NULL)
        return NULL;
    if (!PyTuple_CheckExact(info) || PyTuple_GET_SIZE(info) != 3) {
        PyErr_Format(PyExc_RuntimeError, "%U: an error (its message did not reach this rank)",
                     where);
        Py_DECREF(where);
        return NULL;
    }
    PyObject *qualname = PyTuple_GET_ITEM(info, 1), *text = PyTuple_GET_ITEM(info, 2);
    cls = agreed_class(PyTuple_GET_ITEM(info, 0), qualname);
    if (cls == NULL) {
        int has = PyObject_IsTrue(text);
        if (has > 0)
            PyErr_Format(PyExc_RuntimeError, "%U: %S: %S", where, qualname, text);
        else if (has == 0)
            PyErr_Format(PyExc_RuntimeError, "%U: %S", where, qualname);
        Py_DECREF(where);
        return NULL;
    }
    msg = PyUnicode_FromFormat("%U: %S", where, text);
    err = msg ? PyObject_CallOneArg(cls, msg) : NULL;
    if (err == NULL && msg != NULL && PyErr_ExceptionMatches(PyExc_Exception)) {
        /* a constructor with another signature */
        PyErr_Clear();
        PyErr_Format(PyExc_RuntimeError, "%U: %S: %S", where, qualname, text);
    } else if (err != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(err), err);
        Py_DECREF(err);
    }
    Py_XDECREF(msg);
    Py_DECREF(cls);
    Py_DECREF(where);
    return NULL;
}

/* agree(comm, exc, what): pyddstore.torch.comm.agree (its doc).  comm: an
 * object with size and collective() (a Collective). */
static PyObject *agree_impl(PyObject *comm, PyObject *exc, const char *what)
{
    PyObject *info = Py_None, *failed = NULL, *size, *coll;
    long n;
    if (exc != Py_None) {
        PyObject *t = (PyObject *)Py_TYPE(exc), *s = PyObject_Str(exc);
        PyObject *cut = s ? PyUnicode_Substring(s, 0, 3000) : NULL;
        PyObject *mod = cut ? PyObject_GetAttrString(t, "__module__") : NULL;
        PyObject *qn = mod ? PyObject_GetAttrString(t, "__qualname__") : NULL;
        info = qn ? PyTuple_Pack(3, mod, qn, cut) : NULL;
        Py_XDECREF(s);
        Py_XDECREF(cut);
        Py_XDECREF(mod);
        Py_XDECREF(qn);
        if (info == NULL)
            return NULL;
    } else {
        Py_INCREF(info);
    }
    size = PyObject_GetAttrString(comm, "size");
    n = size ? PyLong_AsLong(size) : -1;
    Py_XDECREF(size);
    if (n == 1) {
        failed = info == Py_None ? Py_NewRef(Py_None) : Py_BuildValue("(iO)", 0, info);
    } else if (!PyErr_Occurred()) {
        PyObject *label = *what ? PyUnicode_FromFormat("error agreement (%s)", what)
                                : PyUnicode_FromString("error agreement");
        coll = label ? PyObject_CallMethod(comm, "collective", NULL) : NULL;
        failed = coll ? PyObject_CallMethod(coll, "agree", "OO", info, label) : NULL;
        Py_XDECREF(coll);
        Py_XDECREF(label);
    }
    Py_DECREF(info);
    if (failed == NULL) {
        if (exc == Py_None)
            return NULL;
        PyErr_Clear(); /* the original error matters more than the agreement's */
        return reraise(exc);
    }
    if (failed == Py_None) {
        Py_DECREF(failed);
        Py_RETURN_NONE;
    }
    if (exc != Py_None) {
        Py_DECREF(failed);
        return reraise(exc);
    }
    agreed_error(failed, what);
    Py_DECREF(failed);
    return NULL;
}

static PyObject *py_agree(PyObject *mod, PyObject *args)
{
    PyObject *comm, *exc;
    const char *what = "";
    (void)mod;
    if (!PyArg_ParseTuple(args, "OO|s:agree", &comm, &exc, &what))
        return NULL;
    if (exc != Py_None && !PyExceptionInstance_Check(exc)) {
        PyErr_Format(PyExc_TypeError, "agree: exc must be an exception or None, got %s",
                     Py_TYPE(exc)->tp_name);
        return NULL;
    }
    return agree_impl(comm, exc, what);
}

/* run_agreed(comm, fn, what): fn() on every rank, its error (any
 * BaseException) raised on every rank. */
static PyObject *py_run_agreed(PyObject *mod, PyObject *args)
{
    PyObject *comm, *fn, *res, *t, *v, *tb, *ok;
    const char *what = "";
    (void)mod;
    if (!PyArg_ParseTuple(args, "OO|s:run_agreed", &comm, &fn, &what))
        return NULL;
    res = PyObject_CallNoArgs(fn);
    if (res == NULL) {
        PyErr_Fetch(&t, &v, &tb);
        PyErr_NormalizeException(&t, &v, &tb);
        if (tb != NULL)
            PyException_SetTraceback(v, tb);
        Py_XDECREF(t);
        Py_XDECREF(tb);
        ok = agree_impl(comm, v, what);   /* raises on every rank */
        Py_XDECREF(ok);
        Py_DECREF(v);
        return NULL;
    }
    ok = agree_impl(comm, Py_None, what);
    if (ok == NULL)
        Py_CLEAR(res);
    Py_XDECREF(ok);
    return res;
}

static PyMethodDef agree_functions[] = {
    {"agree", (PyCFunction)py_agree, METH_VARARGS,
     "agree(comm, exc, what='') -> None: pyddstore.torch.comm.agree (comm: size and "
     "collective())."},
    {"run_agreed", (PyCFunction)py_run_agreed, METH_VARARGS,
     "run_agreed(comm, fn, what='') -> fn(); when fn raises on any rank (any "
     "BaseException), every rank raises: that rank its own error, the others one naming "
     "it and the rank (agree)."},
    {NULL, NULL, 0, NULL}};

int pydds_agree_ready(PyObject *module)
{
    return PyModule_AddFunctions(module, agree_functions);
}
