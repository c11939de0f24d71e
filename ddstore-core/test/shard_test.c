/* The node-local shard service (src/dds_shard.c, ddstore/shard.h) and the
 * store's use of it (src/dds_store_shard.c):
 *
 *   - a shard maps, reads its bytes and sees the owner's updates (shared);
 *   - a record whose tag, size (not the layout's), uid or node does not
 *     match is never mapped;
 *   - after the owner frees the shard, its memfd number reused by another
 *     shard is refused (the tag), and a mapping made before the free still
 *     reads the old bytes (the pages live as long as the mapping: no SIGBUS);
 *   - a forked child maps a shard itself;
 *   - a dead owner, also before it is reaped: dds_shard_peer_alive and
 *     dds_shard_serve say so (-DDS_EIO naming the rank), never data;
 *   - not mappable / no descriptor left: anonymous shared memory, tag 0; at
 *     most a quarter of RLIMIT_NOFILE shards hold a descriptor;
 *   - dds_shard_serve copies the mapped owners' ops and keeps the others in
 *     order; an op beyond the shard is -DDS_ERANGE;
 *   - a store whose transport sets DDS_TRANSPORT_CAP_NODE_SHARDS |
 *     NODE_MAP (fake world: every rank a thread of this process) serves
 *     every peer's rows (fixed and ragged, after var_update too) without a
 *     single transport op; with NODE_SHARDS alone the transport reads them.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "ddstore/errors.h"
#include "ddstore/shard.h"
#include "ddstore/store.h"
#include "fake_world.h"

#define BYTES 10000

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 31u + seed);
}

static int same(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 31u + seed))
            return 0;
    return 1;
}

static unsigned char *alloc(dds_shard_t **sh, dds_shard_rec_t *rec,
                            unsigned seed, int mappable)
{
    *sh = NULL;
    int rc = dds_shard_alloc(BYTES, mappable, sh);
    CHECK_EQ(rc, 0);
    if (rc != 0)
        return NULL;
    unsigned char *b = dds_shard_base(*sh);
    if (b)
        fill(b, BYTES, seed);
    dds_shard_export(*sh, rec);
    return b;
}

/* Rank 1's table of rank 0's record. */
static dds_shard_peers_t *peers_of(const dds_shard_rec_t *rec)
{
    dds_shard_rec_t recs[2];
    uint64_t want[2] = {BYTES, 0};
    dds_shard_peers_t *p = NULL;
    memset(recs, 0, sizeof recs);
    recs[0] = *rec;
    CHECK_OK(dds_shard_peers_new("m", 2, recs, sizeof recs[0], want, 1, &p));
    return p;
}

