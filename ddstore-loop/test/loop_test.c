/* ddstore-loop: the loopback transport under a real store.
 *
 *   - one rank (core's self communicator): every row read alone, a range,
 *     a batch of scattered rows; a read past the end fails and the store
 *     stays usable;
 *   - four ranks as threads of this process (core's test world's
 *     communicator): every rank reads every row of every owner;
 *   - errors: NULL arguments, a rank of another process (every rank fails),
 *     the transport's own bounds checks. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ddstore/comm.h"
#include "ddstore/loop.h"
#include "ddstore/store.h"
#include "fake_world.h"

#define DISP 3

static int64_t value(int64_t row, int col)
{
    return row * 1000 + col * 7 + 1;
}

static dds_buf_t host_buf(int64_t *p, int64_t nrows)
{
    dds_buf_t b;
    memset(&b, 0, sizeof b);
    b.ptr = p;
    b.nrows = nrows;
    b.row_bytes = DISP * sizeof(int64_t);
    b.dtype = DDS_DTYPE_INT64;
    b.itemsize = sizeof(int64_t);
    b.mem.kind = DDS_MEM_HOST;
    return b;
}

static int store_over(dds_comm_t comm, dds_store_t **st)
{
    dds_store_params_t p;
    int rc;
    memset(&p, 0, sizeof p);
    p.field_mask = DDS_STORE_PARAM_COMM | DDS_STORE_PARAM_TRANSPORT;
    p.comm = comm;
    rc = ddloop_transport_create(&p.comm, &p.transport);
    if (rc != 0) {
        dds_comm_destroy(&p.comm);
        return rc;
    }
    return dds_store_create(&p, st);
}

/* This rank's shard: rows [first, first + n) of the global numbering. */
static void add_rows(dds_store_t *st, int64_t first, int64_t n)
{
    int64_t *d = malloc((size_t)(n > 0 ? n : 1) * DISP * sizeof *d);
    for (int64_t r = 0; r < n; r++)
        for (int c = 0; c < DISP; c++)
            d[r * DISP + c] = value(first + r, c);
    CHECK_OK(dds_store_var_add(st, "x", d, n, DISP, sizeof(int64_t),
                               DDS_DTYPE_INT64, NULL, DDS_ADD_COPY));
    free(d);
}

static int64_t check_every_row(dds_store_t *st, int64_t total)
{
    int64_t bad = 0, row[DISP];
    dds_buf_t b = host_buf(row, 1);
    for (int64_t r = 0; r < total; r++) {
        CHECK_OK(dds_store_get(st, NULL, "x", &b, r));
        for (int c = 0; c < DISP; c++)
            bad += row[c] != value(r, c);
    }
    return bad;
}

static void test_one_rank(void)
{
    dds_comm_t comm;
    dds_store_t *st = NULL;
    const int64_t n = 37;
    CHECK_OK(dds_comm_self(&comm));
    CHECK_OK(store_over(comm, &st));
    CHECK_STREQ(dds_store_transport(st)->ops->name, "loop");
    add_rows(st, 0, n);
    CHECK_EQ(check_every_row(st, n), 0);

    /* a range, and a batch of scattered rows */
    int64_t all[37 * DISP], idx[5] = {36, 0, 17, 17, 5}, got[5 * DISP];
    dds_buf_t b = host_buf(all, n);
    CHECK_OK(dds_store_get(st, NULL, "x", &b, 0));
    for (int64_t r = 0; r < n; r++)
        CHECK_EQ(all[r * DISP + 2], value(r, 2));
    b = host_buf(got, 5);
    CHECK_OK(dds_store_get_batch(st, NULL, "x", &b, idx, 5));
    for (int i = 0; i < 5; i++)
        CHECK_EQ(got[i * DISP + 1], value(idx[i], 1));

    /* past the end: -DDS_ERANGE (errors.h: a range outside [0, total)),
     * naming the row; the store stays usable */
    b = host_buf(got, 2);
    CHECK_RC(dds_store_get(st, NULL, "x", &b, n - 1), -DDS_ERANGE);
    CHECK_EQ(check_every_row(st, n), 0);

    /* a reader of its own (threads / forked workers) reads the same rows */
    dds_reader_t *rd = NULL;
    CHECK_OK(dds_store_reader_open(st, DDS_READER_THREAD, &rd));
    b = host_buf(got, 1);
    CHECK_OK(dds_store_get(st, rd, "x", &b, 20));
    CHECK_EQ(got[0], value(20, 0));
    dds_store_reader_close(st, rd);
    dds_store_destroy(st);
}

