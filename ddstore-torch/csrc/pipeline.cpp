// ddstore-torch: the native prefetch pipeline behind ThreadDataLoader's
// direct collate.
//
// With Python worker threads, every batch costs two GIL handoffs between the
// consumer and the worker (the worker needs the GIL back after its read; the
// consumer needs it to take the batch), each a thread wake-up: on a 2-core
// machine more than the read of a 128 x 3 KiB batch itself.  Here the worker
// threads (still started by Python: affinity, readers, worker_init_fn) call
// run() once per epoch and then read batch after batch without the GIL; the
// consumer does the Python work (sampler, index conversion, allocation, the
// batch's structure) in submit() and take().
//
//   submit(seq, indices)  consumer, GIL: indices -> rows (seq_indices), the
//                         batch tensors allocated and described; queued.
//   run(reader)           worker thread: reads queued batches with the GIL
//                         released until stop(), each inside the store's
//                         life lock (ddstore_pin_acquire / release through
//                         a reference taken once, ddstore_handle_ref: never
//                         the GIL).
//   take(timeout, seq, reader)
//                         consumer: waits (GIL released) for batch `seq`
//                         (or any, seq < 0); None on timeout, else (seq, ok,
//                         batch or exception, t_start, t_end, worker).  With
//                         a reader, a consumer that would wait for a batch
//                         no worker has started reads it itself (worker -1):
//                         it costs the loop one read, not a wait for a
//                         worker to be scheduled (workers with no core of
//                         their own, or still in worker_init_fn).
//   stop()                wakes and ends run(); drops what was queued.
#include <chrono>
#include <thread>

#include "ddstore_torch.h"

