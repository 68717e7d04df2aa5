"""What an arm's ledger says: the seeds' steps to the target per cell, the baseline's
critical batch size from the pilot (and so the main batch sizes), the criteria's verdict per
batch size, and how each cell's search went.

The critical batch size is McCandlish et al.'s (arXiv:1812.06162, eq. 2.11), fitted as the
first edition fits it (`keras_largebatch.study.analysis.fit_critical_batch`) to the median
steps of the seeds. Its interval carries both the seeds' and the fit's uncertainty: every
bootstrap resample draws each batch size's seeds with replacement (the median of a resample
is that batch size's steps) and then the batch sizes themselves with replacement, refitting
each time.
"""

import math
from typing import NamedTuple, Optional

import numpy as np

from keras_largebatch.study import criteria
from keras_largebatch.study.analysis import fit_critical_batch
from keras_largebatch.study.arms import measures, protocol

CONFIDENCE = 0.95


def seed_steps(cell, config, metric):
    """The seeds' steps to the target of a complete ``cell`` (None: not reached within the
    budget)."""
    return [measures.steps_to_target(row["curve"], config.target, metric) for row in cell.seed_rows]


def best_so_far(cell, config, metric):
    """The best steps to the target after each of a cell's search and refinement trials
    (inf until one reaches it): flat at the end when the search has done its work."""
    curve, best = [], math.inf
    for row in cell.trial_rows:
        steps = measures.steps_to_target(row["curve"], config.target, metric)
        if steps is not None:
            best = min(best, steps)
        curve.append(best)
    return curve


class PilotFit(NamedTuple):
    """The baseline's fit over the pilot's batch sizes."""

    batch_sizes: tuple  # where its median reached the target
    medians: tuple
    minimum_steps: float
    critical_batch_size: float
    low: float
    high: float


def fit_with_interval(steps_by_batch, samples, seed=0):
    """The `PilotFit` of ``{batch_size: [steps or None, ...]}`` or None with fewer than two
    batch sizes whose median reached the target."""
    series = []
    for batch_size, values in sorted(steps_by_batch.items()):
        numbers = np.array([math.inf if v is None else float(v) for v in values])
        if len(numbers) and np.median(numbers) < math.inf:
            series.append((batch_size, numbers))
    if len(series) < 2:
        return None
    sizes = [size for size, _ in series]
    medians = [float(np.median(numbers)) for _, numbers in series]
    minimum_steps, critical = fit_critical_batch(sizes, medians)
    generator = np.random.default_rng(seed)
    resampled = []
    for _ in range(samples):
        points = []
        for index in generator.integers(0, len(series), len(series)):
            size, numbers = series[index]
            median = float(np.median(generator.choice(numbers, len(numbers))))
            if median < math.inf:
                points.append((size, median))
        if len({size for size, _ in points}) >= 2:
            resampled.append(fit_critical_batch(*zip(*points))[1])
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = (
        (float(v) for v in np.percentile(resampled, [tail, 100 - tail], method="nearest"))
        if resampled
        else (math.nan, math.nan)
    )
    return PilotFit(tuple(sizes), tuple(medians), minimum_steps, critical, low, high)


def pilot_cells(config, rows_by_key, metric):
    """The pilot's `protocol.Cell`s: the baseline at each of ``pilot_batch_sizes``."""
    baseline = config.definition.baseline
    return [
        protocol.walk_cell(config, protocol.PILOT, baseline, size, rows_by_key, metric)
        for size in config.pilot_batch_sizes
    ]


def pilot_fit(config, cells, metric, interval=True):
    """The baseline's `PilotFit` from its complete pilot ``cells``; without ``interval`` its
    bounds are NaN (the batch sizes need only the fit)."""
    return fit_with_interval(
        {cell.batch_size: seed_steps(cell, config, metric) for cell in cells},
        config.bootstrap_samples if interval else 0,
    )


