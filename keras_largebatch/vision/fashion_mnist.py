"""Fashion-MNIST (Xiao, Rasul, Vollgraf 2017, arXiv:1708.07747), read offline.

`keras.datasets.fashion_mnist.load_data` reads the four gzip files from the Keras cache
(``$KERAS_HOME/datasets/fashion-mnist``, ``~/.keras`` by default) and downloads them when
they are missing. Here nothing is downloaded: missing cache files are copied from the Debian
package ``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist``, same file names), and
without either the error says how to get them, before any training. The files are then read
here (`read_directory`), from the cache or from any directory holding them.
"""

import gzip
import math
import os

import numpy as np

from keras_largebatch import _files
from keras_largebatch._backend import keras_home

FILES = (
    "train-labels-idx1-ubyte.gz",
    "train-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
)
DEBIAN_DIR = "/usr/share/datasets/fashion-mnist"
NUM_TRAIN_EXAMPLES = 60000
NUM_CLASSES = 10
IMAGE_SHAPE = (28, 28, 1)
# Pixel mean and standard deviation of the 60,000 training images.
PIXEL_MEAN = 72.94
PIXEL_STDDEV = 90.02


def keras_cache_dir():
    """Where `keras.datasets.fashion_mnist` caches its files: Keras's home
    (`keras_largebatch._backend.keras_home`) + ``datasets/fashion-mnist``."""
    return os.path.join(keras_home(), "datasets", "fashion-mnist")


def ensure_cached(cache_dir=None, source_dir=None):
    """Makes sure the Keras cache (``cache_dir``, default `keras_cache_dir`) holds the four
    files, copying missing ones from ``source_dir`` (default `DEBIAN_DIR`); returns the cache
    directory. Raises FileNotFoundError, naming what is
    missing and how to get it, when neither place has them."""
    cache_dir = cache_dir or keras_cache_dir()
    source_dir = source_dir or DEBIAN_DIR
    missing = [name for name in FILES if not os.path.exists(os.path.join(cache_dir, name))]
    unavailable = [name for name in missing if not os.path.exists(os.path.join(source_dir, name))]
    if unavailable:
        raise FileNotFoundError(
            f"Fashion-MNIST is not available offline: {unavailable} are in neither the Keras "
            f"cache {cache_dir} nor {source_dir}. Install the Debian package "
            "(apt-get install dataset-fashion-mnist), or on a machine with internet access run "
            "python -c 'import keras; keras.datasets.fashion_mnist.load_data()' and copy "
            f"{os.path.dirname(cache_dir)}/fashion-mnist here"
        )
    if missing:
        os.makedirs(cache_dir, exist_ok=True)
        for name in missing:
            # Atomic, so an interrupted copy is never cached.
            _files.copy_file(os.path.join(source_dir, name), os.path.join(cache_dir, name))
    return cache_dir


def load(source_dir=None):
    """``(train_images, train_labels), (test_images, test_labels)``: uint8 images of shape
    ``(n, 28, 28, 1)`` and int64 labels in [0, 10), read from the Keras cache after
    `ensure_cached`."""
    return read_directory(ensure_cached(source_dir=source_dir))


def read_idx(path):
    """The uint8 array of one gzipped IDX file, the format Fashion-MNIST ships in (LeCun et
    al.'s MNIST format): bytes 0, 0, the element type 0x08 (uint8) and the rank, then one
    big-endian int32 size per dimension, then the elements. Raises ValueError naming the file
    when it is not such a file."""
    with gzip.open(path, "rb") as stream:
        data = stream.read()
    if len(data) < 4 or data[:3] != bytes([0, 0, 8]):
        raise ValueError(f"{path} is not a gzipped IDX file of uint8 (header {data[:4]!r})")
    rank = data[3]
    offset = 4 + 4 * rank
    shape = tuple(int.from_bytes(data[4 + 4 * axis : 8 + 4 * axis], "big") for axis in range(rank))
    if len(data) - offset != math.prod(shape):
        raise ValueError(
            f"{path} holds {len(data) - offset} bytes after its header, its header says "
            f"{shape} = {math.prod(shape)}"
        )
    return np.frombuffer(data, np.uint8, offset=offset).reshape(shape)


def read_directory(directory):
    """`load`'s arrays, read from the four files (`FILES`) in ``directory``: the Keras cache,
    the Debian package's directory, or any directory holding files of the same names and
    format. Raises FileNotFoundError naming the missing files."""
    missing = [name for name in FILES if not os.path.exists(os.path.join(directory, name))]
    if missing:
        raise FileNotFoundError(f"Fashion-MNIST files {missing} are missing from {directory}")
    arrays = [read_idx(os.path.join(directory, name)) for name in FILES]
    train_y, train_x, test_y, test_x = arrays
    return (
        (train_x[..., None], train_y.astype(np.int64)),
        (test_x[..., None], test_y.astype(np.int64)),
    )


def normalize(images, labels):
    """Maps uint8 images to float32 of zero mean and unit variance over the training set (a
    `tf.data` map function; `normalize_images` on the images)."""
    return normalize_images(images), labels


def normalize_images(images):
    """uint8 images as float32 of zero mean and unit variance over the training set."""
    # Imported here, not with the module: the run config reads this module's facts and loads
    # without TensorFlow.
    import tensorflow as tf

    return (tf.cast(images, tf.float32) - PIXEL_MEAN) / PIXEL_STDDEV
