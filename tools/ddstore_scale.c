/* ddstore-scale: what one rank pays as the job grows, in one process.
 *
 *   bazel-bin/tools/ddstore_scale [options]
 *
 * This process is rank 0 of R simulated ranks: a communicator whose
 * collectives answer as R ranks would (allgather: every other rank
 * contributes what this one does, so every shard has the same rows;
 * allreduce: MIN/MAX unchanged, SUM times R; barrier: nothing), and a
 * transport that records what it is asked for (no data moves, every read
 * completes at once).  Both count their calls and bytes.  For each R:
 *
 *   core        store create; var_init / var_add / var_free time of a
 *               one-row shard (the work that grows with R, without the
 *               copy of this rank's rows); the bytes the store keeps per
 *               variable (malloc accounting, mallinfo2, less the shard);
 *               the collectives and the bytes
 *               gathered per add; dds_plan_batch and dds_store_get_batch
 *               time per batch of random rows over R ranks, and
 *               dds_store_get time per single random row (medians).
 *   method2     (when built with libfabric) the method-2 record of n_core = R
 *               ranks: file bytes, ddofi_hs_encode and ddofi_hs_parse time
 *               (ddstore-ofi's own functions).
 *   method1     the adapter's per-peer state, from the sizes its code
 *               allocates per rank (ddstore-ofi/transport/ddofi_tr_transport.c,
 *               ddofi_tr_method2.c): not measured, computed from the public
 *               constants (DDOFI_ADDR_BLOB_MAX, DDOFI_MR_BLOB_SIZE,
 *               sizeof(ddofi_peer_t), sizeof(ddofi_remote_t)).
 *   filecomm    FileComm collectives with P forked processes on a directory
 *               (--filecomm-dir, default $TMPDIR or /tmp): time per
 *               allgather, per allreduce and per barrier (median of rounds).
 *
 * Options:
 *   --ranks a,b,...     R values (default: 2, 4, 8, ... 65536, 75000, 100000)
 *   --max-ranks N       drop R values above N
 *   --rows N            rows per rank (default 1024)
 *   --row-bytes N       bytes per row (default 3136)
 *   --batch N           rows per batch (default 128)
 *   --batches N         batches per timing round (default 200)
 *   --filecomm a,b,...  FileComm process counts (default 2,4,8,16; "" = none)
 *   --filecomm-rounds N collectives per kind and count (default 40)
 *   --filecomm-dir DIR  where FileComm's files go
 *   --ofi PROVIDER      also the real libfabric adapter over the simulated
 *                       communicator with PROVIDER (e.g. "tcp;ofi_rxm",
 *                       "shm"; "" = not): its memory per store, variable and
 *                       reader (malloc accounting) and create / add /
 *                       reader-open time, with DDSTORE_OFI_PEERS=eager and
 *                       lazy, and a thread reader's first and second read of
 *                       one row of every owner.  Every simulated peer has this
 *                       process's address, so the provider's own per-peer
 *                       state is not what this measures.
 *   --ofi-read-max R    largest R whose every owner is read (default 16384)
 *   --quick             ranks up to 4096, 50 batches, FileComm 2,4 x 10
 *   --check             also verify what is measured (the store's plan reaches
 *                       the transport whole, the record re-parses, FileComm
 *                       gathers every rank's bytes); exit 1 on a mismatch
 *   --json PATH         append results as JSON lines (default: stdout table only)
 *
 * Times: core and record figures are this thread's CPU time (the local
 * work, robust on a shared machine); the libfabric adapter's and FileComm's
 * are wall time (they wait for threads or processes).
 *
 * A benchmark, not a test: it asserts nothing about speed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ddstore/comm.h"
#include "ddstore/comm_file.h"
#include "ddstore/errors.h"
#include "ddstore/plan.h"
#include "ddstore/store.h"
#include "ddstore/transport.h"

#ifdef DDSTORE_HAVE_OFI
#include "ddstore/handshake_transport.h"
#include "ddstore/ofi.h"
#include "ddstore/ofi_transport.h"
#endif

#define MAX_POINTS 64
#define ROUNDS 7

static int g_check;
static int g_failed;
static FILE *g_json;

#define EXPECT(cond, ...)                                                    \
    do {                                                                     \
        if (g_check && !(cond)) {                                            \
            fprintf(stderr, "ddstore-scale: check failed: " __VA_ARGS__);    \
            fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);               \
            g_failed = 1;                                                    \
        }                                                                    \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* This thread's CPU time: the local work, without the time other
 * processes of a shared machine take from it (core and record figures). */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t heap_bytes(void)
{
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Sorts v. */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "ddstore-scale: %s: %s (%s)\n", what, dds_strerror(rc),
            dds_last_error());
    exit(2);
}

/* ---- the simulated communicator: rank 0 of R ------------------------- */

typedef struct sim_comm {
    int nranks;
    long allgathers, allreduces, barriers;
    size_t gathered_bytes;   /* bytes received by allgather (R x sent)     */
} sim_comm_t;

static int sim_allgather(void *ctx, const void *send, size_t bytes, void *recv)
{
    sim_comm_t *c = ctx;
    for (int r = 0; r < c->nranks; r++)
        memcpy((char *)recv + (size_t)r * bytes, send, bytes);
    c->allgathers++;
    c->gathered_bytes += (size_t)c->nranks * bytes;
    return 0;
}

