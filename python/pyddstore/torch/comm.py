"""Communicator resolution for pyddstore.torch (docs/pytorch.md, "comm").

``resolve(comm)`` wraps an mpi4py communicator, a torch.distributed group,
a ``pyddstore.FileComm`` or ``None`` (MPI.COMM_WORLD with MPI unless
torchrun's torch.distributed group has more ranks; else torch.distributed
when initialised; else a FileComm with rank and size from the launcher;
``DDSTORE_COMM=mpi|torch|file`` forces it) in a :class:`Comm`: the
collectives the Python layer needs and the object for ``PyDDStore``.  Never
a silent one-rank store: a one-rank ``None`` under a launch of several is a
RuntimeError.  :func:`agree` makes every collective step fail on every rank
together.

The collectives are C (``_core.Collective``: core's wire codec, never
pickle, and agreement protocol) over the FileComm's or the mpi4py
communicator's own ``MPI_Comm``, or over a byte mover: ``TorchComm`` (only
Python can call torch.distributed) and ``_MpiBytes`` (an mpi4py built on
another MPI library than pyddstore's).  The movers' waits are bounded by
DDSTORE_COLLECTIVE_TIMEOUT_S as C's are, with the same messages.
"""

import pyddstore
from pyddstore import _core

from . import env

__all__ = ["Comm", "resolve", "agree", "TorchComm", "wire_encode", "wire_decode"]


def _is_mpi4py(obj):
    return type(obj).__module__.startswith("mpi4py")


def _is_torch_group(obj):
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover
        return False
    return dist.is_available() and isinstance(obj, dist.ProcessGroup)


# The wire codec (C, ddstore/wire.h): bytes for a value (TypeError naming
# what cannot be sent) and (True, value) / (False, the sender's error) back
# (ValueError for bytes that are not a message of the format).
wire_encode = _core.wire_encode
wire_decode = _core.wire_decode


class TorchComm:
    """A torch.distributed group as a ddstore communicator.

    ``PyDDStore(TorchComm(group))`` runs the store's collectives (address
    exchange, error agreement) through the group: torch.distributed only
    moves bytes (``allgather_bytes``, ``barrier``), the protocol is core's
    (``_core.comm_capsule``).  With NCCL/RCCL call
    ``torch.cuda.set_device()`` first.
    """

    name = "torch.distributed"

    def __init__(self, group=None):
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()):
            raise ValueError("comm: torch.distributed is not initialized "
                             "(call torch.distributed.init_process_group first)")
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        if self.rank < 0:
            raise ValueError("comm: this process is not a member of the given "
                             "torch.distributed group")

    @property
    def _dds_comm(self):
        # A fresh capsule per access: it references self, and self must not
        # hold it (capsules are not garbage-collected).
        return _core.comm_capsule(self)

    def _wait(self, work, what):
        import datetime
        _check_in_step(self, what)
        timeout = env.collective_timeout(fallback=True)
        try:
            if timeout == float("inf"):
                work.wait()
            else:
                work.wait(timeout=datetime.timedelta(seconds=timeout))
        except RuntimeError as e:
            if "timed out" not in str(e).lower() and "timeout" not in str(e).lower():
                raise
            raise _timed_out(self, what, timeout, self.size, str(e)) from None

    def allgather(self, obj):
        """Every rank's `obj`, in rank order (None, bool, int, str and
        tuples / lists / dicts of them)."""
        return _core.Collective(self).allgather(obj, "allgather")

    def allgather_bytes(self, data):
        """Every rank's `data` (the same length on every rank, checked by
        core first) joined in rank order: the byte mover under core's
        collectives."""
        import torch
        import torch.distributed as dist
        _check_in_step(self, "allgather")
        dev = torch.device("cpu")
        if dist.get_backend(self.group) == "nccl":
            dev = torch.device("cuda", torch.cuda.current_device())
        buf = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(dev)
        outs = [torch.empty_like(buf) for _ in range(self.size)]
        self._wait(dist.all_gather(outs, buf, group=self.group, async_op=True), "allgather")
        return b"".join(o.cpu().numpy().tobytes() for o in outs)

    def barrier(self):
        import torch.distributed as dist
        _check_in_step(self, "barrier")
        self._wait(dist.barrier(group=self.group, async_op=True), "barrier")

    def global_ranks(self):
        import torch.distributed as dist
        if self.group is None:
            return list(range(self.size))
        return list(dist.get_process_group_ranks(self.group))


