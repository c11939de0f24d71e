#!/usr/bin/env python3
"""Run the whole ddstore suite in stages and print one closing line.

    ci/run_tests.py              every stage
    ci/run_tests.py c py2        only those stages
    ci/run_tests.py --quick      the everyday loop: C unit tests, and the
                                 Python files of the 2-rank stage but the slow
                                 ones (stages cunit, pyquick)
    ci/run_tests.py --list       the stages, and which Python file runs where

Each stage is a real test runner (Bazel for C, pytest under tools/ddrun for
Python); this script only sequences them and adds up their counts. A test that
cannot run here (no GPU, no MPICH, ...) reports SKIP with its reason and is
counted as skipped, never as passed; a skip that EXPECTED_SKIPS does not list
for its stage, a stage that ran no test, and MPI files left in /dev/shm are
failures (docs/testing.md, "The runner's rules"). The last line is
"ddstore: N passed, N failed, N skipped"; the exit code is non-zero if anything
failed or a stage could not run.
"""
import argparse
import glob
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sysconfig
import sys
import threading
import time
import xml.etree.ElementTree as ET

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(TOP, "out", "tests")
PY = sys.executable
DDRUN = os.path.join(TOP, "tools", "ddrun")
BAZEL_CI = ["--config=ci"]
# The C tests build in -c opt, as ./ddstore test's build of the extensions
# does (--config=ci too): one compile of every library serves both, and the
# -Werror build sees the optimiser's warnings (-Wmaybe-uninitialized) that a
# normal (-c opt) build would print.  The sanitizer stages keep their own
# flags (-O1, own output directories).
BAZEL_OPT = ["-c", "opt"]


class Counts:
    def __init__(self):
        self.passed = self.failed = self.skipped = 0
        self.failures = []
        self.skips = []         # (what, reason) of every skip seen: tests and C SKIP lines
        self.cpu = 0.0          # CPU-seconds of the stage (cpu_seconds)
        self.cpu_elsewhere = 0.0  # ... spent by a server for it (bazel_server_cpu)

    def add(self, other):
        self.passed += other.passed
        self.failed += other.failed
        self.skipped += other.skipped
        self.failures += other.failures
        self.skips += other.skips
        self.cpu_elsewhere += other.cpu_elsewhere

    def fail(self, failure):
        self.failed += 1
        self.failures.append(failure)

    def skip(self, what, reason):
        """A whole test (or stage) that could not run: counted and shown."""
        print(f"SKIP: {what}: {reason}")
        self.skipped += 1
        self.skips.append((what, reason))

    def check(self, rc, failure):
        """One test that passed when a program exited 0; `failure` names it otherwise."""
        if rc == 0:
            self.passed += 1
        else:
            self.failed += 1
            self.failures.append(f"{failure} exited {rc}")


