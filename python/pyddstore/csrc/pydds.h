/* pyddstore._core: declarations shared by the extension's sources (private).
 *
 * Files:
 *   pydds_module.c    module init, exceptions, atexit, fork
 *   pydds_errors.c    error mapping (DDS_E* <-> Python exceptions)
 *   pydds_store*.c    the PyDDStore type (pydds_store.h: its files)
 *   pydds_life.c      life lock of a PyDDStore, list of live stores
 *   pydds_reader.c    the Reader type (fork_reader / open_reader)
 *   pydds_buffer.c    Py_buffer -> dds_buf_t, index conversion, names
 *   pydds_gpu.c       __cuda_array_interface__ -> dds_buf_t, GPU test hooks
 *   pydds_comm.c      communicator resolution (None / mpi4py / _dds_comm)
 *
 * Opening a store by method (communicator, transport, lazy GPU memsys) is
 * libddstore's (ddstore/open.h); so is the store's lifetime (ddstore/pin.h).
 *
 * Locking (see pydds_store.c): every PyDDStore has a "life lock", a
 * libddstore pin handle (ddstore/pin.h: a rwlock) holding its dds_store_t
 * pointer and protecting it and its readers'
 * dds_reader_t pointers.  Calls that use the store hold it for reading,
 * destroy / reader close / free() hold it for writing.  The life lock is
 * only ever ACQUIRED with the GIL released (it may be held while the GIL is
 * re-acquired), so a thread holding the GIL never waits for it and no
 * deadlock with the GIL is possible.
 */
#ifndef PYDDS_H
#define PYDDS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "ddstore/errors.h"
#include "ddstore/store.h"
#include "ddstore/comm_provider.h"
#include "ddstore/exc.h"
#include "ddstore/open.h"
#include "ddstore/pin.h"

#include "ddstore/backends.h"

/* The MPI of the process (communicators from mpi4py, MPI_COMM_WORLD); the
 * MPI RMA transport is the hub's (ddstore/backends.h). */
#ifdef HAVE_MPI
#include <mpi.h>
#endif

#if PY_VERSION_HEX < 0x030A0000
static inline PyObject *Py_NewRef(PyObject *o)
{
    Py_INCREF(o);
    return o;
}
#endif

/* PYDDSTORE_VERSION "x.y.z" from python/VERSION: Bazel
 * (//python:pyddstore_version) and CMake generate ddstore/pyddstore_version.h;
 * ci/dev-build.sh passes -DPYDDSTORE_VERSION='"x.y.z"'. */
#if defined(__has_include)
#if __has_include("ddstore/pyddstore_version.h")
#include "ddstore/pyddstore_version.h"
#endif
#endif
#ifndef PYDDSTORE_VERSION
#error "PYDDSTORE_VERSION: generate ddstore/pyddstore_version.h from python/VERSION or define it"
#endif

/* ---- exceptions and error mapping (pydds_errors.c) ---------------------- */

extern PyObject *pydds_Error;     /* pyddstore.DDStoreError(RuntimeError)    */
extern PyObject *pydds_KeyError;  /* pyddstore.DDStoreKeyError(KeyError,
                                     IndexError)                             */

/* The exception class documented for a DDS_E* code (docs/design.md). */
PyObject *pydds_exc_class(int rc);
/* Set the documented exception for `rc` with dds_last_error() (or
 * dds_strerror(rc) when the detail is empty); returns NULL. */
PyObject *pydds_raise(int rc);
/* Same class, own message. */
PyObject *pydds_raise_fmt(int rc, const char *fmt, ...);
/* The DDS code matching the pending Python exception (TypeError -> ETYPE,
 * IndexError -> ERANGE, ...); records "str(exc)" as this thread's
 * dds_error detail.  The exception stays set. */
int pydds_rc_from_pyerr(void);

/* ---- objects ------------------------------------------------------------ */

typedef struct pydds_reader_obj pydds_reader_obj;

typedef struct pydds_store_obj {
    PyObject_HEAD
    ddstore_pin_t *pin;          /* the life lock and the dds_store_t, NULL
                                    once destroyed (PYDDS_STORE)            */
    int method;
    int rank;
    int size;
    int comm_needs_gil;          /* collectives call back into Python        */
    pid_t pid;                   /* process that created the store           */
    pydds_reader_obj *readers;   /* open readers (list changed under the GIL)*/
    pydds_reader_obj *fork_reader; /* store-level reads of a forked child
                                    (its pid in ->pid; a reference held)    */
    PyObject *recv_bufs;         /* {(ptr, nbytes): exporter} registered     */
    PyObject *keep;              /* {name: [objects kept alive]}             */
    PyObject *weakreflist;
    struct pydds_store_obj *live_prev, *live_next;  /* live stores (GIL)     */
} pydds_store_obj;

