import keras
import numpy as np
import pytest

from keras_largebatch import LARS
from keras_largebatch.optimizers import biases_and_norms
from tests.optimizers import reference
from tests.optimizers.runner import assert_close, run_optimizer

DEFAULT_MASK = [True, False, True, False]
ALL = dict(exclude_from_weight_decay=[], exclude_from_layer_adaptation=[])

# eta is raised from 0.001 so that 12 steps move the weights measurably.
CASES = {
    "defaults": (
        dict(learning_rate=0.5),
        dict(lr=0.5, decay_mask=DEFAULT_MASK),
    ),
    "mlperf": (
        dict(
            learning_rate=2.0,
            momentum=0.94,
            trust_coefficient=0.02,
            weight_decay=2.5e-2,
            exclude_from_layer_adaptation=biases_and_norms,
        ),
        dict(
            lr=2.0,
            momentum=0.94,
            eta=0.02,
            wd=2.5e-2,
            decay_mask=DEFAULT_MASK,
            adapt_mask=DEFAULT_MASK,
        ),
    ),
    "adapt_everything": (
        dict(learning_rate=2.0, trust_coefficient=0.02, weight_decay=1e-2, **ALL),
        dict(lr=2.0, eta=0.02, wd=1e-2),
    ),
    "nesterov_epsilon": (
        dict(
            learning_rate=2.0,
            trust_coefficient=0.02,
            epsilon=0.5,
            nesterov=True,
            weight_decay=1e-2,
            **ALL,
        ),
        dict(lr=2.0, eta=0.02, eps=0.5, nesterov=True, wd=1e-2),
    ),
    "larc_clip": (
        dict(learning_rate=0.05, trust_coefficient=0.02, clip=True, weight_decay=1e-2, **ALL),
        dict(lr=0.05, eta=0.02, clip=True, wd=1e-2),
    ),
    "bounds": (
        dict(
            learning_rate=2.0,
            trust_coefficient=0.02,
            min_trust_ratio=0.015,
            max_trust_ratio=0.025,
            **ALL,
        ),
        dict(lr=2.0, eta=0.02, lower=0.015, upper=0.025),
    ),
    "global_clipnorm": (
        dict(learning_rate=2.0, trust_coefficient=0.02, global_clipnorm=0.5, **ALL),
        dict(lr=2.0, eta=0.02, global_clipnorm=0.5),
    ),
}


