"""Training callbacks for large-batch runs: warmup, rate and trust-ratio logging, noise scale.

The warmup callback is for models compiled with a float learning rate; a
model compiled with a schedule from `keras_largebatch.schedules` already warms
up inside the train step and needs no callback.

Modules: `warmup` (`LearningRateWarmup`), `learning_rate_logger` (`LearningRateLogger`),
`trust_ratio_monitor` (`TrustRatioMonitor`), `gradient_noise_scale` (`GradientNoiseScale`).
"""

from keras_largebatch.callbacks.gradient_noise_scale import GradientNoiseScale
from keras_largebatch.callbacks.learning_rate_logger import LearningRateLogger
from keras_largebatch.callbacks.trust_ratio_monitor import TrustRatioMonitor
from keras_largebatch.callbacks.warmup import LearningRateWarmup

__all__ = ["GradientNoiseScale", "LearningRateLogger", "LearningRateWarmup", "TrustRatioMonitor"]
