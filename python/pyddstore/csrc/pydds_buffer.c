/* pyddstore._core: buffers (Py_buffer -> dds_buf_t) and row indices.
 *
 * No numpy import: everything goes through the buffer protocol and its
 * struct-module format strings ('?', 'B', 'i', 'l', 'q', 'f', 'd', 'T{..}',
 * 'Nx').
 */
#include "pydds.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define PYDDS_BIG_ENDIAN 1
#else
#define PYDDS_BIG_ENDIAN 0
#endif

/* Skip a byte-order prefix.  Returns NULL for a non-native order. */
static const char *skip_order(const char *fmt)
{
    switch (fmt[0]) {
    case '@':
    case '=':
        return fmt + 1;
    case '<':
        return PYDDS_BIG_ENDIAN ? NULL : fmt + 1;
    case '>':
    case '!':
        return PYDDS_BIG_ENDIAN ? fmt + 1 : NULL;
    default:
        return fmt;
    }
}

/* A readable name for a buffer element type (for messages). */
static void format_name(const char *fmt, Py_ssize_t itemsize, char *out,
                        size_t cap)
{
    const char *f = skip_order(fmt);
    const char *name = NULL;
    if (f == NULL) {
        snprintf(out, cap, "non-native byte order (buffer format '%s')", fmt);
        return;
    }
    if (f[0] && f[1] == '\0') {
        switch (f[0]) {
        case '?': name = "bool"; break;
        case 'b': name = "int8"; break;
        case 'B': name = "uint8"; break;
        case 'h': name = "int16"; break;
        case 'H': name = "uint16"; break;
        case 'e': name = "float16"; break;
        case 'f': name = "float32"; break;
        case 'd': name = "float64"; break;
        case 'g': name = "longdouble"; break;
        case 'O': name = "object"; break;
        case 'c': name = "char"; break;
        case 'i': case 'l': case 'q': case 'n':
            snprintf(out, cap, "int%d (buffer format '%s')",
                     (int)(itemsize * 8), fmt);
            return;
        case 'I': case 'L': case 'Q': case 'N':
            snprintf(out, cap, "uint%d (buffer format '%s')",
                     (int)(itemsize * 8), fmt);
            return;
        default: break;
        }
    } else if (f[0] == 'Z') {
        name = "complex";
    } else {
        size_t n = strlen(f);
        if (n > 0 && f[n - 1] == 's')
            name = "bytes";
        else if (n > 0 && f[n - 1] == 'w')
            name = "str";
    }
    if (name)
        snprintf(out, cap, "%s (buffer format '%s')", name, fmt);
    else
        snprintf(out, cap, "buffer format '%s'", fmt);
}

/* '16x', 'x': padding bytes, i.e. numpy void ('V16'). */
static int is_void_format(const char *f)
{
    while (isdigit((unsigned char)*f))
        f++;
    return f[0] == 'x' && f[1] == '\0';
}

/* Element type of a buffer.  0, or -1 with TypeError naming it. */
static int format_dtype(const char *what, const char *fmt, Py_ssize_t itemsize,
                        dds_dtype_t *dt_p)
{
    const char *f;
    char name[160];
    if (fmt == NULL)
        fmt = "B";
    f = skip_order(fmt);
    if (f != NULL) {
        if (f[0] == 'T' && f[1] == '{') {   /* numpy structured records */
            *dt_p = DDS_DTYPE_RAW;
            return 0;
        }
        if (is_void_format(f)) {             /* numpy void 'V<n>'        */
            *dt_p = DDS_DTYPE_RAW;
            return 0;
        }
        if (f[0] && f[1] == '\0') {
            switch (f[0]) {
            case '?':
                if (itemsize == 1) { *dt_p = DDS_DTYPE_BOOL; return 0; }
                break;
            case 'B':
                if (itemsize == 1) { *dt_p = DDS_DTYPE_UINT8; return 0; }
                break;
            case 'i': case 'l': case 'q': case 'n':
                if (itemsize == 4) { *dt_p = DDS_DTYPE_INT32; return 0; }
                if (itemsize == 8) { *dt_p = DDS_DTYPE_INT64; return 0; }
                break;
            case 'f':
                if (itemsize == 4) { *dt_p = DDS_DTYPE_FLOAT32; return 0; }
                break;
            case 'd':
                if (itemsize == 8) { *dt_p = DDS_DTYPE_FLOAT64; return 0; }
                break;
            default:
                break;
            }
        }
    }
    format_name(fmt, itemsize, name, sizeof name);
    PyErr_Format(PyExc_TypeError,
                 "%s: unsupported dtype %s; expected bool, uint8, int32, "
                 "int64, float32, float64 (or numpy structured/void records, "
                 "stored as raw bytes)",
                 what, name);
    return -1;
}

