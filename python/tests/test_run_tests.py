"""ci/run_tests.py's own rules, on sample outputs: a C target that only
skipped counts as skipped (not passed), a stage that ran no test fails, a
skip the stage does not expect fails, the stage timeout kills the whole
process group, and what a run leaves in /dev/shm is found.  Pure logic and
short child processes: the 1-rank stage runs it."""
import importlib.util
import os
import sys
import time

import pytest

from _util import launch_size as _world_size

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(_world_size() != 1, reason="runner logic: 1-rank stage only")


@pytest.fixture(scope="module")
def rt():
    spec = importlib.util.spec_from_file_location("run_tests",
                                                  os.path.join(TOP, "ci", "run_tests.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write_testlog(root, target, text):
    d = root / target.lstrip("/").replace(":", "/")
    d.mkdir(parents=True)
    (d / "test.log").write_text(text)


BAZEL_OUT = """\
INFO: Build completed successfully, 12 total actions
//ddstore-gpu:ddgpu_device_test                                 PASSED in 0.1s
//ddstore-core:store_test                               (cached) PASSED in 1.2s
//ddstore-ofi:ddofi_unit_test                                   PASSED in 0.3s
//ddstore-mpi:ddmpi_store_mpitest_np2                           PASSED in 2.0s

Executed 4 out of 4 tests: 4 tests pass.
"""


def test_c_target_that_only_skipped_is_a_skip(rt, tmp_path):
    write_testlog(tmp_path, "//ddstore-gpu:ddgpu_device_test",
            "SKIP: ddgpu_device_test: no usable GPU for the cuda build (no device)\n"
            "ddgpu_device_test: 0 passed, 0 failed, 1 skipped\n")
    write_testlog(tmp_path, "//ddstore-core:store_test",
                  "store_test: 40 passed, 0 failed, 0 skipped\n")
    write_testlog(tmp_path, "//ddstore-ofi:ddofi_unit_test",
            "SKIP: auto on several nodes: no provider\n12 passed, 0 failed\n")
    write_testlog(tmp_path, "//ddstore-mpi:ddmpi_store_mpitest_np2",
            "ddmpi_store_mpitest rank 0/2: 7 passed, 0 failed\n"
            "ddmpi_store_mpitest rank 1/2: 7 passed, 0 failed\n")
    c = rt.bazel_counts("cunit", 0, BAZEL_OUT, str(tmp_path))
    assert (c.passed, c.failed, c.skipped) == (3, 0, 1), vars(c)
    # every SKIP line is a skip shown with its reason, whole or partial
    assert c.skips == [("//ddstore-gpu:ddgpu_device_test",
                        "ddgpu_device_test: no usable GPU for the cuda build (no device)"),
                       ("//ddstore-ofi:ddofi_unit_test", "auto on several nodes: no provider")]


def test_check_h_skip_line_is_the_runner_form(rt):
    """check.h's CHECK_SKIP prints what the runner matches (one convention)."""
    with open(os.path.join(TOP, "ddstore-core", "test", "check.h")) as f:
        text = f.read()
    assert 'printf("SKIP: %s: ", (name));' in text
    assert rt.C_SKIP.findall("SKIP: x_test: why\n") == ["x_test: why"]


def test_bazel_output_without_result_lines_fails(rt, tmp_path):
    c = rt.bazel_counts("cunit", 0, "INFO: Build completed successfully\n", str(tmp_path))
    assert c.failed == 1 and "no test ran" in c.failures[0], vars(c)


def test_bazel_failure_counts(rt, tmp_path):
    out = "//a:b_test   FAILED in 1.0s\n//a:c_test   NO STATUS\n"
    c = rt.bazel_counts("c", 3, out, str(tmp_path))
    assert (c.passed, c.failed) == (0, 2), vars(c)


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3">
<testcase classname="test_a" name="test_ok" time="0.1"/>
<testcase classname="test_a" name="test_gpu" time="0.0">
  <skipped type="pytest.skip" message="needs a GPU (CUDA/ROCm)">x</skipped></testcase>
<testcase classname="test_a" name="test_probe" time="0.0">
  <skipped type="pytest.skip" message="method 1 not available in this build">x</skipped></testcase>
</testsuite></testsuites>
"""


def test_zero_test_stage_fails(rt, tmp_path):
    c = rt.junit_counts("py1", str(tmp_path), 0)           # no XML at all
    assert c.failed == 1 and "no test ran" in c.failures[0], vars(c)
    (tmp_path / "rank0.xml").write_text(
        '<testsuites><testsuite name="pytest" tests="0"/></testsuites>')
    c = rt.junit_counts("py1", str(tmp_path), 0)           # an empty one
    assert c.failed == 1 and "no test ran" in c.failures[0], vars(c)
    c = rt.junit_counts("py1", str(tmp_path), 5)           # pytest: no tests collected
    assert c.failed == 1 and "exited 5" in c.failures[0], vars(c)


def test_unexpected_skip_fails(rt, tmp_path):
    (tmp_path / "rank0.xml").write_text(JUNIT)
    c = rt.junit_counts("py2", str(tmp_path), 0)
    assert (c.passed, c.failed, c.skipped) == (1, 0, 2), vars(c)
    rt.check_skips("py2", c)
    # the GPU skip is expected (no GPU where the suite runs); the probe's is not
    assert c.failed == 1, vars(c)
    assert "unexpected skip test_a::test_probe (method 1 not available" in c.failures[0]
    assert rt.unexpected_skips("py2", [("t", "these tests launch their own jobs: 1-rank "
                                              "stage only")]) == []
    # a stage's own list: HAVE_MPI False skips are expected in nompi only
    why = [("t", "method 0 needs MPI (HAVE_MPI False)")]
    assert rt.unexpected_skips("nompi", why) == [] and rt.unexpected_skips("py2", why) == why


def test_stage_timeout_kills_the_process_group(rt, tmp_path):
    """The limit fires while the child and a grandchild keep the output
    open; both are gone afterwards."""
    pidfile = tmp_path / "pid"
    t0 = time.time()
    rc, out = rt.run(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; echo started; sleep 60"],
                     timeout=2)
    took = time.time() - t0
    assert rc == 124 and "started" in out and "timed out after 2 s" in out, (rc, out)
    assert took < 20, took
    grandchild = int(pidfile.read_text())
    for _ in range(50):
        if not os.path.exists(f"/proc/{grandchild}") or \
                open(f"/proc/{grandchild}/stat").read().split()[2] == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the grandchild {grandchild} outlived the stage timeout")


def test_run_without_timeout_returns_status(rt):
    rc, out = rt.run([sys.executable, "-c", "print('hi'); raise SystemExit(3)"], timeout=60)
    assert (rc, out.strip()) == (3, "hi")


def test_shm_leftovers(rt, tmp_path):
    """Files of the MPI patterns made since `before`, in use by no process."""
    old = tmp_path / "vader_segment.h.1.0"
    old.write_text("x")
    before = rt.shm_files(str(tmp_path))
    new = tmp_path / "mpich_shm_abc123"
    new.write_text("x")
    (tmp_path / "other_file").write_text("x")
    held = tmp_path / "vader_segment.h.2.0"
    held.write_text("x")
    with open(held) as f:           # open in this process: in use
        assert rt.shm_leftovers(before, str(tmp_path)) == [str(new)]
        assert f.fileno() >= 0
    assert rt.shm_leftovers(before, str(tmp_path)) == [str(new), str(held)]
