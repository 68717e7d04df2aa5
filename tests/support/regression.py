"""A small regression problem, seeded linear data and a seeded dense model, for the tests that
compare two runs of one training (devices, replicas, accumulation, resume, mixed precision):
every example and every initial weight is a function of the seeds alone."""

import keras
import numpy as np


def regression_data(count, noise=0.0):
    """``count`` examples of 6 normal features and 2 targets ``x @ W + noise * e``, where W
    and e are normal too (seed 0); float32 arrays ``(features, targets)``."""
    rng = np.random.default_rng(0)
    features = rng.normal(size=(count, 6)).astype("float32")
    targets = features @ rng.normal(size=(6, 2))
    if noise:
        targets = targets + noise * rng.normal(size=(count, 2))
    return features, targets.astype("float32")


def build_model(inputs=6, hidden=16, outputs=2, layer_norm=True):
    """Dense(hidden, tanh), a LayerNormalization if ``layer_norm``, then Dense(outputs); the
    kernels are Glorot-uniform with seeds 1 and 2, so every build starts from the same
    weights."""
    layers = [
        keras.Input((inputs,)),
        keras.layers.Dense(
            hidden, activation="tanh", kernel_initializer=keras.initializers.GlorotUniform(1)
        ),
    ]
    if layer_norm:
        layers.append(keras.layers.LayerNormalization())
    layers.append(
        keras.layers.Dense(outputs, kernel_initializer=keras.initializers.GlorotUniform(2))
    )
    return keras.Sequential(layers)
