"""Train a small model on the JAX backend, on one device and under `DataParallel` over two.

Run by tests/test_jax_distribution.py as

    KERAS_BACKEND=jax XLA_FLAGS=--xla_force_host_platform_device_count=2 \
        python -m tests.support.jax_data_parallel

(a process holds one Keras backend, and the test process runs on TensorFlow). Prints one
JSON object on its last line: case -> {"one_device": run, "data_parallel": run,
"one_device_unclipped": run}, where a run holds the final "weights" as nested lists, the
optimizer "iterations" and the number of "devices" holding the variables; the unclipped run
drops the case's global_clipnorm. "initial" holds the untrained weights.
"""

import json

import jax
import keras
import numpy as np

from keras_largebatch import LAMB, LARS
from tests.support.optimizer_cases import CONFIGS
from tests.support.regression import build_model, regression_data

GLOBAL_BATCH_SIZE = 16
STEPS = 4

# The configurations of the TensorFlow comparisons (tests/test_distributed_training.py).
CASES = {
    name: ({"LAMB": LAMB, "LARS": LARS}[optimizer], kwargs)
    for name, (optimizer, kwargs) in (
        ("LAMB", CONFIGS["lamb_decay_exclusions"]),
        ("LARS", CONFIGS["lars_decay_nesterov"]),
        ("LARS_sgd_loose_clip", CONFIGS["lars_sgd_loose_clip"]),
    )
}


def train(name, accumulation, distribution, clip=True):
    """``STEPS`` optimizer steps of ``GLOBAL_BATCH_SIZE`` examples, in micro-batches of
    ``GLOBAL_BATCH_SIZE / accumulation``; returns the run's record (see the module docstring)."""
    optimizer_class, kwargs = CASES[name]
    if not clip:
        kwargs = {key: value for key, value in kwargs.items() if key != "global_clipnorm"}
    features, targets = regression_data(GLOBAL_BATCH_SIZE * STEPS)
    keras.distribution.set_distribution(distribution)
    try:
        model = build_model()
        model.compile(
            optimizer=optimizer_class(
                gradient_accumulation_steps=None if accumulation == 1 else accumulation, **kwargs
            ),
            loss="mse",
        )
        model.fit(
            features,
            targets,
            batch_size=GLOBAL_BATCH_SIZE // (accumulation or 1),
            epochs=1,
            shuffle=False,
            verbose=0,
        )
        return {
            "weights": [np.asarray(w).tolist() for w in model.get_weights()],
            "iterations": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
            # DataParallel replicates every variable on each device it trains on.
            "devices": len(model.trainable_variables[0].value.sharding.device_set),
        }
    finally:
        keras.distribution.set_distribution(None)


def main():
    assert keras.backend.backend() == "jax", keras.backend.backend()
    data_parallel = keras.distribution.DataParallel(devices=jax.devices())
    results = {"initial": [np.asarray(w).tolist() for w in build_model().get_weights()]}
    for name in CASES:
        for accumulation in (None, 2):
            results[f"{name}/accumulation={accumulation}"] = {
                "one_device": train(name, accumulation, None),
                "data_parallel": train(name, accumulation, data_parallel),
                "one_device_unclipped": train(name, accumulation, None, clip=False),
            }
    print(json.dumps(results))


if __name__ == "__main__":
    main()
