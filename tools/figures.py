#!/usr/bin/env python3
"""The runner behind published figures: every table it owns in docs/ is produced by it,
from rounds interleaved in one run, and `check` says which published cells a rerun does
not reproduce.

    .venv/bin/python tools/figures.py list
    .venv/bin/python tools/figures.py run NAME [NAME ...] [--rounds R] [--write]
    .venv/bin/python tools/figures.py run --all-unwritten --write   # every hand-run table
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

Absolute times and rates (µs, GB/s, samples/s, seconds) belong to the machine they
were measured on; ratios taken inside a round, counts and memory do not. Every
record names its machine (CPU model, cores, kernel, and the memcpy bandwidth of a
256 MiB copy taken before the first arm). When the machine of the check is not the
published one (another CPU model, or memcpy more than 20 % apart; a record without
a machine counts as another), `check` compares the ratios, counts and memory and
prints each absolute cell as "other machine" without failing on it; `--strict`
compares every cell anyway. A figure with a same-run baseline column (the memcpy or
local np.take of the same rows: reads, method2, planner, ragged, get_batch) is judged
on any machine against that baseline instead: the baseline is printed as "baseline"
(it measures the host), and each absolute cell of its row may lie in the published
range or in that range scaled by how much the baseline moved; a VM host's memory
bandwidth drifts by tens of percent within an hour. A cell beyond the published range
on the side where ddstore (or the host) is faster, an absolute time or rate or a ratio
of ddstore to the alternative, is printed as "faster" and does not fail the check (the
other side does); `--strict` fails it too.
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

    def __init__(self, name, argv, env=None, result=None, lines=False, parse=None):
        self.name, self.argv, self.env = name, list(argv), dict(env or {})
        self.result = result        # a file the command writes under {dir}
        self.lines = lines          # every stdout line that starts with '{', as a list
        self.parse = parse          # or a function of the whole stdout (text output)

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
            if self.parse:
                return self.parse(p.stdout)
            last = [l for l in p.stdout.splitlines() if l.startswith("{")]
            if not last:
                raise RuntimeError(f"arm {self.name} printed no JSON line: {self.shell()}")
            if not self.lines:
                return json.loads(last[-1])
            # ranks print one line each; the launcher may join two on one line
            docs, dec = [], json.JSONDecoder()
            for l in last:
                i = 0
                while i < len(l):
                    doc, i = dec.raw_decode(l, i)
                    docs.append(doc)
                    while i < len(l) and l[i].isspace():
                        i += 1
            return docs


class Figure:
    """A published table. `cells(rounds)` maps the rounds (a list of {arm: result})
    to rows: a list of (label, [(column, values over rounds), ...]); `columns` is
    the header after the label column. `rounds` is the figure's own default
    (`--rounds` overrides it); `estimate_s` what a run at that many rounds takes
    on the 2-core development machine when it is quiet (`list` shows it)."""

    def __init__(self, name, doc, what, arms, label, columns, cells, build=None,
                 timeout=900, rounds=5, estimate_s=None):
        self.name, self.doc, self.what = name, doc, what
        self.arms, self.label, self.columns = arms, label, columns
        self.cells, self.build, self.timeout = cells, build, timeout
        self.rounds, self.estimate_s = rounds, estimate_s


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


def _bell_cells(rounds):
    out = []
    keys = sorted(_us_rows(rounds[0]["m0"]))
    for rb, batch in keys:
        col = {a: [_us_rows(r[a])[(rb, batch)] for r in rounds]
               for a in ("m0", "m1_bell", "m1_backoff", "m1_none")}
        label = f"{rb} B × {batch}" if rb < 1 << 20 else f"{rb >> 20} MiB × {batch}"
        out.append((label, [("method 0 µs/row", col["m0"]),
                            ("method 1, bell µs/row", col["m1_bell"]),
                            ("bell speed / m0", [a / b for a, b in zip(col["m0"],
                                                                       col["m1_bell"])]),
                            ("backoff speed / m0", [a / b for a, b in zip(col["m0"],
                                                                          col["m1_backoff"])]),
                            ("no thread speed / m0", [a / b for a, b in zip(col["m0"],
                                                                            col["m1_none"])]),
                            ("read speed ÷ backoff's, bell",
                             [a / b for a, b in zip(col["m1_backoff"], col["m1_bell"])])]))
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


# ---- the figures of the hand-run tables (issue 25) ----------------------------------

def _rows_of(result, **match):
    """The JSON lines of an arm's result whose fields equal `match`."""
    rows = result if isinstance(result, list) else [result]
    return [r for r in rows if all(r.get(k) == v for k, v in match.items())]


def _one(result, **match):
    got = _rows_of(result, **match)
    if len(got) != 1:
        raise ValueError(f"{len(got)} results match {match}, want 1")
    return got[0]


def _size_label(rb):
    return f"{rb} B" if rb < 1 << 20 else f"{rb >> 20} MiB"


_BACKENDS = (("m0", "method 0"), ("m1_shm", "method 1, shm"), ("m1_tcp", "method 1, tcp;ofi_rxm"))


def _reads_cells(rounds):
    """ddstore_bench over the three backends: per backend and point (1 thread) the
    read's µs/row and GB/s, the memcpy of the same rows (same run) and the read's
    speed over memcpy's; then GB/s per rank by reader threads at 3136 B × 128."""
    out = []
    first = _rows_of(rounds[0]["m0"], threads=1)
    points = [(r["row_bytes"], r["batch"]) for r in first]
    for arm, name in _BACKENDS:
        for rb, b in points:
            got = [_one(r[arm], row_bytes=rb, batch=b, threads=1) for r in rounds]
            out.append((f"{name}, {_size_label(rb)} × {b}", [
                ("µs/row", [g["us_per_row"] for g in got]),
                ("GB/s", [g["gb_per_s"] for g in got]),
                ("memcpy GB/s, same run", [g["memcpy_gb_per_s"] for g in got]),
                ("read speed ÷ memcpy's", [g["gb_per_s"] / g["memcpy_gb_per_s"] for g in got])]))
    threads = sorted({r["threads"] for r in _rows_of(rounds[0]["m0_threads"])})
    for arm, name in _BACKENDS:
        out.append((f"{name}, 3136 B × 128", [
            (f"GB/s per rank, {t} thread{'s' if t > 1 else ''}",
             [_one(r[arm + "_threads"], row_bytes=3136, batch=128, threads=t)["gb_per_s"]
              for r in rounds])
            for t in threads]))
    return out


