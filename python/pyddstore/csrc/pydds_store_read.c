/* pyddstore._core: the read bodies shared by PyDDStore and Reader (get,
 * get_batch, sizes, get_ragged) and the queries (info, info_full, offsets,
 * get_profile).  Reads run with the GIL released and the life lock held for
 * reading (pydds_store.c describes the threading).
 */
#include "pydds_store.h"
#include "ddstore/prof_alias.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- read windows (proof that reads run without the GIL) ---------------- */

static __thread uint64_t t_read_t0, t_read_t1;

static inline uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

PyObject *pydds_last_read_window(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return Py_BuildValue("(KK)", (unsigned long long)t_read_t0,
                         (unsigned long long)t_read_t1);
}

/* ---- reads (shared with readers) --------------------------------------- */

/* One read, run by read_nogil. */
enum { READ_GET, READ_BATCH, READ_SIZES, READ_RAGGED };

typedef struct read_req {
    int kind;                    /* READ_*                                    */
    const char *name;
    const dds_buf_t *dst;        /* GET, BATCH, RAGGED                        */
    int64_t start;               /* GET                                       */
    const int64_t *rows;         /* BATCH, SIZES, RAGGED                      */
    size_t n;
    int64_t *lengths;            /* SIZES, RAGGED: n lengths out              */
    int64_t total;               /* RAGGED: element rows of the samples (out) */
} read_req_t;

/* GIL released: read lock, pick the reader, run the read. */
static int read_nogil(pydds_store_obj *s, pydds_reader_obj *r, read_req_t *q)
{
    int rc = pydds_store_enter_nogil(s);
    dds_reader_t *rd = NULL;
    dds_store_t *st;
    if (rc < 0)
        return rc;
    if (r != NULL) {
        rd = r->reader;
        if (rd == NULL) {
            ddstore_pin_release(s->pin);
            return dds_error(-DDS_EFREED, "this reader was closed");
        }
    }
    st = PYDDS_STORE(s);
    t_read_t0 = mono_ns();
    switch (q->kind) {
    case READ_BATCH:
        rc = dds_store_get_batch(st, rd, q->name, q->dst, q->rows, q->n);
        break;
    case READ_SIZES:
        rc = dds_store_ragged_sizes(st, rd, q->name, q->rows, q->n,
                                    q->lengths);
        break;
    case READ_RAGGED:
        rc = dds_store_ragged_get_batch(st, rd, q->name, q->dst, q->rows, q->n,
                                        q->lengths, &q->total);
        break;
    default:
        rc = dds_store_get(st, rd, q->name, q->dst, q->start);
        break;
    }
    t_read_t1 = mono_ns();
    ddstore_pin_release(s->pin);
    return rc;
}

/* Run `q` with the GIL released. */
static int read_released(pydds_store_obj *s, pydds_reader_obj *r,
                         read_req_t *q)
{
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = read_nogil(s, r, q);
    Py_END_ALLOW_THREADS
    return rc;
}

PyObject *pydds_do_get(pydds_store_obj *s, pydds_reader_obj *r,
                       PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"name", "arr", "start", NULL};
    PyObject *name_o, *arr, *start_o = NULL;
    const char *name;
    int64_t start = 0;
    pydds_buffer_t b;
    read_req_t q = {0};
    int rc;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:get", kwlist, &name_o,
                                     &arr, &start_o))
        return NULL;
    if ((name = pydds_var_name(name_o)) == NULL)
        return NULL;
    if (start_o != NULL && pydds_as_i64(start_o, "start", &start) < 0) {
        /* an integer beyond int64 is out of range like any other start */
        if (PyErr_ExceptionMatches(PyExc_ValueError) && PyIndex_Check(start_o)) {
            PyErr_Clear();
            PyErr_Format(PyExc_IndexError,
                         "get('%s'): start=%R is out of range (rows are "
                         "numbered from 0 to the variable's total - 1)",
                         name, start_o);
        }
        return NULL;
    }
    if (pydds_buffer_get(arr, "arr", 1, &b) < 0)
        return NULL;
    q.kind = READ_GET;
    q.name = name;
    q.dst = &b.buf;
    q.start = start;
    rc = read_released(s, r, &q);
    pydds_buffer_release(&b);
    if (rc < 0)
        return pydds_raise(rc);
    Py_RETURN_NONE;
}

/* get_batch's arguments the slow way: keywords, or a wrong count; the same
 * parser (and messages) as every other method.  Borrowed references (the
 * caller's arguments hold them). */
