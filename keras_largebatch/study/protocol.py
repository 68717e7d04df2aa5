"""The protocol of one cell (an optimizer at a batch size) as a function of the ledger: which
trials it has run, which come next, and what it selected.

A cell runs, in order:

1. **search**: `StudyConfig.trials_per_cell` scrambled Sobol points of the optimizer's space
   (the same points at every batch size), each trained until it reaches the last target,
   diverges, or ends its budget;
2. **extension**: when the best search point lies within `search.EDGE` of an end of a range
   that may be extended, `StudyConfig.extension_trials` trials beyond that end per such range
   (the best point with that coordinate moved); the cell is flagged;
3. **budget**: when the best trial of 1-2 needs more than `config.BUDGET_RERUN_FRACTION` of
   the budget to reach the primary target, or does not reach it, 1-2 again with twice the
   budget (once); the cell is flagged;
4. **confirmation**: the best settings with seeds ``0 .. seeds - 1`` for the whole budget,
   the test set evaluated once at the end of each.

The best trial has the fewest steps to the primary target; among trials that do not reach
it, the highest validation accuracy; on ties, the earlier trial. Every decision reads only
the ledger's rows, so a study killed at any point and started again walks to the same place.
"""

import math
from typing import NamedTuple, Optional

from keras_largebatch.study import ledger, measures, search, sobol
from keras_largebatch.study.config import BUDGET_RERUN_FRACTION
from keras_largebatch.study.optimizers import OPTIMIZERS

SEARCH, EXTENSION, CONFIRMATION = "search", "extension", "confirmation"
PHASES = (SEARCH, EXTENSION, CONFIRMATION)


class PlanMismatch(ledger.LedgerError):
    """The ledger holds a trial at a point the protocol no longer gives it."""


class Trial(NamedTuple):
    """One training run of the study."""

    optimizer: str
    batch_size: int
    step_budget: int
    phase: str  # one of PHASES
    index: int  # the trial's number within its phase of the cell's round
    seed: int  # of the weights and of the data order
    point: tuple  # unit coordinates (`search.DIMENSIONS` of them)
    settings: dict  # the optimizer's settings at the point

    def key(self):
        """What identifies the trial in the ledger."""
        return (
            f"{self.optimizer}/{self.batch_size}/{self.step_budget}/{self.phase}/"
            f"{self.index}/{self.seed}"
        )


class CellProgress(NamedTuple):
    """Where a cell stands: the trials to run next (none once it is complete) and what its
    rows so far decided."""

    optimizer: str
    batch_size: int
    pending: list  # `Trial`s to run before the cell can go on; [] when it is complete
    step_budget: int  # the budget of the round in progress or selected
    budget_doubled: bool  # the first round's best needed more than its budget allowed
    edges: list  # (dimension name, "low"/"high") the search's best point was at
    best_beyond_range: bool  # the best trial is one of the extension's
    search_rows: list  # the rows of the selected round's search and extension
    best: Optional[dict]  # the selected round's best row
    confirmations: list  # the confirmation rows, by seed


def trial_at(optimizer, batch_size, step_budget, phase, index, seed, point):
    """The `Trial` whose settings are those of ``point`` in ``optimizer``'s space."""
    spec = OPTIMIZERS[optimizer]
    point = tuple(float(u) for u in point)
    return Trial(
        optimizer,
        batch_size,
        step_budget,
        phase,
        index,
        seed,
        point,
        search.settings(spec.dimensions, spec.choices, point),
    )


def search_trials(config, optimizer, batch_size, step_budget):
    """The search trials of a round: the first `StudyConfig.trials_per_cell` Sobol points."""
    points = sobol.sobol_points(config.trials_per_cell, search.DIMENSIONS, config.search_seed)
    return [
        trial_at(optimizer, batch_size, step_budget, SEARCH, index, 0, point)
        for index, point in enumerate(points)
    ]


def rank(row, primary_target):
    """The sort key of a trial's row: its steps to ``primary_target`` (inf when not
    reached), then minus its best validation accuracy."""
    steps = measures.steps_to_target(row["curve"], primary_target)
    accuracy = measures.best_accuracy(row["curve"])
    return (math.inf if steps is None else steps, -(accuracy or 0.0))