def kill_group(p, grace=10):
    """TERM the process group of p (started in a session of its own), KILL
    it `grace` seconds later if p has not ended."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
        # p ended: KILL what is left of its group (children that ignored TERM)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return


def run(cmd, env=None, timeout=None, log=None, cwd=None):
    """Run cmd in a session of its own, its output copied to ours; (exit
    status, output).  After `timeout` seconds a watchdog kills the whole
    process group (TERM, KILL 10 s later) and the status is 124: the output
    is read to its end, so the limit cannot wait on it."""
    print("+ " + " ".join(cmd), flush=True)
    t0 = time.time()
    full_env = dict(os.environ)
    full_env.update(env or {})
    with subprocess.Popen(cmd, cwd=cwd or TOP, env=full_env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace",
                          start_new_session=True) as p:
        fired = threading.Event()

        def expire():
            fired.set()
            print(f"  timed out after {timeout} s: killing the process group of "
                  f"{os.path.basename(cmd[0])}", flush=True)
            kill_group(p)

        watchdog = threading.Timer(timeout, expire) if timeout else None
        if watchdog:
            watchdog.daemon = True
            watchdog.start()
        lines = []
        try:
            for line in p.stdout:
                sys.stdout.write(line)
                lines.append(line)
            rc = p.wait()
        except BaseException:
            # Ctrl-C reaches this process only (the command has a session
            # of its own): take the command's group down with us
            kill_group(p, grace=2)
            raise
        if watchdog:
            watchdog.cancel()
        if fired.is_set():
            rc = 124
            lines.append(f"run_tests.py: timed out after {timeout} s\n")
    sys.stdout.flush()
    if log:
        with open(log, "w") as f:
            f.writelines(lines)
    print(f"  ({time.time() - t0:.0f} s, exit {rc})", flush=True)
    return rc, "".join(lines)


# ---------------------------------------------------------- expected skips --
# The skips a stage may report, as (what, reason) regular expressions
# (re.search; "" matches anything): "*" for every stage, then per stage.
# Any other skip fails its stage (a test that stopped running is not a
# pass).  A skip is shown with its reason in the stage's summary either way.
RANK_ROUTING = (r"1-rank stage only|1 process only|on rank 0 only|by rank 0|"
                r"needs (at least )?2( or more)? ranks|needs 2 ranks|"
                r"fewer than two multi-rank groups")
NO_GPU = (r"\bGPU\b|CUDA|ROCm|HIP|host emulation|none build|device memory|"
          r"--no-gpu-builds")
WITHOUT_MPI = r"HAVE_MPI False|needs MPI|an MPI build|over MPI|with MPI|mpi4py"
EXPECTED_SKIPS = {
    # a file that runs at several rank counts (PY_RANKS): its tests that
    # prove something at one count skip at the others; no GPU on the machines
    # the suite runs on (gpu-check.sh runs them with DDSTORE_TEST_STRICT=1)
    "*": [("", RANK_ROUTING), ("", NO_GPU),
          # the test of a build without libfabric: no stage makes one (nompi
          # is without MPI, with libfabric), so it skips wherever it runs
          (r"test_methods_without_a_libfabric_transport$", r"^built with libfabric")],
    "nompi": [("", WITHOUT_MPI)],         # the build without MPI
    # the comparison loaders that ./ddstore setup --bench installs (not setup)
    "py1": [(r"test_bench_loaders", r"mosaicml-streaming not installed")],
    "wheel": [("", r"ci/test_wheel\.sh --no-|no isolated build|built without torch")],
    # the pip route with PyPI's MPI wheel only: its venv has no torch (by design)
    "pipmpi": [(r"test_core_basic::test_torch", r"could not import 'torch'")],
    "nodes": [(r"^nodes$", r"cannot make the simulated nodes")],   # not root
    "fuzz": [(r"^fuzz$", r"clang not installed")],
}


def unexpected_skips(stage, skips):
    """The (what, reason) of `skips` that EXPECTED_SKIPS does not list for
    `stage`."""
    allowed = EXPECTED_SKIPS.get("*", []) + EXPECTED_SKIPS.get(stage, [])
    return [(what, why) for what, why in skips
            if not any(re.search(w, what) and re.search(r, why) for w, r in allowed)]


def check_skips(stage, c):
    """Print the stage's skips with their reasons; each unexpected one is a
    failure of the stage."""
    for what, why in c.skips:
        print(f"  skipped: {what}: {why}")
    for what, why in unexpected_skips(stage, c.skips):
        c.fail(f"{stage}: unexpected skip {what} ({why}): not in ci/run_tests.py's "
               "EXPECTED_SKIPS")


# ------------------------------------------------------------------ bazel --
BAZEL_LINE = re.compile(r"^(//\S+)\s+(?:\(cached\)\s+)?(PASSED|FAILED|TIMEOUT|NO STATUS|FLAKY|"
                        r"FAILED TO BUILD|INCOMPLETE|SKIPPED)\b", re.M)


def bazel_server_cpu():
    """CPU-seconds of the Bazel server and the actions it waited for (its
    compiles and tests run as its children), 0 when there is none: added to
    the Bazel stages' own (stages of the group never overlap)."""
    try:
        pid = subprocess.run(["bazel", "info", "server_pid"], cwd=TOP, capture_output=True,
                             text=True, timeout=120).stdout.strip()
        with open(f"/proc/{int(pid)}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0.0


def bazel_tests(name, flags, targets, timeout=3600):
    c = Counts()
    if not shutil.which("bazel"):
        c.skip(name, "bazel not installed")
        return c
    server0 = bazel_server_cpu()
    rc, out = run(["bazel", "test"] + BAZEL_CI + flags +
                  ["--test_output=errors", "--test_summary=short"] + targets, timeout=timeout)
    c.cpu_elsewhere = max(0.0, bazel_server_cpu() - server0)
    c.add(bazel_counts(name, rc, out, os.path.join(TOP, "bazel-testlogs")))
    return c


def bazel_counts(name, rc, out, testlogs):
    """Counts of `bazel test`'s output (its result lines) and exit status;
    the SKIP lines of each passed target's log in `testlogs` are skips (a
    target that only skipped is counted as skipped, not passed)."""
    c = Counts()
    found = BAZEL_LINE.findall(out)
    for target, status in found:
        if status == "PASSED":
            lines, only = skips_in_log(testlogs, target)
            c.skips += [(target, why) for why in lines]
            if only:
                c.skipped += 1
            else:
                c.passed += 1
        elif status == "SKIPPED":
            c.skipped += 1
            c.skips.append((target, "SKIPPED by bazel"))
        else:
            c.fail(f"{name}: {target} {status}")
    if rc != 0 and not c.failed:
        # a build failure or a runner problem: count it, never hide it
        c.fail(f"{name}: bazel exited {rc}")
    if not found:
        c.fail(f"{name}: no test ran (no result line in bazel's output)")
    return c


# The one form of a skip in a C test's output (check.h's CHECK_SKIP,
# ddofi_test.h's T_SKIP, ddmpi_test.h): "SKIP: <what>: <reason>" at the
# start of a line.
C_SKIP = re.compile(r"^SKIP: (.*\S)", re.M)
# The closing line of a C test that passed checks: "[<name>: ]N passed, M failed"
# (check.h, ddofi_test.h) or "<prog> rank R/N: N passed, M failed" (ddmpi_test.h)
C_PASSED = re.compile(r"(?:^|\s)[1-9]\d* passed, \d+ failed", re.M)


def skips_in_log(testlogs, target):
    """([reason, ...] of the target's SKIP lines, once each, in order; True
    when it skipped without passing a check)."""
    path = target.lstrip("/").replace(":", "/")
    try:
        with open(os.path.join(testlogs, path, "test.log"), errors="replace") as f:
            text = f.read()
    except OSError:
        return [], False
    lines = list(dict.fromkeys(C_SKIP.findall(text)))
    return lines, bool(lines) and C_PASSED.search(text) is None


# ----------------------------------------------------------------- pytest --
def pytest_ranks(name, nranks, paths, extra_env=None, timeout=1500):
    # timeout: a guard against a hung run (each test's jobs have their own);
    # py1 took 639 s beside another stage on this machine at load 10
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    env = {"PYTHONUNBUFFERED": "1", "DDSTORE_JUNIT_DIR": d, "OMP_NUM_THREADS": "1"}
    env.update(extra_env or {})
    cmd = [PY, os.path.join(TOP, "ci", "pytest_rank.py"), "-q", "-rs", "-p", "no:cacheprovider",
           "--color=no"] + paths
    if nranks:
        cmd = [DDRUN, "-n", str(nranks), "--timeout", str(timeout), "--"] + cmd
    rc, _ = run(cmd, env=env, timeout=timeout + 60)
    return junit_counts(name, d, rc)


def junit_counts(name, d, rc):
    """Counts from the JUnit XML files in `d` (one per rank, or per run); rc is
    the runner's exit status (a failure with no failed test is counted too)."""
    c = Counts()
    states, reasons = {}, {}
    for xml in sorted(glob.glob(os.path.join(d, "*.xml"))):
        try:
            root = ET.parse(xml).getroot()
        except ET.ParseError as e:
            c.fail(f"{name}: {os.path.basename(xml)}: not JUnit XML ({e})")
            continue
        for case in root.iter("testcase"):
            key = case.get("classname", "") + "::" + case.get("name", "")
            skipped = case.find("skipped")
            if case.find("failure") is not None or case.find("error") is not None:
                state = "failed"
            elif skipped is not None:
                state = "skipped"
                reasons.setdefault(key, skipped.get("message") or skipped.text or "")
            else:
                state = "passed"
            states.setdefault(key, set()).add(state)
    # failed on any rank = failed; skipped everywhere = skipped; else passed
    results = {k: ("failed" if "failed" in v else "passed" if "passed" in v else "skipped")
               for k, v in states.items()}
    for key, state in sorted(results.items()):
        if state == "failed":
            c.fail(f"{name}: {key}")
        elif state == "skipped":
            c.skipped += 1
            c.skips.append((key, reasons.get(key, "")))
        else:
            c.passed += 1
    if rc == 5:
        c.fail(f"{name}: no tests collected (pytest exited 5)")
    elif rc != 0 and not c.failed:
        c.fail(f"{name}: runner exited {rc}")
    if not results and not c.failed:
        c.fail(f"{name}: no test ran (no test case in {os.path.relpath(d, TOP)}/*.xml)")
    return c


def junit_script_stage(name, script, timeout):
    """ci/<script> with DDSTORE_JUNIT_DIR (its JUnit XML files, counted) and
    DDSTORE_PYTHON (the interpreter to make its virtualenvs from)."""
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    rc, _ = run([os.path.join(TOP, "ci", script)],
                env={"DDSTORE_JUNIT_DIR": d, "DDSTORE_PYTHON": PY}, timeout=timeout)
    return junit_counts(name, d, rc)


def wheel_stage(timeout=2400):
    """ci/test_wheel.sh: the pip build in a fresh virtualenv, installed,
    smoke tests against the installed package (2 ranks)."""
    return junit_script_stage("wheel", "test_wheel.sh", timeout)


def pipmpi_stage(timeout=1800):
    """ci/pip-mpi.sh: the pip build whose only MPI and libfabric are PyPI's
    mpich wheel (the system's hidden, checked with ninja's header log and
    ldd), store tests for methods 0/1/2 on 2 ranks under its mpiexec."""
    return junit_script_stage("pipmpi", "pip-mpi.sh", timeout)


def ccache_env():
    """The environment that puts ccache in front of CMake's compilers, when
    ccache is installed (./ddstore setup installs it) and DDSTORE_CCACHE is
    not 0.  The cache is out/ccache, so a clean clone starts empty: it only
    serves a compile repeated within a run (the gpukit dry run's CMake build
    of the tree and its pip-build hook: the same sources, flags and
    dependencies).  base_dir = the tree, so the two build directories (at the
    same depth) compile the same relative paths; the sloppiness ccache needs
    for the torch extension's precompiled header.  CC/CXX gcc/g++ where
    unset: scikit-build-core hands CMake Python's (gcc, g++), plain cmake
    takes cc/c++, the same compiler by other names, which ccache tells apart."""
    if shutil.which("ccache") is None or os.environ.get("DDSTORE_CCACHE", "1") == "0":
        return {}
    return {"CMAKE_C_COMPILER_LAUNCHER": "ccache", "CMAKE_CXX_COMPILER_LAUNCHER": "ccache",
            "CC": os.environ.get("CC", "gcc"), "CXX": os.environ.get("CXX", "g++"),
            "CCACHE_DIR": os.environ.get("CCACHE_DIR", os.path.join(TOP, "out", "ccache")),
            "CCACHE_BASEDIR": TOP, "CCACHE_NOHASHDIR": "1", "CCACHE_MAXSIZE": "3G",
            "CCACHE_SLOPPINESS": "pch_defines,time_macros,include_file_mtime,include_file_ctime"}


def gpukit_stage(timeout=2400):
    """ci/gpu-kit.sh, then ci/gpu-check.sh --kit --dry-run: the GPU check
    exactly as the lent machine runs it, minus the GPU (not strict, CPU
    tensors).  Each check of its JSON report is one test (SKIP stays skip)."""
    c = Counts()
    d = os.path.join(OUT, "gpukit")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    kit = os.path.join(TOP, "out", "gpu-kit")
    rc, _ = run([os.path.join(TOP, "ci", "gpu-kit.sh"), kit], env={"DDSTORE_PYTHON": PY},
                timeout=600)
    if rc != 0:
        c.failed += 1
        c.failures.append(f"gpukit: ci/gpu-kit.sh exited {rc}")
        return c
    report = os.path.join(d, "gpu-check.json")
    # GPU_CHECK_TIMEOUT_S is gpu-check.sh's limit per program (300 s, kept on
    # the device): here the first hook that needs it also builds the tree
    # with CMake (six torch-extension files), which on 2 cores shared with
    # another stage took over 300 s (killed: 4 hooks failed, none hung)
    # ccache: the pip-build hook compiles what the torch-distdataset-threads
    # hook's CMake build compiled (DDSTORE_GPU=cuda, the kit's MPI), in a
    # build directory at the same depth: ccache serves it (the device has no
    # ccache and compiles both)
    env = {"PYTHON": PY, "GPU_CHECK_TIMEOUT_S": os.environ.get("GPU_CHECK_TIMEOUT_S", "900")}
    env.update(ccache_env())
    rc, _ = run([os.path.join(TOP, "ci", "gpu-check.sh"), "--kit", kit, "--dry-run",
                 "--build-dir", os.path.join(TOP, "out", "gpu-check-dry"), "--json", report],
                env=env, timeout=timeout)
    try:
        with open(report) as f:
            checks = json.load(f)["checks"]
    except (OSError, ValueError, KeyError) as e:
        checks = []
        c.failed += 1
        c.failures.append(f"gpukit: no report {report} ({e})")
    for ch in checks:
        if ch["status"] == "PASS":
            c.passed += 1
        elif ch["status"] == "SKIP":
            c.skipped += 1
            c.skips.append((ch["name"], ch.get("detail", "")))
        else:   # FAIL, or a TODO hook (not run is not passed)
            c.failed += 1
            c.failures.append(f"gpukit: {ch['status']} {ch['name']} ({ch['detail']})")
    if rc != 0 and not c.failed:
        c.failed += 1
        c.failures.append(f"gpukit: ci/gpu-check.sh exited {rc}")
    return c


def fuzz_stage(seconds=30):
    """ci/fuzz-handshake.sh: libFuzzer on method 2's record parser for a
    short while, starting from the tree's corpus (one test: no crash)."""
    c = Counts()
    if shutil.which("clang") is None:
        c.skip("fuzz", "clang not installed (libFuzzer needs it)")
        return c
    rc, _ = run([os.path.join(TOP, "ci", "fuzz-handshake.sh"), str(seconds)],
                timeout=seconds + 600)
    c.check(rc, f"fuzz: ci/fuzz-handshake.sh {seconds}")
    return c


def nompi_stage(timeout=900):
    """The Bazel build without MPI (--config=nompi: HAVE_MPI False, its own
    output directory), its _core in a copy of the package, and the tests of
    running without MPI against it in plain processes: FileComm with
    SLURM_PROCID/SLURM_NTASKS (methods 1 and 2, method 0 a clear error)."""
    c = Counts()
    if not shutil.which("bazel"):
        c.skip("nompi", "bazel not installed")
        return c
    server0 = bazel_server_cpu()
    rc, _ = run(["bazel", "build"] + BAZEL_CI + ["-c", "opt", "--config=nompi",
                                                 "//python:pyddstore/_core.so",
                                                 "//libddstore:lib/libddstore.so"],
                timeout=3600)
    c.cpu_elsewhere = max(0.0, bazel_server_cpu() - server0)
    if rc != 0:
        c.failed += 1
        c.failures.append(f"nompi: bazel build --config=nompi exited {rc}")
        return c
    rc, out = run(["bazel", "info"] + BAZEL_CI + ["-c", "opt", "--config=nompi", "bazel-bin"],
                  timeout=600)
    lines = [l.strip() for l in out.splitlines() if l.strip().startswith("/")]
    so = [os.path.join(lines[-1], "python", "pyddstore", "_core.so")] if lines else []
    so = [f for f in so if os.path.exists(f)]
    d = os.path.join(OUT, "nompi")
    shutil.rmtree(d, ignore_errors=True)
    pkg = os.path.join(d, "site", "pyddstore")
    shutil.copytree(os.path.join(TOP, "python", "pyddstore"), pkg,
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    if rc != 0 or not so:
        c.failed += 1
        c.failures.append("nompi: cannot find the --config=nompi _core.so")
        return c
    ext = sysconfig.get_config_var("EXT_SUFFIX")
    shutil.copy(so[0], os.path.join(pkg, "_core" + ext))
    # _core loads the libddstore.so next to it (RUNPATH $ORIGIN)
    shutil.copy(os.path.join(lines[-1], "libddstore", "lib", "libddstore.so"),
                os.path.join(pkg, "libddstore.so"))
    env = {"PYTHONPATH": os.path.join(d, "site"), "PYTHONNOUSERSITE": "1",
           "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    rc, _ = run([PY, "-c", "import pyddstore as p; assert not p.HAVE_MPI and p.HAVE_OFI, "
                 "(p.__file__, p.HAVE_MPI, p.HAVE_OFI); print('nompi: pyddstore from', p.__file__)"],
                env=env)
    if rc != 0:
        c.failed += 1
        c.failures.append("nompi: the --config=nompi build is not HAVE_MPI False + HAVE_OFI")
        return c
    rc, _ = run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--color=no", "-rs",
                 f"--junitxml={os.path.join(d, 'nompi.xml')}",
                 os.path.join(TOP, "python", "tests", "test_filecomm.py"),
                 os.path.join(TOP, "python", "tests", "test_method2.py")],
                env=env, timeout=timeout)
    return junit_counts("nompi", d, rc)


