"""Fashion-MNIST for the study: read once, normalized, held in memory."""

from typing import NamedTuple

import numpy as np

from keras_largebatch.vision import fashion_mnist


class StudyData(NamedTuple):
    """Normalized float32 images ``(n, 28, 28, 1)`` and int64 labels."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray


def load(data_dir=None, train_examples=None):
    """The train and test sets from the four files in ``data_dir`` (default: the Keras cache,
    filled from the Debian package, `fashion_mnist.ensure_cached`), the training set cut to its
    first ``train_examples`` images when given. Raises FileNotFoundError when files are
    missing, and ValueError when ``train_examples`` is more than the files hold."""
    directory = fashion_mnist.ensure_cached() if data_dir is None else data_dir
    (train_x, train_y), (test_x, test_y) = fashion_mnist.read_directory(directory)
    if train_examples is not None:
        if train_examples > len(train_x):
            raise ValueError(
                f"train_examples must be <= the {len(train_x)} training images in "
                f"{directory}, got {train_examples}"
            )
        train_x, train_y = train_x[:train_examples], train_y[:train_examples]
    return StudyData(
        fashion_mnist.normalize_images(train_x).numpy(),
        train_y,
        fashion_mnist.normalize_images(test_x).numpy(),
        test_y,
    )
