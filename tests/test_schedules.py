"""Schedules against closed-form formulas written here in plain Python."""

import json
import os
import sys
import textwrap

import keras
import numpy as np
import pytest

from keras_largebatch.schedules import (
    LarsMLPerfSchedule,
    LegwScaled,
    MultiPhaseSchedule,
    WarmUp,
    WarmupPolynomialDecay,
    legw_scale,
    scale_learning_rate,
)
from tests.support import processes

# NVIDIA's two-phase BERT run (NVIDIA/DeepLearningExamples, PyTorch/LanguageModeling/BERT).
NVIDIA_PHASES = [
    {"steps": 7038, "peak_learning_rate": 6e-3, "warmup_steps": 2000, "power": 0.5},
    {"steps": 1563, "peak_learning_rate": 4e-3, "warmup_steps": 200, "power": 0.5},
]


def bert_reference(step, peak, warmup, total, end, power):
    """Linear warmup, then (peak - end) * (1 - progress)^power + end."""
    if step < warmup:
        return peak * step / warmup
    progress = (min(step, total) - warmup) / (total - warmup)
    return (peak - end) * (1 - progress) ** power + end


def mlperf_reference(step, peak, warmup, train_steps, end=1e-4):
    """mlcommons/training lars_util.py: PolynomialDecay(decay_steps=T - W + 1)."""
    if step <= warmup:
        return peak * step / warmup
    decay_steps = train_steps - warmup + 1
    decayed = min(step - warmup, decay_steps)
    return (peak - end) * (1 - decayed / decay_steps) ** 2 + end


def two_phase_reference(step):
    if step < 7038:
        return bert_reference(step, 6e-3, 2000, 7038, 0.0, 0.5)
    return bert_reference(step - 7038, 4e-3, 200, 1563, 0.0, 0.5)


def values(schedule, steps):
    return [float(keras.ops.convert_to_numpy(schedule(step))) for step in steps]


@pytest.mark.parametrize("power", [1.0, 0.5, 2.0])
def test_warmup_polynomial_decay_matches_closed_form(power):
    schedule = WarmupPolynomialDecay(
        peak_learning_rate=5e-3,
        total_steps=1000,
        warmup_steps=200,
        end_learning_rate=1e-4,
        power=power,
    )
    # 0, mid-warmup, end of warmup, mid-decay, end, past the end.
    steps = [0, 100, 200, 600, 999, 1000, 1500]
    expected = [bert_reference(s, 5e-3, 200, 1000, 1e-4, power) for s in steps]
    np.testing.assert_allclose(values(schedule, steps), expected, rtol=1e-5)
    assert values(schedule, [1000, 1500]) == pytest.approx([1e-4, 1e-4])


def test_warmup_polynomial_decay_without_warmup_starts_at_peak():
    schedule = WarmupPolynomialDecay(1.0, total_steps=10, warmup_steps=0)
    assert values(schedule, [0, 5, 10]) == pytest.approx([1.0, 0.5, 0.0])


