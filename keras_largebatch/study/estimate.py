"""How long a preset takes on this machine: the CNN's training examples per second at each
batch size, the cost of a validation evaluation and of starting a trial, measured here, and
the protocol's trials counted from them.

The count takes every trial at its full budget (search trials stop at the last target, so they
take less), then adds what a run decides as it goes: one range edge per cell (its extra
trials), and a doubled budget in the cells of the batch sizes from ``doubled_from`` up (the
search again at twice the budget, and the seeds at twice the budget). It gives the range
between no edge and no doubled budget, and both in every such cell.
"""

import statistics
import time
from typing import NamedTuple


class Speed(NamedTuple):
    """What a trial costs here: per batch size, training examples per second and the seconds
    to start a trial (build, compile, trace); the seconds of one validation evaluation."""

    examples_per_second: dict
    start_seconds: dict
    evaluation_seconds: float


def measure(config, data, examples=None):
    """The `Speed` of ``config``'s batch sizes on ``data``: each batch size trains for at
    least 2 steps and ``examples`` examples (None: `StudyConfig.budget_examples`, one budget)
    after the step that traces the train function."""
    examples = config.budget_examples if examples is None else examples
    import keras

    from keras_largebatch.study import trial

    rates, starts = {}, {}
    for batch_size in config.batch_sizes:
        started = time.perf_counter()
        model = trial.compile_model(keras.optimizers.SGD(0.01, momentum=0.9), seed=0)
        dataset = trial.train_dataset(data, batch_size, seed=0)
        model.fit(dataset, epochs=1, steps_per_epoch=1, shuffle=False, verbose=0)
        starts[batch_size] = time.perf_counter() - started
        steps = max(2, examples // batch_size)
        started = time.perf_counter()
        model.fit(dataset, epochs=1, steps_per_epoch=steps, shuffle=False, verbose=0)
        rates[batch_size] = steps * batch_size / (time.perf_counter() - started)
    evaluate = trial.Evaluator(model)
    evaluate(data.validation_images, data.validation_labels)  # traces it
    times = []
    for _ in range(3):
        started = time.perf_counter()
        evaluate(data.validation_images, data.validation_labels)
        times.append(time.perf_counter() - started)
    return Speed(rates, starts, statistics.median(times))


def trial_seconds(config, speed, batch_size, budget):
    """One trial of ``budget`` steps at ``batch_size``, all of it: training, evaluations and
    start."""
    evaluations = min(config.evaluations_per_budget, budget)
    return (
        budget * batch_size / speed.examples_per_second[batch_size]
        + evaluations * speed.evaluation_seconds
        + speed.start_seconds[batch_size]
    )


def wall_time(config, speed, doubled_from=1024):
    """``(low, high)`` seconds of ``config``'s study at ``speed``: every trial at its full
    budget, with no edge and no doubled budget (low), and with one edge in every cell and the
    budgets doubled from ``doubled_from`` up (high)."""
    low = high = 0.0
    cells = len(config.optimizers)
    for batch_size in config.batch_sizes:
        budget = config.step_budget(batch_size)
        one = trial_seconds(config, speed, batch_size, budget)
        two = trial_seconds(config, speed, batch_size, 2 * budget)
        low += cells * (config.trials_per_cell + config.seeds) * one
        round_trials = config.trials_per_cell + config.extension_trials
        if batch_size >= doubled_from:
            high += cells * (round_trials * one + (round_trials + config.seeds) * two)
        else:
            high += cells * (round_trials + config.seeds) * one
    return low, high


def describe(config, speed, low, high, doubled_from=1024):
    """The lines the command prints."""
    lines = [
        f"batch {size:6d}: {speed.examples_per_second[size]:8.0f} training examples/s, "
        f"{speed.start_seconds[size]:.2f} s to start a trial"
        for size in config.batch_sizes
    ]
    lines.append(f"one validation evaluation: {speed.evaluation_seconds:.3f} s")
    lines.append(
        f"about {low / 3600:.1f} h with every trial at its full budget, no range edge and no "
        f"doubled budget; {high / 3600:.1f} h with one edge in every cell and the budgets "
        f"doubled from batch {doubled_from} up"
    )
    return lines
