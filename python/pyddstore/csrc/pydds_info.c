/* pyddstore._core: build information and the env registry, for
 * `python -m pyddstore.info` (./ddstore info) and docs/environment.md. */
#include "pydds.h"

#include "ddstore/config.h"
#include "ddstore/gpu.h"
#ifdef HAVE_MPI
#include "ddstore/mpi.h"
#endif
#ifdef DDSTORE_HAVE_OFI
#include "ddstore/ofi.h"
#include "ddstore/ofi_transport.h"
#endif

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
    pydds_config_register_all();
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
    PUT("ddstore-core", PyUnicode_FromString(dds_core_version()));
    PUT("ddstore-gpu", PyUnicode_FromFormat("%s (backend %s)", ddgpu_version(),
                                            ddgpu_backend_name()));
#ifdef HAVE_MPI
    PUT("ddstore-mpi", PyUnicode_FromString(ddmpi_version()));
    {
        char lib[MPI_MAX_LIBRARY_VERSION_STRING];
        int len = 0;
        MPI_Get_library_version(lib, &len);
        char *nl = strchr(lib, '\n');
        if (nl)
            *nl = '\0';
        PUT("mpi library", PyUnicode_FromString(lib));
    }
#else
    PUT("ddstore-mpi", PyUnicode_FromString("not built (HAVE_MPI is False)"));
#endif
#ifdef DDSTORE_HAVE_OFI
    PUT("ddstore-ofi", PyUnicode_FromString(ddofi_version()));
#else
    PUT("ddstore-ofi", PyUnicode_FromString("not built (no libfabric)"));
#endif
#undef PUT
    return d;
}

PyMethodDef pydds_info_methods[] = {
    {"config_entries", mod_config_entries, METH_NOARGS,
     "config_entries() -> list of dict(name, type, default, choices, library, "
     "help): every registered DDSTORE_* variable of every library built in."},
    {"build_info", mod_build_info, METH_NOARGS,
     "build_info() -> dict: versions of the libraries built into _core and the "
     "MPI library."},
    {NULL, NULL, 0, NULL}};
