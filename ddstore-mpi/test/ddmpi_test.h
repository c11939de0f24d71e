/* ddstore-mpi tests: a tiny assertion header.
 *
 * Every check prints both sides when it fails and counts; checks never
 * change the control flow, so every rank makes the same collective calls
 * whatever fails.  DDT_FINISH() prints "rank R/N: P passed, F failed" and
 * gives the exit status of this rank (the launcher fails the run when any
 * rank fails).  A test that cannot run prints "SKIP: <reason>" (and fails
 * when DDSTORE_TEST_STRICT=1).
 */
#ifndef DDMPI_TEST_H
#define DDMPI_TEST_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddstore/errors.h"

static int ddt_pass, ddt_fail, ddt_rank, ddt_size;
static const char *ddt_section = "";

#define DDT_FAILED(...)                                                        \
    do {                                                                       \
        ddt_fail++;                                                            \
        fprintf(stderr, "FAIL rank %d [%s] %s:%d: ", ddt_rank, ddt_section,    \
                __FILE__, __LINE__);                                           \
        fprintf(stderr, __VA_ARGS__);                                          \
        fprintf(stderr, "\n");                                                 \
    } while (0)

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (cond)                                                              \
            ddt_pass++;                                                        \
        else                                                                   \
            DDT_FAILED("CHECK(%s)", #cond);                                    \
    } while (0)

#define CHECK_EQ(a, b)                                                         \
    do {                                                                       \
        long long ddt_a_ = (long long)(a), ddt_b_ = (long long)(b);            \
        if (ddt_a_ == ddt_b_)                                                  \
            ddt_pass++;                                                        \
        else                                                                   \
            DDT_FAILED("%s == %s: %lld != %lld", #a, #b, ddt_a_, ddt_b_);      \
    } while (0)

/* rc == expected; on mismatch also prints dds_last_error(). */
#define CHECK_RC(rc, expected)                                                 \
    do {                                                                       \
        int ddt_rc_ = (rc), ddt_e_ = (expected);                               \
        if (ddt_rc_ == ddt_e_)                                                 \
            ddt_pass++;                                                        \
        else                                                                   \
            DDT_FAILED("%s: got %d (%s), expected %d (%s); detail: %s", #rc,   \
                       ddt_rc_, dds_strerror(ddt_rc_), ddt_e_,                 \
                       dds_strerror(ddt_e_), dds_last_error());                \
    } while (0)

#define CHECK_OK(rc) CHECK_RC(rc, 0)

/* substring check on a message */
#define CHECK_CONTAINS(hay, needle)                                            \
    do {                                                                       \
        const char *ddt_h_ = (hay), *ddt_n_ = (needle);                        \
        if (ddt_h_ && strstr(ddt_h_, ddt_n_))                                  \
            ddt_pass++;                                                        \
        else                                                                   \
            DDT_FAILED("'%s' does not contain '%s'", ddt_h_ ? ddt_h_ : "(null)",\
                       ddt_n_);                                                \
    } while (0)

static inline void ddt_skip(const char *why)
{
    const char *strict = getenv("DDSTORE_TEST_STRICT");

    printf("SKIP: rank %d [%s]: %s\n", ddt_rank, ddt_section, why);
    if (strict && strcmp(strict, "1") == 0)
        DDT_FAILED("skip with DDSTORE_TEST_STRICT=1: %s", why);
}

static inline int ddt_finish(const char *prog)
{
    printf("%s rank %d/%d: %d passed, %d failed\n", prog, ddt_rank, ddt_size,
           ddt_pass, ddt_fail);
    fflush(stdout);
    return ddt_fail ? 1 : 0;
}

/* Deterministic byte pattern of rank `r`'s shard at byte offset `off`. */
static inline uint8_t ddt_pat(int r, uint64_t off)
{
    uint64_t x = off * 0x9E3779B97F4A7C15ull + (uint64_t)(r + 1) * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return (uint8_t)(x ^ (x >> 17));
}

/* splitmix64 for test randomness */
static inline uint64_t ddt_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#endif
