/* ddstore-core: the logger.
 *
 * State: one threshold per subsystem (g_level[s]: messages with level <=
 * g_level[s] are emitted, -1 = subsystem off).  Before the environment has
 * been read the thresholds hold LEVEL_UNREAD, which is above every level, so
 * the first dds_log_enabled() call of any level takes the slow path once and
 * reads DDSTORE_LOG_LEVEL / DDSTORE_LOG_SUBSYS (their typed accessors,
 * settings.h) under pthread_once.  After
 * that, a disabled level costs one relaxed load and one compare.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dds_internal.h"
#include "ddstore/errors.h"
#include "ddstore/log.h"
#include "ddstore/settings.h"

#define LEVEL_UNREAD 100
#define LOG_LINE_MAX 1024

static _Atomic int g_level[DDS_SUBSYS_COUNT] = {
    LEVEL_UNREAD, LEVEL_UNREAD, LEVEL_UNREAD,
    LEVEL_UNREAD, LEVEL_UNREAD, LEVEL_UNREAD};
static _Atomic int g_base_level = DDS_LOG_WARN;
static _Atomic unsigned g_mask = (1u << DDS_SUBSYS_COUNT) - 1u;
static _Atomic int g_rank = -1;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_sink_mutex = PTHREAD_MUTEX_INITIALIZER;
static dds_log_sink_fn g_sink_fn;
static void *g_sink_arg;

static const char *const subsys_names[DDS_SUBSYS_COUNT] = {
    "core", "mpi", "ofi", "gpu", "torch", "py"};
static const char *const level_names[] = {"ERROR", "WARN", "INFO", "DEBUG",
                                          "TRACE"};

int dds_log_parse_level(const char *text, int *level_p)
{
    static const char *const lower[] = {"error", "warn", "info", "debug",
                                        "trace"};
    if (text == NULL)
        return -1;
    for (int i = 0; i < 5; i++) {
        if (strcasecmp(text, lower[i]) == 0) {
            *level_p = i;
            return 0;
        }
    }
    if (strcasecmp(text, "warning") == 0) {
        *level_p = DDS_LOG_WARN;
        return 0;
    }
    if (text[0] >= '0' && text[0] <= '4' && text[1] == '\0') {
        *level_p = text[0] - '0';
        return 0;
    }
    return -1;
}

int dds_log_parse_subsys(const char *text, unsigned *mask_p)
{
    unsigned mask = 0;
    const char *p = text;

    if (text == NULL || text[0] == '\0') {
        *mask_p = (1u << DDS_SUBSYS_COUNT) - 1u;
        return 0;
    }
    while (*p != '\0') {
        const char *start, *end;
        size_t len;
        int found = 0;

        while (*p == ',' || isspace((unsigned char)*p))
            p++;
        if (*p == '\0')
            break;
        start = p;
        while (*p != '\0' && *p != ',')
            p++;
        end = p;
        while (end > start && isspace((unsigned char)end[-1]))
            end--;
        len = (size_t)(end - start);
        if (len == 3 && strncasecmp(start, "all", 3) == 0) {
            mask = (1u << DDS_SUBSYS_COUNT) - 1u;
            found = 1;
        } else if (len == 6 && strncasecmp(start, "python", 6) == 0) {
            mask |= 1u << DDS_SUBSYS_PY;
            found = 1;
        } else {
            for (int i = 0; i < DDS_SUBSYS_COUNT; i++) {
                if (strlen(subsys_names[i]) == len &&
                    strncasecmp(start, subsys_names[i], len) == 0) {
                    mask |= 1u << i;
                    found = 1;
                    break;
                }
            }
        }
        if (!found)
            return dds_error(-DDS_ECONFIG,
                             "DDSTORE_LOG_SUBSYS='%s': unknown subsystem "
                             "'%.*s' (expected all or a comma list of "
                             "core,mpi,ofi,gpu,torch,py)",
                             text, (int)len, start);
    }
    *mask_p = mask;
    return 0;
}

static void apply_thresholds(void)
{
    int level = atomic_load_explicit(&g_base_level, memory_order_relaxed);
    unsigned mask = atomic_load_explicit(&g_mask, memory_order_relaxed);
    for (int s = 0; s < DDS_SUBSYS_COUNT; s++)
        atomic_store_explicit(&g_level[s], (mask & (1u << s)) ? level : -1,
                              memory_order_relaxed);
}

/* DDSTORE_LOG_LEVEL and DDSTORE_LOG_SUBSYS, read once at the first log
 * call of the process through their declaration (settings.h; the
 * registry's parse and rule, as everywhere else).  A bad value is logged
 * once and the default kept: logging never fails a caller. */
