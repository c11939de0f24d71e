/* Test-only helpers shared by the loopback tests (processes forked on this
 * host, exchanging blobs through pipes: forkcomm.h's piped child): the
 * fabric parameters of a provider on 127.0.0.1 / this node.  Header-only,
 * static inline functions. */
#ifndef DDOFI_LOOPBACK_H
#define DDOFI_LOOPBACK_H

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddofi_test.h"
#include "ddstore/ofi.h"
#define FORKCOMM_PIPES_ONLY
#include "forkcomm.h"

/* `prov` on this node only (sockets on 127.0.0.1). */
static inline ddofi_fabric_params_t ddofi_t_fparams(const char *prov)
{
    ddofi_fabric_params_t p = {0};
    p.field_mask = DDOFI_FABRIC_FIELD_PROVIDER | DDOFI_FABRIC_FIELD_LOCAL_ONLY |
                   DDOFI_FABRIC_FIELD_SINGLE_NODE;
    p.provider = prov;
    p.local_only = 1;
    p.single_node = 1;
    return p;
}

/* Open a fabric for a test: 0, or 1 when the provider does not exist here
 * (a SKIP with the reason; a failure for shm and tcp, T_NOPROV) or opening
 * failed (a failure recorded). */
static inline int ddofi_t_open(const ddofi_fabric_params_t *p, ddofi_fabric_t **f_p)
{
    int rc = ddofi_fabric_open(p, f_p);
    if (rc == -DDOFI_ENOPROV) {
        T_NOPROV(p->provider, ddofi_last_error());
        return 1;
    }
    T_EQ_INT(rc, 0);
    return rc != 0;
}

#endif
