"""Ragged reads into GPU memory (issue 11), through ddstore-gpu's host
emulation of one CUDA device (test_core_gpu.py's `emu` fixture: method 0, a
transport without FI_HMEM, so the rows are staged and copied on the array's
stream).  On a real GPU the same calls take torch CUDA tensors."""
import numpy as np
import pytest

import pyddstore
from test_core_gpu import DevArray, emu  # noqa: F401 - the fixture
from test_ragged import length, local_payload, packed, sample_offsets


def test_get_ragged_into_device_memory(emu):  # noqa: F811
    s, streams, arrays = emu
    vals, lens = local_payload(s, np.float32, (4,))
    s.add_ragged("r", vals, lens)
    total = sample_offsets(s.size)[-1]
    st = emu.stream()
    idx = np.random.default_rng(5 + s.rank).integers(0, total, 3 * total)
    ref = packed(np.float32, idx, (4,))
    d = DevArray((len(ref) + 3, 4), np.float32, stream=st)
    arrays.append(d)
    for _ in range(2):
        d.fill(0xAB)
        v, l = s.get_ragged("r", idx, out=d)
        assert v is d                     # no slicing on a bare interface
        np.testing.assert_array_equal(l, [length(g) for g in idx])
        got = d.host()
        assert got[:len(ref)].tobytes() == ref.tobytes()
        assert (got[len(ref):].view(np.uint8) == 0xAB).all()
    # too small: nothing written
    small = DevArray((max(len(ref) - 1, 0), 4), np.float32, stream=st)
    arrays.append(small)
    small.fill(0xCD)
    with pytest.raises(ValueError, match=f"need {len(ref)} rows"):
        s.get_ragged("r", idx, out=small)
    assert (small.host().view(np.uint8) == 0xCD).all()
    # GPU payloads are not added in place: a clear error on every rank, the
    # store usable after
    dv = DevArray(vals.shape, np.float32, stream=st)
    arrays.append(dv)
    dv.write(vals)
    with pytest.raises(pyddstore.DDStoreError, match="host"):
        s.add_ragged("g", dv, lens)
    v, _ = s.get_ragged("r", idx)
    assert v.tobytes() == ref.tobytes()
