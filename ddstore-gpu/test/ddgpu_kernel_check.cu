// ddstore-gpu: checks with CUDA kernels, for ci/gpu-check.sh (nvcc only;
// not a Bazel test).  The library stays plain C; this program links it.
//
//  1. Staged rows are ordered after the work already queued on the
//     caller's stream, without the host waiting: a kernel that spins
//     ~100 ms and then poisons the destination is queued first; the rows are
//     staged on the same stream (the host call must return long before the
//     kernel ends); a verification kernel on that stream must see the rows,
//     not the poison.  3 KB and 1 MiB rows.
//  2. ddgpu_stream_fence waits for its stream only: a flag written by a
//     kernel at the end of a 50 ms spin is set when the fence returns, and a
//     400 ms kernel on another stream is not waited for (no device-wide
//     synchronise).
//  3. Throughput (printed, not asserted): batches of 3 KB and 1 MiB rows
//     gathered from a host shard into host memory vs into GPU memory
//     through pinned staging, and D2D row copies from a GPU shard.
//
// Prints "N passed, M failed"; exits 1 on any failure, 2 when no GPU.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ddstore/errors.h"
#include "ddstore/gpu.h"

static int n_pass, n_fail;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (cond) {                                                            \
            n_pass++;                                                          \
        } else {                                                               \
            n_fail++;                                                          \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
        }                                                                      \
    } while (0)

#define OK(expr)                                                               \
    do {                                                                       \
        int rc_ = (expr);                                                      \
        CHECK(rc_ == 0, "%s -> %d (%s): %s", #expr, rc_, dds_strerror(rc_),    \
              dds_last_error());                                               \
    } while (0)