static int get_batch_args(PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames, PyObject **name_p,
                          PyObject **arr_p, PyObject **idx_p)
{
    static char *kwlist[] = {"name", "arr", "indices", NULL};
    PyObject *tuple, *kw = NULL;
    Py_ssize_t i, nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
    int ok;
    tuple = PyTuple_New(nargs);
    if (tuple == NULL)
        return -1;
    for (i = 0; i < nargs; i++)
        PyTuple_SET_ITEM(tuple, i, Py_NewRef(args[i]));
    if (nkw > 0 && (kw = PyDict_New()) == NULL) {
        Py_DECREF(tuple);
        return -1;
    }
    for (i = 0; i < nkw; i++)
        if (PyDict_SetItem(kw, PyTuple_GET_ITEM(kwnames, i),
                           args[nargs + i]) < 0) {
            Py_DECREF(tuple);
            Py_DECREF(kw);
            return -1;
        }
    ok = PyArg_ParseTupleAndKeywords(tuple, kw, "OOO:get_batch", kwlist,
                                     name_p, arr_p, idx_p);
    Py_DECREF(tuple);
    Py_XDECREF(kw);
    return ok ? 0 : -1;
}

/* METH_FASTCALL: get_batch(name, arr, indices), the hot call of a training
 * loop; three positional arguments skip the argument parser. */
PyObject *pydds_do_get_batch(pydds_store_obj *s, pydds_reader_obj *r,
                             PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    PyObject *name_o, *arr, *idx_o;
    const char *name;
    pydds_buffer_t b;
    pydds_indices_t ix;
    read_req_t q = {0};
    int rc;
    if (kwnames == NULL && nargs == 3) {
        name_o = args[0];
        arr = args[1];
        idx_o = args[2];
    } else if (get_batch_args(args, nargs, kwnames, &name_o, &arr, &idx_o) <
               0) {
        return NULL;
    }
    if ((name = pydds_var_name(name_o)) == NULL)
        return NULL;
    if (pydds_buffer_get(arr, "arr", 1, &b) < 0)
        return NULL;
    if (pydds_indices_get(idx_o, &ix) < 0) {
        pydds_buffer_release(&b);
        return NULL;
    }
    if ((int64_t)ix.n != b.buf.nrows) {
        PyErr_Format(PyExc_ValueError,
                     "get_batch('%s'): len(arr) = %lld rows but "
                     "len(indices) = %zu; they must be equal",
                     name, (long long)b.buf.nrows, ix.n);
        pydds_indices_release(&ix);
        pydds_buffer_release(&b);
        return NULL;
    }
    q.kind = READ_BATCH;
    q.name = name;
    q.dst = &b.buf;
    q.rows = ix.rows;
    q.n = ix.n;
    rc = read_released(s, r, &q);
    pydds_indices_release(&ix);
    pydds_buffer_release(&b);
    if (rc < 0)
        return pydds_raise(rc);
    Py_RETURN_NONE;
}

PyObject *pydds_do_info(pydds_store_obj *s, PyObject *name_o)
{
    dds_var_info_t vi;
    const char *name;
    dds_store_t *st;
    int rc;
    if ((name = pydds_var_name(name_o)) == NULL || (st = pydds_store_alive(s)) == NULL)
        return NULL;
    rc = dds_store_var_info(st, name, &vi);
    if (rc < 0)
        return pydds_raise(rc);
    return Py_BuildValue("(Lnn)", (long long)vi.total_rows,
                         (Py_ssize_t)vi.disp, (Py_ssize_t)vi.itemsize);
}

PyObject *pydds_do_info_full(pydds_store_obj *s, PyObject *name_o)
{
    dds_var_info_t vi;
    const char *name, *dt;
    dds_store_t *st;
    int rc;
    if ((name = pydds_var_name(name_o)) == NULL || (st = pydds_store_alive(s)) == NULL)
        return NULL;
    rc = dds_store_var_info(st, name, &vi);
    if (rc < 0)
        return pydds_raise(rc);
    dt = dds_dtype_name(vi.dtype);
    return Py_BuildValue(
        "{s:L,s:L,s:L,s:n,s:n,s:n,s:s,s:s,s:i,s:i,s:O,s:L,s:L}",
        "total_rows", (long long)vi.total_rows, "local_rows",
        (long long)vi.local_rows, "local_first", (long long)vi.local_first,
        "disp", (Py_ssize_t)vi.disp, "itemsize", (Py_ssize_t)vi.itemsize,
        "row_bytes", (Py_ssize_t)vi.row_bytes, "dtype", dt ? dt : "unknown",
        "mem", ddstore_mem_kind_name(vi.mem.kind), "device", vi.mem.device,
        "nranks", vi.nranks, "ragged", vi.ragged ? Py_True : Py_False,
        "total_elems", (long long)vi.total_elems, "local_elems",
        (long long)vi.local_elems);
}

