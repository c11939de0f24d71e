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
    got = comm.allgather((type(err).__name__, str(err)))
    want = f"rank {bad}: {name}='{value}'"
    for r, (kind, msg) in enumerate(got):
        assert kind == "ValueError", f"rank {r}: {kind}: {msg}"
        assert msg.startswith(want), f"rank {r}: {msg!r} does not start with {want!r}"
    assert len({m for _, m in got}) == 1, got
    # the job goes on: a store can be created afterwards
    s = pyddstore.PyDDStore(comm)
    s.free()
