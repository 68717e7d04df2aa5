"""keras-largebatch: LARS and LAMB, large-batch schedules and a BERT pretraining recipe for Keras 3."""

from keras_largebatch.callbacks import LearningRateLogger, LearningRateWarmup, TrustRatioMonitor
from keras_largebatch.optimizers import LAMB, LARS
from keras_largebatch.schedules import (
    LarsMLPerfSchedule,
    LegwScaled,
    MultiPhaseSchedule,
    WarmUp,
    WarmupPolynomialDecay,
    legw_scale,
    scale_learning_rate,
)

__version__ = "0.1.0"

__all__ = [
    "LAMB",
    "LARS",
    "LarsMLPerfSchedule",
    "LearningRateLogger",
    "LearningRateWarmup",
    "LegwScaled",
    "MultiPhaseSchedule",
    "TrustRatioMonitor",
    "WarmUp",
    "WarmupPolynomialDecay",
    "legw_scale",
    "scale_learning_rate",
]