def nodes_stage(timeout=900):
    """tools/ddrun --nodes (docs/testing.md): 2 simulated nodes x 2 ranks on
    this machine.  The store and ragged suites over them (method 0 over
    osc/ucx, method 1 over tcp: DDSTORE_FABRIC=tcp), then test_nodes.py in one
    process (it starts its own runs: method 1 over a FileComm, method 2 with
    the core job on node0 and readers on node1, faults on a node's link).
    Skipped with the reason where namespaces cannot be made."""
    c = Counts()
    rc, out = run([DDRUN, "--nodes-check"], timeout=120)
    if rc != 0:
        why = out.strip().splitlines()[-1] if out.strip() else f"exit {rc}"
        c.skip("nodes", why)
        return c
    d = os.path.join(OUT, "nodes")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "suites"))
    env = {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "DDSTORE_FABRIC": "tcp",
           "DDSTORE_JUNIT_DIR": os.path.join(d, "suites")}
    # a forked method-0 reader cannot read another node's rows (a documented
    # error, checked in test_nodes.py): the cases of that assume one node
    one_node = ["test_ragged.py::test_fork_reader_in_a_forked_child[method0]",
                "test_torch_ragged.py::test_loaders[packed-torch-fork]",
                "test_torch_ragged.py::test_loaders[padded-torch-fork]"]
    rc, _ = run([DDRUN, "--nodes", "2", "-n", "4", "--timeout", str(timeout), "--", PY,
                 os.path.join(TOP, "ci", "pytest_rank.py"), "-q", "-rs", "-p", "no:cacheprovider",
                 "--color=no"] + [f"--deselect=python/tests/{t}" for t in one_node] +
                ["python/tests/test_core_basic.py", "python/tests/test_ragged.py",
                 "python/tests/test_torch_ragged.py"], env=env, timeout=timeout + 60)
    c.add(junit_counts("nodes", os.path.join(d, "suites"), rc))
    rc, _ = run([PY, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--color=no",
                 f"--junitxml={os.path.join(d, 'test_nodes.xml')}",
                 os.path.join(TOP, "python", "tests", "test_nodes.py")],
                env={"DDRUN_NODES_TESTS": "1", "PYTHONUNBUFFERED": "1"}, timeout=timeout)
    c.add(junit_counts("nodes", d, rc))
    return c


