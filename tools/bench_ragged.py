#!/usr/bin/env python3
"""Ragged-variable benchmark (issue 11): packed reads of variable-size samples
next to fixed-size reads of the same bytes and memcpy, sizes() per call, and the
per-rank metadata of a ragged variable next to allgathered offsets.

    .venv/bin/python tools/bench_ragged.py [--ranks 2] [--batches 300]
        [--meta-rows 1e8] [--meta-ranks 4] [--json out/bench_ragged.json]

reads (--ranks, methods 0 and, when built with libfabric, 1 on shm): graphs of
5..500 nodes (lognormal, clipped) x 64 float32 features, --per-rank samples per
rank; batches of 128 random samples of every owner.  Per batch, interleaved in
one loop: get_ragged into a preallocated `out`, get_batch of a fixed variable
whose rows are the mean sample (same bytes per batch on average; figures also
per byte), and a numpy copy of the ragged batch's bytes.  Then sizes() of 128
random samples: us per call.

meta (--meta-ranks): a ragged variable of --meta-rows samples of length 0 or
1 x 1 byte: the RSS growth of each rank (inputs released) and the store's own
accounting of its layout (info_full's local samples and element rows: an 8-byte
prefix sum per local sample, docs/design.md) next to the 16 B x samples per rank
of allgathered (offset, length) pairs; and the paper model for 1e9 samples on
16384 ranks.

A program, not a test.  Results: JSON lines (--json) and a summary on stdout.
"""
import argparse
import gc
import json
import os
import subprocess
import sys
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DDRUN = os.path.join(TOP, "tools", "ddrun")
FEAT = 64            # float32 features per node
BATCH = 128


