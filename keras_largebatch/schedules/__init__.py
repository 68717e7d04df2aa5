"""Learning-rate schedules for large-batch training.

Every schedule here is a `keras.optimizers.schedules.LearningRateSchedule`
written with `keras.ops` only, so it is evaluated inside the compiled train
step (TPU with `steps_per_execution > 1` included) on the TensorFlow, JAX and
PyTorch backends, and it is saved with the model through `get_config`.

The step a schedule receives is the optimizer's step counter before the
update, so step 0 is the first update. All warmups ramp from the step
(linearly in the BERT and MLPerf form): the first update uses the initial rate.
The batch-size scaling rules are in `keras_largebatch.scaling` (and importable
from here).

Modules: `warmup` (the ramp and `WarmUp`), `polynomial` (`warmup_polynomial_decay`,
`WarmupPolynomialDecay`, `LarsMLPerfSchedule`), `multi_phase` (`MultiPhaseSchedule`).

References:
    - You et al., "Large Batch Optimization for Deep Learning: Training BERT
      in 76 minutes" (LAMB), ICLR 2020, arXiv:1904.00962: linear warmup,
      polynomial decay, re-warmup in the second phase of the mixed-batch run.
    - Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet in
      1 Hour", arXiv:1706.02677: gradual warmup.
    - NVIDIA/DeepLearningExamples, `PyTorch/LanguageModeling/BERT`
      (`scripts/run_pretraining.sh`): the two-phase LAMB run of the examples,
      7,038 steps at 6e-3 (warmup proportion 0.2843, 2,000 steps) then 1,563
      at 4e-3 (0.128, 200 steps), polynomial decay with power 0.5.
    - MLPerf ResNet-50 LARS reference, mlcommons/training
      `image_classification/tensorflow2/lars_util.py`
      (`PolynomialDecayWithWarmup`).
"""

from keras_largebatch.scaling import LegwScaled, legw_scale, scale_learning_rate
from keras_largebatch.schedules.multi_phase import MultiPhaseSchedule
from keras_largebatch.schedules.polynomial import (
    LarsMLPerfSchedule,
    WarmupPolynomialDecay,
    warmup_polynomial_decay,
)
from keras_largebatch.schedules.warmup import WarmUp, warmup_ramp

__all__ = [
    "LarsMLPerfSchedule",
    "LegwScaled",
    "MultiPhaseSchedule",
    "WarmUp",
    "WarmupPolynomialDecay",
    "legw_scale",
    "scale_learning_rate",
    "warmup_polynomial_decay",
    "warmup_ramp",
]
