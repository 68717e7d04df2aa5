"""What the ledger says: per cell the seeds' steps to each target and accuracies, per
optimizer the fit of ``S(B) = S_min (1 + B_crit / B)`` with a bootstrap interval, the noise
scale at the target's loss, and the claim's pre-stated criteria.

The model of the steps to a target against the batch size is McCandlish et al.'s
(arXiv:1812.06162, eq. 2.11): ``S(B) = S_min (1 + B_crit / B)``, perfect scaling well below
``B_crit`` and no gain well above it. It is linear in ``1 / B`` with slope ``S_min B_crit``,
and is fitted by least squares of the relative residuals ``(S_i - S(B_i)) / S_i`` (the steps
span two decades: an absolute fit would see only the smallest batch).
"""

import math
from typing import NamedTuple, Optional

import numpy as np

from keras_largebatch.study import measures, protocol
from keras_largebatch.study.optimizers import PAIRS
from keras_largebatch.vision import fashion_mnist

CONFIDENCE = 0.95  # of the bootstrap intervals
CONFIRM_RATIO = 0.8  # the layer-wise optimizer needs at most this share of the baseline's steps
REFUTE_RATIO = 1.1  # ... or is never faster than the baseline by more than this factor
# The accuracy of a diverged run: a constant prediction's on the balanced validation split
# and test set.
CHANCE_ACCURACY = 1 / fashion_mnist.NUM_CLASSES


class Spread(NamedTuple):
    """The median of a cell's seeds and their range; steps not reached count as infinite."""

    median: float
    low: float
    high: float
    values: tuple


def spread(values):
    """The `Spread` of ``values`` (None: not reached, infinite), or None when empty."""
    numbers = [math.inf if value is None else float(value) for value in values]
    if not numbers:
        return None
    return Spread(float(np.median(numbers)), min(numbers), max(numbers), tuple(numbers))


class CellResult(NamedTuple):
    """One cell after the protocol (`protocol.CellProgress`) and its seeds."""

    progress: protocol.CellProgress
    trials: int  # search and extension trials of the selected round
    diverged: int  # of those
    search_steps: dict  # target -> the selected trial's steps to it (None: not reached)
    steps: dict  # target -> `Spread` of the confirmations' steps
    validation_accuracy: Optional[Spread]  # at the end of the budget; diverged: chance
    test_accuracy: Optional[Spread]  # at the end of the budget; diverged: chance
    diverged_seeds: int  # confirmations that diverged


def cell_result(config, progress):
    """The `CellResult` of a complete cell's ``progress``."""
    rows = progress.search_rows
    confirmations = progress.confirmations

    def accuracy(row, value):
        # A diverged run has no accuracy at the end of its budget; it counts as the
        # accuracy of a constant prediction, so that a median and a range are of every seed.
        return CHANCE_ACCURACY if row["stop"] == "diverged" else value

    return CellResult(
        progress=progress,
        trials=len(rows),
        diverged=sum(row["stop"] == "diverged" for row in rows),
        search_steps={
            target: measures.steps_to_target(progress.best["curve"], target)
            for target in config.targets
        },
        steps={
            target: spread(measures.steps_to_target(row["curve"], target) for row in confirmations)
            for target in config.targets
        },
        validation_accuracy=spread(accuracy(row, row["curve"][-1][1]) for row in confirmations),
        test_accuracy=spread(accuracy(row, row["test_accuracy"]) for row in confirmations),
        diverged_seeds=sum(row["stop"] == "diverged" for row in confirmations),
    )


def results(config, rows):
    """``({(optimizer, batch size): CellResult}, [incomplete (optimizer, batch size)])``
    for the ledger's ``rows``."""
    by_key = {row["key"]: row for row in rows}
    complete, incomplete = {}, []
    for batch_size in config.batch_sizes:
        for optimizer in config.optimizers:
            progress = protocol.walk_cell(config, optimizer, batch_size, by_key)
            if progress.pending:
                incomplete.append((optimizer, batch_size))
            else:
                complete[(optimizer, batch_size)] = cell_result(config, progress)
    return complete, incomplete


