/* config.h: registry, typed getters, bad values, core's table. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ddstore/config.h"
#include "ddstore/settings.h"

static const dds_config_entry_t table[] = {
    {"DDSTEST_FLAG", DDS_CONFIG_BOOL, "0", NULL, "test", "a flag"},
    {"DDSTEST_SIZE", DDS_CONFIG_INT, "4K", NULL, "test", "a size"},
    {"DDSTEST_RATIO", DDS_CONFIG_DOUBLE, "0.5", NULL, "test", "a ratio"},
    {"DDSTEST_WORD", DDS_CONFIG_STRING, NULL, NULL, "test", "a word"},
    {"DDSTEST_MODE", DDS_CONFIG_ENUM, "auto", "auto|cxi|verbs", "test",
     "a mode"},
    {"DDSTEST_BADDEF", DDS_CONFIG_INT, "lots", NULL, "test", "bad default"},
};
#define NT (sizeof(table) / sizeof(table[0]))

static void test_register_and_iterate(void)
{
    size_t before = dds_config_count();
    CHECK_OK(dds_config_register(table, NT));
    CHECK_EQ(dds_config_count(), before + NT);
    CHECK_OK(dds_config_register(table, NT)); /* idempotent */
    CHECK_EQ(dds_config_count(), before + NT);
    CHECK(dds_config_find("DDSTEST_SIZE") == &table[1]);
    CHECK(dds_config_find("DDSTEST_NOPE") == NULL);
    CHECK(dds_config_find(NULL) == NULL);
    CHECK(dds_config_at(before) == &table[0]);
    CHECK(dds_config_at(before + NT - 1) == &table[NT - 1]);
    CHECK(dds_config_at(before + NT) == NULL);
}

static void test_bool(void)
{
    static const char *const yes[] = {"1", "true", "TRUE", "yes", "On", " y "};
    static const char *const no[] = {"0", "false", "No", "off", "F"};
    int v = -1;
    unsetenv("DDSTEST_FLAG");
    CHECK_OK(dds_config_get_bool("DDSTEST_FLAG", &v));
    CHECK_EQ(v, 0);
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        setenv("DDSTEST_FLAG", yes[i], 1);
        v = -1;
        CHECK_OK(dds_config_get_bool("DDSTEST_FLAG", &v));
        CHECK_EQ(v, 1);
    }
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        setenv("DDSTEST_FLAG", no[i], 1);
        v = -1;
        CHECK_OK(dds_config_get_bool("DDSTEST_FLAG", &v));
        CHECK_EQ(v, 0);
    }
    setenv("DDSTEST_FLAG", "maybe", 1);
    CHECK_RC(dds_config_get_bool("DDSTEST_FLAG", &v), -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), "DDSTEST_FLAG='maybe'");
    setenv("DDSTEST_FLAG", "", 1); /* empty = unset */
    CHECK_OK(dds_config_get_bool("DDSTEST_FLAG", &v));
    CHECK_EQ(v, 0);
    unsetenv("DDSTEST_FLAG");
}

static void test_int(void)
{
    static const struct {
        const char *text;
        long long value;
    } good[] = {{"0", 0},         {"123", 123},        {"-7", -7},
                {"2k", 2048},     {"3M", 3145728},     {"1G", 1073741824},
                {" 16 ", 16},     {"8G", 8589934592LL},
                {"9223372036854775807", 9223372036854775807LL}};
    static const char *const bad[] = {"abc", "12x", "1.5", "K", "1T",
                                      "99999999999999999999",
                                      "9000000000G", "0x10", "1 2"};
    int64_t v = -1;
    unsetenv("DDSTEST_SIZE");
    CHECK_OK(dds_config_get_int("DDSTEST_SIZE", &v));
    CHECK_EQ(v, 4096);
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        setenv("DDSTEST_SIZE", good[i].text, 1);
        v = -1;
        CHECK_OK(dds_config_get_int("DDSTEST_SIZE", &v));
        CHECK_EQ(v, good[i].value);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char want[64];
        setenv("DDSTEST_SIZE", bad[i], 1);
        CHECK_RC(dds_config_get_int("DDSTEST_SIZE", &v), -DDS_ECONFIG);
        snprintf(want, sizeof(want), "DDSTEST_SIZE='%s'", bad[i]);
        CHECK_CONTAINS(dds_last_error(), want);
    }
    unsetenv("DDSTEST_SIZE");
    /* a bad default is reported too, marked as the default */
    CHECK_RC(dds_config_get_int("DDSTEST_BADDEF", &v), -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), "DDSTEST_BADDEF (default)='lots'");
}

