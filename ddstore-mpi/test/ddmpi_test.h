/* ddstore-mpi tests: rank context and test data over the one assertion
 * header (ddstore-core/test/check.h: CHECK, CHECK_EQ, CHECK_RC, CHECK_OK,
 * CHECK_CONTAINS, ...).
 *
 * Checks never change the control flow, so every rank makes the same
 * collective calls whatever fails; each failure names the rank and the
 * section (ddt_rank, ddt_section).  ddt_finish() prints "rank R/N: P passed,
 * F failed" and gives the exit status of this rank (the launcher fails the
 * run when any rank fails).  A test that cannot run prints "SKIP: <reason>"
 * (and fails when DDSTORE_TEST_STRICT is set).
 */
#ifndef DDMPI_TEST_H
#define DDMPI_TEST_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ddt_rank, ddt_size;
static const char *ddt_section = "";

#define CHECK_WHERE_(stream) fprintf((stream), "rank %d [%s] ", ddt_rank, ddt_section)
#include "check.h"

static inline void ddt_skip(const char *why)
{
    printf("SKIP: rank %d [%s]: %s\n", ddt_rank, ddt_section, why);
    if (check_strict())
        CHECK_FAIL_("skip with DDSTORE_TEST_STRICT=1: %s", why);
}

static inline int ddt_finish(const char *prog)
{
    int failed = atomic_load(&check_failures_);
    printf("%s rank %d/%d: %d passed, %d failed\n", prog, ddt_rank, ddt_size,
           atomic_load(&check_checks_passed_), failed);
    fflush(stdout);
    return failed ? 1 : 0;
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
