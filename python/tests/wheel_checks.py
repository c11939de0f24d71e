"""Checks of pyddstore as `pip install` leaves it (run by ci/test_wheel.sh).

Not collected by the py1/py2/py4 stages (the name does not match test_*.py):
ci/test_wheel.sh runs it explicitly, from a directory outside the tree:

  venv/bin/python -m pytest --noconftest wheel_checks.py::test_sources_match_bazel
      (one process, before the build)
  tools/ddrun -n 2 -- venv/bin/python -m pytest wheel_checks.py \
      -k "not test_sources_match_bazel" \
      test_core_basic.py test_torch_ext.py test_torch_dataset.py
      (after installing the wheel into a fresh virtualenv)

Environment set by ci/test_wheel.sh:
  DDSTORE_WHEEL_TEST      the build summary (ddstore-build-summary.txt of the
                          wheel's CMake build dir): what the build found
  DDSTORE_WHEEL_ISOLATED  "<wheel>:<pip log>" of the isolated build (plain
                          `pip wheel .`, no torch in the build environment)
  DDSTORE_WHEEL_GPU       "cuda=<wheel>;rocm=SKIP:<reason>;": the
                          DDSTORE_GPU=cuda / rocm builds of _core
"""
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUMMARY = os.environ.get("DDSTORE_WHEEL_TEST", "")

pytestmark = pytest.mark.skipif(
    not SUMMARY, reason="checks of an installed wheel: run by ci/test_wheel.sh")


def _real(p):
    return os.path.realpath(p)


def _under(path, root):
    path, root = _real(path), _real(root)
    return path == root or path.startswith(root + os.sep)


def _summary():
    """{"MPI": "TRUE (...)", "libfabric": ..., "GPU": ..., "torch ext": ...}"""
    out = {}
    with open(SUMMARY) as f:
        for line in f:
            k, sep, v = line.strip().partition(":")
            if sep and line.startswith("  "):
                out[k.strip()] = v.strip()
    return out


def _pkg():
    import pyddstore
    return os.path.dirname(os.path.abspath(pyddstore.__file__))


def _tree_pyfiles():
    root = os.path.join(TOP, "python", "pyddstore")
    out = set()
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in ("__pycache__", "csrc")]
        out.update(os.path.relpath(os.path.join(d, f), root) for f in files if f.endswith(".py"))
    return out


def test_imported_from_the_install_not_the_tree():
    pkg = _pkg()
    site = {_real(sysconfig.get_paths()[k]) for k in ("platlib", "purelib")}
    assert any(_under(pkg, s) for s in site), f"pyddstore from {pkg}, not from {site}"
    assert not _under(pkg, os.path.join(TOP, "python")), f"pyddstore imported from the source tree: {pkg}"
    tree_python = _real(os.path.join(TOP, "python"))
    assert tree_python not in [_real(p) for p in sys.path if p], \
        "the tree's python/ is on sys.path (a pyddstore.pth in this environment?)"
    import pyddstore._core as core
    assert _under(core.__file__, pkg)
    assert core.__file__.endswith(sysconfig.get_config_var("EXT_SUFFIX"))


def test_version_from_one_place():
    import pyddstore
    with open(os.path.join(TOP, "python", "VERSION")) as f:
        m = re.fullmatch(r"\s*([0-9][^\s]*)\s*", f.read())
    assert m, "python/VERSION holds no version"
    assert pyddstore.__version__ == m.group(1)
    assert importlib.metadata.version("pyddstore") == pyddstore.__version__


def test_generated_version_headers():
    """dds_core_version() comes from the header generated from ddstore-core/VERSION."""
    import pyddstore._core as core
    with open(os.path.join(TOP, "ddstore-core", "VERSION")) as f:
        want = "".join(f.read().split())
    assert core.core_version() == want


def test_features_are_what_the_build_found():
    import pyddstore
    import pyddstore._core as core
    s = _summary()
    assert pyddstore.HAVE_MPI == s["MPI"].startswith("TRUE"), s["MPI"]
    assert bool(core.HAVE_OFI) == s["libfabric"].startswith("TRUE"), s["libfabric"]
    built = s["torch ext"].startswith("built")
    found = [f for f in os.listdir(_pkg()) if f.startswith("_ddstore_torch")]
    assert bool(found) == built, (s["torch ext"], found)


