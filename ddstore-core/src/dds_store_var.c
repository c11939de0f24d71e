/* ddstore-core: the store: variables: the collective calls (init, add,
 * join, var_free, free) and the local ones (info, offsets, foreach).
 * Objects, locks and the helpers the store's files share:
 * dds_store_internal.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "dds_store_internal.h"

/* ---- variables: collective -------------------------------------------- */

enum { MODE_INIT = 0, MODE_COPY = 1, MODE_IN_PLACE = 2 };

typedef struct var_desc {
    int64_t nrows;
    uint64_t disp;
    uint64_t itemsize;
    uint64_t dds_st_name_hash;
    int32_t dtype;
    int32_t shard_alloc;    /* 1: this rank's shard waits for the
                               transport's collective shard_alloc       */
    int64_t nelems;         /* ragged: element rows (else nrows)        */
    int32_t ragged;         /* 1: ragged_add / ragged_init              */
    int32_t pad;
    dds_shard_rec_t shard_rec; /* node-local shard service (tag 0: none) */
} var_desc_t;

/* A ragged variable's samples (NULL for a fixed one). */
typedef struct ragged_in {
    const int64_t *lengths; /* nrows entries                            */
    int64_t nelems;         /* add: given; init: the sum (set by checks) */
} ragged_in_t;

/* The transport allocates host shards (collective shard_alloc). */
static int has_shard_alloc(const dds_store_t *s)
{
    const dds_transport_ops_t *o = s->tr.ops;
    return o->shard_alloc != NULL && o->shard_free != NULL;
}

/* Ragged samples: lengths >= 0 summing to nelems (add) or setting it
 * (init); GPU and in-place payloads are not supported. */
static int check_ragged_args(const dds_store_t *s, const char *name,
                             int64_t nrows, const dds_mem_t *mem, int mode,
                             ragged_in_t *rg)
{
    const int me = s->comm.rank;
    int64_t sum = 0;
    if (mem != NULL && (int)mem->kind != DDS_MEM_HOST)
        return dds_error(-DDS_ENOSYS,
                         "ragged variable '%s': the payload is in %s memory; "
                         "ragged variables hold host payloads only: copy it "
                         "to host memory first", name,
                         dds_st_mem_name(mem->kind));
    if (mode == MODE_IN_PLACE)
        return dds_error(-DDS_ENOSYS,
                         "ragged variable '%s': DDS_ADD_IN_PLACE is not "
                         "supported (the shard holds the index next to the "
                         "payload); add it with DDS_ADD_COPY", name);
    if (nrows < 0)
        return dds_error(-DDS_EINVAL, "ragged variable '%s': rank %d: "
                         "nrows %lld < 0", name, me, (long long)nrows);
    if (nrows > DDS_RAGGED_MAX_ROWS)
        return dds_error(-DDS_EINVAL, "ragged variable '%s': rank %d: %lld "
                         "samples are too many for the index", name, me,
                         (long long)nrows);
    if (nrows > 0 && rg->lengths == NULL)
        return dds_error(-DDS_EINVAL, "ragged variable '%s': rank %d: "
                         "lengths are NULL", name, me);
    for (int64_t i = 0; i < nrows; i++) {
        int64_t l = rg->lengths[i];
        if (l < 0)
            return dds_error(-DDS_EINVAL,
                             "ragged variable '%s': rank %d: length %lld of "
                             "its sample %lld is negative",
                             name, me, (long long)l, (long long)i);
        if (l > INT64_MAX - sum)
            return dds_error(-DDS_EINVAL,
                             "ragged variable '%s': rank %d: the lengths "
                             "sum above INT64_MAX (at its sample %lld, "
                             "length %lld)",
                             name, me, (long long)i, (long long)l);
        sum += l;
    }
    if (mode == MODE_INIT)
        rg->nelems = sum;
    else if (sum != rg->nelems)
        return dds_error(-DDS_EINVAL,
                         "ragged variable '%s': rank %d: its %lld lengths "
                         "sum to %lld element rows, but the values have "
                         "%lld",
                         name, me, (long long)nrows, (long long)sum,
                         (long long)rg->nelems);
    return 0;
}

