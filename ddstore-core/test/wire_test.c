/* wire.h: the codec of the bindings' collectives (round trip; truncated,
 * corrupt or hostile input is a clear -DDS_ECORRUPT, never a crash), the
 * variable-length allgather and comm.h's record agreement over the fake
 * in-process world. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ddstore/comm.h"
#include "ddstore/errors.h"
#include "ddstore/wire.h"
#include "fake_world.h"

/* ("ab", [None, true, -12], {7: (false,)}) */
static void encode_sample(dds_wire_buf_t *b)
{
    dds_wire_put_ok(b);
    dds_wire_put_container(b, DDS_WIRE_TUPLE, 3);
    dds_wire_put_scalar(b, DDS_WIRE_STR, "ab", 2);
    dds_wire_put_container(b, DDS_WIRE_LIST, 3);
    dds_wire_put_scalar(b, DDS_WIRE_NONE, NULL, 0);
    dds_wire_put_scalar(b, DDS_WIRE_TRUE, NULL, 0);
    dds_wire_put_scalar(b, DDS_WIRE_INT, "-12", 3);
    dds_wire_put_container(b, DDS_WIRE_DICT, 1);
    dds_wire_put_scalar(b, DDS_WIRE_INT, "7", 1);
    dds_wire_put_container(b, DDS_WIRE_TUPLE, 1);
    dds_wire_put_scalar(b, DDS_WIRE_FALSE, NULL, 0);
}

static void test_round_trip(void)
{
    static const struct {
        int kind;
        const char *data;
        size_t count;
    } want[] = {{'t', NULL, 3}, {'S', "ab", 0}, {'l', NULL, 3}, {'N', NULL, 0},
                {'T', NULL, 0}, {'I', "-12", 0}, {'d', NULL, 1}, {'I', "7", 0},
                {'t', NULL, 1}, {'F', NULL, 0}};
    dds_wire_buf_t b;
    dds_wire_reader_t r;
    dds_wire_item_t it;
    int is_error = -1;
    dds_wire_buf_init(&b);
    encode_sample(&b);
    CHECK_OK(dds_wire_finish(&b));
    CHECK_OK(dds_wire_check(b.data, b.len, &is_error));
    CHECK_EQ(is_error, 0);
    CHECK_OK(dds_wire_reader_init(&r, b.data, b.len));
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CHECK_OK(dds_wire_next(&r, &it));
        CHECK_EQ(it.kind, want[i].kind);
        if (want[i].data != NULL) {
            CHECK_EQ(it.len, strlen(want[i].data));
            CHECK_MEMEQ(it.data, want[i].data, it.len);
        } else {
            CHECK_EQ(it.count, want[i].count);
        }
    }
    CHECK_EQ(r.pos, b.len);
    CHECK_RC(dds_wire_next(&r, &it), -DDS_ECORRUPT); /* nothing after the end */

    /* an error message */
    CHECK_OK(dds_wire_put_error(&b, "bad on rank 3", 13));
    CHECK_OK(dds_wire_check(b.data, b.len, &is_error));
    CHECK_EQ(is_error, 1);
    CHECK_OK(dds_wire_reader_init(&r, b.data, b.len));
    CHECK_OK(dds_wire_next(&r, &it));
    CHECK_EQ(it.kind, DDS_WIRE_ERROR);
    CHECK_MEMEQ(it.data, "bad on rank 3", 13);
    dds_wire_buf_free(&b);
}

static void test_encoder_refuses(void)
{
    dds_wire_buf_t b;
    static const char *bad_ints[] = {"", "-", "01", "-0", "1a", "+1", " 1"};
    for (size_t i = 0; i < sizeof bad_ints / sizeof bad_ints[0]; i++) {
        dds_wire_buf_init(&b);
        dds_wire_put_ok(&b);
        CHECK_RC(dds_wire_put_scalar(&b, DDS_WIRE_INT, bad_ints[i], strlen(bad_ints[i])),
                 -DDS_EINVAL);
        CHECK_CONTAINS(dds_last_error(), "not a decimal integer");
        /* sticky */
        CHECK_RC(dds_wire_put_scalar(&b, DDS_WIRE_NONE, NULL, 0), -DDS_EINVAL);
        CHECK_RC(dds_wire_finish(&b), -DDS_EINVAL);
        dds_wire_buf_free(&b);
    }
    dds_wire_buf_init(&b);
    CHECK_RC(dds_wire_put_container(&b, 'x', 1), -DDS_EINVAL);
    dds_wire_buf_free(&b);
    dds_wire_buf_init(&b);
    CHECK_RC(dds_wire_put_scalar(&b, DDS_WIRE_TUPLE, NULL, 0), -DDS_EINVAL);
    dds_wire_buf_free(&b);
}

