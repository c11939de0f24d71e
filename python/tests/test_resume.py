"""ThreadDataLoader.state_dict()/load_state_dict() over a DistDataset with a
DistSampler, at the real rank count: resuming after k batches (prefetched
batches in flight) gives exactly the rest of the uninterrupted epoch (methods
0 and 1, with and without reuse_buffers); resuming at another world size
covers the rest of the epoch exactly; bad states are refused; the epoch
report's figures add up to the epoch's wall time.

Run: tools/ddrun -n 4 -- .venv/bin/python -m pytest -q python/tests/test_resume.py
"""
import json
import logging
import os
import pickle
import time

import pytest

torch = pytest.importorskip("torch")

from _torch_util import (Source, assert_all, env_set, fresh_name, require_method,  # noqa: E402
                         shared_tmpdir, world)
from pyddstore.torch import DistDataset, DistSampler, ThreadDataLoader  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

N = 97                          # samples; sample i is the int i*1_000_000_007 - 3
B = 3


def _ids(batch):
    return [(int(v) + 3) // 1_000_000_007 for v in batch]


@pytest.fixture(scope="module")
def stores():
    comm = world()
    out = {}
    for m in (0, 1):
        if m == 1:
            try:
                require_method(1, comm)
            except pytest.skip.Exception:
                continue
        hs = shared_tmpdir(comm, "resume") if m else None
        out[m] = DistDataset(Source("int", n=N), fresh_name(f"rs{m}"), comm, method=m,
                             handshake_dir=hs)
    yield comm, out
    for ds in out.values():
        ds.free()


def _loader(ds, workers, reuse, sampler, **kw):
    return ThreadDataLoader(ds, batch_size=B, sampler=sampler, num_workers=workers,
                            reuse_buffers=reuse, **kw)


@pytest.mark.parametrize("method", [0, 1])
@pytest.mark.parametrize("reuse", [False, True])
@pytest.mark.parametrize("workers", [0, 2])
def test_same_world_resume_equals_uninterrupted(stores, method, reuse, workers):
    comm, dss = stores
    if method not in dss:
        pytest.skip("method 1 not available in this build")
    ds = dss[method]
    s = DistSampler(ds, seed=3)
    s.set_epoch(2)
    lo = _loader(ds, workers, reuse, s)
    ref = [_ids(b) for b in lo]
    lo.close()
    errs = []
    for k in (0, 1, 4, len(ref)):
        s1 = DistSampler(ds, seed=3)
        s1.set_epoch(2)
        lo1 = _loader(ds, workers, reuse, s1)
        it = iter(lo1)
        got = [_ids(next(it)) for _ in range(k)]
        if workers and k < len(ref) - 2:
            # batches beyond k are prefetched (on hand or in flight), not consumed
            time.sleep(0.05)
        state = pickle.loads(pickle.dumps(lo1.state_dict()))
        it.close()
        lo1.close()
        s2 = DistSampler(ds, seed=3)
        lo2 = _loader(ds, workers, reuse, s2)
        lo2.load_state_dict(state)
        if len(lo2) != len(ref) - k:
            errs.append(f"k={k}: len {len(lo2)} != {len(ref) - k}")
        s2.set_epoch(2)
        rest = [_ids(b) for b in lo2]
        if got + rest != ref:
            errs.append(f"k={k}: {got} + {rest} != {ref}")
        after = lo2.state_dict()
        if after["samples_yielded"] != sum(map(len, ref)) or \
                after["sampler"]["position"] < N:
            errs.append(f"k={k}: state at the end {after}")
        lo2.close()
    assert_all(comm, not errs, "; ".join(errs))


def test_other_world_resume_covers_the_epoch(stores):
    """Consume k batches on W real ranks, resume on W' = W/2 real ranks (the
    others idle) or 2W (each rank plays two): the samples of both segments
    are the epoch, none repeated, none skipped (N - P is made a multiple of
    W' by the choice of k, so that there is no padding)."""
    comm, dss = stores
    ds = dss[0]
    w, r = comm.Get_size(), comm.Get_rank()
    errs = []
    for w2 in sorted({max(w // 2, 1), 2 * w} - {w}):
        # a k with N - k·B·w divisible by w2 (exists for these w, w2 and N = 97?)
        ks = [k for k in range(1, len(DistSampler(ds)) // B)
              if (N - k * B * w) % w2 == 0]
        s = DistSampler(ds, seed=21, drop_last=not ks)
        k = ks[0] if ks else 2
        lo = ThreadDataLoader(ds, batch_size=B, sampler=s, num_workers=2)
        it = iter(lo)
        before = [i for _ in range(k) for i in _ids(next(it))]
        state = lo.state_dict()
        it.close()
        lo.close()
        states = comm.allgather(state)
        if any(x != states[0] for x in states):
            errs.append(f"states differ across ranks: {states}")
        after = []
        for r2 in (range(r, w2, w) if w2 > w else ([r] if r < w2 else [])):
            s2 = DistSampler(ds, num_replicas=w2, rank=r2, seed=21, drop_last=not ks)
            lo2 = ThreadDataLoader(ds, batch_size=B, sampler=s2, num_workers=1)
            lo2.load_state_dict(states[0])
            after += [i for b in lo2 for i in _ids(b)]
            lo2.close()
        allb = sum(comm.allgather(before), [])
        alla = sum(comm.allgather(after), [])
        p = states[0]["sampler"]["position"]
        if len(allb) != p or len(set(allb)) != p:
            errs.append(f"w={w}: before: {len(allb)} samples, {len(set(allb))} distinct, P={p}")
        if len(set(alla)) != len(alla) or set(alla) & set(allb):
            errs.append(f"{w}->{w2}: a sample repeated")
        tail = (N - p) % w2 if not ks else 0
        if len(set(alla) | set(allb)) != N - tail:
            errs.append(f"{w}->{w2}: {N - tail - len(set(alla) | set(allb))} samples skipped")
    assert_all(comm, not errs, "; ".join(errs))


def test_fast_forward_other_samplers(stores):
    """A sampler other than DistSampler (here DistributedSampler, whose order
    depends only on its epoch): the state skips the batches consumed."""
    comm, dss = stores
    ds = dss[0]
    w, r = comm.Get_size(), comm.Get_rank()

    def make():
        s = DistributedSampler(ds, w, r, seed=4)
        s.set_epoch(1)
        return ThreadDataLoader(ds, batch_size=B, sampler=s, num_workers=2)

    lo = make()
    ref = [_ids(b) for b in lo]
    lo.close()
    lo = make()
    it = iter(lo)
    got = [_ids(next(it)) for _ in range(3)]
    state = lo.state_dict()
    it.close()
    lo.close()
    ok = state["sampler"] is None and state["batches_yielded"] == 3
    lo = make()
    lo.load_state_dict(state)
    rest = [_ids(b) for b in lo]
    lo.close()
    assert_all(comm, ok and got + rest == ref, f"{state} {got} {rest} {ref}")


def test_state_errors(stores):
    comm, dss = stores
    ds = dss[0]
    s = DistSampler(ds, seed=1)
    lo = ThreadDataLoader(ds, batch_size=B, sampler=s, num_workers=1)
    good = lo.state_dict()
    assert good["sampler"]["position"] == 0 and good["batches_yielded"] == 0
    it = iter(lo)
    next(it)
    with pytest.raises(RuntimeError, match="iterated"):
        lo.load_state_dict(good)
    with pytest.raises(RuntimeError, match="iterator"):
        s.load_state_dict(good["sampler"])
    it.close()
    lo.load_state_dict(good)                                  # closed: fine
    for state, field in (({**good, "format": "x"}, "format"),
                         ({**good, "batches_yielded": -1}, "batches_yielded"),
                         ({k: v for k, v in good.items() if k != "sampler"}, "sampler"),
                         ({**good, "sampler": None}, "sampler"),
                         ({**good, "sampler": {**good["sampler"], "seed": 2}}, "seed"),
                         ({**good, "sampler": {**good["sampler"], "n": N + 1}}, "n")):
        with pytest.raises(ValueError, match=f"'{field}'"):
            lo.load_state_dict(state)
    lo.close()
    plain = ThreadDataLoader(ds, batch_size=B, shuffle=True)
    with pytest.raises(ValueError, match="'sampler'"):
        plain.load_state_dict(good)
    unordered = ThreadDataLoader(ds, batch_size=B, sampler=s, num_workers=2, in_order=False)
    with pytest.raises(ValueError, match="in_order"):
        unordered.state_dict()


def test_report_adds_up(stores, tmp_path, monkeypatch, caplog):
    """start + waiting + between batches = the epoch's wall time (measured
    outside too); the per-rank spread; with DDSTORE_LOADER_REPORT, the summary
    and a JSON line on rank 0 at the epoch's end."""
    comm, dss = stores
    ds = dss[0]
    env_set(monkeypatch, DDSTORE_LOADER_REPORT=None)
    s = DistSampler(ds, seed=2)
    lo = ThreadDataLoader(ds, batch_size=B, sampler=s, num_workers=2)
    assert lo.epoch_report() is None
    t0 = time.perf_counter()
    n = 0
    for _ in lo:
        time.sleep(0.005)                   # the "training step"
        n += 1
    wall = time.perf_counter() - t0
    fig = lo.epoch_report()
    g = lo.epoch_report(gather=True)
    parts = fig["start_s"] + fig["wait_s"] + fig["compute_s"]
    errs = []
    if not fig["complete"] or fig["batches"] != n or fig["samples"] != len(s):
        errs.append(f"counts {fig}")
    if abs(parts - fig["wall_s"]) > 0.01 * fig["wall_s"]:
        errs.append(f"parts {parts} vs wall_s {fig['wall_s']}")
    if abs(fig["wall_s"] - wall) > 0.03 * wall + 0.002:
        errs.append(f"wall_s {fig['wall_s']} vs measured {wall}")
    if fig["compute_s"] < 0.005 * n:
        errs.append(f"compute_s {fig['compute_s']} < {0.005 * n}")
    if fig["fetched"] < n or fig["fetch_s"] <= 0 or fig["prefetch_depth"] != 4:
        errs.append(f"workers' side {fig}")
    if "read" not in fig or fig["read"]["rows"] < fig["samples"]:
        errs.append(f"store reads {fig.get('read')}")
    if g["ranks"] != comm.Get_size() or len(g["per_rank"]["wait_s"]) != g["ranks"] or \
            not 0 <= g["slowest_rank"] < g["ranks"] or g["wait_s"] != fig["wait_s"]:
        errs.append(f"gathered {g}")
    lo.close()
    # a loader made with the report asked for (the setting is read when the
    # loader is made): its epochs' summaries and JSON lines
    path = comm.bcast(str(tmp_path / "report.jsonl"), root=0)
    env_set(monkeypatch, DDSTORE_LOADER_REPORT=path)
    caplog.set_level(logging.INFO, logger="pyddstore.torch.report")
    lo = ThreadDataLoader(ds, batch_size=B, sampler=s, num_workers=2)
    sum(1 for _ in lo)
    n2 = sum(1 for _ in lo)
    lo.close()
    if comm.Get_rank() == 0:
        with open(path) as f:
            lines = [json.loads(x) for x in f][1:]    # the second epoch's
        if len(lines) != 1 or lines[0]["batches"] != n2 or lines[0]["epoch"] != 1 or \
                lines[0]["ranks"] != comm.Get_size():
            errs.append(f"JSON lines {lines}")
        if not any("waiting for data" in r.getMessage() for r in caplog.records):
            errs.append("no summary logged")
        tl = lines[0].get("timeline") if lines else None
        if not tl or len(tl["batches"]) != n2 or len(tl["fetches"]) < n2:
            errs.append(f"timeline in the JSON line {tl}")
        # the timeline plot from the JSON lines (and the first epoch's dict)
        pytest.importorskip("matplotlib")
        from pyddstore.torch.report import plot_timeline
        png = str(tmp_path / "timeline.png")
        if plot_timeline([fig] + lines, png) != png:
            errs.append("plot_timeline returned no path")
        with open(png, "rb") as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                errs.append("timeline plot is not a PNG")
        os.unlink(path)
    assert_all(comm, not errs, "; ".join(errs))


def test_report_collate_split_and_timed():
    """A collate_fn of its own is a step of its own: collate_s counts it
    (0 workers and 1); report.Timed gives torch's DataLoader the consumer's
    figures and timeline."""
    from pyddstore.torch.report import Timed
    comm = world()
    data = [torch.full((4,), float(i)) for i in range(12)]

    def slow_collate(rows):
        time.sleep(0.002)
        return torch.stack(rows)
    errs = []
    for w in (0, 1):
        lo = ThreadDataLoader(data, batch_size=3, num_workers=w, collate_fn=slow_collate)
        n = sum(1 for _ in lo)
        fig = lo.epoch_report(timeline=True)
        if n != 4 or fig["collate_s"] < 0.002 * n or fig["collate_s"] > fig["fetch_s"] or \
                len(fig["timeline"]["fetches"]) != n:
            errs.append(f"workers {w}: {fig}")
    t = Timed(torch.utils.data.DataLoader(data, batch_size=5))
    n = 0
    for _ in t:
        time.sleep(0.002)
        n += 1
    fig = t.epoch_report(timeline=True)
    if fig["batches"] != n or fig["samples"] != 12 or not fig["complete"] or \
            fig["compute_s"] < 0.002 * n or len(fig["timeline"]["batches"]) != n or \
            abs(fig["start_s"] + fig["wait_s"] + fig["compute_s"] - fig["wall_s"]) > 1e-3:
        errs.append(f"Timed: {fig}")
    assert_all(comm, not errs, "; ".join(errs))
