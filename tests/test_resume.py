"""Stopping `model.fit` and resuming gives bitwise the uninterrupted run (issue: correct at scale).

The interruption lands in the middle of an accumulation cycle (3 micro-batches per
optimizer step, stopped after micro-batch 4), so the accumulators, the micro-step counter,
the schedule's step, the slots and the recorded trust ratios must all come back. Data is
fed in a fixed order, so the resumed run sees the same batches as the uninterrupted one.
"""

import keras
import numpy as np
import pytest

from keras_largebatch import LAMB, LARS
from keras_largebatch.training.input_release import fit_releasing_input
from tests.support.regression import build_model, regression_data
from tests.support.runs import Interrupt, InterruptAfter

ACCUMULATION = 3
BATCH_SIZE = 8
BATCHES_PER_EPOCH = 4
EPOCHS = 3

OPTIMIZERS = {
    "LAMB": lambda: LAMB(
        learning_rate=keras.optimizers.schedules.PolynomialDecay(
            1e-2, decay_steps=4, end_learning_rate=1e-3
        ),
        weight_decay=0.01,
        record_trust_ratio=True,
        gradient_accumulation_steps=ACCUMULATION,
    ),
    "LARS": lambda: LARS(
        learning_rate=keras.optimizers.schedules.PolynomialDecay(
            0.1, decay_steps=4, end_learning_rate=0.01
        ),
        trust_coefficient=0.1,
        weight_decay=1e-2,
        nesterov=True,
        record_trust_ratio=True,
        gradient_accumulation_steps=ACCUMULATION,
    ),
}


def data():
    return regression_data(BATCHES_PER_EPOCH * BATCH_SIZE)


def compiled_model(name):
    model = build_model()
    model.compile(optimizer=OPTIMIZERS[name](), loss="mse")
    return model


def fit(model, epochs, callbacks=()):
    features, targets = data()
    # An interrupted fit drops its input at once, not in a later collection of the suite.
    fit_releasing_input(
        model,
        features,
        y=targets,
        batch_size=BATCH_SIZE,
        epochs=epochs,
        shuffle=False,
        verbose=0,
        callbacks=callbacks,
    )


def state(model):
    """Weights and every optimizer variable (step counters, slots, accumulators, trust ratios).

    Keyed by position: variable names carry each model instance's own layer names.
    """
    values = {f"weight/{i}": np.array(v.numpy()) for i, v in enumerate(model.trainable_variables)}
    values.update(
        {f"optimizer/{i}": np.array(v.numpy()) for i, v in enumerate(model.optimizer.variables)}
    )
    return values


def assert_bitwise_equal(actual, expected):
    assert sorted(actual) == sorted(expected)
    for key in expected:
        np.testing.assert_array_equal(actual[key], expected[key], err_msg=key)


@pytest.fixture(scope="module")
def uninterrupted():
    cache = {}

    def result(name):
        if name not in cache:
            model = compiled_model(name)
            fit(model, EPOCHS)
            cache[name] = state(model)
        return cache[name]

    return result


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_backup_and_restore_resumes_mid_accumulation_bitwise(name, uninterrupted, tmp_path):
    # Keras 3.15's BackupAndRestore restores the epoch only: with save_freq in batches it
    # would reload mid-epoch weights and replay the epoch from its first batch. So it backs
    # up at epoch ends, and an epoch of 4 micro-batches ends mid-cycle (4 = 3 + 1).
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    interrupted = compiled_model(name)
    with pytest.raises(Interrupt):
        fit(interrupted, EPOCHS, callbacks=[backup, InterruptAfter(BATCHES_PER_EPOCH + 2)])
    assert int(interrupted.optimizer._iterations.numpy()) == BATCHES_PER_EPOCH + 2

    resumed = compiled_model(name)
    restore = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    counter = InterruptAfter(batches=-1)
    fit(resumed, EPOCHS, callbacks=[restore, counter])
    # It replayed only epochs 2 and 3 and finished where the uninterrupted run did.
    assert counter.seen == (EPOCHS - 1) * BATCHES_PER_EPOCH
    assert_bitwise_equal(state(resumed), uninterrupted(name))
    assert int(resumed.optimizer.iterations.numpy()) == EPOCHS * BATCHES_PER_EPOCH // ACCUMULATION


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_save_and_load_model_resume_mid_accumulation_bitwise(name, uninterrupted, tmp_path):
    interrupted = compiled_model(name)
    with pytest.raises(Interrupt):
        fit(interrupted, EPOCHS, callbacks=[InterruptAfter(BATCHES_PER_EPOCH)])
    # Micro-batch 4 sits in the accumulators, waiting for 5 and 6 (the next epoch's first two).
    assert any(np.any(a.numpy() != 0) for a in interrupted.optimizer._accumulated_gradients)
    path = tmp_path / "interrupted.keras"
    interrupted.save(path)

    loaded = keras.models.load_model(path)
    assert_bitwise_equal(state(loaded), state(interrupted))
    fit(loaded, EPOCHS - 1)
    assert_bitwise_equal(state(loaded), uninterrupted(name))


def unknown_length_dataset():
    import tensorflow as tf

    features, targets = data()
    # `filter` hides the length, as TFRecord pipelines do: fit then ends each epoch when the
    # iterator runs dry, after one more (failing) call of its train function.
    dataset = tf.data.Dataset.from_tensor_slices((features, targets)).batch(BATCH_SIZE)
    dataset = dataset.filter(lambda x, y: True)
    assert int(dataset.cardinality()) == tf.data.UNKNOWN_CARDINALITY
    return dataset


# Keras warns when an epoch ends on exhausted data: that is the case under test.
EXHAUSTED = pytest.mark.filterwarnings("ignore:Your input ran out of data")


@EXHAUSTED
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_epochs_ending_on_exhausted_data_count_no_extra_step(name, uninterrupted):
    model = compiled_model(name)
    model.fit(unknown_length_dataset(), epochs=EPOCHS, shuffle=False, verbose=0)
    assert_bitwise_equal(state(model), uninterrupted(name))


@EXHAUSTED
def test_keras_sgd_counts_an_extra_step_per_epoch_ending_on_exhausted_data():
    # What the base class guards against: Keras's counter increment does not wait for the
    # batch, so the failing call at each epoch's end still counts a micro-step.
    model = compiled_model("LARS")
    model.compile(
        optimizer=keras.optimizers.SGD(0.1, momentum=0.9, gradient_accumulation_steps=ACCUMULATION),
        loss="mse",
    )
    model.fit(unknown_length_dataset(), epochs=EPOCHS, shuffle=False, verbose=0)
    assert int(model.optimizer._iterations.numpy()) == EPOCHS * (BATCHES_PER_EPOCH + 1)
