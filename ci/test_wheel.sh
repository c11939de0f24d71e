#!/usr/bin/env bash
# test_wheel.sh: the pip build end to end, as a user on an HPC system would
# run it: a fresh virtualenv with torch, `pip wheel --no-build-isolation .`
# in it, install the wheel, run the Python smoke tests against the installed
# package from outside the tree (so python/ is not on sys.path).
#
#   ci/test_wheel.sh [--ranks N] [--reuse-venv] [--no-isolated] [--no-gpu-builds]
#                       [--no-nompi] [--no-mpich]
#
#   1. venv     a fresh virtualenv at $WORK/venv (from the base interpreter of
#               $DDSTORE_PYTHON / .venv), with numpy, mpi4py, $DDSTORE_TORCH_SPEC
#               (torch==2.13.0), pytest, tqdm and scikit-build-core from pip's
#               configured indices and cache.
#   2. sources  pytest python/tests/wheel_checks.py::test_sources_match_bazel:
#               Bazel and the pip build compile the same files
#               (ci/check_sources.py; SKIP without bazel).
#   3. wheel    pip wheel --no-build-isolation --no-deps . in the venv (CMake +
#               ninja, CMAKE_BUILD_PARALLEL_LEVEL=2, build dir $WORK/build,
#               started over).  Log: $WORK/wheel.log
#   4. isolated pip wheel --no-deps . with build isolation (what plain
#               `pip install .` does): _core only, and the message saying why
#               the torch extension is missing.  --no-isolated skips it.
#   5. gpu      DDSTORE_GPU=cuda and =rocm builds of _core (DDSTORE_TORCH=0),
#               when the toolkit is installed (CUDA_HOME, /usr/local/cuda;
#               ROCM_PATH, /opt/rocm, /usr); not installed = SKIP in the tests.
#               --no-gpu-builds skips them.
#   6. install  pip install --no-deps --force-reinstall the wheel into the venv
#   7. tests    from an empty directory outside the tree: tools/ddrun -n N (2)
#               -- pytest python/tests/wheel_checks.py (the installed package,
#               the isolated and GPU builds) test_core_basic.py
#               test_torch_ext.py test_torch_dataset.py
#   8. nompi    DDSTORE_MPI=0 DDSTORE_TORCH=0 build of _core (HAVE_MPI False),
#               installed into $WORK/nompi/site, and pytest test_filecomm.py
#               against it in plain processes (FileComm,
#               SLURM_PROCID/SLURM_NTASKS; no mpirun).  --no-nompi skips it.
#   9. mpich    DDSTORE_MPI_IMPL=mpich build of _core, python/tests/mpi_smoke.py
#               on 2 ranks under mpiexec.mpich (methods 0 and 1).  --no-mpich
#               skips it.
#
# --reuse-venv keeps an existing $WORK/venv and $WORK/build (a quick rerun
# while working on the build; not what the suite runs).
#
# $DDSTORE_JUNIT_DIR: when set, every pytest run writes its JUnit XML there
# (sources.xml, rank<R>.xml), for ci/run_tests.py.
# $WORK: $DDSTORE_WHEEL_DIR, default <repo>/out/wheel (ignored by git).
# Exit status: 0 when every step and test passed.
set -euo pipefail

TOP="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${DDSTORE_WHEEL_DIR:-$TOP/out/wheel}"
TORCH_SPEC="${DDSTORE_TORCH_SPEC:-torch==2.13.0}"
RANKS=2
REUSE=0
ISOLATED=1
GPU_BUILDS=1
NOMPI=1
MPICH=1
while [ $# -gt 0 ]; do
    case "$1" in
    --ranks) RANKS="$2"; shift 2 ;;
    --reuse-venv) REUSE=1; shift ;;
    --no-isolated) ISOLATED=0; shift ;;
    --no-gpu-builds) GPU_BUILDS=0; shift ;;
    --no-nompi) NOMPI=0; shift ;;
    --no-mpich) MPICH=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test_wheel: unknown option $1 (--help)" >&2; exit 2 ;;
    esac
