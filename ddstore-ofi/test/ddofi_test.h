/* Tiny assertion helpers for ddstore-ofi's tests: every failed check prints
 * both sides; main() ends with ddofi_test_summary() which prints
 * "N passed, M failed" (and the skips) and returns the exit status. */
#ifndef DDOFI_TEST_H
#define DDOFI_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ddofi_t_pass, ddofi_t_fail, ddofi_t_skip;

#define T_OK(cond)                                                             \
    do {                                                                       \
        if (cond) {                                                            \
            ddofi_t_pass++;                                                    \
        } else {                                                               \
            ddofi_t_fail++;                                                    \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);    \
        }                                                                      \
    } while (0)

#define T_EQ_INT(a, b)                                                         \
    do {                                                                       \
        long long t_a_ = (long long)(a), t_b_ = (long long)(b);                \
        if (t_a_ == t_b_) {                                                    \
            ddofi_t_pass++;                                                    \
        } else {                                                               \
            ddofi_t_fail++;                                                    \
            fprintf(stderr, "FAIL %s:%d: %s == %s: %lld != %lld (last error: %s)\n", \
                    __FILE__, __LINE__, #a, #b, t_a_, t_b_, ddofi_last_error()); \
        }                                                                      \
    } while (0)

#define T_EQ_STR(a, b)                                                         \
    do {                                                                       \
        const char *t_a_ = (a), *t_b_ = (b);                                   \
        if (t_a_ && t_b_ && !strcmp(t_a_, t_b_)) {                             \
            ddofi_t_pass++;                                                    \
        } else {                                                               \
            ddofi_t_fail++;                                                    \
            fprintf(stderr, "FAIL %s:%d: %s == %s: \"%s\" != \"%s\"\n",        \
                    __FILE__, __LINE__, #a, #b, t_a_ ? t_a_ : "(null)",        \
                    t_b_ ? t_b_ : "(null)");                                   \
        }                                                                      \
    } while (0)

#define T_CONTAINS(hay, needle)                                                \
    do {                                                                       \
        const char *t_h_ = (hay), *t_n_ = (needle);                            \
        if (t_h_ && strstr(t_h_, t_n_)) {                                      \
            ddofi_t_pass++;                                                    \
        } else {                                                               \
            ddofi_t_fail++;                                                    \
            fprintf(stderr, "FAIL %s:%d: \"%s\" does not contain \"%s\"\n",    \
                    __FILE__, __LINE__, t_h_ ? t_h_ : "(null)", t_n_);         \
        }                                                                      \
    } while (0)

#define T_SKIP(...)                                                            \
    do {                                                                       \
        ddofi_t_skip++;                                                        \
        fprintf(stderr, "SKIP: ");                                             \
        fprintf(stderr, __VA_ARGS__);                                          \
        fprintf(stderr, "\n");                                                 \
    } while (0)

/* libfabric's own shm and tcp providers exist wherever libfabric does (./ddstore
 * setup installs it): a test that finds one missing fails instead of skipping.
 * Other providers (verbs, efa, cxi ...) may be absent: a SKIP. */
static inline int ddofi_t_provider_required(const char *prov)
{
    return prov && (!strcmp(prov, "shm") || !strcmp(prov, "tcp"));
}

/* A provider that is not there: a failure for shm/tcp, else a SKIP. */
#define T_NOPROV(prov, why)                                                    \
    do {                                                                       \
        if (ddofi_t_provider_required(prov)) {                                 \
            ddofi_t_fail++;                                                    \
            fprintf(stderr, "FAIL %s:%d: provider %s not available: %s "       \
                    "(libfabric always has it)\n", __FILE__, __LINE__, (prov), \
                    (why));                                                    \
        } else {                                                               \
            T_SKIP("provider %s not available here: %s", (prov), (why));      \
        }                                                                      \
    } while (0)

static inline int ddofi_test_summary(const char *name)
{
    const char *strict = getenv("DDSTORE_TEST_STRICT");
    int strict_on = strict && strict[0] == '1';
    if (ddofi_t_skip)
        printf("%s: %d skipped%s\n", name, ddofi_t_skip,
               strict_on ? " (DDSTORE_TEST_STRICT=1: counted as failures)" : "");
    if (strict_on)
        ddofi_t_fail += ddofi_t_skip;
    printf("%d passed, %d failed\n", ddofi_t_pass, ddofi_t_fail);
    fflush(stdout);
    return ddofi_t_fail ? 1 : 0;
}

#endif
