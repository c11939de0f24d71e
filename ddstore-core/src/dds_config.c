/* ddstore-core: the registry of DDSTORE_* environment variables.
 *
 * Tables are registered by pointer (static storage, not copied) into a
 * process-wide list guarded by a mutex.  Values are read from the
 * environment at query time.  ENUM values are returned in the canonical
 * spelling of `choices` (matched case-insensitively), so callers may
 * compare them with strcmp.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dds_internal.h"
#include "ddstore/config.h"
#include "ddstore/errors.h"
#include "ddstore/log.h"
#include "ddstore/settings.h"

typedef struct cfg_table {
    const dds_config_entry_t *entries;
    size_t n;
    /* per entry: NULL-terminated canonical choice strings (ENUM only) */
    char ***choices;
} cfg_table_t;

static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
static cfg_table_t *g_tables;
static size_t g_ntables, g_cap_tables;

/* ---- parsing ---------------------------------------------------------- */

static int is_blank(const char *s)
{
    while (*s != '\0' && isspace((unsigned char)*s))
        s++;
    return *s == '\0';
}

static int parse_bool(const char *s, int *v)
{
    static const char *const t[] = {"1", "true", "yes", "on", "y", "t"};
    static const char *const f[] = {"0", "false", "no", "off", "n", "f"};
    char buf[16];
    size_t len;

    while (isspace((unsigned char)*s))
        s++;
    len = strlen(s);
    while (len > 0 && isspace((unsigned char)s[len - 1]))
        len--;
    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        if (strcasecmp(buf, t[i]) == 0) {
            *v = 1;
            return 0;
        }
        if (strcasecmp(buf, f[i]) == 0) {
            *v = 0;
            return 0;
        }
    }
    return -1;
}

int dds_config_parse_bool(const char *text, int *value_p)
{
    int v = 0;
    if (text == NULL || parse_bool(text, &v) != 0)
        return -DDS_EINVAL;
    if (value_p != NULL)
        *value_p = v;
    return 0;
}

static int parse_int(const char *s, int64_t *v)
{
    char *end;
    long long x;
    int64_t mult = 1;

    while (isspace((unsigned char)*s))
        s++;
    if (*s == '\0')
        return -1;
    errno = 0;
    x = strtoll(s, &end, 10);
    if (end == s || errno == ERANGE)
        return -1;
    switch (*end) {
    case 'k': case 'K': mult = 1024; end++; break;
    case 'm': case 'M': mult = 1024 * 1024; end++; break;
    case 'g': case 'G': mult = 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    while (isspace((unsigned char)*end))
        end++;
    if (*end != '\0')
        return -1;
    if (mult != 1 && (x > INT64_MAX / mult || x < INT64_MIN / mult))
        return -1;
    *v = (int64_t)x * mult;
    return 0;
}

static int parse_double(const char *s, double *v)
{
    char *end;
    double x;

    while (isspace((unsigned char)*s))
        s++;
    if (*s == '\0')
        return -1;
    errno = 0;
    x = strtod(s, &end);
    /* finite numbers, and +inf ("inf", "infinity") for "no limit" */
    if (end == s || errno == ERANGE || isnan(x) || (isinf(x) && x < 0))
        return -1;
    while (isspace((unsigned char)*end))
        end++;
    if (*end != '\0')
        return -1;
    *v = x;
    return 0;
}

static char **split_choices(const char *choices)
{
    size_t len, n = 1;
    char **v;
    char *text;

    if (choices == NULL)
        return NULL;
    len = strlen(choices);
    for (size_t i = 0; i < len; i++)
        n += choices[i] == '|';
    /* one block: pointer array, then the text */
    v = malloc((n + 1) * sizeof(char *) + len + 1);
    if (v == NULL)
        return NULL;
    text = (char *)(v + n + 1);
    memcpy(text, choices, len + 1);
    n = 0;
    v[n++] = text;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '|') {
            text[i] = '\0';
            v[n++] = text + i + 1;
        }
    }
    v[n] = NULL;
    return v;
}

/* ---- registry --------------------------------------------------------- */

