#!/usr/bin/env bash
# GPU check (issue 5): DistDataset(device="cuda", add_device="cuda") +
# ThreadDataLoader(num_workers=2) on 2 ranks: shards in GPU memory, reads into
# GPU memory, 3 epochs of DistributedSampler batches (direct collate) and one
# with DDSTORE_FAST_COLLATE=0 and a seeded generator, every batch checked on
# the device against values computed from the sample indices
# (torch_dataset_check.py).
# Transport: MPI (method 0, tools/ddrun) when mpirun, mpi4py and an MPI build
# are there, else libfabric (method 1, FileComm, plain processes), else skip.
# Dry run without a GPU: DDSTORE_GPU_HOOK_DEVICE=cpu (the tree's build, CPU
# tensors).  Exit: 0 pass, 77 skip (reason on the last line), else fail.
set -u -o pipefail
. "$(dirname "${BASH_SOURCE[0]}")/store_common.bash"

hook_python_env
pick_transport
run_hook_ranks 2 "$ROOT/ci/gpu-check.d/torch_dataset_check.py" \
    || fail "torch_dataset_check.py failed ($GPUCHECK_DEVICE, $GPUCHECK_TRANSPORT)"
echo "torch-distdataset-threads: OK"
