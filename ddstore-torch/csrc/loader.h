// ddstore-torch: ThreadDataLoader's per-batch work (loader.cpp) and its
// epoch figures (report.cpp).  Python keeps what only Python can do:
// calling the user's dataset and collate_fn, starting threads, the
// iterator protocol, the communicator's collective, logging and plotting.
#pragma once

#include "ddstore_torch.h"

#include <deque>

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

// One epoch of a ThreadDataLoader, the consumer's side: draws from the
// sampler, submits the batches (to the native Pipeline or to Python worker
// threads through get_task()/put()), takes them in order (or as they come),
// routes errors, counts what was delivered and keeps the Stats.  next() is
// the whole of __next__ but the end-of-epoch Python work (threads joined,
// the report) which Python does when it raises.
class Batches {
public:
    Batches(py::object sampler_iter, py::object stats, int workers, bool in_order,
            double timeout, py::object timeout_text, bool auto_collation, py::object pipe,
            uint64_t help, py::object fetch, py::object alive, py::object wait_events,
            int64_t batches0, int64_t samples0);
    void prime(int64_t n);
    py::object next();
    // Python worker threads: (seq, index) or None once stopped; a result.
    py::object get_task();
    void put(int64_t seq, int kind, py::object data, py::object events, double t0, double t1,
             double collate, double pin, int worker);
    void fail(py::object err);   // a worker's set-up error, raised by next()
    void stop();                 // wakes every thread; the pipeline stops
    void clear();                // close(): drops tasks and results
    size_t ready();
    size_t pending();            // results and tasks held (close() drops them)
    bool report_due();           // true once, after the epoch's end
    static constexpr int kError = 0, kOk = 1, kEnd = 2;

    bool ended = false;
    int64_t batches, samples, base_samples, num_yielded = 0;
    py::object key;   // the DistSampler's (epoch, start) the counts are from

private:
    struct Res {
        int kind;
        py::object data, events;
    };
    void put_index();
    bool take(int *kind, py::object *data, py::object *events);
    bool take_pipe(int *kind, py::object *data);
    [[noreturn]] void raise(const py::object &exc);

    py::object sampler_, stats_obj_, pipe_obj_, fetch_, alive_, wait_events_, timeout_text_;
    Stats *stats_;
    Pipeline *pipe_ = nullptr;
    int workers_;
    bool in_order_, auto_;
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
};

// ThreadDataLoader.state_dict()'s dict, and load_state_dict()'s checks of
// one: (batches_yielded, samples_yielded, sampler) or ValueError naming the
// field.
py::dict loader_state(py::object batches, py::object samples, py::object sampler);
py::tuple loader_state_check(py::handle state);

}  // namespace ddstore_torch