/* ---- several ranks, threads of this process ---------------------------- */

#define NR 4

static int64_t rows_of(int rank)
{
    return rank == 2 ? 0 : 5 + 3 * rank;   /* one rank holds no rows */
}

static void rank_main(fake_world_t *w, int rank, void *arg)
{
    dds_store_t *st = NULL;
    int64_t first = 0, total = 0;
    (void)arg;
    for (int r = 0; r < NR; r++) {
        if (r < rank)
            first += rows_of(r);
        total += rows_of(r);
    }
    CHECK_OK(store_over(fw_comm(w, rank), &st));
    if (st == NULL)
        return;
    add_rows(st, first, rows_of(rank));
    CHECK_EQ(check_every_row(st, total), 0);
    CHECK_OK(dds_store_free(st));
    dds_store_destroy(st);
}

static void test_threads(void)
{
    fake_world_t w;
    fw_init(&w, NR);
    fw_run(&w, rank_main, NULL);
    CHECK_EQ(atomic_load(&w.protocol_errors), 0);
    fw_fini(&w);
}

/* ---- errors --------------------------------------------------------------- */

/* A two-rank communicator in one thread whose rank 1 says it is another
 * process (another pid). */
static int other_allgather(void *ctx, const void *send, size_t bytes,
                           void *recv)
{
    (void)ctx;
    memcpy(recv, send, bytes);
    memcpy((char *)recv + bytes, send, bytes);
    if (bytes >= sizeof(int64_t)) {
        int64_t pid;
        memcpy(&pid, (char *)recv + bytes, sizeof pid);
        pid += 1;
        memcpy((char *)recv + bytes, &pid, sizeof pid);
    }
    return 0;
}

static int other_barrier(void *ctx)
{
    (void)ctx;
    return 0;
}

static const dds_comm_ops_t other_ops = {
    sizeof(dds_comm_ops_t), "two-processes", other_allgather, NULL,
    other_barrier, NULL};

static void test_errors(void)
{
    dds_transport_t tr;
    dds_comm_t self, two = {&other_ops, NULL, 0, 2};
    CHECK_RC(ddloop_transport_create(NULL, &tr), -DDS_EINVAL);
    CHECK_OK(dds_comm_self(&self));
    CHECK_RC(ddloop_transport_create(&self, NULL), -DDS_EINVAL);
    CHECK_RC(ddloop_transport_create(&two, &tr), -DDS_ENOSYS);
    CHECK_CONTAINS(dds_last_error(), "only ranks in one process");
    CHECK_CONTAINS(dds_last_error(), "rank 1 of 2");

    /* the transport's own checks: an owner or a range it does not have */
    int64_t shard[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8] = {0};
    dds_region_desc_t d;
    void *region = NULL;
    memset(&d, 0, sizeof d);
    d.name = "r";
    d.base = shard;
    d.bytes = sizeof shard;
    d.row_bytes = sizeof(int64_t);
    d.nrows = 8;
    CHECK_OK(ddloop_transport_create(&self, &tr));
    CHECK(tr.ops->read != NULL && tr.ops->reader_open != NULL);
    CHECK_OK(tr.ops->region_create(tr.ctx, &d, &region));
    dds_read_op_t op = {0, 0, 16, 24, 8};
    CHECK_OK(tr.ops->read(tr.ctx, NULL, region, &op, 1, out, NULL, NULL,
                          NULL, NULL, NULL));
    CHECK_EQ(out[1], 3);
    CHECK_EQ(out[3], 5);
    op.owner = 1;
    CHECK_RC(tr.ops->read(tr.ctx, NULL, region, &op, 1, out, NULL, NULL,
                          NULL, NULL, NULL),
             -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "owner 1 of 1");
    op.owner = 0;
    op.src_offset = 48;
    CHECK_RC(tr.ops->read(tr.ctx, NULL, region, &op, 1, out, NULL, NULL,
                          NULL, NULL, NULL),
             -DDS_EINVAL);
    op.src_offset = 0;
    op.staged = 1;   /* into a staging buffer it was not given */
    CHECK_RC(tr.ops->read(tr.ctx, NULL, region, &op, 1, out, NULL, NULL,
                          NULL, NULL, NULL),
             -DDS_EINVAL);
    /* a region left alive is released by destroy */
    tr.ops->destroy(tr.ctx);
    dds_comm_destroy(&self);
    CHECK(strchr(ddloop_version(), '.') != NULL);
}

int main(void)
{
    RUN_TEST(test_one_rank);
    RUN_TEST(test_threads);
    RUN_TEST(test_errors);
    return CHECK_SUMMARY();
}
