"""Least squares at fixed weights: a problem whose gradient noise scale is known exactly.

With the loss ``(x . w - y)^2`` per example, the per-example gradients over the whole data set
are ``g_i = 2 (x_i . w - y_i) x_i``: ``G = mean_i g_i`` and ``tr(Sigma) = mean_i |g_i - G|^2``
give ``B_simple = tr(Sigma) / |G|^2`` in NumPy. Training with LARS at learning rate 0 keeps the
weights where they are, so every step measures the same truth.

Run as a module on the JAX backend (tests/test_noise_scale.py does), it prints one JSON line:
{"measured": B_simple measured under gradient accumulation, "weights_moved": bool}.
"""

import json

import keras
import numpy as np

EXAMPLES = 2048
FEATURES = 4
# Batches of 16 against 32 examples, the data seen 32 times over (2048 steps of 32): the
# average holds within 6% of the truth over 40 seeds of a NumPy simulation of the sampling.
SMALL_BATCH_SIZE = 16
PASSES = 32
EMA_DECAY = 0.999


def data():
    """Features of +-1 (light-tailed gradients), targets of a linear model plus noise, and the
    fixed weights, off the solution so that the true gradient is well away from 0."""
    rng = np.random.default_rng(0)
    features = rng.choice([-1.0, 1.0], size=(EXAMPLES, FEATURES))
    true_weights = rng.normal(size=FEATURES)
    targets = features @ true_weights + rng.normal(size=EXAMPLES)
    return features, targets[:, None], (true_weights + 0.3)[:, None]


def true_noise_scale():
    features, targets, weights = data()
    gradients = 2 * (features @ weights - targets) * features
    mean = gradients.mean(axis=0)
    trace = np.mean(np.sum((gradients - mean) ** 2, axis=1))
    return float(trace / (mean @ mean))


def fit(
    callbacks,
    batch_size,
    accumulation_steps=None,
    passes=PASSES,
    jit_compile="auto",
):
    """Fits the fixed linear model with LARS at rate 0 (inside the caller's strategy scope, if
    any) for one epoch over ``passes`` permutations of the data; returns the model."""
    from keras_largebatch import LARS

    features, targets, weights = data()
    # Each pass in a new order (fit's own shuffle repeats one order in every epoch here).
    rng = np.random.default_rng(1)
    order = np.concatenate([rng.permutation(EXAMPLES) for _ in range(passes)])
    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(
                1, use_bias=False, kernel_initializer=keras.initializers.Constant(weights)
            ),
        ]
    )
    optimizer = LARS(
        0.0,
        momentum=0.0,
        gradient_accumulation_steps=None if accumulation_steps == 1 else accumulation_steps,
    )
    model.compile(
        optimizer=optimizer,
        loss="mse",
        steps_per_execution=64,
        jit_compile=jit_compile,
    )
    model.fit(
        features[order].astype("float32"),
        targets[order].astype("float32"),
        batch_size=batch_size,
        shuffle=False,
        verbose=0,
        callbacks=callbacks,
    )
    return model


def main():
    from keras_largebatch import GradientNoiseScale

    history = keras.callbacks.History()
    callbacks = [GradientNoiseScale(SMALL_BATCH_SIZE, ema_decay=EMA_DECAY), history]
    model = fit(callbacks, SMALL_BATCH_SIZE, accumulation_steps=2)
    moved = not np.array_equal(model.get_weights()[0], data()[2].astype("float32"))
    print(
        json.dumps(
            {"measured": history.history["gradient_noise_scale"][-1], "weights_moved": moved}
        )
    )


if __name__ == "__main__":
    main()
