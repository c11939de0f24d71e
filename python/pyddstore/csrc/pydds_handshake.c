/* pyddstore._core: method 2's record parser for Python (the handshake
 * inspector, tools/ddstore-handshake, and tests).  The same C parser that
 * join() uses; absent from builds without libfabric. */
#include "pydds.h"

#ifdef DDSTORE_HAVE_OFI
#include "ddstore/handshake_transport.h"

static PyObject *rank_dict(const ddofi_hs_rank_t *r)
{
    return Py_BuildValue(
        "{s:L,s:K,s:K,s:K,s:i,s:K,s:s,s:y#,s:y#}", "rows", (long long)r->rows,
        "base", (unsigned long long)r->base, "key", (unsigned long long)r->key,
        "bytes", (unsigned long long)r->bytes, "pid", (int)r->pid, "start_ticks",
        (unsigned long long)r->start_ticks, "host", r->host, "region_blob",
        (const char *)r->mr_blob, (Py_ssize_t)DDOFI_HS_MR_BLOB, "address_blob",
        (const char *)r->addr, (Py_ssize_t)r->addr_len);
}

/* _handshake_parse(data, path="") -> dict; raises like join() would. */
static PyObject *mod_handshake_parse(PyObject *m, PyObject *args)
{
    Py_buffer b;
    const char *path = "";
    ddofi_hs_record_t rec;
    PyObject *d = NULL, *ranks = NULL;
    int rc;
    (void)m;
    if (!PyArg_ParseTuple(args, "y*|s:_handshake_parse", &b, &path))
        return NULL;
    rc = ddofi_hs_parse(b.buf, (size_t)b.len, &rec);
    PyBuffer_Release(&b);
    if (rc < 0) {
        if (path[0] != '\0') {
            char detail[1024];
            snprintf(detail, sizeof detail, "%s", dds_last_error());
            dds_error(rc, "%s: %s", path, detail);
        }
        return pydds_raise(rc);
    }
    ranks = PyList_New((Py_ssize_t)rec.nranks);
    for (uint32_t i = 0; ranks != NULL && i < rec.nranks; i++) {
        PyObject *r = rank_dict(&rec.ranks[i]);
        if (r == NULL) {
            Py_CLEAR(ranks);
            break;
        }
        PyList_SET_ITEM(ranks, (Py_ssize_t)i, r);
    }
    if (ranks != NULL)
        d = Py_BuildValue(
            "{s:I,s:I,s:K,s:L,s:s,s:I,s:K,s:K,s:K,s:K,s:s,s:s,s:s,s:s,s:O}",
            "version", rec.version, "nranks", rec.nranks, "run_id",
            (unsigned long long)rec.run_id, "ctime_ns", (long long)rec.ctime_ns,
            "dtype", dds_dtype_name((dds_dtype_t)rec.dtype), "flags", rec.flags,
            "itemsize", (unsigned long long)rec.itemsize, "disp",
            (unsigned long long)rec.disp, "row_bytes",
            (unsigned long long)rec.row_bytes, "total_rows",
            (unsigned long long)rec.total_rows, "name", rec.name, "exchange_ns",
            rec.exchange_ns, "provider", rec.provider, "domain", rec.domain,
            "ranks", ranks);
    Py_XDECREF(ranks);
    ddofi_hs_record_clear(&rec);
    return d;
}

/* _handshake_file_name(name, ns="") -> str: the record's file name. */
static PyObject *mod_handshake_file_name(PyObject *m, PyObject *args)
{
    char out[1024];
    const char *name, *ns = "";
    int rc;
    (void)m;
    if (!PyArg_ParseTuple(args, "s|z:_handshake_file_name", &name, &ns))
        return NULL;
    rc = ddofi_hs_record_file_name(ns, name, out, sizeof out);
    if (rc < 0)
        return pydds_raise(rc);
    return PyUnicode_FromString(out);
}

/* _handshake_process_alive(pid, start_ticks) -> 1 alive, 0 gone, -1 unknown */
static PyObject *mod_handshake_alive(PyObject *m, PyObject *args)
{
    int pid;
    unsigned long long ticks;
    (void)m;
    if (!PyArg_ParseTuple(args, "iK:_handshake_process_alive", &pid, &ticks))
        return NULL;
    return PyLong_FromLong(ddofi_hs_process_alive((int32_t)pid, (uint64_t)ticks));
}
#endif

PyMethodDef pydds_handshake_methods[] = {
#ifdef DDSTORE_HAVE_OFI
    {"_handshake_parse", mod_handshake_parse, METH_VARARGS,
     "_handshake_parse(data, path='') -> dict: a method-2 record, validated "
     "by the parser join() uses (DDStoreError naming the field otherwise)."},
    {"_handshake_file_name", mod_handshake_file_name, METH_VARARGS,
     "_handshake_file_name(name, ns='') -> str: the record file name of a "
     "variable published in namespace ns (exchange_ns)."},
    {"_handshake_process_alive", mod_handshake_alive, METH_VARARGS,
     "_handshake_process_alive(pid, start_ticks) -> 1 alive, 0 gone, -1 "
     "cannot tell (processes on this host)."},
#endif
    {NULL, NULL, 0, NULL}};