PyObject *pydds_do_offsets(pydds_store_obj *s, PyObject *name_o)
{
    dds_var_info_t vi;
    const char *name;
    dds_store_t *st;
    int64_t *off;
    PyObject *t;
    int rc, i;
    if ((name = pydds_var_name(name_o)) == NULL || (st = pydds_store_alive(s)) == NULL)
        return NULL;
    rc = dds_store_var_info(st, name, &vi);
    if (rc < 0)
        return pydds_raise(rc);
    off = (int64_t *)calloc((size_t)vi.nranks + 1, sizeof *off);
    if (off == NULL)
        return PyErr_NoMemory();
    rc = dds_store_var_offsets(st, name, off);
    if (rc < 0) {
        free(off);
        return pydds_raise(rc);
    }
    t = PyTuple_New(vi.nranks + 1);
    for (i = 0; t != NULL && i <= vi.nranks; i++) {
        PyObject *v = PyLong_FromLongLong((long long)off[i]);
        if (v == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    free(off);
    return t;
}

/* ---- ragged reads (shared with readers) -------------------------------- */

/* numpy.empty(shape, dtype) for the arrays sizes() and get_ragged() return
 * (numpy is a dependency of the package; imported at the first call, so
 * importing pyddstore does not import it).  *ptr_p = its data. */
static PyObject *np_empty(PyObject *shape, const char *dtype, void **ptr_p)
{
    static PyObject *empty = NULL;     /* numpy.empty, kept once found */
    PyObject *arr;
    Py_buffer v;
    if (shape == NULL)
        return NULL;
    if (empty == NULL) {
        PyObject *np = PyImport_ImportModule("numpy");
        if (np == NULL)
            return NULL;
        empty = PyObject_GetAttrString(np, "empty");
        Py_DECREF(np);
        if (empty == NULL)
            return NULL;
    }
    arr = PyObject_CallFunction(empty, "Os", shape, dtype);
    if (arr == NULL)
        return NULL;
    /* numpy keeps the data while the array lives (ours: no resize) */
    if (PyObject_GetBuffer(arr, &v, PyBUF_WRITABLE) < 0) {
        Py_DECREF(arr);
        return NULL;
    }
    *ptr_p = v.buf;
    PyBuffer_Release(&v);
    return arr;
}

/* A new int64 array of n lengths. */
static PyObject *np_lengths(size_t n, int64_t **ptr_p)
{
    PyObject *shape = Py_BuildValue("(n)", (Py_ssize_t)n);
    PyObject *arr = np_empty(shape, "int64", (void **)ptr_p);
    Py_XDECREF(shape);
    return arr;
}

/* sizes() and get_ragged(): the variable, the indices, and a new array for
 * their lengths (returned; NULL + exception, nothing held). */
static PyObject *ragged_req(PyObject *name_o, PyObject *idx_o, int kind,
                            pydds_indices_t *ix, read_req_t *q)
{
    PyObject *lens;
    memset(q, 0, sizeof *q);
    if ((q->name = pydds_var_name(name_o)) == NULL ||
        pydds_indices_get(idx_o, ix) < 0)
        return NULL;
    lens = np_lengths(ix->n, &q->lengths);
    if (lens == NULL) {
        pydds_indices_release(ix);
        return NULL;
    }
    q->kind = kind;
    q->rows = ix->rows;
    q->n = ix->n;
    return lens;
}

PyObject *pydds_do_sizes(pydds_store_obj *s, pydds_reader_obj *r,
                         PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"name", "indices", NULL};
    PyObject *name_o, *idx_o, *lens;
    pydds_indices_t ix;
    read_req_t q;
    int rc;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:sizes", kwlist, &name_o,
                                     &idx_o))
        return NULL;
    if ((lens = ragged_req(name_o, idx_o, READ_SIZES, &ix, &q)) == NULL)
        return NULL;
    rc = read_released(s, r, &q);
    pydds_indices_release(&ix);
    if (rc < 0) {
        Py_DECREF(lens);
        return pydds_raise(rc);
    }
    return lens;
}

/* get_ragged without out=: a new array of the variable's element rows,
 * sized by a first read of the index entries (the "sizes first" step:
 * -DDS_ENOSPC with the lengths and the total, nothing read), then read. */
