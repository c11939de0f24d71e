/* ddstore-ofi adapter: method 2's handshake records
 * (include/ddstore/handshake_transport.h).  libc + ddstore-core only (errors,
 * logging, dtype sizes); no libfabric call, so the parser can be fuzzed alone
 * (fuzz/handshake_fuzz.c).
 *
 * Byte order: every integer is read and written byte by byte
 * (little-endian), never through a cast of the buffer, so the code does not
 * depend on the host's endianness or on alignment.
 *
 * Parse order: magic, version (-DDS_ESTALE), sizes (header, entry, nranks,
 * file bytes against the length we hold), CRC, then the fields.  Each
 * failure names the field; ddofi_hs_read puts the file's path in front.
 *
 * Beyond the header's list, the parser (and the encoder) also reject what the
 * encoder never writes and the reader could trip over: bytes after a
 * string's NUL or after the address blob's length non-zero, disp == 0, and an itemsize that differs from a typed dtype's
 * size (the store refuses both at add time).  So a record that parses
 * re-encodes to the same bytes.
 *
 * File names, the record files and the process checks are
 * ddofi_hs_files.c's (ddofi_hs_internal.h: what the two share).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddstore/errors.h"
#include "ddstore/handshake_transport.h"
#include "ddstore/log.h"
#include "ddstore/transport.h"
#include "ddstore/types.h"
#include "ddofi_hs_internal.h"

/* ---- layout ------------------------------------------------------------ */

enum {
    /* header */
    OFF_MAGIC = 0,
    OFF_VERSION = 8,
    OFF_HDR_BYTES = 12,
    OFF_FILE_BYTES = 16,
    OFF_CRC = 24,
    OFF_NRANKS = 28,
    OFF_RUN_ID = 32,
    OFF_CTIME = 40,
    OFF_DTYPE = 48,
    OFF_FLAGS = 52,
    OFF_ITEMSIZE = 56,
    OFF_DISP = 64,
    OFF_ROW_BYTES = 72,
    OFF_TOTAL_ROWS = 80,
    OFF_NHOSTS = 88,
    OFF_PIDNS = 92,
    OFF_NAME = 96,
    OFF_NS = 352,
    OFF_PROV = 416,
    OFF_DOMAIN = 480,
    /* rank entry (its fixed part; the address blob follows) */
    ROFF_ROWS = 0,
    ROFF_BASE = 8,
    ROFF_KEY = 16,
    ROFF_BYTES = 24,
    ROFF_PID = 32,
    ROFF_HOST = 36,
    ROFF_START = 40,
    ROFF_ADDR_LEN = 48,
    ROFF_MR = 50
};

#define FIELD_SIZE(type, f) sizeof(((type *)0)->f)

_Static_assert(OFF_NAME + FIELD_SIZE(ddofi_hs_record_t, name) == OFF_NS,
               "name field");
_Static_assert(OFF_NS + FIELD_SIZE(ddofi_hs_record_t, exchange_ns) == OFF_PROV,
               "exchange_ns field");
_Static_assert(OFF_PROV + FIELD_SIZE(ddofi_hs_record_t, provider) == OFF_DOMAIN,
               "provider field");
_Static_assert(OFF_DOMAIN + FIELD_SIZE(ddofi_hs_record_t, domain) ==
                   DDOFI_HS_HEADER_BYTES,
               "domain field");
_Static_assert(ROFF_MR + FIELD_SIZE(ddofi_hs_rank_t, mr_blob) ==
                   DDOFI_HS_ENTRY_BYTES,
               "region blob field");
_Static_assert(DDOFI_HS_HOST_MAX < 256, "a host name's length is one byte");
_Static_assert(DDOFI_HS_ADDR_MAX < 65536, "an address length is two bytes");
_Static_assert(sizeof(DDOFI_HS_MAGIC) == 8, "magic is 8 bytes with its NUL");


/* ---- little-endian access ---------------------------------------------- */

static uint32_t ld32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t ld64(const unsigned char *p)
{
    return (uint64_t)ld32(p) | (uint64_t)ld32(p + 4) << 32;
}

static void st32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static void st64(unsigned char *p, uint64_t v)
{
    st32(p, (uint32_t)v);
    st32(p + 4, (uint32_t)(v >> 32));
}

/* Two's complement reinterpretation without implementation-defined
 * conversions. */
static int64_t as_i64(uint64_t v)
{
    if (v <= (uint64_t)INT64_MAX)
        return (int64_t)v;
    return -(int64_t)(~v) - 1;
}

static int32_t as_i32(uint32_t v)
{
    if (v <= (uint32_t)INT32_MAX)
        return (int32_t)v;
    return -(int32_t)(~v) - 1;
}

/* ---- CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320) -------------- */

