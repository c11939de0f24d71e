// ddstore-torch: the read counters of forked DataLoader workers, summed
// where the parent sees them (DistDataset.get_profile).  Made before the
// fork: a shared anonymous mapping with one row of counters per variable.
// After each read a worker adds what its reader counted since its last read
// (relaxed atomic adds: the rows are only summed, no lock); the parent adds
// the rows to the store's own counters.
#include <sys/mman.h>

#include <unordered_map>

#include "ddstore/prof_alias.h"
#include "ddstore/profile.h"
#include "ddstore_torch.h"

namespace ddstore_torch {
namespace {

dds_profile_t snapshot(const Target &t, const std::string &var)
{
    dds_profile_t p{};
    check(dds_store_profile(t.store, var.c_str(), &p));
    return p;
}

class ForkedProfile {
public:
    explicit ForkedProfile(const std::vector<std::string> &vars)
    {
        for (size_t i = 0; i < vars.size(); i++)
            index_.emplace(vars[i], i);
        bytes_ = std::max<size_t>(1, vars.size()) * sizeof(dds_profile_t);
        void *m = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                       -1, 0);
        if (m == MAP_FAILED)
            throw_py(PyExc_MemoryError, "ForkedProfile: mmap of the shared counters failed");
        rows_ = static_cast<dds_profile_t *>(m);
    }
    ~ForkedProfile() { munmap(rows_, bytes_); }
    ForkedProfile(const ForkedProfile &) = delete;
    ForkedProfile &operator=(const ForkedProfile &) = delete;

    // In a worker: what its new reader counts from now on is the worker's.
    void start(py::handle reader)
    {
        Target t(reader);
        last_.clear();
        for (const auto &kv : index_)
            last_[kv.first] = snapshot(t, kv.first);
    }

    // In a worker, after a read of `vars` through `reader`.
    void flush(py::handle reader, const std::vector<std::string> &vars)
    {
        Target t(reader);
        for (const auto &v : vars) {
            auto it = index_.find(v);
            if (it == index_.end())
                continue;
            const dds_profile_t cur = snapshot(t, v);
            dds_profile_t &last = last_[v];
            for (int i = 0; i < DDS_PROF_COUNT; i++) {
                __atomic_fetch_add(&rows_[it->second].v[i], cur.v[i] - last.v[i],
                                   __ATOMIC_RELAXED);
            }
            last = cur;
        }
    }

    // The counters of `vars` summed, read through `store` (a PyDDStore or a
    // reader), with the workers' rows added when `workers`: a dict of every
    // counter under core's names and the original DDStore's.
    py::dict total(py::handle store, const std::vector<std::string> &vars, bool workers)
    {
        Target t(store);
        dds_profile_t sum{};
        for (const auto &v : vars) {
            const dds_profile_t p = snapshot(t, v);
            auto it = index_.find(v);
            for (int i = 0; i < DDS_PROF_COUNT; i++) {
                sum.v[i] += p.v[i];
                if (workers && it != index_.end())
                    sum.v[i] += __atomic_load_n(&rows_[it->second].v[i], __ATOMIC_RELAXED);
            }
        }
        py::dict d;
        for (int i = 0; i < DDS_PROF_COUNT; i++)
            d[dds_prof_counter_name(static_cast<dds_prof_counter_t>(i))] = sum.v[i];
        dds_prof_counter_t c;
        const char *alias;
        for (int i = 0; (alias = ddstore_prof_alias(i, &c)) != nullptr; i++)
            d[alias] = sum.v[c];
        return d;
    }

private:
    std::unordered_map<std::string, size_t> index_;
    std::unordered_map<std::string, dds_profile_t> last_;
    dds_profile_t *rows_ = nullptr;
    size_t bytes_ = 0;
};

}  // namespace

void def_forked_profile(py::module_ &m)
{
    py::class_<ForkedProfile>(m, "ForkedProfile",
                              "Read counters of forked DataLoader workers, summed in a "
                              "mapping shared with the parent (profile.cpp).")
        .def(py::init<const std::vector<std::string> &>(), py::arg("variables"))
        .def("start", &ForkedProfile::start, py::arg("reader"))
        .def("flush", &ForkedProfile::flush, py::arg("reader"), py::arg("variables"))
        .def("total", &ForkedProfile::total, py::arg("store"), py::arg("variables"),
             py::arg("workers"));
}

}  // namespace ddstore_torch