/* Local checks of init/add arguments (rg: a ragged variable's samples). */
static int check_var_args(dds_store_t *s, const char *name, const void *data,
                          int64_t nrows, size_t disp, size_t itemsize,
                          dds_dtype_t dtype, const dds_mem_t *mem, int mode,
                          ragged_in_t *rg, size_t *bytes_p, int *route_p)
{
    size_t row_bytes, index_bytes = 0;
    int rc = dds_st_check_name(name);
    if (rc != 0)
        return rc;
    if (rg != NULL) {
        rc = check_ragged_args(s, name, nrows, mem, mode, rg);
        if (rc != 0)
            return rc;
        index_bytes = dds_st_ragged_index_bytes(nrows);
        nrows = rg->nelems; /* the payload's rows from here on */
    }
    if (nrows < 0)
        return dds_error(-DDS_EINVAL, "variable '%s': nrows %lld < 0", name,
                         (long long)nrows);
    if (disp == 0)
        return dds_error(-DDS_EINVAL, "variable '%s': disp must be > 0",
                         name);
    if (itemsize == 0)
        return dds_error(-DDS_EINVAL, "variable '%s': itemsize must be > 0",
                         name);
    if ((int)dtype < 0 || (int)dtype >= DDS_DTYPE_COUNT)
        return dds_error(-DDS_ETYPE, "variable '%s': unknown dtype %d", name,
                         (int)dtype);
    if (dtype != DDS_DTYPE_RAW && dds_dtype_size(dtype) != itemsize)
        return dds_error(-DDS_ETYPE,
                         "variable '%s': dtype %s has itemsize %zu, got "
                         "itemsize %zu",
                         name, dds_dtype_name(dtype), dds_dtype_size(dtype),
                         itemsize);
    if (disp > SIZE_MAX / itemsize || disp * itemsize > (size_t)INT64_MAX)
        return dds_error(-DDS_EINVAL,
                         "variable '%s': disp %zu x itemsize %zu overflows",
                         name, disp, itemsize);
    row_bytes = disp * itemsize;
    if ((uint64_t)nrows > SIZE_MAX / row_bytes ||
        (uint64_t)nrows * row_bytes > (uint64_t)INT64_MAX - index_bytes)
        return dds_error(-DDS_EINVAL,
                         "variable '%s': %lld rows of %zu bytes overflow",
                         name, (long long)nrows, row_bytes);
    *route_p = ROUTE_HOST;
    if (mode != MODE_INIT) {
        char what[DDS_NAME_MAX + 32];
        snprintf(what, sizeof(what), "variable '%s'", name);
        if (data == NULL && nrows > 0)
            return dds_error(-DDS_EINVAL, "variable '%s': data is NULL",
                             name);
        if (mem != NULL) {
            if (mode == MODE_COPY && (int)mem->kind != DDS_MEM_HOST)
                return dds_error(-DDS_ENOSYS,
                                 "variable '%s': copying %s memory into a "
                                 "host shard is not supported; add it with "
                                 "DDS_ADD_IN_PLACE (registered in place) or "
                                 "copy it to host memory first",
                                 name, dds_st_mem_name(mem->kind));
            rc = dds_st_mem_route(s, mem, what, 1, route_p);
            if (rc != 0)
                return rc;
        }
        if (*route_p == ROUTE_HOST && nrows > 0) {
            rc = dds_st_check_host_ptr(s, data, what);
            if (rc != 0)
                return rc;
        }
    }
    *bytes_p = index_bytes + (size_t)nrows * row_bytes;
    return 0;
}

/* A new shard's contents: the rows (copy) or zeros (init); a ragged
 * shard's index (prefix sums of the lengths) before its payload. */
static void shard_fill(dds_var_t *v, const void *data, int mode,
                       const ragged_in_t *rg)
{
    char *p = v->shard;
    size_t bytes = v->shard_bytes;
    if (rg != NULL) {
        const size_t ib = dds_st_ragged_index_bytes(v->local_rows);
        int64_t *idx = (int64_t *)p;
        memset(p, 0, ib);
        idx[0] = 0;
        for (int64_t i = 0; i < v->local_rows; i++)
            idx[i + 1] = idx[i] + rg->lengths[i];
        p += ib;
        bytes -= ib;
    }
    if (bytes == 0)
        return;
    if (mode == MODE_INIT)
        memset(p, 0, bytes);
    else
        memcpy(p, data, bytes);
}

/* The pinned host mirror of a GPU shard for a transport that cannot reach
 * GPU memory: allocate, copy after the work queued on the shard's stream,
 * and wait for that copy (one stream, not the device). */

