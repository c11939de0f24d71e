"""The torch extension (pyddstore._ddstore_torch) and small helpers around it."""

import numpy as np
import torch

import pyddstore  # noqa: F401  (loads pyddstore._core, whose capsule the extension imports)


def _missing_extension(e):
    """Why pyddstore._ddstore_torch does not import, and the way out."""
    import glob
    import os
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    built = glob.glob(os.path.join(here, "_ddstore_torch*.so"))
    if built:
        why = (f"{os.path.basename(built[0])} is there but does not load ({e}); it was "
               f"probably built for another torch than this one ({torch.__version__}): "
               "rebuild it with the torch you run")
    else:
        why = ("this installation of pyddstore has no torch extension: pip builds in an "
               "isolated environment without torch unless told otherwise")
    return ("pyddstore.torch needs the torch extension pyddstore._ddstore_torch; " + why +
            ".  With pip: install torch first, then `pip install --no-build-isolation .` "
            "in the source tree (docs/installation.md); in a checkout: `./ddstore build`.")


try:
    from pyddstore import _ddstore_torch as ext
except ImportError as e:  # pragma: no cover - build problem
    raise ImportError(_missing_extension(e)) from e

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
