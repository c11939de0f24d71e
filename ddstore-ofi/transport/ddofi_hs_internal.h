/* ddstore-ofi adapter: what the handshake record's codec (ddofi_hs.c) and
 * its files (ddofi_hs_files.c) share (private).  The files call the codec,
 * never the other way round. */
#ifndef DDOFI_HS_INTERNAL_H
#define DDOFI_HS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ddstore/handshake_transport.h"

/* The largest file a valid record can be (1 << 20 ranks, each on its own
 * host with the longest name and address: about 480 MiB). */
#define HS_MAX_FILE_BYTES                                                      \
    ((uint64_t)DDOFI_HS_HEADER_BYTES +                                         \
     (uint64_t)DDOFI_HS_MAX_RANKS *                                            \
         ((uint64_t)DDOFI_HS_ENTRY_BYTES + DDOFI_HS_ADDR_MAX + 1 +             \
          DDOFI_HS_HOST_MAX))

/* ddofi_hs_parse with `what` (e.g. "handshake record <path>") in front of
 * every message. */
int ddofi_hs_parse_named(const void *buf, size_t len, ddofi_hs_record_t *r,
                         const char *what);

#endif