done

PROG=test_wheel
. "$TOP/ci/common.bash"     # say, die, lap, BASE

mkdir -p "$WORK"
VENV="$WORK/venv"
PY="$VENV/bin/python"
PIPLOG="$WORK/pip.log"

# ---- 1. a fresh virtualenv ---------------------------------------------------
if [ "$REUSE" = 1 ] && [ -x "$PY" ]; then
    say "reusing $VENV"
    "$PY" -m pip uninstall -q -y pyddstore >/dev/null 2>&1 || true
else
    rm -rf "$VENV"
    # venv run by a virtualenv's python creates one on the base interpreter:
    # nothing of .venv (no pyddstore.pth) is visible in it.
    "$BASE" -m venv "$VENV"
fi
PKGS=(numpy mpi4py "$TORCH_SPEC" pytest tqdm "scikit-build-core>=0.10")
# CMake >= 3.18 and ninja from the system (Debian: cmake ninja-build), else
# from PyPI into the venv (--no-build-isolation does not fetch them).
cmake_ok() {
    local v
    v="$(cmake --version 2>/dev/null | sed -n '1s/[^0-9]*\([0-9]*\.[0-9]*\).*/\1/p')"
    [ -n "$v" ] && [ "$(printf '%s\n3.18\n' "$v" | sort -V | head -1)" = 3.18 ]
}
if ! cmake_ok || ! command -v ninja >/dev/null; then
    PKGS+=(cmake ninja)
    say "no CMake >= 3.18 / ninja on PATH: installing them into the venv"
fi
export PATH="$VENV/bin:$PATH"
"$PY" -m pip install -q "${PKGS[@]}" >"$PIPLOG" 2>&1 \
    || { tail -20 "$PIPLOG"; die "pip install into $VENV failed (log: $PIPLOG)"; }
cmake_ok || die "no CMake >= 3.18 (the pip build needs it)"
"$PY" - <<'EOF' || die "the fresh virtualenv sees pyddstore before the install"
import importlib.util, sys
sys.exit(1 if importlib.util.find_spec("pyddstore") else 0)
EOF
lap "virtualenv $VENV: $("$PY" -c 'import torch, numpy, mpi4py; print("torch", torch.__version__, "numpy", numpy.__version__, "mpi4py", mpi4py.__version__)')"

# ---- 2. Bazel and the pip build compile the same files ----------------------
# First, so that a wait for the Bazel server's lock does not sit between the
# build and the tests (other work in a shared tree may change files then).
T="$TOP/python/tests"
JUNIT=()
[ -n "${DDSTORE_JUNIT_DIR:-}" ] && mkdir -p "$DDSTORE_JUNIT_DIR" \
    && JUNIT=("--junitxml=$DDSTORE_JUNIT_DIR/sources.xml")
rc=0
(cd "$WORK" && env DDSTORE_WHEEL_TEST=sources "$PY" -m pytest -q -p no:cacheprovider -rs --noconftest \
    "${JUNIT[@]}" "$T/wheel_checks.py::test_sources_match_bazel") || rc=1
lap "sources check"

# ---- 3. the wheel, in that environment (torch importable: the torch extension)
DIST="$WORK/dist"
BUILD="$WORK/build"
[ "$REUSE" = 1 ] || rm -rf "$BUILD"
rm -rf "$DIST"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
(cd "$TOP" && "$PY" -m pip wheel --no-build-isolation --no-deps -v -w "$DIST" \
     -Cbuild-dir="$BUILD" .) >"$WORK/wheel.log" 2>&1 \
    || { tail -40 "$WORK/wheel.log"; die "pip wheel failed (log: $WORK/wheel.log)"; }
WHEEL="$(ls "$DIST"/pyddstore-*.whl)"
SUMMARY="$BUILD/ddstore-build-summary.txt"
[ -f "$SUMMARY" ] || die "no $SUMMARY"
sed 's/^/  /' "$SUMMARY"
lap "built $(basename "$WHEEL")"

