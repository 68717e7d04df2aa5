"""Which Keras backend a run will train on, and the strategy names each backend offers, known
without importing Keras (whose TensorFlow backend imports TensorFlow), so that a config loads,
validates and prints in a blink.
"""

import json
import os
import sys

BACKENDS = ("tensorflow", "jax")
# `keras_largebatch.distribute.get_strategy`'s names on TensorFlow; "auto" is the best available.
TENSORFLOW_STRATEGY_NAMES = ("auto", "tpu", "multi_worker", "mirrored", "one_device", "default")
# `keras.distribution` on JAX: DataParallel ("auto" is it), or ModelParallel over a (batch, model)
# mesh with the recipe's layout map.
JAX_STRATEGY_NAMES = ("auto", "data_parallel", "model_parallel")
STRATEGY_NAMES = TENSORFLOW_STRATEGY_NAMES + JAX_STRATEGY_NAMES[1:]


def keras_backend():
    """The name of the backend Keras uses or will use in this process.

    Once Keras is imported, its own answer. Before that, read as Keras reads it when it is
    imported (its documentation, "Configuring your backend"): the ``KERAS_BACKEND`` variable
    if set and not empty, else the ``backend`` of ``keras.json`` in `keras_home`, else
    ``"tensorflow"``.
    """
    if "keras" in sys.modules:
        return sys.modules["keras"].backend.backend()
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    try:
        with open(os.path.join(os.path.expanduser(keras_home()), "keras.json")) as stream:
            return json.load(stream).get("backend", "tensorflow")
    except (OSError, ValueError):
        return "tensorflow"


def keras_home():
    """Keras's home directory, as Keras decides it when it is imported: ``$KERAS_HOME``, else
    ``~/.keras``, else ``/tmp/.keras`` when the home directory is not writable."""
    if "KERAS_HOME" in os.environ:
        return os.environ["KERAS_HOME"]
    home = os.path.expanduser("~")
    return os.path.join(home if os.access(home, os.W_OK) else "/tmp", ".keras")
