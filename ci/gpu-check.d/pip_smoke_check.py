#!/usr/bin/env python3
"""Smoke test of pyddstore as `pip install .` left it (run by pip-build.sh).

    GPUCHECK_EXPECT_PREFIX=<venv> GPUCHECK_EXPECT_BACKEND=cuda \
        tools/ddrun -n 2 <venv>/bin/python ci/gpu-check.d/pip_smoke_check.py

Run from a directory outside the tree.  Checks: pyddstore, _core and the
torch extension come from the installed package under GPUCHECK_EXPECT_PREFIX
(not the source tree); _core.GPU_BACKEND is GPUCHECK_EXPECT_BACKEND; a store
with a host shard and a device shard (a CUDA tensor registered in place)
read by every rank into a CUDA tensor destination (poisoned first) and into
host memory; one ThreadDataLoader epoch of a small DistDataset with
device="cuda".  GPUCHECK_DEVICE=cpu: the same with CPU tensors (dry run).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402  (before MPI starts)

import pyddstore  # noqa: E402
from gpucheck_common import Ctx, done  # noqa: E402
from pyddstore import _core  # noqa: E402


def under(path, root):
    path, root = os.path.realpath(path), os.path.realpath(root)
    return path.startswith(root + os.sep)


def main():
    ctx = Ctx("dds-pip")
    ctx.header("pip-build smoke")
    prefix = os.environ.get("GPUCHECK_EXPECT_PREFIX", "")
    tree = os.environ.get("DDSTORE_ROOT", "")
    import pyddstore.torch
    from pyddstore import _ddstore_torch
    from pyddstore.torch._ext import ext, stream_of
    for mod in (pyddstore, _core, _ddstore_torch, pyddstore.torch):
        f = mod.__file__
        if prefix:
            assert under(f, prefix), f"{mod.__name__} from {f}, not from the venv {prefix}"
        if tree:
            assert not under(f, os.path.join(tree, "python")), \
                f"{mod.__name__} from the source tree ({f}), not the installed wheel"
    want = os.environ.get("GPUCHECK_EXPECT_BACKEND", "cuda")
    assert _core.GPU_BACKEND == want, f"GPU_BACKEND {_core.GPU_BACKEND!r}, expected {want!r}"
    if ctx.is_cuda:
        gi = _core._gpu_info()
        assert gi["available"], gi
    ctx.say(f"installed: {pyddstore.__file__}; GPU backend {_core.GPU_BACKEND}")

    # a store: a host shard and a device shard, read by every rank
    kw = {"exchange_ns": ctx.comm.ns} if ctx.transport == "file" else {}
    s = pyddstore.PyDDStore(ctx.store_comm, method=ctx.method, **kw)
    rows, disp = 20 + ctx.rank, 9
    off = [sum(20 + r for r in range(k)) for k in range(ctx.size + 1)]
    total = off[-1]

    def ref(g):
        g = torch.as_tensor(g, dtype=torch.int64)
        return g[:, None] * 100 + torch.arange(disp, dtype=torch.int64)[None, :]

    mine = ref(range(off[ctx.rank], off[ctx.rank] + rows))
    s.add("host", mine.numpy())
    dshard = mine.to(ctx.device)
    ext.add_tensor(s, "dev", dshard, stream_of(ctx.device) if ctx.is_cuda else 0)
    want_mem = "cuda" if ctx.is_cuda else "host"
    assert s.info_full("dev")["mem"] == want_mem, s.info_full("dev")
    del dshard   # the store keeps it alive
    idx = torch.from_numpy(np.random.default_rng(ctx.rank).integers(0, total, 50))
    for var in ("host", "dev"):
        out = torch.full((50, disp), -7, dtype=torch.int64, device=ctx.device)
        ext.get_batch(s, var, out, idx, stream_of(ctx.device) if ctx.is_cuda else 0)
        assert torch.equal(out.cpu(), ref(idx)), f"{var} -> {ctx.device}"
        host = torch.full((50, disp), -7, dtype=torch.int64)
        ext.get_batch(s, var, host, idx, 0)
        assert torch.equal(host, ref(idx)), f"{var} -> host"
    ctx.barrier()
    s.free()
    ctx.say(f"store: host and {want_mem} shards read into {ctx.device} and host tensors")

    # DistDataset + ThreadDataLoader, one epoch
    from pyddstore.torch import DistDataset, ThreadDataLoader

    class Src(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            return torch.full((5,), float(i)), i

    dev = str(ctx.device) if ctx.is_cuda else "cpu"
    ds = DistDataset(Src(), "pipsmoke", ctx.comm, device=dev, method=ctx.method)
    loader = ThreadDataLoader(ds, batch_size=16, shuffle=True, num_workers=2,
                              generator=torch.Generator().manual_seed(3))
    seen = []
    for x, i in loader:
        assert x.device == ctx.device, x.device
        assert torch.equal(x, i.to(x.device, torch.float32)[:, None].expand(-1, 5)), (x, i)
        seen += i.tolist()
    assert sorted(seen) == list(range(64)), seen
    loader.close()
    ctx.barrier()
    ds.free()
    ctx.say("DistDataset + ThreadDataLoader: one epoch checked")
    done(ctx, "pip-build smoke")


if __name__ == "__main__":
    main()
