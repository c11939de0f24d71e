#!/usr/bin/env bash
# GPU check (issue 15): method 1 (libfabric) reads into CUDA tensors on 2
# ranks: GPUDirect (fi_read into device memory) where the provider offers
# FI_HMEM, else the staged path; every batch checked on the CPU and by a
# kernel; prints which path the profile shows.
# Exit: 0 pass, 77 skip (reason on the last line), else fail.
set -u -o pipefail
. "$(dirname "${BASH_SOURCE[0]}")/store_common.bash"

need_torch_cuda
build_pyddstore_torch_cuda   # CMake: MPI and libfabric (the kit's)
"$PYTHON" -c 'import pyddstore, sys; sys.exit(0 if pyddstore.HAVE_OFI else 3)' \
    || skip "this pyddstore has no libfabric (method 1)"
run_ranks 2 "$ROOT/ci/gpu-check.d/store_cuda_check.py" method1 || fail "store_cuda_check.py method1 failed"
echo "store-method1-cuda: OK"