_EPOCH_ARMS = [(n, arm, label) for n in (2, 4) for arm, label in
               (("m0", "method 0"), ("m1_shm", "method 1, shm"),
                ("m0_inf", "method 0, DDSTORE_COLLECTIVE_TIMEOUT_S=inf"))]


def _epochs_cells(rounds):
    out = []
    for n, arm, label in _EPOCH_ARMS:
        got = [_one(r[f"{arm}_{n}"], kind="epoch") for r in rounds]
        out.append((f"{n} ranks, {label}", [
            ("MPI_Barrier µs", [g["barrier_us"] for g in got]),
            ("epoch_begin µs", [g["epoch_begin_us"] for g in got]),
            ("epoch_end µs", [g["epoch_end_us"] for g in got]),
            ("epoch_begin ÷ barrier", [g["epoch_begin_us"] / g["barrier_us"] for g in got]),
            ("epoch_end ÷ barrier", [g["epoch_end_us"] / g["barrier_us"] for g in got])]))
    return out


def _kv(text):
    """key=value lines (the ofi example programs' output): a dict per line."""
    out = []
    for line in text.splitlines():
        d = {}
        for tok in line.split():
            k, eq, v = tok.partition("=")
            if eq:
                try:
                    d[k] = float(v)
                except ValueError:
                    d[k] = v
        if d:
            out.append(d)
    return out


def _ofi_probe_cells(rounds):
    """ofi_pingread (the library) and ofi_bare_read (a bare fi_read loop), arms
    interleaved per provider; the ratio library ÷ bare inside each round."""
    out = []
    for p in ("tcp", "shm"):
        lib = [next(d for d in r[f"lib_{p}"] if "lat_us" in d) for r in rounds]
        bare = [[d for d in r[f"bare_{p}"] if "us_per_read" in d] for r in rounds]
        for key, bkey, i, label, unit in (
                ("lat_us", "us_per_read", 0, "4 KiB latency", "µs"),
                ("bw_gbs", "gb_s", 1, "1 MiB bandwidth, 16 in flight", "GB/s"),
                ("row_us", "us_per_read", 2, "3136 B rows × 128", "µs/row")):
            lv, bv = [l[key] for l in lib], [b[i][bkey] for b in bare]
            ratio = ([b / l for l, b in zip(lv, bv)] if unit == "GB/s"
                     else [l / b for l, b in zip(lv, bv)])
            out.append((f"{p}, {label}", [(f"library", lv), (f"bare fi_read", bv),
                                          ("library time ÷ bare's", ratio)]))
    return out


def _method2_cells(rounds):
    out = []
    first = _rows_of(rounds[0]["method2"], method=2)
    for f in first:
        key = dict(fabric=f["fabric"], row_bytes=f["row_bytes"], threads=f["threads"])
        got = [_one(r["method2"], method=2, **key) for r in rounds]
        out.append((f"{f['fabric']}, {_size_label(f['row_bytes'])} × {f['batch']}, "
                    f"{f['threads']} thread{'s' if f['threads'] > 1 else ''}", [
                        ("µs/row", [g["us_per_row"] for g in got]),
                        ("GB/s", [g["gb_per_s"] for g in got]),
                        ("local np.take µs/row", [g["memcpy_us_per_row"] for g in got]),
                        ("read speed ÷ np.take's", [g["memcpy_us_per_row"] / g["us_per_row"]
                                                    for g in got])]))
    return out


def _sampler_cells(rounds):
    out = []
    ran = [x for x in rounds[0]["sampler"] if "skipped" not in x]
    for x in ran:
        got = [_one(r["sampler"], sampler=x["sampler"], n=x["n"]) for r in rounds]
        out.append((f"{x['sampler']}, N = {x['n']:.0e}", [
            ("first index s", [g["first_s"] for g in got]),
            ("ns/index", [g["ns_per_index"] for g in got]),
            ("epoch per rank s (est.)", [g["epoch_s_est"] for g in got]),
            ("peak RSS MiB", [g["rss_mib"] for g in got])]))
    for n in sorted({x["n"] for x in ran}):
        if len([x for x in ran if x["n"] == n]) < 2:
            continue
        a = [_one(r["sampler"], sampler="DistributedSampler", n=n) for r in rounds]
        b = [_one(r["sampler"], sampler="DistSampler", n=n) for r in rounds]
        out.append((f"N = {n:.0e}", [
            ("DistributedSampler ÷ DistSampler, first index",
             [x["first_s"] / y["first_s"] for x, y in zip(a, b)]),
            ("DistributedSampler ÷ DistSampler, peak RSS",
             [x["rss_mib"] / y["rss_mib"] for x, y in zip(a, b)])]))
    return out


def _plan_parse(text):
    """plan_bench's lines: {label: {ns_batch, ns_row}}; the lines after 'with
    max_read_bytes' carry that in their label; the store lines their memcpy."""
    import re
    out, suffix = {}, ""
    for line in text.splitlines():
        if line.startswith("with max_read_bytes"):
            suffix = ", max_read_bytes 1 MiB"
            continue
        m = re.match(r"\s*(\d+) rows x (\d+) B, (.*?)\s+(\d+) ns/batch(?:\s+([\d.]+) ns/row)?", line)
        if m:
            out[f"{m[1]} rows, {m[3]}{suffix}"] = {"ns_batch": float(m[4])}
            continue
        m = re.match(r"store (\w+),\s*(\d+) local (rows|samples).*?:\s+(\d+) ns/call; "
                     r"per-(?:row|sample) memcpy of the same \w+\s+(\d+) ns", line)
        if m:
            out[f"store {m[1]}, {m[2]} local {m[3]}"] = {"ns_batch": float(m[4]),
                                                         "memcpy_ns": float(m[5])}
    return out


def _planner_cells(rounds):
    out = []
    for label, v in rounds[0]["plan"].items():
        got = [r["plan"][label] for r in rounds]
        cols = [("ns per batch (call)", [g["ns_batch"] for g in got])]
        if "memcpy_ns" in v:
            cols += [("per-row memcpy of the same rows, ns", [g["memcpy_ns"] for g in got]),
                     ("÷ memcpy", [g["ns_batch"] / g["memcpy_ns"] for g in got])]
        out.append((label, cols))
    return out


