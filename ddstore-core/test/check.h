/* ddstore's C tests: the one tiny assertion header (ddstore-core, -gpu,
 * -mpi and ddstore-ofi's handshake test; ddstore-ofi's standalone library
 * tests keep their own ddofi_test.h).
 *
 *   CHECK(cond)              CHECK_EQ(a, b)  CHECK_NE(a, b)  (as long long)
 *   CHECK_EQ_U(a, b)         (as unsigned long long)
 *   CHECK_STREQ(a, b)        CHECK_CONTAINS(haystack, needle)
 *   CHECK_MEMEQ(a, b, n)     CHECK_RC(expr, want)  CHECK_OK(expr)
 *   CHECK_SKIP(name, fmt, ...)   "SKIP: <name>: <reason>"; a failure with
 *                            DDSTORE_TEST_STRICT set (and not 0)
 *   CHECK_FAIL_(fmt, ...)    a failure with a message (custom checks);
 *   CHECK_PASS_()            a passed custom check
 *
 * Every failed check prints both sides (and, for return codes, the error
 * names and dds_last_error()), counts a failure and carries on (control flow
 * never changes, so every rank of a multi-rank test makes the same calls).
 * Checks are safe from several threads.  A program ends with one of
 *   return CHECK_SUMMARY();      "N passed, M failed" over RUN_TEST(fn)s
 *   return check_finish(name);   "<name>: P passed, F failed, S skipped"
 *                                over single checks
 * and exits non-zero if anything failed.  A header that includes this one
 * may define CHECK_WHERE_(stream) first to print context (rank, section)
 * before each failure.
 */
#ifndef DDSTORE_TEST_CHECK_H
#define DDSTORE_TEST_CHECK_H

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddstore/errors.h"

static _Atomic int check_failures_, check_checks_passed_, check_skipped_;
static int check_passed_ __attribute__((unused)),
    check_failed_ __attribute__((unused)); /* RUN_TEST programs only */

#ifndef CHECK_WHERE_
#define CHECK_WHERE_(stream) ((void)0)
#endif

#define CHECK_FAIL_(...)                                                       \
    do {                                                                       \
        fprintf(stderr, "FAIL ");                                              \
        CHECK_WHERE_(stderr);                                                  \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                        \
        fprintf(stderr, __VA_ARGS__);                                          \
        fputc('\n', stderr);                                                   \
        atomic_fetch_add(&check_failures_, 1);                                 \
    } while (0)

#define CHECK_PASS_() ((void)atomic_fetch_add(&check_checks_passed_, 1))

