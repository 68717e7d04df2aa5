"""What a curve says, against values worked out by hand: evaluation points, steps to a target,
the best accuracy, divergence, the perfect-scaling line, and the budgets of the presets."""

import math

import pytest

from keras_largebatch.study import config as config_lib
from keras_largebatch.study import measures


@pytest.mark.parametrize(
    "total_steps, points, expected",
    [(8, 4, [2, 4, 6, 8]), (10, 4, [3, 5, 8, 10]), (3, 8, [1, 2, 3]), (1, 2, [1])],
)
def test_evaluation_steps_are_spread_evenly_and_end_at_the_last_step(total_steps, points, expected):
    assert measures.evaluation_steps(total_steps, points) == expected


def test_steps_to_target_is_the_first_evaluation_at_the_target():
    curve = [(10, 0.5, 1.0), (20, 0.84, 0.6), (30, 0.85, 0.5), (40, 0.83, 0.5), (50, 0.9, 0.3)]
    assert measures.steps_to_target(curve, 0.85) == 30
    assert measures.steps_to_target(curve, 0.5) == 10
    assert measures.steps_to_target(curve, 0.95) is None
    assert measures.steps_to_target([], 0.1) is None
    assert measures.best_accuracy(curve) == 0.9 and measures.best_accuracy([]) is None


@pytest.mark.parametrize(
    "loss, diverged",
    [(2.3, False), (4.6, False), (4.61, True), (math.nan, True), (math.inf, True), (0.0, False)],
)
def test_divergence_is_a_non_finite_or_blown_up_loss(loss, diverged):
    assert measures.is_diverged(loss, divergence_loss=4.6) is diverged


def test_perfect_scaling_halves_the_steps_when_the_batch_doubles():
    assert measures.perfect_scaling([64, 128, 256, 1024], 64, 1000) == [1000, 500, 250, 62.5]


def test_the_full_presets_budgets_are_the_protocols():
    config = config_lib.PRESETS["full"]
    # max(ceil(262,500 / B), 300).
    budgets = [config.step_budget(size) for size in config.batch_sizes]
    assert budgets == [4102, 2051, 1026, 513, 300, 300, 300]
    assert config.targets == [0.85, 0.87, 0.88] and config.primary_target == 0.87
    assert (config.trials_per_cell, config.seeds, config.validation_examples) == (16, 3, 10_000)
