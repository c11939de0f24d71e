"""Method 2, split jobs: a core job (tools/ddrun, MPI, m2_core.py) publishes
records in a handshake directory; separate reader jobs join and read.

The core job is a launch of its own; readers are plain processes (no MPI) or
this test process.  These tests start their own jobs, so they run in the
1-rank stage only (rank 0 of larger stages skips them, with that reason).
"""
import glob
import os
import signal
import stat
import struct
import subprocess
import sys
import textwrap
import threading
import time
import zlib

import numpy as np
import pytest

import pyddstore
from _util import launch_size as _world_size

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
DDRUN = os.path.join(TOP, "tools", "ddrun")
sys.path.insert(0, HERE)
import m2_core  # noqa: E402


pytestmark = pytest.mark.skipif(
    _world_size() != 1, reason="method-2 split-job tests launch their own jobs: 1-rank stage only")

# launcher variables that must not leak into the jobs started here
_LAUNCH = ("OMPI_", "PMIX_", "PMI_", "HYDRA_", "SLURM_")
_KEEP = {"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"}
FABRICS = ["shm", "tcp"]


# gated on the build flag, never on a probe: a build with libfabric must
# run method 2, so an error creating a store fails the tests
if not pyddstore.HAVE_OFI:
    pytestmark = [pytestmark, pytest.mark.skip(
        reason="method 2 needs libfabric (HAVE_OFI False)")]


def _env(top, extra=None):
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith(_LAUNCH) and k not in _KEEP)}
    env["PYTHONPATH"] = top
    env.update(extra or {})
    return env


class Core:
    """A core job of n ranks running m2_core.py: tools/ddrun with MPI, or in
    a build without MPI n plain processes over a FileComm (SLURM_PROCID /
    SLURM_NTASKS).  Each launch is a session of its own, so that the whole
    job can be killed."""

    def __init__(self, top, hs, n, tag=1, ns="", fabric="shm", extra=None, args=()):
        self.hs, self.n, self.tag = hs, n, tag
        env = _env(top, {"DDSTORE_FABRIC": fabric, **(extra or {})})
        args = [sys.executable, os.path.join(HERE, "m2_core.py"), hs, "--ns", ns,
                "--tag", str(tag), *args]
        kw = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                  start_new_session=True)
        if pyddstore.HAVE_MPI:
            self.procs = [subprocess.Popen([DDRUN, "-n", str(n), "--timeout", "300", "--"]
                                           + args, env=env, **kw)]
        else:
            os.makedirs(hs.rstrip("/") + "-comm", mode=0o700, exist_ok=True)
            self.procs = [subprocess.Popen(args + ["--comm", "file"],
                                           env=dict(env, SLURM_PROCID=str(r),
                                                    SLURM_NTASKS=str(n)), **kw)
                          for r in range(n)]

    def _outputs(self):
        return "\n".join(p.stdout.read() for p in self.procs if not p.stdout.closed)

    def wait_ready(self, timeout=120):
        ready = os.path.join(self.hs, f"core-ready-{self.tag}")
        t0 = time.monotonic()
        while not os.path.exists(ready):
            dead = [p.returncode for p in self.procs if p.poll() is not None]
            if dead:
                raise AssertionError(f"core job exited with {dead}:\n{self._outputs()}")
            assert time.monotonic() - t0 < timeout, "core job not ready in time"
            time.sleep(0.05)

    def stop(self, timeout=120):
        open(os.path.join(self.hs, f"core-stop-{self.tag}"), "w").close()
        outs = []
        try:
            for p in self.procs:
                outs.append(p.communicate(timeout=timeout)[0])
        finally:
            self.kill()
        rcs = [p.returncode for p in self.procs]
        assert rcs == [0] * len(rcs), f"core job failed ({rcs}):\n" + "\n".join(outs)

    def kill(self):
        """SIGKILL every process of the job: its sessions (timeout and
        mpirun move the ranks into process groups of their own)."""
        killed = set()
        for p in self.procs:
            if p.returncode is None:
                for _ in range(3):
                    for pid in _session(p.pid):
                        killed.add(pid)
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    time.sleep(0.05)
                p.wait()
            while _session(p.pid):     # ranks reaped by init
                time.sleep(0.05)
            if not p.stdout.closed:
                p.stdout.close()
        # the shm provider's regions of killed ranks stay in /dev/shm
        for pid in killed:
            for f in glob.glob(f"/dev/shm/{pid}:*"):
                try:
                    os.unlink(f)
                except OSError:
                    pass


