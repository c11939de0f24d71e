/* pyddstore._core: the Python layer's collectives, over core's wire codec
 * and agreement protocol (ddstore/wire.h, dds_comm_agree_record).
 *
 *   wire_encode(obj, what="allgather") -> bytes      TypeError naming what
 *   wire_decode(data) -> (True, obj) | (False, err)  ValueError if foreign
 *   wire_gather(parts, what) -> [obj per rank]       a gathered message list
 *   Collective(comm)                                 comm: a FileComm, or a
 *       byte mover: an object with rank, size, name, allgather_bytes(b) ->
 *       bytes (fixed size: every rank's b joined in rank order) and
 *       barrier() (pyddstore.torch.comm's TorchComm and MPI mover)
 *     .allgather(obj, what) -> [obj of rank 0, 1, ...]
 *     .barrier(what)
 *     .agree(info, what) -> None | (rank, info of the lowest failing rank)
 *   comm_capsule(mover)    a `_dds_comm` capsule (ddstore/comm_provider.h)
 *                          for PyDDStore(mover): TorchComm's
 *
 * Values: None, bool, int, str and tuples, lists, dicts of them (dict keys:
 * None, bool, int, str and tuples of those), exact types only.  Everything
 * else a rank cannot encode is a TypeError on every rank together: the
 * rank sends its error instead of its value.  Nothing but these types is
 * ever built from what a peer sends (no pickle: a FileComm's bytes come
 * from files in a shared directory).
 *
 * A byte mover's collectives run with the GIL held (they are Python);
 * a FileComm's with the GIL released, under the FileComm's lock.
 */
#include "pydds.h"

#include <stdlib.h>
#include <string.h>

#include "ddstore/wire.h"

/* ---- encoding --------------------------------------------------------- */

typedef struct frame {
    char kind;      /* 'i' item [i], 'v' dict value [key], 'k' a dict key */
    Py_ssize_t i;
    PyObject *key;  /* borrowed */
} frame_t;

typedef struct enc {
    dds_wire_buf_t b;
    const char *what;
    frame_t st[DDS_WIRE_MAX_DEPTH + 2];
    int depth;
} enc_t;

/* "what[0][key] key" for the value being encoded */
static PyObject *where(const enc_t *e)
{
    PyObject *s = PyUnicode_FromString(e->what), *t;
    for (int d = 0; d < e->depth && s != NULL; d++) {
        const frame_t *f = &e->st[d];
        if (f->kind == 'i')
            t = PyUnicode_FromFormat("%U[%zd]", s, f->i);
        else if (f->kind == 'v')
            t = PyUnicode_FromFormat("%U[%R]", s, f->key);
        else
            t = PyUnicode_FromFormat("%U key", s);
        Py_SETREF(s, t);
    }
    return s;
}

/* "module.qualname" of o's type */
static PyObject *type_label(PyObject *o)
{
    PyObject *t = (PyObject *)Py_TYPE(o);
    PyObject *mod = PyObject_GetAttrString(t, "__module__");
    PyObject *qn = mod ? PyObject_GetAttrString(t, "__qualname__") : NULL;
    PyObject *out = qn ? PyUnicode_FromFormat("%S.%S", mod, qn) : NULL;
    Py_XDECREF(mod);
    Py_XDECREF(qn);
    return out;
}

static int type_error(const enc_t *e, PyObject *o)
{
    PyObject *w = where(e), *t = w ? type_label(o) : NULL;
    if (t != NULL)
        PyErr_Format(PyExc_TypeError,
                     "%U: a %U cannot be sent between ranks (only None, bool, int, str and "
                     "tuples, lists and dicts of them)",
                     w, t);
    Py_XDECREF(w);
    Py_XDECREF(t);
    return -1;
}

static int is_scalar(PyObject *o)
{
    return o == Py_None || PyBool_Check(o) || PyLong_CheckExact(o) || PyUnicode_CheckExact(o);
}

/* A dict key: None, bool, int, str or tuples of them. */
static int key_check(enc_t *e, PyObject *k, PyObject *key)
{
    if (is_scalar(k))
        return 0;
    if (PyTuple_CheckExact(k)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(k); i++)
            if (key_check(e, PyTuple_GET_ITEM(k, i), key) < 0)
                return -1;
        return 0;
    }
    {
        PyObject *w = where(e), *t = w ? type_label(k) : NULL;
        if (t != NULL)
            PyErr_Format(PyExc_TypeError,
                         "%U key %R: a dict key of type %U cannot be sent between ranks "
                         "(only str, int, bool, None and tuples of them)",
                         w, key, t);
        Py_XDECREF(w);
        Py_XDECREF(t);
        return -1;
    }
}

