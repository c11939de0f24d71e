/* ddstore-gpu: behaviour that needs a real GPU (cuda or hip build).
 *
 * Pointer kinds of real allocations on every device, the runtime's errors
 * translated (and not left behind as the runtime's "last error"), pageable
 * and default-stream copies, a second device through the device guard, and
 * a forked child refusing GPU calls.  Without a GPU (and in the none build)
 * it prints SKIP with the reason; DDSTORE_TEST_STRICT=1 makes that a
 * failure.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "ddstore/errors.h"
#include "ddstore/gpu.h"

static int is_cuda(void) { return strcmp(ddgpu_backend_name(), "cuda") == 0; }

static void test_info(const ddgpu_info_t *info)
{
    CHECK(info->device_count >= 1);
    CHECK(info->runtime_version > 0);
    CHECK(info->driver_version > 0);
    CHECK_EQ(info->emulated, 0);
    printf("%s: %d device(s), runtime %d, driver %d\n", info->backend,
           info->device_count, info->runtime_version, info->driver_version);
}

static void test_pointer_kinds(int ndev)
{
    for (int d = 0; d < ndev; d++) {
        char *p = NULL;
        CHECK_OK(ddgpu_device_alloc(d, 1 << 20, (void **)&p));
        if (!p)
            continue;
        ddgpu_ptr_kind_t k = DDGPU_PTR_HOST;
        dds_mem_t m;
        CHECK_OK(ddgpu_pointer_kind(p + 4096, &k, &m));
        CHECK_EQ(k, DDGPU_PTR_DEVICE);
        CHECK_EQ(m.kind, ddgpu_backend_kind());
        CHECK_EQ(m.device, d);
        CHECK(m.stream == NULL);
        CHECK_OK(ddgpu_device_free(p));
    }
    void *h = NULL;
    CHECK_OK(ddgpu_host_alloc(12345, &h));
    ddgpu_ptr_kind_t k = DDGPU_PTR_HOST;
    dds_mem_t m;
    CHECK_OK(ddgpu_pointer_kind(h, &k, &m));
    CHECK_EQ(k, DDGPU_PTR_HOST_PINNED);
    CHECK_EQ(m.kind, DDS_MEM_HOST);
    CHECK_OK(ddgpu_host_free(h));
    char *plain = malloc(1 << 16);
    CHECK_OK(ddgpu_pointer_kind(plain, &k, &m));
    CHECK_EQ(k, DDGPU_PTR_HOST);
    CHECK_EQ(m.kind, DDS_MEM_HOST);
    free(plain);
    int on_stack = 0;
    CHECK_OK(ddgpu_pointer_kind(&on_stack, &k, NULL));
    CHECK_EQ(k, DDGPU_PTR_HOST);
}

static void test_errors(int ndev)
{
    void *p = NULL;
    /* far beyond any device: the runtime's out-of-memory, translated */
    CHECK_RC(ddgpu_device_alloc(0, (size_t)1 << 62, &p), -DDS_ENOMEM);
    CHECK_CONTAINS(dds_last_error(), is_cuda() ? "cudaMalloc" : "hipMalloc");
    CHECK_CONTAINS(dds_last_error(),
               is_cuda() ? "cudaErrorMemoryAllocation" : "hipErrorOutOfMemory");
    CHECK(p == NULL);
    /* the failure was not left behind: the next calls work */
    CHECK_OK(ddgpu_device_alloc(0, 4096, &p));
    CHECK_OK(ddgpu_memset_async(p, 3, 4096, NULL));
    CHECK_OK(ddgpu_stream_synchronize(NULL));
    CHECK_OK(ddgpu_device_free(p));
    CHECK_RC(ddgpu_device_alloc(ndev, 16, &p), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "outside");
    dds_mem_t bad = {ddgpu_backend_kind(), ndev, NULL};
    CHECK_RC(ddgpu_stream_fence(&bad), -DDS_EINVAL);
}

