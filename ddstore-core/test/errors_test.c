/* errors.h: codes, strings, the thread-local detail; types.h basics. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ddstore/errors.h"
#include "ddstore/types.h"

static void test_strerror_every_code(void)
{
    static const int codes[] = {
        DDS_OK, DDS_ENOENT, DDS_EIO, DDS_ENOMEM, DDS_EBUSY, DDS_EEXIST,
        DDS_EINVAL, DDS_ERANGE, DDS_ENOSYS, DDS_ETIMEDOUT, DDS_ETYPE,
        DDS_EFREED, DDS_EPEER, DDS_ETRANSPORT, DDS_ENOGPU, DDS_ESTALE,
        DDS_ECORRUPT, DDS_ECONFIG};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        const char *a = dds_strerror(codes[i]), *b = dds_strerror(-codes[i]);
        CHECK(a != NULL);
        CHECK_STREQ(a, b);
        if (codes[i] != 0)
            CHECK(strcmp(a, "unknown error") != 0);
    }
    /* distinct messages for distinct codes */
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        for (size_t j = i + 1; j < sizeof(codes) / sizeof(codes[0]); j++)
            CHECK(strcmp(dds_strerror(codes[i]), dds_strerror(codes[j])) != 0);
    CHECK_STREQ(dds_strerror(12345), "unknown error");
    CHECK_STREQ(dds_strerror(-DDS_ELAST), "unknown error");
    CHECK_STREQ(dds_strerror(-2147483647 - 1), "unknown error");
    CHECK_EQ(DDS_ENOENT, 2);
    CHECK_EQ(DDS_EINVAL, 22);
    CHECK_EQ(DDS_ETYPE, 256);
}

static void test_detail(void)
{
    dds_error_clear();
    CHECK_STREQ(dds_last_error(), "");
    CHECK_EQ(dds_error(-DDS_EINVAL, "bad %s %d", "thing", 7), -DDS_EINVAL);
    CHECK_STREQ(dds_last_error(), "bad thing 7");
    dds_error_clear();
    CHECK_STREQ(dds_last_error(), "");
}

static void test_detail_self_reference(void)
{
    /* prefixing the current detail must not read a half-written buffer */
    dds_error(-DDS_EIO, "provider says no");
    dds_error(-DDS_EIO, "rank %d: %s", 3, dds_last_error());
    CHECK_STREQ(dds_last_error(), "rank 3: provider says no");
    dds_error(-DDS_EIO, "%s / %s", dds_last_error(), dds_last_error());
    CHECK_STREQ(dds_last_error(),
                "rank 3: provider says no / rank 3: provider says no");
}

static void test_detail_truncation(void)
{
    char big[4000];
    size_t len;
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    CHECK_EQ(dds_error(-DDS_EINVAL, "%s%s", big, big), -DDS_EINVAL);
    len = strlen(dds_last_error());
    CHECK(len > 400 && len < 512);
    CHECK(strcmp(dds_last_error() + len - 3, "...") == 0);
    /* repeated self-prefixing never overflows */
    for (int i = 0; i < 50; i++)
        dds_error(-DDS_EINVAL, "rank %d: %s", i, dds_last_error());
    CHECK(strlen(dds_last_error()) < 512);
    dds_error(-DDS_EINVAL, NULL);
    CHECK_STREQ(dds_last_error(), "");
}

static void *other_thread(void *arg)
{
    (void)arg;
    CHECK_STREQ(dds_last_error(), ""); /* fresh thread: empty */
    dds_error(-DDS_ERANGE, "from the other thread");
    CHECK_STREQ(dds_last_error(), "from the other thread");
    return NULL;
}

static void test_detail_thread_local(void)
{
    pthread_t t;
    dds_error(-DDS_EINVAL, "main thread");
    pthread_create(&t, NULL, other_thread, NULL);
    pthread_join(t, NULL);
    CHECK_STREQ(dds_last_error(), "main thread");
}

static void test_dtypes_and_version(void)
{
    static const char *const names[] = {"raw",     "bool",    "uint8",
                                        "int32",   "int64",   "float32",
                                        "float64", "float16", "bfloat16"};
    static const size_t sizes[] = {0, 1, 1, 4, 8, 4, 8, 2, 2};
    const char *v = dds_core_version();
    int a, b, c;
    char tail;
    CHECK_EQ(DDS_DTYPE_COUNT, sizeof(sizes) / sizeof(sizes[0]));
    CHECK_EQ(DDS_DTYPE_FLOAT16, 7);   /* in method 2's records: never renumber */
    CHECK_EQ(DDS_DTYPE_BFLOAT16, 8);
    for (int i = 0; i < DDS_DTYPE_COUNT; i++) {
        CHECK_STREQ(dds_dtype_name((dds_dtype_t)i), names[i]);
        CHECK_EQ(dds_dtype_size((dds_dtype_t)i), sizes[i]);
    }
    CHECK_STREQ(dds_dtype_name((dds_dtype_t)99), "unknown");
    CHECK_EQ(dds_dtype_size((dds_dtype_t)-1), 0);
    CHECK(v != NULL);
    CHECK_EQ(sscanf(v, "%d.%d.%d%c", &a, &b, &c, &tail), 3);
#ifdef DDS_TEST_EXPECT_VERSION
    CHECK_STREQ(v, DDS_TEST_EXPECT_VERSION);
#endif
}

int main(void)
{
    RUN_TEST(test_strerror_every_code);
    RUN_TEST(test_detail);
    RUN_TEST(test_detail_self_reference);
    RUN_TEST(test_detail_truncation);
    RUN_TEST(test_detail_thread_local);
    RUN_TEST(test_dtypes_and_version);
    return CHECK_SUMMARY();
}
