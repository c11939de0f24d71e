"""Whole-interpreter behaviour, each case in a fresh single-rank Python:
import order, MPI is not started by import, interpreter exit (atexit
destroys the stores, finalises MPI if pyddstore started it), calls after
MPI_Finalize or after the store was destroyed never crash, and the libfabric
environment set on import.

These spawn one-rank (singleton) interpreters, the same at any rank count
of the suite, so they run in the 1-rank stage only."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import pyddstore
from _util import launch_rank as _rank, launch_size as _world_size

KEEP = {"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "OMPI_MCA_btl",
        "OMPI_MCA_rmaps_base_oversubscribe"}


# Each case starts interpreters (and jobs) of its own, the same whatever the
# rank count of the suite: they run once, in the 1-rank stage.
pytestmark = pytest.mark.skipif(
    _rank() != 0 or _world_size() != 1,
    reason="subprocess tests: they start their own processes, so they run in the 1-rank stage only")


def run_py(top, code, env_extra=None, drop=(), timeout=120):
    """Run `code` in a fresh singleton interpreter importing pyddstore from
    `top`; returns (rc, out, err)."""
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith(("OMPI_", "PMIX_", "PMI_", "HYDRA_")) and k not in KEEP)}
    for k in drop:
        env.pop(k, None)
    env.update(env_extra or {})
    env["PYTHONPATH"] = top
    prelude = "import sys; sys.path.insert(0, %r)\n" % top
    p = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                       env=env, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def ok(top, code, **kw):
    rc, out, err = run_py(top, code, **kw)
    assert rc == 0, "rc %d\nstdout:\n%s\nstderr:\n%s" % (rc, out, err)
    assert "Traceback" not in err, err
    return out


def test_import_does_not_start_mpi_or_import_torch(top):
    out = ok(top, """
        import pyddstore
        from pyddstore import _core
        assert not _core._mpi_state()["initialized"]
        assert "mpi4py" not in sys.modules and "torch" not in sys.modules
        import mpi4py
        mpi4py.rc.initialize = False
        from mpi4py import MPI
        assert not MPI.Is_initialized()
        print("OK")
    """)
    assert "OK" in out


@pytest.mark.skipif(not pyddstore.HAVE_MPI, reason="needs an MPI build")
def test_pyddstore_first_then_mpi4py(top):
    out = ok(top, """
        import numpy as np, pyddstore
        import mpi4py
        mpi4py.rc.initialize = False
        from mpi4py import MPI
        s = pyddstore.PyDDStore(None)        # pyddstore starts MPI here
        assert MPI.Is_initialized()
        assert pyddstore._core._mpi_state()["started_by_pyddstore"]
        s.add("x", np.arange(6.0).reshape(3, 2))
        o = np.zeros((3, 2)); s.get("x", o)
        assert (o.ravel() == np.arange(6.0)).all()
        t = pyddstore.PyDDStore(MPI.COMM_WORLD)
        t.init("y", 2, 2)
        print("OK")
        # exit without free(): atexit destroys both stores, then finalises MPI
    """)
    assert "OK" in out


@pytest.mark.skipif(not pyddstore.HAVE_MPI, reason="needs an MPI build")
def test_mpi4py_first_then_pyddstore(top):
    out = ok(top, """
        from mpi4py import MPI               # mpi4py starts (and finalises) MPI
        import numpy as np, pyddstore
        s = pyddstore.PyDDStore(MPI.COMM_WORLD)
        assert not pyddstore._core._mpi_state()["started_by_pyddstore"]
        s.add("x", np.arange(4, dtype=np.int32))
        o = np.zeros(4, np.int32); s.get("x", o)
        assert list(o) == [0, 1, 2, 3]
        u = pyddstore.PyDDStore()
        u.add("x", np.ones((2, 2)))
        print("OK")
    """)
    assert "OK" in out


@pytest.mark.skipif(not pyddstore.HAVE_MPI, reason="needs an MPI build")
def test_calls_after_mpi_finalize_never_crash(top):
    out = ok(top, """
        from mpi4py import MPI
        import numpy as np, pyddstore
        s = pyddstore.PyDDStore(MPI.COMM_WORLD)
        s.add("x", np.arange(4.0))
        r = s.open_reader()
        MPI.Finalize()
        o = np.zeros(2)
        # reads of this rank's own rows need no MPI (the store copies them):
        # they may succeed; remote reads and collectives raise
        for call in (lambda: s.get("x", o), lambda: s.get_batch("x", o, [0, 1]),
                     lambda: r.get("x", o)):
            o[:] = -1
            try:
                call()
                assert list(o) == [0.0, 1.0], o
            except pyddstore.DDStoreError as e:
                print("DDStoreError:", e)
        for call in (lambda: s.init("y", 1, 1), lambda: s.add("z", o)):
            try:
                call()
                print("no error?")
            except pyddstore.DDStoreError as e:
                print("DDStoreError:", e)
        s.epoch_begin()                      # collective; one rank: must not crash
        s.info("x")
        try:
            s.free()                        # safe after MPI_Finalize
        except pyddstore.DDStoreError as e:
            print("free:", e)
        s.free()
        try:
            pyddstore.PyDDStore(None)
        except pyddstore.DDStoreError as e:
            print("new store:", e)
        print("OK")
    """)
    assert "OK" in out and "no error?" not in out
    assert "new store:" in out


@pytest.mark.skipif(not pyddstore.HAVE_MPI, reason="needs an MPI build")
def test_use_after_the_store_was_destroyed(top):
    out = ok(top, """
        import numpy as np, pyddstore
        from pyddstore import _core
        s = pyddstore.PyDDStore()
        s.add("x", np.arange(4.0))
        r = s.open_reader()
        _core._atexit()                      # what interpreter exit does
        assert s.destroyed and r.closed
        assert _core._mpi_state()["finalized"]
        o = np.zeros(2)
        for call in (lambda: s.get("x", o), lambda: s.info("x"),
                     lambda: s.get_profile("x"), lambda: s.init("y", 1, 1),
                     lambda: s.open_reader(), lambda: r.get("x", o),
                     lambda: s.update("x", o, 0), lambda: s.register_recv("x", o)):
            try:
                call()
                print("no error?")
            except pyddstore.DDStoreError as e:
                print("DDStoreError:", e)
        s.free(); s.free()                   # idempotent, no error
        print(repr(s))
        print("OK")
    """)
    assert "OK" in out and "no error?" not in out and "destroyed" in out


def test_fabric_environment_on_import(top):
    code = """
        import os, pyddstore
        print("HR=" + os.environ.get("FI_CXI_DISABLE_HOST_REGISTER", "unset"))
        print("MON=" + os.environ.get("FI_MR_CACHE_MONITOR", "unset"))
    """
    drop = ("FI_CXI_DISABLE_HOST_REGISTER", "FI_MR_CACHE_MONITOR", "DDSTORE_FORK_WORKERS")
    out = ok(top, code, drop=drop)
    assert "HR=1" in out and "MON=unset" in out
    out = ok(top, code, drop=drop, env_extra={"FI_CXI_DISABLE_HOST_REGISTER": "0"})
    assert "HR=0" in out
    out = ok(top, code, drop=drop, env_extra={"DDSTORE_FORK_WORKERS": "1",
                                               "FI_MR_CACHE_MONITOR": "kdreg2"})
    assert "MON=memhooks" in out
    out = ok(top, code, drop=drop, env_extra={"DDSTORE_FORK_WORKERS": "1",
                                               "FI_MR_CACHE_MONITOR": "disabled"})
    assert "MON=disabled" in out


@pytest.mark.parametrize("method", [1, 2])
def test_ctrl_c_without_mpi_raises_keyboard_interrupt(top, tmp_path, method):
    """Issue 36 item 2: Ctrl-C in a job without MPI (FileComm; a method-2
    reader) raises KeyboardInterrupt, runs finally and atexit (PSM's SIGINT
    handler used to end the process at once with status 1, silently)."""
    if not pyddstore.HAVE_OFI:
        pytest.skip("methods 1 and 2 need libfabric; this build has none (HAVE_OFI False)")
    code = f"""
        import atexit, os, sys, time
        import numpy as np, pyddstore
        atexit.register(lambda: print("atexit ran", flush=True))
        d = {str(tmp_path)!r}
        if {method} == 1:
            s = pyddstore.PyDDStore(pyddstore.FileComm(d, 0, 1, "ctrlc"), method=1)
            s.add("x", np.zeros((4, 2)))
        else:
            s = pyddstore.PyDDStore(None, method=2, handshake_dir=d, n_core=1)
        try:
            print("ready", flush=True)
            time.sleep(60)
        except KeyboardInterrupt:
            print("KeyboardInterrupt", flush=True)
        finally:
            print("finally ran", flush=True)
            s.free()
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    env.pop("IPATH_NO_BACKTRACE", None)
    env.pop("HFI_NO_BACKTRACE", None)
    env["PYTHONPATH"] = top
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert "KeyboardInterrupt" in out and "finally ran" in out and "atexit ran" in out, \
        f"rc {p.returncode}\nstdout:\n{out}\nstderr:\n{err}"
    assert p.returncode == 0, err


