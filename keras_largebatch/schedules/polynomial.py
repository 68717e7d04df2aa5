"""Linear warmup then polynomial decay: the BERT/LAMB and MLPerf LARS schedules."""

import keras
from keras import ops

from keras_largebatch._checks import check_warmup_decay, check_warmup_epochs
from keras_largebatch.schedules.warmup import warmup_ramp


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
    warmup_rate = warmup_ramp(step / max(warmup_steps, 1), 0.0, peak_learning_rate)
    decay_fraction = ops.clip(step - warmup_steps, 0.0, decay_steps) / decay_steps
    decay_rate = (peak_learning_rate - end_learning_rate) * ops.power(
        1.0 - decay_fraction, power
    ) + end_learning_rate
    return ops.where(step < warmup_steps, warmup_rate, decay_rate)


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

    Example (NVIDIA's BERT phase 1: NVIDIA/DeepLearningExamples,
    `PyTorch/LanguageModeling/BERT/scripts/run_pretraining.sh`):

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
        check_warmup_decay(peak_learning_rate, warmup_steps, total_steps, end_learning_rate, power)
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
        check_warmup_epochs(warmup_epochs, steps_per_epoch, total_steps)
        check_warmup_decay(
            peak_learning_rate,
            warmup_epochs * steps_per_epoch,
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
