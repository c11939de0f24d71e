"""Read MNIST-format (idx) files, gzip or plain, with numpy only.

Default location: Debian's dataset-fashion-mnist package
(/usr/share/datasets/fashion-mnist). Any directory holding
train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz] works.
"""
import gzip
import os

import numpy as np

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"


def _open(path):
    if os.path.exists(path):
        return open(path, "rb")
    if os.path.exists(path + ".gz"):
        return gzip.open(path + ".gz", "rb")
    raise FileNotFoundError(
        f"{path} (or {path}.gz) not found. Point --data (or DDSTORE_VAE_DATA) at a "
        "directory with the MNIST or Fashion-MNIST idx files (train-images-idx3-ubyte, "
        "train-labels-idx1-ubyte, t10k-*; plain or .gz), e.g. the files of "
        "https://github.com/zalandoresearch/fashion-mnist copied to your file system; "
        f"the default, {DEFAULT_DIR}, is Debian's dataset-fashion-mnist package")


def read_idx(path):
    with _open(path) as f:
        data = f.read()
    if data[:2] != b"\x00\x00" or data[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte idx file")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if arr.size != int(np.prod(dims)):
        raise ValueError(f"{path}: truncated ({arr.size} bytes for dims {dims})")
    return arr.reshape(dims)


def load(data_dir=None, split="train"):
    """(images uint8 [N, 28, 28], labels uint8 [N])."""
    d = data_dir or DEFAULT_DIR
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(d, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(os.path.join(d, f"{prefix}-labels-idx1-ubyte"))
    if len(images) != len(labels):
        raise ValueError(f"{d}: {len(images)} images but {len(labels)} labels")
    return images, labels
