/* ddstore-core: the logger.
 *
 * Levels x subsystems.  DDSTORE_LOG_LEVEL = error|warn|info|debug|trace
 * (default warn); DDSTORE_LOG_SUBSYS = comma list of core,mpi,ofi,gpu,torch,py
 * or "all" (default all).  Messages go to a replaceable sink (default:
 * stderr), prefixed "ddstore/<subsys>[rank] LEVEL: ".  When a level is off,
 * DDS_LOG costs one load and one compare.
 *
 * Thread-safety: all functions are safe from any thread; dds_log_set_sink
 * should be called before other threads log.
 */
#ifndef DDSTORE_LOG_H
#define DDSTORE_LOG_H


#include "ddstore/visibility.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    DDS_LOG_ERROR = 0,
    DDS_LOG_WARN = 1,
    DDS_LOG_INFO = 2,
    DDS_LOG_DEBUG = 3,
    DDS_LOG_TRACE = 4
} dds_log_level_t;

typedef enum {
    DDS_SUBSYS_CORE = 0,
    DDS_SUBSYS_MPI = 1,
    DDS_SUBSYS_OFI = 2,
    DDS_SUBSYS_GPU = 3,
    DDS_SUBSYS_TORCH = 4,
    DDS_SUBSYS_PY = 5,
    DDS_SUBSYS_COUNT = 6
} dds_log_subsys_t;

/* Sink: receives one fully formatted line without trailing newline. */
typedef void (*dds_log_sink_fn)(void *arg, dds_log_level_t level,
                                dds_log_subsys_t subsys, const char *line);

/* Replace the sink (NULL restores stderr). */
DDS_API void dds_log_set_sink(dds_log_sink_fn fn, void *arg);

/* Rank shown in the prefix (-1: not shown). */
DDS_API void dds_log_set_rank(int rank);

/* Override the level (normally read from DDSTORE_LOG_LEVEL once). */
DDS_API void dds_log_set_level(dds_log_level_t level);

/* Non-zero if messages of this level/subsystem are emitted. */
DDS_API int dds_log_enabled(dds_log_level_t level, dds_log_subsys_t subsys);

DDS_API void dds_log_write(dds_log_level_t level, dds_log_subsys_t subsys,
                   const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#define DDS_LOG(level, subsys, ...)                                            \
    do {                                                                       \
        if (dds_log_enabled((level), (subsys)))                                \
            dds_log_write((level), (subsys), __VA_ARGS__);                     \
    } while (0)

/* Log once per call site (data-path warnings). */
#define DDS_LOG_ONCE(level, subsys, ...)                                       \
    do {                                                                       \
        static int dds_log_once_flag_;                                         \
        if (!__atomic_exchange_n(&dds_log_once_flag_, 1, __ATOMIC_RELAXED))    \
            DDS_LOG(level, subsys, __VA_ARGS__);                               \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