int dds_config_register(const dds_config_entry_t *entries, size_t n)
{
    cfg_table_t *t;
    char ***choices = NULL;

    if (entries == NULL && n > 0)
        return dds_error(-DDS_EINVAL, "dds_config_register: NULL table");
    pthread_mutex_lock(&g_mutex);
    for (size_t i = 0; i < g_ntables; i++) {
        if (g_tables[i].entries == entries) {
            pthread_mutex_unlock(&g_mutex);
            return 0;
        }
    }
    if (g_ntables == g_cap_tables) {
        size_t cap = g_cap_tables ? 2 * g_cap_tables : 8;
        cfg_table_t *nt = realloc(g_tables, cap * sizeof(*nt));
        if (nt == NULL)
            goto nomem;
        g_tables = nt;
        g_cap_tables = cap;
    }
    if (n > 0) {
        choices = calloc(n, sizeof(*choices));
        if (choices == NULL)
            goto nomem;
        for (size_t i = 0; i < n; i++) {
            if (entries[i].type == DDS_CONFIG_ENUM &&
                entries[i].choices != NULL) {
                choices[i] = split_choices(entries[i].choices);
                if (choices[i] == NULL)
                    goto nomem;
            }
        }
    }
    t = &g_tables[g_ntables++];
    t->entries = entries;
    t->n = n;
    t->choices = choices;
    pthread_mutex_unlock(&g_mutex);
    return 0;

nomem:
    if (choices != NULL) {
        for (size_t i = 0; i < n; i++)
            free(choices[i]);
        free(choices);
    }
    pthread_mutex_unlock(&g_mutex);
    return dds_error(-DDS_ENOMEM, "dds_config_register: out of memory");
}

size_t dds_config_count(void)
{
    size_t n = 0;
    pthread_mutex_lock(&g_mutex);
    for (size_t i = 0; i < g_ntables; i++)
        n += g_tables[i].n;
    pthread_mutex_unlock(&g_mutex);
    return n;
}

const dds_config_entry_t *dds_config_at(size_t i)
{
    const dds_config_entry_t *e = NULL;
    pthread_mutex_lock(&g_mutex);
    for (size_t t = 0; t < g_ntables; t++) {
        if (i < g_tables[t].n) {
            e = &g_tables[t].entries[i];
            break;
        }
        i -= g_tables[t].n;
    }
    pthread_mutex_unlock(&g_mutex);
    return e;
}

/* Caller holds g_mutex. */
static const dds_config_entry_t *find_locked(const char *name,
                                             char ***choices_p)
{
    for (size_t t = 0; t < g_ntables; t++) {
        for (size_t i = 0; i < g_tables[t].n; i++) {
            const dds_config_entry_t *e = &g_tables[t].entries[i];
            if (e->name != NULL && strcmp(e->name, name) == 0) {
                if (choices_p != NULL)
                    *choices_p =
                        g_tables[t].choices ? g_tables[t].choices[i] : NULL;
                return e;
            }
        }
    }
    return NULL;
}

const dds_config_entry_t *dds_config_find(const char *name)
{
    const dds_config_entry_t *e;
    if (name == NULL)
        return NULL;
    pthread_mutex_lock(&g_mutex);
    e = find_locked(name, NULL);
    pthread_mutex_unlock(&g_mutex);
    return e;
}

/* The text to use: the environment's value unless unset or blank, else the
 * default.  *from_env_p tells which. */
static const char *value_text(const dds_config_entry_t *e, int *from_env_p)
{
    const char *s = getenv(e->name);
    if (s != NULL && !is_blank(s)) {
        *from_env_p = 1;
        return s;
    }
    *from_env_p = 0;
    return e->defval;
}

static int lookup(const char *name, dds_config_type_t want1,
                  dds_config_type_t want2, const dds_config_entry_t **e_p,
                  char ***choices_p)
{
    const dds_config_entry_t *e;
    if (name == NULL)
        return dds_error(-DDS_EINVAL, "config: NULL variable name");
    pthread_mutex_lock(&g_mutex);
    e = find_locked(name, choices_p);
    pthread_mutex_unlock(&g_mutex);
    if (e == NULL)
        return dds_error(-DDS_ENOENT, "config: %s is not a registered "
                                      "variable", name);
    if (e->type != want1 && e->type != want2)
        return dds_error(-DDS_EINVAL, "config: %s is not of the requested "
                                      "type", name);
    *e_p = e;
    return 0;
}