def docs_stage(timeout=3600):
    """ci/doc_snippets.py: every runnable code block of README.md, docs/*.md and
    the libraries' READMEs,
    at the rank count its info string states (one test per block)."""
    d = os.path.join(OUT, "docs")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    rc, _ = run([PY, os.path.join(TOP, "ci", "doc_snippets.py"), "--junit", d],
                timeout=timeout)
    return junit_counts("docs", d, rc)


# ------------------------------------------------ python: what runs where --
# The rank counts at which each python/tests file proves something; stage pyN
# runs the files that list N.  1: pure single-process logic, and the files
# that launch jobs or plain processes of their own (they skip themselves at
# more ranks).  2: multi-rank behaviour (remote reads, errors on every rank,
# collectives).  4 as well only where 4 matters: uneven owners and ragged
# splits over them, ddstore_width groups (2 groups of 2), communicator
# splits into several multi-rank groups.  A key may name one test
# ("file.py::test"), run at other counts than the rest of its file; () = no
# pyN stage (another stage runs it).  A file missing here still runs, at
# DEFAULT_PY_RANKS, and the stage says so; a key naming no file fails the
# stage.
PY_RANKS = {
    "test_backends.py": (1, 2),       # one-process rows at 1; their refusal at 2
    "test_bench_loaders.py": (1,),
    "test_collective_late.py": (1,),
    "test_collectives.py": (1,),
    "test_compat_hydragnn.py": (2, 4),
    "test_figures.py": (1,),
    "test_core_basic.py": (1, 2, 4),
    "test_core_comm.py": (2, 4),
    "test_core_errors.py": (2,),
    "test_core_faults.py": (2,),
    "test_core_gpu.py": (2,),
    "test_core_process.py": (1,),
    "test_core_threads.py": (2,),
    "test_env_registry.py": (1,),
    "test_epochs.py": (2,),
    "test_examples_data.py": (1,),
    "test_filecomm.py": (1,),
    "test_fork_stale.py": (2,),
    "test_ingest_adios.py": (1, 2, 4),
    "test_ingest_files.py": (1, 2, 4),
    "test_memory_limits.py": (1,),
    "test_method2.py": (1,),
    "test_nodes.py": (),               # stage nodes runs it (namespaces, its own runs)
    "test_ofi_shared.py": (2,),
    "test_ragged.py": (2, 4),
    "test_ragged_gpu.py": (2,),
    "test_ragged_method2.py": (1,),
    "test_random_reads.py": (4,),
    "test_resume.py": (2,),
    "test_run_tests.py": (1,),         # ci/run_tests.py's rules on sample outputs
    "test_sampler.py": (2,),
    "test_security.py": (1,),
    "test_settings_agree.py": (1, 2),
    "test_snapshot.py": (1, 2, 4),  # the one rank's message at 1; agreement at 2
    "test_symbols.py": (1,),
    "test_teardown.py": (1,),
    "test_tools.py": (1,),             # tools/ddrun's and ./ddstore's usage
    "test_torch_dataset.py": (2, 4),
    "test_torch_ext.py": (2,),
    "test_torch_faults.py": (2,),
    "test_torch_launch.py": (1,),
    "test_torch_loader.py": (2,),
    "test_torch_pack.py": (1, 2),
    "test_torch_ragged.py": (2, 4),
    "test_torch_ragged_mpnn.py": (2,),
    "test_torch_shared_lib.py": (2,),  # one library per process, rows of another rank
    "test_torch_random.py": (2,),
    "test_torch_vae.py": (2,),
    "test_torch_vae.py::test_vae_split_jobs": (1,),
    "test_torch_windowed.py": (2,),
}
DEFAULT_PY_RANKS = (1, 2)
# Left out of --quick (the full suite runs them): the VAE example's epoch
# (trains, plots).  The 2-rank files take about 70 s together here (pytest
# --durations: test_torch_loader.py 10 s, the rest under 6 s each), so the
# quick loop keeps the others.
PY_SLOW = {"test_torch_vae.py"}
PY_TESTS = os.path.join("python", "tests")


