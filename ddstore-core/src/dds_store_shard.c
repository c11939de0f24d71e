/* ddstore-core: the store's use of the node-local shard service
 * (ddstore/shard.h, dds_shard.c): a variable's host shard allocated there,
 * the owners' records turned into the table of same-node shards this
 * process may map (at add from the exchanged descriptions, at join from the
 * transport), and the read step that serves those owners' ops with memcpy
 * before the transport sees the rest.  Objects: dds_store_internal.h. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dds_store_internal.h"

int dds_st_node_shards(const dds_store_t *s)
{
    return (s->tr.caps & DDS_TRANSPORT_CAP_NODE_SHARDS) != 0;
}

static int node_map(const dds_store_t *s)
{
    return (s->tr.caps & DDS_TRANSPORT_CAP_NODE_MAP) != 0;
}

#define HAS_OP(s, field) DDS_ST_HAS_OP(s, field)

int dds_st_shard_alloc(dds_store_t *s, dds_var_t *v, size_t bytes)
{
    int rc = dds_shard_alloc(bytes, node_map(s), &v->nshard);
    if (rc != 0)
        return dds_error(rc, "variable '%s': %s", v->name, dds_last_error());
    v->shard = dds_shard_base(v->nshard);
    return 0;
}

void dds_st_shard_rec(const dds_store_t *s, const dds_var_t *v,
                      dds_shard_rec_t *rec)
{
    dds_shard_export(node_map(s) ? v->nshard : NULL, rec);
}

/* Owner r's shard bytes by v's layout (a ragged shard: index, then its
 * element rows). */
static uint64_t layout_bytes(const dds_var_t *v, int r)
{
    const int64_t rows = v->offsets[r + 1] - v->offsets[r];
    if (!v->ragged)
        return (uint64_t)rows * v->row_bytes;
    return dds_ragged_index_bytes(rows) +
           (uint64_t)(v->elem_offsets[r + 1] - v->elem_offsets[r]) *
               v->row_bytes;
}

static int peers_from(dds_var_t *v, const void *recs, size_t stride, int self)
{
    uint64_t *want = malloc(((size_t)v->nranks + 1) * sizeof(uint64_t));
    int rc;
    if (want == NULL)
        return dds_error(-DDS_ENOMEM, "variable '%s': out of memory",
                         v->name);
    for (int r = 0; r < v->nranks; r++)
        want[r] = layout_bytes(v, r);
    rc = dds_shard_peers_new(v->name, v->nranks, recs, stride, want, self,
                             &v->peers);
    free(want);
    return rc;
}

int dds_st_shard_peers(dds_store_t *s, dds_var_t *v, const void *recs,
                       size_t stride)
{
    if (!node_map(s))
        return 0;
    return peers_from(v, recs, stride, s->comm.rank);
}

int dds_st_shard_join(dds_store_t *s, dds_var_t *v)
{
    dds_shard_rec_t *recs;
    int rc;
    if (!node_map(s) || !HAS_OP(s, region_shards))
        return 0;
    recs = calloc((size_t)v->nranks, sizeof(*recs));
    if (recs == NULL)
        return dds_error(-DDS_ENOMEM, "join('%s'): out of memory", v->name);
    rc = s->tr.ops->region_shards(s->tr.ctx, v->region, recs, v->nranks);
    if (rc != 0)
        rc = dds_error(rc < 0 ? rc : -rc, "join('%s'): %s", v->name,
                       dds_last_error());
    else
        rc = peers_from(v, recs, sizeof(*recs), -1);
    free(recs);
    return rc;
}

int dds_st_shard_serve(dds_store_t *s, dds_var_t *v, dds_read_op_t *ops,
                       size_t *nops_p, char *dst, char *staging,
                       size_t *served_p)
{
    size_t sops = 0, sbytes = 0;
    uint64_t t0;
    int rc;

    *served_p = 0;
    if (v->peers == NULL || *nops_p == 0)
        return 0;
    t0 = dds_prof_now();
    rc = dds_shard_serve(v->peers, ops, nops_p, dst, staging, &sops,
                         &sbytes);
    if (rc == 0 && sops > 0 && HAS_OP(s, region_check))
        rc = s->tr.ops->region_check(s->tr.ctx, v->region);
    if (t0 != 0 && sops > 0)
        dds_prof_add(&v->prof, DDS_PROF_NS_POST, dds_prof_now() - t0);
    if (rc != 0) {
        if (rc > 0)
            rc = -rc;
        return dds_error(rc, "read of '%s': %s", v->name, dds_last_error());
    }
    *served_p = sops;
    return 0;
}
