// ddstore-torch: the Python module pyddstore._ddstore_torch.
#include "ddstore/torch_version.h"  // DDSTORE_TORCH_VERSION, from ddstore-torch/VERSION
#include "ddstore_torch.h"
#include "loader.h"

#ifndef TORCH_EXTENSION_NAME
#define TORCH_EXTENSION_NAME _ddstore_torch
#endif

namespace dt = ddstore_torch;

namespace ddstore_torch {   // regs.cpp
void register_all(py::handle store, const std::vector<at::Tensor> &bufs,
                  const std::vector<uintptr_t> &streams);
void unregister_all(py::handle store, const std::vector<at::Tensor> &bufs, bool strict);
void def_options(py::module_ &m);   // options.cpp
void def_unbatch(py::module_ &m);   // unbatch.cpp
}  // namespace ddstore_torch

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.doc() = "ddstore reads into tensor storage (the torch side of pyddstore)";
    dt::load_errors();
    m.attr("__version__") = DDSTORE_TORCH_VERSION;

    m.def("get", &dt::get, py::arg("store"), py::arg("name"), py::arg("out"),
          py::arg("start") = 0, py::arg("stream") = 0,
          "out[i] <- global row start+i of `name` for i < len(out).  `store` is a "
          "PyDDStore or a reader; `out` a C-contiguous CPU/GPU tensor whose dtype is "
          "the variable's and whose rows match its row width.  Releases the GIL.");
    m.def("get_batch", &dt::get_batch, py::arg("store"), py::arg("name"), py::arg("out"),
          py::arg("indices"), py::arg("stream") = 0,
          "out[i] <- global row indices[i] (any order, repeats allowed); "
          "len(out) == len(indices).  Releases the GIL.");
    m.def("read_fields", &dt::read_fields, py::arg("store"), py::arg("names"),
          py::arg("outs"), py::arg("indices"), py::arg("stream") = 0,
          "outs[k][:len(indices)] <- rows `indices` of names[k]: one planned read "
          "(dds_store_read_vars) under one GIL release.");
    m.def("collate", &dt::collate, py::arg("store"), py::arg("specs"),
          py::arg("indices"), py::arg("device") = py::none(),
          py::arg("pin_memory") = false, py::arg("stream") = 0,
          py::arg("packed") = py::none(),
          "Direct collate: allocate (len(indices), *shape) per spec "
          "(name, shape, dtype name, on_device) and read every field in one planned "
          "read (packed=(variable, row_bytes, offsets): the packed rows, scattered); "
          "returns the tensors in spec order.");
    m.def("read_packed", &dt::read_packed, py::arg("store"), py::arg("packed"),
          py::arg("outs"), py::arg("indices"), py::arg("stream") = 0,
          py::arg("rowbuf") = py::none(),
          "outs[k][:len(indices)] <- field k (at packed[2][k]) of rows `indices` of "
          "the packed variable packed[0] (rows of packed[1] bytes): one read into "
          "a row buffer (rowbuf, or a fresh one), scattered in C++.  Releases the GIL.");
    m.def("seq_indices", &dt::seq_indices, py::arg("indices"), py::arg("total"),
          py::arg("who"),
          "Sample indices with a Python sequence's meaning (negative ones count from "
          "the end) as a 1-D int64 CPU tensor; IndexError naming `who` otherwise.");
    m.def("batch_pool", &dt::batch_pool, py::arg("cap_bytes") = py::none(),
          "The batch pool of the direct collate (host memory of freed batch tensors, "
          "reused by byte size): sets its cap (bytes of free blocks kept, 0 = off) "
          "unless None; returns its figures (cap_bytes, free_bytes, hits, misses, "
          "kept, dropped).");
    py::class_<dt::Collator>(m, "Collator",
                             "The direct collate of a dataset's host fields, specs parsed once.")
        .def(py::init<py::list, int64_t, std::string, std::string, py::object, py::object>(),
             py::arg("specs"), py::arg("total"), py::arg("who"), py::arg("structure"),
             py::arg("aux") = py::none(), py::arg("packed") = py::none())
        .def("__call__", &dt::Collator::call, py::arg("store"), py::arg("indices"));
    m.def("ragged_collate", &dt::ragged_collate, py::arg("store"), py::arg("name"),
          py::arg("row_shape"), py::arg("dtype"), py::arg("indices"), py::arg("guess") = -1,
          py::arg("device") = py::none(), py::arg("pin_memory") = false,
          py::arg("stream") = 0,
          "Packed read of ragged variable `name`: (values (total, *row_shape), lengths, "
          "offsets (n+1 prefix sums), batch (sample of every element row)); values "
          "allocated for `guess` element rows first (-1: none), and at the exact size "
          "by core when the samples need more (one planned read).  Releases the GIL.");
    m.def("register_recv", &dt::register_recv, py::arg("store"), py::arg("buf"),
          py::arg("stream") = 0,
          "Register a tensor as a read destination (reads into it or any slice of "
          "it then skip registration).");
    m.def("unregister_recv", &dt::unregister_recv, py::arg("store"), py::arg("buf"),
          "Undo register_recv for exactly this tensor's storage range.");
    m.def("add_tensor", &dt::add_tensor, py::arg("store"), py::arg("name"), py::arg("shard"),
          py::arg("stream") = 0,
          "Collective: this rank's shard of `name` = a C-contiguous tensor (rows first). "
          "Host tensors are copied; GPU tensors are registered in place and kept alive "
          "by the store until the variable is freed.");
    m.def("set_gpu_kind", &dt::set_gpu_kind, py::arg("kind"),
          "1 = CUDA, 2 = ROCm: how GPU tensors are described to the store.");
    m.def("last_read_window", &dt::last_read_window,
          "(begin_ns, end_ns) CLOCK_MONOTONIC of this thread's last read, taken with "
          "the GIL released (for tests of concurrency).");
    m.def("now_ns", &dt::now_ns, "CLOCK_MONOTONIC in ns (same clock as last_read_window).");
    m.def("meta_check", &dt::meta_check, py::arg("meta"), py::arg("path"), py::arg("name"),
          "Check a method-2 meta file (json.loads of {name}.meta.json, versions 1-4): "
          "ValueError naming `path` and the field, else the variable of every schema "
          "field.");
    m.def("pack_layout", &dt::pack_layout, py::arg("fields"), py::arg("row_bytes"),
          "(offsets, row_bytes) of a packed row from fields (key, nbytes, align, offset or "
          "None): missing offsets placed in order, aligned, the row padded to 8 bytes; "
          "with row_bytes (a layout read back) every offset given and checked to fit "
          "(ValueError 'does not fit' / 'overlap').");
    m.def("budget_batches", &dt::budget_batches, py::arg("indices"), py::arg("costs"),
          py::arg("budget"),
          "Greedy batches of `indices` (1-D int64) in order: a batch closes before a "
          "sample whose cost would take its sum over `budget` (a sample over it alone "
          "is a batch of its own).");
    py::class_<dt::Reads>(m, "Reads",
                          "The read side of one dataset, its fields parsed once (dataset.cpp).")
        .def(py::init<py::list, int64_t, std::string, py::object>(), py::arg("fields"),
             py::arg("total"), py::arg("who"), py::arg("packed") = py::none())
        .def("index", &dt::Reads::index, py::arg("i"),
             "One sample index with a sequence's meaning; IndexError naming the dataset.")
        .def("indices", &dt::Reads::indices, py::arg("indices"), "seq_indices over the dataset.")
        .def("read", &dt::Reads::read, py::arg("store"), py::arg("indices"),
             py::arg("sel") = py::none(), py::arg("out") = py::none(),
             py::arg("device") = py::none(), py::arg("stream") = 0,
             py::arg("pin_memory") = false, py::arg("rowbuf") = py::none(),
             "Fields `sel` (positions, None: all) of rows `indices`: a tensor per fixed "
             "field, (values, lengths, offsets, batch) per ragged one; one call per batch.");
    m.def("feistel", &dt::feistel, py::arg("n"), py::arg("seed"), py::arg("epoch"),
          py::arg("x"), py::arg("inverse") = false,
          "DistSampler's keyed order of [0, n) at positions x (inverse: positions of x).");
    m.def("window_rows", &dt::window_rows, py::arg("indices"), py::arg("length"),
          py::arg("starts"), py::arg("stride"), py::arg("dilation"), py::arg("window"),
          "WindowedDataset: (rows of windows `indices`, flattened; number of windows).");
    dt::def_loader(m);   // ThreadDataLoader (loader_bind.cpp)
    dt::def_forked_profile(m);
    dt::def_options(m);
    dt::def_unbatch(m);
    m.def("dataset_args", &dt::dataset_args, py::arg("method"), py::arg("comm_kind"),
          py::arg("comm_size"), py::arg("have_handshake_dir"), py::arg("fields_given"),
          py::arg("encode_given"), py::arg("chunk_size"), py::arg("add_device"),
          py::arg("ragged_batch"), py::arg("ragged_batches"), py::arg("pack_fields"),
          py::arg("ragged"), py::arg("width"),
          "DistDataset's argument checks: (method, width or None); ValueError / "
          "TypeError naming the argument.");
    m.def("register_all", &dt::register_all, py::arg("store"), py::arg("bufs"),
          py::arg("streams"),
          "register_recv of every tensor; when one fails the ones done are unregistered.");
    m.def("unregister_all", &dt::unregister_all, py::arg("store"), py::arg("bufs"),
          py::arg("strict"),
          "unregister_recv of every tensor; strict: raise the first error that is not a "
          "DDStoreError.");
    m.def("classify", &dt::classify, py::arg("value"), py::arg("where"),
          "(kind, shape, dtype, record dtype, record class) of one value of a sample.");
    py::class_<dt::Samples>(m, "Samples", "One schema's samples while loading (samples.cpp).")
        .def(py::init<const std::string &, int64_t, py::list, py::list>(),
             py::arg("structure"), py::arg("width"), py::arg("keys"), py::arg("fields"))
        .def("values", &dt::Samples::values, py::arg("sample"), py::arg("where"))
        .def("check", &dt::Samples::check, py::arg("vals"), py::arg("where"))
        .def("fill", &dt::Samples::fill, py::arg("source"), py::arg("encode"),
             py::arg("first"), py::arg("lo"), py::arg("j0"), py::arg("j1"), py::arg("dests"),
             py::arg("bar"))
        .def("fill_columns", &dt::Samples::fill_columns, py::arg("source"), py::arg("encode"),
             py::arg("first"), py::arg("lo"), py::arg("n"), py::arg("cols"), py::arg("bar"));
    py::class_<dt::Column>(m, "Column",
                           "One field's local samples while a ragged= dataset loads.")
        .def(py::init<py::object, int64_t, py::object, const std::string &>(),
             py::arg("field"), py::arg("n"), py::arg("mode"), py::arg("where"))
        .def("put", &dt::Column::put, py::arg("j"), py::arg("value"), py::arg("where"))
        .def("report", &dt::Column::report)
        .def_property_readonly("arr", &dt::Column::arr)
        .def("ragged_values", &dt::Column::ragged_values, py::arg("axis"), py::arg("disp"))
        .def("drop", &dt::Column::drop);
    m.def("ragged_decide", &dt::ragged_decide, py::arg("fields"), py::arg("reports"),
          py::arg("mode_of"), py::arg("name"), py::arg("field_cls"),
          "The fields' final form (ragged Fields where they vary) from every rank's "
          "Column reports; ValueError, the same on every rank, for what cannot be stored.");
    m.def("padded_values", &dt::padded_values, py::arg("values"), py::arg("lengths"),
          py::arg("offsets"), py::arg("batch"), py::arg("axis"),
          "(values padded with zeros to (B, max, *row) moved to `axis`, mask (B, max)).");
    m.def("sampler_state_check", &dt::sampler_state_check, py::arg("state"), py::arg("n"),
          py::arg("seed"), py::arg("shuffle"),
          "(epoch, position) of a DistSampler state dict; ValueError naming the field.");
}
