/* ddstore-bench: read throughput of the store, next to memcpy of the same bytes.
 *
 *   tools/ddrun -n 2 -- bazel-bin/tools/ddstore_bench [options]
 *
 * For each row size and batch size: every rank reads batches of random rows
 * owned by the other ranks (--uniform: any rank, own rows included) with
 * dds_store_get_batch from T threads at once, and the same bytes are copied
 * with memcpy from random rows of a local buffer (the local limit).  One JSON
 * object per measured point goes to --json (and a table to stdout on rank 0).
 *
 * Options:
 *   --method M          0 = MPI RMA (default), 1 = libfabric (if built)
 *   --fabric NAME       libfabric provider for method 1 (DDSTORE_FABRIC)
 *   --sizes a,b,...     row sizes in bytes (default 64,512,3136,32768,262144,1048576,4194304)
 *   --batches a,b,...   batch sizes in rows (default 1,16,128,1024)
 *   --threads a,b,...   reader threads (default 1)
 *   --shard-mib N       bytes per rank per variable (default 64)
 *   --max-batch-mib N   skip points whose batch exceeds this (default 256)
 *   --seconds S         time per point (default 0.3)
 *   --uniform           draw rows from every rank, own rows included
 *   --json PATH         append results as JSON lines
 *   --epochs N          instead of reads: the per-call cost of
 *                       dds_store_epoch_begin / epoch_end (N calls, median
 *                       of 7 rounds) next to a bare MPI_Barrier on the same
 *                       ranks
 *
 * A benchmark, not a test: it asserts nothing about speed; it does check that
 * the bytes read are right (a wrong read aborts the run with an error).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "ddstore/errors.h"
#include "ddstore/open.h"
#include "ddstore/store.h"

#define MAXLIST 32

typedef struct {
    int method;
    const char *fabric;
    size_t sizes[MAXLIST];
    int nsizes;
    size_t batches[MAXLIST];
    int nbatches;
    int threads[MAXLIST];
    int nthreads;
    size_t shard_bytes;
    size_t max_batch_bytes;
    double seconds;
    int uniform;
    const char *json;
    int epochs;
} opts_t;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int parse_list(const char *s, size_t *out, int max)
{
    int n = 0;
    char *dup = strdup(s), *save = NULL;
    for (char *tok = strtok_r(dup, ",", &save); tok && n < max;
         tok = strtok_r(NULL, ",", &save))
        out[n++] = strtoull(tok, NULL, 10);
    free(dup);
    return n;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Row r's bytes are a function of (r, byte position): checkable anywhere. */
static inline uint8_t pattern(int64_t row, size_t j) { return (uint8_t)(row * 131 + j * 7 + 1); }

typedef struct {
    dds_store_t *store;
    dds_reader_t *reader;
    const char *name;
    size_t row_bytes, batch;
    int64_t total, own_lo, own_hi;
    int uniform;
    double seconds;
    uint64_t seed;
    /* results */
    uint64_t rows;
    double elapsed;
    int rc;
    char err[256];
    pthread_barrier_t *bar;
} worker_t;

