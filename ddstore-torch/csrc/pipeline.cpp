// ddstore-torch: the native prefetch pipeline behind ThreadDataLoader's
// direct collate.
//
// With Python worker threads, every batch costs two GIL handoffs between the
// consumer and the worker (the worker needs the GIL back after its read; the
// consumer needs it to take the batch), each a thread wake-up: on a 2-core
// machine more than the read of a 128 x 3 KiB batch itself.  Here the worker
// threads are C++ threads (start()): each pins itself to its CPU, calls the
// user's worker_init_fn once with the GIL, then reads batch after batch and
// never takes the GIL again; the consumer does the Python work (sampler,
// index conversion, allocation, the batch's structure) in submit() and
// take().
//
//   submit(seq, indices)  consumer, GIL: indices -> rows (seq_indices), the
//                         batch tensors allocated and described; queued.
//   start(readers, cpus, init)
//                         consumer, GIL: one thread per reader; each runs
//                         serve() until stop(), each read inside the store's
//                         life lock (ddstore_pin_acquire / release through
//                         a reference taken once, ddstore_handle_ref: never
//                         the GIL).  The threads share the Pipeline (a
//                         shared_ptr): it outlives them.
//   take_into(timeout, seq, help)
//                         consumer (loader.cpp): waits (GIL released) for
//                         batch `seq` (or any, seq < 0); false on timeout,
//                         else the batch or its exception.  With a reader
//                         handle `help`, a consumer that would wait for a batch
//                         no worker has started reads it itself (worker -1):
//                         it costs the loop one read, not a wait for a
//                         worker to be scheduled (workers with no core of
//                         their own, or still in worker_init_fn).
//   stop(), join()        wakes and ends the threads, drops what was queued;
//                         join() waits for them with the GIL released.
//
// Interpreter exit: a thread takes the GIL only for worker_init_fn, and not
// once Python is finalizing; the last reference to a Pipeline may be dropped
// by one of its threads, which then frees the Python objects with the GIL
// (or leaks them during finalization).
#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <thread>

#include "loader.h"

#if PY_VERSION_HEX >= 0x030D0000
#define DDS_PY_FINALIZING() Py_IsFinalizing()
#else
#define DDS_PY_FINALIZING() _Py_IsFinalizing()
#endif

namespace ddstore_torch {

Pipeline::Pipeline(py::object collator, py::object store)
    : collator_(std::move(collator)), store_(std::move(store))
{
    col_ = collator_.cast<Collator *>();
    check(ddstore_handle_ref(handle_of(store_), &pin_));   // until ~Pipeline
}

namespace {
std::atomic<int> g_threads{0};   // native loader threads running
}  // namespace

int native_threads() { return g_threads.load(); }

void pin_cpu(int cpu)
{
    if (cpu < 0 || cpu >= CPU_SETSIZE)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

Pipeline::~Pipeline()
{
    if (pid_ != 0 && pid_ != getpid()) {
        // a forked child: the threads (and whoever held the lock at fork)
        // are the parent's; nothing is joined or unlocked here
        new std::vector<std::thread>(std::move(threads_));   // (never joined)
        pin_ = nullptr;
    } else {
        stop();
    }
    // every thread has dropped its reference: each has left thread_main (or
    // is leaving it, this destructor running on it)
    for (auto &t : threads_) {
        if (t.get_id() == std::this_thread::get_id())
            t.detach();
        else if (t.joinable())
            t.join();
    }
    if (pin_ != nullptr)
        ddstore_pin_unref(pin_);
    std::vector<py::object *> objs{&collator_, &store_, &init_, &err_};
    for (auto &k : keep_)
        objs.push_back(&k);
    if (PyGILState_Check()) {
        return;   // (the members drop their references as usual)
    }
    if (DDS_PY_FINALIZING()) {   // no GIL to be had: leak them
        for (auto *o : objs)
            (void)o->release();
        return;
    }
    py::gil_scoped_acquire gil;
    for (auto *o : objs)
        *o = py::object();
}

void Pipeline::start(py::list readers, std::vector<int> cpus, py::object init)
{
    init_ = std::move(init);
    std::vector<std::pair<dds_store_t *, dds_reader_t *>> ptrs;
    for (py::handle r : readers) {
        const Target t(r);   // the pointers; each read pins the store again
        ptrs.emplace_back(t.store, t.reader);
        keep_.push_back(py::reinterpret_borrow<py::object>(r));   // the reader lives
    }
    static std::once_flag atfork;
    std::call_once(atfork, [] { pthread_atfork(nullptr, nullptr, [] { g_threads = 0; }); });
    pid_ = getpid();
    auto self = shared_from_this();
    for (size_t w = 0; w < ptrs.size(); ++w) {
        running_ += 1;
        g_threads += 1;
        // a lambda (a local class, hidden like the extension's own types),
        // not thread_main's pointer: std::thread's state type over a function
        // pointer type is an instantiation of namespace std that the module
        // would export (python/tests/test_symbols.py)
        dds_store_t *st = ptrs[w].first;
        dds_reader_t *rd = ptrs[w].second;
        int cpu = w < cpus.size() ? cpus[w] : -1;
        threads_.emplace_back([self, w, st, rd, cpu] {
            thread_main(self, static_cast<int>(w), st, rd, cpu);
        });
    }
}

void Pipeline::thread_main(std::shared_ptr<Pipeline> self, int worker, dds_store_t *store,
                           dds_reader_t *reader, int cpu)
{
    char name[16];
    std::snprintf(name, sizeof name, "ddstore-ld-%d", worker);
    pthread_setname_np(pthread_self(), name);
    pin_cpu(cpu);
    bool ok = true;
    if (self->init_ && !self->init_.is_none() && !DDS_PY_FINALIZING()) {
        py::gil_scoped_acquire gil;
        PyObject *r = PyObject_CallFunction(self->init_.ptr(), "i", worker);
        if (r == nullptr) {
            self->err_ = fetch_error();
            ok = false;
        }
        Py_XDECREF(r);
    }
    if (ok)
        self->serve(store, reader, worker);
    else
        self->stop();   // the consumer wakes and raises err_
    self->running_ -= 1;
    g_threads -= 1;
    {   // the consumer may wait for the threads' end (join)
        std::lock_guard<std::mutex> g(self->mu_);
    }
    self->cv_results_.notify_all();
}

void Pipeline::join()
{
    if (pid_ != getpid())
        return;   // none started, or a forked child (the parent's threads)
    std::vector<std::thread> threads;
    {
        std::lock_guard<std::mutex> g(mu_);
        threads.swap(threads_);
    }
    py::gil_scoped_release nogil;
    for (auto &t : threads)
        if (t.joinable())
            t.join();
}

py::object Pipeline::error()
{
    return err_ ? err_ : py::none();
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

void Pipeline::serve(dds_store_t *store, dds_reader_t *reader, int worker)
{
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