static int bad_value(const dds_config_entry_t *e, const char *text,
                     int from_env, const char *expected)
{
    return dds_error(-DDS_ECONFIG, "%s%s='%s': expected %s", e->name,
                     from_env ? "" : " (default)", text, expected);
}

static int not_seconds(const dds_config_entry_t *e, const char *text,
                       int from_env)
{
    return dds_error(-DDS_ECONFIG,
                     "%s%s='%s': must be > 0 seconds, or inf for no limit "
                     "(0 or a negative value does not mean \"no timeout\")",
                     e->name, from_env ? "" : " (default)",
                     text != NULL ? text : "");
}

int dds_config_get_bool(const char *name, int *value_p)
{
    const dds_config_entry_t *e;
    const char *text;
    int from_env, v = 0, rc;

    rc = lookup(name, DDS_CONFIG_BOOL, DDS_CONFIG_BOOL, &e, NULL);
    if (rc != 0)
        return rc;
    text = value_text(e, &from_env);
    if (text != NULL && parse_bool(text, &v) != 0)
        return bad_value(e, text, from_env,
                         "a boolean (0/1, true/false, yes/no, on/off)");
    if (value_p != NULL)
        *value_p = v;
    return 0;
}

int dds_config_get_int(const char *name, int64_t *value_p)
{
    const dds_config_entry_t *e;
    const char *text;
    int from_env, rc;
    int64_t v = 0;

    rc = lookup(name, DDS_CONFIG_INT, DDS_CONFIG_SIZE, &e, NULL);
    if (rc != 0)
        return rc;
    text = value_text(e, &from_env);
    if (text != NULL && parse_int(text, &v) != 0)
        return bad_value(e, text, from_env,
                         e->type == DDS_CONFIG_SIZE
                             ? "a count >= 0 with an optional K/M/G suffix"
                             : "a decimal integer with an optional K/M/G "
                               "suffix");
    if (e->type == DDS_CONFIG_SIZE && v < 0)
        return bad_value(e, text, from_env,
                         "a count >= 0 with an optional K/M/G suffix");
    if (value_p != NULL)
        *value_p = v;
    return 0;
}

int dds_config_get_double(const char *name, double *value_p)
{
    const dds_config_entry_t *e;
    const char *text;
    int from_env, rc;
    double v = 0.0;

    rc = lookup(name, DDS_CONFIG_DOUBLE, DDS_CONFIG_SECONDS, &e, NULL);
    if (rc != 0)
        return rc;
    text = value_text(e, &from_env);
    if (text != NULL && parse_double(text, &v) != 0)
        return bad_value(e, text, from_env,
                         e->type == DDS_CONFIG_SECONDS
                             ? "seconds > 0, or inf for no limit"
                             : "a number (or inf)");
    if (e->type == DDS_CONFIG_SECONDS && !(v > 0))
        return not_seconds(e, text, from_env);
    if (value_p != NULL)
        *value_p = v;
    return 0;
}

int dds_config_get_seconds(const char *name, double *value_p)
{
    const dds_config_entry_t *e;
    const char *text;
    int from_env, rc;
    double v = 0.0;

    rc = dds_config_get_double(name, &v);
    if (rc != 0)
        return rc;
    if (!(v > 0)) {
        rc = lookup(name, DDS_CONFIG_DOUBLE, DDS_CONFIG_SECONDS, &e, NULL);
        if (rc != 0)
            return rc;
        text = value_text(e, &from_env);
        return not_seconds(e, text, from_env);
    }
    if (value_p != NULL)
        *value_p = v;
    return 0;
}

/* A copy of `s` kept for the life of the process, one per distinct value
 * (settings read once keep pointing to it whatever setenv does later). */
typedef struct interned {
    struct interned *next;
    char text[];
} interned_t;
static interned_t *g_interned;

