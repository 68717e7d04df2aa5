"""Callbacks in real `model.fit` runs, checked against hand-computed trajectories.

The model is `y = x @ w` with `x = 1` and loss `y`, so the gradient of
`w` is exactly 1 at every step and the weight's trajectory is a closed-form
function of the learning rates the optimizer used.
"""

import glob
import json
import os
import statistics
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch.callbacks import LearningRateLogger, LearningRateWarmup, TrustRatioMonitor
from keras_largebatch.optimizers import LAMB, LARS, biases_and_norms
from keras_largebatch.schedules import WarmupPolynomialDecay
from tests.support import processes


def constant_gradient_model():
    return keras.Sequential(
        [keras.Input((1,)), keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")]
    )


def constant_gradient_loss(y_true, y_pred):
    # Per sample, so that Keras averages over the global batch (a scalar
    # loss would be summed over replicas under a tf.distribute strategy).
    return y_pred[:, 0]


def fit(model, optimizer, callbacks, steps, epochs=1, steps_per_execution=1):
    model.compile(
        optimizer=optimizer, loss=constant_gradient_loss, steps_per_execution=steps_per_execution
    )
    return model.fit(
        np.ones((steps, 1)),
        np.zeros((steps, 1)),
        batch_size=1,
        epochs=epochs,
        shuffle=False,
        verbose=0,
        callbacks=callbacks,
    )


class WeightRecorder(keras.callbacks.Callback):
    """The scalar weight after every batch hook (once per execution)."""

    def __init__(self):
        super().__init__()
        self.weights = []

    def on_train_batch_end(self, batch, logs=None):
        self.weights.append(float(self.model.get_weights()[0][0, 0]))


class RateRecorder(keras.callbacks.Callback):
    """The optimizer's rate at each batch hook, after the callbacks before it."""

    def __init__(self):
        super().__init__()
        self.rates = []

    def on_train_batch_begin(self, batch, logs=None):
        self.rates.append(float(self.model.optimizer.learning_rate))


def warmup_sgd_reference(
    steps,
    target,
    initial,
    warmup,
    momentum,
    compiled_rate,
    steps_per_execution,
    momentum_correction,
    lars=False,
):
    """Weights after each execution for SGD (or LARS with ratio 1) and gradient 1.

    The callback sets lr(t0) = initial + (target - initial) * min(t0 / W, 1) at
    the first step t0 of each execution; momentum correction rescales the
    velocity by lr_new / lr_old when lr_old > 0.
    Keras SGD: v = m v - lr g, w = w + v.   LARS: v = m v + lr g, w = w - v.
    """
    rate, velocity, weight, after_execution = compiled_rate, 0.0, 0.0, []
    for step in range(steps):
        if step % steps_per_execution == 0:
            new_rate = initial + (target - initial) * min(step / warmup, 1.0)
            if momentum_correction and rate > 0:
                velocity *= new_rate / rate
            rate = new_rate
        if lars:
            velocity = momentum * velocity + rate
            weight -= velocity
        else:
            velocity = momentum * velocity - rate
            weight += velocity
        if step % steps_per_execution == steps_per_execution - 1:
            after_execution.append(weight)
    return after_execution


@pytest.mark.parametrize(
    "steps_per_execution, momentum_correction", [(1, False), (1, True), (3, False), (3, True)]
)
def test_warmup_sgd_trajectory(steps_per_execution, momentum_correction):
    weights = WeightRecorder()
    warmup = LearningRateWarmup(
        warmup_steps=8, initial_learning_rate=0.01, momentum_correction=momentum_correction
    )
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    fit(
        constant_gradient_model(),
        optimizer,
        [warmup, weights],
        steps=12,
        steps_per_execution=steps_per_execution,
    )
    expected = warmup_sgd_reference(
        12,
        target=0.1,
        initial=0.01,
        warmup=8,
        momentum=0.9,
        compiled_rate=0.1,
        steps_per_execution=steps_per_execution,
        momentum_correction=momentum_correction,
    )
    np.testing.assert_allclose(weights.weights, expected, rtol=1e-5)
    assert float(optimizer.learning_rate) == pytest.approx(0.1)


def test_warmup_rate_changes_once_per_execution():
    # steps_per_execution=4, warmup 10: the hooks see steps 0, 4, 8, 12 and
    # the last execution starts past the warmup, which must still end it.
    rates = RateRecorder()
    warmup = LearningRateWarmup(warmup_steps=10)
    fit(
        constant_gradient_model(),
        keras.optimizers.SGD(0.2),
        [warmup, rates],
        steps=16,
        steps_per_execution=4,
    )
    assert rates.rates == pytest.approx([0.0, 0.2 * 4 / 10, 0.2 * 8 / 10, 0.2])


def test_warmup_momentum_correction_with_lars():
    weights = WeightRecorder()
    warmup = LearningRateWarmup(
        warmup_steps=5, initial_learning_rate=0.02, momentum_correction=True
    )
    # Every variable excluded from layer adaptation: the trust ratio is 1.
    optimizer = LARS(0.1, momentum=0.9, exclude_from_layer_adaptation=[".*"])
    fit(constant_gradient_model(), optimizer, [warmup, weights], steps=8)
    expected = warmup_sgd_reference(
        8,
        0.1,
        0.02,
        5,
        0.9,
        compiled_rate=0.1,
        steps_per_execution=1,
        momentum_correction=True,
        lars=True,
    )
    np.testing.assert_allclose(weights.weights, expected, rtol=1e-5)


def test_warmup_in_epochs_and_across_fit_calls():
    # 4 steps per epoch from fit, 1.5 warmup epochs = 6 steps; the second
    # fit continues from the optimizer's step and keeps the first target.
    rates = RateRecorder()
    warmup = LearningRateWarmup(warmup_epochs=1.5)
    model = constant_gradient_model()
    fit(model, keras.optimizers.SGD(0.3), [warmup, rates], steps=4, epochs=1)
    model.fit(
        np.ones((4, 1)),
        np.zeros((4, 1)),
        batch_size=1,
        epochs=1,
        verbose=0,
        callbacks=[warmup, rates],
    )
    assert rates.rates == pytest.approx([0.3 * t / 6 for t in range(6)] + [0.3, 0.3])


def test_warmup_with_explicit_steps_per_epoch_and_target():
    rates = RateRecorder()
    warmup = LearningRateWarmup(
        warmup_epochs=1, steps_per_epoch=2, target_learning_rate=0.5, initial_learning_rate=0.1
    )
    fit(constant_gradient_model(), keras.optimizers.SGD(0.01), [warmup, rates], steps=3)
    assert rates.rates == pytest.approx([0.1, 0.3, 0.5])


def test_warmup_refuses_a_schedule():
    schedule = WarmupPolynomialDecay(0.1, total_steps=10, warmup_steps=2)
    with pytest.raises(ValueError, match="was given a schedule or callable as its learning_rate"):
        fit(
            constant_gradient_model(),
            keras.optimizers.SGD(schedule),
            [LearningRateWarmup(warmup_steps=5)],
            steps=2,
        )


@pytest.mark.parametrize(
    "optimizer, message",
    [
        (keras.optimizers.Adam(0.1), "got Adam with momentum=None"),
        (keras.optimizers.SGD(0.1), "got SGD with momentum=0.0"),
    ],
)
def test_momentum_correction_refuses_unsupported_optimizers(optimizer, message):
    with pytest.raises(ValueError, match=message):
        fit(
            constant_gradient_model(),
            optimizer,
            [LearningRateWarmup(warmup_steps=5, momentum_correction=True)],
            steps=2,
        )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {},
            "give exactly one of warmup_steps and warmup_epochs, "
            "got warmup_steps=None, warmup_epochs=None",
        ),
        (
            {"warmup_steps": 5, "warmup_epochs": 1},
            "give exactly one of warmup_steps and warmup_epochs",
        ),
        ({"warmup_steps": 0}, "warmup_steps must be in (0, inf], got 0"),
        ({"warmup_epochs": -1}, "warmup_epochs must be in (0, inf], got -1"),
        (
            {"warmup_steps": 5, "steps_per_epoch": 10},
            "steps_per_epoch is only used with warmup_epochs",
        ),
        (
            {"warmup_steps": 5, "initial_learning_rate": -0.1},
            "initial_learning_rate must be in [0, inf], got -0.1",
        ),
        (
            {"warmup_steps": 5, "target_learning_rate": 0},
            "target_learning_rate must be in (0, inf], got 0",
        ),
    ],
)
def test_warmup_bad_arguments(kwargs, message):
    with pytest.raises(ValueError) as error:
        LearningRateWarmup(**kwargs)
    assert message in str(error.value)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"warmup_steps": "100"}, "warmup_steps must be a number, got '100' of type str"),
        (
            {"warmup_steps": 5, "momentum_correction": "yes"},
            "momentum_correction must be True or False, got 'yes'",
        ),
    ],
)
def test_warmup_arguments_of_the_wrong_type(kwargs, message):
    with pytest.raises(TypeError) as error:
        LearningRateWarmup(**kwargs)
    assert message in str(error.value)


