/* Method 1 end to end: ddstore-core's store over the ddstore-ofi adapter,
 * 2 and 4 ranks as forked processes (communicator over shared memory, see
 * forkcomm.h), with shm and tcp;ofi_rxm (or the providers named on the
 * command line).
 *
 * Every rank: add variables of 3136-byte rows (float32) and of 1 MiB rows,
 * a zero-row shard, batched reads of random rows with repeats from every
 * owner, ranges crossing owner boundaries, registered destinations and
 * slices of them, 8 threads with their own readers and 4 on the default
 * reader with every value checked, the profile, an index out of range, a
 * variable freed and added again, a forked reader in a child process (the
 * inherited default reader refused), and - at the end - a rank that dies
 * while another reads from it (an error within the read timeout).  Same-node
 * shards are mapped and read with memcpy (every rank is on this host: every
 * byte of another rank's shard comes that way, counted by
 * dds_shard_counts), also in the forked child; with
 * DDSTORE_OFI_MAP_SHARDS=0 (4 ranks, and the FI_MR_LOCAL run) none is and
 * the reads go through the provider.  Also:
 * a provider that does not exist fails creation on every rank with a clear
 * message.  Peers are inserted into a reader's endpoint at their first read
 * (the FI_MR_LOCAL run: DDSTORE_OFI_PEERS=eager, all at open).
 *
 * Prints "N passed, M failed" (summed over ranks). */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../src/ddofi_internal.h" /* ddofi_test_mr_local */
#include "../transport/ddofi_tr_internal.h" /* internals */
#include "ddstore/errors.h"
#include "ddstore/ofi.h"
#include "ddstore/ofi_transport.h"
#include "ddstore/store.h"
#include "forkcomm.h"

static forkcomm_world_t *g_w;
static int g_rank;