struct pydds_reader_obj {
    PyObject_HEAD
    pydds_store_obj *owner;      /* strong reference                          */
    dds_reader_t *reader;        /* NULL once closed (owner's life lock)      */
    int flags;                   /* DDS_READER_THREAD / DDS_READER_FORKED     */
    pid_t pid;
    uint64_t handle;             /* libddstore handle (ddstore/pin.h), 0 when
                                    closed: Reader._handle                   */
    PyObject *weakreflist;
    pydds_reader_obj *prev, *next;  /* in owner->readers (GIL)               */
};

/* The C store of a PyDDStore; NULL once destroyed (it only becomes NULL
 * with the GIL held and the life lock held for writing). */
#define PYDDS_STORE(s) ddstore_pin_store((s)->pin)

extern PyTypeObject pydds_StoreType;
extern PyTypeObject pydds_ReaderType;

int pydds_store_type_ready(PyObject *module);
int pydds_reader_type_ready(PyObject *module);

/* Life lock helpers: acquire with the GIL released (they release it
 * themselves).  Return 0, or -1 with DDStoreError set when the store is
 * destroyed (then the lock is not held). */
int pydds_store_enter(pydds_store_obj *s);       /* read lock + alive check */
void pydds_store_leave(pydds_store_obj *s);      /* no GIL needed            */
void pydds_lock_write(pydds_store_obj *s);       /* GIL released inside      */

/* Create a reader object over `owner` (flags DDS_READER_*). */
PyObject *pydds_reader_new(pydds_store_obj *owner, int flags);
/* Close one reader; the caller holds the owner's life lock for writing. */
void pydds_reader_close_locked(pydds_reader_obj *r);

/* Method bodies shared by PyDDStore and Reader (r NULL = the store's
 * default reader). */
PyObject *pydds_do_get(pydds_store_obj *s, pydds_reader_obj *r,
                       PyObject *args, PyObject *kw);
/* get_batch is METH_FASTCALL | METH_KEYWORDS (the per-batch call). */
PyObject *pydds_do_get_batch(pydds_store_obj *s, pydds_reader_obj *r,
                             PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames);
/* Ragged variables: sizes(name, indices), get_ragged(name, indices,
 * out=None). */
PyObject *pydds_do_sizes(pydds_store_obj *s, pydds_reader_obj *r,
                         PyObject *args, PyObject *kw);
PyObject *pydds_do_get_ragged(pydds_store_obj *s, pydds_reader_obj *r,
                              PyObject *args, PyObject *kw);
PyObject *pydds_do_info(pydds_store_obj *s, PyObject *name);
PyObject *pydds_do_info_full(pydds_store_obj *s, PyObject *name);
PyObject *pydds_do_offsets(pydds_store_obj *s, PyObject *name);
PyObject *pydds_do_profile(pydds_store_obj *s, PyObject *name);

/* Live-store registry (GIL held; pydds_life.c). */
void pydds_live_add(pydds_store_obj *s);
void pydds_live_remove(pydds_store_obj *s);
/* The first live store that has its C store and was created by process
 * `pid`, or NULL. */
pydds_store_obj *pydds_live_next_own(pid_t pid);
/* In a forked child: start every live store's life lock afresh (and note
 * the child's pid for pydds_pid). */
void pydds_live_after_fork(void);
/* getpid() without the system call (a cached value, renewed after fork). */
pid_t pydds_pid(void);
/* Destroy the C store of `s` (readers closed first).  GIL held on entry;
 * local, never collective (dds_store_destroy_local: deallocation and
 * interpreter exit must not wait for a peer; only free() is collective).
 * Idempotent. */
void pydds_store_destroy(pydds_store_obj *s);

/* MPI lifetime: set when ddstore_mpi_init started MPI for us (pydds_comm.c), in
 * process pydds_mpi_pid (a forked child never finalises it). */
extern int pydds_mpi_started_by_us;
extern pid_t pydds_mpi_pid;

/* ---- buffers (pydds_buffer.c) ------------------------------------------- */

typedef struct pydds_buffer {
    Py_buffer view;
    int have_view;
    dds_buf_t buf;               /* described for core                        */
    size_t nbytes;               /* whole buffer                              */
    int gpu;                     /* buf.mem is CUDA/ROCm memory               */
    PyObject *dlpack;            /* a held "dltensor" capsule (CPU tensors
                                    through __dlpack__), or NULL            */
} pydds_buffer_t;

/* Describe `obj` as a dds_buf_t: any object with the buffer protocol (host
 * memory), else one exposing __cuda_array_interface__ (GPU memory,
 * pydds_cai_get), else a host array exporting __dlpack__ (CPU torch tensors:
 * float16/bfloat16 too, which have no buffer-protocol format for bfloat16).  C-contiguous required (else ValueError), format -> dtype
 * (else TypeError naming it), 1-D = rows of one element, N-D = shape[0]
 * rows of prod(shape[1:]) elements.  `writable`: a destination (read-only
 * -> ValueError).  `what` names the argument in messages.  Returns 0 or -1
 * with an exception (DDStoreError "no GPU" for a GPU array in a process
 * without a usable GPU). */
int pydds_buffer_get(PyObject *obj, const char *what, int writable,
                     pydds_buffer_t *b);
