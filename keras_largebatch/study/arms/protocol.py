"""The second edition's protocol as a function of the ledger: which trial runs next, and
what each cell selected.

An arm runs two stages:

1. **pilot**: the baseline alone, one cell per ``pilot_batch_sizes``; its seeds' steps to the
   target give the baseline's critical batch size (`analysis.pilot_fit`);
2. **main**: both optimizers at the batch sizes the pilot sets (`analysis.main_batch_sizes`),
   or at ``ArmConfig.batch_sizes``; with ``ArmConfig.reuse_pilot``, the baseline's cell at
   one of the pilot's batch sizes continues its pilot cell's search and refinement, with
   fresh seeds (`walk_cell`'s ``continues``).

A cell (a stage, an optimizer, a batch size) runs in order:

- **search**: ``search_trials`` scrambled Sobol points of the optimizer's space at that batch
  size (the learning-rate range centred by its scaling rule, `spaces.OptimizerSpec`), seed 0;
- **refinement**: ``refinement_trials`` points within ``refinement_width`` of the search's
  best point in every continuous coordinate (its choices kept), seed 0;
- **seeds**: the best settings of the search and refinement with fresh seeds ``1 ..
  seeds`` (the pilot: ``pilot_seeds``), each to the target or its budget.

A search or refinement trial stops at the step where the best trial so far reached the
target (it can no longer be the best, `measures.rank`); the trials of a cell therefore run
one at a time, in order. Every decision reads only the ledger's rows, so an arm killed at any
point and started again walks to the same place.
"""

import functools
import math
from typing import NamedTuple, Optional

from keras_largebatch.study import ledger, search, sobol
from keras_largebatch.study.arms import measures
from keras_largebatch.study.arms.spaces import OPTIMIZERS

PILOT, MAIN = "pilot", "main"
SEARCH, REFINEMENT, SEEDS = "search", "refinement", "seed"


class PlanMismatch(ledger.LedgerError):
    """The ledger holds a trial at a point the protocol no longer gives it."""


class Trial(NamedTuple):
    """One training run of an arm."""

    stage: str  # PILOT or MAIN
    optimizer: str
    batch_size: int
    step_budget: int
    phase: str  # SEARCH, REFINEMENT or SEEDS
    index: int  # within its phase of the cell
    seed: int  # of the weights and the data order
    point: tuple  # unit coordinates (`search.DIMENSIONS`)
    settings: dict  # the optimizer's settings at the point
    stop_after: Optional[int]  # the step at which it can no longer be the cell's best

    def key(self):
        return (
            f"{self.stage}/{self.optimizer}/{self.batch_size}/{self.step_budget}/"
            f"{self.phase}/{self.index}/{self.seed}"
        )

    @property
    def ledger_phase(self):
        return f"{self.stage}-{self.phase}"

    def row(self, steps_trained, stop, curve, test=None, seconds=0.0):
        """The trial's ledger row (`keras_largebatch.study.ledger.COLUMNS`) from what its run
        measured; ``test``: ``{"accuracy", "loss"}`` on the test set, or None."""
        return {
            "key": self.key(),
            "phase": self.ledger_phase,
            "optimizer": self.optimizer,
            "batch_size": self.batch_size,
            "step_budget": self.step_budget,
            "index": self.index,
            "seed": self.seed,
            "point": self.point,
            "settings": self.settings,
            "steps_trained": steps_trained,
            "stop": stop,
            "curve": curve,
            "test_accuracy": None if test is None else test["accuracy"],
            "test_loss": None if test is None else test["loss"],
            "noise_scale": None,
            "seconds": seconds,
        }


class Cell(NamedTuple):
    """Where a cell stands."""

    stage: str
    optimizer: str
    batch_size: int
    pending: Optional[Trial]  # the next trial; None when the cell is complete
    trial_rows: list  # the search's and refinement's rows so far, in order
    best: Optional[dict]  # the best of them so far
    seed_rows: list  # the seeds' rows so far


def settings_at(config, optimizer, batch_size, point):
    """``optimizer``'s settings at unit ``point`` of its space at ``batch_size``."""
    spec = OPTIMIZERS[optimizer]
    dimensions = spec.dimensions(batch_size, config.max_warmup_steps)
    return search.settings(dimensions, spec.choices, point)


@functools.lru_cache(maxsize=None)
def _sobol(count, dimensions, seed):
    """The scrambled Sobol points as tuples of floats (the walk asks for the same ones at
    every trial)."""
    return tuple(
        tuple(float(u) for u in point) for point in sobol.sobol_points(count, dimensions, seed)
    )