def _vae_cells(rounds):
    out = []
    med = statistics.median
    for name in ("ddstore+ThreadDataLoader", "local+DataLoader"):
        runs = [r["vae"]["runs"][name] for r in rounds]
        out.append((name, [("epoch s", [med(h["epoch_s"] for h in x) for x in runs]),
                           ("waiting for data s", [med(h["wait_s"] for h in x) for x in runs])]))
    out.append(("ddstore ÷ local", [("epoch time", [
        med(h["epoch_s"] for h in r["vae"]["runs"]["ddstore+ThreadDataLoader"]) /
        med(h["epoch_s"] for h in r["vae"]["runs"]["local+DataLoader"]) for r in rounds])]))
    prof = [r["vae"]["profile"]["sum"] for r in rounds if r["vae"].get("profile")]
    if len(prof) == len(rounds):
        out.append(("ddstore reads", [("µs/row", [p["total_ns"] / max(1, p["rows"]) / 1e3
                                                  for p in prof])]))
    return out


_OVH_LABELS = {"numpy_get_batch": "PyDDStore.get_batch (numpy out)",
               "bare": "bare tensor get_batch per field", "read_rows": "ds.read_rows",
               "collate": "direct collate", "getitems": "ds.__getitems__",
               "default_collate_getitems": "default_collate(ds.__getitems__)",
               "thread_loader": "ThreadDataLoader, 1 worker",
               "thread_loader_nohelp": "ThreadDataLoader, 1 worker, DDSTORE_LOADER_HELP=0"}
_OVH_CASES = {1: ["numpy_get_batch", "bare", "read_rows", "collate", "getitems",
                  "default_collate_getitems", "thread_loader", "thread_loader_nohelp"],
              3: ["bare", "collate", "thread_loader", "thread_loader_nohelp"],
              8: ["bare", "collate", "thread_loader", "thread_loader_nohelp"]}


def _torch_overhead_cells(rounds):
    """bench_torch.py _overhead at 1 and 2 ranks: per case the min over its
    repetitions, the max over ranks (what the tool prints), µs per batch; its
    ratio to the bare tensor reads of the same round; the loader with the
    consumer reading (DDSTORE_LOADER_HELP=1, default) over without."""
    out = []
    for arm in ("r1", "r2"):
        n = rounds[0][arm]["ranks"]
        for nf, cases in _OVH_CASES.items():
            val = lambda r, c: max(p[str(nf)][c]["min"] for p in r[arm]["per_rank"])
            for c in cases:
                out.append((f"{n} rank{'s' if n > 1 else ''}, {nf} field{'s' if nf > 1 else ''}, "
                            f"{_OVH_LABELS[c]}", [
                                ("µs/batch", [val(r, c) for r in rounds]),
                                ("÷ bare tensor get_batch", [val(r, c) / val(r, "bare")
                                                             for r in rounds])]))
    for arm in ("r1", "r2"):            # the consumer helping or not, same round
        n = rounds[0][arm]["ranks"]
        for nf in _OVH_CASES:
            val = lambda r, c: max(p[str(nf)][c]["min"] for p in r[arm]["per_rank"])
            out.append((f"{n} rank{'s' if n > 1 else ''}, {nf} field{'s' if nf > 1 else ''}", [
                ("ThreadDataLoader µs/batch, DDSTORE_LOADER_HELP=1 ÷ =0",
                 [val(r, "thread_loader") / val(r, "thread_loader_nohelp") for r in rounds])]))
    return out


_LCPU_ARMS = [("bare", "bare get_batch per field", None),
              ("collate", "direct collate (ds._collate)", "bare"),
              ("loader", "ThreadDataLoader, 1 worker", "bare"),
              ("bare+c", "bare get_batch + training step", None),
              ("loader+c", "ThreadDataLoader + training step", "bare+c"),
              ("uc", "user collate_fn in the calling thread", None),
              ("loader-uc", "ThreadDataLoader, user collate_fn (Python worker)", "uc")]


def _loader_cpu_cells(rounds):
    """bench_loader_cpu.py, one 2-rank job per round, its arms interleaved
    inside: per arm wall and process CPU µs per batch (medians over the job's
    rounds, max over ranks), over its reference arm of the same job (bare, or
    the same work without the loader); the loader's own CPU per batch."""
    def get(r, key):            # the job's median over its rounds
        return r["lcpu"][key][0]
    out = []
    for arm, label, ref in _LCPU_ARMS:
        ratio = lambda r, w: get(r, f"{arm}/{ref}_{w}") if ref else 1.0
        cols = [("wall µs/batch", [get(r, f"{arm}_wall_us") for r in rounds]),
                ("CPU µs/batch", [get(r, f"{arm}_cpu_us") for r in rounds]),
                ("wall ÷ reference's", [ratio(r, "wall") for r in rounds]),
                ("CPU ÷ reference's", [ratio(r, "cpu") for r in rounds]),
                ("own CPU µs/batch (− reference's)",
                 [get(r, f"{arm}_cpu_us") - get(r, f"{ref}_cpu_us") if ref else 0.0
                  for r in rounds])]
        out.append((label + (f" (reference: {ref})" if ref else " (a reference)"), cols))
    return out


_BPOOL_ARMS = [("bare", "bare get_batch into one tensor"),
               ("collate", "direct collate (ds._collate), pool on"),
               ("collate-off", "direct collate, pool off"),
               ("loader", "ThreadDataLoader, 1 worker, pool on"),
               ("loader-off", "ThreadDataLoader, 1 worker, pool off")]


def _batch_pool_cells(rounds):
    """bench_batch_pool.py, one 2-rank job per round, the pool switched on and
    off between arms inside it: per case and arm wall and CPU µs per batch
    (the job's median over its rounds, max over ranks); per case the pool's
    gain (off ÷ on, per job round) and the arms over bare."""
    def col(case, key):         # the key's job medians, one per round
        return [r["bpool"]["cases"][case][key][0] for r in rounds]
    out = []
    for case, c0 in rounds[0]["bpool"]["cases"].items():
        what = (f"{case}: {c0['batch']} × {c0['sample_bytes']:,} B "
                f"({c0['batch'] * c0['sample_bytes'] / 2**20:.2f} MiB)")
        for arm, label in _BPOOL_ARMS:
            out.append((f"{what}, {label}", [("wall µs/batch", col(case, f"{arm}_wall_us")),
                                             ("CPU µs/batch", col(case, f"{arm}_cpu_us"))]))
        for a in ("collate", "loader"):
            out.append((f"{what}, {a}", [
                ("wall, pool off ÷ on", col(case, f"{a}-off/{a}_wall")),
                ("CPU, pool off ÷ on", col(case, f"{a}-off/{a}_cpu")),
                ("wall, pool on ÷ bare", col(case, f"{a}/bare_wall"))]))
    return out


