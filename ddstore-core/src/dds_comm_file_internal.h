/* ddstore-core: private declarations of FileComm's source files
 * (dds_comm_file.c: the exchange and creation; dds_comm_file_claim.c: the
 * claims, one run per namespace).  Not installed. */
#ifndef DDSTORE_SRC_DDS_COMM_FILE_INTERNAL_H
#define DDSTORE_SRC_DDS_COMM_FILE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define FC_MAGIC "DDSFCOM2"

enum { FC_OP_ALLGATHER = 1, FC_OP_BARRIER = 2, FC_OP_ALLREDUCE = 16 };


typedef struct fc_header {
    char magic[8];
    uint64_t seq;
    uint32_t rank;
    uint32_t size;
    uint32_t op;
    uint32_t reserved;
    uint64_t bytes;
    uint64_t nonce; /* the writer's claim nonce */
} fc_header_t;

typedef struct fc_ctx {
    char *dir;  /* dir */
    char *path; /* dir/ns */
    char *ns;
    int rank, size;
    unsigned inst;
    uint64_t seq;
    double timeout_s;
    double warn_s;        /* DDSTORE_COLLECTIVE_WARN_S */
    int timeout_from_env; /* timeout_s is DDSTORE_COLLECTIVE_TIMEOUT_S */
    int fsync;
    unsigned char *got; /* size flags */
    char broken[200];   /* set when a step timed out: the ranks are out of
                           step from then on, every later call fails */
    uint64_t nonce;       /* this process's claim on (path, rank) */
    uint64_t *peer_nonce; /* size entries: each peer's claim, 0 = unknown */
    char host[256];
    char skipped[600];    /* the last peer file not read, and why (for the
                             timeout message) */
    /* Settings agreement (issue 23, item 4): a setting that did not parse
     * at creation is not raised there, where the peers would wait for this
     * rank in their first step; the creation takes the default and the
     * first collective of every rank exchanges the ranks' errors first, so
     * all fail together with "rank R: VARIABLE='value': ...". */
    int settings_agreed;  /* the first collective's exchange is done */
    int settings_rc;      /* this rank's error at creation, 0 = none */
    char settings_why[240];
    int refused_rc;       /* the agreed failure: every call fails with it */
    char refused[280];
} fc_ctx_t;

/* Polling must not lose this thread's error detail: a collective may carry
 * the caller's failure (dds_comm_agree sends it after the first exchange). */
typedef struct saved_error {
    char text[512];
} saved_error_t;

void dds_fc_error_save(saved_error_t *s);
void dds_fc_error_restore(const saved_error_t *s);

/* Claims (dds_comm_file_claim.c).  Take (or share) this process's claim on
 * (c->path, c->rank): 0 or -DDS_EBUSY / -DDS_ENOMEM / ... (detail set). */
int dds_fc_claim_take(fc_ctx_t *c);
/* Drop this communicator's share of its claim (the last one marks it
 * released). */
void dds_fc_claim_release(fc_ctx_t *c);
/* The nonce of peer's current claim, 0 when there is none (yet) or it is of
 * a run of another size (c->skipped says why). */
uint64_t dds_fc_peer_claim(fc_ctx_t *c, int peer);

#endif