def _rss():
    """This process's resident set now (bytes)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _lengths(n_total, seed=7):
    """Node counts of every global sample: lognormal (median ~40, long
    tail), clipped to [5, 500]; the same on every rank."""
    import numpy as np
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(np.log(40.0), 1.0, n_total), 5, 500).astype(np.int64)


def _emit(rec, path):
    line = json.dumps(rec)
    print(line, flush=True)
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def worker_reads(a):
    import numpy as np
    import pyddstore
    s = pyddstore.PyDDStore(None, method=a.method)
    rank, size = s.rank, s.size
    n_total = a.per_rank * size
    lens = _lengths(n_total)
    lo, hi = rank * a.per_rank, (rank + 1) * a.per_rank
    my = lens[lo:hi]
    vals = np.random.default_rng(rank).standard_normal((int(my.sum()), FEAT)).astype(np.float32)
    s.add_ragged("g", vals, my)
    mean = int(round(float(lens.mean())))
    s.add("f", np.ones((a.per_rank, mean * FEAT), np.float32))
    del vals
    out = np.empty((BATCH * 500, FEAT), np.float32)
    fixed = np.empty((BATCH, mean * FEAT), np.float32)
    src = np.ones((BATCH * 500, FEAT), np.float32)
    dst = np.empty_like(src)
    rng = np.random.default_rng(100 + rank)
    t = {"ragged": [], "fixed": [], "memcpy": []}
    nbytes = []
    for it in range(a.warmup + a.batches):
        idx = rng.integers(0, n_total, BATCH)
        t0 = time.perf_counter()
        v, l = s.get_ragged("g", idx, out=out)
        t1 = time.perf_counter()
        s.get_batch("f", fixed, idx)
        t2 = time.perf_counter()
        k = len(v)
        np.copyto(dst[:k], src[:k])
        t3 = time.perf_counter()
        if it >= a.warmup:
            t["ragged"].append(t1 - t0)
            t["fixed"].append(t2 - t1)
            t["memcpy"].append(t3 - t2)
            nbytes.append(k * FEAT * 4)
    fixed_bytes = BATCH * mean * FEAT * 4
    # sizes() of 128 random samples
    st = []
    for it in range(a.warmup + 10 * a.batches):
        idx = rng.integers(0, n_total, BATCH)
        t0 = time.perf_counter()
        s.sizes("g", idx)
        st.append(time.perf_counter() - t0)
    st = st[a.warmup:]
    s.free()
    med = {k: float(np.median(v)) for k, v in t.items()}
    mean_b = float(np.mean(nbytes))
    rec = {
        "kind": "ragged_reads", "method": a.method,
        "fabric": os.environ.get("DDSTORE_FABRIC", "") if a.method else "",
        "ranks": size, "rank": rank, "batches": a.batches, "batch": BATCH,
        "samples": n_total, "mean_nodes": float(lens.mean()),
        "ragged_bytes_per_batch_mean": mean_b, "fixed_bytes_per_batch": fixed_bytes,
        "ragged_us_median": 1e6 * med["ragged"], "fixed_us_median": 1e6 * med["fixed"],
        "memcpy_us_median": 1e6 * med["memcpy"],
        # per byte: the batches' bytes differ a little (random samples)
        "ragged_GBps": float(np.sum(nbytes) / np.sum(t["ragged"]) / 1e9),
        "fixed_GBps": float(fixed_bytes * len(t["fixed"]) / np.sum(t["fixed"]) / 1e9),
        "memcpy_GBps": float(np.sum(nbytes) / np.sum(t["memcpy"]) / 1e9),
        "sizes_us_median": 1e6 * float(np.median(st)),
        "sizes_us_p90": 1e6 * float(np.percentile(st, 90)),
    }
    rec["ragged_vs_fixed"] = rec["ragged_GBps"] / rec["fixed_GBps"]
    # the same from the medians (robust to a busy machine's outliers): bytes
    # per us of a median ragged batch over those of a median fixed batch
    rec["ragged_vs_fixed_median"] = (mean_b / med["ragged"]) / (fixed_bytes / med["fixed"])
    rec["ragged_vs_memcpy"] = rec["ragged_GBps"] / rec["memcpy_GBps"]
    _emit(rec, a.json)


def worker_meta(a):
    import numpy as np
    import pyddstore
    s = pyddstore.PyDDStore(None, method=a.method)
    rank, size = s.rank, s.size
    n = int(a.meta_rows) // size + (1 if rank < int(a.meta_rows) % size else 0)
    gc.collect()
    rss0 = _rss()
    lens = np.arange(n, dtype=np.int64)                     # 0 or 1 element
    lens += rank
    lens %= 2
    vals = np.ones(int(lens.sum()), np.uint8)
    s.add_ragged("m", vals, lens)
    del lens, vals
    gc.collect()
    rss1 = _rss()
    info = s.info_full("m")
    payload = info["local_elems"] * info["row_bytes"]
    growth = rss1 - rss0
    allg = 16 * info["total_rows"]                          # per rank, per field
    rec = {"kind": "ragged_meta", "method": a.method, "ranks": size, "rank": rank,
           "samples": info["total_rows"], "local_samples": info["local_rows"],
           "rss_growth_bytes": growth, "payload_bytes": payload,
           "metadata_bytes_rss": growth - payload,
           "metadata_bytes_per_local_sample": (growth - payload) / max(1, info["local_rows"]),
           "allgathered_bytes": allg}
    # the store's own accounting of its layout (docs/design.md "Ragged
    # variables"): the shard is [index | payload], the index one int64 prefix
    # sum per local sample + 1 (64-byte padded); plus three int64 arrays of
    # nranks + 1 (sample, element-row and index offsets)
    index = ((info["local_rows"] + 1) * 8 + 63) & ~63
    rec["store_index_bytes"] = index
    rec["store_shard_bytes"] = index + payload
    rec["model_bytes"] = index + 3 * 8 * (size + 1)
    rec["allgathered_vs_rss"] = allg / max(1, growth - payload)
    rec["allgathered_vs_model"] = allg / rec["model_bytes"]
    s.free()
    _emit(rec, a.json)


def paper_model(samples=10**9, ranks=16384, fields=1):
    local = -(-samples // ranks)
    dist = (((local + 1) * 8 + 63) & ~63) + 3 * 8 * (ranks + 1)
    allg = 16 * samples
    return {"kind": "ragged_meta_model", "samples": samples, "ranks": ranks,
            "fields": fields, "distributed_index_bytes_per_rank": dist * fields,
            "allgathered_bytes_per_rank": allg * fields, "ratio": allg / dist}


def have_ofi():
    r = subprocess.run([sys.executable, "-c", "import pyddstore; print(pyddstore.HAVE_OFI)"],
                       capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=os.path.join(TOP, "python")))
    return r.stdout.strip() == "True"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--per-rank", type=int, default=4096, help="samples per rank (reads)")
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--meta-rows", type=float, default=1e8)
    ap.add_argument("--meta-ranks", type=int, default=4)
    ap.add_argument("--methods", default=None, help="e.g. 0,1 (default: 0 and 1 if built)")
    ap.add_argument("--skip-meta", action="store_true")
    ap.add_argument("--skip-reads", action="store_true")
    ap.add_argument("--json", default=os.path.join(TOP, "out", "bench_ragged.json"))
    ap.add_argument("--worker", choices=["reads", "meta"], help=argparse.SUPPRESS)
    ap.add_argument("--method", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker == "reads":
        return worker_reads(a)
    if a.worker == "meta":
        return worker_meta(a)

    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    open(a.json, "w").close()
    methods = ([int(m) for m in a.methods.split(",")] if a.methods
               else [0, 1] if have_ofi() else [0])
    env = dict(os.environ, PYTHONPATH=os.path.join(TOP, "python"))
    me = [sys.executable, os.path.abspath(__file__)]
    common = ["--json", a.json, "--per-rank", str(a.per_rank), "--batches", str(a.batches),
              "--warmup", str(a.warmup), "--meta-rows", str(a.meta_rows)]
    rc = 0
    if not a.skip_reads:
        for m in methods:
            e = dict(env)
            if m == 1:
                e["DDSTORE_FABRIC"] = "shm"
            cmd = [DDRUN, "-n", str(a.ranks), "--timeout", "900", "--"] + me + \
                ["--worker", "reads", "--method", str(m)] + common
            print("+ " + " ".join(cmd), flush=True)
            rc |= subprocess.run(cmd, env=e).returncode
    if not a.skip_meta:
        cmd = [DDRUN, "-n", str(a.meta_ranks), "--timeout", "900", "--"] + me + \
            ["--worker", "meta", "--method", "0"] + common
        print("+ " + " ".join(cmd), flush=True)
        rc |= subprocess.run(cmd, env=env).returncode
    _emit(paper_model(), a.json)
    _summary(a.json)
    return rc


def _summary(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    print("\nreads (per rank; us: medians; GB/s: all batches' bytes over their time; "
          "r/fixed: ragged over fixed per byte, from GB/s and from the medians)")
    print(f"{'method':<10}{'rank':>5}{'ragged us':>11}{'fixed us':>10}{'memcpy us':>11}"
          f"{'ragged GB/s':>13}{'fixed GB/s':>12}{'r/fixed':>9}{'(median)':>9}{'r/memcpy':>10}"
          f"{'sizes us':>10}")
    for r in rows:
        if r["kind"] == "ragged_reads":
            name = f"{r['method']}{' ' + r['fabric'] if r['fabric'] else ''}"
            print(f"{name:<10}{r['rank']:>5}{r['ragged_us_median']:>11.1f}{r['fixed_us_median']:>10.1f}"
                  f"{r['memcpy_us_median']:>11.1f}{r['ragged_GBps']:>13.2f}{r['fixed_GBps']:>12.2f}"
                  f"{r['ragged_vs_fixed']:>9.2f}{r['ragged_vs_fixed_median']:>9.2f}"
                  f"{r['ragged_vs_memcpy']:>10.2f}{r['sizes_us_median']:>10.1f}")
    print("\nmetadata (per rank)")
    for r in rows:
        if r["kind"] == "ragged_meta":
            print(f"rank {r['rank']}: {r['local_samples']} samples, RSS growth "
                  f"{r['rss_growth_bytes'] / 2**20:.1f} MiB (payload {r['payload_bytes'] / 2**20:.1f}"
                  f" MiB, metadata {r['metadata_bytes_rss'] / 2**20:.1f} MiB = "
                  f"{r['metadata_bytes_per_local_sample']:.1f} B/sample; store's "
                  f"index {r['store_index_bytes'] / 2**20:.1f} MiB, + prefix sums "
                  f"{r['model_bytes'] / 2**20:.1f} MiB); allgathered "
                  f"{r['allgathered_bytes'] / 2**20:.1f} MiB (x{r['allgathered_vs_model']:.1f})")
        if r["kind"] == "ragged_meta_model":
            print(f"model: {r['samples']:.0e} samples on {r['ranks']} ranks: distributed index "
                  f"{r['distributed_index_bytes_per_rank'] / 2**20:.2f} MiB/rank/field, "
                  f"allgathered {r['allgathered_bytes_per_rank'] / 2**30:.1f} GiB/rank/field "
                  f"(x{r['ratio']:.0f})")


if __name__ == "__main__":
    sys.exit(main() or 0)
