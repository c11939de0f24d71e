/* ddstore-loop: the in-process loopback transport (loop.h).
 *
 * region_create exchanges each rank's shard base and size over the store's
 * communicator; read() serves every op with memcpy from the owner's shard
 * (bounds checked).  No registrations, no epochs: the shards are this
 * process's memory.  Readers are tokens (threads and forked children read
 * the same way: a forked child reads its copy of the shards).
 */
#include "ddstore/loop.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ddstore/errors.h"

#if defined(__has_include)
#if __has_include("ddstore/loop_version.h")
#include "ddstore/loop_version.h"
#endif
#endif
#ifndef DDLOOP_VERSION
#define DDLOOP_VERSION "0.0.0-unknown"
#endif

const char *ddloop_version(void)
{
    return DDLOOP_VERSION;
}

typedef struct loop_region {
    int n;
    char **base;                 /* every rank's shard                        */
    size_t *bytes;
    struct loop_region *next;
} loop_region_t;

typedef struct loop_tr {
    dds_comm_t comm;             /* the store's (borrowed)                    */
    pthread_mutex_t mu;
    loop_region_t *live;         /* regions not destroyed yet                 */
    int reader_token;
} loop_tr_t;

/* Who this process is: its pid and a number drawn once per process. */
typedef struct loop_who {
    int64_t pid;
    uint64_t nonce;
} loop_who_t;

static uint64_t g_nonce;
static pthread_once_t g_nonce_once = PTHREAD_ONCE_INIT;

static void draw_nonce(void)
{
    struct timespec ts;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f == NULL || fread(&g_nonce, sizeof g_nonce, 1, f) != 1) {
        clock_gettime(CLOCK_REALTIME, &ts);
        g_nonce = (uint64_t)ts.tv_sec * 1000000007u + (uint64_t)ts.tv_nsec;
    }
    if (f != NULL)
        fclose(f);
    g_nonce ^= (uint64_t)(uintptr_t)&g_nonce;
}

