/* libFuzzer target for the method-2 handshake record parser
 * (include/ddstore/handshake_transport.h).
 *
 * Each input is parsed twice: as it is, and with its CRC field replaced by
 * the right CRC (so that the fuzzer reaches the field checks behind the CRC
 * without having to solve it).  Whenever a parse succeeds the record must
 * obey every rule the header promises, and re-encoding it must give the
 * same bytes; whenever it fails the output must be zeroed.  The input is
 * also given to ddofi_hs_file_name as a variable name: the file name must be
 * safe and decode back to the name.  A violation is __builtin_trap().
 *
 * Build with libFuzzer: ci/fuzz-handshake.sh.  With
 * -DDDS_FUZZ_REPLAY_MAIN the file gets a main() that runs every file named
 * on the command line (or found in a named directory, not recursively)
 * through the same function: a plain regression test over the corpus
 * (ci/fuzz-handshake.sh --replay). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddstore/errors.h"
#include "ddstore/handshake_transport.h"
#include "ddstore/transport.h"
#include "ddstore/types.h"

#define CHECK_OR_TRAP(c)                                                       \
    do {                                                                       \
        if (!(c))                                                              \
            __builtin_trap();                                                  \
    } while (0)

static uint32_t crc_table[256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
        crc_table[i] = c;
    }
}

/* CRC-32 of buf with bytes 24..27 taken as zero (len >= 28). */
static uint32_t record_crc(const unsigned char *p, size_t len)
{
    uint32_t c = 0xffffffffu;
    if (crc_table[1] == 0)
        crc_init();
    for (size_t i = 0; i < len; i++) {
        unsigned char b = i >= 24 && i < 28 ? 0 : p[i];
        c = crc_table[(c ^ b) & 0xffu] ^ (c >> 8);
    }
    return c ^ 0xffffffffu;
}

static int all_zero(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0)
            return 0;
    return 1;
}

static int str_ok(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    return n < cap && all_zero(s + n, cap - n);
}

/* Every promise of a successful parse. */
static void check_record(const ddofi_hs_record_t *r, const unsigned char *in,
                         size_t len)
{
    uint64_t sum = 0, elems = 0;
    const int ragged = (r->flags & DDOFI_HS_FLAG_RAGGED) != 0;
    void *buf = NULL;
    size_t blen = 0;

    CHECK_OR_TRAP(r->version == DDOFI_HS_VERSION);
    CHECK_OR_TRAP(r->nranks >= 1 && r->nranks <= (uint32_t)DDOFI_HS_MAX_RANKS);
    CHECK_OR_TRAP(r->ranks != NULL);
    CHECK_OR_TRAP(len == (size_t)DDOFI_HS_HEADER_BYTES +
                             (size_t)r->nranks * DDOFI_HS_RANK_BYTES);
    CHECK_OR_TRAP(r->ctime_ns > 0);
    CHECK_OR_TRAP(r->dtype >= 0 && r->dtype < DDS_DTYPE_COUNT);
    CHECK_OR_TRAP(r->dtype == DDS_DTYPE_RAW ||
                  r->itemsize == dds_dtype_size((dds_dtype_t)r->dtype));
    CHECK_OR_TRAP(r->itemsize > 0 && r->disp > 0);
    CHECK_OR_TRAP(r->disp <= UINT64_MAX / r->itemsize);
    CHECK_OR_TRAP(r->row_bytes == r->disp * r->itemsize);
    CHECK_OR_TRAP(str_ok(r->name, sizeof r->name) && r->name[0] != '\0');
    CHECK_OR_TRAP(str_ok(r->exchange_ns, sizeof r->exchange_ns));
    CHECK_OR_TRAP(str_ok(r->provider, sizeof r->provider));
    CHECK_OR_TRAP(str_ok(r->domain, sizeof r->domain));
    for (uint32_t i = 0; i < r->nranks; i++) {
        const ddofi_hs_rank_t *k = &r->ranks[i];
        CHECK_OR_TRAP(k->rows >= 0);
        if (ragged) { /* [index | whole element rows], within int64 */
            uint64_t ib;
            CHECK_OR_TRAP(k->rows <= DDS_RAGGED_MAX_ROWS);
            ib = dds_ragged_index_bytes(k->rows);
            CHECK_OR_TRAP(k->bytes >= ib && k->bytes <= (uint64_t)INT64_MAX);
            CHECK_OR_TRAP((k->bytes - ib) % r->row_bytes == 0);
            elems += (k->bytes - ib) / r->row_bytes;
            CHECK_OR_TRAP(elems <= (uint64_t)INT64_MAX / r->row_bytes);
        } else {
            CHECK_OR_TRAP(r->row_bytes == 0 ||
                          (uint64_t)k->rows <= UINT64_MAX / r->row_bytes);
            CHECK_OR_TRAP(k->bytes == (uint64_t)k->rows * r->row_bytes);
        }
        CHECK_OR_TRAP(k->pid > 0);
        CHECK_OR_TRAP(k->addr_len >= 1 && k->addr_len <= DDOFI_HS_ADDR_MAX);
        CHECK_OR_TRAP(all_zero(k->addr + k->addr_len,
                               DDOFI_HS_ADDR_MAX - k->addr_len));
        CHECK_OR_TRAP(str_ok(k->host, sizeof k->host));
        CHECK_OR_TRAP((uint64_t)k->rows <= (uint64_t)INT64_MAX - sum);
        sum += (uint64_t)k->rows;
    }
    CHECK_OR_TRAP(r->total_rows == sum);

    /* re-encode: the same bytes */
    CHECK_OR_TRAP(ddofi_hs_encode(r, &buf, &blen) == 0);
    CHECK_OR_TRAP(blen == len && memcmp(buf, in, len) == 0);
    free(buf);
}