def main_batch_sizes(config, fit, train_examples):
    """``(batch_sizes, note)``: ``ArmConfig.batch_sizes`` when given (as given); otherwise
    ``B_crit`` times each of ``multiples``, rounded in log scale (halves up) to the pilot's
    smallest batch size times a power of ``main_grid`` (with 2 and a pilot of powers of 2: the
    nearest power of 2), then to a whole number of at least 1 and at most the training
    examples (which may leave the grid); those above ``max_batch_size`` are left out, and
    ``note`` says which. A ``B_crit`` the pilot cannot place (no fit, perfect scaling over the
    whole pilot, or a fit outside the pilot's batch sizes) is taken at the pilot's nearest
    edge and said in ``note``."""
    if config.batch_sizes is not None:
        return list(config.batch_sizes), "given"
    note = "fitted"
    if fit is None:
        critical = config.pilot_batch_sizes[-1]
        note = (
            "the pilot's baseline reached the target at fewer than two batch sizes: B_crit "
            "taken as its largest batch size"
        )
    elif not math.isfinite(fit.critical_batch_size):
        critical = config.pilot_batch_sizes[-1]
        note = "perfect scaling over the whole pilot: B_crit taken as its largest batch size"
    elif fit.critical_batch_size < config.pilot_batch_sizes[0]:
        critical = config.pilot_batch_sizes[0]
        note = "B_crit below the pilot's smallest batch size: taken as that"
    elif fit.critical_batch_size > config.pilot_batch_sizes[-1]:
        critical = config.pilot_batch_sizes[-1]
        note = "B_crit above the pilot's largest batch size: taken as that"
    else:
        critical = fit.critical_batch_size
    smallest, grid = config.pilot_batch_sizes[0], config.main_grid

    def on_grid(size):
        # Halves up (a B_crit taken at a pilot batch size puts 0.5x, 2x and 8x exactly
        # between two points of a grid of 4), with room for the logarithm's rounding.
        return smallest * grid ** math.floor(math.log(size / smallest, grid) + 0.5 + 1e-9)

    sizes = sorted(
        {
            max(min(round(on_grid(multiple * critical)), train_examples), 1)
            for multiple in config.multiples
        }
    )
    if config.max_batch_size is not None:
        over = [size for size in sizes if size > config.max_batch_size]
        if over:
            sizes = [size for size in sizes if size <= config.max_batch_size]
            note += (
                f"; {', '.join(f'{size:,}' for size in over)} left out, above "
                f"max_batch_size {config.max_batch_size:,}"
            )
    return sizes, note


def main_cells(config, batch_sizes, rows_by_key, metric):
    """The main `protocol.Cell`s: at each of ``batch_sizes``, the layer-wise optimizer, then
    the baseline (with ``reuse_pilot``, continuing its pilot cell at a pilot batch size)."""
    arm = config.definition
    return [
        protocol.walk_cell(
            config,
            protocol.MAIN,
            name,
            size,
            rows_by_key,
            metric,
            continues=protocol.PILOT if config.continues_pilot(name, size) else None,
        )
        for size in batch_sizes
        for name in (arm.layerwise, arm.baseline)
    ]


class ArmState(NamedTuple):
    """Where an arm stands."""

    pilot: list  # `protocol.Cell`s
    fit: Optional[PilotFit]  # None until the pilot is complete (or cannot fit)
    batch_sizes: Optional[list]  # the main cells'; None until the pilot is complete
    batch_note: str
    main: list  # `protocol.Cell`s ([] until the batch sizes are known)

    def next_trial(self):
        for cell in self.pilot + self.main:
            if cell.pending is not None:
                return cell.pending
        return None


def arm_state(config, rows_by_key, metric, train_examples, interval=True):
    """The `ArmState` of ``config``'s arm given the ledger's rows (``interval``: with the
    fit's bootstrap interval, which the walk does not need)."""
    pilot = pilot_cells(config, rows_by_key, metric)
    pilot_complete = all(cell.pending is None for cell in pilot)
    fit = pilot_fit(config, pilot, metric, interval) if pilot_complete else None
    if config.batch_sizes is None and not pilot_complete:
        return ArmState(pilot, None, None, "after the pilot", [])
    sizes, note = main_batch_sizes(config, fit, train_examples)
    return ArmState(pilot, fit, sizes, note, main_cells(config, sizes, rows_by_key, metric))


def verdict(config, state, metric):
    """The criteria (`keras_largebatch.study.criteria`) over the complete main cells:
    ``(ratios, by_outcome, steps)`` with ``steps`` ``{batch_size: (layerwise, baseline)}``."""
    arm = config.definition
    done = {
        (cell.optimizer, cell.batch_size): seed_steps(cell, config, metric)
        for cell in state.main
        if cell.pending is None
    }
    steps = {
        size: (done[arm.layerwise, size], done[arm.baseline, size])
        for size in state.batch_sizes or ()
        if (arm.layerwise, size) in done and (arm.baseline, size) in done
    }
    ratios, by_outcome = criteria.verdict(steps)
    return ratios, by_outcome, steps