static void unlink_region(loop_tr_t *t, loop_region_t *r)
{
    pthread_mutex_lock(&t->mu);
    for (loop_region_t **p = &t->live; *p != NULL; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
    pthread_mutex_unlock(&t->mu);
}

static void free_region(loop_region_t *r)
{
    if (r == NULL)
        return;
    free(r->base);
    free(r->bytes);
    free(r);
}

static int lp_region_create(void *ctx, const dds_region_desc_t *local,
                            void **region_p)
{
    loop_tr_t *t = ctx;
    struct {
        uint64_t base;
        uint64_t bytes;
    } mine = {(uint64_t)(uintptr_t)local->base, (uint64_t)local->bytes}, *all;
    int n = t->comm.size, rc;
    loop_region_t *r;

    all = calloc((size_t)n, sizeof *all);
    r = calloc(1, sizeof *r);
    if (r != NULL) {
        r->base = calloc((size_t)n, sizeof *r->base);
        r->bytes = calloc((size_t)n, sizeof *r->bytes);
    }
    /* the exchange is collective: take part even when out of memory */
    rc = t->comm.ops->allgather(t->comm.ctx, &mine, sizeof mine,
                                all != NULL ? (void *)all : (void *)&mine);
    if (rc == 0 && (all == NULL || r == NULL || r->base == NULL ||
                    r->bytes == NULL))
        rc = dds_error(-DDS_ENOMEM, "loop transport: region '%s': out of "
                                    "memory", local->name);
    if (rc != 0) {
        free(all);
        free_region(r);
        return rc;
    }
    r->n = n;
    for (int i = 0; i < n; i++) {
        r->base[i] = (char *)(uintptr_t)all[i].base;
        r->bytes[i] = (size_t)all[i].bytes;
    }
    free(all);
    pthread_mutex_lock(&t->mu);
    r->next = t->live;
    t->live = r;
    pthread_mutex_unlock(&t->mu);
    *region_p = r;
    return 0;
}

static int lp_region_destroy(void *ctx, void *region)
{
    if (region != NULL) {
        unlink_region(ctx, region);
        free_region(region);
    }
    return 0;
}

static void lp_region_abandon(void *ctx, void *region)
{
    (void)lp_region_destroy(ctx, region);
}

static int lp_reader_open(void *ctx, int flags, void **reader_p)
{
    loop_tr_t *t = ctx;
    (void)flags;
    *reader_p = &t->reader_token;
    return 0;
}

static void lp_reader_close(void *ctx, void *reader)
{
    (void)ctx;
    (void)reader;
}

static int lp_read(void *ctx, void *reader, void *region,
                   const dds_read_op_t *ops, size_t nops, void *dst,
                   void *dst_handle, const dds_mem_t *dst_mem, void *staging,
                   void *staging_handle, dds_prof_t *prof)
{
    loop_region_t *r = region;
    (void)ctx;
    (void)reader;
    (void)dst_handle;
    (void)staging_handle;
    if (dst_mem != NULL && dst_mem->kind != DDS_MEM_HOST)
        return dds_error(-DDS_ENOSYS, "loop transport: GPU destination "
                                      "(the store stages GPU memory)");
    for (size_t i = 0; i < nops; i++) {
        const dds_read_op_t *op = &ops[i];
        if (r == NULL || op->owner < 0 || op->owner >= r->n ||
            op->src_offset < 0 ||
            (uint64_t)op->src_offset + op->len > r->bytes[op->owner] ||
            (op->staged ? staging : dst) == NULL)
            return dds_error(-DDS_EINVAL,
                             "loop transport: read %zu of %zu out of range "
                             "(owner %d of %d, offset %lld, %zu bytes, shard "
                             "of %zu bytes)",
                             i, nops, op->owner, r != NULL ? r->n : 0,
                             (long long)op->src_offset, op->len,
                             r != NULL && op->owner >= 0 && op->owner < r->n
                                 ? r->bytes[op->owner]
                                 : (size_t)0);
        if (op->len > 0)
            memcpy((op->staged ? (char *)staging : (char *)dst) +
                       op->dst_offset,
                   r->base[op->owner] + op->src_offset, op->len);
    }
    (void)prof;   /* the store times the call */
    return 0;
}

static void lp_destroy(void *ctx)
{
    loop_tr_t *t = ctx;
    if (t == NULL)
        return;
    while (t->live != NULL) {
        loop_region_t *r = t->live;
        t->live = r->next;
        free_region(r);
    }
    pthread_mutex_destroy(&t->mu);
    free(t);
}

static const dds_transport_ops_t loop_ops = {
    .size = sizeof(dds_transport_ops_t),
    .name = "loop",
    .region_create = lp_region_create,
    .region_destroy = lp_region_destroy,
    .reader_open = lp_reader_open,
    .reader_close = lp_reader_close,
    .read = lp_read,
    .destroy = lp_destroy,
    .region_abandon = lp_region_abandon,
};

int ddloop_transport_create(const dds_comm_t *comm,
                            dds_transport_t *transport_p)
{
    loop_who_t me, *all;
    loop_tr_t *t;
    int rc, foreign = -1;

    if (comm == NULL || comm->ops == NULL || transport_p == NULL ||
        comm->size < 1)
        return dds_error(-DDS_EINVAL, "ddloop_transport_create: NULL argument "
                                      "or empty communicator");
    pthread_once(&g_nonce_once, draw_nonce);
    me.pid = (int64_t)getpid();
    me.nonce = g_nonce;
    all = calloc((size_t)comm->size, sizeof *all);
    rc = comm->ops->allgather(comm->ctx, &me, sizeof me,
                              all != NULL ? (void *)all : (void *)&me);
    if (rc == 0 && all == NULL)
        rc = dds_error(-DDS_ENOMEM, "loop transport: out of memory");
    for (int i = 0; rc == 0 && i < comm->size; i++)
        if (all[i].pid != me.pid || all[i].nonce != me.nonce) {
            foreign = i;
            break;
        }
    /* every rank saw the same list: a foreign rank fails them all */
    if (rc == 0 && foreign >= 0)
        rc = dds_error(-DDS_ENOSYS,
                       "the loop transport serves only ranks in one process; "
                       "rank %d of %d is another process (pid %lld; this is "
                       "rank %d, pid %lld)",
                       foreign, comm->size, (long long)all[foreign].pid,
                       comm->rank, (long long)me.pid);
    free(all);
    if (rc != 0)
        return rc;
    t = calloc(1, sizeof *t);
    if (t == NULL)
        return dds_error(-DDS_ENOMEM, "loop transport: out of memory");
    t->comm = *comm;
    pthread_mutex_init(&t->mu, NULL);
    memset(transport_p, 0, sizeof *transport_p);
    transport_p->ops = &loop_ops;
    transport_p->ctx = t;
    transport_p->caps = DDS_TRANSPORT_CAP_THREAD_SAFE |
                        DDS_TRANSPORT_CAP_READERS | DDS_TRANSPORT_CAP_FORK;
    return 0;
}