# ---- 4. the isolated build (plain `pip install .`) ---------------------------
ISO_ENV=()
if [ "$ISOLATED" = 1 ]; then
    rm -rf "$WORK/dist-isolated"
    # Build isolation: pip installs scikit-build-core into a temporary
    # environment without torch; cmake and ninja come from PATH.
    (cd "$TOP" && "$PY" -m pip wheel --no-deps -v -w "$WORK/dist-isolated" .) \
        >"$WORK/wheel-isolated.log" 2>&1 \
        || { tail -40 "$WORK/wheel-isolated.log"; die "isolated pip wheel failed (log: $WORK/wheel-isolated.log)"; }
    ISO_ENV=(DDSTORE_WHEEL_ISOLATED="$(ls "$WORK"/dist-isolated/pyddstore-*.whl):$WORK/wheel-isolated.log")
    lap "isolated build: $(basename "$(ls "$WORK"/dist-isolated/pyddstore-*.whl)")"
fi

# ---- 5. the GPU backends (compile and link; no GPU needed) ------------------
GPU_SPEC=""
if [ "$GPU_BUILDS" = 1 ]; then
    for g in cuda rocm; do
        d="$WORK/gpu-$g"
        rm -rf "$d"
        if (cd "$TOP" && DDSTORE_GPU=$g DDSTORE_TORCH=0 "$PY" -m pip wheel --no-build-isolation \
                --no-deps -v -w "$d" -Cbuild-dir="$d/build" .) >"$d.log" 2>&1; then
            GPU_SPEC+="$g=$(ls "$d"/pyddstore-*.whl);"
        elif why="$(tr -s ' \n' ' ' <"$d.log" | grep -o "DDSTORE_GPU=$g but there is no [^;]*" | head -1)" \
                && [ -n "$why" ]; then
            GPU_SPEC+="$g=SKIP:$why;"
        else
            tail -30 "$d.log"; die "DDSTORE_GPU=$g build failed (log: $d.log)"
        fi
    done
    lap "GPU backend builds: ${GPU_SPEC//$WORK\//}"
fi

# ---- 6. install ---------------------------------------------------------------
"$PY" -m pip install -q --no-deps --force-reinstall "$WHEEL" >>"$PIPLOG" 2>&1 \
    || { tail -20 "$PIPLOG"; die "pip install $WHEEL failed"; }
lap "installed into $VENV"

# ---- 7. the tests, from outside the tree -------------------------------------
RUN="$(mktemp -d)"
trap 'rm -rf "$RUN"' EXIT
cd "$RUN"
"$PY" -c 'import pyddstore, sys; print("test_wheel: pyddstore", pyddstore.__version__, "from", pyddstore.__file__)'
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
env DDSTORE_WHEEL_TEST="$SUMMARY" DDSTORE_WHEEL_GPU="$GPU_SPEC" "${ISO_ENV[@]}" \
    "$TOP/tools/ddrun" -n "$RANKS" --timeout 900 -- \
    "$PY" "$TOP/ci/pytest_rank.py" -q -p no:cacheprovider -rs \
    "$T/wheel_checks.py" -k "not test_sources_match_bazel" \
    "$T/test_core_basic.py" "$T/test_torch_ext.py" "$T/test_torch_dataset.py" || rc=1
lap "smoke tests on $RANKS ranks"