static void one(const unsigned char *data, size_t size)
{
    ddofi_hs_record_t r;
    int rc;

    memset(&r, 0xa5, sizeof r);
    rc = ddofi_hs_parse(data, size, &r);
    if (rc == 0) {
        check_record(&r, data, size);
        ddofi_hs_record_clear(&r);
        CHECK_OR_TRAP(all_zero(&r, sizeof r));
    } else {
        CHECK_OR_TRAP(rc == -DDS_ECORRUPT || rc == -DDS_ESTALE ||
                      rc == -DDS_ENOMEM);
        CHECK_OR_TRAP(all_zero(&r, sizeof r));
        CHECK_OR_TRAP(dds_last_error()[0] != '\0');
    }
}

static int unhex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* ddofi_hs_file_name on the input taken as a name (up to its first NUL): a
 * safe file name that decodes back to the name; a short buffer is refused,
 * never overrun. */
static void file_name(const unsigned char *data, size_t size)
{
    char name[DDOFI_HS_NAME_MAX + 2], out[3 * DDOFI_HS_NAME_MAX + 8];
    char back[DDOFI_HS_NAME_MAX + 1];
    size_t n = size < sizeof name - 1 ? size : sizeof name - 1;
    size_t len, o = 0, suffix = sizeof(DDOFI_HS_SUFFIX) - 1, cap;
    char *small;
    int rc;

    memcpy(name, data, n);
    name[n] = '\0';
    n = strlen(name);
    rc = ddofi_hs_file_name(name, out, sizeof out);
    if (n == 0 || n > DDOFI_HS_NAME_MAX) {
        CHECK_OR_TRAP(rc == -DDS_EINVAL);
        return;
    }
    CHECK_OR_TRAP(rc == 0);
    len = strlen(out);
    CHECK_OR_TRAP(len > suffix && out[0] != '.');
    CHECK_OR_TRAP(strcmp(out + len - suffix, DDOFI_HS_SUFFIX) == 0);
    for (size_t i = 0; i < len - suffix; i++) {
        char c = out[i];
        if (c == '%') {
            int hi, lo;
            CHECK_OR_TRAP(i + 2 < len - suffix);
            hi = unhex(out[i + 1]);
            lo = unhex(out[i + 2]);
            CHECK_OR_TRAP(hi >= 0 && lo >= 0);
            back[o++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            CHECK_OR_TRAP((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                          (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                          c == '-');
            back[o++] = c;
        }
        CHECK_OR_TRAP(o <= n);
    }
    CHECK_OR_TRAP(o == n && memcmp(back, name, n) == 0);
    /* exactly enough room works; one byte less is refused */
    cap = len + 1 - (size_t)(data[0] & 1);
    small = malloc(cap);
    if (small == NULL)
        return;
    rc = ddofi_hs_file_name(name, small, cap);
    CHECK_OR_TRAP(cap == len + 1 ? rc == 0 && strcmp(small, out) == 0
                                 : rc == -DDS_EINVAL);
    free(small);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char *copy;
    uint32_t crc;

    /* exact-size copies: a read past the end is an ASan report */
    copy = calloc(1, size ? size : 1);
    if (copy == NULL)
        return 0;
    if (size > 0)
        memcpy(copy, data, size);
    one(copy, size);
    if (size >= 28) {
        crc = record_crc(copy, size);
        copy[24] = (unsigned char)crc;
        copy[25] = (unsigned char)(crc >> 8);
        copy[26] = (unsigned char)(crc >> 16);
        copy[27] = (unsigned char)(crc >> 24);
        one(copy, size);
    }
    free(copy);
    file_name(data, size);
    return 0;
}

#ifdef DDS_FUZZ_REPLAY_MAIN
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

/* The input being run, named by the handler when something kills us (a
 * trap is SIGILL or SIGTRAP; ASan and UBSan end in abort() with
 * abort_on_error=1). */
static const char *volatile g_current;

static void on_fatal(int sig)
{
    static const char pre[] = "handshake_fuzz replay: crashed on input ";
    const char *cur = g_current;
    if (cur != NULL) {
        ssize_t w = write(2, pre, sizeof pre - 1);
        w = write(2, cur, strlen(cur));
        w = write(2, "\n", 1);
        (void)w;
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static int run_file(const char *path, long *count)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    size_t cap = 0, len = 0;

    if (f == NULL) {
        perror(path);
        return 1;
    }
    for (;;) {
        size_t got;
        if (len == cap) {
            unsigned char *nb;
            cap = cap ? 2 * cap : 4096;
            nb = realloc(buf, cap);
            if (nb == NULL) {
                fclose(f);
                free(buf);
                fprintf(stderr, "%s: out of memory\n", path);
                return 1;
            }
            buf = nb;
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        perror(path);
        fclose(f);
        free(buf);
        return 1;
    }
    fclose(f);
    g_current = path;
    LLVMFuzzerTestOneInput(buf, len);
    g_current = NULL;
    free(buf);
    (*count)++;
    return 0;
}

/* Runs each file (or each regular file of each directory); fails when a
 * path cannot be read or nothing at all was run. */
int main(int argc, char **argv)
{
    static const int sigs[] = {SIGILL, SIGTRAP, SIGABRT, SIGSEGV, SIGBUS,
                               SIGFPE};
    long count = 0;
    int bad = 0;

    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        signal(sigs[i], on_fatal);
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) < 0) {
            perror(argv[i]);
            bad++;
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            DIR *d = opendir(argv[i]);
            struct dirent *de;
            if (d == NULL) {
                perror(argv[i]);
                bad++;
                continue;
            }
            while ((de = readdir(d)) != NULL) {
                char path[4096];
                struct stat fs;
                if (de->d_name[0] == '.')
                    continue;
                if ((size_t)snprintf(path, sizeof path, "%s/%s", argv[i],
                                     de->d_name) >= sizeof path) {
                    fprintf(stderr, "%s/%s: path too long\n", argv[i],
                            de->d_name);
                    bad++;
                    continue;
                }
                if (stat(path, &fs) == 0 && S_ISREG(fs.st_mode))
                    bad += run_file(path, &count);
            }
            closedir(d);
        } else {
            bad += run_file(argv[i], &count);
        }
    }
    printf("handshake_fuzz replay: %ld inputs, %d unreadable\n", count, bad);
    if (count == 0) {
        fprintf(stderr, "handshake_fuzz replay: no input files\n");
        return 1;
    }
    return bad != 0;
}
#endif
