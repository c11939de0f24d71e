/* ddstore-core store tests: helpers shared by the tests that run the store
 * on a fake_world_t (store_test.c, ragged_test.c).  Test-only, header-only.
 */
#ifndef DDSTORE_TEST_STORE_WORLD_H
#define DDSTORE_TEST_STORE_WORLD_H

#include <string.h>

#include "check.h"
#include "ddstore/store.h"
#include "fake_world.h"

static inline dds_buf_t buf_of(void *p, int64_t nrows, size_t rb, dds_dtype_t dt,
                        size_t itemsize)
{
    dds_buf_t b;
    memset(&b, 0, sizeof(b));
    b.ptr = p;
    b.nrows = nrows;
    b.row_bytes = rb;
    b.dtype = dt;
    b.itemsize = itemsize;
    b.mem.kind = DDS_MEM_HOST;
    return b;
}

static inline void barrier(dds_store_t *s)
{
    const dds_comm_t *c = dds_store_comm(s);
    c->ops->barrier(c->ctx);
}

/* Run one scenario on a fresh n-rank world (its transport with read_multi
 * when `read_multi`); check nothing leaked. */
static inline void run_world_multi(int n, fw_rank_fn fn, void *arg,
                                   uint64_t caps, size_t max_read,
                                   int read_multi)
{
    fake_world_t w;
    fw_init(&w, n);
    if (caps != 0)
        w.caps = caps;
    w.max_read_bytes = max_read;
    w.with_read_multi = read_multi;
    fw_run(&w, fn, arg);
    CHECK_EQ(atomic_load(&w.protocol_errors), 0);
    CHECK_EQ(atomic_load(&w.bad_ops), 0);
    CHECK_EQ(atomic_load(&w.live_regions), 0);
    CHECK_EQ(atomic_load(&w.live_regs), 0);
    CHECK_EQ(atomic_load(&w.live_readers), 0);
    CHECK_EQ(atomic_load(&w.destroyed), n);
    CHECK_EQ(atomic_load(&w.comms_destroyed), n);
    CHECK_EQ(atomic_load(&w.unsafe_concurrent), 0);
    fw_fini(&w);
}

static inline void run_world(int n, fw_rank_fn fn, void *arg, uint64_t caps,
                      size_t max_read)
{
    run_world_multi(n, fn, arg, caps, max_read, 0);
}

#endif
