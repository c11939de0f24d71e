# Helpers sourced by ci/gpu-check.d/store-*-cuda.sh (not a hook itself:
# ci/gpu-check.sh runs *.sh only).  Environment from ci/gpu-check.sh:
# DDSTORE_ROOT, DDSTORE_GPU_CHECK_BUILD (holds libddstore_core.a and
# cuda/libddgpu.a), PYTHON, CUDA_HOME, DDSTORE_TEST_STRICT.
# Exit codes of the hooks: 0 pass, 77 skip (reason printed last), else fail.

ROOT=${DDSTORE_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
BUILD=${DDSTORE_GPU_CHECK_BUILD:-$ROOT/build/gpu-check}
PYTHON=${PYTHON:-python3}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CC=${CC:-gcc}
HOOK_TIMEOUT_S=${GPU_CHECK_TIMEOUT_S:-300}
mkdir -p "$BUILD"

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

# The core store's GPU test (ddstore-core/test/store_gpu_test.c) linked with
# ddstore-gpu's CUDA backend, run on the real device: staged reads into
# device memory on several streams and threads, GPU shards with host
# mirrors, updates, errors.  Returns its exit status.
run_store_gpu_test_cuda() {
    local lib="$BUILD/cuda/libddgpu.a" bin="$BUILD/cuda/store_gpu_test" v
    [ -f "$lib" ] || { echo "no $lib (the cuda build of ddstore-gpu failed or did not run)"; return 1; }
    v=$(tr -d ' \t\r\n' <"$ROOT/ddstore-gpu/VERSION")
    "$CC" -std=c11 -D_GNU_SOURCE -O2 -g -pthread -Wall -Wextra -Wno-unused-parameter \
        -I"$ROOT/ddstore-core/include" -I"$ROOT/ddstore-core/src" -I"$ROOT/ddstore-core/test" \
        -I"$ROOT/ddstore-gpu/include" -DDDGPU_VERSION="\"$v\"" \
        "$ROOT/ddstore-core/test/store_gpu_test.c" "$ROOT"/ddstore-core/src/dds_[a-z]*.c "$lib" \
        -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" -lcudart -lm -o "$bin" || return 1
    DDSTORE_TEST_STRICT=${DDSTORE_TEST_STRICT:-1} timeout "$HOOK_TIMEOUT_S" "$bin"
}

# torch with a usable CUDA device, else skip.
need_torch_cuda() {
    local why
    why=$("$PYTHON" - <<'PY' 2>&1
import sys
try:
    import torch
except Exception as e:
    print("torch not importable:", e); sys.exit(1)
if not torch.cuda.is_available() or torch.version.hip:
    print("torch %s has no usable CUDA device" % torch.__version__); sys.exit(1)
PY
) || skip "$why"
}

# pyddstore (the tree's Python package) with _core built by ci/dev-build.sh
# against ddstore-gpu's CUDA backend and MPI (method 0: MPI RMA, a transport
# without FI_HMEM, so reads into GPU memory are staged), in
# $BUILD/py-cuda; rebuilt when a source is newer.  Sets PYTHONPATH.
build_pyddstore_cuda() {
    local pkg="$BUILD/py-cuda" ext stamp
    command -v mpicc >/dev/null 2>&1 || skip "no MPI (mpicc) on this machine: the Python store checks run over method 0 (MPI RMA); the C store test above ran"
    command -v mpirun >/dev/null 2>&1 || command -v mpiexec >/dev/null 2>&1 || skip "no mpirun on this machine"
    [ -f "$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ] \
        || skip "no Python headers (Python.h) for $PYTHON: cannot build pyddstore._core here"
    stamp="$pkg/.built"
    if [ ! -f "$stamp" ] || [ -n "$(find "$ROOT/python/pyddstore" "$ROOT/ddstore-core/src" \
            "$ROOT/ddstore-core/include" "$ROOT/ddstore-gpu/src" "$ROOT/ddstore-mpi" \
            -newer "$stamp" -type f 2>/dev/null | head -1)" ]; then
        rm -rf "$pkg" && mkdir -p "$pkg" || return 1
        cp -r "$ROOT/python/pyddstore" "$pkg/" || return 1
        rm -f "$pkg"/pyddstore/*.so
        ext=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
        if ! DDSTORE_GPU=cuda CUDA_HOME="$CUDA_HOME" PYTHON="$PYTHON" CC="$CC" \
                OUT="$pkg/pyddstore/_core$ext" "$ROOT/ci/dev-build.sh" >"$BUILD/py-cuda.log" 2>&1; then
            tail -20 "$BUILD/py-cuda.log"
            fail "building pyddstore._core with the CUDA backend failed (log: $BUILD/py-cuda.log)"
        fi
        touch "$stamp"
    fi
    export PYTHONPATH="$pkg${PYTHONPATH:+:$PYTHONPATH}"
    "$PYTHON" -c 'import pyddstore, pyddstore._core as c; assert c.GPU_BACKEND == "cuda", c.GPU_BACKEND; assert pyddstore.HAVE_MPI' \
        || fail "the pyddstore built in $pkg is not the CUDA + MPI build"
}

# run_ranks N SCRIPT ARGS...: the script on N ranks (tools/ddrun).
run_ranks() {
    local n=$1
    shift
    "$ROOT/tools/ddrun" -n "$n" --timeout "$HOOK_TIMEOUT_S" -- "$PYTHON" "$@"
}

# ---------------------------------------------------------------------------
# Helpers of the torch-level hooks (torch-distdataset-threads, sync-profile,
# throughput, pip-build).  Their Python checks read GPUCHECK_DEVICE (cuda, or
# cpu: the dry run of the same logic on a machine without a GPU),
# GPUCHECK_TRANSPORT (mpi: tools/ddrun, MPI communicator, method 0; file:
# plain processes with SLURM_PROCID/SLURM_NTASKS, pyddstore.FileComm,
# method 1 over libfabric) and GPUCHECK_HSDIR (the FileComm directory).
#
# Dry run here (no GPU): DDSTORE_GPU_HOOK_DEVICE=cpu runs a hook against the
# tree's own build (python/pyddstore/*.so, ci/dev-build*.sh) with CPU
# tensors; DDSTORE_GPU_HOOK_TRANSPORT=mpi|file forces the transport.
HOOK_DEVICE=${DDSTORE_GPU_HOOK_DEVICE:-cuda}

# hook_python_env: the interpreter and pyddstore for the torch-level hooks.
# cuda: torch with CUDA (else skip), then pyddstore._core (CUDA backend) and
# pyddstore._ddstore_torch built for this machine's torch into
# $BUILD/py-torch-cuda.  cpu: the tree's own build.  Exports PYTHONPATH.
hook_python_env() {
    case "$HOOK_DEVICE" in
    cuda) need_torch_cuda; build_pyddstore_torch_cuda ;;
    cpu)
        if [ -n "${GPUCHECK_KIT_VENV:-}" ]; then
            # the kit's dry run: the tree built for the kit's MPI, as on the
            # device (the tree's own build links the system's MPI)
            build_pyddstore_torch_cuda
            export GPUCHECK_DEVICE="$HOOK_DEVICE"
            return 0
        fi
        export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
        local why
        why=$("$PYTHON" -c 'import torch, pyddstore, pyddstore.torch' 2>&1 | tail -1) \
            || skip "dry run: the tree's pyddstore.torch does not import with $PYTHON ($why); build it with ci/dev-build.sh and ci/dev-build-torch.sh"
        ;;
    *) fail "DDSTORE_GPU_HOOK_DEVICE=$HOOK_DEVICE: expected cuda or cpu" ;;
    esac
    export GPUCHECK_DEVICE="$HOOK_DEVICE"
}

# True when `cmake` on PATH is >= 3.18 (CMakeLists.txt's minimum).
cmake_ok() {
    local v
    v=$(cmake --version 2>/dev/null | sed -n '1s/[^0-9]*\([0-9]*\.[0-9]*\).*/\1/p')
    [ -n "$v" ] && [ "$(printf '%s\n3.18\n' "$v" | sort -V | head -1)" = 3.18 ]
}

# build_pyddstore_torch_cuda: both modules with ddstore-gpu's CUDA backend
# (and MPI / libfabric where this machine has them), for this machine's
# torch, into $BUILD/py-torch-cuda/pyddstore (a copy of python/pyddstore);
# rebuilt when a source is newer.  CMake (CMakeLists.txt, the pip build's
# recipe, without pip) when cmake >= 3.18 is there, else ci/dev-build.sh
# for _core (MPI, no libfabric) and g++ for the torch extension as
# ci/dev-build-torch.sh compiles it.
build_pyddstore_torch_cuda() {
    local pkg="$BUILD/py-torch-cuda" bdir="$BUILD/py-torch-cuda.cmake"
    local log="$BUILD/py-torch-cuda.log" stamp ext py jobs gen=()
    stamp="$pkg/.built"
    py=$(command -v "$PYTHON") || fail "PYTHON=$PYTHON not found"
    [ -f "$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ] \
        || skip "no Python headers (Python.h) for $PYTHON: cannot build pyddstore here"
    jobs=$(nproc 2>/dev/null || echo 4)
    # newer_than FILE: a source newer than FILE (or FILE missing)
    newer_than() {
        [ ! -f "$1" ] || [ -n "$(find "$ROOT/python/pyddstore" "$ROOT/ddstore-core" \
            "$ROOT/ddstore-gpu/src" "$ROOT/ddstore-gpu/include" "$ROOT/ddstore-mpi" \
            "$ROOT/ddstore-ofi" "$ROOT/ddstore-torch/csrc" "$ROOT/CMakeLists.txt" "$ROOT/cmake" \
            -newer "$1" -type f ! -path '*/__pycache__/*' ! -name '*.so' 2>/dev/null \
            | head -1)" ]
    }
    # the same sources failed to build for an earlier hook of this run: do
    # not spend the device's time on it again
    if [ -f "$BUILD/py-torch-cuda.failed" ] && ! newer_than "$BUILD/py-torch-cuda.failed"; then
        tail -20 "$log" 2>/dev/null
        fail "building pyddstore with the CUDA backend and the torch extension failed earlier for these sources (log: $log)"
    fi
    if newer_than "$stamp"; then
        touch "$BUILD/py-torch-cuda.failed"     # until the build below succeeds
        rm -rf "$pkg" && mkdir -p "$pkg" && cp -r "$ROOT/python/pyddstore" "$pkg/" \
            || fail "cannot copy python/pyddstore to $pkg"
        rm -rf "$pkg"/pyddstore/*.so "$pkg"/pyddstore/csrc
        ext=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
        : >"$log"
        if command -v cmake >/dev/null 2>&1 && cmake_ok; then
            command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
            echo "building pyddstore (CMake, DDSTORE_GPU=cuda, torch extension) in $bdir"
            rm -rf "$bdir"
            if ! { DDSTORE_GPU=cuda DDSTORE_TORCH=1 CUDA_HOME="$CUDA_HOME" \
                       cmake -S "$ROOT" -B "$bdir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
                       -DPython_EXECUTABLE="$py" >>"$log" 2>&1 &&
                   cmake --build "$bdir" -j "$jobs" >>"$log" 2>&1; }; then
                tail -30 "$log"
                fail "CMake build of pyddstore (DDSTORE_GPU=cuda, torch extension) failed (log: $log)"
            fi
            cp "$bdir"/_core*.so "$bdir"/_ddstore_torch*.so "$bdir"/libddstore.so "$pkg/pyddstore/" \
                || fail "no modules (or no libddstore.so) in $bdir"
            [ -f "$bdir/ddstore-build-summary.txt" ] && sed 's/^/  /' "$bdir/ddstore-build-summary.txt"
        else
            echo "building pyddstore (ci/dev-build.sh DDSTORE_GPU=cuda + g++ torch extension: no cmake >= 3.18)"
            DDSTORE_GPU=cuda CUDA_HOME="$CUDA_HOME" PYTHON="$PYTHON" CC="$CC" \
                OUT="$pkg/pyddstore/_core$ext" "$ROOT/ci/dev-build.sh" >>"$log" 2>&1 \
                || { tail -20 "$log"; fail "building pyddstore._core with the CUDA backend failed (log: $log)"; }
            build_torch_ext_gxx "$pkg/pyddstore/_ddstore_torch$ext" "$BUILD/py-torch-cuda.obj" >>"$log" 2>&1 \
                || { tail -20 "$log"; fail "building pyddstore._ddstore_torch failed (log: $log)"; }
        fi
        touch "$stamp"
        rm -f "$BUILD/py-torch-cuda.failed"
    fi
    export PYTHONPATH="$pkg${PYTHONPATH:+:$PYTHONPATH}"
    "$PYTHON" - <<'PY' || fail "the pyddstore built in $BUILD/py-torch-cuda is not a CUDA build with the torch extension"
import torch, pyddstore, pyddstore._core as c, pyddstore.torch
assert c.GPU_BACKEND == "cuda", c.GPU_BACKEND
print("pyddstore %s from %s: GPU backend %s, MPI %s, libfabric %s, torch %s (CUDA %s)" % (
    pyddstore.__version__, pyddstore.__file__, c.GPU_BACKEND, pyddstore.HAVE_MPI,
    pyddstore.HAVE_OFI, torch.__version__, torch.version.cuda))
PY
}

# build_torch_ext_gxx OUT OBJDIR: the torch extension compiled as
# ci/dev-build-torch.sh does (headers only from the C libraries), against
# $PYTHON's torch, in parallel.
build_torch_ext_gxx() {
    local out=$1 obj=$2 cxx=${CXX:-g++} s o objs=() vars
    mkdir -p "$obj/include/ddstore"
    printf '#define DDSTORE_TORCH_VERSION "%s"\n' "$(tr -d ' \t\r\n' <"$ROOT/ddstore-torch/VERSION")" \
        >"$obj/include/ddstore/torch_version.h"
    vars=$("$PYTHON" - <<'PY'
import sysconfig, torch, torch.utils.cpp_extension as ce
print(sysconfig.get_paths()["include"])
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(ce.library_paths()[0])
print("\n".join(ce.include_paths()))
PY
) || return 1
    local pyinc abi tlib tinc=()
    pyinc=$(sed -n 1p <<<"$vars"); abi=$(sed -n 2p <<<"$vars"); tlib=$(sed -n 3p <<<"$vars")
    while IFS= read -r s; do [ -n "$s" ] && tinc+=("-isystem$s"); done < <(sed -n '4,$p' <<<"$vars")
    local flags=(-O2 -g -std=c++17 -fPIC -fvisibility=hidden -Wall -Wno-unused-parameter
        -DTORCH_EXTENSION_NAME=_ddstore_torch -DTORCH_API_INCLUDE_EXTENSION_H
        "-D_GLIBCXX_USE_CXX11_ABI=$abi" -I"$obj/include" -I"$ROOT/ddstore-torch/csrc" -I"$ROOT/libddstore/include"
        -I"$ROOT/ddstore-core/include" -I"$ROOT/ddstore-gpu/include" -I"$pyinc" "${tinc[@]}")
    local jobs failed=0
    jobs=$(nproc 2>/dev/null || echo 4)
    for s in "$ROOT"/ddstore-torch/csrc/*.cpp; do
        o="$obj/$(basename "${s%.cpp}").o"
        objs+=("$o")
        rm -f "$o"
        while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || failed=1; done
        "$cxx" "${flags[@]}" -c "$s" -o "$o" &
    done
    while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || failed=1; done
    wait
    for o in "${objs[@]}"; do [ -f "$o" ] || failed=1; done
    [ $failed = 0 ] || return 1
    # libddstore.so: built next to _core by ci/dev-build.sh (the same dir)
    "$cxx" -shared -o "$out" "${objs[@]}" -L"$(dirname "$out")" -lddstore -Wl,-rpath,'$ORIGIN' \
        -L"$tlib" -Wl,-rpath,"$tlib" -lc10 -ltorch -ltorch_cpu -ltorch_python
}

# pick_transport: GPUCHECK_TRANSPORT for the pyddstore on PYTHONPATH.
#   mpi   when it has MPI, mpirun/mpiexec is on PATH and mpi4py imports
#         (tools/ddrun; method 0)
#   file  else when it has libfabric (plain processes, FileComm, method 1;
#         DDSTORE_FABRIC default "tcp;ofi_rxm" on lo)
#   else skip.  DDSTORE_GPU_HOOK_TRANSPORT=mpi|file forces one.
pick_transport() {
    local have forced=${DDSTORE_GPU_HOOK_TRANSPORT:-} mpi=0 ofi=0 m4p=0 launcher=0 why=""
    have=$("$PYTHON" -c 'import pyddstore; print(int(pyddstore.HAVE_MPI), int(pyddstore.HAVE_OFI))' 2>&1) \
        || fail "pyddstore does not import: $have"
    read -r mpi ofi <<<"$have"
    "$PYTHON" -c 'import mpi4py' >/dev/null 2>&1 && m4p=1
    { command -v mpirun || command -v mpiexec; } >/dev/null 2>&1 && launcher=1
    case "$forced" in
    mpi)  GPUCHECK_TRANSPORT=mpi ;;
    file) GPUCHECK_TRANSPORT=file ;;
    "")
        if [ "$mpi" = 1 ] && [ $launcher = 1 ] && [ $m4p = 1 ]; then
            GPUCHECK_TRANSPORT=mpi
        elif [ "$ofi" = 1 ]; then
            GPUCHECK_TRANSPORT=file
        else
            [ "$mpi" = 1 ] || why="pyddstore was built without MPI (no mpicc)"
            [ "$mpi" = 1 ] && [ $launcher = 0 ] && why="no mpirun/mpiexec"
            [ "$mpi" = 1 ] && [ $launcher = 1 ] && [ $m4p = 0 ] && why="mpi4py does not import"
            skip "no transport for a store on this machine: method 0 needs MPI ($why), method 1 needs libfabric (pyddstore.HAVE_OFI is False: no libfabric found at build time)"
        fi ;;
    *) fail "DDSTORE_GPU_HOOK_TRANSPORT=$forced: expected mpi or file" ;;
    esac
    export GPUCHECK_TRANSPORT
    echo "transport: $GPUCHECK_TRANSPORT (pyddstore MPI $mpi, libfabric $ofi, mpi4py $m4p, mpirun $launcher)"
}

# run_hook_ranks N SCRIPT ARGS...: $PYTHON SCRIPT on N ranks with the
# transport pick_transport chose; non-zero when any rank fails.
run_hook_ranks() {
    local n=$1
    shift
    if [ "${GPUCHECK_TRANSPORT:-mpi}" = mpi ]; then
        if [ -z "${DDRUN_MPI:-}" ] && { mpirun --version 2>&1 || mpiexec --version 2>&1; } | grep -qi -e mpich -e hydra; then
            export DDRUN_MPI=mpich
        fi
        "$ROOT/tools/ddrun" -n "$n" --timeout "$HOOK_TIMEOUT_S" -- "$PYTHON" "$@"
    else
        run_plain_ranks "$n" "$@"
    fi
}

# run_plain_ranks N SCRIPT ARGS...: N plain processes (no launcher) with
# SLURM_PROCID/SLURM_NTASKS, a fresh FileComm directory in GPUCHECK_HSDIR;
# when one fails the others are stopped (by their ids); all are bounded by
# HOOK_TIMEOUT_S.
run_plain_ranks() {
    local n=$1 r hs pids=() rcs=() left rc=0 p k
    shift
    hs=$(mktemp -d "${TMPDIR:-/tmp}/ddsgpu.XXXXXX") || return 1
    for ((r = 0; r < n; r++)); do
        env -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE -u PMI_RANK -u PMI_SIZE \
            -u PMIX_RANK -u SLURM_JOB_ID -u SLURM_STEP_ID -u RANK -u WORLD_SIZE \
            SLURM_PROCID=$r SLURM_NTASKS=$n SLURM_LOCALID=$r GPUCHECK_HSDIR="$hs" \
            DDSTORE_HANDSHAKE_DIR="$hs" DDSTORE_FABRIC="${DDSTORE_FABRIC:-tcp;ofi_rxm}" \
            FI_TCP_IFACE="${FI_TCP_IFACE:-lo}" \
            timeout "$HOOK_TIMEOUT_S" "$PYTHON" "$@" </dev/null &
        pids+=($!)
        rcs+=("")
    done
    left=$n
    while [ $left -gt 0 ]; do
        for k in "${!pids[@]}"; do
            [ -z "${rcs[$k]}" ] || continue
            p=${pids[$k]}
            kill -0 "$p" 2>/dev/null && continue
            wait "$p"; rcs[$k]=$?
            left=$((left - 1))
            if [ "${rcs[$k]}" != 0 ]; then
                echo "rank $k exited with ${rcs[$k]}; stopping the others"
                [ $rc = 0 ] && rc=${rcs[$k]}
                for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
            fi
        done
        [ $left -gt 0 ] && sleep 0.2
    done
    rm -rf "$hs"
    return $rc
}
