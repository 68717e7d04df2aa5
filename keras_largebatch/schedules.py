"""Learning-rate schedules and scaling rules for large-batch training.

Every schedule here is a `keras.optimizers.schedules.LearningRateSchedule`
written with `keras.ops` only, so it is evaluated inside the compiled train
step (TPU with `steps_per_execution > 1` included) on the TensorFlow, JAX and
PyTorch backends, and it is saved with the model through `get_config`.

The step a schedule receives is the optimizer's step counter before the
update, so step 0 is the first update. All warmups are linear in that step
(the BERT and MLPerf form): the first update uses the initial rate.

References:
    - You et al., "Large Batch Optimization for Deep Learning: Training BERT
      in 76 minutes" (LAMB), ICLR 2020: square-root scaling, linear warmup,
      polynomial decay, re-warmup in the second phase of the mixed-batch run.
    - You et al., "Large-Batch Training for LSTM and Beyond" (LEGW), SC 2019.
    - Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet in
      1 Hour", 2017: linear scaling rule and gradual warmup.
    - MLPerf ResNet-50 LARS reference, mlcommons/training
      `image_classification/tensorflow2/lars_util.py`
      (`PolynomialDecayWithWarmup`).
"""

import math
import numbers
from typing import NamedTuple

import keras
from keras import ops

_PHASE_DEFAULTS = {"end_learning_rate": 0.0, "power": 1.0}
_PHASE_REQUIRED = ("steps", "peak_learning_rate", "warmup_steps")