static void test_double(void)
{
    double v = 0;
    unsetenv("DDSTEST_RATIO");
    CHECK_OK(dds_config_get_double("DDSTEST_RATIO", &v));
    CHECK(v == 0.5);
    setenv("DDSTEST_RATIO", "2.5e1", 1);
    CHECK_OK(dds_config_get_double("DDSTEST_RATIO", &v));
    CHECK(v == 25.0);
    setenv("DDSTEST_RATIO", "nan", 1);
    CHECK_RC(dds_config_get_double("DDSTEST_RATIO", &v), -DDS_ECONFIG);
    setenv("DDSTEST_RATIO", "1.0s", 1);
    CHECK_RC(dds_config_get_double("DDSTEST_RATIO", &v), -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), "DDSTEST_RATIO='1.0s'");
    unsetenv("DDSTEST_RATIO");
}

static void test_string_and_enum(void)
{
    const char *s = "unchanged";
    unsetenv("DDSTEST_WORD");
    CHECK_OK(dds_config_get_string("DDSTEST_WORD", &s));
    CHECK(s == NULL);
    setenv("DDSTEST_WORD", "hello world", 1);
    CHECK_OK(dds_config_get_string("DDSTEST_WORD", &s));
    CHECK_STREQ(s, "hello world");
    unsetenv("DDSTEST_WORD");

    unsetenv("DDSTEST_MODE");
    CHECK_OK(dds_config_get_string("DDSTEST_MODE", &s));
    CHECK_STREQ(s, "auto");
    setenv("DDSTEST_MODE", "CXI", 1); /* canonical spelling returned */
    CHECK_OK(dds_config_get_string("DDSTEST_MODE", &s));
    CHECK_STREQ(s, "cxi");
    setenv("DDSTEST_MODE", "tcp", 1);
    CHECK_RC(dds_config_get_string("DDSTEST_MODE", &s), -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), "DDSTEST_MODE='tcp'");
    CHECK_CONTAINS(dds_last_error(), "auto|cxi|verbs");
    unsetenv("DDSTEST_MODE");
}

static void test_wrong_type_and_unknown(void)
{
    int b;
    int64_t i;
    CHECK_RC(dds_config_get_int("DDSTEST_NOT_REGISTERED", &i), -DDS_ENOENT);
    CHECK_RC(dds_config_get_bool("DDSTEST_SIZE", &b), -DDS_EINVAL);
    CHECK_RC(dds_config_get_int(NULL, &i), -DDS_EINVAL);
}

static void test_validate_all(void)
{
    /* the bad default above is not validated (only variables that are set) */
    unsetenv("DDSTEST_BADDEF");
    CHECK_OK(dds_config_validate_all());
    setenv("DDSTEST_SIZE", "12q", 1);
    CHECK_RC(dds_config_validate_all(), -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), "DDSTEST_SIZE='12q'");
    unsetenv("DDSTEST_SIZE");
    CHECK_OK(dds_config_validate_all());
}

