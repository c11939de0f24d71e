/* handshake_transport.h: method 2's record format and its file I/O.
 * Encode/parse round trips, every validation rule (with its code and a
 * detail naming the field), truncation and extension, the CRC (checked
 * against an independent bitwise CRC-32), the version check, file name
 * escaping, the directory and file modes under several umasks, atomic
 * replacement, reads of missing / foreign / oversized files, removal, and
 * the process liveness helpers.  No hardware, no libfabric. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mkdtemp, prctl */
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "ddstore/handshake_transport.h"
#include "ddstore/log.h"
#include "ddstore/transport.h"
#include "ddstore/types.h"
#include "tmp_files.h"

/* ---- helpers -------------------------------------------------------------- */

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Bitwise CRC-32 (IEEE), independent of the library's table. */
static uint32_t crc32_bitwise(const unsigned char *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return c ^ 0xffffffffu;
}

/* The CRC the file should carry (its CRC field taken as zero). */
static uint32_t file_crc(const unsigned char *b, size_t len)
{
    unsigned char *t = malloc(len);
    uint32_t c;
    memcpy(t, b, len);
    put32(t + 24, 0);
    c = crc32_bitwise(t, len);
    free(t);
    return c;
}

static void fix_crc(unsigned char *b, size_t len)
{
    put32(b + 24, file_crc(b, len));
}

static uint32_t get16(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static void put16(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

/* Format 3 (the header comment), independent of the parser: the host table
 * starts at byte 512 (count at byte 88, a length byte and the name each),
 * then each rank's 98-byte entry and its address (u16 length at byte 48 of
 * the entry). */
static size_t rank_off(const unsigned char *b, uint32_t rank)
{
    size_t o = 512;
    for (uint32_t h = 0; h < get32(b + 88); h++)
        o += 1 + b[o];
    for (uint32_t i = 0; i < rank; i++)
        o += 98 + get16(b + o + 48);
    return o;
}

/* Byte offset of host table entry h's length byte. */
static size_t host_off(const unsigned char *b, uint32_t h)
{
    size_t o = 512;
    for (uint32_t j = 0; j < h; j++)
        o += 1 + b[o];
    return o;
}

/* The record's length in format 3: the header, each distinct host name
 * once (1 + its length), each rank's entry and address. */
static size_t expect_len(const ddofi_hs_record_t *r)
{
    size_t len = 512;
    for (uint32_t i = 0; i < r->nranks; i++) {
        uint32_t j = 0;
        while (j < i && strcmp(r->ranks[j].host, r->ranks[i].host) != 0)
            j++;
        if (j == i)
            len += 1 + strlen(r->ranks[i].host);
        len += 98 + r->ranks[i].addr_len;
    }
    return len;
}


/* A deterministic record of n ranks (rank 1 has zero rows) named `name`.
 * Free with ddofi_hs_record_clear. */
static void make_record(ddofi_hs_record_t *r, uint32_t n, const char *name)
{
    uint64_t total = 0;
    memset(r, 0, sizeof *r);
    r->version = 99; /* ignored by encode */
    r->nranks = n;
    r->run_id = 0x0123456789abcdefull;
    r->ctime_ns = 1700000000123456789ll;
    r->dtype = DDS_DTYPE_FLOAT32;
    r->flags = DDOFI_HS_FLAG_LOCAL_ONLY;
    r->pidns = 0xeffffffcu;
    r->itemsize = 4;
    r->disp = 3;
    r->row_bytes = 12;
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->exchange_ns, sizeof r->exchange_ns, "job42.0");
    snprintf(r->provider, sizeof r->provider, "tcp;ofi_rxm");
    snprintf(r->domain, sizeof r->domain, "lo");
    r->ranks = calloc(n, sizeof *r->ranks);
    if (r->ranks == NULL) {
        perror("calloc");
        exit(2);
    }
    for (uint32_t i = 0; i < n; i++) {
        ddofi_hs_rank_t *k = &r->ranks[i];
        k->rows = i == 1 ? 0 : (int64_t)(7 * i + 5);
        k->base = 0x7f0000000000ull + 0x100000ull * i;
        k->key = 0xabc000ull + i;
        k->bytes = (uint64_t)k->rows * r->row_bytes;
        k->pid = (int32_t)(4000 + i);
        k->addr_len = i % 3 == 0 ? 16u : i % 3 == 1 ? 1u : DDOFI_HS_ADDR_MAX;
        k->start_ticks = 123456u + i;
        /* two ranks a host: the host table names each once */
        snprintf(k->host, sizeof k->host, "node%02u.cluster", (unsigned)(i / 2));
        for (int j = 0; j < DDOFI_HS_MR_BLOB; j++)
            k->mr_blob[j] = (unsigned char)(i * 31 + (unsigned)j);
        for (uint32_t j = 0; j < k->addr_len; j++)
            k->addr[j] = (unsigned char)(i * 7 + j + 1);
        total += (uint64_t)k->rows;
    }
    r->total_rows = total;
}

static void check_same(const ddofi_hs_record_t *a, const ddofi_hs_record_t *b)
{
    CHECK_EQ_U(b->version, DDOFI_HS_VERSION);
    CHECK_EQ_U(a->nranks, b->nranks);
    CHECK_EQ_U(a->run_id, b->run_id);
    CHECK_EQ(a->ctime_ns, b->ctime_ns);
    CHECK_EQ(a->dtype, b->dtype);
    CHECK_EQ_U(a->flags, b->flags);
    CHECK_EQ_U(a->pidns, b->pidns);
    CHECK_EQ_U(a->itemsize, b->itemsize);
    CHECK_EQ_U(a->disp, b->disp);
    CHECK_EQ_U(a->row_bytes, b->row_bytes);
    CHECK_EQ_U(a->total_rows, b->total_rows);
    CHECK_STREQ(a->name, b->name);
    CHECK_STREQ(a->exchange_ns, b->exchange_ns);
    CHECK_STREQ(a->provider, b->provider);
    CHECK_STREQ(a->domain, b->domain);
    if (a->nranks != b->nranks || b->ranks == NULL)
        return;
    for (uint32_t i = 0; i < a->nranks; i++) {
        const ddofi_hs_rank_t *x = &a->ranks[i], *y = &b->ranks[i];
        CHECK_EQ(x->rows, y->rows);
        CHECK_EQ_U(x->base, y->base);
        CHECK_EQ_U(x->key, y->key);
        CHECK_EQ_U(x->bytes, y->bytes);
        CHECK_EQ(x->pid, y->pid);
        CHECK_EQ_U(x->addr_len, y->addr_len);
        CHECK_EQ_U(x->start_ticks, y->start_ticks);
        CHECK_STREQ(x->host, y->host);
        CHECK_MEMEQ(x->mr_blob, y->mr_blob, DDOFI_HS_MR_BLOB);
        CHECK_MEMEQ(x->addr, y->addr, DDOFI_HS_ADDR_MAX);
    }
}

static int all_zero(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0)
            return 0;
    return 1;
}

/* Parse must fail with `want` and a detail containing `field`; *r must be
 * left zeroed. */
static void expect_parse_fail(const unsigned char *b, size_t len, int want,
                              const char *field, const char *what)
{
    ddofi_hs_record_t r;
    unsigned char *copy = malloc(len ? len : 1); /* exact size for ASan */
    memcpy(copy, b, len);
    memset(&r, 0xa5, sizeof r);
    dds_error_clear();
    int rc = ddofi_hs_parse(copy, len, &r);
    if (rc != want || strstr(dds_last_error(), field) == NULL)
        fprintf(stderr, "  case: %s\n", what);
    CHECK_RC(rc, want);
    CHECK_CONTAINS(dds_last_error(), field);
    CHECK_CONTAINS(dds_last_error(), "handshake record");
    CHECK(all_zero(&r, sizeof r));
    if (rc == 0)
        ddofi_hs_record_clear(&r);
    free(copy);
}

/* ---- encode / parse --------------------------------------------------------- */

