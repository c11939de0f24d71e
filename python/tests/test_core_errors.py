"""The bad-input matrix: every error is a clear exception of the documented
type, collective calls fail on every rank together, and the store stays
usable afterwards (each test ends with a successful read)."""
import numpy as np
import pytest

import pyddstore
from pyddstore import DDStoreError, DDStoreKeyError
from _util import add_var, layout, outcome, values


def check_usable(store, name="v", dtype=np.float64, disp=3):
    total = store.info(name)[0]
    out = np.zeros((total, disp), dtype)
    store.get(name, out)
    np.testing.assert_array_equal(out, values(dtype, range(total), disp))
    idx = [total - 1, 0, total - 1]
    b = np.zeros((3, disp), dtype)
    store.get_batch(name, b, idx)
    np.testing.assert_array_equal(b, values(dtype, idx, disp))


@pytest.fixture
def v(store):
    off = add_var(store, "v", np.float64, 3)
    return off[-1]


def test_exception_classes():
    assert issubclass(DDStoreKeyError, KeyError)
    assert issubclass(DDStoreKeyError, IndexError)
    assert issubclass(DDStoreError, RuntimeError)
    assert DDStoreError.__module__ == "pyddstore"
    # the message of a KeyError subclass is not quoted
    assert str(DDStoreKeyError("no variable named 'x'")) == "no variable named 'x'"


@pytest.mark.parametrize("code,cls", [
    (2, DDStoreKeyError), (34, IndexError), (22, ValueError), (17, ValueError),
    (263, ValueError), (256, TypeError), (12, MemoryError), (5, DDStoreError),
    (110, DDStoreError), (257, DDStoreError), (259, DDStoreError),
    (260, DDStoreError), (261, DDStoreError), (262, DDStoreError),
    (38, DDStoreError), (16, DDStoreError)])
def test_error_mapping_table(code, cls):
    """docs/design.md, "Errors -> Python"."""
    from pyddstore import _core
    with pytest.raises(cls, match="detail here") as e:
        _core._raise(-code, "detail here")
    if cls is DDStoreError:
        assert not isinstance(e.value, (ValueError, TypeError, IndexError))


def test_unknown_name(store, v):
    out = np.zeros((1, 3))
    for call in [lambda: store.get("nope", out),
                 lambda: store.get_batch("nope", out, [0]),
                 lambda: store.update("nope", out, 0),
                 lambda: store.info("nope"),
                 lambda: store.info_full("nope"),
                 lambda: store.get_profile("nope")]:
        with pytest.raises(DDStoreKeyError, match="nope") as e:
            call()
        assert isinstance(e.value, KeyError) and isinstance(e.value, IndexError)
    check_usable(store)


def test_index_out_of_range_and_negative(store, v):
    total = v
    out = np.zeros((2, 3))
    with pytest.raises(IndexError):
        store.get_batch("v", out, [0, total])
    with pytest.raises(IndexError):
        store.get_batch("v", out, [-1, 0])
    with pytest.raises(IndexError):
        store.get_batch("v", out, np.array([0, 2 ** 62], np.int64))
    with pytest.raises(IndexError):
        store.get_batch("v", out, np.array([0, 2 ** 64 - 1], np.uint64))
    with pytest.raises(IndexError):
        store.get_batch("v", out, [0, 2 ** 70])
    with pytest.raises(IndexError):
        store.get("v", out, total - 1)             # range ends past the end
    with pytest.raises(IndexError):
        store.get("v", out, -1)
    with pytest.raises(IndexError):
        store.get("v", out[:1], total)
    # nothing was written by the failed batch: all indices checked first
    out[:] = 7
    with pytest.raises(IndexError):
        store.get_batch("v", out, [0, total])
    assert (out == 7).all()
    check_usable(store)


def test_wrong_length(store, v):
    with pytest.raises(ValueError, match="3 rows.*2"):
        store.get_batch("v", np.zeros((3, 3)), [0, 1])
    with pytest.raises(ValueError):
        store.get_batch("v", np.zeros((1, 3)), [])
    check_usable(store)