static PyObject *ragged_new_values(pydds_store_obj *s, pydds_reader_obj *r,
                                   read_req_t *q)
{
    dds_var_info_t vi;
    dds_buf_t dst;
    dds_store_t *st;
    PyObject *shape, *arr;
    const char *dt;
    int64_t cols;
    void *ptr = NULL;
    int rc;
    if ((st = pydds_store_alive(s)) == NULL)
        return NULL;
    rc = dds_store_var_info(st, q->name, &vi);
    if (rc < 0)
        return pydds_raise(rc);
    memset(&dst, 0, sizeof dst);
    dst.ptr = &dst;                  /* no row is written into it */
    dst.row_bytes = vi.row_bytes;
    dst.dtype = vi.dtype;
    dst.itemsize = vi.itemsize;
    dst.mem.kind = DDS_MEM_HOST;
    q->dst = &dst;
    rc = read_released(s, r, q);     /* a fixed variable: its error here */
    if (rc < 0 && rc != -DDS_ENOSPC)
        return pydds_raise(rc);
    dds_error_clear();
    if (vi.dtype == DDS_DTYPE_RAW) {
        dt = "uint8";
        cols = (int64_t)vi.row_bytes;
    } else if (vi.dtype == DDS_DTYPE_BFLOAT16) {
        return pydds_raise_fmt(-DDS_ETYPE,
                               "get_ragged('%s'): numpy has no bfloat16 to "
                               "return; pass out= (e.g. a torch.bfloat16 "
                               "tensor of at least %lld x %zu elements)",
                               q->name, (long long)q->total, vi.disp);
    } else {
        dt = dds_dtype_name(vi.dtype);
        cols = (int64_t)vi.disp;
    }
    shape = Py_BuildValue("(LL)", (long long)q->total, (long long)cols);
    arr = np_empty(shape, dt, &ptr);
    Py_XDECREF(shape);
    if (arr == NULL)
        return NULL;
    if (q->total == 0)
        return arr;
    dst.ptr = ptr;
    dst.nrows = q->total;
    rc = read_released(s, r, q);
    if (rc < 0) {
        Py_DECREF(arr);
        return pydds_raise(rc);
    }
    return arr;
}

PyObject *pydds_do_get_ragged(pydds_store_obj *s, pydds_reader_obj *r,
                              PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"name", "indices", "out", NULL};
    PyObject *name_o, *idx_o, *out = Py_None, *lens, *values;
    pydds_indices_t ix;
    pydds_buffer_t b;
    read_req_t q;
    int rc;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:get_ragged", kwlist,
                                     &name_o, &idx_o, &out))
        return NULL;
    if ((lens = ragged_req(name_o, idx_o, READ_RAGGED, &ix, &q)) == NULL)
        return NULL;
    if (out == Py_None) {
        values = ragged_new_values(s, r, &q);
    } else if (pydds_buffer_get(out, "out", 1, &b) < 0) {
        values = NULL;
    } else {
        q.dst = &b.buf;
        rc = read_released(s, r, &q);
        pydds_buffer_release(&b);
        if (rc == -DDS_ENOSPC)
            values = pydds_raise_fmt(
                rc,
                "get_ragged('%s'): out has %lld rows, the %zu samples need "
                "%lld rows (nothing was read; sizes() gives the lengths)",
                q.name, (long long)b.buf.nrows, ix.n, (long long)q.total);
        else if (rc < 0)
            values = pydds_raise(rc);
        else if ((values = PySequence_GetSlice(out, 0, (Py_ssize_t)q.total)) ==
                     NULL &&
                 PyErr_ExceptionMatches(PyExc_TypeError)) {
            /* an array that cannot be sliced (a bare
             * __cuda_array_interface__): itself, its first `total` rows
             * written */
            PyErr_Clear();
            values = Py_NewRef(out);
        }
    }
    pydds_indices_release(&ix);
    if (values == NULL) {
        Py_DECREF(lens);
        return NULL;
    }
    return Py_BuildValue("(NN)", values, lens);
}

PyObject *pydds_do_profile(pydds_store_obj *s, PyObject *name_o)
{
    dds_profile_t p;
    dds_prof_counter_t c;
    const char *name, *alias;
    dds_store_t *st;
    PyObject *d;
    int rc, i;
    if ((name = pydds_var_name(name_o)) == NULL || (st = pydds_store_alive(s)) == NULL)
        return NULL;
    rc = dds_store_profile(st, name, &p);
    if (rc < 0)
        return pydds_raise(rc);
    d = PyDict_New();
    for (i = 0; d != NULL && i < DDS_PROF_COUNT; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(p.v[i]);
        if (v == NULL ||
            PyDict_SetItemString(d, dds_prof_counter_name((dds_prof_counter_t)i),
                                 v) < 0) {
            Py_XDECREF(v);
            Py_CLEAR(d);
            break;
        }
        Py_DECREF(v);
    }
    /* the original DDStore's names too (same values) */
    for (i = 0; d != NULL && (alias = ddstore_prof_alias(i, &c)) != NULL; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(p.v[c]);
        if (v == NULL || PyDict_SetItemString(d, alias, v) < 0) {
            Py_XDECREF(v);
            Py_CLEAR(d);
            break;
        }
        Py_DECREF(v);
    }
    return d;
}

