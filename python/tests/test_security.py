"""Security of what pyddstore.torch exchanges through shared directories
(docs/security.md): the tagged-JSON wire codec that replaced pickle for the
Python layer's collectives, and {name}.meta.json (run-scoped, removed at
free, validated, read without blocking).

These start their own processes or use one-rank stores over a one-rank
FileComm, so they run in the 1-rank stage only.  Attacks that need a second
user run the attacker's part as `nobody` (root only; skipped otherwise)."""
import json
import os
import pickle
import subprocess
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import pyddstore  # noqa: E402
from pyddstore.torch import DistDataset, DistDatasetReader  # noqa: E402
from pyddstore.torch import comm as tcomm  # noqa: E402
from pyddstore.torch import dataset as tds  # noqa: E402
from _util import launch_size as _world_size, spawn_plain  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
PKG = os.path.join(TOP, "python")   # plain processes import pyddstore from here


pytestmark = pytest.mark.skipif(_world_size() != 1,
                                reason="starts its own processes: 1-rank stage only")


class _Evil:
    """Unpickling this runs `touch <marker>`."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


# -- the wire codec ------------------------------------------------------------

ROUND_TRIP = [
    None, True, False, 0, -7, 2**80, "", "héllo\n\"x\"",
    (), [], {}, ("builtins", "ValueError", "bad on rank 3"),
    [1, [2, (3, None)], {"a": [True]}],
    {"key": "x", "shape": [3, 4], "dtype": "float32", "width": None},
    {1: "int", True: "bool", None: "none", ("a", 1, (None, False)): "tuple", "s": 1},
    {"structure": "dict", "fields": [{"key": (1, "x"), "descr": [("a", "<f4", (2,))]}]},
]


@pytest.mark.parametrize("obj", ROUND_TRIP, ids=range(len(ROUND_TRIP)))
def test_wire_round_trip(obj):
    ok, back = tcomm.wire_decode(tcomm.wire_encode(obj))
    assert ok
    assert back == obj
    assert type(back) is type(obj)
    if isinstance(obj, dict):
        assert [type(k) for k in back] == [type(k) for k in obj]   # keys keep their type


@pytest.mark.parametrize("obj, what", [
    (1.5, "float"), (np.int64(3), "numpy"), ({1, 2}, "set"), (b"x", "bytes"),
    ({1.5: "x"}, "dict key"), ({(1, 2.5): "x"}, "dict key"), ([object()], "object"),
    (ValueError("x"), "ValueError"),
])
def test_wire_refuses_other_types(obj, what):
    with pytest.raises(TypeError, match=what):
        tcomm.wire_encode(obj)


def test_wire_refuses_deep_nesting_and_foreign_bytes(tmp_path):
    deep = []
    for _ in range(200):
        deep = [deep]
    with pytest.raises(TypeError, match="nested deeper"):
        tcomm.wire_encode(deep)
    marker = tmp_path / "pwned"
    bad = [
        pickle.dumps(_Evil(marker)),                                   # never unpickled
        b'{"v":1,"ok":1.5}', b'{"v":1,"ok":NaN}', b'{"v":2,"ok":1}',
        b'{"v":1,"ok":["x",1]}', b'{"v":1,"ok":{"a":1}}', b'{"v":1,"ok":["d",[1]]}',
        b'{"v":1,"ok":["d",[["l"],1]]}', b'[1]', b"\xff\xfe",
        b'{"v":1,"ok":' + b"[" * 100000 + b"]" * 100000 + b"}",
    ]
    for data in bad:
        with pytest.raises(ValueError):
            tcomm.wire_decode(data)
    assert not marker.exists()


def test_gather_never_unpickles_a_peer(tmp_path):
    """What a peer (or a file posing as one) sends is decoded, never
    unpickled: a pickle payload is an error naming the rank, on every rank
    (the gathered messages' decoding of _core.Collective.allgather)."""
    marker = tmp_path / "pwned"
    parts = [tcomm.wire_encode(("x",)), pickle.dumps(_Evil(marker))]
    with pytest.raises(pyddstore.DDStoreError, match="message of rank 1 is not valid"):
        pyddstore._core.wire_gather(parts, "allgather")
    assert not marker.exists()
    # a rank that could not encode: TypeError naming it, on every rank
    with pytest.raises(TypeError, match=r"rank 1 \(allgather\): cannot"):
        pyddstore._core.wire_gather([parts[0], _error_message("cannot")], "allgather")


def _error_message(text):
    """A wire message saying the sender could not encode its value."""
    b = text.encode()
    return b"DDW1E" + len(b).to_bytes(4, "little") + b


_GATHER = """
    import os, sys, pyddstore
    from pyddstore.torch.comm import Comm
    fc = pyddstore.FileComm(%r, ns="wire", timeout=60)
    c = Comm("file", fc, fc.rank, fc.size, fc)
    got = c.allgather({("k", fc.rank): [fc.rank, None, (True, "s")]})
    assert got == [{("k", r): [r, None, (True, "s")]} for r in range(fc.size)], got
    try:
        c.allgather(1.5 if fc.rank == 1 else 1)       # rank 1 sends what cannot be sent
    except TypeError as e:
        print("TypeError:", e)
    else:
        raise AssertionError("no TypeError")
    assert c.allgather("after") == ["after"] * fc.size   # still in step
    print("ok", fc.rank)
"""


def test_type_error_on_every_rank_over_filecomm(tmp_path):
    res = spawn_plain(PKG, 2, _GATHER % str(tmp_path / "fc"))
    for r, (rc, out, err) in enumerate(res):
        assert rc == 0, f"rank {r}: {out}\n{err}"
        assert f"ok {r}" in out
    assert "TypeError: rank 1 (allgather)" in res[0][1] and "float" in res[0][1]
    assert "TypeError: allgather: a builtins.float" in res[1][1]


_AGREE = """
    import pyddstore
    from pyddstore.torch.comm import Comm, agree, run_agreed
    fc = pyddstore.FileComm(%r, ns="agree", timeout=60)
    c = Comm("file", fc, fc.rank, fc.size, fc)
    agree(c, None, "nothing")                       # every rank passed
    def step():
        if fc.rank >= 1:                            # ranks 1 and 2 fail: rank 1 wins
            raise KeyError("x" * 20000 if fc.rank == 1 else "two")
    try:
        run_agreed(c, step, "step")
    except KeyError as e:
        print("KeyError:", len(str(e)), str(e)[:40])
    else:
        raise AssertionError("no KeyError")
    assert c.allgather(fc.rank) == list(range(fc.size))   # still in step
    print("ok", fc.rank)
"""


def test_agreement_over_filecomm(tmp_path):
    """core's agreement (dds_comm_agree_record) under the Python layer's
    agree(): the lowest failing rank's exception type and message reach
    every rank (a long message cut, never lost), the ranks stay in step."""
    res = spawn_plain(PKG, 3, _AGREE % str(tmp_path / "fc"))
    for r, (rc, out, err) in enumerate(res):
        assert rc == 0, f"rank {r}: {out}\n{err}"
        assert f"ok {r}" in out
    assert "KeyError: " in res[0][1] and "rank 1 (step): 'xxxx" in res[0][1], res[0][1]
    assert "KeyError: 5 'two'" in res[2][1]              # a failing rank: its own
    assert "KeyError: 20002 'xxxx" in res[1][1]          # its own, whole


class _Agreed:
    """A communicator of 2 ranks whose agreement says what `failed` is (the
    (rank, info) Collective.agree returns), or raises it."""
    size = 2

    def __init__(self, failed):
        self.failed, self.calls = failed, []

    def collective(self):
        return self

    def agree(self, info, what):
        self.calls.append((info, what))
        if isinstance(self.failed, BaseException):
            raise self.failed
        return self.failed


@pytest.mark.parametrize("info,what,cls,msg", [
    (("builtins", "KeyError", "k"), "step", KeyError, "rank 1 (step): k"),
    (("pyddstore", "DDStoreError", "m"), "", pyddstore.DDStoreError, "rank 1: m"),
    # a constructor with another signature, a BaseException, a class of another module
    (("builtins", "UnicodeDecodeError", "u"), "s", RuntimeError,
     "rank 1 (s): UnicodeDecodeError: u"),
    (("builtins", "KeyboardInterrupt", ""), "s", RuntimeError, "rank 1 (s): KeyboardInterrupt"),
    (("os", "system", "x"), "s", RuntimeError, "rank 1 (s): system: x"),
    (("builtins", "ValueError"), "s", RuntimeError,
     "rank 1 (s): an error (its message did not reach this rank)"),
])
def test_agree_rebuilds_the_failing_ranks_error(info, what, cls, msg):
    """agree (C: _core.agree) on a rank that passed: the failing rank's class
    (built-in or pyddstore, else RuntimeError) with a message naming it."""
    c = _Agreed((1, info))
    with pytest.raises(cls) as e:
        tcomm.agree(c, None, what)
    assert type(e.value) is cls and str(e.value).strip("'") == msg
    assert c.calls == [(None, f"error agreement ({what})" if what else "error agreement")]


def test_agree_failing_rank_raises_its_own():
    """The failing rank sends (module, qualname, message) and re-raises its
    own exception, also when the agreement itself fails; no failure: None."""
    own = ValueError("mine")
    c = _Agreed((0, ("builtins", "ValueError", "mine")))
    with pytest.raises(ValueError) as e:
        tcomm.agree(c, own, "w")
    assert e.value is own and c.calls == [(("builtins", "ValueError", "mine"),
                                           "error agreement (w)")]
    with pytest.raises(ValueError) as e:
        tcomm.agree(_Agreed(pyddstore.DDStoreError("lost")), own)
    assert e.value is own
    assert tcomm.agree(_Agreed(None), None) is None
    with pytest.raises(pyddstore.DDStoreError, match="lost"):
        tcomm.agree(_Agreed(pyddstore.DDStoreError("lost")), None)
    assert tcomm.run_agreed(_Agreed(None), lambda: 7, "w") == 7
    with pytest.raises(ZeroDivisionError):
        tcomm.run_agreed(_Agreed((0, None)), lambda: 1 / 0, "w")


# -- meta.json ---------------------------------------------------------------------

def _method2_or_skip():
    if not getattr(pyddstore, "HAVE_OFI", False):
        pytest.skip("method 2 needs the libfabric transport, which this build lacks")


class Rows(torch.utils.data.Dataset):
    def __init__(self, n, base):
        self.n, self.base = n, base

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"x": np.full(3, self.base + i, np.float32), "y": i}


