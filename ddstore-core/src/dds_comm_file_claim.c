/* ddstore-core: FileComm's claims (one run per namespace and rank) and
 * the error-detail save/restore its polling needs.  The layout and the
 * protocol: the comment at the top of dds_comm_file.c. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup, clock_gettime */
#endif
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "dds_comm_file_internal.h"
#include "ddstore/errors.h"
#include "ddstore/files.h"
#include "ddstore/log.h"

/* Polling must not lose this thread's error detail: a collective may carry
 * the caller's failure (dds_comm_agree sends it after the first exchange). */
void dds_fc_error_save(saved_error_t *s)
{
    snprintf(s->text, sizeof s->text, "%s", dds_last_error());
}

void dds_fc_error_restore(const saved_error_t *s)
{
    if (s->text[0] != '\0')
        (void)dds_error(0, "%s", s->text);
    else
        dds_error_clear();
}
/* ---- claims: one run per (dir/ns, rank) ------------------------------- */

/* This process's claims, shared by its communicators on one (path, rank).
 * When the last of them is destroyed (by the process that made it: a
 * forked child never touches its parent's claim) the claim is marked
 * released, keeping its nonce: a peer may still have to read this run's
 * last step files, and a new run takes a released claim over. */
typedef struct claim_ent {
    char *path;
    int rank;
    unsigned refs;
    uint64_t nonce;
    pid_t owner;
    struct claim_ent *nx;
} claim_ent_t;

static pthread_mutex_t g_claim_mu = PTHREAD_MUTEX_INITIALIZER;
static claim_ent_t *g_claims = NULL;

#define CLAIM_MAGIC "ddstore FileComm claim 1"

typedef struct claim_info {
    int rank, size, released;
    long pid;
    unsigned long long ticks, nonce, time;
    char host[256];
} claim_info_t;

static uint64_t random_nonce(void)
{
    uint64_t v = 0;
    struct timespec ts;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) == (ssize_t)sizeof v && v != 0)
        return v;
    clock_gettime(CLOCK_REALTIME, &ts);
    v = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^
        ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ull;
    return v ? v : 1;
}

static void claim_name(const fc_ctx_t *c, char *buf, size_t n, int rank)
{
    snprintf(buf, n, "%s@rank%d.claim", c->ns, rank);
}

/* 0 = parsed, -1 = not a claim file. */
static int claim_parse(const char *text, claim_info_t *ci)
{
    char state[16] = "";
    int used = 0;
    memset(ci, 0, sizeof *ci);
    if (strncmp(text, CLAIM_MAGIC "\n", sizeof(CLAIM_MAGIC)) != 0)
        return -1;
    text += sizeof(CLAIM_MAGIC);
    if (sscanf(text,
               "rank %d size %d pid %ld ticks %llu nonce %llx time %llu "
               "state %15s\nhost %255[^\n]\n%n",
               &ci->rank, &ci->size, &ci->pid, &ci->ticks, &ci->nonce,
               &ci->time, state, ci->host, &used) != 8 ||
        used == 0 || text[used] != '\0' || ci->nonce == 0 || ci->pid <= 0 ||
        (strcmp(state, "live") != 0 && strcmp(state, "released") != 0))
        return -1;
    ci->released = strcmp(state, "released") == 0;
    return 0;
}

static void claim_text(const fc_ctx_t *c, uint64_t nonce, int released,
                       char *text, size_t n)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(text, n,
             CLAIM_MAGIC "\nrank %d size %d pid %ld ticks %llu nonce %016llx "
                         "time %llu state %s\nhost %s\n",
             c->rank, c->size, (long)getpid(),
             (unsigned long long)dds_proc_self_start_ticks(),
             (unsigned long long)nonce, (unsigned long long)ts.tv_sec,
             released ? "released" : "live", c->host);
}

/* Read rank's claim: 0 (filled), -DDS_ENOENT, or another error (detail
 * set). */
static int claim_read(const fc_ctx_t *c, int rank, claim_info_t *ci)
{
    char fn[PATH_MAX], cn[320];
    void *buf = NULL;
    size_t len = 0;
    int rc;
    claim_name(c, cn, sizeof cn, rank);
    snprintf(fn, sizeof fn, "%s/%s", c->dir, cn);
    rc = dds_file_read(fn, "FileComm claim", 4096, &buf, &len);
    if (rc < 0)
        return rc;
    rc = claim_parse(buf, ci);
    free(buf);
    if (rc < 0 || ci->rank != rank)
        return dds_error(-DDS_ECORRUPT,
                         "FileComm claim %s is not a claim of rank %d (damaged "
                         "or foreign): remove it if no run uses this "
                         "namespace",
                         fn, rank);
    return 0;
}