def _ragged_cells(rounds):
    out = []
    # the ranks write their lines in any order
    for x in sorted(_rows_of(rounds[0]["ragged"], kind="ragged_reads"),
                    key=lambda x: (x["method"], x["rank"])):
        got = [_one(r["ragged"], kind="ragged_reads", method=x["method"], rank=x["rank"])
               for r in rounds]
        name = f"method {x['method']}{' (' + x['fabric'] + ')' if x['fabric'] else ''}"
        out.append((f"{name}, rank {x['rank']}", [
            ("get_ragged µs", [g["ragged_us_median"] for g in got]),
            ("fixed get_batch µs", [g["fixed_us_median"] for g in got]),
            ("memcpy µs", [g["memcpy_us_median"] for g in got]),
            ("ragged ÷ fixed per byte (medians)", [g["ragged_vs_fixed_median"] for g in got]),
            ("ragged ÷ fixed per byte (totals)", [g["ragged_vs_fixed"] for g in got]),
            ("sizes() µs", [g["sizes_us_median"] for g in got])]))
    for x in sorted(_rows_of(rounds[0]["ragged"], kind="ragged_meta"), key=lambda x: x["rank"]):
        got = [_one(r["ragged"], kind="ragged_meta", rank=x["rank"]) for r in rounds]
        out.append((f"metadata, {x['samples']:.0e} samples on {x['ranks']} ranks, rank {x['rank']}", [
            ("RSS growth MiB", [g["rss_growth_bytes"] / 2**20 for g in got]),
            ("metadata B per local sample", [g["metadata_bytes_per_local_sample"] for g in got]),
            ("allgathered offsets ÷ the store's layout", [g["allgathered_vs_model"] for g in got])]))
    return out


def _scale_cells(rounds):
    out = []
    for x in _rows_of(rounds[0]["scale"], kind="scale_core"):
        R = x["nranks"]
        core = [_one(r["scale"], kind="scale_core", nranks=R) for r in rounds]
        rec = [_rows_of(r["scale"], kind="scale_method2", n_core=R) for r in rounds]
        cols = [("bytes kept per variable", [c["meta_bytes_per_var"] for c in core]),
                ("var_add local work µs", [c["add_us"] for c in core]),
                ("dds_plan_batch 128 rows µs", [c["plan_min_us"] for c in core]),
                ("get_batch 128 rows µs", [c["get_batch_min_us"] for c in core]),
                ("get 1 row µs", [c["get_one_min_us"] for c in core])]
        if all(rec):
            cols += [("method-2 record bytes", [m[0]["record_bytes"] for m in rec]),
                     ("record encode ms", [m[0]["encode_us"] / 1e3 for m in rec]),
                     ("record parse ms", [m[0]["parse_us"] / 1e3 for m in rec])]
        out.append((f"{R:,}", cols))
    return out


def _filecomm_cells(rounds):
    return [(str(x["nranks"]), [
        (f"{k} µs", [_one(r["filecomm"], kind="scale_filecomm", nranks=x["nranks"])[f"{k}_us"]
                     for r in rounds]) for k in ("allgather", "allreduce", "barrier")])
        for x in _rows_of(rounds[0]["filecomm"], kind="scale_filecomm")]


def _scale_ofi_cells(rounds):
    """The adapter over simulated ranks (tcp;ofi_rxm), eager and lazy peers of one
    run: bytes per rank as the slope between the smallest and largest R (reads of
    every owner: up to --ofi-read-max), times at the largest R."""
    def per_rank(r, peers, field, limit=None):
        pts = sorted((x["nranks"], x[field]) for x in _rows_of(r["scale_ofi"], kind="scale_ofi",
                                                               peers=peers)
                     if x[field] >= 0 and (limit is None or x["nranks"] <= limit))
        return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])

    def at_max(r, peers, field, limit=None):
        pts = sorted((x["nranks"], x[field]) for x in _rows_of(r["scale_ofi"], kind="scale_ofi",
                                                               peers=peers)
                     if x[field] >= 0 and (limit is None or x["nranks"] <= limit))
        return pts[-1]
    big = max(x["nranks"] for x in _rows_of(rounds[0]["scale_ofi"], kind="scale_ofi"))
    read = at_max(rounds[0], "lazy", "read_every_owner_first_ms")[0]
    rows = [("per store, B per rank", lambda r, p: per_rank(r, p, "store_bytes")),
            ("per reader at open, B per rank", lambda r, p: per_rank(r, p, "reader_bytes")),
            (f"per reader after reading from every rank (R ≤ {read:,}), B per rank",
             lambda r, p: per_rank(r, p, "reader_bytes_all_read")),
            ("per variable, B per rank", lambda r, p: per_rank(r, p, "var_bytes")),
            (f"store create at {big:,} ranks, ms", lambda r, p: at_max(r, p, "create_ms")[1]),
            (f"thread reader open at {big:,} ranks, ms",
             lambda r, p: at_max(r, p, "reader_open_ms")[1]),
            (f"var_add at {big:,} ranks, ms", lambda r, p: at_max(r, p, "add_ms")[1]),
            (f"reading one row of each of {read:,} owners, first time, ms",
             lambda r, p: at_max(r, p, "read_every_owner_first_ms")[1])]
    return [(label, [(peers, [f(r, peers) for r in rounds])
                     for peers in ("eager", "lazy")]) for label, f in rows]


def _mem_stores_cells(rounds):
    """tools/mem_stores.py K at 2 ranks: private memory added per rank (the larger
    of the two ranks), in all and per store."""
    out = []
    for k in (1, 2, 3):
        cols = []
        for fab in ("tcp", "shm"):
            mib = [max((x["read"]["private_kib"] - x["before"]["private_kib"]) / 1024
                       for x in r[f"{fab}_{k}"]) for r in rounds]
            cols += [(f"{fab}: MiB per rank", mib), (f"{fab}: per store", [m / k for m in mib])]
        out.append((f"{k} store{'s' if k > 1 else ''}", cols))
    return out


_BENCH_BUILD = ["bazel", "build", "-c", "opt", "//tools:ddstore_bench"]
_TORCH_PATH = [DDRUN, "-n", "2", "--timeout", "600", "--", PY,
               os.path.join(TOP, "tools", "bench_torch_path.py"), "8192", "5"]

_BIN = os.path.join(TOP, "bazel-bin")
_SCALE = os.path.join(_BIN, "tools", "ddstore_scale")
_SCALE_BUILD = ["bazel", "build", "-c", "opt", "//tools:ddstore_scale"]
_OFI_BUILD = ["bazel", "build", "-c", "opt", "//ddstore-ofi:ofi_pingread",
              "//ddstore-ofi:ofi_bare_read"]
_BARE = ('set -e; for a in "--size 4096 --iters 5000" "--size 1048576 --window 16 --iters 2000" '
         '"--size 3136 --window 128 --iters 50000"; do "$0" --provider "$1" --server-wait $a; done')


