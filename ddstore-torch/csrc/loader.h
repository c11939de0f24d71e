// ddstore-torch: ThreadDataLoader's per-batch work and its worker threads
// (loader.cpp, pipeline.cpp) and its epoch figures (report.cpp).  Python
// keeps what only Python can do: calling the user's dataset, sampler,
// collate_fn and worker_init_fn, building the objects the API returns, the
// iterator protocol, the communicator's collective, logging and plotting.
#pragma once

#include "ddstore_torch.h"

#include <c10/core/Event.h>

#include <deque>
#include <memory>
#include <thread>

#include <unistd.h>

namespace ddstore_torch {

// One epoch's figures (pyddstore/torch/report.py documents them): the
// consumer's enter()/leave() of next(), every fetch's add_fetch() (any
// thread), the store's read counters through `profile` (the dataset's
// get_profile, or None) at the start and the end.  Times are seconds of
// CLOCK_MONOTONIC (time.perf_counter on Linux, now_ns() * 1e-9).
class Stats {
public:
    static constexpr int64_t kEnd = -2;      // leave(): the epoch ended
    static constexpr int64_t kRaised = -1;   // leave(): next() raised
    static constexpr size_t kTimeline = 2048;

    Stats(int64_t index, int workers, int64_t depth, py::object t0, py::object profile);
    double enter(int64_t ready);
    bool leave(double t_enter, int64_t samples);
    void add_fetch(double t0, double t1, double collate, double pin, int worker);
    py::dict figures(bool timeline);
    py::list batch_times();
    py::list fetch_times();
    int64_t index() const { return index_; }
    bool complete() const { return t_end_ >= 0; }

private:
    struct Fetch {
        int worker;
        double start, end, cp;
    };
    py::object profile() const;   // the read counters now (a dict), or None
    py::object read_delta(const py::object &p1) const;

public:   // (read-only from Python, as the figures' parts)
    int64_t index_;
    int workers_;
    int64_t depth_;
    double t0_;
    double t_end_ = -1, t_leave_ = -1;
    double start_s_ = 0, wait_s_ = 0, compute_s_ = 0;
    int64_t batches_ = 0, samples_ = 0;
    int64_t ready_sum_ = 0, ready_min_ = -1, ready_max_ = 0, starved_ = 0;
    std::deque<std::pair<double, double>> batch_times_;
    py::object profile_fn_, prof0_, read_;

private:
    std::mutex mu_;   // the fetch figures (add_fetch from worker threads)
    std::deque<Fetch> fetch_times_;

public:
    double fetch_s_ = 0, collate_s_ = 0, pin_s_ = 0;
    int64_t fetched_ = 0;
};

// report.py's text and spread, computed here.
std::string report_summary(py::dict fig);
py::list report_mine(py::dict fig);
py::dict report_spread(py::dict fig, py::list alls, int64_t rank);

// pipeline.cpp: the native prefetch of a direct-collate epoch.  Its worker
// threads are C++ threads (start()): each pins itself to a CPU, calls the
// user's worker_init_fn once with the GIL, then reads batch after batch
// without ever taking the GIL.  The consumer (GIL held) submits the batches
// (submit: indices -> rows, the tensors allocated) and takes them back
// (take_into: the batch's Python structure built).  Held by a shared_ptr
// that every worker thread shares: a Pipeline outlives its threads.
class Pipeline : public std::enable_shared_from_this<Pipeline> {
public:
    Pipeline(py::object collator, py::object store);
    ~Pipeline();
    Pipeline(const Pipeline &) = delete;
    Pipeline &operator=(const Pipeline &) = delete;
    void submit(int64_t seq, py::handle indices);
    // One native worker thread per entry of `readers` (the store or reader
    // object it reads through), pinned to cpus[w] (< 0: not pinned), calling
    // init(w) first when init is not None; an exception there ends the
    // epoch: error() returns it and the pipeline stops.  GIL held.
    void start(py::list readers, std::vector<int> cpus, py::object init);
    // Waits (GIL released) for the threads start() made to end; after stop().
    void join();
    size_t alive() const { return running_.load(); }   // start()'s threads running
    py::object error();                                 // init's exception, or None
    // The loop of a thread that reads through (store, reader), the GIL
    // released (or never held) until stop().
    void serve(dds_store_t *store, dds_reader_t *reader, int worker);
    // A batch taken: (key, ok, batch or exception, t0, t1 seconds, worker).
    struct Taken {
        int64_t key = -1;
        bool ok = false;
        py::object data;
        double t0 = 0, t1 = 0;
        int worker = 0;
    };
    // The consumer's wait for batch `seq` (any: seq < 0): false on timeout
    // or stop.  `help` is a handle (handle_of) the consumer reads
    // through when it would wait for a batch nobody started (0: never);
    // pinned only when it reads.  GIL held; released while waiting.
    bool take_into(double timeout_s, int64_t seq, uint64_t help, Taken *out);
    void stop();
    size_t ready();
    // How long take_into() polls (yielding the core) for a batch before it
    // sleeps on the condition variable, in ns (0: it sleeps at once).
    uint64_t spin_ns = 50000;

private:
    struct Task {
        int64_t seq = 0;
        at::Tensor idx;
        std::vector<at::Tensor> outs;
        std::vector<dds_buf_t> bufs;
    };
    struct Result {
        int rc = 0;
        std::string msg;
        std::vector<at::Tensor> outs;
        uint64_t t0 = 0, t1 = 0;
        int worker = 0;
    };
    // Task t read through (store, reader) by `worker` (-1: the consumer).
    Result execute(Task &t, dds_store_t *store, dds_reader_t *reader, int worker);
    static void thread_main(std::shared_ptr<Pipeline> self, int worker, dds_store_t *store,
                            dds_reader_t *reader, int cpu);
    py::object collator_, store_, init_, err_;
    std::vector<py::object> keep_;   // the threads' reader objects
    const Collator *col_ = nullptr;
    ddstore_pin_t *pin_ = nullptr;   // the store's life lock (ddstore_handle_ref)
    std::mutex mu_;
    std::condition_variable cv_tasks_;     // workers wait for tasks
    std::condition_variable cv_results_;   // the consumer waits for batches
    std::deque<Task> tasks_;
    std::map<int64_t, Result> results_;
    bool stop_ = false;
    bool sleeping_ = false;                      // the consumer waits on cv_results_
    std::atomic<uint64_t> published_{0};         // batches published so far
    std::vector<std::thread> threads_;
    std::atomic<int> running_{0};
    pid_t pid_ = 0;   // the process that started the threads (a forked child has none)
};

// Native loader threads running in this process (every Pipeline's).
int native_threads();
// The calling thread pinned to CPU `cpu` (as os.sched_setaffinity: a CPU
// not allowed is ignored).
void pin_cpu(int cpu);
// The Python exception being raised (PyErr_Occurred), cleared and returned
// with its traceback attached (re-raised on the consumer as it was).
py::object fetch_error();

// GPU batches made on a worker thread's stream: one event per device after
// the work queued there (record), made the consumer's current stream's
// before the batch is used (wait; the tensors are marked used on it).
using Events = std::vector<c10::Event>;
Events record_events(py::handle data);
void wait_events(py::handle data, Events &events);
// A copy of a collated batch (tensors cloned; dicts, lists, tuples and
// namedtuples rebuilt; anything else with copy() copied).
py::object copy_batch(py::handle data);

// One epoch of a ThreadDataLoader, the consumer's side: draws from the
// sampler, submits the batches (to the native Pipeline or to the Python
// worker threads, whose loop is work()), takes them in order (or as they
// come), routes errors, counts what was delivered and keeps the Stats.
// next() is the whole of __next__ but the end-of-epoch Python work (the
// report) which Python does when it raises.
class Batches {
public:
    Batches(py::object sampler_iter, py::object stats, int workers, bool in_order,
            double timeout, py::object timeout_text, bool auto_collation, py::object pipe,
            uint64_t help, py::object fetch, bool gpu, int64_t batches0,
            int64_t samples0);
    void prime(int64_t n);
    py::object next();
    // A Python worker thread's loop until stop(): fetch(index, slot) ->
    // (batch, collate_s, pin_s) for every task (with the GIL; waits without
    // it); `err` (not None): the worker's set-up failed, every batch raises it.
    void work(int worker, py::object fetch, py::object slot, py::object err);
    // A Python worker thread's whole life (threading.Thread's target): pinned
    // to `cpu` (>= 0), its slot taken from `pool` and its thread readers
    // bound, init(worker) called (None: no call), work() until stop(), then
    // the readers unbound and the slot given back.  A set-up error is
    // raised by every batch.
    void serve_worker(int worker, py::object fetch, int cpu, py::object init);
    // The native threads of the pipeline: their slots taken from `pool` (an
    // error is raised by the first next()), each thread reading through its
    // reader of `ds` (the dataset's store when it has none).
    void start_native(py::object ds, std::vector<int> cpus, py::object init);
    // The iterator's __next__: next(), and at the epoch's end the threads
    // joined, the slots given back and on_end (a weak method) called with
    // the figures when the report is due; after an error that ends the
    // epoch, the threads stopped.
    py::object iter_next();
    // The iterator's close(): the epoch ended early (see loader.py).
    void close();
    void fail(py::object err);   // a worker's set-up error, raised by next()
    void stop();                 // wakes every thread; the pipeline stops
    // stop(); with join, wait for the threads (Python's joined, the
    // pipeline's with the GIL released) and give the slots taken for the
    // native threads back to `pool`.
    void shutdown(bool join);
    py::list alive();            // names of the epoch's live worker threads
    void clear();                // close(): drops tasks and results
    size_t ready();
    size_t pending();            // results and tasks held (close() drops them)
    bool report_due();           // true once, after the epoch's end
    static constexpr int kError = 0, kOk = 1, kEnd = 2;

