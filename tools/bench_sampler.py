#!/usr/bin/env python3
"""Sampler benchmark: ns per index and memory of pyddstore's DistSampler next
to torch's DistributedSampler (randperm), in one run.

    .venv/bin/python tools/bench_sampler.py [--ranks 8] [--count 4194304]
        [--sizes 1e6,1e7,1e9,1e12] [--torch-max 1e7] [--json FILE]

Each case runs in a fresh child process (so its peak RSS is its own): it
builds the sampler for rank 0 of --ranks, takes the first index (time to
first), then --count indices (or the rank's whole epoch if fewer) through
the iterator, and reports ns per index (steady state, after the first) and
the peak RSS above the same child's RSS after imports.  DistributedSampler
materialises the epoch's permutation as a Python list of N ints (about
48 bytes per sample): sizes above --torch-max are not run for it.
A program, not a test (tagged benchmark).
"""
import argparse
import collections
import itertools
import json
import os
import resource
import subprocess
import sys
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(kind, n, ranks, count):
    sys.path.insert(0, os.path.join(TOP, "python"))
    import torch  # noqa: F401
    from torch.utils.data.distributed import DistributedSampler
    from pyddstore.torch.sampler import DistSampler
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    if kind == "DistSampler":
        s = DistSampler(n, ranks, 0, seed=1)
    else:
        s = DistributedSampler(range(n), ranks, 0, seed=1)
    s.set_epoch(3)
    it = iter(s)
    next(it)
    t1 = time.perf_counter()
    m = min(count, len(s) - 1)
    collections.deque(itertools.islice(it, m), maxlen=0)
    t2 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"sampler": kind, "n": n, "ranks": ranks, "indices": m + 1,
            "first_s": t1 - t0, "ns_per_index": 1e9 * (t2 - t1) / max(m, 1),
            "epoch_s_est": (t1 - t0) + (t2 - t1) / max(m, 1) * (len(s) - 1),
            "rss_mib": (peak - base) / 1024.0}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--count", type=int, default=1 << 22)
    ap.add_argument("--sizes", default="1e6,1e7,1e9,1e12")
    ap.add_argument("--torch-max", type=float, default=1e7)
    ap.add_argument("--json")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child[0], int(float(a.child[1])), a.ranks, a.count)))
        return 0
    rows = []
    for n in [int(float(x)) for x in a.sizes.split(",")]:
        for kind in ("DistSampler", "DistributedSampler"):
            if kind == "DistributedSampler" and n > a.torch_max:
                rows.append({"sampler": kind, "n": n, "skipped": "list of N ints: "
                             f"~{48 * n / 2**30:.0f} GiB per rank"})
                continue
            out = subprocess.run([sys.executable, __file__, "--ranks", str(a.ranks),
                                  "--count", str(a.count), "--child", kind, str(n)],
                                 capture_output=True, text=True, check=True)
            rows.append(json.loads(out.stdout))
    print(f"{'sampler':<20}{'N':>16}{'first index s':>15}{'ns/index':>10}"
          f"{'epoch s (est)':>15}{'RSS MiB':>10}")
    for r in rows:
        if "skipped" in r:
            print(f"{r['sampler']:<20}{r['n']:>16}   not run: {r['skipped']}")
            continue
        print(f"{r['sampler']:<20}{r['n']:>16}{r['first_s']:>15.4f}{r['ns_per_index']:>10.1f}"
              f"{r['epoch_s_est']:>15.1f}{r['rss_mib']:>10.1f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