static int check_layout(const char *name, const var_desc_t *all, int n,
                        int64_t *offsets, int64_t *elem_offsets)
{
    const var_desc_t *d0 = &all[0];
    offsets[0] = 0;
    if (elem_offsets != NULL)
        elem_offsets[0] = 0;
    for (int r = 0; r < n; r++) {
        const var_desc_t *d = &all[r];
        if (d->dds_st_name_hash != d0->dds_st_name_hash)
            return dds_error(-DDS_EINVAL,
                             "variable '%s': rank %d passed a different "
                             "variable name than rank 0 (collective calls "
                             "must be made in the same order on every rank)",
                             name, r);
        if (d->disp != d0->disp || d->itemsize != d0->itemsize ||
            d->dtype != d0->dtype)
            return dds_error(
                -DDS_EINVAL,
                "variable '%s': disp, itemsize and dtype must be equal on "
                "every rank: rank %d gave disp %llu x itemsize %llu (%s), "
                "expected disp %llu x itemsize %llu (%s) as on rank 0",
                name, r, (unsigned long long)d->disp,
                (unsigned long long)d->itemsize,
                dds_dtype_name((dds_dtype_t)d->dtype),
                (unsigned long long)d0->disp,
                (unsigned long long)d0->itemsize,
                dds_dtype_name((dds_dtype_t)d0->dtype));
        if (d->ragged != d0->ragged)
            return dds_error(-DDS_EINVAL,
                             "variable '%s': rank %d made it %s, rank 0 %s "
                             "(every rank calls the same one)",
                             name, r, d->ragged ? "ragged (ragged_add/init)"
                                                : "fixed (var_add/init)",
                             d0->ragged ? "ragged" : "fixed");
        if (d->nrows > INT64_MAX - offsets[r])
            return dds_error(-DDS_EINVAL,
                             "variable '%s': the total number of rows "
                             "overflows int64 at rank %d", name, r);
        offsets[r + 1] = offsets[r] + d->nrows;
        if (elem_offsets != NULL) {
            if (d->nelems > INT64_MAX - elem_offsets[r])
                return dds_error(-DDS_EINVAL,
                                 "ragged variable '%s': the total number of "
                                 "element rows overflows int64 at rank %d",
                                 name, r);
            elem_offsets[r + 1] = elem_offsets[r] + d->nelems;
        }
    }
    if (elem_offsets != NULL && offsets[n] > INT64_MAX / 8 - n)
        return dds_error(-DDS_EINVAL,
                         "ragged variable '%s': %lld samples overflow the "
                         "index's 64-bit byte offsets",
                         name, (long long)offsets[n]);
    {
        const int64_t rows = elem_offsets ? elem_offsets[n] : offsets[n];
        if (rows > INT64_MAX / (int64_t)(d0->disp * d0->itemsize))
            return dds_error(-DDS_EINVAL,
                             "variable '%s': %lld rows of %llu bytes "
                             "overflow 64-bit byte offsets",
                             name, (long long)rows,
                             (unsigned long long)(d0->disp * d0->itemsize));
    }
    return 0;
}

