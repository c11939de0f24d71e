#!/usr/bin/env bash
# GPU check (issue 5): get()/get_batch() into CUDA memory through the store.
#   1. ddstore-core/test/store_gpu_test.c with ddstore-gpu's CUDA backend on
#      the real device (no torch, no MPI needed): staged reads into device
#      memory, stream order, GPU shards, errors.
#   2. pyddstore._core (CUDA backend, MPI) on 2 ranks with torch: get,
#      get_batch (shuffled, repeats), register_recv into CUDA tensors
#      poisoned first, for every dtype; checked on the CPU and by a kernel
#      queued right after the read on the same stream (no host sync between
#      them); the profile shows the staged bytes and the GPU time.
# Exit: 0 pass, 77 skip (reason on the last line), else fail.
set -u -o pipefail
. "$(dirname "${BASH_SOURCE[0]}")/store_common.bash"

echo "== store_gpu_test (C, CUDA backend, real device)"
run_store_gpu_test_cuda || fail "store_gpu_test (CUDA backend) failed"

echo "== pyddstore get/get_batch into CUDA tensors (torch, 2 ranks)"
need_torch_cuda
build_pyddstore_cuda
run_ranks 2 "$ROOT/ci/gpu-check.d/store_cuda_check.py" get || fail "store_cuda_check.py get failed"
echo "store-get-cuda: OK"
