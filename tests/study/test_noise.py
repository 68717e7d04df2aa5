"""B_simple from micro-batch gradients: a case by hand, synthetic gradients of a known noise
scale, and the probe's gradients against per-example ones computed one by one."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch.study import noise
from keras_largebatch.study.data import StudyData
from keras_largebatch.study.trial import compile_model


def test_a_case_by_hand():
    # b = 2, K = 2: S = (10 + 2) / 2 = 6, L = |(2, 1)|^2 = 5; with B_big = 4,
    # |G|^2 = (4 * 5 - 2 * 6) / 2 = 4 and tr(Sigma) = (6 - 5) / (1/2 - 1/4) = 4.
    assert noise.estimate(np.array([[3.0, 1.0], [1.0, 1.0]]), micro_batch_size=2) == 1.0
    # |G|^2 estimated <= 0: no value.
    assert np.isnan(noise.estimate(np.array([[1.0, 0.0], [0.0, 1.0]]), micro_batch_size=1))


def test_synthetic_gradients_of_a_known_noise_scale():
    # Per-example gradients G + N(0, sigma^2 I) in 20 dimensions: B_simple = 20 sigma^2 / |G|^2.
    generator = np.random.default_rng(0)
    mean = np.full(20, 0.5)
    sigma, micro_batch_size, micro_batches = 2.0, 8, 3000
    per_example = mean + sigma * generator.standard_normal((micro_batches, micro_batch_size, 20))
    gradients = per_example.mean(axis=1)
    expected = 20 * sigma**2 / np.sum(mean**2)  # 16
    value, low, high = noise.with_interval(gradients, micro_batch_size, samples=300, seed=0)
    assert value == pytest.approx(expected, rel=0.1)
    assert low < expected < high and high - low < 0.5 * expected
    assert low < value < high
    # Fewer micro-batches, a wider interval.
    _, low_few, high_few = noise.with_interval(gradients[:300], micro_batch_size, 300, seed=0)
    assert high_few - low_few > high - low


def test_the_probe_takes_micro_batch_gradients_and_leaves_the_weights_alone():
    generator = np.random.default_rng(1)
    images = generator.standard_normal((40, 28, 28, 1)).astype(np.float32)
    labels = generator.integers(0, 10, 40)
    data = StudyData(images, labels, None, None, None, None, "")
    model = compile_model(keras.optimizers.SGD(0.1), seed=0)
    before = [v.numpy().copy() for v in model.trainable_variables]
    probe = noise.NoiseScaleProbe(model, data, 4, 3, bootstrap_samples=20)
    gradients, loss = probe.gradients(seed=5)
    chosen = np.random.default_rng(5).choice(40, 12, replace=False)
    loss_function = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    for row, batch in zip(gradients, np.split(chosen, 3)):
        per_example = []
        for index in batch:
            with tf.GradientTape() as tape:
                value = loss_function(labels[index : index + 1], model(images[index : index + 1]))
            grads = tape.gradient(value, model.trainable_variables)
            per_example.append(np.concatenate([g.numpy().ravel() for g in grads]))
        np.testing.assert_allclose(row, np.mean(per_example, axis=0), rtol=1e-4, atol=1e-6)
    expected_loss = loss_function(labels[chosen], model(images[chosen])).numpy()
    assert loss == pytest.approx(expected_loss, rel=1e-5)
    measured = probe.measure(seed=5)
    # Random labels: the estimate of |G|^2 may be <= 0, and B_simple NaN.
    assert measured[0] == loss
    assert measured[1] == pytest.approx(noise.estimate(gradients, 4), nan_ok=True)
    for variable, value in zip(model.trainable_variables, before):
        np.testing.assert_array_equal(variable.numpy(), value)


def test_the_interval_is_not_biased_where_the_noise_is_large_against_the_micro_batches():
    # B_simple 200 with b = 1 and K = 100: a resample's repeated micro-batch, counted as a
    # pair of independent ones, would double |G|^2 and halve B_simple.
    generator = np.random.default_rng(3)
    mean, sigma = np.full(50, 0.1), 2.0  # B_simple = 50 * 4 / 0.5 = 400
    gradients = mean + sigma * generator.standard_normal((100, 50))
    value, low, high = noise.with_interval(gradients, micro_batch_size=1, samples=500, seed=0)
    assert low < value < high and low < 400 < high
    # The formula and the pair form of the estimate agree.
    gram = gradients @ gradients.T
    pairs = (gram.sum() - np.trace(gram)) / (100 * 99)
    assert value == pytest.approx((np.trace(gram) / 100 - pairs) / pairs)