class _MpiBytes:
    """The fallback for an mpi4py over another MPI library than pyddstore's
    (else ``_core.Collective`` takes the communicator itself): a byte mover,
    fixed-size allgather and barrier with nonblocking MPI, polled within
    DDSTORE_COLLECTIVE_TIMEOUT_S."""

    name = "MPI"

    def __init__(self, comm):
        self.comm, self.rank, self.size = comm, comm.Get_rank(), comm.Get_size()

    def allgather_bytes(self, data):
        import numpy as np
        from mpi4py import MPI
        _check_in_step(self, "allgather")
        send = np.frombuffer(bytes(data), dtype=np.uint8)
        out = np.empty(send.size * self.size, dtype=np.uint8)
        _mpi_wait(self, self.comm.Iallgather([send, MPI.BYTE], [out, MPI.BYTE]), "allgather",
                  (send, out))
        return out.tobytes()

    def barrier(self):
        _check_in_step(self, "barrier")
        _mpi_wait(self, self.comm.Ibarrier(), "barrier")


class Comm:
    """What the Python layer needs from a communicator."""

    def __init__(self, kind, obj, rank, size, store_comm, handshake_dir=None, ns=""):
        self.kind = kind            # "mpi" | "torch" | "file"
        self.obj = obj              # mpi4py comm / TorchComm / FileComm
        self.rank = rank
        self.size = size
        self.store_comm = store_comm  # what PyDDStore(comm_or_none) gets
        self.handshake_dir = handshake_dir
        self.ns = ns
        self._coll = None

    def __repr__(self):
        return f"Comm({self.kind}, rank {self.rank} of {self.size})"

    # -- collectives ---------------------------------------------------------
    # C (_core.Collective) over the FileComm, the mpi4py communicator or the
    # byte mover.  Each is bounded by DDSTORE_COLLECTIVE_TIMEOUT_S: when not
    # every rank enters it in time, the ranks that did raise DDStoreError,
    # and every later collective is refused (the ranks are out of step).
    def collective(self):
        if self._coll is None:
            obj = self.obj
            if self.kind == "mpi" and not _core.mpi_same_library():
                obj = _MpiBytes(obj)
            self._coll = _core.Collective(obj)
        return self._coll

    def allgather(self, obj, what="allgather"):
        """Every rank's `obj`, in rank order.  `obj`: None, bool, int, str,
        or tuples / lists / dicts of them; anything else is a TypeError on
        every rank."""
        if self.size == 1:
            wire_encode(obj, what)      # the same TypeError as with more ranks
            return [obj]
        return self.collective().allgather(obj, what)

    def barrier(self, what="barrier"):
        if self.size > 1:
            self.collective().barrier(what)

    def split(self, width):
        """Groups of `width` consecutive ranks (the last may be smaller)."""
        color, key = self.rank // width, self.rank % width
        if self.kind == "mpi":
            sub = self.obj.Split(color, key)
            return Comm("mpi", sub, sub.Get_rank(), sub.Get_size(), sub)
        if self.kind == "torch":
            import torch.distributed as dist
            ranks = self.obj.global_ranks()
            mine = None
            for c in range((self.size + width - 1) // width):
                g = dist.new_group(ranks[c * width:(c + 1) * width])  # collective: every rank, every group
                if c == color:
                    mine = g
            tc = TorchComm(mine)
            return Comm("torch", tc, tc.rank, tc.size, tc)
        size = min(width, self.size - color * width)
        fc = _make_filecomm(self.handshake_dir, key, size, f"{self.ns}.g{color}")
        return Comm("file", fc, key, size, fc, self.handshake_dir, f"{self.ns}.g{color}")


# -- timeouts -----------------------------------------------------------------

# Buffers of MPI requests that timed out: MPI cannot cancel a collective, and
# a late peer may still complete it, so its buffers must outlive it.
_ABANDONED = []


def is_out_of_step(exc):
    """True for the errors of a collective that timed out or was refused
    because the ranks are out of step (Python or C layer)."""
    msg = str(exc)
    return (" timed out after " in msg or "out of step" in msg
            or "collective mismatch" in msg)


def _check_in_step(comm, what):
    broken = getattr(comm, "_broken", None)
    if broken:
        raise pyddstore.DDStoreError(
            f"{what} refused: an earlier collective ({broken}) timed out, so the ranks "
            "are out of step")


def _timed_out(comm, what, timeout, size, detail=""):
    comm._broken = what
    extra = f" ({detail})" if detail else ""
    return pyddstore.DDStoreError(
        f"{what} timed out after {timeout:g} s: not every one of the {size} ranks "
        f"entered it (a rank skipped the call, or is stuck or much slower; "
        f"DDSTORE_COLLECTIVE_TIMEOUT_S){extra}")


def _mpi_wait(comm, req, what, keep=()):
    """Complete an mpi4py request within the collective timeout (polling)."""
    import time
    timeout = env.collective_timeout(fallback=True)
    t0 = time.monotonic()
    pause = 0.0
    while not req.Test():
        waited = time.monotonic() - t0
        if waited > timeout:
            _ABANDONED.append((req, keep))
            raise _timed_out(comm, what, timeout, comm.size)
        if waited > 0.002:
            pause = min(max(pause * 2, 2e-5), 1e-3)
            time.sleep(pause)


def _make_filecomm(handshake_dir, rank, size, ns):
    if not handshake_dir:
        raise ValueError("comm: a FileComm (no MPI, no torch.distributed) needs "
                         "handshake_dir= (or DDSTORE_HANDSHAKE_DIR) on a shared "
                         "filesystem")
    return pyddstore.FileComm(handshake_dir, rank, size, ns)


def _default_ns(name):
    job, step = env.job_step()
    parts = [p for p in (job, step, name) if p]
    return ".".join(parts) if parts else name


def _mpi_comm(comm):
    return Comm("mpi", comm, comm.Get_rank(), comm.Get_size(), comm)


def _torch_comm(group):
    import torch.distributed as dist
    if group is not None and group == dist.group.WORLD:
        group = None
    tc = TorchComm(group)
    return Comm("torch", tc, tc.rank, tc.size, tc)


def _file_comm(handshake_dir, name, fc=None):
    if fc is None:
        rs = env.slurm_rank_size()
        rank, size = rs if rs is not None else (0, 1)
        ns = _default_ns(name)
        fc = _make_filecomm(handshake_dir, rank, size, ns)
    else:
        ns = getattr(fc, "ns", "")
        handshake_dir = handshake_dir or getattr(fc, "dir", None)
    return Comm("file", fc, fc.rank, fc.size, fc, handshake_dir, ns)


def resolve(comm=None, handshake_dir=None, name=""):
    """A :class:`Comm` for DistDataset's `comm` argument (see module doc)."""
    if isinstance(comm, Comm):
        return comm
    if comm is not None:
        if _is_mpi4py(comm):
            c = _mpi_comm(comm)
            if _is_comm_world(comm):     # the README's call under torchrun
                _check_launch(c, "comm=MPI.COMM_WORLD")
            return c
        if _is_torch_group(comm):
            return _torch_comm(comm)
        if isinstance(comm, TorchComm):
            return Comm("torch", comm, comm.rank, comm.size, comm)
        if isinstance(comm, pyddstore.FileComm):
            return _file_comm(handshake_dir, name, comm)
        raise TypeError(f"comm: expected None, an mpi4py communicator, a "
                        f"torch.distributed group or a pyddstore.FileComm, got "
                        f"{type(comm).__name__}")
    kind = env.comm_kind()
    have_mpi = pyddstore.HAVE_MPI and env.use_mpi()
    if kind is None:
        tsize = _torch_world_size()
        if have_mpi:
            # torchrun (several torch.distributed ranks, a one-rank MPI
            # world): the torch.distributed group, never a one-rank store
            kind = "torch" if tsize > 1 and _mpi_world_size() == 1 else "mpi"
        else:
            kind = "torch" if tsize > 0 else "file"
    if kind == "mpi":
        if not pyddstore.HAVE_MPI:
            raise ValueError("DDSTORE_COMM=mpi, but this build of pyddstore has no MPI "
                             "(pyddstore.HAVE_MPI is False)")
        from mpi4py import MPI
        c = _mpi_comm(MPI.COMM_WORLD)
    elif kind == "torch":
        c = _torch_comm(None)
    else:
        c = _file_comm(handshake_dir, name)
    _check_launch(c)
    return c


def _torch_world_size():
    """The default torch.distributed group's size, 0 when not initialised."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover
        return 0
    if not (dist.is_available() and dist.is_initialized()):
        return 0
    return dist.get_world_size()


def _mpi_world_size():
    """MPI_COMM_WORLD's size.  MPI is started only if it may have several
    ranks: already initialised, or an MPI launcher (mpirun, mpiexec, srun)
    says so; under plain torchrun this is 1 without initialising MPI."""
    state = pyddstore._core._mpi_state()
    if not state["initialized"]:
        # an MPI launcher's variable (every one but torchrun's WORLD_SIZE)
        if not any(v != "WORLD_SIZE" and n > 1 for v, n, _ in env.launch_sizes()):
            return 1
    if state["finalized"]:
        return 1
    from mpi4py import MPI
    return MPI.COMM_WORLD.Get_size()


def _mpi_library():
    try:
        from mpi4py import MPI
        return MPI.Get_library_version().splitlines()[0].split(",")[0].strip()
    except Exception:  # noqa: BLE001 - only for the message
        return "this MPI"


def _is_comm_world(comm):
    from mpi4py import MPI
    try:
        return bool(comm == MPI.COMM_WORLD)
    except Exception:  # noqa: BLE001 - not comparable: not COMM_WORLD
        return False


def _check_launch(c, given="comm=None"):
    """comm=None (or an explicit MPI.COMM_WORLD: `given`) resolved to a
    one-rank communicator while the launcher says it started several
    processes: each would build a one-rank store holding the whole dataset.
    RuntimeError saying so and how to fix it (C: _core._launch_check)."""
    if c.size == 1:
        _core._launch_check(c.kind, given, _mpi_library() if c.kind == "mpi" else "")


# -- error agreement ----------------------------------------------------------

def agree(comm, exc, what=""):
    """Collective: raise on every rank if `exc` (an exception or None) is set
    on any rank.  The failing rank re-raises its own exception; the others
    raise the same built-in/pyddstore type (else RuntimeError) whose message
    names the rank.  A BaseException that is not an Exception
    (KeyboardInterrupt, SystemExit, GeneratorExit, ...) is agreed like any
    other: the others raise RuntimeError naming it and the rank.  Returns
    normally when every rank passed None.  The protocol is core's
    (dds_comm_agree_record), the exception rebuilt in C (_core.agree): one
    small exchange when every rank passed."""
    _core.agree(comm, exc, what)


# fn() on every rank; if it raises on any rank (any BaseException), raise on
# every rank (agree: the rank where it happened re-raises it)
run_agreed = _core.run_agreed
