#!/usr/bin/env python3
"""The runner behind published figures: every table it owns in docs/ is produced by it,
from rounds interleaved in one run, and `check` says which published cells a rerun does
not reproduce.

    .venv/bin/python tools/figures.py list
    .venv/bin/python tools/figures.py run NAME [NAME ...] [--rounds R] [--write]
    .venv/bin/python tools/figures.py check NAME [NAME ...] [--rounds R] [--tol 0.1]

A figure has arms (commands: A, B, C ...). `run` runs them A B C A B C ... for R
rounds, reads each arm's JSON result of each round, and writes out/figures/NAME.json:
the commit (and whether the tree was dirty), the DDSTORE_*/FI_* settings, the cores,
the load average before every arm's run (each arm first waits, up to --settle
seconds, for it to fall to 1 per core: an arm's own load decays over a minute or
two), and every round's raw result. The table's
cells are the median over rounds and the min–max spread; a ratio between two arms is
taken inside each round (the two ran back to back) and then summarised the same way.

`--write` replaces the table in the figure's doc, between the markers
`<!-- figure NAME -->` and `<!-- /figure NAME -->`, with the command, commit and load
above it, and stores the published cells in docs/figures/NAME.json. A run taken with
the 1-minute load above 1 per core is refused for `--write` unless `--loaded`, and the
table then says so in its first line.

`check` reruns the figure and compares each published cell: the new median must lie
in the published min–max spread widened by --tol (relative, default 0.10). It prints
every cell (ok / NOT REPRODUCED), and exits 1 when a cell is not reproduced; 2 when
the machine is loaded (the comparison would mean nothing), unless --loaded.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
DDRUN = os.path.join(TOP, "tools", "ddrun")


class Arm:
    """One command of a figure. `{json}` in argv is replaced by a fresh file the
    command writes its result to (JSON, or JSON lines); `{dir}` by a fresh folder,
    with the result read from the file `result` in it; without either the last
    stdout line that starts with '{' is the result."""

    def __init__(self, name, argv, env=None, result=None):
        self.name, self.argv, self.env = name, list(argv), dict(env or {})
        self.result = result        # a file the command writes under {dir}

    def shell(self):
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return (env + " " if env else "") + " ".join(shlex.quote(a) for a in self.argv)

    def run(self, timeout):
        with tempfile.TemporaryDirectory(prefix="ddfig.") as d:
            path = os.path.join(d, "result.json")
            argv = [a.replace("{json}", path).replace("{dir}", d) for a in self.argv]
            if self.result:
                path = os.path.join(d, self.result)
            env = dict(os.environ, **self.env)
            p = subprocess.run(argv, env=env, cwd=TOP, capture_output=True, text=True,
                               timeout=timeout)
            if p.returncode != 0:
                raise RuntimeError(f"arm {self.name} failed (exit {p.returncode}): "
                                   f"{self.shell()}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
            if "{json}" in " ".join(self.argv) or self.result:
                with open(path) as f:
                    text = f.read()
                try:                    # one JSON document
                    return json.loads(text)
                except json.JSONDecodeError:  # JSON lines
                    lines = [json.loads(l) for l in text.splitlines() if l.strip()]
                    return lines if len(lines) != 1 else lines[0]
            last = [l for l in p.stdout.splitlines() if l.startswith("{")]
            if not last:
                raise RuntimeError(f"arm {self.name} printed no JSON line: {self.shell()}")
            return json.loads(last[-1])


class Figure:
    """A published table. `cells(rounds)` maps the rounds (a list of {arm: result})
    to rows: a list of (label, [(column, values over rounds), ...]); `columns` is
    the header after the label column."""

    def __init__(self, name, doc, what, arms, label, columns, cells, build=None,
                 timeout=900):
        self.name, self.doc, self.what = name, doc, what
        self.arms, self.label, self.columns = arms, label, columns
        self.cells, self.build, self.timeout = cells, build, timeout


def _us_rows(result):
    """ddstore_bench's JSON lines -> {(row_bytes, batch): us_per_row}."""
    rows = result if isinstance(result, list) else [result]
    return {(r["row_bytes"], r["batch"]): r["us_per_row"] for r in rows if "us_per_row" in r}


