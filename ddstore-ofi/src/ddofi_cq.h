/* ddstore-ofi internal: a read batch and its completion contexts, shared
 * by the batched reads (ddofi_read.c) and the completion queue
 * (ddofi_cq.c).  See ddofi_read.c for the reference counting.
 */
#ifndef DDOFI_CQ_H
#define DDOFI_CQ_H

#include "ddofi_internal.h"

typedef struct ddofi_ctx {
    struct fi_context2 fictx;  /* provider scratch (FI_CONTEXT/FI_CONTEXT2) */
    struct ddofi_batch *batch;
    size_t op;                 /* index of the caller's op                 */
} ddofi_ctx_t;

typedef struct ddofi_batch {
    _Atomic long refs;
    _Atomic int err_set;
    int fi_err;
    int prov_errno;
    size_t err_op;
    char msg[384];
    struct ddofi_batch *next;  /* abandoned list                           */
    ddofi_ctx_t ctx[];
} ddofi_batch_t;

#endif
