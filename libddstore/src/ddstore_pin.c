/* libddstore: pin handles (pin.h): a pthread rwlock over a store pointer,
 * found by integer handle through one process-wide registry. */
#include "ddstore/pin.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ddstore/errors.h"
#include "ddstore/log.h"

typedef struct pin_keep {
    struct pin_keep *next;
    void (*release)(void *arg);
    void *arg;
    char name[64];
} pin_keep_t;

struct ddstore_pin {
    pthread_rwlock_t lock;
    dds_store_t *store;          /* NULL once taken (exclusive lock held) */
    uint64_t handle;
    int refs;                    /* owner + enters/refs in flight (g_mu)  */
    pin_keep_t *keeps;           /* oldest first (the binding's state)    */
};

/* The registry: handle -> (pin, reader).  Handles count up from 1 and are
 * never reused, so a stale one matches nothing.  A handful of entries per
 * process (stores and their readers): a linear scan. */
typedef struct {
    uint64_t handle;
    ddstore_pin_t *pin;
    dds_reader_t *reader;        /* NULL: the store's own handle          */
} reg_entry_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static reg_entry_t *g_reg;
static size_t g_n, g_cap;
static uint64_t g_next = 1;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void reg_prefork(void) { pthread_mutex_lock(&g_mu); }
static void reg_postfork(void) { pthread_mutex_unlock(&g_mu); }
/* The child has one thread: whoever held g_mu in the parent is gone. */
static void reg_child(void) { pthread_mutex_init(&g_mu, NULL); }
static void reg_atfork(void) { pthread_atfork(reg_prefork, reg_postfork, reg_child); }

/* g_mu held. */
static reg_entry_t *reg_find(uint64_t handle)
{
    for (size_t i = 0; i < g_n; i++)
        if (g_reg[i].handle == handle)
            return &g_reg[i];
    return NULL;
}

/* g_mu held. */
static int reg_add(ddstore_pin_t *pin, dds_reader_t *reader, uint64_t *handle_p)
{
    if (g_n == g_cap) {
        size_t cap = g_cap ? 2 * g_cap : 16;
        reg_entry_t *r = realloc(g_reg, cap * sizeof *r);
        if (r == NULL)
            return dds_error(-DDS_ENOMEM, "ddstore: out of memory registering a handle");
        g_reg = r;
        g_cap = cap;
    }
    g_reg[g_n].handle = g_next++;
    g_reg[g_n].pin = pin;
    g_reg[g_n].reader = reader;
    *handle_p = g_reg[g_n].handle;
    g_n++;
    return 0;
}

/* g_mu held: remove entry i (order does not matter). */
static void reg_remove_at(size_t i) { g_reg[i] = g_reg[--g_n]; }

static int stale(uint64_t handle)
{
    if (handle == 0 || handle >= g_next)
        return dds_error(-DDS_EINVAL, "ddstore: %llu is not a store or reader handle",
                         (unsigned long long)handle);
    return dds_error(-DDS_EFREED,
                     "ddstore: the store or reader of handle %llu was destroyed or closed",
                     (unsigned long long)handle);
}

static void pin_free(ddstore_pin_t *pin)
{
    pthread_rwlock_destroy(&pin->lock);
    free(pin);
}

int ddstore_pin_create(dds_store_t *store, ddstore_pin_t **pin_p)
{
    ddstore_pin_t *p;
    int rc;
    if (pin_p == NULL)
        return dds_error(-DDS_EINVAL, "ddstore_pin_create: NULL argument");
    pthread_once(&g_once, reg_atfork);
    p = calloc(1, sizeof *p);
    if (p == NULL)
        return dds_error(-DDS_ENOMEM, "ddstore_pin_create: out of memory");
    if (pthread_rwlock_init(&p->lock, NULL) != 0) {
        free(p);
        return dds_error(-DDS_ENOMEM, "ddstore_pin_create: rwlock init failed");
    }
    p->store = store;
    p->refs = 1;
    pthread_mutex_lock(&g_mu);
    rc = reg_add(p, NULL, &p->handle);
    pthread_mutex_unlock(&g_mu);
    if (rc < 0) {
        pin_free(p);
        return rc;
    }
    *pin_p = p;
    return 0;
}

void ddstore_pin_unref(ddstore_pin_t *pin)
{
    int last;
    if (pin == NULL)
        return;
    pthread_mutex_lock(&g_mu);
    last = --pin->refs == 0;
    pthread_mutex_unlock(&g_mu);
    if (last)
        pin_free(pin);
}

void ddstore_pin_destroy(ddstore_pin_t *pin)
{
    if (pin == NULL)
        return;
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < g_n;) {
        if (g_reg[i].pin == pin)
            reg_remove_at(i);
        else
            i++;
    }
    pthread_mutex_unlock(&g_mu);
    ddstore_pin_release_keeps(pin);
    ddstore_pin_unref(pin);
}

dds_store_t *ddstore_pin_store(const ddstore_pin_t *pin)
{
    return pin != NULL ? pin->store : NULL;
}

int ddstore_pin_acquire(ddstore_pin_t *pin, dds_store_t **store_p)
{
    pthread_rwlock_rdlock(&pin->lock);
    if (pin->store == NULL) {
        pthread_rwlock_unlock(&pin->lock);
        return dds_error(-DDS_EFREED,
                         "this store was destroyed");
    }
    if (store_p != NULL)
        *store_p = pin->store;
    return 0;
}

