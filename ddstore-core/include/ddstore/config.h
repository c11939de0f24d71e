/* ddstore-core: the registry of DDSTORE_* environment variables.
 *
 * Each library declares its variables once, one X-macro line per setting
 * (settings.h), which generates its table, registered once
 * (dds_config_register, idempotent), and its typed struct.  Values are read from the
 * environment at the time of the query, validated against the type, and a
 * bad value is an error naming the variable (-DDS_ECONFIG).  `ddstore-info
 * --env` and docs/environment.md list every registered variable.
 *
 * Thread-safety: registration and queries are safe from any thread.
 */
#ifndef DDSTORE_CONFIG_H
#define DDSTORE_CONFIG_H


#include "ddstore/visibility.h"
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    DDS_CONFIG_BOOL = 0,   /* 0/1, true/false, yes/no, on/off (case-insensitive) */
    DDS_CONFIG_INT = 1,    /* decimal int64, optional K/M/G suffix (x1024)      */
    DDS_CONFIG_DOUBLE = 2,
    DDS_CONFIG_STRING = 3,
    DDS_CONFIG_ENUM = 4,   /* one of `choices` ("a|b|c")                          */
    DDS_CONFIG_SECONDS = 5, /* a duration: seconds > 0, or inf for no limit     */
    DDS_CONFIG_SIZE = 6    /* a count >= 0, optional K/M/G suffix (x1024)       */
} dds_config_type_t;

typedef struct dds_config_entry {
    const char *name;      /* "DDSTORE_READ_TIMEOUT_S"                          */
    dds_config_type_t type;
    const char *defval;    /* default as text; NULL = unset / empty            */
    const char *choices;   /* ENUM only: "auto|cxi|verbs"; else NULL            */
    const char *library;   /* "core", "mpi", "ofi", "gpu", "torch", "python"    */
    const char *help;      /* one line                                          */
} dds_config_entry_t;

/* Register a table (static storage; not copied).  Idempotent per table. */
DDS_API int dds_config_register(const dds_config_entry_t *entries, size_t n);

/* Iterate every registered entry: index 0..count-1; NULL past the end. */
DDS_API size_t dds_config_count(void);
DDS_API const dds_config_entry_t *dds_config_at(size_t i);
DDS_API const dds_config_entry_t *dds_config_find(const char *name);

/* Typed getters: value from the environment, else the default.
 * Return 0 or -DDS_ECONFIG (bad value, detail names the variable and the
 * value) or -DDS_ENOENT (name not registered).  get_int reads INT and SIZE
 * variables (SIZE: a value < 0 is refused), get_double DOUBLE and SECONDS.
 * Code reads its settings through the typed structs of settings.h, once. */
DDS_API int dds_config_get_bool(const char *name, int *value_p);
DDS_API int dds_config_get_int(const char *name, int64_t *value_p);
DDS_API int dds_config_get_double(const char *name, double *value_p);
/* A DOUBLE variable that holds a duration: seconds > 0, or inf ("inf",
 * "infinity") for no limit.  0 and negative values are rejected
 * (-DDS_ECONFIG naming the variable and the value), never taken to mean
 * "no limit". */
DDS_API int dds_config_get_seconds(const char *name, double *value_p);
/* String/enum: the environment's string (a copy kept for the life of the
 * process: later setenv calls do not change it) or the default; may be NULL
 * when unset with no default.  ENUM values come in the spelling of
 * `choices`. */
DDS_API int dds_config_get_string(const char *name, const char **value_p);

/* Validate every registered variable that is set; first error returned. */
DDS_API int dds_config_validate_all(void);

/* Register core's own table (called by dds_store_create; idempotent). */
DDS_API void dds_config_register_core(void);

/* Parse `text` as a boolean with the one rule of every ddstore library and
 * of pyddstore: 1/true/yes/on/y/t or 0/false/no/off/n/f, case-insensitive,
 * surrounding blanks ignored.  0 or -DDS_EINVAL (no detail). */
DDS_API int dds_config_parse_bool(const char *text, int *value_p);

#ifdef __cplusplus
}
#endif
#endif
