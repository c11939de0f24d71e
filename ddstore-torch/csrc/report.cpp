// ddstore-torch: ThreadDataLoader's epoch figures and their text (the
// computation behind pyddstore/torch/report.py, which documents them).
#include "loader.h"

#include <array>
#include <cmath>
#include <cstring>
#include <cstdarg>
#include <cstdio>

namespace ddstore_torch {

namespace {
// DistDataset.get_profile() counters that split the store's read time
const char *const kReadNs[] = {"lock_wait_ns", "register_ns", "post_ns", "complete_ns",
                               "gpu_sync_ns", "other_ns", "total_ns"};
const char *const kReadCount[] = {"calls", "rows", "bytes", "local_bytes", "reads"};

double round6(double x) { return std::nearbyint(x * 1e6) / 1e6; }

__attribute__((format(printf, 1, 2))) std::string fmt(const char *f, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return buf;
}

double num(const py::dict &d, const char *k, double dflt = 0.0)
{
    if (!d.contains(k))
        return dflt;
    const double v = PyFloat_AsDouble(py::object(d[k]).ptr());
    if (v == -1.0 && PyErr_Occurred())
        throw py::error_already_set();
    return v;
}

std::string str(const py::dict &d, const char *k)
{
    return py::str(d.contains(k) ? py::object(d[k]) : py::object(py::int_(0)));
}
}  // namespace

Stats::Stats(int64_t index, int workers, int64_t depth, py::object t0, py::object profile)
    : index_(index), workers_(workers), depth_(depth),
      t0_(t0.is_none() ? now_s() : t0.cast<double>()), profile_fn_(std::move(profile)),
      read_(py::none())
{
    prof0_ = this->profile();
}

py::object Stats::profile() const
{
    if (profile_fn_.is_none())
        return py::none();
    py::object p;
    try {
        p = profile_fn_();
    } catch (py::error_already_set &) {   // a freed or foreign dataset: no split
        return py::none();
    }
    py::dict out;
    auto get = [&](const char *k) {
        py::object v = p.attr("get")(k, 0);
        out[k] = v;
    };
    for (const char *k : kReadNs)
        get(k);
    for (const char *k : kReadCount)
        get(k);
    return std::move(out);
}

py::object Stats::read_delta(const py::object &p1) const
{
    if (p1.is_none() || prof0_.is_none())
        return py::none();
    py::dict a = p1.cast<py::dict>(), b = prof0_.cast<py::dict>(), out;
    for (auto item : a) {
        PyObject *d = PyNumber_Subtract(item.second.ptr(), b[item.first].ptr());
        if (d == nullptr)
            throw py::error_already_set();
        out[item.first] = py::reinterpret_steal<py::object>(d);
    }
    return std::move(out);
}

double Stats::enter(int64_t ready)
{
    const double t = now_s();
    if (t_leave_ < 0)
        start_s_ = t - t0_;
    else
        compute_s_ += t - t_leave_;
    if (workers_) {
        ready_sum_ += ready;
        ready_max_ = std::max(ready_max_, ready);
        ready_min_ = ready_min_ < 0 ? ready : std::min(ready_min_, ready);
        starved_ += ready == 0;
    }
    return t;
}

bool Stats::leave(double t_enter, int64_t samples)
{
    const bool first_end = samples == kEnd && t_end_ < 0;
    if (first_end)   // (inside the last next(): counted as waiting)
        read_ = read_delta(profile());
    const double t = now_s();
    wait_s_ += t - t_enter;
    t_leave_ = t;
    if (samples == kEnd) {
        if (first_end)
            t_end_ = t;
        return first_end;
    }
    if (samples < 0)   // next() raised
        return false;
    if (batch_times_.size() == kTimeline)
        batch_times_.pop_front();
    batch_times_.emplace_back(t_enter - t0_, t - t0_);
    batches_ += 1;
    samples_ += samples;
    return false;
}

void Stats::add_fetch(double t0, double t1, double collate, double pin, int worker)
{
    std::lock_guard<std::mutex> g(mu_);
    fetch_s_ += t1 - t0;
    fetched_ += 1;
    collate_s_ += collate;
    pin_s_ += pin;
    if (fetch_times_.size() == kTimeline)
        fetch_times_.pop_front();
    fetch_times_.push_back({worker, t0 - t0_, t1 - t0_, collate + pin});
}

py::list Stats::batch_times()
{
    py::list out;
    for (const auto &b : batch_times_)
        out.append(py::make_tuple(b.first, b.second));
    return out;
}

py::list Stats::fetch_times()
{
    std::lock_guard<std::mutex> g(mu_);
    py::list out;
    for (const auto &f : fetch_times_)
        out.append(py::make_tuple(f.worker, f.start, f.end, f.cp));
    return out;
}

py::dict Stats::figures(bool timeline)
{
    const double now = t_end_ >= 0 ? t_end_ : now_s();
    const double wall = now - t0_;
    double compute = compute_s_;
    if (t_end_ < 0 && t_leave_ >= 0)
        compute += now - t_leave_;   // in progress or left: the step since
    const double b = static_cast<double>(std::max<int64_t>(batches_, 1));
    double fetch_s, collate_s, pin_s;
    int64_t fetched;
    {
        std::lock_guard<std::mutex> g(mu_);
        fetch_s = fetch_s_, collate_s = collate_s_, pin_s = pin_s_, fetched = fetched_;
    }
    py::dict d;
    d["epoch"] = index_;
    d["complete"] = t_end_ >= 0;
    d["wall_s"] = wall;
    d["start_s"] = start_s_;
    d["wait_s"] = wait_s_;
    d["compute_s"] = compute;
    d["batches"] = batches_;
    d["samples"] = samples_;
    d["wait_fraction"] = wall > 0 ? wait_s_ / wall : 0.0;
    d["wait_per_batch_ms"] = 1e3 * wait_s_ / b;
    d["compute_per_batch_ms"] = 1e3 * compute / b;
    d["workers"] = workers_;
    d["prefetch_depth"] = depth_;
    d["fetch_s"] = fetch_s;
    d["fetched"] = fetched;
    d["fetch_per_batch_ms"] = 1e3 * fetch_s / static_cast<double>(std::max<int64_t>(fetched, 1));
    d["collate_s"] = collate_s;
    d["pin_s"] = pin_s;
    if (workers_) {
        d["prefetched_mean"] = static_cast<double>(ready_sum_) / b;
        d["prefetched_min"] = ready_min_ < 0 ? 0 : ready_min_;
        d["prefetched_max"] = ready_max_;
        d["starved_batches"] = starved_;
    }
    py::object read = read_;
    if (read.is_none() && t_end_ < 0 && !prof0_.is_none())
        read = read_delta(profile());   // an epoch in progress (or left): reads so far
    if (!read.is_none()) {
        py::dict src = read.cast<py::dict>(), r;
        for (const char *k : kReadCount)
            r[k] = src[k];
        for (const char *k : kReadNs) {
            std::string s(k);
            s = s.substr(0, s.size() - 3) + "_s";
            r[s.c_str()] = py::float_(py::float_(src[k]).cast<double>() / 1e9);
        }
        // planned reads (one per variable: 1 with pack_fields) and the remote
        // reads they posted, per batch
        r["calls_per_batch"] = py::float_(src["calls"]).cast<double>() / b;
        r["reads_per_batch"] = py::float_(src["reads"]).cast<double>() / b;
        d["read"] = r;
    }
    if (timeline) {   // lists, as a JSON line gives them back
        py::list bl, fl;
        for (const auto &x : batch_times_) {
            py::list e;
            e.append(round6(x.first));
            e.append(round6(x.second));
            bl.append(e);
        }
        {
            std::lock_guard<std::mutex> g(mu_);
            for (const auto &f : fetch_times_) {
                py::list e;
                e.append(f.worker);
                e.append(round6(f.start));
                e.append(round6(f.end));
                e.append(round6(f.cp));
                fl.append(e);
            }
        }
        py::dict tl;
        tl["batches"] = bl;
        tl["fetches"] = fl;
        d["timeline"] = tl;
    }
    return d;
}

std::string report_summary(py::dict fig)
{
    const double wall = num(fig, "wall_s");
    const double w = wall != 0.0 ? wall : 1e-12;
    const bool ranked = fig.contains("ranks");
    std::string s = "ddstore loader epoch " + str(fig, "epoch") + ": " + str(fig, "batches") +
                    " batches, " + str(fig, "samples") + " samples, " + fmt("%.3f s", wall);
    if (ranked)
        s += " (rank " + str(fig, "rank") + " of " + str(fig, "ranks") + ")";
    const double wait = num(fig, "wait_s"), comp = num(fig, "compute_s");
    const double start = num(fig, "start_s");
    s += fmt("\n  waiting for data %9.3f s  %5.1f %%  (%.3f ms/batch)", wait, 100 * wait / w,
             num(fig, "wait_per_batch_ms"));
    s += fmt("\n  between batches  %9.3f s  %5.1f %%  (%.3f ms/batch)", comp, 100 * comp / w,
             num(fig, "compute_per_batch_ms"));
    s += fmt("\n  start            %9.3f s  %5.1f %%", start, 100 * start / w);
    if (num(fig, "fetched") != 0.0) {
        std::string split;
        for (const char *k : {"collate", "pin"}) {
            const std::string key = std::string(k) + "_s";
            const double v = num(fig, key.c_str());
            if (v != 0.0)
                split += (split.empty() ? "" : ", ") + fmt("%s %.3f s", k, v);
        }
        s += fmt("\n  fetching %.3f s (%.3f ms/batch", num(fig, "fetch_s"),
                 num(fig, "fetch_per_batch_ms")) +
             (split.empty() ? "" : "; of it " + split) + ")";
    }
    if (num(fig, "workers") != 0.0)
        s += "\n  workers " + str(fig, "workers") +
             fmt(": prefetched on hand mean %.1f of ", num(fig, "prefetched_mean")) +
             str(fig, "prefetch_depth") + ", " + str(fig, "starved_batches") +
             " batches found none";
    if (fig.contains("read") && !fig["read"].is_none() && py::len(fig["read"]) > 0) {
        py::dict r = fig["read"].cast<py::dict>();
        std::string parts;
        for (const char *k : {"post_s", "complete_s", "lock_wait_s", "register_s",
                              "gpu_sync_s", "other_s"}) {
            const double v = num(r, k);
            if (v != 0.0) {
                const std::string name(k, std::strlen(k) - 2);
                parts += (parts.empty() ? "" : ", ") + fmt("%s %.3f s", name.c_str(), v);
            }
        }
        s += "\n  store reads: " + parts + fmt(" (total %.3f s, ", num(r, "total_s")) +
             str(r, "rows") +
             fmt(" rows; per batch %.1f planned reads, %.1f remote reads)",
                 num(r, "calls_per_batch"), num(r, "reads_per_batch"));
    }
    if (ranked && num(fig, "ranks") > 1)
        s += "\n  slowest rank " + str(fig, "slowest_rank") +
             fmt(": waited %.3f s (mean %.3f s, spread %.3f s)", num(fig, "wait_max_s"),
                 num(fig, "wait_mean_s"), num(fig, "wait_spread_s"));
    return s;
}

namespace {
const char *const kSpreadKeys[] = {"wall_s", "wait_s", "compute_s", "fetch_s"};
}

// This rank's figures for the spread: integer nanoseconds (pyddstore's Comm
// carries ints, not floats) and the batch count.
py::list report_mine(py::dict fig)
{
    py::list out;
    for (const char *k : kSpreadKeys)
        out.append(static_cast<int64_t>(std::nearbyint(num(fig, k) * 1e9)));
    out.append(static_cast<int64_t>(num(fig, "batches")));
    return out;
}

py::dict report_spread(py::dict fig, py::list alls, int64_t rank)
{
    const size_t n = py::len(alls);
    if (n == 0)
        throw_py(PyExc_ValueError, "report spread: no ranks' figures");
    std::vector<std::array<double, 4>> v(n);
    std::vector<int64_t> nb(n);
    for (size_t i = 0; i < n; ++i) {
        py::sequence a = alls[i].cast<py::sequence>();
        for (size_t k = 0; k < 4; ++k)
            v[i][k] = static_cast<double>(a[k].cast<int64_t>()) / 1e9;
        nb[i] = a[4].cast<int64_t>();
    }
    size_t slow = 0;
    double sum = 0, lo = v[0][1];
    for (size_t i = 0; i < n; ++i) {
        if (v[i][1] > v[slow][1])
            slow = i;
        sum += v[i][1];
        lo = std::min(lo, v[i][1]);
    }
    py::dict out;
    for (auto item : fig)
        out[item.first] = item.second;
    out["rank"] = rank;
    out["ranks"] = static_cast<int64_t>(n);
    py::dict per;
    for (size_t k = 0; k < 4; ++k) {
        py::list l;
        for (size_t i = 0; i < n; ++i)
            l.append(v[i][k]);
        per[kSpreadKeys[k]] = l;
    }
    py::list bl;
    for (size_t i = 0; i < n; ++i)
        bl.append(nb[i]);
    per["batches"] = bl;
    out["per_rank"] = per;
    out["slowest_rank"] = static_cast<int64_t>(slow);
    out["wait_max_s"] = v[slow][1];
    out["wait_mean_s"] = sum / static_cast<double>(n);
    out["wait_spread_s"] = v[slow][1] - lo;
    return out;
}

}  // namespace ddstore_torch
