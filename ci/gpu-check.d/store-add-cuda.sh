#!/usr/bin/env bash
# GPU check (issue 5): add() from a CUDA tensor through pyddstore._core on 2
# ranks (method 0, MPI RMA: the shard is registered in place and served
# through a pinned host mirror): readable by every rank into host memory and
# into CUDA tensors, kept alive by the store (the caller's references are
# dropped and the allocator reused before reading), update() from host and
# CUDA memory seen by every rank, released by free().
# Exit: 0 pass, 77 skip (reason on the last line), else fail.
set -u -o pipefail
. "$(dirname "${BASH_SOURCE[0]}")/store_common.bash"

need_torch_cuda
build_pyddstore_cuda
run_ranks 2 "$ROOT/ci/gpu-check.d/store_cuda_check.py" add || fail "store_cuda_check.py add failed"
echo "store-add-cuda: OK"
