"""Evaluation that counts every example once: 50 examples at batch 16 (three full batches and
a padded one) give the figures NumPy gives on the 50, on one device and on two replicas."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch.distribute import get_strategy
from keras_largebatch.training.evaluation import EXAMPLES, evaluate_weighted, pad_to_batches

NUM_EXAMPLES, BATCH_SIZE, NUM_CLASSES, SMOOTHING = 50, 16, 7, 0.1


def _examples():
    random = np.random.default_rng(3)
    features = random.normal(size=(NUM_EXAMPLES, 5)).astype("float32")
    labels = random.integers(0, NUM_CLASSES, NUM_EXAMPLES)
    return features, np.eye(NUM_CLASSES, dtype="float32")[labels]


def _reference(logits, targets):
    """Mean smoothed cross-entropy, top-1 and top-5 accuracy over the examples, in float64."""
    logits = logits.astype(np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    smoothed = targets * (1 - SMOOTHING) + SMOOTHING / NUM_CLASSES
    labels = targets.argmax(axis=1)
    top5 = np.argsort(-logits, axis=1)[:, :5]
    return {
        "loss": float(-(smoothed * log_probabilities).sum(axis=1).mean()),
        "accuracy": float((logits.argmax(axis=1) == labels).mean()),
        "top5_accuracy": float(np.mean([label in row for label, row in zip(labels, top5)])),
    }


def test_padding_adds_zero_weight_examples_to_the_last_batch_only():
    features, targets = _examples()
    batches = list(pad_to_batches(tf.data.Dataset.from_tensor_slices((features, targets)), 16))
    assert [len(weights) for _, _, weights in batches] == [16, 16, 16, 16]
    weights = np.concatenate([weights.numpy() for _, _, weights in batches])
    np.testing.assert_array_equal(weights, [1.0] * 50 + [0.0] * 14)
    np.testing.assert_array_equal(np.concatenate([f.numpy() for f, _, _ in batches])[:50], features)
    # A set the batch divides gets no padding.
    divided = pad_to_batches(tf.data.Dataset.from_tensor_slices((features[:48], targets[:48])), 16)
    assert sum(len(weights) for _, _, weights in divided) == 48


@pytest.mark.parametrize("devices", [None, ["/cpu:0", "/cpu:1"]])
def test_fifty_examples_at_batch_16_give_numpys_figures(devices):
    features, targets = _examples()
    strategy = (
        get_strategy("mirrored", devices=devices) if devices else tf.distribute.get_strategy()
    )
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(NUM_CLASSES)])
        model.compile(loss="categorical_crossentropy")
        metrics = [
            keras.metrics.CategoricalCrossentropy(
                name="loss", from_logits=True, label_smoothing=SMOOTHING
            ),
            keras.metrics.CategoricalAccuracy(name="accuracy"),
            keras.metrics.TopKCategoricalAccuracy(k=5, name="top5_accuracy"),
        ]
        results = evaluate_weighted(
            model,
            pad_to_batches(tf.data.Dataset.from_tensor_slices((features, targets)), BATCH_SIZE),
            metrics,
        )
    expected = _reference(model.predict(features, verbose=0), targets)
    assert results.pop(EXAMPLES) == NUM_EXAMPLES
    assert results.keys() == expected.keys()
    for name, value in expected.items():
        assert results[name] == pytest.approx(value, rel=1e-5, abs=1e-6), name
