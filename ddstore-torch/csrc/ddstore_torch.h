// ddstore-torch: internal declarations shared by the extension's sources.
//
// The extension links the C libraries as libddstore.so, the shared object
// pyddstore._core links too (one copy of the library state per process), and
// calls the store directly.  A PyDDStore or reader is found by its integer
// handle (`_handle`, ddstore/pin.h) and pinned through libddstore for the
// call; no capsule between the two modules.  Errors become Python
// exceptions in one place: throw_rc() (errors.cpp).
#pragma once

#include "torch_headers.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <set>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ddstore/errors.h"
#include "ddstore/exc.h"
#include "ddstore/log.h"
#include "ddstore/pin.h"
#include "ddstore/store.h"

namespace ddstore_torch {

namespace py = pybind11;

// pyddstore._core's exception classes (DDStoreError, DDStoreKeyError),
// imported by name once at module import.
void load_errors();

// The ONE error helper: set the documented Python exception for a negative
// DDS_E* code (libddstore's mapping, ddstore/exc.h, the one _core uses;
// message from dds_last_error()) and throw py::error_already_set.  Needs the GIL; call it on the thread that
// made the failing call (the detail is thread-local).
[[noreturn]] void throw_rc(int rc);
inline void check(int rc)
{
    if (rc < 0)
        throw_rc(rc);
}
// A Python exception of `type` (PyExc_ValueError, ...) with `msg`.
[[noreturn]] void throw_py(PyObject *type, const std::string &msg);

// The libddstore handle of a PyDDStore or reader (its `_handle`);
// TypeError for another object, DDStoreError for a closed reader.  GIL held.
uint64_t handle_of(py::handle obj);

// A store (or reader) object from pyddstore._core, found by its handle and
// pinned against destruction (ddstore_handle_enter) until the Target goes
// out of scope, so a read with the GIL released never races with the store
// being freed at exit or deallocated.  Constructed with the GIL held (it
// releases the GIL while it waits for the pin, as _core does).
class Target {
public:
    explicit Target(py::handle obj);
    ~Target();
    Target(const Target &) = delete;
    Target &operator=(const Target &) = delete;
    dds_store_t *store = nullptr;
    dds_reader_t *reader = nullptr;
    ddstore_pin_t *pin() const { return pin_; }

private:
    ddstore_pin_t *pin_ = nullptr;
};

// batchpool.cpp: a host tensor of `shape` (dtype of `opts`) whose memory
// comes from the batch pool (blocks of freed batches, reused by size) and
// returns there when its storage is freed.
at::Tensor batch_empty(const std::vector<int64_t> &shape, const at::TensorOptions &opts);
// batch_empty for plain host memory, at::empty for any other (GPU, pinned).
at::Tensor host_empty(const std::vector<int64_t> &shape, const at::TensorOptions &opts);
// Set the pool's cap (bytes of free blocks kept; 0 = off) unless None; its
// figures (cap_bytes, free_bytes, hits, misses, kept, dropped).
py::dict batch_pool(py::object cap);

// Where GPU tensors live, set from Python (torch.version.hip) at import.
void set_gpu_kind(int kind);
int gpu_kind();

// The store's element type of a torch dtype (bool, uint8, int32, int64,
// float16, bfloat16, float32, float64); false for any other.
bool to_dds_dtype(at::ScalarType st, dds_dtype_t *dt);

// A destination tensor described for core, with the checks that concern
// the tensor alone (before any read, the GIL held): layout (strided), device
// (CPU, or CUDA/ROCm), C contiguity, at least one dimension, `nrows` rows, a
// supported element type.  The buffer carries the tensor's dtype, element
// size and row bytes: core's check (dds_store_get / get_batch, before any
// byte moves) is the only check against the variable (dtype, row width).
// `stream` is the cudaStream_t / hipStream_t to order on (0 = default).
dds_buf_t describe(const std::string &name, const at::Tensor &out, int64_t nrows,
                   uintptr_t stream);

// An entry of the one planned read (dds_store_read_vars): variable `name`
// (kept alive by the caller), DDS_READ_* `kind`, destination `buf`
// (describe()).
dds_read_var_t read_entry(const char *name, int kind, const dds_buf_t &buf);
// Every read of the extension: vars[0..nvars) for rows[0..n) in one planned
// call (one transport round for all of them; two with ragged entries),
// with the GIL released by the caller.  A raw variable (DDS_DTYPE_RAW)
// takes a tensor of any supported dtype whose rows have its row bytes: when
// core refuses an element type (-DDS_ETYPE) the raw variables' entries are
// described as raw and the call made again.  Returns core's status (error
// detail in dds_last_error(): call check() with the GIL held).  Callable
// without the GIL from a thread that never held it.
int read_vars(dds_store_t *store, dds_reader_t *reader, dds_read_var_t *vars, size_t nvars,
              const int64_t *rows, size_t n);
// read_vars of the fixed fields names[k] into bufs[k] (the same rows).
int read_fields_into(dds_store_t *store, dds_reader_t *reader,
                     const std::vector<std::string> &names, std::vector<dds_buf_t> &bufs,
                     const int64_t *rows, size_t n);

// Global row indices as int64: an integer tensor (any device), or with the
// rules of _core's converter (pydds_indices_get) a buffer of integers of any
// width (numpy), a host DLPack tensor or a sequence of integers (floats are
// a TypeError, an unsigned value above INT64_MAX an IndexError).
at::Tensor as_indices(py::handle obj);

// Time stamps (CLOCK_MONOTONIC ns) of the calling thread's last read, taken
// with the GIL released: used by the test that shows reads overlap.
void note_read(uint64_t t0, uint64_t t1);
std::pair<uint64_t, uint64_t> last_read_window();
uint64_t now_ns();
inline double now_s() { return static_cast<double>(now_ns()) * 1e-9; }

// repr(v) and type(v).__name__, for messages.  GIL held.
inline std::string repr_of(py::handle v) { return py::repr(v).cast<std::string>(); }
inline std::string type_name(py::handle v)
{
    return py::str(py::type::handle_of(v).attr("__name__")).cast<std::string>();
}

// read.cpp
void get(py::handle obj, const std::string &name, at::Tensor out,
         int64_t start, uintptr_t stream);
void get_batch(py::handle obj, const std::string &name, at::Tensor out,
               py::handle indices, uintptr_t stream);
void read_fields(py::handle obj, const std::vector<std::string> &names,
                 std::vector<at::Tensor> outs, py::handle indices,
                 uintptr_t stream);
// read_fields_into of rows idx (int64 CPU) under one GIL release, timed
// (note_read), its error raised.  GIL held.
void read_fields_checked(const Target &t, const std::vector<std::string> &names,
                         std::vector<dds_buf_t> &bufs, const at::Tensor &idx);

void register_recv(py::handle obj, at::Tensor buf, uintptr_t stream);
void unregister_recv(py::handle obj, at::Tensor buf);

// shard.cpp
void add_tensor(py::handle obj, const std::string &name, at::Tensor t, uintptr_t stream);

// rowpack.cpp: fixed fields packed into one row per sample.  A packed
// variable `var` of uint8 rows of `row_bytes`; field k at offsets[k].
struct PackedRow {
    std::string var;
    size_t row_bytes = 0;
    std::vector<size_t> offsets;
};
// (variable, row_bytes, [offsets]) from Python; ValueError when malformed.
PackedRow parse_packed(py::handle h);
// ValueError unless output k (describe()d, for field `field`) lies inside
// the row at an offset aligned to its element size.  GIL held.
void check_packed_out(const PackedRow &p, size_t k, const dds_buf_t &out,
                      const std::string &field);
// Host scatter: outs[k] (k < nout) <- field k of the n rows at rowbuf.
void scatter_host(const PackedRow &p, const void *rowbuf, int64_t n,
                  const std::vector<dds_buf_t> &outs, size_t nout);
// One get_batch of p.var into rowbuf (host), then scatter_host.  No GIL.
int packed_read_host(dds_store_t *store, dds_reader_t *reader, const PackedRow &p,
                     dds_buf_t *rowbuf, const int64_t *rows, size_t n,
                     const std::vector<dds_buf_t> &outs, size_t nout);
// Scatter with torch copies (any device; rowbuf (n, row_bytes) uint8).
void scatter_tensors(const PackedRow &p, const at::Tensor &rowbuf,
                     const std::vector<at::Tensor> &outs);
// The row buffer of a packed read of n rows: `rowbuf` (alloc()'s, checked;
// its device decides) or, undefined, one allocated on the outs' device;
// *host_p: the read and the scatter are on the host.  GIL held.
at::Tensor packed_rowbuf(const PackedRow &p, const std::vector<at::Tensor> &outs, int64_t n,
                         at::Tensor rowbuf, bool *host_p);
// Rows idx of p.var into outs (described as bufs, field k at p.offsets[k]),
// through `rowbuf` (undefined: allocated on the outs' device).  GIL held.
void packed_read(const Target &t, const PackedRow &p, const std::vector<at::Tensor> &outs,
                 std::vector<dds_buf_t> &bufs, const at::Tensor &idx, uintptr_t stream,
                 at::Tensor rowbuf);
void read_packed(py::handle obj, py::tuple packed, std::vector<at::Tensor> outs,
                 py::handle indices, uintptr_t stream, py::object rowbuf);

// collate.cpp
// The torch dtype of a field dtype name (bool ... float64, raw); TypeError.
at::ScalarType scalar_type_of(const std::string &name);
// A device string from Python (None: no device).
c10::optional<at::Device> device_of(const py::object &device);
// Options of a fresh batch tensor: on `dev` when given, else host (pinned).
at::TensorOptions field_options(at::ScalarType st, const c10::optional<at::Device> &dev,
                                bool pin_memory);
// A ragged field's output of a planned read: values allocated with `opts`
// (by core's grow callback once the samples' size is known), lengths.
struct RaggedOut {
    std::vector<int64_t> row_shape;
    at::TensorOptions opts;
    at::Tensor values, lengths;
};
// The DDS_READ_RAGGED entry of variable `name` (kept alive by the caller)
// for n samples into r (`guess` element rows allocated first, < 0: none; r
// must not move until the read returned).  GIL held.
dds_read_var_t ragged_entry(const std::string &name, RaggedOut &r, int64_t n, int64_t guess,
                            uintptr_t stream);
// After the read: {values (total, *row_shape), lengths, offsets, batch} on
// the values' device.  GIL held.
std::vector<at::Tensor> ragged_finish(RaggedOut &r, int64_t total);
// One packed read of ragged variable `name` (rows idx, int64 CPU):
// {values, lengths, offsets, batch} (ragged_entry, ragged_finish).  GIL held.
std::vector<at::Tensor> ragged_read(const Target &t, const std::string &name,
                                    const std::vector<int64_t> &row_shape,
                                    const at::TensorOptions &opts, const at::Tensor &idx,
                                    int64_t guess, uintptr_t stream);
std::vector<at::Tensor> collate(py::handle obj, py::list specs,
                                py::handle indices, py::object device,
                                bool pin_memory, uintptr_t stream,
                                py::object packed);
std::vector<at::Tensor> ragged_collate(py::handle obj, const std::string &name,
                                       std::vector<int64_t> row_shape,
                                       const std::string &dtype, py::handle indices,
                                       int64_t guess, py::object device, bool pin_memory,
                                       uintptr_t stream);

// Sample indices with a Python sequence's meaning over `total` samples
// (-total <= i < total, a negative one counts from the end): an int64 CPU
// tensor, a copy only when some index is negative.  IndexError naming
// `who` and the lowest index when one is below -total, else the highest.
at::Tensor seq_indices(py::handle indices, int64_t total, const std::string &who);

// The direct collate of one dataset's host fields, its specs parsed once:
// call(reader, indices) converts the indices (seq_indices), allocates
// (len(indices), *shape) per field, reads every field in one planned read
// (read_vars) under one GIL release, and returns what default_collate would: the
// tensor ("value"), a list ("tuple"/"list"), aux(*tensors) ("namedtuple")
// or {aux[k]: tensor} ("dict").  With `packed` (a PackedRow as Python
// gives it, parse_packed) the fields are read as one entry, the packed
// variable, into a row buffer (allocated with the batch: the last
// of alloc()'s outs and bufs) and scattered (rowpack.cpp).
class Collator {
public:
    Collator(py::list specs, int64_t total, std::string who, std::string structure,
             py::object aux, py::object packed);
    py::object call(py::handle obj, py::handle indices);
    // The steps of call(), for the pipeline: GIL held except for read().
    at::Tensor rows(py::handle indices) const;
    void alloc(int64_t n, std::vector<at::Tensor> *outs, std::vector<dds_buf_t> *bufs) const;
    int read(dds_store_t *store, dds_reader_t *reader, const at::Tensor &idx,
             std::vector<dds_buf_t> &bufs) const;
    py::object build(const std::vector<at::Tensor> &outs) const;

private:
    int64_t total_;
    std::string who_;
    py::object aux_;
    int kind_ = 0;
    std::vector<std::string> names_;
    std::vector<std::vector<int64_t>> shapes_;
    std::vector<at::TensorOptions> opts_;
    bool packed_ = false;
    PackedRow pack_;
};

// dataset.cpp: the read side of one DistDataset / DistDatasetReader, its
// fields parsed once (see the file's head).
class Reads {
public:
    Reads(py::list fields, int64_t total, std::string who, py::object packed);
    int64_t index(py::handle i) const;
    at::Tensor indices(py::handle indices) const;
    py::list read(py::handle obj, py::handle indices, py::object sel, py::object out,
                  py::object device, uintptr_t stream, bool pin_memory, py::object rowbuf);

private:
    struct Field {
        py::object key;
        std::string name, var;
        std::vector<int64_t> row_shape;
        at::ScalarType st;
        bool tensor = false;
        bool ragged = false;
        size_t offset = 0;
    };
    std::vector<Field> f_;
    int64_t total_;
    std::string who_;
    bool packed_ = false;
    std::string pack_var_;
    size_t row_bytes_ = 0;
};
// The samples of positions x (int64, in [0, n)) of DistSampler's keyed
// order (inverse: the positions of samples x).
at::Tensor feistel(int64_t n, uint64_t seed, uint64_t epoch, at::Tensor x, bool inverse);
// WindowedDataset: (the rows of windows `indices`, flattened; their count).
std::pair<at::Tensor, int64_t> window_rows(py::handle indices, int64_t length,
                                           py::object starts, int64_t stride,
                                           int64_t dilation, int64_t window);

// pipeline.cpp's Pipeline (ThreadDataLoader's native prefetch): loader.h.

// layout.cpp: the meta file's checks, the packed row layout, budget batches
py::list meta_check(py::object meta, const std::string &path, py::object name);
py::tuple pack_layout(py::list fields, py::object row_bytes);
py::list budget_batches(at::Tensor indices, at::Tensor costs, int64_t budget);

// ForkedProfile (profile.cpp): forked DataLoader workers' read counters.
void def_forked_profile(py::module_ &m);

// DistDataset's argument checks (construct.cpp): (method, width or None).
py::tuple dataset_args(py::object method, const std::string &comm_kind, int64_t comm_size,
                       bool have_handshake_dir, bool fields_given, bool encode_given,
                       py::object chunk_size, py::object add_device, py::object ragged_batch,
                       py::tuple ragged_batches, py::object pack_fields, bool ragged,
                       py::object width);
// samples.cpp: the user's samples while a DistDataset loads (schema.py)
using Where = std::function<std::string()>;
py::tuple classify(py::handle value, const std::string &where);
struct SampleField {
    py::object field;            // the Python Field (its matches() words a mismatch)
    int kind = 0, dtype = 0;
    std::vector<int64_t> shape;
    py::object rdtype;
    std::string rclass, key_repr;
    int64_t nbytes = 0;
};
class Column;
class Samples {
public:
    Samples(const std::string &structure, int64_t width, py::list keys, py::list fields);
    py::list values(py::handle sample, const std::string &where) const;
    void check(py::list vals, const std::string &where) const;
    void fill(py::object source, py::object encode, py::object first, int64_t lo, int64_t j0,
              int64_t j1, py::list dests, py::object bar) const;
    // the same over samples 0 .. n-1 into ragged= loading's Columns
    void fill_columns(py::object source, py::object encode, py::object first, int64_t lo,
                      int64_t n, py::list cols, py::object bar) const;

private:
    using Each = std::function<void(int64_t, const py::list &, const std::string &)>;
    void walk(py::object source, py::object encode, py::object first, int64_t lo, int64_t j0,
              int64_t j1, py::object bar, const Each &each) const;
    void check_store(size_t k, py::handle v, const Where &where, char *dst) const;
    std::string structure_;
    int64_t width_;
    py::list keys_, fields_;
    std::vector<SampleField> specs_;
};
// One field's local samples while a ragged= dataset loads (ragged.py): fixed
// rows in one array until a sample's shape differs (mode "auto") or from the
// start (a declared axis, mode an int); then per-sample host tensors.
class Column {
public:
    Column(py::object field, int64_t n, py::object mode, const std::string &where);
    void put(int64_t j, py::handle v, const std::string &where);
    py::list report() const;     // [first shape, varying axes]
    py::object arr() const;      // the fixed rows (numpy), None once ragged
    py::tuple ragged_values(int64_t axis, int64_t disp) const;
    void drop();

private:
    SampleField spec_;
    int64_t n_ = 0, axis_ = -1;
    bool auto_ = false, items_on_ = false;
    std::set<int64_t> axes_;
    at::Tensor arr_;
    std::vector<at::Tensor> items_;
};
// sampler.cpp: (epoch, position) of a DistSampler state dict; ValueError
// naming the field that does not fit this sampler
py::tuple sampler_state_check(py::handle state, int64_t n, py::object seed, bool shuffle);
// the fields' final form from every rank's Column reports (ragged.decide)
py::list ragged_decide(py::list fields, py::list reports, py::object mode_of,
                       const std::string &name, py::object field_cls);
// (values padded to (B, max, ...) moved to `axis`, mask) of a packed batch
py::tuple padded_values(at::Tensor values, at::Tensor lengths, at::Tensor offsets,
                        at::Tensor batch, int64_t axis);

}  // namespace ddstore_torch
