"""tools/figures.py, the runner behind published figures: arms run interleaved, ratios
are taken inside a round, the table lands between its markers, and `check` tells a
reproduced cell from one that is not.  Fake arms (small Python commands), no MPI."""
import importlib.util
import json
import os
import sys

import pytest

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("figures", os.path.join(TOP, "tools", "figures.py"))
figures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(figures)

@pytest.fixture(autouse=True)
def _steady_memcpy(request, monkeypatch):
    """measure() records the machine's memcpy bandwidth; beside the suite's
    other stages it varies by more than same_machine's 20 %, which would make
    two fake runs "other machines".  The fake figures take a fixed one
    (test_machine_record runs the real probe)."""
    if request.node.name != "test_machine_record":
        monkeypatch.setattr(figures, "memcpy_gbs", lambda *a, **k: 10.0)


def test_machine_record():
    """The machine a record names, and when two are the same for absolute cells."""
    m = figures.machine()
    assert set(m) == {"cpu", "cores", "kernel", "memcpy_gb_s"} and m["memcpy_gb_s"] > 0
    assert m["cores"] == os.cpu_count()
    same = dict(m, memcpy_gb_s=10.0)
    assert figures.same_machine(dict(same, memcpy_gb_s=11.0), same)
    assert not figures.same_machine(dict(same, memcpy_gb_s=13.0), same)   # 30 % apart
    assert not figures.same_machine(dict(same, cpu="another CPU"), same)
    assert not figures.same_machine(same, None)                         # not recorded


# An arm: appends its name to LOG (the order they ran in) and reports a value that
# depends on the round (how many times it ran before), times SCALE.
ARM = r"""
import json, os, sys
log, name, scale = sys.argv[1], sys.argv[2], float(sys.argv[3])
with open(log, "a") as f: f.write(name + "\n")
k = open(log).read().split().count(name)
print("noise"); print(json.dumps({"us": scale * k}))
"""


def fake(tmp_path, scale_b=2.0, name="fake"):
    log = str(tmp_path / "order.log")
    arm = lambda n, s: figures.Arm(n, [sys.executable, "-c", ARM, log, n, str(s)])
    cells = lambda rounds: [("row", [("a µs", [r["a"]["us"] for r in rounds]),
                                     ("b µs", [r["b"]["us"] for r in rounds]),
                                     ("a/b", [r["a"]["us"] / r["b"]["us"] for r in rounds])])]
    return figures.Figure(name, "doc.md", "a fake figure", [arm("a", 1.0), arm("b", scale_b)],
                          "case", None, cells), log


def test_interleaved_and_ratio_per_round(tmp_path):
    fig, log = fake(tmp_path)
    rec = figures.measure(fig, 3, log=lambda *_: None)
    assert open(log).read().split() == ["a", "b"] * 3          # A B A B A B
    (label, cells), = rec["table"]
    got = {c: s for c, s in cells}
    assert got["a µs"] == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert got["b µs"]["median"] == 4.0
    # the ratio of each round is 0.5 exactly, though the values grow across rounds
    assert got["a/b"] == {"median": 0.5, "min": 0.5, "max": 0.5, "n": 3}
    assert rec["cores"] == os.cpu_count() and len(rec["load"]) == 6


def test_write_between_markers_and_check(tmp_path):
    fig, _ = fake(tmp_path)
    rec = figures.measure(fig, 3, log=lambda *_: None)
    doc = tmp_path / "doc.md"
    doc.write_text("before\n<!-- figure fake -->\nold table\n<!-- /figure fake -->\nafter\n")
    figures.write(fig, rec, top=str(tmp_path))
    text = doc.read_text()
    assert text.startswith("before\n<!-- figure fake:") and text.endswith("-->\nafter\n")
    assert "old table" not in text and "| row | 2 (1–3) | 4 (2–6) | 0.5 (0.5–0.5) |" in text
    pub = json.loads((tmp_path / "docs" / "figures" / "fake.json").read_text())
    # the same figure again (a fresh order log: rounds count from 1) reproduces every cell
    (tmp_path / "again").mkdir()
    again, _ = fake(tmp_path / "again")
    assert all(v == "ok" for *_, v, _ in figures.compare(pub, figures.measure(
        again, 3, log=lambda *_: None), 0.1))
    # b now twice as slow: b's cells and the ratio are not reproduced, a's are
    (tmp_path / "slow").mkdir()
    slow, _ = fake(tmp_path / "slow", scale_b=4.0)
    rec = figures.measure(slow, 3, log=lambda *_: None)
    res = {(c, v) for _, c, _, _, v, _ in figures.compare(pub, rec, 0.1)}
    assert res == {("a µs", "ok"), ("b µs", "NOT REPRODUCED"), ("a/b", "NOT REPRODUCED")}
    # published on another machine: the absolute cells are not compared, the
    # ratio still is (and --strict compares them all)
    pub["machine"] = dict(pub["machine"], cpu="another CPU")
    res = {(c, v) for _, c, _, _, v, _ in figures.compare(pub, rec, 0.1)}
    assert res == {("a µs", "other machine"), ("b µs", "other machine"),
                   ("a/b", "NOT REPRODUCED")}
    res = {(c, v) for _, c, _, _, v, _ in figures.compare(pub, rec, 0.1, strict=True)}
    assert res == {("a µs", "ok"), ("b µs", "NOT REPRODUCED"), ("a/b", "NOT REPRODUCED")}


