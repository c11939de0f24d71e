/* ddstore-mpi: the MPI communicator (comm.h over MPI) and the MPI lifetime
 * helpers.  Run at 1, 2, 4 ranks: tools/ddrun -n N ./comm_mpitest */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddstore/comm.h"
#include "ddstore/errors.h"
#include "ddstore/mpi.h"
#include "ddmpi_test.h"

static void test_init(void)
{
    int provided = -1, ours = -1;

    ddt_section = "init";
    CHECK_OK(ddmpi_init(&provided, &ours));
    CHECK_EQ(provided, MPI_THREAD_MULTIPLE);
    CHECK_EQ(ours, 1);                   /* nobody else started MPI here */
    /* again: no second MPI_Init, same answers */
    provided = ours = -1;
    CHECK_OK(ddmpi_init(&provided, &ours));
    CHECK_EQ(provided, MPI_THREAD_MULTIPLE);
    CHECK_EQ(ours, 1);
    CHECK_OK(ddmpi_init(NULL, NULL));
    CHECK_EQ(ddmpi_finalized(), 0);
    CHECK(strcmp(ddmpi_version(), "0.1.0") == 0);
    CHECK(strcmp(ddmpi_version(), DDMPI_VERSION_STRING) == 0);
    MPI_Comm_rank(MPI_COMM_WORLD, &ddt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ddt_size);
}

static void test_translate(void)
{
    ddt_section = "translate";
    CHECK_RC(ddmpi_translate_error(MPI_SUCCESS, "nothing"), 0);
    CHECK_RC(ddmpi_translate_error(MPI_ERR_ARG, "MPI_Thing"), -DDS_EIO);
    CHECK_CONTAINS(dds_last_error(), "MPI_Thing: ");
    CHECK_CONTAINS(dds_last_error(), "MPI error class");
    CHECK_RC(ddmpi_translate_error(MPI_ERR_NO_MEM, "alloc"), -DDS_ENOMEM);
    CHECK_RC(ddmpi_translate_error(MPI_ERR_RMA_RANGE, "get"), -DDS_ERANGE);
    CHECK_RC(ddmpi_translate_error(MPI_ERR_RANK, NULL), -DDS_EIO);
    CHECK(strlen(dds_last_error()) > 0);
}

static void test_bad_args(void)
{
    dds_comm_t c;

    ddt_section = "bad args";
    memset(&c, 0x5a, sizeof(c));
    CHECK_RC(ddmpi_comm_create(MPI_COMM_NULL, &c), -DDS_EINVAL);
    CHECK_RC(ddmpi_comm_create(MPI_COMM_WORLD, NULL), -DDS_EINVAL);
    CHECK_EQ(c.rank, 0x5a5a5a5a);        /* untouched on failure */
}