#define CU(expr)                                                               \
    do {                                                                       \
        cudaError_t e_ = (expr);                                               \
        CHECK(e_ == cudaSuccess, "%s -> %s", #expr, cudaGetErrorName(e_));     \
    } while (0)

static double now_s()
{
    return std::chrono::duration<double>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

__host__ __device__ static inline unsigned char pat(long long row, size_t j)
{
    return (unsigned char)((row * 131 + (long long)j * 7 + 1) & 0xff);
}

__device__ static inline unsigned long long gtimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// One block: thread 0 spins for `ns`, then the block fills d with v and
// sets *flag = 1 (when flag is not NULL).
__global__ void spin_then_fill(unsigned char *d, size_t n, unsigned long long ns,
                               unsigned char v, volatile int *flag)
{
    if (threadIdx.x == 0) {
        unsigned long long t0 = gtimer();
        while (gtimer() - t0 < ns) {
        }
    }
    __syncthreads();
    for (size_t i = threadIdx.x; i < n; i += blockDim.x)
        d[i] = v;
    __syncthreads();
    if (threadIdx.x == 0 && flag) {
        __threadfence_system();
        *flag = 1;
    }
}

__global__ void verify_rows(const unsigned char *d, const long long *idx,
                            int nrows, size_t rb, unsigned long long *bad)
{
    size_t total = (size_t)nrows * rb;
    unsigned long long mine = 0;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total;
         k += (size_t)gridDim.x * blockDim.x) {
        size_t r = k / rb, j = k % rb;
        mine += d[k] != pat(idx[r], j);
    }
    if (mine)
        atomicAdd(bad, mine);
}

// 1. ordering after queued work, no host stall
static void check_ordering(size_t rb, int nrows, int shard_rows)
{
    printf("-- ordering: %d rows of %zu bytes after a 100 ms kernel\n", nrows,
           rb);
    std::vector<unsigned char> shard((size_t)shard_rows * rb);
    for (long long r = 0; r < shard_rows; r++)
        for (size_t j = 0; j < rb; j++)
            shard[(size_t)r * rb + j] = pat(r, j);
    std::vector<long long> idx(nrows);
    for (int i = 0; i < nrows; i++)
        idx[i] = (long long)(((long long)i * 7919 + 13) % shard_rows);

    void *stream = nullptr;
    unsigned char *dst = nullptr;
    long long *didx = nullptr;
    unsigned long long *dbad = nullptr;
    ddgpu_staging_t *st = nullptr;
    size_t bytes = (size_t)nrows * rb;
    OK(ddgpu_stream_create(0, &stream));
    OK(ddgpu_device_alloc(0, bytes, (void **)&dst));
    OK(ddgpu_device_alloc(0, nrows * sizeof(long long), (void **)&didx));
    OK(ddgpu_device_alloc(0, sizeof(unsigned long long), (void **)&dbad));
    OK(ddgpu_staging_create(nullptr, &st));
    if (!stream || !dst || !didx || !dbad || !st)
        return;
    dds_mem_t on = {DDS_MEM_CUDA, 0, stream};
    OK(ddgpu_copy_async(DDS_COPY_H2D, didx, idx.data(),
                        nrows * sizeof(long long), &on));
    OK(ddgpu_memset_async(dbad, 0, sizeof(unsigned long long), &on));
    OK(ddgpu_stream_synchronize(&on));
    // warm the pool (pinning memory is slow and not part of the read path)
    ddgpu_stage_buf_t *warm = nullptr;
    OK(ddgpu_staging_acquire(st, bytes, &warm));
    if (warm)
        OK(ddgpu_staging_release(st, warm));

    spin_then_fill<<<1, 256, 0, (cudaStream_t)stream>>>(dst, bytes, 100000000ull,
                                                       0xAB, nullptr);
    CU(cudaGetLastError());
    double t0 = now_s();
    ddgpu_stage_buf_t *b = nullptr;
    OK(ddgpu_staging_acquire(st, bytes, &b));
    if (!b)
        return;
    unsigned char *h = (unsigned char *)ddgpu_stage_buf_host(b);
    std::vector<dds_memseg_t> segs(nrows);
    for (int i = 0; i < nrows; i++) {
        memcpy(h + (size_t)i * rb, &shard[(size_t)idx[i] * rb], rb);
        segs[i] = dds_memseg_t{(size_t)i * rb, (size_t)i * rb, rb};
    }
    OK(ddgpu_stage_to_device(b, dst, segs.data(), nrows, &on));
    OK(ddgpu_staging_release(st, b));
    double t1 = now_s();
    // the host did not wait for the 100 ms kernel (staging fill included)
    CHECK(t1 - t0 < 0.050, "host spent %.1f ms staging %zu bytes", (t1 - t0) * 1e3,
          bytes);
    printf("   host time to stage %zu bytes: %.3f ms (kernel still running)\n",
           bytes, (t1 - t0) * 1e3);
    verify_rows<<<256, 256, 0, (cudaStream_t)stream>>>(dst, didx, nrows, rb,
                                                       dbad);
    CU(cudaGetLastError());
    unsigned long long bad = ~0ull;
    OK(ddgpu_copy_async(DDS_COPY_D2H, &bad, dbad, sizeof(bad), &on));
    OK(ddgpu_stream_synchronize(&on));
    CHECK(bad == 0, "%llu bytes differ (0xAB = the copy ran before the kernel)",
          bad);
    // and checked on the CPU as well
    std::vector<unsigned char> back(bytes);
    OK(ddgpu_copy_async(DDS_COPY_D2H, back.data(), dst, bytes, &on));
    OK(ddgpu_stream_synchronize(&on));
    size_t cpu_bad = 0;
    for (int i = 0; i < nrows; i++)
        cpu_bad += memcmp(&back[(size_t)i * rb], &shard[(size_t)idx[i] * rb], rb) != 0;
    CHECK(cpu_bad == 0, "%zu rows differ on the CPU", cpu_bad);
    ddgpu_staging_destroy(st);
    OK(ddgpu_device_free(dst));
    OK(ddgpu_device_free(didx));
    OK(ddgpu_device_free(dbad));
    OK(ddgpu_stream_destroy(stream));
}

// 2. the fence waits for its stream, not the device
static void check_fence()
{
    printf("-- fence: 50 ms kernel on the stream, 400 ms kernel elsewhere\n");
    void *s1 = nullptr, *s2 = nullptr;
    int *flag = nullptr;
    unsigned char *d1 = nullptr, *d2 = nullptr;
    OK(ddgpu_stream_create(0, &s1));
    OK(ddgpu_stream_create(0, &s2));
    OK(ddgpu_host_alloc(sizeof(int), (void **)&flag));
    OK(ddgpu_device_alloc(0, 4096, (void **)&d1));
    OK(ddgpu_device_alloc(0, 4096, (void **)&d2));
    if (!s1 || !s2 || !flag || !d1 || !d2)
        return;
    // pinned memory is mapped under unified addressing; ask anyway
    int *dflag = nullptr;
    if (cudaHostGetDevicePointer((void **)&dflag, flag, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        dflag = flag;
    }
    *(volatile int *)flag = 0;
    dds_mem_t on1 = {DDS_MEM_CUDA, 0, s1}, on2 = {DDS_MEM_CUDA, 0, s2};
    spin_then_fill<<<1, 64, 0, (cudaStream_t)s2>>>(d2, 4096, 400000000ull, 1,
                                                   nullptr);
    spin_then_fill<<<1, 64, 0, (cudaStream_t)s1>>>(d1, 4096, 50000000ull, 1,
                                                   dflag);
    CU(cudaGetLastError());
    double t0 = now_s();
    OK(ddgpu_stream_fence(&on1));
    double t1 = now_s();
    int seen = *(volatile int *)flag;
    CHECK(seen == 1, "the fence returned before the stream's kernel ended");
    CHECK(t1 - t0 < 0.300, "the fence took %.1f ms: it waited for the other "
          "stream", (t1 - t0) * 1e3);
    printf("   fence returned after %.1f ms (flag %d)\n", (t1 - t0) * 1e3, seen);
    OK(ddgpu_stream_synchronize(&on2));
    OK(ddgpu_host_free(flag));
    OK(ddgpu_device_free(d1));
    OK(ddgpu_device_free(d2));
    OK(ddgpu_stream_destroy(s1));
    OK(ddgpu_stream_destroy(s2));
}

// 3. throughput, printed only
static void bench(size_t rb, int batch, int shard_rows, int iters)
{
    size_t bytes = (size_t)batch * rb;
    std::vector<unsigned char> shard((size_t)shard_rows * rb, 7);
    std::vector<unsigned char> hdst(bytes);
    std::vector<long long> idx((size_t)batch * iters);
    unsigned s = 12345;
    for (auto &x : idx) {
        s = s * 1103515245u + 12345u;
        x = (s >> 4) % shard_rows;
    }
    void *stream = nullptr;
    unsigned char *dst = nullptr, *dshard = nullptr;
    ddgpu_staging_t *st = nullptr;
    OK(ddgpu_stream_create(0, &stream));
    OK(ddgpu_device_alloc(0, bytes, (void **)&dst));
    OK(ddgpu_device_alloc(0, (size_t)shard_rows * rb, (void **)&dshard));
    OK(ddgpu_staging_create(nullptr, &st));
    if (!stream || !dst || !dshard || !st)
        return;
    dds_mem_t on = {DDS_MEM_CUDA, 0, stream};
    std::vector<dds_memseg_t> segs(batch), dsegs(batch);
    for (int i = 0; i < batch; i++)
        segs[i] = dds_memseg_t{(size_t)i * rb, (size_t)i * rb, rb};

    // host destination: gather rows with memcpy
    double t0 = now_s();
    for (int it = 0; it < iters; it++)
        for (int i = 0; i < batch; i++)
            memcpy(&hdst[(size_t)i * rb],
                   &shard[(size_t)idx[(size_t)it * batch + i] * rb], rb);
    double t_host = now_s() - t0;

    // GPU destination through pinned staging (gather + one H2D per batch)
    ddgpu_stage_buf_t *warm = nullptr;
    OK(ddgpu_staging_acquire(st, bytes, &warm));   // pin outside the timing
    OK(ddgpu_staging_release(st, warm));
    double t_enqueue = 0;
    t0 = now_s();
    for (int it = 0; it < iters; it++) {
        ddgpu_stage_buf_t *b = nullptr;
        OK(ddgpu_staging_acquire(st, bytes, &b));
        if (!b)
            return;
        unsigned char *h = (unsigned char *)ddgpu_stage_buf_host(b);
        for (int i = 0; i < batch; i++)
            memcpy(h + (size_t)i * rb,
                   &shard[(size_t)idx[(size_t)it * batch + i] * rb], rb);
        double e0 = now_s();
        OK(ddgpu_stage_to_device(b, dst, segs.data(), batch, &on));
        t_enqueue += now_s() - e0;
        OK(ddgpu_staging_release(st, b));
    }
    OK(ddgpu_stream_synchronize(&on));
    double t_staged = now_s() - t0;

    // GPU shard -> GPU destination, one D2D per row
    t0 = now_s();
    for (int it = 0; it < iters; it++) {
        for (int i = 0; i < batch; i++)
            dsegs[i] = dds_memseg_t{(size_t)idx[(size_t)it * batch + i] * rb,
                                    (size_t)i * rb, rb};
        OK(ddgpu_copy_segments_async(DDS_COPY_D2D, dst, dshard, dsegs.data(),
                                     batch, &on, nullptr));
    }
    OK(ddgpu_stream_synchronize(&on));
    double t_d2d = now_s() - t0;

    double gb = (double)bytes * iters / 1e9;
    printf("   rows %7zu B x %4d: host dst %6.2f GB/s | GPU dst via pinned "
           "staging %6.2f GB/s (%.1f us/batch, enqueue %.1f us) | GPU shard "
           "D2D %6.2f GB/s\n",
           rb, batch, gb / t_host, gb / t_staged, t_staged / iters * 1e6,
           t_enqueue / iters * 1e6, gb / t_d2d);
    ddgpu_staging_stats_t ss;
    OK(ddgpu_staging_stats(st, &ss));
    printf("   staging pool: %llu buffers, %llu pinned bytes, %llu waits\n",
           (unsigned long long)ss.buffers,
           (unsigned long long)ss.pinned_bytes, (unsigned long long)ss.waits);
    ddgpu_staging_destroy(st);
    OK(ddgpu_device_free(dst));
    OK(ddgpu_device_free(dshard));
    OK(ddgpu_stream_destroy(stream));
}

int main()
{
    ddgpu_info_t info;
    if (ddgpu_available(&info) != 0) {
        printf("SKIP: ddgpu_kernel_check: %s\n", dds_last_error());
        return 2;
    }
    printf("ddgpu_kernel_check: %s, %d device(s), runtime %d, driver %d\n",
           info.backend, info.device_count, info.runtime_version,
           info.driver_version);
    check_ordering(3072, 128, 4096);
    check_ordering((size_t)1 << 20, 16, 64);
    check_fence();
    printf("-- throughput (not asserted)\n");
    bench(3072, 128, 32768, 200);
    bench((size_t)1 << 20, 64, 256, 20);
    printf("ddgpu_kernel_check: %d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
