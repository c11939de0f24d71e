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
    # the loader's epoch report (gathered) instead of the example's own timers
    rep = h[0]["report"] if h else {}
    ok = ok and rep.get("ranks") == comm.Get_size() and rep.get("batches", 0) >= 4
    ok = ok and h[0]["epoch_s"] >= h[0]["wait_s"] + h[0]["compute_s"] - 1e-6
    if comm.Get_rank() == 0:
        ok = ok and os.path.getsize(os.path.join(out, "vae-ddp.png")) > 1000
        with open(os.path.join(out, "vae-ddp-timeline.png"), "rb") as f:
            ok = ok and f.read(8) == b"\x89PNG\r\n\x1a\n"
        ok = ok and res["profile"]["sum"]["rows"] >= 4 * 16 * comm.Get_size()
    assert_all(comm, ok, f"result {res}")


def test_vae_split_jobs(tmp_path):
    """The method-2 split: vae_core_server.py (2 ranks) and
    vae_extra_train.py (2 ranks) as two separate launches sharing only the
    handshake directory; the extra job trains one short epoch on what the
    core job published and tells it to stop.  Launches jobs of its own: run
    in the 1-rank stage only."""
    import json
    import subprocess
    import sys
    comm = world()
    if comm.Get_size() != 1:
        assert_all(comm, True)
        pytest.skip("launches two jobs of its own: 1-rank stage only")
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        pytest.skip(f"Fashion-MNIST not installed ({DATA}: apt install dataset-fashion-mnist)")
    import pyddstore
    try:
        pyddstore.PyDDStore(None, method=2, handshake_dir=str(tmp_path), n_core=1).free()
    except pyddstore.DDStoreError as e:
        pytest.skip(f"method 2 not available in this build: {e}")
    hs, out = str(tmp_path / "hs"), str(tmp_path / "out")
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith(("OMPI_", "PMIX_", "PMI_", "HYDRA_", "SLURM_"))
                   and k not in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"))}
    ddrun = os.path.join(TOP, "tools", "ddrun")
    common = ["--limit", "413", "--batch-size", "16", "--max-batches", "4",
              "--handshake-dir", hs, "--no-plot"]
    vae = os.path.join(TOP, "examples", "vae")
    core = subprocess.Popen([ddrun, "-n", "2", "--timeout", "400", "--", sys.executable,
                             os.path.join(vae, "vae_core_server.py"), "--serve-timeout", "300"]
                            + common, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        extra = subprocess.run([ddrun, "-n", "2", "--timeout", "400", "--", sys.executable,
                                os.path.join(vae, "vae_extra_train.py"), "--epochs", "1",
                                "--num-workers", "1", "--out", out] + common,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=420)
        core_out, _ = core.communicate(timeout=120)
    finally:
        if core.poll() is None:
            core.kill()
            core.wait()
    assert extra.returncode == 0, extra.stdout
    assert core.returncode == 0, core_out
    assert "extra: 2 ranks joined" in extra.stdout and "from 2 core ranks" in extra.stdout
    assert "core: done" in core_out, core_out
    with open(os.path.join(out, "vae-extra.json")) as f:
        res = json.load(f)
    h = res["history"]
    assert len(h) == 1 and math.isfinite(h[0]["loss"]) and h[0]["samples"] == 4 * 16 * 2
    assert res["profile"]["sum"]["rows"] >= 4 * 16 * 2
    # the core job removed its records when it freed the dataset
    assert not [f for f in os.listdir(hs) if f.endswith(".ddshs")]
