#!/usr/bin/env bash
# ci/gpu-check.sh - the GPU checks, prepared for a machine with a GPU.
#
# Target: the project's lent GPU machine (NVIDIA H200, 16 cores, CMake and
# ninja, no Bazel, probably no MPI, no network).  Builds ddstore-gpu and its
# tests directly with gcc (C library, CUDA runtime API) and nvcc (the kernel
# check), runs them with DDSTORE_TEST_STRICT=1 (a SKIP is a failure: the
# hardware is there), then runs the store/torch-level GPU checks that other
# components provide as hooks in ci/gpu-check.d/, and lists the ones still
# missing as TODO.  Nothing here fakes a pass.
#
# Usage: ci/gpu-check.sh [options]
#   --backend B      cuda (default), hip or none; repeatable.  The none build
#                    (host emulation of the staging logic) always runs too,
#                    without strict mode.
#   --build-only     compile and link, run nothing
#   --no-kernel      skip the nvcc kernel check (test/ddgpu_kernel_check.cu)
#   --no-hooks       skip ci/gpu-check.d/ and the TODO list
#   --require-all    exit 3 when a TODO hook is missing (default: report it)
#   --build-dir DIR  default build/gpu-check (ignored by git)
#   --kit DIR        install what the machine lacks from DIR (made here by
#                    ci/gpu-kit.sh): a venv BUILD_DIR/kit-venv over PYTHON's
#                    packages with the kit's MPI wheel (mpicc, mpiexec, libmpi,
#                    libfabric.so.1) and mpi4py; everything below then runs
#                    in it (PATH, PYTHON, MPICC, DDRUN_MPI=mpich,
#                    DDRUN_MPIEXEC), the system's MPI and libfabric hidden.
#   --dry-run        no GPU here (CI): DDSTORE_TEST_STRICT=0, the torch-level
#                    hooks on CPU tensors (DDSTORE_GPU_HOOK_DEVICE=cpu) against
#                    the CMake build of the tree; checks needing the device
#                    skip, saying so.  The whole flow otherwise as on the device.
#   --json FILE      the report (default BUILD_DIR/gpu-check.json, copied to
#                    $OUT with the log and summary)
# Environment: CUDA_HOME (default: from nvcc on PATH, else /usr/local/cuda),
#   ROCM_PATH (hip; default /opt/rocm when present, else Debian's /usr),
#   CC (gcc), NVCC, PYTHON (python3), DDSTORE_TEST_STRICT (default 1 for
#   cuda/hip), GPU_CHECK_TIMEOUT_S (per program, default 300),
#   OUT (when set, the log and summary are copied there: the device tool's
#   result folder).
# Exit: 0 all run checks passed, 1 a check failed, 2 bad usage or missing
#   toolchain, 3 --require-all and a hook is missing.
#
# On the lent machine (one command; docs/testing.md "The GPU check"):
#   ci/gpu-check.sh --kit out/gpu-kit          (after ci/gpu-kit.sh here)
# Its dry run here, as CI runs it (stage gpukit of ./ddstore test):
#   ci/gpu-kit.sh && ci/gpu-check.sh --kit out/gpu-kit --dry-run

set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BACKENDS=()
BUILD_ONLY=0
KERNEL=1
HOOKS=1
REQUIRE_ALL=0
BUILD_DIR="$ROOT/build/gpu-check"
KIT=""
DRY=0
JSON=""
T_START=$(date +%s)
while [ $# -gt 0 ]; do
    case "$1" in
    --backend) BACKENDS+=("${2:?--backend needs a value}"); shift 2 ;;
    --build-only) BUILD_ONLY=1; shift ;;
    --no-kernel) KERNEL=0; shift ;;
    --no-hooks) HOOKS=0; shift ;;
    --require-all) REQUIRE_ALL=1; shift ;;
    --build-dir) BUILD_DIR="${2:?}"; shift 2 ;;
    --kit) KIT="${2:?--kit needs a folder}"; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    --json) JSON="${2:?}"; shift 2 ;;
    -h|--help) sed -n '2,46p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown option $1" >&2; exit 2 ;;
    esac
