"""The validation split: class shares kept to the example, disjoint, reproducible, and the
loaded sets as the split says."""

import numpy as np
import pytest

from keras_largebatch.study import data
from tests.support.fashion_mnist_files import write_fashion_mnist


def test_each_class_keeps_its_share():
    labels = np.repeat(np.arange(10), 6000)  # Fashion-MNIST's training set: 6,000 a class
    train, validation = data.stratified_split(labels, 10_000, seed=0)
    assert len(train) == 50_000 and len(validation) == 10_000
    assert np.bincount(labels[validation]).tolist() == [1000] * 10
    assert np.intersect1d(train, validation).size == 0
    assert np.array_equal(np.union1d(train, validation), np.arange(60_000))
    again = data.stratified_split(labels, 10_000, seed=0)[1]
    assert np.array_equal(validation, again)
    assert not np.array_equal(validation, data.stratified_split(labels, 10_000, seed=1)[1])


def test_uneven_shares_go_to_the_largest_remainders():
    # Shares 7 * (2, 3, 5) / 10 = 1.4, 2.1, 3.5: floors 1, 2, 3, and one more for class 2.
    labels = np.array([0] * 2 + [1] * 3 + [2] * 5)
    _, validation = data.stratified_split(labels, 7, seed=3)
    assert np.bincount(labels[validation]).tolist() == [1, 2, 4]
    # Equal remainders (0.5, 0.5): the lower class first.
    _, validation = data.stratified_split(np.array([0, 0, 0, 1, 1, 1]), 3, seed=0)
    assert np.bincount(np.array([0, 0, 0, 1, 1, 1])[validation]).tolist() == [2, 1]


@pytest.mark.parametrize("count", [0, 10])
def test_a_split_that_leaves_nothing_is_refused(count):
    with pytest.raises(ValueError, match=rf"validation_examples must be in \[1, 9\].*got {count}"):
        data.stratified_split(np.zeros(10), count, seed=0)


def test_load_splits_the_training_images_and_keeps_the_test_set(tmp_path):
    arrays = write_fashion_mnist(tmp_path, num_train=200, num_test=30)
    loaded = data.load(str(tmp_path), train_examples=100, validation_examples=20, split_seed=0)
    assert loaded.train_images.shape == (80, 28, 28, 1)
    assert loaded.validation_images.shape == (20, 28, 28, 1)
    assert len(loaded.test_labels) == 30
    train, validation = data.stratified_split(arrays["train"][1][:100], 20, 0)
    assert np.array_equal(loaded.validation_labels, arrays["train"][1][validation])
    # Class c has brightness 20 c plus noise: the normalized images are the files' own.
    expected = (arrays["train"][0][train].astype(np.float32) - 72.94) / 90.02
    np.testing.assert_allclose(loaded.train_images[..., 0], expected, rtol=1e-6)
    assert loaded.split_fingerprint == data.fingerprint(validation)
    assert data.load(str(tmp_path), 100, 20, split_seed=1).split_fingerprint != (
        loaded.split_fingerprint
    )