def _check_number(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        # The usual way a string gets here: YAML 1.1 (PyYAML) reads 6e-3,
        # without a decimal point, as a string.
        raise ValueError(
            f"{name} must be a number, got {value!r} of type {type(value).__name__}"
            + (" (in YAML, write 6e-3 as 6.0e-3)" if isinstance(value, str) else "")
        )


def _check_positive(name, value):
    _check_number(name, value)
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")


def _check_non_negative(name, value):
    _check_number(name, value)
    if not value >= 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


def _check_warmup_polynomial_decay(peak_learning_rate, warmup_steps, total_steps, end_learning_rate, power):
    _check_positive("peak_learning_rate", peak_learning_rate)
    _check_positive("total_steps", total_steps)
    _check_non_negative("warmup_steps", warmup_steps)
    _check_positive("power", power)
    _check_number("end_learning_rate", end_learning_rate)
    if not warmup_steps < total_steps:
        raise ValueError(
            "warmup_steps must be < total_steps (the decay needs at least one "
            f"step), got warmup_steps={warmup_steps} >= "
            f"total_steps={total_steps}"
        )
    if not 0 <= end_learning_rate <= peak_learning_rate:
        raise ValueError(
            "end_learning_rate must be in [0, peak_learning_rate="
            f"{peak_learning_rate}], got {end_learning_rate}"
        )


def warmup_polynomial_decay(
    step,
    peak_learning_rate,
    warmup_steps,
    decay_steps,
    end_learning_rate,
    power,
):
    """Linear warmup from 0, then polynomial decay: the rate at `step`.

    With `s = step`, `W = warmup_steps`, `D = decay_steps`:

    ```
    lr(s) = peak * s / W                                   if s < W
    lr(s) = (peak - end) * (1 - min(s - W, D) / D)^power + end   otherwise
    ```

    so the rate is `peak` at `s = W`, `end` from `s = W + D` on. This is the
    one implementation of the shape used by `WarmupPolynomialDecay`,
    `LarsMLPerfSchedule` and every phase of `MultiPhaseSchedule`.

    Args:
        step: scalar (or array of) step numbers, any numeric dtype.
        peak_learning_rate: the rate at the end of warmup.
        warmup_steps: `W >= 0`; 0 starts the decay at step 0.
        decay_steps: `D > 0`.
        end_learning_rate: the rate after the decay.
        power: the polynomial power (1.0 is linear).

    Returns:
        A float32 tensor with the shape of `step`.
    """
    step = ops.cast(step, "float32")
    # Both branches are evaluated (`where`, not `cond`) so that the schedule
    # vectorizes and compiles the same way on every backend; the guards keep
    # the branch that is not selected finite.
    warmup_rate = peak_learning_rate * step / max(warmup_steps, 1)
    decay_fraction = ops.clip(step - warmup_steps, 0.0, decay_steps) / decay_steps
    decay_rate = (peak_learning_rate - end_learning_rate) * ops.power(
        1.0 - decay_fraction, power
    ) + end_learning_rate
    return ops.where(step < warmup_steps, warmup_rate, decay_rate)


@keras.saving.register_keras_serializable(package="keras_largebatch")
class WarmUp(keras.optimizers.schedules.LearningRateSchedule):
    """Warms up from `initial_learning_rate`, then follows another schedule.

    With `s = step`, `W = warmup_steps`, `p = power` and `after` the wrapped
    schedule (or constant):

    ```
    lr(s) = initial + (target - initial) * (s / W)^p     if s < W
    lr(s) = after(s - W)        if wrapped_step == "after_warmup"   (s >= W)
    lr(s) = after(s)            if wrapped_step == "global"         (s >= W)
    ```

    where `target` is the wrapped schedule's value at the end of warmup
    (`after(0)` or `after(W)`), so the rate is continuous at `s = W`.

    `wrapped_step` is the choice of when the wrapped schedule starts counting:

    - `"after_warmup"` (default): it starts at 0 when warmup ends, so its
      full length is used after the warmup (NVIDIA's BERT schedule).
    - `"global"`: it sees the optimizer's step, so the warmup replaces its
      first `W` steps (google-research/bert `optimization.py` and TF Model
      Garden's `LinearWarmup` count the decay from step 0).

    Args:
        after_warmup: a `LearningRateSchedule` or a float.
        warmup_steps: `W > 0`, number of warmup steps.
        initial_learning_rate: the rate at step 0. Defaults to `0.0`.
        power: the warmup ramp's power; `1.0` (default) is linear, `2.0`
            quadratic.
        wrapped_step: `"after_warmup"` (default) or `"global"`, see above.

    Example:

    ```python
    decay = keras.optimizers.schedules.CosineDecay(1e-3, decay_steps=9000)
    schedule = WarmUp(decay, warmup_steps=1000)
    ```
    """

    def __init__(
        self,
        after_warmup,
        warmup_steps,
        initial_learning_rate=0.0,
        power=1.0,
        wrapped_step="after_warmup",
    ):
        super().__init__()
        _check_positive("warmup_steps", warmup_steps)
        _check_non_negative("initial_learning_rate", initial_learning_rate)
        _check_positive("power", power)
        if wrapped_step not in ("after_warmup", "global"):
            raise ValueError(f'wrapped_step must be "after_warmup" or "global", got {wrapped_step!r}')
        if not isinstance(after_warmup, keras.optimizers.schedules.LearningRateSchedule):
            _check_non_negative("after_warmup", after_warmup)
            after_warmup = float(after_warmup)
        self.after_warmup = after_warmup
        self.warmup_steps = warmup_steps
        self.initial_learning_rate = initial_learning_rate
        self.power = power
        self.wrapped_step = wrapped_step

    def _after(self, step):
        if isinstance(self.after_warmup, float):
            return ops.full(ops.shape(step), self.after_warmup, "float32")
        return ops.cast(self.after_warmup(step), "float32")

    def __call__(self, step):
        step = ops.cast(step, "float32")
        if self.wrapped_step == "after_warmup":
            target = self._after(ops.zeros_like(step))
            # Clamped at 0 so that the wrapped schedule is never asked for a
            # negative step during warmup (its value there is discarded).
            after = self._after(ops.maximum(step - self.warmup_steps, 0.0))
        else:
            target = self._after(ops.full_like(step, self.warmup_steps))
            after = self._after(step)
        fraction = ops.power(step / self.warmup_steps, self.power)
        warmup_rate = self.initial_learning_rate + (target - self.initial_learning_rate) * fraction
        return ops.where(step < self.warmup_steps, warmup_rate, after)

    def get_config(self):
        after_warmup = self.after_warmup
        if not isinstance(after_warmup, float):
            after_warmup = keras.saving.serialize_keras_object(after_warmup)
        return {
            "after_warmup": after_warmup,
            "warmup_steps": self.warmup_steps,
            "initial_learning_rate": self.initial_learning_rate,
            "power": self.power,
            "wrapped_step": self.wrapped_step,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config["after_warmup"], dict):
            config["after_warmup"] = keras.saving.deserialize_keras_object(config["after_warmup"])
        return cls(**config)


@keras.saving.register_keras_serializable(package="keras_largebatch")
class WarmupPolynomialDecay(keras.optimizers.schedules.LearningRateSchedule):
    """BERT/LAMB schedule: linear warmup, then polynomial decay.

    With `s = step`, `W = warmup_steps`, `T = total_steps`:

    ```
    lr(s) = peak * s / W                                        if s < W
    lr(s) = (peak - end) * (1 - (min(s, T) - W) / (T - W))^power + end
    ```

    The decay runs from the end of warmup to `total_steps` (NVIDIA's
    `PolyWarmUpScheduler`); the rate stays at `end_learning_rate` after
    `total_steps`. The LAMB paper uses `power=1.0`; NVIDIA's BERT
    reproduction uses `power=0.5`.

    Args:
        peak_learning_rate: `> 0`, the rate at the end of warmup.
        total_steps: `> 0`, warmup plus decay steps.
        warmup_steps: `0 <= warmup_steps < total_steps`.
        end_learning_rate: in `[0, peak_learning_rate]`. Defaults to `0.0`.
        power: `> 0`. Defaults to `1.0`.

    Example (NVIDIA phase 1, REFERENCE.md section 4):

    ```python
    schedule = WarmupPolynomialDecay(
        peak_learning_rate=6e-3, total_steps=7038, warmup_steps=2000,
        power=0.5)
    ```
    """

    def __init__(
        self,
        peak_learning_rate,
        total_steps,
        warmup_steps,
        end_learning_rate=0.0,
        power=1.0,
    ):
        super().__init__()
        _check_warmup_polynomial_decay(
            peak_learning_rate,
            warmup_steps,
            total_steps,
            end_learning_rate,
            power,
        )
        self.peak_learning_rate = peak_learning_rate
        self.total_steps = total_steps
        self.warmup_steps = warmup_steps
        self.end_learning_rate = end_learning_rate
        self.power = power

    def __call__(self, step):
        return warmup_polynomial_decay(
            step,
            self.peak_learning_rate,
            self.warmup_steps,
            self.total_steps - self.warmup_steps,
            self.end_learning_rate,
            self.power,
        )

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "end_learning_rate": self.end_learning_rate,
            "power": self.power,
        }