def _bench_arm(name, method, extra=(), env=None, sizes="3136,1048576", batches="128",
               seconds="0.3"):
    return Arm(name, [DDRUN, "-n", "2", "--timeout", "600", "--",
                      os.path.join(TOP, "bazel-bin", "tools", "ddstore_bench"),
                      "--method", str(method), "--sizes", sizes, "--batches", batches,
                      "--seconds", seconds, "--json", "{json}"] + list(extra), env)


def _m1_vs_m0_cells(rounds):
    out = []
    keys = sorted(_us_rows(rounds[0]["m0"]))
    for rb, batch in keys:
        m0 = [_us_rows(r["m0"])[(rb, batch)] for r in rounds]
        sh = [_us_rows(r["m1_shm"])[(rb, batch)] for r in rounds]
        tc = [_us_rows(r["m1_tcp"])[(rb, batch)] for r in rounds]
        label = f"{rb} B × {batch}" if rb < 1 << 20 else f"{rb >> 20} MiB × {batch}"
        out.append((label, [("method 0 µs/row", m0), ("method 1 shm µs/row", sh),
                            ("method 1 tcp µs/row", tc),
                            ("m1 shm speed / m0 (≥ 0.9 wanted)",
                             [a / b for a, b in zip(m0, sh)]),
                            ("m1 tcp speed / m0", [a / b for a, b in zip(m0, tc)])]))
    return out


def _torch_path_cells(rounds):
    out = []
    for nf in ("1", "3", "8"):
        for case in ("bare", "collate", "loader"):
            m0 = [r["m0"][nf][case][1] for r in rounds]
            m1 = [r["m1"][nf][case][1] for r in rounds]
            out.append((f"{nf} field(s), {case}",
                        [("method 0 µs/batch", m0), ("method 1 µs/batch", m1),
                         ("m1 speed / m0", [a / b for a, b in zip(m0, m1)])]))
    return out


def _pack_cells(rounds):
    """bench_pack.py's results (packed and per-field interleaved inside each run):
    rank 0's reads per batch and median time per batch, per method and sample."""
    out = []
    first = [r for r in rounds[0]["pack"]["results"] if r["rank"] == 0]
    for key in [(r["method"], r["sample"]) for r in first]:
        got = [next(x for x in r["pack"]["results"]
                    if x["rank"] == 0 and (x["method"], x["sample"]) == key) for r in rounds]
        out.append((f"method {key[0]}, {key[1]} ({got[0]['fields']} fields)", [
            ("remote reads/batch, packed", [g["packed"]["reads_per_batch"] for g in got]),
            ("remote reads/batch, per field", [g["per_field"]["reads_per_batch"] for g in got]),
            ("µs/batch, packed", [g["packed"]["us_per_batch_median"] for g in got]),
            ("µs/batch, per field", [g["per_field"]["us_per_batch_median"] for g in got]),
            ("packed speed / per field", [g["per_field"]["us_per_batch_median"] /
                                          g["packed"]["us_per_batch_median"] for g in got])]))
    return out


def _get_batch_cells(rounds):
    """bench_get_batch.py's JSON lines: per method and rank count, the medians
    of the program's own interleaved rounds (get_batch, np.take, clip)."""
    out = []
    res = lambda r: [x for x in r["get_batch"] if x.get("kind") == "get_batch_vs_take"]
    for first in res(rounds[0]):
        key = (first["method"], first["ranks"])
        got = [next(x for x in res(r) if (x["method"], x["ranks"]) == key) for r in rounds]
        out.append((f"method {key[0]}, {key[1]} rank{'s' if key[1] > 1 else ''}", [
            ("get_batch µs", [g["get_batch_us_median"] for g in got]),
            ("np.take µs", [g["np_take_us_median"] for g in got]),
            ("np.take clip µs", [g["np_take_clip_us_median"] for g in got]),
            ("get_batch / np.take (≤ 1.1 wanted)", [g["ratio_median"] for g in got]),
            ("get_batch / clip", [g["ratio_clip_median"] for g in got])]))
    return out


