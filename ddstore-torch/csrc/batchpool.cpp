// ddstore-torch: the batch pool, host memory of the direct collate's batch
// tensors kept for the next batches.
//
// Every batch of the direct collate (ds._collate, ThreadDataLoader's
// workers) is a new tensor: through torch's CPU allocator (glibc), a batch
// of 128 x 3 KiB rows is written into memory that is not in any cache, or,
// above glibc's mmap threshold (32 MiB at most), into fresh pages, one
// fault per 4 KiB.  Measured (docs/measurements.md "The batch pool", figure
// batch_pool, the pool on and off in one job): 36.75 MiB batches 3.8x
// faster through the direct collate and 2.9x through ThreadDataLoader with
// it; 392 KiB batches 1.04-1.07x.
//
// The pool is a torch allocator (c10::Allocator): a batch tensor's storage
// is a block of it; when the last reference to the storage goes (the
// training loop dropped the batch and every view of it), the block comes
// back here and the next batch of the same byte size takes it, the most
// recently freed first (warm).  A block is reused only once torch has
// released it, so no batch the user still holds is ever written: the same
// guarantee as any allocator.  Storages stay resizable (resize_ allocates
// from the pool and gives the old block back).
//
// Its blocks are mapped pages of their own (mmap), not glibc heap: a block
// kept in the pool lives long, and one in the heap pins the free memory
// below it (glibc trims only the heap's top).  Blocks under kMinPooled
// (64 KiB: the label and index fields of a batch) are not pooled: torch's
// allocator as before.  (Measured with the first version, whose blocks came
// from glibc: bench_loaders' synthetic case at 4 ranks held 210-240 MiB of
// free heap in 3 ranks of 4, node PSS 756-1072 MiB against 496-516 without
// the pool.  Such free heap also showed without the pool, from small blocks
// the benchmark itself kept per batch: docs/measurements.md "Memory per node
// of the loaders: the harness's records in glibc's heap".  The pool's blocks
// are kept out of it.)
//
// Bounded: at most `cap` bytes of free blocks are kept
// (DDSTORE_BATCH_POOL_BYTES, set from Python when a dataset is created;
// 0 = off: every batch from torch's allocator, as is a batch larger than
// the cap); a block freed beyond it goes back to the system.  One pool per
// process (a storage holds its allocator by raw pointer, so the pool is
// never destroyed); its lock is reset in a forked child.
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <ATen/EmptyTensor.h>
#include <c10/core/impl/alloc_cpu.h>

#include <unordered_map>

#include "ddstore_torch.h"

namespace ddstore_torch {

namespace {

// A block: kHead bytes of header (its size) before the data, so that the
// data pointer is the context (a "simple" DataPtr) and the deleter finds
// the size.  kHead keeps c10's 64-byte alignment.
constexpr size_t kHead = 64;
constexpr size_t kMinPooled = 64 << 10;

size_t mapped_len(size_t n)
{
    static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return (n + kHead + page - 1) / page * page;
}

void unmap_block(void *data)
{
    char *base = static_cast<char *>(data) - kHead;
    munmap(base, mapped_len(*reinterpret_cast<size_t *>(base)));
}

class BatchPool final : public c10::Allocator {
public:
    c10::DataPtr allocate(size_t n) override
    {
        void *data = nullptr;
        if (n == 0)
            return {nullptr, nullptr, &release, c10::Device(c10::DeviceType::CPU)};
        bool pooled = n >= kMinPooled;
        {
            std::lock_guard<std::mutex> g(mu_);
            pooled = pooled && n <= cap_;
            auto it = pooled ? free_.find(n) : free_.end();
            if (it != free_.end() && !it->second.empty()) {
                data = it->second.back();
                it->second.pop_back();
                free_bytes_ -= n;
                hits_++;
            } else if (pooled) {
                misses_++;
            }
        }
        if (!pooled) {   // small, the pool off, or the block above its cap: torch's allocator
            data = c10::alloc_cpu(n);
            return {data, data, &c10::free_cpu, c10::Device(c10::DeviceType::CPU)};
        }
        if (data == nullptr) {
            void *m = mmap(nullptr, mapped_len(n), PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            TORCH_CHECK(m != MAP_FAILED, "ddstore batch pool: cannot map ", n,
                        " bytes for a batch tensor (out of memory)");
            char *base = static_cast<char *>(m);
            *reinterpret_cast<size_t *>(base) = n;
            data = base + kHead;
        }
        return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
    }

    void copy_data(void *dest, const void *src, std::size_t count) const override
    {
        default_copy_data(dest, src, count);
    }

    void set_cap(size_t cap)
    {
        std::vector<void *> drop;
        {
            std::lock_guard<std::mutex> g(mu_);
            cap_ = cap;
            if (free_bytes_ <= cap_)
                return;
            for (auto &kv : free_) {
                for (void *p : kv.second)
                    drop.push_back(p);
                kv.second.clear();
            }
            free_bytes_ = 0;
        }
        for (void *p : drop)
            unmap_block(p);
    }

    py::dict stats()
    {
        std::lock_guard<std::mutex> g(mu_);
        py::dict d;
        d["cap_bytes"] = cap_;
        d["free_bytes"] = free_bytes_;
        d["hits"] = hits_;
        d["misses"] = misses_;
        d["kept"] = kept_;
        d["dropped"] = dropped_;
        return d;
    }

    static BatchPool &get()
    {
        // never destroyed: storages freed at interpreter exit still return here
        static BatchPool *pool = [] {
            auto *p = new BatchPool();
            pthread_atfork(nullptr, nullptr, [] { new (&get().mu_) std::mutex(); });
            return p;
        }();
        return *pool;
    }

private:
    static void release(void *data)
    {
        if (data == nullptr)
            return;
        const size_t n = *reinterpret_cast<size_t *>(static_cast<char *>(data) - kHead);
        BatchPool &p = get();
        {
            std::lock_guard<std::mutex> g(p.mu_);
            if (p.free_bytes_ + n <= p.cap_) {
                p.free_[n].push_back(data);
                p.free_bytes_ += n;
                p.kept_++;
                return;
            }
            p.dropped_++;
        }
        unmap_block(data);
    }

    std::mutex mu_;
    std::unordered_map<size_t, std::vector<void *>> free_;   // by byte size, LIFO
    size_t free_bytes_ = 0;
    size_t cap_ = 0;   // off until a dataset sets it
    uint64_t hits_ = 0, misses_ = 0, kept_ = 0, dropped_ = 0;
};

}  // namespace

at::Tensor batch_empty(const std::vector<int64_t> &shape, const at::TensorOptions &opts)
{
    return at::Tensor(at::detail::empty_generic(shape, &BatchPool::get(),
                                                c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                opts.dtype().toScalarType(), c10::nullopt));
}

at::Tensor host_empty(const std::vector<int64_t> &shape, const at::TensorOptions &opts)
{
    if (opts.device().is_cpu() && !opts.pinned_memory())
        return batch_empty(shape, opts);
    return at::empty(shape, opts);
}

py::dict batch_pool(py::object cap)
{
    if (!cap.is_none()) {
        const int64_t c = cap.cast<int64_t>();
        if (c < 0)
            throw_py(PyExc_ValueError, "batch_pool: cap_bytes must be >= 0, got " +
                                           std::to_string(c));
        BatchPool::get().set_cap(static_cast<size_t>(c));
    }
    return BatchPool::get().stats();
}

}  // namespace ddstore_torch
