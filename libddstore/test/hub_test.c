/* libddstore (the hub) without a peer: names, the method from the
 * environment, ddstore_open's argument checks, pin handles and the handle
 * registry, the GPU memsys
 * of a build without GPU support. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "ddstore/backends.h"
#include "ddstore/config.h"
#include "ddstore/gpu.h"
#include "ddstore/open.h"
#include "ddstore/pin.h"

static void test_names(void)
{
    dds_dtype_t dt = DDS_DTYPE_RAW;
    CHECK_STREQ(ddstore_mem_kind_name(DDS_MEM_HOST), "host");
    CHECK_STREQ(ddstore_mem_kind_name(DDS_MEM_CUDA), "cuda");
    CHECK_STREQ(ddstore_mem_kind_name(DDS_MEM_ROCM), "rocm");
    CHECK_STREQ(ddstore_mem_kind_name((dds_mem_kind_t)99), "unknown");
    CHECK_OK(ddstore_dtype_from_name("float32", &dt));
    CHECK_EQ(dt, DDS_DTYPE_FLOAT32);
    CHECK_OK(ddstore_dtype_from_name("torch.float64", &dt));
    CHECK_EQ(dt, DDS_DTYPE_FLOAT64);
    CHECK_OK(ddstore_dtype_from_name("half", &dt));
    CHECK_EQ(dt, DDS_DTYPE_FLOAT16);
    CHECK_OK(ddstore_dtype_from_name("bool_", &dt));
    CHECK_EQ(dt, DDS_DTYPE_BOOL);
    CHECK_RC(ddstore_dtype_from_name("complex7", &dt), -DDS_ETYPE);
    CHECK(ddstore_version() != NULL && strchr(ddstore_version(), '.') != NULL);
}

static void test_method_default(void)
{
    int m = -1;
    unsetenv("DDSTORE_METHOD");
    CHECK_OK(ddstore_method_from_env(&m));
    CHECK_EQ(m, 0);
    CHECK_RC(ddstore_method_from_env(NULL), -DDS_EINVAL);
}

/* The backend table: rows in method order, lookups, DDSTORE_METHOD and
 * method= checked against it, versions and settings of every row. */
static void test_backend_table(void)
{
    size_t n = ddstore_backend_count();
    int m = -1;
    char list[512];
    CHECK(n >= 3);
    CHECK(ddstore_backend_at(n) == NULL);
    for (size_t i = 0; i < n; i++) {
        const ddstore_backend_t *r = ddstore_backend_at(i);
        CHECK(r != NULL && r->name != NULL && r->library != NULL);
        if (i > 0)
            CHECK(r->method > ddstore_backend_at(i - 1)->method);
        CHECK(ddstore_backend_find(r->method) == r);
        CHECK(ddstore_backend_by_name(r->name) == r);
        if (r->built) {
            CHECK(r->create != NULL || r->create_comm != NULL);
            CHECK_OK(ddstore_backend_check(r->method, "method"));
        } else {
            CHECK(r->why_not_built != NULL);
            CHECK_RC(ddstore_backend_check(r->method, "method"),
                     -DDS_ENOSYS);
            CHECK_CONTAINS(dds_last_error(), r->library);
        }
    }
    CHECK_EQ(ddstore_backend_find(0)->flags & DDSTORE_BACKEND_NEEDS_MPI_COMM,
             DDSTORE_BACKEND_NEEDS_MPI_COMM);
    CHECK(ddstore_backend_find(2)->flags & DDSTORE_BACKEND_NEEDS_HANDSHAKE);
    CHECK(ddstore_backend_find(-1) == NULL);
    CHECK(ddstore_backend_by_name("nope") == NULL);
    CHECK_EQ(ddstore_backend_default(1), 0);
    CHECK_EQ(ddstore_backend_default(0), 1);
    CHECK_RC(ddstore_backend_check(9999, "method"), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "expected one of 0 (MPI RMA), 1");
    CHECK_CONTAINS(dds_last_error(), "got 9999");
    ddstore_backend_list(list, sizeof list);
    CHECK_CONTAINS(list, "2 (libfabric with a file handshake");

    /* DDSTORE_METHOD: a row's number, else an error naming it */
    setenv("DDSTORE_METHOD", "2", 1);
    CHECK_OK(ddstore_method_from_env(&m));
    CHECK_EQ(m, 2);
    setenv("DDSTORE_METHOD", "9999", 1);
    CHECK_RC(ddstore_method_from_env(&m), -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), "DDSTORE_METHOD='9999'");
    CHECK_CONTAINS(dds_last_error(), "0 (MPI RMA)");
    setenv("DDSTORE_METHOD", "-1", 1);
    CHECK_RC(ddstore_method_from_env(&m), -DDS_ECONFIG);
    setenv("DDSTORE_METHOD", "x", 1);
    CHECK_RC(ddstore_method_from_env(&m), -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), "DDSTORE_METHOD");
    unsetenv("DDSTORE_METHOD");
    /* the same check of a value read once (dds_settings_t.method) */
    CHECK_OK(ddstore_method_check(1, &m));
    CHECK_EQ(m, 1);
    CHECK_RC(ddstore_method_check(4242, &m), -DDS_ECONFIG);
    CHECK_CONTAINS(dds_last_error(), "DDSTORE_METHOD='4242'");
    {
        int on = -1;
        CHECK_OK(ddstore_fork_workers(&on));
        CHECK(on == 0 || on == 1);
    }

    /* versions: the hub, core, gpu, then every row's library once */
    ddstore_version_entry_t v[32];
    size_t nv = ddstore_versions(v, 32);
    CHECK(nv >= 5 && nv <= 32);
    CHECK_STREQ(v[0].name, "libddstore");
    CHECK_STREQ(v[0].version, ddstore_version());
    for (size_t i = 0; i < n; i++) {
        const ddstore_backend_t *r = ddstore_backend_at(i);
        int found = 0;
        for (size_t j = 0; j < nv; j++)
            found += strcmp(v[j].name, r->library) == 0;
        CHECK_EQ(found, 1);
    }
    CHECK_EQ(ddstore_versions(v, 1), nv);   /* the count, whatever the room */

    /* settings: every built row's table */
    ddstore_config_register_all();
    CHECK(dds_config_find("DDSTORE_METHOD") != NULL);
    CHECK(dds_config_find("DDSTORE_HANDSHAKE_DIR") != NULL);   /* FileComm */
}