static int encode(enc_t *e, PyObject *o)
{
    dds_wire_buf_t *b = &e->b;
    if (e->depth > DDS_WIRE_MAX_DEPTH) {
        PyObject *w = where(e);
        if (w != NULL) {
            PyErr_Format(PyExc_TypeError, "%U: nested deeper than %d levels", w,
                         DDS_WIRE_MAX_DEPTH);
            Py_DECREF(w);
        }
        return -1;
    }
    if (o == Py_None)
        return dds_wire_put_scalar(b, DDS_WIRE_NONE, NULL, 0), 0;
    if (PyBool_Check(o))
        return dds_wire_put_scalar(b, o == Py_True ? DDS_WIRE_TRUE : DDS_WIRE_FALSE, NULL, 0),
               0;
    if (PyLong_CheckExact(o)) {
        PyObject *s = PyObject_Str(o);
        Py_ssize_t n;
        const char *p = s ? PyUnicode_AsUTF8AndSize(s, &n) : NULL;
        if (p == NULL) {
            Py_XDECREF(s);
            return -1;
        }
        dds_wire_put_scalar(b, DDS_WIRE_INT, p, (size_t)n);
        Py_DECREF(s);
        return 0;
    }
    if (PyUnicode_CheckExact(o)) {
        PyObject *u = PyUnicode_AsEncodedString(o, "utf-8", "surrogatepass");
        if (u == NULL)
            return -1;
        dds_wire_put_scalar(b, DDS_WIRE_STR, PyBytes_AS_STRING(u), (size_t)PyBytes_GET_SIZE(u));
        Py_DECREF(u);
        return 0;
    }
    if (PyTuple_CheckExact(o) || PyList_CheckExact(o)) {
        int tuple = PyTuple_CheckExact(o);
        Py_ssize_t n = tuple ? PyTuple_GET_SIZE(o) : PyList_GET_SIZE(o);
        dds_wire_put_container(b, tuple ? DDS_WIRE_TUPLE : DDS_WIRE_LIST, (size_t)n);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *x = tuple ? PyTuple_GET_ITEM(o, i) : PyList_GET_ITEM(o, i);
            int rc;
            e->st[e->depth] = (frame_t){'i', i, NULL};
            e->depth++;
            rc = encode(e, x);
            e->depth--;
            if (rc < 0)
                return -1;
        }
        return 0;
    }
    if (PyDict_CheckExact(o)) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        dds_wire_put_container(b, DDS_WIRE_DICT, (size_t)PyDict_GET_SIZE(o));
        while (PyDict_Next(o, &pos, &k, &v)) {
            int rc;
            if (key_check(e, k, k) < 0)
                return -1;
            e->st[e->depth] = (frame_t){'k', 0, k};
            e->depth++;
            rc = encode(e, k);
            e->st[e->depth - 1] = (frame_t){'v', 0, k};
            if (rc == 0)
                rc = encode(e, v);
            e->depth--;
            if (rc < 0)
                return -1;
        }
        return 0;
    }
    return type_error(e, o);
}

/* A message for obj in b: 0, or -1 with an exception (TypeError naming
 * what cannot be sent; MemoryError). */