def py_plan():
    """{file or node id: rank counts} for every test file of python/tests,
    and the table's keys that name no file."""
    files = sorted(os.path.basename(f) for f in glob.glob(os.path.join(TOP, PY_TESTS, "test_*.py")))
    plan = {f: DEFAULT_PY_RANKS for f in files}
    stale = []
    for key, ranks in PY_RANKS.items():
        if key.split("::")[0] in plan:
            plan[key] = ranks
        else:
            stale.append(key)
    return plan, stale


def py_stage(name, nranks, quick=False):
    """pytest under tools/ddrun -n nranks over the files (and node ids) that
    list nranks in PY_RANKS; a file also listed with one of its tests runs
    without that test here unless the test lists nranks too."""
    plan, stale = py_plan()
    paths, deselect = [], []
    for key, ranks in plan.items():
        f = key.split("::")[0]
        if quick and f in PY_SLOW:
            continue
        if key not in PY_RANKS:
            print(f"note: {f} is not in ci/run_tests.py's PY_RANKS: it runs at "
                  f"{DEFAULT_PY_RANKS} ranks")
        node = os.path.join(PY_TESTS, key)
        if nranks in ranks:
            if "::" not in key or f not in plan or nranks not in plan[f]:
                paths.append(node)
        elif "::" in key and nranks in plan.get(f, ()):
            deselect += ["--deselect", node]
    if not paths:
        c = Counts()
        c.fail(f"{name}: no test file runs at {nranks} ranks (PY_RANKS)")
        return c
    c = pytest_ranks(name, nranks, deselect + paths)
    for key in stale:
        c.failed += 1
        c.failures.append(f"{name}: PY_RANKS names {key}, which is not in {PY_TESTS}")
    return c


