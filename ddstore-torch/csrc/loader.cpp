// ddstore-torch: one epoch of ThreadDataLoader, the consumer's side (see
// loader.h).  The batches go one of three ways:
//
//   native pipeline  the direct collate of host batches: submit() to the
//                    Pipeline, whose C++ worker threads read without the
//                    GIL; take_into() hands them back (pipeline.cpp).
//   Python workers   a user dataset or collate_fn: the worker threads (in
//                    Python: they call the user's code) run work(): they
//                    wait for a task with the GIL released, call fetch and
//                    put the batch back (GPU batches with their events).
//   no workers       next() calls `fetch(index)` (Python) in the caller.
//
// Everything between (sampler draws, sequence numbers, in-order delivery,
// the prefetch depth, error routing, the timeout, the counts behind
// state_dict and the epoch's figures) is here, in one call per batch.
#include "loader.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <chrono>

namespace ddstore_torch {

namespace {
constexpr double kPoll = 0.5;   // seconds between checks that the workers live
}  // namespace

Batches::Batches(py::object sampler_iter, py::object stats, int workers, bool in_order,
                 double timeout, py::object timeout_text, bool auto_collation, py::object pipe,
                 uint64_t help, py::object fetch, bool gpu, int64_t batches0,
                 int64_t samples0)
    : batches(batches0), samples(samples0), base_samples(samples0), key(py::none()),
      sampler_(std::move(sampler_iter)), stats_obj_(std::move(stats)),
      pipe_obj_(std::move(pipe)), fetch_(std::move(fetch)),
      timeout_text_(std::move(timeout_text)), workers_(workers), in_order_(in_order),
      auto_(auto_collation), gpu_(gpu), timeout_(timeout), help_(help)
{
    stats_ = stats_obj_.cast<Stats *>();
    if (!pipe_obj_.is_none())
        pipe_ = pipe_obj_.cast<Pipeline *>();
}

py::object fetch_error()
{
    PyObject *t = nullptr, *v = nullptr, *tb = nullptr;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (tb != nullptr) {
        PyException_SetTraceback(v, tb);
        Py_DECREF(tb);
    }
    Py_XDECREF(t);
    return py::reinterpret_steal<py::object>(v);
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
bool Batches::take_pipe(Res *res)
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
        py::object perr = pipe_->error();   // a worker's worker_init_fn raised
        if (!perr.is_none())
            raise(perr);
        if (stop_)   // (the pipeline stopped: nothing will come)
            throw_py(PyExc_RuntimeError, "ThreadDataLoader: the epoch's worker threads were "
                                         "stopped (loader.close()) before it ended");
        if (deadline != 0 && now_s() >= deadline)
            throw_py(PyExc_RuntimeError, "DataLoader timed out after " +
                                             py::str(timeout_text_).cast<std::string>() +
                                             " seconds");
    }
    if (r.t0 >= 0)
        stats_->add_fetch(r.t0, r.t1, 0.0, 0.0, r.worker);
    last_key_ = r.key;
    res->kind = r.ok ? kOk : kError;
    res->data = std::move(r.data);
    return true;
}

// The next result of the Python worker threads; false when none is
// outstanding.
bool Batches::take(Res *out)
{
    if (pipe_ != nullptr)
        return take_pipe(out);
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
        if (timed_out && !threads.empty() && alive().empty())
            throw_py(PyExc_RuntimeError, "ThreadDataLoader: worker threads exited unexpectedly");
        if (deadline != 0 && now_s() >= deadline)
            throw_py(PyExc_RuntimeError, "DataLoader timed out after " +
                                             py::str(timeout_text_).cast<std::string>() +
                                             " seconds");
    }
    last_key_ = key;
    *out = std::move(res);
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
            Res res{kOk, py::object(), Events()};
            const bool got = take(&res);
            if (!got || res.kind == kEnd) {
                if (got)
                    exhausted_ = true;
                ended = true;
                throw py::stop_iteration();
            }
            data = std::move(res.data);
            if (in_order_)
                rcvd_ += 1;
            outstanding_ -= 1;
            auto sz = sizes_.find(last_key_);
            if (sz != sizes_.end()) {
                n = sz->second;
                sizes_.erase(sz);
            }
            if (res.kind == kError) {
                ended = true;
                raise(data);
            }
            if (!res.events.empty())   // (host batches and the pipeline's have none)
                wait_events(data, res.events);
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