static int sim_allreduce(void *ctx, int64_t *inout, size_t n, dds_reduce_op_t op)
{
    sim_comm_t *c = ctx;
    if (op == DDS_REDUCE_SUM)
        for (size_t i = 0; i < n; i++)
            inout[i] *= c->nranks;
    c->allreduces++;
    return 0;
}

static int sim_barrier(void *ctx)
{
    ((sim_comm_t *)ctx)->barriers++;
    return 0;
}

static const dds_comm_ops_t sim_comm_ops = {
    sizeof(dds_comm_ops_t), "sim", sim_allgather, sim_allreduce, sim_barrier,
    NULL};

/* ---- the recording transport ----------------------------------------- */

typedef struct rec_tr {
    long regions, live_regions, read_calls, read_ops;
    size_t read_bytes;
    int owners_sorted;       /* every read() had its ops grouped by owner  */
    int max_owner_seen;
} rec_tr_t;

typedef struct rec_region {
    int nranks;
    int64_t local_rows;
} rec_region_t;

static int rec_region_create(void *ctx, const dds_region_desc_t *d, void **reg_p)
{
    rec_tr_t *t = ctx;
    rec_region_t *g = malloc(sizeof *g);
    if (g == NULL)
        return -DDS_ENOMEM;
    g->nranks = d->nranks;
    g->local_rows = d->nrows;
    t->regions++;
    t->live_regions++;
    *reg_p = g;
    return 0;
}

static int rec_region_destroy(void *ctx, void *reg)
{
    ((rec_tr_t *)ctx)->live_regions--;
    free(reg);
    return 0;
}

static int rec_read(void *ctx, void *reader, void *region,
                    const dds_read_op_t *ops, size_t nops, void *dst,
                    void *dst_handle, const dds_mem_t *dst_mem, void *staging,
                    void *staging_handle, dds_prof_t *prof)
{
    rec_tr_t *t = ctx;
    for (size_t i = 0; i < nops; i++) {
        if (i > 0 && ops[i].owner < ops[i - 1].owner)
            t->owners_sorted = 0;
        if (ops[i].owner > t->max_owner_seen)
            t->max_owner_seen = ops[i].owner;
        t->read_bytes += ops[i].len;
    }
    t->read_calls++;
    t->read_ops += (long)nops;
    return 0;
}

static void rec_destroy(void *ctx)
{
    (void)ctx;
}

static const dds_transport_ops_t rec_tr_ops = {
    .size = sizeof(dds_transport_ops_t),
    .name = "record",
    .region_create = rec_region_create,
    .region_destroy = rec_region_destroy,
    .read = rec_read,
    .destroy = rec_destroy,
};

/* ---- options ---------------------------------------------------------- */

typedef struct opts {
    int ranks[MAX_POINTS], nranks_pts;
    int max_ranks;
    int64_t rows;
    size_t row_bytes;
    int batch, batches;
    int fc[16], nfc, fc_rounds;
    const char *fc_dir;
    const char *ofi_provider;   /* NULL: no measured method-1 point */
    int ofi_read_max;           /* R up to which every owner is read */
} opts_t;

static int parse_list(const char *s, int *out, int cap)
{
    int n = 0;
    char *copy = strdup(s), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok && n < cap;
         tok = strtok_r(NULL, ",", &save))
        out[n++] = atoi(tok);
    free(copy);
    return n;
}

