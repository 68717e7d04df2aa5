"""Warmup: the one linear-or-power ramp of the package, and the `WarmUp` schedule."""

import keras
from keras import ops

from keras_largebatch._checks import check_choice, check_number


def warmup_ramp(fraction, initial_learning_rate, target_learning_rate, power=1.0):
    """The rate ``fraction`` (in [0, 1]) of the way through a warmup:

    ```
    lr = initial + (target - initial) * fraction^power
    ```

    The one ramp of the package: `WarmUp`, `warmup_polynomial_decay` (from 0, linear) and
    the `LearningRateWarmup` callback all call it. Plain arithmetic, so it takes Python
    floats (the callback) as well as tensors of any backend (the schedules).
    """
    if power != 1.0:
        fraction = fraction**power
    return initial_learning_rate + (target_learning_rate - initial_learning_rate) * fraction


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
        check_number("warmup_steps", warmup_steps, low=0, low_open=True)
        check_number("initial_learning_rate", initial_learning_rate, low=0)
        check_number("power", power, low=0, low_open=True)
        check_choice("wrapped_step", wrapped_step, ("after_warmup", "global"))
        if not isinstance(after_warmup, keras.optimizers.schedules.LearningRateSchedule):
            check_number("after_warmup", after_warmup, low=0)
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
        warmup_rate = warmup_ramp(
            step / self.warmup_steps, self.initial_learning_rate, target, self.power
        )
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