static void service(void)
{
    dds_shard_t *sh;
    dds_shard_rec_t rec;
    unsigned char *base = alloc(&sh, &rec, 7, 1);
    CHECK(base != NULL);
    CHECK(rec.tag != 0);
    CHECK_EQ(rec.bytes, BYTES);
    CHECK_EQ(rec.pid, getpid());
    CHECK_EQ_U(rec.node, dds_shard_node_id());
    dds_shard_peers_t *p = peers_of(&rec);
    CHECK(p != NULL);
    const unsigned char *m = (const unsigned char *)dds_shard_peer_base(p, 0);
    CHECK(m != NULL && m != base && same(m, BYTES, 7));
    base[123] ^= 0xff;
    CHECK(m && m[123] == base[123]);
    base[123] ^= 0xff;
    CHECK_EQ(dds_shard_peer_alive(p, 0), 0);
    CHECK((const unsigned char *)dds_shard_peer_base(p, 0) == m); /* once */
    CHECK(dds_shard_peer_base(p, 1) == NULL);                     /* self */

    /* serve: owner 0's ops copied, owner 1's kept in order */
    {
        unsigned char dst[64], stg[16];
        dds_read_op_t ops[4] = {
            {.owner = 0, .src_offset = 10, .len = 8, .dst_offset = 0},
            {.owner = 0, .staged = 1, .src_offset = 100, .len = 16},
            {.owner = 1, .src_offset = 5, .len = 4, .dst_offset = 8},
            {.owner = 1, .src_offset = 9, .len = 4, .dst_offset = 12}};
        size_t nops = 4, sops = 0, sbytes = 0;
        uint64_t c0, c1;
        dds_shard_counts(&c0, NULL);
        memset(dst, 0, sizeof dst);
        CHECK_OK(dds_shard_serve(p, ops, &nops, (char *)dst, (char *)stg,
                                 &sops, &sbytes));
        dds_shard_counts(&c1, NULL);
        CHECK_EQ(nops, 2);
        CHECK_EQ(sops, 2);
        CHECK_EQ(sbytes, 24);
        CHECK_EQ(c1 - c0, 2);
        CHECK(ops[0].owner == 1 && ops[0].src_offset == 5);
        CHECK(ops[1].owner == 1 && ops[1].src_offset == 9);
        CHECK_MEMEQ(dst, base + 10, 8);
        CHECK_MEMEQ(stg, base + 100, 16);
        dds_read_op_t bad = {.owner = 0, .src_offset = BYTES - 4, .len = 8};
        nops = 1;
        CHECK_RC(dds_shard_serve(p, &bad, &nops, (char *)dst, NULL, &sops,
                                 &sbytes), -DDS_ERANGE);
    }

    /* records that do not match are never mapped */
    dds_shard_rec_t bad = rec;
    bad.tag ^= 1;
    dds_shard_peers_t *pb = peers_of(&bad);
    CHECK(pb != NULL && dds_shard_peer_base(pb, 0) == NULL);
    dds_shard_peers_free(pb);
    bad = rec;
    bad.bytes = BYTES - 1; /* not the layout's size */
    pb = peers_of(&bad);
    CHECK(pb == NULL);
    bad = rec;
    bad.uid += 1;
    pb = peers_of(&bad);
    CHECK(pb == NULL);
    bad = rec;
    bad.node ^= 1; /* another node */
    pb = peers_of(&bad);
    CHECK(pb == NULL);

    /* a forked child maps it itself */
    pid_t pid = fork();
    if (pid == 0) {
        dds_shard_peers_t *pc = peers_of(&rec);
        const unsigned char *cm =
            (const unsigned char *)dds_shard_peer_base(pc, 0);
        _exit(cm && same(cm, BYTES, 7) ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);

    /* the owner frees the shard: the mapping keeps the old bytes; its memfd
     * number, reused by the next shard, is refused */
    dds_shard_free(sh);
    CHECK(m && same(m, BYTES, 7));
    dds_shard_t *sh2;
    dds_shard_rec_t rec2;
    unsigned char *base2 = alloc(&sh2, &rec2, 9, 1);
    CHECK(base2 != NULL);
    if (rec2.fd != rec.fd)
        CHECK_SKIP("shard_test", "the next memfd got descriptor %d, not %d: "
                   "reuse not exercised", rec2.fd, rec.fd);
    dds_shard_peers_t *ps = peers_of(&rec);
    CHECK(ps != NULL && dds_shard_peer_base(ps, 0) == NULL);
    dds_shard_peers_free(ps);
    dds_shard_peers_free(p);
    dds_shard_free(sh2);

    /* a dead owner: an error, not its rows */
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid = fork();
    if (pid == 0) {
        dds_shard_t *cs;
        dds_shard_rec_t cr;
        alloc(&cs, &cr, 11, 1);
        (void)!write(fds[1], &cr, sizeof cr);
        pause(); /* until killed */
        _exit(0);
    }
    dds_shard_rec_t crec;
    CHECK_EQ(read(fds[0], &crec, sizeof crec), sizeof crec);
    dds_shard_peers_t *pd = peers_of(&crec);
    const unsigned char *dm =
        pd ? (const unsigned char *)dds_shard_peer_base(pd, 0) : NULL;
    CHECK(dm && same(dm, BYTES, 11));
    CHECK_EQ(pd ? dds_shard_peer_alive(pd, 0) : -1, 0);
    kill(pid, SIGKILL);
    /* not reaped yet (a zombie): exited all the same */
    int alive = 0;
    for (int i = 0; i < 400 && pd && (alive = dds_shard_peer_alive(pd, 0)) == 0;
         i++)
        usleep(5000);
    CHECK_EQ(alive, -DDS_EIO);
    waitpid(pid, &st, 0);
    if (pd) {
        unsigned char dst[8];
        dds_read_op_t op = {.owner = 0, .len = 8};
        size_t nops = 1, sops, sbytes;
        CHECK_RC(dds_shard_serve(pd, &op, &nops, (char *)dst, NULL, &sops,
                                 &sbytes), -DDS_EIO);
        CHECK_CONTAINS(dds_last_error(), "rank 0");
        CHECK_CONTAINS(dds_last_error(), "exited");
    }
    CHECK(dm && same(dm, BYTES, 11)); /* the pages outlive the owner */
    dds_shard_peers_free(pd);
    close(fds[0]);
    close(fds[1]);

    /* not mappable: shared with children all the same, no record */
    dds_shard_t *s3;
    unsigned char *b3 = alloc(&s3, &rec, 3, 0);
    CHECK(b3 && same(b3, BYTES, 3));
    CHECK_EQ(rec.tag, 0);
    pid = fork();
    if (pid == 0) {
        sleep(1);
        _exit(b3 && b3[0] == 0x42 ? 0 : 1);
    }
    if (b3)
        b3[0] = 0x42; /* after the fork: the child sees it (MAP_SHARED) */
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    dds_shard_free(s3);

    /* an empty shard: no memory, no record */
    dds_shard_t *s0 = NULL;
    CHECK_OK(dds_shard_alloc(0, 1, &s0));
    CHECK(s0 != NULL && dds_shard_base(s0) == NULL);
    dds_shard_export(s0, &rec);
    CHECK_EQ(rec.tag, 0);
    dds_shard_free(s0);

    /* RLIMIT_NOFILE 64: 16 shards in memfds, then anonymous memory */
    pid = fork();
    if (pid == 0) {
        struct rlimit rl = {64, 64};
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            _exit(2);
        int mapped = 0, ok = 1;
        for (int i = 0; i < 20; i++) {
            dds_shard_t *cs;
            dds_shard_rec_t cr;
            unsigned char *cb = alloc(&cs, &cr, (unsigned)i, 1);
            ok &= cb && same(cb, BYTES, (unsigned)i);
            mapped += cr.tag != 0;
        }
        _exit(ok && mapped == 16 ? 0 : 1);
    }
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* ---- the store over it ------------------------------------------------ */

#define NR 3
static const int64_t g_rows[NR] = {5, 0, 7};
enum { DISP = 24 };

static unsigned char row_byte(int64_t row, size_t k, unsigned salt)
{
    return (unsigned char)(row * 7 + (int64_t)k * 3 + salt);
}

static void store_rank(fake_world_t *w, int rank, void *arg)
{
    const int mapped = *(const int *)arg;
    dds_store_t *s = NULL;
    int64_t first = 0, total = 0;
    for (int r = 0; r < NR; r++) {
        if (r < rank)
            first += g_rows[r];
        total += g_rows[r];
    }
    CHECK_OK(fw_store_create(w, rank, &s));
    if (s == NULL)
        return;
    unsigned char *mine = malloc((size_t)(g_rows[rank] + 1) * DISP);
    for (int64_t i = 0; i < g_rows[rank]; i++)
        for (size_t k = 0; k < DISP; k++)
            mine[i * DISP + k] = row_byte(first + i, k, 1);
    CHECK_OK(dds_store_var_add(s, "x", mine, g_rows[rank], DISP, 1,
                               DDS_DTYPE_UINT8, NULL, DDS_ADD_COPY));
    /* ragged: sample i of this rank has (i % 3) + 1 element rows of 8 */
    int64_t lens[8], nel = 0;
    for (int64_t i = 0; i < g_rows[rank]; i++)
        nel += lens[i] = i % 3 + 1;
    unsigned char *pay = malloc((size_t)(nel + 1) * 8);
    for (int64_t e = 0; e < nel * 8; e++)
        pay[e] = (unsigned char)(rank * 50 + e);
    CHECK_OK(dds_store_ragged_add(s, "r", pay, nel, lens, g_rows[rank], 8, 1,
                                  DDS_DTYPE_UINT8, NULL, DDS_ADD_COPY));

    int64_t idx[16];
    unsigned char got[16 * DISP];
    dds_buf_t b = {got, total, DISP, DDS_DTYPE_UINT8, 1, {DDS_MEM_HOST, 0, NULL}};
    for (int64_t i = 0; i < total; i++)
        idx[i] = total - 1 - i;
    pthread_barrier_wait(&w->bar);
    long ops0 = atomic_load(&w->read_ops);
    pthread_barrier_wait(&w->bar);
    CHECK_OK(dds_store_get_batch(s, NULL, "x", &b, idx, (size_t)total));
    int ok = 1;
    for (int64_t i = 0; i < total; i++)
        for (size_t k = 0; k < DISP; k++)
            ok &= got[i * DISP + k] == row_byte(idx[i], k, 1);
    CHECK(ok);
    /* ragged: every sample, through both steps */
    int64_t lengths[16], tot = 0;
    unsigned char rgot[64 * 8];
    dds_buf_t rb = {rgot, 64, 8, DDS_DTYPE_UINT8, 1, {DDS_MEM_HOST, 0, NULL}};
    CHECK_OK(dds_store_ragged_get_batch(s, NULL, "r", &rb, idx, (size_t)total,
                                        lengths, &tot));
    {
        int64_t at = 0;
        ok = 1;
        for (int64_t i = 0; i < total; i++) {
            int owner = idx[i] < g_rows[0] ? 0 : 2;
            int64_t local = owner == 0 ? idx[i] : idx[i] - g_rows[0];
            int64_t e0 = 0;
            for (int64_t j = 0; j < local; j++)
                e0 += j % 3 + 1;
            ok &= lengths[i] == local % 3 + 1;
            for (int64_t e = 0; e < lengths[i] * 8; e++)
                ok &= rgot[(at * 8) + e] ==
                      (unsigned char)(owner * 50 + e0 * 8 + e);
            at += lengths[i];
        }
        CHECK(ok);
        CHECK_EQ(tot, at);
    }
    pthread_barrier_wait(&w->bar);
    long ops1 = atomic_load(&w->read_ops);
    if (mapped)
        CHECK_EQ(ops1 - ops0, 0); /* no transport op: memcpy from mappings */
    else
        CHECK(ops1 - ops0 > 0);

    /* an update is seen by the peers once both synchronised */
    if (rank == 2) {
        unsigned char row[DISP];
        memset(row, 0xab, DISP);
        dds_buf_t ub = {row, 1, DISP, DDS_DTYPE_UINT8, 1, {DDS_MEM_HOST, 0, NULL}};
        CHECK_OK(dds_store_var_update(s, "x", &ub, 3));
    }
    pthread_barrier_wait(&w->bar);
    {
        unsigned char row[DISP];
        dds_buf_t ub = {row, 1, DISP, DDS_DTYPE_UINT8, 1, {DDS_MEM_HOST, 0, NULL}};
        CHECK_OK(dds_store_get(s, NULL, "x", &ub, g_rows[0] + 3));
        CHECK(row[0] == 0xab && row[DISP - 1] == 0xab);
    }
    pthread_barrier_wait(&w->bar);
    CHECK_OK(dds_store_var_free(s, "x"));
    CHECK_OK(dds_store_var_free(s, "r"));
    dds_store_destroy(s);
    free(mine);
    free(pay);
}

static void store(int mapped)
{
    fake_world_t w;
    fw_init(&w, NR);
    w.caps |= DDS_TRANSPORT_CAP_NODE_SHARDS |
              (mapped ? DDS_TRANSPORT_CAP_NODE_MAP : 0);
    fw_run(&w, store_rank, &mapped);
    CHECK_EQ(atomic_load(&w.bad_ops), 0);
    CHECK_EQ(atomic_load(&w.protocol_errors), 0);
    fw_fini(&w);
}

int main(void)
{
    service();
    store(1);
    store(0);
    return check_finish("shard_test");
}