void Batches::work(int worker, py::object fetch, py::object slot, py::object err)
{
    for (;;) {
        std::pair<int64_t, py::object> t;
        {
            py::gil_scoped_release nogil;
            std::unique_lock<std::mutex> g(mu_);
            cv_tasks_.wait(g, [&] { return stop_ || !tasks_.empty(); });
            if (stop_)
                break;   // (t holds nothing: released without the GIL is fine)
            t = std::move(tasks_.front());   // (moves no reference count)
            tasks_.pop_front();
        }
        if (!err.is_none()) {
            put(t.first, Res{kError, err, Events()}, -1.0, -1.0, 0.0, 0.0, worker);
            continue;
        }
        Res res{kOk, py::object(), Events()};
        double c = 0, p = 0;
        const double t0 = now_s();
        PyObject *r = PyObject_CallFunctionObjArgs(fetch.ptr(), t.second.ptr(), slot.ptr(),
                                                   nullptr);
        if (r != nullptr) {
            py::tuple tup = py::reinterpret_steal<py::tuple>(r);
            res.data = tup[0];
            c = tup[1].cast<double>();
            p = tup[2].cast<double>();
            if (gpu_) {
                try {
                    res.events = record_events(res.data);
                } catch (py::error_already_set &e) {
                    e.restore();
                    r = nullptr;
                }
            }
        }
        if (r == nullptr) {
            res.events.clear();
            if (PyErr_ExceptionMatches(PyExc_StopIteration)) {   // an iterable's end
                PyErr_Clear();
                res.kind = kEnd;
                res.data = py::none();
            } else {
                res.kind = kError;
                res.data = fetch_error();
            }
        }
        put(t.first, std::move(res), t0, now_s(), c, p, worker);
    }
}