def shape_check():
    """ci/check_shape.py (its self-test, then the tree): no production
    source over 1,000 lines, no call circle between the C files of a
    package.  Two tests; run first by the c and cunit stages."""
    c = Counts()
    for args, what in ((["--self-test"], "self-test"), ([], "tree")):
        rc, _ = run([sys.executable, os.path.join(TOP, "ci", "check_shape.py")] + args,
                    timeout=300)
        c.check(rc, f"shape ({what}): ci/check_shape.py {' '.join(args)}".rstrip())
    return c


def with_shape(stage):
    """The stage's counts with shape_check's added."""
    c = shape_check()
    c.add(stage())
    return c


def bazel_cunit():
    """C unit tests only (tag unit, not exclusive): no multi-rank MPI tests,
    no libfabric loopback tests."""
    return bazel_tests("cunit", BAZEL_OPT + ["--test_tag_filters=unit,-exclusive",
                                            "--build_tests_only"], ["//..."])


def have_torch_ext():
    return bool(glob.glob(os.path.join(TOP, "python", "pyddstore", "_ddstore_torch*.so")))


STAGES = {
    "c": ("file shape (ci/check_shape.py), C unit and multi-rank tests (bazel test -c opt //...)",
          lambda: with_shape(lambda: bazel_tests("c", BAZEL_OPT, ["//..."]))),
    # The sanitizer stages build only the tests they run and what those
    # need (--build_tests_only): the other targets of the packages are built,
    # with -Werror, by stage c; under TSan, 16 of 63 compiles and 16 of 36
    # links were binaries that stage never runs (tests the tag filter leaves
    # out, benchmarks).
    "asan": ("C tests under AddressSanitizer + UBSan",
             lambda: bazel_tests("asan", ["--config=asan", "--build_tests_only"],
                                 ["//ddstore-core/...", "//ddstore-ofi/..."])),
    "tsan": ("threaded read paths under ThreadSanitizer",
             lambda: bazel_tests("tsan", ["--config=tsan", "--test_tag_filters=threads",
                                          "--build_tests_only"],
                                 ["//ddstore-core/...", "//ddstore-ofi/..."])),
    "fuzz": ("method 2's record parser under libFuzzer for 30 s (ci/fuzz-handshake.sh)",
             fuzz_stage),
    "nompi": ("the Bazel build without MPI (--config=nompi): FileComm, methods 1/2, plain processes",
              nompi_stage),
    "py1": ("pyddstore tests that prove something at 1 rank (PY_RANKS)",
            lambda: py_stage("py1", 1)),
    "py2": ("pyddstore tests at 2 ranks (PY_RANKS)", lambda: py_stage("py2", 2)),
    "py4": ("pyddstore tests where 4 ranks matter (PY_RANKS)", lambda: py_stage("py4", 4)),
    "wheel": ("pip build: wheel in a fresh venv, installed, smoke tests (ci/test_wheel.sh)",
              wheel_stage),
    "pipmpi": ("pip build against PyPI's mpich wheel only (no system MPI/libfabric): methods 0/1/2 "
               "on 2 ranks (ci/pip-mpi.sh)", pipmpi_stage),
    "gpukit": ("the lent GPU machine's check as it runs there, without the GPU: ci/gpu-kit.sh + "
               "ci/gpu-check.sh --kit --dry-run", gpukit_stage),
    "nodes": ("2 simulated nodes x 2 ranks (tools/ddrun --nodes): store, ragged and torch ragged "
              "suites, method 2 across nodes, faults on a link: loss, rate, delay, down, killed "
              "(test_nodes.py)", nodes_stage),
    "docs": ("every runnable code block of README.md, docs/*.md and */README.md "
             "(ci/doc_snippets.py)",
             docs_stage),
}


