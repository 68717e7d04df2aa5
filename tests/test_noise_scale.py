"""The gradient noise scale against its exact value on least squares at fixed weights.

tests/support/least_squares.py computes the truth from every per-example gradient in NumPy;
the measurement sees only the squared norms of the per-replica and global gradients (2
mirrored replicas) or of the micro-batch and accumulated gradients (TensorFlow, and JAX in a
subprocess).
"""

import json
import os
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch import LAMB, GradientNoiseScale
from tests.support import least_squares, processes

ROOT = Path(__file__).resolve().parents[1]


def two_replicas():
    # Collective all-reduce keys its groups per strategy from 1, so a second in-process
    # strategy would meet the first one's instances (of other shapes) and abort; reduction on
    # one device sums the same values without collectives.
    return tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )


def measure(strategy, batch_size, accumulation_steps=None, jit_compile="auto"):
    history = keras.callbacks.History()
    callback = GradientNoiseScale(batch_size, ema_decay=least_squares.EMA_DECAY)
    with strategy.scope():
        model = least_squares.fit(
            [callback, history], batch_size, accumulation_steps, jit_compile=jit_compile
        )
    # The rate is 0: every step measured the same weights, those the truth is computed at.
    np.testing.assert_array_equal(model.get_weights()[0], least_squares.data()[2].astype("f4"))
    return history.history["gradient_noise_scale"]


def test_two_replicas_measure_the_true_noise_scale():
    measured = measure(two_replicas(), 32)
    assert measured[-1] == pytest.approx(least_squares.true_noise_scale(), rel=0.1)


def test_two_replicas_with_accumulation_measure_the_true_noise_scale():
    # The small batch is one replica's share of a micro-batch (16), the big one an update (64).
    measured = measure(two_replicas(), 32, accumulation_steps=2)
    assert measured[-1] == pytest.approx(least_squares.true_noise_scale(), rel=0.1)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_accumulation_measures_the_true_noise_scale(jit_compile):
    measured = measure(tf.distribute.get_strategy(), 16, 2, jit_compile=jit_compile)
    assert measured[-1] == pytest.approx(least_squares.true_noise_scale(), rel=0.1)


def test_accumulation_on_jax_measures_the_true_noise_scale():
    pytest.importorskip("jax")
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
    result = processes.run(
        [sys.executable, "-m", "tests.support.least_squares"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    run = json.loads(result.stdout.strip().splitlines()[-1])
    assert not run["weights_moved"]
    assert run["measured"] == pytest.approx(least_squares.true_noise_scale(), rel=0.1)


def test_one_device_without_accumulation_is_refused_when_training_starts():
    with pytest.raises(ValueError, match="two batch sizes.*got 1 replica"):
        least_squares.fit([GradientNoiseScale(32)], 32, passes=1)


def test_other_optimizers_are_refused():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match="LAMB or LARS.*SGD"):
        model.fit(np.ones((4, 2)), np.ones((4, 1)), callbacks=[GradientNoiseScale(2)], verbose=0)


@pytest.mark.parametrize(
    "arguments, error, message",
    [
        (dict(batch_size=0), ValueError, "batch_size must be in"),
        (dict(batch_size=32.0), TypeError, "batch_size must be an integer"),
        (dict(batch_size=32, ema_decay=1.0), ValueError, r"ema_decay must be in \[0.0, 1.0\)"),
        (dict(batch_size=32, log_batches=1), TypeError, "log_batches must be True or False"),
    ],
)
def test_arguments_are_checked(arguments, error, message):
    with pytest.raises(error, match=message):
        GradientNoiseScale(**arguments)


def _train_lamb(callbacks):
    rng = np.random.default_rng(1)
    features = rng.normal(size=(64, 3)).astype("float32")
    targets = rng.normal(size=(64, 1)).astype("float32")
    keras.utils.set_random_seed(1)
    with two_replicas().scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(1)])
        model.compile(optimizer=LAMB(1e-2, weight_decay=0.01), loss="mse")
    model.fit(features, targets, batch_size=16, epochs=2, verbose=0, callbacks=callbacks)
    return model


def test_measuring_leaves_training_and_checkpoints_unchanged(tmp_path):
    plain = _train_lamb([])
    measured = _train_lamb([GradientNoiseScale(16, log_batches=True)])
    for a, b in zip(plain.get_weights(), measured.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert np.isfinite(measured.optimizer.gradient_noise_scale())
    # The averages are left out of the checkpoint: it restores into an optimizer that does
    # not measure, slots and step count included.
    path = str(tmp_path / "measured.weights.h5")
    measured.save_weights(path)
    plain.load_weights(path)
    for a, b in zip(plain.optimizer.variables, measured.optimizer.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
