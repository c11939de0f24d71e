"""Snapshots (issue 37, item 2): ds.save / DistDataset.attach and
PyDDStore.save / PyDDStore.attach at any world size.

Within one job the world sizes differ through ddstore_width: a dataset
whose store groups have w ranks saves a w-rank snapshot (the first group
writes it), and attaches with any other width.  So at 4 ranks: saved by
1, 2, 4 ranks, attached by 1, 2, 3 (width 3: groups of 3 and 1) and 4.
Every item equals the source, for fixed, ragged, text and packed fields,
across methods; what is read at another world size is the rank's range
(plus the checksum chunks around it); a stale, truncated, tampered or
foreign snapshot is the same ValueError on every rank, and the store stays
usable.

Run at 1, 2, 3 or 4 ranks:
    tools/ddrun -n 4 -- .venv/bin/python -m pytest -q python/tests/test_snapshot.py
"""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="DistDataset needs torch")

import pyddstore  # noqa: E402
from pyddstore import snapshot as snap  # noqa: E402
from pyddstore.torch import DistDataset  # noqa: E402

from _torch_util import (assert_all, on_rank0, require_method, shared_tmpdir,  # noqa: E402
                         world)

N = 41


class Source(torch.utils.data.Dataset):
    """Graph-like samples: fixed, ragged (dims 0 and 1) and empty ones."""

    def __len__(self):
        return N

    def __getitem__(self, i):
        n = (i * 3) % 5
        return {"x": torch.arange(n * 2, dtype=torch.float32).reshape(n, 2) + i,
                "edges": torch.full((2, (i * 7) % 4), i, dtype=torch.int64),
                "y": torch.tensor([i * 0.5, -i], dtype=torch.float64),
                "id": torch.tensor(i, dtype=torch.int32)}


def _same(comm, ds, want, idx=None):
    idx = list(range(len(want))) if idx is None else idx
    bad = [(i, k) for i, it in zip(idx, ds.__getitems__(idx))
           for k, v in want[i].items()
           if not (it[k] == v if isinstance(v, str) else torch.equal(it[k], v))]
    assert_all(comm, not bad, f"wrong items {bad[:5]}")


def _dir(comm, tag):
    d = os.path.join(shared_tmpdir(comm, "snap"), tag)
    comm.Barrier()
    return d


@pytest.fixture(scope="module")
def want():
    s = Source()
    return [s[i] for i in range(N)]


@pytest.mark.parametrize("pack", [False, True], ids=["fields", "packed"])
def test_every_width_to_every_width(want, pack):
    comm = world()
    p = comm.Get_size()
    widths = sorted({1, 2, 3, p} & set(range(1, p + 1)))
    for w in widths:
        src = DistDataset(Source(), "g", comm, ddstore_width=w, ragged=True, pack_fields=pack)
        d = _dir(comm, f"w{w}-{int(pack)}")
        src.save(d)
        src.free()
        m = snap.load_manifest(d)
        assert_all(comm, m["nranks"] == min(w, p) and m["dataset"]["total"] == N,
                   f"manifest: {m['nranks']} ranks, {m['dataset']['total']} samples")
        for w2 in widths:
            ds = DistDataset.attach(d, comm, ddstore_width=w2)
            try:
                assert_all(comm, len(ds) == N and ds.fields == ["x", "edges", "y", "id"] and
                           ds.ragged_fields == {"x": 0, "edges": 1} and
                           ds.pack_fields == pack, repr(ds))
                _same(comm, ds, want)
                rep = ds.attach_report
                own = ds.store_comm.size == w     # (the last group may be smaller)
                assert_all(comm, not own or rep["bytes_read"] <= os.path.getsize(
                    os.path.join(d, snap.file_name(ds.store_comm.rank))),
                    f"read {rep['bytes_read']} bytes of a snapshot of its own size")
            finally:
                ds.free()


@pytest.mark.parametrize("saved_by,read_by", [(0, 1), (1, 0)])
def test_another_method_attaches_it(want, saved_by, read_by):
    comm = world()
    require_method(1, comm)
    src = DistDataset(Source(), "m", comm, method=saved_by, ragged=True)
    d = _dir(comm, f"m{saved_by}")
    src.save(d)
    src.free()
    ds = DistDataset.attach(d, comm, method=read_by)
    try:
        assert ds.method == read_by
        _same(comm, ds, want)
    finally:
        ds.free()


