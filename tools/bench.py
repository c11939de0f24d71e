#!/usr/bin/env python3
"""./ddstore bench: run ddstore-bench for every backend here, write JSON and a PNG plot.

    .venv/bin/python tools/bench.py [--ranks 2] [--quick] [--out out/bench]

Runs bazel-bin/tools/ddstore_bench under tools/ddrun for method 0 (MPI RMA) and,
when built with libfabric, method 1 on shm and tcp;ofi_rxm, with 1..8 reader threads
for 3136-byte rows. Each point is measured next to memcpy of the same bytes in the
same run. First, the per-call cost of epoch_begin/epoch_end next to a bare
MPI_Barrier at 2 and 4 ranks (records with "kind": "epoch").
Results: OUT/bench.json (JSON lines) and OUT/bench.png.
Then the scale harness (tools/bench_scale.py; --no-scale skips it): OUT/scale.json
and OUT/scale.png.
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


# Styles: one colour per backend, one line style and marker per batch size.
_COLOURS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]
_STYLES = ["-", "--", "-.", ":"]
_MARKERS = ["o", "s", "^", "D", "v", "P"]


def _backend(r):
    return r["transport"] + (" " + r["fabric"] if r.get("fabric") else "")


def _line(ax, xs, ys, **kw):
    """A series: a line only when it has more than two points (a line
    between two points says nothing about the points between)."""
    if len(xs) <= 2:
        kw["linestyle"] = "none"
    ax.plot(xs, ys, **kw)


def plot(path_json, path_png):
    """One panel per measure, each with the memcpy reference of the same run:
    throughput, time per row and the ratio to memcpy against row size (one
    reader thread), then the reader-thread sweeps on their own panel."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    rows = [json.loads(l) for l in open(path_json) if l.strip()]
    rows = [r for r in rows if r.get("kind", "read") == "read"]
    if not rows:
        print("no read records: no plot")
        return
    # the size sweeps: one reader thread, batch sizes measured at 3 or more
    # row sizes (the thread sweeps' single-thread points are not a sweep)
    one = [r for r in rows if r["threads"] == 1]
    nsizes = {}
    for r in one:
        nsizes.setdefault(r["batch"], set()).add(r["row_bytes"])
    one = [r for r in one if len(nsizes[r["batch"]]) >= 3]
    backends = sorted({_backend(r) for r in rows})
    batches = sorted({r["batch"] for r in one})
    colour = {b: _COLOURS[i % len(_COLOURS)] for i, b in enumerate(backends)}
    style = {b: (_STYLES[i % len(_STYLES)], _MARKERS[i % len(_MARKERS)])
             for i, b in enumerate(batches)}
    fig, axes = plt.subplots(2, 2, figsize=(14, 10))
    (ax_bw, ax_us), (ax_ratio, ax_thr) = axes
    series = {}
    for r in one:
        series.setdefault((_backend(r), r["batch"]), []).append(r)
    memcpy = {}
    for (be, batch), pts in sorted(series.items()):
        pts.sort(key=lambda r: r["row_bytes"])
        x = [r["row_bytes"] for r in pts]
        ls, mk = style[batch]
        kw = dict(color=colour[be], linestyle=ls, marker=mk, label=f"{be}, batch {batch}")
        _line(ax_bw, x, [r["gb_per_s"] for r in pts], **kw)
        _line(ax_us, x, [r["us_per_row"] for r in pts], **kw)
        _line(ax_ratio, x, [r["gb_per_s"] / r["memcpy_gb_per_s"] if r["memcpy_gb_per_s"] else
                            float("nan") for r in pts], **kw)
        for r in pts:
            memcpy.setdefault(batch, {}).setdefault(r["row_bytes"], []).append(
                r["memcpy_gb_per_s"])
    for batch, by_row in sorted(memcpy.items()):
        x = sorted(by_row)
        gbs = [max(by_row[v]) for v in x]      # the best reference of the run's backends
        ls, mk = style[batch]
        kw = dict(color="black", linestyle=ls, marker="x", alpha=0.6,
                  label=f"memcpy of the same rows, batch {batch}")
        _line(ax_bw, x, gbs, **kw)
        _line(ax_us, x, [v / (g * 1e3) if g else float("nan") for v, g in zip(x, gbs)], **kw)
    ax_ratio.axhline(1.0, color="black", linewidth=1, label="memcpy of the same rows (= 1)")
    for ax, yl, title in ((ax_bw, "GB/s per rank", "read throughput, 1 reader thread"),
                          (ax_us, "µs per row", "time per row, 1 reader thread"),
                          (ax_ratio, "fraction of memcpy", "throughput / memcpy of the same rows")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("row bytes (remote rows, random)")
        ax.set_ylabel(yl)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    # reader-thread sweeps: aggregate throughput against threads, one
    # series per backend and row size, the memcpy reference beside each
    sweep = {}
    for r in rows:
        sweep.setdefault((_backend(r), r["row_bytes"], r["batch"]), []).append(r)
    sweep = {k: v for k, v in sweep.items() if len({r["threads"] for r in v}) > 1}
    sizes = sorted({k[1] for k in sweep})
    size_style = {v: (_STYLES[i % len(_STYLES)], _MARKERS[i % len(_MARKERS)])
                  for i, v in enumerate(sizes)}
    for (be, row_b, batch), pts in sorted(sweep.items()):
        if row_b not in size_style:
            continue
        # one point per thread count: the sweep's own (recorded last)
        pts = sorted({r["threads"]: r for r in pts}.values(), key=lambda r: r["threads"])
        ls = size_style[row_b][0]
        mk = _MARKERS[sorted({k[2] for k in sweep}).index(batch) % len(_MARKERS)]
        x = [r["threads"] for r in pts]
        _line(ax_thr, x, [r["gb_per_s"] for r in pts], color=colour[be], linestyle=ls,
              marker=mk, label=f"{be}, {row_b} B rows, batch {batch}")
    for row_b in sizes:
        ref = [r["memcpy_gb_per_s"] for (be, rb, _b), pts in sweep.items() if rb == row_b
               for r in pts if r["threads"] == 1]
        if ref:
            ax_thr.axhline(max(ref), color="black", linestyle=size_style[row_b][0], alpha=0.6,
                           label=f"memcpy, {row_b} B rows, 1 thread")
    ax_thr.set_xscale("log", base=2)
    ax_thr.set_yscale("log")
    ax_thr.set_xlabel("reader threads per rank")
    ax_thr.set_ylabel("GB/s per rank (all threads)")
    ax_thr.set_title("reader-thread sweeps")
    ax_thr.grid(True, which="both", alpha=0.3)
    # one legend for the three size-sweep panels (the same series), below
    # them; the sweep panel keeps its own
    h, l = ax_bw.get_legend_handles_labels()
    h2, l2 = ax_ratio.get_legend_handles_labels()
    h, l = h + h2[-1:], l + l2[-1:]
    ax_thr.legend(fontsize=7, loc="best")
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.legend(h, l, loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.savefig(path_png, dpi=110)
    print(f"plot: {path_png}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="fewer points, shorter")
    ap.add_argument("--out", default=os.path.join(TOP, "out", "bench"))
    ap.add_argument("--methods", default=None, help="comma list: 0,1shm,1tcp (default: all built)")
    ap.add_argument("--no-scale", action="store_true",
                    help="skip the scale harness (tools/bench_scale.py: OUT/scale.json, scale.png)")
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
    if not args.no_scale:
        import bench_scale  # tools/: cost per rank as R grows (docs/scale.md)
        rc |= bench_scale.run(args.out, args.quick)
    return rc


if __name__ == "__main__":
    sys.exit(main())