static const uint32_t crc_table[256] = {
    0x00000000u, 0x77073096u, 0xee0e612cu, 0x990951bau, 0x076dc419u,
    0x706af48fu, 0xe963a535u, 0x9e6495a3u, 0x0edb8832u, 0x79dcb8a4u,
    0xe0d5e91eu, 0x97d2d988u, 0x09b64c2bu, 0x7eb17cbdu, 0xe7b82d07u,
    0x90bf1d91u, 0x1db71064u, 0x6ab020f2u, 0xf3b97148u, 0x84be41deu,
    0x1adad47du, 0x6ddde4ebu, 0xf4d4b551u, 0x83d385c7u, 0x136c9856u,
    0x646ba8c0u, 0xfd62f97au, 0x8a65c9ecu, 0x14015c4fu, 0x63066cd9u,
    0xfa0f3d63u, 0x8d080df5u, 0x3b6e20c8u, 0x4c69105eu, 0xd56041e4u,
    0xa2677172u, 0x3c03e4d1u, 0x4b04d447u, 0xd20d85fdu, 0xa50ab56bu,
    0x35b5a8fau, 0x42b2986cu, 0xdbbbc9d6u, 0xacbcf940u, 0x32d86ce3u,
    0x45df5c75u, 0xdcd60dcfu, 0xabd13d59u, 0x26d930acu, 0x51de003au,
    0xc8d75180u, 0xbfd06116u, 0x21b4f4b5u, 0x56b3c423u, 0xcfba9599u,
    0xb8bda50fu, 0x2802b89eu, 0x5f058808u, 0xc60cd9b2u, 0xb10be924u,
    0x2f6f7c87u, 0x58684c11u, 0xc1611dabu, 0xb6662d3du, 0x76dc4190u,
    0x01db7106u, 0x98d220bcu, 0xefd5102au, 0x71b18589u, 0x06b6b51fu,
    0x9fbfe4a5u, 0xe8b8d433u, 0x7807c9a2u, 0x0f00f934u, 0x9609a88eu,
    0xe10e9818u, 0x7f6a0dbbu, 0x086d3d2du, 0x91646c97u, 0xe6635c01u,
    0x6b6b51f4u, 0x1c6c6162u, 0x856530d8u, 0xf262004eu, 0x6c0695edu,
    0x1b01a57bu, 0x8208f4c1u, 0xf50fc457u, 0x65b0d9c6u, 0x12b7e950u,
    0x8bbeb8eau, 0xfcb9887cu, 0x62dd1ddfu, 0x15da2d49u, 0x8cd37cf3u,
    0xfbd44c65u, 0x4db26158u, 0x3ab551ceu, 0xa3bc0074u, 0xd4bb30e2u,
    0x4adfa541u, 0x3dd895d7u, 0xa4d1c46du, 0xd3d6f4fbu, 0x4369e96au,
    0x346ed9fcu, 0xad678846u, 0xda60b8d0u, 0x44042d73u, 0x33031de5u,
    0xaa0a4c5fu, 0xdd0d7cc9u, 0x5005713cu, 0x270241aau, 0xbe0b1010u,
    0xc90c2086u, 0x5768b525u, 0x206f85b3u, 0xb966d409u, 0xce61e49fu,
    0x5edef90eu, 0x29d9c998u, 0xb0d09822u, 0xc7d7a8b4u, 0x59b33d17u,
    0x2eb40d81u, 0xb7bd5c3bu, 0xc0ba6cadu, 0xedb88320u, 0x9abfb3b6u,
    0x03b6e20cu, 0x74b1d29au, 0xead54739u, 0x9dd277afu, 0x04db2615u,
    0x73dc1683u, 0xe3630b12u, 0x94643b84u, 0x0d6d6a3eu, 0x7a6a5aa8u,
    0xe40ecf0bu, 0x9309ff9du, 0x0a00ae27u, 0x7d079eb1u, 0xf00f9344u,
    0x8708a3d2u, 0x1e01f268u, 0x6906c2feu, 0xf762575du, 0x806567cbu,
    0x196c3671u, 0x6e6b06e7u, 0xfed41b76u, 0x89d32be0u, 0x10da7a5au,
    0x67dd4accu, 0xf9b9df6fu, 0x8ebeeff9u, 0x17b7be43u, 0x60b08ed5u,
    0xd6d6a3e8u, 0xa1d1937eu, 0x38d8c2c4u, 0x4fdff252u, 0xd1bb67f1u,
    0xa6bc5767u, 0x3fb506ddu, 0x48b2364bu, 0xd80d2bdau, 0xaf0a1b4cu,
    0x36034af6u, 0x41047a60u, 0xdf60efc3u, 0xa867df55u, 0x316e8eefu,
    0x4669be79u, 0xcb61b38cu, 0xbc66831au, 0x256fd2a0u, 0x5268e236u,
    0xcc0c7795u, 0xbb0b4703u, 0x220216b9u, 0x5505262fu, 0xc5ba3bbeu,
    0xb2bd0b28u, 0x2bb45a92u, 0x5cb36a04u, 0xc2d7ffa7u, 0xb5d0cf31u,
    0x2cd99e8bu, 0x5bdeae1du, 0x9b64c2b0u, 0xec63f226u, 0x756aa39cu,
    0x026d930au, 0x9c0906a9u, 0xeb0e363fu, 0x72076785u, 0x05005713u,
    0x95bf4a82u, 0xe2b87a14u, 0x7bb12baeu, 0x0cb61b38u, 0x92d28e9bu,
    0xe5d5be0du, 0x7cdcefb7u, 0x0bdbdf21u, 0x86d3d2d4u, 0xf1d4e242u,
    0x68ddb3f8u, 0x1fda836eu, 0x81be16cdu, 0xf6b9265bu, 0x6fb077e1u,
    0x18b74777u, 0x88085ae6u, 0xff0f6a70u, 0x66063bcau, 0x11010b5cu,
    0x8f659effu, 0xf862ae69u, 0x616bffd3u, 0x166ccf45u, 0xa00ae278u,
    0xd70dd2eeu, 0x4e048354u, 0x3903b3c2u, 0xa7672661u, 0xd06016f7u,
    0x4969474du, 0x3e6e77dbu, 0xaed16a4au, 0xd9d65adcu, 0x40df0b66u,
    0x37d83bf0u, 0xa9bcae53u, 0xdebb9ec5u, 0x47b2cf7fu, 0x30b5ffe9u,
    0xbdbdf21cu, 0xcabac28au, 0x53b39330u, 0x24b4a3a6u, 0xbad03605u,
    0xcdd70693u, 0x54de5729u, 0x23d967bfu, 0xb3667a2eu, 0xc4614ab8u,
    0x5d681b02u, 0x2a6f2b94u, 0xb40bbe37u, 0xc30c8ea1u, 0x5a05df1bu,
    0x2d02ef8du,
};

