/* Method 1's mapped same-node shards (transport/ddofi_tr_map.c), without a
 * fabric: a shard made by shard_alloc, its record, a peer's lazy mapping
 * and every refusal.
 *
 *   - a shard maps, reads its bytes and sees the owner's updates (shared);
 *   - a record whose tag, size, uid or host does not match is never mapped;
 *   - after the owner frees the shard, its memfd number reused by another
 *     shard is refused (the tag), and a mapping made before the free still
 *     reads the old bytes (the pages live as long as the mapping);
 *   - a forked child maps a shard itself;
 *   - a dead owner, also before it is reaped: ddofi_tr_map_alive says so
 *     (DDS_EIO, naming the rank);
 *   - DDSTORE_OFI_MAP_SHARDS off (map_on 0): no record; memfd_create failing
 *     (no file descriptor left): shard_alloc falls back to malloc, no record;
 *     at most a quarter of RLIMIT_NOFILE shards hold a descriptor, the next
 *     ones are malloc'ed.
 *
 * Prints "N passed, M failed". */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddofi_test.h"
#include "ddofi_tr_internal.h"
#include "ddstore/errors.h"

#define BYTES 10000

static ddofi_tr_t g_t;
static unsigned char g_same[2] = {1, 1};

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

/* A shard of BYTES (rank 0's), and its record. */
static void *alloc(void **tok, ddofi_tr_map_rec_t *rec, unsigned seed)
{
    void *base = NULL;
    *tok = NULL;
    int rc = ddofi_tr_shard_alloc(&g_t, BYTES, &base, tok);
    T_EQ_INT(rc, 0);
    if (rc || !base)
        return NULL;
    fill(base, BYTES, seed);
    dds_region_desc_t d = {0};
    d.name = "m";
    d.base = base;
    d.bytes = BYTES;
    d.mem.kind = DDS_MEM_HOST;
    d.alloc_token = *tok;
    g_t.rank = 0;
    ddofi_tr_map_export(&g_t, &d, rec);
    return base;
}

/* Rank 1's view of rank 0's record. */
static ddofi_tr_region_t *peer_region(const ddofi_tr_map_rec_t *rec)
{
    ddofi_tr_region_t *g = calloc(1, sizeof *g);
    ddofi_tr_map_rec_t recs[2];
    memset(recs, 0, sizeof recs);
    recs[0] = *rec;
    dds_region_desc_t d = {0};
    d.name = "m";
    int64_t offs[3] = {0, BYTES, BYTES};
    d.offsets = offs;
    d.nranks = 2;
    d.row_bytes = 1;
    snprintf(g->name, sizeof g->name, "m");
    g_t.rank = 1;
    T_EQ_INT(ddofi_tr_map_import(&g_t, g, &d, recs, sizeof recs[0]), 0);
    g_t.rank = 0;
    return g;
}

static void region_free(ddofi_tr_region_t *g)
{
    ddofi_tr_map_release(g);
    free(g);
}