def test_wrong_row_width(store, v):
    with pytest.raises(ValueError, match="24 bytes per row.*got 32") as e:
        store.get("v", np.zeros((2, 4)), 0)
    with pytest.raises(ValueError):
        store.get_batch("v", np.zeros((2, 2)), [0, 1])
    with pytest.raises(ValueError):
        store.get("v", np.zeros(3), 0)             # 1-D: rows of one element
    with pytest.raises(ValueError):
        store.update("v", np.zeros((1, 2)), 0)
    check_usable(store)


def test_wrong_dtype(store, v):
    # same bytes per row, other dtype: TypeError naming both
    with pytest.raises(TypeError, match="float64.*float32|float32.*float64"):
        store.get("v", np.zeros((1, 6), np.float32), 0)
    with pytest.raises(TypeError, match="float64.*int64|int64.*float64"):
        store.get("v", np.zeros((1, 3), np.int64), 0)
    # other dtype and other row size: still a dtype mismatch, the same
    # TypeError (one exception type per class of mismatch)
    with pytest.raises(TypeError, match="float64.*float32|float32.*float64"):
        store.get("v", np.zeros((1, 3), np.float32), 0)
    with pytest.raises(TypeError, match="float64.*uint8|uint8.*float64"):
        store.get("v", np.zeros((1, 3), np.uint8), 0)
    with pytest.raises(TypeError):
        store.get_batch("v", np.zeros((1, 3), np.int64), [0])
    with pytest.raises(TypeError):
        store.update("v", np.zeros((1, 3), np.int64), 0)
    check_usable(store)


def test_non_contiguous(store, v):
    a = np.zeros((4, 3))[::2]
    with pytest.raises(ValueError, match="contiguous"):
        store.get("v", a, 0)
    with pytest.raises(ValueError, match="contiguous"):
        store.get_batch("v", np.zeros((3, 2)).T, [0, 1, 2])
    with pytest.raises(ValueError, match="contiguous"):
        store.update("v", np.asfortranarray(np.zeros((2, 3))), 0)
    check_usable(store)


@pytest.mark.parametrize("dtype,name", [(np.uint16, "uint16"), (np.int16, "int16"),
                                        (np.complex64, "complex"), (np.int8, "int8"),
                                        (np.uint32, "uint32")])
def test_unsupported_dtype(store, v, dtype, name):
    with pytest.raises(TypeError, match=name):
        store.get("v", np.zeros((1, 3), dtype), 0)
    check_usable(store)


def test_not_a_buffer_and_read_only(store, v):
    with pytest.raises(TypeError, match="list"):
        store.get("v", [[0.0, 0.0, 0.0]], 0)
    ro = np.zeros((1, 3))
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        store.get("v", ro, 0)
    with pytest.raises(ValueError):
        store.get("v", np.float64(1.0), 0)          # 0-D
    with pytest.raises(TypeError):
        store.get("v", np.zeros((1, 3), "M8[s]"), 0)
    store.update("v", ro[:0], 0)                     # read-only source is fine
    check_usable(store)


def test_bad_indices(store, v):
    out = np.zeros((2, 3))
    with pytest.raises(TypeError, match="integers"):
        store.get_batch("v", out, np.array([0.0, 1.0]))
    with pytest.raises(TypeError):
        store.get_batch("v", out, [0.0, 1.0])
    with pytest.raises(TypeError):
        store.get_batch("v", out, np.array([True, False]))
    with pytest.raises(TypeError):
        store.get_batch("v", out, "ab")
    with pytest.raises(TypeError):
        store.get_batch("v", out, 3)
    check_usable(store)


def test_bad_name_type(store, v):
    with pytest.raises(TypeError):
        store.get(3, np.zeros((1, 3)))
    with pytest.raises(ValueError):
        store.info("v\0x")
    check_usable(store)