def test_lars_mlperf_schedule_matches_reference():
    steps_per_epoch = 1281167 // 32768  # 39
    schedule = LarsMLPerfSchedule(
        peak_learning_rate=21.2,
        steps_per_epoch=steps_per_epoch,
        warmup_epochs=16,
        total_steps=56 * steps_per_epoch,
    )
    warmup = 16 * steps_per_epoch
    train_steps = 56 * steps_per_epoch
    steps = [0, warmup // 2, warmup, (warmup + train_steps) // 2, train_steps, train_steps + 100]
    expected = [mlperf_reference(s, 21.2, warmup, train_steps) for s in steps]
    np.testing.assert_allclose(values(schedule, steps), expected, rtol=1e-5)


def test_lars_mlperf_schedule_fractional_warmup_epochs():
    schedule = LarsMLPerfSchedule(10.0, steps_per_epoch=10, warmup_epochs=2.5, total_steps=100)
    assert schedule.warmup_steps == 25
    np.testing.assert_allclose(
        values(schedule, [0, 10, 25, 60]),
        [mlperf_reference(s, 10.0, 25, 100) for s in [0, 10, 25, 60]],
        rtol=1e-5,
    )


def test_multi_phase_warms_up_again_in_each_phase():
    schedule = MultiPhaseSchedule(NVIDIA_PHASES, total_steps=8601)
    steps = [0, 1000, 2000, 4519, 7037, 7038, 7138, 7238, 8000, 8600, 8601, 9000]
    expected = [two_phase_reference(s) for s in steps]
    np.testing.assert_allclose(values(schedule, steps), expected, rtol=1e-5, atol=1e-9)
    # The second phase restarts from zero, then reaches its own peak.
    assert values(schedule, [7038, 7238]) == pytest.approx([0.0, 4e-3])
    assert schedule.phase_starts == [0, 7038]


def test_multi_phase_fills_in_defaults_in_plain_dict_config():
    schedule = MultiPhaseSchedule([{"steps": 10, "peak_learning_rate": 1.0, "warmup_steps": 2}])
    assert schedule.get_config() == {
        "phases": [
            {
                "steps": 10,
                "peak_learning_rate": 1.0,
                "warmup_steps": 2,
                "end_learning_rate": 0.0,
                "power": 1.0,
            }
        ],
        "total_steps": 10,
    }


def test_warmup_wrapping_a_constant_linear_and_polynomial():
    linear = WarmUp(0.4, warmup_steps=10, initial_learning_rate=0.1)
    assert values(linear, [0, 5, 10, 50]) == pytest.approx([0.1, 0.25, 0.4, 0.4])
    quadratic = WarmUp(0.4, warmup_steps=10, power=2.0)
    assert values(quadratic, [0, 5, 10]) == pytest.approx([0.0, 0.4 * 0.25, 0.4])


@pytest.mark.parametrize("wrapped_step", ["after_warmup", "global"])
def test_warmup_wrapping_a_schedule_counts_as_documented(wrapped_step):
    decay = keras.optimizers.schedules.ExponentialDecay(1.0, decay_steps=10, decay_rate=0.5)
    schedule = WarmUp(decay, warmup_steps=20, initial_learning_rate=0.2, wrapped_step=wrapped_step)
    offset = 20 if wrapped_step == "after_warmup" else 0

    def reference(step):
        after = lambda s: 0.5 ** ((s - offset) / 10)  # noqa: E731
        if step < 20:
            return 0.2 + (after(20) - 0.2) * step / 20
        return after(step)

    steps = [0, 10, 19, 20, 30, 100]
    np.testing.assert_allclose(values(schedule, steps), [reference(s) for s in steps], rtol=1e-5)


def test_schedules_accept_array_steps():
    schedule = MultiPhaseSchedule(NVIDIA_PHASES)
    steps = np.array([0, 1000, 7038, 7138, 9000])
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(schedule(steps)),
        [two_phase_reference(s) for s in steps],
        rtol=1e-5,
    )


SCHEDULES = [
    WarmupPolynomialDecay(
        5e-3, total_steps=1000, warmup_steps=200, end_learning_rate=1e-4, power=0.5
    ),
    LarsMLPerfSchedule(21.2, steps_per_epoch=39, warmup_epochs=16, total_steps=2184),
    MultiPhaseSchedule(NVIDIA_PHASES),
    WarmUp(keras.optimizers.schedules.CosineDecay(1e-3, decay_steps=900), warmup_steps=100),
    WarmUp(2e-3, warmup_steps=50, initial_learning_rate=1e-4, power=2.0, wrapped_step="global"),
]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: type(s).__name__)
def test_serialize_round_trip_through_json(schedule):
    serialized = json.loads(json.dumps(keras.optimizers.schedules.serialize(schedule)))
    restored = keras.optimizers.schedules.deserialize(serialized)
    assert type(restored) is type(schedule)
    assert restored.get_config() == schedule.get_config()
    steps = [0, 37, 100, 250, 999, 5000, 8000]
    assert values(restored, steps) == pytest.approx(values(schedule, steps))