namespace ddstore_torch {

Pipeline::Pipeline(py::object collator, py::object store)
    : collator_(std::move(collator)), store_(std::move(store))
{
    col_ = collator_.cast<Collator *>();
    check(ddstore_handle_ref(handle_of(store_), &pin_));   // until ~Pipeline
}

Pipeline::~Pipeline()
{
    stop();
    ddstore_pin_unref(pin_);
}

void Pipeline::submit(int64_t seq, py::handle indices)
{
    Task t;
    t.seq = seq;
    t.idx = col_->rows(indices);
    col_->alloc(t.idx.numel(), &t.outs, &t.bufs);
    bool stopped;
    {
        std::lock_guard<std::mutex> g(mu_);
        stopped = stop_;
        if (!stopped)
            tasks_.push_back(std::move(t));
    }
    if (stopped)
        throw_py(PyExc_RuntimeError, "ThreadDataLoader: the pipeline was stopped");
    cv_tasks_.notify_one();
}

Pipeline::Result Pipeline::execute(Task &t, dds_store_t *store, dds_reader_t *reader,
                                   int worker)
{
    Result res;
    res.worker = worker;
    res.t0 = now_ns();
    dds_store_t *live = nullptr;
    res.rc = ddstore_pin_acquire(pin_, &live);
    if (res.rc == 0 && live != store) {
        ddstore_pin_release(pin_);
        res.rc = dds_error(-DDS_EFREED, "the store was replaced");
    } else if (res.rc == 0) {
        res.rc = col_->read(store, reader, t.idx, t.bufs);
        ddstore_pin_release(pin_);
    }
    res.t1 = now_ns();
    if (res.rc < 0) {
        const char *m = dds_last_error();
        res.msg = m != nullptr ? m : "";
        t.outs.clear();
    }
    res.outs = std::move(t.outs);
    return res;
}

void Pipeline::run(py::handle reader_obj, int worker)
{
    dds_store_t *store = nullptr;
    dds_reader_t *reader = nullptr;
    {
        const Target t(reader_obj);   // the pointers; each read pins again
        store = t.store;
        reader = t.reader;
    }
    py::object keep = py::reinterpret_borrow<py::object>(reader_obj);
    py::gil_scoped_release nogil;
    // the next task, waiting for one; false once stopped
    auto next_task = [&](Task *out) {
        std::unique_lock<std::mutex> g(mu_);
        cv_tasks_.wait(g, [&] { return stop_ || !tasks_.empty(); });
        if (stop_)
            return false;
        *out = std::move(tasks_.front());
        tasks_.pop_front();
        return true;
    };
    Task t;
    if (!next_task(&t))
        return;
    for (;;) {
        Result res = execute(t, store, reader, worker);
        // one critical section per batch: publish it and take the next task
        Task next;
        bool have, wake;
        {
            std::unique_lock<std::mutex> g(mu_);
            if (stop_)
                return;
            results_.emplace(t.seq, std::move(res));
            published_.fetch_add(1, std::memory_order_release);
            wake = sleeping_;
            have = !tasks_.empty();
            if (have) {
                next = std::move(tasks_.front());
                tasks_.pop_front();
            }
        }
        if (wake)
            cv_results_.notify_one();
        if (!have && !next_task(&next))
            return;
        t = std::move(next);
    }
}

py::object Pipeline::take(double timeout_s, int64_t seq, py::handle reader_obj)
{
    Taken r;
    if (!take_into(timeout_s, seq, reader_obj.is_none() ? 0 : handle_of(reader_obj), &r))
        return py::none();
    return py::make_tuple(r.key, r.ok, r.data, r.t0, r.t1, r.worker);
}

bool Pipeline::take_into(double timeout_s, int64_t seq, uint64_t help, Taken *out)
{
    Result res;
    int64_t key;
    {
        py::gil_scoped_release nogil;
        auto ready = [&] {
            return stop_ || (seq >= 0 ? results_.count(seq) > 0 : !results_.empty());
        };
        std::unique_lock<std::mutex> g(mu_);
        // The batch wanted is still queued (no worker has started it): read
        // it here rather than wait for a worker to be scheduled.  Only that
        // one: reading a later batch would leave the workers without tasks
        // (the consumer submits them) and delay this one by a read.  The
        // helper's reader is pinned only for such a read.
        while (help != 0 && !ready() && !tasks_.empty() &&
               (seq < 0 || tasks_.front().seq == seq)) {
            Task t = std::move(tasks_.front());
            tasks_.pop_front();
            g.unlock();
            Result r;
            ddstore_pin_t *hp = nullptr;
            dds_store_t *store = nullptr;
            dds_reader_t *reader = nullptr;
            const int rc = ddstore_handle_enter(help, &hp, &store, &reader);
            if (rc < 0) {
                const char *m = dds_last_error();
                r.rc = rc;
                r.msg = m != nullptr ? m : "";
                r.worker = -1;
                r.t0 = r.t1 = now_ns();
            } else {
                r = execute(t, store, reader, -1);
                ddstore_handle_leave(hp);
            }
            g.lock();
            if (stop_)
                break;
            results_.emplace(t.seq, std::move(r));
            published_.fetch_add(1, std::memory_order_release);
        }
        // A batch due within microseconds is waited for by polling the count
        // of published batches (no lock; a worker notifies only a consumer
        // that sleeps), yielding the core between polls (to the worker when
        // the threads outnumber the cores); after spin_ns (default 50 µs, about one
        // batch read of 128 x 3 KB rows) the consumer sleeps.
        const uint64_t spin_end = now_ns() + spin_ns;
        uint64_t seen = published_.load(std::memory_order_acquire);
        while (!ready() && now_ns() < spin_end) {
            g.unlock();
            while (published_.load(std::memory_order_acquire) == seen && now_ns() < spin_end)
                std::this_thread::yield();
            seen = published_.load(std::memory_order_acquire);
            g.lock();
        }
        bool ok = ready();
        if (!ok) {
            sleeping_ = true;
            ok = cv_results_.wait_for(g, std::chrono::duration<double>(timeout_s), ready);
            sleeping_ = false;
        }
        if (!ok || stop_)
            key = -1;
        else {
            auto it = seq >= 0 ? results_.find(seq) : results_.begin();
            key = it->first;
            res = std::move(it->second);
            results_.erase(it);
        }
    }
    if (key < 0)
        return false;
    out->key = key;
    out->t0 = static_cast<double>(res.t0) * 1e-9;
    out->t1 = static_cast<double>(res.t1) * 1e-9;
    out->worker = res.worker;
    if (res.rc < 0) {
        dds_error(res.rc, "%s", res.msg.c_str());
        try {
            throw_rc(res.rc);
        } catch (py::error_already_set &e) {
            out->ok = false;
            out->data = e.value();
            return true;
        }
    }
    out->ok = true;
    out->data = col_->build(res.outs);
    return true;
}

void Pipeline::stop()
{
    std::deque<Task> tasks;          // destroyed after the lock is given back
    std::map<int64_t, Result> results;
    {
        std::lock_guard<std::mutex> g(mu_);
        stop_ = true;
        tasks.swap(tasks_);
        results.swap(results_);
    }
    cv_tasks_.notify_all();
    cv_results_.notify_all();
}

size_t Pipeline::ready()
{
    std::lock_guard<std::mutex> g(mu_);
    return results_.size();
}

}  // namespace ddstore_torch