def _core(tmp_path, name, base, n=20, ns="m"):
    """A method-2 DistDataset of one rank (over a one-rank FileComm)."""
    hs = str(tmp_path / "hs")
    fc = pyddstore.FileComm(str(tmp_path / "fc"), rank=0, size=1, ns=ns)
    return DistDataset(Rows(n, base), name, fc, method=2, handshake_dir=hs), hs


@pytest.fixture
def fabric(monkeypatch):
    _method2_or_skip()
    monkeypatch.setenv("DDSTORE_FABRIC", "shm")
    monkeypatch.setenv("DDSTORE_HANDSHAKE_TIMEOUT_S", "3")


def test_meta_is_run_scoped_and_removed_at_free(tmp_path, fabric):
    ds, hs = _core(tmp_path, "d", 100)
    path = os.path.join(hs, "m@d.meta.json")      # namespaced like the records
    assert os.path.exists(path)
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    meta = json.load(open(path))
    assert meta["version"] == 2 and meta["exchange_ns"] == "m"
    assert len(meta["run_id"]) == 16 and len(meta["generation"]) == 2
    rd = DistDatasetReader("d", handshake_dir=hs)  # no namespace given: the only one
    assert float(rd[7]["x"][0]) == 107.0
    rd.free()
    ds.free()
    assert not os.path.exists(path)               # gone with the run