def test_baseline_scales_the_row():
    """A same-run memcpy column measures the host: an absolute cell of its row
    is ok in the published range or in that range scaled by how much the
    baseline moved; the baseline shows as "baseline"; ratios are judged as they
    are; beyond the range on the fast side a cell is "faster" (not a failure)."""
    cell = lambda v: {"median": v, "min": v, "max": v, "n": 1}
    pub = {"machine": {"cpu": "x", "cores": 2, "kernel": "k", "memcpy_gb_s": 10.0},
           "table": [("3136 B", [("µs/row", cell(1.0)), ("GB/s", cell(3.0)),
                                 ("memcpy GB/s, same run", cell(4.0)),
                                 ("read speed ÷ memcpy's", cell(0.75))]),
                     ("threads", [("GB/s per rank, 2 threads", cell(2.0))])]}
    # the host's memory 1.5x as fast, the read with it: all reproduced (scaled)
    fast = {"machine": dict(pub["machine"], memcpy_gb_s=15.0),
            "table": [("3136 B", [("µs/row", cell(0.667)), ("GB/s", cell(4.5)),
                                  ("memcpy GB/s, same run", cell(6.0)),
                                  ("read speed ÷ memcpy's", cell(0.75))]),
                      ("threads", [("GB/s per rank, 2 threads", cell(3.0))])]}
    got = {c: (v, f) for _, c, _, _, v, f in figures.compare(pub, fast, 0.1)}
    assert got == {"µs/row": ("ok", 1.5), "GB/s": ("ok", 1.5),
                   "memcpy GB/s, same run": ("baseline", 1.5),
                   "read speed ÷ memcpy's": ("ok", 1.0),
                   # a row without a baseline: this record's machine probe is
                   # 50 % faster, another machine for an unscaled absolute cell
                   "GB/s per rank, 2 threads": ("other machine", 1.0)}
    # the read did not follow the host (noise in a small baseline): still in the
    # published range, so ok
    lag = json.loads(json.dumps(fast))
    lag["table"][0][1][0] = ("µs/row", cell(1.0))
    got = {c: v for _, c, _, _, v, _ in figures.compare(pub, lag, 0.1)}
    assert got["µs/row"] == "ok"
    # the host as fast as published, the read slower: not reproduced
    slow = json.loads(json.dumps(pub))
    slow["table"][0][1][0] = ("µs/row", cell(1.3))
    got = {c: v for _, c, _, _, v, _ in figures.compare(pub, slow, 0.1)}
    assert got["µs/row"] == "NOT REPRODUCED" and got["GB/s"] == "ok"
    # the read faster than the scaled range (the code got faster): "faster",
    # which does not fail a check; so is a ratio of ddstore to memcpy beyond its
    # range on ddstore's side
    quick = json.loads(json.dumps(pub))
    quick["table"][0][1][0] = ("µs/row", cell(0.5))
    quick["table"][0][1][1] = ("GB/s", cell(6.0))
    quick["table"][0][1][3] = ("read speed ÷ memcpy's", cell(1.5))
    got = {c: v for _, c, _, _, v, _ in figures.compare(pub, quick, 0.1)}
    assert (got["µs/row"], got["GB/s"], got["read speed ÷ memcpy's"]) == (
        "faster", "faster", "faster")
    # ... and the other side fails, for the ratio too
    behind = json.loads(json.dumps(pub))
    behind["table"][0][1][3] = ("read speed ÷ memcpy's", cell(0.5))
    behind["table"][0][1][0] = ("µs/row", cell(1.5))
    got = {c: v for _, c, _, _, v, _ in figures.compare(pub, behind, 0.1)}
    assert got["µs/row"] == got["read speed ÷ memcpy's"] == "NOT REPRODUCED"
    assert figures.ahead_side("get_batch / np.take (≤ 1.1 wanted)") == "low"
    assert figures.ahead_side("node PSS added ÷ torch-w0's") is None
    assert figures.ahead_side("epoch_end ÷ barrier") == "low"       # the call ÷ MPI_Barrier
    assert figures.ahead_side("wall, pool off ÷ on") == "high"      # the batch pool's gain
    assert figures.is_rate("library", "shm, 1 MiB bandwidth, 16 in flight")
    assert not figures.is_rate("library", "shm, 4 KiB latency")
    # unscaled, the fast host's cells would have failed: --strict says so
    got = {c: v for _, c, _, _, v, _ in figures.compare(pub, fast, 0.1, strict=True)}
    assert got["GB/s"] == "NOT REPRODUCED" and got["memcpy GB/s, same run"] == "NOT REPRODUCED"


