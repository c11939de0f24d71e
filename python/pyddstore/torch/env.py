"""Environment variables read by pyddstore.torch — the one place they are read.

Every variable is read at the moment it is needed (not at import), so a job
script, ``os.environ`` before the call, or a test's ``monkeypatch`` all work.
``ENTRIES`` declares the variables only Python reads, for ``ddstore-info`` and
docs/environment.md.  Booleans follow the C libraries' one rule
(``_core.parse_bool``; blank = unset, as in C).  Variables the C libraries declare too (DDSTORE_METHOD,
DDSTORE_FORK_WORKERS, DDSTORE_HANDSHAKE_DIR, DDSTORE_HANDSHAKE_TIMEOUT_S,
DDSTORE_COLLECTIVE_TIMEOUT_S, DDSTORE_EXCHANGE_NS) are read through their
registry (``_core.config_get``): one declaration, one parser, one default.
"""

import os

__all__ = ["ENTRIES", "method", "batch_get", "fast_collate", "thread_readers",
           "fork_workers", "comm_kind", "affinity", "progress", "handshake_dir",
           "use_mpi", "local_rank", "handshake_timeout", "slurm_rank_size",
           "collective_timeout", "launch_sizes", "exchange_ns", "loader_report"]

# (name, type, default, help) — same shape as core's config registry; only
# the variables no C library declares.
ENTRIES = (
    ("DDSTORE_BATCH_GET", "bool", "1",
     "DistDataset.__getitems__ reads one batch per field (0: one read per sample)"),
    ("DDSTORE_FAST_COLLATE", "bool", "1",
     "ThreadDataLoader reads batches straight into the collated tensors "
     "(0: per-sample path + collate_fn)"),
    ("DDSTORE_THREAD_READERS", "bool", "1",
     "ThreadDataLoader opens one reader (endpoint) per worker thread for methods "
     "1/2 (0: threads share the store's reader)"),
    ("DDSTORE_LOADER_HELP", "bool", "1",
     "ThreadDataLoader: when the training loop asks for a batch that no worker has "
     "started, it reads that batch itself instead of waiting for a worker (0: only the "
     "workers read)"),
    ("DDSTORE_COMM", "enum", "",
     "force the communicator kind for comm=None: mpi | torch | file"),
    ("DDSTORE_AFFINITY_WIDTH", "int", "0",
     "pin ThreadDataLoader workers: CPUs per local rank (0 = no pinning)"),
    ("DDSTORE_AFFINITY_OFFSET", "int", "0",
     "first CPU used for worker pinning"),
    ("DDSTORE_PROGRESS", "bool", "1",
     "loading progress on rank 0 while a DistDataset loads: a tqdm bar on a terminal, "
     "else a line on stderr every 5 s (percent, samples/s, ETA)"),
    ("DDSTORE_MPI", "bool", "1",
     "0: do not use MPI for comm=None even when pyddstore has it"),
    ("DDSTORE_LOADER_REPORT", "string", "0",
     "ThreadDataLoader(report=None): 1 = a summary of where each epoch's time went on "
     "rank 0 at epoch end (collective: gathers the per-rank spread); a path = also "
     "append the figures there as one JSON line per epoch"),
)

def _raw(name):
    return os.environ.get(name)


def _parse_bool(text):
    """The one boolean rule of ddstore (C's, dds_config_parse_bool):
    1/true/yes/on/y/t or 0/false/no/off/n/f, any case; ValueError else."""
    from pyddstore import _core
    return _core.parse_bool(text)


def _bool(name, default):
    """A boolean setting: unset or blank = the default (as in C)."""
    v = _raw(name)
    if v is None or v.strip() == "":
        return default
    try:
        return _parse_bool(v)
    except ValueError:
        raise ValueError(f"{name}={v!r}: expected a boolean (0/1, true/false, yes/no, "
                         "on/off)") from None


def _int(name, default):
    v = _raw(name)
    if v is None or v.strip() == "":
        return default
    try:
        return int(v.strip(), 10)
    except ValueError:
        raise ValueError(f"{name}={v!r}: expected an integer") from None


def _c(name, seconds=False):
    """A variable the C libraries declare: its value through their registry
    (the environment's, else the declared default), validated there; a bad
    value is a ValueError naming the variable."""
    from pyddstore import _core
    return _core.config_get_seconds(name) if seconds else _core.config_get(name)


def method(default=0):
    """DDSTORE_METHOD when set (a method of the hub's backend table, checked
    there: a ValueError naming it otherwise), else `default`."""
    from pyddstore import _core
    return _core.method_from_env() if method_is_set() else default


def method_is_set():
    v = _raw("DDSTORE_METHOD")
    return v is not None and v.strip() != ""


def batch_get():
    return _bool("DDSTORE_BATCH_GET", True)


def loader_help():
    return _bool("DDSTORE_LOADER_HELP", True)