static void test_round_trip(void)
{
    static const uint32_t counts[] = {1, 2, 4, 9};
    static const char *const names[] = {"train", "x/y z%", ".hidden",
                                        "\xc3\xa9t\xc3\xa9"};
    for (size_t t = 0; t < 4; t++) {
        ddofi_hs_record_t r, p;
        void *buf = NULL, *buf2 = NULL;
        size_t len = 0, len2 = 0;
        unsigned char *b;

        make_record(&r, counts[t], names[t]);
        if (t == 2) {
            r.dtype = DDS_DTYPE_RAW;
            r.itemsize = 24;
            r.disp = 5;
            r.row_bytes = 120;
            r.flags = 0;
            r.exchange_ns[0] = r.provider[0] = r.domain[0] = '\0';
            for (uint32_t i = 0; i < r.nranks; i++)
                r.ranks[i].bytes = (uint64_t)r.ranks[i].rows * 120;
        }
        if (t == 1 || t == 3) { /* 2-byte floats: dtypes 7 and 8 */
            r.dtype = t == 1 ? DDS_DTYPE_FLOAT16 : DDS_DTYPE_BFLOAT16;
            r.itemsize = 2;
            r.row_bytes = 6;
            for (uint32_t i = 0; i < r.nranks; i++)
                r.ranks[i].bytes = (uint64_t)r.ranks[i].rows * 6;
        }
        CHECK_OK(ddofi_hs_encode(&r, &buf, &len));
        CHECK_EQ_U(len, expect_len(&r));
        /* 98 bytes a rank, its address as long as it is, 15 bytes a host */
        CHECK(len < 512u + 480u * counts[t]);
        b = buf;
        if (b == NULL)
            continue;
        /* the layout of the header comment, independent of the parser */
        CHECK_MEMEQ(b, "DDSHAKE\0", 8);
        CHECK_EQ_U(get32(b + 8), 3);
        CHECK_EQ_U(get32(b + 12), 512);
        CHECK_EQ_U(get64(b + 16), len);
        CHECK_EQ_U(get32(b + 24), file_crc(b, len));
        CHECK_EQ_U(get32(b + 28), counts[t]);
        CHECK_EQ_U(get64(b + 32), r.run_id);
        CHECK_EQ_U(get64(b + 40), (uint64_t)r.ctime_ns);
        CHECK_EQ_U(get32(b + 48), (uint32_t)r.dtype);
        CHECK_EQ_U(get32(b + 52), r.flags);
        CHECK_EQ_U(get32(b + 92), r.pidns);
        CHECK_EQ_U(get64(b + 56), r.itemsize);
        CHECK_EQ_U(get64(b + 64), r.disp);
        CHECK_EQ_U(get64(b + 72), r.row_bytes);
        CHECK_EQ_U(get64(b + 80), r.total_rows);
        CHECK_EQ_U(get32(b + 88), (counts[t] + 1) / 2); /* hosts */
        CHECK_STREQ((const char *)b + 96, r.name);
        CHECK_STREQ((const char *)b + 352, r.exchange_ns);
        CHECK_STREQ((const char *)b + 416, r.provider);
        CHECK_STREQ((const char *)b + 480, r.domain);
        for (uint32_t h = 0; h < (counts[t] + 1) / 2; h++) {
            const unsigned char *e = b + host_off(b, h);
            CHECK_EQ_U(e[0], strlen(r.ranks[2 * h].host));
            CHECK_MEMEQ(e + 1, r.ranks[2 * h].host, e[0]);
        }
        for (uint32_t i = 0; i < counts[t]; i++) {
            const unsigned char *e = b + rank_off(b, i);
            CHECK_EQ_U(get64(e + 0), (uint64_t)r.ranks[i].rows);
            CHECK_EQ_U(get64(e + 8), r.ranks[i].base);
            CHECK_EQ_U(get64(e + 16), r.ranks[i].key);
            CHECK_EQ_U(get64(e + 24), r.ranks[i].bytes);
            CHECK_EQ_U(get32(e + 32), (uint32_t)r.ranks[i].pid);
            CHECK_EQ_U(get32(e + 36), i / 2); /* host index */
            CHECK_EQ_U(get64(e + 40), r.ranks[i].start_ticks);
            CHECK_EQ_U(get16(e + 48), r.ranks[i].addr_len);
            CHECK_MEMEQ(e + 50, r.ranks[i].mr_blob, DDOFI_HS_MR_BLOB);
            CHECK_MEMEQ(e + 98, r.ranks[i].addr, r.ranks[i].addr_len);
        }
        CHECK_EQ_U(rank_off(b, counts[t]), len);
        CHECK_OK(ddofi_hs_parse(buf, len, &p));
        check_same(&r, &p);
        /* deterministic, and the parsed record re-encodes to the same bytes */
        CHECK_OK(ddofi_hs_encode(&p, &buf2, &len2));
        CHECK_EQ_U(len2, len);
        if (buf2 != NULL && len2 == len)
            CHECK_MEMEQ(buf, buf2, len);
        free(buf2);
        ddofi_hs_record_clear(&p);
        CHECK(all_zero(&p, sizeof p));
        free(buf);
        ddofi_hs_record_clear(&r);
    }
    ddofi_hs_record_clear(NULL);

    /* garbage after a string's NUL in the caller's struct is not written */
    {
        ddofi_hs_record_t r, p;
        void *buf = NULL;
        size_t len = 0;
        make_record(&r, 2, "pad");
        memset(r.name + 4, 'Z', sizeof r.name - 5);
        memset(r.ranks[0].host + 15, 'Q', 10);
        memset(r.ranks[0].addr + 16, 0xee, 8);
        CHECK_OK(ddofi_hs_encode(&r, &buf, &len));
        CHECK_OK(ddofi_hs_parse(buf, len, &p));
        CHECK_STREQ(p.name, "pad");
        CHECK(all_zero(p.name + 3, sizeof p.name - 3));
        CHECK(all_zero(p.ranks[0].addr + 16, DDOFI_HS_ADDR_MAX - 16));
        ddofi_hs_record_clear(&p);
        free(buf);
        ddofi_hs_record_clear(&r);
    }
}

typedef void (*mutate_fn)(ddofi_hs_record_t *r);

