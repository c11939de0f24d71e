#!/usr/bin/env bash
# GPU check (issue 5): read throughput through the store on 2 ranks, 3136 B
# rows in batches of 128 and 1 MiB rows in batches of 8, into a CUDA tensor, a
# pinned host tensor and a pageable host tensor, next to a plain copy_ of the
# same bytes: µs/row and GB/s per rank, printed and written to
# $OUT/gpu-throughput.json (throughput_check.py).  Figures, not assertions:
# fails only when a read errors or the data read is wrong.
# Transport and dry run (DDSTORE_GPU_HOOK_DEVICE=cpu): as
# torch-distdataset-threads.sh.  Exit: 0 pass, 77 skip (reason on the last
# line), else fail.
set -u -o pipefail
. "$(dirname "${BASH_SOURCE[0]}")/store_common.bash"

hook_python_env
pick_transport
run_hook_ranks 2 "$ROOT/ci/gpu-check.d/throughput_check.py" \
    || fail "throughput_check.py failed ($GPUCHECK_DEVICE, $GPUCHECK_TRANSPORT)"
echo "throughput: OK"
