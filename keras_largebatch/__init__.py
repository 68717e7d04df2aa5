"""keras-largebatch: LARS and LAMB, large-batch schedules and a BERT pretraining recipe for Keras 3.

The public names below are imported on first use, so that ``import keras_largebatch`` (which
every ``keras_largebatch.*`` import runs first) does not import Keras and TensorFlow: a
command can then quiet TensorFlow's start-up lines before TensorFlow loads.

Importing the package still registers its serializable classes (the optimizers and the
schedules) with Keras, so that `keras.models.load_model` and `keras.optimizers.deserialize`
find them: at once if Keras is already imported, else as soon as Keras's own import finishes.
Keras imports the module a saved object names only for its own packages (``keras``,
``keras_hub``, ...); any other class must be registered before it loads.
"""

import importlib
import importlib.util
import sys
import threading

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

# Importing these runs every `keras.saving.register_keras_serializable` of the package.
_SERIALIZABLE_MODULES = ("keras_largebatch.optimizers", "keras_largebatch.schedules")

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


def _register_serializable_classes():
    for module in _SERIALIZABLE_MODULES:
        importlib.import_module(module)


class _RegisterWhenKerasLoads(threading.local):
    """A `sys.meta_path` finder for ``keras`` alone: it returns the spec the other finders
    find, with a loader that registers our classes once Keras's module has run."""

    # True, in the thread that set it, while the other finders are asked.
    asking = False

    def find_spec(self, name, path=None, target=None):
        if name != "keras" or self.asking:
            return None
        self.asking = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.asking = False
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisteringLoader(spec.loader)
        return spec


class _RegisteringLoader:
    """Keras's own loader, whose `exec_module` then runs `_register_serializable_classes`."""

    def __init__(self, loader):
        self.loader = loader

    def exec_module(self, module):
        # Keras's module keeps its own loader (importlib.resources, inspect read it).
        module.__loader__ = module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        _register_serializable_classes()

    def __getattr__(self, name):
        # The rest of the loader's interface (create_module, get_resource_reader, ...).
        return getattr(self.loader, name)


if sys.modules.get("keras") is None:
    sys.meta_path.insert(0, _RegisterWhenKerasLoads())
else:
    _register_serializable_classes()