# Not part of the whole suite: the everyday loop (--quick).
QUICK_STAGES = {
    "cunit": ("file shape (ci/check_shape.py), C unit tests (bazel test -c opt "
              "--test_tag_filters=unit,-exclusive //...)",
              lambda: with_shape(bazel_cunit)),
    "pyquick": ("the py2 files but the slow ones (PY_SLOW), 2 ranks",
                lambda: py_stage("pyquick", 2, quick=True)),
}

# ------------------------------------------------------------ overlapping --
# Several stages run two at a time (--jobs, default 2 where there are 2
# cores): most of the suite is one busy core (a torch-extension compile, a
# pip install, one pytest process) or none (a test waiting for a timeout), so
# two stages side by side use the second core.  Each stage runs as a child
# `ci/run_tests.py --counts-json FILE STAGE` with its output in
# out/tests/STAGE.log, printed whole when it ends: every stage's output stays
# in one piece, with its own "==== stage" lines and counts.
#
# Stages of one group never overlap: the Bazel ones (one server per tree;
# skipped_in_log reads bazel-testlogs, which the last command points at its
# own configuration), and the ones running 2-4 ranks of pytest or jobs of
# their own (two of those on 2 cores only slow each other down).
GROUPS = {"bazel": ("c", "asan", "tsan", "nompi", "cunit"),
          "ranks": ("py1", "py2", "py4", "nodes", "pyquick")}
# The order stages start in when they overlap: py1 and then nodes (LIGHT)
# beside the two slots; in those, the Bazel stages, which must follow one
# another (so they start at once and do not end the run in single file), and
# beside them the pip builds, the longest (wheel) first; the short stages
# last to fill the gaps (times of a whole run: docs/testing.md).
START_ORDER = ["py1", "c", "wheel", "tsan", "asan", "nompi", "gpukit", "docs", "nodes",
               "pipmpi", "fuzz", "py2", "py4", "cunit", "pyquick"]


# A stage run beside others (a child process) is killed, with its whole
# process group, after this long: each command of a stage has its own limit
# (run()), this bounds the stage as a whole.
STAGE_LIMIT_S = int(os.environ.get("DDSTORE_STAGE_LIMIT_S", "7200"))

# Stages that mostly wait (jobs of their own waiting out collective and
# read timeouts, faults delayed on a link): they run beside the --jobs
# slots, one at a time, instead of holding one of them.
LIGHT = ("py1", "nodes")


# ------------------------------------------------------------- /dev/shm --
# What MPI leaves in /dev/shm when a job ends abnormally (tools/ddrun removes
# its runs' leftovers; a job started another way may not): the suite fails
# if it leaves any.
SHM_DIR = "/dev/shm"
SHM_PATTERNS = ("mpich_shm_*", "vader_segment.*")


def shm_files(d=SHM_DIR):
    """The files of SHM_PATTERNS in d owned by this user."""
    out = set()
    for pat in SHM_PATTERNS:
        for f in glob.glob(os.path.join(d, pat)):
            try:
                if os.lstat(f).st_uid == os.getuid():
                    out.add(f)
            except OSError:
                pass
    return out


def shm_in_use(d=SHM_DIR):
    """The files of d that a live process maps or holds open."""
    used = set()
    for maps in glob.glob("/proc/[0-9]*/maps"):
        try:
            with open(maps, errors="replace") as f:
                for line in f:
                    i = line.find(" " + d + "/")
                    if i >= 0:
                        used.add(line[i + 1:].rstrip("\n").removesuffix(" (deleted)"))
        except OSError:
            pass
    for fd in glob.glob("/proc/[0-9]*/fd/*"):
        try:
            t = os.readlink(fd)
        except OSError:
            continue
        if t.startswith(d + "/"):
            used.add(t)
    return used


def shm_leftovers(before, d=SHM_DIR):
    """Files of SHM_PATTERNS in d that were not there `before`, owned by
    this user and used by no process: what the run left behind."""
    new = shm_files(d) - set(before)
    return sorted(new - shm_in_use(d)) if new else []


def group_of(name):
    return next((g for g, members in GROUPS.items() if name in members), None)


def default_jobs():
    env = os.environ.get("DDSTORE_TEST_JOBS")
    if env:
        return max(1, int(env))
    return 2 if (os.cpu_count() or 1) >= 2 else 1


def cpu_seconds():
    """user + sys seconds of this process and the children it waited for
    (their children too, when waited for): the CPU a stage cost, which is
    what two cores bound.  A Bazel server's own work is not in it."""
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


def run_stage_here(name, every):
    print(f"\n==== stage {name}: {every[name][0]}", flush=True)
    t0, cpu0 = time.time(), cpu_seconds()
    c = every[name][1]()
    check_skips(name, c)
    took = time.time() - t0
    c.cpu = cpu_seconds() - cpu0 + c.cpu_elsewhere
    print(f"==== stage {name}: {c.passed} passed, {c.failed} failed, {c.skipped} skipped "
          f"({took:.0f} s, {c.cpu:.0f} CPU-s)", flush=True)
    return c, took


def run_stages_overlapped(names, every, jobs):
    """Run the stages `jobs` at a time (groups apart), each as a child
    process; print each stage's log whole when it ends.  {name: (Counts, s)}."""
    order = [n for n in START_ORDER if n in names] + [n for n in names if n not in START_ORDER]
    running = {}        # name -> (Popen, t0, log path, counts path)
    done = {}
    try:
        return _overlap(order, running, done, every, jobs)
    except BaseException:
        for p, *_ in running.values():      # Ctrl-C: the stages' groups too
            kill_group(p, grace=2)
        raise


