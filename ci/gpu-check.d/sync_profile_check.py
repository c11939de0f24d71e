#!/usr/bin/env python3
"""No device-wide synchronise from the loader while training runs (SPEC §6).

    GPUCHECK_DEVICE=cuda tools/ddrun -n 2 python ci/gpu-check.d/sync_profile_check.py
    GPUCHECK_DEVICE=cpu  ...                  (dry run: the same logic, CPU tensors)

Used by ci/gpu-check.d/sync-profile.sh.  A DistDataset of 3136 B rows (784
float32, host shards) read into GPU memory (device="cuda") by a
ThreadDataLoader (2 worker threads, batches of 128) while the main thread runs
a training-like step per batch: matmuls queued on the current stream, never
waited for inside the loop.

Figures (printed, and written to $OUT/gpu-sync-profile.json):
  - step time without the loader (the same steps over batches already on the
    device) and with it, and the main thread's wait for the next batch;
  - the store's read profile for the loader epoch, per batch: total_ns,
    gpu_sync_ns (time in GPU stream/event ordering and staging copies),
    staged bytes;
  - torch-level sync calls, by thread (torch.cuda.synchronize,
    Stream.synchronize, Event.synchronize are wrapped to count them);
  - runtime-level sync calls (CUPTI via torch.profiler: cudaDeviceSynchronize,
    cudaStreamSynchronize, cudaEventSynchronize) in a compute-only phase and in
    a loader phase of the same steps.

Fails only on a clear violation: torch.cuda.synchronize() called from a
loader thread, more cudaDeviceSynchronize calls in the loader phase than in
the compute-only phase (when the trace is available), a read error, or a
batch whose values are wrong (checked on the device without a host sync).
"""
import collections
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402  (before MPI starts)
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

from gpucheck_common import Ctx, done, write_json  # noqa: E402
from pyddstore.torch import DistDataset, ThreadDataLoader  # noqa: E402

F = 784          # 3136 B rows
BATCH = 128
SEED = 99
LOADER_PREFIX = "ddstore-loader"   # ThreadDataLoader's worker thread names


class Source(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i * 0.5 + torch.arange(F, dtype=torch.float32) * 0.25, i


# ---- torch-level sync calls, counted by thread ------------------------------
SYNC_CALLS = collections.Counter()


def _wrap(owner, attr, label):
    orig = getattr(owner, attr, None)
    if orig is None:
        return

    def counted(*a, **k):
        where = "loader" if threading.current_thread().name.startswith(LOADER_PREFIX) \
            else "other"
        SYNC_CALLS[(label, where)] += 1
        return orig(*a, **k)
    setattr(owner, attr, counted)


def patch_syncs():
    _wrap(torch.cuda, "synchronize", "torch.cuda.synchronize")
    _wrap(torch.cuda.Stream, "synchronize", "Stream.synchronize")
    _wrap(torch.cuda.Event, "synchronize", "Event.synchronize")


# ---- the training-like step ------------------------------------------------
class Model:
    def __init__(self, dev, hidden, depth):
        g = torch.Generator(device="cpu").manual_seed(5)
        self.w1 = (torch.randn(F, hidden, generator=g) / F ** 0.5).to(dev)
        self.w2 = (torch.randn(hidden, hidden, generator=g) / hidden ** 0.5).to(dev)
        self.depth = depth
        self.acc = torch.zeros((), device=dev)

    def step(self, x):
        h = torch.relu(x @ self.w1)
        for _ in range(self.depth):
            h = torch.tanh(h @ self.w2)
        self.acc += h.sum()      # stays on the device: no host sync


def expected_x(ctx, idx):
    i = ctx.to_device(idx).to(torch.float32)
    return i[:, None] * 0.5 + \
        torch.arange(F, dtype=torch.float32, device=ctx.device)[None, :] * 0.25


def loader_epoch(ctx, ds, loader, model, max_batches=None):
    """One epoch: step per batch, values checked on the device.  Returns
    (batches, wall s, wait s in next(), bad count tensor)."""
    bad = torch.zeros((), dtype=torch.int64, device=ctx.device)
    nb = 0
    wait = 0.0
    ctx.sync()
    t0 = time.perf_counter()
    it = iter(loader)
    while True:
        tw = time.perf_counter()
        try:
            x, idx = next(it)
        except StopIteration:
            break
        wait += time.perf_counter() - tw
        assert x.device == ctx.device and x.shape[1] == F, (x.device, x.shape)
        model.step(x)
        bad += (x != expected_x(ctx, idx)).any(dim=1).sum()
        nb += 1
        if max_batches is not None and nb >= max_batches:
            break
    ctx.sync()
    dt = time.perf_counter() - t0
    del it
    return nb, dt, wait, bad


def compute_only(ctx, model, xs, steps):
    ctx.sync()
    t0 = time.perf_counter()
    for k in range(steps):
        model.step(xs[k % len(xs)])
    ctx.sync()
    return time.perf_counter() - t0


def cupti_counts(ctx, fn):
    """{runtime sync call: count} for fn() under torch.profiler (CUPTI), or
    (None, reason) when tracing is not available."""
    if not ctx.is_cuda:
        return None, "no CUDA (dry run)"
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
        names = collections.Counter(e.name for e in prof.events())
    except Exception as e:  # noqa: BLE001 - a figure, not the check
        return None, f"{type(e).__name__}: {e}"
    keys = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
            "cudaMemcpyAsync", "cudaLaunchKernel")
    return {k: names.get(k, 0) for k in keys}, None