void Batches::put(int64_t seq, Res res, double t0, double t1, double collate, double pin,
                  int worker)
{
    if (t0 >= 0)
        stats_->add_fetch(t0, t1, collate, pin, worker);
    {
        std::lock_guard<std::mutex> g(mu_);
        if (stop_)
            return;   // (res dropped after the lock, with the GIL)
        results_[seq] = std::move(res);
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

void Batches::shutdown(bool join)
{
    if (!stop_)
        stop();
    if (join) {
        py::object me = py::module_::import("threading").attr("current_thread")();
        for (py::handle t : threads)
            if (!t.is(me))
                t.attr("join")();
        if (pipe_ != nullptr)
            pipe_->join();
    }
    // the consumer's slots go back once its threads are joined (none: now)
    if (owns && !given_ && pool && !pool.is_none() && (join || workers_ == 0)) {
        given_ = true;
        for (py::handle slot : slots)
            pool.cast<Slots &>().give(py::reinterpret_borrow<py::object>(slot));
    }
}

py::object Batches::iter_next()
{
    try {
        return next();
    } catch (py::stop_iteration &) {
        shutdown(workers_ > 0);   // idle threads: returns at once
        if (report_due() && on_end && !on_end.is_none()) {
            py::object f = on_end();   // (a weak method: None once the loader is gone)
            if (!f.is_none())
                f(stats_obj_);
        }
        throw;
    } catch (py::error_already_set &) {
        if (ended)   // a batch's error: the epoch ends
            shutdown(false);
        throw;
    }
}

void Batches::close()
{
    if (closed_)
        return;
    closed_ = true;
    shutdown(true);
    clear();   // drops the prefetched batches, the sampler
    if (pool && !pool.is_none())
        pool.cast<Slots &>().release(slots);
    slots = py::list();
}

void Batches::serve_worker(int worker, py::object fetch, int cpu, py::object init)
{
    pin_cpu(cpu);
    py::object slot = py::none(), err = py::none();
    try {
        slot = pool.cast<Slots &>().take(true);
        slots.append(slot);
        for (py::handle r : slot.cast<Slot &>().readers)
            r[py::int_(0)].attr("_bind_reader")(r[py::int_(1)]);
        if (!init.is_none())
            init(worker);
    } catch (py::error_already_set &e) {   // raised by every batch
        e.restore();
        err = fetch_error();
    }
    auto done = [&] {
        if (slot.is_none())
            return;
        for (py::handle r : slot.cast<Slot &>().readers)
            r[py::int_(0)].attr("_bind_reader")(py::none());
        pool.cast<Slots &>().give(slot);
    };
    try {
        work(worker, std::move(fetch), slot, err);
    } catch (...) {
        done();
        throw;
    }
    done();
}

void Batches::start_native(py::object ds, std::vector<int> cpus, py::object init)
{
    owns = true;
    try {
        for (int w = 0; w < workers_; ++w)
            slots.append(pool.cast<Slots &>().take(true));
    } catch (py::error_already_set &e) {   // raised by the first next()
        e.restore();
        fail(fetch_error());
        return;
    }
    py::list readers;
    for (py::handle h : slots) {
        py::object reader = py::none();
        for (py::handle r : h.cast<Slot &>().readers)   // (dataset, reader) tuples
            if (PyTuple_GET_ITEM(r.ptr(), 0) == ds.ptr())
                reader = py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(r.ptr(), 1));
        readers.append(reader.is_none() ? ds.attr("_reader")() : reader);
    }
    pipe_->start(readers, std::move(cpus), std::move(init));
}

py::list Batches::alive()
{
    py::list names;
    for (py::handle t : threads)
        if (t.attr("is_alive")().cast<bool>())
            names.append(t.attr("name"));
    for (size_t k = pipe_ != nullptr ? pipe_->alive() : 0; k > 0; --k)
        names.append("native");
    return names;
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
// f(tensor) for every tensor of a batch (dicts, lists, tuples, namedtuples)
template <class F>
void each_tensor(py::handle d, F &&f)
{
    PyObject *o = d.ptr();
    if (THPVariable_Check(o)) {
        f(THPVariable_Unpack(o));
    } else if (PyDict_Check(o)) {
        for (auto kv : py::reinterpret_borrow<py::dict>(d))
            each_tensor(kv.second, f);
    } else if (PyList_Check(o) || PyTuple_Check(o)) {
        for (py::handle v : d)
            each_tensor(v, f);
    }
}
}  // namespace

// In the worker: one event per device after the reads and the collate
// queued on this thread's current stream.  None for host batches.
Events record_events(py::handle data)
{
    std::vector<c10::Device> devs;
    each_tensor(data, [&](const at::Tensor &t) {
        if (t.is_cuda() && std::find(devs.begin(), devs.end(), t.device()) == devs.end())
            devs.push_back(t.device());
    });
    Events events;
    if (devs.empty())
        return events;
    const c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
    for (const auto &d : devs) {
        events.emplace_back(c10::DeviceType::CUDA);
        events.back().record(impl.getStream(d));
    }
    return events;
}

// In the consumer: its current stream waits for the worker's work (on the
// device, the host does not wait), and the caching allocator learns that
// the batch is used on that stream (so its memory is not reused by the
// worker's stream while the consumer's kernels still read it).
void wait_events(py::handle data, Events &events)
{
    const c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
    std::vector<c10::Stream> streams;
    for (auto &ev : events) {
        const c10::Stream s =
            impl.getStream(c10::Device(c10::DeviceType::CUDA, ev.device_index()));
        ev.block(s);
        streams.push_back(s);
    }
    each_tensor(data, [&](const at::Tensor &t) {
        if (!t.is_cuda())
            return;
        for (const auto &s : streams)
            if (s.device() == t.device()) {
                t.record_stream(s);
                break;
            }
    });
}

py::object copy_batch(py::handle d)
{
    PyObject *o = d.ptr();
    if (THPVariable_Check(o))
        return d.attr("clone")();
    if (PyDict_Check(o)) {
        py::dict r;
        for (auto kv : py::reinterpret_borrow<py::dict>(d))
            r[kv.first] = copy_batch(kv.second);
        return std::move(r);
    }
    if (PyList_Check(o) || PyTuple_Check(o)) {
        py::list xs;
        for (py::handle v : d)
            xs.append(copy_batch(v));
        py::handle type = py::type::handle_of(d);
        if (PyTuple_Check(o) && py::hasattr(d, "_fields"))   // a namedtuple
            return type(*xs);
        return type(xs);
    }
    if (py::hasattr(d, "copy"))
        return d.attr("copy")();
    return py::reinterpret_borrow<py::object>(d);
}

namespace {
const char *const kLoaderStateFormat = "ddstore.ThreadDataLoader";
constexpr int kLoaderStateVersion = 1;


bool differs(py::handle a, py::handle b)
{
    const int ne = PyObject_RichCompareBool(a.ptr(), b.ptr(), Py_NE);
    if (ne < 0)
        throw py::error_already_set();
    return ne != 0;
}
}  // namespace

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
    if (differs(d["format"], py::str(kLoaderStateFormat)))
        bad("field 'format' is " + repr_of(d["format"]) + ", expected '" + kLoaderStateFormat + "'");
    if (differs(d["version"], py::int_(kLoaderStateVersion)))
        bad("field 'version' is " + repr_of(d["version"]) + ", this pyddstore reads " +
            std::to_string(kLoaderStateVersion));
    for (const char *k : {"batches_yielded", "samples_yielded"}) {
        py::object v = d[k];
        if (PyBool_Check(v.ptr()) || !PyLong_Check(v.ptr()) ||
            PyObject_RichCompareBool(v.ptr(), py::int_(0).ptr(), Py_LT) == 1)
            bad(std::string("field '") + k + "' must be an int >= 0, got " + repr_of(v));
    }
    return py::make_tuple(d["batches_yielded"], d["samples_yielded"], d["sampler"]);
}

