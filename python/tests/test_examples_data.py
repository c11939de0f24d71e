"""examples/mnist_data.py: the VAE reads MNIST-format files from any directory
(--data / DDSTORE_VAE_DATA), plain or gzip, and a missing file is an error
naming the file and the options."""
import gzip
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))
import mnist_data  # noqa: E402


def _idx(arr):
    head = bytes([0, 0, 0x08, arr.ndim]) + b"".join(int(d).to_bytes(4, "big")
                                                    for d in arr.shape)
    return head + arr.astype(np.uint8).tobytes()


@pytest.mark.parametrize("gz", [False, True])
def test_any_directory_plain_or_gzip(tmp_path, gz):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (7, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, 7, dtype=np.uint8)
    for name, arr in (("train-images-idx3-ubyte", images), ("train-labels-idx1-ubyte", labels)):
        data = _idx(arr)
        if gz:
            with gzip.open(tmp_path / (name + ".gz"), "wb") as f:
                f.write(data)
        else:
            (tmp_path / name).write_bytes(data)
    got_i, got_l = mnist_data.load(str(tmp_path))
    np.testing.assert_array_equal(got_i, images)
    np.testing.assert_array_equal(got_l, labels)


def test_missing_file_names_it_and_the_options(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        mnist_data.load(str(tmp_path))
    msg = str(e.value)
    assert str(tmp_path / "train-images-idx3-ubyte") in msg
    assert "--data" in msg and "DDSTORE_VAE_DATA" in msg