int main(void)
{
    if (dds_comm_self(&g_t.comm) != 0) {
        fprintf(stderr, "dds_comm_self: %s\n", dds_last_error());
        return 1;
    }
    g_t.nranks = 2;
    g_t.map_on = 1;
    g_t.same_host = g_same;

    /* map, read, see updates */
    void *tok;
    ddofi_tr_map_rec_t rec;
    unsigned char *base = alloc(&tok, &rec, 7);
    T_OK(base != NULL);
    T_OK(rec.tag != 0);
    T_EQ_INT(rec.bytes, BYTES);
    T_EQ_INT(rec.pid, getpid());
    ddofi_tr_region_t *g = peer_region(&rec);
    T_OK(g->maps != NULL);
    const unsigned char *m =
        g->maps ? (const unsigned char *)ddofi_tr_map_base(g, 0) : NULL;
    T_OK(m != NULL);
    T_OK(m && m != base && same(m, BYTES, 7));
    base[123] ^= 0xff;
    T_OK(m && m[123] == base[123]);
    base[123] ^= 0xff;
    T_EQ_INT(ddofi_tr_map_alive(g, 0), 0);
    T_OK(g->maps && (const unsigned char *)ddofi_tr_map_base(g, 0) == m); /* once */

    /* records that do not match are never mapped */
    ddofi_tr_map_rec_t bad = rec;
    bad.tag ^= 1;
    ddofi_tr_region_t *gb = peer_region(&bad);
    T_OK(gb->maps != NULL && ddofi_tr_map_base(gb, 0) == NULL);
    T_OK(gb->maps && gb->maps[0].refused);
    region_free(gb);
    bad = rec;
    bad.bytes = BYTES - 1; /* not the layout's size */
    gb = peer_region(&bad);
    T_OK(gb->maps == NULL);
    region_free(gb);
    bad = rec;
    bad.uid += 1;
    gb = peer_region(&bad);
    T_OK(gb->maps == NULL);
    region_free(gb);
    g_same[0] = 0; /* another host */
    gb = peer_region(&rec);
    T_OK(gb->maps == NULL);
    region_free(gb);
    g_same[0] = 1;

    /* a forked child maps it itself */
    pid_t pid = fork();
    if (pid == 0) {
        ddofi_tr_region_t *gc = peer_region(&rec);
        const unsigned char *cm =
            gc->maps ? (const unsigned char *)ddofi_tr_map_base(gc, 0) : NULL;
        _exit(cm && same(cm, BYTES, 7) ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    T_OK(WIFEXITED(st) && WEXITSTATUS(st) == 0);

    /* the owner frees the shard: the mapping keeps the old bytes; its memfd
     * number, reused by the next shard, is refused */
    ddofi_tr_shard_free(&g_t, base, tok);
    T_OK(m && same(m, BYTES, 7));
    void *tok2;
    ddofi_tr_map_rec_t rec2;
    unsigned char *base2 = alloc(&tok2, &rec2, 9);
    T_OK(base2 != NULL);
    if (rec2.fd != rec.fd)
        T_SKIP("the next memfd got descriptor %d, not %d: reuse not exercised", rec2.fd,
               rec.fd);
    ddofi_tr_region_t *gs = peer_region(&rec);
    T_OK(gs->maps != NULL && ddofi_tr_map_base(gs, 0) == NULL);
    region_free(gs);
    region_free(g);
    ddofi_tr_shard_free(&g_t, base2, tok2);

    /* a dead owner */
    int fds[2];
    T_OK(pipe(fds) == 0);
    pid = fork();
    if (pid == 0) {
        void *ct;
        ddofi_tr_map_rec_t cr;
        alloc(&ct, &cr, 11);
        (void)!write(fds[1], &cr, sizeof cr);
        pause(); /* until killed */
        _exit(0);
    }
    ddofi_tr_map_rec_t crec;
    T_EQ_INT(read(fds[0], &crec, sizeof crec), sizeof crec);
    ddofi_tr_region_t *gd = peer_region(&crec);
    const unsigned char *dm =
        gd->maps ? (const unsigned char *)ddofi_tr_map_base(gd, 0) : NULL;
    T_OK(dm && same(dm, BYTES, 11));
    T_EQ_INT(gd->maps ? ddofi_tr_map_alive(gd, 0) : -1, 0);
    kill(pid, SIGKILL);
    /* not reaped yet (a zombie): exited all the same */
    int alive = 0;
    for (int i = 0; i < 400 && (alive = gd->maps ? ddofi_tr_map_alive(gd, 0) : 0) == 0; i++)
        usleep(5000);
    T_EQ_INT(alive, -DDS_EIO);
    waitpid(pid, &st, 0);
    T_EQ_INT(gd->maps ? ddofi_tr_map_alive(gd, 0) : 0, -DDS_EIO);
    T_CONTAINS(dds_last_error(), "rank 0");
    T_CONTAINS(dds_last_error(), "exited");
    T_OK(dm && same(dm, BYTES, 11)); /* the pages outlive the owner */
    region_free(gd);
    close(fds[0]);
    close(fds[1]);

    /* off: no record */
    g_t.map_on = 0;
    unsigned char *b3 = alloc(&tok, &rec, 3);
    T_OK(b3 && same(b3, BYTES, 3));
    T_EQ_INT(rec.tag, 0);
    ddofi_tr_shard_free(&g_t, b3, tok);
    g_t.map_on = 1;

    /* no descriptor left for memfd_create: malloc, no record (a child: the
     * limit stays there) */
    pid = fork();
    if (pid == 0) {
        int top = dup(0);
        struct rlimit rl = {(rlim_t)top, (rlim_t)top};
        if (top < 0 || setrlimit(RLIMIT_NOFILE, &rl) != 0)
            _exit(2);
        void *ct;
        ddofi_tr_map_rec_t cr;
        unsigned char *cb = alloc(&ct, &cr, 5);
        _exit(cb && same(cb, BYTES, 5) && cr.tag == 0 ? 0 : 1);
    }
    waitpid(pid, &st, 0);
    T_OK(WIFEXITED(st) && WEXITSTATUS(st) == 0);

    /* RLIMIT_NOFILE 64: 16 shards in memfds, then malloc */
    pid = fork();
    if (pid == 0) {
        struct rlimit rl = {64, 64};
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            _exit(2);
        int mapped = 0, ok = 1;
        for (int i = 0; i < 20; i++) {
            void *ct;
            ddofi_tr_map_rec_t cr;
            unsigned char *cb = alloc(&ct, &cr, (unsigned)i);
            ok &= cb && same(cb, BYTES, (unsigned)i);
            mapped += cr.tag != 0;
        }
        _exit(ok && mapped == 16 ? 0 : 1);
    }
    waitpid(pid, &st, 0);
    T_OK(WIFEXITED(st) && WEXITSTATUS(st) == 0);

    dds_comm_destroy(&g_t.comm);
    return ddofi_test_summary("ddofi_tr_map_test");
}
