/* examples/c/open_by_method.c: a C program over libddstore (the hub).
 *
 *   tools/ddrun -n 2 -- bazel-bin/examples/c/open_by_method [METHOD]
 *
 * Opens a store over MPI_COMM_WORLD by method (argv[1], else DDSTORE_METHOD,
 * else 0), adds a variable of 8 rows per rank (row r holds r in every
 * element), reads a batch of rows owned by the other ranks with
 * dds_store_get_batch, checks them, and closes the store.  Exit status 0
 * when every row read is right.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "ddstore/open.h"

enum { ROWS = 8, COLS = 4 };

int main(int argc, char **argv)
{
    ddstore_env_prepare(); /* before MPI_Init: libfabric settings */
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm world = MPI_COMM_WORLD;
    ddstore_open_params_t p = {.field_mask = DDSTORE_OPEN_FIELD_MPI_COMM, .mpi_comm = &world};
    if (argc > 1) {
        p.field_mask |= DDSTORE_OPEN_FIELD_METHOD;
        p.method = atoi(argv[1]);
    }
    dds_store_t *store = NULL;
    int rc = ddstore_open(&p, &store);
    if (rc != 0) {
        fprintf(stderr, "open: %s: %s\n", dds_strerror(rc), dds_last_error());
        MPI_Finalize();
        return 1;
    }
    int rank = dds_store_rank(store), size = dds_store_size(store);
    double mine[ROWS][COLS];
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++)
            mine[r][c] = (double)(rank * ROWS + r); /* = its global row */
    rc = dds_store_var_add(store, "x", mine, ROWS, COLS, sizeof(double), DDS_DTYPE_FLOAT64,
                           NULL, DDS_ADD_COPY);
    /* every row of the next rank, in reverse order */
    int64_t rows[ROWS];
    int peer = (rank + 1) % size;
    for (int i = 0; i < ROWS; i++)
        rows[i] = (int64_t)peer * ROWS + (ROWS - 1 - i);
    double got[ROWS][COLS];
    dds_buf_t dst = {.ptr = got, .nrows = ROWS, .row_bytes = sizeof got[0],
                     .dtype = DDS_DTYPE_FLOAT64, .itemsize = sizeof(double)};
    if (rc == 0)
        rc = dds_store_get_batch(store, NULL, "x", &dst, rows, ROWS);
    int bad = rc != 0;
    for (int i = 0; rc == 0 && i < ROWS; i++)
        for (int c = 0; c < COLS; c++)
            bad |= got[i][c] != (double)rows[i];
    if (rc != 0)
        fprintf(stderr, "rank %d: %s: %s\n", rank, dds_strerror(rc), dds_last_error());
    printf("rank %d of %d, method %s: read %d rows of rank %d: %s\n", rank, size,
           dds_store_transport(store)->ops->name, ROWS, peer, bad ? "WRONG" : "ok");
    dds_store_destroy(store); /* collective */
    MPI_Finalize();
    return bad;
}