static int64_t pick_row(worker_t *w, uint64_t *s)
{
    int64_t remote = w->total - (w->own_hi - w->own_lo);
    if (w->uniform || remote <= 0)
        return (int64_t)(splitmix(s) % (uint64_t)w->total);
    int64_t r = (int64_t)(splitmix(s) % (uint64_t)remote);
    return r < w->own_lo ? r : r + (w->own_hi - w->own_lo);
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    uint8_t *dst = aligned_alloc(64, (w->batch * w->row_bytes + 63) / 64 * 64);
    int64_t *idx = malloc(w->batch * sizeof(int64_t));
    uint64_t s = w->seed;
    dds_buf_t buf = {.ptr = dst, .nrows = (int64_t)w->batch, .row_bytes = w->row_bytes,
                     .dtype = DDS_DTYPE_UINT8, .itemsize = 1};
    w->rc = 0;
    if (!dst || !idx) {
        w->rc = -DDS_ENOMEM;
        pthread_barrier_wait(w->bar);
        goto out;
    }
    /* one checked warm-up read */
    for (size_t i = 0; i < w->batch; i++)
        idx[i] = pick_row(w, &s);
    w->rc = dds_store_get_batch(w->store, w->reader, w->name, &buf, idx, w->batch);
    if (w->rc == 0) {
        for (size_t i = 0; i < w->batch && w->rc == 0; i++)
            for (size_t j = 0; j < w->row_bytes; j += 61)
                if (dst[i * w->row_bytes + j] != pattern(idx[i], j)) {
                    w->rc = -DDS_EIO;
                    snprintf(w->err, sizeof w->err, "row %" PRId64 " byte %zu wrong", idx[i], j);
                    break;
                }
    } else {
        snprintf(w->err, sizeof w->err, "%s", dds_last_error());
    }
    pthread_barrier_wait(w->bar);
    if (w->rc)
        goto out;
    uint64_t rows = 0;
    double t0 = now(), t = t0;
    while (t - t0 < w->seconds || rows < 3 * w->batch) {
        for (size_t i = 0; i < w->batch; i++)
            idx[i] = pick_row(w, &s);
        int rc = dds_store_get_batch(w->store, w->reader, w->name, &buf, idx, w->batch);
        if (rc) {
            w->rc = rc;
            snprintf(w->err, sizeof w->err, "%s", dds_last_error());
            break;
        }
        rows += w->batch;
        t = now();
    }
    w->rows = rows;
    w->elapsed = now() - t0;
out:
    free(dst);
    free(idx);
    return NULL;
}

/* The local limit, timed exactly like the reads: the same batch of random
 * rows (a gather from a local buffer), a destination allocated and written
 * once before the clock starts (as the readers' is), one untimed warm-up
 * batch, the same minimum time and at least 3 batches.  `contiguous`: one
 * memcpy of batch x row_bytes from a random row (no gather). */
static double memcpy_seconds_per_row(const uint8_t *src, int64_t nrows, size_t row_bytes,
                                     size_t batch, double seconds, int contiguous)
{
    uint8_t *dst = aligned_alloc(64, (batch * row_bytes + 63) / 64 * 64);
    int64_t *idx = malloc(batch * sizeof(int64_t));
    uint64_t s = 42, rows = 0;
    if (!dst || !idx) {
        free(dst);
        free(idx);
        return 0;
    }
    int64_t span = nrows > (int64_t)batch ? nrows - (int64_t)batch : 1;
    for (int warm = 1;; warm = 0) {
        double t0 = now(), t = t0;
        rows = 0;
        while (warm ? rows < batch : (t - t0 < seconds || rows < 3 * batch)) {
            if (contiguous) {
                int64_t r0 = (int64_t)(splitmix(&s) % (uint64_t)span);
                memcpy(dst, src + r0 * row_bytes,
                       (size_t)(nrows < (int64_t)batch ? nrows : (int64_t)batch) * row_bytes);
            } else {
                for (size_t i = 0; i < batch; i++)
                    idx[i] = (int64_t)(splitmix(&s) % (uint64_t)nrows);
                for (size_t i = 0; i < batch; i++)
                    memcpy(dst + i * row_bytes, src + idx[i] * row_bytes, row_bytes);
            }
            __asm__ volatile("" ::"r"(dst) : "memory");
            rows += batch;
            t = now();
        }
        if (!warm) {
            free(dst);
            free(idx);
            return (t - t0) / rows;
        }
    }
}

/* The 1-minute load average (this machine is shared: a figure next to it). */
static double loadavg1(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1;
        fclose(f);
    }
    return l;
}

/* The store, opened through the hub (libddstore's ddstore_open) over
 * MPI_COMM_WORLD by --method (and --fabric for libfabric). */
