/* ddstore-core: the wire codec of the bindings' collectives and the
 * variable-length allgather (include/ddstore/wire.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddstore/errors.h"
#include "ddstore/wire.h"

static const char MAGIC[4] = {'D', 'D', 'W', '1'};

/* ---- encoding ---------------------------------------------------------- */

void dds_wire_buf_init(dds_wire_buf_t *b)
{
    memset(b, 0, sizeof *b);
}

void dds_wire_buf_free(dds_wire_buf_t *b)
{
    if (b == NULL)
        return;
    free(b->data);
    memset(b, 0, sizeof *b);
}

static int put(dds_wire_buf_t *b, const void *p, size_t n)
{
    if (b->rc != 0)
        return b->rc;
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2)
                return b->rc = dds_error(-DDS_ENOMEM, "wire: message too large");
            cap *= 2;
        }
        unsigned char *d = realloc(b->data, cap);
        if (d == NULL)
            return b->rc = dds_error(-DDS_ENOMEM, "wire: out of memory for %zu bytes", cap);
        b->data = d;
        b->cap = cap;
    }
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

static int put_u32(dds_wire_buf_t *b, size_t v)
{
    unsigned char x[4];
    if (b->rc == 0 && v > UINT32_MAX)
        return b->rc = dds_error(-DDS_EINVAL, "wire: %zu items or bytes exceed 2^32 - 1", v);
    for (int i = 0; i < 4; i++)
        x[i] = (unsigned char)(v >> (8 * i));
    return put(b, x, 4);
}

static int put_tag(dds_wire_buf_t *b, int kind)
{
    unsigned char t = (unsigned char)kind;
    return put(b, &t, 1);
}

int dds_wire_put_ok(dds_wire_buf_t *b)
{
    put(b, MAGIC, 4);
    return put_tag(b, 'O');
}

int dds_wire_put_error(dds_wire_buf_t *b, const char *text, size_t n)
{
    b->len = 0;
    b->rc = 0;
    put(b, MAGIC, 4);
    put_tag(b, DDS_WIRE_ERROR);
    put_u32(b, n);
    return put(b, text, n);
}

/* '-'? digits without a leading zero ("0" alone), at most
 * DDS_WIRE_MAX_DIGITS digits. */