def _session(sid):
    """pids of the processes of session `sid`."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        fields = st[st.rindex(")") + 2:].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(int(d))
    return out


@pytest.fixture
def hs(tmp_path):
    return str(tmp_path / "hs")


def _reader(hs, n_core, **kw):
    return pyddstore.PyDDStore(None, method=2, handshake_dir=hs, n_core=n_core, **kw)


def _wait_file(path, timeout=120):
    t0 = time.monotonic()
    while not os.path.exists(path):
        assert time.monotonic() - t0 < timeout, f"{path} did not appear"
        time.sleep(0.02)


def _check_all(s, n, tag, hs):
    """join every variable (join waits for the records), then, once the core
    job says its update()s are done (core-ready-TAG: a variable is published
    at init(), before the rows it will hold are written), compare every
    value (get and get_batch)."""
    want = m2_core.expected(n, tag)
    for name in want:
        s.join(name)
    _wait_file(os.path.join(hs, f"core-ready-{tag}"))
    for name, w in want.items():
        total, disp, _ = s.info(name)[:3]
        assert (total, disp) == w.shape
        got = np.zeros_like(w)
        s.get(name, got, 0)
        np.testing.assert_array_equal(got, w)
        idx = np.random.default_rng(7).integers(0, total, 64)
        got = np.zeros((len(idx), w.shape[1]), w.dtype)
        s.get_batch(name, got, idx)
        np.testing.assert_array_equal(got, w[idx])


@pytest.mark.parametrize("fabric", FABRICS)
def test_split_jobs_two_launches(top, hs, fabric):
    """Core job (2 ranks, MPI) and a reader job of 2 plain processes
    (no MPI, SLURM_PROCID/SLURM_NTASKS) sharing only the directory; the
    readers check every value, also from 8 threads at once."""
    core = Core(top, hs, 2, fabric=fabric)
    try:
        code = textwrap.dedent(f"""
            import os, sys, threading, time
            import numpy as np
            sys.path.insert(0, {HERE!r})
            import m2_core, pyddstore
            s = pyddstore.PyDDStore(None, method=2, handshake_dir={hs!r}, n_core=2)
            want = m2_core.expected(2, 1)
            for name in want:
                s.join(name)
            assert s.info("a")[0] == len(want["a"])
            # "c" is published at init(), its rows written by update() after
            while not os.path.exists({os.path.join(hs, "core-ready-1")!r}):
                time.sleep(0.02)
            errs = []
            def work(t):
                try:
                    rd = s.open_reader()
                    rng = np.random.default_rng(t)
                    for _ in range(30):
                        for name, w in want.items():
                            idx = rng.integers(0, len(w), 16)
                            got = np.zeros((16, w.shape[1]), w.dtype)
                            rd.get_batch(name, got, idx)
                            if not np.array_equal(got, w[idx]):
                                errs.append((t, name))
                    rd.close()
                except Exception as e:
                    errs.append((t, repr(e)))
            th = [threading.Thread(target=work, args=(t,)) for t in range(8)]
            [x.start() for x in th]
            [x.join() for x in th]
            assert not errs, errs
            got = np.zeros_like(want["b"])
            s.get("b", got)
            assert np.array_equal(got, want["b"])
            s.free()
            print("READER-OK")
        """)
        readers = [subprocess.Popen([sys.executable, "-c", code],
                                    env=_env(top, {"SLURM_PROCID": str(r), "SLURM_NTASKS": "2"}),
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                   for r in range(2)]
        outs = []
        for p in readers:
            out, _ = p.communicate(timeout=240)
            outs.append((p.returncode, out))
        for rc, out in outs:
            assert rc == 0 and "READER-OK" in out, out
        # files: 0600 records in a 0700 directory the core job created
        assert stat.S_IMODE(os.stat(hs).st_mode) == 0o700
        recs = [f for f in os.listdir(hs) if f.endswith(".ddshs")]
        assert sorted(recs) == ["a.ddshs", "b.ddshs", "c.ddshs"]
        for f in recs:
            assert stat.S_IMODE(os.stat(os.path.join(hs, f)).st_mode) == 0o600
        core.stop()
        # a core job that frees its variables removes their records
        assert not [f for f in os.listdir(hs) if f.endswith(".ddshs")]
    finally:
        core.kill()


def test_core_job_without_mpi(top, hs):
    """A core job of plain processes (no MPI: FileComm, SLURM_PROCID /
    SLURM_NTASKS) publishes; a reader joins and checks every value."""
    os.makedirs(hs.rstrip("/") + "-comm", mode=0o700)
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "m2_core.py"), hs,
                               "--comm", "file", "--tag", "11"],
                              env=_env(top, {"SLURM_PROCID": str(r), "SLURM_NTASKS": "3",
                                             "DDSTORE_FABRIC": "tcp"}),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(3)]
    try:
        s = _reader(hs, 3)
        _check_all(s, 3, 11, hs)
        s.free()
        open(os.path.join(hs, "core-stop-11"), "w").close()
        for p in procs:
            out, _ = p.communicate(timeout=120)
            assert p.returncode == 0, out
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.parametrize("n", [1, 4])
def test_reader_in_this_process(top, hs, n):
    """Core jobs of 1 and 4 ranks (rank 1 of 4 owns no row); join waits
    for records that appear after it started; a second store joins too."""
    core = Core(top, hs, n, tag=3)
    try:
        s = _reader(hs, n)          # before the core job has published
        _check_all(s, n, 3, hs)
        assert s.info("a")[0] == m2_core.layout(n)[2]
        with pytest.raises(ValueError, match="already exists"):
            s.join("a")
        with pytest.raises(ValueError, match="read-only"):
            s.update("a", np.zeros((1, 4), np.int64), 0)
        with pytest.raises(ValueError, match="n_core=%d" % n):
            s.add("mine", np.zeros((2, 2), np.int64))
        # a second reader store in the same process joins the same records
        s2 = _reader(hs, n)
        _check_all(s2, n, 3, hs)
        s2.free()
        s.free()
        core.stop()
    finally:
        core.kill()


def test_wrong_n_core(top, hs):
    core = Core(top, hs, 2, tag=4)
    try:
        core.wait_ready()
        s = _reader(hs, 3)
        t0 = time.monotonic()
        with pytest.raises(ValueError, match=r"has 2 ranks.*n_core=3"):
            s.join("a")
        assert time.monotonic() - t0 < 10     # at once, not after the timeout
        s.free()
        core.stop()
    finally:
        core.kill()


def test_join_timeout_names_missing_record(hs, monkeypatch):
    monkeypatch.setenv("DDSTORE_HANDSHAKE_TIMEOUT_S", "0.5")
    s = _reader(hs, 2)
    t0 = time.monotonic()
    with pytest.raises(pyddstore.DDStoreError, match="DDSTORE_HANDSHAKE_TIMEOUT_S") as e:
        s.join("nothing")
    assert "nothing.ddshs does not exist" in str(e.value)
    assert 0.4 < time.monotonic() - t0 < 10
    s.free()


def test_stale_record_of_a_killed_core_job(top, hs, monkeypatch):
    """A core job killed with SIGKILL leaves its records behind: a reader
    rejects them as stale (naming the dead rank), keeps waiting, and joins
    the records of the next core run when it comes."""
    old = Core(top, hs, 2, tag=5)
    old.wait_ready()
    old.kill()
    assert os.path.exists(os.path.join(hs, "a.ddshs"))
    monkeypatch.setenv("DDSTORE_HANDSHAKE_TIMEOUT_S", "1")
    s = _reader(hs, 2)
    t0 = time.monotonic()
    with pytest.raises(pyddstore.DDStoreError, match=r"stale.*has exited"):
        s.join("a")
    assert time.monotonic() - t0 < 10
    s.free()
    # the next run: join (started first) waits through the stale record
    # (the timeout is read when a store is created)
    monkeypatch.setenv("DDSTORE_HANDSHAKE_TIMEOUT_S", "120")
    s = _reader(hs, 2)
    box = {}

    def join():
        try:
            _check_all(s, 2, 6, hs)
            box["ok"] = True
        except Exception as e:  # noqa: BLE001
            box["err"] = e
    th = threading.Thread(target=join)
    th.start()
    time.sleep(0.5)
    new = Core(top, hs, 2, tag=6)
    try:
        th.join(180)
        assert box.get("ok"), box
        s.free()
        new.stop()
    finally:
        new.kill()


def test_exchange_ns(top, hs, monkeypatch):
    core = Core(top, hs, 2, tag=7, ns="runA")
    try:
        core.wait_ready()
        monkeypatch.setenv("DDSTORE_HANDSHAKE_TIMEOUT_S", "0.5")
        s = _reader(hs, 2, exchange_ns="runB")
        with pytest.raises(pyddstore.DDStoreError, match="namespace 'runA'.*expects namespace 'runB'"):
            s.join("a")
        s.free()
        monkeypatch.setenv("DDSTORE_EXCHANGE_NS", "runA")
        s = _reader(hs, 2)
        _check_all(s, 2, 7, hs)
        s.free()
        core.stop()
    finally:
        core.kill()


@pytest.mark.parametrize("fabric", FABRICS)
def test_core_job_killed_while_reading(top, hs, fabric, monkeypatch):
    """Reads from a core job that died fail within DDSTORE_READ_TIMEOUT_S,
    with an error, not a hang; the store can still be freed."""
    monkeypatch.setenv("DDSTORE_READ_TIMEOUT_S", "5")
    core = Core(top, hs, 2, tag=8, fabric=fabric)
    try:
        s = _reader(hs, 2)
        _check_all(s, 2, 8, hs)
        core.kill()
        time.sleep(0.2)
        w = m2_core.expected(2, 8)["a"]
        got = np.zeros((len(w), 4), np.int64)
        t0 = time.monotonic()
        returned, other = [], []
        for i in range(50):              # every read must fail, the first one included
            got[:] = -1
            try:
                s.get("a", got, 0)
            except pyddstore.DDStoreError:
                pass
            except Exception as e:  # noqa: BLE001
                other.append((i, repr(e)))
            else:
                returned.append(i)
        assert not returned, f"reads {returned} of 50 after the kill returned rows"
        assert not other, f"reads that failed with another error than DDStoreError: {other}"
        assert time.monotonic() - t0 < 5 + 15
        s.free()
    finally:
        core.kill()


@pytest.mark.parametrize("fabric,cma", [("shm", "1"), ("shm", "0"), ("tcp", "1")])
def test_variable_freed_by_the_core_job(top, hs, fabric, cma, monkeypatch):
    """The core job free()s and stays alive: a reader that joined its
    variables gets an error naming the variable from its next read on, never
    the freed memory's bytes (shm: direct reads with CMA and the provider's
    without; tcp: the registration is gone).  A thread that reads while the
    free happens sees right rows or the error, nothing else."""
    monkeypatch.setenv("DDSTORE_OFI_CMA", cma)
    monkeypatch.setenv("DDSTORE_READ_TIMEOUT_S", "5")
    tag = 11
    core = Core(top, hs, 2, tag=tag, fabric=fabric, extra={"DDSTORE_OFI_CMA": cma},
                args=["--free-early"])
    try:
        s = _reader(hs, 2)
        _check_all(s, 2, tag, hs)
        w = m2_core.expected(2, tag)["a"]
        seen = {"ok": 0, "wrong": 0, "err": None}
        stop = threading.Event()

        def reader():
            got = np.zeros_like(w)
            while not stop.is_set():
                try:
                    s.get("a", got, 0)
                except pyddstore.DDStoreError as e:
                    seen["err"] = str(e)
                    return
                if np.array_equal(got, w):
                    seen["ok"] += 1
                else:
                    seen["wrong"] += 1

        th = threading.Thread(target=reader)
        th.start()
        time.sleep(0.2)
        open(os.path.join(hs, f"core-free-{tag}"), "w").close()
        _wait_file(os.path.join(hs, f"core-freed-{tag}"))
        th.join(timeout=30)
        stop.set()
        th.join()
        assert seen["wrong"] == 0, seen
        assert seen["ok"] > 0, seen
        assert seen["err"] is not None and "'a'" in seen["err"], seen
        for name, arr in (("a", np.zeros_like(w)), ("b", np.zeros((len(w), 3), np.float32))):
            for _ in range(3):       # every read fails, and the store stays usable
                with pytest.raises(pyddstore.DDStoreError, match=f"'{name}'"):
                    s.get(name, arr, 0)
        s.free()
        core.stop()
    finally:
        core.kill()


# -- corrupted records ------------------------------------------------------

def _valid_record(top, hs):
    core = Core(top, hs, 2, tag=9)
    try:
        core.wait_ready()
        with open(os.path.join(hs, "a.ddshs"), "rb") as f:
            data = f.read()
        core.stop()
    finally:
        core.kill()
    return data


def _with_crc(b):
    b = bytearray(b)
    b[24:28] = b"\0\0\0\0"
    b[24:28] = struct.pack("<I", zlib.crc32(bytes(b)) & 0xffffffff)
    return bytes(b)


def test_corrupted_records(top, hs, tmp_path, monkeypatch):
    """Every damaged record is a clear, immediate error naming what is
    wrong; the reader store stays usable."""
    good = _valid_record(top, hs)
    # format 3: the header, a host table (one host: a length byte and the
    # name), then per rank 98 bytes and the address at its length (u16 at
    # byte 48 of the entry), not padded to 320
    assert good[:8] == b"DDSHAKE\0" and struct.unpack_from("<I", good, 8)[0] == 3
    assert struct.unpack_from("<I", good, 88)[0] == 1
    rank0 = 512 + 1 + good[512]
    o = rank0
    for _ in range(2):
        alen = struct.unpack_from("<H", good, o + 48)[0]
        assert 48 < alen < 320, alen
        o += 98 + alen
    assert o == len(good) < 512 + 2 * 480
    assert _with_crc(good) == good       # the CRC is zlib's CRC-32
    bad = {
        "empty": (b"", "truncated|too short|size"),
        "truncated": (good[:700], "truncated|size"),
        "extended": (good + b"\0" * 16, "trailing data"),
        "magic": (b"XXSHAKE\0" + good[8:], "magic"),
        "bitflip": (good[:600] + bytes([good[600] ^ 1]) + good[601:], "CRC"),
        "version": (_with_crc(good[:8] + struct.pack("<I", 7) + good[12:]), "version 7"),
        "nranks": (_with_crc(good[:28] + struct.pack("<I", 3) + good[32:]),
                   "truncated: rank 2's entry"),
        "version 2": (_with_crc(good[:8] + struct.pack("<I", 2) + good[12:]),
                      "version 2, this reader understands 3"),
        "hosts": (_with_crc(good[:88] + struct.pack("<I", 3) + good[92:]), "host count 3"),
        "rows": (_with_crc(good[:rank0] + struct.pack("<q", -4) + good[rank0 + 8:]),
                 "rows"),
        "garbage": (os.urandom(1472), "magic|CRC"),
    }
    monkeypatch.setenv("DDSTORE_HANDSHAKE_TIMEOUT_S", "30")
    d = tmp_path / "bad"
    d.mkdir(mode=0o700)
    for what, (data, pat) in bad.items():
        (d / "a.ddshs").write_bytes(data)
        s = _reader(str(d), 2)
        t0 = time.monotonic()
        with pytest.raises(pyddstore.DDStoreError, match=pat) as e:
            s.join("a")
        assert time.monotonic() - t0 < 5, what          # not after the timeout
        assert "a.ddshs" in str(e.value), (what, str(e.value))
        s.free()
    # the record of another variable name
    (d / "x.ddshs").write_bytes(good)
    s = _reader(str(d), 2)
    with pytest.raises(pyddstore.DDStoreError, match="holds variable 'a', expected 'x'"):
        s.join("x")
    s.free()


def test_tools_inspect(top, hs):
    """tools/ddstore-handshake prints a record (and rejects a bad one)."""
    tool = os.path.join(TOP, "tools", "ddstore-handshake")
    if not os.path.exists(tool):
        pytest.skip("tools/ddstore-handshake not in this tree")
    good = _valid_record(top, hs)
    p = os.path.join(hs, "copy.ddshs")
    with open(p, "wb") as f:
        f.write(good)
    r = subprocess.run([sys.executable, tool, p], capture_output=True, text=True,
                       env=_env(top))
    assert r.returncode == 0, r.stderr
    assert "name a" in r.stdout and "2 ranks" in r.stdout
    with open(p, "wb") as f:
        f.write(good[:100])
    r = subprocess.run([sys.executable, tool, p], capture_output=True, text=True,
                       env=_env(top))
    assert r.returncode != 0 and "copy.ddshs" in r.stderr


# -- the shared directory is not trusted blindly (docs/security.md) ------------

def test_record_names_carry_the_namespace(top, hs, monkeypatch):
    """Two core jobs publishing the same names in one directory, in two
    namespaces: each reader reads its own job's rows, one job's free() leaves
    the other's records, and a reader that names no namespace is told to
    choose instead of getting either."""
    a = Core(top, hs, 1, tag=11, ns="jobA")
    b = Core(top, hs, 1, tag=12, ns="jobB")
    try:
        a.wait_ready()
        b.wait_ready()
        assert os.path.exists(os.path.join(hs, "jobA@a.ddshs"))
        assert os.path.exists(os.path.join(hs, "jobB@a.ddshs"))
        assert not os.path.exists(os.path.join(hs, "a.ddshs"))
        for ns, tag in (("jobA", 11), ("jobB", 12)):
            s = _reader(hs, 1, exchange_ns=ns)
            _check_all(s, 1, tag, hs)
            s.free()
        monkeypatch.setenv("DDSTORE_HANDSHAKE_TIMEOUT_S", "2")
        s = _reader(hs, 1)
        with pytest.raises(ValueError, match=r"several core runs.*'jobA', 'jobB'"):
            s.join("a")
        s.free()
        a.stop()                       # frees: removes jobA's records only
        assert not os.path.exists(os.path.join(hs, "jobA@a.ddshs"))
        assert os.path.exists(os.path.join(hs, "jobB@a.ddshs"))
        s = _reader(hs, 1)             # one namespace left: taken
        _check_all(s, 1, 12, hs)
        s.free()
        b.stop()
    finally:
        a.kill()
        b.kill()


_FIFO_JOIN = """
    import time, pyddstore
    s = pyddstore.PyDDStore(None, method=2, handshake_dir=%r, n_core=1)
    t0 = time.monotonic()
    try:
        s.join("a")
    except Exception as e:
        print(type(e).__name__, e, "after %%.1f s" %% (time.monotonic() - t0))