static void test_core_table(void)
{
    static const char *const names[] = {
        "DDSTORE_LOG_LEVEL",      "DDSTORE_LOG_SUBSYS",
        "DDSTORE_PROFILE",        "DDSTORE_MAX_READ_BYTES",
        "DDSTORE_MERGE_ROW_BYTES", "DDSTORE_READ_TIMEOUT_S",
        "DDSTORE_METHOD",         "DDSTORE_GPU_STAGING",
        "DDSTORE_GPU_STAGING_BYTES"};
    int64_t v;
    double d;
    const char *s;
    size_t n1;
    dds_config_register_core();
    n1 = dds_config_count();
    dds_config_register_core();
    CHECK_EQ(dds_config_count(), n1);
    /* test hooks are not production settings (tests read them themselves) */
    CHECK(dds_config_find("DDSTORE_TEST_STRICT") == NULL);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const dds_config_entry_t *e = dds_config_find(names[i]);
        CHECK(e != NULL);
        if (e != NULL) {
            CHECK_STREQ(e->library, "core");
            CHECK(e->help != NULL && e->help[0] != '\0');
        }
    }
    unsetenv("DDSTORE_MERGE_ROW_BYTES");
    CHECK_OK(dds_config_get_int("DDSTORE_MERGE_ROW_BYTES", &v));
    CHECK_EQ(v, 65536);
    setenv("DDSTORE_MAX_READ_BYTES", "abc", 1);
    CHECK_RC(dds_config_get_int("DDSTORE_MAX_READ_BYTES", &v), -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), "DDSTORE_MAX_READ_BYTES");
    CHECK_CONTAINS(dds_last_error(), "abc");
    CHECK_RC(dds_config_validate_all(), -DDS_ECONFIG);
    unsetenv("DDSTORE_MAX_READ_BYTES");
    CHECK_OK(dds_config_get_double("DDSTORE_READ_TIMEOUT_S", &d));
    CHECK(d > 0);
    /* DDSTORE_METHOD: an int here; the hub checks it against its backend
     * table (libddstore/test/hub_test.c) */
    setenv("DDSTORE_METHOD", "x", 1);
    CHECK_RC(dds_config_get_int("DDSTORE_METHOD", &v), -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), "DDSTORE_METHOD");
    setenv("DDSTORE_METHOD", "1", 1);
    CHECK_OK(dds_config_get_int("DDSTORE_METHOD", &v));
    CHECK_EQ(v, 1);
    unsetenv("DDSTORE_METHOD");
    setenv("DDSTORE_LOG_LEVEL", "loud", 1);
    CHECK_RC(dds_config_get_string("DDSTORE_LOG_LEVEL", &s), -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), "error|warn|info|debug|trace");
    setenv("DDSTORE_LOG_LEVEL", "DEBUG", 1);
    CHECK_OK(dds_config_get_string("DDSTORE_LOG_LEVEL", &s));
    CHECK_STREQ(s, "debug");
    unsetenv("DDSTORE_LOG_LEVEL");
    {
        int b = -1;
        unsetenv("DDSTORE_GPU_STAGING");
        unsetenv("DDSTORE_GPU_STAGING_BYTES");
        CHECK_OK(dds_config_get_bool("DDSTORE_GPU_STAGING", &b));
        CHECK_EQ(b, 1);
        CHECK_OK(dds_config_get_int("DDSTORE_GPU_STAGING_BYTES", &v));
        CHECK_EQ(v, 256LL << 20);
        setenv("DDSTORE_GPU_STAGING", "off", 1);
        CHECK_OK(dds_config_get_bool("DDSTORE_GPU_STAGING", &b));
        CHECK_EQ(b, 0);
        unsetenv("DDSTORE_GPU_STAGING");
    }
}

/* Durations: > 0 or inf; 0 and negatives are errors naming the variable and
 * the value, never "no timeout" (DDSTORE_READ_TIMEOUT_S=0 used to disable
 * the read timeout silently). */
