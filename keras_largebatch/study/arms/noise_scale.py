"""The baseline's gradient noise scale ``B_simple`` at the pilot's smallest batch size,
averaged over a window of its run, against the critical batch size the pilot fits
(McCandlish et al., "An Empirical Model of Large-Batch Training", arXiv:1812.06162).

One run, a fresh seed of the selected settings of the baseline's pilot cell at its smallest
batch size ``b``, trains as a trial does (`trial.run_trial`). At steps growing by
``noise_growth`` from half the pilot's fastest seed to the target, and at the step it stops,
``noise_micro_batches`` micro-batches of ``b`` training examples (a stream apart from the
run's own) give their gradients at the run's weights, and their Gram matrix gives that
point's estimates of ``|G|^2`` and ``tr(Sigma)`` (`keras_largebatch.study.noise`). The
weights, the optimizer and the run's data are left alone; batch norm's moving statistics are
put back after each measurement.

The window is the points of the second half of the run's way to the target (steps ``T/2`` to
``T``). Over it ``B_simple = sum tr(Sigma) / sum |G|^2``, the ratio of the averages, as
`keras_largebatch.GradientNoiseScale` averages its two estimates before dividing: a single
point's ratio swings by several times from one measurement to the next. Its 95% interval
resamples the window's points and, within each, its micro-batches, so it carries both.
"""

import json
import math
import os
import time

import numpy as np

from keras_largebatch import _files
from keras_largebatch.study import ledger
from keras_largebatch.study import noise as noise_lib
from keras_largebatch.study.arms import analysis, measures, protocol
from keras_largebatch.study.arms.config import make_workload

NOISE_FILE = "noise_scale.json"


def noise_seed(config):
    """The run's seed: after every seed the protocol gives a cell."""
    return config.pilot_seeds + config.seeds + 1


def window_estimate(points, micro_batch_size, samples, seed=0, confidence=0.95):
    """``(B_simple, low, high)`` over ``points`` (each a Gram matrix of micro-batch
    gradients): the sum of their ``tr(Sigma)`` estimates over the sum of their ``|G|^2``
    estimates, and the central ``confidence`` interval of ``samples`` resamples of the points
    and, within each, of its micro-batches (NaN where a resample's ``|G|^2`` is not
    positive)."""
    grams = [np.asarray(gram, dtype=np.float64) for gram in points]
    ones = [np.ones(len(gram)) for gram in grams]

    def ratio(chosen, counts):
        estimates = [
            noise_lib.pair_estimates(grams[i], count, micro_batch_size)
            for i, count in zip(chosen, counts)
        ]
        squared_norm = sum(estimate[0] for estimate in estimates)
        trace = sum(estimate[1] for estimate in estimates)
        return trace / squared_norm if squared_norm > 0 else math.nan

    value = ratio(range(len(grams)), ones)
    generator = np.random.default_rng(seed)
    resampled = []
    for _ in range(samples):
        chosen = generator.integers(0, len(grams), len(grams))
        counts = [
            np.bincount(
                generator.integers(0, len(grams[i]), len(grams[i])), minlength=len(grams[i])
            )
            for i in chosen
        ]
        resampled.append(ratio(chosen, counts))
    return (value, *noise_lib.percentile_interval(resampled, confidence))


class MicroBatchGradients:
    """The flattened mean-loss gradients of ``model`` (compiled with a Keras loss) on the
    next ``count`` batches of ``batches``, and their Gram matrix."""

    def __init__(self, model, batches, count):
        import tensorflow as tf

        self.model = model
        self.count = count
        self._batches = iter(batches)
        self._gradient = tf.function(self._gradient_and_loss, reduce_retracing=True)

    def _gradient_and_loss(self, batch):
        import keras
        import tensorflow as tf

        x, y, weights = keras.utils.unpack_x_y_sample_weight(batch)
        with tf.GradientTape() as tape:
            loss = self.model.loss(y, self.model(x, training=True), sample_weight=weights)
            if self.model.losses:
                loss += tf.add_n(self.model.losses)
        gradients = tape.gradient(loss, self.model.trainable_variables)
        flat = [tf.reshape(tf.convert_to_tensor(g), [-1]) for g in gradients]
        return tf.concat(flat, axis=0), loss

    def measure(self):
        """``(gram, mean training loss)`` at the model's weights, its non-trainable variables
        (batch norm's moving statistics, dropout's seed) put back afterwards."""
        saved = [variable.numpy() for variable in self.model.non_trainable_variables]
        rows, losses = [], []
        for _ in range(self.count):
            gradient, loss = self._gradient(next(self._batches))
            rows.append(gradient.numpy().astype(np.float32))
            losses.append(float(loss))
        for variable, value in zip(self.model.non_trainable_variables, saved):
            variable.assign(value)
        gradients = np.stack(rows)
        gram = np.zeros((self.count, self.count))
        for start in range(0, gradients.shape[1], 1 << 16):
            block = gradients[:, start : start + (1 << 16)].astype(np.float64)
            gram += block @ block.T
        return gram, float(np.mean(losses))


