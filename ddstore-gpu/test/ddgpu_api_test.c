/* ddstore-gpu: the API on any machine and any backend.
 *
 * Without a usable GPU (the none build, or cuda/hip with no driver/device)
 * every entry point must answer -DDS_ENOGPU cleanly, naming itself and the
 * runtime's error, and never crash; pointers are host memory.  With a GPU
 * the no-GPU answers are not applicable (printed as such) and the rest of
 * the checks still run.  Argument checks and the pure segment helper are
 * tested everywhere.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ddstore/errors.h"
#include "ddstore/gpu.h"

#if defined(__has_include)
#if __has_include("ddstore/gpu_version.h")
#include "ddstore/gpu_version.h"
#endif
#endif

static int static_buf[16];

static void test_version_backend(void)
{
    int a = -1, b = -1, c = -1;
    CHECK_EQ(sscanf(ddgpu_version(), "%d.%d.%d", &a, &b, &c), 3);
#ifdef DDGPU_VERSION
    CHECK_STREQ(ddgpu_version(), DDGPU_VERSION);
#endif
    const char *be = ddgpu_backend_name();
    CHECK(strcmp(be, "cuda") == 0 || strcmp(be, "hip") == 0 ||
            strcmp(be, "none") == 0);
    if (strcmp(be, "cuda") == 0)
        CHECK_EQ(ddgpu_backend_kind(), DDS_MEM_CUDA);
    else if (strcmp(be, "hip") == 0)
        CHECK_EQ(ddgpu_backend_kind(), DDS_MEM_ROCM);
    else
        CHECK_EQ(ddgpu_backend_kind(), DDS_MEM_HOST);
    CHECK_STREQ(ddgpu_ptr_kind_name(DDGPU_PTR_HOST), "host");
    CHECK_STREQ(ddgpu_ptr_kind_name(DDGPU_PTR_HOST_PINNED), "pinned");
    CHECK_STREQ(ddgpu_ptr_kind_name(DDGPU_PTR_DEVICE), "device");
    CHECK_STREQ(ddgpu_ptr_kind_name(DDGPU_PTR_MANAGED), "managed");
    CHECK_STREQ(ddgpu_ptr_kind_name((ddgpu_ptr_kind_t)42), "?");
}

/* The runtime's error must be named in a no-GPU detail. */
static const char *runtime_marker(void)
{
    const char *be = ddgpu_backend_name();
    if (strcmp(be, "cuda") == 0)
        return "cuda: cudaGetDeviceCount";
    if (strcmp(be, "hip") == 0)
        return "hip: hipGetDeviceCount";
    return "without GPU support";
}

static int test_available(void)
{
    ddgpu_info_t info;
    memset(&info, 0x5a, sizeof(info));
    int rc = ddgpu_available(&info);
    CHECK_STREQ(info.backend, ddgpu_backend_name());
    CHECK_EQ(info.kind, ddgpu_backend_kind());
    CHECK_EQ(info.emulated, 0);
    CHECK_RC(ddgpu_available(NULL), rc);
    if (rc == 0) {
        CHECK(info.device_count >= 1);
        printf("note: %s GPU present (%d device(s), runtime %d, driver %d): "
               "the no-GPU checks do not apply here\n", info.backend,
               info.device_count, info.runtime_version, info.driver_version);
        return 1;
    }
    CHECK_EQ(rc, -DDS_ENOGPU);
    CHECK_EQ(info.device_count, 0);
    CHECK_CONTAINS(dds_last_error(), "ddgpu_available");
    CHECK_CONTAINS(dds_last_error(), runtime_marker());
    printf("no GPU: %s\n", dds_last_error());
    if (strcmp(ddgpu_backend_name(), "cuda") == 0) {
        /* e.g. cudaErrorInsufficientDriver (35) or cudaErrorNoDevice */
        CHECK_CONTAINS(dds_last_error(), "cudaError");
        CHECK(info.runtime_version > 0);
    } else if (strcmp(ddgpu_backend_name(), "hip") == 0) {
        CHECK_CONTAINS(dds_last_error(), "hipError");
    }
    return 0;
}

static void check_host(const void *p, const char *what)
{
    ddgpu_ptr_kind_t k = (ddgpu_ptr_kind_t)99;
    dds_mem_t m;
    memset(&m, 0x5a, sizeof(m));
    int rc = ddgpu_pointer_kind(p, &k, &m);
    if (rc != 0 || k != DDGPU_PTR_HOST || m.kind != DDS_MEM_HOST ||
        m.device != 0 || m.stream != NULL)
        CHECK_FAIL_("%s: rc %d (%s), kind %s, mem {%d, %d, %p}", what, rc,
                  dds_last_error(), ddgpu_ptr_kind_name(k), (int)m.kind,
                  m.device, m.stream);
    else
        CHECK_PASS_();
}

