"""The arms' noise scale: the window's ratio of averages and its interval on gradients drawn
with a known B_simple; the micro-batch gradients against the closed form of a linear model's,
batch norm's statistics left alone; the refusals before any work. The measurement end to
end runs in arm A's tiny end-to-end test (test_arms.py)."""

import numpy as np
import pytest

from keras_largebatch.study import ledger
from keras_largebatch.study import noise as noise_lib
from keras_largebatch.study.arms import noise_scale

from .test_arms import FakeWorkload, fake_config, run


def gram_of(generator, mean, noise, micro_batch_size, count):
    """The Gram matrix of ``count`` micro-batch gradients: ``mean`` plus per-example noise of
    standard deviation ``noise`` per coordinate, averaged over ``micro_batch_size``."""
    gradients = mean + generator.normal(0, noise / np.sqrt(micro_batch_size), (count, len(mean)))
    return gradients @ gradients.T


def test_the_window_is_the_ratio_of_the_averages_with_an_interval_around_the_truth():
    generator = np.random.default_rng(0)
    dimensions, micro_batch_size = 400, 16
    # Three points of one run: the gradient shrinks, the noise stays (B_simple grows).
    means = [np.full(dimensions, scale) for scale in (0.2, 0.1, 0.05)]
    truths = [dimensions * 1.0 / float(mean @ mean) for mean in means]  # tr(Sigma) / |G|^2
    grams = [gram_of(generator, mean, 1.0, micro_batch_size, 256) for mean in means]
    value, low, high = noise_scale.window_estimate(grams, micro_batch_size, samples=400)
    estimates = [noise_lib.pair_estimates(g, np.ones(256), micro_batch_size) for g in grams]
    assert value == pytest.approx(
        sum(trace for _, trace in estimates) / sum(norm for norm, _ in estimates)
    )
    # The ratio of the averages weighs the points by |G|^2: near the first point's truth, not
    # the mean of the three ratios.
    pooled = 3 * dimensions / sum(float(mean @ mean) for mean in means)
    assert value == pytest.approx(pooled, rel=0.15)
    assert value < 0.5 * np.mean(truths)
    assert low < pooled < high
    # One point: the interval is the micro-batches' alone, and holds its truth.
    value, low, high = noise_scale.window_estimate(grams[:1], micro_batch_size, samples=400)
    assert low < truths[0] < high and value == pytest.approx(truths[0], rel=0.15)


def test_the_interval_widens_with_points_that_disagree():
    generator = np.random.default_rng(1)
    agree = [gram_of(generator, np.full(200, 0.1), 1.0, 8, 64) for _ in range(4)]
    disagree = [gram_of(generator, np.full(200, s), 1.0, 8, 64) for s in (0.05, 0.1, 0.2, 0.4)]
    widths = []
    for grams in (agree, disagree):
        value, low, high = noise_scale.window_estimate(grams, 8, samples=300)
        widths.append(np.log(high / low))
    assert widths[1] > 1.5 * widths[0]


def test_micro_batch_gradients_are_a_linear_model_s_and_leave_batch_norm_alone():
    keras = pytest.importorskip("keras")
    import tensorflow as tf

    generator = np.random.default_rng(2)
    x = generator.normal(size=(12, 3)).astype("float32")
    y = generator.normal(size=(12, 1)).astype("float32")
    inputs = keras.Input((3,))
    normalized = keras.layers.BatchNormalization()(inputs)
    model = keras.Model(inputs, keras.layers.Dense(1, use_bias=False)(normalized))
    model.compile(loss=keras.losses.MeanSquaredError())
    batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    before = [v.numpy().copy() for v in model.non_trainable_variables]
    gram, loss = noise_scale.MicroBatchGradients(model, batches, 3).measure()
    for variable, value in zip(model.non_trainable_variables, before):
        np.testing.assert_array_equal(variable.numpy(), value)
    # By hand: batch norm in training mode standardizes each micro-batch (gamma 1, beta 0);
    # d/dw mean((z w - y)^2) = 2 z^T (z w - y) / 4, d/dgamma and d/dbeta through z.
    weights = model.layers[-1].kernel.numpy()
    rows, losses = [], []
    for part in np.split(np.arange(12), 3):
        xs, ys = x[part].astype(np.float64), y[part].astype(np.float64)
        mean, variance = xs.mean(0), xs.var(0)
        z = (xs - mean) / np.sqrt(variance + 1e-3)
        residual = z @ weights - ys
        dz = 2 * residual @ weights.T / len(part)
        rows.append(np.concatenate([(dz * z).sum(0), dz.sum(0), (2 * z.T @ residual / 4)[:, 0]]))
        losses.append(float((residual**2).mean()))
    expected = np.stack(rows)
    np.testing.assert_allclose(gram, expected @ expected.T, rtol=1e-4, atol=1e-6)
    assert loss == pytest.approx(np.mean(losses), rel=1e-5)


def test_the_measurement_is_refused_before_the_pilot_s_first_cell_is_complete(tmp_path):
    config = fake_config()
    run(config, tmp_path, max_trials=3)
    with pytest.raises(ValueError, match="pilot's cell at batch 64"):
        noise_scale.measure(config, str(tmp_path), workload=FakeWorkload())
    with pytest.raises(ledger.LedgerError, match="seeds: 5 there, 6 now"):
        noise_scale.measure(fake_config(seeds=6), str(tmp_path), workload=FakeWorkload())
    assert noise_scale.read(str(tmp_path)) is None


def test_the_report_says_what_the_window_gave():
    from keras_largebatch.study.arms import report

    window = dict(first_step=40, last_step=80, points=5, b_simple=812.4, low=500.0, high=1300.0)
    window.update(positive_points=4, points_min=300.0, points_max=2100.0)
    noise = dict(batch_size=64, seed=7, steps_to_target=80, stop="target", window=window)
    assert report._noise_line("Nesterov", noise) == (
        "Nesterov's noise scale at batch 64 (seed 7): B_simple = 812 [500, 1,300], the ratio "
        "of the averages over its 5 measurements from step 40 to 80 (the second half of its "
        "way to the target at step 80; the interval resamples the measurements and their "
        "micro-batches; 4 of the single measurements gave a positive |G|^2, and B_simple 300 "
        "to 2,100)."
    )
    window.update(b_simple=None, low=None, high=None)
    assert "not estimated (the window's |G|^2 estimate was not positive)" in report._noise_line(
        "Nesterov", noise
    )
    noise.update(window=None, stop="budget", steps_trained=600, steps_to_target=None)
    assert report._noise_line("Nesterov", noise) == (
        "Nesterov's noise scale at batch 64 (seed 7): its run did not reach the target (budget "
        "after 600 steps), so there is no window."
    )
