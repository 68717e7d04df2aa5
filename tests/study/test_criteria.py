"""The symmetric criterion: a hand-worked bootstrap, identical optimizers tie, an optimizer
twice as fast is found faster, swapping the two mirrors the verdict, and bad input."""

import numpy as np
import pytest

from keras_largebatch.study import criteria


def test_a_case_worked_by_hand():
    # Every resample of [100, 100] over [200, 200] has R = 0.5.
    assert criteria.step_ratio([100, 100], [200, 200]) == (0.5, 0.5, 0.5, criteria.LAYERWISE_FASTER)
    # The median of 2 draws from [100, 300] is 100, 200 or 300 (probabilities 1/4, 1/2, 1/4):
    # R is 0.5, 1 or 1.5, so the 95% interval is [0.5, 1.5], a tie, around the median's 1.0.
    ratio = criteria.step_ratio([100, 300], [200, 200])
    assert ratio == (1.0, 0.5, 1.5, criteria.TIE)
    # Seeds that never reach the target.
    assert criteria.step_ratio([None, None], [200, 200]).outcome == criteria.BASELINE_FASTER
    assert criteria.step_ratio([100, 100], [None, None]).ratio == 0.0
    assert criteria.step_ratio([None], [None]) == (1.0, 1.0, 1.0, criteria.TIE)


def _fake_cells(rng, speedup, batch_sizes=(256, 1024, 4096), seeds=4, spread=0.15):
    """Steps to the target of 4 seeds per optimizer: log-normal around a curve falling with the
    batch size, the layer-wise optimizer's divided by ``speedup``."""
    cells = {}
    for batch_size in batch_sizes:
        typical = 200 * (1 + 1024 / batch_size)
        baseline = typical * np.exp(rng.normal(0, spread, seeds))
        layerwise = typical / speedup * np.exp(rng.normal(0, spread, seeds))
        cells[batch_size] = (list(layerwise), list(baseline))
    return cells


def _outcome_rates(speedup, draws=100):
    rng = np.random.default_rng(1)
    counts = {name: 0 for name in criteria.OUTCOMES}
    for _ in range(draws):
        _, by_outcome = criteria.verdict(_fake_cells(rng, speedup), resamples=500)
        for name, batch_sizes in by_outcome.items():
            counts[name] += len(batch_sizes)
    return {name: count / (3 * draws) for name, count in counts.items()}


def test_identical_optimizers_tie_at_nearly_every_batch_size():
    rates = _outcome_rates(speedup=1.0)
    assert rates[criteria.LAYERWISE_FASTER] < 0.05 and rates[criteria.BASELINE_FASTER] < 0.05
    assert rates[criteria.TIE] > 0.9


def test_an_optimizer_twice_as_fast_is_found_faster():
    assert _outcome_rates(speedup=2.0)[criteria.LAYERWISE_FASTER] > 0.95
    assert _outcome_rates(speedup=0.5)[criteria.BASELINE_FASTER] > 0.95


def test_swapping_the_optimizers_mirrors_the_verdict():
    cells = _fake_cells(np.random.default_rng(2), speedup=2.0)
    ratios, by_outcome = criteria.verdict(cells)
    swapped_ratios, swapped = criteria.verdict(
        {batch: (baseline, layerwise) for batch, (layerwise, baseline) in cells.items()}
    )
    assert (
        by_outcome[criteria.LAYERWISE_FASTER]
        == swapped[criteria.BASELINE_FASTER]
        == [
            256,
            1024,
            4096,
        ]
    )
    for batch_size, ratio in ratios.items():
        assert swapped_ratios[batch_size].ratio == pytest.approx(1 / ratio.ratio)


@pytest.mark.parametrize(
    "layerwise, baseline, resamples, message",
    [
        ([], [100], 1000, "layerwise_steps must hold at least one"),
        ([100], [0], 1000, "baseline_steps must be positive"),
        ([100], [100], 10, "resamples must be an int >= 100"),
    ],
)
def test_bad_input_is_refused(layerwise, baseline, resamples, message):
    with pytest.raises(ValueError, match=message):
        criteria.step_ratio(layerwise, baseline, resamples=resamples)


def test_ledger_cells_take_the_confirmations_steps_to_the_target():
    def row(optimizer, batch_size, seed, curve, phase="confirmation"):
        return dict(optimizer=optimizer, batch_size=batch_size, seed=seed, curve=curve, phase=phase)

    rows = [
        row("lamb", 256, 0, [(10, 0.5), (20, 0.9)]),
        row("lamb", 256, 1, [(10, 0.9)]),
        row("adamw", 256, 0, [(10, 0.5), (20, 0.6)]),  # never reaches 0.87: None
        row("adamw", 256, 1, [(10, 0.88)]),
        row("adamw", 256, 2, [(30, 0.95)], phase="search"),  # not a confirmation
        row("lamb", 512, 1, [(10, 0.9)]),  # no adamw at 512: left out
        row("lars", 256, 1, [(10, 0.9)]),  # another pair
    ]
    assert criteria.ledger_cells(rows, "lamb", "adamw", 0.87) == {256: ([20, 10], [None, 10])}
    assert criteria.ledger_cells(rows, "lamb", "adamw", 0.87, skip_seeds=(0,)) == {
        256: ([10], [10])
    }


def test_the_command_reads_a_study_directory(tmp_path, capsys):
    with pytest.raises(SystemExit):
        criteria.main([str(tmp_path), "--target", "0.87"])
    assert "holds no trials.csv" in capsys.readouterr().err