static int var_create(dds_store_t *s, const char *name, const void *data,
                      int64_t nrows, size_t disp, size_t itemsize,
                      dds_dtype_t dtype, const dds_mem_t *mem, int mode,
                      ragged_in_t *rg)
{
    const dds_comm_t *c = &s->comm;
    dds_var_t *v = NULL;
    var_desc_t mine, *all = NULL;
    dds_region_desc_t rd;
    size_t bytes = 0;
    int rc, created = 0, route = ROUTE_HOST, deferred = 0, all_shared;

    rc = dds_st_fork_refuse(s, mode == MODE_INIT ? "init" : "add", name);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&s->coll_mutex);
    rc = dds_st_coll_refuse(s, mode == MODE_INIT ? "init" : "add", name);
    if (rc != 0) {
        dds_st_coll_unlock(s);
        return rc;
    }
    dds_st_coll_begin(s, mode == MODE_INIT ? COLL_INIT : COLL_ADD);

    /* 1. local checks and allocation */
    rc = check_var_args(s, name, data, nrows, disp, itemsize, dtype, mem,
                        mode, rg, &bytes, &route);
    /* a shard the store reserves: refused up front when it cannot fit,
     * never reserved page by page until the OOM killer runs */
    if (rc == 0 && mode != MODE_IN_PLACE)
        rc = dds_st_mem_check(name, bytes);
    if (rc == 0) {
        /* room in the table now, so that publishing cannot fail later */
        pthread_rwlock_wrlock(&s->table_lock);
        if (dds_st_find_var(s, name, NULL) != NULL)
            rc = dds_error(-DDS_EEXIST, "variable '%s' already exists", name);
        else if (dds_st_grow_array((void **)&s->vars, &s->cap_vars,
                                   s->nvars + 1, sizeof(dds_var_t *)) != 0)
            rc = dds_error(-DDS_ENOMEM, "variable '%s': out of memory", name);
        pthread_rwlock_unlock(&s->table_lock);
    }
    if (rc == 0) {
        v = calloc(1, sizeof(*v));
        all = calloc((size_t)c->size, sizeof(*all));
        if (v != NULL)
            v->offsets = calloc((size_t)c->size + 1, sizeof(int64_t));
        if (v != NULL && rg != NULL) {
            v->ragged = 1;
            v->elem_offsets = calloc((size_t)c->size + 1, sizeof(int64_t));
            v->index_offsets = calloc((size_t)c->size + 1, sizeof(int64_t));
        }
        if (v == NULL || all == NULL || v->offsets == NULL ||
            (rg != NULL &&
             (v->elem_offsets == NULL || v->index_offsets == NULL)))
            rc = dds_error(-DDS_ENOMEM, "variable '%s': out of memory", name);
    }
    if (rc == 0)
        rc = dds_st_life_take(&v->life, name);
    if (rc == 0) {
        strcpy(v->name, name);
        v->hash = dds_st_name_hash(name);
        v->dtype = dtype;
        v->itemsize = itemsize;
        v->disp = disp;
        v->row_bytes = disp * itemsize;
        v->nranks = c->size;
        v->local_rows = nrows;
        v->local_elems = rg != NULL ? rg->nelems : nrows;
        v->shard_bytes = bytes;
        v->mem.kind = DDS_MEM_HOST;
        if (mode == MODE_IN_PLACE) {
            v->shard = (void *)data;
            if (mem != NULL)
                v->mem = *mem;
            if (route == ROUTE_STAGED && bytes > 0) {
                rc = dds_st_mirror_create(s, v, data);
            } else if (route == ROUTE_DIRECT && bytes > 0 &&
                       dds_st_ms_serves(s, v->mem.kind)) {
                /* peers read the shard through the NIC as soon as add
                 * returns: the work that produces it, queued on its
                 * stream, must be done (one stream, not the device) */
                rc = s->ms.ops->stream_fence(s->ms.ctx, &v->mem);
                if (rc != 0)
                    rc = dds_error(rc < 0 ? rc : -rc,
                                   "variable '%s': waiting for the work "
                                   "queued on the shard's stream: %s",
                                   name, dds_last_error());
            }
        } else if (dds_st_node_shards(s)) {
            /* the node-local shard service (local; mapped by peers) */
            if (bytes > 0 && (rc = dds_st_shard_alloc(s, v, bytes)) == 0)
                shard_fill(v, data, mode, rg);
        } else if (has_shard_alloc(s)) {
            /* allocated in step 2b, once everybody agreed */
            deferred = 1;
        } else if (bytes > 0) {
            v->shard = mode == MODE_INIT ? calloc(1, bytes) : malloc(bytes);
            v->shard_owned = 1;
            if (v->shard == NULL)
                rc = dds_error(-DDS_ENOMEM,
                               "variable '%s': cannot allocate a shard of "
                               "%zu bytes",
                               name, bytes);
            else if (mode == MODE_COPY || rg != NULL)
                shard_fill(v, data, mode, rg);
        }
    }
    rc = dds_st_coll_agree(s, rc);
    if (rc != 0)
        goto fail;

    /* 2. everyone's description -> offsets, consistency */
    memset(&mine, 0, sizeof(mine));
    mine.nrows = nrows;
    mine.disp = disp;
    mine.itemsize = itemsize;
    mine.dds_st_name_hash = v->hash;
    mine.dtype = (int32_t)dtype;
    mine.shard_alloc = deferred;
    mine.nelems = v->local_elems;
    mine.ragged = rg != NULL;
    dds_st_shard_rec(s, v, &mine.shard_rec);
    rc = c->ops->allgather(c->ctx, &mine, sizeof(mine), all);
    if (rc != 0)
        rc = dds_error(rc < 0 ? rc : -rc,
                       "variable '%s': exchanging descriptions failed: %s",
                       name, dds_last_error());
    else
        rc = check_layout(name, all, c->size, v->offsets, v->elem_offsets);
    rc = dds_st_coll_agree(s, rc);
    if (rc != 0)
        goto fail;
    v->local_first = v->offsets[c->rank];
    v->total_elems = rg != NULL ? v->elem_offsets[c->size] : v->offsets[c->size];
    if (rg != NULL)
        for (int r = 0; r <= c->size; r++)
            v->index_offsets[r] = v->offsets[r] + r;

    /* 2b. deferred shards: the transport's collective shard_alloc when every
     * rank asked for it (the descriptions are the same everywhere, so every
     * rank decides alike), else malloc here */
    all_shared = 1;
    for (int r = 0; r < c->size; r++)
        if (!all[r].shard_alloc)
            all_shared = 0;
    rc = 0;
    if (all_shared) {
        void *base = NULL, *tok = NULL;
        rc = s->tr.ops->shard_alloc(s->tr.ctx, bytes, &base, &tok);
        if (rc != 0) {
            rc = dds_error(rc < 0 ? rc : -rc,
                           "variable '%s': transport '%s' could not allocate "
                           "a shard of %zu bytes: %s",
                           name, s->tr.ops->name, bytes, dds_last_error());
        } else if (tok == NULL || (bytes > 0 && base == NULL)) {
            rc = dds_error(-DDS_EIO, "variable '%s': transport '%s' "
                           "shard_alloc returned no memory", name,
                           s->tr.ops->name);
        } else {
            v->shard_token = tok;
            v->shard = bytes > 0 ? base : NULL;
        }
    } else if (deferred && bytes > 0) {
        v->shard = malloc(bytes);
        if (v->shard == NULL)
            rc = dds_error(-DDS_ENOMEM,
                           "variable '%s': cannot allocate a shard of "
                           "%zu bytes",
                           name, bytes);
        else
            v->shard_owned = 1;
    }
    if (rc == 0 && deferred && bytes > 0)
        shard_fill(v, data, mode, rg);
    if (rc == 0)
        rc = dds_st_shard_peers(s, v, &all[0].shard_rec, sizeof(*all));
    rc = dds_st_coll_agree(s, rc);
    if (rc != 0)
        goto fail;

    /* 3. the transport */
    memset(&rd, 0, sizeof(rd));
    rd.name = v->name;
    rd.base = v->mirror != NULL ? v->mirror : v->shard;
    rd.bytes = bytes;
    rd.row_bytes = v->row_bytes;
    rd.nrows = nrows;
    rd.dtype = dtype;
    rd.itemsize = itemsize;
    rd.mem = v->mem;
    rd.alloc_token = v->shard_token;
    rd.offsets = v->offsets;
    rd.nranks = c->size;
    rd.ragged = v->ragged;
    rd.elem_offsets = v->elem_offsets;
    rd.shard = v->nshard;
    if (v->mirror != NULL) {
        rd.mem.kind = DDS_MEM_HOST;
        rd.mem.device = 0;
        rd.mem.stream = NULL;
    }
    rc = s->tr.ops->region_create(s->tr.ctx, &rd, &v->region);
    if (rc != 0) {
        if (rc > 0)
            rc = -rc;
        if (dds_last_error()[0] == '\0')
            dds_error(rc, "variable '%s': transport '%s' could not register "
                          "the shard", name, s->tr.ops->name);
        v->region = NULL;
    } else {
        created = 1;
    }
    rc = dds_st_coll_agree(s, rc);
    if (rc != 0)
        goto fail;

    /* 4. publish (room was made in step 1) */
    pthread_rwlock_wrlock(&s->table_lock);
    s->vars[s->nvars++] = v;
    dds_st_forget_released(s, name);
    pthread_rwlock_unlock(&s->table_lock);
    free(all);
    DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_CORE,
            "variable '%s': %lld rows here (first %lld), %lld in all, %zu B "
            "per row, %s",
            name, (long long)nrows, (long long)v->local_first,
            (long long)v->offsets[c->size], v->row_bytes,
            dds_dtype_name(dtype));
    dds_st_coll_unlock(s);
    return 0;