#define T(cond)                                                                \
    do {                                                                       \
        if (cond) {                                                            \
            atomic_fetch_add(&g_w->passed, 1);                                 \
        } else {                                                               \
            atomic_fetch_add(&g_w->failed, 1);                                 \
            fprintf(stderr, "rank %d: FAIL %s:%d: %s (last error: %s)\n", g_rank, \
                    __FILE__, __LINE__, #cond, dds_last_error());              \
        }                                                                      \
    } while (0)
#define T_RC(expr, want)                                                       \
    do {                                                                       \
        int rc_ = (expr);                                                      \
        if (rc_ == (want)) {                                                   \
            atomic_fetch_add(&g_w->passed, 1);                                 \
        } else {                                                               \
            atomic_fetch_add(&g_w->failed, 1);                                 \
            fprintf(stderr, "rank %d: FAIL %s:%d: %s = %d (%s), want %d: %s\n", g_rank, \
                    __FILE__, __LINE__, #expr, rc_, dds_strerror(rc_), (int)(want), \
                    dds_last_error());                                         \
        }                                                                      \
    } while (0)

#define DISP 784 /* 784 float32 = 3136 bytes */
#define BIG (1u << 20)

static int64_t rows_of(int r) { return 100 + 37 * r; }

static float val(int64_t g, int64_t c)
{
    return (float)(((uint64_t)g * 1315423911u + (uint64_t)c * 2654435761u) % 1000003u);
}
static unsigned char bigval(int64_t g, size_t i)
{
    return (unsigned char)(g * 31 + (int64_t)(i * 7) + (int64_t)(i >> 10));
}

static size_t check_rows(const float *buf, const int64_t *rows, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        for (int64_t c = 0; c < DISP; c++)
            bad += buf[i * DISP + (size_t)c] != val(rows[i], c);
    return bad;
}

static dds_buf_t fbuf(void *p, int64_t n)
{
    dds_buf_t b = {p, n, DISP * sizeof(float), DDS_DTYPE_FLOAT32, 4, {DDS_MEM_HOST, 0, NULL}};
    return b;
}

typedef struct targ {
    dds_store_t *s;
    int own_reader;
    unsigned seed;
    int64_t total;
    size_t bad, fails;
} targ_t;

static void *reader_thread(void *arg)
{
    targ_t *a = arg;
    dds_reader_t *rd = NULL;
    if (a->own_reader && dds_store_reader_open(a->s, DDS_READER_THREAD, &rd)) {
        a->fails++;
        return NULL;
    }
    enum { N = 64 };
    float *buf = malloc(N * DISP * sizeof(float));
    int64_t rows[N];
    for (int it = 0; it < 40; it++) {
        for (int i = 0; i < N; i++)
            rows[i] = (int64_t)(rand_r(&a->seed) % (unsigned)a->total);
        dds_buf_t b = fbuf(buf, N);
        if (dds_store_get_batch(a->s, rd, "x", &b, rows, N)) {
            a->fails++;
            fprintf(stderr, "thread: %s\n", dds_last_error());
            break;
        }
        a->bad += check_rows(buf, rows, N);
    }
    free(buf);
    if (rd)
        dds_store_reader_close(a->s, rd);
    return NULL;
}

typedef struct cfg {
    const char *provider;
    int dead_peer;  /* end with a rank dying */
    int mr_local;   /* ddofi_test_mr_local set in this run */
    int map;        /* DDSTORE_OFI_MAP_SHARDS in this run */
    int eager;      /* DDSTORE_OFI_PEERS=eager in this run (else lazy) */
} cfg_t;

/* A ragged variable (the shard is [index | payload]): sample g has g % 5
 * element rows of RDISP float32 (some empty), rank r holds 3 + 2r samples.
 * Every sample read in reverse order, from every owner: right rows and
 * lengths.  Same-node shards are mapped for ragged shards too: the index
 * step (sizes) and the payload step both come from the mapped shards, the
 * payload step's bytes exactly the other ranks' payload; none with
 * DDSTORE_OFI_MAP_SHARDS=0. */
enum { RDISP = 3 };
static float rval(int64_t g, int64_t e, int64_t c) { return (float)(g * 1000 + e * 10 + c); }

static void ragged_section(dds_store_t *s, const cfg_t *cfg, int me, int n)
{
    int64_t first = 0, total = 0, mine = 3 + 2 * me;
    for (int r = 0; r < n; r++) {
        if (r < me)
            first += 3 + 2 * r;
        total += 3 + 2 * r;
    }
    int64_t lens[3 + 2 * FORKCOMM_MAX], nel = 0;
    for (int64_t i = 0; i < mine; i++)
        nel += lens[i] = (first + i) % 5;
    float *vals = malloc((size_t)(nel + 1) * RDISP * sizeof(float));
    for (int64_t i = 0, e0 = 0; i < mine; e0 += lens[i], i++)
        for (int64_t e = 0; e < lens[i]; e++)
            for (int64_t c = 0; c < RDISP; c++)
                vals[(e0 + e) * RDISP + c] = rval(first + i, e, c);
    T_RC(dds_store_ragged_add(s, "rg", vals, nel, lens, mine, RDISP, 4, DDS_DTYPE_FLOAT32, NULL,
                              DDS_ADD_COPY),
         0);
    int64_t rows[3 + 2 * FORKCOMM_MAX * FORKCOMM_MAX], got_len[3 + 2 * FORKCOMM_MAX * FORKCOMM_MAX];
    int64_t want_total = 0, remote_bytes = 0, got_total = -1;
    for (int64_t i = 0; i < total; i++) {
        rows[i] = total - 1 - i;
        want_total += rows[i] % 5;
        if (rows[i] < first || rows[i] >= first + mine)
            remote_bytes += (rows[i] % 5) * RDISP * (int64_t)sizeof(float);
    }
    uint64_t b0, b1, b2;
    dds_shard_counts(NULL, &b0);
    T_RC(dds_store_ragged_sizes(s, NULL, "rg", rows, (size_t)total, got_len), 0);
    dds_shard_counts(NULL, &b1);
    float *out = malloc((size_t)(want_total + 1) * RDISP * sizeof(float));
    dds_buf_t ob = {out, want_total, RDISP * sizeof(float), DDS_DTYPE_FLOAT32, 4,
                    {DDS_MEM_HOST, 0, NULL}};
    T_RC(dds_store_ragged_get_batch(s, NULL, "rg", &ob, rows, (size_t)total, got_len,
                                    &got_total),
         0);
    dds_shard_counts(NULL, &b2);
    T(got_total == want_total);
    size_t bad = 0;
    for (int64_t i = 0, e0 = 0; i < total; e0 += rows[i] % 5, i++) {
        bad += got_len[i] != rows[i] % 5;
        for (int64_t e = 0; e < rows[i] % 5; e++)
            for (int64_t c = 0; c < RDISP; c++)
                bad += out[(e0 + e) * RDISP + c] != rval(rows[i], e, c);
    }
    T(bad == 0);
    const uint64_t idx_bytes = b1 - b0, step_bytes = b2 - b1;
    T(cfg->map && n > 1 ? idx_bytes > 0 : idx_bytes == 0);
    T(step_bytes == (cfg->map ? (uint64_t)remote_bytes + idx_bytes : 0));
    /* ragged entries in one planned read (dds_store_read_vars: the index
     * entries of both in one read_multi, then both payloads in one) */
    {
        float *out2 = malloc((size_t)(want_total + 1) * RDISP * sizeof(float));
        int64_t l2[3 + 2 * FORKCOMM_MAX * FORKCOMM_MAX];
        dds_read_var_t e[3];
        memset(e, 0, sizeof(e));
        memset(out, 0, (size_t)want_total * RDISP * sizeof(float));
        e[0].name = e[1].name = e[2].name = "rg";
        e[0].kind = e[1].kind = DDS_READ_RAGGED;
        e[2].kind = DDS_READ_SIZES;
        e[0].dst = ob;
        e[1].dst = ob;
        e[1].dst.ptr = out2;
        e[0].lengths = got_len;
        e[2].lengths = l2;
        T_RC(dds_store_read_vars(s, NULL, e, 3, rows, (size_t)total), 0);
        T(e[0].total == want_total && e[1].total == want_total && e[2].total == want_total);
        bad = 0;
        for (int64_t i = 0, e0 = 0; i < total; e0 += rows[i] % 5, i++) {
            bad += got_len[i] != rows[i] % 5;
            bad += l2[i] != rows[i] % 5;
            for (int64_t k = 0; k < rows[i] % 5; k++)
                for (int64_t c = 0; c < RDISP; c++) {
                    bad += out[(e0 + k) * RDISP + c] != rval(rows[i], k, c);
                    bad += out2[(e0 + k) * RDISP + c] != rval(rows[i], k, c);
                }
        }
        T(bad == 0);
        free(out2);
    }
    /* freed with the store: a var_free now would free the shard while this
     * process's progress thread has sent from it, ordered only through the
     * other ranks (the barrier), which TSan cannot see */
    free(vals);
    free(out);
}

static int rank_main(dds_comm_t *comm, void *arg)
{
    const cfg_t *cfg = arg;
    g_rank = comm->rank;
    alarm(150);
    int n = comm->size, me = comm->rank;
    setenv("DDSTORE_OFI_MAP_SHARDS", cfg->map ? "1" : "0", 1); /* read at create */
    setenv("DDSTORE_OFI_PEERS", cfg->eager ? "eager" : "lazy", 1);
    ddofi_transport_params_t tp = {.field_mask = DDOFI_TRANSPORT_FIELD_PROVIDER,
                                   .provider = cfg->provider};
    dds_transport_t tr;
    int rc = ddofi_transport_create(comm, &tp, &tr);
    T_RC(rc, 0);
    if (rc) {
        dds_comm_destroy(comm);
        return 1;
    }
    T(tr.caps & DDS_TRANSPORT_CAP_THREAD_SAFE);
    T(tr.caps & DDS_TRANSPORT_CAP_READERS);
    T(tr.caps & DDS_TRANSPORT_CAP_FORK);
    T(tr.caps & DDS_TRANSPORT_CAP_LOCAL_SELF);
    dds_store_params_t sp;
    memset(&sp, 0, sizeof sp);
    sp.field_mask = DDS_STORE_PARAM_COMM | DDS_STORE_PARAM_TRANSPORT;
    sp.comm = *comm;
    sp.transport = tr;
    dds_store_t *s = NULL;
    rc = dds_store_create(&sp, &s);
    T_RC(rc, 0);
    if (rc)
        return 1;

    /* shards */
    int64_t first = 0, total = 0;
    for (int r = 0; r < n; r++) {
        if (r < me)
            first += rows_of(r);
        total += rows_of(r);
    }
    int64_t mine = rows_of(me);
    float *shard = malloc((size_t)mine * DISP * sizeof(float));
    for (int64_t i = 0; i < mine; i++)
        for (int64_t c = 0; c < DISP; c++)
            shard[i * DISP + c] = val(first + i, c);
    T_RC(dds_store_var_add(s, "x", shard, mine, DISP, 4, DDS_DTYPE_FLOAT32, NULL, DDS_ADD_COPY), 0);
    memset(shard, 0, (size_t)mine * DISP * sizeof(float)); /* the store copied it */

    /* big rows: 2 per rank, rank 1 none (zero-row shard) */
    int64_t bmine = me == 1 ? 0 : 2, bfirst = 0, btotal = 0;
    for (int r = 0; r < n; r++) {
        int64_t k = r == 1 ? 0 : 2;
        if (r < me)
            bfirst += k;
        btotal += k;
    }
    unsigned char *bshard = malloc(2 * BIG);
    for (int64_t i = 0; i < bmine; i++)
        for (size_t j = 0; j < BIG; j++)
            bshard[(size_t)i * BIG + j] = bigval(bfirst + i, j);
    T_RC(dds_store_var_add(s, "big", bshard, bmine, BIG, 1, DDS_DTYPE_UINT8, NULL, DDS_ADD_COPY), 0);

    /* batched reads: random rows with repeats, every owner */
    enum { NB = 512 };
    float *buf = malloc((size_t)NB * DISP * sizeof(float));

    /* Peers enter the default reader's endpoint at their first read
     * (DDSTORE_OFI_PEERS=lazy), all at open with eager; rows of mapped
     * shards and this rank's own rows insert nobody. */
    {
        const ddofi_tr_reader_t *dr = ((const ddofi_tr_t *)tr.ctx)->dflt;
        const int next = (me + 1) % n;
        int64_t row = 0;
        for (int r = 0; r < next; r++)
            row += rows_of(r);
        size_t before = 0, after = 0, want_after = 0;
        for (int i = 0; i < n; i++)
            before += __atomic_load_n(&dr->peers[i], __ATOMIC_ACQUIRE) != DDOFI_TR_NO_PEER;
        T(before == (cfg->eager ? (size_t)n : 0));
        dds_buf_t b1 = fbuf(buf, 1);
        T_RC(dds_store_get_batch(s, NULL, "x", &b1, &row, 1), 0);
        T(check_rows(buf, &row, 1) == 0);
        for (int i = 0; i < n; i++) {
            int in = __atomic_load_n(&dr->peers[i], __ATOMIC_ACQUIRE) != DDOFI_TR_NO_PEER;
            int want = cfg->eager || (i == next && next != me && !cfg->map);
            after += in;
            want_after += want;
            T(in == want);
        }
        if (me == 0)
            printf("   peers in the default reader: %zu at open, %zu after one read (%s)\n",
                   before, after, cfg->eager ? "eager" : "lazy");
        T(after == want_after);
    }
    int64_t rows[NB];
    unsigned seed = 1234 + (unsigned)me;
    for (int i = 0; i < NB; i++)
        rows[i] = (int64_t)(rand_r(&seed) % (unsigned)total);
    rows[5] = rows[4];
    rows[NB - 1] = total - 1;
    rows[0] = 0;
    dds_buf_t b = fbuf(buf, NB);
    uint64_t mops0, mbytes0, mops1, mbytes1;
    dds_shard_counts(&mops0, &mbytes0);
    T_RC(dds_store_get_batch(s, NULL, "x", &b, rows, NB), 0);
    T(check_rows(buf, rows, NB) == 0);
    dds_shard_counts(&mops1, &mbytes1);
    {
        /* rows of other ranks came from their mapped shards (repeats are
         * read once), or none did */
        uint64_t other = 0;
        for (int i = 0; i < NB; i++)
            other += rows[i] < first || rows[i] >= first + mine;
        uint64_t got = mbytes1 - mbytes0;
        T(cfg->map ? got > 0 && got <= other * DISP * sizeof(float) : got == 0);
        T(cfg->map ? mops1 > mops0 : mops1 == mops0);
    }

    /* consecutive rows (merged reads) and a range across every owner */
    int64_t seq[200];
    for (int i = 0; i < 200; i++)
        seq[i] = (50 + i) % total;
    b = fbuf(buf, 200);
    T_RC(dds_store_get_batch(s, NULL, "x", &b, seq, 200), 0);
    T(check_rows(buf, seq, 200) == 0);
    b = fbuf(buf, total > NB ? NB : total);
    memset(buf, 0, (size_t)NB * DISP * sizeof(float));
    T_RC(dds_store_get(s, NULL, "x", &b, 0), 0);
    int64_t rr[NB];
    for (int i = 0; i < b.nrows; i++)
        rr[i] = i;
    T(check_rows(buf, rr, (size_t)b.nrows) == 0);

    /* registered destination, reads into slices of it */
    T_RC(dds_store_recv_register(s, buf, (size_t)NB * DISP * sizeof(float), NULL), 0);
    b = fbuf(buf + 10 * DISP, 100);
    T_RC(dds_store_get_batch(s, NULL, "x", &b, rows, 100), 0);
    T(check_rows(buf + 10 * DISP, rows, 100) == 0);
    /* again: a no-op; one unregister removes it, a second finds nothing */
    T_RC(dds_store_recv_register(s, buf, (size_t)NB * DISP * sizeof(float), NULL), 0);
    T_RC(dds_store_recv_unregister(s, buf, (size_t)NB * DISP * sizeof(float)), 0);
    T_RC(dds_store_recv_unregister(s, buf, (size_t)NB * DISP * sizeof(float)), -DDS_ENOENT);

    /* FI_MR_LOCAL (forced with ddofi_test_mr_local): unregistered
     * destinations are registered on the fly and counted; registered ones
     * are not. */
    if (cfg->mr_local) {
        dds_profile_t p0, p1, p2;
        T_RC(dds_store_profile_reset(s, "x"), 0);
        T_RC(dds_store_profile(s, "x", &p0), 0);
        int64_t far = total - 1 - (me == n - 1 ? rows_of(n - 1) : 0); /* a remote row */
        b = fbuf(buf, 1);
        T_RC(dds_store_get_batch(s, NULL, "x", &b, &far, 1), 0);
        T(check_rows(buf, &far, 1) == 0);
        T_RC(dds_store_profile(s, "x", &p1), 0);
        T(p1.v[DDS_PROF_REGISTRATIONS] == p0.v[DDS_PROF_REGISTRATIONS] + 1);
        T_RC(dds_store_recv_register(s, buf, (size_t)NB * DISP * sizeof(float), NULL), 0);
        T_RC(dds_store_get_batch(s, NULL, "x", &b, &far, 1), 0);
        T(check_rows(buf, &far, 1) == 0);
        /* scattered rows go through the (unregistered) staging buffer */
        T_RC(dds_store_profile(s, "x", &p2), 0);
        T(p2.v[DDS_PROF_REGISTRATIONS] == p1.v[DDS_PROF_REGISTRATIONS]);
        T_RC(dds_store_recv_unregister(s, buf, (size_t)NB * DISP * sizeof(float)), 0);
    }

    /* big rows (1 MiB): every one, from every owner */
    unsigned char *bb = malloc((size_t)btotal * BIG);
    dds_buf_t bbuf = {bb, btotal, BIG, DDS_DTYPE_UINT8, 1, {DDS_MEM_HOST, 0, NULL}};
    int64_t ball[FORKCOMM_MAX * 2];
    for (int64_t i = 0; i < btotal; i++)
        ball[i] = btotal - 1 - i;
    dds_shard_counts(NULL, &mbytes0);
    T_RC(dds_store_get_batch(s, NULL, "big", &bbuf, ball, (size_t)btotal), 0);
    dds_shard_counts(NULL, &mbytes1);
    T(mbytes1 - mbytes0 == (cfg->map ? (uint64_t)(btotal - bmine) * BIG : 0));
    size_t bad = 0;
    for (int64_t i = 0; i < btotal; i++)
        for (size_t j = 0; j < BIG; j++)
            bad += bb[(size_t)i * BIG + j] != bigval(ball[i], j);
    T(bad == 0);

    /* the fields of a batch in one call (read_multi: every fi_read of the
     * variables posted, then waited for): "x" twice and "big" */
    {
        int64_t m = btotal < total ? btotal : total;
        float *x2 = malloc((size_t)m * DISP * sizeof(float));
        const char *const names[3] = {"x", "big", "x"};
        dds_buf_t bs[3] = {fbuf(buf, m), bbuf, fbuf(x2, m)};
        bs[1].nrows = m;
        memset(bb, 0, (size_t)btotal * BIG);
        T_RC(dds_store_get_batch_vars(s, NULL, names, bs, 3, ball + (btotal - m), (size_t)m), 0);
        T(check_rows(buf, ball + (btotal - m), (size_t)m) == 0);
        T(check_rows(x2, ball + (btotal - m), (size_t)m) == 0);
        bad = 0;
        for (int64_t i = 0; i < m; i++)
            for (size_t j = 0; j < BIG; j++)
                bad += bb[(size_t)i * BIG + j] != bigval(ball[btotal - m + i], j);
        T(bad == 0);
        free(x2);
    }

    ragged_section(s, cfg, me, n);

    /* errors: out of range, unknown name; the store stays usable */
    int64_t badrow = total;
    b = fbuf(buf, 1);
    T_RC(dds_store_get_batch(s, NULL, "x", &b, &badrow, 1), -DDS_ERANGE);
    T_RC(dds_store_get_batch(s, NULL, "nope", &b, rows, 1), -DDS_ENOENT);
    T_RC(dds_store_get_batch(s, NULL, "x", &b, rows, 1), 0);

    /* threads: 8 with their own readers, 4 on the default one */
    {
        targ_t ta[12];
        pthread_t th[12];
        for (int i = 0; i < 12; i++) {
            ta[i] = (targ_t){s, i < 8, (unsigned)(77 * me + i), total, 0, 0};
            pthread_create(&th[i], NULL, reader_thread, &ta[i]);
        }
        size_t tb = 0, tf = 0;
        for (int i = 0; i < 12; i++) {
            pthread_join(th[i], NULL);
            tb += ta[i].bad;
            tf += ta[i].fails;
        }
        T(tf == 0);
        T(tb == 0);
    }

    /* profile */
    dds_profile_t prof;
    T_RC(dds_store_profile(s, "x", &prof), 0);
    T(prof.v[DDS_PROF_CALLS] > 0);
    T(prof.v[DDS_PROF_READS] > 0);
    T(prof.v[DDS_PROF_ROWS] > 0);
    if (me == 0)
        printf("   rank 0 profile of x: calls %llu rows %llu reads %llu local %llu B, "
               "registrations %llu, post %.1f ms, complete %.1f ms\n",
               (unsigned long long)prof.v[DDS_PROF_CALLS],
               (unsigned long long)prof.v[DDS_PROF_ROWS],
               (unsigned long long)prof.v[DDS_PROF_READS],
               (unsigned long long)prof.v[DDS_PROF_LOCAL_BYTES],
               (unsigned long long)prof.v[DDS_PROF_REGISTRATIONS],
               (double)prof.v[DDS_PROF_NS_POST] / 1e6,
               (double)prof.v[DDS_PROF_NS_COMPLETE] / 1e6);

    /* forked child: inherited default reader refused, a forked reader works */
    if (me == 0) {
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid == 0) {
            int fails = 0;
            dds_buf_t cb = fbuf(buf, 64);
            int64_t crow[64];
            for (int i = 0; i < 64; i++)
                crow[i] = (i * 7919) % total;
            int r1 = dds_store_get_batch(s, NULL, "x", &cb, crow, 64);
            /* rows of rank 0 are local (memcpy) and would work; ask for a
             * remote one */
            int64_t remote_row = total - 1;
            dds_buf_t cb1 = fbuf(buf, 1);
            r1 = dds_store_get_batch(s, NULL, "x", &cb1, &remote_row, 1);
            fails += r1 != -DDS_EINVAL;
            fails += strstr(dds_last_error(), "fork") == NULL;
            dds_reader_t *fr = NULL;
            fails += dds_store_reader_open(s, DDS_READER_FORKED, &fr) != 0;
            if (fr) {
                memset(buf, 0, 64 * DISP * sizeof(float));
                uint64_t c0, c1;
                dds_shard_counts(NULL, &c0);
                fails += dds_store_get_batch(s, fr, "x", &cb, crow, 64) != 0;
                fails += check_rows(buf, crow, 64) != 0;
                dds_shard_counts(NULL, &c1);
                fails += cfg->map ? c1 == c0 : c1 != c0;
                dds_store_reader_close(s, fr);
            }
            if (fails)
                fprintf(stderr, "fork child: %d failures: %s\n", fails, dds_last_error());
            _exit(fails ? 1 : 0);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        T(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }

    /* free one variable and add it again */
    T_RC(dds_store_var_free(s, "big"), 0);
    T_RC(dds_store_var_add(s, "big", bshard, bmine, BIG, 1, DDS_DTYPE_UINT8, NULL, DDS_ADD_COPY), 0);
    if (btotal > 0) {
        int64_t one = btotal - 1;
        dds_buf_t b1 = {bb, 1, BIG, DDS_DTYPE_UINT8, 1, {DDS_MEM_HOST, 0, NULL}};
        T_RC(dds_store_get_batch(s, NULL, "big", &b1, &one, 1), 0);
        size_t bad1 = 0;
        for (size_t j = 0; j < BIG; j++)
            bad1 += bb[j] != bigval(one, j);
        T(bad1 == 0);
    }

    if (cfg->dead_peer && n >= 2) {
        /* The last rank dies; rank 0 reads from it: an error, in bounded
         * time, no hang.  Nobody can free collectively afterwards. */
        comm->ops->barrier(comm->ctx);
        if (me == n - 1)
            _exit(0);
        if (me == 0) {
            /* Wait until the process is really gone (reaped). */
            int dead_pid = atomic_load(&g_w->pids[n - 1]);
            for (int i = 0; i < 2000 && (kill(dead_pid, 0) == 0 || errno != ESRCH); i++)
                usleep(5000);
            int64_t lr = total - 1;
            b = fbuf(buf, 1);
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            rc = dds_store_get_batch(s, NULL, "x", &b, &lr, 1);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double dt = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
            T(rc != 0);
            T(dt < 6.0);
            printf("   dead rank: %s after %.2f s: %s\n", dds_strerror(rc), dt, dds_last_error());
        }
        fflush(stdout);
        _exit(0);
    }

    T_RC(dds_store_free(s), 0);
    T_RC(dds_store_get_batch(s, NULL, "x", &b, rows, 1), -DDS_EFREED);
    dds_store_destroy(s);
    free(buf);
    free(bb);
    free(shard);
    free(bshard);
    return 0;
}

static int bad_provider_main(dds_comm_t *comm, void *arg)
{
    (void)arg;
    g_rank = comm->rank;
    alarm(60);
    ddofi_transport_params_t tp = {.field_mask = DDOFI_TRANSPORT_FIELD_PROVIDER,
                                   .provider = "no-such-provider"};
    dds_transport_t tr;
    int rc = ddofi_transport_create(comm, &tp, &tr);
    T_RC(rc, -DDS_ECONFIG);
    T(strstr(dds_last_error(), "no-such-provider") != NULL);
    T(strstr(dds_last_error(), "found") != NULL);
    if (comm->rank == 0)
        printf("   bad provider: %s\n", dds_last_error());
    dds_comm_destroy(comm);
    return 0;
}

/* Ranks that end with _exit (the dead-rank case) leave the shm provider's
 * regions "/dev/shm/<pid>:<uid>:<n>" behind: remove those of our ranks. */
static void remove_shm_leftovers(int n)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        for (int r = 0; r < n; r++) {
            char prefix[32];
            int len = snprintf(prefix, sizeof prefix, "%d:", atomic_load(&g_w->pids[r]));
            if (!strncmp(e->d_name, prefix, (size_t)len)) {
                char path[512];
                snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
                unlink(path);
            }
        }
    }
    closedir(d);
}