def main():
    ctx = Ctx("dds-sync")
    ctx.header("sync-profile")
    cuda = ctx.is_cuda
    n = 16384 if cuda else 2048
    hidden, depth = (4096, 6) if cuda else (128, 1)
    dev = str(ctx.device) if cuda else "cpu"
    patch_syncs()

    ds = DistDataset(Source(n), "gcsp", ctx.comm, device=dev, method=ctx.method)
    sampler = DistributedSampler(ds, num_replicas=ctx.size, rank=ctx.rank, shuffle=True,
                                 seed=SEED)
    loader = ThreadDataLoader(ds, batch_size=BATCH, sampler=sampler, num_workers=2)
    model = Model(ctx.device, hidden, depth)
    xs = [torch.randn(BATCH, F, device=ctx.device) for _ in range(4)]

    # warm-up (allocator, staging buffers, readers, kernels); not measured
    sampler.set_epoch(0)
    nb0, _, _, bad0 = loader_epoch(ctx, ds, loader, model)
    compute_only(ctx, model, xs, 8)

    # measured: compute only, then the same steps with the loader
    steps = len(sampler) // BATCH + (1 if len(sampler) % BATCH else 0)
    t_compute = compute_only(ctx, model, xs, steps)
    p0 = ds.get_profile()
    sampler.set_epoch(1)
    nb, t_loader, t_wait, bad = loader_epoch(ctx, ds, loader, model)
    p1 = ds.get_profile()
    nbad = int(bad0) + int(bad)
    assert nbad == 0, f"{nbad} samples with wrong values in the loader epochs"
    assert nb == steps and nb0 == steps, (nb, nb0, steps)
    dp = {k: p1.get(k, 0) - p0.get(k, 0) for k in p1}
    assert dp.get("calls", 0) >= nb and dp.get("bytes", 0) >= nb * BATCH * F * 4, dp

    # runtime-level syncs (CUPTI), compute-only phase vs loader phase
    k = min(16, steps)
    sampler.set_epoch(2)
    trace_c, why_c = cupti_counts(ctx, lambda: compute_only(ctx, model, xs, k))
    trace_l, why_l = cupti_counts(ctx, lambda: loader_epoch(ctx, ds, loader, model, k))
    loader.close()
    calls = dict(SYNC_CALLS)     # the whole run: every loader epoch, by thread

    per = lambda v: v / max(nb, 1)  # noqa: E731
    fig = {
        "batches": nb, "batch": BATCH, "row_bytes": F * 4, "workers": 2,
        "step_ms_compute_only": t_compute / steps * 1e3,
        "step_ms_with_loader": t_loader / nb * 1e3,
        "main_thread_wait_ms_per_step": t_wait / nb * 1e3,
        "read_total_ms_per_batch": per(dp.get("total_ns", 0)) / 1e6,
        "gpu_sync_ms_per_batch": per(dp.get("gpu_sync_ns", 0)) / 1e6,
        "staged_bytes_per_batch": per(dp.get("staged_bytes", 0)),
        "read_calls_per_batch": per(dp.get("calls", 0)),
        "torch_sync_calls": {f"{a} ({w} threads)": c for (a, w), c in sorted(calls.items())},
        "cupti_compute_only": trace_c if trace_c is not None else f"unavailable: {why_c}",
        "cupti_loader": trace_l if trace_l is not None else f"unavailable: {why_l}",
    }
    lines = [
        f"step time, compute only      {fig['step_ms_compute_only']:8.3f} ms",
        f"step time, with the loader   {fig['step_ms_with_loader']:8.3f} ms   "
        f"(main thread waiting for data {fig['main_thread_wait_ms_per_step']:.3f} ms/step)",
        f"store read per batch         {fig['read_total_ms_per_batch']:8.3f} ms total, "
        f"{fig['gpu_sync_ms_per_batch']:.3f} ms gpu_sync "
        f"({fig['read_calls_per_batch']:.1f} reads, {fig['staged_bytes_per_batch']:.0f} B staged)",
        f"gpu_sync per batch / step    {fig['gpu_sync_ms_per_batch'] / max(fig['step_ms_with_loader'], 1e-9) * 100:8.1f} %",
        "torch sync calls (run)       " + (", ".join(f"{k}: {v}" for k, v in
                                                     fig["torch_sync_calls"].items()) or "none"),
        f"CUPTI, compute only ({k} steps) {fig['cupti_compute_only']}",
        f"CUPTI, loader ({k} steps)       {fig['cupti_loader']}",
    ]
    ctx.say(f"sync-profile ({ctx.device}, {nb} batches of {BATCH} x {F * 4} B, 2 workers):\n  "
            + "\n  ".join(lines))
    allfig = ctx.allgather(fig)
    out = ctx.describe()
    out["per_rank"] = allfig
    write_json(ctx, "gpu-sync-profile.json", out)

    # the checks (after the figures are out)
    dev_sync_loader = calls.get(("torch.cuda.synchronize", "loader"), 0)
    assert dev_sync_loader == 0, \
        f"loader threads called torch.cuda.synchronize() {dev_sync_loader} times"
    if trace_c is not None and trace_l is not None:
        extra = trace_l["cudaDeviceSynchronize"] - trace_c["cudaDeviceSynchronize"]
        assert extra <= 0, (f"{trace_l['cudaDeviceSynchronize']} cudaDeviceSynchronize calls "
                            f"while the loader ran {k} steps, {trace_c['cudaDeviceSynchronize']} "
                            "in the same steps without it: the read path synchronises the device")
    ctx.barrier()
    ds.free()
    done(ctx, "sync-profile")


if __name__ == "__main__":
    main()
