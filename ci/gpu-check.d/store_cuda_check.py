#!/usr/bin/env python3
"""GPU checks of pyddstore._core with torch CUDA tensors (run on N ranks).

    tools/ddrun -n 2 python ci/gpu-check.d/store_cuda_check.py get|add|staging-off|method1

Used by ci/gpu-check.d/store-get-cuda.sh and store-add-cuda.sh on a GPU
machine.  pyddstore._core must be the CUDA build with MPI (method 0, MPI RMA:
no FI_HMEM, so reads into GPU memory go through pinned staging buffers and a
copy on the stream).  torch tensors reach _core through
``__cuda_array_interface__`` (version 2: no stream, so _core orders on the
legacy default stream, which is torch's default current stream).

Every check is an assertion; the script exits non-zero on the first failure
(on any rank).  "Checked by a kernel" means a torch op queued on the same
stream right after the read, with no host synchronisation in between: it can
only see the rows if the store's copy was queued on that stream in order.
"""
import gc
import os
import sys
import time
import weakref

import numpy as np
import torch

import pyddstore
from pyddstore import _core

# the reference rows of the tests (python/tests/_util.py)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "python", "tests"))
from _util import DTYPES, values  # noqa: E402


def tdtype(dtype):
    return torch.from_numpy(np.zeros(1, dtype)).dtype


def poisoned(shape, dtype, dev):
    t = torch.empty(shape, dtype=tdtype(dtype), device=dev)
    if t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(123 if t.dtype == torch.uint8 else -7)
    return t


def check_kernel_first(store, fn, t, want, what):
    """Prepare the reference on the GPU, read, then compare with a kernel
    with no host synchronisation between the read and the kernel."""
    want_dev = torch.from_numpy(want).to(t.device)
    torch.cuda.synchronize(t.device)  # setup only: the reference is there
    fn()
    same = torch.eq(t, want_dev).all()   # queued after the store's copy
    ok_kernel = bool(same.item())
    ok_cpu = np.array_equal(t.cpu().numpy(), want)
    if not (ok_kernel and ok_cpu):
        raise AssertionError(f"{what}: kernel check {ok_kernel}, CPU check {ok_cpu}")


def mode_get(s, dev):
    rank, size = s.rank, s.size
    rng = np.random.default_rng(5 + rank)
    for dtype in DTYPES:
        for disp in (1, 7, 768):       # 768 float32 = 3 KB rows
            name = f"v_{np.dtype(dtype).name}_{disp}"
            rows = [40 + 3 * r for r in range(size)]
            off = np.concatenate([[0], np.cumsum(rows)]).astype(int).tolist()
            total = off[-1]
            s.add(name, values(dtype, range(off[rank], off[rank + 1]), disp))
            # get: the whole range, across every owner
            t = poisoned((total, disp), dtype, dev)
            check_kernel_first(s, lambda: s.get(name, t, 0), t,
                               values(dtype, range(total), disp), f"get {name}")
            # get_batch: shuffled, repeats, several batches into one tensor
            for _ in range(3):
                idx = rng.integers(0, total, 64)
                idx[-2:] = idx[0]
                b = poisoned((64, disp), dtype, dev)
                check_kernel_first(s, lambda: s.get_batch(name, b, idx), b,
                                   values(dtype, idx, disp), f"get_batch {name}")
            # a slice of a registered buffer
            big = poisoned((128, disp), dtype, dev)
            s.register_recv(name, big)
            sl = big[10:42]
            idx = rng.integers(0, total, 32)
            check_kernel_first(s, lambda: s.get_batch(name, sl, idx), sl,
                               values(dtype, idx, disp), f"registered slice {name}")
            s.unregister_recv(name, big)
            p = s.get_profile(name)
            assert p["staged_bytes"] >= p["bytes"] > 0, p
            assert p["gpu_sync_ns"] > 0, p
    # a figure, not an assertion: 3 KB rows, batches of 128, GPU vs host
    name = "v_float32_768"
    total = s.info(name)[0]
    idx = rng.integers(0, total, 128)
    out_g = torch.empty((128, 768), dtype=torch.float32, device=dev)
    out_h = np.empty((128, 768), np.float32)
    for label, out in (("host", out_h), ("cuda", out_g)):
        s.get_batch(name, out, idx)
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        for _ in range(50):
            s.get_batch(name, out, idx)
        torch.cuda.synchronize(dev)
        dt = (time.perf_counter() - t0) / (50 * 128)
        print(f"rank {rank}: 3 KB rows, batch 128 into {label} memory: "
              f"{dt * 1e6:.2f} us/row", flush=True)
    s.free()