def test_another_libddstore_on_ld_library_path_is_not_used(top, tmp_path):
    """Issue 36 item 6: a libddstore.so of another build on LD_LIBRARY_PATH
    (searched before the modules' RUNPATH) made the import fail with
    "undefined symbol" (or mixed two builds); the package loads its own."""
    import shutil
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler (./ddstore setup installs build-essential)"
    src = tmp_path / "f.c"
    src.write_text("int not_ddstore(void) { return 1; }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libddstore.so", "-o",
                    str(tmp_path / "libddstore.so"), str(src)], check=True)
    out = ok(top, """
        import pyddstore, numpy as np
        libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libddstore" in l})
        print("LIBS", libs)
        s = pyddstore.PyDDStore(None, method=3 if 3 in [r["method"] for r in
                                pyddstore._core.backends()] else 0)
        s.free()
    """, env_extra={"LD_LIBRARY_PATH": str(tmp_path)})
    line = next(ln for ln in out.splitlines() if ln.startswith("LIBS"))
    assert str(tmp_path) not in line and "pyddstore/libddstore.so" in line, line


@pytest.mark.skipif(not pyddstore.HAVE_MPI, reason="needs an MPI build")
def test_forked_child_leaves_the_parents_store_alone(top):
    """A forked child inherits the store; it must not destroy it (collective)
    when it exits or deallocates it, and the parent keeps reading.  (Method 0
    children read this node's shards: a forked reader of its own.)"""
    out = ok(top, """
        import os, numpy as np, pyddstore
        s = pyddstore.PyDDStore()
        s.add("x", np.arange(6.0))
        pid = os.fork()
        if pid == 0:
            r = s.fork_reader()
            o = np.zeros(6); r.get("x", o)
            print("child:", r.kind, o.tolist(), flush=True)
            del r
            del s
            import gc; gc.collect()
            os._exit(0)
        os.waitpid(pid, 0)
        o = np.zeros(6); s.get("x", o)
        assert (o == np.arange(6.0)).all()
        print("OK")
    """)
    assert "OK" in out and "child:" in out


def test_info_output_cut_short_is_quiet(top):
    # `python -m pyddstore.info | head -1`: the reader stops early; no
    # BrokenPipeError traceback, exit status 0
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith(("OMPI_", "PMIX_", "PMI_", "HYDRA_")) and k not in KEEP)}
    env["PYTHONPATH"] = top
    p = subprocess.run(f"{sys.executable} -m pyddstore.info | head -1; "
                       "exit ${PIPESTATUS[0]}", shell=True, executable="/bin/bash",
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("pyddstore "), p.stdout
    assert "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr, p.stderr