@pytest.mark.parametrize("compile_mode", [None, "graph", "xla"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_numpy_transcription(case, compile_mode):
    ours, theirs = CASES[case]
    weights, gradient_steps = reference.make_problem(steps=12, seed=11)
    expected, expected_ratios = reference.lars(weights, gradient_steps, **theirs)
    actual, ratios = run_optimizer(
        LARS(record_trust_ratio=True, **ours), weights, gradient_steps, compile_mode
    )
    assert_close(actual, expected)
    np.testing.assert_allclose(ratios, expected_ratios, rtol=1e-4)


def test_bounds_and_larc_clip_bind_in_their_cases():
    weights, gradient_steps = reference.make_problem(steps=12, seed=11)
    _, free = reference.lars(weights, gradient_steps, lr=2.0, eta=0.02)
    free = np.array(free)
    assert (free < 0.015).any() and (free > 0.025).any()
    _, larc = reference.lars(weights, gradient_steps, lr=0.05, eta=0.02, clip=True, wd=1e-2)
    assert (np.array(larc) == 1.0).any() and (np.array(larc) < 1.0).any()


@pytest.mark.parametrize("clip", [False, True])
def test_zero_weights_and_zero_gradients_use_trust_ratio_one(clip):
    # With the LARC clip too: the fallback of 1 is not divided by the learning rate (apex LARC).
    weights = [np.zeros((3, 3), np.float32), np.ones((4, 2), np.float32)]
    gradient_steps = [[np.ones((3, 3), np.float32), np.zeros((4, 2), np.float32)]] * 3
    optimizer = LARS(learning_rate=20.0, clip=clip, record_trust_ratio=True)
    actual, ratios = run_optimizer(optimizer, weights, gradient_steps)
    expected, _ = reference.lars(weights, gradient_steps, lr=20.0, clip=clip)
    assert ratios[0] == [1.0, 1.0]
    assert_close(actual, expected)


def test_huge_gradients_match_the_reference():
    weights, gradient_steps = reference.make_problem(steps=4, seed=12, gradient_scale=1e15)
    optimizer = LARS(learning_rate=1.0, weight_decay=1e-4, record_trust_ratio=True)
    actual, ratios = run_optimizer(optimizer, weights, gradient_steps)
    assert np.isfinite(ratios).all()
    expected, _ = reference.lars(weights, gradient_steps, lr=1.0, wd=1e-4, decay_mask=DEFAULT_MASK)
    assert_close(actual, expected, rtol=1e-4)


def test_gradients_below_float32_norm_range_count_as_zero():
    # ||g||^2 of 1e-30 entries underflows float32: the norm is 0, so the ratio falls back to
    # 1 (documented) instead of eta*||w||/||g|| ~ 1e27, and nothing becomes inf or NaN.
    weights, gradient_steps = reference.make_problem(steps=3, seed=12, gradient_scale=1e-30)
    optimizer = LARS(learning_rate=1.0, weight_decay=1e-4, record_trust_ratio=True)
    actual, ratios = run_optimizer(optimizer, weights, gradient_steps)
    assert np.array(ratios).tolist() == [[1.0] * 4] * 3
    assert all(np.isfinite(a).all() for a in actual)
    # The only movement is the decay of the kernels, lr * (g + wd * w) with g ~ 1e-30, at the
    # fallback ratio of 1 (the float64 reference sees ||g|| > 0, hence adapt_mask False).
    decayed, _ = reference.lars(
        weights, gradient_steps, lr=1.0, wd=1e-4, decay_mask=DEFAULT_MASK, adapt_mask=[False] * 4
    )
    for index in (0, 2):
        kernel = actual[index]
        np.testing.assert_allclose(kernel, decayed[index], rtol=1e-6, err_msg=f"kernel {index}")
        # 3 steps with momentum 0.9 shrink by wd * (1 + 1.9 + 2.71): 20x the tolerance above.
        np.testing.assert_allclose(kernel / weights[index], 1 - 1e-4 * 5.61, rtol=1e-6)
    for index in (1, 3):
        np.testing.assert_allclose(actual[index], weights[index], rtol=0, atol=1e-28)


@pytest.mark.parametrize("compile_mode", [None, "xla"])
def test_learning_rate_of_each_step_enters_the_velocity(compile_mode):
    # MLPerf form: v = m * v + lr_t * trust * (g + wd * w). The rate drops to 0 for the last
    # two steps, where momentum alone still moves the weights; with the rate outside the
    # velocity (v = m * v + trust * (g + wd * w), w -= lr_t * v) they would stand still.
    schedule = keras.optimizers.schedules.PiecewiseConstantDecay([2, 4], [2.0, 0.5, 0.0])
    weights, gradient_steps = reference.make_problem(steps=7, seed=15)
    optimizer = LARS(
        learning_rate=schedule,
        trust_coefficient=0.02,
        weight_decay=1e-2,
        record_trust_ratio=True,
        exclude_from_layer_adaptation=biases_and_norms,
    )
    actual, ratios = run_optimizer(optimizer, weights, gradient_steps, compile_mode)
    settings = dict(
        eta=0.02,
        wd=1e-2,
        decay_mask=DEFAULT_MASK,
        adapt_mask=DEFAULT_MASK,
        lr_at_step=lambda step: 2.0 if step <= 2 else 0.5 if step <= 4 else 0.0,
    )
    expected, expected_ratios = reference.lars(weights, gradient_steps, **settings)
    assert_close(actual, expected)
    np.testing.assert_allclose(ratios, expected_ratios, rtol=1e-4)
    before_zero_rate, _ = reference.lars(weights, gradient_steps[:5], **settings)
    for index, (moved, kept) in enumerate(zip(expected, before_zero_rate)):
        # Each variable moves by 0.16 to 8 on momentum alone, ~1e4 times the tolerance.
        assert np.max(np.abs(moved - kept)) > 0.1, index


def test_accumulation_equals_one_large_batch():
    k = 2
    weights, gradient_steps = reference.make_problem(steps=5 * k, seed=13)
    optimizer = LARS(
        learning_rate=2.0,
        trust_coefficient=0.02,
        weight_decay=1e-2,
        nesterov=True,
        gradient_accumulation_steps=k,
        **ALL,
    )
    actual, _ = run_optimizer(optimizer, weights, gradient_steps, compile_mode="xla")
    means = [
        [
            np.mean([gradient_steps[s * k + j][i] for j in range(k)], axis=0)
            for i in range(len(weights))
        ]
        for s in range(5)
    ]
    expected, _ = reference.lars(weights, means, lr=2.0, eta=0.02, wd=1e-2, nesterov=True)
    assert_close(actual, expected)


def test_matches_keras_sgd_when_nothing_is_adapted_or_decayed():
    # With every variable excluded, LARS is SGD with momentum in the lr-inside-velocity form,
    # which gives the same weights as Keras's SGD at a constant learning rate.
    weights, gradient_steps = reference.make_problem(steps=6, seed=14)
    ours, _ = run_optimizer(
        LARS(learning_rate=0.1, momentum=0.9, exclude_from_layer_adaptation=[".*"]),
        weights,
        gradient_steps,
    )
    sgd, _ = run_optimizer(
        keras.optimizers.SGD(learning_rate=0.1, momentum=0.9), weights, gradient_steps
    )
    assert_close(ours, sgd)


def test_velocities_are_public_in_variable_order():
    # What LearningRateWarmup's momentum correction rescales: -v, learning rate included.
    variables = [
        keras.Variable(np.ones((2, 2), np.float32), name="a"),
        keras.Variable(np.ones((3,), np.float32), name="b"),
    ]
    optimizer = LARS(learning_rate=0.1)
    assert optimizer.velocities == []
    optimizer.build(variables)
    optimizer.apply([np.ones((2, 2), np.float32), np.full((3,), 2.0, np.float32)], variables)
    # trust = 0.001 * ||w|| / ||g||: 0.001 for a (v = -0.1 * 0.001 * 1), 0.0005 for b
    # (v = -0.1 * 0.0005 * 2).
    np.testing.assert_allclose(optimizer.velocities[0].numpy(), np.full((2, 2), -1e-4), rtol=1e-5)
    np.testing.assert_allclose(optimizer.velocities[1].numpy(), np.full((3,), -1e-4), rtol=1e-5)
