// ddstore-torch: the Python classes and functions of ThreadDataLoader's
// native side (loader.cpp, pipeline.cpp, report.cpp), registered by
// module.cpp through def_loader().
#include "loader.h"

namespace ddstore_torch {

void def_loader(py::module_ &m)
{
    namespace dt = ddstore_torch;
    py::class_<dt::Pipeline, std::shared_ptr<dt::Pipeline>>(m, "Pipeline",
                             "ThreadDataLoader's native prefetch: worker threads read "
                             "batches without the GIL (pipeline.cpp).")
        .def(py::init<py::object, py::object>(), py::arg("collator"), py::arg("store"))
        .def("submit", &dt::Pipeline::submit, py::arg("seq"), py::arg("indices"))
        .def("start", &dt::Pipeline::start, py::arg("readers"), py::arg("cpus"),
             py::arg("init") = py::none(),
             "One C++ worker thread per reader (pinned to cpus[w] >= 0), each calling "
             "init(w) first (with the GIL), then reading until stop()")
        .def("join", &dt::Pipeline::join, "Waits for start()'s threads (after stop())")
        .def("alive", &dt::Pipeline::alive)
        .def("error", &dt::Pipeline::error, "A worker's init exception, or None")
        .def("stop", &dt::Pipeline::stop)
        .def("ready", &dt::Pipeline::ready)
        .def_readwrite("spin_ns", &dt::Pipeline::spin_ns,
                       "ns the consumer polls for a batch before it sleeps (0: sleeps at once)");
    py::class_<dt::Stats>(m, "EpochStats",
                          "One epoch's figures of a ThreadDataLoader (report.cpp; "
                          "pyddstore/torch/report.py documents them).")
        .def(py::init<int64_t, int, int64_t, py::object, py::object>(), py::arg("index"),
             py::arg("workers"), py::arg("depth"), py::arg("t0") = py::none(),
             py::arg("profile") = py::none())
        .def("enter", &dt::Stats::enter, py::arg("ready"))
        .def("leave", [](dt::Stats &s, double t, py::object n) {
                 return s.leave(t, n.is_none() ? dt::Stats::kEnd : n.cast<int64_t>());
             }, py::arg("t_enter"), py::arg("samples"),
             "samples None: the epoch ended (True the first time); < 0: next() raised")
        .def("add_fetch", &dt::Stats::add_fetch, py::arg("t_start"), py::arg("t_end"),
             py::arg("collate") = 0.0, py::arg("pin") = 0.0, py::arg("worker") = 0)
        .def("figures", &dt::Stats::figures, py::arg("timeline") = false)
        .def_property_readonly("batch_times", &dt::Stats::batch_times)
        .def_property_readonly("fetch_times", &dt::Stats::fetch_times)
        .def_property_readonly("index", &dt::Stats::index)
        .def_property_readonly("complete", &dt::Stats::complete)
        .def_readonly("workers", &dt::Stats::workers_)
        .def_readonly("depth", &dt::Stats::depth_)
        .def_readonly("t0", &dt::Stats::t0_)
        .def_readonly("start_s", &dt::Stats::start_s_)
        .def_readonly("wait_s", &dt::Stats::wait_s_)
        .def_readonly("compute_s", &dt::Stats::compute_s_)
        .def_readonly("batches", &dt::Stats::batches_)
        .def_readonly("samples", &dt::Stats::samples_)
        .def_readonly("fetch_s", &dt::Stats::fetch_s_)
        .def_readonly("fetched", &dt::Stats::fetched_)
        .def_readonly("collate_s", &dt::Stats::collate_s_)
        .def_readonly("pin_s", &dt::Stats::pin_s_)
        .def_readonly("starved", &dt::Stats::starved_)
        .def_readonly("read", &dt::Stats::read_);
    m.def("report_summary", &dt::report_summary, py::arg("fig"),
          "The one-screen text of an epoch's (gathered) figures.");
    m.def("report_mine", &dt::report_mine, py::arg("fig"),
          "This rank's figures for report_spread (integer ns, batches).");
    m.def("report_spread", &dt::report_spread, py::arg("fig"), py::arg("alls"),
          py::arg("rank"), "fig with the per-rank spread of every rank's report_mine.");
    py::class_<dt::Batches>(m, "Batches",
                            "One ThreadDataLoader epoch, the consumer's side (loader.cpp).")
        .def(py::init<py::object, py::object, int, bool, double, py::object, bool, py::object,
                      uint64_t, py::object, bool, int64_t, int64_t>(),
             py::arg("sampler_iter"), py::arg("stats"), py::arg("workers"),
             py::arg("in_order"), py::arg("timeout"), py::arg("timeout_text"),
             py::arg("auto_collation"), py::arg("pipe"), py::arg("help"), py::arg("fetch"),
             py::arg("gpu"), py::arg("batches"),
             py::arg("samples"))
        .def("prime", &dt::Batches::prime, py::arg("n"))
        .def("next", &dt::Batches::next)
        .def("work", &dt::Batches::work, py::arg("worker"), py::arg("fetch"),
             py::arg("slot"), py::arg("err"), "A Python worker thread's loop until stop()")
        .def("fail", &dt::Batches::fail, py::arg("err"))
        .def("stop", &dt::Batches::stop)
        .def("__iter__", [](py::object self) { return self; })
        .def("__next__", &dt::Batches::iter_next)
        .def("close", &dt::Batches::close)
        .def("serve_worker", &dt::Batches::serve_worker, py::arg("worker"), py::arg("fetch"),
             py::arg("cpu"), py::arg("init"))
        .def("start_native", &dt::Batches::start_native, py::arg("ds"), py::arg("cpus"),
             py::arg("init"))
        .def("shutdown", &dt::Batches::shutdown, py::arg("join") = false)
        .def("alive", &dt::Batches::alive)
        .def_property_readonly("stopped", &dt::Batches::stopped)
        .def_property_readonly("pipe", &dt::Batches::pipe)
        .def_readwrite("threads", &dt::Batches::threads)
        .def_readwrite("slots", &dt::Batches::slots)
        .def_readwrite("pool", &dt::Batches::pool)
        .def_readwrite("on_end", &dt::Batches::on_end)
        .def_readwrite("owns", &dt::Batches::owns)
        .def("clear", &dt::Batches::clear)
        .def("ready", &dt::Batches::ready)
        .def("pending", &dt::Batches::pending)
        .def("report_due", &dt::Batches::report_due)
        .def_readonly("ended", &dt::Batches::ended)
        .def_readonly("batches", &dt::Batches::batches)
        .def_readonly("samples", &dt::Batches::samples)
        .def_readonly("base_samples", &dt::Batches::base_samples)
        .def_readonly("num_yielded", &dt::Batches::num_yielded)
        .def_readwrite("key", &dt::Batches::key);
    m.def("loader_state", &dt::loader_state, py::arg("progress"), py::arg("sampler"),
          py::arg("iterable"), py::arg("ordered"), "ThreadDataLoader.state_dict()'s dict.");
    m.def("loader_load_state", &dt::loader_load_state, py::arg("state"), py::arg("sampler"),
          py::arg("other"),
          "A ThreadDataLoader state checked (ValueError naming the field) and loaded into "
          "the DistSampler: (skip, batches, samples, key).");
    m.def("loader_args", &dt::loader_args, py::arg("workers"), py::arg("prefetch"),
          py::arg("persistent"), py::arg("mp_context"), py::arg("iterable"),
          "ThreadDataLoader's own argument checks: the prefetch factor, or ValueError.");
    py::class_<dt::Slot>(m, "LoaderSlot", "A ThreadDataLoader worker's readers and buffers.")
        .def_readwrite("readers", &dt::Slot::readers)
        .def_readwrite("bufs", &dt::Slot::bufs);
    py::class_<dt::Slots>(m, "LoaderSlots", "A ThreadDataLoader's worker slots (slots.cpp).")
        .def(py::init<py::list, py::object, py::object, int64_t>(), py::arg("open"),
             py::arg("alloc"), py::arg("release"), py::arg("batch_size"))
        .def("take", &dt::Slots::take, py::arg("readers") = true)
        .def("give", &dt::Slots::give, py::arg("slot"))
        .def("release", &dt::Slots::release, py::arg("slots"))
        .def("close", &dt::Slots::close)
        .def_property_readonly("all", &dt::Slots::all);
    m.def("native_threads", &dt::native_threads,
          "Native ThreadDataLoader worker threads running in this process.");
    m.def("copy_batch", &dt::copy_batch, py::arg("batch"),
          "A copy of a collated batch (tensors cloned, containers rebuilt).");
}

}  // namespace ddstore_torch
