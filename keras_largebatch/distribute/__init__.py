"""`tf.distribute` for the machine the code runs on, by job:

* `strategy`: choosing a strategy (`get_strategy`, the one call a training script makes) and
  describing it (`describe_strategy`).
* `keras_workarounds`: what Keras 3 needs to train under MirroredStrategy and
  MultiWorkerMirroredStrategy (`unroll_steps_per_execution`, `KerasMultiWorkerMirroredStrategy`).
* `cpu_devices`: several logical CPU devices in one process (`configure_logical_cpus`), for
  tests and demos without accelerators.

The public names are importable from here. Nothing runs at import time; TensorFlow devices are
only listed (and the runtime only initialized) when a function is called.
"""

from keras_largebatch import _extras

try:
    import tensorflow  # noqa: F401
except ModuleNotFoundError as error:
    raise _extras.missing_extra(__name__, "tensorflow", error) from error

from keras_largebatch.distribute.cpu_devices import configure_logical_cpus
from keras_largebatch.distribute.keras_workarounds import (
    KerasMultiWorkerMirroredStrategy,
    unroll_steps_per_execution,
)
from keras_largebatch.distribute.strategy import (
    COMMUNICATION_NAMES,
    STRATEGY_NAMES,
    describe_strategy,
    get_strategy,
    resolve_strategy_name,
    tf_config_num_workers,
)

__all__ = [
    "COMMUNICATION_NAMES",
    "KerasMultiWorkerMirroredStrategy",
    "STRATEGY_NAMES",
    "configure_logical_cpus",
    "describe_strategy",
    "get_strategy",
    "resolve_strategy_name",
    "tf_config_num_workers",
    "unroll_steps_per_execution",
]