static void test_seconds(void)
{
    static const char *bad[] = {"0", "-1", "-0.5", "0.0", "-inf"};
    double d = 0;
    dds_config_register_core();
    unsetenv("DDSTORE_READ_TIMEOUT_S");
    CHECK_OK(dds_config_get_seconds("DDSTORE_READ_TIMEOUT_S", &d));
    CHECK(d == 120.0);
    setenv("DDSTORE_READ_TIMEOUT_S", "2.5", 1);
    CHECK_OK(dds_config_get_seconds("DDSTORE_READ_TIMEOUT_S", &d));
    CHECK(d == 2.5);
    setenv("DDSTORE_READ_TIMEOUT_S", "inf", 1);
    CHECK_OK(dds_config_get_seconds("DDSTORE_READ_TIMEOUT_S", &d));
    CHECK(d > 1e300);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        d = 7;
        setenv("DDSTORE_READ_TIMEOUT_S", bad[i], 1);
        CHECK_RC(dds_config_get_seconds("DDSTORE_READ_TIMEOUT_S", &d),
                 -DDS_ECONFIG);
        CHECK_CONTAINS(dds_last_error(), "DDSTORE_READ_TIMEOUT_S");
        CHECK_CONTAINS(dds_last_error(), bad[i]);
        CHECK_CONTAINS(dds_last_error(), "inf");
        CHECK(d == 7); /* untouched */
    }
    setenv("DDSTORE_COLLECTIVE_TIMEOUT_S", "0", 1);
    CHECK_RC(dds_config_get_seconds("DDSTORE_COLLECTIVE_TIMEOUT_S", &d),
             -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), "DDSTORE_COLLECTIVE_TIMEOUT_S='0'");
    unsetenv("DDSTORE_COLLECTIVE_TIMEOUT_S");
    unsetenv("DDSTORE_READ_TIMEOUT_S");
    /* a variable of another type */
    CHECK_RC(dds_config_get_seconds("DDSTORE_MAX_READ_BYTES", &d), -DDS_EINVAL);
}

/* One declaration (settings.h) gives the registry row, the struct field and
 * its read; durations and sizes keep one meaning through every getter. */
#define TEST_SETTINGS(X)                                                       \
    X(flag, "DDSTEST_S_FLAG", BOOL, "1", NULL, "test", "a flag")               \
    X(bytes, "DDSTEST_S_BYTES", SIZE, "2K", NULL, "test", "a size")            \
    X(wait_s, "DDSTEST_S_WAIT", SECONDS, "3", NULL, "test", "a duration")      \
    X(word, "DDSTEST_S_WORD", STRING, NULL, NULL, "test", "a word")
typedef struct {
    DDS_SETTINGS_FIELDS(TEST_SETTINGS)
} test_settings_t;
static const dds_config_entry_t test_rows[] = {DDS_SETTINGS_TABLE(TEST_SETTINGS)};
static DDS_SETTINGS_READER(read_test_settings, test_settings_t, TEST_SETTINGS)

static void test_typed_settings(void)
{
    test_settings_t t;
    dds_settings_t core;
    double d = 0;
    int b = -1;
    CHECK_OK(dds_config_register(test_rows, sizeof test_rows / sizeof test_rows[0]));
    CHECK(dds_config_find("DDSTEST_S_WAIT")->type == DDS_CONFIG_SECONDS);
    CHECK_STREQ(dds_config_find("DDSTEST_S_BYTES")->library, "test");
    CHECK_OK(read_test_settings(&t));
    CHECK_EQ(t.flag, 1);
    CHECK_EQ(t.bytes, 2048);
    CHECK(t.wait_s == 3.0);
    CHECK(t.word == NULL);
    /* strings are copies: a later setenv does not change a value read */
    setenv("DDSTEST_S_WORD", "first", 1);
    CHECK_OK(read_test_settings(&t));
    setenv("DDSTEST_S_WORD", "second", 1);
    CHECK_STREQ(t.word, "first");
    unsetenv("DDSTEST_S_WORD");
    /* a size is >= 0 */
    setenv("DDSTEST_S_BYTES", "-1", 1);
    CHECK_RC(read_test_settings(&t), -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), "DDSTEST_S_BYTES='-1'");
    unsetenv("DDSTEST_S_BYTES");
    /* a duration is > 0 or inf for every getter */
    setenv("DDSTEST_S_WAIT", "0", 1);
    CHECK_RC(read_test_settings(&t), -DDS_ECONFIG);
    CHECK_RC(dds_config_get_double("DDSTEST_S_WAIT", &d), -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), "DDSTEST_S_WAIT='0'");
    setenv("DDSTEST_S_WAIT", "inf", 1);
    CHECK_OK(read_test_settings(&t));
    CHECK(t.wait_s > 1e300);
    unsetenv("DDSTEST_S_WAIT");
    /* core's struct */
    unsetenv("DDSTORE_READ_TIMEOUT_S");
    unsetenv("DDSTORE_METHOD");
    CHECK_OK(dds_settings_read(&core));
    CHECK(core.read_timeout_s == 120.0);
    CHECK(core.collective_timeout_s == 1800.0);
    CHECK_EQ(core.method, 0);
    CHECK_EQ(core.merge_row_bytes, 65536);
    setenv("DDSTORE_READ_TIMEOUT_S", "-1", 1);
    CHECK_RC(dds_settings_read(&core), -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), "DDSTORE_READ_TIMEOUT_S='-1'");
    unsetenv("DDSTORE_READ_TIMEOUT_S");
    /* the one boolean rule */
    CHECK_OK(dds_config_parse_bool(" Yes ", &b));
    CHECK_EQ(b, 1);
    CHECK_OK(dds_config_parse_bool("f", &b));
    CHECK_EQ(b, 0);
    CHECK_RC(dds_config_parse_bool("maybe", &b), -DDS_EINVAL);
    CHECK_RC(dds_config_parse_bool("", &b), -DDS_EINVAL);
}