/* Slicing by 8: crc_slice[k][b] is the CRC of byte b followed by k zero
 * bytes (crc_slice[0] == crc_table), so 8 bytes take 8 independent look-ups
 * instead of 8 dependent ones (a format-3 record of 75,000 ranks is 12 MB:
 * about 25 ms byte by byte on a 2 GHz core, under 10 sliced). */
static uint32_t crc_slice[8][256];
static pthread_once_t crc_slice_once = PTHREAD_ONCE_INIT;

static void crc_slice_init(void)
{
    for (int i = 0; i < 256; i++)
        crc_slice[0][i] = crc_table[i];
    for (int k = 1; k < 8; k++)
        for (int i = 0; i < 256; i++) {
            uint32_t c = crc_slice[k - 1][i];
            crc_slice[k][i] = crc_table[c & 0xffu] ^ (c >> 8);
        }
}

static uint32_t crc_update(uint32_t crc, const unsigned char *p, size_t n)
{
    (void)pthread_once(&crc_slice_once, crc_slice_init);
    for (; n >= 8; n -= 8, p += 8) {
        const uint32_t a = crc ^ ld32(p), b = ld32(p + 4);
        crc = crc_slice[7][a & 0xffu] ^ crc_slice[6][(a >> 8) & 0xffu] ^
              crc_slice[5][(a >> 16) & 0xffu] ^ crc_slice[4][a >> 24] ^
              crc_slice[3][b & 0xffu] ^ crc_slice[2][(b >> 8) & 0xffu] ^
              crc_slice[1][(b >> 16) & 0xffu] ^ crc_slice[0][b >> 24];
    }
    for (size_t i = 0; i < n; i++)
        crc = crc_table[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
    return crc;
}

/* CRC of the whole file with its CRC field taken as zero. */
static uint32_t record_crc(const unsigned char *p, size_t len)
{
    static const unsigned char zero[4] = {0, 0, 0, 0};
    uint32_t crc = 0xffffffffu;
    crc = crc_update(crc, p, OFF_CRC);
    crc = crc_update(crc, zero, 4);
    crc = crc_update(crc, p + OFF_CRC + 4, len - (OFF_CRC + 4));
    return crc ^ 0xffffffffu;
}

/* ---- errors -------------------------------------------------------------- */

/* Who reports: the code to return and the text in front of the detail
 * ("handshake record /dir/x.ddshs", "ddofi_hs_encode"). */
typedef struct hs_ctx {
    int rc;
    const char *what;
    int strict; /* parse: padding after strings / blobs must be zero */
} hs_ctx_t;

static int hs_fail(const hs_ctx_t *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static int hs_fail(const hs_ctx_t *c, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return dds_error(c->rc, "%s: %s", c->what, msg);
}

/* ---- field checks (shared by encode and parse) --------------------------- */

/* a * b into *out; 0 on overflow. */
static int mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a != 0 && b > UINT64_MAX / a)
        return 0;
    *out = a * b;
    return 1;
}

/* A string field of `cap` bytes: NUL-terminated; with c->strict also
 * NUL-padded; non-empty when `nonempty`. */
