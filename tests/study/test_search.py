"""The search: Sobol points against SciPy's unscrambled sequence and the net property, unit
points to settings, range edges and the trials beyond them, and every optimizer's space."""

import math

import numpy as np
import pytest
from scipy.stats import qmc

from keras_largebatch.study import search, sobol
from keras_largebatch.study.optimizers import COMMON, OPTIMIZERS, peak_learning_rate


def test_the_unscrambled_sequence_is_scipys():
    expected = qmc.Sobol(d=sobol.MAX_DIMENSIONS, scramble=False).random(256)
    np.testing.assert_array_equal(sobol.sobol_points(256, sobol.MAX_DIMENSIONS), expected)


def test_the_third_coordinate_by_hand():
    # Dimension 3: s=2, a=1, m=(1, 3): m_3 = 2*1*m_2 ^ 4*m_1 ^ m_1 = 6 ^ 4 ^ 1 = 3.
    v = sobol.direction_numbers(2)
    assert [value / 2**sobol.BITS for value in v[:3]] == [0.5, 0.75, 3 / 8]
    # Point 2: gray(2) = 3, v_1 ^ v_2 = 0.5 ^ 0.75 = 0.25.
    assert sobol.sobol_points(3, 3)[2, 2] == 0.25


@pytest.mark.parametrize("seed", [0, 7])
def test_the_scrambled_points_keep_the_net_property(seed):
    points = sobol.sobol_points(16, search.DIMENSIONS, seed=seed)
    assert points.min() > 0 and points.max() < 1
    # One point in each sixteenth of every coordinate ...
    for coordinate in points.T:
        assert sorted(np.floor(coordinate * 16).astype(int)) == list(range(16))
    # ... and in each of the 16 boxes 2^-k x 2^-(4-k) of the first two (a (0, 4, 2)-net).
    for k in range(5):
        boxes = {(int(p[0] * 2**k), int(p[1] * 2 ** (4 - k))) for p in points}
        assert len(boxes) == 16
    assert not np.array_equal(points, sobol.sobol_points(16, search.DIMENSIONS, seed=seed + 1))
    np.testing.assert_array_equal(points, sobol.sobol_points(16, search.DIMENSIONS, seed=seed))


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match=r"dimensions must be in \[1, 8\], got 9"):
        sobol.sobol_points(4, 9)
    with pytest.raises(ValueError, match="count must be >= 1, got 0"):
        sobol.sobol_points(0, 2)


def test_a_point_becomes_settings():
    dimensions = OPTIMIZERS["lars"].dimensions
    choices = OPTIMIZERS["lars"].choices
    settings = search.settings(dimensions, choices, (0.5, 0.0, 1 / 3, 0.49, 0.5))
    assert settings == pytest.approx(
        {
            "layerwise_rate": 1e-4 * 1000**0.5,
            "one_minus_momentum": 0.001,
            "warmup_fraction": 0.1,
            "bias_adaptation": False,
            "trust_coefficient": 0.02,
        }
    )
    # LARS's global rate is the layer-wise one over eta.
    assert peak_learning_rate("lars", settings) == pytest.approx(1e-4 * 1000**0.5 / 0.02)
    assert peak_learning_rate("lamb", {"learning_rate": 0.01}) == 0.01


def test_edges_are_the_outer_eighths_of_ranges_that_may_grow():
    dimensions = OPTIMIZERS["adamw"].dimensions
    assert search.edges(dimensions, (0.1, 0.05, 0.5)) == [(0, -1), (1, -1)]
    assert search.edges(dimensions, (0.95, 0.5, 0.5)) == [(0, 1)]
    assert search.edges(dimensions, (0.125, 0.875, 0.5)) == []
    # 1 - momentum cannot pass 1 (momentum 0): its high edge is not extended.
    assert search.edges(dimensions, (0.5, 0.99, 0.5)) == []
    # The warmup cannot go below 0: its low edge is not extended, its high one is.
    assert search.edges(dimensions, (0.5, 0.5, 0.01)) == []
    assert search.edges(dimensions, (0.5, 0.5, 0.99)) == [(2, 1)]


def test_extension_points_go_a_quarter_of_the_range_beyond():
    point = (0.05, 0.5, 0.5, 0.2, 0.7)
    low = search.extension_points(point, 0, -1, 4)
    assert [p[0] for p in low] == [-1 / 16, -2 / 16, -3 / 16, -4 / 16]
    assert all(p[1:] == point[1:] for p in low)
    high = search.extension_points(point, 2, 1, 2)
    assert [p[2] for p in high] == [1.125, 1.25]
    # A quarter of three decades beyond 1e-4 is 1e-4 / 10^0.75.
    rate = OPTIMIZERS["adamw"].learning_rate
    assert rate.value(low[-1][0]) == pytest.approx(1e-4 / 10**0.75)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_every_space_has_the_same_shared_ranges_and_valid_extensions(name):
    spec = OPTIMIZERS[name]
    assert spec.dimensions[1:] == COMMON and 1 <= len(spec.choices) <= search.CHOICES
    assert math.log10(spec.learning_rate.high / spec.learning_rate.low) == pytest.approx(3)
    # Every value a trial beyond an edge can take is still a valid setting: the learning
    # rate and 1 - momentum go a quarter of their range below it, the rate and the warmup
    # above; 1 - momentum stops at 1 (momentum 0) and the warmup at 0.
    lowest = search.settings(spec.dimensions, spec.choices, (-0.25, -0.25, 0.0, 0.0, 0.0))
    highest = search.settings(spec.dimensions, spec.choices, (1.25, 0.999, 1.25, 0.99, 0.99))
    for settings in (lowest, highest):
        assert 0 < settings["one_minus_momentum"] <= 1
        assert 0 <= settings["warmup_fraction"] < 1
    assert search.edges(spec.dimensions, (0.5, 0.99, 0.5)) == []
