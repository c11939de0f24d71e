#!/usr/bin/env python3
"""DistDataset(device=, add_device=) + ThreadDataLoader on the GPU, every batch checked.

    GPUCHECK_DEVICE=cuda tools/ddrun -n 2 python ci/gpu-check.d/torch_dataset_check.py
    GPUCHECK_DEVICE=cpu  ...                  (dry run: the same logic, CPU tensors)

Used by ci/gpu-check.d/torch-distdataset-threads.sh.  A deterministic source
of N samples ``(x, y, i)``: x a float32 tensor (F,) = i/2 + j/4, y an int64
0-d tensor = i * 2**33 - 5 i + 3, i the index itself (a Python int).  The
DistDataset keeps the tensor fields' shards in GPU memory (add_device) and
reads into GPU memory (device); the index field stays on the host.

  1. the shards: tensor fields registered as cuda memory, the int field host;
  2. three epochs of ThreadDataLoader(batch_size=B, sampler=DistributedSampler
     (shuffle, seed, set_epoch), num_workers=2): the batches come in the
     sampler's order; each batch's tensor fields are on the device with the
     right dtype/shape, the index field is a CPU int64 tensor, and the values
     equal the reference computed on the device from the indices (torch.equal
     queued on the consumer's stream, right after the loader's read);
  3. one epoch with DDSTORE_FAST_COLLATE=0 (per-sample reads + default_collate)
     and shuffle=True with a seeded generator: the batches are exactly those
     of a plain DataLoader with the same generator seed;
  4. every rank sees samples of the other ranks' shards; the epochs of all
     ranks cover the dataset; the read profile is printed.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402  (before MPI starts)
from torch.utils.data import DataLoader  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

from gpucheck_common import Ctx, done  # noqa: E402
from pyddstore.torch import DistDataset, ThreadDataLoader  # noqa: E402

N = 1000        # samples
F = 24          # float32 features per sample
BATCH = 32
EPOCHS = 3
SEED = 1234


class Source(torch.utils.data.Dataset):
    """Deterministic samples; every value is exact in its dtype."""

    def __len__(self):
        return N

    def __getitem__(self, i):
        x = i * 0.5 + torch.arange(F, dtype=torch.float32) * 0.25
        y = torch.tensor(i * (1 << 33) - 5 * i + 3, dtype=torch.int64)
        return x, y, i


def expected(ctx, idx):
    dev = ctx.device
    i = ctx.to_device(idx)
    x = i.to(torch.float32)[:, None] * 0.5 + \
        torch.arange(F, dtype=torch.float32, device=dev)[None, :] * 0.25
    y = i * (1 << 33) - 5 * i + 3
    return x, y


def check_batch(ctx, batch, what):
    """The batch's fields: placement, dtype, shape, values.  Returns the indices."""
    assert isinstance(batch, (list, tuple)) and len(batch) == 3, (what, type(batch))
    x, y, idx = batch
    n = idx.shape[0]
    assert idx.device.type == "cpu" and idx.dtype == torch.int64 and idx.shape == (n,), \
        (what, "index field", idx.device, idx.dtype, idx.shape)
    assert x.device == ctx.device, (what, "x on", x.device, "expected", ctx.device)
    assert y.device == ctx.device, (what, "y on", y.device, "expected", ctx.device)
    assert x.dtype == torch.float32 and x.shape == (n, F), (what, x.dtype, x.shape)
    assert y.dtype == torch.int64 and y.shape == (n,), (what, y.dtype, y.shape)
    # the reference is built on the device and compared there, queued on the
    # consumer's (current) stream right after the loader's read: no host sync
    # in between, so it only matches if the read was ordered on that stream
    wx, wy = expected(ctx, idx)
    okx = torch.equal(x, wx)
    oky = torch.equal(y, wy)
    if not (okx and oky):
        bad = (x != wx).any(dim=1) | (y != wy)
        k = int(bad.nonzero()[0, 0])
        raise AssertionError(f"{what}: sample {int(idx[k])} (batch row {k}) wrong: "
                             f"x[:4] {x[k, :4].tolist()} want {wx[k, :4].tolist()}, "
                             f"y {int(y[k])} want {int(wy[k])}")
    return idx


def run_epoch(ctx, loader, want_batches, what):
    """Iterate one epoch; check every batch and the order."""
    t0 = time.perf_counter()
    got = []
    nb = 0
    for b, batch in enumerate(loader):
        idx = check_batch(ctx, batch, f"{what} batch {b}")
        if b < len(want_batches):
            want = want_batches[b]
            assert torch.equal(idx, want), (f"{what} batch {b}: indices {idx[:8].tolist()}... "
                                            f"expected {want[:8].tolist()}...")
        got.append(idx)
        nb += 1
    ctx.sync()
    dt = time.perf_counter() - t0
    assert nb == len(want_batches), f"{what}: {nb} batches, expected {len(want_batches)}"
    return torch.cat(got) if got else torch.empty(0, dtype=torch.int64), nb, dt