static int check_str(const hs_ctx_t *c, const char *s, size_t cap,
                     const char *field, int nonempty)
{
    size_t n = strnlen(s, cap);
    if (n == cap)
        return hs_fail(c, "%s is not NUL-terminated within its %zu bytes",
                       field, cap);
    if (nonempty && n == 0)
        return hs_fail(c, "%s is empty", field);
    if (c->strict) {
        for (size_t i = n + 1; i < cap; i++)
            if (s[i] != '\0')
                return hs_fail(c,
                               "%s has non-zero padding after its NUL "
                               "(byte %zu of %zu)",
                               field, i, cap);
    }
    return 0;
}

/* A ragged variable's rank entry: bytes == index bytes + a whole number
 * of element rows (*elems_p), within int64. */
static int check_ragged_rank(const hs_ctx_t *c, const ddofi_hs_record_t *r,
                             uint32_t i, uint64_t *elems_p)
{
    const ddofi_hs_rank_t *k = &r->ranks[i];
    uint64_t ib;
    if (k->rows > DDS_RAGGED_MAX_ROWS)
        return hs_fail(c, "rank %u: %lld samples are more than a ragged "
                       "index holds", i, (long long)k->rows);
    ib = dds_ragged_index_bytes(k->rows);
    if (k->bytes < ib || k->bytes > (uint64_t)INT64_MAX ||
        (k->bytes - ib) % r->row_bytes != 0)
        return hs_fail(c,
                       "rank %u: bytes %llu != index bytes %llu (%lld "
                       "samples) + element rows x row bytes %llu",
                       i, (unsigned long long)k->bytes,
                       (unsigned long long)ib, (long long)k->rows,
                       (unsigned long long)r->row_bytes);
    *elems_p = (k->bytes - ib) / r->row_bytes;
    return 0;
}

static int check_rank(const hs_ctx_t *c, const ddofi_hs_record_t *r, uint32_t i)
{
    const ddofi_hs_rank_t *k = &r->ranks[i];
    uint64_t want;
    char field[48];
    int rc;

    if (k->rows < 0)
        return hs_fail(c, "rank %u: rows %lld must be >= 0", i,
                       (long long)k->rows);
    if (r->flags & DDOFI_HS_FLAG_RAGGED)
        want = k->bytes; /* check_ragged_rank */
    else if (!mul_u64((uint64_t)k->rows, r->row_bytes, &want))
        return hs_fail(c,
                       "rank %u: bytes: rows %lld x row bytes %llu "
                       "overflows",
                       i, (long long)k->rows,
                       (unsigned long long)r->row_bytes);
    if (k->bytes != want)
        return hs_fail(c,
                       "rank %u: bytes %llu != rows %lld x row bytes %llu "
                       "(%llu)",
                       i, (unsigned long long)k->bytes, (long long)k->rows,
                       (unsigned long long)r->row_bytes,
                       (unsigned long long)want);
    if (k->pid <= 0)
        return hs_fail(c, "rank %u: pid %d must be > 0", i, (int)k->pid);
    if (k->addr_len < 1 || k->addr_len > DDOFI_HS_ADDR_MAX)
        return hs_fail(c, "rank %u: address length %u outside [1, %d]", i,
                       (unsigned)k->addr_len, DDOFI_HS_ADDR_MAX);
    if (c->strict) {
        for (size_t j = k->addr_len; j < DDOFI_HS_ADDR_MAX; j++)
            if (k->addr[j] != 0)
                return hs_fail(c,
                               "rank %u: address blob has non-zero bytes "
                               "after its length %u (byte %zu)",
                               i, (unsigned)k->addr_len, j);
    }
    snprintf(field, sizeof field, "rank %u: host", i);
    rc = check_str(c, k->host, sizeof k->host, field, 0);
    if (rc < 0)
        return rc;
    return 0;
}

/* Everything but the sizes, the CRC and the pid namespace.  r->ranks holds
 * r->nranks entries. */