static int make_store(const opts_t *o, dds_store_t **store_p)
{
    MPI_Comm world = MPI_COMM_WORLD;
    ddstore_open_params_t p = {
        .field_mask = DDSTORE_OPEN_FIELD_METHOD | DDSTORE_OPEN_FIELD_MPI_COMM,
        .method = o->method,
        .mpi_comm = &world,
    };
    if (o->fabric) {
        p.field_mask |= DDSTORE_OPEN_FIELD_PROVIDER;
        p.provider = o->fabric;
    }
    return ddstore_open(&p, store_p);
}

static void usage(void)
{
    fprintf(stderr, "usage: ddstore_bench [--method M] [--fabric P] [--sizes L] [--batches L]"
                    " [--threads L] [--shard-mib N] [--max-batch-mib N] [--seconds S]"
                    " [--uniform] [--json PATH] [--epochs N]\n");
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median over `rounds` of the mean time per call of `n` calls of kind k:
 * 0 = MPI_Barrier, 1 = epoch_begin, 2 = epoch_end. */
static double epoch_us(dds_store_t *store, int kind, int n, int rounds)
{
    double t[16];
    for (int r = 0; r < rounds && r < 16; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now();
        for (int i = 0; i < n; i++) {
            int rc = kind == 0 ? MPI_Barrier(MPI_COMM_WORLD)
                     : kind == 1 ? dds_store_epoch_begin(store)
                                 : dds_store_epoch_end(store);
            if (rc) {
                fprintf(stderr, "epoch bench: %s\n", dds_last_error());
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        t[r] = (now() - t0) / n * 1e6;
    }
    qsort(t, (size_t)rounds, sizeof t[0], cmp_double);
    return t[rounds / 2];
}

/* --epochs: what epoch_begin/epoch_end cost per call (users call both
 * around every batch), next to MPI_Barrier; the store holds one variable so
 * that the transport's epoch step has a window to sync. */
static int run_epochs(const opts_t *o, dds_store_t *store, FILE *json, const char *tname,
                      int rank, int size)
{
    double row[8] = {0};
    int rc = dds_store_var_add(store, "epochs", row, 1, 8, 8, DDS_DTYPE_FLOAT64, NULL,
                               DDS_ADD_COPY);
    if (rc) {
        fprintf(stderr, "rank %d: add: %s\n", rank, dds_last_error());
        return rc;
    }
    /* warm-up, then interleaved measures (one kind per round of each) */
    (void)epoch_us(store, 1, o->epochs / 4 + 1, 1);
    double bar = epoch_us(store, 0, o->epochs, 7);
    double beg = epoch_us(store, 1, o->epochs, 7);
    double end = epoch_us(store, 2, o->epochs, 7);
    double bar2 = epoch_us(store, 0, o->epochs, 7);
    double b = bar < bar2 ? bar : bar2;
    if (rank == 0) {
        printf("# epochs: %d ranks, method %d (%s%s%s), %d calls x 7 rounds (median)\n"
               "  MPI_Barrier %8.2f us   epoch_begin %8.2f us (%.2fx)   epoch_end %8.2f us "
               "(%.2fx)\n",
               size, o->method, tname, o->fabric ? " " : "", o->fabric ? o->fabric : "",
               o->epochs, b, beg, beg / b, end, end / b);
        if (json)
            fprintf(json,
                    "{\"kind\": \"epoch\", \"method\": %d, \"transport\": \"%s\", "
                    "\"fabric\": \"%s\", \"ranks\": %d, \"calls\": %d, "
                    "\"barrier_us\": %.3f, \"epoch_begin_us\": %.3f, "
                    "\"epoch_end_us\": %.3f}\n",
                    o->method, tname, o->fabric ? o->fabric : "", size, o->epochs, b, beg, end);
    }
    return dds_store_var_free(store, "epochs");
}

int main(int argc, char **argv)
{
    opts_t o = {.method = 0, .shard_bytes = 64u << 20, .max_batch_bytes = 256u << 20,
                .seconds = 0.3};
    o.nsizes = parse_list("64,512,3136,32768,262144,1048576,4194304", o.sizes, MAXLIST);
    o.nbatches = parse_list("1,16,128,1024", o.batches, MAXLIST);
    o.threads[0] = 1;
    o.nthreads = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--uniform")) { o.uniform = 1; continue; }
        if (!v) { usage(); return 2; }
        if (!strcmp(a, "--method")) o.method = atoi(v);
        else if (!strcmp(a, "--fabric")) o.fabric = v;
        else if (!strcmp(a, "--sizes")) o.nsizes = parse_list(v, o.sizes, MAXLIST);
        else if (!strcmp(a, "--batches")) o.nbatches = parse_list(v, o.batches, MAXLIST);
        else if (!strcmp(a, "--threads")) {
            size_t t[MAXLIST];
            o.nthreads = parse_list(v, t, MAXLIST);
            for (int k = 0; k < o.nthreads; k++) o.threads[k] = (int)t[k];
        }
        else if (!strcmp(a, "--shard-mib")) o.shard_bytes = strtoull(v, NULL, 10) << 20;
        else if (!strcmp(a, "--max-batch-mib")) o.max_batch_bytes = strtoull(v, NULL, 10) << 20;
        else if (!strcmp(a, "--seconds")) o.seconds = atof(v);
        else if (!strcmp(a, "--json")) o.json = v;
        else if (!strcmp(a, "--epochs")) o.epochs = atoi(v);
        else { usage(); return 2; }
        i++;
    }

    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    dds_store_t *store = NULL;
    int rc = make_store(&o, &store);
    if (rc) {
        fprintf(stderr, "rank %d: store: %s: %s\n", rank, dds_strerror(rc), dds_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    FILE *json = NULL;
    if (rank == 0 && o.json && !(json = fopen(o.json, "a"))) {
        fprintf(stderr, "cannot open %s: %s\n", o.json, strerror(errno));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const char *tname = dds_store_transport(store)->ops->name;
    if (rank == 0 && o.epochs <= 0)
        printf("# ddstore-bench: %d ranks, method %d (%s%s%s), %s rows, %.2f s per point\n"
               "# %9s %6s %3s %10s %12s %9s %12s %9s\n",
               size, o.method, tname, o.fabric ? " " : "", o.fabric ? o.fabric : "",
               o.uniform ? "uniform" : "remote-only", o.seconds, "row_B", "batch", "thr",
               "us/row", "rows/s", "GB/s", "memcpy GB/s", "ratio");

    if (o.epochs > 0) {
        o.nsizes = 0; /* no read points */
        if (run_epochs(&o, store, json, tname, rank, size) != 0)
            MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int si = 0; si < o.nsizes; si++) {
        size_t rb = o.sizes[si];
        int64_t nrows = (int64_t)(o.shard_bytes / rb);
        if (nrows < 1024)
            nrows = 1024;
        if ((size_t)nrows * rb > (size_t)1 << 31)
            nrows = (int64_t)(((size_t)1 << 31) / rb);
        uint8_t *shard = malloc((size_t)nrows * rb);
        int64_t lo = (int64_t)rank * nrows;
        for (int64_t r = 0; r < nrows; r++)
            for (size_t j = 0; j < rb; j++)
                shard[r * rb + j] = pattern(lo + r, j);
        char name[64];
        snprintf(name, sizeof name, "bench%zu", rb);
        rc = dds_store_var_add(store, name, shard, nrows, rb, 1, DDS_DTYPE_UINT8, NULL,
                               DDS_ADD_COPY);
        if (rc) {
            fprintf(stderr, "rank %d: add: %s\n", rank, dds_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (int bi = 0; bi < o.nbatches; bi++) {
            size_t batch = o.batches[bi];
            if (batch * rb > o.max_batch_bytes)
                continue;
            double t_mc = memcpy_seconds_per_row(shard, nrows, rb, batch, o.seconds, 0);
            double t_mcc = memcpy_seconds_per_row(shard, nrows, rb, batch, o.seconds, 1);
            for (int ti = 0; ti < o.nthreads; ti++) {
                int T = o.threads[ti];
                worker_t *w = calloc(T, sizeof *w);
                pthread_t *th = calloc(T, sizeof *th);
                pthread_barrier_t bar;
                pthread_barrier_init(&bar, NULL, T);
                MPI_Barrier(MPI_COMM_WORLD);
                for (int k = 0; k < T; k++) {
                    w[k] = (worker_t){.store = store, .name = name, .row_bytes = rb,
                                      .batch = batch, .total = nrows * size, .own_lo = lo,
                                      .own_hi = lo + nrows, .uniform = o.uniform,
                                      .seconds = o.seconds, .seed = 1000u * rank + k + 1,
                                      .bar = &bar};
                    if (T > 1)
                        dds_store_reader_open(store, DDS_READER_THREAD, &w[k].reader);
                    pthread_create(&th[k], NULL, worker_main, &w[k]);
                }
                uint64_t rows = 0;
                double el = 0;
                int bad = 0;
                for (int k = 0; k < T; k++) {
                    pthread_join(th[k], NULL);
                    if (w[k].rc) {
                        fprintf(stderr, "rank %d: read failed: %s\n", rank, w[k].err);
                        bad = 1;
                    }
                    rows += w[k].rows;
                    if (w[k].elapsed > el)
                        el = w[k].elapsed;
                    if (w[k].reader)
                        dds_store_reader_close(store, w[k].reader);
                }
                pthread_barrier_destroy(&bar);
                free(w);
                free(th);
                if (bad)
                    MPI_Abort(MPI_COMM_WORLD, 1);
                /* per-rank figures: report rank 0's and the slowest rank's rate */
                double rate = rows / el, minrate;
                MPI_Reduce(&rate, &minrate, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
                if (rank == 0) {
                    double us = 1e6 / rate, gbs = rate * rb / 1e9, mgbs = rb / t_mc / 1e9;
                    printf("  %9zu %6zu %3d %10.3f %12.0f %9.3f %12.3f %9.2f\n", rb, batch, T,
                           us, rate, gbs, mgbs, gbs / mgbs);
                    fflush(stdout);
                    if (json)
                        fprintf(json,
                                "{\"method\": %d, \"transport\": \"%s\", \"fabric\": \"%s\", "
                                "\"ranks\": %d, \"row_bytes\": %zu, \"batch\": %zu, "
                                "\"threads\": %d, \"remote_only\": %s, \"us_per_row\": %.4f, "
                                "\"rows_per_s\": %.1f, \"gb_per_s\": %.4f, "
                                "\"min_rank_rows_per_s\": %.1f, \"memcpy_us_per_row\": %.4f, "
                                "\"memcpy_gb_per_s\": %.4f, "
                                "\"memcpy_contiguous_gb_per_s\": %.4f, \"seconds\": %.3f, "
                                "\"loadavg\": %.2f}\n",
                                o.method, tname, o.fabric ? o.fabric : "", size, rb, batch, T,
                                o.uniform ? "false" : "true", us, rate, gbs, minrate,
                                t_mc * 1e6, mgbs, t_mcc > 0 ? rb / t_mcc / 1e9 : 0.0,
                                o.seconds, loadavg1());
                }
            }
        }
        MPI_Barrier(MPI_COMM_WORLD);
        rc = dds_store_var_free(store, name);
        free(shard);
        if (rc) {
            fprintf(stderr, "rank %d: free: %s\n", rank, dds_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    if (json)
        fclose(json);
    dds_store_destroy(store);
    MPI_Finalize();
    return 0;
}