def test_warmup_epochs_needs_known_steps_per_epoch():
    # A filtered dataset has an unknown length, so fit cannot report its steps.
    dataset = (
        tf.data.Dataset.from_tensors((np.ones((1, 1)), np.zeros((1, 1))))
        .repeat(2)
        .filter(lambda x, y: True)
    )
    model = constant_gradient_model()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=constant_gradient_loss)
    with pytest.raises(ValueError, match="pass steps_per_epoch"):
        model.fit(
            dataset,
            epochs=1,
            shuffle=False,
            verbose=0,
            callbacks=[LearningRateWarmup(warmup_epochs=1)],
        )


def test_learning_rate_logger_with_a_schedule():
    # 3 epochs of 4 steps; at the end of epoch e the rate is schedule(4 (e + 1)).
    schedule = WarmupPolynomialDecay(0.1, total_steps=12, warmup_steps=4, power=2.0)

    def reference(step):
        return 0.1 * step / 4 if step < 4 else 0.1 * (1 - (step - 4) / 8) ** 2

    batch_logs = []

    class BatchLogs(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            batch_logs.append(logs["learning_rate"])

    history = fit(
        constant_gradient_model(),
        keras.optimizers.SGD(schedule),
        [LearningRateLogger(log_batches=True), BatchLogs()],
        steps=4,
        epochs=3,
    )
    assert history.history["learning_rate"] == pytest.approx(
        [reference(4), reference(8), reference(12)], abs=1e-8
    )
    assert batch_logs == pytest.approx([reference(t + 1) for t in range(12)], abs=1e-8)


def test_learning_rate_logger_with_warmup_callback_epoch_only():
    history = fit(
        constant_gradient_model(),
        keras.optimizers.SGD(0.4),
        [LearningRateWarmup(warmup_steps=8), LearningRateLogger()],
        steps=3,
        epochs=2,
    )
    # The rate set before the last step of each epoch: steps 2 and 5.
    assert history.history["learning_rate"] == pytest.approx([0.4 * 2 / 8, 0.4 * 5 / 8])


class FixedTrustRatioSGD(keras.optimizers.SGD):
    """Stands in for a recording optimizer, with ratios known in advance."""

    record_trust_ratio = True

    def trust_ratios(self):
        return {"dense/kernel": 0.5, "dense/bias": 2.0, "norm/gamma": 1.0, "out/kernel": 0.1}


def read_events(log_dir):
    """{tag: [(step, value), ...]} from every event file under log_dir."""
    events = {}
    for path in sorted(glob.glob(f"{log_dir}/**/events.out.tfevents.*", recursive=True)):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                events.setdefault(value.tag, []).append((event.step, tf.make_ndarray(value.tensor)))
    return events


def test_trust_ratio_monitor_statistics_logs_and_events(tmp_path):
    monitor = TrustRatioMonitor(log_dir=str(tmp_path), num_extremes=2, histogram_buckets=4)
    history = fit(constant_gradient_model(), FixedTrustRatioSGD(0.1), [monitor], steps=2, epochs=2)
    # Sorted ratios 0.1, 0.5, 1.0, 2.0: median (0.5 + 1.0) / 2.
    assert history.history["trust_ratio_min"] == pytest.approx([0.1, 0.1])
    assert history.history["trust_ratio_median"] == pytest.approx([0.75, 0.75])
    assert history.history["trust_ratio_max"] == pytest.approx([2.0, 2.0])
    assert monitor.records[-1]["smallest"] == [("out/kernel", 0.1), ("dense/kernel", 0.5)]
    assert monitor.records[-1]["largest"] == [("dense/bias", 2.0), ("norm/gamma", 1.0)]

    events = read_events(tmp_path)
    assert [step for step, _ in events["trust_ratio/min"]] == [0, 1]
    assert [float(value) for _, value in events["trust_ratio/min"]] == pytest.approx([0.1, 0.1])
    assert [float(value) for _, value in events["trust_ratio/median"]] == pytest.approx(
        [0.75, 0.75]
    )
    assert [float(value) for _, value in events["trust_ratio/max"]] == pytest.approx([2.0, 2.0])
    _, histogram = events["trust_ratio/all"][-1]
    # 4 equal buckets over [0.1, 2.0]: 0.1 and 0.5 in the first, 1.0 in the second, 2.0 in the last.
    np.testing.assert_allclose(histogram[:, 0], [0.1, 0.575, 1.05, 1.525])
    np.testing.assert_allclose(histogram[:, 2], [2, 1, 0, 1])
    smallest_text = events["trust_ratio/smallest"][-1][1].item().decode()
    assert smallest_text == "`out/kernel`: 0.1\n\n`dense/kernel`: 0.5"


def test_trust_ratio_monitor_with_lamb_in_loss_scale_optimizer(tmp_path):
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(3, name="hidden"), keras.layers.Dense(1, name="out")]
    )
    lamb = LAMB(
        1e-2,
        weight_decay=0.01,
        record_trust_ratio=True,
        exclude_from_layer_adaptation=biases_and_norms,
    )
    model.compile(optimizer=keras.optimizers.LossScaleOptimizer(lamb), loss="mse")
    monitor = TrustRatioMonitor(log_dir=str(tmp_path))
    rng = np.random.default_rng(0)
    history = model.fit(
        rng.normal(size=(8, 4)),
        rng.normal(size=(8, 1)),
        batch_size=4,
        epochs=2,
        verbose=0,
        callbacks=[monitor],
    )
    ratios = lamb.trust_ratios()
    assert sorted(ratios) == sorted(variable.path for variable in model.trainable_variables)
    hidden, out = model.get_layer("hidden"), model.get_layer("out")
    # Kernels are adapted (ratio from the norms, not the initial 1.0); biases are excluded (1.0).
    assert ratios[hidden.kernel.path] != 1.0 and ratios[out.kernel.path] != 1.0
    assert ratios[hidden.bias.path] == ratios[out.bias.path] == 1.0
    assert history.history["trust_ratio_min"][-1] == pytest.approx(min(ratios.values()))
    assert history.history["trust_ratio_median"][-1] == pytest.approx(
        statistics.median(ratios.values())
    )
    assert history.history["trust_ratio_max"][-1] == pytest.approx(max(ratios.values()))
    events = read_events(tmp_path)
    assert float(events["trust_ratio/max"][-1][1]) == pytest.approx(max(ratios.values()))
    assert int(events["trust_ratio/all"][-1][1][:, 2].sum()) == 4