static void emit(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void emit(const char *fmt, ...)
{
    va_list ap;
    if (g_json == NULL)
        return;
    va_start(ap, fmt);
    vfprintf(g_json, fmt, ap);
    va_end(ap);
    fputc('\n', g_json);
    fflush(g_json);
}

/* ---- core: store, variables, planner --------------------------------- */

static dds_store_t *make_store(sim_comm_t *sc, rec_tr_t *rt, int nranks)
{
    dds_store_params_t p;
    dds_store_t *s = NULL;
    memset(&p, 0, sizeof p);
    p.field_mask = DDS_STORE_PARAM_COMM | DDS_STORE_PARAM_TRANSPORT;
    p.comm.ops = &sim_comm_ops;
    p.comm.ctx = sc;
    p.comm.rank = 0;
    p.comm.size = nranks;
    p.transport.ops = &rec_tr_ops;
    p.transport.ctx = rt;
    p.transport.caps = DDS_TRANSPORT_CAP_THREAD_SAFE;
    int rc = dds_store_create(&p, &s);
    if (rc != 0)
        die("dds_store_create", rc);
    return s;
}

static void core_point(const opts_t *o, int R)
{
    sim_comm_t sc = {.nranks = R};
    rec_tr_t rt = {.owners_sorted = 1};
    double t0, create_s, t_add[ROUNDS], t_init[ROUNDS], t_free[ROUNDS];
    double t_plan[ROUNDS], t_get[ROUNDS], t_one[ROUNDS];
    size_t shard = (size_t)o->rows * o->row_bytes;   /* planner's variable */
    size_t meta = 0, gathered = 0;
    long colls = 0;
    char *data = malloc(shard), *dst = malloc((size_t)o->batch * o->row_bytes);
    int64_t *rows = malloc((size_t)o->batches * (size_t)o->batch * sizeof *rows);
    int64_t total = o->rows * (int64_t)R;
    int rc;

    if (data == NULL || dst == NULL || rows == NULL)
        die("allocating the harness's buffers", -DDS_ENOMEM);
    memset(data, 1, shard);
    t0 = cpu_s();
    dds_store_t *s = make_store(&sc, &rt, R);
    create_s = cpu_s() - t0;

    for (int k = 0; k < ROUNDS; k++) {
        long c0 = sc.allgathers + sc.allreduces + sc.barriers;
        size_t g0 = sc.gathered_bytes, h0 = heap_bytes();
        t0 = cpu_s();
        rc = dds_store_var_add(s, "x", data, 1, o->row_bytes, 1,
                               DDS_DTYPE_RAW, NULL, DDS_ADD_COPY);
        t_add[k] = cpu_s() - t0;
        if (rc != 0)
            die("dds_store_var_add", rc);
        size_t h1 = heap_bytes();
        meta = h1 > h0 + o->row_bytes ? h1 - h0 - o->row_bytes : 0;
        colls = sc.allgathers + sc.allreduces + sc.barriers - c0;
        gathered = sc.gathered_bytes - g0;
        t0 = cpu_s();
        rc = dds_store_var_free(s, "x");
        t_free[k] = cpu_s() - t0;
        if (rc != 0)
            die("dds_store_var_free", rc);
        t0 = cpu_s();
        rc = dds_store_var_init(s, "y", 1, o->row_bytes, 1, DDS_DTYPE_RAW);
        t_init[k] = cpu_s() - t0;
        if (rc != 0 || (rc = dds_store_var_free(s, "y")) != 0)
            die("dds_store_var_init / free", rc);
    }

    /* the planner and the store's read path over R owners */
    rc = dds_store_var_add(s, "x", data, o->rows, o->row_bytes, 1,
                           DDS_DTYPE_RAW, NULL, DDS_ADD_COPY);
    if (rc != 0)
        die("dds_store_var_add", rc);
    int64_t *offsets = malloc(((size_t)R + 1) * sizeof *offsets);
    if (offsets == NULL)
        die("offsets", -DDS_ENOMEM);
    rc = dds_store_var_offsets(s, "x", offsets);
    if (rc != 0)
        die("dds_store_var_offsets", rc);
    EXPECT(offsets[R] == total, "R=%d: %lld rows in all, expected %lld", R,
           (long long)offsets[R], (long long)total);
    for (size_t i = 0; i < (size_t)o->batches * (size_t)o->batch; i++)
        rows[i] = (int64_t)(rng_next() % (uint64_t)total);
    dds_plan_params_t pp;
    memset(&pp, 0, sizeof pp);
    pp.nranks = R;
    pp.offsets = offsets;
    pp.row_bytes = o->row_bytes;
    dds_plan_t plan;
    dds_plan_init(&plan);
    dds_buf_t buf;
    memset(&buf, 0, sizeof buf);
    buf.ptr = dst;
    buf.nrows = o->batch;
    buf.row_bytes = o->row_bytes;
    buf.dtype = DDS_DTYPE_RAW;
    buf.itemsize = 1;
    size_t plan_ops = 0;
    for (int k = 0; k < ROUNDS; k++) {
        plan_ops = 0;
        t0 = cpu_s();
        for (int b = 0; b < o->batches; b++) {
            rc = dds_plan_batch(&pp, rows + (size_t)b * o->batch,
                                (size_t)o->batch, &plan);
            if (rc != 0)
                die("dds_plan_batch", rc);
            plan_ops += plan.nops;
        }
        t_plan[k] = (cpu_s() - t0) / o->batches;
        long ops0 = rt.read_ops;
        t0 = cpu_s();
        for (int b = 0; b < o->batches; b++) {
            rc = dds_store_get_batch(s, NULL, "x", &buf,
                                     rows + (size_t)b * o->batch,
                                     (size_t)o->batch);
            if (rc != 0)
                die("dds_store_get_batch", rc);
        }
        t_get[k] = (cpu_s() - t0) / o->batches;
        EXPECT((size_t)(rt.read_ops - ops0) == plan_ops,
               "R=%d: the transport saw %ld read ops, the planner made %zu", R,
               rt.read_ops - ops0, plan_ops);
        /* single rows (dds_store_get of one row: dds_plan_range) */
        buf.nrows = 1;
        ops0 = rt.read_ops;
        t0 = cpu_s();
        for (int b = 0; b < o->batches; b++) {
            rc = dds_store_get(s, NULL, "x", &buf, rows[b]);
            if (rc != 0)
                die("dds_store_get", rc);
        }
        t_one[k] = (cpu_s() - t0) / o->batches;
        buf.nrows = o->batch;
        EXPECT(rt.read_ops - ops0 == o->batches,
               "R=%d: %ld read ops for %d single rows", R, rt.read_ops - ops0,
               o->batches);
    }
    EXPECT(rt.owners_sorted, "R=%d: read ops not grouped by owner", R);
    EXPECT(rt.max_owner_seen < R, "R=%d: a read of owner %d", R,
           rt.max_owner_seen);
    EXPECT(meta >= ((size_t)R + 1) * sizeof(int64_t),
           "R=%d: %zu bytes kept per variable, less than its offsets", R, meta);
    dds_plan_fini(&plan);
    rc = dds_store_var_free(s, "x");
    if (rc != 0)
        die("dds_store_var_free", rc);
    dds_store_destroy(s);
    EXPECT(rt.live_regions == 0, "R=%d: %ld regions left", R, rt.live_regions);

    double add = median(t_add, ROUNDS), init = median(t_init, ROUNDS);
    double fr = median(t_free, ROUNDS), pl = median(t_plan, ROUNDS);
    double gb = median(t_get, ROUNDS), one = median(t_one, ROUNDS);
    /* the least disturbed round (sorted by median()): on a shared machine
     * the other rounds add other processes' time */
    double pl_min = t_plan[0], gb_min = t_get[0], one_min = t_one[0];
    double ops_per_batch = (double)plan_ops / o->batches;
    printf("%8d %10zu %9.1f %9.1f %9.1f %9.2f %9.2f %9.2f %8.1f %10zu\n", R,
           meta, add * 1e6, init * 1e6, fr * 1e6, pl * 1e6, gb * 1e6,
           one * 1e6, ops_per_batch, gathered);
    emit("{\"kind\": \"scale_core\", \"nranks\": %d, \"rows_per_rank\": %lld, "
         "\"row_bytes\": %zu, \"batch\": %d, \"meta_bytes_per_var\": %zu, "
         "\"offsets_bytes\": %zu, \"create_us\": %.2f, \"add_us\": %.2f, "
         "\"init_us\": %.2f, \"free_us\": %.2f, \"plan_us\": %.3f, "
         "\"get_batch_us\": %.3f, \"get_one_us\": %.3f, "
         "\"plan_min_us\": %.3f, \"get_batch_min_us\": %.3f, "
         "\"get_one_min_us\": %.3f, "
         "\"ops_per_batch\": %.2f, "
         "\"collectives_per_add\": %ld, \"gathered_bytes_per_add\": %zu}",
         R, (long long)o->rows, o->row_bytes, o->batch, meta,
         ((size_t)R + 1) * sizeof(int64_t), create_s * 1e6, add * 1e6,
         init * 1e6, fr * 1e6, pl * 1e6, gb * 1e6, one * 1e6, pl_min * 1e6,
         gb_min * 1e6, one_min * 1e6, ops_per_batch, colls,
         gathered);
    free(offsets);
    free(rows);
    free(dst);
    free(data);
}

/* ---- method 2's record ------------------------------------------------ */

#ifdef DDSTORE_HAVE_OFI
static void method2_point(const opts_t *o, int R)
{
    ddofi_hs_record_t r, back;
    void *buf = NULL;
    size_t len = 0;
    double te[ROUNDS], tp[ROUNDS];
    int rc;

    memset(&r, 0, sizeof r);
    r.nranks = (uint32_t)R;
    r.run_id = 42;
    r.ctime_ns = 1;
    r.dtype = DDS_DTYPE_RAW;
    r.itemsize = 1;
    r.disp = o->row_bytes;
    r.row_bytes = o->row_bytes;
    r.total_rows = (uint64_t)o->rows * (uint64_t)R;
    snprintf(r.name, sizeof r.name, "x");
    snprintf(r.provider, sizeof r.provider, "cxi");
    snprintf(r.domain, sizeof r.domain, "cxi0");
    r.ranks = calloc((size_t)R, sizeof *r.ranks);
    if (r.ranks == NULL)
        die("record entries", -DDS_ENOMEM);
    for (int i = 0; i < R; i++) {
        ddofi_hs_rank_t *e = &r.ranks[i];
        e->rows = o->rows;
        e->base = 0x7f0000000000ull + (uint64_t)i * 4096u;
        e->key = (uint64_t)i + 1;
        e->bytes = (uint64_t)o->rows * o->row_bytes;
        e->pid = 1000 + i % 30000;
        e->addr_len = 64;    /* a blob shorter than DDOFI_HS_ADDR_MAX */
        e->start_ticks = 1;
        snprintf(e->host, sizeof e->host, "nid%06d", i / 8);
        memset(e->mr_blob, 0xab, sizeof e->mr_blob);
        memset(e->addr, 0xcd, e->addr_len);
    }
    for (int k = 0; k < ROUNDS; k++) {
        free(buf);
        buf = NULL;
        double t0 = cpu_s();
        rc = ddofi_hs_encode(&r, &buf, &len);
        te[k] = cpu_s() - t0;
        if (rc != 0)
            die("ddofi_hs_encode", rc);
        t0 = cpu_s();
        rc = ddofi_hs_parse(buf, len, &back);
        tp[k] = cpu_s() - t0;
        if (rc != 0)
            die("ddofi_hs_parse", rc);
        EXPECT(back.nranks == (uint32_t)R &&
                   back.ranks[R - 1].key == (uint64_t)R &&
                   back.total_rows == r.total_rows,
               "n_core=%d: the record did not parse back", R);
        ddofi_hs_record_clear(&back);
    }
    /* format 3: a host table (1 + 9 bytes per "nid%06d", 8 ranks a host)
     * and an entry per rank with its 64-byte address */
    EXPECT(len == DDOFI_HS_HEADER_BYTES + (size_t)(R + 7) / 8 * 10 +
                      (size_t)R * (DDOFI_HS_ENTRY_BYTES + 64),
           "n_core=%d: record of %zu bytes", R, len);
    /* What a reader needs per core rank to read it: rows (or the offsets),
     * the region blob and the address blob as long as it is. */
    size_t need = (size_t)R * (sizeof(int64_t) + DDOFI_HS_MR_BLOB + 64);
    double enc = median(te, ROUNDS), par = median(tp, ROUNDS);
    printf("%8d %12zu %12zu %10.1f %10.1f\n", R, len, need, enc * 1e6,
           par * 1e6);
    emit("{\"kind\": \"scale_method2\", \"n_core\": %d, \"record_bytes\": %zu, "
         "\"entry_bytes\": %u, \"addr_len\": 64, \"needed_bytes\": %zu, "
         "\"encode_us\": %.2f, \"parse_us\": %.2f}",
         R, len, DDOFI_HS_ENTRY_BYTES + 64, need, enc * 1e6, par * 1e6);
    free(buf);
    free(r.ranks);
}

/* One pass over every owner: rows 0..R-1 (one per simulated rank) through
 * reader rd in batches of 1024; seconds. */
static double read_every_owner(dds_store_t *s, dds_reader_t *rd, int R, char *buf,
                               size_t row_bytes, int64_t *rows)
{
    double t0 = now_s();
    for (int first = 0; first < R; first += 1024) {
        const int n = R - first < 1024 ? R - first : 1024;
        for (int i = 0; i < n; i++)
            rows[i] = first + i;
        dds_buf_t b = {buf, n, row_bytes, DDS_DTYPE_RAW, 1, {DDS_MEM_HOST, 0, NULL}};
        int rc = dds_store_get_batch(s, rd, "x", &b, rows, (size_t)n);
        if (rc != 0)
            die("dds_store_get_batch (libfabric, every owner)", rc);
    }
    return now_s() - t0;
}

/* Method 1, measured: the real adapter (ddofi_transport_create) over the
 * simulated communicator, with DDSTORE_OFI_PEERS=`peers` (lazy: a reader
 * inserts a rank's address at its first read from it; eager: every rank's
 * when it opens).  Every simulated peer has this process's own address and
 * registration, so the store, the adapter and its arrays are as at R
 * ranks, but the provider sees one distinct address inserted R times: its
 * address vector may keep one entry (util AVs look addresses up), so the
 * provider's own per-peer memory and a real insert's cost are not what
 * this measures.  Shards are not mapped (DDSTORE_OFI_MAP_SHARDS=0: the
 * simulated ranks are no processes of this host).  Then a thread reader
 * reads one row of every owner twice
 * (R <= --ofi-read-max): the first pass inserts the peers a lazy reader
 * had not, the second finds them all. */
static void ofi_point(const opts_t *o, int R, const char *peers)
{
    sim_comm_t sc = {.nranks = R};
    dds_store_params_t p;
    dds_store_t *s = NULL;
    dds_reader_t *rd = NULL;
    ddofi_transport_params_t tp;
    char *row = calloc(1, o->row_bytes);
    size_t h0, h1, h2, h3, h4 = 0;
    double t0, t_create, t_add, t_reader, t_first = -1, t_second = -1;
    int rc;

    memset(&p, 0, sizeof p);
    memset(&tp, 0, sizeof tp);
    tp.field_mask = DDOFI_TRANSPORT_FIELD_PROVIDER;
    tp.provider = o->ofi_provider;
    p.field_mask = DDS_STORE_PARAM_COMM | DDS_STORE_PARAM_TRANSPORT;
    p.comm.ops = &sim_comm_ops;
    p.comm.ctx = &sc;
    p.comm.rank = 0;
    p.comm.size = R;
    if (row == NULL)
        die("row", -DDS_ENOMEM);
    setenv("DDSTORE_OFI_PEERS", peers, 1); /* read when the adapter starts */
    /* the simulated ranks "share this host" but are no processes: every
     * read goes through the provider, as between nodes */
    setenv("DDSTORE_OFI_MAP_SHARDS", "0", 1);
    h0 = heap_bytes();
    t0 = now_s();
    rc = ddofi_transport_create(&p.comm, &tp, &p.transport);
    if (rc == 0)
        rc = dds_store_create(&p, &s);
    t_create = now_s() - t0;
    if (rc != 0) {
        printf("%8d SKIP: the adapter over '%s' did not start: %s\n", R,
               o->ofi_provider, dds_last_error());
        free(row);
        return;
    }
    h1 = heap_bytes();
    t0 = now_s();
    rc = dds_store_var_add(s, "x", row, 1, o->row_bytes, 1, DDS_DTYPE_RAW,
                           NULL, DDS_ADD_COPY);
    t_add = now_s() - t0;
    if (rc != 0)
        die("dds_store_var_add (libfabric)", rc);
    h2 = heap_bytes();
    t0 = now_s();
    rc = dds_store_reader_open(s, DDS_READER_THREAD, &rd);
    t_reader = now_s() - t0;
    if (rc != 0)
        die("dds_store_reader_open (libfabric)", rc);
    h3 = heap_bytes();
    if (R <= o->ofi_read_max) {
        char *buf = malloc(1024 * o->row_bytes);
        int64_t *rows = malloc(1024 * sizeof *rows);
        if (buf == NULL || rows == NULL)
            die("buffers", -DDS_ENOMEM);
        size_t hb = heap_bytes();
        t_first = read_every_owner(s, rd, R, buf, o->row_bytes, rows);
        h4 = heap_bytes() - (hb - h3); /* the reader's, not the buffers' */
        t_second = read_every_owner(s, rd, R, buf, o->row_bytes, rows);
        free(buf);
        free(rows);
    }
    dds_store_reader_close(s, rd);
    rc = dds_store_var_free(s, "x");
    if (rc != 0)
        die("dds_store_var_free (libfabric)", rc);
    dds_store_destroy(s);
    unsetenv("DDSTORE_OFI_PEERS");
    unsetenv("DDSTORE_OFI_MAP_SHARDS");
    free(row);
    long long store_b = (long long)h1 - (long long)h0;
    long long var_b = (long long)h2 - (long long)h1 - (long long)o->row_bytes;
    long long reader_b = (long long)h3 - (long long)h2;
    long long touched_b = h4 ? (long long)h4 - (long long)h2 : -1;
    /* the address table: at least one 48-byte header + address per rank */
    EXPECT(store_b >= (long long)R * 48,
           "R=%d: the adapter keeps %lld bytes, less than its address table",
           R, store_b);
    printf("%8d %6s %12lld %10lld %10lld %10lld %10.1f %10.1f %10.1f %10.1f %10.1f\n", R,
           peers, store_b, var_b, reader_b, touched_b, t_create * 1e3, t_add * 1e3,
           t_reader * 1e3, t_first * 1e3, t_second * 1e3);
    emit("{\"kind\": \"scale_ofi\", \"nranks\": %d, \"provider\": \"%s\", "
         "\"peers\": \"%s\", \"store_bytes\": %lld, \"var_bytes\": %lld, "
         "\"reader_bytes\": %lld, \"reader_bytes_all_read\": %lld, "
         "\"create_ms\": %.3f, \"add_ms\": %.3f, \"reader_open_ms\": %.3f, "
         "\"read_every_owner_first_ms\": %.3f, \"read_every_owner_again_ms\": %.3f, "
         "\"source\": \"measured; one distinct address in the provider\"}",
         R, o->ofi_provider, peers, store_b, var_b, reader_b, touched_b, t_create * 1e3,
         t_add * 1e3, t_reader * 1e3, t_first * 1e3, t_second * 1e3);
}

/* Method 1: the adapter's per-rank allocations (ddofi_tr_transport.c:
 * t->addrs, each reader's peers, each region's remotes and the transient
 * gather of export blobs; ddofi_tr_method2.c: a core job's hosts, pids and
 * start times).  Sizes, not a measurement. */
enum { ADDR_BLOB = 48 + 16 }; /* blob header + a 16-byte address (tcp's sockaddr_in) */
static void method1_point(int R)
{
    /* the address table's slots are the longest blob's length */
    size_t addrs = (size_t)R * ADDR_BLOB;
    size_t peers = (size_t)R * sizeof(ddofi_peer_t);
    size_t remotes = (size_t)R * sizeof(ddofi_remote_t);
    size_t gather_create = (size_t)R * (ADDR_BLOB + 64);
    size_t gather_region = (size_t)R * DDOFI_MR_BLOB_SIZE;
    size_t m2core = (size_t)R * (64 + sizeof(int32_t) + sizeof(uint64_t));
    printf("%8d %12zu %10zu %10zu %12zu %10zu %10zu\n", R, addrs, peers,
           remotes, gather_create, gather_region, m2core);
    emit("{\"kind\": \"scale_method1\", \"nranks\": %d, \"addr_table_bytes\": "
         "%zu, \"peers_bytes_per_reader\": %zu, \"av_inserts_per_reader\": %d, "
         "\"remotes_bytes_per_var\": %zu, \"gathered_bytes_create\": %zu, "
         "\"gathered_bytes_per_var\": %zu, \"method2_core_bytes\": %zu, "
         "\"source\": \"sizes from the code, not measured; 64-byte address blobs; "
         "inserts at open with DDSTORE_OFI_PEERS=eager (lazy: 0)\"}",
         R, addrs, peers, R, remotes, gather_create, gather_region, m2core);
}
#endif

/* ---- FileComm --------------------------------------------------------- */

typedef struct fc_result {
    double allgather_us, allreduce_us, barrier_us;
    int ok;
} fc_result_t;

static void fc_rank(const char *dir, int rank, int P, int rounds, int wfd)
{
    dds_comm_t c;
    fc_result_t res = {0, 0, 0, 1};
    double *t = calloc((size_t)rounds, sizeof *t);
    unsigned char mine[64], *all = malloc((size_t)P * sizeof mine);
    int rc = dds_comm_file_create(dir, rank, P, "scale", 120, &c);
    if (rc != 0 || t == NULL || all == NULL)
        _exit(3);
    memset(mine, rank & 0xff, sizeof mine);
    for (int k = 0; k < 3; k++)   /* warm-up: every rank has started */
        if (c.ops->barrier(c.ctx) != 0)
            _exit(4);
    for (int k = 0; k < rounds; k++) {
        double t0 = now_s();
        if (c.ops->allgather(c.ctx, mine, sizeof mine, all) != 0)
            _exit(5);
        t[k] = now_s() - t0;
        for (int r = 0; r < P; r++)
            if (all[(size_t)r * sizeof mine] != (unsigned char)(r & 0xff))
                res.ok = 0;
    }
    res.allgather_us = median(t, rounds) * 1e6;
    for (int k = 0; k < rounds; k++) {
        int64_t v = rank;
        double t0 = now_s();
        if (c.ops->allreduce_i64(c.ctx, &v, 1, DDS_REDUCE_SUM) != 0)
            _exit(6);
        t[k] = now_s() - t0;
        if (v != (int64_t)P * (P - 1) / 2)
            res.ok = 0;
    }
    res.allreduce_us = median(t, rounds) * 1e6;
    for (int k = 0; k < rounds; k++) {
        double t0 = now_s();
        if (c.ops->barrier(c.ctx) != 0)
            _exit(7);
        t[k] = now_s() - t0;
    }
    res.barrier_us = median(t, rounds) * 1e6;
    dds_comm_destroy(&c);
    if (rank == 0 && write(wfd, &res, sizeof res) != (ssize_t)sizeof res)
        _exit(8);
    _exit(0);
}

static int rm_entry(const char *path, const struct stat *st, int flag,
                    struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path) != 0 ? -1 : 0;
}

