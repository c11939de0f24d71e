/* ddstore-core: the wire codec of the bindings' collectives, and the
 * variable-length allgather they run over any communicator (comm.h).
 *
 * What pyddstore's Python layer exchanges between ranks (its allgather of
 * objects, the error records of its agreement) travels in this format, over
 * every communicator (MPI, FileComm, torch.distributed): the bytes may come
 * from files in a shared directory, so they are parsed, never executed
 * (no pickle), and a message that is not of this format is an error naming
 * what is wrong, never a crash.
 *
 * A message: the magic "DDW1", then 'O' and one value, or 'E' and the
 * sender's error text (u32 length, bytes: "this rank could not encode its
 * value", so that every rank fails together).  A value:
 *   'N'                         None
 *   'T', 'F'                    true, false
 *   'I' u32 n, n bytes          an integer in decimal ASCII ('-'? digits,
 *                               no leading zero, at most 4300 digits)
 *   'S' u32 n, n bytes          a string (UTF-8; the binding may carry
 *                               lone surrogates, as Python's surrogatepass)
 *   't', 'l' u32 n, n values    a tuple, a list
 *   'd' u32 n, 2n values        a dict: key, value, key, value, ...; a key is
 *                               N, T, F, I, S or a tuple of keys
 * u32: little-endian.  Values nest at most DDS_WIRE_MAX_DEPTH levels below
 * the top one (an empty container may sit at that depth).
 */
#ifndef DDSTORE_WIRE_H
#define DDSTORE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "ddstore/comm.h"
#include "ddstore/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DDS_WIRE_MAX_DEPTH 64
#define DDS_WIRE_MAX_DIGITS 4300

/* Item kinds: the tag bytes above. */
enum {
    DDS_WIRE_NONE = 'N',
    DDS_WIRE_TRUE = 'T',
    DDS_WIRE_FALSE = 'F',
    DDS_WIRE_INT = 'I',
    DDS_WIRE_STR = 'S',
    DDS_WIRE_TUPLE = 't',
    DDS_WIRE_LIST = 'l',
    DDS_WIRE_DICT = 'd',
    DDS_WIRE_ERROR = 'E' /* the whole message is the sender's error text */
};

/* ---- encoding ---------------------------------------------------------- */

/* A growing buffer.  The first failure sticks (rc), later puts do nothing:
 * check rc (or the return of dds_wire_finish) once at the end. */
typedef struct dds_wire_buf {
    unsigned char *data;
    size_t len, cap;
    int rc;
} dds_wire_buf_t;

DDS_API void dds_wire_buf_init(dds_wire_buf_t *b);
DDS_API void dds_wire_buf_free(dds_wire_buf_t *b);

/* The header of a value message ("DDW1" 'O'); then exactly one value. */
DDS_API int dds_wire_put_ok(dds_wire_buf_t *b);
/* A whole error message ("DDW1" 'E' text), replacing what b held. */
DDS_API int dds_wire_put_error(dds_wire_buf_t *b, const char *text, size_t n);
/* N, T, F (data ignored), I (decimal digits), S (bytes). */
DDS_API int dds_wire_put_scalar(dds_wire_buf_t *b, int kind, const void *data, size_t n);
/* t, l (count values follow), d (count key/value pairs follow). */
DDS_API int dds_wire_put_container(dds_wire_buf_t *b, int kind, size_t count);
/* b->rc: 0, -DDS_ENOMEM, or -DDS_EINVAL (a part over 4 GiB, a bad kind or
 * integer), with the detail set when it happened. */
DDS_API int dds_wire_finish(const dds_wire_buf_t *b);

/* ---- decoding ---------------------------------------------------------- */

/* Check a whole message: 0, with *is_error 1 for an error message (its
 * text: the first item), or -DDS_ECORRUPT with a detail naming what is
 * wrong and at which byte. */
DDS_API int dds_wire_check(const void *msg, size_t len, int *is_error);

typedef struct dds_wire_reader {
    const unsigned char *p;
    size_t len, pos;
} dds_wire_reader_t;

typedef struct dds_wire_item {
    int kind;          /* DDS_WIRE_* */
    const char *data;  /* I, S, E: the bytes (not NUL-terminated) */
    size_t len;        /* I, S, E: their count */
    size_t count;      /* t, l: values; d: pairs */
} dds_wire_item_t;

/* Read a message's items depth-first (a container's children follow it).
 * Check the message first; next() still bounds-checks every read and
 * returns -DDS_ECORRUPT rather than read past the end. */
DDS_API int dds_wire_reader_init(dds_wire_reader_t *r, const void *msg, size_t len);
DDS_API int dds_wire_next(dds_wire_reader_t *r, dds_wire_item_t *it);

/* ---- collectives over comm.h ------------------------------------------- */

/* Variable-length allgather: every rank sends `len` bytes (lengths may
 * differ); *recv_p (malloc'ed, the caller frees; may be NULL when all are
 * empty) holds every rank's bytes in rank order, lens[r] (comm->size
 * entries) their lengths.  Two exchanges (the lengths, then the payloads
 * padded to the longest), and an agreement between them when a rank cannot
 * allocate, so every rank fails together.  0 or a negative DDS_E* code. */
DDS_API int dds_comm_allgatherv(const dds_comm_t *comm, const void *send, size_t len,
                                void **recv_p, size_t *lens);

/* Element-wise reduction of nranks vectors of n int64 (rank-major in
 * `all`) into out: what a communicator that can only allgather
 * (FileComm, torch.distributed) does for allreduce_i64.  SUM wraps. */
DDS_API void dds_reduce_i64(const int64_t *all, int nranks, size_t n, dds_reduce_op_t op,
                            int64_t *out);

#ifdef __cplusplus
}
#endif
#endif