void ddstore_pin_acquire_any(ddstore_pin_t *pin)
{
    pthread_rwlock_rdlock(&pin->lock);
}

void ddstore_pin_release(ddstore_pin_t *pin)
{
    pthread_rwlock_unlock(&pin->lock);
}

void ddstore_pin_lock(ddstore_pin_t *pin)
{
    pthread_rwlock_wrlock(&pin->lock);
}

void ddstore_pin_unlock(ddstore_pin_t *pin)
{
    pthread_rwlock_unlock(&pin->lock);
}

dds_store_t *ddstore_pin_take(ddstore_pin_t *pin)
{
    dds_store_t *st = pin->store;
    pin->store = NULL;
    return st;
}

void ddstore_pin_after_fork(ddstore_pin_t *pin)
{
    if (pin != NULL)
        pthread_rwlock_init(&pin->lock, NULL);
}

/* ---- handles ------------------------------------------------------------ */

uint64_t ddstore_pin_handle(const ddstore_pin_t *pin)
{
    return pin != NULL ? pin->handle : 0;
}

int ddstore_pin_reader_handle(ddstore_pin_t *pin, dds_reader_t *reader, uint64_t *handle_p)
{
    int rc;
    if (pin == NULL || reader == NULL || handle_p == NULL)
        return dds_error(-DDS_EINVAL, "ddstore_pin_reader_handle: NULL argument");
    pthread_mutex_lock(&g_mu);
    rc = reg_add(pin, reader, handle_p);
    pthread_mutex_unlock(&g_mu);
    return rc;
}

void ddstore_handle_drop(uint64_t handle)
{
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < g_n; i++) {
        if (g_reg[i].handle == handle) {
            reg_remove_at(i);
            break;
        }
    }
    pthread_mutex_unlock(&g_mu);
}

int ddstore_handle_ref(uint64_t handle, ddstore_pin_t **pin_p)
{
    reg_entry_t *e;
    pthread_mutex_lock(&g_mu);
    e = reg_find(handle);
    if (e == NULL) {
        pthread_mutex_unlock(&g_mu);
        return stale(handle);
    }
    e->pin->refs++;
    *pin_p = e->pin;
    pthread_mutex_unlock(&g_mu);
    return 0;
}

int ddstore_handle_enter(uint64_t handle, ddstore_pin_t **pin_p, dds_store_t **store_p,
                         dds_reader_t **reader_p)
{
    ddstore_pin_t *pin;
    reg_entry_t *e;
    dds_reader_t *reader = NULL;
    int rc = ddstore_handle_ref(handle, &pin);
    if (rc < 0)
        return rc;
    pthread_rwlock_rdlock(&pin->lock);
    /* Look again under the shared lock: a reader is closed and a store
     * taken only under the exclusive one, so what is found now stays
     * valid until ddstore_handle_leave. */
    pthread_mutex_lock(&g_mu);
    e = reg_find(handle);
    if (e != NULL)
        reader = e->reader;
    pthread_mutex_unlock(&g_mu);
    if (e == NULL || pin->store == NULL) {
        const int closed = pin->store != NULL &&
                           (e != NULL ? reader != NULL : handle != pin->handle);
        pthread_rwlock_unlock(&pin->lock);
        ddstore_pin_unref(pin);
        return dds_error(-DDS_EFREED, closed ? "this reader was closed"
                                          : "this store was destroyed (its owner released "
                                            "it: interpreter exit or deallocation); create a "
                                            "new store");
    }
    *pin_p = pin;
    if (store_p != NULL)
        *store_p = pin->store;
    if (reader_p != NULL)
        *reader_p = reader;
    return 0;
}

void ddstore_handle_leave(ddstore_pin_t *pin)
{
    if (pin == NULL)
        return;
    pthread_rwlock_unlock(&pin->lock);
    ddstore_pin_unref(pin);
}

/* ---- keep-alive --------------------------------------------------------- */

int ddstore_pin_keep(ddstore_pin_t *pin, const char *name, void (*release)(void *arg),
                     void *arg)
{
    pin_keep_t *k, **tail;
    if (pin == NULL || release == NULL)
        return dds_error(-DDS_EINVAL, "ddstore_pin_keep: NULL argument");
    k = calloc(1, sizeof *k);
    if (k == NULL)
        return dds_error(-DDS_ENOMEM, "ddstore_pin_keep: out of memory");
    k->release = release;
    k->arg = arg;
    if (name != NULL)
        strncpy(k->name, name, sizeof k->name - 1);
    pthread_mutex_lock(&g_mu);
    for (tail = &pin->keeps; *tail != NULL; tail = &(*tail)->next)
        ;
    *tail = k;
    pthread_mutex_unlock(&g_mu);
    return 0;
}

void ddstore_pin_release_keeps(ddstore_pin_t *pin)
{
    pin_keep_t *k;
    if (pin == NULL)
        return;
    pthread_mutex_lock(&g_mu);
    k = pin->keeps;
    pin->keeps = NULL;
    pthread_mutex_unlock(&g_mu);
    while (k != NULL) {
        pin_keep_t *next = k->next;
        DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_CORE, "ddstore: releasing memory kept for '%s'",
                k->name);
        k->release(k->arg);
        free(k);
        k = next;
    }
}