/* Take (or share) this process's claim on (path, rank). */
int dds_fc_claim_take(fc_ctx_t *c)
{
    char cn[320], text[600], fn[PATH_MAX];
    claim_ent_t *e;
    claim_info_t ci;
    dds_file_part_t part;
    int rc = 0;

    pthread_mutex_lock(&g_claim_mu);
    for (e = g_claims; e; e = e->nx)
        if (e->rank == c->rank && e->owner == getpid() &&
            strcmp(e->path, c->path) == 0)
            break;
    if (e != NULL) {
        e->refs++;
        c->nonce = e->nonce;
        pthread_mutex_unlock(&g_claim_mu);
        return 0;
    }
    e = calloc(1, sizeof *e);
    if (e == NULL || (e->path = strdup(c->path)) == NULL) {
        free(e);
        pthread_mutex_unlock(&g_claim_mu);
        return dds_error(-DDS_ENOMEM, "FileComm: out of memory");
    }
    e->rank = c->rank;
    e->refs = 1;
    e->owner = getpid();
    e->nonce = random_nonce();
    claim_text(c, e->nonce, 0, text, sizeof text);
    part.data = text;
    part.bytes = strlen(text);
    claim_name(c, cn, sizeof cn, c->rank);
    snprintf(fn, sizeof fn, "%s/%s", c->dir, cn);
    for (int tries = 0;; tries++) {
        rc = dds_file_publish(c->dir, cn, &part, 1, DDS_FILE_EXCLUSIVE,
                              "FileComm claim");
        if (rc != -DDS_EEXIST || tries >= 3)
            break;
        rc = claim_read(c, c->rank, &ci);
        if (rc == -DDS_ENOENT)
            continue; /* removed meanwhile: try again */
        if (rc < 0)
            break;
        if (ci.released ||
            (strcmp(ci.host, c->host) == 0 &&
             (ci.pid == (long)getpid() ||
              dds_proc_alive((int32_t)ci.pid, (uint64_t)ci.ticks) == 0))) {
            /* a run that ended (or died, or this process's own old claim):
             * take its place, unless the claim changed meanwhile */
            claim_info_t again;
            if (claim_read(c, c->rank, &again) == 0 &&
                again.nonce == ci.nonce)
                (void)unlink(fn);
            DDS_LOG(DDS_LOG_DEBUG, DDS_SUBSYS_CORE,
                    "FileComm %s: rank %d: took over the %s claim of pid %ld "
                    "on %s",
                    c->path, c->rank, ci.released ? "released" : "stale",
                    ci.pid, ci.host);
            continue;
        }
        {
            struct timespec now;
            clock_gettime(CLOCK_REALTIME, &now);
            rc = dds_error(
                -DDS_EBUSY,
                "FileComm: %s: rank %d of namespace '%s' is held by another "
                "run (pid %ld on %s, %d ranks, %llu s; %s). Two runs cannot "
                "share a namespace: give this run its own ns, or remove "
                "that file if the run is gone",
                fn, c->rank, c->ns, ci.pid, ci.host, ci.size,
                (unsigned long long)now.tv_sec > ci.time
                    ? (unsigned long long)now.tv_sec - ci.time
                    : 0ull,
                strcmp(ci.host, c->host) == 0 ? "it is running"
                                              : "cannot tell if it runs");
        }
        break;
    }
    if (rc < 0) {
        free(e->path);
        free(e);
        pthread_mutex_unlock(&g_claim_mu);
        return rc;
    }
    e->nx = g_claims;
    g_claims = e;
    c->nonce = e->nonce;
    pthread_mutex_unlock(&g_claim_mu);
    return 0;
}

void dds_fc_claim_release(fc_ctx_t *c)
{
    claim_ent_t **pp, *e;
    if (c->nonce == 0)
        return;
    pthread_mutex_lock(&g_claim_mu);
    for (pp = &g_claims; (e = *pp) != NULL; pp = &e->nx)
        if (e->rank == c->rank && e->nonce == c->nonce &&
            strcmp(e->path, c->path) == 0)
            break;
    if (e != NULL && --e->refs == 0) {
        *pp = e->nx;
        if (e->owner == getpid()) {
            claim_info_t ci;
            char cn[320], text[600];
            saved_error_t saved;
            dds_fc_error_save(&saved);
            if (claim_read(c, c->rank, &ci) == 0 && ci.nonce == e->nonce &&
                !ci.released) {
                dds_file_part_t part;
                claim_text(c, e->nonce, 1, text, sizeof text);
                part.data = text;
                part.bytes = strlen(text);
                claim_name(c, cn, sizeof cn, c->rank);
                (void)dds_file_publish(c->dir, cn, &part, 1, 0,
                                       "FileComm claim");
            }
            dds_fc_error_restore(&saved);
        }
        free(e->path);
        free(e);
    }
    pthread_mutex_unlock(&g_claim_mu);
    c->nonce = 0;
}

/* The nonce of peer's current claim (live, or released by a peer that has
 * finished: its last files are still to be read), 0 when there is none
 * (yet) or it is of a run of another size. */
uint64_t dds_fc_peer_claim(fc_ctx_t *c, int peer)
{
    claim_info_t ci;
    saved_error_t saved;
    dds_fc_error_save(&saved);
    if (claim_read(c, peer, &ci) < 0) {
        snprintf(c->skipped, sizeof c->skipped,
                 "no usable claim of rank %d yet: %.500s", peer,
                 dds_last_error());
        dds_fc_error_restore(&saved);
        return 0;
    }
    if (ci.size != c->size) {
        snprintf(c->skipped, sizeof c->skipped,
                 "rank %d's claim is of a run of %d ranks (pid %ld on %.255s), "
                 "this one has %d",
                 peer, ci.size, ci.pid, ci.host, c->size);
        return 0;
    }
    return (uint64_t)ci.nonce;
}