def _reads_arms(a):
    """A backend's points at one reader thread, then its thread sweep at 3136 B × 128
    alone (ddstore_bench sweeps threads at every point it runs)."""
    fab = {"m0": [], "m1_shm": ["--fabric", "shm"], "m1_tcp": ["--fabric", "tcp;ofi_rxm"]}[a]
    method = 0 if a == "m0" else 1
    return [_bench_arm(a, method, fab, batches="1,128"),
            _bench_arm(a + "_threads", method, ["--threads", "1,2,4,8"] + fab, sizes="3136")]


def _tool(name, script, *args, **kw):
    """An arm running one of tools/*.py with this Python."""
    return Arm(name, [PY, os.path.join(TOP, "tools", script)] + list(args), **kw)


def _epoch_arm(n, arm):
    method, extra = (1, ["--fabric", "shm"]) if arm == "m1_shm" else (0, [])
    env = {"DDSTORE_COLLECTIVE_TIMEOUT_S": "inf"} if arm == "m0_inf" else None
    return Arm(f"{arm}_{n}", [DDRUN, "-n", str(n), "--timeout", "600", "--",
                              os.path.join(_BIN, "tools", "ddstore_bench"), "--method",
                              str(method), "--epochs", "2000", "--json", "{json}"] + extra, env)


def _ovh_arm(n):
    return Arm(f"r{n}", [DDRUN, "-n", str(n), "--timeout", "900", "--", PY,
                         os.path.join(TOP, "tools", "bench_torch.py"), "_overhead", "--result",
                         "{json}", "--rows", "8192", "--reps", "15", "--batch", "128",
                         "--method", "0", "--fields", "1", "3", "8"])


def _mem_arm(fab, k):
    return Arm(f"{fab}_{k}", [DDRUN, "-n", "2", "--timeout", "300", "--", "env",
                              f"DDSTORE_FABRIC={fab}", PY,
                              os.path.join(TOP, "tools", "mem_stores.py"), str(k)], lines=True)


