/* ddstore-mpi: the MPI RMA transport, driven directly with hand-made read
 * ops (no store).  Run at 1, 2, 4 ranks: tools/ddrun -n N ./transport_mpitest
 *
 * MPI_Get is intercepted through the MPI profiling interface (PMPI) to count
 * the gets and record the largest count, so that one get per op within
 * max_read_bytes (ops split by the store: transport.h) is checked directly.
 *
 * The ops keep transport.h's contract: none reads this rank's own shard
 * (the store serves those rows itself, DDS_TRANSPORT_CAP_LOCAL_SELF), so at
 * one rank only the checks run. */
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "ddstore/errors.h"
#include "ddstore/mpi.h"
#include "ddstore/transport.h"
#include "ddmpi_test.h"

/* ---- PMPI interception of MPI_Get ------------------------------------------ */

static unsigned long ddt_gets;      /* atomic */
static int ddt_max_count;           /* atomic max */

int MPI_Get(void *origin_addr, int origin_count, MPI_Datatype origin_datatype,
            int target_rank, MPI_Aint target_disp, int target_count,
            MPI_Datatype target_datatype, MPI_Win win)
{
    int m = __atomic_load_n(&ddt_max_count, __ATOMIC_RELAXED);

    __atomic_add_fetch(&ddt_gets, 1, __ATOMIC_RELAXED);
    while (origin_count > m &&
           !__atomic_compare_exchange_n(&ddt_max_count, &m, origin_count, 0,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    return PMPI_Get(origin_addr, origin_count, origin_datatype, target_rank,
                    target_disp, target_count, target_datatype, win);
}

static void ddt_gets_reset(void)
{
    __atomic_store_n(&ddt_gets, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&ddt_max_count, 0, __ATOMIC_RELAXED);
}

/* ---- helpers ----------------------------------------------------------------- */

static const dds_mem_t host_mem = {DDS_MEM_HOST, 0, NULL};

/* A region whose shard on rank r has bytes_of(r) bytes of ddt_pat(r, .). */
typedef struct {
    void *region;
    uint8_t *shard;
    size_t *bytes;      /* every rank's shard size */
} ddt_region_t;

static int ddt_region_make(dds_transport_t *t, const char *name,
                           size_t (*bytes_of)(int r), ddt_region_t *out)
{
    dds_region_desc_t d;
    size_t k;
    int r, rc;

    memset(out, 0, sizeof(*out));
    out->bytes = calloc((size_t)ddt_size, sizeof(size_t));
    for (r = 0; r < ddt_size; r++)
        out->bytes[r] = bytes_of(r);
    if (out->bytes[ddt_rank]) {
        out->shard = malloc(out->bytes[ddt_rank]);
        for (k = 0; k < out->bytes[ddt_rank]; k++)
            out->shard[k] = ddt_pat(ddt_rank, k);
    }
    memset(&d, 0, sizeof(d));
    d.name = name;
    d.base = out->shard;
    d.bytes = out->bytes[ddt_rank];
    d.row_bytes = 1;
    d.nrows = (int64_t)d.bytes;
    d.dtype = DDS_DTYPE_UINT8;
    d.itemsize = 1;
    d.mem = host_mem;
    rc = t->ops->region_create(t->ctx, &d, &out->region);
    return rc;
}

static void ddt_region_drop(dds_transport_t *t, ddt_region_t *g)
{
    if (g->region)
        CHECK_OK(t->ops->region_destroy(t->ctx, g->region));
    free(g->shard);
    free(g->bytes);
    memset(g, 0, sizeof(*g));
}

/* Check dst[dst_offset..+len) against owner's pattern at src_offset. */
static int ddt_verify(const uint8_t *buf, size_t dst_offset, int owner,
                      int64_t src_offset, size_t len)
{
    size_t k;

    for (k = 0; k < len; k++)
        if (buf[dst_offset + k] != ddt_pat(owner, (uint64_t)src_offset + k))
            return 0;
    return 1;
}

static size_t bytes_varied(int r) { return 1000 + 337 * (size_t)r; }
static size_t bytes_last_empty(int r) { return r == ddt_size - 1 ? 0 : 4096 + (size_t)r; }
static size_t bytes_64m(int r) { (void)r; return (size_t)64 << 20; }

static dds_transport_t ddt_transport(void)
{
    dds_transport_t t;
    int rc;

    memset(&t, 0, sizeof(t));
    rc = ddmpi_transport_create(MPI_COMM_WORLD, &t);
    CHECK_OK(rc);
    return t;
}

/* ---- tests --------------------------------------------------------------------- */

static void test_create(dds_transport_t *t)
{
    ddt_section = "create";
    CHECK(t->ops && t->ops->size == sizeof(dds_transport_ops_t));
    CHECK(t->ops && strcmp(t->ops->name, "mpi") == 0);
    CHECK(t->caps & DDS_TRANSPORT_CAP_LOCAL_SELF);
    CHECK(t->caps & DDS_TRANSPORT_CAP_THREAD_SAFE);      /* MULTIPLE here */
    CHECK(!(t->caps & (DDS_TRANSPORT_CAP_HMEM_CUDA | DDS_TRANSPORT_CAP_HMEM_ROCM)));
    CHECK_EQ(t->max_read_bytes, (size_t)1 << 30);
    CHECK(t->ops->read && t->ops->region_create && t->ops->region_destroy);
    CHECK(t->ops->destroy && t->ops->epoch_begin && t->ops->epoch_end);
    CHECK_OK(t->ops->epoch_begin(t->ctx));
    CHECK_OK(t->ops->epoch_end(t->ctx));

    CHECK_RC(ddmpi_transport_create(MPI_COMM_NULL, t), -DDS_EINVAL);
    CHECK_RC(ddmpi_transport_create(MPI_COMM_WORLD, NULL), -DDS_EINVAL);
}

/* A random owner other than this rank (at least 2 ranks). */
static int ddt_other(uint64_t *seed)
{
    int o = (int)(ddt_rand(seed) % (uint64_t)(ddt_size - 1));

    return o >= ddt_rank ? o + 1 : o;
}

/* Whole shards of every owner, first/last bytes, random ops, staged ops. */
static void test_every_owner(dds_transport_t *t)
{
    ddt_region_t g;
    dds_read_op_t *ops;
    uint8_t *dst, *staging;
    size_t total = 0, off = 0, i, nops;
    uint64_t seed = 12345 + (uint64_t)ddt_rank;
    int r, ok;

    ddt_section = "every owner";
    CHECK_OK(ddt_region_make(t, "varied", bytes_varied, &g));
    for (r = 0; r < ddt_size; r++)
        total += g.bytes[r];
    if (total < 300 * 64)
        total = 300 * 64;  /* room for the random rounds below */
    dst = calloc(total, 1);
    ops = calloc(4096, sizeof(*ops));

    /* one op per other owner, each whole shard, in reverse owner order */
    for (r = ddt_size - 1, i = 0; r >= 0; r--) {
        if (r == ddt_rank)
            continue;
        ops[i].owner = r;
        ops[i].src_offset = 0;
        ops[i].len = g.bytes[r];
        ops[i].dst_offset = off;
        off += g.bytes[r];
        i++;
    }
    nops = i;
    ddt_gets_reset();
    CHECK_OK(t->ops->read(t->ctx, NULL, g.region, ops, nops, dst, NULL,
                          &host_mem, NULL, NULL, NULL));
    ok = 1;
    for (i = 0; i < nops; i++)
        ok &= ddt_verify(dst, ops[i].dst_offset, ops[i].owner, 0, ops[i].len);
    CHECK(ok);
    CHECK_EQ(ddt_gets, ddt_size - 1);    /* one get per op */

    /* this rank's own shard: out of contract, refused */
    ops[0] = (dds_read_op_t){ddt_rank, 0, 0, 1, 0};
    CHECK_RC(t->ops->read(t->ctx, NULL, g.region, ops, 1, dst, NULL, NULL,
                          NULL, NULL, NULL), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "own shard");

    /* first and last byte of every shard, one op each, dst_mem NULL = host */
    memset(dst, 0, total);
    for (r = 0, nops = 0; r < ddt_size; r++) {
        if (r == ddt_rank)
            continue;
        ops[nops++] = (dds_read_op_t){r, 0, 0, 1, 2 * (size_t)r};
        ops[nops++] = (dds_read_op_t){r, 0, (int64_t)g.bytes[r] - 1, 1,
                                      2 * (size_t)r + 1};
    }
    CHECK_OK(t->ops->read(t->ctx, NULL, g.region, ops, nops, dst, NULL, NULL,
                          NULL, NULL, NULL));
    ok = 1;
    for (r = 0; r < ddt_size; r++) {
        if (r == ddt_rank)
            continue;
        ok &= dst[2 * r] == ddt_pat(r, 0);
        ok &= dst[2 * r + 1] == ddt_pat(r, g.bytes[r] - 1);
    }
    CHECK(ok);

    /* many random ops, any owner order, half of them staged */
    staging = calloc(total * 4, 1);
    for (int round = 0; round < 20 && ddt_size > 1; round++) {
        size_t doff = 0, soff = 0;

        nops = 1 + ddt_rand(&seed) % 300;
        for (i = 0; i < nops; i++) {
            int o = ddt_other(&seed);
            size_t len = 1 + ddt_rand(&seed) % 64;
            int64_t so = (int64_t)(ddt_rand(&seed) % (g.bytes[o] - len + 1));

            ops[i].owner = o;
            ops[i].src_offset = so;
            ops[i].len = len;
            ops[i].staged = (int)(ddt_rand(&seed) & 1);
            if (ops[i].staged) {
                ops[i].dst_offset = soff;
                soff += len;
            } else {
                ops[i].dst_offset = doff;
                doff += len;
            }
        }
        if (doff > total || soff > total * 4) {
            CHECK(0);
            break;
        }
        CHECK_OK(t->ops->read(t->ctx, NULL, g.region, ops, nops, dst, NULL,
                              &host_mem, staging, NULL, NULL));
        ok = 1;
        for (i = 0; i < nops; i++)
            ok &= ddt_verify(ops[i].staged ? staging : dst, ops[i].dst_offset,
                             ops[i].owner, ops[i].src_offset, ops[i].len);
        CHECK(ok);
    }
    /* nops == 0 is a no-op; ops may be NULL then */
    CHECK_OK(t->ops->read(t->ctx, NULL, g.region, NULL, 0, dst, NULL, NULL,
                          NULL, NULL, NULL));

    /* bad ops: nothing is posted, clear errors */
    ops[0] = (dds_read_op_t){ddt_size, 0, 0, 1, 0};
    CHECK_RC(t->ops->read(t->ctx, NULL, g.region, ops, 1, dst, NULL, NULL,
                          NULL, NULL, NULL), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "owner");
    ops[0] = (dds_read_op_t){-1, 0, 0, 1, 0};
    CHECK_RC(t->ops->read(t->ctx, NULL, g.region, ops, 1, dst, NULL, NULL,
                          NULL, NULL, NULL), -DDS_EINVAL);
    r = ddt_size - 1;
    ops[0] = (dds_read_op_t){r, 0, (int64_t)g.bytes[r] - 3, 4, 0};
    CHECK_RC(t->ops->read(t->ctx, NULL, g.region, ops, 1, dst, NULL, NULL,
                          NULL, NULL, NULL), -DDS_ERANGE);
    CHECK_CONTAINS(dds_last_error(), "varied");
    ops[0] = (dds_read_op_t){r, 0, -1, 1, 0};
    CHECK_RC(t->ops->read(t->ctx, NULL, g.region, ops, 1, dst, NULL, NULL,
                          NULL, NULL, NULL), -DDS_ERANGE);
    ops[0] = (dds_read_op_t){r, 0, INT64_MAX, 2, 0};
    CHECK_RC(t->ops->read(t->ctx, NULL, g.region, ops, 1, dst, NULL, NULL,
                          NULL, NULL, NULL), -DDS_ERANGE);
    ops[0] = (dds_read_op_t){0, 1, 0, 1, 0};
    CHECK_RC(t->ops->read(t->ctx, NULL, g.region, ops, 1, dst, NULL, NULL,
                          NULL, NULL, NULL), -DDS_EINVAL);   /* no staging */
    CHECK_CONTAINS(dds_last_error(), "staging");
    {
        dds_mem_t gpu = {DDS_MEM_CUDA, 0, NULL};
        dds_mem_t rocm = {DDS_MEM_ROCM, 1, NULL};

        ops[0] = (dds_read_op_t){0, 0, 0, 1, 0};
        CHECK_RC(t->ops->read(t->ctx, NULL, g.region, ops, 1, dst, NULL, &gpu,
                              NULL, NULL, NULL), -DDS_ENOSYS);
        CHECK_CONTAINS(dds_last_error(), "host memory");
        CHECK_RC(t->ops->read(t->ctx, NULL, g.region, ops, 1, dst, NULL, &rocm,
                              NULL, NULL, NULL), -DDS_ENOSYS);
    }
    CHECK_RC(t->ops->read(t->ctx, NULL, NULL, ops, 1, dst, NULL, NULL, NULL,
                          NULL, NULL), -DDS_EINVAL);
    /* still fine after the errors */
    r = (ddt_rank + 1) % ddt_size;
    if (r != ddt_rank) {
        ops[0] = (dds_read_op_t){r, 0, (int64_t)g.bytes[r] - 4, 4, 0};
        CHECK_OK(t->ops->read(t->ctx, NULL, g.region, ops, 1, dst, NULL, NULL,
                              NULL, NULL, NULL));
        CHECK(ddt_verify(dst, 0, r, (int64_t)g.bytes[r] - 4, 4));
    }

    MPI_Barrier(MPI_COMM_WORLD);  /* nobody frees while others still read */
    ddt_region_drop(t, &g);
    free(staging);
    free(ops);
    free(dst);
}

/* The last rank's shard is empty (NULL base): allowed, readable around it. */
static void test_zero_shard(dds_transport_t *t)
{
    ddt_region_t g;
    dds_read_op_t ops[8];
    uint8_t dst[64];
    int r, last = ddt_size - 1, rc;

    ddt_section = "zero shard";
    rc = ddt_region_make(t, "empty-last", bytes_last_empty, &g);
    CHECK_OK(rc);
    if (rc)
        return;
    for (r = 0; r < last; r++) {
        if (r == ddt_rank)
            continue;
        ops[0] = (dds_read_op_t){r, 0, (int64_t)g.bytes[r] - 8, 8, 0};
        CHECK_OK(t->ops->read(t->ctx, NULL, g.region, ops, 1, dst, NULL, NULL,
                              NULL, NULL, NULL));
        CHECK(ddt_verify(dst, 0, r, (int64_t)g.bytes[r] - 8, 8));
    }
    /* zero-length op on the empty shard is fine; one byte is out of range */
    ops[0] = (dds_read_op_t){last, 0, 0, 0, 0};
    CHECK_OK(t->ops->read(t->ctx, NULL, g.region, ops, 1, dst, NULL, NULL,
                          NULL, NULL, NULL));
    ops[0] = (dds_read_op_t){last, 0, 0, 1, 0};
    CHECK_RC(t->ops->read(t->ctx, NULL, g.region, ops, 1, dst, NULL, NULL,
                          NULL, NULL, NULL), -DDS_ERANGE);
    MPI_Barrier(MPI_COMM_WORLD);
    ddt_region_drop(t, &g);

    /* every shard empty */
    {
        dds_region_desc_t d;
        void *reg = NULL;

        memset(&d, 0, sizeof(d));
        d.name = "all-empty";
        d.row_bytes = 8;
        d.mem = host_mem;
        CHECK_OK(t->ops->region_create(t->ctx, &d, &reg));
        ops[0] = (dds_read_op_t){0, 0, 0, 1, 0};
        CHECK_RC(t->ops->read(t->ctx, NULL, reg, ops, 1, dst, NULL, NULL, NULL,
                              NULL, NULL), -DDS_ERANGE);
        CHECK_OK(t->ops->region_destroy(t->ctx, reg));
    }
}

/* 64 MiB per rank: whole remote shard, reads at high offsets. */
static void test_big(dds_transport_t *t)
{
    ddt_region_t g;
    dds_read_op_t ops[16];
    size_t big = bytes_64m(0), n = 0, i;
    uint8_t *dst;
    int peer = (ddt_rank + 1) % ddt_size, ok, rc;

    ddt_section = "64 MiB";
    rc = ddt_region_make(t, "big", bytes_64m, &g);
    CHECK_OK(rc);
    dst = malloc(big);
    if (rc || !dst)
        goto out;
    if (peer == ddt_rank)
        goto out;   /* one rank: nothing remote */
    ops[0] = (dds_read_op_t){peer, 0, 0, big, 0};
    ddt_gets_reset();
    CHECK_OK(t->ops->read(t->ctx, NULL, g.region, ops, 1, dst, NULL, NULL,
                          NULL, NULL, NULL));
    CHECK(ddt_verify(dst, 0, peer, 0, big));
    CHECK_EQ(ddt_gets, 1);   /* 64 MiB < 1 GiB: one get */
    /* high offsets of every other owner */
    memset(dst, 0, big);
    for (int r = 0; r < ddt_size; r++) {
        size_t at = (size_t)r * 200000;

        if (r == ddt_rank)
            continue;

        ops[n++] = (dds_read_op_t){r, 0, (int64_t)big - 4096, 4096, at};
        ops[n++] = (dds_read_op_t){r, 0, (int64_t)big - 1, 1, at + 5000};
        ops[n++] = (dds_read_op_t){r, 0, (int64_t)(big / 2 + 17), 100000,
                                   at + 6007};
    }
    CHECK_OK(t->ops->read(t->ctx, NULL, g.region, ops, n, dst, NULL, NULL,
                          NULL, NULL, NULL));
    ok = 1;
    for (i = 0; i < n; i++)
        ok &= ddt_verify(dst, ops[i].dst_offset, ops[i].owner, ops[i].src_offset,
                         ops[i].len);
    CHECK(ok);
out:
    MPI_Barrier(MPI_COMM_WORLD);
    ddt_region_drop(t, &g);
    free(dst);
}

/* DDSTORE_MPI_MAX_READ_BYTES: the transport advertises it, the store
 * splits its reads there (transport.h), and an op above it is refused
 * before anything is posted. */
static void test_split(void)
{
    dds_transport_t t;
    ddt_region_t g;
    dds_read_op_t *ops = NULL;
    size_t len = ((size_t)1 << 20) + 123, limit = 4096, nops = 0, done;
    uint8_t *dst = NULL;
    int peer = (ddt_rank + 1) % ddt_size, rc;

    ddt_section = "split";
    setenv("DDSTORE_MPI_MAX_READ_BYTES", "4K", 1);
    memset(&t, 0, sizeof(t));
    rc = ddmpi_transport_create(MPI_COMM_WORLD, &t);
    unsetenv("DDSTORE_MPI_MAX_READ_BYTES");
    CHECK_OK(rc);
    if (rc)
        return;
    CHECK_EQ(t.max_read_bytes, limit);
    rc = ddt_region_make(&t, "split", bytes_64m, &g);
    CHECK_OK(rc);
    dst = malloc(2 * len);
    ops = calloc(len / limit + 4, sizeof(*ops));
    if (!rc && dst && ops && peer != ddt_rank) {
        /* len bytes at offset 1000 as the planner splits them, then 4096 */
        for (done = 0; done < len; done += limit)
            ops[nops++] = (dds_read_op_t){
                peer, 0, (int64_t)(1000 + done),
                len - done < limit ? len - done : limit, done};
        ops[nops++] = (dds_read_op_t){peer, 0, (int64_t)bytes_64m(0) - 4096,
                                      4096, len};
        ddt_gets_reset();
        CHECK_OK(t.ops->read(t.ctx, NULL, g.region, ops, nops, dst, NULL,
                             NULL, NULL, NULL, NULL));
        CHECK(ddt_verify(dst, 0, peer, 1000, len));
        CHECK(ddt_verify(dst, len, peer, (int64_t)bytes_64m(0) - 4096, 4096));
        CHECK_EQ(ddt_gets, (unsigned long)nops);   /* one get each */
        CHECK_EQ(ddt_max_count, limit);
        /* one byte above the limit: out of contract, nothing posted */
        ops[0] = (dds_read_op_t){peer, 0, 0, limit + 1, 0};
        ddt_gets_reset();
        CHECK_RC(t.ops->read(t.ctx, NULL, g.region, ops, 1, dst, NULL, NULL,
                             NULL, NULL, NULL), -DDS_EINVAL);
        CHECK_CONTAINS(dds_last_error(), "max_read_bytes");
        CHECK_EQ(ddt_gets, 0);
    }
    free(ops);
    MPI_Barrier(MPI_COMM_WORLD);
    ddt_region_drop(&t, &g);
    t.ops->destroy(t.ctx);
    free(dst);

    /* bad values fail on every rank, even when only rank 0 has them */
    ddt_section = "bad env";
    {
        const char *bad[] = {"0", "-5", "3G", "abc"};

        for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
            if (ddt_rank == 0)
                setenv("DDSTORE_MPI_MAX_READ_BYTES", bad[k], 1);
            memset(&t, 0, sizeof(t));
            rc = ddmpi_transport_create(MPI_COMM_WORLD, &t);
            unsetenv("DDSTORE_MPI_MAX_READ_BYTES");
            CHECK_RC(rc, -DDS_ECONFIG);
            if (ddt_rank == 0)
                CHECK_CONTAINS(dds_last_error(), "DDSTORE_MPI_MAX_READ_BYTES");
            if (rc == 0)
                t.ops->destroy(t.ctx);
        }
    }
}

/* A GPU shard on one rank fails region_create on every rank, no hang. */
static void test_gpu_shard(dds_transport_t *t)
{
    dds_region_desc_t d;
    uint8_t buf[16];
    void *reg = (void *)0x1;
    int rc;

    ddt_section = "gpu shard";
    memset(&d, 0, sizeof(d));
    d.name = "gpu";
    d.base = buf;
    d.bytes = sizeof(buf);
    d.row_bytes = 1;
    d.mem = host_mem;
    if (ddt_rank == ddt_size - 1)
        d.mem.kind = DDS_MEM_CUDA;
    rc = t->ops->region_create(t->ctx, &d, &reg);
    CHECK_RC(rc, -DDS_ENOSYS);
    if (ddt_rank != ddt_size - 1) {
        char want[32];
        snprintf(want, sizeof(want), "rank %d", ddt_size - 1);
        CHECK_CONTAINS(dds_last_error(), want);
    } else {
        CHECK_CONTAINS(dds_last_error(), "host-memory");
    }
    CHECK(reg == (void *)0x1);            /* untouched */
    /* NULL base with bytes > 0 on rank 0 only */
    d.mem = host_mem;
    if (ddt_rank == 0)
        d.base = NULL;
    CHECK_RC(t->ops->region_create(t->ctx, &d, &reg), -DDS_EINVAL);
    /* the transport is fine afterwards */
    d.base = buf;
    reg = NULL;
    CHECK_OK(t->ops->region_create(t->ctx, &d, &reg));
    CHECK_OK(t->ops->region_destroy(t->ctx, reg));
    CHECK_OK(t->ops->region_destroy(t->ctx, NULL));
}

/* 8 threads reading one region at once from every owner. */
typedef struct {
    dds_transport_t *t;
    ddt_region_t *g;
    int id;
    int ok;
    int rc;
} ddt_thr_t;

static void *ddt_reader(void *arg)
{
    ddt_thr_t *a = arg;
    uint64_t seed = 777 + (uint64_t)a->id * 1000 + (uint64_t)ddt_rank;
    dds_read_op_t ops[64];
    uint8_t *dst = malloc(64 * 4096);
    int it;

    a->ok = 1;
    for (it = 0; it < 200 && a->rc == 0; it++) {
        size_t nops = 1 + ddt_rand(&seed) % 64, off = 0, i;

        for (i = 0; i < nops; i++) {
            int o = ddt_other(&seed);
            size_t len = 1 + ddt_rand(&seed) % 4096;
            int64_t so = (int64_t)(ddt_rand(&seed) % (a->g->bytes[o] - len + 1));

            ops[i] = (dds_read_op_t){o, 0, so, len, off};
            off += len;
        }
        a->rc = a->t->ops->read(a->t->ctx, NULL, a->g->region, ops, nops, dst,
                                NULL, NULL, NULL, NULL, NULL);
        for (i = 0; i < nops && a->rc == 0; i++)
            a->ok &= ddt_verify(dst, ops[i].dst_offset, ops[i].owner,
                                ops[i].src_offset, ops[i].len);
    }
    free(dst);
    return NULL;
}

static void test_threads(dds_transport_t *t)
{
    ddt_region_t g;
    pthread_t th[8];
    ddt_thr_t a[8];
    int i;

    ddt_section = "threads";
    if (ddt_size < 2)
        return;   /* nothing remote to read at one rank */
    CHECK_OK(ddt_region_make(t, "threads", bytes_64m, &g));
    for (i = 0; i < 8; i++) {
        a[i] = (ddt_thr_t){t, &g, i, 0, 0};
        pthread_create(&th[i], NULL, ddt_reader, &a[i]);
    }
    for (i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        CHECK_OK(a[i].rc);
        CHECK(a[i].ok);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    ddt_region_drop(t, &g);
}

/* A shard above 2 GiB read at displacements beyond INT_MAX.  The shard is
 * mapped with MAP_NORESERVE and only the pages read are written, so the
 * memory actually used is small.  Only rank 0 has the big shard; the
 * others read it with MPI_Get (at 1 rank nobody reads it: the store serves
 * a rank's own rows). */
static void test_high_displacement(dds_transport_t *t)
{
    dds_region_desc_t d;
    void *reg = NULL;
    size_t big = (size_t)3 << 30;
    int64_t offs[3] = {((int64_t)1 << 31) - 2, ((int64_t)5 << 29) + 12345,
                       (int64_t)big - 64};
    uint8_t *base = NULL;
    int rc, i, ok = 1;

    ddt_section = "3 GiB displacement";
    if (getenv("DDMPI_TEST_NO_BIG")) {
        ddt_skip("DDMPI_TEST_NO_BIG is set");
        return;
    }
    memset(&d, 0, sizeof(d));
    d.name = "three-gib";
    d.row_bytes = 1;
    d.mem = host_mem;
    if (ddt_rank == 0) {
        base = mmap(NULL, big, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (base == MAP_FAILED)
            base = NULL;
        if (base) {
            for (i = 0; i < 3; i++)
                for (int k = 0; k < 64; k++)
                    base[offs[i] + k] = ddt_pat(0, (uint64_t)offs[i] + k);
            d.base = base;
            d.bytes = big;
        }
    }
    rc = t->ops->region_create(t->ctx, &d, &reg);
    if (ddt_rank == 0 && !base) {
        CHECK(rc != 0);
        return;
    }
    CHECK_OK(rc);
    if (rc)
        goto out;
    if (ddt_rank != 0) {
        dds_read_op_t ops[3];
        uint8_t dst[3 * 64];

        for (i = 0; i < 3; i++)
            ops[i] = (dds_read_op_t){0, 0, offs[i], 64, (size_t)i * 64};
        ddt_gets_reset();
        CHECK_OK(t->ops->read(t->ctx, NULL, reg, ops, 3, dst, NULL, NULL, NULL,
                              NULL, NULL));
        CHECK_EQ(ddt_gets, 3);
        for (i = 0; i < 3; i++)
            ok &= ddt_verify(dst, (size_t)i * 64, 0, offs[i], 64);
        CHECK(ok);
        /* one byte past the end is refused before any MPI call */
        ops[0] = (dds_read_op_t){0, 0, (int64_t)big - 63, 64, 0};
        CHECK_RC(t->ops->read(t->ctx, NULL, reg, ops, 1, dst, NULL, NULL, NULL,
                              NULL, NULL), -DDS_ERANGE);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_OK(t->ops->region_destroy(t->ctx, reg));
out:
    if (base)
        munmap(base, big);
}

/* No owner participation: rank 1 stays outside MPI (sleeping) while the
 * others read its shard; when it wakes up it changes the byte they read.
 * A read that needed the owner to enter MPI would complete only after the
 * change and see the new value.  (MPICH needs MPIR_CVAR_ASYNC_PROGRESS=1
 * for this, which ddrun --mpi mpich sets.) */
static void test_owner_busy(dds_transport_t *t)
{
    ddt_region_t g;
    dds_read_op_t op;
    uint8_t got[256];
    int rc;

    ddt_section = "owner busy";
    if (ddt_size < 2)
        return;   /* nothing remote to read at one rank */
    rc = ddt_region_make(t, "busy", bytes_varied, &g);
    CHECK_OK(rc);
    if (rc)
        return;
    if (ddt_rank == 1) {
        struct timespec ts = {2, 0};

        nanosleep(&ts, NULL);                 /* outside MPI */
        memset(g.shard, 0, sizeof(got));      /* the change */
    } else {
        op = (dds_read_op_t){1, 0, 0, sizeof(got), 0};
        CHECK_OK(t->ops->read(t->ctx, NULL, g.region, &op, 1, got, NULL, NULL,
                              NULL, NULL, NULL));
        CHECK(ddt_verify(got, 0, 1, 0, sizeof(got)));   /* old bytes */
    }
    MPI_Barrier(MPI_COMM_WORLD);
    ddt_region_drop(t, &g);
}

/* After MPI_Finalize: destroy paths free local memory only. */
static void test_after_finalize(void)
{
    dds_transport_t t = ddt_transport();
    ddt_region_t g;
    dds_read_op_t op = {0, 0, 0, 1, 0};
    uint8_t b;

    ddt_section = "after finalize";
    CHECK_OK(ddt_region_make(&t, "late", bytes_varied, &g));
    CHECK_OK(ddmpi_finalize_if_ours());
    CHECK_RC(t.ops->read(t.ctx, NULL, g.region, &op, 1, &b, NULL, NULL, NULL,
                         NULL, NULL), -DDS_EIO);
    CHECK_CONTAINS(dds_last_error(), "MPI_Finalize");
    CHECK_OK(t.ops->region_destroy(t.ctx, g.region));
    g.region = NULL;
    ddt_region_drop(&t, &g);
    t.ops->destroy(t.ctx);
    CHECK_PASS_();
    CHECK_RC(ddmpi_transport_create(MPI_COMM_WORLD, &t), -DDS_EINVAL);
}

int main(void)
{
    dds_transport_t t;
    int provided = 0;

    if (ddmpi_init(&provided, NULL) != 0) {
        fprintf(stderr, "ddmpi_init failed: %s\n", dds_last_error());
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &ddt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ddt_size);
    t = ddt_transport();
    if (t.ops) {
        test_create(&t);
        test_every_owner(&t);
        test_zero_shard(&t);
        test_big(&t);
        test_gpu_shard(&t);
        test_threads(&t);
        test_high_displacement(&t);
        test_owner_busy(&t);
        t.ops->destroy(t.ctx);
    }
    test_split();
    test_after_finalize();
    return ddt_finish("transport_mpitest");
}