done
[ ${#BACKENDS[@]} -eq 0 ] && BACKENDS=(cuda)
for b in "${BACKENDS[@]}"; do
    case "$b" in cuda|hip|none) ;; *) echo "gpu-check: bad backend $b" >&2; exit 2 ;; esac
done

CC=${CC:-gcc}
PYTHON=${PYTHON:-python3}
TIMEOUT_S=${GPU_CHECK_TIMEOUT_S:-300}
# CUDA_HOME: the environment's, else /usr/local/cuda, else where nvcc on
# PATH says its toolkit is (nvcc may be a wrapper script).
if [ -z "${CUDA_HOME:-}" ]; then
    CUDA_HOME=/usr/local/cuda
    if [ ! -f "$CUDA_HOME/include/cuda_runtime_api.h" ] && command -v nvcc >/dev/null 2>&1; then
        top=$(nvcc --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1)
        [ -n "$top" ] && CUDA_HOME=$(cd "$top/.." 2>/dev/null && pwd)
    fi
fi
NVCC=${NVCC:-$CUDA_HOME/bin/nvcc}
if [ -z "${ROCM_PATH:-}" ]; then
    if [ -d /opt/rocm/include/hip ]; then ROCM_PATH=/opt/rocm; else ROCM_PATH=/usr; fi
fi

mkdir -p "$BUILD_DIR"
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)     # hooks cd elsewhere
# the hooks' marker "this run's build of the tree failed" (it saves the later
# hooks a rebuild): a new run tries again (a build killed by a timeout in an
# earlier run otherwise failed every hook at once)
rm -f "$BUILD_DIR/py-torch-cuda.failed"
LOG="$BUILD_DIR/gpu-check.log"
SUMMARY="$BUILD_DIR/summary.txt"
: >"$LOG"
: >"$SUMMARY"
FAILED=0
MISSING=0