static int not_a_buffer(PyObject *obj, const char *what)
{
    const char *tn = Py_TYPE(obj)->tp_name;
    int is_tensor = strstr(tn, "Tensor") != NULL;
    PyErr_Format(PyExc_TypeError,
                 "%s: expected a C-contiguous numpy array (or another object "
                 "with the buffer protocol, or a GPU array with "
                 "__cuda_array_interface__), got %s%s",
                 what, tn,
                 is_tensor ? "; for torch tensors use pyddstore.torch" : "");
    return -1;
}

int pydds_buffer_get(PyObject *obj, const char *what, int writable,
                     pydds_buffer_t *b)
{
    Py_ssize_t i, per_row = 1;
    dds_dtype_t dt;
    memset(b, 0, sizeof *b);
    if (!PyObject_CheckBuffer(obj)) {
        /* GPU arrays (torch CUDA/ROCm tensors, cupy, numba) */
        PyObject *cai = PyObject_GetAttrString(obj, "__cuda_array_interface__");
        int rc;
        if (cai == NULL) {
            PyObject *t, *v, *tb, *str;
            if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
                PyErr_Clear();
                return not_a_buffer(obj, what);
            }
            /* e.g. torch: "Can't get __cuda_array_interface__ on Variable
             * that requires grad" */
            PyErr_Fetch(&t, &v, &tb);
            str = v ? PyObject_Str(v) : NULL;
            PyErr_Format(PyExc_TypeError, "%s: %s: %s", what,
                         Py_TYPE(obj)->tp_name,
                         str && PyUnicode_Check(str) ? PyUnicode_AsUTF8(str)
                                                     : "bad "
                                                       "__cuda_array_interface__");
            Py_XDECREF(str);
            Py_XDECREF(t);
            Py_XDECREF(v);
            Py_XDECREF(tb);
            return -1;
        }
        rc = pydds_cai_get(obj, cai, what, writable, b);
        Py_DECREF(cai);
        return rc;
    }
    if (PyObject_GetBuffer(obj, &b->view, PyBUF_RECORDS_RO) < 0) {
        /* e.g. numpy datetime64: "cannot include dtype 'M' in a buffer" */
        PyObject *t, *v, *tb, *s;
        PyErr_Fetch(&t, &v, &tb);
        s = v ? PyObject_Str(v) : NULL;
        PyErr_Format(PyExc_TypeError, "%s: unsupported %s: %s", what,
                     Py_TYPE(obj)->tp_name,
                     s && PyUnicode_Check(s) ? PyUnicode_AsUTF8(s)
                                             : "no buffer");
        Py_XDECREF(s);
        Py_XDECREF(t);
        Py_XDECREF(v);
        Py_XDECREF(tb);
        return -1;
    }
    b->have_view = 1;
    if (writable && b->view.readonly) {
        PyErr_Format(PyExc_ValueError,
                     "%s: expected a writable buffer, got a read-only %s",
                     what, Py_TYPE(obj)->tp_name);
        goto fail;
    }
    if (b->view.ndim < 1) {
        PyErr_Format(PyExc_ValueError,
                     "%s: expected a 1-D or 2-D array (rows), got a 0-D %s",
                     what, Py_TYPE(obj)->tp_name);
        goto fail;
    }
    if (!PyBuffer_IsContiguous(&b->view, 'C')) {
        PyErr_Format(PyExc_ValueError,
                     "%s: expected a C-contiguous buffer, got a "
                     "non-contiguous %d-D %s (use numpy.ascontiguousarray)",
                     what, b->view.ndim, Py_TYPE(obj)->tp_name);
        goto fail;
    }
    if (format_dtype(what, b->view.format, b->view.itemsize, &dt) < 0)
        goto fail;
    for (i = 1; i < b->view.ndim; i++)
        per_row *= b->view.shape[i];
    b->buf.ptr = b->view.buf;
    b->buf.nrows = (int64_t)b->view.shape[0];
    b->buf.row_bytes = (size_t)per_row * (size_t)b->view.itemsize;
    b->buf.dtype = dt;
    b->buf.itemsize = (size_t)b->view.itemsize;
    b->buf.mem.kind = DDS_MEM_HOST;
    b->buf.mem.device = 0;
    b->buf.mem.stream = NULL;
    b->nbytes = (size_t)b->view.len;
    return 0;
