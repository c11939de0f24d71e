/* log.h: levels, subsystems, prefix, sink, environment. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "ddstore/log.h"

#define MAX_LINES 16
static char lines[MAX_LINES][1100];
static int levels[MAX_LINES], subsystems[MAX_LINES];
static int nlines;

static void capture(void *arg, dds_log_level_t level, dds_log_subsys_t subsys,
                    const char *line)
{
    int *calls = arg;
    (*calls)++;
    if (nlines < MAX_LINES) {
        snprintf(lines[nlines], sizeof(lines[0]), "%s", line);
        levels[nlines] = (int)level;
        subsystems[nlines] = (int)subsys;
        nlines++;
    }
}

/* Runs `fn` in a forked child so that the environment is read fresh;
 * returns the child's number of failed checks (or 99 on a crash). */
static int in_child(void (*fn)(void))
{
    pid_t pid;
    int status = 0;
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
        fn();
        _exit(CHECK_FAILURES() > 0 ? 1 : 0);
    }
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return 99;
    return WEXITSTATUS(status);
}

static void child_env_levels(void)
{
    int calls = 0;
    setenv("DDSTORE_LOG_LEVEL", "Info", 1);
    setenv("DDSTORE_LOG_SUBSYS", " core , ofi", 1);
    CHECK(dds_log_enabled(DDS_LOG_INFO, DDS_SUBSYS_CORE));
    CHECK(dds_log_enabled(DDS_LOG_ERROR, DDS_SUBSYS_OFI));
    CHECK(!dds_log_enabled(DDS_LOG_DEBUG, DDS_SUBSYS_CORE));
    CHECK(!dds_log_enabled(DDS_LOG_ERROR, DDS_SUBSYS_MPI));
    CHECK(!dds_log_enabled(DDS_LOG_WARN, DDS_SUBSYS_PY));
    /* read once: later changes of the environment do not matter */
    setenv("DDSTORE_LOG_LEVEL", "trace", 1);
    CHECK(!dds_log_enabled(DDS_LOG_TRACE, DDS_SUBSYS_CORE));
    dds_log_set_sink(capture, &calls);
    DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_OFI, "hello %d", 1);
    DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_MPI, "not shown");
    CHECK_EQ(calls, 1);
    CHECK_STREQ(lines[0], "ddstore/ofi INFO: hello 1");
}

static void child_env_bad(void)
{
    int calls = 0;
    setenv("DDSTORE_LOG_LEVEL", "loud", 1);
    setenv("DDSTORE_LOG_SUBSYS", "core,bogus", 1);
    dds_log_set_sink(capture, &calls);
    /* falls back to warn / all, and says so once */
    CHECK(dds_log_enabled(DDS_LOG_WARN, DDS_SUBSYS_MPI));
    CHECK(!dds_log_enabled(DDS_LOG_INFO, DDS_SUBSYS_CORE));
    CHECK_EQ(calls, 2);
    CHECK_CONTAINS(lines[0], "DDSTORE_LOG_LEVEL='loud'");
    CHECK_CONTAINS(lines[1], "DDSTORE_LOG_SUBSYS='core,bogus'");
    CHECK_EQ(levels[0], DDS_LOG_WARN);
}

static void child_env_defaults(void)
{
    unsetenv("DDSTORE_LOG_LEVEL");
    unsetenv("DDSTORE_LOG_SUBSYS");
    CHECK(dds_log_enabled(DDS_LOG_WARN, DDS_SUBSYS_TORCH));
    CHECK(dds_log_enabled(DDS_LOG_ERROR, DDS_SUBSYS_CORE));
    CHECK(!dds_log_enabled(DDS_LOG_INFO, DDS_SUBSYS_CORE));
}

static void test_environment(void)
{
    CHECK_EQ(in_child(child_env_levels), 0);
    CHECK_EQ(in_child(child_env_bad), 0);
    CHECK_EQ(in_child(child_env_defaults), 0);
}

static void test_prefix_sink_rank(void)
{
    int calls = 0;
    char longmsg[3000];
    nlines = 0;
    dds_log_set_level(DDS_LOG_DEBUG);
    dds_log_set_sink(capture, &calls);
    DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_CORE, "no rank yet");
    dds_log_set_rank(3);
    DDS_LOG(DDS_LOG_ERROR, DDS_SUBSYS_GPU, "x=%d\n", 5);
    DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_TORCH, "dbg");
    DDS_LOG(DDS_LOG_TRACE, DDS_SUBSYS_TORCH, "not shown");
    dds_log_write(DDS_LOG_INFO, DDS_SUBSYS_PY, "direct");
    CHECK_EQ(calls, 4);
    CHECK_STREQ(lines[0], "ddstore/core WARN: no rank yet");
    CHECK_STREQ(lines[1], "ddstore/gpu[3] ERROR: x=5");
    CHECK_STREQ(lines[2], "ddstore/torch[3] DEBUG: dbg");
    CHECK_STREQ(lines[3], "ddstore/py[3] INFO: direct");
    CHECK_EQ(subsystems[1], DDS_SUBSYS_GPU);
    CHECK_EQ(levels[2], DDS_LOG_DEBUG);

    memset(longmsg, 'y', sizeof(longmsg) - 1);
    longmsg[sizeof(longmsg) - 1] = '\0';
    DDS_LOG(DDS_LOG_ERROR, DDS_SUBSYS_CORE, "%s", longmsg);
    CHECK_EQ(calls, 5);
    CHECK(strlen(lines[4]) < 1024);
    CHECK(strcmp(lines[4] + strlen(lines[4]) - 3, "...") == 0);

    /* set_level applies to every enabled subsystem */
    dds_log_set_level(DDS_LOG_ERROR);
    CHECK(!dds_log_enabled(DDS_LOG_WARN, DDS_SUBSYS_CORE));
    CHECK(dds_log_enabled(DDS_LOG_ERROR, DDS_SUBSYS_OFI));
    /* out-of-range subsystem is treated as core, never crashes */
    CHECK(dds_log_enabled(DDS_LOG_ERROR, (dds_log_subsys_t)42));

    dds_log_set_sink(NULL, NULL);
    dds_log_set_rank(-1);
}

static void test_log_once(void)
{
    int calls = 0;
    dds_log_set_level(DDS_LOG_WARN);
    dds_log_set_sink(capture, &calls);
    for (int i = 0; i < 5; i++)
        DDS_LOG_ONCE(DDS_LOG_WARN, DDS_SUBSYS_CORE, "once %d", i);
    CHECK_EQ(calls, 1);
    dds_log_set_sink(NULL, NULL);
}

int main(void)
{
    RUN_TEST(test_environment); /* first: children must start fresh */
    RUN_TEST(test_prefix_sink_rank);
    RUN_TEST(test_log_once);
    return CHECK_SUMMARY();
}
