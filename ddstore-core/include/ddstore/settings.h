/* ddstore-core: typed settings, declared once (the model: aws-ofi-nccl's
 * OFI_NCCL_PARAM).
 *
 * A library lists its settings in one X-macro, one line per setting:
 *
 *   #define MYLIB_SETTINGS(X)                                              \
 *       X(field, "DDSTORE_NAME", TYPE, "default", "a|b" or NULL, "owner", \
 *         "help: meaning, range")
 *
 * TYPE is one of BOOL, INT, SIZE, DOUBLE, SECONDS, STRING, ENUM
 * (config.h's DDS_CONFIG_*).  That one line generates
 *   - the registry row (DDS_SETTINGS_TABLE): `ddstore-info --env`,
 *     docs/environment.md and pyddstore's view (_core.settings()) come from
 *     the registry;
 *   - the field of the library's typed struct (DDS_SETTINGS_FIELDS), of the
 *     C type DDS_SETTING_CTYPE_<TYPE>;
 *   - its read, parse and check (DDS_SETTINGS_READER): every field is read
 *     once, when a store, transport or communicator is created, and handed
 *     down as the struct; a bad value is -DDS_ECONFIG naming the variable
 *     and the value.
 * Adding a setting is adding its line.  Strings point to storage kept for
 * the life of the process.
 */
#ifndef DDSTORE_SETTINGS_H
#define DDSTORE_SETTINGS_H

#include <stdint.h>
#include <string.h>

#include "ddstore/config.h"
#include "ddstore/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DDS_SETTING_CTYPE_BOOL int
#define DDS_SETTING_CTYPE_INT int64_t
#define DDS_SETTING_CTYPE_SIZE int64_t
#define DDS_SETTING_CTYPE_DOUBLE double
#define DDS_SETTING_CTYPE_SECONDS double
#define DDS_SETTING_CTYPE_STRING const char *
#define DDS_SETTING_CTYPE_ENUM const char *

/* One getter per type, for the reader below. */
static inline int dds_setting_read_BOOL(const char *n, int *v) { return dds_config_get_bool(n, v); }
static inline int dds_setting_read_INT(const char *n, int64_t *v) { return dds_config_get_int(n, v); }
static inline int dds_setting_read_SIZE(const char *n, int64_t *v) { return dds_config_get_int(n, v); }
static inline int dds_setting_read_DOUBLE(const char *n, double *v) { return dds_config_get_double(n, v); }
static inline int dds_setting_read_SECONDS(const char *n, double *v) { return dds_config_get_seconds(n, v); }
static inline int dds_setting_read_STRING(const char *n, const char **v) { return dds_config_get_string(n, v); }
static inline int dds_setting_read_ENUM(const char *n, const char **v) { return dds_config_get_string(n, v); }

