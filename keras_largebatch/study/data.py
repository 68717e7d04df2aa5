"""Fashion-MNIST for the study: read once, split into training and validation images
stratified by class, normalized, held in memory.

The validation split tunes and judges (a trial's steps to a target); the test set is read only
for each cell's selected settings, once, at the end of their runs.
"""

import hashlib
from typing import NamedTuple

import numpy as np

from keras_largebatch.vision import fashion_mnist


class StudyData(NamedTuple):
    """Normalized float32 images ``(n, 28, 28, 1)`` and int64 labels of the three sets, and
    a fingerprint of the split (a resumed study must split the same way)."""

    train_images: np.ndarray
    train_labels: np.ndarray
    validation_images: np.ndarray
    validation_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    split_fingerprint: str


def stratified_split(labels, validation_examples, seed):
    """``(train_indices, validation_indices)``, both sorted: ``validation_examples`` indices
    of ``labels`` drawn with each class's share of them as near its share of ``labels`` as
    whole numbers allow (the floors of ``count * class_count / n``, plus one for the classes
    of largest remainder, the lower class first on ties), at random within the class.

    Raises:
        ValueError: ``validation_examples`` not in ``[1, len(labels) - 1]``.
    """
    labels = np.asarray(labels)
    if not 1 <= validation_examples < len(labels):
        raise ValueError(
            f"validation_examples must be in [1, {len(labels) - 1}] for {len(labels)} "
            f"examples, got {validation_examples}"
        )
    classes, counts = np.unique(labels, return_counts=True)
    exact = validation_examples * counts / len(labels)
    quotas = np.floor(exact).astype(int)
    # A stable sort keeps the lower class first among equal remainders.
    by_remainder = np.argsort(-(exact - quotas), kind="stable")
    quotas[by_remainder[: validation_examples - quotas.sum()]] += 1
    generator = np.random.default_rng(seed)
    validation = np.concatenate(
        [
            generator.permutation(np.flatnonzero(labels == label))[:quota]
            for label, quota in zip(classes, quotas)
        ]
    )
    validation.sort()
    train = np.setdiff1d(np.arange(len(labels)), validation)
    return train, validation


def fingerprint(indices):
    """A short SHA-256 of ``indices`` as int64: what identifies a split in the ledger."""
    return hashlib.sha256(np.asarray(indices, dtype=np.int64).tobytes()).hexdigest()[:16]


def load(data_dir=None, train_examples=None, validation_examples=10_000, split_seed=0):
    """The study's three sets from the four files in ``data_dir`` (default: the Keras cache,
    filled from the Debian package, `fashion_mnist.ensure_cached`): the first
    ``train_examples`` training images when given (else all), split by `stratified_split`,
    and the test set. Raises FileNotFoundError when files are missing, and ValueError when
    ``train_examples`` is more than the files hold or the split does not fit."""
    directory = fashion_mnist.ensure_cached() if data_dir is None else data_dir
    (train_x, train_y), (test_x, test_y) = fashion_mnist.read_directory(directory)
    if train_examples is not None:
        if train_examples > len(train_x):
            raise ValueError(
                f"train_examples must be <= the {len(train_x)} training images in "
                f"{directory}, got {train_examples}"
            )
        train_x, train_y = train_x[:train_examples], train_y[:train_examples]
    train, validation = stratified_split(train_y, validation_examples, split_seed)
    images = fashion_mnist.normalize_images(train_x).numpy()
    return StudyData(
        images[train],
        train_y[train],
        images[validation],
        train_y[validation],
        fashion_mnist.normalize_images(test_x).numpy(),
        test_y,
        fingerprint(validation),
    )