@keras.saving.register_keras_serializable(package="keras_largebatch")
class LarsMLPerfSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """MLPerf ResNet-50 LARS schedule: warmup over epochs, power-2 decay.

    With `s = step`, `W = warmup_epochs * steps_per_epoch`,
    `T = total_steps`:

    ```
    lr(s) = peak * s / W                                         if s < W
    lr(s) = (peak - end) * (1 - min(s - W, T - W + 1) / (T - W + 1))^power + end
    ```

    This reproduces the MLPerf reference (`PolynomialDecayWithWarmup` in
    mlcommons/training `image_classification/tensorflow2/lars_util.py`),
    including its decay length of `T - W + 1` steps, so the rate at step `T`
    is slightly above `end_learning_rate`.

    Args:
        peak_learning_rate: `> 0`, the MLPerf "base learning rate" reached at
            the end of warmup (21.2 at batch 32K, 24.699 at 64K).
        steps_per_epoch: `> 0`.
        warmup_epochs: `>= 0`, may be fractional.
        total_steps: `> 0`, the number of training steps; must exceed the
            warmup.
        end_learning_rate: in `[0, peak_learning_rate]`. Defaults to `1e-4`.
        power: `> 0`. Defaults to `2.0`.

    Example (batch 32K, 1,281,167 ImageNet images, 16 warmup epochs):

    ```python
    steps_per_epoch = 1281167 // 32768
    schedule = LarsMLPerfSchedule(
        peak_learning_rate=21.2, steps_per_epoch=steps_per_epoch,
        warmup_epochs=16, total_steps=56 * steps_per_epoch)
    ```
    """

    def __init__(
        self,
        peak_learning_rate,
        steps_per_epoch,
        warmup_epochs,
        total_steps,
        end_learning_rate=1e-4,
        power=2.0,
    ):
        super().__init__()
        _check_positive("steps_per_epoch", steps_per_epoch)
        _check_non_negative("warmup_epochs", warmup_epochs)
        _check_positive("total_steps", total_steps)
        warmup_steps = warmup_epochs * steps_per_epoch
        if not warmup_steps < total_steps:
            raise ValueError(
                "warmup_epochs * steps_per_epoch must be < total_steps, got "
                f"{warmup_epochs} * {steps_per_epoch} = {warmup_steps} >= "
                f"total_steps={total_steps}"
            )
        _check_warmup_polynomial_decay(
            peak_learning_rate,
            warmup_steps,
            total_steps,
            end_learning_rate,
            power,
        )
        self.peak_learning_rate = peak_learning_rate
        self.steps_per_epoch = steps_per_epoch
        self.warmup_epochs = warmup_epochs
        self.total_steps = total_steps
        self.end_learning_rate = end_learning_rate
        self.power = power

    @property
    def warmup_steps(self):
        return self.warmup_epochs * self.steps_per_epoch

    def __call__(self, step):
        return warmup_polynomial_decay(
            step,
            self.peak_learning_rate,
            self.warmup_steps,
            self.total_steps - self.warmup_steps + 1,
            self.end_learning_rate,
            self.power,
        )

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "steps_per_epoch": self.steps_per_epoch,
            "warmup_epochs": self.warmup_epochs,
            "total_steps": self.total_steps,
            "end_learning_rate": self.end_learning_rate,
            "power": self.power,
        }