/* Pageable host memory both ways, on a created and on the default stream. */
static void test_pageable_copies(void)
{
    const size_t n = (3 << 20) + 17;
    unsigned char *src = malloc(n), *back = malloc(n), *d = NULL;
    void *s = NULL;
    for (size_t i = 0; i < n; i++)
        src[i] = (unsigned char)(i * 29 + 3);
    CHECK_OK(ddgpu_stream_create(0, &s));
    CHECK_OK(ddgpu_device_alloc(0, n, (void **)&d));
    if (s && d) {
        dds_mem_t on = {ddgpu_backend_kind(), 0, s};
        CHECK_OK(ddgpu_copy_async(DDS_COPY_H2D, d, src, n, &on));
        memset(back, 0, n);
        CHECK_OK(ddgpu_copy_async(DDS_COPY_D2H, back, d, n, &on));
        CHECK_OK(ddgpu_stream_synchronize(&on));
        CHECK_EQ(memcmp(src, back, n), 0);
        /* default stream, direction inferred */
        CHECK_OK(ddgpu_memset_async(d, 0x5c, n, NULL));
        CHECK_OK(ddgpu_copy_async(DDS_COPY_DEFAULT, back, d, n, NULL));
        CHECK_OK(ddgpu_stream_synchronize(NULL));
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += back[i] != 0x5c;
        CHECK_EQ(bad, 0);
        /* an event after queued work: synchronize, then complete */
        void *ev = NULL;
        int done = -1;
        CHECK_OK(ddgpu_event_create(0, &ev));
        CHECK_OK(ddgpu_memset_async(d, 1, n, &on));
        CHECK_OK(ddgpu_event_record(ev, &on));
        CHECK_OK(ddgpu_event_synchronize(ev));
        CHECK_OK(ddgpu_event_query(ev, &done));
        CHECK_EQ(done, 1);
        CHECK_OK(ddgpu_event_destroy(ev));
    }
    CHECK_OK(ddgpu_device_free(d));
    CHECK_OK(ddgpu_stream_destroy(s));
    free(src);
    free(back);
}

/* The last device through the guard (device 0 when there is one). */
static void test_other_device(int ndev)
{
    int dev = ndev - 1;
    const size_t n = 1 << 20;
    void *s = NULL, *ev = NULL;
    unsigned char *d = NULL, *h = NULL;
    CHECK_OK(ddgpu_stream_create(dev, &s));
    CHECK_OK(ddgpu_event_create(dev, &ev));
    CHECK_OK(ddgpu_device_alloc(dev, n, (void **)&d));
    CHECK_OK(ddgpu_host_alloc(n, (void **)&h));
    if (s && ev && d && h) {
        dds_mem_t on = {ddgpu_backend_kind(), dev, s};
        CHECK_OK(ddgpu_memset_async(d, 0x21, n, &on));
        CHECK_OK(ddgpu_copy_async(DDS_COPY_D2H, h, d, n, &on));
        CHECK_OK(ddgpu_event_record(ev, &on));
        CHECK_OK(ddgpu_event_synchronize(ev));
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += h[i] != 0x21;
        CHECK_EQ(bad, 0);
        /* device 0's default stream waits on device dev's event */
        dds_mem_t on0 = {ddgpu_backend_kind(), 0, NULL};
        CHECK_OK(ddgpu_stream_wait_event(&on0, ev));
        CHECK_OK(ddgpu_stream_synchronize(&on0));
    }
    printf("device guard exercised on device %d of %d\n", dev, ndev);
    CHECK_OK(ddgpu_host_free(h));
    CHECK_OK(ddgpu_device_free(d));
    CHECK_OK(ddgpu_event_destroy(ev));
    CHECK_OK(ddgpu_stream_destroy(s));
}

/* A child forked after the runtime was initialised must not touch it. */
static void test_fork(void)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int code = 0;
        void *p = NULL;
        char host[8];
        if (ddgpu_available(NULL) != -DDS_ENOGPU ||
            !strstr(dds_last_error(), "forked"))
            code |= 1;
        if (ddgpu_host_alloc(64, &p) != -DDS_ENOGPU)
            code |= 2;
        if (ddgpu_pointer_kind(host, NULL, NULL) != -DDS_ENOGPU)
            code |= 4;
        _exit(code);
    }
    CHECK(pid > 0);
    int status = 0;
    if (pid > 0) {
        CHECK_EQ(waitpid(pid, &status, 0), pid);
        CHECK(WIFEXITED(status));
        CHECK_EQ(WEXITSTATUS(status), 0);
    }
    /* the parent is unaffected */
    CHECK_OK(ddgpu_available(NULL));
}

int main(void)
{
    const char *name = "ddgpu_device_test";
    ddgpu_info_t info;
    if (strcmp(ddgpu_backend_name(), "none") == 0) {
        CHECK_SKIP(name, "the none build has no GPU runtime (the staging logic "
               "is tested on its emulation by ddgpu_staging_test)");
        return check_finish(name);
    }
    if (ddgpu_available(&info) != 0) {
        CHECK_SKIP(name, "no usable GPU for the %s build (%s)",
               ddgpu_backend_name(), dds_last_error());
        return check_finish(name);
    }
    test_info(&info);
    test_pointer_kinds(info.device_count);
    test_errors(info.device_count);
    test_pageable_copies();
    test_other_device(info.device_count);
    test_fork();
    return check_finish(name);
}