def search_points(config):
    """The unit points of every cell's search: the first ``search_trials`` scrambled Sobol
    points (the ranges they map to move with the batch size, `settings_at`)."""
    return list(_sobol(config.search_trials, search.DIMENSIONS, config.search_seed))


def refinement_points(config, optimizer, batch_size, best_point):
    """``refinement_trials`` points around ``best_point``: a scrambled Sobol sequence (its own
    scramble) mapped to within ``refinement_width`` either side in every continuous
    coordinate, kept inside the ends of a range that no trial may cross."""
    if not config.refinement_trials:
        return []
    dimensions = OPTIMIZERS[optimizer].dimensions(batch_size, config.max_warmup_steps)
    offsets = _sobol(config.refinement_trials, search.CONTINUOUS, config.search_seed + 1)
    points = []
    for offset in offsets:
        coordinates = list(best_point)
        for index, (dimension, u) in enumerate(zip(dimensions, offset)):
            value = best_point[index] + (2 * float(u) - 1) * config.refinement_width
            if not dimension.extend_low:
                value = max(value, 0.0)
            if not dimension.extend_high:
                value = min(value, 1.0)
            coordinates[index] = value
        points.append(tuple(coordinates))
    return points


def _check_row(row, trial):
    same = len(row["point"]) == len(trial.point) and all(
        abs(a - b) <= 1e-9 * max(1.0, abs(b)) for a, b in zip(row["point"], trial.point)
    )
    if not same:
        raise PlanMismatch(
            f"the ledger's trial {trial.key()} ran at point {row['point']!r}, the protocol now "
            f"gives {trial.point!r}: the search changed since it was written; use another "
            "output directory, or pass overwrite to start over"
        )


def walk_cell(config, stage, optimizer, batch_size, rows_by_key, metric, continues=None):
    """The `Cell` of ``optimizer`` at ``batch_size`` in ``stage`` given the ledger's rows
    (``rows_by_key``: key -> row); ``metric``: the workload's. With ``continues`` (a stage),
    a search or refinement trial the ledger holds under that stage's key stands for this
    stage's (the same planned trial: the same point, seed 0, budget and stopping step), and
    the seeds are fresh: those after that stage's (``pilot_seeds + 1`` on), so no seed that
    decided anything before (the pilot's fit, and so the batch sizes) is measured again."""
    budget = config.step_budget(batch_size)
    target = config.target

    def recorded(planned):
        row = rows_by_key.get(planned.key())
        if row is None and continues is not None and planned.phase != SEEDS:
            row = rows_by_key.get(planned._replace(stage=continues).key())
        return row

    def trial(phase, index, seed, point, stop_after):
        return Trial(
            stage,
            optimizer,
            batch_size,
            budget,
            phase,
            index,
            seed,
            point,
            settings_at(config, optimizer, batch_size, point),
            stop_after,
        )

    def rank(row):
        return measures.rank(row["curve"], target, metric)

    rows, best, best_rank = [], None, None

    def walk(phase, points):
        nonlocal best, best_rank
        for index, point in enumerate(points):
            stop_after = None
            if best is not None and math.isfinite(best_rank[0]):
                stop_after = best_rank[0]
            planned = trial(phase, index, 0, point, stop_after)
            row = recorded(planned)
            if row is None:
                return planned
            _check_row(row, planned)
            rows.append(row)
            row_rank = rank(row)
            if best is None or row_rank < best_rank:
                best, best_rank = row, row_rank
        return None

    def cell(pending, seed_rows=()):
        return Cell(stage, optimizer, batch_size, pending, rows, best, list(seed_rows))

    pending = walk(SEARCH, search_points(config))
    if pending is not None:
        return cell(pending)
    search_best = best
    pending = walk(
        REFINEMENT, refinement_points(config, optimizer, batch_size, search_best["point"])
    )
    if pending is not None:
        return cell(pending)
    count = config.pilot_seeds if stage == PILOT else config.seeds
    first = config.pilot_seeds + 1 if continues is not None else 1
    seed_rows = []
    for seed in range(first, first + count):
        planned = trial(SEEDS, 0, seed, tuple(best["point"]), None)
        row = recorded(planned)
        if row is None:
            return cell(planned, seed_rows)
        _check_row(row, planned)
        seed_rows.append(row)
    return cell(None, seed_rows)
