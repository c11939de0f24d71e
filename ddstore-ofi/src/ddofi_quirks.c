/* ddstore-ofi: every provider-specific behaviour lives in this one table.
 *
 * The rest of the library asks the table (flags, progress, wait) and never
 * compares provider names itself.  Order matters: the first entry whose
 * `match` fits the provider name wins; the last entry matches everything.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ddofi_internal.h"

static const ddofi_quirk_t quirks[] = {
    {"cxi", "cxi",
     DDOFI_Q_NO_HINTS | DDOFI_Q_CLEAR_INJECT | DDOFI_Q_MR_BIND | DDOFI_Q_MR_RELATIVE |
         DDOFI_Q_HMEM_PREFER,
     DDOFI_QP_HARDWARE, DDOFI_QW_FD, 0,
     "Slingshot: query fi_getinfo with no hints and filter; FI_INJECT in the default tx "
     "op_flags makes reads above 192 B fail, so it is cleared; MRs are bound to the "
     "server endpoint and enabled; RMA offsets are relative to the MR; the NIC "
     "completes reads without the target (no progress thread)"},
    {"verbs", "verbs",
     DDOFI_Q_HMEM_PREFER, DDOFI_QP_HARDWARE, DDOFI_QW_FD, 0,
     "InfiniBand/RoCE through ofi_rxm: RDMA reads complete in the HCA; FI_MR_LOCAL and "
     "provider keys honoured from mr_mode (set the PROGRESS parameter to thread "
     "if a connection setup stalls on a busy target)"},
    {"efa", "efa",
     DDOFI_Q_HMEM_PREFER, DDOFI_QP_FROM_ATTR, DDOFI_QW_BACKOFF, 1000,
     "AWS EFA: hardware RDMA read where the device has it, otherwise emulated by the "
     "provider (needs target progress); follows data_progress"},
    {"shm", "shm",
     DDOFI_Q_SINGLE_NODE | DDOFI_Q_CMA | DDOFI_Q_KEEP_EP, DDOFI_QP_THREAD,
     DDOFI_QW_BELL, 1000,
     "same-node shared memory: the provider's reads use CMA (process_vm_readv) from "
     "the reader one read at a time, and the target must drain its command queue (the "
     "provider has no cross-process wake-up object: the progress thread polls with a "
     "backoff sleep and, idle, parks on a bell that readers ring); "
     "host reads go straight through process_vm_readv, up to 1024 rows per call "
     "(the CMA parameter = 0 turns that off); an endpoint is never closed under reads "
     "that timed out (a peer serving a read into a vanished endpoint can crash), so "
     "they are not fenced: reads from a stopped peer complete anyway (the reader "
     "copies) and only time out when its command queue is full, with nothing in "
     "flight"},
    {"tcp", "tcp",
     DDOFI_Q_SOCKETS, DDOFI_QP_THREAD, DDOFI_QW_FD, 0,
     "tcp;ofi_rxm: the target answers read requests only while its CQ is progressed; "
     "the progress thread sleeps in fi_cq_sread on the sockets' wait fd"},
    {"net", "net",
     DDOFI_Q_SOCKETS, DDOFI_QP_THREAD, DDOFI_QW_BACKOFF, 1000,
     "net / net;ofi_rxm: target-driven progress like tcp, but its wait fd wakes late "
     "(~0.5 ms per read measured), so the progress thread polls with a backoff"},
    {"udp", "udp",
     DDOFI_Q_SOCKETS, DDOFI_QP_THREAD, DDOFI_QW_BACKOFF, 1000,
     "udp;ofi_rxd: target-driven progress; reliability layer retransmits on timers"},
    {"sockets", "sockets",
     DDOFI_Q_SOCKETS, DDOFI_QP_FROM_ATTR, DDOFI_QW_FD, 0,
     "sockets: the provider runs its own progress thread (FI_PROGRESS_AUTO), which "
     "sleeps FI_SOCKETS_PE_WAITTIME (10 ms) between rounds: ~10 ms per read unless "
     "that is lowered (at a CPU cost); deprecated, never chosen by auto"},
    {"psm", "psm",
     0, DDOFI_QP_FROM_ATTR, DDOFI_QW_BACKOFF, 1000,
     "psm2/psm3: follows data_progress"},
    {"default", "",
     0, DDOFI_QP_FROM_ATTR, DDOFI_QW_BACKOFF, 1000,
     "any other provider: progress thread iff data_progress is FI_PROGRESS_MANUAL"},
};

size_t ddofi_quirk_count(void) { return sizeof quirks / sizeof quirks[0]; }

const ddofi_quirk_t *ddofi_quirk_at(size_t i)
{
    return i < ddofi_quirk_count() ? &quirks[i] : NULL;
}

/* Does `match` name the provider?  Exact name, or the core provider (the
 * part before ';'), or a prefix of the core name up to a digit ("psm"
 * matches "psm2", "psm3"). */
static int matches(const char *match, const char *prov)
{
    if (!match[0])
        return 1;
    size_t core = strcspn(prov, ";");
    size_t m = strlen(match);
    if (m == core && !strncmp(match, prov, m))
        return 1;
    if (m < core && !strncmp(match, prov, m)) {
        for (size_t i = m; i < core; i++)
            if (prov[i] < '0' || prov[i] > '9')
                return 0;
        return 1;
    }
    return 0;
}

const ddofi_quirk_t *ddofi_quirk_lookup(const char *prov_name)
{
    if (!prov_name)
        prov_name = "";
    for (size_t i = 0; i < ddofi_quirk_count(); i++)
        if (matches(quirks[i].match, prov_name))
            return &quirks[i];
    return &quirks[ddofi_quirk_count() - 1];
}

int ddofi_quirk_needs_thread(const ddofi_quirk_t *q, int data_progress_manual,
                             ddofi_progress_t policy)
{
    if (policy == DDOFI_PROGRESS_THREAD)
        return 1;
    if (policy == DDOFI_PROGRESS_NONE)
        return 0;
    switch (q->progress) {
    case DDOFI_QP_THREAD: return 1;
    case DDOFI_QP_HARDWARE: return 0;
    case DDOFI_QP_FROM_ATTR:
    default: return data_progress_manual ? 1 : 0;
    }
}

int ddofi_provider_alias(const char *given, char *prov, size_t cap,
                         const char **iface_prefix_p)
{
    static const struct {
        const char *alias, *prov, *iface_prefix;
    } aliases[] = {
        {"tcp", "tcp;ofi_rxm", NULL},
        {"verbs", "verbs;ofi_rxm", NULL},
        {"hsn", "tcp;ofi_rxm", "hsn"},
        {"udp", "udp;ofi_rxd", NULL},
    };
    if (iface_prefix_p)
        *iface_prefix_p = NULL;
    if (!given || !given[0])
        return -EINVAL;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
        if (!strcmp(given, aliases[i].alias)) {
            if (strlen(aliases[i].prov) + 1 > cap)
                return -EINVAL;
            strcpy(prov, aliases[i].prov);
            if (iface_prefix_p)
                *iface_prefix_p = aliases[i].iface_prefix;
            return 0;
        }
    }
    if (strlen(given) + 1 > cap)
        return -EINVAL;
    strcpy(prov, given);
    return 0;
}
