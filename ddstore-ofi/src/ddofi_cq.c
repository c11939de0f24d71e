/* ddstore-ofi: the completion queue: reaping completions and errors into
 * their read batches (ddofi_read.c posts them), and freeing batches
 * abandoned by timeouts.  Called from ddofi_read, ddofi_ep_progress and the
 * endpoint's progress thread (ddofi_ep.c); no lock on the reap path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddofi_cq.h"

/* ---------------- completions ---------------- */

static inline void batch_release(ddofi_batch_t *b)
{
    atomic_fetch_sub_explicit(&b->refs, 1, memory_order_release);
}

void ddofi_cq_dispatch(ddofi_ep_t *ep, const struct fi_cq_entry *ent, size_t n)
{
    (void)ep;
    for (size_t i = 0; i < n; i++) {
        ddofi_ctx_t *c = ent[i].op_context;
        if (c)
            batch_release(c->batch);
    }
}

void ddofi_cq_error(ddofi_ep_t *ep)
{
    struct fi_cq_err_entry e;
    memset(&e, 0, sizeof e);
    ssize_t r = fi_cq_readerr(ep->cq, &e, 0);
    if (r < 0)
        return; /* another thread took it */
    ddofi_ctx_t *c = e.op_context;
    if (!c) {
        /* e.g. a connection to a peer that went away, reported on a
         * server endpoint: nothing of ours is waiting for it. */
        DDOFI_LOG(DDOFI_LOG_INFO, "completion error without context: %s",
                  fi_strerror(e.err));
        return;
    }
    ddofi_batch_t *b = c->batch;
    if (!atomic_exchange_explicit(&b->err_set, 1, memory_order_acq_rel)) {
        b->fi_err = e.err ? e.err : FI_EOTHER;
        b->prov_errno = e.prov_errno;
        b->err_op = c->op;
        char buf[256];
        const char *pm = fi_cq_strerror(ep->cq, e.prov_errno, e.err_data, buf, sizeof buf);
        snprintf(b->msg, sizeof b->msg, "%s (provider errno %d: %s)", fi_strerror(b->fi_err),
                 e.prov_errno, pm ? pm : "?");
    }
    batch_release(b);
}

int ddofi_cq_reap(ddofi_ep_t *ep)
{
    struct fi_cq_entry ent[16];
    ssize_t n = fi_cq_read(ep->cq, ent, 16);
    if (n > 0) {
        ddofi_cq_dispatch(ep, ent, (size_t)n);
        return (int)n;
    }
    if (n == -FI_EAGAIN)
        return 0;
    if (n == -FI_EAVAIL) {
        ddofi_cq_error(ep);
        return 1;
    }
    return ddofi_error_fi((int)n, "fi_cq_read(%s)", ep->fab->prov_name);
}

void ddofi_abandoned_free(ddofi_ep_t *ep)
{
    pthread_mutex_lock(&ep->ab_lock);
    ddofi_batch_t *b = ep->abandoned;
    ep->abandoned = NULL;
    pthread_mutex_unlock(&ep->ab_lock);
    while (b) {
        ddofi_batch_t *next = b->next;
        free(b);
        b = next;
    }
}
