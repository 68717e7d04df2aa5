"""Linear learning-rate warmup per batch, with momentum correction.

Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour" (arXiv:1706.02677),
sections 2.2 (gradual warmup) and 3 (momentum correction).
"""

import keras

from keras_largebatch._checks import check_bool, check_number
from keras_largebatch.callbacks._optimizer import current_learning_rate, unwrap
from keras_largebatch.optimizers import LARS
from keras_largebatch.schedules.warmup import warmup_ramp


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
        optimizer = unwrap(self.model.optimizer)
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
            self.target_learning_rate = current_learning_rate(optimizer)

    def on_train_batch_begin(self, batch, logs=None):
        if self._finished:
            return
        optimizer = unwrap(self.model.optimizer)
        step = int(keras.ops.convert_to_numpy(optimizer.iterations))
        fraction = min(step / self._warmup_length, 1.0)
        # With steps_per_execution > 1 the batch hooks may skip the step
        # equal to the warmup length, so the end is "at or past" it.
        self._finished = fraction == 1.0
        new_rate = warmup_ramp(fraction, self.initial_learning_rate, self.target_learning_rate)
        old_rate = current_learning_rate(optimizer)
        # From a rate of 0 the ratio is undefined, and before the first
        # update the optimizer is not built and has no velocity yet.
        if self.momentum_correction and old_rate > 0 and optimizer.built:
            for velocity in _learning_rate_scaled_velocities(optimizer):
                velocity.assign(velocity * (new_rate / old_rate))
        optimizer.learning_rate = new_rate
