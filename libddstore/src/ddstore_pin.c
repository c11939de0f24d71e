/* libddstore: pin handles (pin.h): a pthread rwlock over a store pointer. */
#include "ddstore/pin.h"

#include <pthread.h>
#include <stdlib.h>

#include "ddstore/errors.h"

struct ddstore_pin {
    pthread_rwlock_t lock;
    dds_store_t *store;          /* NULL once taken (exclusive lock held) */
};

int ddstore_pin_create(dds_store_t *store, ddstore_pin_t **pin_p)
{
    ddstore_pin_t *p;
    if (pin_p == NULL)
        return dds_error(-DDS_EINVAL, "ddstore_pin_create: NULL argument");
    p = calloc(1, sizeof *p);
    if (p == NULL)
        return dds_error(-DDS_ENOMEM, "ddstore_pin_create: out of memory");
    if (pthread_rwlock_init(&p->lock, NULL) != 0) {
        free(p);
        return dds_error(-DDS_ENOMEM, "ddstore_pin_create: rwlock init failed");
    }
    p->store = store;
    *pin_p = p;
    return 0;
}

void ddstore_pin_destroy(ddstore_pin_t *pin)
{
    if (pin == NULL)
        return;
    pthread_rwlock_destroy(&pin->lock);
    free(pin);
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
