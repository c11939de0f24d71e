"""Shared helpers of the pyddstore tests: deterministic data and layouts.

Every rank computes the same reference values from the global row index, so a
rank checks what it read without talking to the others.  Shard sizes are not
multiples of anything (and some shards are empty when asked), so the tests do
not depend on the number of ranks.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np

DTYPES = [np.bool_, np.uint8, np.int32, np.int64, np.float16, np.float32, np.float64]
DTYPE_IDS = ["bool", "uint8", "int32", "int64", "float16", "float32", "float64"]


def local_rows(rank, zero_odd=False):
    """Rows of `rank`'s shard: 5, 2, 4, 6, 3, 5, ... (0 on odd ranks when
    zero_odd)."""
    if zero_odd and rank % 2 == 1:
        return 0
    return 2 + (7 * rank + 3) % 5


def layout(size, zero_odd=False):
    """Owner offsets (size+1 prefix sums)."""
    off = [0]
    for r in range(size):
        off.append(off[-1] + local_rows(r, zero_odd))
    return off


def values(dtype, rows, disp):
    """Reference rows: element j of global row g, exact in every dtype."""
    g = np.asarray(rows, dtype=np.int64).reshape(-1, 1)
    j = np.arange(disp, dtype=np.int64).reshape(1, -1)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        v = (g + j) % 3 == 0
    elif dt == np.uint8:
        v = (g * 7 + j) % 251
    elif dt == np.int32:
        v = g * 1000 + j - 7000
    elif dt == np.int64:
        v = g * (1 << 33) + j - 5
    elif dt == np.float16:
        # bit patterns: NaNs with payloads, infinities, -0.0, subnormals
        return half_bits(g * 977 + j * 131 + (g + j) % 8, special=(g * 3 + j) % 2 == 0) \
            .view(np.float16)
    elif dt == np.float32:
        v = g * 0.5 + j * 0.25
    else:
        v = g * 1250.0 + j / 4.0
    return np.ascontiguousarray(v.astype(dt))


# 2-byte float bit patterns that a conversion or arithmetic would change:
# -0.0, +-inf and NaNs with payloads in float16 (0x7C00 = inf) and in bfloat16
# (0x7F80 = inf), a signalling NaN, the smallest subnormals.
HALF_SPECIALS = np.array([0x8000, 0x7C00, 0xFC00, 0x7E01, 0x7C01, 0xFFFF, 0x0001,
                          0x7F81, 0xFF80, 0x7FC1, 0x8001], dtype=np.uint16)


def half_bits(k, special=False):
    """uint16 bit patterns for 2-byte floats (float16, bfloat16): k mod 2**16,
    or HALF_SPECIALS[k mod len] where `special` (a bool array like k)."""
    k = np.asarray(k, dtype=np.int64)
    bits = (k % 65536).astype(np.uint16)
    sp = HALF_SPECIALS[k % len(HALF_SPECIALS)]
    return np.ascontiguousarray(np.where(special, sp, bits).astype(np.uint16))


def add_var(store, name, dtype, disp, zero_odd=False, oned=False):
    """Collective: add this rank's shard of `name`; returns the offsets."""
    off = layout(store.size, zero_odd)
    lo, hi = off[store.rank], off[store.rank + 1]
    shard = values(dtype, np.arange(lo, hi), disp)
    if oned:
        assert disp == 1
        shard = shard.reshape(-1)
    store.add(name, shard)
    shard[...] = 0  # host data is copied: the caller may reuse its array
    return off


def intervals_overlap(windows):
    """windows: list of (thread, t0, t1).  True if two different threads'
    intervals intersect."""
    ws = sorted(windows, key=lambda w: w[1])
    for i, (ti, a0, a1) in enumerate(ws):
        for tj, b0, b1 in ws[i + 1:]:
            if b0 >= a1:
                break
            if tj != ti:
                return True
    return False


def ticks_during_reads(read):
    """Run `read()` (which returns the C-side windows of the reads it made,
    _core._last_read_window()) in a thread while this thread takes time
    stamps; returns how many stamps fall inside those windows (> 0: Python
    ran while a read was in flight, so the reads released the GIL).  An
    exception of `read` is raised here."""
    import threading
    from pyddstore import _core
    ticks, win, errors = [], [], []
    done = threading.Event()

    def run():
        try:
            win.extend(read())
        except BaseException as e:  # noqa: BLE001 - raised below
            errors.append(e)
        finally:
            done.set()

    th = threading.Thread(target=run)
    th.start()
    while not done.is_set():
        ticks.append(_core._now_ns())
    th.join()
    if errors:
        raise errors[0]
    t = np.sort(np.array(ticks, np.uint64))
    return sum(int(np.searchsorted(t, b) - np.searchsorted(t, a, "right"))
               for a, b in win)


def outcome(call):
    """Run `call` (typically a collective one) and return the exception it
    raised, or None.  Tests check outcomes after every rank has made all its
    collective calls, so that a failed check on one rank cannot leave the
    others waiting in the next collective."""
    try:
        call()
    except Exception as e:  # noqa: BLE001 - the caller checks the type
        return e
    return None


def launch_rank():
    """This process's rank as the launcher says (0 without a launcher)."""
    for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if v in os.environ:
            return int(os.environ[v])
    return 0


def launch_size():
    """The number of ranks the launcher started (1 without a launcher)."""
    for v in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"):
        if v in os.environ:
            return int(os.environ[v])
    return 1


# Launcher variables (Open MPI, PMIx, PMI, Hydra, Slurm): a process a test
# starts without them is no rank of this job; Open MPI's run-as-root
# permission stays.
LAUNCH_PREFIXES = ("OMPI_", "PMIX_", "PMI_", "HYDRA_", "SLURM_")
_KEEP = {"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"}


def plain_env(top, rank, size, extra=None):
    """The environment of plain process `rank` of `size` (no launcher, rank
    and size in SLURM_PROCID/SLURM_NTASKS as FileComm reads them) importing
    pyddstore from the directory `top`; `extra` added."""
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith(LAUNCH_PREFIXES) and k not in _KEEP)}
    env["PYTHONPATH"] = top
    env["SLURM_PROCID"] = str(rank)
    env["SLURM_NTASKS"] = str(size)
    env.update(extra or {})
    return env


def spawn_plain(top, n, code, extra=None, timeout=120):
    """Start n plain interpreters running `code` (dedented) with plain_env;
    [(rc, stdout, stderr)] in rank order.  Any still running at the end is
    killed."""
    prelude = "import sys; sys.path.insert(0, %r)\n" % top
    procs = [subprocess.Popen([sys.executable, "-c", prelude + textwrap.dedent(code)],
                              env=plain_env(top, r, n, extra), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for r in range(n)]
    res = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            res.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return res


# launcher variables that must not leak into a job a test starts itself
# (the single-node Open MPI settings stay)
_JOB_LAUNCH = ("OMPI_", "PMIX_", "PMI_", "HYDRA_", "SLURM_")
_JOB_KEEP = {"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "OMPI_MCA_btl",
             "OMPI_MCA_rmaps_base_oversubscribe"}


def job_env(top, extra=None):
    """The environment of a job a test launches (tools/ddrun or plain
    processes): this one without the launcher's variables, PYTHONPATH=top,
    then `extra`."""
    import os
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith(_JOB_LAUNCH) and k not in _JOB_KEEP)}
    env["PYTHONPATH"] = top
    env.update(extra or {})
    return env
