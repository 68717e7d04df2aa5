"""The study's pure pieces against values worked out by hand: the learning-rate grid and the
scaling rules, evaluation points, steps to target, divergence, the perfect-scaling line."""

import math

import pytest

from keras_largebatch.study import config as config_lib
from keras_largebatch.study import grid, measures
from keras_largebatch.study.optimizers import BASE_BATCH_SIZE, OPTIMIZERS


def test_the_grid_is_centred_on_the_scaled_rate():
    config = config_lib.preset(
        "default", batch_sizes=[64, 1024], learning_rates_per_cell=3, learning_rate_ratio=4.0
    )
    rates = {trial.key(): trial.learning_rate for trial in grid.trials(config)}
    # Linear rule for SGD: 0.1 at batch 256 is 0.1 * 1024 / 256 = 0.4 at 1024.
    assert OPTIMIZERS["sgd_nesterov"].base_learning_rate == 0.1 and BASE_BATCH_SIZE == 256
    for index, expected in enumerate([0.1, 0.4, 1.6]):
        assert rates[("sgd_nesterov", 1024, index)] == pytest.approx(expected)
    # Square-root rule for LAMB: 0.02 at 256 is 0.02 * sqrt(64 / 256) = 0.01 at 64.
    assert OPTIMIZERS["lamb"].base_learning_rate == 0.02
    for index, expected in enumerate([0.0025, 0.01, 0.04]):
        assert rates[("lamb", 64, index)] == pytest.approx(expected)


def test_a_scaling_rule_given_for_an_optimizer_recentres_only_its_grids():
    config = config_lib.preset(
        "default", batch_sizes=[64, 1024], learning_rates_per_cell=3, scaling_rules={"lars": "sqrt"}
    )
    trials = {trial.key(): trial for trial in grid.trials(config)}
    # LARS: 4.0 at batch 256 is 4.0 * sqrt(1024 / 256) = 8 at 1024 (linear would give 16).
    assert OPTIMIZERS["lars"].base_learning_rate == 4.0
    for index, expected in enumerate([2.0, 8.0, 32.0]):
        assert trials[("lars", 1024, index)].learning_rate == pytest.approx(expected)
        assert trials[("lars", 1024, index)].scaling_rule == "sqrt"
    # SGD keeps its own (linear) rule.
    assert trials[("sgd_nesterov", 1024, 1)].learning_rate == pytest.approx(0.4)
    assert trials[("sgd_nesterov", 1024, 1)].scaling_rule == "linear"


def test_every_cell_gets_the_same_number_of_rates():
    config = config_lib.preset("default", learning_rates_per_cell=4, learning_rate_ratio=2.0)
    trials = grid.trials(config)
    assert len(trials) == len(config.optimizers) * len(config.batch_sizes) * 4
    assert len({trial.key() for trial in trials}) == len(trials)
    # An even count is centred geometrically: start / 2^1.5, ..., start * 2^1.5.
    cell = [t.learning_rate for t in trials if t.optimizer == "adamw" and t.batch_size == 256]
    assert cell == pytest.approx([8e-3 * 2**exponent for exponent in (-1.5, -0.5, 0.5, 1.5)])
    # The small batches of every optimizer come first.
    assert [t.batch_size for t in trials] == sorted(t.batch_size for t in trials)


@pytest.mark.parametrize(
    "total_steps, points, expected",
    [(8, 4, [2, 4, 6, 8]), (10, 4, [3, 5, 8, 10]), (3, 8, [1, 2, 3]), (1, 2, [1])],
)
def test_evaluation_steps_are_spread_evenly_and_end_at_the_last_step(total_steps, points, expected):
    assert measures.evaluation_steps(total_steps, points) == expected


def test_steps_to_target_is_the_first_evaluation_at_the_target():
    curve = [(10, 0.5), (20, 0.84), (30, 0.85), (40, 0.83), (50, 0.9)]
    assert measures.steps_to_target(curve, 0.85) == 30
    assert measures.steps_to_target(curve, 0.5) == 10
    assert measures.steps_to_target(curve, 0.95) is None
    assert measures.steps_to_target([], 0.1) is None


@pytest.mark.parametrize(
    "loss, diverged",
    [(2.3, False), (4.6, False), (4.61, True), (math.nan, True), (math.inf, True), (0.0, False)],
)
def test_divergence_is_a_non_finite_or_blown_up_loss(loss, diverged):
    assert measures.is_diverged(loss, divergence_loss=4.6) is diverged


def test_perfect_scaling_halves_the_steps_when_the_batch_doubles():
    assert measures.perfect_scaling([64, 128, 256, 1024], 64, 1000) == [1000, 500, 250, 62.5]