def test_machine_bound_columns():
    """Absolute times and rates belong to a machine; ratios, counts, memory do not."""
    bound = ["method 0 µs/row", "GB/s", "samples/s, compute", "epoch s", "first index s",
             "epoch per rank s (est.)", "per-row memcpy of the same rows, ns", "library",
             "record encode ms"]
    free = ["m1 shm speed / m0 (≥ 0.9 wanted)", "read speed ÷ memcpy's", "a/b",
            "remote reads/batch, packed", "node PSS added, MiB", "bytes kept per variable",
            "epoch time", "samples/s ÷ the best other loader's, compute", "eager"]
    assert [c for c in bound if not figures.machine_bound(c)] == []
    assert [c for c in free if figures.machine_bound(c)] == []
    # a column without a unit, in a row whose label names one
    assert figures.machine_bound("eager", "thread reader open at 100,000 ranks, ms")
    assert not figures.machine_bound("eager", "bytes per rank, 2 ... 100,000 ranks")


def test_write_without_markers_is_a_clear_error(tmp_path):
    fig, _ = fake(tmp_path)
    rec = figures.measure(fig, 1, log=lambda *_: None)
    (tmp_path / "doc.md").write_text("no markers here\n")
    with pytest.raises(SystemExit, match="no markers for figure fake"):
        figures.write(fig, rec, top=str(tmp_path))


def test_failing_arm_names_itself(tmp_path):
    bad = figures.Figure("bad", "doc.md", "", [figures.Arm("boom", [sys.executable, "-c",
                                                                  "raise SystemExit(3)"])],
                         "case", None, lambda r: [])
    with pytest.raises(RuntimeError, match=r"arm boom failed \(exit 3\)"):
        figures.measure(bad, 1, log=lambda *_: None)


def test_every_figure_has_its_markers():
    for f in figures.FIGURES.values():
        text = open(os.path.join(TOP, f.doc)).read()
        assert f"<!-- figure {f.name}" in text and f"<!-- /figure {f.name} -->" in text, f.name


@pytest.mark.parametrize("text, want", [
    ('{\n "a": 1,\n "b": [2]\n}\n', {"a": 1, "b": [2]}),            # one indented document
    ('{"a": 1}\n{"a": 2}\n', [{"a": 1}, {"a": 2}]),                 # JSON lines
    ('{"a": 3}\n', {"a": 3}),
])
def test_arm_result_file(text, want):
    """An arm that writes its result to {json}: one document or JSON lines."""
    code = "import sys; open(sys.argv[1], 'w').write(sys.argv[2])"
    assert figures.Arm("w", [sys.executable, "-c", code, "{json}", text]).run(60) == want


def test_result_file_under_dir():
    """An arm with {dir}: the result is the named file the command wrote there."""
    code = "import sys, os; open(os.path.join(sys.argv[1], 'r.json'), 'w').write('{\"x\": 5}')"
    arm = figures.Arm("d", [sys.executable, "-c", code, "{dir}"], result="r.json")
    assert arm.run(60) == {"x": 5}


