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

# pyddstore (the tree's Python package) with _core built by tools/dev-build.sh
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
                OUT="$pkg/pyddstore/_core$ext" "$ROOT/tools/dev-build.sh" >"$BUILD/py-cuda.log" 2>&1; then
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
