"""What a trial's curve says in the second edition: where it is evaluated, and when it
reaches a target of the workload's metric (a validation accuracy, higher is better, or a
masked-LM loss, lower is better). A curve is ``[(step, accuracy, loss), ...]``."""

import math

ACCURACY, LOSS = "accuracy", "loss"
_COLUMN = {ACCURACY: 1, LOSS: 2}


def evaluation_steps(step_budget, growth, first):
    """The steps after which the validation set is evaluated: ``first``, then each one
    ``growth`` times the last (rounded up, at least one more), and ``step_budget``. The
    steps to a target are then known to within a factor ``growth`` at every batch size,
    whatever the budget."""
    steps = []
    step = min(first, step_budget)
    while step < step_budget:
        steps.append(step)
        step = max(step + 1, math.ceil(round(step * growth, 9)))
    steps.append(step_budget)
    return steps


def reached(value, target, metric):
    """True when ``value`` of ``metric`` is at or past ``target``."""
    return value >= target if metric == ACCURACY else value <= target


def steps_to_target(curve, target, metric):
    """The first evaluated step of ``curve`` whose ``metric`` reached ``target``, or None."""
    for point in curve:
        if reached(point[_COLUMN[metric]], target, metric):
            return point[0]
    return None


def best_value(curve, metric):
    """The best ``metric`` of ``curve`` (highest accuracy, lowest loss), or None if empty."""
    values = [point[_COLUMN[metric]] for point in curve]
    if not values:
        return None
    return max(values) if metric == ACCURACY else min(values)


def rank(curve, target, metric):
    """The sort key of a trial: its steps to ``target`` (inf when not reached), then how far
    its best value is from the target (smaller first)."""
    steps = steps_to_target(curve, target, metric)
    best = best_value(curve, metric)
    if best is None:
        distance = math.inf
    else:
        distance = target - best if metric == ACCURACY else best - target
    return (math.inf if steps is None else steps, distance)
