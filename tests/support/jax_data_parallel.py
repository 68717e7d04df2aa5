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

GLOBAL_BATCH_SIZE = 16
STEPS = 4

# The configurations of tests/test_distributed_training.py (decay, exclusions, Nesterov,
# clipping of the global-batch gradient), so that JAX is held to the TF strategies' standard:
# two that adapt every kernel under a clip that binds, blind to a uniform scale of the
# gradient, and unadapted LARS under a clip that does not bind, stepping by lr * (g + wd * w).
CASES = {
    "LAMB": (
        LAMB,
        dict(
            learning_rate=1e-2,
            weight_decay=0.05,
            exclude_from_weight_decay=["norm", "bias"],
            exclude_from_layer_adaptation=["norm"],
            global_clipnorm=0.5,
        ),
    ),
    "LARS": (
        LARS,
        dict(
            learning_rate=1.0,
            trust_coefficient=0.02,
            weight_decay=1e-3,
            nesterov=True,
            exclude_from_layer_adaptation=[],
            global_clipnorm=0.5,
        ),
    ),
    "LARS_sgd_loose_clip": (
        LARS,
        dict(
            learning_rate=0.05,
            weight_decay=1e-3,
            exclude_from_layer_adaptation=[".*"],
            global_clipnorm=50.0,
        ),
    ),
}


def build_model():
    return keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(
                16, activation="tanh", kernel_initializer=keras.initializers.GlorotUniform(1)
            ),
            keras.layers.LayerNormalization(),
            keras.layers.Dense(2, kernel_initializer=keras.initializers.GlorotUniform(2)),
        ]
    )


def train(name, accumulation, distribution, clip=True):
    """``STEPS`` optimizer steps of ``GLOBAL_BATCH_SIZE`` examples, in micro-batches of
    ``GLOBAL_BATCH_SIZE / accumulation``; returns the run's record (see the module docstring)."""
    optimizer_class, kwargs = CASES[name]
    if not clip:
        kwargs = {key: value for key, value in kwargs.items() if key != "global_clipnorm"}
    rng = np.random.default_rng(0)
    features = rng.normal(size=(GLOBAL_BATCH_SIZE * STEPS, 6)).astype("float32")
    targets = (features @ rng.normal(size=(6, 2))).astype("float32")
    keras.distribution.set_distribution(distribution)
    try:
        model = build_model()
        model.compile(
            optimizer=optimizer_class(gradient_accumulation_steps=accumulation, **kwargs),
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