def test_loaders_cells_ratios_inside_a_round():
    """The loaders figure: ddstore over the best other loader of the same round."""
    def case(c, nc, co, mem):
        return {"case": c, "dataset": "d", "node_peak_pss_above_start_mib": mem,
                "epochs": [{"epoch": "no compute", "samples_per_s": nc},
                           {"epoch": "compute", "samples_per_s": co}]}
    rounds = [{"loaders": {"results": [case("ddstore-m0", 100, 10, 25), case("torch-w0", 20, 5, 100),
                                       case("torchdata-w0", 25, 4, 90),
                                       {"case": "mosaic-w0", "dataset": "d", "skipped": "x"}]}},
              {"loaders": {"results": [case("ddstore-m0", 50, 10, 30), case("torch-w0", 10, 2, 100),
                                       case("torchdata-w0", 5, 4, 90)]}}]
    cells = dict(figures._loaders_cells(rounds))
    vs = dict(cells["d, ddstore-m0 vs the others"])
    assert vs["samples/s ÷ the best other loader's, no compute"] == [4.0, 5.0]
    assert vs["samples/s ÷ the best other loader's, compute"] == [2.0, 2.5]
    assert vs["node PSS added ÷ torch-w0's"] == [0.25, 0.3]
    assert "d, mosaic-w0" not in cells


def test_settle_waits_for_the_load(monkeypatch):
    """settle() polls until the load average falls to the limit, or gives up."""
    loads = iter([5.0, 4.0, 1.5, 1.0])
    monkeypatch.setattr(figures, "loadavg", lambda: next(loads))
    monkeypatch.setattr(figures.time, "sleep", lambda s: None)
    assert figures.settle(2, 60, log=lambda *_: None) == 1.5
    loads2 = iter([9.0] * 1000)
    monkeypatch.setattr(figures, "loadavg", lambda: next(loads2))
    clock = iter(range(0, 10000, 10))
    monkeypatch.setattr(figures.time, "monotonic", lambda: next(clock))
    said = []
    assert figures.settle(2, 30, log=said.append) == 9.0
    assert said and "still 9.00" in said[0]


def test_rows_with_other_columns_get_their_own_header(tmp_path):
    """A figure's ratio rows (other columns) are a table of their own, not under
    the first rows' header."""
    fig, _ = fake(tmp_path)
    rec = figures.measure(fig, 1, log=lambda *_: None)
    rec["table"].append(("ratio row", [("a ÷ b", figures.summary([0.5]))]))
    text = figures.render(fig, rec)
    assert "| case | a µs | b µs | a/b |" in text
    assert "| case | a ÷ b |\n|---|---|\n| ratio row | 0.5 (0.5–0.5) |" in text


def test_arm_all_json_lines_and_text_parser():
    """lines=True: every JSON line of stdout (one per rank); parse=: text output."""
    code = "print('noise'); print('{\"rank\": 0}'); print('x'); print('{\"rank\": 1}')"
    assert figures.Arm("l", [sys.executable, "-c", code], lines=True).run(60) == [
        {"rank": 0}, {"rank": 1}]
    assert figures.Arm("l", [sys.executable, "-c", code]).run(60) == {"rank": 1}
    kv = "print('RESULT ok=1 provider=shm lat_us=3.5'); print('BARE us_per_read=7.25')"
    assert figures.Arm("p", [sys.executable, "-c", kv], parse=figures._kv).run(60) == [
        {"ok": 1.0, "provider": "shm", "lat_us": 3.5}, {"us_per_read": 7.25}]


def test_run_all_unwritten_uses_each_figures_rounds(tmp_path, monkeypatch):
    """`run --all-unwritten` runs the figures with no docs/figures/NAME.json, each for
    its own number of rounds unless --rounds says otherwise; `list` names them."""
    a, log = fake(tmp_path, name="a")
    b, _ = fake(tmp_path, name="b")
    a.rounds, b.rounds = 2, 3
    (tmp_path / "docs" / "figures").mkdir(parents=True)
    (tmp_path / "docs" / "figures" / "b.json").write_text("{}")     # b is written
    monkeypatch.setattr(figures, "FIGURES", {"a": a, "b": b})
    monkeypatch.setattr(figures, "TOP", str(tmp_path))
    assert figures.unwritten() == ["a"]
    out = str(tmp_path / "out")
    assert figures.main(["run", "--all-unwritten", "--loaded", "--settle", "0",
                         "--out", out]) == 0
    assert open(log).read().split() == ["a", "b"] * 2               # a's 2 rounds, not b
    assert len(json.load(open(os.path.join(out, "a.json")))["rounds"]) == 2
    assert not os.path.exists(os.path.join(out, "b.json"))
    open(log, "w").close()
    assert figures.main(["run", "a", "--rounds", "1", "--loaded", "--settle", "0",
                         "--out", out]) == 0
    assert open(log).read().split() == ["a", "b"]
    with pytest.raises(SystemExit, match="name the figures"):
        figures.main(["run", "--loaded", "--settle", "0", "--out", out])
    # check of a figure not written yet: exit 1 without measuring it
    open(log, "w").close()
    assert figures.main(["check", "a", "--loaded", "--settle", "0", "--out", out]) == 1
    assert open(log).read() == ""


