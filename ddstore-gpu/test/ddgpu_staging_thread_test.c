/* ddstore-gpu: one staging pool shared by several reader threads, each on
 * its own stream (ThreadDataLoader's shape).  A small pool limit forces
 * waits and evictions while other threads hold buffers.  Runs on a real
 * device or on the none build's emulation (deferred copies); cuda/hip
 * builds without a GPU print SKIP.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ddstore/errors.h"
#include "ddstore/gpu.h"

enum { THREADS = 4, ITERS = 200, SLOTS = 3 };
static const size_t SLOT_BYTES = 3 * 4096;

typedef struct {
    int id;
    ddgpu_staging_t *st;
    unsigned char *dev;      /* SLOTS slots of SLOT_BYTES                  */
    int last[SLOTS];         /* iteration that last wrote each slot       */
    size_t len[SLOTS];
    int errors;
    char msg[256];
} worker_t;

static unsigned char val(int id, int it) { return (unsigned char)(id * 61 + it * 7 + 1); }

static void *worker(void *arg)
{
    worker_t *w = arg;
    void *stream = NULL;
    int rc = ddgpu_stream_create(0, &stream);
    if (rc != 0) {
        snprintf(w->msg, sizeof(w->msg), "stream_create: %s", dds_last_error());
        w->errors++;
        return NULL;
    }
    dds_mem_t on = {ddgpu_backend_kind(), 0, stream};
    unsigned seed = 1234u + (unsigned)w->id;
    for (int it = 0; it < ITERS && w->errors == 0; it++) {
        seed = seed * 1103515245u + 12345u;
        size_t bytes = 1 + (seed >> 8) % SLOT_BYTES;
        int slot = it % SLOTS;
        ddgpu_stage_buf_t *b = NULL;
        rc = ddgpu_staging_acquire(w->st, bytes, &b);
        if (rc == 0) {
            memset(ddgpu_stage_buf_host(b), val(w->id, it), bytes);
            dds_memseg_t seg = {0, (size_t)slot * SLOT_BYTES, bytes};
            rc = ddgpu_stage_to_device(b, w->dev, &seg, 1, &on);
            int r2 = ddgpu_staging_release(w->st, b);
            if (rc == 0)
                rc = r2;
        }
        if (rc != 0) {
            snprintf(w->msg, sizeof(w->msg), "iteration %d: %s", it,
                     dds_last_error());
            w->errors++;
            break;
        }
        w->last[slot] = it;
        w->len[slot] = bytes;
    }
    /* every slot's last write must be there */
    unsigned char *check = malloc(SLOTS * SLOT_BYTES);
    rc = ddgpu_copy_async(DDS_COPY_D2H, check, w->dev, SLOTS * SLOT_BYTES, &on);
    if (rc == 0)
        rc = ddgpu_stream_synchronize(&on);
    if (rc != 0 && w->errors == 0) {
        snprintf(w->msg, sizeof(w->msg), "read back: %s", dds_last_error());
        w->errors++;
    }
    for (int s = 0; s < SLOTS && w->errors == 0; s++) {
        unsigned char want = val(w->id, w->last[s]);
        for (size_t i = 0; i < w->len[s]; i++) {
            if (check[(size_t)s * SLOT_BYTES + i] != want) {
                snprintf(w->msg, sizeof(w->msg),
                         "slot %d byte %zu: 0x%02x, expected 0x%02x (iter %d)",
                         s, i, check[(size_t)s * SLOT_BYTES + i], want,
                         w->last[s]);
                w->errors++;
                break;
            }
        }
    }
    free(check);
    (void)ddgpu_stream_destroy(stream);
    return NULL;
}

int main(void)
{
    const char *name = "ddgpu_staging_thread_test";
    int emulated = 0;
#ifndef DDSTORE_TEST_HOOKS
    if (strcmp(ddgpu_backend_name(), "none") == 0) {
        CHECK_SKIP(name, "the none build has no host emulation without "
               "DDSTORE_TEST_HOOKS (a release build)");
        return check_finish(name);
    }
#endif
    if (strcmp(ddgpu_backend_name(), "none") == 0) {
        CHECK_OK(ddgpu_test_host_emulation(1));
        emulated = 1;
    } else if (ddgpu_available(NULL) != 0) {
        CHECK_SKIP(name, "no usable GPU for the %s build (%s)",
               ddgpu_backend_name(), dds_last_error());
        return check_finish(name);
    }
    ddgpu_staging_params_t prm = {
        DDGPU_STAGING_PARAM_MIN_BUF_BYTES | DDGPU_STAGING_PARAM_MAX_BYTES,
        THREADS * 8192, 4096};
    ddgpu_staging_t *st = NULL;
    CHECK_OK(ddgpu_staging_create(&prm, &st));
    worker_t w[THREADS];
    pthread_t th[THREADS];
    memset(w, 0, sizeof(w));
    for (int i = 0; i < THREADS; i++) {
        w[i].id = i;
        w[i].st = st;
        CHECK_OK(ddgpu_device_alloc(0, SLOTS * SLOT_BYTES, (void **)&w[i].dev));
    }
    for (int i = 0; i < THREADS; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, worker, &w[i]), 0);
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        if (w[i].errors)
            CHECK_FAIL_("thread %d: %s", i, w[i].msg);
        else
            CHECK_PASS_();
    }
    ddgpu_staging_stats_t s;
    CHECK_OK(ddgpu_staging_stats(st, &s));
    CHECK_EQ(s.lent, 0);
    CHECK_EQ(s.acquires, THREADS * ITERS);
    printf("%s: %s: %llu allocs, %llu frees, %llu waits, %llu buffers, "
           "%llu pinned bytes\n", name, emulated ? "emulated" : "device",
           (unsigned long long)s.allocs, (unsigned long long)s.frees,
           (unsigned long long)s.waits, (unsigned long long)s.buffers,
           (unsigned long long)s.pinned_bytes);
    ddgpu_staging_destroy(st);
    for (int i = 0; i < THREADS; i++)
        CHECK_OK(ddgpu_device_free(w[i].dev));
    if (emulated)
        CHECK_OK(ddgpu_test_host_emulation(0));
    return check_finish(name);
}
