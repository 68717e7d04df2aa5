"""One trial: each optimizer built with its searched settings (LARS's two choices against a
NumPy transcription of its step), the schedule, where the noise scale is measured, and real
runs that stop at the target, at divergence, or run their budget and meet the test set once."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch.study import config as config_lib
from keras_largebatch.study import protocol, trial
from keras_largebatch.study.data import load
from tests.support.fashion_mnist_files import write_fashion_mnist

SHARED = {"one_minus_momentum": 0.1, "warmup_fraction": 0.0}


def lars_step(settings):
    """The CNN's weights before and after one LARS step at ``settings``, and the gradients."""
    optimizer = trial.build_optimizer("lars", dict(SHARED, **settings), total_steps=10)
    model = trial.compile_model(optimizer, seed=0)
    for variable in model.trainable_variables:
        if variable.name == "bias":  # zero-initialized: give them a norm
            variable.assign(np.full(variable.shape, 0.1, dtype=np.float32))
    images = np.random.default_rng(0).standard_normal((8, 28, 28, 1)).astype(np.float32)
    with tf.GradientTape() as tape:
        logits = model(images)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(np.arange(8), logits)
    gradients = tape.gradient(loss, model.trainable_variables)
    before = [v.numpy().copy() for v in model.trainable_variables]
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    after = [v.numpy() for v in model.trainable_variables]
    return model.trainable_variables, before, after, [g.numpy() for g in gradients]


@pytest.mark.parametrize("bias_adaptation", [False, True])
@pytest.mark.parametrize("trust_coefficient", [0.001, 0.02])
def test_lars_adapts_the_biases_only_when_asked(bias_adaptation, trust_coefficient):
    rate = 0.01  # the layer-wise rate; the global rate is rate / eta
    variables, before, after, gradients = lars_step(
        {
            "layerwise_rate": rate,
            "bias_adaptation": bias_adaptation,
            "trust_coefficient": trust_coefficient,
        }
    )
    global_rate = rate / trust_coefficient
    for variable, w, new, g in zip(variables, before, after, gradients):
        # v = lr * trust * g and w -= v at the first step (the velocity starts at 0).
        if variable.name == "kernel" or bias_adaptation:
            trust = trust_coefficient * np.linalg.norm(w) / np.linalg.norm(g)
        else:
            trust = 1.0  # excluded: the plain step at the global rate
        np.testing.assert_allclose(new, w - global_rate * trust * g, rtol=2e-4, atol=1e-7)
    # Off, a bias moves by global_rate * |g|: 1000x (eta 0.001) or 50x the layer-wise rate.
    bias = next(i for i, v in enumerate(variables) if v.name == "bias")
    moved = np.abs(after[bias] - before[bias]).max() / np.abs(gradients[bias]).max()
    if not bias_adaptation:
        assert moved == pytest.approx(global_rate, rel=1e-3)
    else:
        assert moved < global_rate / 10


def test_each_optimizer_gets_its_settings():
    sgd = trial.build_optimizer("sgd_momentum", dict(SHARED, learning_rate=0.1, nesterov=True), 10)
    assert isinstance(sgd, keras.optimizers.SGD)
    assert sgd.momentum == pytest.approx(0.9) and sgd.nesterov
    adamw = trial.build_optimizer("adamw", dict(SHARED, learning_rate=1e-3, beta_2=0.99), 10)
    assert (adamw.beta_1, adamw.beta_2, adamw.weight_decay) == (pytest.approx(0.9), 0.99, 0.0)
    lamb = trial.build_optimizer("lamb", dict(SHARED, learning_rate=1e-2, beta_2=0.999), 10)
    assert (lamb.beta_1, lamb.beta_2, lamb.weight_decay) == (pytest.approx(0.9), 0.999, 0.0)
    lars = trial.build_optimizer(
        "lars",
        dict(SHARED, layerwise_rate=0.01, bias_adaptation=True, trust_coefficient=0.02),
        10,
    )
    assert (lars.momentum, lars.trust_coefficient, lars.nesterov) == (
        pytest.approx(0.9),
        0.02,
        False,
    )
    assert float(lars.learning_rate) == pytest.approx(0.5)  # 0.01 / 0.02 at step 0, no warmup