def _normalize_phase(index, phase):
    if not isinstance(phase, dict):
        raise ValueError(
            f"phases[{index}] must be a dict with keys {_PHASE_REQUIRED} "
            f"and optionally {tuple(_PHASE_DEFAULTS)}, got {phase!r}"
        )
    missing = [key for key in _PHASE_REQUIRED if key not in phase]
    unknown = sorted(set(phase) - set(_PHASE_REQUIRED) - set(_PHASE_DEFAULTS))
    if missing or unknown:
        raise ValueError(
            f"phases[{index}] must have keys {_PHASE_REQUIRED} and may have "
            f"{tuple(_PHASE_DEFAULTS)}; missing {missing}, unknown {unknown}"
        )
    phase = {**_PHASE_DEFAULTS, **phase}
    try:
        _check_warmup_polynomial_decay(
            phase["peak_learning_rate"],
            phase["warmup_steps"],
            phase["steps"],
            phase["end_learning_rate"],
            phase["power"],
        )
    except ValueError as error:
        raise ValueError(f"phases[{index}]: {error}") from None
    return {key: phase[key] for key in _PHASE_REQUIRED + tuple(_PHASE_DEFAULTS)}


@keras.saving.register_keras_serializable(package="keras_largebatch")
class MultiPhaseSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Consecutive warmup + polynomial-decay phases, warming up from 0 in each.

    Phase `i` covers steps `[S_i, S_i + steps_i)` with
    `S_i = steps_0 + ... + steps_{i-1}`; inside it the rate is
    `warmup_polynomial_decay` of the phase-local step `s - S_i`:

    ```
    lr(s) = peak_i * (s - S_i) / W_i                          if s - S_i < W_i
    lr(s) = (peak_i - end_i) * (1 - (s - S_i - W_i) / (steps_i - W_i))^power_i
            + end_i                                           otherwise
    ```

    After the last phase the rate stays at the last phase's end rate. This is
    the LAMB mixed-batch run (64K at sequence length 128, then 32K at 512,
    with a second warmup from zero).

    Args:
        phases: a list of dicts, one per phase, with keys `steps` (`> 0`),
            `peak_learning_rate` (`> 0`), `warmup_steps`
            (`0 <= warmup_steps < steps`), `end_learning_rate` (in
            `[0, peak_learning_rate]`, default `0.0`) and `power` (`> 0`,
            default `1.0`). `get_config` stores them as plain dicts with
            every key filled in.
        total_steps: optional; if given, the phases' `steps` must add up to
            it.

    Example (NVIDIA's two phases, REFERENCE.md section 4):

    ```python
    schedule = MultiPhaseSchedule([
        {"steps": 7038, "peak_learning_rate": 6e-3, "warmup_steps": 2000,
         "power": 0.5},
        {"steps": 1563, "peak_learning_rate": 4e-3, "warmup_steps": 200,
         "power": 0.5},
    ])
    ```
    """

    def __init__(self, phases, total_steps=None):
        super().__init__()
        if not isinstance(phases, (list, tuple)) or not phases:
            raise ValueError(f"phases must be a non-empty list of dicts, got {phases!r}")
        self.phases = [_normalize_phase(index, phase) for index, phase in enumerate(phases)]
        phase_steps = [phase["steps"] for phase in self.phases]
        if total_steps is not None and sum(phase_steps) != total_steps:
            raise ValueError(
                f"the phases' steps {phase_steps} add up to {sum(phase_steps)}, "
                f"but total_steps={total_steps}"
            )
        self.total_steps = sum(phase_steps)

    @property
    def phase_starts(self):
        """The global step at which each phase begins."""
        starts = [0]
        for phase in self.phases[:-1]:
            starts.append(starts[-1] + phase["steps"])
        return starts

    def __call__(self, step):
        step = ops.cast(step, "float32")
        learning_rate = None
        # Built from the last phase backwards: each earlier phase overrides
        # the steps before its end, and the last phase also covers the steps
        # past the end (where it holds its end rate).
        for phase, start in reversed(list(zip(self.phases, self.phase_starts))):
            phase_rate = warmup_polynomial_decay(
                step - start,
                phase["peak_learning_rate"],
                phase["warmup_steps"],
                phase["steps"] - phase["warmup_steps"],
                phase["end_learning_rate"],
                phase["power"],
            )
            if learning_rate is None:
                learning_rate = phase_rate
            else:
                learning_rate = ops.where(step < start + phase["steps"], phase_rate, learning_rate)
        return learning_rate

    def get_config(self):
        return {
            "phases": [dict(phase) for phase in self.phases],
            "total_steps": self.total_steps,
        }


def scale_learning_rate(base_learning_rate, base_batch_size, batch_size, rule="sqrt"):
    """The learning rate for `batch_size`, scaled from `base_batch_size`.

    With `k = batch_size / base_batch_size`:

    ```
    rule="sqrt":    lr = base_learning_rate * sqrt(k)    (LAMB, You et al.)
    rule="linear":  lr = base_learning_rate * k          (Goyal et al.)
    ```

    Args:
        base_learning_rate: `> 0`, the rate tuned at `base_batch_size`.
        base_batch_size: `> 0`.
        batch_size: `> 0`, the new global batch size.
        rule: `"sqrt"` (default) or `"linear"`.

    Returns:
        The scaled learning rate, a float.
    """
    _check_positive("base_learning_rate", base_learning_rate)
    _check_positive("base_batch_size", base_batch_size)
    _check_positive("batch_size", batch_size)
    ratio = batch_size / base_batch_size
    if rule == "sqrt":
        return base_learning_rate * math.sqrt(ratio)
    if rule == "linear":
        return base_learning_rate * ratio
    raise ValueError(f'rule must be "sqrt" or "linear", got {rule!r}')


class LegwScaled(NamedTuple):
    """The result of `legw_scale`."""

    learning_rate: float
    warmup_epochs: float


def legw_scale(base_learning_rate, base_warmup_epochs, base_batch_size, batch_size):
    """Linear-epoch gradual warmup (LEGW): scaled rate and warmup length.

    With `k = batch_size / base_batch_size` (You et al., SC 2019):

    ```
    learning_rate = base_learning_rate * sqrt(k)
    warmup_epochs = base_warmup_epochs * k
    ```

    The warmup measured in steps, `warmup_epochs * dataset_size /
    batch_size`, therefore stays the same at every batch size.

    Args:
        base_learning_rate: `> 0`, the rate tuned at `base_batch_size`.
        base_warmup_epochs: `>= 0`, the warmup tuned at `base_batch_size`.
        base_batch_size: `> 0`.
        batch_size: `> 0`, the new global batch size.

    Returns:
        `LegwScaled(learning_rate, warmup_epochs)`.
    """
    _check_non_negative("base_warmup_epochs", base_warmup_epochs)
    learning_rate = scale_learning_rate(base_learning_rate, base_batch_size, batch_size, rule="sqrt")
    return LegwScaled(
        learning_rate=learning_rate,
        warmup_epochs=base_warmup_epochs * batch_size / base_batch_size,
    )
