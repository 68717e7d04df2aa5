import keras
import numpy as np
import pytest

from keras_largebatch import LAMB
from keras_largebatch.optimizers import biases_and_norms
from tests.optimizers import reference
from tests.optimizers.runner import assert_close, run_optimizer

# Rank-0/1 variables in reference.SHAPES are (7,) and (): excluded from weight decay by
# default, and from adaptation by `biases_and_norms`.
DEFAULT_MASK = [True, False, True, False]

CASES = {
    "defaults": (
        dict(learning_rate=1e-2),
        dict(lr=1e-2, decay_mask=DEFAULT_MASK),
    ),
    "weight_decay": (
        dict(learning_rate=1e-2, weight_decay=0.1),
        dict(lr=1e-2, wd=0.1, decay_mask=DEFAULT_MASK),
    ),
    "biases_and_norms_unadapted": (
        dict(learning_rate=1e-2, weight_decay=0.1, exclude_from_layer_adaptation=biases_and_norms),
        dict(lr=1e-2, wd=0.1, decay_mask=DEFAULT_MASK, adapt_mask=DEFAULT_MASK),
    ),
    "adapt_everything": (
        dict(
            learning_rate=1e-2,
            weight_decay=0.1,
            exclude_from_weight_decay=[],
            exclude_from_layer_adaptation=[],
        ),
        dict(lr=1e-2, wd=0.1),
    ),
    "no_bias_correction": (
        dict(
            learning_rate=1e-2,
            weight_decay=0.01,
            bias_correction=False,
            exclude_from_layer_adaptation=[],
        ),
        dict(lr=1e-2, wd=0.01, bias_correction=False, decay_mask=DEFAULT_MASK),
    ),
    "betas_epsilon": (
        dict(
            learning_rate=5e-3,
            beta_1=0.8,
            beta_2=0.99,
            epsilon=1e-3,
            exclude_from_layer_adaptation=[],
        ),
        dict(lr=5e-3, beta_1=0.8, beta_2=0.99, eps=1e-3, decay_mask=DEFAULT_MASK),
    ),
    "bounds": (
        dict(
            learning_rate=1e-2,
            weight_decay=0.1,
            min_trust_ratio=0.9,
            max_trust_ratio=1.05,
            exclude_from_layer_adaptation=[],
        ),
        dict(lr=1e-2, wd=0.1, lower=0.9, upper=1.05, decay_mask=DEFAULT_MASK),
    ),
    "global_clipnorm": (
        dict(learning_rate=1e-2, global_clipnorm=1.0, exclude_from_layer_adaptation=[]),
        dict(lr=1e-2, global_clipnorm=1.0, decay_mask=DEFAULT_MASK),
    ),
}


