/* Writes the seed corpus of handshake_fuzz (fuzz/corpus/) into the
 * directory given as argv[1]: valid records made by ddofi_hs_encode and
 * near-misses derived from them.  Every value is fixed (run ids, times,
 * pids, hosts, blobs), so the output is the same on every run and machine;
 * the files are committed and this program regenerates them:
 *
 *   make_corpus ddstore-ofi/fuzz/corpus
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddstore/errors.h"
#include "ddstore/handshake_transport.h"
#include "ddstore/transport.h"
#include "ddstore/types.h"

static const char *g_dir;
static int g_failed;

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

static void fix_crc(unsigned char *b, size_t len)
{
    uint32_t c = 0xffffffffu;
    put32(b + 24, 0);
    for (size_t i = 0; i < len; i++) {
        c ^= b[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    put32(b + 24, c ^ 0xffffffffu);
}

/* Writes `name`, after checking that it parses with `want` (0 or the
 * expected -DDS_E* code). */
static void out(const char *name, const void *buf, size_t len, int want)
{
    char path[4096];
    ddofi_hs_record_t chk;
    FILE *f;
    int rc = ddofi_hs_parse(buf, len, &chk);
    if (rc == 0)
        ddofi_hs_record_clear(&chk);
    if (rc != want) {
        fprintf(stderr, "%s: parses with %d (%s), expected %d: %s\n", name,
                rc, dds_strerror(rc), want, dds_last_error());
        g_failed = 1;
    }
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    f = fopen(path, "wb");
    if (f == NULL || (len > 0 && fwrite(buf, 1, len, f) != len) ||
        fclose(f) != 0) {
        perror(path);
        g_failed = 1;
    }
}

/* A record of n ranks: rank i has rows_of(i) rows. */
static void make(ddofi_hs_record_t *r, uint32_t n, const char *name,
                 dds_dtype_t dtype, uint64_t itemsize, uint64_t disp,
                 uint32_t flags, const int64_t *rows)
{
    memset(r, 0, sizeof *r);
    r->nranks = n;
    r->run_id = 0x5eed000000000000ull + n;
    r->ctime_ns = 1700000000000000000ll + (int64_t)n * 1000;
    r->dtype = (int32_t)dtype;
    r->flags = flags;
    r->itemsize = itemsize;
    r->disp = disp;
    r->row_bytes = itemsize * disp;
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->exchange_ns, sizeof r->exchange_ns, "job1234.0");
    snprintf(r->provider, sizeof r->provider,
             flags & DDOFI_HS_FLAG_LOCAL_ONLY ? "shm" : "tcp;ofi_rxm");
    snprintf(r->domain, sizeof r->domain,
             flags & DDOFI_HS_FLAG_LOCAL_ONLY ? "shm" : "eth0");
    r->ranks = calloc(n, sizeof *r->ranks);
    if (r->ranks == NULL) {
        perror("calloc");
        exit(2);
    }
    for (uint32_t i = 0; i < n; i++) {
        ddofi_hs_rank_t *k = &r->ranks[i];
        k->rows = rows[i];
        k->base = 0x7f1200000000ull + 0x10000000ull * i;
        k->key = 0x1000ull + i;
        k->bytes = (uint64_t)rows[i] * r->row_bytes;
        k->pid = 20000 + (int32_t)i;
        k->addr_len = 16 + 8 * i;
        k->start_ticks = 500000 + i;
        snprintf(k->host, sizeof k->host, "node%03u", (unsigned)(i / 2));
        for (int j = 0; j < DDOFI_HS_MR_BLOB; j++)
            k->mr_blob[j] = (unsigned char)(0x40 + i * 3 + (unsigned)j);
        for (uint32_t j = 0; j < k->addr_len; j++)
            k->addr[j] = (unsigned char)(0x80 + i + j);
        r->total_rows += (uint64_t)rows[i];
    }
}