def _loaders_cells(rounds):
    """bench_loaders.py: per dataset and loader the median epoch's samples/s without
    and with compute and the node's PSS added by data + loader; per dataset ddstore's
    samples/s over the best other loader's of the same run, and its memory over the
    in-memory baseline's (torch-w0)."""
    def ok(r):
        return [x for x in r["loaders"]["results"] if "epochs" in x and "failed" not in x
                and "skipped" not in x]

    def sps(x, label):
        es = sorted((e["samples_per_s"] for e in x["epochs"] if e["epoch"] == label))
        return es[len(es) // 2]
    out = []
    first = ok(rounds[0])
    for dset in dict.fromkeys(x["dataset"] for x in first):
        cases = [x["case"] for x in first if x["dataset"] == dset]
        per = [{x["case"]: x for x in ok(r) if x["dataset"] == dset} for r in rounds]
        for c in cases:
            out.append((f"{dset}, {c}", [
                ("samples/s, no compute", [sps(p[c], "no compute") for p in per]),
                ("samples/s, compute", [sps(p[c], "compute") for p in per]),
                ("node PSS added, MiB", [p[c]["node_peak_pss_above_start_mib"] for p in per])]))
        others = [c for c in cases if not c.startswith("ddstore")]
        for c in [c for c in cases if c.startswith("ddstore")]:
            if not others:
                continue
            row = []
            for label in ("no compute", "compute"):
                row.append((f"samples/s ÷ the best other loader's, {label}",
                            [sps(p[c], label) / max(sps(p[o], label) for o in others)
                             for p in per]))
            if "torch-w0" in cases:
                row.append(("node PSS added ÷ torch-w0's", [p[c]["node_peak_pss_above_start_mib"] /
                                                    p["torch-w0"]["node_peak_pss_above_start_mib"]
                                                    for p in per]))
            out.append((f"{dset}, {c} vs the others", row))
    return out


_BENCH_BUILD = ["bazel", "build", "-c", "opt", "//tools:ddstore_bench"]
_TORCH_PATH = [DDRUN, "-n", "2", "--timeout", "600", "--", PY,
               os.path.join(TOP, "tools", "bench_torch_path.py"), "8192", "5"]

FIGURES = {f.name: f for f in [
    Figure("m1_vs_m0", "docs/measurements.md",
           "method 1 (same node, mapped shards) against method 0: remote rows only, "
           "2 ranks, one reader thread, 0.3 s per point (ddstore_bench)",
           [_bench_arm("m0", 0), _bench_arm("m1_shm", 1, ["--fabric", "shm"]),
            _bench_arm("m1_tcp", 1, ["--fabric", "tcp;ofi_rxm"])],
           "row × batch", None, _m1_vs_m0_cells, build=_BENCH_BUILD),
    Figure("torch_path", "docs/measurements.md",
           "the torch path per batch of 128 × 3136 B samples in 1, 3 and 8 fields: "
           "bare get_batch per field, the direct collate, ThreadDataLoader (1 worker); "
           "median of 5 repetitions per round (tools/bench_torch_path.py)",
           [Arm("m0", _TORCH_PATH, {"DDSTORE_METHOD": "0"}),
            Arm("m1", _TORCH_PATH, {"DDSTORE_METHOD": "1"})],
           "case", None, _torch_path_cells),
    Figure("pack", "docs/measurements.md",
           "DistDataset(pack_fields=True) against one variable per field: batches of 128 "
           "random samples through the direct collate, 2 ranks, methods 0 and 1, packed and "
           "per-field interleaved inside each run (tools/bench_pack.py)",
           [Arm("pack", [DDRUN, "-n", "2", "--timeout", "900", "--", PY,
                         os.path.join(TOP, "tools", "bench_pack.py"), "--json", "{json}"])],
           "method, sample", None, _pack_cells),
    Figure("get_batch", "docs/measurements.md",
           "Python get_batch of 128 random rows of 3,136 B into a preallocated array against "
           "numpy gathering the same rows from a local copy (np.take(..., out=), and with "
           "mode='clip'), interleaved inside the program, 15 rounds of 400 batches, methods 0 "
           "and 1 at 1 and 2 ranks (tools/bench_get_batch.py)",
           [Arm("get_batch", [PY, os.path.join(TOP, "tools", "bench_get_batch.py"),
                              "--out", "{json}"])],
           "method, ranks", None, _get_batch_cells),
    Figure("loaders", "docs/measurements.md",
           "one epoch per loader (a first, then the median of 3 without compute and of 3 with "
           "a fixed compute step), 4 ranks, batch 128, every epoch checked for coverage and "
           "content; Fashion-MNIST and 100,000 synthetic 3 KB samples "
           "(tools/bench_loaders.py)",
           [Arm("loaders", [PY, os.path.join(TOP, "tools", "bench_loaders.py"), "--datasets",
                            "fmnist,synthetic", "--synthetic-n", "100000", "--out", "{dir}"],
                result="bench_loaders.json")],
           "dataset, loader", None, _loaders_cells, timeout=5400),
]}


def _git(*args):
    try:
        return subprocess.run(["git", *args], cwd=TOP, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def fmt(v):
    a = abs(v)
    return f"{v:.3g}" if a < 100 else f"{v:.0f}"


def settle(limit, seconds, log=print, poll=5.0):
    """Wait (up to `seconds`) for the 1-minute load average to fall to `limit`:
    an arm that loads the machine itself (4 ranks on 2 cores) leaves a load
    average that decays over a minute or two, which is not another job's.
    Returns the load average when it returns."""
    end = time.monotonic() + seconds
    load = loadavg()
    while load > limit and time.monotonic() < end:
        time.sleep(poll)
        load = loadavg()
    if load > limit:
        log(f"load average still {load:.2f} after {seconds:.0f} s")
    return load


def measure(fig, rounds, log=print, settle_s=0.0):
    """Run fig's arms interleaved for `rounds` rounds; return the record.
    With settle_s, each arm first waits up to that long for the load average
    to fall to 1 per core (what it then is, is what the record keeps)."""
    if fig.build:
        log("+ " + " ".join(fig.build))
        subprocess.run(fig.build, cwd=TOP, check=True)
    rec = {"figure": fig.name, "commit": _git("rev-parse", "--short", "HEAD"),
           # a tree with changes outside docs/ (the runner itself writes docs/)
           "dirty": any(not l[3:].startswith("docs/") for l in
                        _git("status", "--porcelain", "--untracked-files=no").splitlines()),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "cores": os.cpu_count(),
           "settings": {k: v for k, v in sorted(os.environ.items())
                        if k.startswith(("DDSTORE_", "FI_"))},
           "arms": {a.name: a.shell() for a in fig.arms}, "rounds": [], "load": []}
    for r in range(rounds):
        got = {}
        for a in fig.arms:
            rec["load"].append(settle(os.cpu_count(), settle_s, log) if settle_s else loadavg())
            log(f"[{fig.name}] round {r + 1}/{rounds} {a.name} (load {rec['load'][-1]:.2f})")
            got[a.name] = a.run(fig.timeout)
        rec["rounds"].append(got)
    rec["load_max"] = max(rec["load"])
    rec["loaded"] = rec["load_max"] > rec["cores"]
    rec["table"] = [(label, [(col, summary(vals)) for col, vals in cols])
                    for label, cols in fig.cells(rec["rounds"])]
    return rec


def render(fig, rec):
    """Markdown for the figure's table, with the command, commit and load above it.
    Rows with other columns than the row before them (a figure's ratio rows) start
    a table of their own, under a header naming their columns."""
    head = [f"<!-- figure {fig.name}: written by `tools/figures.py run {fig.name} --write`; "
            f"do not edit by hand -->",
            f"`.venv/bin/python tools/figures.py run {fig.name} --rounds "
            f"{len(rec['rounds'])}`: {fig.what}. Arms interleaved in each round: " +
            "; ".join(f"`{n}`: `{s.replace(TOP + '/', '')}`" for n, s in rec["arms"].items()) +
            f". Commit {rec['commit']}{' (dirty tree)' if rec['dirty'] else ''}, "
            f"{rec['date']}, {rec['cores']} cores, load average {min(rec['load']):.2f}–"
            f"{rec['load_max']:.2f}" +
            (" — **above 1 per core: not a publishable figure**" if rec["loaded"] else "") +
            ". Cells: median over rounds (min–max)."]
    cols = None
    for label, cells in rec["table"]:
        if [c for c, _ in cells] != cols:
            cols = [c for c, _ in cells]
            head += ["", "| " + " | ".join([fig.label] + cols) + " |",
                     "|" + "---|" * (len(cols) + 1)]
        head.append("| " + " | ".join([label] + [
            f"{fmt(s['median'])} ({fmt(s['min'])}–{fmt(s['max'])})" for _, s in cells]) + " |")
    head.append(f"<!-- /figure {fig.name} -->")
    return "\n".join(head)


def write(fig, rec, top=TOP):
    path = os.path.join(top, fig.doc)
    with open(path) as f:
        text = f.read()
    begin, end = f"<!-- figure {fig.name}", f"<!-- /figure {fig.name} -->"
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise SystemExit(f"{fig.doc} has no markers for figure {fig.name}: add a line "
                         f"'<!-- figure {fig.name} -->' and one '{end}' where it goes")
    text = text[:i] + render(fig, rec) + text[j + len(end):]
    with open(path, "w") as f:
        f.write(text)
    pub = os.path.join(top, "docs", "figures", fig.name + ".json")
    os.makedirs(os.path.dirname(pub), exist_ok=True)
    with open(pub, "w") as f:
        json.dump({k: rec[k] for k in ("figure", "commit", "date", "cores", "load",
                                       "loaded", "arms", "table")}, f, indent=1)
        f.write("\n")


def compare(published, rec, tol):
    """[(label, column, published summary, new median, ok)] for every published cell."""
    new = {(l, c): s for l, cells in rec["table"] for c, s in cells}
    out = []
    for label, cells in published["table"]:
        for col, s in cells:
            n = new.get((label, col))
            m = None if n is None else n["median"]
            lo, hi = s["min"] * (1 - tol), s["max"] * (1 + tol)
            out.append((label, col, s, m, m is not None and lo <= m <= hi))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list")
    for c in ("run", "check"):
        p = sub.add_parser(c)
        p.add_argument("names", nargs="+", help="figure names, or 'all'")
        p.add_argument("--rounds", type=int, default=5)
        p.add_argument("--loaded", action="store_true",
                       help="accept a run at load above 1 per core (marked as such)")
        p.add_argument("--out", default=os.path.join(TOP, "out", "figures"))
        p.add_argument("--settle", type=float, default=300.0,
                       help="seconds each arm may wait for the load average to fall to 1 "
                            "per core (an arm's own load takes a minute or two to decay)")
        if c == "run":
            p.add_argument("--write", action="store_true",
                           help="replace the table in its doc and docs/figures/NAME.json")
        else:
            p.add_argument("--tol", type=float, default=0.10)
    a = ap.parse_args(argv)
    if a.cmd == "list":
        for f in FIGURES.values():
            print(f"{f.name:12} {f.doc}: {f.what}")
        return 0
    names = list(FIGURES) if a.names == ["all"] else a.names
    for n in names:
        if n not in FIGURES:
            raise SystemExit(f"no figure {n!r}; the figures: {', '.join(FIGURES)}")
    if not a.loaded and settle(os.cpu_count(), a.settle) > os.cpu_count():
        print(f"load average {loadavg():.2f} is above 1 per core ({os.cpu_count()} cores): "
              "wait for a quiet machine, or pass --loaded (the result is then marked)")
        return 2
    os.makedirs(a.out, exist_ok=True)
    bad = 0
    for n in names:
        fig = FIGURES[n]
        rec = measure(fig, a.rounds, settle_s=a.settle)
        with open(os.path.join(a.out, n + ".json"), "w") as f:
            json.dump(rec, f, indent=1)
        print(render(fig, rec))
        if rec["loaded"] and not a.loaded:
            print(f"[{n}] the load rose above 1 per core during the run "
                  f"(max {rec['load_max']:.2f}): not written, not compared")
            bad = bad or 2
            continue
        if a.cmd == "run" and a.write:
            write(fig, rec)
            print(f"[{n}] written to {fig.doc} and docs/figures/{n}.json")
        elif a.cmd == "check":
            pub = os.path.join(TOP, "docs", "figures", n + ".json")
            if not os.path.exists(pub):
                print(f"[{n}] nothing published yet ({pub} missing)")
                bad = 1
                continue
            with open(pub) as f:
                published = json.load(f)
            for label, col, s, m, ok in compare(published, rec, a.tol):
                got = "missing" if m is None else fmt(m)
                print(f"[{n}] {'ok' if ok else 'NOT REPRODUCED'}: {label} / {col}: published "
                      f"{fmt(s['median'])} ({fmt(s['min'])}–{fmt(s['max'])}), now {got}")
                bad = bad or (0 if ok else 1)
    return bad


if __name__ == "__main__":
    sys.exit(main())
