/* ddstore-gpu tests: a tiny assertion header that prints both sides.
 *
 * Each test prints "N passed, M failed, K skipped" and exits non-zero when
 * anything failed.  T_SKIP prints "SKIP <test>: <reason>"; with
 * DDSTORE_TEST_STRICT=1 (machines that have the hardware) a skip counts as
 * a failure.
 */
#ifndef DDGPU_TEST_H
#define DDGPU_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddstore/errors.h"

static int dt_pass, dt_fail, dt_skip;

static inline int dt_strict(void)
{
    const char *s = getenv("DDSTORE_TEST_STRICT");
    return s != NULL && *s != '\0' && strcmp(s, "0") != 0;
}

#define T_FAILMSG(...)                                                         \
    do {                                                                       \
        dt_fail++;                                                             \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                   \
        fprintf(stderr, __VA_ARGS__);                                          \
        fprintf(stderr, "\n");                                                 \
    } while (0)

#define T_CHECK(cond)                                                          \
    do {                                                                       \
        if (cond)                                                              \
            dt_pass++;                                                         \
        else                                                                   \
            T_FAILMSG("%s", #cond);                                            \
    } while (0)

#define T_EQ(a, b)                                                             \
    do {                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        if (a_ == b_)                                                          \
            dt_pass++;                                                         \
        else                                                                   \
            T_FAILMSG("%s == %s: %lld vs %lld", #a, #b, a_, b_);               \
    } while (0)

#define T_NE(a, b)                                                             \
    do {                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        if (a_ != b_)                                                          \
            dt_pass++;                                                         \
        else                                                                   \
            T_FAILMSG("%s != %s: both %lld", #a, #b, a_);                      \
    } while (0)

#define T_STREQ(a, b)                                                          \
    do {                                                                       \
        const char *a_ = (a), *b_ = (b);                                       \
        if (a_ && b_ && strcmp(a_, b_) == 0)                                   \
            dt_pass++;                                                         \
        else                                                                   \
            T_FAILMSG("%s == %s: \"%s\" vs \"%s\"", #a, #b,                    \
                      a_ ? a_ : "(null)", b_ ? b_ : "(null)");                 \
    } while (0)

#define T_CONTAINS(hay, needle)                                                \
    do {                                                                       \
        const char *h_ = (hay), *n_ = (needle);                                \
        if (h_ && n_ && strstr(h_, n_))                                        \
            dt_pass++;                                                         \
        else                                                                   \
            T_FAILMSG("\"%s\" contains \"%s\"", h_ ? h_ : "(null)",            \
                      n_ ? n_ : "(null)");                                     \
    } while (0)

/* expr returns `want`; on mismatch print both codes and the detail. */
#define T_RC(expr, want)                                                       \
    do {                                                                       \
        int rc_ = (expr), w_ = (want);                                         \
        if (rc_ == w_)                                                         \
            dt_pass++;                                                         \
        else                                                                   \
            T_FAILMSG("%s returned %d (%s), expected %d (%s); detail: %s",     \
                      #expr, rc_, dds_strerror(rc_), w_, dds_strerror(w_),     \
                      dds_last_error());                                       \
    } while (0)

#define T_OK(expr) T_RC((expr), 0)

#define T_SKIP(name, ...)                                                      \
    do {                                                                       \
        printf("SKIP %s: ", (name));                                           \
        printf(__VA_ARGS__);                                                   \
        printf("\n");                                                          \
        if (dt_strict()) {                                                     \
            dt_fail++;                                                         \
            fprintf(stderr, "FAIL %s: skipped with DDSTORE_TEST_STRICT=1\n",   \
                    (name));                                                   \
        } else {                                                               \
            dt_skip++;                                                         \
        }                                                                      \
    } while (0)

static inline int dt_finish(const char *test)
{
    printf("%s: %d passed, %d failed, %d skipped\n", test, dt_pass, dt_fail,
           dt_skip);
    fflush(stdout);
    return dt_fail ? 1 : 0;
}

#endif
