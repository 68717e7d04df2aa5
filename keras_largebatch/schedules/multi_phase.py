"""Consecutive warmup + polynomial-decay phases: the LAMB mixed-batch run."""

import keras
from keras import ops

from keras_largebatch._checks import check_warmup_decay
from keras_largebatch.schedules.polynomial import warmup_polynomial_decay

# The keys of one phase: those it must have, and the defaults of the others.
PHASE_REQUIRED = ("steps", "peak_learning_rate", "warmup_steps")
PHASE_DEFAULTS = {"end_learning_rate": 0.0, "power": 1.0}


def _normalize_phase(index, phase):
    if not isinstance(phase, dict):
        raise TypeError(
            f"phases[{index}] must be a dict with keys {PHASE_REQUIRED} "
            f"and optionally {tuple(PHASE_DEFAULTS)}, got {phase!r}"
        )
    missing = [key for key in PHASE_REQUIRED if key not in phase]
    unknown = sorted(set(phase) - set(PHASE_REQUIRED) - set(PHASE_DEFAULTS))
    if missing or unknown:
        raise ValueError(
            f"phases[{index}] must have keys {PHASE_REQUIRED} and may have "
            f"{tuple(PHASE_DEFAULTS)}; missing {missing}, unknown {unknown}"
        )
    phase = {**PHASE_DEFAULTS, **phase}
    try:
        check_warmup_decay(
            phase["peak_learning_rate"],
            phase["warmup_steps"],
            phase["steps"],
            phase["end_learning_rate"],
            phase["power"],
        )
    except (TypeError, ValueError) as error:
        raise type(error)(f"phases[{index}]: {error}") from None
    return {key: phase[key] for key in PHASE_REQUIRED + tuple(PHASE_DEFAULTS)}


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

    Example (NVIDIA's two BERT phases: NVIDIA/DeepLearningExamples,
    `PyTorch/LanguageModeling/BERT/scripts/run_pretraining.sh`):

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
        if not isinstance(phases, (list, tuple)):
            raise TypeError(f"phases must be a non-empty list of dicts, got {phases!r}")
        if not phases:
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