static int wire_message(PyObject *obj, const char *what, dds_wire_buf_t *out)
{
    enc_t *e = PyMem_RawCalloc(1, sizeof *e);
    int rc;
    if (e == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    dds_wire_buf_init(&e->b);
    e->what = what;
    dds_wire_put_ok(&e->b);
    rc = encode(e, obj);
    if (rc == 0 && dds_wire_finish(&e->b) != 0) {
        pydds_raise(dds_wire_finish(&e->b));
        rc = -1;
    }
    if (rc < 0)
        dds_wire_buf_free(&e->b);
    else
        *out = e->b;
    PyMem_RawFree(e);
    return rc;
}

/* The pending exception as an error message (the rank that cannot encode
 * still takes part); the exception stays pending. */
static int error_message(dds_wire_buf_t *out)
{
    PyObject *type, *value, *tb, *s;
    const char *text;
    Py_ssize_t n = 0;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    s = value != NULL ? PyObject_Str(value) : NULL;
    text = s != NULL ? PyUnicode_AsUTF8AndSize(s, &n) : NULL;
    if (text == NULL) {
        PyErr_Clear();
        text = "an error";
        n = 8;
    }
    dds_wire_buf_init(out);
    dds_wire_put_error(out, text, (size_t)n);
    Py_XDECREF(s);
    PyErr_Restore(type, value, tb);
    return dds_wire_finish(out);
}

/* ---- decoding --------------------------------------------------------- */

static PyObject *decode_value(dds_wire_reader_t *r)
{
    dds_wire_item_t it;
    PyObject *o;
    int rc = dds_wire_next(r, &it);
    if (rc != 0)
    {
        PyErr_SetString(PyExc_ValueError, dds_last_error());
        return NULL;
    }
    switch (it.kind) {
    case DDS_WIRE_NONE:
        Py_RETURN_NONE;
    case DDS_WIRE_TRUE:
        Py_RETURN_TRUE;
    case DDS_WIRE_FALSE:
        Py_RETURN_FALSE;
    case DDS_WIRE_INT: {
        char buf[DDS_WIRE_MAX_DIGITS + 2];
        memcpy(buf, it.data, it.len);
        buf[it.len] = '\0';
        return PyLong_FromString(buf, NULL, 10);
    }
    case DDS_WIRE_STR:
    case DDS_WIRE_ERROR:
        return PyUnicode_DecodeUTF8(it.data, (Py_ssize_t)it.len, "surrogatepass");
    case DDS_WIRE_TUPLE:
    case DDS_WIRE_LIST:
        o = it.kind == DDS_WIRE_TUPLE ? PyTuple_New((Py_ssize_t)it.count)
                                      : PyList_New((Py_ssize_t)it.count);
        for (size_t i = 0; o != NULL && i < it.count; i++) {
            PyObject *x = decode_value(r);
            if (x == NULL)
                Py_CLEAR(o);
            else if (it.kind == DDS_WIRE_TUPLE)
                PyTuple_SET_ITEM(o, (Py_ssize_t)i, x);
            else
                PyList_SET_ITEM(o, (Py_ssize_t)i, x);
        }
        return o;
    case DDS_WIRE_DICT:
        o = PyDict_New();
        for (size_t i = 0; o != NULL && i < it.count; i++) {
            PyObject *k = decode_value(r), *v = k ? decode_value(r) : NULL;
            if (v == NULL || PyDict_SetItem(o, k, v) < 0)
                Py_CLEAR(o);
            Py_XDECREF(k);
            Py_XDECREF(v);
        }
        return o;
    default:
        PyErr_SetString(PyExc_ValueError, "not a ddstore wire message");
        return NULL;
    }
}

/* (ok, value) from a message: ValueError when it is not one. */
static PyObject *wire_decode_bytes(const void *data, size_t len)
{
    dds_wire_reader_t r;
    int is_error = 0, rc = dds_wire_check(data, len, &is_error);
    PyObject *v, *out;
    if (rc == 0)
        rc = dds_wire_reader_init(&r, data, len);
    if (rc != 0) {
        PyErr_SetString(PyExc_ValueError, dds_last_error());
        return NULL;
    }
    v = decode_value(&r);
    if (v == NULL) {
        /* a string that is not UTF-8, an int Python refuses: foreign too */
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError) ||
            !PyErr_ExceptionMatches(PyExc_ValueError)) {
            PyObject *t, *val, *tb, *s;
            PyErr_Fetch(&t, &val, &tb);
            s = val ? PyObject_Str(val) : NULL;
            PyErr_Format(PyExc_ValueError, "not a valid ddstore wire message (%U)",
                         s ? s : Py_None);
            Py_XDECREF(s);
            Py_XDECREF(t);
            Py_XDECREF(val);
            Py_XDECREF(tb);
        }
        return NULL;
    }
    out = Py_BuildValue("(ON)", is_error ? Py_False : Py_True, v);
    return out;
}

/* Every rank's value from the gathered messages (parts[r], lens[r]); raises
 * the caller's own encode error `mine` (when set, still pending) first, else
 * DDStoreError for a message that is not one (naming the rank), else
 * TypeError naming the first rank that could not encode. */
