"""Settings read by pyddstore's Python layer (pyddstore.torch, snapshots),
through the C registry's view (also importable as pyddstore.torch.env).

Every DDSTORE_* setting is declared once, in C (ddstore-core's settings.h,
one X-macro line: name, type, default, range, help, owner; the ones only
this layer uses have the owner "torch"), and parsed and checked there: this
module holds no declaration, no parser and no variable name.  `Settings` is
the Python view of that registry: one attribute per declared setting, the
variable without ``DDSTORE_`` in lower case (DDSTORE_BATCH_GET ->
``batch_get``), read through ``_core.config_get`` the first time it is
asked for and then kept.  A bad value is a ValueError naming the variable
and the value (the C message); an attribute that names no declared setting
is an AttributeError.

The getters below read a fresh view, at the moment they are called (a job
script, ``os.environ`` before the call or a test's ``monkeypatch`` all
work).
The launcher variables (SLURM_*, RANK ...) are not settings: they are read
directly.
"""

import functools
import os
import re

__all__ = ["Settings", "read", "method", "batch_get", "fork_workers", "comm_kind",
           "progress", "snapshot_verify", "handshake_dir", "use_mpi", "local_rank",
           "handshake_timeout", "slurm_rank_size", "collective_timeout",
           "launch_sizes", "exchange_ns", "loader_report"]


@functools.lru_cache(maxsize=None)
def _entries():
    from pyddstore import _core
    return {e["name"]: e for e in _core.config_entries()}


class Settings:
    """The settings of the C registry as attributes (see the module's doc)."""

    @staticmethod
    def variable(field):
        """The variable behind attribute `field` (AttributeError: not declared)."""
        name = "DDSTORE_" + field.upper()
        if not field.islower() or field.startswith("_") or name not in _entries():
            raise AttributeError(f"no DDSTORE_* setting is declared as {field!r} in this "
                                 "build (ddstore-info --env lists them)")
        return name

    def __getattr__(self, field):       # then kept: read once per view
        from pyddstore import _core
        value = _core.config_get(self.variable(field))
        setattr(self, field, value)
        return value

    def is_set(self, field):
        """True when the environment gives `field` a value (not blank)."""
        return (os.environ.get(self.variable(field)) or "").strip() != ""


def read():
    """A fresh view of the settings (values read when first asked for)."""
    return Settings()


def method(default=0):
    """DDSTORE_METHOD when set (a method of the hub's backend table, checked
    there: a ValueError naming it otherwise), else `default`."""
    from pyddstore import _core
    return _core.method_from_env() if read().is_set("method") else default


# one setting each, read fresh (DDSTORE_HANDSHAKE_TIMEOUT_S: seconds > 0, or inf)
def batch_get():
    return read().batch_get


def use_mpi():
    return read().mpi


def progress():
    return read().progress


def snapshot_verify():
    """DDSTORE_SNAPSHOT_VERIFY: check the checksums of what attach reads."""
    return read().snapshot_verify


def handshake_timeout():
    return read().handshake_timeout_s


def fork_workers():
    """DDSTORE_FORK_WORKERS (declared by the libfabric adapter; False in a
    build without it, where only method 0 exists)."""
    try:
        return read().fork_workers
    except AttributeError:
        return False


def comm_kind():
    """DDSTORE_COMM: None (auto) or 'mpi' / 'torch' / 'file'."""
    v = read().comm
    return None if v in (None, "auto") else v


def handshake_dir(given=None):
    if given:
        return os.fspath(given)
    return read().handshake_dir or None


def collective_timeout(fallback=False):
    """DDSTORE_COLLECTIVE_TIMEOUT_S (core's rule): seconds > 0, or inf for
    no limit; default 1800.  fallback: its declared default when the value
    is bad (a collective already posted must not raise on one rank: the
    others would wait for it; PyDDStore(comm) checks the setting in its
    first agreement, which fails every rank with "rank R: VARIABLE='value'")."""
    try:
        return read().collective_timeout_s
    except ValueError:
        if not fallback:
            raise
        return float(_entries()[Settings.variable("collective_timeout_s")]["default"])


# The launchers' node-local rank: Slurm, Open MPI, MPICH (Hydra), PMI, Cray
# PALS, MVAPICH2, torchrun; the first set wins.  The same list, in the same
# order, as ddstore-ofi's NIC choice (ddofi_config.c, ddofi_env_local_rank;
# test_env_registry.py checks).
LOCAL_RANK_VARS = ("SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                   "PMI_LOCAL_RANK", "PALS_LOCAL_RANKID", "MV2_COMM_WORLD_LOCAL_RANK",
                   "LOCAL_RANK")


def local_rank():
    """This process's rank on its node (LOCAL_RANK_VARS), or 0."""
    for name in LOCAL_RANK_VARS:
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
    from pyddstore import _core
    return list(_core._launch_env())


def exchange_ns(given=None):
    """The method-2 namespace: `given`, else DDSTORE_EXCHANGE_NS (core's
    variable, read by the store the same way), else ""."""
    if given:
        return str(given)
    return read().exchange_ns or ""


def _raw(name):
    """A launcher's variable (not a ddstore setting)."""
    return os.environ.get(name)


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


_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def loader_report(given=None):
    """ThreadDataLoader's report setting: None (off), True, or a path (JSON
    lines).  `given` (the argument) wins over DDSTORE_LOADER_REPORT.  A bare
    number other than 0/1 is an error, not a file of that name (a typo for a
    level would otherwise write a file named "2"); ./2 is the file."""
    v = given
    if v is None:
        s = (read().loader_report or "").strip()
        if s == "":
            return None
        from pyddstore import _core
        try:
            return True if _core.parse_bool(s) else None
        except ValueError:
            pass
        if _NUMBER.fullmatch(s):
            raise ValueError(f"DDSTORE_LOADER_REPORT={s!r}: 0 (off), 1 (the summary) or a file "
                             f"path; a bare number is not taken as a path (./{s} is the file)")
        return s
    if v is False:
        return None
    if isinstance(v, str) and _NUMBER.fullmatch(v.strip()):
        raise ValueError(f"ThreadDataLoader: report={v!r}: True, False, None or a file path; "
                         f"a bare number is not taken as a path (./{v.strip()} is the file)")
    if v is True or (isinstance(v, str) and v):
        return v
    raise ValueError(f"ThreadDataLoader: report must be None, a bool or a path, got {v!r}")