def mode_add(s, dev):
    rank, size = s.rank, s.size
    disp = 33
    rows = [25 + 4 * r for r in range(size)]
    off = np.concatenate([[0], np.cumsum(rows)]).astype(int).tolist()
    total = off[-1]
    for dtype in (np.float32, np.int64, np.uint8):
        name = f"g_{np.dtype(dtype).name}"
        shard = torch.from_numpy(values(dtype, range(off[rank], off[rank + 1]), disp)).to(dev)
        alive = weakref.ref(shard)
        s.add(name, shard)
        info = s.info_full(name)
        assert info["mem"] == "cuda" and info["local_rows"] == rows[rank], info
        del shard
        gc.collect()
        assert alive() is not None, "the store must keep a GPU shard alive"
        # reuse the caching allocator: a freed shard would be overwritten
        junk = [torch.full((rows[rank], disp), 77, dtype=tdtype(dtype), device=dev)
                for _ in range(4)]
        torch.cuda.synchronize(dev)
        out = np.zeros((total, disp), dtype)
        s.get(name, out, 0)
        assert np.array_equal(out, values(dtype, range(total), disp)), f"{name} -> host"
        t = poisoned((total, disp), dtype, dev)
        idx = np.arange(total)[::-1].copy()
        check_kernel_first(s, lambda: s.get_batch(name, t, idx), t,
                           values(dtype, idx, disp), f"{name} -> cuda")
        # update: row 0 from host memory, row 1 from CUDA memory
        s.update(name, values(dtype, [500 + rank], disp), 0)
        src = torch.from_numpy(values(dtype, [900 + rank], disp)).to(dev)
        s.update(name, src, 1)
        s.init(name + "_barrier", 0, 1)      # collective: everyone updated
        s.get(name, out, 0)
        for r in range(size):
            assert np.array_equal(out[off[r]], values(dtype, [500 + r], disp)[0]), name
            assert np.array_equal(out[off[r] + 1], values(dtype, [900 + r], disp)[0]), name
            assert np.array_equal(out[off[r] + 2:off[r + 1]],
                                  values(dtype, range(off[r] + 2, off[r + 1]), disp)), name
        del junk
    s.free()
    gc.collect()
    print(f"rank {rank}: GPU shards added, read by every rank, updated, freed", flush=True)


def mode_staging_off(s, dev):
    """DDSTORE_GPU_STAGING=0 (set by the hook) over method 0, which has no
    FI_HMEM: a read of another rank's rows into GPU memory is refused with an
    error naming the setting; host reads still work, and so does the store."""
    assert os.environ.get("DDSTORE_GPU_STAGING") == "0", "run with DDSTORE_GPU_STAGING=0"
    rank, size = s.rank, s.size
    assert size >= 2, "needs 2 ranks (a remote owner)"
    rows = 16
    s.add("x", values(np.int64, range(rank * rows, (rank + 1) * rows), 4))
    other = ((rank + 1) % size) * rows
    idx = np.arange(other, other + rows)
    t = poisoned((rows, 4), np.int64, dev)
    try:
        s.get_batch("x", t, idx)
    except pyddstore.DDStoreError as e:
        assert "DDSTORE_GPU_STAGING" in str(e), f"the error does not name the setting: {e}"
        print(f"rank {rank}: staging off: {type(e).__name__}: {e}", flush=True)
    else:
        raise AssertionError("a remote read into GPU memory with DDSTORE_GPU_STAGING=0 "
                             "over a transport without FI_HMEM did not fail")
    h = np.zeros((rows, 4), np.int64)
    s.get_batch("x", h, idx)
    assert np.array_equal(h, values(np.int64, idx, 4)), "host read after the refusal"
    s.free()


def mode_method1(s, dev):
    """get/get_batch into CUDA tensors over method 1 (libfabric: the kit's
    wheel carries its own libfabric.so.1): GPUDirect (fi_read into device
    memory) where the provider offers FI_HMEM, else the staged path; says
    which, from the profile (staged bytes)."""
    rank, size = s.rank, s.size
    rng = np.random.default_rng(11 + rank)
    for dtype in (np.float32, np.int64, np.uint8):
        name = f"m1_{np.dtype(dtype).name}"
        rows = [40 + 3 * r for r in range(size)]
        off = np.concatenate([[0], np.cumsum(rows)]).astype(int).tolist()
        total = off[-1]
        s.add(name, values(dtype, range(off[rank], off[rank + 1]), 768))
        t = poisoned((total, 768), dtype, dev)
        check_kernel_first(s, lambda: s.get(name, t, 0), t,
                           values(dtype, range(total), 768), f"method 1 get {name}")
        idx = rng.integers(0, total, 64)
        b = poisoned((64, 768), dtype, dev)
        check_kernel_first(s, lambda: s.get_batch(name, b, idx), b,
                           values(dtype, idx, 768), f"method 1 get_batch {name}")
        p = s.get_profile(name)
        path = "staged" if p["staged_bytes"] > 0 else "GPUDirect (FI_HMEM)"
        print(f"rank {rank}: method 1 {name}: {p['bytes']} bytes into GPU memory, "
              f"{p['staged_bytes']} staged: {path}", flush=True)
    s.free()


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "get"
    assert _core.GPU_BACKEND == "cuda", _core.GPU_BACKEND
    torch.cuda.init()
    s = pyddstore.PyDDStore(None, method=1 if mode == "method1" else 0)
    dev = torch.device("cuda", s.rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    modes = {"get": mode_get, "add": mode_add, "staging-off": mode_staging_off,
             "method1": mode_method1}
    if mode not in modes:
        raise SystemExit(f"unknown mode {mode}")
    modes[mode](s, dev)
    info = _core._gpu_info() if hasattr(_core, "_gpu_info") else {}
    print(f"rank {s.rank}: {mode}: OK ({info.get('backend', 'cuda')}, runtime "
          f"{info.get('runtime_version', '?')}, driver {info.get('driver_version', '?')})",
          flush=True)


if __name__ == "__main__":
    main()