static void m_nranks0(ddofi_hs_record_t *r) { r->nranks = 0; }
static void m_ctime0(ddofi_hs_record_t *r) { r->ctime_ns = 0; }
static void m_ctime_neg(ddofi_hs_record_t *r) { r->ctime_ns = -5; }
static void m_name_empty(ddofi_hs_record_t *r) { r->name[0] = '\0'; }
static void m_name_unterm(ddofi_hs_record_t *r)
{
    memset(r->name, 'n', sizeof r->name);
}
static void m_ns_unterm(ddofi_hs_record_t *r)
{
    memset(r->exchange_ns, 's', sizeof r->exchange_ns);
}
static void m_prov_unterm(ddofi_hs_record_t *r)
{
    memset(r->provider, 'p', sizeof r->provider);
}
static void m_dom_unterm(ddofi_hs_record_t *r)
{
    memset(r->domain, 'd', sizeof r->domain);
}
static void m_dtype_neg(ddofi_hs_record_t *r) { r->dtype = -1; }
static void m_dtype_big(ddofi_hs_record_t *r) { r->dtype = DDS_DTYPE_COUNT; }
static void m_itemsize_half(ddofi_hs_record_t *r)
{
    r->dtype = DDS_DTYPE_BFLOAT16; /* 2 bytes; itemsize stays 4 */
}
static void m_itemsize0(ddofi_hs_record_t *r)
{
    r->dtype = DDS_DTYPE_RAW;
    r->itemsize = 0;
    r->row_bytes = 0;
}
static void m_itemsize_dtype(ddofi_hs_record_t *r)
{
    r->itemsize = 8; /* float32 */
    r->row_bytes = 24;
    for (uint32_t i = 0; i < r->nranks; i++)
        r->ranks[i].bytes = (uint64_t)r->ranks[i].rows * 24;
}
static void m_disp0(ddofi_hs_record_t *r)
{
    r->disp = 0;
    r->row_bytes = 0;
}
static void m_row_bytes(ddofi_hs_record_t *r) { r->row_bytes = 13; }
static void m_row_overflow(ddofi_hs_record_t *r)
{
    r->dtype = DDS_DTYPE_RAW;
    r->itemsize = 16;
    r->disp = (uint64_t)1 << 61;
    r->row_bytes = 0; /* 2^65 mod 2^64 */
}
static void m_total(ddofi_hs_record_t *r) { r->total_rows++; }
static void m_rows_neg(ddofi_hs_record_t *r)
{
    r->ranks[1].rows = -1;
    r->ranks[1].bytes = (uint64_t)-12;
}
static void m_bytes(ddofi_hs_record_t *r) { r->ranks[2].bytes++; }
static void m_bytes_overflow(ddofi_hs_record_t *r)
{
    r->ranks[0].rows = INT64_MAX / 4;
    r->ranks[0].bytes = (uint64_t)(INT64_MAX / 4) * 12u; /* wrapped */
    r->total_rows = 0;
    for (uint32_t i = 0; i < r->nranks; i++)
        r->total_rows += (uint64_t)r->ranks[i].rows;
}
static void m_sum_overflow(ddofi_hs_record_t *r)
{
    r->dtype = DDS_DTYPE_UINT8;
    r->itemsize = 1;
    r->disp = 1;
    r->row_bytes = 1;
    r->ranks[0].rows = r->ranks[2].rows = INT64_MAX / 2 + 1;
    for (uint32_t i = 0; i < r->nranks; i++)
        r->ranks[i].bytes = (uint64_t)r->ranks[i].rows;
    r->total_rows = (uint64_t)INT64_MAX + 1 + (uint64_t)r->ranks[3].rows;
}
static void m_pid0(ddofi_hs_record_t *r) { r->ranks[3].pid = 0; }
static void m_pid_neg(ddofi_hs_record_t *r) { r->ranks[0].pid = -7; }
static void m_addr0(ddofi_hs_record_t *r) { r->ranks[0].addr_len = 0; }
static void m_addr_big(ddofi_hs_record_t *r)
{
    r->ranks[2].addr_len = DDOFI_HS_ADDR_MAX + 1;
}
static void m_host_unterm(ddofi_hs_record_t *r)
{
    memset(r->ranks[1].host, 'h', sizeof r->ranks[1].host);
}

static const struct {
    mutate_fn fn;
    const char *field;
} mutations[] = {
    {m_ctime0, "creation time 0"},
    {m_ctime_neg, "creation time -5"},
    {m_name_empty, "name is empty"},
    {m_name_unterm, "name is not NUL-terminated"},
    {m_ns_unterm, "exchange_ns is not NUL-terminated"},
    {m_prov_unterm, "provider is not NUL-terminated"},
    {m_dom_unterm, "domain is not NUL-terminated"},
    {m_dtype_neg, "dtype -1"},
    {m_dtype_big, "dtype 9 is not a known dds_dtype_t [0, 9)"},
    {m_itemsize_half, "itemsize 4 does not match dtype bfloat16 (2 bytes)"},
    {m_itemsize0, "itemsize 0"},
    {m_itemsize_dtype, "itemsize 8 does not match dtype float32"},
    {m_disp0, "disp 0"},
    {m_row_bytes, "row bytes 13 != disp 3 x itemsize 4"},
    {m_row_overflow, "row bytes: disp 2305843009213693952 x itemsize 16 "
                     "overflows"},
    {m_total, "total rows"},
    {m_rows_neg, "rank 1: rows -1"},
    {m_bytes, "rank 2: bytes"},
    {m_bytes_overflow, "rank 0: bytes: rows 2305843009213693951 x row "
                       "bytes 12 overflows"},
    {m_sum_overflow, "total rows: the sum of the ranks' rows overflows at "
                     "rank 2"},
    {m_pid0, "rank 3: pid 0"},
    {m_pid_neg, "rank 0: pid -7"},
    {m_addr0, "rank 0: address length 0 outside [1, 320]"},
    {m_addr_big, "rank 2: address length 321 outside [1, 320]"},
    {m_host_unterm, "rank 1: host is not NUL-terminated"},
};

/* Every rule, on both sides: encode refuses the record (-DDS_EINVAL) and a
 * file carrying it (written by hand, CRC fixed) does not parse
 * (-DDS_ECORRUPT); both details name the field. */
/* Ragged variables: a rank's bytes are its index (dds_ragged_index_bytes
 * of its samples) plus whole element rows; the record is as long as a fixed
 * variable's. */
static void test_ragged(void)
{
    static const int64_t elems[4] = {11, 0, 0, 30};
    ddofi_hs_record_t r, p;
    unsigned char *b;
    void *buf = NULL;
    size_t len = 0;

    make_record(&r, 4, "graphs");
    r.flags |= DDOFI_HS_FLAG_RAGGED;
    for (uint32_t i = 0; i < 4; i++)
        r.ranks[i].bytes = dds_ragged_index_bytes(r.ranks[i].rows) +
                           (uint64_t)elems[i] * r.row_bytes;
    CHECK_EQ_U(dds_ragged_index_bytes(0), 64);
    CHECK_EQ_U(dds_ragged_index_bytes(7), 64);
    CHECK_EQ_U(dds_ragged_index_bytes(8), 128);
    CHECK_OK(ddofi_hs_encode(&r, &buf, &len));
    CHECK_EQ_U(len, expect_len(&r)); /* no more per rank than fixed rows */
    CHECK_OK(ddofi_hs_parse(buf, len, &p));
    check_same(&r, &p);
    CHECK(p.flags & DDOFI_HS_FLAG_RAGGED);
    ddofi_hs_record_clear(&p);
    b = buf;
    /* bytes: not index + whole rows, below the index, above INT64_MAX */
    put64(b + rank_off(b, 3) + 24, r.ranks[3].bytes + 5);
    fix_crc(b, len);
    expect_parse_fail(b, len, -DDS_ECORRUPT, "rank 3: bytes", "ragged bytes");
    put64(b + rank_off(b, 3) + 24, 63);
    fix_crc(b, len);
    expect_parse_fail(b, len, -DDS_ECORRUPT, "index bytes", "ragged index");
    put64(b + rank_off(b, 3) + 24, (uint64_t)INT64_MAX + 13);
    fix_crc(b, len);
    expect_parse_fail(b, len, -DDS_ECORRUPT, "rank 3: bytes", "ragged huge");
    /* the same bytes without the flag: not rows x row bytes */
    put64(b + rank_off(b, 3) + 24, r.ranks[3].bytes);
    put32(b + 52, DDOFI_HS_FLAG_LOCAL_ONLY);
    fix_crc(b, len);
    expect_parse_fail(b, len, -DDS_ECORRUPT, "x row bytes 12 (",
                      "fixed reading of a ragged record");
    free(buf);
    /* element rows whose byte offsets overflow int64 */
    r.ranks[0].bytes = dds_ragged_index_bytes(r.ranks[0].rows) +
                       ((uint64_t)INT64_MAX / 20) * 12;
    r.ranks[3].bytes = r.ranks[0].bytes;
    r.ranks[3].rows = r.ranks[0].rows;
    r.total_rows = (uint64_t)(r.ranks[0].rows * 2 + r.ranks[2].rows);
    CHECK_RC(ddofi_hs_encode(&r, &buf, &len), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "element rows");
    ddofi_hs_record_clear(&r);
}