static void test_pointer_kind_host(void)
{
    int stack_var = 0;
    char *heap = malloc(1 << 20);
    char *small = malloc(24);
    check_host(&stack_var, "stack");
    check_host(heap, "heap (1 MiB)");
    check_host(heap + 12345, "inside heap");
    check_host(small, "heap (24 B)");
    check_host(static_buf, "static");
    CHECK_OK(ddgpu_pointer_kind(heap, NULL, NULL));
    CHECK_RC(ddgpu_pointer_kind(NULL, NULL, NULL), -DDS_EINVAL);
    free(heap);
    free(small);
}

static void test_coalesce(void)
{
    dds_memseg_t s[] = {
        {0, 100, 10}, {10, 110, 10}, {20, 120, 0}, {20, 120, 5}, /* -> 1 */
        {40, 0, 8},                                              /* gap  */
        {48, 8, 8},                                              /* join */
        {56, 100, 8},                                            /* dst gap */
        {0, 0, 0},                                               /* drop */
    };
    size_t n = ddgpu_segs_coalesce(s, sizeof(s) / sizeof(s[0]));
    CHECK_EQ(n, 3);
    CHECK_EQ(s[0].src_offset, 0);
    CHECK_EQ(s[0].dst_offset, 100);
    CHECK_EQ(s[0].len, 25);
    CHECK_EQ(s[1].src_offset, 40);
    CHECK_EQ(s[1].dst_offset, 0);
    CHECK_EQ(s[1].len, 16);
    CHECK_EQ(s[2].src_offset, 56);
    CHECK_EQ(s[2].dst_offset, 100);
    CHECK_EQ(s[2].len, 8);
    CHECK_EQ(ddgpu_segs_coalesce(NULL, 0), 0);
    dds_memseg_t z[2] = {{0, 0, 0}, {5, 5, 0}};
    CHECK_EQ(ddgpu_segs_coalesce(z, 2), 0);
}

/* Checks made before any GPU is needed: the same on every machine. */
static void test_argument_checks(void)
{
    void *p = NULL;
    char a[16], b[16];
    CHECK_RC(ddgpu_host_alloc(0, &p), -DDS_EINVAL);
    CHECK_RC(ddgpu_host_alloc(16, NULL), -DDS_EINVAL);
    CHECK_RC(ddgpu_device_alloc(0, 0, &p), -DDS_EINVAL);
    CHECK_RC(ddgpu_device_alloc(0, 16, NULL), -DDS_EINVAL);
    CHECK_RC(ddgpu_stream_create(0, NULL), -DDS_EINVAL);
    CHECK_RC(ddgpu_event_create(0, NULL), -DDS_EINVAL);
    CHECK_RC(ddgpu_event_record(NULL, NULL), -DDS_EINVAL);
    CHECK_RC(ddgpu_event_query(NULL, NULL), -DDS_EINVAL);
    CHECK_RC(ddgpu_event_synchronize(NULL), -DDS_EINVAL);
    CHECK_RC(ddgpu_stream_wait_event(NULL, NULL), -DDS_EINVAL);
    /* zero-byte copies are no-ops, pointers may be NULL */
    CHECK_OK(ddgpu_copy_async(DDS_COPY_H2D, NULL, NULL, 0, NULL));
    CHECK_OK(ddgpu_memset_async(NULL, 0, 0, NULL));
    CHECK_RC(ddgpu_copy_async((dds_copy_dir_t)7, a, b, 4, NULL), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "direction");
    CHECK_RC(ddgpu_copy_async(DDS_COPY_H2D, NULL, b, 4, NULL), -DDS_EINVAL);
    dds_memseg_t empty[2] = {{0, 0, 0}, {3, 3, 0}};
    size_t nc = 99;
    CHECK_OK(ddgpu_copy_segments_async(DDS_COPY_H2D, NULL, NULL, empty, 2, NULL,
                                   &nc));
    CHECK_EQ(nc, 0);
    CHECK_RC(ddgpu_copy_segments_async(DDS_COPY_H2D, a, b, NULL, 2, NULL, NULL),
         -DDS_EINVAL);
    dds_memseg_t ovf = {SIZE_MAX - 2, 0, 8};
    CHECK_RC(ddgpu_copy_segments_async(DDS_COPY_H2D, a, b, &ovf, 1, NULL, NULL),
         -DDS_ERANGE);
    CHECK_CONTAINS(dds_last_error(), "segment 0");
    /* NULL handles: destroy / free are no-ops */
    CHECK_OK(ddgpu_host_free(NULL));
    CHECK_OK(ddgpu_device_free(NULL));
    CHECK_OK(ddgpu_stream_destroy(NULL));
    CHECK_OK(ddgpu_event_destroy(NULL));
    ddgpu_staging_destroy(NULL);
    CHECK_RC(ddgpu_staging_create(NULL, NULL), -DDS_EINVAL);
    ddgpu_staging_params_t bad = {DDGPU_STAGING_PARAM_MIN_BUF_BYTES, 0, 0};
    ddgpu_staging_t *st = NULL;
    CHECK_RC(ddgpu_staging_create(&bad, &st), -DDS_EINVAL);
    bad.field_mask = 1u << 7;
    CHECK_RC(ddgpu_staging_create(&bad, &st), -DDS_EINVAL);
    CHECK(st == NULL);
    CHECK_RC(ddgpu_staging_acquire(NULL, 16, NULL), -DDS_EINVAL);
    CHECK_RC(ddgpu_staging_release(NULL, NULL), -DDS_EINVAL);
    CHECK_RC(ddgpu_stage_to_device(NULL, a, NULL, 0, NULL), -DDS_EINVAL);
    CHECK_RC(ddgpu_stage_from_device(NULL, a, NULL, 0, NULL), -DDS_EINVAL);
    CHECK_RC(ddgpu_stage_buf_wait(NULL), -DDS_EINVAL);
    CHECK(ddgpu_stage_buf_host(NULL) == NULL);
    CHECK_EQ(ddgpu_stage_buf_bytes(NULL), 0);
    CHECK_RC(ddgpu_staging_stats(NULL, NULL), -DDS_EINVAL);
    CHECK_RC(ddgpu_memsys_create(NULL, NULL), -DDS_EINVAL);
}

