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
    assert all(ok for *_, ok in figures.compare(pub, figures.measure(
        again, 3, log=lambda *_: None), 0.1))
    # b now twice as slow: b's cells and the ratio are not reproduced, a's are
    (tmp_path / "slow").mkdir()
    slow, _ = fake(tmp_path / "slow", scale_b=4.0)
    res = {(c, ok) for _, c, _, _, ok in figures.compare(pub, figures.measure(
        slow, 3, log=lambda *_: None), 0.1)}
    assert res == {("a µs", True), ("b µs", False), ("a/b", False)}


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