static void test_field_rules(void)
{
    ddofi_hs_record_t good;
    void *gbuf = NULL;
    size_t glen = 0;

    make_record(&good, 4, "rules");
    CHECK_OK(ddofi_hs_encode(&good, &gbuf, &glen));
    if (gbuf == NULL)
        return;
    for (size_t m = 0; m < sizeof mutations / sizeof mutations[0]; m++) {
        ddofi_hs_record_t r;
        void *buf = (void *)1;
        size_t len = 7;
        unsigned char *b = malloc(glen);
        make_record(&r, 4, "rules");
        mutations[m].fn(&r);
        dds_error_clear();
        CHECK_RC(ddofi_hs_encode(&r, &buf, &len), -DDS_EINVAL);
        CHECK_CONTAINS(dds_last_error(), mutations[m].field);
        CHECK(buf == NULL && len == 0);

        /* the same record, serialised by hand from the good bytes */
        memcpy(b, gbuf, glen);
        put64(b + 40, (uint64_t)r.ctime_ns);
        put32(b + 48, (uint32_t)r.dtype);
        put64(b + 56, r.itemsize);
        put64(b + 64, r.disp);
        put64(b + 72, r.row_bytes);
        put64(b + 80, r.total_rows);
        memcpy(b + 96, r.name, 256);
        memcpy(b + 352, r.exchange_ns, 64);
        memcpy(b + 416, r.provider, 64);
        memcpy(b + 480, r.domain, 32);
        for (uint32_t i = 0; i < 4; i++) {
            /* the offsets of the good record: a changed address length
             * is refused before the entries after it are read */
            unsigned char *e = b + rank_off(gbuf, i);
            put64(e + 0, (uint64_t)r.ranks[i].rows);
            put64(e + 24, r.ranks[i].bytes);
            put32(e + 32, (uint32_t)r.ranks[i].pid);
            put16(e + 48, r.ranks[i].addr_len);
        }
        fix_crc(b, glen);
        if (mutations[m].fn == m_host_unterm) {
            /* a file's host name has a length byte, never a missing
             * NUL: its rules are in test_header_rules */
            free(b);
            ddofi_hs_record_clear(&r);
            continue;
        }
        expect_parse_fail(b, glen, -DDS_ECORRUPT, mutations[m].field,
                          mutations[m].field);
        free(b);
        ddofi_hs_record_clear(&r);
    }

    /* encode-only argument checks */
    {
        void *buf;
        size_t len;
        ddofi_hs_record_t r;
        make_record(&r, 2, "args");
        CHECK_RC(ddofi_hs_encode(NULL, &buf, &len), -DDS_EINVAL);
        CHECK_RC(ddofi_hs_encode(&r, NULL, &len), -DDS_EINVAL);
        CHECK_RC(ddofi_hs_encode(&r, &buf, NULL), -DDS_EINVAL);
        m_nranks0(&r);
        CHECK_RC(ddofi_hs_encode(&r, &buf, &len), -DDS_EINVAL);
        CHECK_CONTAINS(dds_last_error(), "nranks 0 outside [1, 1048576]");
        r.nranks = DDOFI_HS_MAX_RANKS + 1;
        CHECK_RC(ddofi_hs_encode(&r, &buf, &len), -DDS_EINVAL);
        CHECK_CONTAINS(dds_last_error(), "nranks 1048577");
        r.nranks = 2;
        free(r.ranks);
        r.ranks = NULL;
        CHECK_RC(ddofi_hs_encode(&r, &buf, &len), -DDS_EINVAL);
        CHECK_CONTAINS(dds_last_error(), "ranks is NULL");
    }
    free(gbuf);
    ddofi_hs_record_clear(&good);
}

