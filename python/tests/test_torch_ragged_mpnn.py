"""The message-passing example (examples/mpnn/train.py), shortened: two
epochs of budget batches over ragged graphs, under the same ranks.

Run: tools/ddrun -n 4 -- .venv/bin/python ci/pytest_rank.py -q python/tests/test_torch_ragged_mpnn.py
"""
import importlib.util
import math
import os

import pytest

torch = pytest.importorskip("torch")

import pyddstore as _pyddstore  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(_pyddstore.PyDDStore, "add_ragged"),
                                reason="SKIP: this pyddstore has no ragged variables "
                                       "(PyDDStore.add_ragged)")

from _torch_util import assert_all, shared_tmpdir, world  # noqa: E402

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPNN = os.path.join(TOP, "examples", "mpnn", "train.py")


def _load():
    spec = importlib.util.spec_from_file_location("mpnn_train", MPNN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_mpnn_two_short_epochs():
    comm = world()
    out = shared_tmpdir(comm, "mpnn")
    mod = _load()
    res = mod.main(["--samples", "120", "--epochs", "2", "--budget", "600", "--features", "4",
                    "--hidden", "8", "--layers", "2", "--num-workers", "1", "--out", out])
    h = res["history"]
    ok = len(h) == 2 and all(math.isfinite(e["loss"]) for e in h)
    # every graph once per epoch (budget batching drops nothing when no rank repeats)
    ok = ok and all(e["graphs"] >= 120 for e in h)
    steps = comm.allgather([e["steps"] for e in h])
    ok = ok and all(s == steps[0] for s in steps)
    ok = ok and all(e["epoch_s"] >= e["wait_s"] + e["compute_s"] - 1e-6 for e in h)
    sizes = [mod.nodes_of(i) for i in range(120)]
    ok = ok and min(sizes) >= 5 and max(sizes) <= 500 and all(e["nodes"] >= sum(sizes) for e in h)
    if comm.Get_rank() == 0:
        with open(os.path.join(out, "mpnn.png"), "rb") as f:
            ok = ok and f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert_all(comm, ok, f"result {res}")