static int int_ok(const unsigned char *s, size_t n)
{
    size_t i = n > 0 && s[0] == '-' ? 1 : 0;
    if (i == n || n - i > DDS_WIRE_MAX_DIGITS)
        return 0;
    if (s[i] == '0' && (n - i > 1 || i == 1))
        return 0;
    for (; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

int dds_wire_put_scalar(dds_wire_buf_t *b, int kind, const void *data, size_t n)
{
    switch (kind) {
    case DDS_WIRE_NONE:
    case DDS_WIRE_TRUE:
    case DDS_WIRE_FALSE:
        return put_tag(b, kind);
    case DDS_WIRE_INT:
        if (b->rc == 0 && !int_ok(data, n))
            return b->rc = dds_error(-DDS_EINVAL, "wire: '%.*s' is not a decimal integer "
                                                  "of at most %d digits",
                                     (int)(n > 64 ? 64 : n), (const char *)data,
                                     DDS_WIRE_MAX_DIGITS);
        /* fall through */
    case DDS_WIRE_STR:
        put_tag(b, kind);
        put_u32(b, n);
        return put(b, data, n);
    default:
        if (b->rc == 0)
            b->rc = dds_error(-DDS_EINVAL, "wire: %d is not a scalar kind", kind);
        return b->rc;
    }
}

int dds_wire_put_container(dds_wire_buf_t *b, int kind, size_t count)
{
    if (kind != DDS_WIRE_TUPLE && kind != DDS_WIRE_LIST && kind != DDS_WIRE_DICT) {
        if (b->rc == 0)
            b->rc = dds_error(-DDS_EINVAL, "wire: %d is not a container kind", kind);
        return b->rc;
    }
    put_tag(b, kind);
    return put_u32(b, count);
}

int dds_wire_finish(const dds_wire_buf_t *b)
{
    return b->rc;
}

/* ---- decoding ---------------------------------------------------------- */

static int corrupt(size_t pos, const char *what)
{
    return dds_error(-DDS_ECORRUPT, "not a ddstore wire message: %s at byte %zu", what, pos);
}

static int get_u32(dds_wire_reader_t *r, size_t *v)
{
    if (r->len - r->pos < 4)
        return corrupt(r->pos, "truncated length");
    *v = (size_t)r->p[r->pos] | (size_t)r->p[r->pos + 1] << 8 |
         (size_t)r->p[r->pos + 2] << 16 | (size_t)r->p[r->pos + 3] << 24;
    r->pos += 4;
    return 0;
}

int dds_wire_reader_init(dds_wire_reader_t *r, const void *msg, size_t len)
{
    r->p = msg;
    r->len = msg == NULL ? 0 : len;
    r->pos = 0;
    if (r->len < 5 || memcmp(r->p, MAGIC, 4) != 0)
        return corrupt(0, r->len < 5 ? "too short" : "no DDW1 magic");
    if (r->p[4] != 'O' && r->p[4] != DDS_WIRE_ERROR)
        return corrupt(4, "unknown message kind");
    /* an error message's text is read as its first item */
    r->pos = r->p[4] == 'O' ? 5 : 4;
    return 0;
}

int dds_wire_next(dds_wire_reader_t *r, dds_wire_item_t *it)
{
    size_t n;
    int rc;
    memset(it, 0, sizeof *it);
    if (r->pos >= r->len)
        return corrupt(r->pos, "truncated: an item is missing");
    it->kind = r->p[r->pos++];
    switch (it->kind) {
    case DDS_WIRE_NONE:
    case DDS_WIRE_TRUE:
    case DDS_WIRE_FALSE:
        return 0;
    case DDS_WIRE_INT:
    case DDS_WIRE_STR:
    case DDS_WIRE_ERROR:
        if ((rc = get_u32(r, &n)) != 0)
            return rc;
        if (r->len - r->pos < n)
            return corrupt(r->pos, "truncated bytes");
        if (it->kind == DDS_WIRE_INT && !int_ok(r->p + r->pos, n))
            return corrupt(r->pos, "a malformed integer");
        it->data = (const char *)r->p + r->pos;
        it->len = n;
        r->pos += n;
        return 0;
    case DDS_WIRE_TUPLE:
    case DDS_WIRE_LIST:
    case DDS_WIRE_DICT:
        if ((rc = get_u32(r, &n)) != 0)
            return rc;
        /* every item takes a byte at least: a count beyond the rest is a lie
         * (and would make a binding allocate for it) */
        if (n > r->len - r->pos || (it->kind == DDS_WIRE_DICT && n > (r->len - r->pos) / 2))
            return corrupt(r->pos, "a count larger than the message");
        it->count = n;
        return 0;
    default:
        return corrupt(r->pos - 1, "an unknown tag");
    }
}

/* One value (and its children); key: only what may be a dict key. */
static int check_value(dds_wire_reader_t *r, int depth, int key)
{
    dds_wire_item_t it;
    size_t at = r->pos;
    int rc = dds_wire_next(r, &it);
    if (rc != 0)
        return rc;
    switch (it.kind) {
    case DDS_WIRE_NONE:
    case DDS_WIRE_TRUE:
    case DDS_WIRE_FALSE:
    case DDS_WIRE_INT:
    case DDS_WIRE_STR:
        return 0;
    case DDS_WIRE_ERROR:
        return corrupt(at, "an error inside a value");
    default:
        break;
    }
    if (key && it.kind != DDS_WIRE_TUPLE)
        return corrupt(at, "a dict key that is a list or dict");
    if (it.count > 0 && depth >= DDS_WIRE_MAX_DEPTH)
        return dds_error(-DDS_ECORRUPT,
                         "not a ddstore wire message: nested deeper than %d levels at byte %zu",
                         DDS_WIRE_MAX_DEPTH, at);
    for (size_t i = 0; i < it.count; i++) {
        if (it.kind == DDS_WIRE_DICT && (rc = check_value(r, depth + 1, 1)) != 0)
            return rc;
        if ((rc = check_value(r, depth + 1, key)) != 0)
            return rc;
    }
    return 0;
}

int dds_wire_check(const void *msg, size_t len, int *is_error)
{
    dds_wire_reader_t r;
    int rc = dds_wire_reader_init(&r, msg, len);
    if (rc != 0)
        return rc;
    if (r.p[4] == DDS_WIRE_ERROR) {
        dds_wire_item_t it;
        rc = dds_wire_next(&r, &it);
    } else {
        rc = check_value(&r, 0, 0);
    }
    if (rc != 0)
        return rc;
    if (r.pos != r.len)
        return corrupt(r.pos, "bytes after the value");
    if (is_error != NULL)
        *is_error = r.p[4] == DDS_WIRE_ERROR;
    return 0;
}

/* ---- collectives ------------------------------------------------------- */

void dds_reduce_i64(const int64_t *all, int nranks, size_t n, dds_reduce_op_t op, int64_t *out)
{
    for (size_t i = 0; i < n; i++) {
        int64_t v = all[i];
        for (int j = 1; j < nranks; j++) {
            int64_t x = all[(size_t)j * n + i];
            if (op == DDS_REDUCE_MIN)
                v = x < v ? x : v;
            else if (op == DDS_REDUCE_MAX)
                v = x > v ? x : v;
            else
                v = (int64_t)((uint64_t)v + (uint64_t)x); /* wraps */
        }
        out[i] = v;
    }
}

int dds_comm_allgatherv(const dds_comm_t *comm, const void *send, size_t len, void **recv_p,
                        size_t *lens)
{
    int64_t mine = (int64_t)len, *all = NULL;
    size_t nr, longest = 0;
    char *pad = NULL, *recv = NULL;
    int rc;

    if (comm == NULL || comm->ops == NULL || comm->ops->allgather == NULL || recv_p == NULL ||
        lens == NULL || (len > 0 && send == NULL))
        return dds_error(-DDS_EINVAL, "dds_comm_allgatherv: invalid argument");
    *recv_p = NULL;
    nr = (size_t)comm->size;
    if (len > INT64_MAX)
        return dds_error(-DDS_EINVAL, "dds_comm_allgatherv: %zu bytes", len);
    all = malloc(nr * sizeof *all);
    if (all == NULL)
        return dds_error(-DDS_ENOMEM, "dds_comm_allgatherv: out of memory");
    rc = comm->ops->allgather(comm->ctx, &mine, sizeof mine, all);
    if (rc != 0)
        goto out;
    for (size_t r = 0; r < nr; r++) {
        if (all[r] < 0 || (uint64_t)all[r] > SIZE_MAX / nr) {
            rc = dds_error(-DDS_EIO, "dds_comm_allgatherv: rank %zu sends %lld bytes", r,
                           (long long)all[r]);
            goto out;
        }
        lens[r] = (size_t)all[r];
        longest = lens[r] > longest ? lens[r] : longest;
    }
    if (longest == 0)
        goto out;
    pad = calloc(1, longest);
    recv = malloc(longest * nr);
    rc = pad == NULL || recv == NULL
             ? dds_error(-DDS_ENOMEM, "dds_comm_allgatherv: out of memory for %zu x %zu bytes",
                         nr, longest)
             : 0;
    /* a rank that cannot allocate must not leave the others waiting in
     * the exchange it skips: every rank fails together */
    if (comm->size > 1)
        rc = dds_comm_agree(comm, rc);
    if (rc != 0)
        goto out;
    if (len > 0)
        memcpy(pad, send, len);
    rc = comm->ops->allgather(comm->ctx, pad, longest, recv);
    if (rc != 0)
        goto out;
    /* packed in rank order */
    for (size_t r = 1, at = lens[0]; r < nr; at += lens[r], r++)
        memmove(recv + at, recv + r * longest, lens[r]);
    *recv_p = recv;
    recv = NULL;
out:
    free(all);
    free(pad);
    free(recv);
    return rc;
}