/* Header words and byte-level rules that only a file can break. */
static void test_header_rules(void)
{
    ddofi_hs_record_t r;
    void *gbuf = NULL;
    size_t glen = 0;
    unsigned char *b;

    make_record(&r, 3, "hdr");
    CHECK_OK(ddofi_hs_encode(&r, &gbuf, &glen));
    if (gbuf == NULL)
        return;
    b = malloc(glen + 960);

#define RESET() (memcpy(b, gbuf, glen))
    RESET();
    b[3] ^= 0x20;
    expect_parse_fail(b, glen, -DDS_ECORRUPT, "bad magic", "magic");
    RESET();
    b[7] = 'X'; /* the magic's NUL */
    expect_parse_fail(b, glen, -DDS_ECORRUPT, "bad magic", "magic NUL");

    /* versions: another format is -DDS_ESTALE, whatever follows */
    RESET();
    put32(b + 8, 1); /* the format before ragged variables */
    fix_crc(b, glen);
    expect_parse_fail(b, glen, -DDS_ESTALE,
                      "format version 1, this reader understands 3 (record "
                      "written by another ddstore version)",
                      "version 1");
    RESET();
    put32(b + 8, 2); /* fixed 480-byte rank entries */
    fix_crc(b, glen);
    expect_parse_fail(b, glen, -DDS_ESTALE,
                      "format version 2, this reader understands 3 (record "
                      "written by another ddstore version)",
                      "version 2");
    RESET();
    put32(b + 8, 4);
    fix_crc(b, glen);
    expect_parse_fail(b, glen, -DDS_ESTALE,
                      "format version 4, this reader understands 3",
                      "version 4");
    RESET();
    put32(b + 8, 7);
    expect_parse_fail(b, 12, -DDS_ESTALE, "format version 7", "version 7");
    RESET();
    put32(b + 8, 0);
    expect_parse_fail(b, glen, -DDS_ESTALE, "format version 0", "version 0");

    RESET();
    put32(b + 12, 513);
    fix_crc(b, glen);
    expect_parse_fail(b, glen, -DDS_ECORRUPT, "header bytes 513, expected 512",
                      "header bytes");
    RESET();
    put32(b + 88, 0);
    fix_crc(b, glen);
    expect_parse_fail(b, glen, -DDS_ECORRUPT,
                      "host count 0 outside [1, nranks 3]", "nhosts 0");
    RESET();
    put32(b + 88, 4);
    fix_crc(b, glen);
    expect_parse_fail(b, glen, -DDS_ECORRUPT,
                      "host count 4 outside [1, nranks 3]", "nhosts 4");
    RESET();
    put32(b + 88, 3); /* the table holds 2: rank 0's entry read as a host */
    fix_crc(b, glen);
    expect_parse_fail(b, glen, -DDS_ECORRUPT, "", "nhosts 3 of 2");
    RESET();
    put32(b + 28, 0);
    fix_crc(b, glen);
    expect_parse_fail(b, glen, -DDS_ECORRUPT, "nranks 0 outside [1, 1048576]",
                      "nranks 0");
    RESET();
    put32(b + 28, DDOFI_HS_MAX_RANKS + 1);
    fix_crc(b, glen);
    expect_parse_fail(b, glen, -DDS_ECORRUPT,
                      "nranks 1048577 outside [1, 1048576]", "nranks max+1");
    RESET();
    put32(b + 28, 0xffffffffu);
    expect_parse_fail(b, glen, -DDS_ECORRUPT, "nranks 4294967295",
                      "nranks ~0");
    RESET();
    put32(b + 28, 2); /* the file holds 3 */
    fix_crc(b, glen);
    expect_parse_fail(b, glen, -DDS_ECORRUPT,
                      "bytes after the last rank entry (trailing data)",
                      "nranks 2 of 3");
    RESET();
    put32(b + 28, 4); /* the file holds 3 */
    fix_crc(b, glen);
    expect_parse_fail(b, glen, -DDS_ECORRUPT, "truncated: rank 3's entry",
                      "nranks 4 of 3");
    RESET();
    put64(b + 16, glen + 1);
    fix_crc(b, glen);
    expect_parse_fail(b, glen, -DDS_ECORRUPT, "file bytes says",
                      "file bytes");
    RESET();
    put64(b + 16, 512 + 2 + 3 * 99 - 1); /* less than 3 ranks and 2 hosts need */
    fix_crc(b, glen);
    expect_parse_fail(b, glen, -DDS_ECORRUPT, "file bytes 810 outside [811, ",
                      "file bytes too few");
    RESET();
    put64(b + 16, (uint64_t)1 << 63);
    expect_parse_fail(b, glen, -DDS_ECORRUPT, "file bytes", "file bytes huge");

    /* padding after strings and the address blob */
    RESET();
    b[96 + 10] = 'x'; /* "hdr\0" then padding */
    fix_crc(b, glen);
    expect_parse_fail(b, glen, -DDS_ECORRUPT,
                      "name has non-zero padding after its NUL",
                      "name padding");
    RESET();
    b[352 + 63] = 1;
    fix_crc(b, glen);
    expect_parse_fail(b, glen, -DDS_ECORRUPT, "exchange_ns has non-zero",
                      "ns padding");
    RESET();
    b[416 + 40] = 1;
    fix_crc(b, glen);
    expect_parse_fail(b, glen, -DDS_ECORRUPT, "provider has non-zero",
                      "provider padding");
    RESET();
    b[480 + 31] = 1;
    fix_crc(b, glen);
    expect_parse_fail(b, glen, -DDS_ECORRUPT, "domain has non-zero",
                      "domain padding");

    /* the host table: node00.cluster (ranks 0, 1), node01.cluster (2) */
    RESET();
    b[host_off(b, 1)] = 64;
    fix_crc(b, glen);
    expect_parse_fail(b, glen, -DDS_ECORRUPT,
                      "host table entry 1: length 64, more than 63",
                      "host length");
    RESET();
    b[host_off(b, 0) + 5] = 0;
    fix_crc(b, glen);
    expect_parse_fail(b, glen, -DDS_ECORRUPT,
                      "host table entry 0 has a NUL byte inside its 14 bytes",
                      "host NUL");
    RESET();
    b[host_off(b, 1) + 6] = '0'; /* node01 -> node00 */
    fix_crc(b, glen);
    expect_parse_fail(b, glen, -DDS_ECORRUPT,
                      "host table entry 1 repeats entry 0 ('node00.cluster')",
                      "host twice");
    {
        /* a rank's host index: out of the table, ahead of first use, and
         * leaving host 1 unused */
        static const struct {
            uint32_t rank, index;
            const char *field;
        } hix[] = {
            {2, 2, "rank 2: host index 2 is not in the host table"},
            {0, 1, "rank 0: host index 1 skips a host"},
            {2, 0, "host table has 2 hosts, the ranks use 1"},
        };
        for (size_t k = 0; k < sizeof hix / sizeof hix[0]; k++) {
            RESET();
            put32(b + rank_off(b, hix[k].rank) + 36, hix[k].index);
            fix_crc(b, glen);
            expect_parse_fail(b, glen, -DDS_ECORRUPT, hix[k].field,
                              hix[k].field);
        }
    }
    /* a host table with an empty name parses (an unknown host) */
    {
        ddofi_hs_record_t e, p;
        void *buf = NULL;
        size_t len = 0;
        make_record(&e, 3, "nohost");
        e.ranks[2].host[0] = '\0';
        CHECK_OK(ddofi_hs_encode(&e, &buf, &len));
        CHECK_OK(ddofi_hs_parse(buf, len, &p));
        check_same(&e, &p);
        ddofi_hs_record_clear(&p);
        free(buf);
        ddofi_hs_record_clear(&e);
    }
    /* the last address one byte shorter or longer than its bytes */
    RESET();
    put16(b + rank_off(b, 2) + 48, DDOFI_HS_ADDR_MAX - 1);
    fix_crc(b, glen);
    expect_parse_fail(b, glen, -DDS_ECORRUPT,
                      "1 bytes after the last rank entry (trailing data)",
                      "address one short");
    RESET();
    put16(b + rank_off(b, 1) + 48, 2); /* rank 1's is 1 byte */
    fix_crc(b, glen);
    expect_parse_fail(b, glen, -DDS_ECORRUPT, "", "address one long");
    RESET();
    put16(b + rank_off(b, 2) + 48, DDOFI_HS_ADDR_MAX);
    put64(b + 16, glen - 1);
    fix_crc(b, glen - 1);
    expect_parse_fail(b, glen - 1, -DDS_ECORRUPT,
                      "truncated: rank 2's address needs 320 bytes",
                      "address past the end");
    RESET();
    /* (at least 811 bytes: 3 ranks of 99 and 2 hosts; rank 2's entry
     * starts at byte 755) */
    put64(b + 16, rank_off(b, 2) + 85);
    fix_crc(b, rank_off(b, 2) + 85);
    expect_parse_fail(b, rank_off(b, 2) + 85, -DDS_ECORRUPT,
                      "truncated: rank 2's entry needs 98 bytes",
                      "entry past the end");
    /* region blob and flags but DDOFI_HS_FLAG_RAGGED (test_ragged) are
     * opaque: any bytes parse */
    RESET();
    memset(b + rank_off(b, 2) + 50, 0xff, DDOFI_HS_MR_BLOB);
    put32(b + 52, 0xfffffffcu);
    fix_crc(b, glen);
    {
        ddofi_hs_record_t p;
        CHECK_OK(ddofi_hs_parse(b, glen, &p));
        CHECK_EQ_U(p.flags, 0xfffffffcu);
        CHECK_EQ(p.ranks[2].mr_blob[47], 0xff);
        ddofi_hs_record_clear(&p);
    }

    /* CRC: one flipped bit anywhere, or a wrong CRC field */
    {
        const size_t spots[] = {33, 40, 88, 100, 500, 512 + 3, 512 + 20,
                                512 + 60, 512 + 120, glen / 2, glen - 200,
                                glen - 1};
        for (size_t s = 0; s < sizeof spots / sizeof spots[0]; s++) {
            RESET();
            b[spots[s]] ^= 0x01;
            expect_parse_fail(b, glen, -DDS_ECORRUPT,
                              "CRC mismatch (file is corrupted or was "
                              "modified)",
                              "bit flip");
        }
        RESET();
        put32(b + 24, get32(b + 24) + 1);
        expect_parse_fail(b, glen, -DDS_ECORRUPT, "CRC mismatch", "crc field");
    }

    /* truncated at many lengths, and extended */
    {
        const size_t cuts[] = {0, 1, 7, 8, 11, 12, 13, 100, 511, 512, 513,
                               rank_off(b, 1), rank_off(b, 2), glen / 2,
                               glen - 1};
        for (size_t s = 0; s < sizeof cuts / sizeof cuts[0]; s++) {
            RESET();
            expect_parse_fail(b, cuts[s], -DDS_ECORRUPT, "truncated",
                              "truncated");
        }
        RESET();
        b[glen] = 0;
        expect_parse_fail(b, glen + 1, -DDS_ECORRUPT, "trailing data",
                          "one more byte");
        /* a whole extra (copied) entry without nranks saying so */
        RESET();
        const size_t ent = glen - rank_off(b, 2); /* 98 + 320 */
        CHECK_EQ_U(ent, 98 + DDOFI_HS_ADDR_MAX);
        memcpy(b + glen, b + rank_off(b, 2), ent);
        fix_crc(b, glen + ent);
        expect_parse_fail(b, glen + ent, -DDS_ECORRUPT, "trailing data",
                          "one more entry");
        /* ... and with nranks / file bytes saying so: parses */
        put32(b + 28, 4);
        put64(b + 16, glen + ent);
        put64(b + 80, r.total_rows + (uint64_t)r.ranks[2].rows);
        fix_crc(b, glen + ent);
        {
            ddofi_hs_record_t p;
            CHECK_OK(ddofi_hs_parse(b, glen + ent, &p));
            CHECK_EQ_U(p.nranks, 4);
            CHECK_EQ(p.ranks[3].rows, r.ranks[2].rows);
            ddofi_hs_record_clear(&p);
        }
    }

    /* NULL arguments */
    {
        ddofi_hs_record_t p;
        CHECK_RC(ddofi_hs_parse(gbuf, glen, NULL), -DDS_EINVAL);
        CHECK_RC(ddofi_hs_parse(NULL, 10, &p), -DDS_EINVAL);
        CHECK_RC(ddofi_hs_parse(NULL, 0, &p), -DDS_ECORRUPT);
    }
#undef RESET
    free(b);
    free(gbuf);
    ddofi_hs_record_clear(&r);
}

/* ---- file names -------------------------------------------------------------- */

