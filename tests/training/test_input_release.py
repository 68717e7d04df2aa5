"""`ReleaseInputOnStop`: a `fit` stopped early leaves no input iterator behind for the garbage
collector; checked against the same `fit` without it, which does."""

import gc

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src.trainers.epoch_iterator import EpochIterator

from keras_largebatch.training.input_release import ReleaseInputOnStop


class _StopAtThirdStep(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 2:
            self.model.stop_training = True


def _epoch_iterators_left_after_fit(callbacks, steps):
    """The epoch iterators alive after a `fit` of ``steps`` steps on a prefetched, repeated
    dataset, with automatic collection off so that a reference cycle stays visible."""
    features = tf.constant(np.random.default_rng(0).random((64, 4), dtype=np.float32))
    dataset = (
        tf.data.Dataset.range(64)
        .repeat()
        .batch(8)
        .map(lambda index: (tf.gather(features, index), tf.gather(features, index)[:, :1]))
        .prefetch(tf.data.AUTOTUNE)
    )
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    gc.collect()
    gc.disable()
    try:
        model.fit(
            dataset, epochs=1, steps_per_epoch=steps, callbacks=callbacks, shuffle=False, verbose=0
        )
        return sum(isinstance(thing, EpochIterator) for thing in gc.get_objects())
    finally:
        gc.enable()


@pytest.mark.parametrize("release", [False, True])
def test_an_early_stopped_fit_leaves_its_input_only_without_the_callback(release):
    callbacks = [_StopAtThirdStep()] + ([ReleaseInputOnStop()] if release else [])
    assert _epoch_iterators_left_after_fit(callbacks, steps=20) == (0 if release else 1)


def test_a_fit_that_runs_its_epochs_out_is_left_alone():
    assert _epoch_iterators_left_after_fit([ReleaseInputOnStop()], steps=5) == 0
