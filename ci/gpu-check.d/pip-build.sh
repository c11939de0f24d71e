#!/usr/bin/env bash
# GPU check (issue 5): `pip wheel .` (PEP 517: scikit-build-core + CMake,
# pyproject.toml / CMakeLists.txt) on this machine with DDSTORE_GPU=cuda
# finds CUDA and builds the same two modules (pyddstore._core with the CUDA
# backend, pyddstore._ddstore_torch for this machine's torch), offline:
#   1. a fresh venv ($BUILD/pip-venv, --system-site-packages: torch, numpy,
#      scikit-build-core, mpi4py come from the interpreter's environment; when
#      $PYTHON is itself a virtualenv its site-packages are added by a .pth);
#   2. pip wheel --no-build-isolation --no-deps --no-index . (DDSTORE_GPU=cuda,
#      DDSTORE_TORCH=1), build dir $BUILD/pip-build, log $BUILD/pip-build.log;
#      the build summary must say GPU cuda and the torch extension built, and
#      the wheel must hold both modules;
#   3. pip install --no-deps --no-index the wheel into the venv;
#   4. from a directory outside the tree, on 2 ranks (MPI via tools/ddrun, else
#      FileComm + libfabric, as the other hooks): pip_smoke_check.py - the
#      modules come from the venv, GPU_BACKEND == "cuda", a store with a host
#      and a CUDA shard read into CUDA tensors, one ThreadDataLoader epoch
#      with device="cuda".
# Skips (77) when scikit-build-core, cmake >= 3.18, ninja/make, Python.h or
# venv are missing, or (after the build and install passed) when there is no
# transport for the smoke store.  Dry run: DDSTORE_GPU_HOOK_DEVICE=cpu builds
# with DDSTORE_GPU=cuda as on the device where the CUDA headers are there
# ($CUDA_HOME/include; the other hooks' dry run builds the same), else with
# DDSTORE_GPU=none, and runs the smoke with CPU tensors;
# PIP_BUILD_EXTRA_PATH=dir1:dir2 adds directories to the venv's sys.path
# (e.g. a `pip install --target` of scikit-build-core).
# Exit: 0 pass, 77 skip (reason on the last line), else fail.
set -u -o pipefail
. "$(dirname "${BASH_SOURCE[0]}")/store_common.bash"

case "$HOOK_DEVICE" in
cuda) need_torch_cuda; GPU=cuda ;;
cpu)  GPU=none
      [ -f "$CUDA_HOME/include/cuda_runtime_api.h" ] && GPU=cuda ;;
*)    fail "DDSTORE_GPU_HOOK_DEVICE=$HOOK_DEVICE: expected cuda or cpu" ;;
esac
export GPUCHECK_DEVICE=$HOOK_DEVICE
unset PYTHONPATH