static int run(int n, int (*fn)(dds_comm_t *, void *), void *arg, double timeout)
{
    g_w = forkcomm_world(n);
    pid_t pids[FORKCOMM_MAX];
    for (int r = 0; r < n; r++)
        pids[r] = forkcomm_spawn(g_w, r, fn, arg);
    int bad = forkcomm_wait(pids, n, timeout);
    return bad;
}

int main(int argc, char **argv)
{
    const char *defaults[] = {"shm", "tcp"};
    const char **provs = defaults;
    int np = 2;
    if (argc > 1) {
        provs = (const char **)(argv + 1);
        np = argc - 1;
    }
    /* A bound for the dead-rank case, which fails at once here (the peer's
     * exit is seen); 4 s was too short for live peers under TSan on a
     * loaded 2-core machine (reads of 4 tcp ranks timed out). */
    setenv("DDSTORE_READ_TIMEOUT_S", "30", 0);
    ddofi_env_prepare(-1); /* before this process starts libfabric */
    int passed = 0, failed = 0, skipped = 0;
    for (int p = 0; p < np; p++) {
        /* Is the provider here at all? */
        ddofi_fabric_params_t fp = {0};
        fp.field_mask = DDOFI_FABRIC_FIELD_PROVIDER | DDOFI_FABRIC_FIELD_LOCAL_ONLY |
                        DDOFI_FABRIC_FIELD_SINGLE_NODE;
        fp.provider = provs[p];
        fp.local_only = 1;
        fp.single_node = 1;
        ddofi_fabric_t *f = NULL;
        if (ddofi_fabric_open(&fp, &f) == -DDOFI_ENOPROV) {
            /* libfabric always has shm and tcp: missing, a failure */
            int required = !strcmp(provs[p], "shm") || !strcmp(provs[p], "tcp");
            fprintf(stderr, "%s: provider %s not available%s: %s\n",
                    required ? "FAIL" : "SKIP", provs[p],
                    required ? " (libfabric always has it)" : " here", ddofi_last_error());
            if (required)
                failed++;
            else
                skipped++;
            continue;
        }
        ddofi_fabric_close(f);
        for (int n = 2; n <= 4; n += 2) {
            for (int mode = 0; mode <= 3; mode++) {
                int dead = mode == 1, mrl = mode == 2, nomap = mode == 3;
                if ((dead || mrl) && n != 2)
                    continue;
                /* Fabric reads between ranks: at 2 ranks the FI_MR_LOCAL run
                 * (not mapped), at 4 ranks a run not mapped per provider.
                 * Mapped reads do not depend on the provider: at 4 ranks once
                 * (the first provider), keeping the run short under TSan. */
                if ((nomap && n != 4) || (n == 4 && !nomap && p != 0))
                    continue;
                printf("== %s, %d ranks%s\n", provs[p], n,
                       dead ? ", a rank dies" : mrl ? ", FI_MR_LOCAL forced, not mapped"
                                              : nomap ? ", DDSTORE_OFI_MAP_SHARDS=0" : "");
                fflush(stdout);
                atomic_store(&ddofi_test_mr_local, mrl); /* the ranks are forked */
                /* FI_MR_LOCAL's registrations are those of fabric reads: unmapped */
                cfg_t cfg = {provs[p], dead, mrl, !nomap && !mrl, mrl};
                int bad = run(n, rank_main, &cfg, 140);
                if (dead)
                    remove_shm_leftovers(n);
                passed += g_w->passed;
                failed += g_w->failed + bad;
                forkcomm_world_free(g_w);
            }
        }
        atomic_store(&ddofi_test_mr_local, 0);
    }
    printf("== unknown provider, 2 ranks\n");
    fflush(stdout);
    int bad = run(2, bad_provider_main, NULL, 60);
    passed += g_w->passed;
    failed += g_w->failed + bad;
    forkcomm_world_free(g_w);

    const char *strict = getenv("DDSTORE_TEST_STRICT");
    if (skipped && strict && strict[0] == '1')
        failed += skipped;
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
