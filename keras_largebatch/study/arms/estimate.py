"""What an arm costs here, before it runs: the workload's training examples per second at
each batch size, a trial's start and a validation evaluation, measured on this machine; then
the protocol's trials counted from them.

Before the pilot has run, the steps to the target are unknown: the pilot is costed with
every trial at its full budget (the bound a budget sets). Once the ledger holds the pilot's
fit (McCandlish et al.'s model, arXiv:1812.06162), the main cells are costed from it: each
trial trains the fitted steps ``S_min (1 + B_crit / B)`` (a search trial stops once it is
behind the best, so this is an upper estimate for all but the first), plus its evaluations
and its start.
"""

import math
import statistics
import time

from keras_largebatch.study import ledger
from keras_largebatch.study.arms import analysis, measures
from keras_largebatch.study.arms.config import make_workload

# Steps of the timed fit left out of its speed: the input pipeline filling its buffers.
_SETTLING_STEPS = 2


def _step_ends():
    """A callback that records when each training step ends."""
    import keras

    class StepEnds(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times = []

        def on_train_batch_end(self, batch, logs=None):
            self.times.append(time.perf_counter())

    return StepEnds()


def measure(config, workload, data, batch_sizes, steps=4, examples=4096):
    """``(examples_per_second, start_seconds, evaluation_seconds)`` at ``batch_sizes``: a
    trial's start is the model's build and its first step; its speed is that of ``steps``
    steps, or as many as train ``examples``, after the first ``_SETTLING_STEPS`` of one fit,
    as a trial trains them (a fit's own start, its input's first batches, is a cost of the
    trial's start, paid once)."""
    import keras

    rates, starts = {}, {}
    model = None
    for batch_size in batch_sizes:
        started = time.perf_counter()
        model = workload.build_model(0)
        workload.compile(model, keras.optimizers.SGD(0.01, momentum=0.9))
        dataset = workload.train_dataset(data, batch_size, 0)
        model.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0)
        starts[batch_size] = time.perf_counter() - started
        timed_steps = max(steps, math.ceil(examples / batch_size))
        ends = _step_ends()
        model.fit(
            dataset,
            epochs=1,
            steps_per_epoch=_SETTLING_STEPS + timed_steps,
            callbacks=[ends],
            verbose=0,
        )
        timed = ends.times[_SETTLING_STEPS - 1 :]
        rates[batch_size] = timed_steps * batch_size / (timed[-1] - timed[0])
    workload.evaluate(model, data, "validation")
    times = []
    for _ in range(3):
        started = time.perf_counter()
        workload.evaluate(model, data, "validation")
        times.append(time.perf_counter() - started)
    return rates, starts, statistics.median(times)


def trial_seconds(config, speed, batch_size, steps):
    """One trial of ``steps`` steps at ``batch_size`` at ``speed`` (what `measure` returns):
    its training, its evaluations and its start."""
    rates, starts, evaluation = speed
    evaluations = len(
        measures.evaluation_steps(
            max(1, round(steps)), config.evaluation_growth, config.first_evaluation
        )
    )
    return steps * batch_size / rates[batch_size] + evaluations * evaluation + starts[batch_size]


def main_cost(config, speed, fit, batch_sizes):
    """``(trials, seconds)`` of the main cells at ``batch_sizes``, each trial training the
    steps of the pilot's ``fit`` (`analysis.PilotFit`) within its budget."""
    per_cell = config.search_trials + config.refinement_trials + config.seeds
    trials, seconds = 0, 0.0
    for size in batch_sizes:
        steps = min(
            fit.minimum_steps * (1 + fit.critical_batch_size / size), config.step_budget(size)
        )
        # A baseline cell that continues its pilot cell runs only its seeds.
        count = per_cell + (
            config.seeds if config.continues_pilot(config.definition.baseline, size) else per_cell
        )
        trials += count
        seconds += count * trial_seconds(config, speed, size, steps)
    return trials, seconds


def estimate(config, output_dir, examples=4096):
    """The lines ``--estimate`` prints (``examples``: `measure`'s)."""
    config.validate()
    workload = make_workload(config)
    data = workload.load()
    rows = {row["key"]: row for row in ledger.read_rows(output_dir)}
    state = analysis.arm_state(config, rows, workload.metric, data.train_examples)
    sizes = sorted(set(config.pilot_batch_sizes) | set(state.batch_sizes or ()))
    speed = measure(config, workload, data, sizes, examples=examples)
    rates, starts, evaluation = speed
    lines = [
        f"batch {size:>6,}: {rates[size]:8.0f} training examples/s, {starts[size]:.1f} s to "
        "start a trial"
        for size in sizes
    ]
    lines.append(f"one validation evaluation: {evaluation:.2f} s")
    per_pilot_cell = config.search_trials + config.refinement_trials + config.pilot_seeds
    worst = sum(
        per_pilot_cell * trial_seconds(config, speed, size, config.step_budget(size))
        for size in config.pilot_batch_sizes
    )
    lines.append(
        f"pilot: {len(config.pilot_batch_sizes) * per_pilot_cell} trials; at most "
        f"{worst / 3600:.1f} h with every trial at its full budget"
    )
    if state.fit is None or not math.isfinite(state.fit.critical_batch_size):
        lines.append("main cells: costed once the pilot's fit is in the ledger of " + output_dir)
        return lines
    fit = state.fit
    trials, main = main_cost(config, speed, fit, state.batch_sizes)
    lines.append(
        f"main cells at batch {', '.join(f'{s:,}' for s in state.batch_sizes)}: "
        f"{trials} trials, about {main / 3600:.1f} h at the "
        f"pilot's fit (S_min {fit.minimum_steps:.0f}, B_crit {fit.critical_batch_size:.0f})"
    )
    return lines