@pytest.mark.parametrize("compile_mode", [None, "graph", "xla"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_numpy_transcription(case, compile_mode):
    ours, theirs = CASES[case]
    weights, gradient_steps = reference.make_problem(steps=12, seed=1)
    expected, expected_ratios = reference.lamb(weights, gradient_steps, **theirs)
    actual, ratios = run_optimizer(
        LAMB(record_trust_ratio=True, **ours), weights, gradient_steps, compile_mode
    )
    assert_close(actual, expected)
    # A ratio of two float32 norms after 12 steps carries ~1e-5 of rounding of its own.
    np.testing.assert_allclose(ratios, expected_ratios, rtol=1e-4)


def test_bounds_are_active_in_the_bounds_case():
    # Guards the "bounds" case above against testing nothing: the clamp must bind.
    weights, gradient_steps = reference.make_problem(steps=12, seed=1)
    _, free = reference.lamb(weights, gradient_steps, lr=1e-2, wd=0.1)
    free = np.array(free)
    assert (free < 0.9).any() and (free > 1.05).any()


def test_weight_decay_is_inside_the_trust_ratio_unlike_keras_lamb():
    weights, gradient_steps = reference.make_problem(steps=5, seed=2, shapes=[(6, 4)])
    ours, _ = run_optimizer(LAMB(learning_rate=1e-2, weight_decay=0.5), weights, gradient_steps)
    keras_lamb, _ = run_optimizer(
        keras.optimizers.Lamb(learning_rate=1e-2, weight_decay=0.5, epsilon=1e-6),
        weights,
        gradient_steps,
    )
    paper, _ = reference.lamb(weights, gradient_steps, lr=1e-2, wd=0.5)
    assert_close(ours, paper)
    assert np.max(np.abs(keras_lamb[0] - paper[0])) > 1e-3


def test_zero_weights_and_zero_gradients_use_trust_ratio_one():
    weights = [np.zeros((3, 3), np.float32), np.ones((4, 2), np.float32)]
    gradient_steps = [[np.ones((3, 3), np.float32), np.zeros((4, 2), np.float32)]] * 3
    optimizer = LAMB(learning_rate=0.1, record_trust_ratio=True)
    actual, ratios = run_optimizer(optimizer, weights, gradient_steps)
    expected, expected_ratios = reference.lamb(weights, gradient_steps, lr=0.1)
    assert ratios[0] == [1.0, 1.0]
    assert_close(actual, expected)
    np.testing.assert_array_equal(actual[1], weights[1])


@pytest.mark.parametrize("scale", [1e15, 1e-30])
def test_extreme_gradients_stay_finite(scale):
    weights, gradient_steps = reference.make_problem(steps=4, seed=3, gradient_scale=scale)
    actual, ratios = run_optimizer(
        LAMB(
            learning_rate=1e-2,
            weight_decay=0.01,
            record_trust_ratio=True,
            # Unadapted, the vectors take the Adam step whatever the scale of their gradients.
            exclude_from_layer_adaptation=biases_and_norms,
        ),
        weights,
        gradient_steps,
    )
    assert all(np.isfinite(a).all() for a in actual)
    assert np.isfinite(ratios).all()
    expected, _ = reference.lamb(
        weights, gradient_steps, lr=1e-2, wd=0.01, decay_mask=DEFAULT_MASK, adapt_mask=DEFAULT_MASK
    )
    assert_close(actual, expected, rtol=1e-4)


def test_variable_without_gradient_is_left_alone():
    a = keras.Variable(np.ones((2, 2), np.float32), name="a")
    b = keras.Variable(np.full((3,), 2.0, np.float32), name="b")
    optimizer = LAMB(learning_rate=0.1, weight_decay=0.1)
    optimizer.build([a, b])
    with pytest.warns(UserWarning, match="Gradients do not exist"):
        optimizer.apply([np.ones((2, 2), np.float32), None], [a, b])
    np.testing.assert_array_equal(b.numpy(), np.full((3,), 2.0))
    assert not np.allclose(a.numpy(), 1.0)
    assert int(optimizer.iterations) == 1


def test_learning_rate_schedule_sees_optimizer_steps():
    schedule = keras.optimizers.schedules.PolynomialDecay(
        1e-2, decay_steps=10, end_learning_rate=1e-3
    )
    weights, gradient_steps = reference.make_problem(steps=8, seed=4)
    actual, _ = run_optimizer(LAMB(learning_rate=schedule), weights, gradient_steps)
    expected, _ = reference.lamb(
        weights,
        gradient_steps,
        decay_mask=DEFAULT_MASK,
        lr_at_step=lambda step: (1e-2 - 1e-3) * (1 - step / 10) + 1e-3,
    )
    assert_close(actual, expected)


def test_accumulation_equals_one_large_batch():
    # k micro-batch gradients g_1..g_k give the same update as their mean in one step.
    k = 3
    weights, gradient_steps = reference.make_problem(steps=4 * k, seed=5)
    schedule = keras.optimizers.schedules.PolynomialDecay(
        1e-2, decay_steps=4, end_learning_rate=1e-3
    )
    optimizer = LAMB(
        learning_rate=schedule,
        weight_decay=0.01,
        global_clipnorm=2.0,
        gradient_accumulation_steps=k,
        record_trust_ratio=True,
    )
    actual, _ = run_optimizer(optimizer, weights, gradient_steps, compile_mode="graph")
    means = [
        [
            np.mean([gradient_steps[s * k + j][i] for j in range(k)], axis=0)
            for i in range(len(weights))
        ]
        for s in range(4)
    ]
    expected, _ = reference.lamb(
        weights,
        means,
        wd=0.01,
        global_clipnorm=2.0,
        decay_mask=DEFAULT_MASK,
        lr_at_step=lambda step: (1e-2 - 1e-3) * (1 - step / 4) + 1e-3,
    )
    assert_close(actual, expected)
    assert int(optimizer.iterations) == 4


def test_embedding_gradient_with_repeated_rows_equals_its_dense_sum():
    # A tf.IndexedSlices gradient repeats a row per occurrence of a token; the second moment
    # and the norms must see the summed rows, exactly as for the dense gradient.
    import tensorflow as tf

    weights = [np.random.default_rng(6).normal(size=(4, 3)).astype(np.float32)]
    values = np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [0.5, -1.0, 2.0]], np.float32)
    sparse = tf.IndexedSlices(tf.constant(values), tf.constant([1, 1, 3]), tf.constant([4, 3]))
    dense = tf.convert_to_tensor(sparse).numpy()
    for compile_mode in (None, "graph"):
        variable = keras.Variable(weights[0])
        optimizer = LAMB(learning_rate=0.1, global_clipnorm=1.0, exclude_from_layer_adaptation=[])
        optimizer.build([variable])
        step = lambda: optimizer.apply([sparse], [variable])  # noqa: E731
        (tf.function(step) if compile_mode else step)()
        expected, _ = reference.lamb(weights, [[dense]], lr=0.1, global_clipnorm=1.0)
        assert_close([variable.numpy()], expected)
