"""The core on its own: every public name imported, and LAMB and LARS trained by `model.fit` on
NumPy arrays with the package's schedules and callbacks.

tests/test_extras.py runs it on the JAX and PyTorch backends with TensorFlow refused:

    KERAS_BACKEND=jax python -m tests.support.without_modules tensorflow \\
        tests.support.core_training

The model is one Dense layer under the loss ``mean_i sum_j c_ij * y_ij``, linear in the weights,
so every step's gradient is the same, ``X^T C / N`` for the kernel and ``mean_i c_i`` for the
bias, and the runs can be compared with the NumPy transcriptions of the papers. The last line
printed is one JSON object: per optimizer the initial and final weights, the logged learning
rates and trust ratios; the backend; and whether TensorFlow was imported.
"""

import json
import sys

import keras
import numpy as np

import keras_largebatch

EXAMPLES, FEATURES, UNITS = 8, 4, 3
EPOCHS = 6  # one step per epoch: the whole data set is one batch


def problem():
    """``(features, coefficients, kernel, bias)``: the data, the loss's coefficients ``C`` (fed
    as the targets) and the initial weights, all float32."""
    rng = np.random.default_rng(0)
    features = rng.normal(size=(EXAMPLES, FEATURES)).astype("float32")
    coefficients = rng.normal(size=(EXAMPLES, UNITS)).astype("float32")
    kernel = rng.normal(size=(FEATURES, UNITS)).astype("float32")
    bias = (0.1 * rng.normal(size=UNITS)).astype("float32")
    return features, coefficients, kernel, bias


def linear_loss(coefficients, outputs):
    return keras.ops.sum(coefficients * outputs, axis=-1)


def optimizers():
    """Name -> the optimizer trained, with a schedule of the package for LAMB."""
    schedule = keras_largebatch.WarmupPolynomialDecay(
        peak_learning_rate=0.05, total_steps=EPOCHS, warmup_steps=2
    )
    return {
        "lamb": keras_largebatch.LAMB(schedule, weight_decay=0.01, record_trust_ratio=True),
        "lars": keras_largebatch.LARS(
            1.0, momentum=0.9, trust_coefficient=0.02, weight_decay=1e-3, record_trust_ratio=True
        ),
    }


def train(optimizer):
    features, coefficients, kernel, bias = problem()
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(UNITS)])
    model.set_weights([kernel, bias])
    model.compile(optimizer=optimizer, loss=linear_loss)
    history = model.fit(
        features,
        coefficients,
        batch_size=EXAMPLES,
        epochs=EPOCHS,
        shuffle=False,
        verbose=0,
        callbacks=[keras_largebatch.LearningRateLogger(), keras_largebatch.TrustRatioMonitor()],
    )
    return {
        "weights": [weight.tolist() for weight in model.get_weights()],
        "learning_rate": history.history["learning_rate"],
        "trust_ratio_min": history.history["trust_ratio_min"],
        "trust_ratio_max": history.history["trust_ratio_max"],
    }


def main():
    public = {name: getattr(keras_largebatch, name) for name in keras_largebatch.__all__}
    results = {name: train(optimizer) for name, optimizer in optimizers().items()}
    results["public_names"] = sorted(public)
    results["backend"] = keras.backend.backend()
    results["tensorflow_imported"] = "tensorflow" in sys.modules
    print(json.dumps(results))


if __name__ == "__main__":
    main()
