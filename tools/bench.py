#!/usr/bin/env python3
"""./ddstore bench: run ddstore-bench for every backend here, write JSON and a PNG plot.

    .venv/bin/python tools/bench.py [--ranks 2] [--quick] [--out out/bench]

Runs bazel-bin/tools/ddstore_bench under tools/ddrun for method 0 (MPI RMA) and,
when built with libfabric, method 1 on shm and tcp;ofi_rxm, with 1..8 reader threads
for 3136-byte rows. Each point is measured next to memcpy of the same bytes in the
same run. First, the per-call cost of epoch_begin/epoch_end next to a bare
MPI_Barrier at 2 and 4 ranks (records with "kind": "epoch").
Results: OUT/bench.json (JSON lines) and OUT/bench.png.
"""
import argparse
import json
import os
import subprocess
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(TOP, "bazel-bin", "tools", "ddstore_bench")
DDRUN = os.path.join(TOP, "tools", "ddrun")


def have_ofi():
    try:
        out = subprocess.run([BIN, "--help"], capture_output=True, text=True).stderr
    except OSError:
        return False
    return "--fabric" in out and os.path.exists(os.path.join(TOP, "ddstore-ofi", "transport"))


def bench(args, ranks, extra, env=None):
    cmd = [DDRUN, "-n", str(ranks), "--timeout", "900", "--", BIN, "--json", args.json] + extra
    print("+ " + " ".join(cmd), flush=True)
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(cmd, env=e).returncode


def plot(path_json, path_png):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    rows = [json.loads(l) for l in open(path_json) if l.strip()]
    rows = [r for r in rows if r.get("kind", "read") == "read"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    series = {}
    for r in rows:
        if r["threads"] != 1:
            continue
        key = (r["transport"] + (" " + r["fabric"] if r["fabric"] else ""), r["batch"])
        series.setdefault(key, []).append((r["row_bytes"], r["gb_per_s"], r["memcpy_gb_per_s"],
                                           r["us_per_row"]))
    for (name, batch), pts in sorted(series.items()):
        pts.sort()
        x = [p[0] for p in pts]
        axes[0].plot(x, [p[1] for p in pts], marker="o", label=f"{name}, batch {batch}")
        axes[1].plot(x, [p[3] for p in pts], marker="o", label=f"{name}, batch {batch}")
    mc = {}
    for r in rows:
        mc.setdefault(r["row_bytes"], []).append(r["memcpy_gb_per_s"])
    xs = sorted(mc)
    axes[0].plot(xs, [max(mc[x]) for x in xs], "k--", label="memcpy (same run)")
    for ax, yl in ((axes[0], "GB/s per rank"), (axes[1], "µs per row")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("row bytes")
        ax.set_ylabel(yl)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=6)
    axes[0].set_title("read throughput (remote rows)")
    axes[1].set_title("time per row")
    fig.tight_layout()
    fig.savefig(path_png, dpi=110)
    print(f"plot: {path_png}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="fewer points, shorter")
    ap.add_argument("--out", default=os.path.join(TOP, "out", "bench"))
    ap.add_argument("--methods", default=None, help="comma list: 0,1shm,1tcp (default: all built)")
    args = ap.parse_args()
    # optimised, like the extensions (ci/build-exts.sh builds with -c opt)
    if subprocess.run(["bazel", "build", "-c", "opt", "//tools:ddstore_bench"], cwd=TOP).returncode:
        sys.exit("building //tools:ddstore_bench failed")
    os.makedirs(args.out, exist_ok=True)
    args.json = os.path.join(args.out, "bench.json")
    if os.path.exists(args.json):
        os.remove(args.json)
    # what the figures were measured on: commit, settings, load
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=TOP, capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=TOP,
                           capture_output=True, text=True).stdout.strip()
    with open(args.json, "a") as f:
        f.write(json.dumps({"kind": "run", "commit": head + ("+dirty" if dirty else ""),
                            "loadavg": os.getloadavg(), "cpus": os.cpu_count(),
                            "settings": {k: v for k, v in os.environ.items()
                                         if k.startswith(("DDSTORE_", "FI_", "OMPI_MCA_"))},
                            "argv": sys.argv[1:]}) + "\n")
    secs = "0.1" if args.quick else "0.3"
    sizes = "64,3136,65536,1048576" if args.quick else "64,512,3136,32768,262144,1048576,4194304"
    batches = "1,128" if args.quick else "1,16,128,1024"
    common = ["--seconds", secs, "--sizes", sizes, "--batches", batches]
    threads = ["--sizes", "3136,1048576", "--batches", "128,8", "--threads", "1,2,4,8",
               "--seconds", secs]
    methods = args.methods.split(",") if args.methods else (
        ["0", "1shm", "1tcp"] if have_ofi() else ["0"])
    rc = 0
    # epoch_begin / epoch_end per call next to MPI_Barrier, at 2 and 4 ranks
    calls = "300" if args.quick else "2000"
    for n in sorted({2, 4, args.ranks}):
        for m in methods:
            ext = ["--method", "0"] if m == "0" else \
                ["--method", "1", "--fabric", {"1shm": "shm", "1tcp": "tcp;ofi_rxm"}[m]]
            rc |= bench(args, n, ext + ["--epochs", calls])
    for m in methods:
        if m == "0":
            rc |= bench(args, args.ranks, ["--method", "0"] + common)
            rc |= bench(args, args.ranks, ["--method", "0"] + threads)
        else:
            fab = {"1shm": "shm", "1tcp": "tcp;ofi_rxm"}[m]
            rc |= bench(args, args.ranks, ["--method", "1", "--fabric", fab] + common)
            rc |= bench(args, args.ranks, ["--method", "1", "--fabric", fab] + threads)
    plot(args.json, os.path.join(args.out, "bench.png"))
    print(f"results: {args.json}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