@pytest.mark.parametrize(
    "optimizer",
    [keras.optimizers.SGD(0.1), LAMB(1e-3)],
    ids=["no_trust_ratios", "recording_off"],
)
def test_trust_ratio_monitor_needs_recording_optimizer(optimizer):
    with pytest.raises(ValueError, match="Construct the optimizer with record_trust_ratio=True"):
        fit(constant_gradient_model(), optimizer, [TrustRatioMonitor()], steps=1)


@pytest.mark.parametrize(
    "kwargs, error_type, message",
    [
        ({"num_extremes": 0}, ValueError, "num_extremes must be in [1, inf], got 0"),
        # A float is the wrong type: TypeError (it was a ValueError before).
        ({"histogram_buckets": 2.5}, TypeError, "histogram_buckets must be an integer, got 2.5"),
    ],
)
def test_trust_ratio_monitor_bad_arguments(kwargs, error_type, message):
    with pytest.raises(error_type) as error:
        TrustRatioMonitor(**kwargs)
    assert message in str(error.value)


def test_warmup_and_monitor_under_mirrored_strategy():
    # The callbacks assign mirrored variables (rate, velocities) from outside
    # the replica context; the trajectory must equal the single-device one.
    # tests/conftest.py splits the CPU into logical devices for this.
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2
    with strategy.scope():
        model = constant_gradient_model()
        model.compile(
            optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss=constant_gradient_loss
        )
    weights = WeightRecorder()
    warmup = LearningRateWarmup(
        warmup_steps=8, initial_learning_rate=0.01, momentum_correction=True
    )
    model.fit(
        np.ones((24, 1)),
        np.zeros((24, 1)),
        batch_size=2,
        shuffle=False,
        verbose=0,
        callbacks=[warmup, weights],
    )
    expected = warmup_sgd_reference(12, 0.1, 0.01, 8, 0.9, 0.1, 1, momentum_correction=True)
    np.testing.assert_allclose(weights.weights, expected, rtol=1e-5)

    with strategy.scope():
        lamb_model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)]
        )
        lamb = LAMB(1e-2, record_trust_ratio=True)
        lamb_model.compile(optimizer=lamb, loss="mse")
    rng = np.random.default_rng(0)
    history = lamb_model.fit(
        rng.normal(size=(8, 4)),
        rng.normal(size=(8, 1)),
        batch_size=4,
        verbose=0,
        callbacks=[TrustRatioMonitor()],
    )
    ratios = lamb.trust_ratios().values()
    assert history.history["trust_ratio_min"] == pytest.approx([min(ratios)])
    assert history.history["trust_ratio_max"] == pytest.approx([max(ratios)])