fail:
    rc = dds_st_coll_failed(s, rc, mode == MODE_INIT ? "init" : "add", name);
    if (s->broken[0] != '\0' && v != NULL) {
        /* out of step: nothing collective, and peers may still read */
        dds_st_var_abandon(s, v);
        v = NULL;
    } else if (created) {
        char saved[512];
        snprintf(saved, sizeof(saved), "%s", dds_last_error());
        (void)s->tr.ops->region_destroy(s->tr.ctx, v->region);
        dds_error(rc, "%s", saved);
    }
    free(all);
    dds_st_var_release(s, v);
    dds_st_coll_unlock(s);
    return rc;
}

int dds_store_var_init(dds_store_t *s, const char *name, int64_t nrows,
                       size_t disp, size_t itemsize, dds_dtype_t dtype)
{
    if (s == NULL)
        return dds_error(-DDS_EINVAL, "dds_store_var_init: NULL store");
    return var_create(s, name, NULL, nrows, disp, itemsize, dtype, NULL,
                      MODE_INIT, NULL);
}

/* An add's flags: 0 with *mode_p set, or (unknown flags) the collective
 * failure, agreed so that nobody waits for this rank. */
static int add_mode(dds_store_t *s, const char *name, int flags, int *mode_p)
{
    int rc;
    *mode_p = MODE_COPY; /* set on every path; used only when 0 is returned */
    if (flags == DDS_ADD_COPY) {
        *mode_p = MODE_COPY;
        return 0;
    }
    if (flags == DDS_ADD_IN_PLACE) {
        *mode_p = MODE_IN_PLACE;
        return 0;
    }
    rc = dds_st_fork_refuse(s, "add", name);
    if (rc != 0)
        return rc;
    rc = dds_error(-DDS_EINVAL, "variable '%s': unknown flags %d",
                   name ? name : "(null)", flags);
    pthread_mutex_lock(&s->coll_mutex);
    if (dds_st_coll_refuse(s, "add", name) == 0) {
        dds_st_coll_begin(s, COLL_ADD);
        rc = dds_st_coll_failed(s, dds_st_coll_agree(s, rc), "add", name);
    } else
        rc = -DDS_ETIMEDOUT;
    dds_st_coll_unlock(s);
    return rc;
}

int dds_store_var_add(dds_store_t *s, const char *name, const void *data,
                      int64_t nrows, size_t disp, size_t itemsize,
                      dds_dtype_t dtype, const dds_mem_t *mem, int flags)
{
    int mode, rc;
    if (s == NULL)
        return dds_error(-DDS_EINVAL, "dds_store_var_add: NULL store");
    rc = add_mode(s, name, flags, &mode);
    if (rc != 0)
        return rc;
    return var_create(s, name, data, nrows, disp, itemsize, dtype, mem, mode,
                      NULL);
}

int dds_store_ragged_add(dds_store_t *s, const char *name, const void *data,
                         int64_t nelems, const int64_t *lengths,
                         int64_t nrows, size_t disp, size_t itemsize,
                         dds_dtype_t dtype, const dds_mem_t *mem, int flags)
{
    ragged_in_t rg;
    int mode, rc;
    if (s == NULL)
        return dds_error(-DDS_EINVAL, "dds_store_ragged_add: NULL store");
    rc = add_mode(s, name, flags, &mode);
    if (rc != 0)
        return rc;
    rg.lengths = lengths;
    rg.nelems = nelems;
    return var_create(s, name, data, nrows, disp, itemsize, dtype, mem, mode,
                      &rg);
}