_NEW = [
    Figure("reads", "docs/measurements.md",
           "store reads of remote rows, 2 ranks, 0.3 s per point, next to memcpy of the same "
           "rows timed like the reads in the same run: method 0, method 1 over shm and over "
           "tcp;ofi_rxm, one reader thread; then each one's 1-8 reader threads at 3136 B × 128 "
           "(ddstore_bench; ./ddstore bench runs the full sweep)",
           [arm for a, _ in _BACKENDS for arm in _reads_arms(a)],
           "backend, row × batch", None, _reads_cells, build=_BENCH_BUILD, estimate_s=150),
    Figure("epochs", "docs/measurements.md",
           "epoch_begin()/epoch_end() per call next to a bare MPI_Barrier on the same ranks, "
           "each the median of 7 rounds of 2000 calls (ddstore_bench --epochs 2000)",
           [_epoch_arm(n, arm) for n, arm, _ in _EPOCH_ARMS],
           "ranks, backend", None, _epochs_cells, build=_BENCH_BUILD, estimate_s=75),
    Figure("ofi_probe", "docs/measurements.md",
           "ddstore-ofi's reads (ofi_pingread: 4 KiB latency, 1 MiB with 16 in flight, 128 "
           "random 3136 B rows per call) next to a bare fi_read loop over the same provider "
           "(ofi_bare_read), two processes on this host; what ci/ofi-probe-compare.sh runs",
           [a for p, bp in (("tcp", "tcp;ofi_rxm"), ("shm", "shm")) for a in (
               Arm(f"lib_{p}", [os.path.join(_BIN, "ddstore-ofi", "ofi_pingread"), "--provider",
                                p, "--local-only", "--single-node", "-q"], parse=_kv),
               Arm(f"bare_{p}", ["bash", "-c", _BARE,
                                 os.path.join(_BIN, "ddstore-ofi", "ofi_bare_read"), bp],
                   parse=_kv))],
           "provider, test", None, _ofi_probe_cells, build=_OFI_BUILD, estimate_s=120),
    Figure("method2", "docs/measurements.md",
           "method 2: a core job of 2 ranks publishes, a reader in another process times "
           "get_batch of random rows, each thread with its own reader, next to np.take of the "
           "same rows from a local array in the reader (tools/bench_method2.py --reps 400)",
           [_tool("method2", "bench_method2.py", "--reps", "400", "--out", "{dir}",
                  result="bench-method2.json")],
           "provider, rows, threads", None, _method2_cells, estimate_s=60),
    Figure("sampler", "docs/measurements.md",
           "DistSampler next to torch's DistributedSampler, rank 0 of 8, each case in a fresh "
           "process: time to the first index, ns per index over 4 Mi indices, the rank's epoch "
           "estimated from both, peak RSS above the process's after imports "
           "(tools/bench_sampler.py)",
           [_tool("sampler", "bench_sampler.py", "--json", "{json}")],
           "sampler, N", None, _sampler_cells, estimate_s=120),
    Figure("planner", "docs/measurements.md",
           "the planner (dds_plan_batch) over 4 owners of 15,000 rows of 3136 B, best of 5 × "
           "50,000 batches, thread CPU time; then the store's whole local read path next to a "
           "per-row memcpy of the same rows (ddstore-core/test/plan_bench.c)",
           [Arm("plan", [os.path.join(_BIN, "ddstore-core", "plan_bench"), "50000"],
                parse=_plan_parse)],
           "batch", None, _planner_cells,
           build=["bazel", "build", "-c", "opt", "//ddstore-core:plan_bench"], estimate_s=60),
    Figure("vae", "docs/measurements.md",
           "the VAE example, 4 ranks, method 0: ThreadDataLoader (1 worker) over a DistDataset "
           "against a plain DataLoader over the same samples in local memory, 3 epochs each "
           "alternating in one run, medians (tools/bench_torch.py vae)",
           [Arm("vae", [DDRUN, "-n", "4", "--timeout", "1800", "--", PY,
                        os.path.join(TOP, "tools", "bench_torch.py"), "_vae", "--result",
                        "{json}", "--reps", "3", "--batch", "128", "--limit", "0",
                        "--workers", "1", "--method", "0"])],
           "loader", None, _vae_cells, rounds=2, estimate_s=180, timeout=1800),
    Figure("torch_overhead", "docs/measurements.md",
           "the torch path's cases per batch of 128 random 3136-byte samples, method 0, at 1 "
           "rank (all rows local) and 2 ranks: min over 15 repetitions of 64 batches, max over "
           "ranks; the ThreadDataLoader epochs with the consumer helping and without, "
           "alternating (tools/bench_torch.py _overhead, what `bench_torch.py overhead` runs)",
           [_ovh_arm(1), _ovh_arm(2)],
           "ranks, fields, case", None, _torch_overhead_cells, rounds=3, estimate_s=150),
    Figure("loader_cpu", "docs/measurements.md",
           "ThreadDataLoader against bare get_batch per batch of 128 random 3136 B samples "
           "(1 field), 2 ranks on the 2 cores, method 0: wall and process CPU per batch, "
           "with and without a fixed training step (two 128 × 128 matmuls) and with a user "
           "collate_fn; the arms interleaved in 7 rounds inside each job, max over ranks "
           "(tools/bench_loader_cpu.py)",
           [Arm("lcpu", [DDRUN, "-n", "2", "--timeout", "600", "--", PY,
                         os.path.join(TOP, "tools", "bench_loader_cpu.py"), "7", "1",
                         ",".join(a for a, _, _ in _LCPU_ARMS)])],
           "arm (reference)", None, _loader_cpu_cells, rounds=5, estimate_s=150),
    Figure("batch_pool", "docs/measurements.md",
           "the batch pool (DDSTORE_BATCH_POOL_BYTES) on and off in one job, 2 ranks, "
           "method 0: the direct collate and ThreadDataLoader (1 worker, empty loop) per "
           "batch of 128 random 3136 B samples and of 64 random 602,112 B samples "
           "(36.75 MiB, above glibc's mmap threshold), next to bare get_batch into one "
           "preallocated tensor; the arms interleaved in 5 rounds inside each job, max "
           "over ranks (tools/bench_batch_pool.py)",
           [Arm("bpool", [DDRUN, "-n", "2", "--timeout", "600", "--", PY,
                          os.path.join(TOP, "tools", "bench_batch_pool.py"), "5"])],
           "case, arm", None, _batch_pool_cells, rounds=3, estimate_s=60),
    Figure("ragged", "docs/measurements.md",
           "ragged reads: 2 ranks, 300 batches of 128 random graphs (5-500 nodes × 64 float32) "
           "read three ways in one loop (get_ragged, get_batch of fixed rows of the mean "
           "size, a numpy copy of the ragged bytes), methods 0 and 1 (shm); sizes(); the "
           "metadata of a ragged variable of 10^8 samples on 4 ranks (tools/bench_ragged.py)",
           [_tool("ragged", "bench_ragged.py", "--json", "{json}")],
           "method, rank", None, _ragged_cells, estimate_s=120),
    Figure("mem_stores", "docs/measurements.md",
           "private memory (Private_Clean + Private_Dirty of smaps_rollup) added per rank by "
           "K method-1 stores of 4 rows, after a read from every rank of every store, 2 ranks "
           "(tools/mem_stores.py K); memory, so the load does not change it",
           [_mem_arm(fab, k) for fab in ("tcp", "shm") for k in (1, 2, 3)],
           "K stores", None, _mem_stores_cells, rounds=3, estimate_s=45),
    Figure("scale", "docs/scale.md",
           "ddstore-core as rank 0 of R simulated ranks with a recording transport, one "
           "process: bytes kept per variable, var_add's local work (median of 7), the read "
           "path (least disturbed of 7 rounds), method 2's record (format 3), thread CPU time "
           "(tools/ddstore_scale.c)",
           [Arm("scale", [_SCALE, "--ranks", "2,1024,2048,16384,75000,100000", "--filecomm", "",
                          "--json", "{json}"])],
           "R", None, _scale_cells, build=_SCALE_BUILD, estimate_s=20),
    Figure("filecomm", "docs/scale.md",
           "FileComm on local disk: P forked processes, µs per collective, median of 40 "
           "(tools/ddstore_scale.c --filecomm)",
           [Arm("filecomm", [_SCALE, "--ranks", "2", "--filecomm", "2,4,8,16", "--json",
                             "{json}"])],
           "processes", None, _filecomm_cells, build=_SCALE_BUILD, estimate_s=15),
    Figure("scale_ofi", "docs/scale.md",
           "the libfabric adapter (tcp;ofi_rxm) over R = 2 ... 100,000 simulated ranks, "
           "DDSTORE_OFI_PEERS=eager and lazy in one run, malloc accounting, shards not mapped; "
           "bytes per rank are the slope between the smallest and largest R "
           "(tools/ddstore_scale.c --ofi)",
           [Arm("scale_ofi", [_SCALE, "--ranks", "2,1024,16384,100000", "--filecomm", "",
                              "--ofi", "tcp;ofi_rxm", "--json", "{json}"])],
           "per rank of the store", None, _scale_ofi_cells, build=_SCALE_BUILD, estimate_s=20),
]


FIGURES = {f.name: f for f in [
    Figure("m1_vs_m0", "docs/measurements.md",
           "method 1 (same node, mapped shards) against method 0: remote rows only, "
           "2 ranks, one reader thread, 0.3 s per point (ddstore_bench)",
           [_bench_arm("m0", 0), _bench_arm("m1_shm", 1, ["--fabric", "shm"]),
            _bench_arm("m1_tcp", 1, ["--fabric", "tcp;ofi_rxm"])],
           "row × batch", None, _m1_vs_m0_cells, build=_BENCH_BUILD),
    Figure("bell", "docs/measurements.md",
           "method 1 over shm on one node with its progress thread sleeping on the bell "
           "(the default), polling with the backoff (DDSTORE_OFI_PROGRESS_WAIT=backoff, "
           "before ddstore-ofi 0.2.0) and with no thread (DDSTORE_OFI_PROGRESS=none: "
           "same-node reads are copies from the mapped shards and never need it), against "
           "method 0: remote rows only, 2 ranks, one reader thread, 0.3 s per point "
           "(ddstore_bench)",
           [_bench_arm("m0", 0), _bench_arm("m1_bell", 1, ["--fabric", "shm"]),
            _bench_arm("m1_backoff", 1, ["--fabric", "shm"],
                       {"DDSTORE_OFI_PROGRESS_WAIT": "backoff"}),
            _bench_arm("m1_none", 1, ["--fabric", "shm"], {"DDSTORE_OFI_PROGRESS": "none"})],
           "row × batch", None, _bell_cells, build=_BENCH_BUILD),
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
           "method, ranks", None, _get_batch_cells, rounds=6),
    Figure("loaders", "docs/measurements.md",
           "one epoch per loader (a first, then the median of 3 without compute and of 3 with "
           "a fixed compute step), 4 ranks, batch 128, every epoch checked for coverage and "
           "content; Fashion-MNIST and 100,000 synthetic 3 KB samples "
           "(tools/bench_loaders.py)",
           [Arm("loaders", [PY, os.path.join(TOP, "tools", "bench_loaders.py"), "--datasets",
                            "fmnist,synthetic", "--synthetic-n", "100000", "--out", "{dir}"],
                result="bench_loaders.json")],
           # 4 rounds: with 2 the spreads were narrower than two runs an hour apart
           # (node PSS of one loader 507-699 MiB within one run)
           "dataset, loader", None, _loaders_cells, timeout=5400, rounds=4, estimate_s=2400,
           # Mosaic Streaming, installed on first use (not by plain setup)
           build=[os.path.join(TOP, "ddstore"), "setup", "--bench"]),
] + _NEW}