"""


def test_fifo_or_link_at_a_record_path(top, tmp_path):
    """A FIFO where a record is read blocked open() forever (a 5 s join
    timeout still hung at 40 s): now an error naming it, at once."""
    d = tmp_path / "hs"
    d.mkdir(mode=0o700)
    os.mkfifo(d / "a.ddshs", 0o600)
    code = "import sys; sys.path.insert(0, %r)\n" % top + textwrap.dedent(_FIFO_JOIN % str(d))
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=40, env=_env(top, {"DDSTORE_HANDSHAKE_TIMEOUT_S": "5"}))
    except subprocess.TimeoutExpired:
        pytest.fail("join() blocked on a FIFO at the record path")
    assert "not a regular file" in r.stdout and "a.ddshs" in r.stdout, r.stdout + r.stderr
    assert float(r.stdout.split("after ")[1].split(" s")[0]) < 5, r.stdout
    os.unlink(d / "a.ddshs")
    (d / "elsewhere").write_bytes(b"x")
    os.symlink(d / "elsewhere", d / "a.ddshs")
    s = _reader(str(d), 1)
    with pytest.raises(pyddstore.DDStoreError, match="symbolic link"):   # planted, as a FIFO
        s.join("a")
    s.free()


def test_handshake_dir_others_could_write(tmp_path, monkeypatch):
    """Records in a directory others may write to, or of another user, are
    not trusted: the reader fails at once; the core job refuses it."""
    monkeypatch.setenv("DDSTORE_HANDSHAKE_TIMEOUT_S", "30")
    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    s = _reader(str(d), 1)
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="writable by others"):
        s.join("a")
    assert time.monotonic() - t0 < 5
    s.free()
    fc = pyddstore.FileComm(str(tmp_path / "fc"), rank=0, size=1, ns="c")
    with pytest.raises(ValueError, match="writable by others"):
        pyddstore.PyDDStore(fc, method=2, handshake_dir=str(d))
    if os.geteuid() != 0:
        pytest.skip("a directory of another user needs root (chown to nobody)")
    os.chmod(d, 0o700)
    os.chown(d, 65534, 65534)
    s = _reader(str(d), 1)
    with pytest.raises(ValueError, match="owned by uid 65534"):
        s.join("a")
    s.free()
    with pytest.raises(ValueError, match="owned by uid 65534"):
        pyddstore.PyDDStore(fc, method=2, handshake_dir=str(d))
