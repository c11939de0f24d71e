/* ddstore-core: the one-rank communicator and collective error agreement. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddstore/comm.h"
#include "ddstore/config.h"
#include "ddstore/errors.h"
#include "ddstore/settings.h"

/* ---- self ------------------------------------------------------------- */

static int self_allgather(void *ctx, const void *send, size_t bytes,
                          void *recv)
{
    (void)ctx;
    if (bytes > 0 && send != recv)
        memmove(recv, send, bytes);
    return 0;
}

static int self_allreduce_i64(void *ctx, int64_t *inout, size_t n,
                              dds_reduce_op_t op)
{
    (void)ctx;
    (void)inout;
    (void)n;
    (void)op;
    return 0;
}

static int self_barrier(void *ctx)
{
    (void)ctx;
    return 0;
}

static const dds_comm_ops_t self_ops = {
    sizeof(dds_comm_ops_t), "self", self_allgather, self_allreduce_i64,
    self_barrier, NULL};

int dds_comm_self(dds_comm_t *comm_p)
{
    if (comm_p == NULL)
        return dds_error(-DDS_EINVAL, "dds_comm_self: NULL output");
    comm_p->ops = &self_ops;
    comm_p->ctx = NULL;
    comm_p->rank = 0;
    comm_p->size = 1;
    return 0;
}

int dds_comm_timeout_s(double *timeout_s_p)
{
    double t = 0;
    int rc;
    if (timeout_s_p == NULL)
        return dds_error(-DDS_EINVAL, "dds_comm_timeout_s: NULL output");
    rc = dds_setting_collective_timeout_s(&t);
    if (rc != 0)
        return rc;
    *timeout_s_p = t;
    return 0;
}

int dds_comm_warn_s(double *warn_s_p)
{
    double t = 0;
    int rc;
    if (warn_s_p == NULL)
        return dds_error(-DDS_EINVAL, "dds_comm_warn_s: NULL output");
    rc = dds_setting_collective_warn_s(&t);
    if (rc != 0)
        return rc;
    *warn_s_p = t;
    return 0;
}

/* The store's collective call this thread is in, for the communicators'
 * messages ("" outside one). */
static __thread char g_coll_what[160];

void dds_comm_set_what(const char *what, const char *name)
{
    if (what == NULL)
        g_coll_what[0] = '\0';
    else if (name != NULL)
        snprintf(g_coll_what, sizeof g_coll_what, "%s('%s')", what, name);
    else
        snprintf(g_coll_what, sizeof g_coll_what, "%s()", what);
}

const char *dds_comm_what(void)
{
    return g_coll_what;
}

void dds_comm_destroy(dds_comm_t *comm)
{
    if (comm == NULL)
        return;
    if (comm->ops != NULL && comm->ops->destroy != NULL)
        comm->ops->destroy(comm->ctx);
    comm->ops = NULL;
    comm->ctx = NULL;
}

/* ---- agreement -------------------------------------------------------- */

#define AGREE_WORDS 64 /* detail carried: 64 x 8 bytes, NUL included */

/* A detail that already names its rank ("rank 3: ...", from an earlier
 * agreement) is passed on as it is, not as "rank 0: rank 3: ...". */
static int names_a_rank(const char *text)
{
    size_t i = 5;
    if (strncmp(text, "rank ", 5) != 0 || text[i] < '0' || text[i] > '9')
        return 0;
    while (text[i] >= '0' && text[i] <= '9')
        i++;
    return text[i] == ':';
}

/* "rank R: " before this rank's own detail (what the others will read). */
static void name_self(const dds_comm_t *comm, int rc)
{
    char text[AGREE_WORDS * 8];
    snprintf(text, sizeof(text), "%s", dds_last_error());
    if (names_a_rank(text))
        return;
    dds_error(rc, "rank %d: %s", comm->rank,
              text[0] != '\0' ? text : dds_strerror(rc));
}

static int agree(const dds_comm_t *comm, int rc, int64_t tag, int named);

/* The protocol (dds_comm_agree_record).  Success path: one
 * allreduce(MIN) of three int64: one encoding (rank, code) of every failing
 * rank (INT64_MAX for success), so the lowest failing rank wins, and the
 * call's tag and its negation (mismatch check).  Failure path only: an
 * allreduce(MIN) of one word, the winning rank's record length (every other
 * rank INT64_MAX), then one of ceil(length / 8) words where the winner
 * contributes its record and every other rank INT64_MAX, which carries the
 * record to every rank without any memory that grows with the number of
 * ranks. */
static int agree_args(const dds_comm_t *comm, int64_t tag)
{
    if (comm == NULL || comm->ops == NULL || comm->ops->allreduce_i64 == NULL)
        return dds_error(-DDS_EINVAL, "dds_comm_agree: invalid communicator");
    if (tag < 0)
        return dds_error(-DDS_EINVAL, "dds_comm_agree: negative tag");
    return 0;
}