static int check_record(const hs_ctx_t *c, const ddofi_hs_record_t *r)
{
    uint64_t row_bytes, sum = 0, elems = 0;
    size_t dsize;
    int rc;

    if (r->ctime_ns <= 0)
        return hs_fail(c, "creation time %lld ns must be > 0",
                       (long long)r->ctime_ns);
    rc = check_str(c, r->name, sizeof r->name, "name", 1);
    if (rc < 0)
        return rc;
    rc = check_str(c, r->exchange_ns, sizeof r->exchange_ns, "exchange_ns", 0);
    if (rc < 0)
        return rc;
    rc = check_str(c, r->provider, sizeof r->provider, "provider", 0);
    if (rc < 0)
        return rc;
    rc = check_str(c, r->domain, sizeof r->domain, "domain", 0);
    if (rc < 0)
        return rc;
    if (r->dtype < 0 || r->dtype >= DDS_DTYPE_COUNT)
        return hs_fail(c, "dtype %d is not a known dds_dtype_t [0, %d)",
                       (int)r->dtype, (int)DDS_DTYPE_COUNT);
    if (r->itemsize == 0)
        return hs_fail(c, "itemsize 0 must be > 0");
    dsize = dds_dtype_size((dds_dtype_t)r->dtype);
    if (r->dtype != DDS_DTYPE_RAW && r->itemsize != dsize)
        return hs_fail(c, "itemsize %llu does not match dtype %s (%zu bytes)",
                       (unsigned long long)r->itemsize,
                       dds_dtype_name((dds_dtype_t)r->dtype), dsize);
    if (r->disp == 0)
        return hs_fail(c, "disp 0 must be > 0");
    if (!mul_u64(r->disp, r->itemsize, &row_bytes))
        return hs_fail(c, "row bytes: disp %llu x itemsize %llu overflows",
                       (unsigned long long)r->disp,
                       (unsigned long long)r->itemsize);
    if (r->row_bytes != row_bytes)
        return hs_fail(c, "row bytes %llu != disp %llu x itemsize %llu (%llu)",
                       (unsigned long long)r->row_bytes,
                       (unsigned long long)r->disp,
                       (unsigned long long)r->itemsize,
                       (unsigned long long)row_bytes);
    for (uint32_t i = 0; i < r->nranks; i++) {
        rc = check_rank(c, r, i);
        if (rc < 0)
            return rc;
        if (r->flags & DDOFI_HS_FLAG_RAGGED) {
            uint64_t e = 0;
            rc = check_ragged_rank(c, r, i, &e);
            if (rc < 0)
                return rc;
            if (e > (uint64_t)INT64_MAX / r->row_bytes - elems)
                return hs_fail(c, "element rows: the ranks' sum overflows "
                               "64-bit byte offsets at rank %u", i);
            elems += e;
        }
        /* rows >= 0 here; global rows are int64_t */
        if ((uint64_t)r->ranks[i].rows > (uint64_t)INT64_MAX - sum)
            return hs_fail(c,
                           "total rows: the sum of the ranks' rows overflows "
                           "at rank %u",
                           i);
        sum += (uint64_t)r->ranks[i].rows;
    }
    if (r->total_rows != sum)
        return hs_fail(c, "total rows %llu != sum of the ranks' rows %llu",
                       (unsigned long long)r->total_rows,
                       (unsigned long long)sum);
    if ((r->flags & DDOFI_HS_FLAG_RAGGED) &&
        sum > (uint64_t)INT64_MAX / 8 - r->nranks)
        return hs_fail(c, "total rows %llu: too many samples for a ragged "
                       "index", (unsigned long long)sum);
    return 0;
}

/* ---- host table ------------------------------------------------------------ */

/* The distinct host names of a record, in order of first appearance: an
 * open-addressing hash set over (pointer, length) pairs.  The encoder builds
 * the table with it; the parser refuses a table that names a host twice (the
 * encoder never writes one, and a record that parses re-encodes to the same
 * bytes). */
typedef struct host_set {
    uint32_t *slot; /* host index + 1; 0 = empty */
    uint32_t mask;
    uint32_t count;
    const char **name; /* not NUL-terminated in the parser's buffer */
    unsigned char *len;
} host_set_t;

static void host_set_free(host_set_t *h)
{
    free(h->slot);
    free(h->name);
    free(h->len);
    memset(h, 0, sizeof *h);
}

/* Room for `cap` distinct names.  0 or -DDS_ENOMEM (nothing to free). */
static int host_set_init(host_set_t *h, uint32_t cap)
{
    uint32_t size = 16;
    memset(h, 0, sizeof *h);
    while (size < 2 * (uint64_t)cap)
        size *= 2;
    h->slot = calloc(size, sizeof *h->slot);
    h->name = malloc((size_t)cap * sizeof *h->name);
    h->len = malloc(cap);
    if (h->slot == NULL || h->name == NULL || h->len == NULL) {
        host_set_free(h);
        return -DDS_ENOMEM;
    }
    h->mask = size - 1;
    return 0;
}

/* The index of name s[0..n): an existing one (returns 1) or the next one,
 * added (returns 0; the set has room by construction). */
static int host_set_add(host_set_t *h, const char *s, size_t n, uint32_t *idx_p)
{
    uint32_t x = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        x = (x ^ (unsigned char)s[i]) * 16777619u;
    for (uint32_t j = x & h->mask;; j = (j + 1) & h->mask) {
        uint32_t v = h->slot[j];
        if (v == 0) {
            h->slot[j] = h->count + 1;
            h->name[h->count] = s;
            h->len[h->count] = (unsigned char)n;
            *idx_p = h->count++;
            return 0;
        }
        if (h->len[v - 1] == n && memcmp(h->name[v - 1], s, n) == 0) {
            *idx_p = v - 1;
            return 1;
        }
    }
}

/* ---- encode ---------------------------------------------------------------- */

