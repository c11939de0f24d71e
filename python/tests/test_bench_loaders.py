"""tools/bench_loaders.py shortened: every loader it compares delivers one
correct epoch at 4 ranks (each sample's index over all ranks covers the
dataset, the first and last batch of every epoch on every rank equal the
source's samples) and its figures are recorded. Speed is not asserted: the
benchmark is a program (./ddstore bench). Launches jobs of its own: 1-rank
stage only. A loader that is not installed is skipped, saying why.

Run: tools/ddrun -n 1 -- .venv/bin/python -m pytest -q python/tests/test_bench_loaders.py
"""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from _torch_util import world  # noqa: E402

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(TOP, "tools", "bench_loaders.py")
# the cases run: every loader, each way of reading (in the training
# process: w0 / m*, forked workers: w2) at least once
FAMILIES = {"ddstore": ("ddstore-m0", "ddstore-m1"), "torch": ("torch-w2",),
            "torchdata": ("torchdata-w0",), "mosaic": ("mosaic-w2",)}
N = 3000            # synthetic samples: not a multiple of ranks x batch


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    comm = world()
    if comm.Get_size() != 1:
        pytest.skip("launches 4-rank jobs of its own: 1-rank stage only")
    out = str(tmp_path_factory.mktemp("bench_loaders"))
    # the jobs are launched fresh: drop this rank's MPI environment
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith(("OMPI_", "PMIX_", "PMI_", "HYDRA_", "SLURM_"))
                   and k not in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"))}
    cmd = [sys.executable, BENCH, "--quick", "--datasets", "synthetic", "--synthetic-n", str(N),
           "--row-bytes", "200", "--batch", "32", "--compute-cols", "16", "--reps", "1",
           "--timeout", "300",
           "--cases", ",".join(c for cs in FAMILIES.values() for c in cs), "--out", out]
    p = subprocess.run(cmd, cwd=TOP, env=env, capture_output=True, text=True, timeout=1500)
    path = os.path.join(out, "bench_loaders.json")
    assert os.path.exists(path), f"no results (exit {p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    with open(path) as f:
        res = json.load(f)
    res["_proc"] = p
    res["_out"] = out
    return res


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_loader_delivers_correct_epochs(bench, family):
    by_case = {r["case"]: r for r in bench["results"]}
    cases = FAMILIES[family]
    assert all(c in by_case for c in cases), f"cases missing: {sorted(by_case)}"
    skipped = [by_case[c]["skipped"] for c in cases if "skipped" in by_case[c]]
    if len(skipped) == len(cases):
        pytest.skip(f"SKIP: {family}: {skipped[0]}")
    for c in cases:
        r = by_case[c]
        if "skipped" in r:
            continue
        assert "failed" not in r, f"{c}: {r['failed']}\n{bench['_proc'].stdout[-3000:]}"
        assert r["ranks"] == 4 and r["n"] == N and r["row_bytes"] == 200
        assert [e["epoch"] for e in r["epochs"]] == ["first", "no compute", "compute"]
        for e in r["epochs"]:
            assert e["covered"] and e["content_ok"] and e["distinct"] == N, (c, e)
            # every rank delivers its share (padding repeats at most a batch per rank)
            assert N <= e["samples"] <= N + 4 * 32, (c, e)
            assert e["samples_per_s"] > 0 and e["seconds"] > 0, (c, e)
        assert len(r["memory"]) == 4
        assert all(m["peak_rss_mib"] > 0 and m["peak_pss_epochs_mib"] > 0 for m in r["memory"])
        assert r["node_peak_pss_mib"] == pytest.approx(
            sum(m["peak_pss_epochs_mib"] for m in r["memory"]))


def test_run_record_and_plot(bench):
    """The JSON names what was measured on, and the plot is written."""
    run = bench["run"]
    assert run["commit"] and len(run["loadavg_start"]) == 3 and run["cpus"] >= 1
    assert "--synthetic-n" in run["argv"]
    with open(os.path.join(bench["_out"], "bench_loaders.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert bench["_proc"].returncode == 0, bench["_proc"].stdout[-3000:]


def test_bad_case_name_is_an_error():
    """A case the benchmark does not know is a usage error naming it."""
    p = subprocess.run([sys.executable, BENCH, "--cases", "ddstore-m0,nosuch"], cwd=TOP,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "nosuch" in p.stderr, p.stderr
