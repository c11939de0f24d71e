"""Settings read when a store is created are agreed on by every rank
(issue 23, items 4 and 7): a bad value on ONE rank fails every rank at
once, with one message naming the variable, the value and the rank that has
it; no rank is left waiting in PyDDStore(comm) for the collective timeout.

Run with 2 ranks (tools/ddrun -n 2): the last rank sets the bad value, the
others keep a short DDSTORE_COLLECTIVE_TIMEOUT_S so that a regression fails
within seconds instead of hanging for 30 minutes."""
import os

import pytest

import pyddstore

CASES = [
    ("DDSTORE_COLLECTIVE_TIMEOUT_S", "abc"),
    ("DDSTORE_COLLECTIVE_TIMEOUT_S", "0"),
    ("DDSTORE_METHOD", "7"),
    ("DDSTORE_MPI_SHM", "maybe"),
    ("DDSTORE_MPI_MAX_READ_BYTES", "abc"),
    ("DDSTORE_MPI_MAX_READ_BYTES", "0"),
    ("DDSTORE_READ_TIMEOUT_S", "-1"),
]


def _world():
    if not pyddstore.HAVE_MPI:
        pytest.skip("runs over MPI_COMM_WORLD (HAVE_MPI False)")
    from mpi4py import MPI
    return MPI.COMM_WORLD


def _assert_same_error(comm, err, bad, name, value):
    """Every rank raised one ValueError, "rank BAD: NAME='VALUE': ..."."""
    got = comm.allgather((type(err).__name__, str(err)))
    want = f"rank {bad}: {name}='{value}'"
    for r, (kind, msg) in enumerate(got):
        assert kind == "ValueError", f"rank {r}: {kind}: {msg}"
        assert msg.startswith(want), f"rank {r}: {msg!r} does not start with {want!r}"
    assert len({m for _, m in got}) == 1, got


@pytest.mark.parametrize("name,value", CASES)
def test_bad_setting_on_one_rank_fails_every_rank(name, value, monkeypatch):
    comm = _world()
    bad = comm.size - 1
    if comm.rank == bad:
        monkeypatch.setenv(name, value)
    else:
        # bounded: without the agreement these ranks would wait for the bad
        # rank, which never enters the collective
        monkeypatch.setenv("DDSTORE_COLLECTIVE_TIMEOUT_S", "20")
    err = None
    try:
        s = pyddstore.PyDDStore(comm)
        s.free()
    except Exception as e:  # noqa: BLE001 - the type is checked below
        err = e
    monkeypatch.undo()
    _assert_same_error(comm, err, bad, name, value)
    # the job goes on: a store can be created afterwards
    s = pyddstore.PyDDStore(comm)
    s.free()


@pytest.mark.parametrize("name", ["DDSTORE_READ_TIMEOUT_S", "DDSTORE_COLLECTIVE_TIMEOUT_S",
                                  "DDSTORE_HANDSHAKE_TIMEOUT_S"])
def test_durations_have_one_meaning(name, monkeypatch):
    """Every duration is seconds > 0, or inf for no limit, wherever it is read
    (DDSTORE_HANDSHAKE_TIMEOUT_S=0 was taken by Python and refused by C)."""
    from pyddstore import _core
    monkeypatch.setenv(name, "0")
    with pytest.raises(ValueError, match=f"{name}='0'"):
        _core.config_get(name)
    with pytest.raises(ValueError, match=name):
        _core.settings()
    monkeypatch.setenv(name, "inf")
    assert _core.settings()[name] == float("inf")
    monkeypatch.delenv(name)
    assert _core.settings()[name] > 0


def test_python_booleans_follow_c(monkeypatch):
    """pyddstore.torch.env reads booleans with C's rule: blank is unset (the
    default), 't'/'n' are booleans; a bad value names the variable."""
    pytest.importorskip("torch")
    from pyddstore import _core
    from pyddstore.torch import env
    for text, want in (("t", True), ("N", False), (" yes ", True), ("off", False)):
        assert _core.parse_bool(text) is want
        monkeypatch.setenv("DDSTORE_BATCH_GET", text)
        assert env.batch_get() is want
    monkeypatch.setenv("DDSTORE_BATCH_GET", "")
    assert env.batch_get() is True
    monkeypatch.setenv("DDSTORE_BATCH_GET", "maybe")
    with pytest.raises(ValueError, match="DDSTORE_BATCH_GET='maybe'"):
        env.batch_get()


@pytest.mark.parametrize("value", ["abc", "0"])
def test_bad_timeout_on_one_rank_over_torch_group(value, monkeypatch):
    """PyDDStore(TorchComm()): a bad DDSTORE_COLLECTIVE_TIMEOUT_S on one rank
    does not raise inside the group's first collective (leaving the others
    waiting, or failing them with "the exchange failed"); every rank gets the
    message of the MPI case."""
    pytest.importorskip("torch")
    from _torch_util import torch_pg
    from pyddstore.torch.comm import TorchComm
    comm = _world()
    torch_pg(comm)
    name = "DDSTORE_COLLECTIVE_TIMEOUT_S"
    bad = comm.size - 1
    monkeypatch.setenv(name, value if comm.rank == bad else "20")
    err = None
    try:
        pyddstore.PyDDStore(TorchComm(), method=1).free()
    except Exception as e:  # noqa: BLE001 - the type is checked below
        err = e
    monkeypatch.undo()
    _assert_same_error(comm, err, bad, name, value)
