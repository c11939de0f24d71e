// ddstore-torch: one epoch of ThreadDataLoader, the consumer's side (see
// loader.h).  The batches go one of three ways:
//
//   native pipeline  the direct collate of host batches: submit() to the
//                    Pipeline, whose worker threads read without the GIL;
//                    take_into() hands them back (pipeline.cpp).
//   Python workers   a user dataset or collate_fn: the worker threads (in
//                    Python: they call the user's code) wait in get_task()
//                    with the GIL released and put() each batch back.
//   no workers       next() calls `fetch(index)` (Python) in the caller.
//
// Everything between (sampler draws, sequence numbers, in-order delivery,
// the prefetch depth, error routing, the timeout, the counts behind
// state_dict and the epoch's figures) is here, in one call per batch.
#include "loader.h"

#include <chrono>

namespace ddstore_torch {

namespace {
double now_s() { return static_cast<double>(now_ns()) * 1e-9; }
constexpr double kPoll = 0.5;   // seconds between checks that the workers live
}  // namespace

Batches::Batches(py::object sampler_iter, py::object stats, int workers, bool in_order,
                 double timeout, py::object timeout_text, bool auto_collation, py::object pipe,
                 uint64_t help, py::object fetch, py::object alive, py::object wait_events,
                 int64_t batches0, int64_t samples0)
    : batches(batches0), samples(samples0), base_samples(samples0), key(py::none()),
      sampler_(std::move(sampler_iter)), stats_obj_(std::move(stats)),
      pipe_obj_(std::move(pipe)), fetch_(std::move(fetch)), alive_(std::move(alive)),
      wait_events_(std::move(wait_events)), timeout_text_(std::move(timeout_text)),
      workers_(workers), in_order_(in_order), auto_(auto_collation), timeout_(timeout),
      help_(help)
{
    stats_ = stats_obj_.cast<Stats *>();
    if (!pipe_obj_.is_none())
        pipe_ = pipe_obj_.cast<Pipeline *>();
}

[[noreturn]] void Batches::raise(const py::object &exc)
{
    PyObject *v = exc.ptr();
    Py_INCREF(Py_TYPE(v));
    Py_INCREF(v);
    PyErr_Restore(reinterpret_cast<PyObject *>(Py_TYPE(v)), v, PyException_GetTraceback(v));
    throw py::error_already_set();
}

// The next index from the sampler, submitted (the prefetch keeps
// workers * prefetch_factor batches in flight).
void Batches::put_index()
{
    if (exhausted_)
        return;
    PyObject *idx = PyIter_Next(sampler_.ptr());
    if (idx == nullptr) {
        if (PyErr_Occurred())
            throw py::error_already_set();
        exhausted_ = true;
        return;
    }
    py::object index = py::reinterpret_steal<py::object>(idx);
    int64_t n = 1;
    if (auto_) {
        const Py_ssize_t len = PyObject_Length(idx);
        if (len < 0)
            throw py::error_already_set();
        n = len;
    }
    const int64_t seq = send_;
    sizes_[seq] = n;
    if (pipe_ != nullptr) {
        try {
            pipe_->submit(seq, index);
        } catch (py::error_already_set &e) {   // raised when this batch is due
            submit_errs_[seq] = e.value();
        }
    } else {
        {
            std::lock_guard<std::mutex> g(mu_);
            tasks_.emplace_back(seq, std::move(index));
        }
        cv_tasks_.notify_one();
    }
    send_ += 1;
    outstanding_ += 1;
}

void Batches::prime(int64_t n)
{
    for (int64_t i = 0; i < n; ++i)
        put_index();
}

size_t Batches::ready()
{
    if (pipe_ != nullptr)
        return pipe_->ready();
    std::lock_guard<std::mutex> g(mu_);
    return results_.size();
}

size_t Batches::pending()
{
    const size_t piped = pipe_ != nullptr ? pipe_->ready() : 0;
    std::lock_guard<std::mutex> g(mu_);
    return piped + results_.size() + tasks_.size();
}

// The native pipeline's next result; false when none is outstanding.
bool Batches::take_pipe(int *kind, py::object *data)
{
    const double deadline = timeout_ > 0 ? now_s() + timeout_ : 0;
    Pipeline::Taken r;
    for (;;) {
        if (!submit_errs_.empty()) {
            auto it = in_order_ ? submit_errs_.find(rcvd_) : submit_errs_.begin();
            if (it != submit_errs_.end()) {
                r.key = it->first;
                r.ok = false;
                r.data = std::move(it->second);
                r.t0 = -1;
                submit_errs_.erase(it);
                break;
            }
        }
        if (outstanding_ == 0)
            return false;
        if (err_)
            raise(err_);
        const double wait = deadline == 0 ? kPoll : std::max(0.0, std::min(kPoll, deadline - now_s()));
        if (pipe_->take_into(wait, in_order_ ? rcvd_ : -1, help_, &r))
            break;
        if (!alive_.is_none() && !alive_().cast<bool>())
            throw_py(PyExc_RuntimeError, "ThreadDataLoader: worker threads exited unexpectedly");
        if (deadline != 0 && now_s() >= deadline)
            throw_py(PyExc_RuntimeError, "DataLoader timed out after " +
                                             py::str(timeout_text_).cast<std::string>() +
                                             " seconds");
    }
    if (r.t0 >= 0)
        stats_->add_fetch(r.t0, r.t1, 0.0, 0.0, r.worker);
    last_key_ = r.key;
    *kind = r.ok ? kOk : kError;
    *data = std::move(r.data);
    return true;
}

// The next result of the Python worker threads; false when none is
// outstanding.
bool Batches::take(int *kind, py::object *data, py::object *events)
{
    if (pipe_ != nullptr)
        return take_pipe(kind, data);
    const double deadline = timeout_ > 0 ? now_s() + timeout_ : 0;
    Res res;
    int64_t key = -1;
    for (;;) {
        bool timed_out = false;
        {
            py::gil_scoped_release nogil;
            std::unique_lock<std::mutex> g(mu_);
            auto found = [&] {
                return in_order_ ? results_.count(rcvd_) > 0 : !results_.empty();
            };
            if (!found() && outstanding_ > 0) {
                const double wait = deadline == 0 ? kPoll
                                                  : std::max(0.0, std::min(kPoll, deadline - now_s()));
                timed_out = !cv_results_.wait_for(g, std::chrono::duration<double>(wait), found);
            }
            if (found()) {
                auto it = in_order_ ? results_.find(rcvd_) : results_.begin();
                key = it->first;
                res = std::move(it->second);   // (moves no reference count)
                results_.erase(it);
            }
        }
        if (key >= 0)
            break;
        if (outstanding_ == 0)
            return false;
        if (timed_out && !alive_.is_none() && !alive_().cast<bool>())
            throw_py(PyExc_RuntimeError, "ThreadDataLoader: worker threads exited unexpectedly");
        if (deadline != 0 && now_s() >= deadline)
            throw_py(PyExc_RuntimeError, "DataLoader timed out after " +
                                             py::str(timeout_text_).cast<std::string>() +
                                             " seconds");
    }
    last_key_ = key;
    *kind = res.kind;
    *data = std::move(res.data);
    *events = std::move(res.events);
    return true;
}

py::object Batches::next()
{
    const double t = stats_->enter(workers_ ? static_cast<int64_t>(ready()) : 0);
    py::object data;
    int64_t n = 0;
    try {
        if (ended)
            throw py::stop_iteration();
        if (workers_ == 0) {
            PyObject *idx = PyIter_Next(sampler_.ptr());
            if (idx == nullptr) {
                if (PyErr_Occurred())
                    throw py::error_already_set();
                ended = true;
                throw py::stop_iteration();
            }
            py::object index = py::reinterpret_steal<py::object>(idx);
            const double t0 = now_s();
            py::tuple r;
            try {
                r = fetch_(index);
            } catch (py::error_already_set &e) {
                if (e.matches(PyExc_StopIteration)) {   // an iterable dataset's end
                    ended = true;
                    throw py::stop_iteration();
                }
                throw;
            }
            stats_->add_fetch(t0, now_s(), r[1].cast<double>(), r[2].cast<double>(), 0);
            data = r[0];
            if (auto_) {
                const Py_ssize_t len = PyObject_Length(idx);
                if (len < 0)
                    throw py::error_already_set();
                n = len;
            } else {
                n = 1;
            }
        } else {
            int kind = kOk;
            py::object events;
            if (!take(&kind, &data, &events) || kind == kEnd) {
                if (kind == kEnd)
                    exhausted_ = true;
                ended = true;
                throw py::stop_iteration();
            }
            if (in_order_)
                rcvd_ += 1;
            outstanding_ -= 1;
            auto sz = sizes_.find(last_key_);
            if (sz != sizes_.end()) {
                n = sz->second;
                sizes_.erase(sz);
            }
            if (kind == kError) {
                ended = true;
                raise(data);
            }
            if (events && !events.is_none())   // (the pipeline's batches have none)
                wait_events_(data, events);
            put_index();
        }
    } catch (py::stop_iteration &) {
        if (stats_->leave(t, Stats::kEnd))
            report_due_ = true;
        throw;
    } catch (...) {
        stats_->leave(t, Stats::kRaised);
        throw;
    }
    stats_->leave(t, n);
    num_yielded += 1;
    batches += 1;
    samples += n;
    return data;
}

bool Batches::report_due()
{
    const bool due = report_due_ && !reported_;
    reported_ = reported_ || due;
    return due;
}

py::object Batches::get_task()
{
    std::pair<int64_t, py::object> t;
    bool stopped;
    {
        py::gil_scoped_release nogil;
        std::unique_lock<std::mutex> g(mu_);
        cv_tasks_.wait(g, [&] { return stop_ || !tasks_.empty(); });
        stopped = stop_;
        if (!stopped) {
            t = std::move(tasks_.front());   // (moves no reference count)
            tasks_.pop_front();
        }
    }
    if (stopped)
        return py::none();
    return py::make_tuple(t.first, std::move(t.second));
}

void Batches::put(int64_t seq, int kind, py::object data, py::object events, double t0,
                  double t1, double collate, double pin, int worker)
{
    if (t0 >= 0)
        stats_->add_fetch(t0, t1, collate, pin, worker);
    {
        std::lock_guard<std::mutex> g(mu_);
        if (stop_)
            return;   // (data dropped after the lock, with the GIL)
        results_[seq] = Res{kind, std::move(data), std::move(events)};
    }
    cv_results_.notify_all();
}

void Batches::fail(py::object err)
{
    {
        std::lock_guard<std::mutex> g(mu_);
        err_ = std::move(err);
    }
    if (pipe_ != nullptr)
        pipe_->stop();   // wakes the consumer: it raises err_
    cv_results_.notify_all();
}

void Batches::stop()
{
    {
        std::lock_guard<std::mutex> g(mu_);
        stop_ = true;
    }
    if (pipe_ != nullptr)
        pipe_->stop();
    cv_tasks_.notify_all();
    cv_results_.notify_all();
}

void Batches::clear()
{
    std::deque<std::pair<int64_t, py::object>> tasks;
    std::map<int64_t, Res> results;
    {
        std::lock_guard<std::mutex> g(mu_);
        tasks.swap(tasks_);
        results.swap(results_);
    }
    submit_errs_.clear();
    sizes_.clear();
    // the sampler's iterator is dropped (a generator's finally runs now:
    // DistSampler counts its running iterators)
    sampler_ = py::reinterpret_steal<py::object>(PyObject_GetIter(py::tuple().ptr()));
    outstanding_ = 0;
    exhausted_ = true;
    ended = true;
}

namespace {
const char *const kStateFormat = "ddstore.ThreadDataLoader";
constexpr int kStateVersion = 1;

std::string repr_of(py::handle h) { return py::repr(h).cast<std::string>(); }

bool differs(py::handle a, py::handle b)
{
    const int ne = PyObject_RichCompareBool(a.ptr(), b.ptr(), Py_NE);
    if (ne < 0)
        throw py::error_already_set();
    return ne != 0;
}
}  // namespace

py::dict loader_state(py::object batches, py::object samples, py::object sampler)
{
    py::dict d;
    d["format"] = kStateFormat;
    d["version"] = kStateVersion;
    d["batches_yielded"] = batches;
    d["samples_yielded"] = samples;
    d["sampler"] = sampler;
    return d;
}

py::tuple loader_state_check(py::handle state)
{
    auto bad = [](const std::string &m) {
        throw_py(PyExc_ValueError, "ThreadDataLoader state: " + m);
    };
    if (!PyDict_Check(state.ptr()))
        bad("expected a dict, got " +
            py::str(py::type::handle_of(state).attr("__name__")).cast<std::string>());
    py::dict d = py::reinterpret_borrow<py::dict>(state);
    for (const char *k : {"format", "version", "batches_yielded", "samples_yielded", "sampler"})
        if (!d.contains(k))
            bad(std::string("field '") + k + "' is missing");
    if (differs(d["format"], py::str(kStateFormat)))
        bad("field 'format' is " + repr_of(d["format"]) + ", expected '" + kStateFormat + "'");
    if (differs(d["version"], py::int_(kStateVersion)))
        bad("field 'version' is " + repr_of(d["version"]) + ", this pyddstore reads " +
            std::to_string(kStateVersion));
    for (const char *k : {"batches_yielded", "samples_yielded"}) {
        py::object v = d[k];
        if (PyBool_Check(v.ptr()) || !PyLong_Check(v.ptr()) ||
            PyObject_RichCompareBool(v.ptr(), py::int_(0).ptr(), Py_LT) == 1)
            bad(std::string("field '") + k + "' must be an int >= 0, got " + repr_of(v));
    }
    return py::make_tuple(d["batches_yielded"], d["samples_yielded"], d["sampler"]);
}

}  // namespace ddstore_torch