def test_every_figure_has_rounds_and_the_new_ones_an_estimate():
    for f in figures.FIGURES.values():
        assert f.rounds >= 1, f.name
    # a figure added for a hand-run table says how long it takes (at most ~3 minutes)
    for n in ("reads", "epochs", "ofi_probe", "method2", "sampler", "planner", "vae",
              "torch_overhead", "ragged", "mem_stores", "scale", "filecomm", "scale_ofi"):
        assert 0 < figures.FIGURES[n].estimate_s <= 180, n


def test_plan_bench_parse():
    text = """planner: 4 owners x 15000 rows, row 3136 B, no read limit, best of 5 x 9 batches
  128 rows x 3136 B, random                     1257 ns/batch    9.82 ns/row  (127.6 reads)
  128 rows x 3136 B, range                        20 ns/batch
with max_read_bytes = 1 MiB:
 1024 rows x 3136 B, random in 4*n rows        11014 ns/batch   10.76 ns/row  (705.1 reads)
store get_batch,  128 local rows x 3136 B:    32863 ns/call; per-row memcpy of the same rows    32923 ns
store ragged_get_batch,  128 local samples (3938 KB):   130763 ns/call; per-sample memcpy of the same payload   125520 ns; ragged_sizes   3727 ns
"""
    got = figures._plan_parse(text)
    assert got == {"128 rows, random": {"ns_batch": 1257.0},
                   "128 rows, range": {"ns_batch": 20.0},
                   "1024 rows, random in 4*n rows, max_read_bytes 1 MiB": {"ns_batch": 11014.0},
                   "store get_batch, 128 local rows": {"ns_batch": 32863.0, "memcpy_ns": 32923.0},
                   "store ragged_get_batch, 128 local samples": {"ns_batch": 130763.0,
                                                                 "memcpy_ns": 125520.0}}
    cells = dict(figures._planner_cells([{"plan": got}, {"plan": got}]))
    assert cells["store get_batch, 128 local rows"][2] == ("÷ memcpy", [32863 / 32923] * 2)


def test_ofi_probe_ratio_inside_a_round():
    """Library time over the bare loop's of the same round; for bandwidth the
    bare GB/s over the library's (a time ratio too)."""
    def rnd(scale):
        lib = [{"lat_us": 2.0 * scale, "bw_gbs": 4.0, "row_us": 1.0 * scale}]
        bare = [{"us_per_read": 4.0 * scale}, {"gb_s": 2.0, "us_per_read": 1.0},
                {"us_per_read": 0.5 * scale}]
        return {"lib_tcp": lib, "bare_tcp": bare, "lib_shm": lib, "bare_shm": bare}
    cells = dict(figures._ofi_probe_cells([rnd(1.0), rnd(3.0)]))
    assert dict(cells["tcp, 4 KiB latency"])["library time ÷ bare's"] == [0.5, 0.5]
    assert dict(cells["shm, 1 MiB bandwidth, 16 in flight"])["library time ÷ bare's"] == [0.5, 0.5]
    assert dict(cells["tcp, 3136 B rows × 128"])["library time ÷ bare's"] == [2.0, 2.0]