def test_package_files():
    """The wheel carries python/pyddstore/** (*.py, pyddstore.torch included),
    the two modules, and no C sources."""
    pkg = _pkg()
    installed = set()
    for d, dirs, files in os.walk(pkg):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        installed.update(os.path.relpath(os.path.join(d, f), pkg) for f in files)
    # _bin/ holds the programs behind the console commands (tools/ddrun and
    # the relay ddrun --nodes --delay starts), not modules of the package
    progs = {f for f in installed if f.startswith("_bin" + os.sep)}
    assert progs == {os.path.join("_bin", "ddrun"), os.path.join("_bin", "ddrelay.py")}, progs
    py = {f for f in installed if f.endswith(".py") and f not in progs}
    assert py == _tree_pyfiles()
    # Same bytes as the tree, for files nobody edited since the build started
    # (others may be working in a shared tree while the wheel builds).
    built = os.path.getmtime(SUMMARY)
    for f in py:
        src = os.path.join(TOP, "python", "pyddstore", f)
        if os.path.getmtime(src) >= built:
            continue
        with open(os.path.join(pkg, f), "rb") as a, open(src, "rb") as b:
            assert a.read() == b.read(), f"{f} differs from the tree"
    ext = sysconfig.get_config_var("EXT_SUFFIX")
    mods = {f for f in installed if f.endswith(".so")}
    assert mods <= {"_core" + ext, "_ddstore_torch" + ext, "libddstore.so"}, mods
    assert "_core" + ext in mods and "libddstore.so" in mods
    assert not any(f.startswith("csrc") for f in installed)


def _runpath(so):
    if not shutil.which("readelf"):
        pytest.skip("readelf not installed")
    out = subprocess.run(["readelf", "-d", so], capture_output=True, text=True, check=True).stdout
    m = re.search(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[([^\]]*)\]", out)
    return m.group(1).split(":") if m else []


def test_modules_have_no_build_tree_paths():
    ext = sysconfig.get_config_var("EXT_SUFFIX")
    build_dir = os.path.dirname(SUMMARY)
    for name in ("_core" + ext, "_ddstore_torch" + ext, "libddstore.so"):
        so = os.path.join(_pkg(), name)
        if not os.path.exists(so):
            continue
        for p in _runpath(so):
            assert not _under(p, TOP) and not _under(p, build_dir), f"{name}: RUNPATH {p}"
        if name != "libddstore.so":   # the modules load the libddstore.so next to them
            assert "$ORIGIN" in _runpath(so), name
    so = os.path.join(_pkg(), "_ddstore_torch" + ext)
    assert os.path.exists(so) == _summary()["torch ext"].startswith("built"), \
        (so, _summary()["torch ext"])
    if _summary()["torch ext"].startswith("built"):
        assert "$ORIGIN/../torch/lib" in _runpath(so)


def test_torch_extension_from_the_install():
    if not _summary()["torch ext"].startswith("built"):
        pytest.skip("the wheel was built without torch: " + _summary()["torch ext"])
    import torch  # noqa: F401
    import pyddstore.torch
    from pyddstore import _ddstore_torch as ext
    assert _under(ext.__file__, _pkg())
    assert _under(pyddstore.torch.__file__, _pkg())
    assert hasattr(pyddstore.torch, "DistDataset") and hasattr(pyddstore.torch, "ThreadDataLoader")