# ---- 0. what the offline build needs --------------------------------------
[ -f "$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ] \
    || skip "no Python headers (Python.h) for $PYTHON: pip cannot build pyddstore here"
# CMake >= 3.18 on PATH, or the `cmake` Python package (scikit-build-core
# finds either); ninja (or the `ninja` package), else make
if command -v cmake >/dev/null 2>&1; then
    cmake_ok || skip "cmake on PATH is $(cmake --version | head -1), the pip build needs >= 3.18"
else
    "$PYTHON" -c 'import cmake' >/dev/null 2>&1 \
        || skip "no cmake (on PATH or as the cmake Python package): the pip build (scikit-build-core) needs CMake >= 3.18"
fi
command -v ninja >/dev/null 2>&1 || command -v make >/dev/null 2>&1 || "$PYTHON" -c 'import ninja' >/dev/null 2>&1 \
    || skip "neither ninja nor make: CMake has no generator to build with"

# ---- 1. a fresh venv that sees this interpreter's packages -----------------
VENV="$BUILD/pip-venv"
VPY="$VENV/bin/python"
rm -rf "$VENV"
out=$("$PYTHON" -m venv --system-site-packages "$VENV" 2>&1) \
    || skip "$PYTHON -m venv failed (no venv/ensurepip for this interpreter?): $(printf '%s' "$out" | tail -1)"
site=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
{
    # $PYTHON in a virtualenv: its own site-packages (torch, ...) are not the
    # "system" ones that --system-site-packages adds
    "$PYTHON" - <<'PY'
import sys, sysconfig
if sys.prefix != sys.base_prefix:
    p = sysconfig.get_paths()
    for k in ("purelib", "platlib"):
        print(p[k])
    # and the folders its own .pth files add (a venv over a venv: the kit's)
    for d in sys.path:
        if d.endswith(("site-packages", "dist-packages")):
            print(d)
PY
    [ -n "${PIP_BUILD_EXTRA_PATH:-}" ] && tr ':' '\n' <<<"$PIP_BUILD_EXTRA_PATH"
} | awk 'NF && !seen[$0]++' >"$site/zz_gpucheck_parent.pth"
"$VPY" -c 'import scikit_build_core' >/dev/null 2>&1 \
    || skip "scikit-build-core is not installed for $PYTHON (the pip build's backend; offline, pip cannot fetch it)"
skbv=$("$VPY" -c 'import scikit_build_core as s; print(s.__version__)')
[ "$(printf '%s\n0.10\n' "$skbv" | sort -V | head -1)" = 0.10 ] \
    || skip "scikit-build-core $skbv is installed, pyproject.toml needs >= 0.10 (offline, pip cannot fetch it)"
"$VPY" -m pip --version >/dev/null 2>&1 || skip "no pip in the venv made by $PYTHON -m venv"
"$VPY" -c 'import torch' >/dev/null 2>&1 || fail "torch does not import in the venv $VENV"
echo "venv $VENV: $("$VPY" -c 'import sys, torch, scikit_build_core as s; print("python", sys.version.split()[0], "torch", torch.__version__, "scikit-build-core", s.__version__)')"

# ---- 2. the wheel ------------------------------------------------------------
DIST="$BUILD/pip-dist"
PBUILD="$BUILD/pip-build"
LOG="$BUILD/pip-build.log"
rm -rf "$DIST" "$PBUILD"
jobs=${GPUCHECK_JOBS:-$(nproc 2>/dev/null || echo 4)}
t0=$(date +%s)
echo "pip wheel --no-build-isolation --no-deps --no-index . (DDSTORE_GPU=$GPU, DDSTORE_TORCH=1, $jobs jobs)"
if ! (cd "$ROOT" && DDSTORE_GPU=$GPU DDSTORE_TORCH=1 CUDA_HOME="$CUDA_HOME" \
        CMAKE_BUILD_PARALLEL_LEVEL=$jobs PIP_DISABLE_PIP_VERSION_CHECK=1 \
        "$VPY" -m pip wheel --no-build-isolation --no-deps --no-index -v -w "$DIST" \
        --config-settings=build-dir="$PBUILD" .) >"$LOG" 2>&1; then
    tail -40 "$LOG"
    fail "pip wheel failed (log: $LOG)"
fi
WHEEL=$(ls "$DIST"/pyddstore-*.whl 2>/dev/null | head -1)
[ -n "$WHEEL" ] || fail "pip wheel made no pyddstore wheel in $DIST (log: $LOG)"
echo "built $(basename "$WHEEL") in $(( $(date +%s) - t0 )) s"
SUMMARY="$PBUILD/ddstore-build-summary.txt"
[ -f "$SUMMARY" ] || fail "no build summary $SUMMARY (log: $LOG)"
sed 's/^/  /' "$SUMMARY"
grep -Eq "^ *GPU: +$GPU( |$)" "$SUMMARY" || fail "the build summary does not say GPU: $GPU"
grep -Eq "^ *torch ext: +built" "$SUMMARY" || fail "the torch extension was not built (summary above)"
"$VPY" - "$WHEEL" <<'PY' || fail "the wheel lacks a module"
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for m in ("pyddstore/_core", "pyddstore/_ddstore_torch"):
    hit = [n for n in names if n.startswith(m) and n.endswith(".so")]
    assert hit, f"{m}*.so not in the wheel"
    print("  wheel:", hit[0])
assert any(n == "pyddstore/torch/loader.py" for n in names), "pyddstore/torch not in the wheel"
PY

# ---- 3. install ----------------------------------------------------------------
"$VPY" -m pip install -q --no-deps --no-index --force-reinstall "$WHEEL" >>"$LOG" 2>&1 \
    || { tail -20 "$LOG"; fail "pip install $WHEEL failed"; }

# ---- 4. smoke, from outside the tree -------------------------------------------
RUN=$(mktemp -d "${TMPDIR:-/tmp}/ddspip.XXXXXX")
trap 'rm -rf "$RUN"' EXIT
cd "$RUN" || fail "cd $RUN"
"$VPY" - <<'PY' || fail "the installed pyddstore does not import"
import pyddstore, pyddstore._core as c, pyddstore.torch
print("installed pyddstore %s at %s: GPU backend %s, MPI %s, libfabric %s" % (
    pyddstore.__version__, pyddstore.__file__, c.GPU_BACKEND, pyddstore.HAVE_MPI, pyddstore.HAVE_OFI))
PY
PYTHON=$VPY
export GPUCHECK_EXPECT_PREFIX="$VENV" GPUCHECK_EXPECT_BACKEND="$GPU"
echo "the wheel built (GPU backend $GPU) and installed; now the smoke store"
pick_transport
run_hook_ranks 2 "$ROOT/ci/gpu-check.d/pip_smoke_check.py" \
    || fail "pip_smoke_check.py failed against the installed wheel ($GPUCHECK_DEVICE, $GPUCHECK_TRANSPORT)"
echo "pip-build: OK"