void pydds_buffer_release(pydds_buffer_t *b);

/* ---- GPU memory (pydds_gpu.c) ------------------------------------------- */

/* `cai` = obj.__cuda_array_interface__ -> b (no Py_buffer held; the caller
 * keeps obj alive).  Memory kind and device from the GPU runtime; the
 * interface's stream (version >= 3) as b->buf.mem.stream. */
int pydds_cai_get(PyObject *obj, PyObject *cai, const char *what, int writable,
                  pydds_buffer_t *b);
/* _gpu_* module functions (info, test hooks). */
extern PyMethodDef pydds_gpu_methods[];

typedef struct pydds_indices {
    const int64_t *rows;
    size_t n;
    int64_t *owned;              /* malloc'd conversion, or NULL              */
    Py_buffer view;
    int have_view;
} pydds_indices_t;

/* Global row indices from any integer buffer (no Python loop) or a Python
 * sequence of integers.  Returns 0 or -1 with an exception. */
int pydds_indices_get(PyObject *obj, pydds_indices_t *ix);
/* The same converter for a ragged variable's per-sample lengths: strictly
 * 1-D (a scalar or an N-D array is a ValueError), messages name "lengths". */
int pydds_lengths_get(PyObject *obj, pydds_indices_t *ix);
void pydds_indices_release(pydds_indices_t *ix);

/* UTF-8 name of a variable: a str without NUL; NULL + exception. */
const char *pydds_var_name(PyObject *o);
/* A Python int as int64, `what` naming it in messages; -1 + exception. */
int pydds_as_i64(PyObject *o, const char *what, int64_t *v_p);

/* ---- communicators (pydds_comm.c) --------------------------------------- */

enum { PYDDS_COMM_NONE = 0, PYDDS_COMM_MPI = 1, PYDDS_COMM_PROVIDER = 2,
       PYDDS_COMM_SELF = 3 };

typedef struct pydds_comm_res {
    int kind;                    /* PYDDS_COMM_*                              */
    int have_comm;               /* comm is ours to hand over or destroy      */
    dds_comm_t comm;
    int needs_gil;               /* its collectives call into Python          */
    const char *kind_name;       /* "mpi", provider's name, "self"            */
#ifdef HAVE_MPI
    MPI_Comm mpi_comm;           /* the user's communicator (not owned)       */
#endif
} pydds_comm_res_t;

/* Resolve comm_or_none (None, mpi4py communicator, object with a `_dds_comm`
 * capsule).  rank / size: the constructor's hints (rank -1 / size 0 = none);
 * when given they must match the communicator.  Returns 0 or -1 with an
 * exception.  May initialise MPI (comm None or mpi4py). */
/* The environment variables that say how many processes a launcher started
 * (pydds_comm.c; NULL-terminated), and the positive integer value of one
 * (0 when unset or not a positive integer). */
typedef struct pydds_launch_var {
    const char *var;
    const char *launcher;
} pydds_launch_var_t;
extern const pydds_launch_var_t pydds_launch_vars[];
long pydds_launch_env_size(const char *var);

int pydds_comm_resolve(PyObject *obj, int rank, int size,
                       pydds_comm_res_t *res);
/* Destroy the communicator if it was not handed to a store. */
void pydds_comm_res_cleanup(pydds_comm_res_t *res);
/* Core's MPI communicator over an mpi4py communicator's own MPI_Comm (no
 * dup, not collective: ddstore_comm_borrow_mpi); the caller keeps obj
 * alive.  0, or -1 with an exception (TypeError: mpi4py uses another MPI
 * library; ValueError: no MPI in this build). */
int pydds_comm_borrow_mpi4py(PyObject *obj, dds_comm_t *comm_p);
/* _core._launch_check(kind, given, mpi_library) (pydds_comm.c). */
PyObject *pydds_launch_check(PyObject *mod, PyObject *args);
/* 1 when obj's type comes from mpi4py. */
int pydds_is_mpi4py(PyObject *obj);
/* _core.mpi_same_library(): True when mpi4py's MPI library is ours. */
PyObject *pydds_mpi_same_library(PyObject *mod, PyObject *unused);

/* pydds_filecomm.c: 1 and obj's own communicator and lock when obj is a
 * pyddstore.FileComm; else 0 (with RuntimeError set for a FileComm that
 * was never initialised). */
int pydds_filecomm_comm(PyObject *obj, dds_comm_t **comm_p, PyThread_type_lock *lock_p);
/* pydds_coll.c: Collective, wire_encode/decode/gather, comm_capsule (and,
 * through pydds_agree_ready, agree / run_agreed). */
int pydds_coll_ready(PyObject *module);
/* pydds_agree.c: agree / run_agreed (called by pydds_coll_ready) */
int pydds_agree_ready(PyObject *module);

/* Keep `ref` alive until variable `name` is freed (free(), destroy). */
int pydds_store_keep(pydds_store_obj *s, const char *name, PyObject *ref);

#endif