def _overlap(order, running, done, every, jobs):
    while order or running:
        while True:
            busy = {group_of(n) for n in running} - {None}
            slots = jobs - sum(1 for n in running if n not in LIGHT)
            light = any(n in LIGHT for n in running)
            nxt = next((n for n in order if group_of(n) not in busy
                        and (not light if n in LIGHT else slots > 0)), None)
            if nxt is None:
                break
            order.remove(nxt)
            log = os.path.join(OUT, nxt + ".log")
            counts = os.path.join(OUT, nxt + ".counts.json")
            if os.path.exists(counts):
                os.remove(counts)
            with open(log, "w") as f:
                p = subprocess.Popen([PY, os.path.abspath(__file__), "--jobs", "1",
                                      "--counts-json", counts, nxt], cwd=TOP,
                                     stdout=f, stderr=subprocess.STDOUT,
                                     start_new_session=True)
            beside = ", ".join(sorted(running)) or "nothing"
            print(f"==== stage {nxt}: started beside {beside} (log: "
                  f"{os.path.relpath(log, TOP)})", flush=True)
            running[nxt] = (p, time.time(), log, counts)
        time.sleep(1)
        for n, (p, t0, log, _) in running.items():
            if p.poll() is None and time.time() - t0 > STAGE_LIMIT_S:
                with open(log, "a") as f:
                    f.write(f"run_tests.py: stage {n} ran past {STAGE_LIMIT_S} s "
                            "(DDSTORE_STAGE_LIMIT_S): killed\n")
                kill_group(p)
        for n in [n for n, (p, *_) in running.items() if p.poll() is not None]:
            p, t0, log, counts = running.pop(n)
            with open(log, errors="replace") as f:
                sys.stdout.write(f.read())
            c = Counts()
            try:
                with open(counts) as f:
                    d = json.load(f)
                c.passed, c.failed, c.skipped = d["passed"], d["failed"], d["skipped"]
                c.failures = d["failures"]
                c.cpu = d.get("cpu", 0.0)
            except (OSError, ValueError, KeyError):
                c.failed += 1
                c.failures.append(f"{n}: the stage's runner exited {p.returncode} "
                                  f"without counts (log: {os.path.relpath(log, TOP)})")
                print(f"==== stage {n}: exited {p.returncode} without counts", flush=True)
            done[n] = (c, time.time() - t0)
    return done


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stages", nargs="*")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="the everyday loop: stages " + " ".join(QUICK_STAGES))
    ap.add_argument("--jobs", "-j", type=int, default=None,
                    help="stages run at once (default: $DDSTORE_TEST_JOBS, else 2 on 2 "
                         "or more cores); 1 runs them one after the other in this process")
    ap.add_argument("--counts-json", help=argparse.SUPPRESS)   # a child of --jobs N
    args = ap.parse_args()
    every = dict(STAGES, **QUICK_STAGES)
    if args.list:
        for k, (desc, _) in every.items():
            print(f"{k:8s} {desc}" + ("  (--quick)" if k in QUICK_STAGES else ""))
        plan, stale = py_plan()
        print("\npython/tests: rank counts (stage pyN runs the files listing N)")
        for key, ranks in plan.items():
            slow = "  slow: not in --quick" if key.split("::")[0] in PY_SLOW else ""
            where = ",".join(map(str, ranks)) or "none (another stage runs it)"
            print(f"  {key:50s} {where}{slow}")
        for key in stale:
            print(f"  {key:50s} not in {PY_TESTS}!")
        return 0
    names = args.stages or (list(QUICK_STAGES) if args.quick else list(STAGES))
    for n in names:
        if n not in every:
            print(f"unknown stage {n!r}; --list shows them", file=sys.stderr)
            return 2
    os.makedirs(OUT, exist_ok=True)
    jobs = args.jobs if args.jobs is not None else default_jobs()
    total = Counts()
    t0 = time.time()
    shm_before = shm_files()
    if jobs > 1 and len(names) > 1:
        print(f"running {len(names)} stages, {jobs} at a time plus one of "
              f"{' '.join(LIGHT)} beside them (--jobs; groups apart: "
              + "; ".join(f"{g}: {' '.join(m)}" for g, m in GROUPS.items()) + ")", flush=True)
        results = run_stages_overlapped(names, every, jobs)
    else:
        results = {n: run_stage_here(n, every) for n in names}
    for n in names:
        total.add(results[n][0])
    if not args.counts_json:
        left = shm_leftovers(shm_before)
        if left:
            total.fail(f"/dev/shm: the run left {len(left)} file(s) of MPI jobs: "
                       + " ".join(left))
    if args.counts_json:
        with open(args.counts_json, "w") as f:
            json.dump({"passed": total.passed, "failed": total.failed,
                       "skipped": total.skipped, "failures": total.failures,
                       "cpu": cpu_seconds() + total.cpu_elsewhere}, f)
        return 1 if total.failed else 0
    if shutil.which("bazel") and os.environ.get("CI"):
        subprocess.run(["bazel", "shutdown"], cwd=TOP)
    if len(names) > 1:
        print("\nstage     seconds  CPU-s  passed  failed  skipped")
        for n in names:
            c, took = results[n]
            print(f"{n:8s} {took:8.0f} {c.cpu:6.0f} {c.passed:7d} {c.failed:7d} {c.skipped:8d}")
        print(f"{'all':8s} {'':8s} {sum(r[0].cpu for r in results.values()):6.0f}"
              "   (CPU-s: user + sys of the stage's processes and, for the Bazel stages, "
              "the server's)")
    print(f"\nsuite time {time.time() - t0:.0f} s")
    for f in total.failures:
        print("FAILED " + f)
    print(f"ddstore: {total.passed} passed, {total.failed} failed, {total.skipped} skipped")
    return 1 if total.failed else 0


if __name__ == "__main__":
    sys.exit(main())