def test_bytes_read_at_another_world_size_are_the_new_range():
    """A big fixed field: each rank reads its rows plus at most a chunk
    before and after each piece (for their checksums)."""
    comm = world()
    p = comm.Get_size()
    if p == 1:
        pytest.skip("needs 2 ranks: a 1-rank snapshot attached by every rank alone "
                    "would read it all")
    rows = torch.arange(4000 * 64, dtype=torch.float64).reshape(4000, 64)
    src = DistDataset(torch.utils.data.TensorDataset(rows), "big", comm, ddstore_width=1)
    d = _dir(comm, "big")
    src.save(d)
    src.free()
    ds = DistDataset.attach(d, comm)            # saved by 1 rank, read by p
    try:
        mine = (ds.hi - ds.lo) * 64 * 8
        got = ds.attach_report["bytes_read"]
        # the rows, 2 checksum chunks and the header chunk
        assert_all(comm, mine <= got <= mine + 3 * snap.CHUNK, f"read {got} for {mine}")
        idx = list(range(0, 4000, 37))
        x = torch.stack([it[0] for it in ds.__getitems__(idx)])
        assert_all(comm, torch.equal(x, rows[idx]), "wrong rows")
    finally:
        ds.free()


def test_from_adios_then_attach():
    pio = pytest.importorskip("pyddstore.io")
    pytest.importorskip("adios2", reason="needs the adios2 package (pyddstore[adios2])")
    comm = world()
    d = shared_tmpdir(comm, "snap")
    path = os.path.join(d, "mols.bp")
    samples = [{"pos": np.full((i % 4, 3), i, np.float32), "smiles": "C" * (i % 5),
                "energy": np.array([i * 1.0])} for i in range(N)]
    on_rank0(comm, lambda: pio.write_adios(path, "train", samples))
    src = DistDataset.from_adios(path, "train", comm)
    s = _dir(comm, "adios")
    src.save(s)
    src.free()
    ds = DistDataset.attach(s, comm, ddstore_width=1)
    try:
        _same(comm, ds, [{k: (v if isinstance(v, str) else torch.as_tensor(v))
                          for k, v in x.items()} for x in samples])
    finally:
        ds.free()


