// ddstore-torch: the buffers of DistDataset.alloc() registered and released
// as a set (register_recv / unregister_recv of each, read.cpp).
#include "ddstore_torch.h"

namespace ddstore_torch {

// Register every tensor (streams[k]: its stream, 0 on the host); when one
// fails, the ones done are unregistered and the error raised.
void register_all(py::handle store, const std::vector<at::Tensor> &bufs,
                  const std::vector<uintptr_t> &streams)
{
    for (size_t i = 0; i < bufs.size(); i++) {
        try {
            register_recv(store, bufs[i], i < streams.size() ? streams[i] : 0);
        } catch (py::error_already_set &) {
            for (size_t j = 0; j < i; j++) {
                try {
                    unregister_recv(store, bufs[j]);
                } catch (py::error_already_set &) {
                }
            }
            throw;
        }
    }
}

// Unregister every tensor, going on after an error.  strict: then raise the
// first error unless it is a DDStoreError (the store freed: nothing left to
// release); else errors are ignored.
void unregister_all(py::handle store, const std::vector<at::Tensor> &bufs, bool strict)
{
    std::unique_ptr<py::error_already_set> err;
    for (const auto &b : bufs) {
        try {
            unregister_recv(store, b);
        } catch (py::error_already_set &e) {
            if (!err)
                err = std::make_unique<py::error_already_set>(std::move(e));
        }
    }
    if (strict && err &&
        !err->matches(py::module_::import("pyddstore").attr("DDStoreError")))
        throw std::move(*err);
}

}  // namespace ddstore_torch