def fit_critical_batch(batch_sizes, steps):
    """``(S_min, B_crit)`` of the fit of ``S(B) = S_min (1 + B_crit / B)`` to ``steps`` at
    ``batch_sizes`` (finite values, at least two batch sizes). ``B_crit`` is inf when the fit
    has ``S_min <= 0`` (perfect scaling throughout), 0 when its slope is negative."""
    batch_sizes = np.asarray(batch_sizes, dtype=np.float64)
    steps = np.asarray(steps, dtype=np.float64)
    # Minimize sum(((S_i - a - c / B_i) / S_i)^2) over a = S_min and c = S_min B_crit.
    design = np.stack([1 / steps, 1 / (batch_sizes * steps)], axis=1)
    (intercept, slope), *_ = np.linalg.lstsq(design, np.ones_like(steps), rcond=None)
    # An intercept within round-off of 0 is perfect scaling too.
    if intercept <= 1e-9 * steps.min():
        return float(intercept), math.inf
    return float(intercept), max(float(slope / intercept), 0.0)


class Fit(NamedTuple):
    """The fit of one optimizer's median steps to the primary target."""

    batch_sizes: tuple  # where the median reached the target
    minimum_steps: float  # S_min
    critical_batch_size: float  # B_crit
    low: float  # its bootstrap interval
    high: float


def fit_optimizer(cells, optimizer, target, samples, seed=0):
    """The `Fit` of ``optimizer``'s cells (``{(optimizer, batch): CellResult}``) at
    ``target``, or None with fewer than two batch sizes whose median reached it. The interval
    resamples each batch size's seeds with replacement, takes the median and refits;
    resamples where a median is not reached leave that batch size out."""
    series = sorted(
        (batch_size, result.steps[target])
        for (name, batch_size), result in cells.items()
        if name == optimizer and result.steps[target] is not None
    )
    series = [(batch_size, spread_) for batch_size, spread_ in series if spread_.median < math.inf]
    if len(series) < 2:
        return None
    batch_sizes = [batch_size for batch_size, _ in series]
    minimum_steps, critical = fit_critical_batch(
        batch_sizes, [spread_.median for _, spread_ in series]
    )
    generator = np.random.default_rng(seed)
    resampled = []
    for _ in range(samples):
        points = []
        for batch_size, spread_ in series:
            values = generator.choice(spread_.values, len(spread_.values))
            median = float(np.median(values))
            if median < math.inf:
                points.append((batch_size, median))
        if len(points) >= 2:
            resampled.append(fit_critical_batch(*zip(*points))[1])
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = (
        np.percentile(resampled, [tail, 100 - tail], method="nearest")
        if resampled
        else (math.nan, math.nan)
    )
    return Fit(tuple(batch_sizes), minimum_steps, critical, float(low), float(high))


class NoiseScale(NamedTuple):
    """``B_simple`` along one optimizer's run at the smallest batch, and at the target."""

    optimizer: str
    batch_size: int
    points: list  # (step, training loss, validation accuracy, B_simple, low, high); NaN: none
    at_target: Optional[tuple]  # the first point at or above the primary target


def noise_scales(cells, config):
    """The `NoiseScale` of each optimizer whose smallest-batch cell is complete."""
    found = []
    for optimizer in config.optimizers:
        result = cells.get((optimizer, config.batch_sizes[0]))
        if result is None:
            continue
        measured = [row for row in result.progress.confirmations if row["noise_scale"]]
        if not measured:
            continue
        points = [
            tuple(math.nan if value is None else value for value in point)
            for point in measured[0]["noise_scale"]
        ]
        at_target = next((p for p in points if p[2] >= config.primary_target), None)
        found.append(NoiseScale(optimizer, config.batch_sizes[0], points, at_target))
    return found