/* FileComm's files, claims and directories (depth first). */
static void rm_tree(const char *path)
{
    if (nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "ddstore-scale: could not remove all of %s\n", path);
}

static void filecomm_point(const opts_t *o, int P)
{
    char dir[4096];
    const char *base = o->fc_dir ? o->fc_dir
                                 : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    int fds[2], status, bad = 0;
    pid_t pids[256];
    fc_result_t res;

    snprintf(dir, sizeof dir, "%s/ddscale.XXXXXX", base);
    if (mkdtemp(dir) == NULL || pipe(fds) != 0) {
        fprintf(stderr, "ddstore-scale: FileComm directory under %s: %s\n",
                base, strerror(errno));
        exit(2);
    }
    fflush(NULL);
    for (int r = 0; r < P; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            close(fds[0]);
            fc_rank(dir, r, P, o->fc_rounds, fds[1]);
        }
    }
    close(fds[1]);
    memset(&res, 0, sizeof res);
    ssize_t got = read(fds[0], &res, sizeof res);
    close(fds[0]);
    for (int r = 0; r < P; r++)
        if (waitpid(pids[r], &status, 0) < 0 || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
            bad = 1;
    rm_tree(dir);
    if (bad || got != (ssize_t)sizeof res) {
        fprintf(stderr, "ddstore-scale: FileComm run of %d processes failed\n",
                P);
        g_failed = 1;
        return;
    }
    EXPECT(res.ok, "FileComm of %d: wrong data gathered", P);
    printf("%8d %12.1f %12.1f %12.1f\n", P, res.allgather_us, res.allreduce_us,
           res.barrier_us);
    emit("{\"kind\": \"scale_filecomm\", \"nranks\": %d, \"dir\": \"%s\", "
         "\"rounds\": %d, \"allgather_us\": %.1f, \"allreduce_us\": %.1f, "
         "\"barrier_us\": %.1f, \"files_written_per_collective\": %d, "
         "\"files_read_per_collective\": %d}",
         P, base, o->fc_rounds, res.allgather_us, res.allreduce_us,
         res.barrier_us, P, P * P);
}

