"""`ReleaseInputOnStop` and `fit_releasing_input`: a `fit` stopped early, or left by an error,
leaves no input iterator behind for the garbage collector; checked against the same `fit`
without them, which does, and on the harness, whose runs an interruption ends."""

import gc

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src.trainers.epoch_iterator import EpochIterator

from keras_largebatch.training import trainer
from keras_largebatch.training.input_release import ReleaseInputOnStop, fit_releasing_input
from tests.support.runs import Interrupt, InterruptAfter
from tests.support.toy_recipe import ToyRegression, load


class _StopAtThirdStep(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 2:
            self.model.stop_training = True


def _epoch_iterators_left(run):
    """The epoch iterators alive after ``run()`` (and after an `Interrupt` it raises is
    dropped), with automatic collection off so that a reference cycle stays visible; the
    cycle, if any, is collected at once, while its input iterator is young."""
    gc.collect()
    gc.disable()
    try:
        try:
            run()
        except Interrupt:
            pass
        return sum(isinstance(thing, EpochIterator) for thing in gc.get_objects())
    finally:
        gc.enable()
        gc.collect()


def _fit(callbacks, steps, fit=None):
    """``run()`` for a `fit` of ``steps`` steps on a prefetched, repeated dataset, called as
    ``fit(model, dataset, ...)`` (default: ``model.fit``)."""
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
    fit = fit or type(model).fit
    return lambda: fit(
        model,
        dataset,
        epochs=1,
        steps_per_epoch=steps,
        callbacks=callbacks,
        shuffle=False,
        verbose=0,
    )


@pytest.mark.parametrize("release", [False, True])
def test_an_early_stopped_fit_leaves_its_input_only_without_the_callback(release):
    callbacks = [_StopAtThirdStep()] + ([ReleaseInputOnStop()] if release else [])
    assert _epoch_iterators_left(_fit(callbacks, steps=20)) == (0 if release else 1)


@pytest.mark.parametrize("releasing", [False, True])
def test_a_fit_left_by_an_error_leaves_its_input_only_without_fit_releasing_input(releasing):
    # The callback alone cannot see the error: `fit_releasing_input` wraps the `fit` in it.
    callbacks = [InterruptAfter(3)] + ([] if releasing else [ReleaseInputOnStop()])
    run = _fit(callbacks, steps=20, fit=fit_releasing_input if releasing else None)
    assert _epoch_iterators_left(run) == (0 if releasing else 1)


def test_a_fit_that_runs_its_epochs_out_is_left_alone():
    assert _epoch_iterators_left(_fit([ReleaseInputOnStop()], steps=5)) == 0


def test_an_interrupted_harness_run_leaves_no_input_behind(tmp_path):
    config = load(tmp_path)

    def run():
        trainer.train(config, ToyRegression(config), [InterruptAfter(3)], lambda line: None)

    assert _epoch_iterators_left(run) == 0
