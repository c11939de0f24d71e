#!/usr/bin/env bash
# GPU check (issue 15): DDSTORE_GPU_STAGING=0 gives the clear error.  Over
# method 0 (MPI RMA: no FI_HMEM) a read of another rank's rows into a CUDA
# tensor with staging turned off must fail with an error naming
# DDSTORE_GPU_STAGING; host reads and the store stay usable.
# Exit: 0 pass, 77 skip (reason on the last line), else fail.
set -u -o pipefail
. "$(dirname "${BASH_SOURCE[0]}")/store_common.bash"

need_torch_cuda
build_pyddstore_cuda
DDSTORE_GPU_STAGING=0 run_ranks 2 "$ROOT/ci/gpu-check.d/store_cuda_check.py" staging-off \
    || fail "store_cuda_check.py staging-off failed"
echo "store-staging-off: OK"