#define DDS_SETTINGS_FIELD_(f, name, type, def, choices, owner, help) DDS_SETTING_CTYPE_##type f;
#define DDS_SETTINGS_ROW_(f, name, type, def, choices, owner, help) \
    {name, DDS_CONFIG_##type, def, choices, owner, help},
#define DDS_SETTINGS_READ_(f, name, type, def, choices, owner, help) \
    if (rc_ == 0)                                                   \
        rc_ = dds_setting_read_##type(name, &s_->f);

/* The struct's members: typedef struct { DDS_SETTINGS_FIELDS(LIST) } t; */
#define DDS_SETTINGS_FIELDS(LIST) LIST(DDS_SETTINGS_FIELD_)
/* static const dds_config_entry_t tab[] = { DDS_SETTINGS_TABLE(LIST) }; */
#define DDS_SETTINGS_TABLE(LIST) LIST(DDS_SETTINGS_ROW_)
/* int fn(stype *s): every field from the environment (else its default);
 * the table must be registered first.  0 or the first bad value's error. */
#define DDS_SETTINGS_READER(fn, stype, LIST)                                   \
    int fn(stype *s_)                                                          \
    {                                                                          \
        int rc_ = 0;                                                           \
        memset(s_, 0, sizeof(*s_));                                            \
        LIST(DDS_SETTINGS_READ_)                                               \
        return rc_;                                                            \
    }

/* ---- core's settings ---------------------------------------------------- */

#define DDS_CORE_SETTINGS(X)                                                   \
    X(log_level, "DDSTORE_LOG_LEVEL", ENUM, "warn",                            \
      "error|warn|info|debug|trace", "core",                                   \
      "log level of every ddstore library")                                    \
    X(log_subsys, "DDSTORE_LOG_SUBSYS", STRING, "all", NULL, "core",           \
      "comma list of subsystems to log (core,mpi,ofi,gpu,torch,py) or all")    \
    X(profile, "DDSTORE_PROFILE", BOOL, "1", NULL, "core",                     \
      "time reads for get_profile(); 0 keeps counters but skips clocks")       \
    X(max_read_bytes, "DDSTORE_MAX_READ_BYTES", SIZE, "0", NULL, "core",       \
      "split single reads above this many bytes (0 = transport limit only)")   \
    X(merge_row_bytes, "DDSTORE_MERGE_ROW_BYTES", SIZE, "64K", NULL, "core",   \
      "largest row merged into one read through a staging buffer when its "    \
      "destination slots are scattered (0 = 64K)")                             \
    X(read_timeout_s, "DDSTORE_READ_TIMEOUT_S", SECONDS, "120", NULL, "core",  \
      "seconds before a read that made no progress fails with a timeout, for " \
      "every method; > 0, or inf for no limit (0 and negative values are "     \
      "refused)")                                                              \
    X(collective_timeout_s, "DDSTORE_COLLECTIVE_TIMEOUT_S", SECONDS, "1800",   \
      NULL, "core",                                                            \
      "seconds a collective call (add, init, free, epoch_begin/end, "          \
      "DistDataset creation, FileComm steps) waits for every rank before "     \
      "the ranks that arrived fail with a timeout; > 0, or inf for no limit")  \
    X(collective_warn_s, "DDSTORE_COLLECTIVE_WARN_S", SECONDS, "60", NULL,     \
      "core",                                                                  \
      "seconds a collective waits before it logs once (WARN) which call is "   \
      "waiting and, where the communicator can tell, which ranks have not "    \
      "entered it; it then waits on up to DDSTORE_COLLECTIVE_TIMEOUT_S; > 0, " \
      "or inf for no message")                                                 \
    X(method, "DDSTORE_METHOD", INT, "0", NULL, "core",                        \
      "backend, a method of libddstore's backend table, which checks it: "    \
      "0 = MPI RMA, 1 = libfabric, 2 = libfabric with a file handshake "       \
      "(`ddstore-info` lists every one)")                                      \
    X(gpu_staging, "DDSTORE_GPU_STAGING", BOOL, "1", NULL, "core",             \
      "GPU memory that the transport cannot reach (no FI_HMEM: MPI RMA, tcp, " \
      "Debian's libfabric) goes through pinned host staging buffers and host " \
      "mirrors; 0 makes it an error naming the requirement")                   \
    X(gpu_staging_bytes, "DDSTORE_GPU_STAGING_BYTES", SIZE, "256M", NULL,      \
      "core",                                                                  \
      "pinned host bytes the GPU staging pool keeps for reuse (soft limit; "   \
      "0 = 256M)")

/* Settings of the Python layer (pyddstore.torch's DistDataset,
 * ThreadDataLoader and communicator choice), declared here in the same form
 * so that they have one declaration, one parser and one rule with the rest:
 * registered with core's table, read by Python through _core's view
 * (pyddstore/torch/env.py), listed by `ddstore-info` and
 * docs/environment.md.  No C code reads them. */
#define DDS_TORCH_SETTINGS(X)                                                  \
    X(batch_get, "DDSTORE_BATCH_GET", BOOL, "1", NULL, "torch",                \
      "DistDataset.__getitems__ reads one batch per field (0: one read per "   \
      "sample); read when the dataset is created")                             \
    X(fast_collate, "DDSTORE_FAST_COLLATE", BOOL, "1", NULL, "torch",          \
      "ThreadDataLoader reads batches straight into the collated tensors "     \
      "(0: per-sample path + collate_fn)")                                     \
    X(thread_readers, "DDSTORE_THREAD_READERS", BOOL, "1", NULL, "torch",      \
      "ThreadDataLoader opens one reader (endpoint) per worker thread for "    \
      "methods 1/2 (0: threads share the store's reader)")                     \
    X(loader_help, "DDSTORE_LOADER_HELP", BOOL, "1", NULL, "torch",            \
      "ThreadDataLoader: when the training loop asks for a batch that no "     \
      "worker has started, it reads that batch itself instead of waiting for " \
      "a worker (0: only the workers read)")                                   \
    X(batch_pool_bytes, "DDSTORE_BATCH_POOL_BYTES", SIZE, "256M", NULL,        \
      "torch",                                                                 \
      "host bytes of freed direct-collate batch tensors kept for the next "    \
      "batches of the same size (no cold memory, no page faults per batch; "   \
      "a batch is reused only once nothing refers to it); 0 = off; read when " \
      "a dataset is created, one pool per process")                            \
    X(comm, "DDSTORE_COMM", ENUM, "auto", "auto|mpi|torch|file", "torch",      \
      "the communicator kind for comm=None: auto (MPI when pyddstore has it, " \
      "the torch.distributed group under torchrun or without MPI, else a "     \
      "FileComm), mpi, torch or file")                                         \
    X(affinity_width, "DDSTORE_AFFINITY_WIDTH", SIZE, "0", NULL, "torch",      \
      "pin ThreadDataLoader workers: CPUs per local rank (0 = no pinning)")    \
    X(affinity_offset, "DDSTORE_AFFINITY_OFFSET", SIZE, "0", NULL, "torch",    \
      "first CPU used for worker pinning")                                     \
    X(progress, "DDSTORE_PROGRESS", BOOL, "1", NULL, "torch",                  \
      "loading progress on rank 0 while a DistDataset loads: a tqdm bar on a " \
      "terminal, else a line on stderr every 5 s (percent, samples/s, ETA)")   \
    X(snapshot_verify, "DDSTORE_SNAPSHOT_VERIFY", BOOL, "1", NULL, "torch",    \
      "attach(): check the CRC-32 of every 64 KiB chunk of a snapshot that it " \
      "reads (0: the files' sizes, headers and ids only; ddstore-snapshot "    \
      "verify checks every chunk)")                                            \
    X(mpi, "DDSTORE_MPI", BOOL, "1", NULL, "torch",                            \
      "0: do not use MPI for comm=None even when pyddstore has it")            \
    X(loader_report, "DDSTORE_LOADER_REPORT", STRING, "0", NULL, "torch",      \
      "ThreadDataLoader(report=None): 1 = a summary of where each epoch's "    \
      "time went on rank 0 at epoch end (collective: gathers the per-rank "    \
      "spread); a path = also append the figures there as one JSON line per "  \
      "epoch; 0 = off")

/* Core's settings, read once by dds_settings_read. */
typedef struct dds_settings {
    DDS_SETTINGS_FIELDS(DDS_CORE_SETTINGS)
} dds_settings_t;

/* Register core's table and read every core setting.  0 or -DDS_ECONFIG
 * (detail: "VARIABLE='value': expected ..."). */
DDS_API int dds_settings_read(dds_settings_t *s);

/* Typed accessors, one per core setting, generated from the declaration
 * (aws-ofi-nccl's OFI_NCCL_PARAM getters): for the few readers that run
 * before any store hands them the struct (the logger and the profiler at
 * process start, a communicator created before its store):
 *   int dds_setting_<field>(ctype *v)   the value (environment, else the
 *                                        default), checked; -DDS_ECONFIG
 *                                        names the variable and the value
 *   const dds_config_entry_t *dds_setting_entry_<field>(void)
 *                                        its registry row (default, help)
 * They register core's table first.  Code never names a setting by string. */
#define DDS_SETTINGS_ACCESSOR_(f, name, type, def, choices, owner, help)      \
    static inline int dds_setting_##f(DDS_SETTING_CTYPE_##type *v)           \
    {                                                                          \
        dds_config_register_core();                                            \
        return dds_setting_read_##type(name, v);                               \
    }                                                                          \
    static inline const dds_config_entry_t *dds_setting_entry_##f(void)       \
    {                                                                          \
        dds_config_register_core();                                            \
        return dds_config_find(name);                                          \
    }
DDS_CORE_SETTINGS(DDS_SETTINGS_ACCESSOR_)

#ifdef __cplusplus
}
#endif
#endif