def test_pyddstore_save_attach():
    comm = world()
    r, p = comm.Get_rank(), comm.Get_size()
    s = pyddstore.PyDDStore(comm)
    a = np.arange(r * 100, r * 100 + 3 * (r + 2), dtype=np.int64).reshape(-1, 3)  # uneven
    s.add("a", a)
    lens = np.arange(r + 3) % 3
    s.add_ragged("b", np.arange(int(lens.sum()) * 2, dtype=np.float32).reshape(-1, 2) + r,
                 lens)
    d = _dir(comm, "store")
    s.save(d)
    ta = np.zeros((sum(q + 2 for q in range(p)), 3), np.int64)
    s.get("a", ta, 0)
    tb = s.get_ragged("b", list(range(s.info("b")[0])))
    s.free()
    for width in sorted({1, p}):
        sub = comm.Split(r // width, r)
        t = pyddstore.PyDDStore.attach(d, sub)
        try:
            got = np.zeros_like(ta)
            t.get("a", got, 0)
            vb, lb = t.get_ragged("b", list(range(t.info("b")[0])))
            ok = np.array_equal(got, ta) and np.array_equal(vb, tb[0]) and \
                np.array_equal(lb, tb[1])
            if width == p:     # the saved distribution
                ok = ok and t.info_full("a")["local_rows"] == r + 2
            assert_all(comm, ok, f"width {width}: wrong rows")
        finally:
            t.free()
            sub.Free()


# --------------------------------------------------------------- bad ones --
def _saved(comm, tag):
    d = _dir(comm, tag)
    src = DistDataset(Source(), "bad", comm, ragged=True)
    src.save(d, overwrite=True)
    src.free()
    return d


def _raises_everywhere(comm, exc, match, fn):
    err = None
    try:
        fn().free()
    except Exception as e:  # noqa: BLE001 - checked below
        err = e
    assert_all(comm, isinstance(err, exc) and match in str(err),
               f"expected {exc.__name__} '{match}', got {type(err).__name__}: {err}")




def test_truncated(want):
    comm = world()
    d = _saved(comm, "trunc")
    f = os.path.join(d, snap.file_name(0))
    on_rank0(comm, lambda: os.truncate(f, os.path.getsize(f) - 100))
    _raises_everywhere(comm, ValueError, "truncated", lambda: DistDataset.attach(d, comm))
    # the job goes on: another snapshot attaches
    d2 = _saved(comm, "after-trunc")
    ds = DistDataset.attach(d2, comm)
    _same(comm, ds, want)
    ds.free()


def test_tampered():
    comm = world()
    d = _saved(comm, "tamper")
    f = os.path.join(d, snap.file_name(0))
    # a byte of the rows of field y (a payload: only the checksum can tell)
    at = snap.load_manifest(d)["files"][0]["sections"]["bad/2"]["rows"] + 5

    def flip():
        with open(f, "r+b") as fh:
            fh.seek(at)
            b = fh.read(1)
            fh.seek(at)
            fh.write(bytes([b[0] ^ 0xFF]))
    on_rank0(comm, flip)
    _raises_everywhere(comm, ValueError, "does not match its checksum",
                       lambda: DistDataset.attach(d, comm))
    # verify=False (DDSTORE_SNAPSHOT_VERIFY=0) reads it: the check is what caught it
    ds = DistDataset.attach(d, comm, verify=False)
    ds.free()
    rc = subprocess.run([sys.executable, "-m", "pyddstore.snapshot", "verify", d],
                        capture_output=True, text=True)
    assert rc.returncode == 1 and "does not match its checksum" in rc.stderr, rc.stderr


def test_foreign_and_stale():
    comm = world()
    a, b = _saved(comm, "fa"), _saved(comm, "fb")
    # a rank file of another snapshot (same size: saved alike)
    on_rank0(comm, lambda: shutil.copyfile(os.path.join(b, snap.file_name(0)),
                                            os.path.join(a, snap.file_name(0))))
    _raises_everywhere(comm, ValueError, "belongs to another snapshot",
                       lambda: DistDataset.attach(a, comm))
    # no manifest: an interrupted save
    on_rank0(comm, lambda: os.unlink(os.path.join(b, snap.MANIFEST)))
    _raises_everywhere(comm, FileNotFoundError, snap.MANIFEST,
                       lambda: DistDataset.attach(b, comm))
    # a manifest of another kind of file
    on_rank0(comm, lambda: open(os.path.join(b, snap.MANIFEST), "w").write('{"format": 1}'))
    _raises_everywhere(comm, ValueError, "not a ddstore snapshot manifest",
                       lambda: DistDataset.attach(b, comm))


def test_save_does_not_overwrite():
    comm = world()
    d = _saved(comm, "ow")
    src = DistDataset(Source(), "ow", comm, ragged=True)
    try:
        err = None
        try:
            src.save(d)
        except FileExistsError as e:
            err = e
        assert_all(comm, err is not None, "save() replaced a snapshot")
        src.save(d, overwrite=True)
    finally:
        src.free()


def test_pyddstore_attach_of_a_dataset_and_cli():
    comm = world()
    d = _saved(comm, "cli")

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "pyddstore.snapshot", *args],
                              capture_output=True, text=True)

    def ls_verify():
        out = cli("ls", d)
        assert out.returncode == 0 and "DistDataset 'bad', 41 samples" in out.stdout, out
        out = cli("verify", d)
        assert out.returncode == 0 and ": ok (" in out.stdout, out
    on_rank0(comm, ls_verify)
    s = pyddstore.PyDDStore.attach(d, comm)      # the raw variables
    try:
        assert_all(comm, sorted(s.names()) == ["bad/0", "bad/1", "bad/2", "bad/3"] and
                   s.info("bad/3")[0] == N, repr(s.names()))
    finally:
        s.free()

    def rm():
        out = cli("rm", d)
        assert out.returncode == 0 and not os.path.exists(d), out
    on_rank0(comm, rm)


def test_method2_reader_of_an_attached_core(tmp_path):
    """A core attached with method 2 publishes as any method-2 core: a
    DistDatasetReader in another process reads its items."""
    comm = world()
    if comm.Get_size() != 1:
        pytest.skip("1-rank stage only: a reader process beside a one-rank core")
    require_method(2, comm)
    src = DistDataset(Source(), "m2", comm, method=1, ragged=True)
    d = str(tmp_path / "snap")
    src.save(d)
    src.free()
    hs = tmp_path / "hs"
    hs.mkdir(mode=0o700)
    core = DistDataset.attach(d, comm, method=2, handshake_dir=str(hs))
    try:
        code = (
            "import torch, sys\n"
            "from pyddstore.torch import DistDatasetReader\n"
            f"r = DistDatasetReader('m2', handshake_dir={str(hs)!r}, n_core=1)\n"
            "it = r[7]\n"
            "ok = torch.equal(it['x'], torch.arange(2., dtype=torch.float32).reshape(1, 2) + 7)"
            " and torch.equal(it['edges'], torch.full((2, 1), 7)) and int(it['id']) == 7\n"
            "print('reader', len(r), ok)\n"
            "r.free()\n")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120, env=dict(os.environ, DDSTORE_PROGRESS="0"))
        assert p.returncode == 0 and f"reader {N} True" in p.stdout, p.stderr[-2000:]
    finally:
        core.free()