def _git(*args):
    try:
        return subprocess.run(["git", *args], cwd=TOP, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


# Columns of absolute time or rate: they hold on the machine that measured them.
_SPEED_UNITS = ("µs", "ns", "ms", "GB/s", "MB/s", "samples/s")
_SPEED_COLS = {"library", "bare fi_read"}       # ofi_probe's µs and GB/s rows


def machine_bound(col, label=""):
    """True for a cell of absolute time or rate: its column says so, or, for
    a column without a unit, its row's label ends with one ("..., ms").  Not
    a ratio ("÷", " / " in the column)."""
    if "÷" in col or " / " in col:
        return False
    return (col in _SPEED_COLS or any(u in col for u in _SPEED_UNITS)
            or col.endswith(" s") or " s (" in col
            or label.rsplit(", ", 1)[-1] in _SPEED_UNITS + ("s",) and ", " in label)


def memcpy_gbs(mib=256, reps=5):
    """GB/s of the best of `reps` copies of `mib` MiB (numpy), the machine's
    memory bandwidth as the benchmarks' memcpy columns see it."""
    import numpy as np
    a = np.ones(mib << 20, dtype=np.uint8)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t0)
    return a.nbytes / best / 1e9


def machine():
    """What the record's absolute figures depend on."""
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": os.uname().release,
            "memcpy_gb_s": round(memcpy_gbs(), 2)}


def same_machine(a, b, tol=0.20):
    """Whether two records' machines are the same for absolute figures: the
    same CPU model and cores, memcpy bandwidth within `tol`."""
    if not a or not b:
        return False
    return (a.get("cpu") == b.get("cpu") and a.get("cores") == b.get("cores")
            and abs(a["memcpy_gb_s"] - b["memcpy_gb_s"]) <= tol * b["memcpy_gb_s"])


def describe(m):
    return (f"{m['cpu'] or 'CPU ?'}, {m['cores']} cores, kernel {m['kernel']}, "
            f"memcpy {m['memcpy_gb_s']:g} GB/s" if m else "machine not recorded")


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


