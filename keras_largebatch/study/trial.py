"""One trial: train the CNN at one (optimizer, batch size, learning rate) for the epoch budget,
evaluating the test set at fixed points, and stop early once it diverges."""

import math
import time

import keras
import numpy as np
import tensorflow as tf

from keras_largebatch.schedules import WarmupPolynomialDecay
from keras_largebatch.study import measures
from keras_largebatch.study.model import simple_cnn
from keras_largebatch.study.optimizers import OPTIMIZERS
from keras_largebatch.training.optimizer_factory import LAYERWISE_OPTIMIZERS, create_optimizer

EVALUATION_BATCH_SIZE = 2000


def build_optimizer(name, learning_rate, weight_decay, gradient_accumulation_steps=1):
    """The study's optimizer ``name`` (a key of `OPTIMIZERS`) with ``learning_rate`` (a float or
    a schedule) and ``weight_decay``, each optimizer's own decay: decoupled in Keras's SGD and
    AdamW and in LAMB, added to the gradient in LARS. Keras's SGD and AdamW decay every
    variable; LAMB and LARS skip biases and normalization parameters (their default rule)."""
    spec = OPTIMIZERS[name]
    return create_optimizer(
        spec.factory_name,
        learning_rate,
        weight_decay=weight_decay,
        exclude_from_weight_decay=None if spec.factory_name in LAYERWISE_OPTIMIZERS else [],
        gradient_accumulation_steps=gradient_accumulation_steps,
        **spec.hyperparameters,
    )


def train_dataset(data, batch_size, seed):
    """Shuffled full batches, repeated: every step sees ``batch_size`` examples, each pass
    covers the whole training set in a new order. The indices are shuffled, not the images,
    so that no shuffle buffer of images is filled before the first step."""
    images = tf.constant(data.train_images)
    labels = tf.constant(data.train_labels)
    count = len(data.train_images)
    dataset = tf.data.Dataset.range(count).shuffle(count, seed=seed).repeat()
    dataset = dataset.batch(batch_size, drop_remainder=True)
    dataset = dataset.map(lambda indices: (tf.gather(images, indices), tf.gather(labels, indices)))
    return dataset.prefetch(tf.data.AUTOTUNE)


def learning_rate_schedule(peak_learning_rate, total_steps, warmup_fraction):
    """Linear warmup over ``warmup_fraction`` of the steps, then linear decay to 0."""
    # warmup_fraction < 1, so at least the last step decays.
    warmup_steps = math.floor(warmup_fraction * total_steps)
    return WarmupPolynomialDecay(peak_learning_rate, total_steps, warmup_steps)


def compile_model(optimizer, seed):
    """The CNN with weights drawn from ``seed``, compiled with ``optimizer``."""
    keras.utils.set_random_seed(seed)
    model = simple_cnn()
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def evaluate_test_set(model, data):
    """Accuracy and mean cross-entropy of ``model`` on the test set."""
    # Called eagerly: a `predict` function per trial's model would be traced again each time.
    logits = np.concatenate(
        [
            keras.ops.convert_to_numpy(
                model(data.test_images[start : start + EVALUATION_BATCH_SIZE])
            )
            for start in range(0, len(data.test_images), EVALUATION_BATCH_SIZE)
        ]
    ).astype(np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    labels = data.test_labels
    loss = -log_probabilities[np.arange(len(labels)), labels].mean()
    accuracy = float((logits.argmax(axis=1) == labels).mean())
    return accuracy, float(loss)


class _Evaluations(keras.callbacks.Callback):
    """Evaluates the test set after the given steps; stops training once it diverges: a
    non-finite training loss at any step, or a test loss above ``divergence_loss``."""

    def __init__(self, data, steps, divergence_loss):
        super().__init__()
        self.data = data
        self.steps = set(steps)
        self.divergence_loss = divergence_loss
        self.evaluations = []
        self.diverged = False
        self.steps_trained = 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps_trained = batch + 1
        if not math.isfinite(float(logs["loss"])):
            self._stop()
        elif self.steps_trained in self.steps:
            accuracy, loss = evaluate_test_set(self.model, self.data)
            if measures.is_diverged(loss, self.divergence_loss):
                self._stop()
            else:
                self.evaluations.append((self.steps_trained, accuracy))

    def _stop(self):
        self.diverged = True
        self.model.stop_training = True


def run_trial(trial, config, data):
    """Trains ``trial`` (a `grid.Trial`) under ``config`` (a `StudyConfig`) on ``data`` (a
    `data.StudyData`); returns its ledger row (see `ledger.COLUMNS`)."""
    started = time.perf_counter()
    steps_per_epoch = len(data.train_images) // trial.batch_size
    total_steps = config.epochs * steps_per_epoch
    schedule = learning_rate_schedule(trial.learning_rate, total_steps, config.warmup_fraction)
    model = compile_model(
        build_optimizer(trial.optimizer, schedule, config.weight_decay), config.seed
    )
    evaluations = _Evaluations(
        data,
        measures.evaluation_steps(total_steps, config.evaluations_per_epoch * config.epochs),
        config.divergence_loss,
    )
    model.fit(
        train_dataset(data, trial.batch_size, config.seed),
        epochs=1,
        steps_per_epoch=total_steps,
        callbacks=[evaluations],
        shuffle=False,
        verbose=0,
    )
    final_accuracy = None
    if not evaluations.diverged:
        final_accuracy = evaluations.evaluations[-1][1]
    return {
        "kind": "trial",
        "optimizer": trial.optimizer,
        "batch_size": trial.batch_size,
        "learning_rate_index": trial.learning_rate_index,
        "learning_rate": trial.learning_rate,
        "scaling_rule": trial.scaling_rule,
        "total_steps": total_steps,
        "steps_trained": evaluations.steps_trained,
        "final_test_accuracy": final_accuracy,
        "steps_to_target": measures.steps_to_target(
            evaluations.evaluations, config.target_accuracy
        ),
        "diverged": evaluations.diverged,
        "test_accuracy_curve": evaluations.evaluations,
        "gradient_noise_scale": None,
        "seconds": time.perf_counter() - started,
    }