static void test_file_name(void)
{
    static const struct {
        const char *name, *file;
    } cases[] = {
        {"train", "train.ddshs"},
        {"a.b-c_D9", "a.b-c_D9.ddshs"},
        {".hidden", "%2Ehidden.ddshs"},
        {"..", "%2E..ddshs"},
        {"a.", "a..ddshs"},
        {"-x", "-x.ddshs"},
        {"x/y z", "x%2Fy%20z.ddshs"},
        {"50%", "50%25.ddshs"},
        {"\xc3\xa9", "%C3%A9.ddshs"},
        {"\x01\x7f\xff", "%01%7F%FF.ddshs"},
        {"a\\b:c*?", "a%5Cb%3Ac%2A%3F.ddshs"},
    };
    char out[1024], big[300];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t need = strlen(cases[i].file) + 1;
        memset(out, 'Z', sizeof out);
        CHECK_OK(ddofi_hs_file_name(cases[i].name, out, sizeof out));
        CHECK_STREQ(out, cases[i].file);
        /* exactly enough room, and one byte less */
        CHECK_OK(ddofi_hs_file_name(cases[i].name, out, need));
        CHECK_STREQ(out, cases[i].file);
        memset(out, 'Z', sizeof out);
        CHECK_RC(ddofi_hs_file_name(cases[i].name, out, need - 1), -DDS_EINVAL);
        CHECK_CONTAINS(dds_last_error(), "too long");
        CHECK_EQ(out[0], 'Z'); /* nothing written */
    }
    CHECK_RC(ddofi_hs_file_name("", out, sizeof out), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "empty");
    CHECK_RC(ddofi_hs_file_name(NULL, out, sizeof out), -DDS_EINVAL);
    CHECK_RC(ddofi_hs_file_name("x", NULL, 10), -DDS_EINVAL);
    CHECK_RC(ddofi_hs_file_name("x", out, 0), -DDS_EINVAL);
    /* names: up to DDOFI_HS_NAME_MAX bytes */
    memset(big, 'a', sizeof big);
    big[DDOFI_HS_NAME_MAX] = '\0';
    CHECK_OK(ddofi_hs_file_name(big, out, sizeof out));
    CHECK_EQ(strlen(out), DDOFI_HS_NAME_MAX + 6);
    big[DDOFI_HS_NAME_MAX] = 'a';
    big[DDOFI_HS_NAME_MAX + 1] = '\0';
    CHECK_RC(ddofi_hs_file_name(big, out, sizeof out), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "longer than 255");
    /* distinct names, distinct files (the escape is one-to-one) */
    {
        char a[64], b[64];
        CHECK_OK(ddofi_hs_file_name("%2E", a, sizeof a));
        CHECK_OK(ddofi_hs_file_name(".", b, sizeof b));
        CHECK(strcmp(a, b) != 0);
    }
}

/* ---- directories and files ------------------------------------------------------ */

static int g_warns;
static char g_warn_line[1024];

static void capture(void *arg, dds_log_level_t level, dds_log_subsys_t subsys,
                    const char *line)
{
    (void)arg;
    if (level == DDS_LOG_WARN && subsys == DDS_SUBSYS_OFI) {
        g_warns++;
        snprintf(g_warn_line, sizeof g_warn_line, "%s", line);
    }
}

static int mode_of(const char *path)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return -1;
    return (int)(st.st_mode & 07777);
}

static void test_dir_prepare(void)
{
    static const mode_t masks[] = {0, 022, 077, 0277, 0777};
    char dir[4400], sub[4500];
    mode_t old = umask(0);

    for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++) {
        umask(masks[m]);
        snprintf(dir, sizeof dir, "%s/mask%zu/a//b/c/", g_root, m);
        CHECK_OK(ddofi_hs_dir_prepare(dir));
        umask(0);
        snprintf(sub, sizeof sub, "%s/mask%zu", g_root, m);
        CHECK_EQ(mode_of(sub), 0700);
        snprintf(sub, sizeof sub, "%s/mask%zu/a", g_root, m);
        CHECK_EQ(mode_of(sub), 0700);
        snprintf(sub, sizeof sub, "%s/mask%zu/a/b/c", g_root, m);
        CHECK_EQ(mode_of(sub), 0700);
        /* again: nothing to do */
        CHECK_OK(ddofi_hs_dir_prepare(dir));
    }
    umask(0);

    /* existing directories are used as they are; ones others may write to
     * are refused (they could replace the records), group-writable ones
     * warn once */
    dds_log_set_level(DDS_LOG_WARN);
    dds_log_set_sink(capture, NULL);
    snprintf(dir, sizeof dir, "%s/shared755", g_root);
    CHECK_OK(mkdir(dir, 0755));
    CHECK_OK(ddofi_hs_dir_prepare(dir));
    CHECK_EQ(mode_of(dir), 0755);
    CHECK_EQ(g_warns, 0);
    snprintf(dir, sizeof dir, "%s/shared777", g_root);
    CHECK_OK(mkdir(dir, 0777));
    CHECK_RC(ddofi_hs_dir_prepare(dir), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), dir);
    CHECK_CONTAINS(dds_last_error(), "writable by others");
    CHECK_EQ(mode_of(dir), 0777);
    CHECK_EQ(g_warns, 0);
    snprintf(dir, sizeof dir, "%s/shared770", g_root);
    CHECK_OK(mkdir(dir, 0770));
    CHECK_OK(ddofi_hs_dir_prepare(dir));
    CHECK_EQ(g_warns, 1);
    CHECK_CONTAINS(g_warn_line, dir);
    CHECK_CONTAINS(g_warn_line, "writable");
    CHECK_OK(ddofi_hs_dir_prepare(dir));
    snprintf(dir, sizeof dir, "%s/shared775", g_root);
    CHECK_OK(mkdir(dir, 0775));
    CHECK_OK(ddofi_hs_dir_prepare(dir));
    CHECK_EQ(g_warns, 1); /* once */
    dds_log_set_sink(NULL, NULL);
    umask(old);
    /* another user's directory (root only: chown to nobody) */
    if (geteuid() == 0) {
        snprintf(dir, sizeof dir, "%s/nobodys", g_root);
        CHECK_OK(mkdir(dir, 0700));
        CHECK_OK(chown(dir, 65534, 65534));
        CHECK_RC(ddofi_hs_dir_prepare(dir), -DDS_EINVAL);
        CHECK_CONTAINS(dds_last_error(), "owned by uid 65534");
    } else {
        printf("SKIP: test_dir_prepare: another user's directory needs root\n");
    }

    /* not a directory, empty */
    snprintf(dir, sizeof dir, "%s/file", g_root);
    {
        int fd = open(dir, O_CREAT | O_WRONLY, 0600);
        CHECK(fd >= 0);
        close(fd);
    }
    CHECK_RC(ddofi_hs_dir_prepare(dir), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), dir);
    CHECK_CONTAINS(dds_last_error(), "not a directory");
    snprintf(sub, sizeof sub, "%s/below", dir);
    CHECK_RC(ddofi_hs_dir_prepare(sub), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), dir);
    CHECK_RC(ddofi_hs_dir_prepare(""), -DDS_EINVAL);
    CHECK_RC(ddofi_hs_dir_prepare(NULL), -DDS_EINVAL);
}

