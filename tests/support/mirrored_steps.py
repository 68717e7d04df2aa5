"""Fits of tests/test_steps_per_execution.py, and its collective all-reduce runs in a fresh
process: collective all-reduce keys its groups per strategy, so in a process that already made
other mirrored strategies (the test session) their instances collide.

    python -m tests.support.mirrored_steps '[["LAMB", null], ...]'

prints, per (optimizer, accumulation), the largest differences of weights and logs between 3
steps per execution (unrolled) and single steps, on one collective MirroredStrategy over 2
logical CPUs.
"""

import json
import sys

import keras
import numpy as np
import tensorflow as tf

from keras_largebatch import LAMB, LARS
from keras_largebatch.distribute import configure_logical_cpus, unroll_steps_per_execution
from tests.support.regression import build_model, regression_data

DEVICES = ["/cpu:0", "/cpu:1"]
OPTIMIZERS = {
    "LAMB": lambda accumulation: LAMB(
        0.02,
        weight_decay=0.01,
        gradient_accumulation_steps=None if accumulation == 1 else accumulation,
    ),
    "LARS": lambda accumulation: LARS(
        0.5,
        weight_decay=1e-4,
        gradient_accumulation_steps=None if accumulation == 1 else accumulation,
    ),
    "SGD": lambda accumulation: keras.optimizers.SGD(
        0.01, momentum=0.9, gradient_accumulation_steps=None if accumulation == 1 else accumulation
    ),
}


class BatchLogs(keras.callbacks.Callback):
    """The logs each call of the train function returns, by (epoch, last batch of the call):
    what callbacks see during an epoch (the history holds only each epoch's end)."""

    def __init__(self):
        super().__init__()
        self.logs, self.epoch = {}, None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self.logs[self.epoch, batch] = {name: float(value) for name, value in logs.items()}


def fit(strategy, optimizer, accumulation, steps_per_execution):
    """Weights and the logs of each train call (`BatchLogs`) of 2 epochs of 6 steps of the
    seeded regression at batch 8."""
    features, targets = regression_data(64)
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = build_model()
        model.compile(
            optimizer=OPTIMIZERS[optimizer](accumulation),
            loss="mean_squared_error",
            metrics=["mean_absolute_error"],
            steps_per_execution=steps_per_execution,
        )
    unroll_steps_per_execution(model)
    dataset = tf.data.Dataset.from_tensor_slices((features, targets)).batch(8).repeat()
    batch_logs = BatchLogs()
    model.fit(
        strategy.experimental_distribute_dataset(dataset),
        epochs=2,
        steps_per_epoch=6,
        callbacks=[batch_logs],
        verbose=0,
    )
    return [variable.numpy() for variable in model.weights], batch_logs.logs


def differences(strategy, optimizer, accumulation, steps_per_execution=3):
    """Largest absolute differences of the weights and of the logs between
    ``steps_per_execution`` steps per execution and single steps. With 2 accumulation steps,
    3 steps per execution put an update inside an execution and one on its first step, and
    carry the accumulated gradient from one execution into the next."""
    single, single_logs = fit(strategy, optimizer, accumulation, 1)
    unrolled, unrolled_logs = fit(strategy, optimizer, accumulation, steps_per_execution)
    # Logs at the end of each call (2 per epoch), to compare with the single steps' there.
    assert len(single) > 4 and len(unrolled_logs) == 2 * 6 // steps_per_execution
    assert set(unrolled_logs) < set(single_logs), (sorted(unrolled_logs), sorted(single_logs))
    weights = max(float(np.max(np.abs(a - b))) for a, b in zip(single, unrolled))
    logs = max(
        abs(value - single_logs[call][name])
        for call, values in unrolled_logs.items()
        for name, value in values.items()
    )
    return {"weights": weights, "logs": logs}


def main(argv):
    configure_logical_cpus(len(DEVICES))
    strategy = tf.distribute.MirroredStrategy(DEVICES)  # collective all-reduce, the default
    print(json.dumps({f"{o}/{a}": differences(strategy, o, a) for o, a in json.loads(argv[0])}))


if __name__ == "__main__":
    main(sys.argv[1:])