JAX_SCRIPT = textwrap.dedent("""
    import json
    import sys

    import keras
    import numpy as np

    sys.path.insert(0, {tests_dir!r})
    from test_callbacks import (
        RateRecorder, WeightRecorder, constant_gradient_loss, constant_gradient_model,
    )

    from keras_largebatch.callbacks import LearningRateLogger, LearningRateWarmup

    model = constant_gradient_model()
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss=constant_gradient_loss)
    weights, rates = WeightRecorder(), RateRecorder()
    warmup = LearningRateWarmup(
        warmup_steps=8, initial_learning_rate=0.01, momentum_correction=True
    )
    history = model.fit(np.ones((12, 1)), np.zeros((12, 1)), batch_size=1, shuffle=False, verbose=0,
                        callbacks=[warmup, rates, weights, LearningRateLogger()])
    print(json.dumps({{
        "backend": keras.backend.backend(),
        "weights": weights.weights,
        "rates": rates.rates,
        "logged": history.history["learning_rate"],
    }}))
    """)


def test_warmup_and_logger_on_jax():
    # On JAX the train step works on copies of the variables; the callbacks'
    # writes (rate, velocities) must reach the next step.
    script = JAX_SCRIPT.format(tests_dir=os.path.dirname(os.path.abspath(__file__)))
    result = processes.run(
        [sys.executable, "-c", script],
        env={**os.environ, "KERAS_BACKEND": "jax"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["backend"] == "jax"
    assert out["rates"] == pytest.approx([0.01 + 0.09 * min(t / 8, 1) for t in range(12)])
    expected = warmup_sgd_reference(12, 0.1, 0.01, 8, 0.9, 0.1, 1, momentum_correction=True)
    np.testing.assert_allclose(out["weights"], expected, rtol=1e-5)
    assert out["logged"] == pytest.approx([0.1])


def test_monitor_reports_nothing_before_the_optimizer_is_built():
    from keras_largebatch import LAMB

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=LAMB(record_trust_ratio=True), loss="mse")
    monitor = TrustRatioMonitor()
    monitor.set_model(model)
    logs = {"loss": 1.0}
    monitor.on_epoch_end(0, logs)
    assert logs == {"loss": 1.0} and monitor.records == []