namespace {
py::dict state_dict_of(py::object batches, py::object samples, py::object sampler)
{
    py::dict d;
    d["format"] = kLoaderStateFormat;
    d["version"] = kLoaderStateVersion;
    d["batches_yielded"] = batches;
    d["samples_yielded"] = samples;
    d["sampler"] = sampler;
    return d;
}

py::tuple sampler_key(py::handle ds) { return py::make_tuple(ds.attr("epoch"), ds.attr("_start")); }
}  // namespace

py::dict loader_state(py::object pr, py::object ds, bool iterable, bool ordered)
{
    if (iterable)
        throw_py(PyExc_ValueError, "ThreadDataLoader.state_dict needs a map-style dataset "
                                   "(an IterableDataset keeps its own position)");
    if (!ordered)
        throw_py(PyExc_ValueError, "ThreadDataLoader.state_dict needs in_order=True with "
                                   "worker threads (batches delivered out of order are not "
                                   "a prefix)");
    py::object batches = pr.attr("batches"), samples = pr.attr("samples");
    if (ds.is_none())
        return state_dict_of(batches, samples, py::none());
    if (differs(pr.attr("key"), sampler_key(ds)))   // set_epoch() since: a new epoch
        return state_dict_of(py::int_(0), py::int_(0),
                             ds.attr("state_dict")(py::arg("consumed") = 0));
    py::object consumed = samples - pr.attr("base_samples");
    return state_dict_of(batches, samples, ds.attr("state_dict")(py::arg("consumed") = consumed));
}

py::tuple loader_load_state(py::handle state, py::object ds, const std::string &other)
{
    py::tuple t = loader_state_check(state);
    py::object sst = t[2];
    if (sst.is_none() != ds.is_none())
        throw_py(PyExc_ValueError,
                 std::string("ThreadDataLoader state: field 'sampler' is ") +
                     (sst.is_none() ? "None" : "a DistSampler state") +
                     ", but this loader's sampler is " + other);
    if (ds.is_none())
        return py::make_tuple(t[0], t[0], t[1], py::none());
    ds.attr("load_state_dict")(sst);
    return py::make_tuple(0, t[0], t[1], sampler_key(ds));
}

py::object loader_args(int64_t workers, py::object prefetch, bool persistent, bool mp_context,
                       bool iterable)
{
    auto bad = [](const char *m) { throw_py(PyExc_ValueError, m); };
    if (workers < 0)
        bad("num_workers option should be non-negative; use num_workers=0 to read in the "
            "calling thread");
    if (workers == 0 && !prefetch.is_none())
        bad("prefetch_factor needs num_workers > 0");
    if (workers > 0 && prefetch.is_none())
        prefetch = py::int_(2);
    if (!prefetch.is_none() && prefetch.cast<int64_t>() < 1)
        bad("prefetch_factor must be >= 1 with worker threads");
    if (persistent && workers == 0)
        bad("persistent_workers option needs num_workers > 0");
    if (mp_context)
        bad("ThreadDataLoader uses threads: multiprocessing_context does not apply");
    if (iterable && workers > 1)
        bad("ThreadDataLoader: an IterableDataset can use at most one worker thread");
    return prefetch;
}

}  // namespace ddstore_torch