    bool ended = false;
    int64_t batches, samples, base_samples, num_yielded = 0;
    py::object key;   // the DistSampler's (epoch, start) the counts are from
    // The epoch's Python worker threads; the slots (readers, buffers) its
    // workers took; the loader's pool of slots (Slots); owns: the consumer
    // took the slots (native threads, no workers) and gives them back at
    // shutdown; on_end: see iter_next().
    py::list threads, slots;
    py::object pool, on_end;
    bool owns = false;
    bool stopped() const { return stop_; }
    py::object pipe() const { return pipe_obj_; }

private:
    struct Res {
        int kind;
        py::object data;
        Events events;
    };
    void put_index();
    void put(int64_t seq, Res res, double t0, double t1, double collate, double pin,
             int worker);
    bool take(Res *res);
    bool take_pipe(Res *res);
    [[noreturn]] void raise(const py::object &exc);

    py::object sampler_, stats_obj_, pipe_obj_, fetch_, timeout_text_;
    Stats *stats_;
    Pipeline *pipe_ = nullptr;
    int workers_;
    bool in_order_, auto_, gpu_;
    double timeout_;
    uint64_t help_;
    int64_t send_ = 0, rcvd_ = 0, outstanding_ = 0, last_key_ = -1;
    bool exhausted_ = false, report_due_ = false, reported_ = false;
    std::map<int64_t, int64_t> sizes_;
    std::map<int64_t, py::object> submit_errs_;
    std::mutex mu_;
    std::condition_variable cv_tasks_, cv_results_;
    std::deque<std::pair<int64_t, py::object>> tasks_;
    std::map<int64_t, Res> results_;
    py::object err_;
    bool stop_ = false;
    bool given_ = false, closed_ = false;
};

// A ThreadDataLoader's worker slots, reused across epochs: per worker its
// thread readers (`open`: the datasets to open one for, with
// d.ddstore.open_reader()) and its reuse_buffers set (alloc(batch_size), or
// None; release(bufs) unregisters it).  A slot is taken by one epoch's
// worker and given back when that worker is done.
class Slot {
public:
    py::list readers;                  // [(dataset, reader)]
    py::object bufs = py::none();      // the reuse_buffers set, or None
};
class Slots {
public:
    Slots(py::list open, py::object alloc, py::object release, int64_t batch_size);
    // A free slot with readers (or without: readers false), made when none
    // is free; its buffers allocated if it has none.  GIL held.
    py::object take(bool readers);
    void give(py::object slot);
    // close(): the buffer sets of `slots` that are back in the pool
    // unregistered (one taken again belongs to another epoch); all (loader
    // close()): every slot's, and its readers closed.
    void release(py::list slots);
    void close();
    py::list all() const { return all_; }

private:
    bool is_free(py::handle slot) const;
    void free_slot(Slot &s, bool readers);
    py::list open_, all_, free_;
    py::object alloc_, release_;
    int64_t batch_size_;
};

// The ThreadDataLoader classes and functions of the module (module.cpp).
void def_loader(py::module_ &m);

// ThreadDataLoader.state_dict(): the dict of `progress` (.batches,
// .samples, .base_samples, .key: the DistSampler's (epoch, start) they count
// from) with `sampler`'s state (a DistSampler, or None: the batches to
// skip); ValueError for an iterable dataset or an unordered epoch.
py::dict loader_state(py::object progress, py::object sampler, bool iterable, bool ordered);
// load_state_dict(): `state` checked (ValueError naming the field) and
// loaded into `sampler` (a DistSampler, or None, `other` then naming the
// loader's sampler type): (batches to skip, batches, samples, key).
py::tuple loader_load_state(py::handle state, py::object sampler, const std::string &other);
// DataLoader's arguments a ThreadDataLoader checks itself: the prefetch
// factor (2 by default with workers, None without), or ValueError.
py::object loader_args(int64_t workers, py::object prefetch, bool persistent,
                       bool mp_context, bool iterable);

}  // namespace ddstore_torch