int dds_comm_agree_record(const dds_comm_t *comm, int rc, int64_t tag, const void *rec,
                          size_t len, int *frank_p, void **rec_p, size_t *len_p)
{
    int64_t first[3], words[1 + DDS_AGREE_RECORD_MAX / 8];
    size_t nwords;
    int xrc, frank, fcode;

    if (frank_p != NULL)
        *frank_p = -1;
    if (rec_p != NULL)
        *rec_p = NULL;
    if (len_p != NULL)
        *len_p = 0;
    if ((xrc = agree_args(comm, tag)) != 0)
        return xrc;
    if (rc > 0)
        rc = -rc;
    if (rc == 0 || rec == NULL)
        len = 0;
    if (len > DDS_AGREE_RECORD_MAX)
        len = DDS_AGREE_RECORD_MAX;
    if (comm->size <= 1) {
        if (rc == 0)
            return 0;
        frank = 0;
        fcode = rc;
        if (len > 0)
            memcpy(words + 1, rec, len);
        words[0] = (int64_t)len;
        goto winner;
    }

    first[0] = rc == 0 ? INT64_MAX
                       : ((int64_t)comm->rank << 32) | (int64_t)(uint32_t)(-rc);
    first[1] = tag;
    first[2] = -tag;
    xrc = comm->ops->allreduce_i64(comm->ctx, first, 3, DDS_REDUCE_MIN);
    if (xrc != 0)
        return xrc > 0 ? -xrc : xrc;
    if (first[1] != -first[2])
        return dds_error(-DDS_ETIMEDOUT,
                         "collective mismatch: the ranks are in different "
                         "collective calls (tags %lld .. %lld, this rank "
                         "%lld): a rank skipped, added or reordered a "
                         "collective call, so the ranks are out of step",
                         (long long)first[1], (long long)-first[2],
                         (long long)tag);
    if (first[0] == INT64_MAX)
        return 0;
    frank = (int)(first[0] >> 32);
    fcode = -(int)(uint32_t)(first[0] & 0xffffffffu);
    /* the winner's record length, then the record */
    words[0] = comm->rank == frank ? (int64_t)len : INT64_MAX;
    xrc = comm->ops->allreduce_i64(comm->ctx, words, 1, DDS_REDUCE_MIN);
    if (xrc != 0 || words[0] < 0 || words[0] > DDS_AGREE_RECORD_MAX) {
        words[0] = 0; /* the record is lost: the code and rank still agree */
        goto winner;
    }
    len = (size_t)words[0];
    nwords = (len + 7) / 8;
    if (comm->rank == frank) {
        memset(words + 1, 0, nwords * sizeof(int64_t));
        if (len > 0)
            memcpy(words + 1, rec, len);
    } else {
        for (size_t i = 1; i <= nwords; i++)
            words[i] = INT64_MAX;
    }
    if (nwords > 0) {
        xrc = comm->ops->allreduce_i64(comm->ctx, words + 1, nwords, DDS_REDUCE_MIN);
        if (xrc != 0)
            words[0] = 0;
    }
winner:
    if (frank_p != NULL)
        *frank_p = frank;
    if (rec_p != NULL) {
        char *copy = malloc((size_t)words[0] + 1);
        if (copy != NULL) {
            memcpy(copy, words + 1, (size_t)words[0]);
            copy[words[0]] = '\0';
            *rec_p = copy;
            if (len_p != NULL)
                *len_p = (size_t)words[0];
        }
    }
    return fcode;
}

int dds_comm_agree(const dds_comm_t *comm, int rc)
{
    return agree(comm, rc, 0, 0);
}

int dds_comm_agree_tag(const dds_comm_t *comm, int rc, int64_t tag)
{
    return agree(comm, rc, tag, 0);
}

int dds_comm_agree_named(const dds_comm_t *comm, int rc)
{
    return agree(comm, rc, 0, 1);
}

/* The store's agreement: the record is the failing rank's dds_last_error()
 * (at most 511 bytes, as always). */
static int agree(const dds_comm_t *comm, int rc, int64_t tag, int named)
{
    char text[AGREE_WORDS * 8];
    void *rec = NULL;
    size_t len = 0;
    int xrc, frank = -1;

    if ((xrc = agree_args(comm, tag)) != 0)
        return xrc;
    if (rc > 0)
        rc = -rc;
    if (comm->size <= 1) {
        if (rc != 0 && named)
            name_self(comm, rc);
        return rc;
    }
    text[0] = '\0';
    if (rc != 0)
        snprintf(text, sizeof(text), "%s", dds_last_error());
    xrc = dds_comm_agree_record(comm, rc, tag, text, strlen(text), &frank, &rec, &len);
    if (xrc == 0)
        return 0;
    if (frank < 0)
        goto exchange_failed;
    if (comm->rank == frank) {
        free(rec);
        if (named)
            name_self(comm, xrc);
        return xrc;
    }
    snprintf(text, sizeof(text), "%s", rec != NULL ? (const char *)rec : "");
    free(rec);
    if (names_a_rank(text))
        dds_error(xrc, "%s", text);
    else
        dds_error(xrc, "rank %d: %s", frank, text[0] != '\0' ? text : dds_strerror(xrc));
    return xrc;

exchange_failed:
    /* the communicator's message says it all: a timeout (or a collective
     * mismatch), or a setting agreed bad by the communicator's own first
     * step ("rank R: ...", the same on every rank; FileComm) */
    if (xrc == -DDS_ETIMEDOUT ||
        (xrc == -DDS_ECONFIG && names_a_rank(dds_last_error())))
        return xrc;
    dds_error(xrc, "error agreement: the exchange failed: %s",
              dds_last_error()[0] != '\0' ? dds_last_error()
                                          : dds_strerror(xrc));
    return xrc;
}