static void test_write_read(void)
{
    char dir[4400], path[4600], first[300];
    ddofi_hs_record_t r, p;
    mode_t old;
    int n;

    snprintf(dir, sizeof dir, "%s/rw/hs", g_root);
    CHECK_OK(ddofi_hs_dir_prepare(dir));
    make_record(&r, 4, "train/x y");

    /* mode 0600 whatever the umask */
    old = umask(0277);
    CHECK_OK(ddofi_hs_write(dir, &r));
    umask(old);
    snprintf(path, sizeof path, "%s/job42.0@train%%2Fx%%20y.ddshs", dir);
    CHECK_EQ(mode_of(path), 0600);
    n = count_files(dir, first, sizeof first);
    CHECK_EQ(n, 1);
    CHECK_STREQ(first, "job42.0@train%2Fx%20y.ddshs"); /* the namespace first */
    CHECK_OK(ddofi_hs_read_ns(dir, "job42.0", "train/x y", &p));
    check_same(&r, &p);
    ddofi_hs_record_clear(&p);

    /* atomic replacement: the second write wins, no temporary files left */
    r.run_id = 0x42;
    r.ranks[3].pid = 31337;
    old = umask(0);
    CHECK_OK(ddofi_hs_write(dir, &r));
    umask(old);
    CHECK_EQ(mode_of(path), 0600);
    CHECK_OK(ddofi_hs_read_ns(dir, "job42.0", "train/x y", &p));
    CHECK_EQ_U(p.run_id, 0x42);
    CHECK_EQ(p.ranks[3].pid, 31337);
    ddofi_hs_record_clear(&p);
    CHECK_EQ(count_files(dir, NULL, 0), 1);

    /* a record that does not encode is not written */
    r.ranks[0].pid = 0;
    CHECK_RC(ddofi_hs_write(dir, &r), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "pid 0");
    r.ranks[0].pid = 4000;
    CHECK_EQ(count_files(dir, NULL, 0), 1);
    /* into a directory that does not exist: -DDS_EIO, nothing left */
    snprintf(path, sizeof path, "%s/rw/missing", g_root);
    CHECK_RC(ddofi_hs_write(path, &r), -DDS_EIO);
    CHECK_CONTAINS(dds_last_error(), path);
    CHECK_RC(ddofi_hs_write(NULL, &r), -DDS_EINVAL);
    CHECK_RC(ddofi_hs_write(dir, NULL), -DDS_EINVAL);

    /* missing record */
    memset(&p, 0x5a, sizeof p);
    CHECK_RC(ddofi_hs_read_ns(dir, "job42.0", "nope", &p), -DDS_ENOENT);
    CHECK_CONTAINS(dds_last_error(), "job42.0@nope.ddshs");
    CHECK_CONTAINS(dds_last_error(), dir);
    CHECK(all_zero(&p, sizeof p));

    /* a record under another variable's file name */
    {
        char from[4600], to[4600];
        snprintf(from, sizeof from, "%s/job42.0@train%%2Fx%%20y.ddshs", dir);
        snprintf(to, sizeof to, "%s/job42.0@other.ddshs", dir);
        CHECK_OK(link(from, to));
        CHECK_RC(ddofi_hs_read_ns(dir, "job42.0", "other", &p), -DDS_ECORRUPT);
        CHECK_CONTAINS(dds_last_error(), "job42.0@other.ddshs");
        CHECK_CONTAINS(dds_last_error(), "holds variable 'train/x y'");
        CHECK(all_zero(&p, sizeof p));
        CHECK_OK(ddofi_hs_remove_ns(dir, "job42.0", "other"));
    }

    /* a corrupted file: the detail names the path and the field */
    {
        char fn[4600];
        unsigned char byte = 0;
        int fd;
        snprintf(fn, sizeof fn, "%s/job42.0@train%%2Fx%%20y.ddshs", dir);
        fd = open(fn, O_RDWR);
        CHECK(fd >= 0);
        CHECK_EQ(pread(fd, &byte, 1, 600), 1);
        byte ^= 0x40;
        CHECK_EQ(pwrite(fd, &byte, 1, 600), 1);
        close(fd);
        CHECK_RC(ddofi_hs_read_ns(dir, "job42.0", "train/x y", &p), -DDS_ECORRUPT);
        CHECK_CONTAINS(dds_last_error(), fn);
        CHECK_CONTAINS(dds_last_error(), "CRC mismatch");
        /* truncated on disk */
        CHECK_OK(truncate(fn, 700));
        CHECK_RC(ddofi_hs_read_ns(dir, "job42.0", "train/x y", &p), -DDS_ECORRUPT);
        CHECK_CONTAINS(dds_last_error(), "truncated");
        /* far too large: refused before reading (a sparse file) */
        CHECK_OK(truncate(fn, 512 + 482ll * (DDOFI_HS_MAX_RANKS + 1)));
        CHECK_RC(ddofi_hs_read_ns(dir, "job42.0", "train/x y", &p), -DDS_ECORRUPT);
        CHECK_CONTAINS(dds_last_error(), "more than the largest record");
        /* another format version */
        CHECK_OK(ddofi_hs_write(dir, &r));
        fd = open(fn, O_RDWR);
        CHECK(fd >= 0);
        byte = 2;
        CHECK_EQ(pwrite(fd, &byte, 1, 8), 1);
        close(fd);
        CHECK_RC(ddofi_hs_read_ns(dir, "job42.0", "train/x y", &p), -DDS_ESTALE);
        CHECK_CONTAINS(dds_last_error(), fn);
        CHECK_CONTAINS(dds_last_error(), "format version 2, this reader understands 3");
    }

    /* not a regular file */
    snprintf(path, sizeof path, "%s/job42.0@adir.ddshs", dir);
    CHECK_OK(mkdir(path, 0700));
    CHECK_RC(ddofi_hs_read_ns(dir, "job42.0", "adir", &p), -DDS_EIO);
    CHECK_OK(rmdir(path));

    /* remove; a missing file is fine */
    CHECK_OK(ddofi_hs_remove_ns(dir, "job42.0", "train/x y"));
    CHECK_EQ(count_files(dir, NULL, 0), 0);
    CHECK_OK(ddofi_hs_remove_ns(dir, "job42.0", "train/x y"));
    CHECK_RC(ddofi_hs_read_ns(dir, "job42.0", "train/x y", &p), -DDS_ENOENT);
    CHECK_RC(ddofi_hs_remove_ns(dir, "job42.0", ""), -DDS_EINVAL);

    /* many names, one file each */
    {
        static const char *const names[] = {"a", ".b", "c d", "e%f", "g.h"};
        for (int i = 0; i < 5; i++) {
            snprintf(r.name, sizeof r.name, "%s", names[i]);
            CHECK_OK(ddofi_hs_write(dir, &r));
        }
        CHECK_EQ(count_files(dir, NULL, 0), 5);
        for (int i = 0; i < 5; i++) {
            CHECK_OK(ddofi_hs_read_ns(dir, "job42.0", names[i], &p));
            CHECK_STREQ(p.name, names[i]);
            ddofi_hs_record_clear(&p);
            CHECK_OK(ddofi_hs_remove_ns(dir, "job42.0", names[i]));
        }
        CHECK_EQ(count_files(dir, NULL, 0), 0);
    }
    ddofi_hs_record_clear(&r);
}


/* ---- namespaces and what a reader refuses ---------------------------------------- */

static int read_fifo_record(const char *dir)
{
    ddofi_hs_record_t p;
    int rc = ddofi_hs_read(dir, "ff", &p);
    if (rc != -DDS_EIO || strstr(dds_last_error(), "ff.ddshs") == NULL ||
        strstr(dds_last_error(), "not a regular file") == NULL) {
        fprintf(stderr, "rc %d: %s\n", rc, dds_last_error());
        return 1;
    }
    return 0;
}