static const char *intern(const char *s)
{
    interned_t *p;
    size_t len = strlen(s);
    pthread_mutex_lock(&g_mutex);
    for (p = g_interned; p != NULL; p = p->next)
        if (strcmp(p->text, s) == 0)
            break;
    if (p == NULL && (p = malloc(sizeof(*p) + len + 1)) != NULL) {
        memcpy(p->text, s, len + 1);
        p->next = g_interned;
        g_interned = p;
    }
    pthread_mutex_unlock(&g_mutex);
    return p != NULL ? p->text : NULL;
}

static int match_choice(char **choices, const char *text, const char **out)
{
    char buf[256];
    size_t len;

    while (isspace((unsigned char)*text))
        text++;
    len = strlen(text);
    while (len > 0 && isspace((unsigned char)text[len - 1]))
        len--;
    if (len >= sizeof(buf))
        return -1;
    memcpy(buf, text, len);
    buf[len] = '\0';
    for (size_t i = 0; choices != NULL && choices[i] != NULL; i++) {
        if (strcasecmp(buf, choices[i]) == 0) {
            *out = choices[i];
            return 0;
        }
    }
    return -1;
}

int dds_config_get_string(const char *name, const char **value_p)
{
    const dds_config_entry_t *e;
    char **choices = NULL;
    const char *text, *v;
    int from_env, rc;

    rc = lookup(name, DDS_CONFIG_STRING, DDS_CONFIG_ENUM, &e, &choices);
    if (rc != 0)
        return rc;
    text = value_text(e, &from_env);
    v = text;
    if (e->type == DDS_CONFIG_ENUM && text != NULL &&
        match_choice(choices, text, &v) != 0) {
        char expected[300];
        snprintf(expected, sizeof(expected), "one of %s",
                 e->choices != NULL ? e->choices : "(no choices)");
        return bad_value(e, text, from_env, expected);
    }
    if (from_env && v == text) {
        v = intern(text);
        if (v == NULL)
            return dds_error(-DDS_ENOMEM, "config: out of memory for %s",
                             e->name);
    }
    if (value_p != NULL)
        *value_p = v;
    return 0;
}

static int validate_entry(const dds_config_entry_t *e)
{
    const char *s = getenv(e->name);
    int b;
    int64_t i;
    double d;
    const char *str;

    if (s == NULL || is_blank(s))
        return 0;
    switch (e->type) {
    case DDS_CONFIG_BOOL: return dds_config_get_bool(e->name, &b);
    case DDS_CONFIG_INT: return dds_config_get_int(e->name, &i);
    case DDS_CONFIG_SIZE: return dds_config_get_int(e->name, &i);
    case DDS_CONFIG_DOUBLE: return dds_config_get_double(e->name, &d);
    case DDS_CONFIG_SECONDS: return dds_config_get_seconds(e->name, &d);
    case DDS_CONFIG_STRING:
    case DDS_CONFIG_ENUM: return dds_config_get_string(e->name, &str);
    default: return 0;
    }
}

int dds_config_validate_all(void)
{
    size_t n = dds_config_count();
    for (size_t i = 0; i < n; i++) {
        const dds_config_entry_t *e = dds_config_at(i);
        int rc;
        if (e == NULL || e->name == NULL)
            continue;
        rc = validate_entry(e);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* ---- core's own table ------------------------------------------------- */

static const dds_config_entry_t core_table[] = {
    DDS_SETTINGS_TABLE(DDS_CORE_SETTINGS)};
/* The Python layer's settings (settings.h): registered with core's, read
 * by Python through the registry only. */
static const dds_config_entry_t torch_table[] = {
    DDS_SETTINGS_TABLE(DDS_TORCH_SETTINGS)};

static pthread_once_t g_core_once = PTHREAD_ONCE_INIT;

static void register_core_once(void)
{
    (void)dds_config_register(core_table,
                              sizeof(core_table) / sizeof(core_table[0]));
    (void)dds_config_register(torch_table,
                              sizeof(torch_table) / sizeof(torch_table[0]));
}

void dds_config_register_core(void)
{
    pthread_once(&g_core_once, register_core_once);
}

static DDS_SETTINGS_READER(read_core, dds_settings_t, DDS_CORE_SETTINGS)

int dds_settings_read(dds_settings_t *s)
{
    if (s == NULL)
        return dds_error(-DDS_EINVAL, "dds_settings_read: NULL output");
    dds_config_register_core();
    return read_core(s);
}