/* Every prefix of a valid message, and every single-byte change of it:
 * -DDS_ECORRUPT with a message, or (a change that still makes sense) 0;
 * never a crash, never a read past the end (ASan). */
static void test_truncated_and_corrupt(void)
{
    dds_wire_buf_t b;
    int is_error;
    dds_wire_buf_init(&b);
    encode_sample(&b);
    for (size_t n = 0; n < b.len; n++) {
        unsigned char *copy = malloc(n ? n : 1);
        memcpy(copy, b.data, n);
        CHECK_RC(dds_wire_check(copy, n, &is_error), -DDS_ECORRUPT);
        CHECK_CONTAINS(dds_last_error(), "not a ddstore wire message");
        free(copy);
    }
    for (size_t i = 0; i < b.len; i++) {
        static const unsigned char vals[] = {0, 1, 0x7f, 0x80, 0xff, 'd', 'l', 'E', 'I'};
        for (size_t v = 0; v < sizeof vals; v++) {
            unsigned char *copy = malloc(b.len);
            memcpy(copy, b.data, b.len);
            copy[i] = vals[v];
            int rc = dds_wire_check(copy, b.len, &is_error);
            CHECK(rc == 0 || rc == -DDS_ECORRUPT);
            free(copy);
        }
    }
    /* trailing bytes */
    {
        unsigned char *copy = malloc(b.len + 1);
        memcpy(copy, b.data, b.len);
        copy[b.len] = 'N';
        CHECK_RC(dds_wire_check(copy, b.len + 1, &is_error), -DDS_ECORRUPT);
        CHECK_CONTAINS(dds_last_error(), "bytes after the value");
        free(copy);
    }
    CHECK_RC(dds_wire_check(NULL, 0, &is_error), -DDS_ECORRUPT);
    CHECK_RC(dds_wire_check("{\"v\":1}", 7, &is_error), -DDS_ECORRUPT);
    CHECK_CONTAINS(dds_last_error(), "magic");
    dds_wire_buf_free(&b);
}

static void test_hostile(void)
{
    /* a count of 2^32 - 1 items in a few bytes: refused before anything
     * is allocated for it */
    static const unsigned char huge[] = {'D', 'D', 'W', '1', 'O', 'l', 0xff, 0xff, 0xff, 0xff};
    /* a list key */
    static const unsigned char listkey[] = {'D', 'D', 'W', '1', 'O', 'd', 1, 0, 0, 0,
                                            'l', 0, 0, 0, 0, 'N'};
    /* a tuple key holding a dict */
    static const unsigned char dictintuple[] = {'D', 'D', 'W', '1', 'O', 'd', 1, 0, 0, 0,
                                                't', 1, 0, 0, 0, 'd', 0, 0, 0, 0, 'N'};
    static const unsigned char badint[] = {'D', 'D', 'W', '1', 'O', 'I', 2, 0, 0, 0, '0', '1'};
    static const unsigned char nested_err[] = {'D', 'D', 'W', '1', 'O', 'E', 0, 0, 0, 0};
    unsigned char *deep;
    size_t n = 5 + 5 * (DDS_WIRE_MAX_DEPTH + 1) + 1, at = 5;
    int is_error;

    CHECK_RC(dds_wire_check(huge, sizeof huge, &is_error), -DDS_ECORRUPT);
    CHECK_CONTAINS(dds_last_error(), "count larger than the message");
    CHECK_RC(dds_wire_check(listkey, sizeof listkey, &is_error), -DDS_ECORRUPT);
    CHECK_CONTAINS(dds_last_error(), "dict key");
    CHECK_RC(dds_wire_check(dictintuple, sizeof dictintuple, &is_error), -DDS_ECORRUPT);
    CHECK_CONTAINS(dds_last_error(), "dict key");
    CHECK_RC(dds_wire_check(badint, sizeof badint, &is_error), -DDS_ECORRUPT);
    CHECK_CONTAINS(dds_last_error(), "malformed integer");
    CHECK_RC(dds_wire_check(nested_err, sizeof nested_err, &is_error), -DDS_ECORRUPT);

    /* DDS_WIRE_MAX_DEPTH + 1 nested lists */
    deep = malloc(n);
    memcpy(deep, "DDW1O", 5);
    for (int d = 0; d <= DDS_WIRE_MAX_DEPTH; d++, at += 5)
        memcpy(deep + at, "l\1\0\0\0", 5);
    deep[at] = 'N';
    CHECK_RC(dds_wire_check(deep, n, &is_error), -DDS_ECORRUPT);
    CHECK_CONTAINS(dds_last_error(), "nested deeper than 64 levels");
    /* one level less is fine */
    memcpy(deep + 5 + 5 * DDS_WIRE_MAX_DEPTH, "N", 1);
    CHECK_OK(dds_wire_check(deep, 5 + 5 * DDS_WIRE_MAX_DEPTH + 1, &is_error));
    free(deep);
}