/* ---- main ------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr,
            "usage: ddstore_scale [--ranks a,b,..] [--max-ranks N] [--rows N]\n"
            "       [--row-bytes N] [--batch N] [--batches N] [--filecomm a,b,..]\n"
            "       [--filecomm-rounds N] [--filecomm-dir DIR] [--ofi PROVIDER] [--ofi-read-max R]\n"
            "       [--quick] [--check]\n"
            "       [--json PATH]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    opts_t o;
    int quick = 0, have_ranks = 0, have_fc = 0;
    const char *json = NULL;

    memset(&o, 0, sizeof o);
    o.max_ranks = 100000;
    o.rows = 1024;
    o.row_bytes = 3136;
    o.ofi_read_max = 16384;
    o.batch = 128;
    o.batches = 200;
    o.fc_rounds = 40;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quick")) {
            quick = 1;
        } else if (!strcmp(a, "--check")) {
            g_check = 1;
        } else if (v == NULL) {
            usage();
        } else if (!strcmp(a, "--ranks")) {
            o.nranks_pts = parse_list(v, o.ranks, MAX_POINTS);
            have_ranks = 1;
            i++;
        } else if (!strcmp(a, "--max-ranks")) {
            o.max_ranks = atoi(v), i++;
        } else if (!strcmp(a, "--rows")) {
            o.rows = atoll(v), i++;
        } else if (!strcmp(a, "--row-bytes")) {
            o.row_bytes = (size_t)atoll(v), i++;
        } else if (!strcmp(a, "--batch")) {
            o.batch = atoi(v), i++;
        } else if (!strcmp(a, "--batches")) {
            o.batches = atoi(v), i++;
        } else if (!strcmp(a, "--filecomm")) {
            o.nfc = parse_list(v, o.fc, 16);
            have_fc = 1;
            i++;
        } else if (!strcmp(a, "--filecomm-rounds")) {
            o.fc_rounds = atoi(v), i++;
        } else if (!strcmp(a, "--ofi")) {
            o.ofi_provider = v[0] ? v : NULL, i++;
        } else if (!strcmp(a, "--ofi-read-max")) {
            o.ofi_read_max = atoi(v), i++;
        } else if (!strcmp(a, "--filecomm-dir")) {
            o.fc_dir = v, i++;
        } else if (!strcmp(a, "--json")) {
            json = v, i++;
        } else {
            usage();
        }
    }
    if (quick) {
        if (o.max_ranks > 4096)
            o.max_ranks = 4096;
        o.batches = o.batches > 50 ? 50 : o.batches;
        o.fc_rounds = o.fc_rounds > 10 ? 10 : o.fc_rounds;
    }
    if (!have_ranks) {
        for (int r = 2; r <= 65536; r *= 2)
            o.ranks[o.nranks_pts++] = r;
        o.ranks[o.nranks_pts++] = 75000;
        o.ranks[o.nranks_pts++] = 100000;
    }
    if (!have_fc) {
        int d[] = {2, 4, 8, 16};
        o.nfc = quick ? 2 : 4;
        memcpy(o.fc, d, sizeof(int) * (size_t)o.nfc);
    }
    if (o.rows < 1 || o.row_bytes < 1 || o.batch < 1 || o.batches < 1 ||
        o.fc_rounds < 1) {
        fprintf(stderr, "ddstore-scale: --rows, --row-bytes, --batch, "
                        "--batches and --filecomm-rounds must be >= 1\n");
        return 2;
    }
    for (int i = 0; i < o.nranks_pts; i++)
        if (o.ranks[i] < 2) {
            fprintf(stderr, "ddstore-scale: --ranks: %d < 2\n", o.ranks[i]);
            return 2;
        }
    for (int i = 0; i < o.nfc; i++)
        if (o.fc[i] < 1 || o.fc[i] > 256) {
            fprintf(stderr, "ddstore-scale: --filecomm: %d not in [1, 256]\n",
                    o.fc[i]);
            return 2;
        }
    if (json != NULL && (g_json = fopen(json, "a")) == NULL) {
        fprintf(stderr, "ddstore-scale: %s: %s\n", json, strerror(errno));
        return 2;
    }
    emit("{\"kind\": \"scale_run\", \"rows_per_rank\": %lld, \"row_bytes\": "
         "%zu, \"batch\": %d, \"batches\": %d, \"rounds\": %d, \"clock\": "
         "\"thread CPU time (core, record); wall (ofi, filecomm)\"}",
         (long long)o.rows, o.row_bytes, o.batch, o.batches, ROUNDS);

    printf("core: rank 0 of R (simulated), %lld rows of %zu B per rank, "
           "batches of %d random rows; medians of %d rounds\n",
           (long long)o.rows, o.row_bytes, o.batch, ROUNDS);
    printf("%8s %10s %9s %9s %9s %9s %9s %9s %8s %10s\n", "R", "meta_B/var",
           "add_us", "init_us", "free_us", "plan_us", "batch_us", "get1_us",
           "ops/bat", "gather_B");
    for (int i = 0; i < o.nranks_pts; i++)
        if (o.ranks[i] <= o.max_ranks)
            core_point(&o, o.ranks[i]);
#ifdef DDSTORE_HAVE_OFI
    printf("\nmethod 2 record (ddofi_hs_encode / ddofi_hs_parse)\n");
    printf("%8s %12s %12s %10s %10s\n", "n_core", "record_B", "needed_B",
           "encode_us", "parse_us");
    for (int i = 0; i < o.nranks_pts; i++)
        if (o.ranks[i] <= o.max_ranks)
            method2_point(&o, o.ranks[i]);
    printf("\nmethod 1 per-rank state (sizes the adapter allocates)\n");
    printf("%8s %12s %10s %10s %12s %10s %10s\n", "R", "addr_tbl_B",
           "peers_B", "remote_B", "gath_crt_B", "gath_var_B", "m2core_B");
    for (int i = 0; i < o.nranks_pts; i++)
        if (o.ranks[i] <= o.max_ranks)
            method1_point(o.ranks[i]);
    if (o.ofi_provider != NULL) {
        printf("\nmethod 1 measured: the adapter over '%s' (one distinct address; "
               "malloc accounting)\n", o.ofi_provider);
        printf("%8s %6s %12s %10s %10s %10s %10s %10s %10s %10s %10s\n", "R", "peers",
               "store_B", "var_B", "reader_B", "rd_all_B", "create_ms", "add_ms",
               "reader_ms", "read1_ms", "read2_ms");
        for (int i = 0; i < o.nranks_pts; i++)
            if (o.ranks[i] <= o.max_ranks) {
                ofi_point(&o, o.ranks[i], "eager");
                ofi_point(&o, o.ranks[i], "lazy");
            }
    }
#else
    printf("\nmethod 1 / 2: not built with libfabric (SKIP)\n");
#endif
    if (o.nfc > 0) {
        printf("\nFileComm (forked processes, one directory)\n");
        printf("%8s %12s %12s %12s\n", "P", "allgather_us", "allreduce_us",
               "barrier_us");
        for (int i = 0; i < o.nfc; i++)
            filecomm_point(&o, o.fc[i]);
    }
    if (g_json != NULL)
        fclose(g_json);
    if (g_failed)
        fprintf(stderr, "ddstore-scale: FAILED\n");
    return g_failed ? 1 : 0;
}