static void test_open_arguments(void)
{
    dds_store_t *st = NULL;
    ddstore_open_params_t p;
    CHECK_RC(ddstore_open(NULL, &st), -DDS_EINVAL);
    memset(&p, 0, sizeof p);
    CHECK_RC(ddstore_open(&p, &st), -DDS_EINVAL); /* no communicator */
    CHECK_CONTAINS(dds_last_error(), "no communicator");
    /* an unknown method: the communicator is destroyed, every rank fails */
    memset(&p, 0, sizeof p);
    p.field_mask = DDSTORE_OPEN_FIELD_COMM | DDSTORE_OPEN_FIELD_METHOD;
    p.method = 7;
    CHECK_OK(dds_comm_self(&p.comm));
    CHECK_RC(ddstore_open(&p, &st), -DDS_EINVAL);
    CHECK(st == NULL);
    /* method 0 over a non-MPI communicator */
    memset(&p, 0, sizeof p);
    p.field_mask = DDSTORE_OPEN_FIELD_COMM | DDSTORE_OPEN_FIELD_METHOD |
                   DDSTORE_OPEN_FIELD_COMM_KIND;
    p.method = DDSTORE_METHOD_MPI;
    p.comm_kind = "self";
    CHECK_OK(dds_comm_self(&p.comm));
    int rc = ddstore_open(&p, &st);
    CHECK(rc == -DDS_EINVAL || rc == -DDS_ENOSYS);
    if (rc == -DDS_EINVAL)
        CHECK_CONTAINS(dds_last_error(), "'self' communicator");
}

/* ---- pins ---------------------------------------------------------------- */

typedef struct {
    ddstore_pin_t *pin;
    atomic_int locked;
} locker_t;

static void *locker(void *arg)
{
    locker_t *l = arg;
    ddstore_pin_lock(l->pin);
    atomic_store(&l->locked, 1);
    ddstore_pin_unlock(l->pin);
    return NULL;
}

static void test_pins(void)
{
    int dummy;
    dds_store_t *fake = (dds_store_t *)&dummy, *got = NULL;
    ddstore_pin_t *pin = NULL;
    CHECK_OK(ddstore_pin_create(fake, &pin));
    CHECK(ddstore_pin_store(pin) == fake);
    CHECK(ddstore_pin_store(NULL) == NULL);

    /* the exclusive lock waits for a pin in flight */
    CHECK_OK(ddstore_pin_acquire(pin, &got));
    CHECK(got == fake);
    locker_t l = {pin, 0};
    pthread_t t;
    pthread_create(&t, NULL, locker, &l);
    struct timespec ms50 = {0, 50 * 1000 * 1000};
    nanosleep(&ms50, NULL);
    CHECK_EQ(atomic_load(&l.locked), 0);
    ddstore_pin_release(pin);
    pthread_join(t, NULL);
    CHECK_EQ(atomic_load(&l.locked), 1);

    /* taken: later pins fail */
    ddstore_pin_lock(pin);
    CHECK(ddstore_pin_take(pin) == fake);
    CHECK(ddstore_pin_take(pin) == NULL);
    ddstore_pin_unlock(pin);
    CHECK(ddstore_pin_store(pin) == NULL);
    CHECK_RC(ddstore_pin_acquire(pin, &got), -DDS_EFREED);
    ddstore_pin_acquire_any(pin); /* no alive check */
    ddstore_pin_release(pin);
    ddstore_pin_after_fork(pin);
    ddstore_pin_destroy(pin);
    ddstore_pin_destroy(NULL);
}

