"""Tiny Fashion-MNIST files in the distribution's format, for tests that must not read the
real data set."""

import gzip
import os

import numpy as np


def write_idx(path, array):
    """An IDX file as the Fashion-MNIST distribution ships it (LeCun et al.'s MNIST format):
    magic number (0, 0, dtype 0x08 = uint8, rank), big-endian int32 sizes, the bytes; gzipped."""
    header = bytes([0, 0, 8, array.ndim]) + b"".join(
        int(size).to_bytes(4, "big") for size in array.shape
    )
    with gzip.open(path, "wb") as stream:
        stream.write(header + array.astype(np.uint8).tobytes())


def write_fashion_mnist(directory, num_train=256, num_test=100):
    """Tiny Fashion-MNIST files: class c has brightness 20 * c plus noise, so it is learnable.
    Returns ``{"train": (images, labels), "t10k": (images, labels)}``."""
    random = np.random.default_rng(0)
    os.makedirs(directory, exist_ok=True)
    arrays = {}
    for split, count in (("train", num_train), ("t10k", num_test)):
        labels = np.arange(count) % 10
        images = 20 * labels[:, None, None] + random.integers(0, 40, (count, 28, 28))
        write_idx(os.path.join(directory, f"{split}-labels-idx1-ubyte.gz"), labels)
        write_idx(os.path.join(directory, f"{split}-images-idx3-ubyte.gz"), images)
        arrays[split] = (images, labels)
    return arrays