/* Expect -DDS_ENOGPU naming the function and the runtime's reason. */
#define T_NOGPU(expr, fn)                                                      \
    do {                                                                       \
        dds_error_clear();                                                     \
        int r__ = (expr);                                                      \
        if (r__ == -DDS_ENOGPU && strstr(dds_last_error(), (fn)) &&            \
            strstr(dds_last_error(), runtime_marker()))                        \
            CHECK_PASS_();                                                         \
        else                                                                   \
            CHECK_FAIL_("%s: rc %d (%s), detail \"%s\"; expected -DDS_ENOGPU "   \
                      "naming %s and \"%s\"", #expr, r__, dds_strerror(r__),   \
                      dds_last_error(), (fn), runtime_marker());               \
    } while (0)

static void test_every_entry_no_gpu(void)
{
    /* Fake, never dereferenced handles: the no-GPU check comes first. */
    void *fake = (void *)(uintptr_t)0x1000;
    void *p = (void *)0x5;
    char host[64];
    dds_memseg_t seg = {0, 0, 8};
    dds_mem_t on = {ddgpu_backend_kind(), 0, NULL};
    void *stream = NULL, *event = NULL;
    int done = -1;

    T_NOGPU(ddgpu_host_alloc(64, &p), "ddgpu_host_alloc");
    CHECK(p == (void *)0x5);   /* outputs untouched on failure */
    T_NOGPU(ddgpu_host_free(host), "ddgpu_host_free");
    T_NOGPU(ddgpu_device_alloc(0, 64, &p), "ddgpu_device_alloc");
    T_NOGPU(ddgpu_device_free(fake), "ddgpu_device_free");
    T_NOGPU(ddgpu_stream_create(0, &stream), "ddgpu_stream_create");
    CHECK(stream == NULL);
    T_NOGPU(ddgpu_stream_destroy(fake), "ddgpu_stream_destroy");
    T_NOGPU(ddgpu_stream_synchronize(NULL), "ddgpu_stream_synchronize");
    T_NOGPU(ddgpu_stream_synchronize(&on), "ddgpu_stream_synchronize");
    T_NOGPU(ddgpu_stream_fence(NULL), "ddgpu_stream_fence");
    T_NOGPU(ddgpu_event_create(0, &event), "ddgpu_event_create");
    CHECK(event == NULL);
    T_NOGPU(ddgpu_event_destroy(fake), "ddgpu_event_destroy");
    T_NOGPU(ddgpu_event_record(fake, &on), "ddgpu_event_record");
    T_NOGPU(ddgpu_event_query(fake, &done), "ddgpu_event_query");
    CHECK_EQ(done, -1);
    T_NOGPU(ddgpu_event_synchronize(fake), "ddgpu_event_synchronize");
    T_NOGPU(ddgpu_stream_wait_event(&on, fake), "ddgpu_stream_wait_event");
    T_NOGPU(ddgpu_copy_async(DDS_COPY_H2D, fake, host, 8, &on),
            "ddgpu_copy_async");
    T_NOGPU(ddgpu_copy_async(DDS_COPY_D2H, host, fake, 8, NULL),
            "ddgpu_copy_async");
    T_NOGPU(ddgpu_copy_async(DDS_COPY_D2D, fake, fake, 8, NULL),
            "ddgpu_copy_async");
    T_NOGPU(ddgpu_copy_segments_async(DDS_COPY_H2D, fake, host, &seg, 1, &on,
                                      NULL),
            "ddgpu_copy_segments_async");
    T_NOGPU(ddgpu_memset_async(fake, 0, 8, &on), "ddgpu_memset_async");
    ddgpu_staging_t *st = (ddgpu_staging_t *)0x7;
    T_NOGPU(ddgpu_staging_create(NULL, &st), "ddgpu_staging_create");
    CHECK(st == (ddgpu_staging_t *)0x7);
    dds_memsys_t ms = {NULL, NULL};
    T_NOGPU(ddgpu_memsys_create(NULL, &ms), "ddgpu_staging_create");
    CHECK(ms.ops == NULL && ms.ctx == NULL);
    /* Pointers are host memory, and that is not an error. */
    check_host(host, "host buffer, no GPU");
    /* The test hook exists only in the none build, and only when it was
     * built with DDSTORE_TEST_HOOKS (not in release builds). */
#ifndef DDSTORE_TEST_HOOKS
    if (strcmp(ddgpu_backend_name(), "none") == 0) {
        CHECK_RC(ddgpu_test_host_emulation(1), -DDS_ENOSYS);
        CHECK_CONTAINS(dds_last_error(), "no test hooks");
        CHECK_SKIP("ddgpu_api_test (host emulation)",
               "built without DDSTORE_TEST_HOOKS (a release build)");
    } else
#endif
    if (strcmp(ddgpu_backend_name(), "none") == 0) {
        ddgpu_info_t info;
        CHECK_OK(ddgpu_test_host_emulation(1));
        CHECK_OK(ddgpu_available(&info));
        CHECK_EQ(info.emulated, 1);
        CHECK_EQ(info.device_count, 1);
        CHECK_EQ(ddgpu_backend_kind(), DDS_MEM_CUDA);
        CHECK_OK(ddgpu_test_host_emulation(0));
        CHECK_RC(ddgpu_available(&info), -DDS_ENOGPU);
        CHECK_EQ(info.emulated, 0);
        CHECK_EQ(ddgpu_backend_kind(), DDS_MEM_HOST);
        T_NOGPU(ddgpu_host_alloc(64, &p), "ddgpu_host_alloc");
    } else {
        CHECK_RC(ddgpu_test_host_emulation(1), -DDS_ENOSYS);
        CHECK_CONTAINS(dds_last_error(), "only the none build");
    }
    /* Another backend's memory kind is refused once a GPU exists; without
     * one the no-GPU answer comes first. */
    dds_mem_t other = {DDS_MEM_ROCM, 0, NULL};
    if (ddgpu_backend_kind() == DDS_MEM_ROCM)
        other.kind = DDS_MEM_CUDA;
    T_NOGPU(ddgpu_stream_synchronize(&other), "ddgpu_stream_synchronize");
}

static void test_with_gpu(void)
{
    dds_mem_t other = {DDS_MEM_ROCM, 0, NULL};
    if (ddgpu_backend_kind() == DDS_MEM_ROCM)
        other.kind = DDS_MEM_CUDA;
    CHECK_RC(ddgpu_stream_synchronize(&other), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "device kind");
    dds_mem_t bad = {ddgpu_backend_kind(), 4096, NULL};
    CHECK_RC(ddgpu_stream_synchronize(&bad), -DDS_EINVAL);
    CHECK_CONTAINS(dds_last_error(), "device 4096");
    CHECK_RC(ddgpu_test_host_emulation(1), -DDS_ENOSYS);
}

int main(void)
{
    test_version_backend();
    test_pointer_kind_host();
    test_coalesce();
    test_argument_checks();
    if (test_available())
        test_with_gpu();
    else
        test_every_entry_no_gpu();
    return check_finish("ddgpu_api_test");
}