/* The typed accessors (dds_setting_<field>) read the declared variable
 * with its type and rule; the Python layer's table (owner "torch") is
 * registered with core's, so C parses and checks those too (issue 22). */
static void test_accessors_and_torch_table(void)
{
    double d = 0;
    int64_t v = -1;
    int b = -1;
    const char *s = NULL;
    const dds_config_entry_t *e;

    setenv("DDSTORE_COLLECTIVE_WARN_S", "7.5", 1);
    CHECK_OK(dds_setting_collective_warn_s(&d));
    CHECK(d == 7.5);
    setenv("DDSTORE_COLLECTIVE_WARN_S", "0", 1);
    CHECK_RC(dds_setting_collective_warn_s(&d), -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), "DDSTORE_COLLECTIVE_WARN_S='0'");
    unsetenv("DDSTORE_COLLECTIVE_WARN_S");
    e = dds_setting_entry_collective_timeout_s();
    CHECK(e != NULL && strcmp(e->defval, "1800") == 0);
    setenv("DDSTORE_GPU_STAGING_BYTES", "1M", 1);
    CHECK_OK(dds_setting_gpu_staging_bytes(&v));
    CHECK_EQ(v, 1 << 20);
    unsetenv("DDSTORE_GPU_STAGING_BYTES");
    setenv("DDSTORE_PROFILE", "off", 1);
    CHECK_OK(dds_setting_profile(&b));
    CHECK_EQ(b, 0);
    unsetenv("DDSTORE_PROFILE");
    setenv("DDSTORE_LOG_LEVEL", "Trace", 1);
    CHECK_OK(dds_setting_log_level(&s));
    CHECK_STREQ(s, "trace");
    unsetenv("DDSTORE_LOG_LEVEL");

    e = dds_config_find("DDSTORE_BATCH_GET");
    CHECK(e != NULL && strcmp(e->library, "torch") == 0);
    setenv("DDSTORE_BATCH_GET", "maybe", 1);
    CHECK_RC(dds_config_get_bool("DDSTORE_BATCH_GET", &b), -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), "DDSTORE_BATCH_GET='maybe'");
    CHECK_RC(dds_config_validate_all(), -DDS_ECONFIG);
    unsetenv("DDSTORE_BATCH_GET");
    setenv("DDSTORE_COMM", "FILE", 1);
    CHECK_OK(dds_config_get_string("DDSTORE_COMM", &s));
    CHECK_STREQ(s, "file");
    unsetenv("DDSTORE_COMM");
    setenv("DDSTORE_AFFINITY_WIDTH", "-2", 1);
    CHECK_RC(dds_config_get_int("DDSTORE_AFFINITY_WIDTH", &v), -DDS_ECONFIG);
    unsetenv("DDSTORE_AFFINITY_WIDTH");
}

int main(void)
{
    RUN_TEST(test_register_and_iterate);
    RUN_TEST(test_bool);
    RUN_TEST(test_int);
    RUN_TEST(test_double);
    RUN_TEST(test_string_and_enum);
    RUN_TEST(test_wrong_type_and_unknown);
    RUN_TEST(test_validate_all);
    RUN_TEST(test_core_table);
    RUN_TEST(test_seconds);
    RUN_TEST(test_typed_settings);
    RUN_TEST(test_accessors_and_torch_table);
    return CHECK_SUMMARY();
}
