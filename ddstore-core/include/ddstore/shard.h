/* ddstore-core: the node-local shard service (dds_shard.c).
 *
 * One service for every transport's same-node path (issue 22): a host
 * shard the store allocates here lives in shared memory that the other
 * processes of the same node (same kernel, host name, pid namespace and
 * user) can map; a record of a few words says how; a peer maps an owner's
 * shard on its first read of it, checks it (file, size, a random tag) and
 * serves the owner's rows with memcpy; after the copies it checks that the
 * owner process is still alive.  The store drives it (allocation at
 * var_init / var_add(DDS_ADD_COPY) when the transport sets
 * DDS_TRANSPORT_CAP_NODE_SHARDS, records exchanged with the variable's
 * description, reads before transport->read); transports see only the
 * remote ops.
 *
 * Safety (a wrong row never, a signal never):
 *   - the shard is a memfd (mode 0600) sealed against shrinking and growing,
 *     its pages reserved at allocation (fallocate: a shortage is a fallback
 *     to anonymous memory then, never a SIGBUS later), followed by one page
 *     holding a trailer {magic, tag, bytes}; a peer opens it through
 *     /proc/<pid>/fd/<fd> (the kernel allows that to the same user only) and
 *     refuses anything whose file type, owner, size or trailer differ: a
 *     reused descriptor number or pid is never read;
 *   - a mapping keeps the pages alive: after the owner freed the shard or
 *     exited, a mapping made before reads the shard's last contents, never
 *     freed memory; dds_shard_peer_alive (a pidfd opened at mapping time,
 *     polled; a zombie counts as exited) turns a read of an exited owner
 *     into -DDS_EIO;
 *   - forked children inherit the mappings (MAP_SHARED: they see updates)
 *     and map the others themselves;
 *   - at most a quarter of RLIMIT_NOFILE's soft limit of shards hold a
 *     descriptor; the rest, and whatever cannot be made, are anonymous
 *     MAP_SHARED memory (still shared with forked children), not mappable
 *     by peers (their record has tag 0: the transport reads them). */
#ifndef DDSTORE_SHARD_H
#define DDSTORE_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "ddstore/plan.h"
#include "ddstore/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dds_shard dds_shard_t;

/* What a peer needs to map a shard (exchanged with the variable's
 * description).  tag 0: the shard cannot be mapped. */
typedef struct dds_shard_rec {
    uint64_t tag;
    uint64_t bytes;            /* the shard                                  */
    uint64_t node;             /* dds_shard_node_id() of the owner           */
    int32_t pid;               /* owner process                              */
    int32_t fd;                /* its memfd, in the owner process            */
    uint32_t uid;              /* owner's effective uid                      */
    uint32_t reserved;
} dds_shard_rec_t;

/* A shard of `bytes` (may be 0).  mappable: in a memfd that peers can map
 * (else, and as the fallback, anonymous MAP_SHARED memory, then malloc).
 * 0, or -DDS_ENOMEM when no memory at all could be had. */
DDS_API int dds_shard_alloc(size_t bytes, int mappable, dds_shard_t **sh_p);
/* Its memory (NULL when bytes == 0). */
DDS_API void *dds_shard_base(const dds_shard_t *sh);
/* Its record (tag 0 when sh is NULL or not mappable). */
DDS_API void dds_shard_export(const dds_shard_t *sh, dds_shard_rec_t *rec);
DDS_API void dds_shard_free(dds_shard_t *sh);

/* This process's node: same value = same kernel boot, host name and pid
 * namespace (never 0). */
DDS_API uint64_t dds_shard_node_id(void);

/* ---- peers ------------------------------------------------------------ */

typedef struct dds_shard_peers dds_shard_peers_t;

/* A table of the `n` owners' shards that this process may map: recs[i] at
 * (const char *)recs + i * stride; want_bytes[i] the size the layout gives
 * owner i (NULL: not checked); `self` (or -1) is skipped.  *p_p = NULL when
 * no owner's shard can be mapped here (another node or user, tag 0, a size
 * that is not the layout's).  `name` names the variable in messages.  0 or
 * -DDS_ENOMEM. */
DDS_API int dds_shard_peers_new(const char *name, int n, const void *recs,
                                size_t stride, const uint64_t *want_bytes,
                                int self, dds_shard_peers_t **p_p);
DDS_API void dds_shard_peers_free(dds_shard_peers_t *p);
/* Owner i's shard mapped here (mapped now on first use), or NULL: not
 * mappable (read it through the transport). */
DDS_API const char *dds_shard_peer_base(dds_shard_peers_t *p, int owner);
/* After copies from owner's mapping: 0, or -DDS_EIO naming the rank when
 * the owner process has exited (also as a zombie). */
DDS_API int dds_shard_peer_alive(dds_shard_peers_t *p, int owner);

/* Serve the ops of ops[0..*nops_p) whose owner's shard is mapped here with
 * memcpy into (op.staged ? staging : dst), drop them (the others keep their
 * order), check each owner served is alive.  Ops must come grouped by owner
 * (the planner's order).  *served_ops / *served_bytes: what was copied.
 * 0, -DDS_EIO (an owner exited), -DDS_ERANGE (an op outside the shard). */
DDS_API int dds_shard_serve(dds_shard_peers_t *p, dds_read_op_t *ops,
                            size_t *nops_p, char *dst, char *staging,
                            size_t *served_ops, size_t *served_bytes);

/* Copies and bytes served from mapped shards in this process (tests). */
DDS_API void dds_shard_counts(uint64_t *ops, uint64_t *bytes);

#ifdef __cplusplus
}
#endif
#endif