def test_scale_ofi_slopes_and_mem_stores_max_over_ranks():
    def ofi(peers, R, store, reader, allread, var):
        return {"kind": "scale_ofi", "peers": peers, "nranks": R, "store_bytes": store,
                "reader_bytes": reader, "reader_bytes_all_read": allread, "var_bytes": var,
                "create_ms": R / 1e4, "reader_open_ms": 1.0, "add_ms": 2.0,
                "read_every_owner_first_ms": 5.0 if allread >= 0 else -1000.0}
    res = [ofi(p, 2, 1000, 500, 700, 100) for p in ("eager", "lazy")] + \
        [ofi("eager", 1002, 1000 + 184000, 500 + 119000, 700 + 140000, 100 + 48000),
         ofi("lazy", 1002, 1000 + 73000, 500 + 8000, 700 + 140000, 100 + 48000),
         ofi("eager", 100002, 9e9, 500 + 11900000, -1, 100 + 4800000),
         ofi("lazy", 100002, 9e9, 500 + 800000, -1, 100 + 4800000)]
    cells = dict(figures._scale_ofi_cells([{"scale_ofi": res}]))
    assert dict(cells["per reader at open, B per rank"]) == {"eager": [119.0], "lazy": [8.0]}
    assert dict(cells["per reader after reading from every rank (R ≤ 1,002), B per rank"]) == \
        {"eager": [140.0], "lazy": [140.0]}
    assert dict(cells["per variable, B per rank"]) == {"eager": [48.0], "lazy": [48.0]}
    mem = lambda before, read: {"before": {"private_kib": before}, "read": {"private_kib": read}}
    rnd = {f"{fab}_{k}": [mem(0, 1024 * k * (10 if fab == "tcp" else 1)),
                          mem(0, 2048 * k * (10 if fab == "tcp" else 1))]
           for fab in ("tcp", "shm") for k in (1, 2, 3)}
    cells = dict(figures._mem_stores_cells([rnd]))
    assert dict(cells["3 stores"]) == {"tcp: MiB per rank": [60.0], "tcp: per store": [20.0],
                                       "shm: MiB per rank": [6.0], "shm: per store": [2.0]}


def test_ragged_rows_in_rank_order_whatever_the_ranks_wrote_first():
    def reads(m, r, rg):
        return {"kind": "ragged_reads", "method": m, "fabric": "shm" if m else "", "rank": r,
                "ragged_us_median": rg, "fixed_us_median": 2.0, "memcpy_us_median": 1.0,
                "ragged_vs_fixed_median": 1.0, "ragged_vs_fixed": 1.0, "sizes_us_median": 5.0}
    r1 = [reads(1, 1, 4.0), reads(0, 1, 2.0), reads(0, 0, 1.0), reads(1, 0, 3.0)]
    r2 = [reads(0, 0, 1.0), reads(1, 0, 3.0), reads(0, 1, 2.0), reads(1, 1, 4.0)]
    cells = figures._ragged_cells([{"ragged": r1}, {"ragged": r2}])
    assert [l for l, _ in cells] == ["method 0, rank 0", "method 0, rank 1",
                                     "method 1 (shm), rank 0", "method 1 (shm), rank 1"]
    assert [c[0][1] for _, c in cells] == [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]]


def test_reads_cells_speed_over_memcpy_inside_a_round():
    def pt(rb, b, t, gbs, mgbs):
        return {"row_bytes": rb, "batch": b, "threads": t, "us_per_row": rb / gbs / 1e3,
                "gb_per_s": gbs, "memcpy_gb_per_s": mgbs}
    def rnd(k):                              # round k: everything k times faster
        r = {}
        for a in ("m0", "m1_shm", "m1_tcp"):
            r[a] = [pt(3136, 1, 1, 1.0 * k, 4.0 * k), pt(3136, 128, 1, 3.0 * k, 4.0 * k)]
            r[a + "_threads"] = [pt(3136, 128, t, t * k, 1.0) for t in (1, 2, 4, 8)]
        return r
    cells = {(label, col): v for label, cols in figures._reads_cells([rnd(1), rnd(2), rnd(3)])
             for col, v in cols}
    assert cells[("method 1, shm, 3136 B × 128", "GB/s")] == [3.0, 6.0, 9.0]
    assert cells[("method 1, shm, 3136 B × 128", "read speed ÷ memcpy's")] == [0.75] * 3
    assert cells[("method 1, tcp;ofi_rxm, 3136 B × 128", "GB/s per rank, 8 threads")] == \
        [8.0, 16.0, 24.0]


def test_no_build_skips_the_figures_build(tmp_path):
    fig, log = fake(tmp_path)
    fig.build = [sys.executable, "-c", f"open({str(tmp_path / 'built')!r}, 'w')"]
    figures.measure(fig, 1, log=lambda *_: None, build=False)
    assert not (tmp_path / "built").exists()
    figures.measure(fig, 1, log=lambda *_: None)
    assert (tmp_path / "built").exists()
