#!/usr/bin/env python3
"""Remote batch reads across simulated nodes against docs/scale.md's model.

    .venv/bin/python tools/bench_nodes.py [--out out/bench-nodes]

Runs `tools/ddrun --nodes 2 -n 2 --plain` with python/tests/nodes_job.py
bench: rank 0 (node0) reads batches of rank 1's rows (node1), method 1 over
tcp, 128 x 3,136 B and 8 x 1 MiB, while node1's link is limited by tc tbf
to 1 Gbit/s, 200 Mbit/s, 50 Mbit/s (both ways).  Prints measured and
modelled milliseconds per batch and writes OUT/bench_nodes.json and
OUT/bench_nodes.png (measured vs modelled).  The model: the larger of the
unlimited batch time (the path's own cost) and bytes / (rate x goodput),
goodput the TCP payload share of an Ethernet frame at MTU 1500
(1448 / 1514): the reads of a batch are pipelined, so the fixed costs hide
behind the transfer once the link is the bottleneck.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BYTES = {"small": 128 * 3136, "big": 8 << 20}
RATES = {"1gbit": 1e9, "200mbit": 200e6, "50mbit": 50e6}
GOODPUT = 1448 / 1514


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(TOP, "out", "bench-nodes"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-nodes.", dir="/tmp") as d:
        env = dict(os.environ, DDSTORE_FABRIC="tcp", PYTHONPATH=os.path.join(TOP, "python"))
        p = subprocess.run([os.path.join(TOP, "tools", "ddrun"), "--nodes", "2", "-n", "2",
                            "--plain", "--timeout", "600", "--", sys.executable,
                            os.path.join(TOP, "python", "tests", "nodes_job.py"), "bench", d],
                           env=env, capture_output=True, text=True)
    lines = [l for l in p.stdout.splitlines() if l.startswith("BENCH ")]
    if p.returncode != 0 or not lines:
        sys.stderr.write(p.stdout + p.stderr)
        return p.returncode or 1
    meas = json.loads(lines[0][len("BENCH "):])
    rows = []
    for name, nbytes in BYTES.items():
        base = meas[f"{name}@none"]
        for rate, bps in RATES.items():
            model = max(base, 1e3 * nbytes * 8 / (bps * GOODPUT))
            rows.append((name, rate, meas[f"{name}@{rate}"], model))
    print("batch   rate      measured ms  modelled ms")
    for name, rate, m, mod in rows:
        print(f"{name:7s} {rate:9s} {m:11.2f} {mod:12.2f}")
    with open(os.path.join(args.out, "bench_nodes.json"), "w") as f:
        json.dump({"measured_ms": meas, "rows": rows, "goodput": GOODPUT}, f, indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return 0
    fig, ax = plt.subplots(figsize=(5, 4))
    for name, mark in (("small", "o"), ("big", "s")):
        pts = [(mod, m) for n, _, m, mod in rows if n == name]
        ax.scatter([x for x, _ in pts], [y for _, y in pts], marker=mark,
                   label={"small": "128 x 3,136 B", "big": "8 x 1 MiB"}[name])
    lim = [1, 2 * max(r[2] for r in rows)]
    ax.plot(lim, lim, "k:", lw=1, label="measured = modelled")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("modelled ms per batch")
    ax.set_ylabel("measured ms per batch")
    ax.set_title("remote batches, tbf 1 Gbit/s .. 50 Mbit/s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "bench_nodes.png"), dpi=100)
    print("wrote", os.path.join(args.out, "bench_nodes.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