int dds_store_ragged_init(dds_store_t *s, const char *name,
                          const int64_t *lengths, int64_t nrows, size_t disp,
                          size_t itemsize, dds_dtype_t dtype)
{
    ragged_in_t rg;
    if (s == NULL)
        return dds_error(-DDS_EINVAL, "dds_store_ragged_init: NULL store");
    rg.lengths = lengths;
    rg.nelems = 0;
    return var_create(s, name, NULL, nrows, disp, itemsize, dtype, NULL,
                      MODE_INIT, &rg);
}

static int has_region_join(const dds_store_t *s)
{
    const dds_transport_ops_t *o = s->tr.ops;
    return o->region_join != NULL;
}

/* The layout a transport's region_join returned, checked before the store
 * relies on it. */
static int check_joined_layout(const char *name, const dds_region_layout_t *l)
{
    if (l->nowners < 1 || l->offsets == NULL)
        return dds_error(-DDS_EIO, "join('%s'): the transport reported %d "
                         "owners", name, l->nowners);
    if ((unsigned)l->dtype >= (unsigned)DDS_DTYPE_COUNT || l->itemsize == 0 ||
        l->disp == 0 || l->row_bytes / l->itemsize != l->disp ||
        l->row_bytes % l->itemsize != 0)
        return dds_error(-DDS_EIO, "join('%s'): inconsistent row layout "
                         "(dtype %d, itemsize %zu, disp %zu, row bytes %zu)",
                         name, (int)l->dtype, l->itemsize, l->disp,
                         l->row_bytes);
    if (l->offsets[0] != 0)
        return dds_error(-DDS_EIO, "join('%s'): first row %lld, expected 0",
                         name, (long long)l->offsets[0]);
    for (int r = 0; r < l->nowners; r++)
        if (l->offsets[r + 1] < l->offsets[r])
            return dds_error(-DDS_EIO, "join('%s'): rows of owner %d are "
                             "negative", name, r);
    if (l->ragged) {
        for (int r = 0; r < l->nowners; r++)
            if (l->offsets[r + 1] - l->offsets[r] > DDS_RAGGED_MAX_ROWS)
                return dds_error(-DDS_EIO, "join('%s'): owner %d has too "
                                 "many samples", name, r);
        if (l->elem_offsets == NULL || l->elem_offsets[0] != 0)
            return dds_error(-DDS_EIO, "join('%s'): a ragged variable "
                             "without its element-row offsets", name);
        for (int r = 0; r < l->nowners; r++)
            if (l->elem_offsets[r + 1] < l->elem_offsets[r])
                return dds_error(-DDS_EIO, "join('%s'): element rows of "
                                 "owner %d are negative", name, r);
        if (l->offsets[l->nowners] > INT64_MAX / 8 - l->nowners ||
            l->elem_offsets[l->nowners] >
                INT64_MAX / (int64_t)l->row_bytes)
            return dds_error(-DDS_EIO, "join('%s'): the ragged layout "
                             "overflows 64-bit offsets", name);
    }
    return 0;
}