def measure(fig, rounds, log=print, settle_s=0.0, build=True):
    """Run fig's arms interleaved for `rounds` rounds; return the record.
    With settle_s, each arm first waits up to that long for the load average
    to fall to 1 per core (what it then is, is what the record keeps).
    build=False: the figure's binaries as they are (no Bazel build first)."""
    if fig.build and build:
        log("+ " + " ".join(fig.build))
        subprocess.run(fig.build, cwd=TOP, check=True)
    rec = {"figure": fig.name, "commit": _git("rev-parse", "--short", "HEAD"),
           # a tree with changes outside docs/ (the runner itself writes docs/)
           # (split() of the whole line: _git strips the first line's leading
           # status column, " M docs/..." would read as "M docs/...")
           "dirty": any(not l.split(None, 1)[-1].startswith("docs/") for l in
                        _git("status", "--porcelain", "--untracked-files=no").splitlines()),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "cores": os.cpu_count(), "machine": machine(),
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
            f"{rec['date']}, {describe(rec.get('machine'))}, load average {min(rec['load']):.2f}–"
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
        json.dump({k: rec[k] for k in ("figure", "commit", "date", "cores", "machine", "load",
                                       "loaded", "arms", "table")}, f, indent=1)
        f.write("\n")


def unwritten(top=None):
    """The figures with no published record (docs/figures/NAME.json): their doc
    still holds a hand-run table between the markers."""
    return [n for n in FIGURES
            if not os.path.exists(os.path.join(top or TOP, "docs", "figures", n + ".json"))]


# A figure's same-run baseline (memcpy or a local gather of the same rows):
# column -> whether it is a rate (True) or a time (False).  It measures the
# host, not the code: check shows it instead of judging it, and widens the
# range of the row's absolute cells by how much it moved.
BASELINES = {"memcpy GB/s, same run": True, "local np.take µs/row": False,
             "per-row memcpy of the same rows, ns": False, "memcpy µs": False,
             "np.take µs": False}
_RATE_UNITS = ("GB/s", "MB/s", "samples/s")


def is_rate(col, label=""):
    """Whether a machine-bound cell is a rate (higher is faster), not a time."""
    return (any(u in col for u in _RATE_UNITS) or "bandwidth" in label
            or label.rsplit(", ", 1)[-1] in _RATE_UNITS)


def host_speedup(published, rec):
    """{row label: how many times faster the host's baseline ran now than in
    the published record}, for the rows that have a baseline column."""
    new = {(l, c): s["median"] for l, cells in rec["table"] for c, s in cells}
    rows = {}
    for label, cells in published["table"]:
        for col, s in cells:
            now = new.get((label, col))
            if col in BASELINES and now and s["median"]:
                rows[label] = now / s["median"] if BASELINES[col] else s["median"] / now
    return rows


# Ratio columns of ddstore against what a user would otherwise use, and the
# side on which ddstore is ahead: beyond the published range on that side a
# cell is "faster", not a failure (the claim the figure makes still holds).
_AHEAD_HIGH = ("÷ the best other loader's", "DistributedSampler ÷ DistSampler, first index",
               "read speed ÷", "packed speed / per field", "pool off ÷ on")
_AHEAD_LOW = ("library time ÷ bare's", "get_batch / np.take", "get_batch / clip", "÷ memcpy",
              "epoch_begin ÷ barrier", "epoch_end ÷ barrier")


def ahead_side(col, label=""):
    """"high" or "low": the side on which a cell says ddstore (or the host) is
    faster; None for a cell without one (memory, counts, other ratios)."""
    if machine_bound(col, label):
        return "high" if is_rate(col, label) else "low"
    if any(k in col for k in _AHEAD_HIGH):
        return "high"
    if any(col.startswith(k) or col == k for k in _AHEAD_LOW):
        return "low"
    return None


def compare(published, rec, tol, strict=False):
    """[(label, column, published summary, new median, verdict, host factor)]
    for every published cell; verdict "ok", "NOT REPRODUCED", "other machine"
    (an absolute cell measured on another machine than the published one: not
    compared unless `strict`), "baseline" (a same-run memcpy column: the
    host's speed, shown and not judged), or "faster" (beyond the published
    range on the side where ddstore or the host is faster: an absolute time or
    rate, or a ratio of ddstore to the alternative, `ahead_side`; the claim
    holds, the figure may want rewriting; not a failure unless `strict`).

    An absolute cell in a row with a same-run baseline is ok within the
    published range or within that range scaled by how much the baseline
    moved: a VM host's memory bandwidth drifts by tens of percent within an
    hour, and a read of the same rows with it (though not always in
    proportion).  The factor is the 6th field (1.0 where nothing was scaled)."""
    new = {(l, c): s for l, cells in rec["table"] for c, s in cells}
    same = strict or same_machine(rec.get("machine"), published.get("machine"))
    rows = {} if strict else host_speedup(published, rec)
    out = []
    for label, cells in published["table"]:
        for col, s in cells:
            n = new.get((label, col))
            m = None if n is None else n["median"]
            bound = machine_bound(col, label)
            f = rows.get(label) if bound or col in BASELINES else None
            lo, hi = s["min"] * (1 - tol), s["max"] * (1 + tol)
            if f is not None and col not in BASELINES:
                g = f if is_rate(col, label) else 1 / f
                lo, hi = min(lo, lo * g), max(hi, hi * g)
            side = None if strict else ahead_side(col, label)
            if col in BASELINES and m is not None and not strict:
                verdict = "baseline"
            elif m is not None and f is None and not same and bound:
                verdict = "other machine"
            elif m is not None and lo <= m <= hi:
                verdict = "ok"
            elif m is not None and (side == "high" and m > hi or side == "low" and m < lo):
                verdict = "faster"
            else:
                verdict = "NOT REPRODUCED"
            out.append((label, col, s, m, verdict, 1.0 if f is None else f))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list")
    for c in ("run", "check"):
        p = sub.add_parser(c)
        p.add_argument("names", nargs="*", help="figure names, or 'all'")
        p.add_argument("--rounds", type=int, default=None,
                       help="rounds (default: the figure's own, see `list`)")
        p.add_argument("--loaded", action="store_true",
                       help="accept a run at load above 1 per core (marked as such)")
        p.add_argument("--out", default=os.path.join(TOP, "out", "figures"))
        p.add_argument("--settle", type=float, default=300.0,
                       help="seconds each arm may wait for the load average to fall to 1 "
                            "per core (an arm's own load takes a minute or two to decay)")
        p.add_argument("--no-build", action="store_true",
                       help="use the figures' binaries as built (no `bazel build` first; "
                            "a shared machine queues builds behind one lock)")
        if c == "run":
            p.add_argument("--write", action="store_true",
                           help="replace the table in its doc and docs/figures/NAME.json")
            p.add_argument("--all-unwritten", action="store_true",
                           help="every figure not yet written (no docs/figures/NAME.json)")
        else:
            p.add_argument("--tol", type=float, default=0.10)
            p.add_argument("--strict", action="store_true",
                           help="compare absolute times and rates even on another machine "
                                "than the published one")
    a = ap.parse_args(argv)
    if a.cmd == "list":
        todo = unwritten()
        for f in FIGURES.values():
            est = f"~{f.estimate_s / 60:.1f} min" if f.estimate_s else "?"
            print(f"{f.name:14} {'not written' if f.name in todo else 'written':11} "
                  f"{f.rounds} rounds {est:9} {f.doc}: {f.what}")
        known = [FIGURES[n].estimate_s for n in todo if FIGURES[n].estimate_s]
        print(f"not written: {len(todo)} ({', '.join(todo) or 'none'}); "
              f"estimated {sum(known) / 60:.0f} min for `run --all-unwritten --write` on a quiet "
              "machine, plus the arms' waits for the load to settle (--settle)")
        return 0
    names = list(FIGURES) if a.names == ["all"] else list(a.names)
    if getattr(a, "all_unwritten", False):
        names += [n for n in unwritten() if n not in names]
    if not names:
        raise SystemExit("name the figures (or 'all'; `run --all-unwritten`): "
                         + ", ".join(FIGURES))
    for n in names:
        if n not in FIGURES:
            raise SystemExit(f"no figure {n!r}; the figures: {', '.join(FIGURES)}")
    if not a.loaded and settle(os.cpu_count(), a.settle) > os.cpu_count():
        print(f"load average {loadavg():.2f} is above 1 per core ({os.cpu_count()} cores): "
              "wait for a quiet machine, or pass --loaded (the result is then marked)")
        return 2
    os.makedirs(a.out, exist_ok=True)
    bad, total = 0, {}
    for n in names:
        fig = FIGURES[n]
        pub = os.path.join(TOP, "docs", "figures", n + ".json")
        if a.cmd == "check" and not os.path.exists(pub):
            # not measured: there is nothing to compare with
            print(f"[{n}] nothing published yet ({pub} missing): run `tools/figures.py "
                  f"run {n} --write` on a quiet machine first")
            bad = 1
            continue
        rec = measure(fig, a.rounds or fig.rounds, settle_s=a.settle, build=not a.no_build)
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
            with open(pub) as f:
                published = json.load(f)
            if not same_machine(rec.get("machine"), published.get("machine")):
                print(f"[{n}] published on another machine ({describe(published.get('machine'))}"
                      f"; this one: {describe(rec.get('machine'))}): absolute times and rates "
                      "are shown, not compared" + (" (--strict: compared)" if a.strict else ""))
            counts = {}
            for label, col, s, m, verdict, f in compare(published, rec, a.tol, a.strict):
                got = "missing" if m is None else fmt(m)
                host = f" (host's baseline {f:.2f}× as fast: range scaled)" if f != 1.0 else ""
                print(f"[{n}] {verdict}: {label} / {col}: published "
                      f"{fmt(s['median'])} ({fmt(s['min'])}–{fmt(s['max'])}), now {got}{host}")
                bad = bad or (1 if verdict == "NOT REPRODUCED" else 0)
                counts[verdict] = counts.get(verdict, 0) + 1
                total[verdict] = total.get(verdict, 0) + 1
            print(f"[{n}] " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    if total:
        print("check: " + ", ".join(f"{v} {k}" for k, v in sorted(total.items())))
    return bad


if __name__ == "__main__":
    sys.exit(main())
