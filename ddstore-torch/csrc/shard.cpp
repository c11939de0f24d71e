// ddstore-torch: a tensor as a rank's shard (DistDataset's add_device=).
//
// Host tensors are copied into a store-owned shard.  GPU tensors are
// registered in place (DDS_ADD_IN_PLACE, GPUDirect: peers read GPU memory
// through the NIC) and kept alive by the store until the variable is freed
// (ddstore_pin_keep: the store's pin calls drop_ref when the variables are
// released, free() or destroy).  Collective, like PyDDStore.add.
#include "ddstore_torch.h"

namespace ddstore_torch {

namespace {
// Drop the reference a GPU shard was kept alive by (any thread; nothing
// once the interpreter is gone).
void drop_ref(void *arg)
{
    if (!Py_IsInitialized())
        return;
    PyGILState_STATE g = PyGILState_Ensure();
    Py_DECREF(static_cast<PyObject *>(arg));
    PyGILState_Release(g);
}
}  // namespace

void add_tensor(py::handle obj, const std::string &name, at::Tensor t, uintptr_t stream)
{
    // Argument errors are raised before the collective: callers (DistDataset)
    // validate on every rank and agree first, so a bad tensor here is a
    // programming error on all ranks alike.
    if (t.layout() != at::kStrided || !t.is_contiguous() || t.dim() < 1)
        throw_py(PyExc_ValueError, "add_tensor('" + name +
                                       "'): expected a C-contiguous tensor with rows first");
    dds_dtype_t dt = DDS_DTYPE_RAW;
    if (!to_dds_dtype(t.scalar_type(), &dt))
        throw_py(PyExc_TypeError, "add_tensor('" + name + "'): unsupported dtype " +
                                      std::string(c10::toString(t.scalar_type())) +
                                      "; supported: bool, uint8, int32, int64, float16, "
                                      "bfloat16, float32, float64");
    dds_mem_t mem{};
    int flags = DDS_ADD_COPY;
    if (t.device().is_cuda()) {
        mem.kind = static_cast<dds_mem_kind_t>(gpu_kind());
        mem.device = t.device().index();
        mem.stream = reinterpret_cast<void *>(stream);
        flags = DDS_ADD_IN_PLACE;
    } else if (!t.device().is_cpu()) {
        throw_py(PyExc_TypeError, "add_tensor('" + name + "'): tensor on " + t.device().str() +
                                      "; expected CPU or CUDA/ROCm");
    }
    const int64_t nrows = t.size(0);
    int64_t disp = 1;
    for (int64_t d = 1; d < t.dim(); d++)
        disp *= t.size(d);
    const Target tg(obj);
    // The GIL stays held: the store's communicator may call into Python
    // (torch.distributed, FileComm).
    const int rc = dds_store_var_add(tg.store, name.c_str(), t.data_ptr(), nrows,
                              static_cast<size_t>(disp), t.element_size(), dt,
                              flags == DDS_ADD_IN_PLACE ? &mem : nullptr, flags);
    check(rc);
    if (flags == DDS_ADD_IN_PLACE) {
        PyObject *ref = py::cast(t).release().ptr();
        const int krc = ddstore_pin_keep(tg.pin(), name.c_str(), drop_ref, ref);
        if (krc < 0) {
            Py_DECREF(ref);
            throw_rc(krc);
        }
    }
}

}  // namespace ddstore_torch
