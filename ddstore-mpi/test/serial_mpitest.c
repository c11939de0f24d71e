/* ddstore-mpi: MPI started by the application with MPI_THREAD_SERIALIZED
 * (below MULTIPLE).  The transport must not claim thread safety, must warn
 * once, and reads from several threads must still be right (serialised on
 * the library's lock).  ddmpi_init must not take MPI over, and
 * ddmpi_finalize_if_ours must leave it to the application.
 * Run at 1, 2, 4 ranks: tools/ddrun -n N ./serial_mpitest */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddstore/errors.h"
#include "ddstore/log.h"
#include "ddstore/mpi.h"
#include "ddstore/store.h"
#include "ddmpi_test.h"

static int warnings;   /* MPI-subsystem warnings about the thread level */

static void sink(void *arg, dds_log_level_t level, dds_log_subsys_t subsys,
                 const char *line)
{
    (void)arg;
    if (level == DDS_LOG_WARN && subsys == DDS_SUBSYS_MPI &&
        strstr(line, "MPI_THREAD_MULTIPLE"))
        __atomic_add_fetch(&warnings, 1, __ATOMIC_RELAXED);
}

#define DISP 8
static int64_t value(int64_t g, int j) { return g * 1000 + j * 3 - 7; }
static int64_t nrows_of(int r) { return 200 + 31 * (int64_t)r; }

typedef struct {
    dds_store_t *s;
    int64_t total;
    int id, rc, ok;
} thr_t;

static void *reader(void *arg)
{
    thr_t *a = arg;
    uint64_t seed = 99 + (uint64_t)a->id + 100 * (uint64_t)ddt_rank;
    int64_t idx[64], buf[64 * DISP];
    dds_buf_t b;

    memset(&b, 0, sizeof(b));
    b.ptr = buf;
    b.row_bytes = DISP * sizeof(int64_t);
    b.dtype = DDS_DTYPE_INT64;
    b.itemsize = 8;
    a->ok = 1;
    for (int it = 0; it < 100 && a->rc == 0; it++) {
        size_t m = 1 + ddt_rand(&seed) % 64;

        for (size_t i = 0; i < m; i++)
            idx[i] = (int64_t)(ddt_rand(&seed) % (uint64_t)a->total);
        b.nrows = (int64_t)m;
        a->rc = dds_store_get_batch(a->s, NULL, "serial", &b, idx, m);
        for (size_t i = 0; i < m && a->rc == 0; i++)
            for (int j = 0; j < DISP; j++)
                a->ok &= buf[i * DISP + (size_t)j] == value(idx[i], j);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    dds_store_params_t p;
    dds_store_t *s = NULL;
    int provided = -1, ours = -1, rc;
    int64_t first = 0, n, total = 0, *data;

    dds_log_set_sink(sink, NULL);
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &ddt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ddt_size);

    ddt_section = "init";
    if (provided >= MPI_THREAD_MULTIPLE) {
        ddt_skip("this MPI gives MPI_THREAD_MULTIPLE when asked for "
                 "SERIALIZED: the serialised path cannot be tested");
        MPI_Finalize();
        return ddt_finish("serial_mpitest");
    }
    CHECK_OK(ddmpi_init(&provided, &ours));
    CHECK_EQ(provided, MPI_THREAD_SERIALIZED);
    CHECK_EQ(ours, 0);

    ddt_section = "store";
    memset(&p, 0, sizeof(p));
    p.field_mask = DDS_STORE_PARAM_COMM | DDS_STORE_PARAM_TRANSPORT;
    CHECK_OK(ddmpi_comm_create(MPI_COMM_WORLD, &p.comm));
    CHECK_OK(ddmpi_transport_create(MPI_COMM_WORLD, &p.transport));
    CHECK(!(p.transport.caps & DDS_TRANSPORT_CAP_THREAD_SAFE));
    CHECK(p.transport.caps & DDS_TRANSPORT_CAP_LOCAL_SELF);
    CHECK_EQ(warnings, 1);                 /* once, not per object */
    rc = dds_store_create(&p, &s);
    CHECK_OK(rc);
    if (rc == 0) {
        for (int r = 0; r < ddt_size; r++) {
            if (r < ddt_rank)
                first += nrows_of(r);
            total += nrows_of(r);
        }
        n = nrows_of(ddt_rank);
        data = malloc(sizeof(int64_t) * (size_t)(n * DISP));
        for (int64_t i = 0; i < n; i++)
            for (int j = 0; j < DISP; j++)
                data[i * DISP + j] = value(first + i, j);
        CHECK_OK(dds_store_var_add(s, "serial", data, n, DISP, 8,
                                   DDS_DTYPE_INT64, NULL, DDS_ADD_COPY));
        free(data);

        ddt_section = "4 threads";
        {
            pthread_t th[4];
            thr_t a[4];

            for (int i = 0; i < 4; i++) {
                a[i] = (thr_t){s, total, i, 0, 0};
                pthread_create(&th[i], NULL, reader, &a[i]);
            }
            for (int i = 0; i < 4; i++) {
                pthread_join(th[i], NULL);
                CHECK_OK(a[i].rc);
                CHECK(a[i].ok);
            }
        }
        MPI_Barrier(MPI_COMM_WORLD);
        CHECK_OK(dds_store_free(s));
        dds_store_destroy(s);
    }
    CHECK_EQ(warnings, 1);

    ddt_section = "finalize";
    CHECK_OK(ddmpi_finalize_if_ours());    /* not ours: nothing */
    CHECK_EQ(ddmpi_finalized(), 0);
    MPI_Finalize();
    CHECK_EQ(ddmpi_finalized(), 1);
    return ddt_finish("serial_mpitest");
}
