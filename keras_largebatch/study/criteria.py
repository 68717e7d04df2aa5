"""Criteria that are the same both ways: at each batch size, is the layer-wise optimizer faster,
the baseline faster, or do they tie?

At one batch size, with ``S`` an optimizer's median over seeds of the steps to the target (a
seed that never reaches it counts as infinite):

    R = S_layerwise / S_baseline

with a percentile bootstrap interval over seeds (each optimizer's seeds resampled with
replacement, independently, ``RESAMPLES`` times from a fixed seed; the bounds are order
statistics of the resampled R). The layer-wise optimizer is
faster at that batch size if R's upper bound is below ``FASTER``, the baseline is faster if R's
lower bound is above ``SLOWER``, and otherwise they tie. The rule treats the two optimizers
alike: swapping them turns R into 1 / R and the interval into its reciprocal, so "layer-wise
faster" becomes "baseline faster" at the same batch sizes. Two identical optimizers tie at
every batch size but for the interval's own error (`tests/study/test_criteria.py` measures how
often, on fake seeds).

Infinite medians: a resample where only the layer-wise optimizer's median is infinite gives
R = infinity, only the baseline's gives R = 0, and both gives R = 1 (neither reaches the target:
no evidence either way).

Written for the study's second edition, before its run; the first edition's criteria, which were
not symmetric, stay in `keras_largebatch.study.analysis` with its ledger.
"""

import math
from typing import NamedTuple

import numpy as np

FASTER = 0.9  # R's upper bound below this: the layer-wise optimizer is faster
SLOWER = 1.1  # R's lower bound above this: the baseline is faster
CONFIDENCE = 0.95
RESAMPLES = 10_000
SEED = 0

LAYERWISE_FASTER = "layer-wise faster"
BASELINE_FASTER = "baseline faster"
TIE = "tie"
OUTCOMES = (LAYERWISE_FASTER, TIE, BASELINE_FASTER)


class StepRatio(NamedTuple):
    """R at one batch size, its bootstrap interval, and the outcome the rule gives."""

    ratio: float
    low: float
    high: float
    outcome: str


def _steps(values, argument):
    steps = np.array([math.inf if value is None else float(value) for value in values])
    if steps.size == 0:
        raise ValueError(f"{argument} must hold at least one seed's steps, got none")
    if np.any(np.isnan(steps)) or np.any(steps <= 0):
        raise ValueError(f"{argument} must be positive step counts or None, got {list(values)}")
    return steps


def _ratio(layerwise, baseline):
    """R of medians (arrays broadcast), with the infinite cases of the module docstring."""
    layerwise, baseline = np.asarray(layerwise, float), np.asarray(baseline, float)
    with np.errstate(invalid="ignore"):
        ratio = layerwise / baseline
    both = np.isinf(layerwise) & np.isinf(baseline)
    return np.where(both, 1.0, ratio)


def outcome(low, high):
    """The rule's outcome for an interval ``[low, high]`` of R."""
    if high < FASTER:
        return LAYERWISE_FASTER
    if low > SLOWER:
        return BASELINE_FASTER
    return TIE


def step_ratio(layerwise_steps, baseline_steps, resamples=RESAMPLES, seed=SEED):
    """The `StepRatio` of two optimizers' seeds at one batch size.

    Args:
        layerwise_steps: the layer-wise optimizer's steps to the target, one per seed (None:
            not reached).
        baseline_steps: the baseline's, likewise.
        resamples: bootstrap resamples, >= 100.
        seed: of the resampling.
    """
    layerwise = _steps(layerwise_steps, "layerwise_steps")
    baseline = _steps(baseline_steps, "baseline_steps")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 100:
        raise ValueError(f"resamples must be an int >= 100, got {resamples!r}")
    rng = np.random.default_rng(seed)
    layerwise_medians = np.median(
        rng.choice(layerwise, size=(resamples, layerwise.size), replace=True), axis=1
    )
    baseline_medians = np.median(
        rng.choice(baseline, size=(resamples, baseline.size), replace=True), axis=1
    )
    ratios = _ratio(layerwise_medians, baseline_medians)
    tail = (1 - CONFIDENCE) / 2 * 100
    # Order statistics, not interpolated between them (which an infinite R would make NaN).
    low, high = (
        float(value) for value in np.percentile(ratios, [tail, 100 - tail], method="inverted_cdf")
    )
    ratio = float(_ratio(np.median(layerwise), np.median(baseline)))
    return StepRatio(ratio, low, high, outcome(low, high))