/* Encodes r into *buf_p / *len_p and writes it as `name`. */
static void emit(const char *name, ddofi_hs_record_t *r, unsigned char **buf_p,
                 size_t *len_p)
{
    void *buf = NULL;
    size_t len = 0;
    int rc = ddofi_hs_encode(r, &buf, &len);
    if (rc < 0) {
        fprintf(stderr, "%s: %s: %s\n", name, dds_strerror(rc),
                dds_last_error());
        g_failed = 1;
        *buf_p = NULL;
        *len_p = 0;
        return;
    }
    out(name, buf, len, 0);
    *buf_p = buf;
    *len_p = len;
}

int main(int argc, char **argv)
{
    static const int64_t rows1[] = {10};
    static const int64_t rows2[] = {3, 0};
    static const int64_t rows4[] = {5, 6, 0, 7};
    static const int64_t rows3z[] = {0, 0, 0};
    ddofi_hs_record_t r;
    unsigned char *b1, *b2, *b4, *bg, *t;
    size_t l1, l2, l4, lg, l;

    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
        return 2;
    }
    g_dir = argv[1];

    /* valid records */
    make(&r, 1, "x", DDS_DTYPE_FLOAT64, 8, 3, 0, rows1);
    emit("valid-1rank", &r, &b1, &l1);
    ddofi_hs_record_clear(&r);

    make(&r, 2, "labels", DDS_DTYPE_INT64, 8, 1, 0, rows2);
    emit("valid-2ranks-zero-rows", &r, &b2, &l2);
    ddofi_hs_record_clear(&r);

    make(&r, 4, "train.features", DDS_DTYPE_RAW, 24, 5,
         DDOFI_HS_FLAG_LOCAL_ONLY, rows4);
    emit("valid-4ranks-local-only", &r, &b4, &l4);
    ddofi_hs_record_clear(&r);

    make(&r, 2, ".train/a b%c\xc3\xa9", DDS_DTYPE_FLOAT32, 4, 2, 0, rows2);
    emit("valid-escaped-name", &r, &t, &l);
    free(t);
    ddofi_hs_record_clear(&r);

    make(&r, 3, "empty", DDS_DTYPE_BOOL, 1, 7, 0, rows3z);
    emit("valid-3ranks-all-empty", &r, &t, &l);
    free(t);
    ddofi_hs_record_clear(&r);

    make(&r, 1, "u8", DDS_DTYPE_UINT8, 1, 1, DDOFI_HS_FLAG_LOCAL_ONLY, rows1);
    emit("valid-uint8-local-only", &r, &t, &l);
    free(t);
    ddofi_hs_record_clear(&r);

    make(&r, 2, "half", DDS_DTYPE_FLOAT16, 2, 4, 0, rows2);
    emit("valid-float16", &r, &t, &l);
    free(t);
    ddofi_hs_record_clear(&r);

    make(&r, 1, "bf", DDS_DTYPE_BFLOAT16, 2, 3, DDOFI_HS_FLAG_LOCAL_ONLY, rows1);
    emit("valid-bfloat16-local-only", &r, &t, &l);
    free(t);
    ddofi_hs_record_clear(&r);

    /* a ragged variable: rank i's bytes are its index plus its element
     * rows (rank 2 has no samples, rank 1 samples of length 0) */
    make(&r, 4, "graphs.x", DDS_DTYPE_FLOAT32, 4, 16, DDOFI_HS_FLAG_RAGGED,
         rows4);
    for (uint32_t i = 0; i < 4; i++)
        r.ranks[i].bytes = dds_ragged_index_bytes(r.ranks[i].rows) +
                           (uint64_t)(i == 1 ? 0 : 40 + 3 * i) * r.row_bytes;
    emit("valid-ragged-4ranks", &r, &bg, &lg);
    ddofi_hs_record_clear(&r);

    /* every string at its longest, the largest address blob */
    make(&r, 1, "n", DDS_DTYPE_INT32, 4, 1, 0, rows1);
    memset(r.name, 'n', DDOFI_HS_NAME_MAX);
    memset(r.exchange_ns, 's', DDOFI_HS_NS_MAX);
    memset(r.provider, 'p', DDOFI_HS_PROV_MAX);
    memset(r.domain, 'd', DDOFI_HS_DOMAIN_MAX);
    memset(r.ranks[0].host, 'h', DDOFI_HS_HOST_MAX);
    r.ranks[0].addr_len = DDOFI_HS_ADDR_MAX;
    memset(r.ranks[0].addr, 0x5a, DDOFI_HS_ADDR_MAX);
    r.ranks[0].start_ticks = 0; /* unknown */
    emit("valid-longest-fields", &r, &t, &l);
    free(t);
    ddofi_hs_record_clear(&r);

    /* near-misses */
    if (b1 != NULL && b2 != NULL && b4 != NULL) {
        out("empty-file", b1, 0, -DDS_ECORRUPT);
        out("trunc-magic", b1, 6, -DDS_ECORRUPT);
        out("trunc-version", b1, 10, -DDS_ECORRUPT);
        out("trunc-header", b1, 300, -DDS_ECORRUPT);
        out("trunc-entry", b2, l2 - 100, -DDS_ECORRUPT);
        out("trunc-last-byte", b4, l4 - 1, -DDS_ECORRUPT);

        t = malloc(l4 + 1);
        memcpy(t, b4, l4);
        t[l4] = 0;
        out("trailing-byte", t, l4 + 1, -DDS_ECORRUPT);

        memcpy(t, b4, l4);
        t[96] ^= 0x01; /* name, CRC left as it was */
        out("bad-crc", t, l4, -DDS_ECORRUPT);

        memcpy(t, b4, l4);
        put32(t + 8, 1); /* the format before ragged variables */
        fix_crc(t, l4);
        out("bad-version-1", t, l4, -DDS_ESTALE);

        memcpy(t, b4, l4);
        put32(t + 8, 3);
        fix_crc(t, l4);
        out("bad-version-3", t, l4, -DDS_ESTALE);

        memcpy(t, b4, l4);
        put32(t + 28, 0);
        fix_crc(t, l4);
        out("bad-nranks-0", t, l4, -DDS_ECORRUPT);

        memcpy(t, b4, l4);
        put32(t + 512 + 480 * 2 + 32, 0); /* rank 2's pid */
        fix_crc(t, l4);
        out("bad-pid-0", t, l4, -DDS_ECORRUPT);

        memcpy(t, b4, l4);
        put64(t + 80, 17); /* total rows: 18 */
        fix_crc(t, l4);
        out("bad-total-rows", t, l4, -DDS_ECORRUPT);

        memcpy(t, b1, l1);
        put32(t + 512 + 36, DDOFI_HS_ADDR_MAX + 1);
        fix_crc(t, l1);
        out("bad-addr-len", t, l1, -DDS_ECORRUPT);

        memcpy(t, b1, l1);
        put64(t + 64, (uint64_t)1 << 62); /* disp x 8 overflows */
        fix_crc(t, l1);
        out("bad-row-bytes-overflow", t, l1, -DDS_ECORRUPT);

        memcpy(t, b1, l1);
        put32(t + 48, DDS_DTYPE_COUNT); /* one past the last dtype */
        fix_crc(t, l1);
        out("bad-dtype-count", t, l1, -DDS_ECORRUPT);

        memcpy(t, b1, l1);
        put32(t + 48, DDS_DTYPE_BFLOAT16); /* 2-byte dtype, itemsize 8 */
        fix_crc(t, l1);
        out("bad-itemsize-bfloat16", t, l1, -DDS_ECORRUPT);
        free(t);
    }
    if (bg != NULL) {
        t = malloc(lg);
        memcpy(t, bg, lg);
        put64(t + 512 + 480 * 3 + 24,
              dds_ragged_index_bytes(7) + 49 * 64 + 1); /* not whole rows */
        fix_crc(t, lg);
        out("bad-ragged-bytes", t, lg, -DDS_ECORRUPT);

        memcpy(t, bg, lg);
        put64(t + 512 + 24, 32); /* below rank 0's index */
        fix_crc(t, lg);
        out("bad-ragged-index", t, lg, -DDS_ECORRUPT);

        memcpy(t, bg, lg);
        put32(t + 52, 0); /* the flag dropped: not rows x row bytes */
        fix_crc(t, lg);
        out("bad-ragged-flag-dropped", t, lg, -DDS_ECORRUPT);
        free(t);
    }
    free(bg);
    free(b1);
    free(b2);
    free(b4);
    return g_failed;
}
