#!/usr/bin/env bash
# GPU check (issue 5, SPEC §6 "no whole-device synchronise before every
# read"): a ThreadDataLoader epoch into GPU memory (2 worker threads, 3136 B
# rows, batches of 128) while the main thread queues matmuls on the current
# stream; prints the step time with and without the loader, the store's
# gpu_sync_ns per batch, torch-level sync calls by thread and CUPTI's count
# of runtime sync calls (sync_profile_check.py; figures also in
# $OUT/gpu-sync-profile.json).  Fails only on a clear violation: a loader
# thread calling torch.cuda.synchronize(), extra cudaDeviceSynchronize calls
# while the loader runs, a read error or wrong data.
# Transport and dry run (DDSTORE_GPU_HOOK_DEVICE=cpu): as
# torch-distdataset-threads.sh.  Exit: 0 pass, 77 skip (reason on the last
# line), else fail.
set -u -o pipefail
. "$(dirname "${BASH_SOURCE[0]}")/store_common.bash"

hook_python_env
pick_transport
run_hook_ranks 2 "$ROOT/ci/gpu-check.d/sync_profile_check.py" \
    || fail "sync_profile_check.py failed ($GPUCHECK_DEVICE, $GPUCHECK_TRANSPORT)"
echo "sync-profile: OK"