def verdict(cells, resamples=RESAMPLES, seed=SEED):
    """Per batch size the `StepRatio`, and per outcome the batch sizes that have it.

    Args:
        cells: ``{batch_size: (layerwise_steps, baseline_steps)}``.

    Returns:
        ``(ratios, by_outcome)``: ``{batch_size: StepRatio}`` and ``{outcome: [batch sizes]}``
        for every outcome in `OUTCOMES` (ascending batch sizes, an empty list for none).
    """
    ratios = {
        batch_size: step_ratio(layerwise, baseline, resamples=resamples, seed=seed)
        for batch_size, (layerwise, baseline) in sorted(cells.items())
    }
    by_outcome = {name: [] for name in OUTCOMES}
    for batch_size, ratio in ratios.items():
        by_outcome[ratio.outcome].append(batch_size)
    return ratios, by_outcome


def ledger_cells(rows, layerwise, baseline, target_accuracy, skip_seeds=()):
    """``{batch_size: (layerwise_steps, baseline_steps)}`` from a study ledger's rows
    (`ledger.read_rows`): the confirmation seeds' steps to ``target_accuracy``, at the batch
    sizes where both optimizers have confirmations, leaving out the seeds in ``skip_seeds``
    (the first edition's seed 0 repeats its search trial)."""
    from keras_largebatch.study import measures

    steps = {}
    for row in rows:
        if row["phase"] != "confirmation" or row["seed"] in skip_seeds:
            continue
        if row["optimizer"] not in (layerwise, baseline):
            continue
        reached = measures.steps_to_target(row["curve"] or (), target_accuracy)
        steps.setdefault((row["optimizer"], row["batch_size"]), []).append(reached)
    batch_sizes = sorted(
        {batch for optimizer, batch in steps}
        & {batch for optimizer, batch in steps if optimizer == layerwise}
        & {batch for optimizer, batch in steps if optimizer == baseline}
    )
    return {batch: (steps[layerwise, batch], steps[baseline, batch]) for batch in batch_sizes}


def main(argv=None):
    """``python -m keras_largebatch.study.criteria STUDY_DIR --target 0.87``: the rule applied
    to a study's ledger, per pair of optimizers and batch size."""
    import argparse

    from keras_largebatch.study import ledger
    from keras_largebatch.study.optimizers import PAIRS

    parser = argparse.ArgumentParser(prog="python -m keras_largebatch.study.criteria")
    parser.add_argument("study_dir", help="a study's output directory (holding trials.csv)")
    parser.add_argument("--target", type=float, required=True, help="validation accuracy")
    parser.add_argument("--skip-seeds", type=int, nargs="*", default=[], help="seeds left out")
    args = parser.parse_args(argv)
    rows = ledger.read_rows(args.study_dir)
    if not rows:
        parser.error(f"{args.study_dir!r} holds no {ledger.LEDGER}")
    for layerwise, baseline in PAIRS:
        cells = ledger_cells(rows, layerwise, baseline, args.target, tuple(args.skip_seeds))
        ratios, by_outcome = verdict(cells)
        print(f"{layerwise} / {baseline}, steps to {args.target}:")
        for batch_size, ratio in ratios.items():
            layerwise_steps, baseline_steps = cells[batch_size]
            print(
                f"  batch {batch_size:>5}: R {ratio.ratio:.2f} [{ratio.low:.2f}, {ratio.high:.2f}]"
                f" {ratio.outcome} ({layerwise} {layerwise_steps}, {baseline} {baseline_steps})"
            )
        print("  " + "; ".join(f"{name}: {by_outcome[name]}" for name in OUTCOMES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
