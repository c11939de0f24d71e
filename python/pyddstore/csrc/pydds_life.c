/* pyddstore._core: the life lock of a PyDDStore and the list of live stores.
 *
 * The bottom of the store's files (pydds_store.h): it knows the object's
 * layout and libddstore's pin handle, nothing of the other files.  How the
 * lock is used is described in pydds_store.c and pydds.h.
 */
#include "pydds_store.h"

#include <unistd.h>

/* ---- life lock ---------------------------------------------------------- */

int pydds_store_gone(void)
{
    return dds_error(-DDS_EFREED,
                     "this PyDDStore was destroyed (interpreter exit or "
                     "deallocation); create a new store");
}

/* With the GIL released: read lock; 0, or -DDS_EFREED (lock not held). */
int pydds_store_enter_nogil(pydds_store_obj *s)
{
    ddstore_pin_acquire_any(s->pin);
    if (PYDDS_STORE(s) == NULL) {
        ddstore_pin_release(s->pin);
        return pydds_store_gone();
    }
    return 0;
}

int pydds_store_enter(pydds_store_obj *s)
{
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pydds_store_enter_nogil(s);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        pydds_raise(rc);
        return -1;
    }
    return 0;
}

void pydds_store_leave(pydds_store_obj *s)
{
    ddstore_pin_release(s->pin);
}

void pydds_lock_write(pydds_store_obj *s)
{
    Py_BEGIN_ALLOW_THREADS
    ddstore_pin_lock(s->pin);
    Py_END_ALLOW_THREADS
}

/* The C store, or NULL with DDStoreError (destroyed); GIL held. */
dds_store_t *pydds_store_alive(pydds_store_obj *s)
{
    if (PYDDS_STORE(s) == NULL) {
        pydds_raise(pydds_store_gone());
        return NULL;
    }
    return PYDDS_STORE(s);
}


/* ---- live stores -------------------------------------------------------- */

static pydds_store_obj *g_live_head = NULL, *g_live_tail = NULL;

void pydds_live_add(pydds_store_obj *s)
{
    s->live_prev = g_live_tail;
    s->live_next = NULL;
    if (g_live_tail)
        g_live_tail->live_next = s;
    else
        g_live_head = s;
    g_live_tail = s;
}

void pydds_live_remove(pydds_store_obj *s)
{
    if (s->live_prev)
        s->live_prev->live_next = s->live_next;
    else if (g_live_head == s)
        g_live_head = s->live_next;
    else
        return; /* not linked */
    if (s->live_next)
        s->live_next->live_prev = s->live_prev;
    else
        g_live_tail = s->live_prev;
    s->live_prev = s->live_next = NULL;
}

pydds_store_obj *pydds_live_next_own(pid_t pid)
{
    pydds_store_obj *s;
    for (s = g_live_head; s; s = s->live_next)
        if (PYDDS_STORE(s) != NULL && s->pid == pid)
            return s;
    return NULL;
}

/* This process's id, kept here (getpid() is a system call): set at the
 * first call, and again in a forked child (pydds_live_after_fork runs from
 * the module's pthread_atfork child handler). */
static pid_t g_pid;

pid_t pydds_pid(void)
{
    pid_t p = __atomic_load_n(&g_pid, __ATOMIC_RELAXED);
    if (p == 0) {
        p = getpid();
        __atomic_store_n(&g_pid, p, __ATOMIC_RELAXED);
    }
    return p;
}

void pydds_live_after_fork(void)
{
    pydds_store_obj *s;
    __atomic_store_n(&g_pid, getpid(), __ATOMIC_RELAXED);
    for (s = g_live_head; s; s = s->live_next)
        ddstore_pin_after_fork(s->pin);
}