def fast_collate():
    return _bool("DDSTORE_FAST_COLLATE", True)


def thread_readers():
    return _bool("DDSTORE_THREAD_READERS", True)


def fork_workers():
    """DDSTORE_FORK_WORKERS (declared by the libfabric adapter; False in a
    build without it, where only method 0 exists)."""
    try:
        return _c("DDSTORE_FORK_WORKERS")
    except KeyError:
        return False


def comm_kind():
    """DDSTORE_COMM: None (auto) or 'mpi' / 'torch' / 'file'."""
    v = (_raw("DDSTORE_COMM") or "").strip().lower()
    if v in ("", "auto"):
        return None
    if v not in ("mpi", "torch", "file"):
        raise ValueError(f"DDSTORE_COMM={v!r}: expected mpi, torch or file")
    return v


def use_mpi():
    return _bool("DDSTORE_MPI", True)


def affinity():
    """(width, offset): width 0 = no pinning.  A bad value is a ValueError
    naming the variable and the value."""
    out = []
    for name in ("DDSTORE_AFFINITY_WIDTH", "DDSTORE_AFFINITY_OFFSET"):
        v = _int(name, 0)
        if v < 0:
            raise ValueError(f"{name}={_raw(name)!r}: expected an integer >= 0 "
                             "(CPUs for ThreadDataLoader worker pinning)")
        out.append(v)
    return tuple(out)


def progress():
    return _bool("DDSTORE_PROGRESS", True)


def handshake_dir(given=None):
    if given:
        return os.fspath(given)
    return _c("DDSTORE_HANDSHAKE_DIR") or None


def handshake_timeout():
    """DDSTORE_HANDSHAKE_TIMEOUT_S (core's variable, the same rule as in C):
    seconds > 0, or inf."""
    return _c("DDSTORE_HANDSHAKE_TIMEOUT_S")


def collective_timeout():
    """DDSTORE_COLLECTIVE_TIMEOUT_S (core's variable, core's rule): seconds
    > 0, or inf for no limit; default 1800."""
    return _c("DDSTORE_COLLECTIVE_TIMEOUT_S", seconds=True)


def local_rank():
    """This process's rank on its node (Slurm, Open MPI, MPICH, torchrun), or 0."""
    for name in ("SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                 "PMI_LOCAL_RANK", "LOCAL_RANK"):
        v = _raw(name)
        if v is not None and v.strip().isdigit():
            return int(v)
    return 0


def launch_sizes():
    """[(variable, size, launcher)]: what the launcher says about the number
    of processes it started (OMPI_COMM_WORLD_SIZE, PMI_SIZE,
    MV2_COMM_WORLD_SIZE, SLURM_STEP_NUM_TASKS, WORLD_SIZE; not SLURM_NTASKS,
    which a whole allocation carries).  The rule lives in pyddstore._core,
    which applies it to PyDDStore(None) too."""
    import pyddstore
    fn = getattr(pyddstore._core, "_launch_env", None)
    return list(fn()) if fn is not None else []


def exchange_ns(given=None):
    """The method-2 namespace: `given`, else DDSTORE_EXCHANGE_NS (core's
    variable, read by the store the same way), else ""."""
    if given:
        return str(given)
    return _c("DDSTORE_EXCHANGE_NS") or ""


def job_step():
    """(SLURM_JOB_ID, SLURM_STEP_ID) or empty strings."""
    return _raw("SLURM_JOB_ID") or "", _raw("SLURM_STEP_ID") or ""


def slurm_rank_size():
    """(rank, size) from SLURM_PROCID / SLURM_STEP_NUM_TASKS (else SLURM_NTASKS;
    or RANK / WORLD_SIZE, Open MPI's, PMI's), or None."""
    step = _raw("SLURM_STEP_NUM_TASKS")
    slurm_size = "SLURM_STEP_NUM_TASKS" if step is not None and step.strip().isdigit() \
        else "SLURM_NTASKS"
    for r, s in (("SLURM_PROCID", slurm_size), ("RANK", "WORLD_SIZE"),
                 ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                 ("PMI_RANK", "PMI_SIZE")):
        rv, sv = _raw(r), _raw(s)
        if rv is not None and sv is not None and rv.strip().isdigit() and sv.strip().isdigit():
            return int(rv), int(sv)
    return None


def loader_report(given=None):
    """ThreadDataLoader's report setting: None (off), True, or a path (JSON
    lines).  `given` (the argument) wins over DDSTORE_LOADER_REPORT."""
    v = given
    if v is None:
        raw = _raw("DDSTORE_LOADER_REPORT")
        if raw is None:
            return None
        s = raw.strip()
        if s == "":
            return None
        try:
            return True if _parse_bool(s) else None
        except ValueError:
            return s
    if v is False:
        return None
    if v is True or (isinstance(v, str) and v):
        return v
    raise ValueError(f"ThreadDataLoader: report must be None, a bool or a path, got {v!r}")