static PyObject *gather_decode(const char *data, const size_t *lens, int nr, const char *what,
                               int mine)
{
    PyObject *out, *first = NULL;
    int first_rank = -1;
    size_t at = 0;
    if (mine)
        return NULL;
    out = PyList_New(nr);
    if (out == NULL)
        return NULL;
    for (int r = 0; r < nr; at += lens[r], r++) {
        PyObject *pair = wire_decode_bytes(data + at, lens[r]);
        if (pair == NULL) {
            PyObject *t, *v, *tb;
            PyErr_Fetch(&t, &v, &tb);
            PyErr_Format(pydds_Error, "%s: the message of rank %d is not valid (%S)", what, r,
                         v ? v : Py_None);
            Py_XDECREF(t);
            Py_XDECREF(v);
            Py_XDECREF(tb);
            Py_DECREF(out);
            Py_XDECREF(first);
            return NULL;
        }
        PyObject *val = PyTuple_GET_ITEM(pair, 1);
        if (PyTuple_GET_ITEM(pair, 0) == Py_False && first == NULL) {
            first = Py_NewRef(val);
            first_rank = r;
        }
        PyList_SET_ITEM(out, r, Py_NewRef(val));
        Py_DECREF(pair);
    }
    if (first != NULL) {
        PyErr_Format(PyExc_TypeError, "rank %d (%s): %U", first_rank, what, first);
        Py_DECREF(first);
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static PyObject *py_wire_encode(PyObject *mod, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"obj", "what", NULL};
    PyObject *obj, *out;
    const char *what = "allgather";
    dds_wire_buf_t b;
    (void)mod;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|s:wire_encode", kwlist, &obj, &what))
        return NULL;
    if (wire_message(obj, what, &b) < 0)
        return NULL;
    out = PyBytes_FromStringAndSize((const char *)b.data, (Py_ssize_t)b.len);
    dds_wire_buf_free(&b);
    return out;
}

static PyObject *py_wire_decode(PyObject *mod, PyObject *arg)
{
    Py_buffer view;
    PyObject *out;
    (void)mod;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    out = wire_decode_bytes(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return out;
}

static PyObject *py_wire_gather(PyObject *mod, PyObject *args)
{
    PyObject *parts, *seq, *out = NULL, *joined = NULL, *empty = NULL;
    const char *what;
    size_t *lens;
    Py_ssize_t nr;
    (void)mod;
    if (!PyArg_ParseTuple(args, "Os:wire_gather", &parts, &what))
        return NULL;
    seq = PySequence_Fast(parts, "wire_gather: parts must be a sequence of bytes");
    if (seq == NULL)
        return NULL;
    nr = PySequence_Fast_GET_SIZE(seq);
    lens = PyMem_Calloc((size_t)nr + 1, sizeof *lens);
    empty = PyBytes_FromStringAndSize(NULL, 0);
    if (lens == NULL || empty == NULL)
        goto out;
    for (Py_ssize_t r = 0; r < nr; r++) {
        PyObject *p = PySequence_Fast_GET_ITEM(seq, r);
        if (!PyBytes_Check(p)) {
            PyErr_SetString(PyExc_TypeError, "wire_gather: parts must be bytes");
            goto out;
        }
        lens[r] = (size_t)PyBytes_GET_SIZE(p);
    }
    joined = PyObject_CallMethod(empty, "join", "O", seq);
    if (joined != NULL)
        out = gather_decode(PyBytes_AS_STRING(joined), lens, (int)nr, what, 0);
out:
    PyMem_Free(lens);
    Py_XDECREF(joined);
    Py_XDECREF(empty);
    Py_DECREF(seq);
    return out;
}

/* ---- a communicator over a Python byte mover -------------------------- */

typedef struct mover_ctx {
    PyObject *obj;      /* strong reference                               */
    PyObject *pending;  /* the mover's last exception that is not a ddstore
                           timeout: re-raised by Collective as it was      */
} mover_ctx_t;

/* The mover raised: the error code and detail for core (-DDS_ETIMEDOUT
 * for a timeout or an out-of-step refusal, else -DDS_EIO); the exception
 * kept for Collective to re-raise unless it is a DDStoreError. */
static int mover_failed(mover_ctx_t *c, const char *what)
{
    PyObject *type, *value, *tb, *s, *name;
    const char *msg = NULL;
    int rc;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    s = value ? PyObject_Str(value) : NULL;
    msg = s ? PyUnicode_AsUTF8(s) : NULL;
    if (msg == NULL) {
        PyErr_Clear();
        msg = "unknown error";
    }
    rc = strstr(msg, " timed out after ") || strstr(msg, " refused: an earlier ")
             ? -DDS_ETIMEDOUT
             : -DDS_EIO;
    name = PyObject_GetAttrString(c->obj, "name");
    if (name == NULL)
        PyErr_Clear();
    dds_error(rc, "%s %s: %s",
              name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : "communicator", what, msg);
    Py_XDECREF(name);
    Py_XDECREF(s);
    Py_CLEAR(c->pending);
    if (value != NULL && !PyObject_TypeCheck(value, (PyTypeObject *)pydds_Error)) {
        PyException_SetTraceback(value, tb);
        c->pending = value;
        value = NULL;
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return rc;
}

static long mover_size(mover_ctx_t *c)
{
    PyObject *s = PyObject_GetAttrString(c->obj, "size");
    long n = s ? PyLong_AsLong(s) : -1;
    Py_XDECREF(s);
    return n;
}

/* One call of the mover's allgather_bytes: `bytes` from every rank into recv. */
static int mover_call(mover_ctx_t *c, const void *send, size_t bytes, void *recv)
{
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *arg, *res;
    int rc = 0;
    arg = PyBytes_FromStringAndSize(send, (Py_ssize_t)bytes);
    res = arg ? PyObject_CallMethod(c->obj, "allgather_bytes", "O", arg) : NULL;
    Py_XDECREF(arg);
    if (res == NULL) {
        rc = mover_failed(c, "allgather");
    } else {
        char *p = NULL;
        Py_ssize_t n = 0;
        long nr = mover_size(c);
        if (PyBytes_AsStringAndSize(res, &p, &n) < 0 || nr < 1)
            rc = mover_failed(c, "allgather (result)");
        else if ((size_t)n != bytes * (size_t)nr)
            rc = dds_error(-DDS_EIO, "allgather_bytes returned %zd bytes, expected %zu x %ld",
                           n, bytes, nr);
        else
            memcpy(recv, p, (size_t)n);
        Py_DECREF(res);
    }
    PyGILState_Release(g);
    return rc;
}

/* Two steps, the lengths first: ranks in different collectives fail (a
 * "collective mismatch"), and a late rank cannot complete a collective the
 * others gave up (gloo finishes an abandoned step when the peer comes: the
 * second finds none, and times out). */
static int mover_allgather(void *vctx, const void *send, size_t bytes, void *recv)
{
    mover_ctx_t *c = vctx;
    int64_t mine = (int64_t)bytes, *lens;
    long nr;
    int rc;
    if (bytes == 0)
        return 0; /* the same on every rank: nothing to move */
    {
        PyGILState_STATE g = PyGILState_Ensure();
        nr = mover_size(c);
        rc = nr < 1 ? mover_failed(c, "size") : 0;
        PyGILState_Release(g);
    }
    if (rc < 0)
        return rc;
    lens = malloc(sizeof *lens * (size_t)nr);
    if (lens == NULL)
        return dds_error(-DDS_ENOMEM, "allgather: out of memory");
    rc = mover_call(c, &mine, sizeof mine, lens);
    for (long r = 0; rc == 0 && r < nr; r++) {
        if (lens[r] != mine) {
            char list[256];
            size_t at = 0;
            for (long k = 0; k < nr && at + 24 < sizeof list; k++)
                at += (size_t)snprintf(list + at, sizeof list - at, "%s%lld", k ? ", " : "",
                                       (long long)lens[k]);
            rc = dds_error(-DDS_EIO, "allgather: collective mismatch: the ranks send [%s%s] "
                           "bytes (they are in different collective calls)", list,
                           at + 24 >= sizeof list ? ", ..." : "");
        }
    }
    free(lens);
    return rc == 0 ? mover_call(c, send, bytes, recv) : rc;
}

static int mover_allreduce_i64(void *vctx, int64_t *inout, size_t n, dds_reduce_op_t op)
{
    mover_ctx_t *c = vctx;
    PyGILState_STATE g = PyGILState_Ensure();
    long nr = mover_size(c);
    int rc = nr < 1 ? mover_failed(c, "size") : 0;
    int64_t *all = NULL;
    PyGILState_Release(g);
    if (rc < 0)
        return rc;
    all = malloc(n * sizeof(int64_t) * (size_t)nr + 1);
    if (all == NULL)
        return dds_error(-DDS_ENOMEM, "allreduce: out of memory");
    rc = mover_allgather(vctx, inout, n * sizeof(int64_t), all);
    if (rc == 0)
        dds_reduce_i64(all, (int)nr, n, op, inout);
    free(all);
    return rc;
}

static int mover_barrier(void *vctx)
{
    mover_ctx_t *c = vctx;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *res = PyObject_CallMethod(c->obj, "barrier", NULL);
    int rc = res ? 0 : mover_failed(c, "barrier");
    Py_XDECREF(res);
    PyGILState_Release(g);
    return rc;
}

static void mover_destroy(void *vctx)
{
    mover_ctx_t *c = vctx;
    if (c == NULL)
        return;
    if (Py_IsInitialized()) {
        PyGILState_STATE g = PyGILState_Ensure();
        Py_XDECREF(c->obj);
        Py_XDECREF(c->pending);
        PyGILState_Release(g);
    }
    free(c);
}

static const dds_comm_ops_t mover_ops = {
    sizeof(dds_comm_ops_t), "python", mover_allgather, mover_allreduce_i64, mover_barrier,
    mover_destroy,
};

/* With the GIL: a communicator over `obj` (rank, size). */
static int mover_create(void *arg, dds_comm_t *comm_p)
{
    PyObject *obj = arg, *r = PyObject_GetAttrString(obj, "rank"), *s;
    long rank = r ? PyLong_AsLong(r) : -1, size;
    mover_ctx_t *c;
    s = r ? PyObject_GetAttrString(obj, "size") : NULL;
    size = s ? PyLong_AsLong(s) : -1;
    Py_XDECREF(r);
    Py_XDECREF(s);
    if (PyErr_Occurred())
        return -1;
    if (rank < 0 || size < 1 || rank >= size) {
        PyErr_Format(PyExc_ValueError, "communicator: rank %ld of %ld is not valid", rank, size);
        return -1;
    }
    c = calloc(1, sizeof *c);
    if (c == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    c->obj = Py_NewRef(obj);
    comm_p->ops = &mover_ops;
    comm_p->ctx = c;
    comm_p->rank = (int)rank;
    comm_p->size = (int)size;
    return 0;
}

static void provider_capsule_free(PyObject *cap)
{
    pyddstore_comm_provider_t *pv = PyCapsule_GetPointer(cap, PYDDSTORE_COMM_CAPSULE);
    if (pv == NULL) {
        PyErr_Clear();
        return;
    }
    Py_XDECREF((PyObject *)pv->arg);
    PyMem_Free(pv);
}

/* comm_capsule(mover): what TorchComm._dds_comm returns, for PyDDStore. */
static PyObject *py_comm_capsule(PyObject *mod, PyObject *obj)
{
    pyddstore_comm_provider_t *pv = PyMem_Calloc(1, sizeof *pv);
    PyObject *cap;
    (void)mod;
    if (pv == NULL)
        return PyErr_NoMemory();
    pv->size = sizeof *pv;
    pv->name = "torch";
    pv->needs_gil = 1;
    pv->create = mover_create;
    pv->arg = Py_NewRef(obj);
    cap = PyCapsule_New(pv, PYDDSTORE_COMM_CAPSULE, provider_capsule_free);
    if (cap == NULL) {
        Py_DECREF(obj);
        PyMem_Free(pv);
    }
    return cap;
}

/* ---- Collective --------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    dds_comm_t comm;          /* ours (a mover's, an mpi4py communicator's)  */
    dds_comm_t *use;          /* &comm, or the FileComm's own                */
    PyObject *owner;          /* the mover, mpi4py communicator or FileComm  */
    PyThread_type_lock lock;  /* the FileComm's or ours (MPI); NULL: mover   */
    int have_comm;
    int mover;                /* comm's context is a mover_ctx_t             */
    int own_lock;
} coll_obj;

static int coll_init(coll_obj *self, PyObject *args, PyObject *kw)
{
    PyObject *obj;
    static char *kwlist[] = {"comm", NULL};
    if (self->owner != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Collective: already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:Collective", kwlist, &obj))
        return -1;
    if (pydds_filecomm_comm(obj, &self->use, &self->lock)) {
        self->owner = Py_NewRef(obj);
        return 0;
    }
    if (PyErr_Occurred())
        return -1;
    if (pydds_is_mpi4py(obj)) {
        /* its own MPI_Comm, collectives in C (GIL released, one at a time) */
        if (pydds_comm_borrow_mpi4py(obj, &self->comm) < 0)
            return -1;
        self->lock = PyThread_allocate_lock();
        if (self->lock == NULL) {
            dds_comm_destroy(&self->comm);
            PyErr_NoMemory();
            return -1;
        }
        self->own_lock = 1;
    } else if (mover_create(obj, &self->comm) < 0) {
        return -1;
    } else {
        self->mover = 1;
    }
    self->have_comm = 1;
    self->use = &self->comm;
    self->owner = Py_NewRef(obj);
    return 0;
}

static void coll_dealloc(coll_obj *self)
{
    if (self->have_comm)
        dds_comm_destroy(&self->comm);
    if (self->own_lock)
        PyThread_free_lock(self->lock);
    Py_XDECREF(self->owner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int coll_ready(coll_obj *self)
{
    if (self->owner == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Collective: not initialised");
        return -1;
    }
    return 0;
}

/* A failed collective: the mover's own exception when it raised one that
 * is not a ddstore error, else the code's exception "what: detail". */
static PyObject *coll_raise(coll_obj *self, int rc, const char *what)
{
    if (self->mover) {
        mover_ctx_t *c = self->comm.ctx;
        if (c->pending != NULL) {
            PyObject *e = c->pending;
            c->pending = NULL;
            PyErr_SetObject((PyObject *)Py_TYPE(e), e);
            Py_DECREF(e);
            return NULL;
        }
    }
    PyErr_Format(pydds_exc_class(rc), "%s: %s", what, dds_last_error());
    return NULL;
}

#define COLL_CALL(self, stmt)                                                  \
    do {                                                                       \
        if ((self)->lock != NULL) {                                            \
            Py_BEGIN_ALLOW_THREADS                                             \
            PyThread_acquire_lock((self)->lock, WAIT_LOCK);                    \
            stmt;                                                              \
            PyThread_release_lock((self)->lock);                               \
            Py_END_ALLOW_THREADS                                               \
        } else {                                                               \
            stmt;                                                              \
        }                                                                      \
    } while (0)

static PyObject *coll_allgather(coll_obj *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"obj", "what", NULL};
    PyObject *obj, *out;
    const char *what = "allgather";
    dds_wire_buf_t b;
    void *recv = NULL;
    size_t *lens;
    int mine = 0, rc;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|s:allgather", kwlist, &obj, &what) ||
        coll_ready(self) < 0)
        return NULL;
    if (wire_message(obj, what, &b) < 0) {
        /* still take part, sending the error: every rank raises */
        mine = 1;
        if (error_message(&b) != 0) {
            dds_wire_buf_free(&b);
            return NULL;
        }
    }
    lens = PyMem_RawCalloc((size_t)self->use->size, sizeof *lens);
    if (lens == NULL) {
        dds_wire_buf_free(&b);
        return PyErr_NoMemory();
    }
    {
        PyObject *t = NULL, *v = NULL, *tb = NULL;
        if (mine)
            PyErr_Fetch(&t, &v, &tb);
        COLL_CALL(self, rc = dds_comm_allgatherv(self->use, b.data, b.len, &recv, lens));
        if (mine)
            PyErr_Restore(t, v, tb);
    }
    dds_wire_buf_free(&b);
    if (rc != 0) {
        if (mine) /* the original error matters more */
            out = NULL;
        else
            out = coll_raise(self, rc, what);
    } else {
        out = gather_decode(recv, lens, self->use->size, what, mine);
    }
    free(recv);
    PyMem_RawFree(lens);
    return out;
}

static PyObject *coll_barrier(coll_obj *self, PyObject *args)
{
    const char *what = "barrier";
    int rc;
    if (!PyArg_ParseTuple(args, "|s:barrier", &what) || coll_ready(self) < 0)
        return NULL;
    COLL_CALL(self, rc = self->use->ops->barrier(self->use->ctx));
    if (rc != 0)
        return coll_raise(self, rc, what);
    Py_RETURN_NONE;
}

/* agree(info, what): info None (this rank passed) or a value; None when
 * every rank passed, else (rank, info) of the lowest failing rank, on every
 * rank.  core's agreement protocol (dds_comm_agree_record): one small
 * exchange when all passed. */
static PyObject *coll_agree(coll_obj *self, PyObject *args)
{
    PyObject *info, *out = NULL, *pair;
    const char *what = "error agreement";
    dds_wire_buf_t b;
    void *rec = NULL;
    size_t len = 0;
    int rc, frank = -1, failed;
    if (!PyArg_ParseTuple(args, "O|s:agree", &info, &what) || coll_ready(self) < 0)
        return NULL;
    failed = info != Py_None;
    dds_wire_buf_init(&b);
    if (failed && wire_message(info, what, &b) < 0) {
        /* still take part (the others would wait): this rank fails */
        PyObject *t, *v, *tb;
        (void)error_message(&b);
        PyErr_Fetch(&t, &v, &tb);
        COLL_CALL(self, rc = dds_comm_agree_record(self->use, -DDS_EINVAL, 0, b.data, b.len,
                                                   &frank, &rec, &len));
        dds_wire_buf_free(&b);
        free(rec);
        PyErr_Restore(t, v, tb);
        return NULL;
    }
    COLL_CALL(self, rc = dds_comm_agree_record(self->use, failed ? -DDS_EINVAL : 0, 0, b.data,
                                               b.len, &frank, &rec, &len));
    dds_wire_buf_free(&b);
    if (rc == 0)
        Py_RETURN_NONE;
    if (frank < 0)
        return coll_raise(self, rc, what);
    pair = rec != NULL ? wire_decode_bytes(rec, len) : NULL;
    free(rec);
    if (pair == NULL) { /* cut (too long) or lost: the rank still fails */
        PyErr_Clear();
        return Py_BuildValue("(iO)", frank, Py_None);
    }
    out = Py_BuildValue("(iO)", frank, PyTuple_GET_ITEM(pair, 1));
    Py_DECREF(pair);
    return out;
}

static PyObject *coll_get_rank(coll_obj *self, void *c)
{
    (void)c;
    return coll_ready(self) < 0 ? NULL : PyLong_FromLong(self->use->rank);
}

static PyObject *coll_get_size(coll_obj *self, void *c)
{
    (void)c;
    return coll_ready(self) < 0 ? NULL : PyLong_FromLong(self->use->size);
}

static PyMethodDef coll_methods[] = {
    {"allgather", (PyCFunction)(void (*)(void))coll_allgather, METH_VARARGS | METH_KEYWORDS,
     "allgather(obj, what='allgather') -> every rank's obj in rank order (collective)."},
    {"barrier", (PyCFunction)coll_barrier, METH_VARARGS, "barrier(what='barrier')"},
    {"agree", (PyCFunction)coll_agree, METH_VARARGS,
     "agree(info, what) -> None, or (rank, info) of the lowest rank whose info is not None "
     "(collective)."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef coll_getset[] = {
    {"rank", (getter)coll_get_rank, NULL, "this rank", NULL},
    {"size", (getter)coll_get_size, NULL, "number of ranks", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject coll_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pyddstore._core.Collective",
    .tp_basicsize = sizeof(coll_obj),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Collective(comm): the Python layer's collectives over a FileComm, an mpi4py "
              "communicator (its own MPI_Comm, no dup; mpi4py over our MPI library) or a "
              "byte mover (rank, size, name, allgather_bytes, barrier), in ddstore's wire "
              "format and agreement protocol (pydds_coll.c).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)coll_init,
    .tp_dealloc = (destructor)coll_dealloc,
    .tp_methods = coll_methods,
    .tp_getset = coll_getset,
};

static PyMethodDef coll_functions[] = {
    {"wire_encode", (PyCFunction)(void (*)(void))py_wire_encode, METH_VARARGS | METH_KEYWORDS,
     "wire_encode(obj, what='allgather') -> bytes (TypeError naming what cannot be sent)."},
    {"wire_decode", (PyCFunction)py_wire_decode, METH_O,
     "wire_decode(data) -> (True, obj) or (False, the sender's error); ValueError when data "
     "is not a message of this format."},
    {"wire_gather", (PyCFunction)py_wire_gather, METH_VARARGS,
     "wire_gather(parts, what) -> every rank's value from its message (DDStoreError naming a "
     "rank whose message is not valid; TypeError naming one that could not encode)."},
    {"mpi_same_library", pydds_mpi_same_library, METH_NOARGS,
     "mpi_same_library() -> True when this build has MPI and mpi4py uses its MPI library "
     "(then Collective takes an mpi4py communicator itself)."},
    {"comm_capsule", (PyCFunction)py_comm_capsule, METH_O,
     "comm_capsule(mover) -> a '_dds_comm' capsule: PyDDStore's collectives through the "
     "mover's allgather_bytes / barrier (needs the GIL)."},
    {NULL, NULL, 0, NULL}};

int pydds_coll_ready(PyObject *module)
{
    if (PyType_Ready(&coll_type) < 0)
        return -1;
    Py_INCREF(&coll_type);
    if (PyModule_AddObject(module, "Collective", (PyObject *)&coll_type) < 0) {
        Py_DECREF(&coll_type);
        return -1;
    }
    if (PyModule_AddFunctions(module, coll_functions) < 0)
        return -1;
    return pydds_agree_ready(module);
}
