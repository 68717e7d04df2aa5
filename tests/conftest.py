"""Session-wide test setup.

Splits the CPU into 4 logical devices, "/cpu:0" ... "/cpu:3", so in-process tests can run
MirroredStrategy with 1, 2 or 4 replicas on a CPU-only machine. It has to happen here, at
session start: TensorFlow fixes its devices when its runtime initializes, and the first
test to run an op would otherwise lock in a single CPU device. Ops outside a strategy still
run on "/cpu:0", so tests that do not distribute see no difference.

TensorFlow's C++ start-up lines (oneDNN and CUDA notices) are silenced first, before anything
imports TensorFlow; ``TF_CPP_MIN_LOG_LEVEL`` is set in the environment, so the subprocesses
that tests start inherit it.
"""

import importlib.util

NUM_LOGICAL_CPUS = 4


def pytest_configure(config):
    # Test runs without TensorFlow (e.g. a JAX-only job) must still collect.
    if importlib.util.find_spec("tensorflow") is None:
        return
    from keras_largebatch._logging import quiet_tensorflow_logs

    quiet_tensorflow_logs()
    from keras_largebatch.distribute import configure_logical_cpus

    configure_logical_cpus(NUM_LOGICAL_CPUS)
