/* libddstore: store lifetime for bindings (pins).
 *
 * A pin handle guards one dds_store_t against destruction while calls are
 * in flight: readers take a shared pin for the duration of a call, and
 * whoever destroys the store (or frees variables, closes readers) takes it
 * exclusively, which waits for the pins in flight; calls started later see
 * the store gone (-DDS_EFREED).  pyddstore's PyDDStore holds its store
 * through one (its "life lock"; the GIL handling stays in the binding), and
 * the C API table (api.h acquire / release) pins through it.
 *
 *   ddstore_pin_t *pin;
 *   ddstore_pin_create(store, &pin);
 *   dds_store_t *s;
 *   if (ddstore_pin_acquire(pin, &s) == 0) {       // any thread
 *       dds_store_get_batch(s, ...);
 *       ddstore_pin_release(pin);
 *   }
 *   ddstore_pin_lock(pin);                          // waits for pins
 *   dds_store_t *st = ddstore_pin_take(pin);        // later pins: EFREED
 *   ddstore_pin_unlock(pin);
 *   dds_store_destroy_local(st);
 *   ddstore_pin_destroy(pin);
 */
#ifndef DDSTORE_PIN_H
#define DDSTORE_PIN_H

#include "ddstore/store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddstore_pin ddstore_pin_t;

/* A pin handle over `store` (not owned: the handle never destroys it).
 * 0 and *pin_p, or -DDS_ENOMEM. */
int ddstore_pin_create(dds_store_t *store, ddstore_pin_t **pin_p);
/* Free the handle; no pin may be held.  NULL is a no-op. */
void ddstore_pin_destroy(ddstore_pin_t *pin);

/* The store, or NULL once taken (or pin NULL).  Not synchronised: the
 * caller knows that no ddstore_pin_take can run concurrently (pyddstore:
 * the GIL), or holds a pin. */
dds_store_t *ddstore_pin_store(const ddstore_pin_t *pin);

/* Shared pin: blocks while the handle is locked exclusively.  0 and
 * *store_p (may be NULL) until ddstore_pin_release; -DDS_EFREED (detail
 * "this store was destroyed") when the store was taken (then nothing is
 * held).  Thread-safe; never called while holding the exclusive lock. */
int ddstore_pin_acquire(ddstore_pin_t *pin, dds_store_t **store_p);
/* Shared pin without the alive check (the caller checks
 * ddstore_pin_store()).  Always succeeds. */
void ddstore_pin_acquire_any(ddstore_pin_t *pin);
void ddstore_pin_release(ddstore_pin_t *pin);

/* Exclusive: waits for every pin in flight; no new pin until unlock.
 * (The handle is a rwlock: ddstore_pin_unlock and ddstore_pin_release are
 * the same operation, so code that holds it either way may end it with
 * either.) */
void ddstore_pin_lock(ddstore_pin_t *pin);
void ddstore_pin_unlock(ddstore_pin_t *pin);
/* With the exclusive lock held: detach and return the store (NULL when
 * already taken); later acquires fail with -DDS_EFREED. */
dds_store_t *ddstore_pin_take(ddstore_pin_t *pin);

/* In a forked child: the lock may have been held by threads that do not
 * exist there; start it afresh (the store pointer is kept). */
void ddstore_pin_after_fork(ddstore_pin_t *pin);

#ifdef __cplusplus
}
#endif
#endif
