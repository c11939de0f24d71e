/* ddstore-core: the store's variables' lives, as forked processes see them.
 *
 * A process forked while a variable exists (a DataLoader worker, persistent
 * or not) keeps the store's description of it: its owners' addresses and
 * keys, the same-node mappings, this rank's shard.  Once every rank has
 * freed the variable, that memory may hold another variable's rows (same
 * addresses, same descriptor numbers), or the old rows presented as current
 * (an inherited mapping keeps them).  The child takes part in no collective
 * call, so it cannot learn of the free from the communicator; it learns it
 * from its parent, in memory they share:
 *
 *   every variable of a store has a life {word, gen}: word is a 64-bit word
 *   in pages mapped MAP_SHARED | MAP_ANONYMOUS by the process that created
 *   the variable (so every process forked from it later shares them), gen a
 *   number that process never gives twice; *word == gen while the variable
 *   lives.
 *
 *   free (dds_st_life_end): *word = 0 and a full fence, when the variable is
 *   detached from the table, before the collective step after which any
 *   rank releases or reuses its memory (free(): the agreement before the
 *   shards are released; var_free: the same, see dds_store_var.c).
 *
 *   read (dds_st_life_check): every variable of the call is checked before
 *   the plan (a clear error, nothing read); in a forked process, again
 *   after a full fence, once the copies are done (or failed).  If that
 *   check still sees gen, the parent's *word = 0 had not happened when the
 *   copies ended, so no rank had started to release the variable's memory:
 *   the bytes are the variable's.  Otherwise the read fails (-DDS_ESTALE)
 *   naming the variable and what to do, whatever the copies returned.
 *
 * In the process that owns the store the first check always passes and
 * the second is skipped (a free waits for the reads in flight: the table
 * lock); it costs a load per variable per read call, a forked process one
 * fence more.  This covers every method and path alike (mapped same-node
 * shards, this rank's rows, the transport, a method-2 reader's joined
 * variables), across nodes too: the free's ordering is collective.  A
 * method-2 reader job (not forked from the core) learns of the core's
 * frees through its own liveness table (ddstore-ofi's ddofi_tr_live.c).
 *
 * Pages: a process takes words only from pages it mapped itself (a child's
 * own stores get pages of their own; the ones it inherited are its
 * parent's), 512 to a page, a word being free while it holds 0.  Pages are
 * never unmapped: a child may still look at them. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include "dds_store_internal.h"

#define LIFE_WORDS 512 /* one 4 KiB page */

typedef struct life_page {
    _Atomic uint64_t *words; /* LIFE_WORDS, MAP_SHARED | MAP_ANONYMOUS */
    pid_t owner;             /* the process that mapped it             */
    struct life_page *next;
} life_page_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static life_page_t *g_pages;
static uint64_t g_next_gen = 1; /* this process's; a child's copy only
                                   numbers words of the child's pages */

/* A fork while another thread holds g_lock would leave it locked in the
 * child for good. */
static void life_prepare(void) { pthread_mutex_lock(&g_lock); }
static void life_release(void) { pthread_mutex_unlock(&g_lock); }
static void life_atfork(void)
{
    (void)pthread_atfork(life_prepare, life_release, life_release);
}

int dds_st_life_take(dds_life_t *l, const char *name)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    const pid_t me = getpid();
    int rc = 0;

    pthread_once(&once, life_atfork);
    l->word = NULL;
    l->gen = 0;
    l->pid = me;
    pthread_mutex_lock(&g_lock);
    for (life_page_t *p = g_pages; p != NULL && l->word == NULL; p = p->next) {
        if (p->owner != me)
            continue;
        for (size_t i = 0; i < LIFE_WORDS; i++)
            if (atomic_load_explicit(&p->words[i], memory_order_relaxed) == 0) {
                l->word = &p->words[i];
                break;
            }
    }
    if (l->word == NULL) {
        life_page_t *p = malloc(sizeof(*p));
        void *m = p == NULL ? MAP_FAILED
                            : mmap(NULL, LIFE_WORDS * sizeof(uint64_t),
                                   PROT_READ | PROT_WRITE,
                                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            free(p);
            rc = dds_error(-DDS_ENOMEM, "variable '%s': out of memory (a "
                           "page of variable lives)", name);
        } else {
            p->words = m;
            p->owner = me;
            p->next = g_pages;
            g_pages = p;
            l->word = &p->words[0];
        }
    }
    if (rc == 0) {
        l->gen = g_next_gen++;
        atomic_store_explicit(l->word, l->gen, memory_order_release);
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

void dds_st_life_end(dds_life_t *l)
{
    /* Only the process that took it ends it: a child's copy of a store
     * (destroyed when the child exits) never ends its parent's variables.
     * No lock: a take that finds the word 0 at once gives it a new gen. */
    if (l->word != NULL && l->pid == getpid()) {
        atomic_store_explicit(l->word, 0, memory_order_seq_cst);
        atomic_thread_fence(memory_order_seq_cst);
    }
    l->word = NULL;
}

int dds_st_life_check(const dds_store_t *s, const dds_var_t *v)
{
    if (v->life.word == NULL ||
        DDS_LIKELY(atomic_load_explicit(v->life.word, memory_order_acquire) ==
                   v->life.gen))
        return 0;
    return dds_error(-DDS_ESTALE,
                     "variable '%s' was freed by process %d (which created "
                     "the store) after this process was forked from it: "
                     "its rows cannot be read here.  A forked reader (a "
                     "DataLoader worker, persistent_workers=True) reads the "
                     "variables that existed when it was forked: make the "
                     "loader (its workers) again after the data set is "
                     "rebuilt",
                     v->name, (int)s->pid);
}