def test_pyddstore_info(tmp_path):
    """python -m pyddstore.info runs from the install and reports the build."""
    p = subprocess.run([sys.executable, "-m", "pyddstore.info"], cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    import pyddstore
    assert p.stdout.startswith(f"pyddstore {pyddstore.__version__}\n"), p.stdout[:200]
    if _summary()["torch ext"].startswith("built"):
        assert "torch extension: loaded" in p.stdout, p.stdout


def _script(name):
    """A console command of the installed package: next to this interpreter."""
    p = os.path.join(os.path.dirname(sys.executable), name)
    assert os.access(p, os.X_OK), f"no console command {name} next to {sys.executable}"
    return p


@pytest.mark.skipif(os.environ.get("OMPI_COMM_WORLD_RANK", "0") != "0",
                    reason="starts a job of its own: on rank 0 only")
def test_console_commands(tmp_path):
    """ddstore-info, ddstore-handshake and ddrun come with the wheel and run."""
    import pyddstore
    p = subprocess.run([_script("ddstore-info")], cwd=str(tmp_path), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.startswith(f"pyddstore {pyddstore.__version__}\n"), \
        p.stdout[:200] + p.stderr
    p = subprocess.run([_script("ddstore-handshake"), str(tmp_path / "none.ddshs")],
                       cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
    # a missing record: a clear message and status 1 (2 in a build without libfabric)
    assert p.returncode == (1 if pyddstore.HAVE_OFI else 2), p.stdout + p.stderr
    assert "none.ddshs" in p.stderr or "no libfabric" in p.stderr, p.stderr
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "PMI_"))}      # not the caller's launch
    # one write per line (print() writes its pieces one by one, unbuffered)
    code = ("import sys, pyddstore; s = pyddstore.PyDDStore(None); "
            "sys.stdout.write(f'rank {s.rank} of {s.size}\\n')"
            if pyddstore.HAVE_MPI else
            "import os, sys; sys.stdout.write(f\"rank {os.environ['OMPI_COMM_WORLD_RANK']} of "
            "{os.environ['OMPI_COMM_WORLD_SIZE']}\\n\")")
    p = subprocess.run([_script("ddrun"), "-n", "2", "--timeout", "120", "--",
                        sys.executable, "-c", code],
                       cwd=str(tmp_path), capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    # (the ranks' lines may interleave on the launcher's stdout)
    assert sorted(re.findall(r"rank (\d) of 2", p.stdout)) == ["0", "1"], p.stdout


def test_isolated_build_skips_torch_with_a_message():
    """Plain `pip wheel .` (build isolation: no torch in the build environment)
    builds _core and says why the torch extension is missing."""
    spec = os.environ.get("DDSTORE_WHEEL_ISOLATED")
    if not spec:
        pytest.skip("ci/test_wheel.sh --no-isolated: no isolated build")
    whl, log = spec.rsplit(":", 1)
    names = zipfile.ZipFile(whl).namelist()
    assert any(re.match(r"pyddstore/_core\..*\.so$", n) for n in names), names
    assert not any("_ddstore_torch" in n for n in names), names
    assert "pyddstore/torch/__init__.py" in names
    with open(log, errors="replace") as f:
        text = f.read()
    assert "pyddstore._ddstore_torch (pyddstore.torch) is NOT built" in text
    assert "--no-build-isolation" in text


GPU_LIBS = {"cuda": "libcudart.so", "rocm": "libamdhip64.so"}


@pytest.mark.parametrize("backend", ["cuda", "rocm"])
def test_gpu_backend_build(backend, tmp_path):
    """DDSTORE_GPU=cuda|rocm: libddstore.so links the GPU runtime and _core
    imports (no GPU needed: the runtime reports "no GPU" when asked)."""
    spec = dict(kv.split("=", 1) for kv in os.environ.get("DDSTORE_WHEEL_GPU", "").split(";") if kv)
    if backend not in spec:
        pytest.skip("ci/test_wheel.sh --no-gpu-builds")
    if spec[backend].startswith("SKIP:"):
        pytest.skip(spec[backend][5:])
    zipfile.ZipFile(spec[backend]).extractall(tmp_path)
    ext = sysconfig.get_config_var("EXT_SUFFIX")
    so = str(tmp_path / "pyddstore" / "libddstore.so")
    if not shutil.which("readelf"):
        pytest.skip("readelf not installed")
    dyn = subprocess.run(["readelf", "-d", so], capture_output=True, text=True, check=True).stdout
    assert GPU_LIBS[backend] in dyn, dyn
    assert not os.path.exists(tmp_path / "pyddstore" / ("_ddstore_torch" + ext))
    p = subprocess.run([sys.executable, "-c", "import pyddstore, pyddstore._core as c; print(c.__file__)"],
                       cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert _under(p.stdout.strip(), str(tmp_path)), p.stdout


def test_sources_match_bazel():
    """cmake/ddstore_sources.cmake lists what Bazel compiles (ci/check_sources.py)."""
    if os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")) != "0":
        pytest.skip("run once, by rank 0")
    p = subprocess.run([sys.executable, os.path.join(TOP, "ci", "check_sources.py")],
                       capture_output=True, text=True, timeout=900)
    print(p.stdout + p.stderr)
    if p.returncode == 77:
        pytest.skip(p.stdout.strip())
    assert p.returncode == 0, p.stdout + p.stderr