int ddofi_hs_encode(const ddofi_hs_record_t *r, void **buf_p, size_t *len_p)
{
    const hs_ctx_t c = {-DDS_EINVAL, "ddofi_hs_encode", 0};
    unsigned char *b, *e;
    uint32_t *hidx = NULL;
    host_set_t hs;
    size_t len = DDOFI_HS_HEADER_BYTES;
    int rc;

    if (buf_p == NULL || len_p == NULL)
        return hs_fail(&c, "NULL output");
    *buf_p = NULL;
    *len_p = 0;
    if (r == NULL)
        return hs_fail(&c, "NULL record");
    if (r->nranks < 1 || r->nranks > (uint32_t)DDOFI_HS_MAX_RANKS)
        return hs_fail(&c, "nranks %u outside [1, %d]", (unsigned)r->nranks,
                       DDOFI_HS_MAX_RANKS);
    if (r->ranks == NULL)
        return hs_fail(&c, "ranks is NULL with nranks %u",
                       (unsigned)r->nranks);
    rc = check_record(&c, r);
    if (rc < 0)
        return rc;

    hidx = malloc((size_t)r->nranks * sizeof *hidx);
    if (hidx == NULL || host_set_init(&hs, r->nranks) < 0) {
        free(hidx);
        return dds_error(-DDS_ENOMEM,
                         "ddofi_hs_encode: out of memory (host table of "
                         "variable '%s')",
                         r->name);
    }
    for (uint32_t i = 0; i < r->nranks; i++) {
        const char *h = r->ranks[i].host;
        size_t n = strlen(h); /* < sizeof host: check_record */
        if (!host_set_add(&hs, h, n, &hidx[i]))
            len += 1 + n;
        len += DDOFI_HS_ENTRY_BYTES + r->ranks[i].addr_len;
    }
    b = calloc(1, len);
    if (b == NULL) {
        host_set_free(&hs);
        free(hidx);
        return dds_error(-DDS_ENOMEM,
                         "ddofi_hs_encode: out of memory (%zu bytes for "
                         "variable '%s')",
                         len, r->name);
    }
    memcpy(b + OFF_MAGIC, DDOFI_HS_MAGIC, sizeof(DDOFI_HS_MAGIC));
    st32(b + OFF_VERSION, DDOFI_HS_VERSION);
    st32(b + OFF_HDR_BYTES, DDOFI_HS_HEADER_BYTES);
    st64(b + OFF_FILE_BYTES, (uint64_t)len);
    st32(b + OFF_NRANKS, r->nranks);
    st64(b + OFF_RUN_ID, r->run_id);
    st64(b + OFF_CTIME, (uint64_t)r->ctime_ns);
    st32(b + OFF_DTYPE, (uint32_t)r->dtype);
    st32(b + OFF_FLAGS, r->flags);
    st64(b + OFF_ITEMSIZE, r->itemsize);
    st64(b + OFF_DISP, r->disp);
    st64(b + OFF_ROW_BYTES, r->row_bytes);
    st64(b + OFF_TOTAL_ROWS, r->total_rows);
    st32(b + OFF_NHOSTS, hs.count);
    st32(b + OFF_PIDNS, r->pidns);
    /* string padding: zero from calloc */
    memcpy(b + OFF_NAME, r->name, strlen(r->name));
    memcpy(b + OFF_NS, r->exchange_ns, strlen(r->exchange_ns));
    memcpy(b + OFF_PROV, r->provider, strlen(r->provider));
    memcpy(b + OFF_DOMAIN, r->domain, strlen(r->domain));
    e = b + DDOFI_HS_HEADER_BYTES;
    for (uint32_t h = 0; h < hs.count; h++) {
        *e++ = hs.len[h];
        memcpy(e, hs.name[h], hs.len[h]);
        e += hs.len[h];
    }
    for (uint32_t i = 0; i < r->nranks; i++) {
        const ddofi_hs_rank_t *k = &r->ranks[i];
        st64(e + ROFF_ROWS, (uint64_t)k->rows);
        st64(e + ROFF_BASE, k->base);
        st64(e + ROFF_KEY, k->key);
        st64(e + ROFF_BYTES, k->bytes);
        st32(e + ROFF_PID, (uint32_t)k->pid);
        st32(e + ROFF_HOST, hidx[i]);
        st64(e + ROFF_START, k->start_ticks);
        e[ROFF_ADDR_LEN] = (unsigned char)k->addr_len;
        e[ROFF_ADDR_LEN + 1] = (unsigned char)(k->addr_len >> 8);
        memcpy(e + ROFF_MR, k->mr_blob, DDOFI_HS_MR_BLOB);
        memcpy(e + DDOFI_HS_ENTRY_BYTES, k->addr, k->addr_len);
        e += DDOFI_HS_ENTRY_BYTES + k->addr_len;
    }
    host_set_free(&hs);
    free(hidx);
    st32(b + OFF_CRC, record_crc(b, len));
    *buf_p = b;
    *len_p = len;
    return 0;
}

/* ---- parse ----------------------------------------------------------------- */

/* The host table and the rank entries after the header (sizes and CRC
 * checked): fills t->ranks (calloc'ed by the caller). */
