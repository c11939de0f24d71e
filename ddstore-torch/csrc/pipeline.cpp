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
//                         batch tensors allocated and described, the store
//                         pinned (api->acquire) for the read; queued.
//   run(reader)           worker thread: reads queued batches with the GIL
//                         released until stop(); unpins after each read.
//   take(timeout, seq)    consumer: waits (GIL released) for batch `seq`
//                         (or any, seq < 0); None on timeout, else (seq, ok,
//                         batch or exception, t_start, t_end, worker).
//   stop()                wakes and ends run(); unpins what was queued.
#include <chrono>

#include "ddstore_torch.h"

namespace ddstore_torch {

Pipeline::Pipeline(py::object collator, py::object store)
    : collator_(std::move(collator)), store_(std::move(store))
{
    col_ = collator_.cast<Collator *>();
}

Pipeline::~Pipeline()
{
    // tasks still queued hold a pin each: give them back
    std::deque<Task> tasks;
    {
        std::lock_guard<std::mutex> g(mu_);
        stop_ = true;
        tasks.swap(tasks_);
    }
    for (size_t i = 0; i < tasks.size(); i++)
        api()->release(store_.ptr());
    cv_.notify_all();
}

void Pipeline::submit(int64_t seq, py::handle indices)
{
    Task t;
    t.seq = seq;
    t.idx = col_->rows(indices);
    col_->alloc(t.idx.numel(), &t.outs, &t.bufs);
    dds_store_t *s = nullptr;
    dds_reader_t *r = nullptr;
    if (api()->acquire(store_.ptr(), &s, &r) < 0)   // released by the reader
        throw py::error_already_set();
    {
        std::lock_guard<std::mutex> g(mu_);
        if (!stop_) {
            tasks_.push_back(std::move(t));
            cv_.notify_all();
            return;
        }
    }
    api()->release(store_.ptr());
    throw_py(PyExc_RuntimeError, "ThreadDataLoader: the pipeline was stopped");
}

void Pipeline::run(py::handle reader_obj, int worker)
{
    dds_store_t *store = nullptr;
    dds_reader_t *reader = nullptr;
    if (api()->unwrap(reader_obj.ptr(), &store, &reader) < 0)
        throw py::error_already_set();
    py::object keep = py::reinterpret_borrow<py::object>(reader_obj);
    py::gil_scoped_release nogil;
    for (;;) {
        Task t;
        {
            std::unique_lock<std::mutex> g(mu_);
            cv_.wait(g, [&] { return stop_ || !tasks_.empty(); });
            if (stop_)
                return;
            t = std::move(tasks_.front());
            tasks_.pop_front();
        }
        Result res;
        res.worker = worker;
        res.t0 = now_ns();
        res.rc = col_->read(store, reader, t.idx, t.bufs);
        res.t1 = now_ns();
        if (res.rc < 0) {
            const char *m = api()->last_error();
            res.msg = m != nullptr ? m : "";
            t.outs.clear();
        }
        api()->release(store_.ptr());
        res.outs = std::move(t.outs);
        {
            std::lock_guard<std::mutex> g(mu_);
            results_.emplace(t.seq, std::move(res));
        }
        cv_.notify_all();
    }
}

py::object Pipeline::take(double timeout_s, int64_t seq)
{
    Result res;
    int64_t key;
    {
        py::gil_scoped_release nogil;
        std::unique_lock<std::mutex> g(mu_);
        auto ready = [&] {
            return stop_ || (seq >= 0 ? results_.count(seq) > 0 : !results_.empty());
        };
        if (!cv_.wait_for(g, std::chrono::duration<double>(timeout_s), ready) || stop_)
            key = -1;
        else {
            auto it = seq >= 0 ? results_.find(seq) : results_.begin();
            key = it->first;
            res = std::move(it->second);
            results_.erase(it);
        }
    }
    if (key < 0)
        return py::none();
    const double t0 = static_cast<double>(res.t0) * 1e-9, t1 = static_cast<double>(res.t1) * 1e-9;
    if (res.rc < 0) {
        api()->error(res.rc, "%s", res.msg.c_str());
        try {
            throw_rc(res.rc);
        } catch (py::error_already_set &e) {
            return py::make_tuple(key, false, e.value(), t0, t1, res.worker);
        }
    }
    return py::make_tuple(key, true, col_->build(res.outs), t0, t1, res.worker);
}

void Pipeline::stop()
{
    std::deque<Task> tasks;
    {
        std::lock_guard<std::mutex> g(mu_);
        stop_ = true;
        tasks.swap(tasks_);
        results_.clear();
    }
    for (size_t i = 0; i < tasks.size(); i++)
        api()->release(store_.ptr());
    cv_.notify_all();
}

size_t Pipeline::ready()
{
    std::lock_guard<std::mutex> g(mu_);
    return results_.size();
}

}  // namespace ddstore_torch
