/* pyddstore._core: ddstore-core's safe files (ddstore/files.h) for the
 * Python layer: pyddstore.torch writes and reads {name}.meta.json with the
 * same strict publish and checked, non-blocking read as FileComm and
 * method 2's records.  Errors are the library's (pydds_raise): ValueError
 * for a directory or path the user must fix, DDStoreError otherwise; every
 * message names the path.
 */
#include "pydds.h"

#include <string.h>

#include "ddstore/files.h"
#include "ddstore/log.h"

/* _dir_prepare(path, what="directory") -> None: create it 0700 (and missing
 * parents) or check it: a directory of this user's that others may not
 * write to (ValueError otherwise); a warning is logged once when its group
 * may write to it. */
static PyObject *mod_dir_prepare(PyObject *m, PyObject *args)
{
    PyObject *path_o = NULL, *bytes = NULL;
    const char *what = "directory";
    unsigned flags = 0;
    int rc;
    (void)m;
    if (!PyArg_ParseTuple(args, "O|s:_dir_prepare", &path_o, &what))
        return NULL;
    if (!PyUnicode_FSConverter(path_o, &bytes))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = dds_dir_prepare(PyBytes_AS_STRING(bytes), what, &flags);
    Py_END_ALLOW_THREADS
    if (rc == 0 && (flags & DDS_DIR_GROUP_WRITABLE))
        DDS_LOG_ONCE(DDS_LOG_WARN, DDS_SUBSYS_CORE,
                     "%s %s is writable by its group: its members could "
                     "replace the files; prefer a private (0700) directory",
                     what, PyBytes_AS_STRING(bytes));
    Py_DECREF(bytes);
    if (rc < 0)
        return pydds_raise(rc);
    Py_RETURN_NONE;
}

/* _dir_check(path, what="directory") -> bool: False when it does not exist;
 * raises like _dir_prepare when it is not usable. */
static PyObject *mod_dir_check(PyObject *m, PyObject *args)
{
    PyObject *path_o = NULL, *bytes = NULL;
    const char *what = "directory";
    int rc;
    (void)m;
    if (!PyArg_ParseTuple(args, "O|s:_dir_check", &path_o, &what))
        return NULL;
    if (!PyUnicode_FSConverter(path_o, &bytes))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = dds_dir_check(PyBytes_AS_STRING(bytes), what, NULL);
    Py_END_ALLOW_THREADS
    Py_DECREF(bytes);
    if (rc == -DDS_ENOENT) {
        dds_error_clear();
        Py_RETURN_FALSE;
    }
    if (rc < 0)
        return pydds_raise(rc);
    Py_RETURN_TRUE;
}

/* _file_publish(dir, name, data, fsync=True, exclusive=False, what=None) */
static PyObject *mod_file_publish(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"dir", "name", "data", "fsync", "exclusive",
                             "what", NULL};
    PyObject *dir_o = NULL, *name_o = NULL, *dir_b = NULL, *name_b = NULL;
    Py_buffer data;
    int do_fsync = 1, exclusive = 0, rc;
    const char *what = NULL;
    dds_file_part_t part;
    (void)m;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOy*|ppz:_file_publish",
                                     kwlist, &dir_o, &name_o, &data,
                                     &do_fsync, &exclusive, &what))
        return NULL;
    if (!PyUnicode_FSConverter(dir_o, &dir_b) ||
        !PyUnicode_FSConverter(name_o, &name_b)) {
        Py_XDECREF(dir_b);
        PyBuffer_Release(&data);
        return NULL;
    }
    part.data = data.buf;
    part.bytes = (size_t)data.len;
    Py_BEGIN_ALLOW_THREADS
    rc = dds_file_publish(PyBytes_AS_STRING(dir_b), PyBytes_AS_STRING(name_b),
                          &part, 1,
                          (do_fsync ? DDS_FILE_FSYNC : 0u) |
                              (exclusive ? DDS_FILE_EXCLUSIVE : 0u),
                          what);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    Py_DECREF(dir_b);
    Py_DECREF(name_b);
    if (rc < 0)
        return pydds_raise(rc);
    Py_RETURN_NONE;
}

/* _file_read(path, max_bytes, what=None) -> bytes, or None when the file
 * does not exist. */
static PyObject *mod_file_read(PyObject *m, PyObject *args)
{
    PyObject *path_o = NULL, *bytes = NULL, *out;
    Py_ssize_t max_bytes;
    const char *what = NULL;
    void *buf = NULL;
    size_t len = 0;
    int rc;
    (void)m;
    if (!PyArg_ParseTuple(args, "On|z:_file_read", &path_o, &max_bytes,
                          &what))
        return NULL;
    if (max_bytes < 0) {
        PyErr_SetString(PyExc_ValueError, "_file_read: max_bytes < 0");
        return NULL;
    }
    if (!PyUnicode_FSConverter(path_o, &bytes))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = dds_file_read(PyBytes_AS_STRING(bytes), what, (size_t)max_bytes,
                       &buf, &len);
    Py_END_ALLOW_THREADS
    Py_DECREF(bytes);
    if (rc == -DDS_ENOENT) {
        dds_error_clear();
        Py_RETURN_NONE;
    }
    if (rc < 0)
        return pydds_raise(rc);
    out = PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
    free(buf);
    return out;
}

PyMethodDef pydds_files_methods[] = {
    {"_dir_prepare", mod_dir_prepare, METH_VARARGS,
     "_dir_prepare(path, what='directory'): create a private (0700) "
     "directory or check an existing one (this user's, not writable by "
     "others); ValueError naming the path otherwise."},
    {"_dir_check", mod_dir_check, METH_VARARGS,
     "_dir_check(path, what='directory') -> bool: False when missing; "
     "raises when it is someone else's or writable by others."},
    {"_file_publish", (PyCFunction)(void (*)(void))mod_file_publish,
     METH_VARARGS | METH_KEYWORDS,
     "_file_publish(dir, name, data, fsync=True, exclusive=False, "
     "what=None): write dir/name atomically (fresh O_EXCL|O_NOFOLLOW "
     "temporary file, 0600, rename; exclusive: only if nothing is there)."},
    {"_file_read", mod_file_read, METH_VARARGS,
     "_file_read(path, max_bytes, what=None) -> bytes or None (missing): "
     "never blocks on a FIFO, never follows a link; this user's regular "
     "files only."},
    {NULL, NULL, 0, NULL}};
