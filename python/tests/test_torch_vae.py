"""The VAE example (examples/vae/vae-ddp.py) for one short epoch, in-process
under the same ranks (DDP over gloo, data from a DistDataset).

Run: tools/ddrun -n 4 -- .venv/bin/python -m pytest -q python/tests/test_torch_vae.py
"""
import importlib.util
import math
import os

import pytest

torch = pytest.importorskip("torch")

from _torch_util import assert_all, shared_tmpdir, world  # noqa: E402

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VAE = os.path.join(TOP, "examples", "vae", "vae-ddp.py")
DATA = "/usr/share/datasets/fashion-mnist"


def _load():
    spec = importlib.util.spec_from_file_location("vae_ddp", VAE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("loader,workers", [("thread", 1), ("torch", 0)])
def test_vae_one_short_epoch(loader, workers):
    comm = world()
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        pytest.skip(f"Fashion-MNIST not installed ({DATA}: apt install dataset-fashion-mnist)")
    out = shared_tmpdir(comm, "vae")
    mod = _load()
    res = mod.main(["--epochs", "1", "--limit", "413", "--batch-size", "16",
                    "--max-batches", "4", "--num-workers", str(workers), "--loader", loader,
                    "--out", out, "--model", "conv"])
    h = res["history"]
    ok = len(h) == 1 and math.isfinite(h[0]["loss"]) and h[0]["samples"] == 4 * 16 * comm.Get_size()
    ok = ok and res["samples"] == 413 and res["loader"] == loader
    if comm.Get_rank() == 0:
        ok = ok and os.path.getsize(os.path.join(out, "vae-ddp.png")) > 1000
        ok = ok and res["profile"]["sum"]["rows"] >= 4 * 16 * comm.Get_size()
    assert_all(comm, ok, f"result {res}")