def test_the_schedule_warms_up_over_its_fraction_then_decays_to_zero():
    schedule = trial.learning_rate_schedule(2.0, total_steps=100, warmup_fraction=0.25)
    values = [float(schedule(step)) for step in (0, 10, 25, 50, 100)]
    assert values == pytest.approx([0.0, 0.8, 2.0, 2.0 * 50 / 75, 0.0])


@pytest.mark.parametrize(
    "evaluations, points, expected",
    [(40, 10, {0, 4, 9, 13, 17, 22, 26, 30, 35, 39}), (4, 2, {0, 3}), (4, 1, {3}), (4, 0, set())],
)
def test_the_noise_scale_is_measured_at_evaluations_spread_from_first_to_last(
    evaluations, points, expected
):
    assert trial.noise_scale_evaluations(evaluations, points) == expected


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fashion_mnist")
    write_fashion_mnist(directory, num_train=256, num_test=100)
    config = config_lib.preset("tiny", data_dir=str(directory))
    return config, load(str(directory), 256, 64, 0)


def lamb_trial(phase, batch_size=16, learning_rate=0.01, seed=0):
    point = (0.5, 0.5, 0.0, 0.0, 0.0)
    base = protocol.trial_at(
        "lamb", batch_size, 48 if batch_size == 16 else 12, phase, 0, seed, point
    )
    return base._replace(settings=dict(base.settings, learning_rate=learning_rate))


def test_a_search_trial_stops_at_the_last_target_and_never_sees_the_test_set(setting):
    config, data = setting
    config = config_lib.preset(
        "tiny", data_dir=config.data_dir, targets=[0.01, 0.02, 0.03], primary_target=0.02
    )
    row = trial.run_trial(lamb_trial(protocol.SEARCH), config, data)
    # Evaluations every 12 steps of 48; any accuracy reaches 0.03: stopped at the first.
    assert row["stop"] == "target" and row["steps_trained"] == 12
    assert [step for step, *_ in row["curve"]] == [12]
    assert row["test_accuracy"] is None and row["noise_scale"] is None


def test_a_huge_rate_diverges_and_stops_early(setting):
    config, data = setting
    row = trial.run_trial(lamb_trial(protocol.SEARCH, learning_rate=1e4), config, data)
    assert row["stop"] == "diverged" and row["steps_trained"] < 48


def test_the_smallest_batchs_confirmation_runs_its_budget_then_meets_the_test_set(setting):
    config, data = setting
    row = trial.run_trial(lamb_trial(protocol.CONFIRMATION), config, data)
    assert row["stop"] == "budget" and row["steps_trained"] == 48
    assert [step for step, *_ in row["curve"]] == [12, 24, 36, 48]
    assert 0 <= row["test_accuracy"] <= 1 and np.isfinite(row["test_loss"])
    # B_simple at the first and last evaluation (2 points), and at the first at 0.2 if any.
    steps = [point[0] for point in row["noise_scale"]]
    first_at_target = next((s for s, a, _ in row["curve"] if a >= 0.2), None)
    assert steps == sorted({12, 48} | ({first_at_target} - {None}))
    for step, loss, accuracy, *_ in row["noise_scale"]:
        assert accuracy == dict((s, a) for s, a, _ in row["curve"])[step] and loss > 0
    # Another seed, or a larger batch: no measurement.
    assert (
        trial.run_trial(lamb_trial(protocol.CONFIRMATION, seed=1), config, data)["noise_scale"]
        is None
    )


def test_the_evaluator_gives_the_accuracy_and_cross_entropy_numpy_gives():
    generator = np.random.default_rng(2)
    images = generator.standard_normal((2500, 28, 28, 1)).astype(np.float32)
    labels = generator.integers(0, 10, 2500)
    model = trial.compile_model(keras.optimizers.SGD(0.1), seed=0)
    logits = np.concatenate([model(images[:1000]).numpy(), model(images[1000:]).numpy()])
    logits = logits.astype(np.float64)
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    expected_loss = -np.log(probabilities[np.arange(2500), labels]).mean()
    accuracy, loss = trial.Evaluator(model)(images, labels)  # chunks of 2000 and 500
    assert accuracy == np.mean(logits.argmax(axis=1) == labels)
    assert loss == pytest.approx(expected_loss, rel=1e-5)