class Verdict(NamedTuple):
    """The pre-stated criteria for one pair (a layer-wise optimizer and its baseline)."""

    layerwise: str
    baseline: str
    confirming_batch_sizes: list  # batch sizes >= the criteria's where both tests hold
    critical_above: Optional[bool]  # the B_crit intervals apart, layer-wise above; None: no fit
    confirmed: bool
    refuted: bool
    compared_batch_sizes: list  # batch sizes where both cells are complete
    unequal_budgets: list  # of those, where one cell's budget was doubled and not the other's
    faster_batch_sizes: list  # where the layer-wise median is > REFUTE_RATIO x faster
    more_accurate_batch_sizes: list  # where its median test accuracy tops the baseline's seeds


def verdict(cells, fits, config, layerwise, baseline):
    """The criteria for ``layerwise`` against ``baseline`` at the primary target.

    Confirmed: at two or more batch sizes >= ``config.criteria_min_batch_size`` the
    layer-wise median needs <= `CONFIRM_RATIO` x the baseline's steps with the seed ranges
    apart (its slowest seed faster than the baseline's fastest), and its ``B_crit``
    interval lies above the baseline's. Refuted: at every batch size compared, the layer-wise
    median is no faster than the baseline's by more than `REFUTE_RATIO` (baseline median /
    layer-wise median <= 1.1) and its median accuracy at the end of the budget (test) is
    not above the top of the baseline's seed range. A batch size where one of the two cells
    had its budget doubled compares them under different schedules; it counts like any
    other, and is listed.
    """
    target = config.primary_target
    compared, confirming, unequal, faster_sizes, accurate_sizes = [], [], [], [], []
    for batch_size in config.batch_sizes:
        ours, theirs = cells.get((layerwise, batch_size)), cells.get((baseline, batch_size))
        if ours is None or theirs is None:
            continue
        compared.append(batch_size)
        if ours.progress.step_budget != theirs.progress.step_budget:
            unequal.append(batch_size)
        steps, baseline_steps = ours.steps[target], theirs.steps[target]
        faster = steps.median <= CONFIRM_RATIO * baseline_steps.median and (
            steps.high < baseline_steps.low
        )
        if faster and batch_size >= config.criteria_min_batch_size:
            confirming.append(batch_size)
        if steps.median == math.inf:
            speedup = 0.0 if baseline_steps.median < math.inf else 1.0
        else:
            speedup = baseline_steps.median / steps.median
        accuracy, baseline_accuracy = ours.test_accuracy, theirs.test_accuracy
        above = accuracy is not None and (
            baseline_accuracy is None or accuracy.median > baseline_accuracy.high
        )
        if speedup > REFUTE_RATIO:
            faster_sizes.append(batch_size)
        if above:
            accurate_sizes.append(batch_size)
    ours_fit, their_fit = fits.get(layerwise), fits.get(baseline)
    critical_above = None
    if ours_fit is not None and their_fit is not None:
        critical_above = ours_fit.low > their_fit.high
    elif ours_fit is not None and steps_reached_only_by(cells, layerwise, baseline, target):
        critical_above = True
    confirmed = len(confirming) >= 2 and bool(critical_above)
    refuted = bool(compared) and not faster_sizes and not accurate_sizes
    return Verdict(
        layerwise,
        baseline,
        confirming,
        critical_above,
        confirmed,
        refuted,
        compared,
        unequal,
        faster_sizes,
        accurate_sizes,
    )


def steps_reached_only_by(cells, layerwise, baseline, target):
    """True when ``baseline`` reaches ``target`` (median) at fewer than two batch sizes, so
    has no fit, while ``layerwise`` has one: its B_crit is then above anything the baseline
    shows."""
    reached = [
        batch_size
        for (name, batch_size), result in cells.items()
        if name == baseline and result.steps[target].median < math.inf
    ]
    return len(reached) < 2


def verdicts(cells, fits, config):
    """The `Verdict` of each pair of `optimizers.PAIRS` whose two optimizers are studied."""
    return [
        verdict(cells, fits, config, layerwise, baseline)
        for layerwise, baseline in PAIRS
        if layerwise in config.optimizers and baseline in config.optimizers
    ]
