#!/usr/bin/env python3
"""Read throughput through the store into GPU memory vs host memory (figures).

    GPUCHECK_DEVICE=cuda tools/ddrun -n 2 python ci/gpu-check.d/throughput_check.py
    GPUCHECK_DEVICE=cpu  ...                  (dry run: host destinations only)

Used by ci/gpu-check.d/throughput.sh.  Two float32 variables, host shards on
every rank: 3136 B rows (784 values) read in batches of 128, and 1 MiB rows
(262144 values) read in batches of 8, random global rows (about half of them
on the other rank), through pyddstore's torch extension (get_batch, the call
DistDataset uses) into a registered destination tensor:

  cuda          a CUDA tensor (ordered on the current stream; timed to the
                end of the stream's work)
  host-pinned   a pinned host tensor (only with CUDA)
  host-pageable an ordinary host tensor

Next to each, a reference without the store: ``dst.copy_(src)`` of the same
bytes from a host tensor (pinned for cuda/pinned, pageable for pageable).

Printed as a table (µs/row, GB/s, per rank) and written to
$OUT/gpu-throughput.json when OUT is set.  Not assertions: the check fails
only when a read errors or a sample of the data read is wrong (every
destination, both sizes, poisoned first, shuffled rows with repeats).
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402  (before MPI starts)

import pyddstore  # noqa: E402
from gpucheck_common import Ctx, done, write_json  # noqa: E402
from pyddstore.torch._ext import ext, stream_of  # noqa: E402

# (name, values per row, batch, rows per rank, timed iterations)
CASES = [("t3k", 784, 128, 4096, 200), ("t1m", 262144, 8, 48, 40)]


def rows_of(g, disp):
    """Reference rows: row g, column j = g/2 + (j mod 2**16)/4 (exact in float32)."""
    g = torch.as_tensor(g, dtype=torch.int64).to(torch.float32)
    j = (torch.arange(disp, dtype=torch.int64) % (1 << 16)).to(torch.float32)
    return g[:, None] * 0.5 + j[None, :] * 0.25


def destinations(ctx):
    d = []
    if ctx.is_cuda:
        d.append("cuda")
        d.append("host-pinned")
    d.append("host-pageable")
    return d


def alloc(ctx, kind, shape):
    if kind == "cuda":
        return torch.empty(shape, dtype=torch.float32, device=ctx.device)
    return torch.empty(shape, dtype=torch.float32, pin_memory=(kind == "host-pinned"))


def timed(ctx, fn, iters):
    for _ in range(3):
        fn(0)
    ctx.sync()
    t0 = time.perf_counter()
    for k in range(iters):
        fn(k)
    ctx.sync()
    return time.perf_counter() - t0


def main():
    ctx = Ctx("dds-tput")
    ctx.header("throughput")
    store = pyddstore.PyDDStore(ctx.store_comm, method=ctx.method,
                                **({"exchange_ns": ctx.comm.ns} if ctx.transport == "file" else {}))
    rng = np.random.default_rng(11 + ctx.rank)
    results = []
    for name, disp, batch, per_rank, iters in CASES:
        lo = ctx.rank * per_rank
        store.add(name, rows_of(range(lo, lo + per_rank), disp).numpy())
        total = per_rank * ctx.size
        row_bytes = disp * 4
        # index sets, drawn up front (uniform over all rows: ~1/size local)
        idx_sets = [torch.from_numpy(rng.integers(0, total, batch).astype(np.int64))
                    for _ in range(8)]
        for kind in destinations(ctx):
            out = alloc(ctx, kind, (batch, disp))
            stream = stream_of(out.device) if out.is_cuda else 0
            ext.register_recv(store, out, stream)
            try:
                # correctness first: poisoned, shuffled rows with repeats
                idx = idx_sets[0].clone()
                idx[-1] = idx[0]
                out.fill_(-1.0)
                ext.get_batch(store, name, out, idx, stream_of(out.device) if out.is_cuda else 0)
                got = out.cpu()     # ordered after the read on the current stream
                want = rows_of(idx, disp)
                if not torch.equal(got, want):
                    bad = (got != want).any(dim=1).nonzero()[:, 0].tolist()
                    raise AssertionError(f"{name} into {kind}: rows {bad[:8]} (global "
                                         f"{idx[bad[:8]].tolist()}) wrong")

                def read(k, out=out):
                    ext.get_batch(store, name, out, idx_sets[k % len(idx_sets)],
                                  stream_of(out.device) if out.is_cuda else 0)
                dt = timed(ctx, read, iters)
                src = torch.empty((batch, disp), dtype=torch.float32,
                                  pin_memory=(kind != "host-pageable")).fill_(1.0)
                dref = timed(ctx, lambda k, out=out, src=src: out.copy_(src, non_blocking=True),
                             iters)
            finally:
                ext.unregister_recv(store, out)
            nrows = iters * batch
            results.append({
                "rank": ctx.rank, "var": name, "row_bytes": row_bytes, "batch": batch,
                "dest": kind, "iters": iters,
                "us_per_row": dt / nrows * 1e6, "GB_s": nrows * row_bytes / dt / 1e9,
                "ref_copy_us_per_row": dref / nrows * 1e6,
                "ref_copy_GB_s": nrows * row_bytes / dref / 1e9,
            })
    prof = {n: store.get_profile(n) for n, *_ in CASES}
    allres = ctx.allgather(results)
    allprof = ctx.allgather(prof)
    if ctx.rank == 0:
        print(f"{'rank':>4} {'row':>8} {'batch':>5} {'destination':>14} {'us/row':>9} "
              f"{'GB/s':>7} | {'copy_ ref us/row':>16} {'GB/s':>7}")
        for res in allres:
            for r in res:
                size = "3136 B" if r["row_bytes"] < 65536 else "1 MiB"
                print(f"{r['rank']:>4} {size:>8} {r['batch']:>5} {r['dest']:>14} "
                      f"{r['us_per_row']:9.2f} {r['GB_s']:7.2f} | "
                      f"{r['ref_copy_us_per_row']:16.2f} {r['ref_copy_GB_s']:7.2f}", flush=True)
        for rk, p in enumerate(allprof):
            for n, c in p.items():
                print(f"rank {rk} profile {n}: calls {c.get('calls')}, bytes {c.get('bytes')}, "
                      f"staged {c.get('staged_bytes')}, local {c.get('local_bytes')}, "
                      f"gpu_sync {c.get('gpu_sync_ns', 0) / 1e6:.1f} ms, "
                      f"total {c.get('total_ns', 0) / 1e6:.1f} ms", flush=True)
    out = ctx.describe()
    out["results"] = [r for res in allres for r in res]
    out["profile"] = allprof
    out["note"] = ("figures, not assertions; reads into a registered destination, random "
                   "global rows; the reference is dst.copy_(src) of the same bytes")
    write_json(ctx, "gpu-throughput.json", out)
    ctx.barrier()     # nobody frees while a peer still reads
    store.free()
    done(ctx, "throughput")


if __name__ == "__main__":
    main()
