"""The torch extension (pyddstore._ddstore_torch) and small helpers around it."""

import numpy as np
import torch

import pyddstore  # noqa: F401  (loads pyddstore._core, whose capsule the extension imports)

try:
    from pyddstore import _ddstore_torch as ext
except ImportError as e:  # pragma: no cover - build problem
    raise ImportError(
        "pyddstore.torch needs the torch extension pyddstore._ddstore_torch "
        "(built by `./ddstore build`, or tools/dev-build-torch.sh for development): "
        f"{e}") from e

ext.set_gpu_kind(2 if getattr(torch.version, "hip", None) else 1)

__all__ = ["ext", "stream_of", "as_index_tensor"]


def stream_of(device):
    """The current CUDA/HIP stream handle for `device` (0 for CPU / None)."""
    if device is None or device.type != "cuda":
        return 0
    return torch.cuda.current_stream(device).cuda_stream


def as_index_tensor(indices):
    """A 1-D int64 CPU tensor of row indices (no copy for int64 tensors/arrays)."""
    if isinstance(indices, torch.Tensor):
        if indices.dtype != torch.int64 or indices.device.type != "cpu" or indices.dim() != 1:
            indices = indices.to(device="cpu", dtype=torch.int64).reshape(-1)
        return indices.contiguous()
    a = np.asarray(indices)
    if a.size and a.dtype.kind not in "iu":
        raise TypeError(f"indices must be integers, got dtype {a.dtype}")
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64).reshape(-1))