def best_row(rows, primary_target):
    """The best of ``rows`` (`rank`; the first of equals)."""
    return min(rows, key=lambda row: rank(row, primary_target))


def rerun_threshold(step_budget):
    """The last step at which a trial reaching the primary target is within its budget:
    `config.BUDGET_RERUN_FRACTION` of ``step_budget`` rounded up to a whole step, as the
    evaluation steps are (`measures.evaluation_steps`), so that the evaluation at that share
    of any budget is within it, whether or not the share is a whole number of steps."""
    return math.ceil(round(BUDGET_RERUN_FRACTION * step_budget, 9))


def needs_more_budget(row, primary_target, step_budget):
    """True when the trial of ``row`` did not reach ``primary_target`` by
    `rerun_threshold` of ``step_budget``."""
    steps = measures.steps_to_target(row["curve"], primary_target)
    return steps is None or steps > rerun_threshold(step_budget)


def _same(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def _held(trials, rows_by_key):
    """The rows of ``trials``, or None while any is missing. Raises `PlanMismatch` when a
    row's point or settings are not the trial's: the search changed since the ledger was
    written."""
    rows = []
    for trial in trials:
        row = rows_by_key.get(trial.key())
        if row is None:
            return None
        point_held = len(row["point"]) == len(trial.point) and all(
            _same(a, b) for a, b in zip(row["point"], trial.point)
        )
        settings_held = row["settings"].keys() == trial.settings.keys() and all(
            _same(row["settings"][name], value) for name, value in trial.settings.items()
        )
        for name, held, planned in (
            ("point", point_held, trial.point),
            ("settings", settings_held, trial.settings),
        ):
            if not held:
                raise PlanMismatch(
                    f"the ledger's trial {trial.key()} ran at {name} {row[name]!r}, the protocol "
                    f"now gives {planned!r}: the search changed since it was written; use "
                    "another output directory, or pass overwrite to start over"
                )
        rows.append(row)
    return rows


def walk_cell(config, optimizer, batch_size, rows_by_key):
    """The `CellProgress` of ``optimizer`` at ``batch_size`` given the ledger's rows
    (``rows_by_key``: key -> row)."""
    spec = OPTIMIZERS[optimizer]
    step_budget = config.step_budget(batch_size)
    doubled = False
    primary = config.primary_target

    def progress(pending, **decided):
        fields = dict(
            edges=[], best_beyond_range=False, search_rows=[], best=None, confirmations=[]
        )
        fields.update(decided)
        return CellProgress(optimizer, batch_size, pending, step_budget, doubled, **fields)

    while True:
        trials = search_trials(config, optimizer, batch_size, step_budget)
        rows = _held(trials, rows_by_key)
        if rows is None:
            return progress([t for t in trials if t.key() not in rows_by_key])
        first_best = best_row(rows, primary)
        edges = search.edges(spec.dimensions, first_best["point"])
        extension = [
            trial_at(optimizer, batch_size, step_budget, EXTENSION, index, 0, point)
            for index, point in enumerate(
                point
                for dimension, side in edges
                for point in search.extension_points(
                    first_best["point"], dimension, side, config.extension_trials
                )
            )
        ]
        extension_rows = _held(extension, rows_by_key)
        if extension_rows is None:
            return progress([t for t in extension if t.key() not in rows_by_key])
        best = best_row(rows + extension_rows, primary)
        if doubled or not needs_more_budget(best, primary, step_budget):
            break
        step_budget *= 2
        doubled = True
    decided = dict(
        edges=[
            (spec.dimensions[dimension].name, "low" if side < 0 else "high")
            for dimension, side in edges
        ],
        best_beyond_range=best["phase"] == EXTENSION,
        search_rows=rows + extension_rows,
        best=best,
    )
    confirmations = [
        trial_at(optimizer, batch_size, step_budget, CONFIRMATION, 0, seed, best["point"])
        for seed in range(config.seeds)
    ]
    confirmation_rows = _held(confirmations, rows_by_key)
    if confirmation_rows is None:
        return progress([t for t in confirmations if t.key() not in rows_by_key], **decided)
    return progress([], confirmations=confirmation_rows, **decided)