fail:
    pydds_buffer_release(b);
    return -1;
}

void pydds_buffer_release(pydds_buffer_t *b)
{
    if (b->have_view) {
        PyBuffer_Release(&b->view);
        b->have_view = 0;
    }
}

/* ---- indices ------------------------------------------------------------ */

static const int64_t empty_rows[1] = {0};

enum { IX_BAD = 0, IX_SIGNED = 1, IX_UNSIGNED = 2 };

static int index_kind(const char *fmt)
{
    const char *f = fmt ? skip_order(fmt) : "B";
    if (f == NULL || f[0] == '\0' || f[1] != '\0')
        return IX_BAD;
    switch (f[0]) {
    case 'b': case 'h': case 'i': case 'l': case 'q': case 'n':
        return IX_SIGNED;
    case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N':
        return IX_UNSIGNED;
    default:
        return IX_BAD;
    }
}

static int indices_from_buffer(PyObject *obj, pydds_indices_t *ix)
{
    Py_buffer *v = &ix->view;
    int kind;
    Py_ssize_t n, i, stride;
    const char *p;
    if (PyObject_GetBuffer(obj, v, PyBUF_RECORDS_RO) < 0)
        return -1;
    ix->have_view = 1;
    kind = index_kind(v->format);
    if (kind == IX_BAD) {
        char name[160];
        format_name(v->format ? v->format : "B", v->itemsize, name,
                    sizeof name);
        PyErr_Format(PyExc_TypeError,
                     "indices: expected integers, got %s", name);
        return -1;
    }
    if (v->itemsize != 1 && v->itemsize != 2 && v->itemsize != 4 &&
        v->itemsize != 8) {
        PyErr_Format(PyExc_TypeError,
                     "indices: unsupported integer size %zd", v->itemsize);
        return -1;
    }
    if (v->ndim == 0) {
        n = 1;
        stride = v->itemsize;
    } else if (v->ndim == 1) {
        n = v->shape[0];
        stride = v->strides ? v->strides[0] : v->itemsize;
    } else if (PyBuffer_IsContiguous(v, 'C')) {
        n = v->len / v->itemsize;
        stride = v->itemsize;
    } else {
        PyErr_SetString(PyExc_ValueError,
                        "indices: expected a 1-D or C-contiguous buffer, got "
                        "a non-contiguous multi-dimensional one");
        return -1;
    }
    ix->n = (size_t)n;
    if (n == 0) {
        ix->rows = empty_rows;
        return 0;
    }
    /* int64, contiguous, aligned: use the buffer as is. */
    if (kind == IX_SIGNED && v->itemsize == 8 && stride == 8 &&
        ((uintptr_t)v->buf % sizeof(int64_t)) == 0) {
        ix->rows = (const int64_t *)v->buf;
        return 0;
    }
    ix->owned = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    if (ix->owned == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    p = (const char *)v->buf;
    for (i = 0; i < n; i++, p += stride) {
        int64_t val;
        if (kind == IX_SIGNED) {
            switch (v->itemsize) {
            case 1: { int8_t x; memcpy(&x, p, 1); val = x; break; }
            case 2: { int16_t x; memcpy(&x, p, 2); val = x; break; }
            case 4: { int32_t x; memcpy(&x, p, 4); val = x; break; }
            default: { int64_t x; memcpy(&x, p, 8); val = x; break; }
            }
        } else {
            uint64_t u;
            switch (v->itemsize) {
            case 1: { uint8_t x; memcpy(&x, p, 1); u = x; break; }
            case 2: { uint16_t x; memcpy(&x, p, 2); u = x; break; }
            case 4: { uint32_t x; memcpy(&x, p, 4); u = x; break; }
            default: { uint64_t x; memcpy(&x, p, 8); u = x; break; }
            }
            if (u > (uint64_t)INT64_MAX) {
                PyErr_Format(PyExc_IndexError,
                             "indices[%zd] = %llu is out of range", i,
                             (unsigned long long)u);
                return -1;
            }
            val = (int64_t)u;
        }
        ix->owned[i] = val;
    }
    ix->rows = ix->owned;
    return 0;
}

static int indices_from_sequence(PyObject *obj, pydds_indices_t *ix)
{
    PyObject *seq, **items;
    Py_ssize_t n, i;
    if (PyUnicode_Check(obj) || PyDict_Check(obj) || !PySequence_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "indices: expected a buffer of integers (numpy array) or "
                     "a sequence of integers, got %s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    seq = PySequence_Fast(obj, "indices: expected a sequence of integers");
    if (seq == NULL)
        return -1;
    n = PySequence_Fast_GET_SIZE(seq);
    items = PySequence_Fast_ITEMS(seq);
    ix->n = (size_t)n;
    if (n == 0) {
        Py_DECREF(seq);
        ix->rows = empty_rows;
        return 0;
    }
    ix->owned = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    if (ix->owned == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (i = 0; i < n; i++) {
        long long v;
        if (PyFloat_Check(items[i])) {
            PyErr_Format(PyExc_TypeError,
                         "indices[%zd]: expected an integer, got float", i);
            Py_DECREF(seq);
            return -1;
        }
        v = PyLong_AsLongLong(items[i]);
        if (v == -1 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_IndexError,
                             "indices[%zd] is out of range (does not fit in "
                             "int64)",
                             i);
            } else if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError,
                             "indices[%zd]: expected an integer, got %s", i,
                             Py_TYPE(items[i])->tp_name);
            }
            Py_DECREF(seq);
            return -1;
        }
        ix->owned[i] = (int64_t)v;
    }
    Py_DECREF(seq);
    ix->rows = ix->owned;
    return 0;
}

int pydds_indices_get(PyObject *obj, pydds_indices_t *ix)
{
    int rc;
    memset(ix, 0, sizeof *ix);
    if (PyObject_CheckBuffer(obj) && !PyBytes_Check(obj) &&
        !PyByteArray_Check(obj))
        rc = indices_from_buffer(obj, ix);
    else
        rc = indices_from_sequence(obj, ix);
    if (rc < 0)
        pydds_indices_release(ix);
    return rc;
}

void pydds_indices_release(pydds_indices_t *ix)
{
    free(ix->owned);
    ix->owned = NULL;
    if (ix->have_view) {
        PyBuffer_Release(&ix->view);
        ix->have_view = 0;
    }
    ix->rows = NULL;
    ix->n = 0;
}