/* Handles: what the torch extension finds a store or reader by. */
static int released[4];
static int n_released;
static void note_release(void *arg) { released[n_released++] = *(int *)arg; }

static void test_handles(void)
{
    int a = 1, b = 2, r1 = 0;
    dds_store_t *fake = (dds_store_t *)&a;
    dds_reader_t *rd = (dds_reader_t *)&r1, *got_rd = NULL;
    dds_store_t *got = NULL;
    ddstore_pin_t *pin = NULL, *p = NULL, *ref = NULL, *other = NULL;
    uint64_t h, hr = 0, ho;
    CHECK_OK(ddstore_pin_create(fake, &pin));
    CHECK_OK(ddstore_pin_create(fake, &other));
    h = ddstore_pin_handle(pin);
    ho = ddstore_pin_handle(other);
    CHECK(h != 0 && ho != 0 && h != ho);
    CHECK_EQ_U(ddstore_pin_handle(NULL), 0);

    /* a store's handle: the store, no reader */
    CHECK_OK(ddstore_handle_enter(h, &p, &got, &got_rd));
    CHECK(p == pin && got == fake && got_rd == NULL);
    ddstore_handle_leave(p);
    /* a reader's handle: the same pin and store, and the reader */
    CHECK_OK(ddstore_pin_reader_handle(pin, rd, &hr));
    CHECK(hr != h && hr != ho);
    CHECK_OK(ddstore_handle_enter(hr, &p, &got, &got_rd));
    CHECK(p == pin && got == fake && got_rd == rd);
    ddstore_handle_leave(p);
    /* closed reader: EFREED naming it; the store's handle still works */
    ddstore_pin_lock(pin);
    ddstore_handle_drop(hr);
    ddstore_pin_unlock(pin);
    CHECK_RC(ddstore_handle_enter(hr, &p, &got, &got_rd), -DDS_EFREED);
    CHECK_CONTAINS(dds_last_error(), "destroyed or closed");
    CHECK_OK(ddstore_handle_enter(h, &p, NULL, NULL));
    ddstore_handle_leave(p);
    /* never a handle: EINVAL */
    CHECK_RC(ddstore_handle_enter(0, &p, &got, &got_rd), -DDS_EINVAL);
    CHECK_RC(ddstore_handle_enter(ho + 1000000, &p, &got, &got_rd), -DDS_EINVAL);

    /* keeps: released in order, once, on demand and at destroy */
    CHECK_OK(ddstore_pin_keep(pin, "x", note_release, &a));
    CHECK_OK(ddstore_pin_keep(pin, "y", note_release, &b));
    ddstore_pin_release_keeps(pin);
    CHECK_EQ(n_released, 2);
    CHECK(released[0] == 1 && released[1] == 2);
    ddstore_pin_release_keeps(pin);
    CHECK_EQ(n_released, 2);
    CHECK_OK(ddstore_pin_keep(pin, "z", note_release, &b));

    /* a reference outlives the pin's destruction; the store is gone */
    CHECK_OK(ddstore_handle_ref(h, &ref));
    CHECK(ref == pin);
    ddstore_pin_lock(pin);
    CHECK(ddstore_pin_take(pin) == fake);
    ddstore_pin_unlock(pin);
    CHECK_RC(ddstore_handle_enter(h, &p, &got, &got_rd), -DDS_EFREED);
    CHECK_CONTAINS(dds_last_error(), "destroyed");
    ddstore_pin_destroy(pin);
    CHECK_EQ(n_released, 3);
    CHECK_RC(ddstore_pin_acquire(ref, &got), -DDS_EFREED);
    ddstore_pin_unref(ref);
    /* a stale handle: EFREED, never the freed pin */
    CHECK_RC(ddstore_handle_enter(h, &p, &got, &got_rd), -DDS_EFREED);
    CHECK_RC(ddstore_handle_ref(h, &ref), -DDS_EFREED);
    CHECK_OK(ddstore_handle_enter(ho, &p, &got, NULL));
    ddstore_handle_leave(p);
    ddstore_pin_destroy(other);
}

static void test_gpu_memsys(void)
{
    dds_memsys_t ms;
    int rc = ddstore_gpu_memsys_create(&ms);
    if (ddgpu_backend_kind() == DDS_MEM_CUDA || ddgpu_backend_kind() == DDS_MEM_ROCM) {
        /* lazy: nothing probed yet, host pointers are host memory */
        dds_mem_t m;
        CHECK_OK(rc);
        CHECK_OK(ms.ops->pointer_kind(ms.ctx, &m, &m));
        CHECK_EQ(m.kind, DDS_MEM_HOST);
        ms.ops->destroy(ms.ctx);
    } else {
        CHECK_RC(rc, -DDS_ENOGPU);
    }
}

int main(void)
{
    RUN_TEST(test_names);
    RUN_TEST(test_method_default);
    RUN_TEST(test_backend_table);
    RUN_TEST(test_open_arguments);
    RUN_TEST(test_pins);
    RUN_TEST(test_handles);
    RUN_TEST(test_gpu_memsys);
    return CHECK_SUMMARY();
}