def _probe(steps, batches, count):
    """A callback that measures at ``steps`` and at the step the run stops (after the
    trial's own callback has decided it), unless the training loss is not finite; its
    ``points`` are ``(step, training loss, gram)``."""
    import keras

    class Probe(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.points = []
            self._gradients = None

        def on_train_begin(self, logs=None):
            self._gradients = MicroBatchGradients(self.model, batches, count)

        def on_train_batch_end(self, batch, logs=None):
            step = batch + 1
            if step not in steps and not self.model.stop_training:
                return
            if not math.isfinite(float(logs["loss"])):
                return
            gram, loss = self._gradients.measure()
            self.points.append((step, loss, gram))

    return Probe()


def measure(config, output_dir, workload=None):
    """Measures the noise scale of ``config``'s arm into ``output_dir``'s `NOISE_FILE` (not
    again when it is there); returns what it holds. The ledger there must be this arm's,
    with the baseline's pilot cell at its smallest batch size complete."""
    config.validate()
    path = os.path.join(output_dir, NOISE_FILE)
    if os.path.exists(path):
        return read(output_dir)
    ledger.check_settings(output_dir, config.settings(), partial=True)  # before the data
    workload = workload or make_workload(config)
    data = workload.load()
    from keras_largebatch.study.arms.runner import ledger_settings

    ledger.check_settings(output_dir, ledger_settings(config, workload, data))
    rows = {row["key"]: row for row in ledger.read_rows(output_dir)}
    state = analysis.arm_state(config, rows, workload.metric, data.train_examples, interval=False)
    cell = state.pilot[0]
    if cell.pending is not None or cell.best is None:
        raise ValueError(
            f"the noise scale is measured at the selected settings of the pilot's cell at "
            f"batch {cell.batch_size:,}, which {output_dir}'s ledger does not hold complete "
            "yet: run the arm further first"
        )
    batch_size = cell.batch_size
    needed = config.noise_micro_batches * batch_size
    if needed > data.train_examples:
        raise ValueError(
            f"noise_micro_batches={config.noise_micro_batches} micro-batches of {batch_size} "
            f"examples need {needed} training examples; there are {data.train_examples}"
        )
    seeds = [s for s in analysis.seed_steps(cell, config, workload.metric) if s is not None]
    first = max(1, min(seeds) // 2) if seeds else config.first_evaluation
    budget = config.step_budget(batch_size)
    trial = protocol.Trial(
        "noise",
        cell.optimizer,
        batch_size,
        budget,
        "measure",
        0,
        noise_seed(config),
        cell.best["point"],
        cell.best["settings"],
        None,
    )
    stream = workload.train_dataset(data, batch_size, noise_seed(config) + 1)
    probe = _probe(
        set(measures.evaluation_steps(budget, config.noise_growth, first)),
        stream,
        config.noise_micro_batches,
    )
    from keras_largebatch.study.arms.trial import run_trial

    started = time.perf_counter()
    row = run_trial(trial, config, workload, data, callbacks=[probe])
    result = summarize(config, row, probe.points, workload.metric)
    result["seconds"] = time.perf_counter() - started
    _files.write_text(path, json.dumps(result, indent=2) + "\n")
    return result


def summarize(config, row, points, metric):
    """What `NOISE_FILE` holds: the run, each point's estimates, and the window's."""
    batch_size = row["batch_size"]
    target = measures.steps_to_target(row["curve"], config.target, metric)
    listed = []
    for step, loss, gram in points:
        squared_norm, trace = noise_lib.pair_estimates(gram, np.ones(len(gram)), batch_size)
        listed.append(
            {
                "step": step,
                "training_loss": loss,
                "squared_gradient_norm": squared_norm,
                "trace_covariance": trace,
                "b_simple": trace / squared_norm if squared_norm > 0 else None,
            }
        )
    window = None
    if target is not None:
        inside = [i for i, (step, _, _) in enumerate(points) if target / 2 <= step <= target]
        if inside:
            value, low, high = window_estimate(
                [points[i][2] for i in inside], batch_size, config.bootstrap_samples
            )
            ratios = [listed[i]["b_simple"] for i in inside if listed[i]["b_simple"]]
            window = {
                "first_step": points[inside[0]][0],
                "last_step": points[inside[-1]][0],
                "points": len(inside),
                "b_simple": _number(value),
                "low": _number(low),
                "high": _number(high),
                "positive_points": len(ratios),
                "points_min": min(ratios) if ratios else None,
                "points_max": max(ratios) if ratios else None,
            }
    return {
        "optimizer": row["optimizer"],
        "batch_size": batch_size,
        "seed": row["seed"],
        "settings": row["settings"],
        "micro_batches": config.noise_micro_batches,
        "growth": config.noise_growth,
        "stop": row["stop"],
        "steps_trained": row["steps_trained"],
        "steps_to_target": target,
        "points": listed,
        "window": window,
    }


def _number(value):
    """JSON has no NaN: None."""
    return None if value is None or not math.isfinite(value) else value


def read(output_dir):
    """`NOISE_FILE`'s content, or None when there is none."""
    path = os.path.join(output_dir, NOISE_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as stream:
        return json.load(stream)
