#!/usr/bin/env bash
# Run the torch-layer tests at the given rank counts (default 1 2 4).
set -euo pipefail
TOP="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$TOP"
PY="${DDSTORE_PYTHON:-$TOP/.venv/bin/python}"
[ -f python/pyddstore/_ddstore_torch*.so ] 2>/dev/null || ci/dev-build-torch.sh
rc=0
for n in "${@:-1 2 4}"; do
    for k in $n; do
        echo "== $k rank(s)"
        tools/ddrun -n "$k" --timeout 900 -- "$PY" ci/pytest_rank.py -q -p no:cacheprovider \
            python/tests/test_torch_ext.py python/tests/test_torch_dataset.py \
            python/tests/test_torch_loader.py python/tests/test_torch_windowed.py \
            python/tests/test_torch_vae.py || rc=1
    done
done
exit $rc