def test_reader_refuses_a_stale_meta(tmp_path, fabric):
    """A meta file left by an earlier run, read while the next run's records
    are there: the reader waits for a matching one and then fails naming the
    mismatch (it never reads the new run's rows with the old run's meta)."""
    ds1, hs = _core(tmp_path, "d", 100)
    path = os.path.join(hs, "m@d.meta.json")
    stale = open(path, "rb").read()
    ds1.free()
    ds2, _ = _core(tmp_path, "d", 500)
    os.replace(path, path + ".new")
    pyddstore._core._file_publish(hs, "m@d.meta.json", stale)
    t0 = time.monotonic()
    with pytest.raises(pyddstore.DDStoreError, match=r"belongs to core run") as e:
        DistDatasetReader("d", handshake_dir=hs, exchange_ns="m")
    assert "m@d.meta.json" in str(e.value) and time.monotonic() - t0 < 30
    os.replace(path + ".new", path)                  # the right one: read
    rd = DistDatasetReader("d", handshake_dir=hs, exchange_ns="m")
    assert float(rd[3]["x"][0]) == 503.0
    rd.free()
    ds2.free()


def _good_meta():
    return {"format": "pyddstore.torch.meta", "version": 2, "name": "m", "n_core": 1,
            "total": 4, "exchange_ns": "", "run_id": "0123456789abcdef",
            "generation": [1], "schema": {"structure": "single", "width": None,
                                          "ntype": None,
                                          "fields": [{"key": None, "kind": "ndarray",
                                                      "shape": [3], "dtype": "float32"}]},
            "vars": ["m/0"]}


