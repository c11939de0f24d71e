#!/usr/bin/env python3
"""Remote batch reads across simulated nodes against docs/scale.md's model.

    .venv/bin/python tools/bench_nodes.py [--out out/bench-nodes] [--png PATH]
                                          [--no-method0] [--from JSON]

Runs `tools/ddrun --nodes 2 -n 2 --delay 0` with python/tests/nodes_job.py
bench (rank 0 on node0 reads batches of rank 1's rows on node1): method 1
over tcp (--plain, a FileComm) and method 0 (mpirun, Open MPI osc/ucx over
tcp), under each condition of nodes_job.BENCH_CONDS: a one-way delay on
every connection between the nodes (ddrun's relays: 0, 50 us, 1 ms, 5 ms,
20 ms), a tc tbf rate on node1's link both ways (1 Gbit/s, 200 Mbit/s,
50 Mbit/s), and both.  Shapes (nodes_job.bench_shapes): 128 scattered rows
of 3,136 B (128 reads), the same bytes as 128 adjacent rows (1 read), 8 rows
of 1 MiB (8 reads), and 128 rows of 4 fields of 784 B read one get_batch per
field (4 x 128 reads; packing the fields into one row reads what the first
shape reads).  Then (nodes_job.py owners, 3 nodes x 1 rank) 128 scattered
rows from one remote owner and from two, at 0, 5 and 20 ms.

The model (docs/scale.md, "Checked across simulated nodes"), per get_batch
call of B bytes:

    t = 2 D + max(t0, B / (rate x goodput) - refill)

D the one-way delay (a batch's reads are posted together: one round trip
per call, whatever the number of reads), t0 the path's own cost (the shape
measured with no delay and no limit), goodput the TCP payload share of an
Ethernet frame at MTU 1500 (1448 / 1514), refill what the token bucket
(tbf burst b) refills while the link idles for the round trip:
min(b, rate x 2 D) / rate.  A sample of F fields read per field takes F
calls: F x (2 D + max(t0 / F, ...)).  Owners: one round trip per call
(both methods).  t0 is fitted: the least of
measured - F x 2 D over the points without a rate limit.  Prints measured and modelled ms per
batch, writes OUT/bench_nodes.json and a measured-vs-modelled plot
(--png, default OUT/bench_nodes.png).  --from JSON re-plots a saved run.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TOP, "python", "tests"))
import nodes_job  # noqa: E402

GOODPUT = 1448 / 1514
SHAPE_LABEL = {"small": "128 x 3,136 B, 128 reads", "run": "128 x 3,136 B adjacent, 1 read",
               "big": "8 x 1 MiB, 8 reads", "fields": "128 x 4 fields of 784 B, per field",
               "owners2": "128 x 3,136 B from 2 owners (3 nodes)"}


def seconds(d):
    """50us, 1ms, 0.02s, 0 -> seconds."""
    for unit, f in (("us", 1e-6), ("ms", 1e-3), ("s", 1.0)):
        if d.endswith(unit):
            return float(d[:-len(unit)]) * f
    return float(d)


def bits_per_s(r):
    for unit, f in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if r.endswith(unit):
            return float(r[:-len(unit)]) * f
    return float(r)


def nbytes(b):
    return int(b[:-2]) * 1024 if b.endswith("kb") else int(b)


def shape_bytes():
    """name -> (bytes per get_batch call, calls per batch)."""
    out = {}
    for name, (_, n, b, _, nf) in nodes_job.bench_shapes(0, 1).items():
        out[name] = (n * b, nf)
    return out


def path_cost(res, shape, nf):
    """t0: the shape's own cost, the least of measured - nf x 2 D over the
    conditions without a rate limit (the least disturbed figure: on a
    loaded machine the delay-0 point alone is as noisy as any)."""
    pts = [ms - nf * 2e3 * seconds(k.split("@")[1].split("/")[0])
           for k, ms in res.items() if k.startswith(shape + "@") and k.endswith("/none/-")]
    return min(pts) if pts else None


def run_method(method, timeout, job="bench", nodes=2):
    """One ddrun of a nodes_job.py job (bench: 2 nodes; owners: 3); its
    BENCH / OWNERS record, or raises."""
    tag = {"bench": "BENCH", "owners": "OWNERS", "pack": "PACK"}[job]
    with tempfile.TemporaryDirectory(prefix="bench-nodes.", dir="/tmp") as d:
        env = dict(os.environ, DDSTORE_FABRIC="tcp", PYTHONPATH=os.path.join(TOP, "python"))
        env.setdefault("DDRUN_PYTHON", sys.executable)   # the relays
        cmd = [os.path.join(TOP, "tools", "ddrun"), "--nodes", str(nodes), "-n", str(nodes),
               "--delay", "0", "--timeout", str(timeout)] + (["--plain"] if method == 1 else []) + [
               "--", sys.executable, os.path.join(TOP, "python", "tests", "nodes_job.py"),
               job, d, str(method)]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    i = p.stdout.find(tag + " {")
    if p.returncode != 0 or i < 0:
        raise RuntimeError("method %d, %s: ddrun exit %d\n%s%s" % (
            method, job, p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
    return json.JSONDecoder().raw_decode(p.stdout, i + len(tag) + 1)[0]


def owner_rows(owners):
    """[(method, "owners1"/"owners2", delay, "none", "-", measured, modelled)]:
    one round trip per batch whatever the owners, both methods (method 0
    completes a batch's gets to several owners with one
    MPI_Win_flush_local_all; it used to flush each owner in turn, and
    osc/ucx over tcp then paid one round trip per owner)."""
    rows = []
    for method, res in sorted(owners.items()):
        for name, k in (("one", 1), ("two", 2)):
            trips = 1
            pts = {key.split("@")[1]: ms for key, ms in res.items() if key.startswith(name + "@")}
            t0 = min(ms - trips * 2e3 * seconds(dl) for dl, ms in pts.items())
            for dl, ms in sorted(pts.items()):
                rows.append((method, "owners%d" % k, dl, "none", "-", ms,
                             trips * 2e3 * seconds(dl) + t0))
    return rows


def model_rows(meas):
    """[(method, shape, delay, rate, burst, measured ms, modelled ms)]."""
    sizes = shape_bytes()
    rows = []
    for method, res in sorted(meas.items()):
        for key, ms in sorted(res.items()):
            shape, cond = key.split("@")
            delay, rate, burst = cond.split("/")
            per_call, nf = sizes[shape]
            t0 = path_cost(res, shape, nf)
            if t0 is None:
                continue
            rtt = 2e3 * seconds(delay)
            xfer = 0.0
            if rate != "none":
                bps = bits_per_s(rate)
                refill = min(nbytes(burst), bps / 8 * rtt / 1e3) / (bps / 8) * 1e3
                xfer = max(0.0, 1e3 * per_call * 8 / (bps * GOODPUT) - refill)
            mod = nf * (rtt + max(t0 / nf, xfer))
            rows.append((method, shape, delay, rate, burst, ms, mod))
    return rows


def plot(rows, path, note):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 5.2))
    marks = {"small": "o", "run": "^", "big": "s", "fields": "D", "owners2": "*"}
    colors = {1: "tab:blue", 0: "tab:orange"}
    for method in sorted({r[0] for r in rows}, reverse=True):
        for shape, mark in marks.items():
            pts = [(r[6], r[5]) for r in rows if r[0] == method and r[1] == shape]
            if pts:
                ax.scatter([x for x, _ in pts], [y for _, y in pts], marker=mark, s=28,
                           facecolors="none" if method == 0 else colors[1],
                           edgecolors=colors[method],
                           label="method %d: %s" % (method, SHAPE_LABEL[shape]))
    hi = 2 * max(max(r[5], r[6]) for r in rows)
    lo = 0.5 * min(min(r[5], r[6]) for r in rows)
    ax.plot([lo, hi], [lo, hi], "k:", lw=1, label="measured = modelled")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("modelled ms per batch: 2D + max(t0, bytes / (rate x goodput))")
    ax.set_ylabel("measured ms per batch")
    ax.set_title("remote reads across simulated nodes: delay 0-20 ms, tbf 1 Gbit/s-50 Mbit/s",
                 fontsize=9)
    ax.text(0.02, 0.98, note, transform=ax.transAxes, fontsize=7, va="top")
    ax.legend(fontsize=6.5, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(TOP, "out", "bench-nodes"))
    ap.add_argument("--png", default=None, help="the plot (default OUT/bench_nodes.png)")
    ap.add_argument("--no-method0", action="store_true", help="method 1 only")
    ap.add_argument("--from", dest="src", default=None, help="re-plot a saved bench_nodes.json")
    ap.add_argument("--timeout", type=int, default=900)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.src:
        with open(args.src) as f:
            saved = json.load(f)
        meas = {int(k): v for k, v in saved["measured_ms"].items()}
        owners = {int(k): v for k, v in saved.get("owners_ms", {}).items()}
        load = saved.get("load", [])
    else:
        meas, owners, load = {}, {}, [os.getloadavg()[0]]
        for method in (1,) if args.no_method0 else (1, 0):
            try:
                meas[method] = run_method(method, args.timeout)
                owners[method] = run_method(method, args.timeout, "owners", 3)
            except RuntimeError as e:
                if method == 1:
                    sys.stderr.write(str(e))
                    return 1
                sys.stderr.write("bench_nodes: %s\n(method 0 left out)\n" % e)
            load.append(os.getloadavg()[0])
    rows = model_rows(meas) + owner_rows(owners)
    print("method shape   delay  rate     burst  measured ms  modelled ms")
    for m, shape, delay, rate, burst, ms, mod in rows:
        print("%6d %-7s %-6s %-8s %-6s %11.2f %12.2f" % (m, shape, delay, rate, burst, ms, mod))
    cores = os.cpu_count() or 1
    note = "load average %s on %d cores%s" % (
        "-".join("%.1f" % x for x in (min(load), max(load))) if load else "?", cores,
        ": above 1 per core, regenerate on a quiet machine" if load and max(load) > cores
        else "")
    with open(os.path.join(args.out, "bench_nodes.json"), "w") as f:
        json.dump({"measured_ms": meas, "owners_ms": owners, "rows": rows, "goodput": GOODPUT, "load": load,
                   "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, f, indent=1)
    png = args.png or os.path.join(args.out, "bench_nodes.png")
    try:
        plot(rows, png, note)
        print("wrote", png)
    except ImportError:
        print("matplotlib not installed: no plot (./ddstore setup installs it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