#define CHECK(c)                                                               \
    do {                                                                       \
        if (!(c))                                                              \
            CHECK_FAIL_("CHECK(%s) failed", #c);                               \
        else                                                                   \
            CHECK_PASS_();                                                     \
    } while (0)

#define CHECK_NE(a, b)                                                         \
    do {                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        if (a_ == b_)                                                          \
            CHECK_FAIL_("CHECK_NE(%s, %s) failed: both %lld", #a, #b, a_);     \
        else                                                                   \
            CHECK_PASS_();                                                     \
    } while (0)

#define CHECK_EQ(a, b)                                                         \
    do {                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        if (a_ != b_)                                                          \
            CHECK_FAIL_("CHECK_EQ(%s, %s) failed: %lld != %lld", #a, #b, a_,   \
                        b_);                                                   \
        else                                                                   \
            CHECK_PASS_();                                                     \
    } while (0)

#define CHECK_EQ_U(a, b)                                                       \
    do {                                                                       \
        unsigned long long a_ = (unsigned long long)(a),                       \
                           b_ = (unsigned long long)(b);                       \
        if (a_ != b_)                                                          \
            CHECK_FAIL_("CHECK_EQ_U(%s, %s) failed: %llu != %llu", #a, #b,     \
                        a_, b_);                                               \
        else                                                                   \
            CHECK_PASS_();                                                     \
    } while (0)

#define CHECK_STREQ(a, b)                                                      \
    do {                                                                       \
        const char *a_ = (a), *b_ = (b);                                       \
        if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0)                   \
            CHECK_FAIL_("CHECK_STREQ(%s, %s) failed: \"%s\" != \"%s\"", #a,    \
                        #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)");           \
        else                                                                   \
            CHECK_PASS_();                                                     \
    } while (0)

#define CHECK_CONTAINS(h, n)                                                   \
    do {                                                                       \
        const char *h_ = (h), *n_ = (n);                                       \
        if (h_ == NULL || n_ == NULL || strstr(h_, n_) == NULL)                \
            CHECK_FAIL_("CHECK_CONTAINS(%s, %s) failed: \"%s\" does not "      \
                        "contain \"%s\"",                                      \
                        #h, #n, h_ ? h_ : "(null)", n_ ? n_ : "(null)");       \
        else                                                                   \
            CHECK_PASS_();                                                     \
    } while (0)

#define CHECK_MEMEQ(a, b, n)                                                   \
    do {                                                                       \
        const unsigned char *a_ = (const unsigned char *)(a),                  \
                            *b_ = (const unsigned char *)(b);                  \
        size_t n_ = (size_t)(n);                                               \
        size_t i_ = 0;                                                         \
        for (; i_ < n_; i_++) {                                                \
            if (a_[i_] != b_[i_]) {                                            \
                CHECK_FAIL_("CHECK_MEMEQ(%s, %s, %zu) failed at byte %zu: "    \
                            "0x%02x != 0x%02x",                                \
                            #a, #b, n_, i_, a_[i_], b_[i_]);                   \
                break;                                                         \
            }                                                                  \
        }                                                                      \
        if (i_ == n_)                                                          \
            CHECK_PASS_();                                                     \
    } while (0)

#define CHECK_RC(expr, want)                                                   \
    do {                                                                       \
        int rc_ = (expr), w_ = (want);                                         \
        if (rc_ != w_)                                                         \
            CHECK_FAIL_("%s returned %d (%s), expected %d (%s); last error: "  \
                        "%s",                                                  \
                        #expr, rc_, dds_strerror(rc_), w_, dds_strerror(w_),   \
                        dds_last_error());                                     \
        else                                                                   \
            CHECK_PASS_();                                                     \
    } while (0)

#define CHECK_OK(expr) CHECK_RC(expr, 0)

/* Number of failed checks so far (e.g. to stop a loop early). */
#define CHECK_FAILURES() atomic_load(&check_failures_)

#define RUN_TEST(fn)                                                           \
    do {                                                                       \
        int before_ = atomic_load(&check_failures_);                           \
        fn();                                                                  \
        if (atomic_load(&check_failures_) == before_) {                        \
            check_passed_++;                                                   \
        } else {                                                               \
            check_failed_++;                                                   \
            fprintf(stderr, "FAILED: %s\n", #fn);                              \
        }                                                                      \
    } while (0)

/* DDSTORE_TEST_STRICT set and not "0": the hardware exists here, so a skip
 * is a failure. */
static inline int check_strict(void)
{
    const char *s = getenv("DDSTORE_TEST_STRICT");
    return s != NULL && *s != '\0' && strcmp(s, "0") != 0;
}

#define CHECK_SKIP(name, ...)                                                  \
    do {                                                                       \
        printf("SKIP: %s: ", (name));                                          \
        printf(__VA_ARGS__);                                                   \
        printf("\n");                                                          \
        if (check_strict()) {                                                  \
            atomic_fetch_add(&check_failures_, 1);                             \
            fprintf(stderr, "FAIL %s: skipped with DDSTORE_TEST_STRICT=1\n",   \
                    (name));                                                   \
        } else {                                                               \
            atomic_fetch_add(&check_skipped_, 1);                              \
        }                                                                      \
    } while (0)

/* "<test>: P passed, F failed, S skipped" (single checks); the exit status. */
static inline int check_finish(const char *test)
{
    int failed = atomic_load(&check_failures_);
    printf("%s: %d passed, %d failed, %d skipped\n", test,
           atomic_load(&check_checks_passed_), failed,
           atomic_load(&check_skipped_));
    fflush(stdout);
    return failed ? 1 : 0;
}

#define CHECK_SUMMARY()                                                        \
    (printf("%d passed, %d failed\n", check_passed_, check_failed_),           \
     fflush(stdout), check_failed_ != 0 ? 1 : 0)

#endif