static void log_init_once(void)
{
    const char *lv = NULL, *ss = NULL;
    int level = DDS_LOG_WARN;
    unsigned mask = (1u << DDS_SUBSYS_COUNT) - 1u;
    char saved[512], bad_level[300] = "", bad_subsys[300] = "";

    /* Reading may record an error detail; keep the caller's. */
    snprintf(saved, sizeof(saved), "%s", dds_last_error());
    if (dds_setting_log_level(&lv) != 0 ||
        (lv != NULL && dds_log_parse_level(lv, &level) != 0)) {
        level = DDS_LOG_WARN;
        snprintf(bad_level, sizeof(bad_level), "%s", dds_last_error());
    }
    if (dds_setting_log_subsys(&ss) != 0) {
        snprintf(bad_subsys, sizeof(bad_subsys), "%s", dds_last_error());
    } else if (ss != NULL && ss[0] != '\0' &&
               dds_log_parse_subsys(ss, &mask) != 0) {
        mask = (1u << DDS_SUBSYS_COUNT) - 1u;
        snprintf(bad_subsys, sizeof(bad_subsys),
                 "DDSTORE_LOG_SUBSYS='%s' is not a comma list of "
                 "core,mpi,ofi,gpu,torch,py or all", ss);
    }
    dds_error(0, "%s", saved);
    atomic_store_explicit(&g_base_level, level, memory_order_relaxed);
    atomic_store_explicit(&g_mask, mask, memory_order_relaxed);
    apply_thresholds();
    if (bad_level[0])
        dds_log_write(DDS_LOG_WARN, DDS_SUBSYS_CORE, "%s; using warn",
                      bad_level);
    if (bad_subsys[0])
        dds_log_write(DDS_LOG_WARN, DDS_SUBSYS_CORE, "%s; using all",
                      bad_subsys);
}

void dds_log_set_sink(dds_log_sink_fn fn, void *arg)
{
    pthread_mutex_lock(&g_sink_mutex);
    g_sink_fn = fn;
    g_sink_arg = fn != NULL ? arg : NULL;
    pthread_mutex_unlock(&g_sink_mutex);
}

void dds_log_set_rank(int rank)
{
    atomic_store_explicit(&g_rank, rank < 0 ? -1 : rank, memory_order_relaxed);
}

int dds_log_rank_is_set(void)
{
    return atomic_load_explicit(&g_rank, memory_order_relaxed) >= 0;
}

void dds_log_set_level(dds_log_level_t level)
{
    int lv = (int)level;
    pthread_once(&g_once, log_init_once);
    if (lv < DDS_LOG_ERROR)
        lv = DDS_LOG_ERROR;
    if (lv > DDS_LOG_TRACE)
        lv = DDS_LOG_TRACE;
    atomic_store_explicit(&g_base_level, lv, memory_order_relaxed);
    apply_thresholds();
}

int dds_log_enabled(dds_log_level_t level, dds_log_subsys_t subsys)
{
    unsigned s = (unsigned)subsys < DDS_SUBSYS_COUNT ? (unsigned)subsys
                                                       : DDS_SUBSYS_CORE;
    int t = atomic_load_explicit(&g_level[s], memory_order_relaxed);
    if (DDS_LIKELY((int)level > t))
        return 0;
    if (DDS_UNLIKELY(t == LEVEL_UNREAD)) {
        pthread_once(&g_once, log_init_once);
        t = atomic_load_explicit(&g_level[s], memory_order_relaxed);
        return (int)level <= t;
    }
    return 1;
}

void dds_log_write(dds_log_level_t level, dds_log_subsys_t subsys,
                   const char *fmt, ...)
{
    char line[LOG_LINE_MAX];
    unsigned s = (unsigned)subsys < DDS_SUBSYS_COUNT ? (unsigned)subsys
                                                       : DDS_SUBSYS_CORE;
    int lv = (int)level;
    int rank = atomic_load_explicit(&g_rank, memory_order_relaxed);
    int n;
    dds_log_sink_fn fn;
    void *arg;
    va_list ap;

    if (lv < DDS_LOG_ERROR)
        lv = DDS_LOG_ERROR;
    if (lv > DDS_LOG_TRACE)
        lv = DDS_LOG_TRACE;
    if (rank >= 0)
        n = snprintf(line, sizeof(line), "ddstore/%s[%d] %s: ",
                     subsys_names[s], rank, level_names[lv]);
    else
        n = snprintf(line, sizeof(line), "ddstore/%s %s: ", subsys_names[s],
                     level_names[lv]);
    if (n < 0)
        n = 0;
    if (fmt != NULL && (size_t)n < sizeof(line)) {
        va_start(ap, fmt);
        int m = vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
        va_end(ap);
        if (m > 0 && (size_t)n + (size_t)m >= sizeof(line))
            memcpy(line + sizeof(line) - 4, "...", 4);
    }
    /* Strip trailing newlines: the sink gets one line without it. */
    n = (int)strlen(line);
    while (n > 0 && line[n - 1] == '\n')
        line[--n] = '\0';

    pthread_mutex_lock(&g_sink_mutex);
    fn = g_sink_fn;
    arg = g_sink_arg;
    pthread_mutex_unlock(&g_sink_mutex);
    if (fn != NULL)
        fn(arg, (dds_log_level_t)lv, (dds_log_subsys_t)s, line);
    else
        fprintf(stderr, "%s\n", line);
}