def test_update_bounds(store, v):
    off = layout(store.size)
    mine = off[store.rank + 1] - off[store.rank]
    with pytest.raises(IndexError):
        store.update("v", np.zeros((1, 3)), mine)
    with pytest.raises(IndexError):
        store.update("v", np.zeros((1, 3)), -1)
    check_usable(store)


def test_double_free_use_after_free_readd(store, v):
    store.free()
    second = outcome(store.free)                     # idempotent
    errs = [outcome(c) for c in (lambda: store.get("v", np.zeros((1, 3))),
                                 lambda: store.get_batch("v", np.zeros((1, 3)), [0]),
                                 lambda: store.get_profile("v"))]
    add_var(store, "v", np.float64, 3)
    assert second is None
    for e in errs:
        assert isinstance(e, DDStoreError) and "'v'" in str(e), repr(e)
    check_usable(store)


def test_readd_live_name_fails_on_every_rank(store, v):
    e1 = outcome(lambda: add_var(store, "v", np.float64, 3))
    e2 = outcome(lambda: store.init("v", 1, 3, itemsize=8))
    for e in (e1, e2):
        assert isinstance(e, ValueError) and "already exists" in str(e), repr(e)
    check_usable(store)


def _only(rank, good, bad):
    return bad if rank == 0 else good


@pytest.mark.parametrize("what", ["disp", "itemsize", "dtype"])
def test_mismatch_across_ranks_fails_everywhere(store, v, what):
    if store.size < 2:
        pytest.skip("needs at least 2 ranks (a mismatch between ranks)")
    r = store.rank
    if what == "disp":
        e = outcome(lambda: store.init("m", 2, 4 if r == 0 else 5, itemsize=4))
    elif what == "itemsize":
        e = outcome(lambda: store.init("m", 2, 4, itemsize=4 if r == 0 else 8))
    else:
        e = outcome(lambda: store.add("m", np.zeros((2, 4), np.float32 if r == 0 else np.int32)))
    assert isinstance(e, ValueError) and "rank" in str(e), repr(e)
    assert "expected" in str(e)
    with pytest.raises(DDStoreKeyError):
        store.info("m")                              # nothing was created
    check_usable(store)


def test_local_failure_of_a_collective_fails_every_rank(store, v):
    """A bad argument on rank 0 only: rank 0 raises its own error, the other
    ranks raise the same class naming rank 0, nobody hangs."""
    r = store.rank
    good = np.zeros((2, 4), np.float32)
    cases = [
        (ValueError, lambda: store.add("m", good[:, ::2] if r == 0 else good[:, :2].copy())),
        (TypeError, lambda: store.add("m", np.zeros((2, 2), np.int16) if r == 0 else good)),
        (ValueError, lambda: store.init("m", -1 if r == 0 else 2, 4)),
        (ValueError, lambda: store.init("m", 2, 0 if r == 0 else 4)),
        (TypeError, lambda: store.init("m", "two" if r == 0 else 2, 4)),
        (TypeError, lambda: store.add(None if r == 0 else "m", good)),
        (TypeError, lambda: store.add("m", [1, 2] if r == 0 else good)),
    ]
    results = [outcome(call) for _, call in cases]
    live = outcome(lambda: store.info("m"))
    store.add("m", good)                             # the name still works
    for (cls, _), e in zip(cases, results):
        assert isinstance(e, cls), repr(e)
        if r != 0:
            assert "rank 0" in str(e), str(e)
    assert isinstance(live, DDStoreKeyError)
    assert store.info("m") == (2 * store.size, 4, 4)
    check_usable(store)


def test_store_constructor_errors():
    with pytest.raises(ValueError, match="method"):
        pyddstore.PyDDStore(None, method=5)
    with pytest.raises(TypeError, match="comm_or_none"):
        pyddstore.PyDDStore(object())
    with pytest.raises(TypeError, match="nic_map"):
        pyddstore.PyDDStore(None, nic_map=3)
