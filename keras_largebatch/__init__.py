"""keras-largebatch: LARS and LAMB, large-batch schedules and a BERT pretraining recipe for Keras 3.

The public names below are imported on first use, so that ``import keras_largebatch`` (which
every ``keras_largebatch.*`` import runs first) does not import Keras and TensorFlow: a
command can then quiet TensorFlow's start-up lines before TensorFlow loads. Saved models
still load without importing anything first: Keras imports the module each object names.
"""

import importlib

__version__ = "0.1.0"

# Public name -> the module that defines it.
_EXPORTS = {
    "GradientNoiseScale": "keras_largebatch.callbacks",
    "LAMB": "keras_largebatch.optimizers",
    "LARS": "keras_largebatch.optimizers",
    "LarsMLPerfSchedule": "keras_largebatch.schedules",
    "LearningRateLogger": "keras_largebatch.callbacks",
    "LearningRateWarmup": "keras_largebatch.callbacks",
    "LegwScaled": "keras_largebatch.scaling",
    "MultiPhaseSchedule": "keras_largebatch.schedules",
    "TrustRatioMonitor": "keras_largebatch.callbacks",
    "WarmUp": "keras_largebatch.schedules",
    "WarmupPolynomialDecay": "keras_largebatch.schedules",
    "legw_scale": "keras_largebatch.scaling",
    "scale_learning_rate": "keras_largebatch.scaling",
}

# Subpackages that ``import keras_largebatch`` used to import, still reachable as attributes.
_SUBMODULES = ("callbacks", "optimizers", "scaling", "schedules")

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"keras_largebatch.{name}")
    if name not in _EXPORTS:
        raise AttributeError(f"module 'keras_largebatch' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | set(_SUBMODULES))
