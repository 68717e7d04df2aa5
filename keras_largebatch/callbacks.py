"""Training callbacks for large-batch runs: warmup, trust-ratio and rate logging.

The warmup callback is for models compiled with a float learning rate; a
model compiled with a schedule from `keras_largebatch.schedules` already warms
up inside the train step and needs no callback.
"""

import os

import keras
import numpy as np

from keras_largebatch._checks import check_bool, check_integer, check_number
from keras_largebatch.optimizers import LARS
from keras_largebatch.schedules.warmup import warmup_ramp


def _unwrap(optimizer):
    """The optimizer that does the update (inside a `LossScaleOptimizer`)."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return optimizer.inner_optimizer
    return optimizer


def _current_learning_rate(optimizer):
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


def _holds_learning_rate_in_velocity(optimizer):
    """Whether `optimizer`'s momentum buffer holds learning-rate-scaled steps.

    Momentum correction is only right for a buffer of the form
    `v = momentum * v + lr * direction` (sign aside): Keras's `SGD` and this
    package's `LARS`. Adam-style first moments do not contain the rate, so
    rescaling them would be wrong.
    """
    return isinstance(optimizer, (keras.optimizers.SGD, LARS)) and optimizer.momentum > 0


def _learning_rate_scaled_velocities(optimizer):
    """The buffers described in `_holds_learning_rate_in_velocity`."""
    if isinstance(optimizer, LARS):
        return optimizer.velocities
    return optimizer.momentums


class LearningRateWarmup(keras.callbacks.Callback):
    """Warms up an optimizer compiled with a float learning rate, per batch.

    The replacement for Horovod's `LearningRateWarmupCallback`, which writes
    `optimizer.lr` and fails on Keras 3. Before each batch, with
    `t = optimizer.iterations` (the optimizer's step, which also counts the
    steps of earlier `fit` calls) and `W` the warmup in steps:

    ```
    lr(t) = initial + (target - initial) * t / W      if t < W
    lr(t) = target                                    otherwise
    ```

    `W = warmup_steps`, or `warmup_epochs * steps_per_epoch`: the linear
    `keras_largebatch.schedules.warmup_ramp`, as in the `WarmUp` schedule.
    Horovod's ramp from `target / size` is `initial_learning_rate=target/size`.

    `steps_per_execution > 1`: Keras calls batch callbacks once per
    execution, so the rate is set at the first step of each execution and
    kept for its `steps_per_execution` steps: steps `t0 .. t0 + k - 1` all use
    `lr(t0)`. Use a schedule (`keras_largebatch.schedules.WarmUp`) to change
    the rate at every step inside the compiled loop.

    Momentum correction (Goyal et al., 2017, section 3): when the rate
    changes from `lr_old` to `lr_new`, the velocity of an optimizer whose
    velocity holds the rate (`v = momentum * v + lr * g`) is rescaled,
    `v = v * lr_new / lr_old`, so that the step follows the new rate at once
    instead of lagging behind it for about `1 / (1 - momentum)` steps while the
    velocity accumulated at the old rate decays. Supported for
    `keras.optimizers.SGD` and `keras_largebatch.optimizers.LARS` with
    `momentum > 0`; other optimizers raise a `ValueError` at the start of
    training.

    Works on every backend. On JAX the train step works on copies of the
    variables; Keras copies them back when a callback reads `self.model`, so
    each warmup batch pays that copy. After the warmup the callback does
    nothing.

    Args:
        warmup_steps: `> 0`, warmup length in optimizer steps. Give this or
            `warmup_epochs`.
        warmup_epochs: `> 0`, warmup length in epochs (may be fractional).
        steps_per_epoch: `> 0`, used with `warmup_epochs`; defaults to the
            `steps` that `fit` reports, which must then be known.
        target_learning_rate: the rate at the end of warmup. Defaults to
            `None`: the optimizer's learning rate when training first starts.
        initial_learning_rate: `>= 0`, the rate at step 0. Defaults to `0.0`.
        momentum_correction: rescale the velocity on every rate change, see
            above. Defaults to `False`.

    Raises:
        ValueError: at the start of training, if the optimizer's rate is a
            schedule (not settable), or momentum correction is asked of an
            unsupported optimizer.

    Example:

    ```python
    model.compile(optimizer=keras.optimizers.SGD(0.8, momentum=0.9), ...)
    model.fit(..., callbacks=[LearningRateWarmup(
        warmup_epochs=5, momentum_correction=True)])
    ```
    """

    def __init__(
        self,
        warmup_steps=None,
        warmup_epochs=None,
        steps_per_epoch=None,
        target_learning_rate=None,
        initial_learning_rate=0.0,
        momentum_correction=False,
    ):
        super().__init__()
        if (warmup_steps is None) == (warmup_epochs is None):
            raise ValueError(
                "give exactly one of warmup_steps and warmup_epochs, got "
                f"warmup_steps={warmup_steps}, warmup_epochs={warmup_epochs}"
            )
        for name, value in (
            ("warmup_steps", warmup_steps),
            ("warmup_epochs", warmup_epochs),
            ("steps_per_epoch", steps_per_epoch),
            ("target_learning_rate", target_learning_rate),
        ):
            if value is not None:
                check_number(name, value, low=0, low_open=True)
        if steps_per_epoch is not None and warmup_epochs is None:
            raise ValueError(
                "steps_per_epoch is only used with warmup_epochs, got "
                f"steps_per_epoch={steps_per_epoch} with "
                f"warmup_steps={warmup_steps}"
            )
        check_bool("momentum_correction", momentum_correction)
        check_number("initial_learning_rate", initial_learning_rate, low=0)
        self.warmup_steps = warmup_steps
        self.warmup_epochs = warmup_epochs
        self.steps_per_epoch = steps_per_epoch
        self.target_learning_rate = target_learning_rate
        self.initial_learning_rate = initial_learning_rate
        self.momentum_correction = momentum_correction
        self._warmup_length = None
        self._finished = False

    def on_train_begin(self, logs=None):
        optimizer = _unwrap(self.model.optimizer)
        if not isinstance(optimizer.learning_rate, keras.Variable):
            raise ValueError(
                "LearningRateWarmup sets the optimizer's learning rate, but "
                f"{type(optimizer).__name__} was given a schedule or callable "
                "as its learning_rate, which cannot be set. Compile with a "
                "float learning rate, or wrap the schedule in "
                "keras_largebatch.schedules.WarmUp instead of using this "
                "callback"
            )
        if self.momentum_correction and not _holds_learning_rate_in_velocity(optimizer):
            raise ValueError(
                "momentum_correction=True needs an optimizer whose momentum "
                "buffer holds the learning rate: keras.optimizers.SGD or "
                "keras_largebatch.optimizers.LARS with momentum > 0; got "
                f"{type(optimizer).__name__} with momentum="
                f"{getattr(optimizer, 'momentum', None)}. Pass "
                "momentum_correction=False"
            )
        if self.warmup_steps is not None:
            self._warmup_length = self.warmup_steps
        else:
            steps_per_epoch = self.steps_per_epoch or self.params.get("steps")
            if steps_per_epoch is None:
                raise ValueError(
                    "warmup_epochs needs the number of steps per epoch, which "
                    "fit does not know for this dataset; pass steps_per_epoch"
                )
            self._warmup_length = self.warmup_epochs * steps_per_epoch
        # Read once, so that a second `fit` (a resumed or next phase run)
        # does not take a half-ramped rate as its target.
        if self.target_learning_rate is None:
            self.target_learning_rate = _current_learning_rate(optimizer)

    def on_train_batch_begin(self, batch, logs=None):
        if self._finished:
            return
        optimizer = _unwrap(self.model.optimizer)
        step = int(keras.ops.convert_to_numpy(optimizer.iterations))
        fraction = min(step / self._warmup_length, 1.0)
        # With steps_per_execution > 1 the batch hooks may skip the step
        # equal to the warmup length, so the end is "at or past" it.
        self._finished = fraction == 1.0
        new_rate = warmup_ramp(fraction, self.initial_learning_rate, self.target_learning_rate)
        old_rate = _current_learning_rate(optimizer)
        # From a rate of 0 the ratio is undefined, and before the first
        # update the optimizer is not built and has no velocity yet.
        if self.momentum_correction and old_rate > 0 and optimizer.built:
            for velocity in _learning_rate_scaled_velocities(optimizer):
                velocity.assign(velocity * (new_rate / old_rate))
        optimizer.learning_rate = new_rate


class LearningRateLogger(keras.callbacks.Callback):
    """Puts the optimizer's current learning rate into the logs.

    At the end of each epoch (and of each batch with `log_batches=True`),
    `logs["learning_rate"] = optimizer.learning_rate`: for a schedule that is
    `schedule(optimizer.iterations)`, the rate of the next step. `History`,
    `CSVLogger` and Keras's `TensorBoard` (as `epoch_learning_rate` and
    `batch_learning_rate`) then show it. Put this callback before them in
    the `callbacks` list, since callbacks see the logs in list order.

    Args:
        log_batches: also log per batch (once per execution when
            `steps_per_execution > 1`). Defaults to `False`.
    """

    def __init__(self, log_batches=False):
        super().__init__()
        self.log_batches = log_batches

    def _log(self, logs):
        if logs is not None:
            logs["learning_rate"] = _current_learning_rate(_unwrap(self.model.optimizer))

    def on_train_batch_end(self, batch, logs=None):
        if self.log_batches:
            self._log(logs)

    def on_epoch_end(self, epoch, logs=None):
        self._log(logs)


def _summary_metadata(plugin_name):
    from tensorflow.core.framework import summary_pb2

    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=plugin_name)
    )


class TrustRatioMonitor(keras.callbacks.Callback):
    """Logs statistics of the per-layer trust ratios at the end of each epoch.

    Reads `optimizer.trust_ratios()` (a `LAMB` or `LARS` constructed with
    `record_trust_ratio=True`; a `LossScaleOptimizer` is unwrapped): the
    ratio each variable got at the last step of the epoch. Variables excluded
    from layer adaptation report 1.0 and count in the statistics. Adds to the epoch
    logs, so `History` and Keras's `TensorBoard` show them:

    - `trust_ratio_min`, `trust_ratio_median`, `trust_ratio_max`.

    and appends to `self.records` a dict per epoch with those statistics plus
    `smallest` and `largest`: the `num_extremes` `(variable path, ratio)`
    pairs with the smallest and largest ratios. The layer names are kept out
    of the logs because every Keras logger (`TensorBoard`, the progress bar)
    treats each log value as a number.

    With `log_dir`, also writes a TensorBoard event file there (step =
    epoch): scalars `trust_ratio/min`, `trust_ratio/median`,
    `trust_ratio/max`; the histogram `trust_ratio/all` of every variable's
    ratio; and text `trust_ratio/smallest`, `trust_ratio/largest` listing the
    extreme layers. Pass the `train` subfolder of Keras's `TensorBoard`
    `log_dir` to see them in the same run. The events are written with
    `tf.summary.write`, so the `tensorboard` package is needed only to view
    them.

    Args:
        log_dir: folder for the TensorBoard event file, or `None` (default).
        num_extremes: `> 0`, how many smallest and largest layers to keep.
            Defaults to `3`.
        histogram_buckets: `> 0`, buckets of the histogram. Defaults to `30`.

    Raises:
        ValueError: at the start of training, if the optimizer does not
            record trust ratios.
    """

    def __init__(self, log_dir=None, num_extremes=3, histogram_buckets=30):
        super().__init__()
        check_integer("num_extremes", num_extremes, low=1)
        check_integer("histogram_buckets", histogram_buckets, low=1)
        self.log_dir = log_dir
        self.num_extremes = num_extremes
        self.histogram_buckets = histogram_buckets
        self.records = []
        self._writer = None

    def on_train_begin(self, logs=None):
        optimizer = _unwrap(self.model.optimizer)
        if not (
            callable(getattr(optimizer, "trust_ratios", None))
            and getattr(optimizer, "record_trust_ratio", False)
        ):
            raise ValueError(
                "TrustRatioMonitor needs an optimizer that records its trust "
                f"ratios; {type(optimizer).__name__} does not. Construct the "
                "optimizer with record_trust_ratio=True (keras_largebatch."
                "optimizers.LAMB or LARS)"
            )
        if self.log_dir is not None and self._writer is None:
            # TensorFlow is imported only to write event files, so that this
            # module loads quickly on the JAX and PyTorch backends.
            import tensorflow as tf

            os.makedirs(self.log_dir, exist_ok=True)
            self._writer = tf.summary.create_file_writer(self.log_dir)

    def on_epoch_end(self, epoch, logs=None):
        ratios = _unwrap(self.model.optimizer).trust_ratios()
        if not ratios:
            # An epoch of zero steps never builds the optimizer: nothing to report yet.
            return
        by_ratio = sorted(ratios.items(), key=lambda item: item[1])
        values = np.array([ratio for _, ratio in by_ratio], dtype=np.float64)
        record = {
            "epoch": epoch,
            "min": float(values[0]),
            "median": float(np.median(values)),
            "max": float(values[-1]),
            "smallest": by_ratio[: self.num_extremes],
            "largest": by_ratio[::-1][: self.num_extremes],
        }
        self.records.append(record)
        if logs is not None:
            for statistic in ("min", "median", "max"):
                logs[f"trust_ratio_{statistic}"] = record[statistic]
        if self._writer is not None:
            self._write_summaries(epoch, record, values)

    def _write_summaries(self, epoch, record, values):
        import tensorflow as tf

        counts, edges = np.histogram(values, bins=self.histogram_buckets)
        # The histograms plugin's format: one row per bucket,
        # [left edge, right edge, count], float64.
        buckets = np.stack([edges[:-1], edges[1:], counts], axis=1)
        with self._writer.as_default():
            for statistic in ("min", "median", "max"):
                tf.summary.write(
                    f"trust_ratio/{statistic}",
                    tf.constant(record[statistic], tf.float32),
                    step=epoch,
                    metadata=_summary_metadata("scalars"),
                )
            tf.summary.write(
                "trust_ratio/all",
                tf.constant(buckets, tf.float64),
                step=epoch,
                metadata=_summary_metadata("histograms"),
            )
            for extreme in ("smallest", "largest"):
                text = "\n\n".join(f"`{path}`: {ratio:.6g}" for path, ratio in record[extreme])
                tf.summary.write(
                    f"trust_ratio/{extreme}",
                    tf.constant(text),
                    step=epoch,
                    metadata=_summary_metadata("text"),
                )
        self._writer.flush()

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None