def constant_gradient_model():
    """y = x @ w with x = 1 and the loss y: the gradient of w is always 1."""
    model = keras.Sequential(
        [keras.Input((1,)), keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")]
    )
    return model


def constant_gradient_loss(y_true, y_pred):
    # Per sample, so that Keras averages over the global batch (a scalar
    # loss would be summed over replicas under a tf.distribute strategy).
    return y_pred[:, 0]


def test_schedule_changes_the_rate_at_every_step_inside_one_execution():
    # With SGD and gradient 1, w_N = -sum_{t<N} lr(t): every step's own rate
    # must be used, also between the batch hooks of steps_per_execution=4.
    schedule = WarmupPolynomialDecay(0.1, total_steps=12, warmup_steps=5, power=2.0)
    model = constant_gradient_model()
    model.compile(
        optimizer=keras.optimizers.SGD(schedule), loss=constant_gradient_loss, steps_per_execution=4
    )
    model.fit(np.ones((12, 1)), np.zeros((12, 1)), batch_size=1, epochs=1, verbose=0)
    expected = -sum(bert_reference(t, 0.1, 5, 12, 0.0, 2.0) for t in range(12))
    assert float(model.get_weights()[0][0, 0]) == pytest.approx(expected, rel=1e-5)


def test_model_save_round_trip_keeps_schedule_and_step(tmp_path):
    schedule = MultiPhaseSchedule(
        [
            {"steps": 6, "peak_learning_rate": 0.1, "warmup_steps": 2},
            {"steps": 6, "peak_learning_rate": 0.05, "warmup_steps": 3, "power": 0.5},
        ]
    )
    model = constant_gradient_model()
    model.compile(optimizer=keras.optimizers.SGD(schedule), loss=constant_gradient_loss)
    model.fit(np.ones((8, 1)), np.zeros((8, 1)), batch_size=1, epochs=1, verbose=0)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(
        path, custom_objects={"constant_gradient_loss": constant_gradient_loss}
    )
    restored = keras.optimizers.schedules.deserialize(
        loaded.optimizer.get_config()["learning_rate"]
    )
    assert isinstance(restored, MultiPhaseSchedule)
    assert restored.get_config() == schedule.get_config()
    # Step 8 is in the second phase, 2 steps into its 3-step warmup.
    assert int(loaded.optimizer.iterations) == 8
    assert float(loaded.optimizer.learning_rate) == pytest.approx(0.05 * 2 / 3, rel=1e-5)


BACKEND_SCRIPT = textwrap.dedent("""
    import json
    import keras
    import numpy as np
    from keras_largebatch.schedules import LarsMLPerfSchedule, MultiPhaseSchedule, WarmUp

    phases = json.loads({phases!r})
    schedules = {{
        "multi_phase": MultiPhaseSchedule(phases),
        "lars": LarsMLPerfSchedule(21.2, steps_per_epoch=39, warmup_epochs=16, total_steps=2184),
        "warmup": WarmUp(0.4, warmup_steps=10, initial_learning_rate=0.1),
    }}
    steps = json.loads({steps!r})
    out = {{"backend": keras.backend.backend()}}
    for name, schedule in schedules.items():
        out[name] = [float(keras.ops.convert_to_numpy(schedule(s))) for s in steps]
    # In a compiled train step (jax.jit on JAX): w = -sum of the per-step rates.
    model = keras.Sequential(
        [keras.Input((1,)), keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")]
    )
    # PyTorch allows only steps_per_execution=1.
    steps_per_execution = 1 if keras.backend.backend() == "torch" else 2
    model.compile(optimizer=keras.optimizers.SGD(MultiPhaseSchedule(phases)),
                  loss=lambda y_true, y_pred: y_pred[:, 0],
                  steps_per_execution=steps_per_execution)
    model.fit(np.ones((8, 1)), np.zeros((8, 1)), batch_size=1, verbose=0)
    out["weight"] = float(model.get_weights()[0][0, 0])
    print(json.dumps(out))
    """)


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_schedules_on_other_backends(backend):
    steps = [0, 1000, 2000, 4519, 7038, 7138, 8600, 9000]
    script = BACKEND_SCRIPT.format(phases=json.dumps(NVIDIA_PHASES), steps=json.dumps(steps))
    result = processes.run(
        [sys.executable, "-c", script],
        env={**os.environ, "KERAS_BACKEND": backend},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["backend"] == backend
    np.testing.assert_allclose(
        out["multi_phase"], [two_phase_reference(s) for s in steps], rtol=1e-5, atol=1e-9
    )
    np.testing.assert_allclose(
        out["lars"], [mlperf_reference(s, 21.2, 624, 2184) for s in steps], rtol=1e-5
    )
    np.testing.assert_allclose(
        out["warmup"], [0.1 + 0.3 * min(s, 10) / 10 for s in steps], rtol=1e-5
    )
    assert out["weight"] == pytest.approx(-sum(two_phase_reference(t) for t in range(8)), rel=1e-5)


def test_scale_learning_rate_sqrt_and_linear():
    # LAMB appendix table: 6.25e-4 at batch 512 scales to 5e-3 at 32K (x64, sqrt 8).
    assert scale_learning_rate(6.25e-4, 512, 32768) == pytest.approx(5e-3)
    # Goyal et al.: 0.1 per 256 images, linear.
    assert scale_learning_rate(0.1, 256, 8192, rule="linear") == pytest.approx(3.2)
    assert scale_learning_rate(1.0, 100, 25, rule="sqrt") == pytest.approx(0.5)


def test_legw_scales_rate_by_sqrt_and_warmup_epochs_linearly():
    scaled = legw_scale(
        base_learning_rate=1e-3, base_warmup_epochs=0.5, base_batch_size=1024, batch_size=16384
    )
    assert isinstance(scaled, LegwScaled)
    assert scaled.learning_rate == pytest.approx(1e-3 * 4)
    assert scaled.warmup_epochs == pytest.approx(8.0)
    # At a fixed dataset size the warmup in steps is unchanged.
    dataset_size = 1_281_167
    assert scaled.warmup_epochs * dataset_size / 16384 == pytest.approx(0.5 * dataset_size / 1024)


@pytest.mark.parametrize(
    "build, message",
    [
        (
            lambda: WarmupPolynomialDecay(1.0, total_steps=0, warmup_steps=0),
            "total_steps must be in (0, inf], got 0",
        ),
        (
            lambda: WarmupPolynomialDecay(1.0, total_steps=-5, warmup_steps=0),
            "total_steps must be in (0, inf], got -5",
        ),
        (
            lambda: WarmupPolynomialDecay(1.0, total_steps=100, warmup_steps=-1),
            "warmup_steps must be in [0, inf], got -1",
        ),
        (
            lambda: WarmupPolynomialDecay(1.0, total_steps=100, warmup_steps=200),
            "warmup_steps=200 >= total_steps=100",
        ),
        (
            lambda: WarmupPolynomialDecay(
                1.0, total_steps=100, warmup_steps=10, end_learning_rate=2.0
            ),
            "end_learning_rate must be in [0, peak_learning_rate=1.0], got 2.0",
        ),
        (
            lambda: WarmupPolynomialDecay(0.0, total_steps=100, warmup_steps=10),
            "peak_learning_rate must be in (0, inf], got 0.0",
        ),
        (
            lambda: WarmupPolynomialDecay(1.0, total_steps=100, warmup_steps=10, power=0),
            "power must be in (0, inf], got 0",
        ),
        (
            lambda: LarsMLPerfSchedule(1.0, steps_per_epoch=10, warmup_epochs=5, total_steps=40),
            "warmup_epochs * steps_per_epoch must be < total_steps, "
            "got 5 * 10 = 50 >= total_steps=40",
        ),
        (
            lambda: LarsMLPerfSchedule(1.0, steps_per_epoch=0, warmup_epochs=5, total_steps=40),
            "steps_per_epoch must be in (0, inf], got 0",
        ),
        (lambda: WarmUp(1.0, warmup_steps=0), "warmup_steps must be in (0, inf], got 0"),
        (
            lambda: WarmUp(1.0, warmup_steps=10, wrapped_step="end"),
            "wrapped_step must be one of ['after_warmup', 'global'], got 'end'",
        ),
        (lambda: WarmUp(-1.0, warmup_steps=10), "after_warmup must be in [0, inf], got -1.0"),
        (lambda: MultiPhaseSchedule([]), "phases must be a non-empty list of dicts, got []"),
        (
            lambda: MultiPhaseSchedule(NVIDIA_PHASES, total_steps=8600),
            "the phases' steps [7038, 1563] add up to 8601, but total_steps=8600",
        ),
        (
            lambda: MultiPhaseSchedule(
                [{"steps": 100, "peak_learning_rate": 1.0, "warmup_steps": 100}]
            ),
            "phases[0]: warmup_steps must be < total_steps",
        ),
        (
            lambda: MultiPhaseSchedule(
                [NVIDIA_PHASES[0], {"steps": 10, "peak_learning_rate": 1.0}]
            ),
            "phases[1] must have keys ('steps', 'peak_learning_rate', 'warmup_steps') and may have "
            "('end_learning_rate', 'power'); missing ['warmup_steps'], unknown []",
        ),
        (
            lambda: MultiPhaseSchedule(
                [{"steps": 10, "peak_learning_rate": 1.0, "warmup_steps": 1, "lr": 2}]
            ),
            "unknown ['lr']",
        ),
        (
            lambda: scale_learning_rate(0.1, 256, 1024, rule="cubic"),
            "rule must be one of ['sqrt', 'linear'], got 'cubic'",
        ),
        (lambda: scale_learning_rate(0.1, 0, 1024), "base_batch_size must be in (0, inf], got 0"),
        (lambda: scale_learning_rate(0.1, 256, -1), "batch_size must be in (0, inf], got -1"),
        (lambda: legw_scale(0.1, -2, 256, 1024), "base_warmup_epochs must be in [0, inf], got -2"),
    ],
)
def test_bad_input_names_the_value(build, message):
    with pytest.raises(ValueError) as error:
        build()
    assert message in str(error.value)


# Wrong types raise TypeError, as in the optimizers (they raised ValueError before).
@pytest.mark.parametrize(
    "build, message",
    [
        (
            lambda: MultiPhaseSchedule(
                [{"steps": 10, "peak_learning_rate": "6e-3", "warmup_steps": 1}]
            ),
            "phases[0]: peak_learning_rate must be a number, got '6e-3' of type str "
            "(in YAML, write 6e-3 as 6.0e-3)",
        ),
        (
            lambda: WarmupPolynomialDecay(1.0, total_steps=True, warmup_steps=0),
            "total_steps must be a number",
        ),
        (lambda: MultiPhaseSchedule(None), "phases must be a non-empty list of dicts, got None"),
        (
            lambda: WarmUp("0.5", warmup_steps=10),
            "after_warmup must be a number, got '0.5' of type str",
        ),
        (
            lambda: WarmupPolynomialDecay(
                peak_learning_rate="6e-3", total_steps=10, warmup_steps=1
            ),
            "peak_learning_rate must be a number, got '6e-3' of type str",
        ),
        (lambda: MultiPhaseSchedule([7]), "phases[0] must be a dict"),
    ],
)
def test_wrong_types_raise_type_error(build, message):
    with pytest.raises(TypeError) as error:
        build()
    assert message in str(error.value)


def test_a_string_rate_is_the_same_error_for_schedules_and_optimizers():
    from keras_largebatch import LAMB

    for build in (
        lambda: LAMB(learning_rate="6e-3"),
        lambda: WarmupPolynomialDecay(peak_learning_rate="6e-3", total_steps=10, warmup_steps=1),
    ):
        with pytest.raises(
            TypeError, match=r"got '6e-3' of type str \(in YAML, write 6e-3 as 6.0e-3\)"
        ):
            build()