# ---- 8. without MPI: DDSTORE_MPI=0 (HAVE_MPI False), plain processes -------
# method 1 over FileComm with SLURM_PROCID/SLURM_NTASKS, method 0 a clear
# error (test_filecomm.py against this build; method 2 without MPI is the
# nompi stage's test_method2.py, on the same sources: ci/check_sources.py).
if [ "$NOMPI" = 1 ]; then
    ND="$WORK/nompi"
    rm -rf "$ND"
    mkdir -p "$ND"
    if (cd "$TOP" && DDSTORE_MPI=0 DDSTORE_TORCH=0 "$PY" -m pip wheel --no-build-isolation \
            --no-deps -v -w "$ND/dist" -Cbuild-dir="$ND/build" .) >"$ND/wheel.log" 2>&1 \
        && "$PY" -m pip install -q --no-deps --target "$ND/site" "$ND"/dist/pyddstore-*.whl \
            >>"$PIPLOG" 2>&1; then
        lap "no-MPI build installed in $ND/site"
        NJ=()
        [ -n "${DDSTORE_JUNIT_DIR:-}" ] && NJ=("--junitxml=$DDSTORE_JUNIT_DIR/nompi.xml")
        env PYTHONPATH="$ND/site" "$PY" -c 'import pyddstore as p; assert not p.HAVE_MPI, "HAVE_MPI"; assert p.HAVE_OFI, "HAVE_OFI"; print("test_wheel: no-MPI pyddstore from", p.__file__)' \
            && env PYTHONPATH="$ND/site" "$PY" -m pytest -q -p no:cacheprovider -rs "${NJ[@]}" \
                "$T/test_filecomm.py" || rc=1
        lap "no-MPI tests (plain processes)"
    else
        tail -30 "$ND/wheel.log"
        say "the DDSTORE_MPI=0 build failed (log: $ND/wheel.log)"
        rc=1
    fi
fi

# ---- 9. MPICH (the MPI of Cray systems): DDSTORE_MPI_IMPL=mpich --------------
# _core built against Debian's MPICH, python/tests/mpi_smoke.py (no mpi4py,
# which is built against Open MPI) on 2 ranks under mpiexec.mpich: methods 0
# and 1 over MPI_COMM_WORLD.  Skipped without mpicc.mpich / mpiexec.mpich.
junit_case() { # name status(pass|fail|skip) message
    [ -n "${DDSTORE_JUNIT_DIR:-}" ] || return 0
    local body=""
    case "$2" in
    fail) body="<failure message=\"$3\"/>" ;;
    skip) body="<skipped message=\"$3\"/>" ;;
    esac
    printf '<testsuite name="wheel"><testcase classname="test_wheel" name="%s">%s</testcase></testsuite>\n' \
        "$1" "$body" >"$DDSTORE_JUNIT_DIR/$1.xml"
}
if [ "$MPICH" = 1 ]; then
    if command -v mpicc.mpich >/dev/null && command -v mpiexec.mpich >/dev/null; then
        MD="$WORK/mpich"
        rm -rf "$MD"
        mkdir -p "$MD"
        if (cd "$TOP" && DDSTORE_MPI_IMPL=mpich DDSTORE_TORCH=0 "$PY" -m pip wheel \
                --no-build-isolation --no-deps -v -w "$MD/dist" -Cbuild-dir="$MD/build" .) \
                >"$MD/wheel.log" 2>&1 \
            && "$PY" -m pip install -q --no-deps --target "$MD/site" "$MD"/dist/pyddstore-*.whl \
                >>"$PIPLOG" 2>&1 \
            && grep -q "mpich" "$MD/build/ddstore-build-summary.txt"; then
            if env PYTHONPATH="$MD/site" "$TOP/tools/ddrun" --mpi mpich -n 2 --timeout 300 -- \
                    "$PY" "$T/mpi_smoke.py"; then
                junit_case mpich_smoke pass
            else
                junit_case mpich_smoke fail "mpi_smoke.py failed under MPICH"
                rc=1
            fi
        else
            tail -30 "$MD/wheel.log"
            junit_case mpich_smoke fail "the DDSTORE_MPI_IMPL=mpich build failed"
            rc=1
        fi
        lap "MPICH build + smoke test (2 ranks)"
    else
        say "SKIP: MPICH: no mpicc.mpich / mpiexec.mpich"
        junit_case mpich_smoke skip "no mpicc.mpich / mpiexec.mpich"
    fi
fi
say "total $(( $(date +%s) - T0 )) s; $([ $rc = 0 ] && echo ok || echo FAILED)"
exit $rc