say() { printf '%s\n' "$*" | tee -a "$LOG"; }
record() { # status name [detail]
    printf '%-5s %s%s\n' "$1" "$2" "${3:+  ($3)}" | tee -a "$SUMMARY" >>"$LOG"
    case "$1" in FAIL) FAILED=1 ;; TODO) MISSING=$((MISSING + 1)) ;; esac
}
# run NAME STRICT CMD...: run with a timeout, log everything, record status.
run_step() {
    local name=$1 strict=$2
    shift 2
    say "---- $name"
    local out rc
    out=$(DDSTORE_TEST_STRICT=$strict timeout "$TIMEOUT_S" "$@" 2>&1)
    rc=$?
    printf '%s\n' "$out" | tee -a "$LOG"
    if [ $rc -eq 124 ]; then
        record FAIL "$name" "timed out after ${TIMEOUT_S}s"
    elif [ $rc -ne 0 ]; then
        record FAIL "$name" "exit $rc"
    elif printf '%s\n' "$out" | grep -q '^SKIP'; then
        record SKIP "$name" "$(printf '%s\n' "$out" | grep -m1 '^SKIP' | cut -c1-160)"
    else
        record PASS "$name" "$(printf '%s\n' "$out" | grep -E 'passed, [0-9]+ failed' | tail -1)"
    fi
}
# write_json: the summary as one JSON report (status, each check, machine).
write_json() {
    local f=${JSON:-$BUILD_DIR/gpu-check.json}
    "$PYTHON" - "$SUMMARY" "$f" "$1" "$(( $(date +%s) - T_START ))" "$KIT" "$DRY" "$ROOT" <<'PY' || true
import json, platform, re, subprocess, sys
summary, out, status, secs, kit, dry, root = sys.argv[1:8]
checks = []
for line in open(summary):
    m = re.match(r"(\S+)\s+(.*?)(?:  \((.*)\))?$", line.rstrip("\n"))
    if m:
        checks.append({"status": m.group(1), "name": m.group(2), "detail": m.group(3) or ""})
def cmd(*a):
    try:
        return subprocess.run(a, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception:
        return ""
counts = {}
for c in checks:
    counts[c["status"]] = counts.get(c["status"], 0) + 1
json.dump({"status": status, "counts": counts, "elapsed_s": int(secs), "kit": kit or None,
           "dry_run": dry == "1", "host": platform.node(), "python": sys.version.split()[0],
           "gpus": cmd("nvidia-smi", "-L").splitlines(),
           "commit": cmd("git", "-C", root, "rev-parse", "--short", "HEAD"),
           "checks": checks}, open(out, "w"), indent=1)
print("gpu-check: report", out)
PY
    JSON_WRITTEN=${JSON:-$BUILD_DIR/gpu-check.json}
}
finish() {
    local st=OK
    [ $MISSING -gt 0 ] && st=INCOMPLETE
    [ $FAILED -ne 0 ] && st=FAILED
    write_json "$st"
    say "==== summary"
    cat "$SUMMARY" | tee -a "$LOG" >/dev/null
    cat "$SUMMARY"
    if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
        cp "$LOG" "$SUMMARY" "$JSON_WRITTEN" "$OUT"/ 2>/dev/null || true
        for f in "$BUILD_DIR"/*.log; do   # the builds' logs too (at most 8 files come back)
            case "$f" in *gpu-check.log) ;; *) [ -f "$f" ] && cp "$f" "$OUT"/ 2>/dev/null ;; esac
        done
    fi
    if [ $FAILED -ne 0 ]; then
        say "gpu-check: FAILED"
        exit 1
    fi
    if [ $MISSING -gt 0 ]; then
        say "gpu-check: the ddstore-gpu checks passed; INCOMPLETE: $MISSING store/torch-level GPU check(s) are still TODO"
        [ $REQUIRE_ALL -eq 1 ] && exit 3
        exit 0
    fi
    say "gpu-check: OK"
    exit 0
}

# ---- kit: what the lent machine lacks, installed into a venv --------------
if [ $DRY -eq 1 ]; then
    export DDSTORE_TEST_STRICT=${DDSTORE_TEST_STRICT:-0} DDSTORE_GPU_HOOK_DEVICE=cpu
fi
if [ -n "$KIT" ]; then
    KIT=$(cd "$KIT" 2>/dev/null && pwd) || { echo "gpu-check: --kit: no folder $KIT" >&2; exit 2; }
    ls "$KIT"/wheels/mpich-*.whl >/dev/null 2>&1 || { echo "gpu-check: --kit $KIT: no mpich wheel (run ci/gpu-kit.sh)" >&2; exit 2; }
    KV="$BUILD_DIR/kit-venv"
    say "==== kit $KIT -> $KV"
    rm -rf "$KV"
    if ! "$PYTHON" -m venv --system-site-packages "$KV" >>"$LOG" 2>&1; then
        record FAIL "kit: venv" "$PYTHON -m venv failed"; finish
    fi
    # $PYTHON may itself be a venv (the lent machine's /opt/torch/.venv): its
    # site-packages (torch, ...) are not the "system" ones; add every
    # site-packages folder it sees
    "$PYTHON" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))))' \
        >"$("$KV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz_gpucheck_parent.pth"
    if "$KV/bin/python" -m pip install -q --no-index --find-links "$KIT/wheels" --force-reinstall \
            mpich mpi4py >>"$LOG" 2>&1 && [ -x "$KV/bin/mpicc" ] && [ -x "$KV/bin/mpiexec" ]; then
        record PASS "kit: mpich + mpi4py into $KV"
    else
        record FAIL "kit: mpich + mpi4py into $KV" "see $LOG"; finish
    fi
    mkdir -p "$BUILD_DIR/no-pkgconfig"
    export PATH="$KV/bin:$PATH" PYTHON="$KV/bin/python" MPICC="$KV/bin/mpicc" \
        DDRUN_MPI=mpich DDRUN_MPIEXEC="$KV/bin/mpiexec" MPIR_CVAR_ASYNC_PROGRESS=1 \
        UCX_LOG_LEVEL=${UCX_LOG_LEVEL:-error} MPI4PY_LIBMPI="$(ls "$KV"/lib/libmpi.so.* | head -1)" \
        PKG_CONFIG_LIBDIR="$BUILD_DIR/no-pkgconfig" PKG_CONFIG_PATH="" GPUCHECK_KIT_VENV="$KV"
    unset DDSTORE_MPI_IMPL LIBFABRIC_ROOT DDSTORE_LIBFABRIC_LIB
fi

# ---- 0. what this machine has --------------------------------------------
say "==== environment"
{
    echo "host: $(uname -srm), $(nproc) cores"
    command -v nvidia-smi >/dev/null && nvidia-smi -L && \
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    [ -x "$NVCC" ] && "$NVCC" --version | tail -2 || echo "nvcc: not found at $NVCC"
    echo "CUDA_HOME=$CUDA_HOME ROCM_PATH=$ROCM_PATH"
    "$CC" --version | head -1
    for t in cmake ninja mpirun fi_info bazel; do
        printf '%s: %s\n' "$t" "$(command -v $t || echo none)"
    done
    "$PYTHON" - <<'EOF' 2>&1 || true
import sys
print("python", sys.version.split()[0])
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda,
          "available", torch.cuda.is_available(),
          "devices", torch.cuda.device_count())
except Exception as e:
    print("torch: not importable:", e)
EOF
} 2>&1 | tee -a "$LOG"

# ---- 1. build ------------------------------------------------------------
VERSION=$(tr -d ' \t\r\n' <"$ROOT/ddstore-gpu/VERSION")
# DDSTORE_TEST_HOOKS: the none build's host emulation (a test build).
CFLAGS_COMMON=(-std=c11 -D_GNU_SOURCE -DDDSTORE_TEST_HOOKS -Wall -Wextra -Wno-unused-parameter -O2 -g -pthread
    -I"$ROOT/ddstore-gpu/include" -I"$ROOT/ddstore-core/include")
CORE_LIB="$BUILD_DIR/libddstore_core.a"

build_core() {
    local objs=() f o
    mkdir -p "$BUILD_DIR/core"
    for f in "$ROOT"/ddstore-core/src/*.c; do
        o="$BUILD_DIR/core/$(basename "${f%.c}").o"
        "$CC" "${CFLAGS_COMMON[@]}" -I"$ROOT/ddstore-core/src" -c "$f" -o "$o" || return 1
        objs+=("$o")
    done
    rm -f "$CORE_LIB" && ar rcs "$CORE_LIB" "${objs[@]}"
}

# backend_flags B -> BFLAGS (compile), BLIBS (link), BSRC (the backend's
# source: ddgpu_none, or ddgpu_rt for cuda and hip)
backend_flags() {
    case "$1" in
    none) BFLAGS=(); BLIBS=(); BSRC=ddgpu_none ;;
    cuda) BFLAGS=(-DDDSTORE_WITH_CUDA -I"$CUDA_HOME/include"); BSRC=ddgpu_rt
          BLIBS=(-L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" -lcudart) ;;
    hip)  BFLAGS=(-DDDSTORE_WITH_HIP -D__HIP_PLATFORM_AMD__); BSRC=ddgpu_rt
          [ "$ROCM_PATH" != /usr ] && BFLAGS+=(-I"$ROCM_PATH/include")
          BLIBS=(-lamdhip64)
          [ "$ROCM_PATH" != /usr ] && BLIBS=(-L"$ROCM_PATH/lib" -Wl,-rpath,"$ROCM_PATH/lib" -lamdhip64) ;;
    esac
}

# build_backend B: libddgpu_B.a + one binary per test/*_test.c
build_backend() {
    local b=$1 d="$BUILD_DIR/$1" f o t
    backend_flags "$b"
    mkdir -p "$d"
    # the API files (every src/*.c but the backends) and the backend
    local api="ddgpu_common ddgpu_stream ddgpu_copy ddgpu_staging ddgpu_memsys"
    for f in $api "$BSRC"; do
        "$CC" "${CFLAGS_COMMON[@]}" "${BFLAGS[@]}" -DDDGPU_VERSION="\"$VERSION\"" \
            -c "$ROOT/ddstore-gpu/src/$f.c" -o "$d/$f.o" || return 1
    done
    rm -f "$d/libddgpu.a" && ar rcs "$d/libddgpu.a" $(for f in $api; do echo "$d/$f.o"; done) "$d/$BSRC.o" || return 1
    for t in "$ROOT"/ddstore-gpu/test/*_test.c; do
        o="$d/$(basename "${t%.c}")"
        "$CC" "${CFLAGS_COMMON[@]}" -I"$ROOT/ddstore-gpu/src" -I"$ROOT/ddstore-core/test" \
            -DDDGPU_VERSION="\"$VERSION\"" "$t" "$d/libddgpu.a" "$CORE_LIB" \
            "${BLIBS[@]}" -o "$o" || return 1
    done
}

say "==== build (ddstore-gpu $VERSION)"
if build_core >>"$LOG" 2>&1; then
    record PASS "build ddstore-core (errors, log)"
else
    record FAIL "build ddstore-core (errors, log)" "see $LOG"
    finish
fi
ALL_BACKENDS=(none)
for b in "${BACKENDS[@]}"; do [ "$b" != none ] && ALL_BACKENDS+=("$b"); done
for b in "${ALL_BACKENDS[@]}"; do
    if [ "$b" = cuda ] && [ ! -f "$CUDA_HOME/include/cuda_runtime_api.h" ]; then
        record FAIL "build ddstore-gpu ($b)" "no CUDA headers under $CUDA_HOME (set CUDA_HOME)"
        continue
    fi
    if build_backend "$b" >>"$LOG" 2>&1; then
        record PASS "build ddstore-gpu ($b) + tests"
    else
        record FAIL "build ddstore-gpu ($b) + tests" "see $LOG"
    fi
done
KBIN="$BUILD_DIR/cuda/ddgpu_kernel_check"
if [ $KERNEL -eq 1 ] && [[ " ${BACKENDS[*]} " == *" cuda "* ]] && [ -f "$BUILD_DIR/cuda/libddgpu.a" ]; then
    if [ -x "$NVCC" ]; then
        # -arch=native needs a visible GPU at build time; else Hopper (H200).
        nvcc_kernel() {
            "$NVCC" -std=c++17 -O2 "$1" -cudart shared -I"$ROOT/ddstore-gpu/include" \
                -I"$ROOT/ddstore-core/include" "$ROOT/ddstore-gpu/test/ddgpu_kernel_check.cu" \
                "$BUILD_DIR/cuda/libddgpu.a" "$CORE_LIB" -Xlinker -rpath -Xlinker "$CUDA_HOME/lib64" \
                -lpthread -o "$KBIN" >>"$LOG" 2>&1
        }
        ARCH=-arch=sm_90
        if nvidia-smi -L >/dev/null 2>&1 && nvcc_kernel -arch=native; then
            ARCH=-arch=native
        fi
        if [ "$ARCH" = -arch=native ] || nvcc_kernel "$ARCH"; then
            record PASS "build kernel check (nvcc $ARCH)"
        else
            record FAIL "build kernel check (nvcc $ARCH)" "see $LOG"
        fi
    else
        record FAIL "build kernel check" "nvcc not found at $NVCC"
    fi
fi
[ $BUILD_ONLY -eq 1 ] && finish

# ---- 2. ddstore-gpu tests ------------------------------------------------
STRICT=${DDSTORE_TEST_STRICT:-1}
say "==== ddstore-gpu tests (strict=$STRICT for cuda/hip)"
for b in "${ALL_BACKENDS[@]}"; do
    s=$STRICT
    [ "$b" = none ] && s=0    # the none build has no GPU by definition
    for t in "$BUILD_DIR/$b"/*_test; do
        [ -x "$t" ] || continue
        run_step "ddstore-gpu $b: $(basename "$t")" "$s" "$t"
    done
done
if [ -x "$KBIN" ] && [ $KERNEL -eq 1 ]; then
    say "---- kernel check"
    out=$(timeout "$TIMEOUT_S" "$KBIN" 2>&1); rc=$?
    printf '%s\n' "$out" | tee -a "$LOG"
    if [ $rc -eq 0 ]; then
        record PASS "ddstore-gpu cuda: kernel check" "$(printf '%s\n' "$out" | tail -1)"
    elif [ $rc -eq 2 ] && [ "$STRICT" = 0 ]; then
        record SKIP "ddstore-gpu cuda: kernel check" "no GPU"
    else
        record FAIL "ddstore-gpu cuda: kernel check" "exit $rc"
    fi
fi

# ---- 3. store / torch level (hooks other components provide) --------------
# Each hook is ci/gpu-check.d/<name>.sh, run from the repository root with
# DDSTORE_ROOT, DDSTORE_GPU_CHECK_BUILD (this build dir, holding
# libddstore_core.a and cuda/libddgpu.a), PYTHON, CUDA_HOME and
# DDSTORE_TEST_STRICT exported; exit 0 = pass, 77 = skip (with the reason
# printed), anything else = fail.  Keep each under GPU_CHECK_TIMEOUT_S.
# The list is issue 5's GPU checks; a missing hook is reported as TODO.
HOOK_LIST=(
    "store-add-cuda|add() from a CUDA tensor: the shard registered in place, kept alive, readable by every rank"
    "store-get-cuda|get()/get_batch() into CUDA tensors, poisoned first, checked on the CPU and by a kernel"
    "store-staging-off|DDSTORE_GPU_STAGING=0: a remote read into GPU memory without FI_HMEM is refused naming the setting; the store stays usable"
    "store-method1-cuda|method 1 (libfabric) into CUDA tensors: GPUDirect where the provider offers FI_HMEM, else staged; which one is printed"
    "torch-distdataset-threads|DistDataset(device=, add_device=) + ThreadDataLoader, several epochs, 2 worker threads, every batch checked"
    "sync-profile|no stream-wide stalls: the profile's gpu_sync_ns during a loader epoch, next to the step time"
    "throughput|3 KB and 1 MiB rows into GPU memory vs host memory through the store (figures, not assertions)"
    "pip-build|pip install . (PEP 517) on this machine finds CUDA and builds the same modules; smoke tests against the wheel"
)
if [ $HOOKS -eq 1 ]; then
    say "==== store/torch-level GPU checks (ci/gpu-check.d)"
    export DDSTORE_ROOT="$ROOT" DDSTORE_GPU_CHECK_BUILD="$BUILD_DIR" PYTHON CUDA_HOME
    for entry in "${HOOK_LIST[@]}"; do
        name=${entry%%|*}
        what=${entry#*|}
        hook="$ROOT/ci/gpu-check.d/$name.sh"
        if [ -f "$hook" ]; then
            say "---- hook $name: $what"
            out=$(cd "$ROOT" && DDSTORE_TEST_STRICT=$STRICT timeout "$TIMEOUT_S" bash "$hook" 2>&1); rc=$?
            printf '%s\n' "$out" | tee -a "$LOG"
            case $rc in
            0) record PASS "hook $name" ;;
            77) if [ "$STRICT" = 0 ]; then record SKIP "hook $name" "$(printf '%s\n' "$out" | tail -1 | cut -c1-160)"
                else record FAIL "hook $name" "skipped with DDSTORE_TEST_STRICT=1: $(printf '%s\n' "$out" | tail -1 | cut -c1-120)"; fi ;;
            124) record FAIL "hook $name" "timed out after ${TIMEOUT_S}s" ;;
            *) record FAIL "hook $name" "exit $rc" ;;
            esac
        else
            # TODO(ddstore-core/ddstore-torch/python/build owners): add
            # ci/gpu-check.d/$name.sh.  Not run, not passed.
            record TODO "hook $name" "not written yet: $what"
        fi
    done
    # Hooks outside the list run too (after the list).
    for hook in "$ROOT"/ci/gpu-check.d/*.sh; do
        [ -f "$hook" ] || continue
        name=$(basename "${hook%.sh}")
        case " ${HOOK_LIST[*]%%|*} " in *" $name "*) continue ;; esac
        say "---- hook $name"
        out=$(cd "$ROOT" && DDSTORE_TEST_STRICT=$STRICT timeout "$TIMEOUT_S" bash "$hook" 2>&1); rc=$?
        printf '%s\n' "$out" | tee -a "$LOG"
        case $rc in 0) record PASS "hook $name" ;; 77) record SKIP "hook $name" ;; *) record FAIL "hook $name" "exit $rc" ;; esac
    done
fi
finish