int dds_store_var_join(dds_store_t *s, const char *name)
{
    dds_region_layout_t lay;
    void *region = NULL;
    dds_var_t *v = NULL;
    int rc;

    if (s == NULL)
        return dds_error(-DDS_EINVAL, "dds_store_var_join: NULL store");
    rc = dds_st_check_name(name);
    if (rc != 0)
        return rc;
    if (!has_region_join(s))
        return dds_error(-DDS_ENOSYS,
                         "join('%s'): transport '%s' cannot read variables "
                         "published by another job (that is method 2's "
                         "reader)",
                         name, s->tr.ops->name);
    pthread_rwlock_rdlock(&s->table_lock);
    if (dds_st_find_var(s, name, NULL) != NULL)
        rc = dds_error(-DDS_EEXIST, "variable '%s' already exists", name);
    pthread_rwlock_unlock(&s->table_lock);
    if (rc != 0)
        return rc;

    /* The wait happens here, without any store lock held. */
    memset(&lay, 0, sizeof lay);
    rc = s->tr.ops->region_join(s->tr.ctx, name, &lay, &region);
    if (rc != 0) {
        rc = rc < 0 ? rc : -rc;
        if (dds_last_error()[0] == '\0')
            dds_error(rc, "join('%s'): transport '%s' failed", name,
                      s->tr.ops->name);
        return rc;
    }
    rc = check_joined_layout(name, &lay);
    if (rc == 0) {
        v = calloc(1, sizeof(*v));
        if (v == NULL)
            rc = dds_error(-DDS_ENOMEM, "join('%s'): out of memory", name);
    }
    if (rc == 0)
        rc = dds_st_life_take(&v->life, name);
    if (rc == 0) {
        strcpy(v->name, name);
        v->hash = dds_st_name_hash(name);
        v->dtype = lay.dtype;
        v->itemsize = lay.itemsize;
        v->disp = lay.disp;
        v->row_bytes = lay.row_bytes;
        v->nranks = lay.nowners;
        v->offsets = lay.offsets;
        lay.offsets = NULL;
        if (lay.ragged) {
            v->ragged = 1;
            v->elem_offsets = lay.elem_offsets;
            lay.elem_offsets = NULL;
            v->total_elems = v->elem_offsets[v->nranks];
            v->index_offsets =
                malloc(((size_t)v->nranks + 1) * sizeof(int64_t));
            if (v->index_offsets == NULL)
                rc = dds_error(-DDS_ENOMEM, "join('%s'): out of memory",
                               name);
            else
                for (int r = 0; r <= v->nranks; r++)
                    v->index_offsets[r] = v->offsets[r] + r;
        }
        v->mem.kind = DDS_MEM_HOST;
        v->region = region;
        v->joined = 1;
        if (rc == 0)
            rc = dds_st_shard_join(s, v);
        pthread_rwlock_wrlock(&s->table_lock);
        if (rc != 0)
            ; /* out of memory above */
        else if (dds_st_find_var(s, name, NULL) != NULL)
            rc = dds_error(-DDS_EEXIST, "variable '%s' already exists", name);
        else if (dds_st_grow_array((void **)&s->vars, &s->cap_vars,
                                   s->nvars + 1, sizeof(dds_var_t *)) != 0)
            rc = dds_error(-DDS_ENOMEM, "join('%s'): out of memory", name);
        if (rc == 0) {
            s->vars[s->nvars++] = v;
            dds_st_forget_released(s, name);
        }
        pthread_rwlock_unlock(&s->table_lock);
    }
    if (rc != 0) {
        char saved[512];
        snprintf(saved, sizeof(saved), "%s", dds_last_error());
        (void)s->tr.ops->region_destroy(s->tr.ctx, region);
        free(lay.offsets);
        free(lay.elem_offsets);
        if (v != NULL) {
            v->region = NULL;
            dds_st_var_release(s, v);
        }
        dds_error(rc, "%s", saved);
        return rc;
    }
    DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_CORE,
            "join('%s'): %lld %s owned by %d ranks of another job, %zu B "
            "per row, %s",
            name, (long long)v->offsets[v->nranks],
            v->ragged ? "ragged samples" : "rows", v->nranks, v->row_bytes,
            dds_dtype_name(v->dtype));
    return 0;
}

/* Release a detached variable's transport region and memory; returns the
 * region_destroy status. */
static int var_destroy(dds_store_t *s, dds_var_t *v)
{
    int rc = 0;
    if (v->region != NULL) {
        rc = s->tr.ops->region_destroy(s->tr.ctx, v->region);
        if (rc > 0)
            rc = -rc;
        if (rc != 0 && dds_last_error()[0] == '\0')
            dds_error(rc, "variable '%s': transport '%s' failed to release "
                          "the region", v->name, s->tr.ops->name);
    }
    dds_st_var_release(s, v);
    return rc;
}

int dds_store_var_free(dds_store_t *s, const char *name)
{
    dds_var_t *v = NULL;
    size_t idx = 0;
    int rc;

    if (s == NULL)
        return dds_error(-DDS_EINVAL, "dds_store_var_free: NULL store");
    rc = dds_st_fork_refuse(s, "free", name);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&s->coll_mutex);
    rc = dds_st_check_name(name);
    if (rc == 0) {
        pthread_rwlock_rdlock(&s->table_lock);
        if (dds_st_find_var(s, name, NULL) == NULL)
            rc = dds_st_not_live(s, name);
        pthread_rwlock_unlock(&s->table_lock);
    }
    if (rc == 0)
        rc = dds_st_coll_refuse(s, "free", name);
    if (s->broken[0] != '\0')
        goto out;
    dds_st_coll_begin(s, COLL_VAR_FREE);
    rc = dds_st_coll_failed(s, dds_st_coll_agree(s, rc), "free", name);
    if (rc != 0)
        goto out;
    pthread_rwlock_wrlock(&s->table_lock);
    v = dds_st_find_var(s, name, &idx);
    if (v != NULL) {
        memmove(&s->vars[idx], &s->vars[idx + 1],
                (s->nvars - idx - 1) * sizeof(dds_var_t *));
        s->nvars--;
        dds_st_note_released(s, name, RELEASED_BY_VAR_FREE);
        dds_st_life_end(&v->life); /* forked readers: gone */
    }
    pthread_rwlock_unlock(&s->table_lock);
    /* every rank ends its life before any releases it (dds_store_life.c) */
    rc = dds_st_coll_failed(s, dds_st_coll_agree(s, 0), "free", name);
    if (rc != 0) {
        dds_st_var_abandon(s, v); /* out of step: peers may still read it */
        goto out;
    }
    rc = v != NULL ? var_destroy(s, v) : 0;
    rc = dds_st_coll_failed(s, dds_st_coll_agree(s, rc), "free", name);
