#!/usr/bin/env python3
"""The scale harness (docs/scale.md): what one rank pays as the job grows.

    .venv/bin/python tools/bench_scale.py [--quick] [--out out/bench]

Builds //tools:ddstore_scale (-c opt) and runs it: ddstore-core as rank 0 of
R simulated ranks (R = 2 ... 100,000) with a recording transport, method 2's
record at n_core = R, method 1's per-rank state (sizes from the adapter's
code, and the real adapter over the simulated ranks with --ofi's provider,
default tcp;ofi_rxm, measured by malloc accounting) and FileComm collectives with 2-16 forked processes on local disk.
Results: OUT/scale.json (JSON lines, with commit, load average and the
command; then the model of docs/scale.md for 1,024, 16,384 and 75,000 ranks,
kind "scale_model", with its assumptions) and OUT/scale.png (log axes).
The model's table alone: --model OUT/scale.json.  Also run by ./ddstore bench
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


# The model of docs/scale.md: every assumption is a named constant here.
ASSUME = {
    "alpha_us": 2.3,            # Slingshot one-way small-message latency
    "nic_gbps": 24.0,           # bytes per ns (GB/s) per NIC
    "ranks_per_nic": 2,         # 8 ranks per node, 4 NICs (Frontier-like)
    "ranks_per_node": 8,
    "read_one_us": 8.8,         # original ddstore on Slingshot, 3 KB single read (8.6-9.0)
    "read_row_us": 0.75,        # ... per row in batches of 128 (0.68-0.82)
    "av_insert_us": 1.0,        # fi_av_insert per peer (not measured here: no cxi)
    "addr_blob_bytes": 64,      # an address blob: 48-byte header + a 16-byte address
                                # (tcp's sockaddr_in; cxi's is smaller)
    "av_entry_bytes": 32,       # endpoint + provider memory per peer and reader
                                # (beyond ddstore's 8): replaced by the figure
                                # measured with --ofi when the run has it
    "ofi_add_ns_per_rank": 239.0,  # the adapter's local work per variable and rank
                                # (region create: importing every rank's
                                # registration and shard record): 17.9 ms per
                                # variable at 75,000 ranks with tcp;ofi_rxm
                                # (--ofi's add_ms); replaced by the figure
                                # measured with --ofi when the run has it
    "readers": 4,               # reader threads per rank (each its own endpoint + AV)
    "variables": 3,             # variables per store (e.g. samples, labels, sizes)
    "mds_ops_per_s": 50000.0,   # parallel file system metadata operations per second
    "pfs_file_gbps": 5.0,       # aggregate read rate of one (unstriped) file, GB/s
}

# (label, store ranks R, job ranks): 16,384 = 2,048 nodes x 8 in groups of
# 256 nodes (ddstore_width = 2,048 ranks), and the same job as one store.
CASES = [("1,024", 1024, 1024), ("16,384, width 2,048", 2048, 16384),
         ("16,384, one store", 16384, 16384), ("75,000", 75000, 75000)]


def _at(recs, key, R, field):
    """The measured value at R (the harness measures at 2^k, 75,000, 100,000;
    log-log interpolation in between)."""
    import math
    pts = sorted((r[key], r[field]) for r in recs)
    for x, y in pts:
        if x == R:
            return y
    lo = max((p for p in pts if p[0] < R), default=pts[0])
    hi = min((p for p in pts if p[0] > R), default=pts[-1])
    if lo[0] == hi[0] or lo[1] <= 0 or hi[1] <= 0:
        return lo[1]
    t = (math.log(R) - math.log(lo[0])) / (math.log(hi[0]) - math.log(lo[0]))
    return math.exp(math.log(lo[1]) + t * (math.log(hi[1]) - math.log(lo[1])))


def model(path_json):
    """Memory, start-up time and read latency per rank for CASES, from the
    measured figures in path_json and ASSUME.  Returns a list of dicts."""
    import math
    d = load(path_json)
    core, m2 = d["scale_core"], d.get("scale_method2", [])
    fc = d.get("scale_filecomm", [])
    a = dict(ASSUME)
    # readers that inserted every peer at open (runs before DDSTORE_OFI_PEERS
    # have no "peers" field: they were eager)
    ofi = sorted((r for r in d.get("scale_ofi", []) if r.get("peers", "eager") == "eager"),
                 key=lambda r: r["nranks"])
    if len(ofi) >= 2 and ofi[-1]["nranks"] > ofi[0]["nranks"]:
        # the provider's bytes per peer and reader, beyond ddstore's 8
        span = ofi[-1]["nranks"] - ofi[0]["nranks"]
        per_peer = (ofi[-1]["reader_bytes"] - ofi[0]["reader_bytes"]) / span
        a["av_entry_bytes"] = round(max(per_peer - 8, 0))
        a["av_entry_bytes_source"] = "measured with %s at open" % ofi[0]["provider"]
    # what a reader holds once it has read from every rank (the model's "...
    # once every reader read from every rank" rows): more than an eager
    # reader at open (the provider's connection state comes with the reads)
    # (the slope between the smallest and largest R read that way: the
    # provider's buffers do not depend on R)
    read = sorted((r for r in d.get("scale_ofi", [])
                   if r.get("peers") == "lazy" and r.get("reader_bytes_all_read", -1) > 0),
                  key=lambda r: r["nranks"])
    if len(read) >= 2 and read[-1]["nranks"] > read[0]["nranks"]:
        per_peer = ((read[-1]["reader_bytes_all_read"] - read[0]["reader_bytes_all_read"])
                    / (read[-1]["nranks"] - read[0]["nranks"]))
        a["av_entry_bytes"] = round(max(per_peer - 8, 0))
        a["av_entry_bytes_source"] = "measured with %s after reading from every rank, R %d-%d" % (
            read[0]["provider"], read[0]["nranks"], read[-1]["nranks"])
    # the adapter's own work per variable: var_add's wall time over the real
    # adapter (lazy peers), interpolated at R; ASSUME's per-rank figure
    # where the run has none
    adds = [r for r in d.get("scale_ofi", []) if r.get("peers") == "lazy" and r.get("add_ms", 0) > 0]
    if adds:
        a["ofi_add_source"] = "measured with %s, R %d-%d" % (
            adds[0]["provider"], min(r["nranks"] for r in adds), max(r["nranks"] for r in adds))

    def ofi_add_us(R):
        if adds:
            return max(_at(adds, "nranks", R, "add_ms") * 1e3 - _at(core, "nranks", R, "add_us"), 0)
        return a["ofi_add_ns_per_rank"] * R / 1e3
    bw = a["nic_gbps"] * 1e3 / a["ranks_per_nic"]        # bytes per µs per rank
    out = []
    for label, R, job in CASES:
        steps = math.ceil(math.log2(R))
        allreduce = steps * a["alpha_us"]

        def allgather(b):
            return steps * a["alpha_us"] + (R - 1) * b / bw
        # start-up: store create (method 1: 4 agreements, the allreduce of
        # the longest address, hosts gathered, addresses gathered at that
        # length: ddofi_transport_create) and each variable's add; readers
        # insert a peer at their first read from it (DDSTORE_OFI_PEERS=lazy,
        # the default) or all when they open (eager)
        blob = a["addr_blob_bytes"]
        create = (_at(core, "nranks", R, "create_us") + 5 * allreduce + allgather(64)
                  + allgather(blob))
        # core: 4 agreements + 1 allgather of 40 B; method 1's region: 2
        # agreements + 1 allgather of 80 B (the 48-byte registration blob and
        # the 32-byte shard record) and its local work, about linear in R
        add = (_at(core, "nranks", R, "add_us") + 6 * allreduce + allgather(40)
               + allgather(80) + ofi_add_us(R))
        inserts_ms = a["readers"] * R * a["av_insert_us"] / 1e3
        startup_ms = (create + a["variables"] * add) / 1e3
        # memory kept per rank (bytes): at start (lazy) and once every reader
        # has read from every owner (= eager's at start)
        core_b = a["variables"] * _at(core, "nranks", R, "meta_bytes_per_var")
        m1_b = blob * R + a["readers"] * 8 * R + a["variables"] * 40 * R
        m1_all_b = m1_b + a["readers"] * a["av_entry_bytes"] * R
        peak_b = (64 + blob) * R               # store create: hosts + addresses
        # reads: Slingshot figures + the planner's growth measured here
        # (least disturbed rounds: the growth, not other processes' time)
        one = a["read_one_us"] + (_at(core, "nranks", R, "get_one_min_us")
                                  - _at(core, "nranks", 2, "get_one_min_us"))
        batch = 128 * a["read_row_us"] + (_at(core, "nranks", R, "get_batch_min_us")
                                          - _at(core, "nranks", 2, "get_batch_min_us"))
        # method 2: every reader rank reads and parses the whole record
        # the record as the harness encoded it (format 3), else format 2's size
        rec = _at(m2, "n_core", R, "record_bytes") if m2 else 512 + 480 * R
        m2_parse_ms = _at(m2, "n_core", R, "parse_us") / 1e3 if m2 else None
        m2_read_s = job * rec / (a["pfs_file_gbps"] * 1e9)
        # FileComm on a parallel file system: per collective each rank
        # creates, renames and later unlinks its file and opens every
        # peer's: 3R + R^2 metadata operations (no polling misses counted)
        fc_s = (3 * R + R * R) / a["mds_ops_per_s"]
        out.append({
            "kind": "scale_model", "case": label, "store_ranks": R, "job_ranks": job,
            "memory_core_bytes": core_b, "memory_method1_bytes": m1_b,
            "memory_method1_all_peers_bytes": m1_all_b,
            "memory_per_node_bytes": (core_b + m1_b) * a["ranks_per_node"],
            "memory_per_node_all_peers_bytes": (core_b + m1_all_b) * a["ranks_per_node"],
            "startup_peak_bytes": peak_b, "startup_ms": startup_ms,
            "startup_eager_ms": startup_ms + inserts_ms,
            "startup_av_ms": inserts_ms,
            "read_one_us": one, "read_batch_us": batch,
            "plan_share_one": (one - a["read_one_us"]) / one,
            "plan_share_batch": (batch - 128 * a["read_row_us"]) / batch,
            "method2_record_bytes": rec, "method2_parse_ms": m2_parse_ms,
            "method2_record_reads_s": m2_read_s,
            "filecomm_s_per_collective": fc_s,
            "filecomm_s_per_add": 8 * fc_s,       # core 5 + method 1's region 3
            "assumptions": a,
        })
    return out


def print_model(rows):
    def mb(b):
        return "%.2f MB" % (b / 1e6)
    print("| | " + " | ".join(r["case"] for r in rows) + " |")
    print("|---" * (len(rows) + 1) + "|")
    lines = [
        ("store ranks R", lambda r: "{:,}".format(r["store_ranks"])),
        ("memory per rank, core (%d variables)" % ASSUME["variables"],
         lambda r: mb(r["memory_core_bytes"])),
        ("memory per rank, method 1 (%d readers), at start" % ASSUME["readers"],
         lambda r: mb(r["memory_method1_bytes"])),
        ("... once every reader read from every rank",
         lambda r: mb(r["memory_method1_all_peers_bytes"])),
        ("memory per node (%d ranks), at start" % ASSUME["ranks_per_node"],
         lambda r: mb(r["memory_per_node_bytes"])),
        ("... once every reader read from every rank",
         lambda r: mb(r["memory_per_node_all_peers_bytes"])),
        ("start-up per rank (create + variables + readers)", lambda r: "%.1f ms" % r["startup_ms"]),
        ("address-vector inserts per rank (first reads; eager: at start)",
         lambda r: "%.1f ms" % r["startup_av_ms"]),
        ("single-row read (3 KB)", lambda r: "%.1f µs (planner %.0f %%)" % (
            r["read_one_us"], 100 * r["plan_share_one"])),
        ("batch of 128 × 3 KB", lambda r: "%.0f µs (planner %.0f %%)" % (
            r["read_batch_us"], 100 * r["plan_share_batch"])),
        ("method-2 record per variable", lambda r: mb(r["method2_record_bytes"])),
        ("... parse per reader rank", lambda r: "%.1f ms" % r["method2_parse_ms"]
         if r["method2_parse_ms"] is not None else "-"),
        ("... every job rank reads it once", lambda r: "%.1f s" % r["method2_record_reads_s"]),
        ("FileComm per collective (PFS)", lambda r: "%.1f s" % r["filecomm_s_per_collective"]),
    ]
    for name, f in lines:
        print("| %s | %s |" % (name, " | ".join(f(r) for r in rows)))
    a = rows[0]["assumptions"]
    print("\nendpoint and provider bytes per peer and reader, beyond ddstore's 8: %d (%s)"
          % (a["av_entry_bytes"], a.get("av_entry_bytes_source", "assumed")))


# The PNG's panels: title, x field, and the series (kind, y field, label).
# Read-path series are the least disturbed of the harness's rounds (a
# shared machine adds other processes' time to the others).
PANELS = [
    ("bytes one rank keeps", "nranks", [
        ("scale_core", "meta_bytes_per_var", "core: kept per variable (measured)"),
        ("scale_method1", "remotes_bytes_per_var", "method 1: remotes per variable"),
        ("scale_method1", "addr_table_bytes", "method 1: address table per store"),
        ("scale_method1", "peers_bytes_per_reader", "method 1: peers per reader")]),
    ("libfabric adapter: bytes beyond those at the smallest R", "nranks", [
        ("scale_ofi_lazy", "store_growth", "per store, lazy peers (measured)"),
        ("scale_ofi_eager", "store_growth", "per store, eager peers (measured)"),
        ("scale_ofi_lazy", "reader_growth", "per reader at open, lazy (measured)"),
        ("scale_ofi_eager", "reader_growth", "per reader at open, eager (measured)")]),
    ("collective calls, local work (µs; network not included)", "nranks", [
        ("scale_core", "add_us", "var_add (1-row shard)"),
        ("scale_core", "init_us", "var_init (1-row shard)"),
        ("scale_core", "create_us", "store create")]),
    ("read path, 128 random rows / one row (µs, best round)", "nranks", [
        ("scale_core", "plan_min_us", "dds_plan_batch"),
        ("scale_core", "get_batch_min_us", "get_batch (recording transport)"),
        ("scale_core", "get_one_min_us", "get, one row (dds_plan_range)")]),
    ("method 2 record vs n_core", "n_core", [
        ("scale_method2", "record_bytes", "record bytes (format 3)"),
        ("scale_method2", "needed_bytes", "bytes a reader needs"),
        ("scale_method2", "parse_us", "parse (µs)"),
        ("scale_method2", "encode_us", "encode (µs)")]),
    ("bytes each rank receives from allgathers", "nranks", [
        ("scale_core", "gathered_bytes_per_add", "core: per var_add"),
        ("scale_method1", "gathered_bytes_per_var", "method 1: per variable"),
        ("scale_method1", "gathered_bytes_create", "method 1: store create")]),
    ("FileComm on local disk, per collective (µs)", "nranks", [
        ("scale_filecomm", "allgather_us", "allgather 64 B"),
        ("scale_filecomm", "allreduce_us", "allreduce 1 x int64"),
        ("scale_filecomm", "barrier_us", "barrier")]),
]
_STYLES = [("tab:blue", "o", "-"), ("tab:orange", "s", "--"), ("tab:green", "^", ":"),
           ("tab:red", "v", "-.")]


def plot(path_json, path_png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = load(path_json)
    # the adapter's bytes that grow with R (tcp's buffers do not), per
    # DDSTORE_OFI_PEERS mode (runs without the field were eager)
    for mode in ("eager", "lazy"):
        ofi = sorted((r for r in d.get("scale_ofi", []) if r.get("peers", "eager") == mode),
                     key=lambda r: r["nranks"])
        for r in ofi[1:]:
            for k in ("store", "reader", "var"):
                r[k + "_growth"] = r[k + "_bytes"] - ofi[0][k + "_bytes"]
        d["scale_ofi_" + mode] = ofi[1:]
    fig, axes = plt.subplots(2, 4, figsize=(21, 8.5))
    for ax, (title, x, series) in zip(axes.flat, PANELS):
        for (kind, y, label), (colour, marker, style) in zip(series, _STYLES):
            _series(ax, d.get(kind, []), x, y, label, color=colour, marker=marker,
                    linestyle=style)
        ax.set_title(title)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.grid(True, which="major", alpha=0.3)
        if series[0][0] == "scale_filecomm":
            ax.set_xlabel("processes")
        else:
            ax.set_xlabel("ranks R (n_core for method 2)")
            for m in MARKS:
                ax.axvline(m, color="grey", linewidth=0.6, alpha=0.5)
        ax.legend(fontsize=7, loc="upper left")
    for ax in list(axes.flat)[len(PANELS):]:
        ax.axis("off")
    fig.suptitle("ddstore at scale: rank 0 of R simulated ranks (grey: 1,024, 16,384, 75,000)")
    fig.tight_layout()
    fig.savefig(path_png, dpi=110)
    print(f"plot: {path_png}")


def run(out, quick, extra=(), ofi="tcp;ofi_rxm"):
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
    cmd = [BIN, "--json", path, "--ofi", ofi] + (["--quick"] if quick else []) + list(extra)
    with open(path, "a") as f:
        f.write(json.dumps({"kind": "run", "commit": head + ("+dirty" if dirty else ""),
                            "loadavg": os.getloadavg(), "cpus": os.cpu_count(),
                            "cmd": cmd}) + "\n")
    print("+ " + " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, cwd=TOP).returncode
    if rc == 0:
        rows = model(path)
        with open(path, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        print_model(rows)
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
    ap.add_argument("--ofi", default="tcp;ofi_rxm",
                    help="provider for the measured libfabric adapter points ('' = none)")
    ap.add_argument("--plot-only", metavar="JSON", help="redraw the PNG from a scale.json")
    ap.add_argument("--model", metavar="JSON",
                    help="print docs/scale.md's table from a scale.json (no run)")
    ap.add_argument("harness_args", nargs="*",
                    help="passed to ddstore_scale after --, e.g. -- --filecomm 2,4")
    args = ap.parse_args()
    if args.model:
        print_model(model(args.model))
        return 0
    if args.plot_only:
        os.makedirs(args.out, exist_ok=True)
        plot(args.plot_only, os.path.join(args.out, "scale.png"))
        return 0
    return run(args.out, args.quick, args.harness_args, args.ofi)


if __name__ == "__main__":
    sys.exit(main())