def main():
    ctx = Ctx("dds-threads")
    ctx.header("torch-distdataset-threads")
    dev = str(ctx.device) if ctx.is_cuda else "cpu"
    ds = DistDataset(Source(), "gcdt", ctx.comm, device=dev, add_device=dev,
                     method=ctx.method)
    assert len(ds) == N
    lo, hi = ds.lo, ds.hi

    # 1. where the shards live
    mem = [ds.ddstore.info_full(f.var)["mem"] for f in ds.schema.fields]
    want_mem = ["cuda" if ctx.is_cuda else "host"] * 2 + ["host"]
    assert mem == want_mem, f"shard memory {mem}, expected {want_mem}"
    ctx.say(f"shard rows [{lo}, {hi}) of {N}; fields {[f.kind for f in ds.schema.fields]} "
            f"stored in {mem}")

    # 2. DistributedSampler epochs, direct collate
    sampler = DistributedSampler(ds, num_replicas=ctx.size, rank=ctx.rank, shuffle=True,
                                 seed=SEED)
    loader = ThreadDataLoader(ds, batch_size=BATCH, sampler=sampler, num_workers=2)
    seen = []
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        order = torch.tensor(list(iter(sampler)), dtype=torch.int64)
        want = list(order.split(BATCH))
        got, nb, dt = run_epoch(ctx, loader, want, f"epoch {epoch}")
        remote = int(((got < lo) | (got >= hi)).sum())
        assert remote > 0, f"epoch {epoch}: no sample of another rank's shard was read"
        seen.append(got)
        ctx.say(f"epoch {epoch}: {nb} batches of {BATCH}, {got.numel()} samples "
                f"({remote} from other ranks' shards) checked in {dt * 1e3:.1f} ms")
    # 2b. the consumer on a side stream (not the workers' stream): the loader
    # hands each batch over with an event (no host sync), so checking it on
    # that stream right away must see the data
    if ctx.is_cuda:
        side = torch.cuda.Stream(device=ctx.device)
        sampler.set_epoch(EPOCHS)
        order = torch.tensor(list(iter(sampler)), dtype=torch.int64)
        with torch.cuda.stream(side):
            got, nb, dt = run_epoch(ctx, loader, list(order.split(BATCH)),
                                    "epoch consumed on a side stream")
        ctx.say(f"side-stream epoch: {nb} batches checked on a non-default stream "
                f"in {dt * 1e3:.1f} ms")
    else:
        ctx.say("side-stream epoch: not run (CPU dry run: there are no streams)")
    # the ranks' epochs cover the dataset
    allseen = ctx.allgather(seen[0].tolist())
    cover = set(i for part in allseen for i in part)
    assert cover == set(range(N)), f"epoch 0 over all ranks misses {N - len(cover)} samples"
    loader.close()

    # 3. DDSTORE_FAST_COLLATE=0 and a seeded generator: DataLoader's batches
    os.environ["DDSTORE_FAST_COLLATE"] = "0"
    try:
        gen_seed = SEED + 7 * ctx.rank
        ref = DataLoader(range(N), batch_size=BATCH, shuffle=True,
                         generator=torch.Generator().manual_seed(gen_seed))
        want = [torch.as_tensor(b, dtype=torch.int64) for b in ref]
        loader2 = ThreadDataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=2,
                                   generator=torch.Generator().manual_seed(gen_seed))
        it = iter(loader2)
        fast = getattr(it, "_fast", None)
        assert fast in (False, None), "DDSTORE_FAST_COLLATE=0 did not turn direct collate off"
        got, nb, dt = run_epoch(ctx, it, want, "epoch (DDSTORE_FAST_COLLATE=0)")
        assert sorted(got.tolist()) == list(range(N))
        ctx.say(f"DDSTORE_FAST_COLLATE=0 epoch: {nb} batches, the whole dataset in "
                f"DataLoader's shuffled order, checked in {dt * 1e3:.1f} ms")
        loader2.close()
    finally:
        del os.environ["DDSTORE_FAST_COLLATE"]

    p = ds.get_profile()
    assert p.get("calls", 0) > 0 and p.get("bytes", 0) > 0, p
    ctx.say("profile: " + ", ".join(f"{k} {p.get(k, 0)}" for k in
                                     ("calls", "rows", "bytes", "staged_bytes", "local_bytes",
                                      "gpu_sync_ns", "total_ns")))
    ctx.barrier()   # nobody frees while a peer still reads
    ds.free()
    done(ctx, "torch-distdataset-threads")


if __name__ == "__main__":
    main()