static void test_collectives(MPI_Comm world)
{
    dds_comm_t c;
    int n, r, i, rc;

    ddt_section = "collectives";
    memset(&c, 0, sizeof(c));
    rc = ddmpi_comm_create(world, &c);
    CHECK_OK(rc);
    if (rc)
        return;
    MPI_Comm_rank(world, &r);
    MPI_Comm_size(world, &n);
    CHECK_EQ(c.rank, r);
    CHECK_EQ(c.size, n);
    CHECK(c.ops && c.ops->size == sizeof(dds_comm_ops_t));
    CHECK(c.ops && strcmp(c.ops->name, "mpi") == 0);

    /* allgather: 3 ints per rank */
    {
        int send[3] = {r, 10 * r + 1, -r - 7};
        int *recv = calloc((size_t)n * 3, sizeof(int));
        int ok = 1;

        CHECK_OK(c.ops->allgather(c.ctx, send, sizeof(send), recv));
        for (i = 0; i < n; i++)
            ok &= recv[3 * i] == i && recv[3 * i + 1] == 10 * i + 1 &&
                  recv[3 * i + 2] == -i - 7;
        CHECK(ok);
        free(recv);
    }
    /* allgather of 0 bytes, and of 1 MiB per rank */
    CHECK_OK(c.ops->allgather(c.ctx, NULL, 0, NULL));
    {
        size_t b = (size_t)1 << 20, k;
        uint8_t *send = malloc(b), *recv = malloc(b * (size_t)n);
        int ok = 1;

        for (k = 0; k < b; k++)
            send[k] = ddt_pat(r, k);
        CHECK_OK(c.ops->allgather(c.ctx, send, b, recv));
        for (i = 0; i < n; i++)
            for (k = 0; k < b; k += 4093)
                ok &= recv[(size_t)i * b + k] == ddt_pat(i, k);
        ok &= recv[(size_t)n * b - 1] == ddt_pat(n - 1, b - 1);
        CHECK(ok);
        free(send);
        free(recv);
    }
    /* too large for an int count: refused on every rank, no MPI call */
    {
        char one = 0;
        CHECK_RC(c.ops->allgather(c.ctx, &one, (size_t)INT_MAX + 1, &one),
                 -DDS_EINVAL);
    }

    /* allreduce min / max / sum, including values beyond 32 bits */
    {
        int64_t v[5], big = (int64_t)1 << 40;

        for (i = 0; i < 5; i++)
            v[i] = big * (i + 1) + r * (i % 2 ? -1 : 1);
        CHECK_OK(c.ops->allreduce_i64(c.ctx, v, 5, DDS_REDUCE_MIN));
        for (i = 0; i < 5; i++)
            CHECK_EQ(v[i], big * (i + 1) + (i % 2 ? -(n - 1) : 0));
        for (i = 0; i < 5; i++)
            v[i] = big * (i + 1) + r * (i % 2 ? -1 : 1);
        CHECK_OK(c.ops->allreduce_i64(c.ctx, v, 5, DDS_REDUCE_MAX));
        for (i = 0; i < 5; i++)
            CHECK_EQ(v[i], big * (i + 1) + (i % 2 ? 0 : n - 1));
        for (i = 0; i < 5; i++)
            v[i] = big + r + i;
        CHECK_OK(c.ops->allreduce_i64(c.ctx, v, 5, DDS_REDUCE_SUM));
        for (i = 0; i < 5; i++)
            CHECK_EQ(v[i], big * n + (int64_t)n * (n - 1) / 2 + (int64_t)n * i);
        CHECK_OK(c.ops->allreduce_i64(c.ctx, NULL, 0, DDS_REDUCE_SUM));
        CHECK_RC(c.ops->allreduce_i64(c.ctx, v, 1, (dds_reduce_op_t)42),
                 -DDS_EINVAL);
    }

    /* barrier */
    CHECK_OK(c.ops->barrier(c.ctx));
    CHECK_OK(c.ops->barrier(c.ctx));

    /* agreement through core: all fine */
    CHECK_OK(dds_comm_agree(&c, 0));
    /* the last rank fails: every rank sees its code, others name it */
    {
        int last = n - 1, mine;

        dds_error_clear();
        if (r == last)
            mine = dds_error(-DDS_EINVAL, "disp 7 differs from 8 (test)");
        else
            mine = 0;
        rc = dds_comm_agree(&c, mine);
        CHECK_RC(rc, -DDS_EINVAL);
        if (r == last) {
            CHECK_CONTAINS(dds_last_error(), "disp 7 differs from 8");
        } else {
            char want[32];
            snprintf(want, sizeof(want), "rank %d", last);
            CHECK_CONTAINS(dds_last_error(), want);
            CHECK_CONTAINS(dds_last_error(), "disp 7 differs from 8");
        }
    }
    /* two ranks fail with different codes: the lowest failing rank wins */
    {
        int mine = 0;

        if (r == n - 1)
            mine = dds_error(-DDS_ENOMEM, "last rank out of memory (test)");
        if (n > 1 && r == 1)
            mine = dds_error(-DDS_ETYPE, "rank one wrong dtype (test)");
        rc = dds_comm_agree(&c, mine);
        CHECK_RC(rc, n > 1 ? -DDS_ETYPE : -DDS_ENOMEM);
    }
    CHECK_OK(dds_comm_agree(&c, 0));     /* usable after failures */

    /* a communicator over a subset (even / odd ranks) */
    {
        MPI_Comm half;
        dds_comm_t hc;
        int64_t v = 1;

        MPI_Comm_split(world, r % 2, r, &half);
        memset(&hc, 0, sizeof(hc));
        CHECK_OK(ddmpi_comm_create(half, &hc));
        CHECK_EQ(hc.rank, r / 2);
        CHECK_EQ(hc.size, r % 2 ? n / 2 : (n + 1) / 2);
        CHECK_OK(hc.ops->allreduce_i64(hc.ctx, &v, 1, DDS_REDUCE_SUM));
        CHECK_EQ(v, hc.size);
        /* the dup is independent of the communicator it came from */
        MPI_Comm_free(&half);
        v = r;
        CHECK_OK(hc.ops->allreduce_i64(hc.ctx, &v, 1, DDS_REDUCE_MAX));
        CHECK_EQ(v, r % 2 ? (n % 2 ? n - 2 : n - 1) : (n % 2 ? n - 1 : n - 2));
        dds_comm_destroy(&hc);
    }
    dds_comm_destroy(&c);
    dds_comm_destroy(NULL);
}

/* After MPI_Finalize: ops fail cleanly, destroy frees local memory. */
static void test_after_finalize(void)
{
    dds_comm_t c;
    int64_t v = 1;
    int rc;

    ddt_section = "after finalize";
    memset(&c, 0, sizeof(c));
    rc = ddmpi_comm_create(MPI_COMM_WORLD, &c);
    CHECK_OK(rc);
    CHECK_OK(ddmpi_finalize_if_ours());
    CHECK_EQ(ddmpi_finalized(), 1);
    CHECK_OK(ddmpi_finalize_if_ours());  /* idempotent */
    if (rc == 0) {
        CHECK_RC(c.ops->barrier(c.ctx), -DDS_EFREED);
        CHECK_CONTAINS(dds_last_error(), "finalized");
        CHECK_RC(c.ops->allreduce_i64(c.ctx, &v, 1, DDS_REDUCE_SUM),
                 -DDS_EFREED);
        CHECK_RC(c.ops->allgather(c.ctx, &v, sizeof(v), &v), -DDS_EFREED);
        /* core agrees without exchanging at one rank */
        CHECK_RC(dds_comm_agree(&c, 0), ddt_size > 1 ? -DDS_EFREED : 0);
        dds_comm_destroy(&c);            /* no MPI call, no crash */
        ddt_pass++;
    }
    CHECK_RC(ddmpi_init(NULL, NULL), -DDS_EIO);
    CHECK_RC(ddmpi_comm_create(MPI_COMM_WORLD, &c), -DDS_EINVAL);
    CHECK_RC(ddmpi_translate_error(MPI_ERR_ARG, "late"), -DDS_EIO);
}

int main(void)
{
    int init = 0;

    MPI_Initialized(&init);
    if (init)
        return 1;                        /* must not be started at load */
    test_init();
    test_translate();
    test_bad_args();
    test_collectives(MPI_COMM_WORLD);
    test_after_finalize();
    return ddt_finish("comm_mpitest");
}