static int parse_body(const hs_ctx_t *c, const unsigned char *p, size_t len,
                      uint32_t nhosts, ddofi_hs_record_t *t)
{
    size_t o = DDOFI_HS_HEADER_BYTES;
    uint32_t next = 0; /* hosts are numbered in order of first use */
    host_set_t hs;
    int rc = 0;

    if (host_set_init(&hs, nhosts) < 0)
        return dds_error(-DDS_ENOMEM, "%s: out of memory (%u hosts)", c->what,
                         (unsigned)nhosts);
    for (uint32_t h = 0; h < nhosts; h++) {
        uint32_t n, dup;
        if (o >= len) {
            rc = hs_fail(c, "truncated: host table entry %u starts at byte "
                         "%zu, the file has %zu", h, o, len);
            goto out;
        }
        n = p[o++];
        if (n > DDOFI_HS_HOST_MAX) {
            rc = hs_fail(c, "host table entry %u: length %u, more than %d", h,
                         (unsigned)n, DDOFI_HS_HOST_MAX);
            goto out;
        }
        if (n > len - o) {
            rc = hs_fail(c, "truncated: host table entry %u needs %u bytes "
                         "at byte %zu, the file has %zu", h, (unsigned)n, o,
                         len);
            goto out;
        }
        if (memchr(p + o, '\0', n) != NULL) {
            rc = hs_fail(c, "host table entry %u has a NUL byte inside its "
                         "%u bytes", h, (unsigned)n);
            goto out;
        }
        if (host_set_add(&hs, (const char *)p + o, n, &dup)) {
            rc = hs_fail(c, "host table entry %u repeats entry %u ('%.*s')",
                         h, (unsigned)dup, (int)n, (const char *)p + o);
            goto out;
        }
        o += n;
    }
    for (uint32_t i = 0; i < t->nranks; i++) {
        ddofi_hs_rank_t *k = &t->ranks[i];
        const unsigned char *e = p + o;
        uint32_t hi;
        if (len - o < DDOFI_HS_ENTRY_BYTES) {
            rc = hs_fail(c, "truncated: rank %u's entry needs %u bytes at "
                         "byte %zu, the file has %zu", i,
                         DDOFI_HS_ENTRY_BYTES, o, len);
            goto out;
        }
        hi = ld32(e + ROFF_HOST);
        if (hi >= nhosts || hi > next) {
            rc = hs_fail(c, "rank %u: host index %u %s", i, (unsigned)hi,
                         hi >= nhosts ? "is not in the host table"
                                      : "skips a host (hosts are numbered "
                                        "in order of first use)");
            goto out;
        }
        if (hi == next)
            next++;
        k->rows = as_i64(ld64(e + ROFF_ROWS));
        k->base = ld64(e + ROFF_BASE);
        k->key = ld64(e + ROFF_KEY);
        k->bytes = ld64(e + ROFF_BYTES);
        k->pid = as_i32(ld32(e + ROFF_PID));
        k->start_ticks = ld64(e + ROFF_START);
        k->addr_len = (uint32_t)e[ROFF_ADDR_LEN] |
                      (uint32_t)e[ROFF_ADDR_LEN + 1] << 8;
        if (k->addr_len < 1 || k->addr_len > DDOFI_HS_ADDR_MAX) {
            rc = hs_fail(c, "rank %u: address length %u outside [1, %d]", i,
                         (unsigned)k->addr_len, DDOFI_HS_ADDR_MAX);
            goto out;
        }
        o += DDOFI_HS_ENTRY_BYTES;
        if (len - o < k->addr_len) {
            rc = hs_fail(c, "truncated: rank %u's address needs %u bytes at "
                         "byte %zu, the file has %zu", i,
                         (unsigned)k->addr_len, o, len);
            goto out;
        }
        memcpy(k->host, hs.name[hi], hs.len[hi]); /* NUL-padded: calloc */
        memcpy(k->mr_blob, e + ROFF_MR, sizeof k->mr_blob);
        memcpy(k->addr, p + o, k->addr_len);
        o += k->addr_len;
    }
    if (o != len)
        rc = hs_fail(c, "%zu bytes after the last rank entry (trailing data)",
                     len - o);
    else if (next != nhosts)
        rc = hs_fail(c, "host table has %u hosts, the ranks use %u",
                     (unsigned)nhosts, (unsigned)next);
out:
    host_set_free(&hs);
    return rc;
}