/* ---- collectives over the fake world ----------------------------------- */

static void allgatherv_rank(fake_world_t *w, int rank, void *arg)
{
    dds_comm_t comm = fw_comm(w, rank);
    char send[16];
    size_t lens[4];
    void *recv = NULL;
    (void)arg;
    /* rank r sends r+1 copies of 'a'+r; rank 2 sends nothing */
    size_t len = rank == 2 ? 0 : (size_t)rank + 1;
    memset(send, 'a' + rank, sizeof send);
    CHECK_OK(dds_comm_allgatherv(&comm, send, len, &recv, lens));
    CHECK_EQ(lens[0], 1);
    CHECK_EQ(lens[1], 2);
    CHECK_EQ(lens[2], 0);
    CHECK_EQ(lens[3], 4);
    CHECK_MEMEQ(recv, "abbdddd", 7);
    free(recv);
    /* all empty: nothing allocated */
    CHECK_OK(dds_comm_allgatherv(&comm, NULL, 0, &recv, lens));
    CHECK(recv == NULL);
    dds_comm_destroy(&comm);
}

static void test_allgatherv(void)
{
    fake_world_t w;
    fw_init(&w, 4);
    fw_run(&w, allgatherv_rank, NULL);
    fw_fini(&w);
}

static void agree_record_rank(fake_world_t *w, int rank, void *arg)
{
    dds_comm_t comm = fw_comm(w, rank);
    char rec[DDS_AGREE_RECORD_MAX + 100];
    void *got = NULL;
    size_t len = 0;
    int frank = -7;
    (void)arg;
    CHECK_OK(dds_comm_agree_record(&comm, 0, 0, NULL, 0, &frank, &got, &len));
    CHECK_EQ(frank, -1);
    CHECK(got == NULL);
    /* ranks 1 and 2 fail; rank 1's record (longer than the cap) wins */
    memset(rec, '0' + rank, sizeof rec);
    int rc = rank == 1 ? -DDS_EINVAL : rank == 2 ? -DDS_EIO : 0;
    CHECK_RC(dds_comm_agree_record(&comm, rc, 0, rec, rank == 1 ? sizeof rec : 3, &frank, &got,
                                   &len),
             -DDS_EINVAL);
    CHECK_EQ(frank, 1);
    CHECK_EQ(len, DDS_AGREE_RECORD_MAX);
    CHECK(got != NULL && ((char *)got)[0] == '1' && ((char *)got)[len - 1] == '1');
    free(got);
    /* different tags: a mismatch on every rank, no record */
    CHECK_RC(dds_comm_agree_record(&comm, 0, rank == 0 ? 5 : 6, NULL, 0, &frank, &got, &len),
             -DDS_ETIMEDOUT);
    CHECK_EQ(frank, -1);
    CHECK_CONTAINS(dds_last_error(), "collective mismatch");
    dds_comm_destroy(&comm);
}

static void test_agree_record(void)
{
    fake_world_t w;
    fw_init(&w, 3);
    fw_run(&w, agree_record_rank, NULL);
    fw_fini(&w);
}

static void test_reduce(void)
{
    const int64_t all[6] = {1, -5, 3, 7, 2, 0}; /* 3 ranks x 2 */
    int64_t out[2];
    dds_reduce_i64(all, 3, 2, DDS_REDUCE_MIN, out);
    CHECK_EQ(out[0], 1);
    CHECK_EQ(out[1], -5);
    dds_reduce_i64(all, 3, 2, DDS_REDUCE_MAX, out);
    CHECK_EQ(out[0], 3);
    CHECK_EQ(out[1], 7);
    dds_reduce_i64(all, 3, 2, DDS_REDUCE_SUM, out);
    CHECK_EQ(out[0], 6);
    CHECK_EQ(out[1], 2);
}

int main(void)
{
    RUN_TEST(test_round_trip);
    RUN_TEST(test_encoder_refuses);
    RUN_TEST(test_truncated_and_corrupt);
    RUN_TEST(test_hostile);
    RUN_TEST(test_allgatherv);
    RUN_TEST(test_agree_record);
    RUN_TEST(test_reduce);
    return CHECK_SUMMARY();
}
