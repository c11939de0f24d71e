/* libddstore: store lifetime for bindings (pins and handles).
 *
 * A pin handle guards one dds_store_t against destruction while calls are
 * in flight: readers take a shared pin for the duration of a call, and
 * whoever destroys the store (or frees variables, closes readers) takes it
 * exclusively, which waits for the pins in flight; calls started later see
 * the store gone (-DDS_EFREED).  pyddstore's PyDDStore holds its store
 * through one (its "life lock"; the GIL handling stays in the binding).
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
 *
 * Handles: every pin has a process-wide integer handle (never 0, never
 * reused), and so has every reader registered with it.  A second binding
 * in the same process (the torch extension) finds a store or reader by its
 * handle (PyDDStore._handle, Reader._handle) and pins it through
 * ddstore_handle_enter: no pointer crosses between the modules, and a stale
 * handle (store destroyed, reader closed, pin freed) gives -DDS_EFREED,
 * never a dangling pointer.
 *
 *   ddstore_pin_t *p; dds_store_t *st; dds_reader_t *rd;
 *   if (ddstore_handle_enter(h, &p, &st, &rd) == 0) {   // shared pin
 *       dds_store_get_batch(st, rd, ...);
 *       ddstore_handle_leave(p);
 *   }
 */
#ifndef DDSTORE_PIN_H
#define DDSTORE_PIN_H

#include <stdint.h>

#include "ddstore/store.h"
#include "ddstore/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddstore_pin ddstore_pin_t;

/* A pin handle over `store` (not owned: the handle never destroys it),
 * registered under a new handle.  0 and *pin_p, or -DDS_ENOMEM. */
DDS_API int ddstore_pin_create(dds_store_t *store, ddstore_pin_t **pin_p);
/* Unregister the handle and every reader handle of this pin, release what
 * ddstore_pin_keep holds, and free it once no ddstore_handle_enter /
 * ddstore_handle_ref holds it.  No pin may be held by the caller.  NULL is
 * a no-op. */
DDS_API void ddstore_pin_destroy(ddstore_pin_t *pin);

/* The store, or NULL once taken (or pin NULL).  Not synchronised: the
 * caller knows that no ddstore_pin_take can run concurrently (pyddstore:
 * the GIL), or holds a pin. */
DDS_API dds_store_t *ddstore_pin_store(const ddstore_pin_t *pin);

/* Shared pin: blocks while the handle is locked exclusively.  0 and
 * *store_p (may be NULL) until ddstore_pin_release; -DDS_EFREED (detail
 * "this store was destroyed") when the store was taken (then nothing is
 * held).  Thread-safe; never called while holding the exclusive lock. */
DDS_API int ddstore_pin_acquire(ddstore_pin_t *pin, dds_store_t **store_p);
/* Shared pin without the alive check (the caller checks
 * ddstore_pin_store()).  Always succeeds. */
DDS_API void ddstore_pin_acquire_any(ddstore_pin_t *pin);
DDS_API void ddstore_pin_release(ddstore_pin_t *pin);

/* Exclusive: waits for every pin in flight; no new pin until unlock.
 * (The handle is a rwlock: ddstore_pin_unlock and ddstore_pin_release are
 * the same operation, so code that holds it either way may end it with
 * either.) */
DDS_API void ddstore_pin_lock(ddstore_pin_t *pin);
DDS_API void ddstore_pin_unlock(ddstore_pin_t *pin);
/* With the exclusive lock held: detach and return the store (NULL when
 * already taken); later acquires fail with -DDS_EFREED. */
DDS_API dds_store_t *ddstore_pin_take(ddstore_pin_t *pin);

/* In a forked child: the lock may have been held by threads that do not
 * exist there; start it afresh (the store pointer is kept). */
DDS_API void ddstore_pin_after_fork(ddstore_pin_t *pin);

/* ---- handles ------------------------------------------------------------ */

/* The pin's (its store's) handle; 0 for NULL. */
DDS_API uint64_t ddstore_pin_handle(const ddstore_pin_t *pin);
/* Register `reader` (a reader of the pin's store) under a new handle:
 * ddstore_handle_enter(*handle_p) then gives the store and this reader.
 * 0, -DDS_EINVAL or -DDS_ENOMEM. */
DDS_API int ddstore_pin_reader_handle(ddstore_pin_t *pin, dds_reader_t *reader,
                                      uint64_t *handle_p);
/* The reader is being closed: later enters of `handle` fail (-DDS_EFREED,
 * "this reader was closed").  Call it with the pin locked exclusively, so
 * no call entered through the handle is still using the reader. */
DDS_API void ddstore_handle_drop(uint64_t handle);

/* Shared pin through a handle (a store's or a reader's): 0 with *pin_p
 * (for ddstore_handle_leave), *store_p and *reader_p (NULL for a store's
 * handle; either pointer may be NULL); -DDS_EFREED when the store was
 * destroyed or the reader closed, -DDS_EINVAL for a handle that never
 * existed.  Blocks while the pin is locked exclusively: a binding with a
 * global interpreter lock calls it with that lock released. */
DDS_API int ddstore_handle_enter(uint64_t handle, ddstore_pin_t **pin_p,
                                 dds_store_t **store_p, dds_reader_t **reader_p);
/* End the shared pin of ddstore_handle_enter (any thread). */
DDS_API void ddstore_handle_leave(ddstore_pin_t *pin);

/* The pin behind a handle, kept allocated (not pinned: the store may still
 * be destroyed; ddstore_pin_acquire then says so) until ddstore_pin_unref:
 * for a thread that pins once per read without looking the handle up each
 * time (the torch extension's prefetch pipeline).  0, -DDS_EFREED or
 * -DDS_EINVAL as ddstore_handle_enter.  Never blocks on the pin. */
DDS_API int ddstore_handle_ref(uint64_t handle, ddstore_pin_t **pin_p);
DDS_API void ddstore_pin_unref(ddstore_pin_t *pin);

/* ---- keep-alive --------------------------------------------------------- */

/* Call release(arg) when the store's variables are released
 * (ddstore_pin_release_keeps: free(), destroy) or the pin is destroyed:
 * for memory registered in place (DDS_ADD_IN_PLACE) that a binding must
 * keep alive until then.  `name` (the variable, copied) is for the log.
 * 0 or -DDS_ENOMEM (release not called). */
DDS_API int ddstore_pin_keep(ddstore_pin_t *pin, const char *name,
                             void (*release)(void *arg), void *arg);
/* Run and forget every keep of the pin (in the calling thread, in the
 * order they were added).  The caller's binding state (pyddstore: the
 * GIL held) is what the callbacks run under. */
DDS_API void ddstore_pin_release_keeps(ddstore_pin_t *pin);

#ifdef __cplusplus
}
#endif
#endif