def _damage(what):
    m = _good_meta()
    if what == "json":
        return b"{not json"
    if what == "deep":
        return b"[" * 200000 + b"]" * 200000
    if what == "list":
        return b"[1, 2]"
    if what == "no-vars":
        del m["vars"]
    elif what == "vars-type":
        m["vars"] = "m/0"
    elif what == "n_core":
        m["n_core"] = "2"
    elif what == "schema":
        m["schema"] = {"fields": [{"kind": "ndarray"}]}
    elif what == "schema-deep":
        m["schema"]["fields"] = [dict(kind="record", descr="@", key=None, shape=[],
                                      dtype="float32")]
        return json.dumps(m).encode().replace(b'"@"', b"[" * 600 + b"]" * 600)
    elif what == "run_id":
        m["run_id"] = "xyz"
    elif what == "generation":
        m["generation"] = [1, 2]
    elif what == "name":
        m["name"] = "other"
    return json.dumps(m).encode()


@pytest.mark.parametrize("what, field", [
    ("json", "not valid JSON"), ("deep", "nested too deeply|not valid JSON"),
    ("list", "expected an object"), ("no-vars", "'vars'"), ("vars-type", "'vars'"),
    ("n_core", "'n_core'"), ("schema", "'schema'"), ("schema-deep", "'schema'"),
    ("run_id", "'run_id'"), ("generation", "'generation'"), ("name", "'name'"),
])
def test_damaged_meta_names_file_and_field(tmp_path, fabric, what, field):
    hs = tmp_path / "hs"
    hs.mkdir(mode=0o700)
    pyddstore._core._file_publish(str(hs), "m.meta.json", _damage(what))
    t0 = time.monotonic()
    with pytest.raises(ValueError, match=field) as e:
        DistDatasetReader("m", handshake_dir=str(hs))
    assert "m.meta.json" in str(e.value)
    assert time.monotonic() - t0 < 3                 # at once: waiting would not fix it


_FIFO_READER = """
    import sys, time, pyddstore
    from pyddstore.torch import DistDatasetReader
    t0 = time.monotonic()
    try:
        DistDatasetReader("f", handshake_dir=%r)
    except Exception as e:
        print(type(e).__name__, e, "after %%.1f s" %% (time.monotonic() - t0))
"""


def test_fifo_at_meta_path_does_not_block(tmp_path, fabric):
    hs = tmp_path / "hs"
    hs.mkdir(mode=0o700)
    os.mkfifo(hs / "f.meta.json", 0o600)
    try:
        res = spawn_plain(PKG, 1, _FIFO_READER % str(hs), timeout=40,
                          extra={"DDSTORE_HANDSHAKE_TIMEOUT_S": "5"})
    except subprocess.TimeoutExpired:
        pytest.fail("DistDatasetReader blocked on a FIFO at the meta path")
    rc, out, err = res[0]
    assert "not a regular file" in out and "f.meta.json" in out, out + err


def _as_nobody():
    if os.geteuid() != 0:
        pytest.skip("an attacker of another user needs root (files owned by nobody)")
    import pwd
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody")


def test_meta_in_a_directory_of_another_user_is_refused(tmp_path, fabric):
    pw = _as_nobody()
    hs = tmp_path / "hs"
    hs.mkdir(mode=0o700)
    (hs / "m.meta.json").write_bytes(json.dumps(_good_meta()).encode())
    os.chown(hs / "m.meta.json", pw.pw_uid, pw.pw_gid)
    with pytest.raises(pyddstore.DDStoreError, match="owned by uid"):
        DistDatasetReader("m", handshake_dir=str(hs))
    os.chown(hs, pw.pw_uid, pw.pw_gid)
    with pytest.raises(ValueError, match="owned by uid"):
        tds._write_json_atomic(str(hs / "x.meta.json"), {})


def test_meta_and_record_names_follow_the_c_encoding():
    _method2_or_skip()
    for name, ns in [("train", ""), ("a/b c", ""), (".x", "job.1"), ("é%", "a@b"),
                     ("d/0", "42.0.d"), ("-x_", ".n")]:
        rec = pyddstore._core._handshake_file_name(name, ns)
        assert os.path.basename(tds._record_path("/hs", name, ns)) == rec
        assert tds._meta_file_name(name, ns) == rec[:-len(".ddshs")] + ".meta.json"
    # the names meta files had when Python encoded them itself (readers of
    # either version find the other's files)
    assert [tds._meta_file_name(n, ns) for n, ns in [("a/b c", ""), (".x", "job.1"),
                                                     ("é%", "a@b"), ("-x_", ".n")]] == [
        "a%2Fb%20c.meta.json", "job.1@%2Ex.meta.json", "a%40b@%C3%A9%25.meta.json",
        "%2En@-x_.meta.json"]
