"""One trial: train the CNN at one (optimizer, batch size, settings, seed) for its step budget,
evaluating the validation set at fixed points; a search trial stops at the last target, any
trial at divergence; a confirmation trial ends with the test set, and at the smallest batch
with seed 0 measures the gradient noise scale along the way."""

import math
import time

import keras
import numpy as np
import tensorflow as tf

from keras_largebatch.optimizers import biases_and_norms
from keras_largebatch.schedules import WarmupPolynomialDecay
from keras_largebatch.study import measures, protocol
from keras_largebatch.study.model import simple_cnn
from keras_largebatch.study.noise import NoiseScaleProbe
from keras_largebatch.study.optimizers import peak_learning_rate
from keras_largebatch.training.input_release import fit_releasing_input
from keras_largebatch.training.optimizer_factory import create_optimizer

EVALUATION_BATCH_SIZE = 2000


def learning_rate_schedule(peak_learning_rate, total_steps, warmup_fraction):
    """Linear warmup over ``warmup_fraction`` of the steps, then linear decay to 0."""
    # warmup_fraction < 1, so at least the last step decays.
    return WarmupPolynomialDecay(
        peak_learning_rate, total_steps, math.floor(warmup_fraction * total_steps)
    )


def build_optimizer(optimizer, settings, total_steps):
    """The study's ``optimizer`` (a key of `optimizers.OPTIMIZERS`) at ``settings`` (a trial's
    settings), its rate following `learning_rate_schedule` over ``total_steps``; no weight
    decay, and no step skipped for a non-finite gradient (as the Keras baselines): a trial
    that produces one diverges."""
    schedule = learning_rate_schedule(
        peak_learning_rate(optimizer, settings), total_steps, settings["warmup_fraction"]
    )
    first_moment = 1 - settings["one_minus_momentum"]
    if optimizer == "sgd_momentum":
        return create_optimizer(
            "sgd", schedule, momentum=first_moment, nesterov=settings["nesterov"]
        )
    if optimizer == "adamw":
        return create_optimizer("adamw", schedule, beta_1=first_moment, beta_2=settings["beta_2"])
    if optimizer == "lamb":
        return create_optimizer(
            "lamb",
            schedule,
            beta_1=first_moment,
            beta_2=settings["beta_2"],
            skip_non_finite_steps=False,
            # The rule the study's first edition ran with (then LAMB's default).
            exclude_from_layer_adaptation=biases_and_norms,
        )
    return create_optimizer(
        "lars",
        schedule,
        skip_non_finite_steps=False,
        momentum=first_moment,
        trust_coefficient=settings["trust_coefficient"],
        # [] adapts every variable; the study's trials without bias adaptation leave biases
        # and norms out.
        exclude_from_layer_adaptation=[] if settings["bias_adaptation"] else biases_and_norms,
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


def compile_model(optimizer, seed):
    """The CNN with weights drawn from ``seed``, compiled with ``optimizer``."""
    keras.utils.set_random_seed(seed)
    model = simple_cnn()
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


class Evaluator:
    """Accuracy and mean cross-entropy of a model on a set of images, its forward pass traced
    once per model (a trial evaluates dozens of times) in chunks of `EVALUATION_BATCH_SIZE`."""

    def __init__(self, model):
        self._logits = tf.function(lambda images: model(images, training=False))

    def __call__(self, images, labels):
        """``(accuracy, loss)`` on ``images`` and ``labels``."""
        logits = np.concatenate(
            [
                self._logits(tf.constant(images[start : start + EVALUATION_BATCH_SIZE])).numpy()
                for start in range(0, len(images), EVALUATION_BATCH_SIZE)
            ]
        ).astype(np.float64)
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        loss = -log_probabilities[np.arange(len(labels)), labels].mean()
        accuracy = float((logits.argmax(axis=1) == labels).mean())
        return accuracy, float(loss)


def noise_scale_evaluations(evaluations, points):
    """The indices of the ``points`` evaluations (of ``evaluations``) spread evenly from the
    first to the last at which the noise scale is measured."""
    if points <= 0:
        return set()
    if points == 1:
        return {evaluations - 1}
    return {round(i * (evaluations - 1) / (points - 1)) for i in range(points)}


class _Evaluations(keras.callbacks.Callback):
    """Evaluates the validation set with ``evaluate`` (an `Evaluator`) after the given
    steps; stops training at divergence (a non-finite training loss at any step, or a
    validation loss above ``divergence_loss``) and, when ``stop_accuracy`` is given, once an
    evaluation reaches it. ``probe`` (a
    `NoiseScaleProbe`) measures at the evaluations numbered in ``probe_at`` and at the first
    one reaching ``probe_target``."""

    def __init__(
        self, evaluate, data, steps, divergence_loss, stop_accuracy, probe, probe_at, probe_target
    ):
        super().__init__()
        self.evaluate = evaluate
        self.data = data
        self.steps = steps
        self.divergence_loss = divergence_loss
        self.stop_accuracy = stop_accuracy
        self.probe = probe
        self.probe_at = probe_at
        self.probe_target = probe_target
        self.curve = []
        self.noise_scale = []
        self.stop = "budget"
        self.steps_trained = 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps_trained = batch + 1
        if not math.isfinite(float(logs["loss"])):
            self._stop("diverged")
            return
        if self.steps_trained not in self.steps:
            return
        accuracy, loss = self.evaluate(self.data.validation_images, self.data.validation_labels)
        if measures.is_diverged(loss, self.divergence_loss):
            self._stop("diverged")
            return
        self.curve.append((self.steps_trained, accuracy, loss))
        first_at_target = accuracy >= self.probe_target and not any(
            measured_accuracy >= self.probe_target
            for _, _, measured_accuracy, *_ in self.noise_scale
        )
        if self.probe is not None and (len(self.curve) - 1 in self.probe_at or first_at_target):
            training_loss, value, low, high = self.probe.measure(seed=self.steps_trained)
            self.noise_scale.append((self.steps_trained, training_loss, accuracy, value, low, high))
        if self.stop_accuracy is not None and accuracy >= self.stop_accuracy:
            self._stop("target")

    def _stop(self, reason):
        self.stop = reason
        self.model.stop_training = True


def run_trial(trial, config, data):
    """Trains ``trial`` (a `protocol.Trial`) under ``config`` (a `StudyConfig`) on ``data``
    (a `data.StudyData`); returns its ledger row (see `ledger.COLUMNS`)."""
    started = time.perf_counter()
    budget = trial.step_budget
    model = compile_model(build_optimizer(trial.optimizer, trial.settings, budget), trial.seed)
    confirmation = trial.phase == protocol.CONFIRMATION
    steps = measures.evaluation_steps(budget, config.evaluations_per_budget)
    probe = None
    smallest = trial.batch_size == config.batch_sizes[0]
    if confirmation and trial.seed == 0 and smallest and config.noise_scale_points:
        probe = NoiseScaleProbe(
            model,
            data,
            trial.batch_size,
            config.noise_scale_micro_batches,
            config.bootstrap_samples,
        )
    evaluate = Evaluator(model)
    evaluations = _Evaluations(
        evaluate,
        data,
        set(steps),
        config.divergence_loss,
        stop_accuracy=None if confirmation else config.targets[-1],
        probe=probe,
        probe_at=noise_scale_evaluations(len(steps), config.noise_scale_points),
        probe_target=config.primary_target,
    )
    fit_releasing_input(
        model,
        train_dataset(data, trial.batch_size, trial.seed),
        epochs=1,
        steps_per_epoch=budget,
        callbacks=[evaluations],
        shuffle=False,
        verbose=0,
    )
    test_accuracy = test_loss = None
    if confirmation and evaluations.stop != "diverged":
        test_accuracy, test_loss = evaluate(data.test_images, data.test_labels)
    return {
        "key": trial.key(),
        "phase": trial.phase,
        "optimizer": trial.optimizer,
        "batch_size": trial.batch_size,
        "step_budget": budget,
        "index": trial.index,
        "seed": trial.seed,
        "point": trial.point,
        "settings": trial.settings,
        "steps_trained": evaluations.steps_trained,
        "stop": evaluations.stop,
        "curve": evaluations.curve,
        "test_accuracy": test_accuracy,
        "test_loss": test_loss,
        "noise_scale": evaluations.noise_scale if probe is not None else None,
        "seconds": time.perf_counter() - started,
    }
