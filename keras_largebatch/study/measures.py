"""What a trial's curve says: evaluation points, steps to a target, divergence, and the
perfect-scaling line (Shallue et al., arXiv:1811.03600)."""

import math


def evaluation_steps(total_steps, points):
    """The steps after which the validation set is evaluated: ``min(points, total_steps)``
    steps spread evenly over the budget, the last one ``total_steps``:
    ``ceil(i * total_steps / points)`` for ``i = 1 .. points``."""
    points = min(points, total_steps)
    return [math.ceil(index * total_steps / points) for index in range(1, points + 1)]


def steps_to_target(curve, target_accuracy):
    """The first evaluated step whose accuracy is ``>= target_accuracy``, or None if none is.
    ``curve``: ``(step, accuracy, ...)`` tuples in the order of the steps."""
    for step, accuracy, *_ in curve:
        if accuracy >= target_accuracy:
            return step
    return None


def best_accuracy(curve):
    """The highest accuracy of ``curve``, or None when it is empty."""
    return max((accuracy for _, accuracy, *_ in curve), default=None)


def is_diverged(loss, divergence_loss):
    """True when ``loss``, a validation loss at an evaluation, is not finite or above
    ``divergence_loss``."""
    return not math.isfinite(loss) or loss > divergence_loss


def perfect_scaling(batch_sizes, reference_batch_size, reference_steps):
    """Steps at each of ``batch_sizes`` if doubling the batch halved them, from
    ``reference_steps`` at ``reference_batch_size``: ``steps(B) = reference_steps *
    reference_batch_size / B``."""
    return [reference_steps * reference_batch_size / batch_size for batch_size in batch_sizes]