static void test_namespaces_and_unsafe_files(void)
{
    char dir[4400], path[4600], out[600];
    ddofi_hs_record_t r, p;

    CHECK_OK(ddofi_hs_record_file_name("job42", "x", out, sizeof out));
    CHECK_STREQ(out, "job42@x.ddshs");
    CHECK_OK(ddofi_hs_record_file_name("", "x", out, sizeof out));
    CHECK_STREQ(out, "x.ddshs");
    CHECK_OK(ddofi_hs_record_file_name(NULL, "a@b", out, sizeof out));
    CHECK_STREQ(out, "a%40b.ddshs");
    CHECK_OK(ddofi_hs_record_file_name("a@b", "c", out, sizeof out));
    CHECK_STREQ(out, "a%40b@c.ddshs");
    CHECK_OK(ddofi_hs_record_file_name(".n", "x", out, sizeof out));
    CHECK_STREQ(out, "%2En@x.ddshs");

    snprintf(dir, sizeof dir, "%s/ns/hs", g_root);
    CHECK_OK(ddofi_hs_dir_prepare(dir));
    make_record(&r, 2, "x");
    /* two core jobs publishing "x" in one directory never share a file */
    snprintf(r.exchange_ns, sizeof r.exchange_ns, "jobA");
    r.run_id = 0xa;
    CHECK_OK(ddofi_hs_write(dir, &r));
    snprintf(r.exchange_ns, sizeof r.exchange_ns, "jobB");
    r.run_id = 0xb;
    CHECK_OK(ddofi_hs_write(dir, &r));
    CHECK_EQ(count_files(dir, NULL, 0), 2);
    CHECK_OK(ddofi_hs_read_ns(dir, "jobA", "x", &p));
    CHECK_EQ_U(p.run_id, 0xa);
    ddofi_hs_record_clear(&p);
    CHECK_OK(ddofi_hs_read_ns(dir, "jobB", "x", &p));
    CHECK_EQ_U(p.run_id, 0xb);
    ddofi_hs_record_clear(&p);
    CHECK_RC(ddofi_hs_read(dir, "x", &p), -DDS_ENOENT);
    /* one job's free() removes its own record only */
    CHECK_OK(ddofi_hs_remove_ns(dir, "jobA", "x"));
    CHECK_OK(ddofi_hs_read_ns(dir, "jobB", "x", &p));
    CHECK_EQ_U(p.run_id, 0xb);
    ddofi_hs_record_clear(&p);
    /* a record under another namespace's file name */
    {
        char from[4600], to[4600];
        snprintf(from, sizeof from, "%s/jobB@x.ddshs", dir);
        snprintf(to, sizeof to, "%s/jobC@x.ddshs", dir);
        CHECK_OK(link(from, to));
        CHECK_RC(ddofi_hs_read_ns(dir, "jobC", "x", &p), -DDS_ECORRUPT);
        CHECK_CONTAINS(dds_last_error(), "holds namespace 'jobB', expected 'jobC'");
        CHECK_OK(unlink(to));
    }

    /* a FIFO at a record: an error at once, never a blocked open */
    snprintf(path, sizeof path, "%s/ff.ddshs", dir);
    CHECK_OK(mkfifo(path, 0600));
    fflush(stdout);
    fflush(stderr);
    {
        pid_t pid = fork();
        int st = 0;
        if (pid == 0) {
            alarm(10);
            _exit(read_fifo_record(dir));
        }
        CHECK(waitpid(pid, &st, 0) == pid);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    CHECK_OK(unlink(path));
    /* a link at a record: refused, not followed (-DDS_EIO: a planted file,
     * like a FIFO; DDStoreError in Python, as docs/security.md says) */
    {
        char from[4600];
        snprintf(from, sizeof from, "%s/jobB@x.ddshs", dir);
        snprintf(path, sizeof path, "%s/ln.ddshs", dir);
        CHECK_OK(symlink(from, path));
        CHECK_RC(ddofi_hs_read(dir, "ln", &p), -DDS_EIO);
        CHECK_CONTAINS(dds_last_error(), "symbolic link");
        CHECK_OK(unlink(path));
    }
    /* a directory others may write to: its records are not trusted */
    {
        char open_[4500];
        snprintf(open_, sizeof open_, "%s/ns/open", g_root);
        CHECK_OK(mkdir(open_, 0700));
        snprintf(r.exchange_ns, sizeof r.exchange_ns, "%s", "");
        CHECK_OK(ddofi_hs_write(open_, &r));
        CHECK_OK(chmod(open_, 0777));
        CHECK_RC(ddofi_hs_read(open_, "x", &p), -DDS_EINVAL);
        CHECK_CONTAINS(dds_last_error(), "writable by others");
        CHECK_OK(chmod(open_, 0700));
        CHECK_OK(ddofi_hs_read(open_, "x", &p));
        ddofi_hs_record_clear(&p);
        if (geteuid() == 0) {
            /* a record another user planted */
            snprintf(path, sizeof path, "%s/x.ddshs", open_);
            CHECK_OK(chown(path, 65534, 65534));
            CHECK_RC(ddofi_hs_read(open_, "x", &p), -DDS_EIO);
            CHECK_CONTAINS(dds_last_error(), "owned by uid 65534");
        } else {
            printf("SKIP: a record owned by another user needs root\n");
        }
    }
    ddofi_hs_record_clear(&r);
}

/* ---- processes ---------------------------------------------------------------------- */

static void test_process(void)
{
    uint64_t t = ddofi_hs_self_start_ticks();
    char oldname[32] = {0};
    int pfd[2];
    pid_t child;
    int st;

    CHECK(t != 0);
    CHECK_EQ(ddofi_hs_process_alive((int32_t)getpid(), t), 1);
    CHECK_EQ(ddofi_hs_process_alive((int32_t)getpid(), 0), 1);
    CHECK_EQ(ddofi_hs_process_alive((int32_t)getpid(), t + 1), 0);
    CHECK_EQ(ddofi_hs_process_alive((int32_t)getpid(), t - 1), 0);
    CHECK_EQ(ddofi_hs_process_alive(0, 0), 0);
    CHECK_EQ(ddofi_hs_process_alive(-1, 0), 0);

    /* a command name with spaces and parentheses does not fool the parser */
    CHECK_OK(prctl(PR_GET_NAME, oldname, 0, 0, 0));
    CHECK_OK(prctl(PR_SET_NAME, "x) 1 2 (y", 0, 0, 0));
    CHECK_EQ_U(ddofi_hs_self_start_ticks(), t);
    CHECK_EQ(ddofi_hs_process_alive((int32_t)getpid(), t), 1);
    CHECK_OK(prctl(PR_SET_NAME, oldname, 0, 0, 0));

    /* a live child that reports its own start time */
    CHECK_OK(pipe(pfd));
    child = fork();
    if (child == 0) {
        uint64_t mine = ddofi_hs_self_start_ticks();
        close(pfd[0]);
        if (write(pfd[1], &mine, sizeof mine) != (ssize_t)sizeof mine)
            _exit(3);
        pause();
        _exit(0);
    }
    CHECK(child > 0);
    close(pfd[1]);
    {
        uint64_t ct = 0;
        CHECK_EQ(read(pfd[0], &ct, sizeof ct), (ssize_t)sizeof ct);
        close(pfd[0]);
        CHECK(ct != 0);
        CHECK(ct >= t);
        CHECK_EQ(ddofi_hs_process_alive((int32_t)child, ct), 1);
        CHECK_EQ(ddofi_hs_process_alive((int32_t)child, ct + 5), 0);
        /* exited but not reaped (a zombie): gone */
        CHECK_OK(kill(child, SIGKILL));
        {
            siginfo_t si;
            memset(&si, 0, sizeof si);
            CHECK_OK(waitid(P_PID, (id_t)child, &si, WEXITED | WNOWAIT));
        }
        CHECK_EQ(ddofi_hs_process_alive((int32_t)child, ct), 0);
        CHECK_EQ(ddofi_hs_process_alive((int32_t)child, 0), 0);
        /* reaped */
        CHECK_EQ(waitpid(child, &st, 0), child);
        CHECK_EQ(ddofi_hs_process_alive((int32_t)child, ct), 0);
        CHECK_EQ(ddofi_hs_process_alive((int32_t)child, 0), 0);
    }

    /* a short-lived child, reaped before the question */
    child = fork();
    if (child == 0)
        _exit(0);
    CHECK(child > 0);
    CHECK_EQ(waitpid(child, &st, 0), child);
    CHECK_EQ(ddofi_hs_process_alive((int32_t)child, 0), 0);
}

int main(void)
{
    make_root("hs");
    RUN_TEST(test_round_trip);
    RUN_TEST(test_field_rules);
    RUN_TEST(test_ragged);
    RUN_TEST(test_header_rules);
    RUN_TEST(test_file_name);
    RUN_TEST(test_dir_prepare);
    RUN_TEST(test_namespaces_and_unsafe_files);
    RUN_TEST(test_write_read);
    RUN_TEST(test_process);
    rm_rf(g_root);
    return CHECK_SUMMARY();
}