out:
    dds_st_coll_unlock(s);
    return rc;
}

int dds_store_free(dds_store_t *s)
{
    dds_var_t **vars;
    size_t n;
    int rc = 0;

    if (s == NULL)
        return dds_error(-DDS_EINVAL, "dds_store_free: NULL store");
    rc = dds_st_fork_refuse(s, "free", NULL);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&s->coll_mutex);
    pthread_rwlock_wrlock(&s->table_lock);
    vars = dds_st_detach_vars(s, &n);
    s->freed = 1;
    for (size_t i = 0; i < n; i++)
        dds_st_note_released(s, vars[i]->name, RELEASED_BY_FREE);
    pthread_rwlock_unlock(&s->table_lock);
    if (n == 0) { /* idempotent, and nothing collective to do */
        free(vars);
        dds_st_coll_unlock(s);
        return 0;
    }
    /* No rank may release its shard while a peer can still read it: every
     * rank stops reading before it enters free() (one thread makes the
     * collective calls), so one agreement here is the fence (for forked
     * readers too: the lives ended at detach, dds_store_life.c).  Its failure
     * (e.g. a communicator already finalized) does not stop the local
     * cleanup. */
    const int was_broken = s->broken[0] != '\0';
    if (!was_broken) {
        dds_st_coll_begin(s, COLL_FREE);
        rc = dds_st_coll_failed(s, dds_st_coll_agree(s, 0), "free", NULL);
    }
    /* A communicator that reports -DDS_EFREED is gone (MPI finalized): the
     * peers are gone too, so free() is local cleanup and succeeds. */
    const int comm_gone = rc == -DDS_EFREED;
    if (comm_gone) {
        dds_error_clear();
        rc = 0;
    }
    if (s->broken[0] != '\0') {
        /* out of step: release locally, never wait for a peer; the
         * variables are gone here (later calls: DDStoreError "freed").
         * free() of a store already out of step succeeds; the free() whose
         * own agreement timed out reports that. */
        for (size_t i = 0; i < n; i++)
            dds_st_var_abandon(s, vars[i]);
        free(vars);
        DDS_LOG(DDS_LOG_WARN, DDS_SUBSYS_CORE,
                "free(): %zu variables released locally (out of step since "
                "%s timed out)", n, s->broken);
        dds_st_coll_unlock(s);
        return was_broken ? 0 : rc;
    }
    /* Same order on every rank: the table keeps insertion order. */
    for (size_t i = 0; i < n; i++) {
        int r = var_destroy(s, vars[i]);
        if (r != 0 && rc == 0)
            rc = r;
    }
    free(vars);
    if (!comm_gone) {
        int arc =
            dds_st_coll_failed(s, dds_st_coll_agree(s, rc), "free", NULL);
        if (rc == 0)
            rc = arc;
    }
    DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_CORE, "free(): released %zu variables",
            n);
    dds_st_coll_unlock(s);
    return rc;
}

int dds_store_var_info(dds_store_t *s, const char *name,
                       dds_var_info_t *info_p)
{
    dds_var_t *v;
    int rc;
    if (s == NULL || info_p == NULL)
        return dds_error(-DDS_EINVAL, "dds_store_var_info: NULL argument");
    rc = dds_st_var_lookup(s, name, &v);
    if (rc != 0)
        return rc;
    info_p->total_rows = v->offsets[v->nranks];
    info_p->local_rows = v->local_rows;
    info_p->local_first = v->local_first;
    info_p->disp = v->disp;
    info_p->itemsize = v->itemsize;
    info_p->row_bytes = v->row_bytes;
    info_p->dtype = v->dtype;
    info_p->mem = v->mem;
    info_p->nranks = v->nranks;
    info_p->ragged = v->ragged;
    info_p->total_elems = v->ragged ? v->total_elems : info_p->total_rows;
    info_p->local_elems = v->ragged ? v->local_elems : v->local_rows;
    pthread_rwlock_unlock(&s->table_lock);
    return 0;
}

int dds_store_var_offsets(dds_store_t *s, const char *name, int64_t *offsets)
{
    dds_var_t *v;
    int rc;
    if (s == NULL || offsets == NULL)
        return dds_error(-DDS_EINVAL, "dds_store_var_offsets: NULL argument");
    rc = dds_st_var_lookup(s, name, &v);
    if (rc != 0)
        return rc;
    memcpy(offsets, v->offsets, ((size_t)v->nranks + 1) * sizeof(int64_t));
    pthread_rwlock_unlock(&s->table_lock);
    return 0;
}

int dds_store_var_foreach(dds_store_t *s,
                          void (*fn)(void *arg, const char *name), void *arg)
{
    if (s == NULL || fn == NULL)
        return dds_error(-DDS_EINVAL, "dds_store_var_foreach: NULL argument");
    pthread_rwlock_rdlock(&s->table_lock);
    for (size_t i = 0; i < s->nvars; i++)
        fn(arg, s->vars[i]->name);
    pthread_rwlock_unlock(&s->table_lock);
    return 0;
}

