#!/usr/bin/env python3
"""The scale harness (docs/scale.md): what one rank pays as the job grows.

    .venv/bin/python tools/bench_scale.py [--quick] [--out out/bench]

Builds //tools:ddstore_scale (-c opt) and runs it: ddstore-core as rank 0 of
R simulated ranks (R = 2 ... 100,000) with a recording transport, method 2's
record at n_core = R, method 1's per-rank state (sizes from the adapter's
code) and FileComm collectives with 2-16 forked processes on local disk.
Results: OUT/scale.json (JSON lines, with commit, load average and the
command) and OUT/scale.png (log axes).  Also run by ./ddstore bench
(tools/bench.py, unless --no-scale).
"""
import argparse
import json
import os
import subprocess
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(TOP, "bazel-bin", "tools", "ddstore_scale")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import _line  # noqa: E402  (one rule for lines across points)

# Job sizes docs/scale.md models (vertical guides on every R axis).
MARKS = (1024, 16384, 75000)


def load(path):
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                out.setdefault(r["kind"], []).append(r)
    return out


def _series(ax, recs, x, y, label, **kw):
    pts = sorted((r[x], r[y]) for r in recs if r.get(y) is not None)
    if pts:
        _line(ax, [p[0] for p in pts], [p[1] for p in pts], label=label, **kw)


def plot(path_json, path_png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = load(path_json)
    core, m1, m2 = d.get("scale_core", []), d.get("scale_method1", []), d.get("scale_method2", [])
    fc = d.get("scale_filecomm", [])
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    (a_mem, a_add, a_plan), (a_m2, a_gath, a_fc) = axes

    _series(a_mem, core, "nranks", "meta_bytes_per_var", "core: kept per variable (measured)",
            color="tab:blue", marker="o")
    _series(a_mem, m1, "nranks", "remotes_bytes_per_var", "method 1: remotes per variable",
            color="tab:orange", marker="s", linestyle="--")
    _series(a_mem, m1, "nranks", "addr_table_bytes", "method 1: address table per store",
            color="tab:green", marker="^", linestyle="-.")
    _series(a_mem, m1, "nranks", "peers_bytes_per_reader", "method 1: peers per reader",
            color="tab:red", marker="v", linestyle=":")
    a_mem.set_title("bytes one rank keeps")

    _series(a_add, core, "nranks", "add_us", "var_add (1-row shard)", color="tab:blue", marker="o")
    _series(a_add, core, "nranks", "init_us", "var_init (1-row shard)", color="tab:orange",
            marker="s", linestyle="--")
    _series(a_add, core, "nranks", "create_us", "store create", color="tab:green", marker="^",
            linestyle=":")
    a_add.set_title("collective calls, local work (µs; network not included)")

    _series(a_plan, core, "nranks", "plan_us", "dds_plan_batch", color="tab:blue", marker="o")
    _series(a_plan, core, "nranks", "get_batch_us", "get_batch (recording transport)",
            color="tab:orange", marker="s", linestyle="--")
    a_plan.set_title("per batch of %s random rows (µs)" % (core[0]["batch"] if core else "?"))

    _series(a_m2, m2, "n_core", "record_bytes", "record bytes (format 1)", color="tab:blue",
            marker="o")
    _series(a_m2, m2, "n_core", "needed_bytes", "bytes a reader needs", color="tab:green",
            marker="^", linestyle=":")
    _series(a_m2, m2, "n_core", "parse_us", "parse (µs)", color="tab:orange", marker="s",
            linestyle="--")
    _series(a_m2, m2, "n_core", "encode_us", "encode (µs)", color="tab:red", marker="v",
            linestyle="-.")
    a_m2.set_title("method 2 record vs n_core")

    _series(a_gath, core, "nranks", "gathered_bytes_per_add", "core: per var_add",
            color="tab:blue", marker="o")
    _series(a_gath, m1, "nranks", "gathered_bytes_per_var", "method 1: per variable",
            color="tab:orange", marker="s", linestyle="--")
    _series(a_gath, m1, "nranks", "gathered_bytes_create", "method 1: store create",
            color="tab:green", marker="^", linestyle="-.")
    a_gath.set_title("bytes each rank receives from allgathers")

    _series(a_fc, fc, "nranks", "allgather_us", "allgather 64 B", color="tab:blue", marker="o")
    _series(a_fc, fc, "nranks", "allreduce_us", "allreduce 1 x int64", color="tab:orange",
            marker="s", linestyle="--")
    _series(a_fc, fc, "nranks", "barrier_us", "barrier", color="tab:green", marker="^",
            linestyle=":")
    a_fc.set_title("FileComm on local disk, per collective (µs)")
    a_fc.set_xlabel("processes")

    for ax in axes.flat:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.grid(True, which="major", alpha=0.3)
        if ax is not a_fc:
            ax.set_xlabel("ranks R (n_core for method 2)")
            for m in MARKS:
                ax.axvline(m, color="grey", linewidth=0.6, alpha=0.5)
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle("ddstore at scale: rank 0 of R simulated ranks (grey: 1,024, 16,384, 75,000)")
    fig.tight_layout()
    fig.savefig(path_png, dpi=110)
    print(f"plot: {path_png}")


def run(out, quick, extra=()):
    """Build, run, plot.  Returns the harness's exit status."""
    if subprocess.run(["bazel", "build", "-c", "opt", "//tools:ddstore_scale"],
                      cwd=TOP).returncode:
        print("building //tools:ddstore_scale failed", file=sys.stderr)
        return 1
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "scale.json")
    if os.path.exists(path):
        os.remove(path)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=TOP, capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=TOP,
                           capture_output=True, text=True).stdout.strip()
    cmd = [BIN, "--json", path] + (["--quick"] if quick else []) + list(extra)
    with open(path, "a") as f:
        f.write(json.dumps({"kind": "run", "commit": head + ("+dirty" if dirty else ""),
                            "loadavg": os.getloadavg(), "cpus": os.cpu_count(),
                            "cmd": cmd}) + "\n")
    print("+ " + " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, cwd=TOP).returncode
    try:
        plot(path, os.path.join(out, "scale.png"))
    except ImportError as e:
        print(f"plot skipped: {e}", file=sys.stderr)
    print(f"results: {path}")
    return rc


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="R up to 4,096, fewer rounds")
    ap.add_argument("--out", default=os.path.join(TOP, "out", "bench"))
    ap.add_argument("--plot-only", metavar="JSON", help="redraw the PNG from a scale.json")
    ap.add_argument("harness_args", nargs="*",
                    help="passed to ddstore_scale after --, e.g. -- --filecomm 2,4")
    args = ap.parse_args()
    if args.plot_only:
        plot(args.plot_only, os.path.join(args.out, "scale.png"))
        return 0
    return run(args.out, args.quick, args.harness_args)


if __name__ == "__main__":
    sys.exit(main())