int ddofi_hs_parse_named(const void *buf, size_t len, ddofi_hs_record_t *r,
                         const char *what)
{
    const hs_ctx_t c = {-DDS_ECORRUPT, what, 1};
    const hs_ctx_t stale = {-DDS_ESTALE, what, 1};
    const unsigned char *p = buf;
    ddofi_hs_record_t t;
    uint32_t v, hdr, nhosts, nranks, crc, want_crc;
    uint64_t fbytes, least;
    int rc;

    if (r == NULL)
        return dds_error(-DDS_EINVAL, "%s: NULL output record", what);
    memset(r, 0, sizeof *r);
    if (buf == NULL && len > 0)
        return dds_error(-DDS_EINVAL, "%s: NULL buffer of %zu bytes", what,
                         len);
    if (len > 0 && memcmp(p, DDOFI_HS_MAGIC, len < 8 ? len : 8) != 0)
        return hs_fail(&c, "bad magic (not a ddstore handshake record)");
    if (len < OFF_VERSION + 4)
        return hs_fail(&c, "truncated: %zu bytes, shorter than the %u-byte "
                           "header",
                       len, DDOFI_HS_HEADER_BYTES);
    v = ld32(p + OFF_VERSION);
    if (v != DDOFI_HS_VERSION)
        return hs_fail(&stale,
                       "format version %u, this reader understands %u "
                       "(record written by another ddstore version)",
                       (unsigned)v, DDOFI_HS_VERSION);
    if (len < DDOFI_HS_HEADER_BYTES)
        return hs_fail(&c, "truncated: %zu bytes, shorter than the %u-byte "
                           "header",
                       len, DDOFI_HS_HEADER_BYTES);
    hdr = ld32(p + OFF_HDR_BYTES);
    if (hdr != DDOFI_HS_HEADER_BYTES)
        return hs_fail(&c, "header bytes %u, expected %u", (unsigned)hdr,
                       DDOFI_HS_HEADER_BYTES);
    nranks = ld32(p + OFF_NRANKS);
    if (nranks < 1 || nranks > (uint32_t)DDOFI_HS_MAX_RANKS)
        return hs_fail(&c, "nranks %u outside [1, %d]", (unsigned)nranks,
                       DDOFI_HS_MAX_RANKS);
    nhosts = ld32(p + OFF_NHOSTS);
    if (nhosts < 1 || nhosts > nranks)
        return hs_fail(&c, "host count %u outside [1, nranks %u]",
                       (unsigned)nhosts, (unsigned)nranks);
    /* each host at least its length byte, each rank at least its fixed
     * part and a 1-byte address */
    least = (uint64_t)DDOFI_HS_HEADER_BYTES + nhosts +
            (uint64_t)nranks * (DDOFI_HS_ENTRY_BYTES + 1);
    fbytes = ld64(p + OFF_FILE_BYTES);
    if (fbytes < least || fbytes > HS_MAX_FILE_BYTES)
        return hs_fail(&c, "file bytes %llu outside [%llu, %llu] for nranks "
                       "%u and %u hosts",
                       (unsigned long long)fbytes, (unsigned long long)least,
                       (unsigned long long)HS_MAX_FILE_BYTES,
                       (unsigned)nranks, (unsigned)nhosts);
    if ((uint64_t)len < fbytes)
        return hs_fail(&c, "truncated: %zu bytes, file bytes says %llu", len,
                       (unsigned long long)fbytes);
    if ((uint64_t)len > fbytes)
        return hs_fail(&c,
                       "%zu bytes, more than the %llu that file bytes says "
                       "(trailing data)",
                       len, (unsigned long long)fbytes);
    crc = ld32(p + OFF_CRC);
    want_crc = record_crc(p, len);
    if (crc != want_crc)
        return hs_fail(&c,
                       "CRC mismatch (file is corrupted or was modified): "
                       "stored 0x%08x, computed 0x%08x",
                       (unsigned)crc, (unsigned)want_crc);
    memset(&t, 0, sizeof t);
    t.pidns = ld32(p + OFF_PIDNS);
    t.version = DDOFI_HS_VERSION;
    t.nranks = nranks;
    t.run_id = ld64(p + OFF_RUN_ID);
    t.ctime_ns = as_i64(ld64(p + OFF_CTIME));
    t.dtype = as_i32(ld32(p + OFF_DTYPE));
    t.flags = ld32(p + OFF_FLAGS);
    t.itemsize = ld64(p + OFF_ITEMSIZE);
    t.disp = ld64(p + OFF_DISP);
    t.row_bytes = ld64(p + OFF_ROW_BYTES);
    t.total_rows = ld64(p + OFF_TOTAL_ROWS);
    memcpy(t.name, p + OFF_NAME, sizeof t.name);
    memcpy(t.exchange_ns, p + OFF_NS, sizeof t.exchange_ns);
    memcpy(t.provider, p + OFF_PROV, sizeof t.provider);
    memcpy(t.domain, p + OFF_DOMAIN, sizeof t.domain);
    t.ranks = calloc(nranks, sizeof *t.ranks);
    if (t.ranks == NULL)
        return dds_error(-DDS_ENOMEM, "%s: out of memory (%u rank entries)",
                         what, (unsigned)nranks);
    rc = parse_body(&c, p, len, nhosts, &t);
    if (rc == 0)
        rc = check_record(&c, &t);
    if (rc < 0) {
        free(t.ranks);
        return rc;
    }
    *r = t;
    return 0;
}

int ddofi_hs_parse(const void *buf, size_t len, ddofi_hs_record_t *r)
{
    return ddofi_hs_parse_named(buf, len, r, "handshake record");
}

void ddofi_hs_record_clear(ddofi_hs_record_t *r)
{
    if (r == NULL)
        return;
    free(r->ranks);
    memset(r, 0, sizeof *r);
}
