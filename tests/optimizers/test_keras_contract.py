"""Keras's own optimizer tests, run against LAMB and LARS on the active backend.

Keras ships the tests it runs on its built-in optimizers (`keras/src/optimizers/
optimizer_sparse_test.py` and `optimizer_test.py`). This module imports them from the installed
package and runs them with our optimizers, without copying them:

* the sparse-gradient tests through their parametrized cases, with our cases in place of Keras's;
* the other tests with the Keras test module's `optimizers` namespace replaced, for the test's
  duration, by one whose optimizers (`Adam`, `SGD`, `optimizers.get(...)`) are ours.

A process holds one Keras backend: the suite runs this module on TensorFlow, and
test_backends.py runs it again under JAX and under PyTorch.

Keras tests that cannot apply to a layer-wise optimizer as written, and why:

* `test_empty_gradients`, `test_ema`, `test_ema_with_model_fit`, `test_static_loss_scaling`,
  `test_gradient_accumulation`, `test_callable_learning_rate`, `test_overwrite_with_gradient`,
  `test_overwrite_with_gradient_with_gradient_accumulation`: they assert the weights plain SGD
  reaches (``w - learning_rate * g``). LAMB and LARS scale each step by a trust ratio, so those
  values hold only for LARS with no momentum and no layer adaptation, which is SGD: the tests run
  verbatim against that configuration (`KerasSGDValuedTest`), and their properties are tested
  below for every layer-wise case against the NumPy transcription in reference.py
  (`test_variable_without_gradient_is_left_alone`, `test_moving_average_and_its_overwrite`,
  `test_static_loss_scale_is_divided_out`, `test_gradient_accumulation`,
  `test_callable_learning_rate`, `test_overwrite_with_gradient_is_left_to_keras`).
* `test_get_method`, `test_optimizer_auto_naming`: they look up and name Keras's built-in classes
  ("sgd" -> `SGD`, `Adam()` -> "adam"). Ours are found through their registered serialization
  name, which test_serialization.py checks.
"""

from unittest import mock

import keras
import numpy as np
import pytest
from absl.testing import parameterized
from keras.src import optimizers as keras_optimizers
from keras.src import testing

# Keras's test modules, not their classes: pytest collects every TestCase bound to a name here,
# and would run Keras's classes with Keras's optimizers.
from keras.src.optimizers import optimizer_sparse_test as keras_sparse_test
from keras.src.optimizers import optimizer_test as keras_optimizer_test

from keras_largebatch import LAMB, LARS
from tests.optimizers import reference, test_lamb, test_lars

# Each case is a reference case of test_lamb.py or test_lars.py: (class, our arguments, the
# NumPy transcription's arguments).
CASES = {
    "lamb": (LAMB, *test_lamb.CASES["defaults"]),
    "lamb_weight_decay": (LAMB, *test_lamb.CASES["weight_decay"]),
    "lars": (LARS, *test_lars.CASES["defaults"]),
    "lars_weight_decay": (LARS, *test_lars.CASES["mlperf"]),
    "lars_nesterov": (LARS, *test_lars.CASES["nesterov_epsilon"]),
    "lars_larc": (LARS, *test_lars.CASES["larc_clip"]),
}
# The same cases, averaging two micro-batches per step: the transcription then takes the mean.
ACCUMULATION_CASES = {
    f"{case}_accumulation": (optimizer_class, dict(ours, gradient_accumulation_steps=2), theirs)
    for case, (optimizer_class, ours, theirs) in CASES.items()
    if case in ("lamb_weight_decay", "lars_larc")
}
ALL_CASES = {**CASES, **ACCUMULATION_CASES}


def _unparametrized(generated_test):
    """The test function behind one of absl's parametrized cases."""
    return generated_test.__wrapped__


# === Keras's sparse-gradient tests ===


class KerasSparseGradientTest(testing.TestCase):
    """Sparse gradients (TF `IndexedSlices`, JAX `BCOO`) give the dense gradient's numbers, and
    every write goes through `self.assign*` (the test fails on a direct variable write)."""

    pytestmark = keras_sparse_test.OptimizerSparseTest.pytestmark
    _cases = [
        {"testcase_name": case, "optimizer_class": optimizer_class, "init_kwargs": ours}
        for case, (optimizer_class, ours, _) in ALL_CASES.items()
    ] + [
        # As Keras's own case "loss_scale_optimizer_sgd": the test looks inside the wrapper.
        {
            "testcase_name": f"loss_scale_{case}",
            "optimizer_class": lambda case=case: keras.optimizers.LossScaleOptimizer(_make(case)),
        }
        for case in ("lamb", "lars")
    ]
    test_sparse_gradients = parameterized.named_parameters(_cases)(
        _unparametrized(keras_sparse_test.OptimizerSparseTest.test_sparse_gradients_adam)
    )
    test_sparse_correctness = parameterized.named_parameters(_cases)(
        _unparametrized(keras_sparse_test.OptimizerSparseTest.test_sparse_correctness_adam)
    )


# === Keras's optimizer tests, with our optimizers in place of Keras's ===


class _OursInPlaceOfKeras:
    """Stands in for `keras.src.optimizers` inside Keras's test module: each optimizer a test
    builds, by class or through `optimizers.get`, is ``make(**arguments)``; everything else
    (schedules, `LossScaleOptimizer`) is Keras's."""

    def __init__(self, make):
        self._make = make
        self.Adam = self.AdamW = self.SGD = make

    def get(self, identifier):
        config = identifier.get("config", {}) if isinstance(identifier, dict) else {}
        return self._make(**config)

    def __getattr__(self, name):
        return getattr(keras_optimizers, name)


class _WithOurOptimizer:
    """Runs the Keras tests named in ``keras_tests`` with ``optimizer_class(**ours)`` for every
    optimizer they build, the test's own arguments taking precedence."""

    keras_tests = ()
    optimizer_class = None
    ours = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in cls.keras_tests:
            setattr(cls, name, getattr(keras_optimizer_test.OptimizerTest, name))

    def setUp(self):
        super().setUp()

        def make(**arguments):
            return self.optimizer_class(**{**self.ours, **arguments})

        self.enterContext(
            mock.patch.object(keras_optimizer_test, "optimizers", _OursInPlaceOfKeras(make))
        )


class _KerasOptimizerTests(_WithOurOptimizer):
    """Keras's tests whose assertions hold for any optimizer."""

    keras_tests = (
        "test_iterations_counter",
        "test_clip_args",
        "test_clip_norm",
        "test_clip_value",
        "test_global_clip_norm",
        "test_constraints_are_applied",
        "test_set_weights",
        "test_tf_checkpointing",
        "test_mixed_with_tf_variables",
        "test_setting_lr_to_callable_untracks_lr_var",
        # Keras parametrizes these two by its optimizers' names; with ours in place every
        # case is the same test, so only the first runs.
        "test_gradient_accumulation_with_weigth_decay0",
        "test_pickleable_optimizers0",
    )


# One class per case, named after it, so that pytest reports each Keras test under its case.
for _case, (_optimizer_class, _ours, _) in CASES.items():
    _name = f"KerasOptimizerTest_{_case}"
    globals()[_name] = type(
        _name,
        (_KerasOptimizerTests, testing.TestCase),
        dict(optimizer_class=_optimizer_class, ours=_ours),
    )


def _every_variable(variable):
    return True


class KerasSGDValuedTest(_WithOurOptimizer, testing.TestCase):
    """Keras's tests that assert SGD's values, against LARS without momentum and without layer
    adaptation: SGD, reached through all of our training-time plumbing."""

    optimizer_class = LARS
    ours = dict(momentum=0.0, exclude_from_layer_adaptation=_every_variable)
    keras_tests = (
        "test_empty_gradients",
        "test_ema",
        "test_ema_with_model_fit",
        "test_static_loss_scaling",
        "test_gradient_accumulation",
        "test_callable_learning_rate",
        "test_overwrite_with_gradient",
        "test_overwrite_with_gradient_with_gradient_accumulation",
    )


# === The SGD-valued properties, for every layer-wise case, against reference.py ===
# Every variable is a matrix: the default exclusion rules decay and adapt it, so the
# transcription's masks are dropped.


def _make(case, **changes):
    optimizer_class, ours, _ = CASES[case]
    return optimizer_class(**{**ours, **changes})


def _reference(case, weights, gradient_steps):
    """The transcription's final weights for ``case``, given one gradient per optimizer step."""
    optimizer_class, _, theirs = ALL_CASES[case]
    theirs = {key: value for key, value in theirs.items() if not key.endswith("_mask")}
    run = reference.lamb if optimizer_class is LAMB else reference.lars
    return run(weights, gradient_steps, **theirs)[0]


def _problem(steps, variables=1, shape=(2, 2)):
    return reference.make_problem(steps=steps, seed=3, shapes=[shape] * variables)


def _apply(optimizer, gradients, variables):
    gradients = [None if g is None else keras.ops.convert_to_tensor(g) for g in gradients]
    optimizer.apply_gradients(zip(gradients, variables))


def _assert_values(variable, expected):
    np.testing.assert_allclose(keras.ops.convert_to_numpy(variable), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", sorted(CASES))
def test_variable_without_gradient_is_left_alone(case):
    weights, gradient_steps = _problem(steps=1, variables=2)
    without, variable = [keras.Variable(w) for w in weights]
    with pytest.warns(UserWarning, match="Gradients do not exist"):
        _apply(_make(case), [None, gradient_steps[0][1]], [without, variable])
    _assert_values(without, weights[0])
    _assert_values(variable, _reference(case, weights[1:], [g[1:] for g in gradient_steps])[0])


@pytest.mark.parametrize("case", sorted(CASES))
def test_moving_average_and_its_overwrite(case):
    weights, gradient_steps = _problem(steps=3)
    variable = keras.Variable(weights[0])
    optimizer = _make(case, use_ema=True, ema_momentum=0.9, ema_overwrite_frequency=3)
    average = None
    for t, gradients in enumerate(gradient_steps, start=1):
        _apply(optimizer, gradients, [variable])
        updated = _reference(case, weights, gradient_steps[:t])[0]
        # The average starts at the weights after the first step.
        average = updated if average is None else 0.9 * average + 0.1 * updated
        _assert_values(optimizer._model_variables_moving_average[0], average)
        _assert_values(variable, average if t == 3 else updated)


@pytest.mark.parametrize("case", sorted(CASES))
def test_static_loss_scale_is_divided_out(case):
    weights, gradient_steps = _problem(steps=2)
    variable = keras.Variable(weights[0])
    optimizer = _make(case, loss_scale_factor=1024.0)
    for gradients in gradient_steps:
        _apply(optimizer, [g * 1024.0 for g in gradients], [variable])
    assert optimizer.scale_loss(1.0) == 1024.0
    _assert_values(variable, _reference(case, weights, gradient_steps)[0])


@pytest.mark.parametrize("case", sorted(CASES))
def test_callable_learning_rate(case):
    weights, gradient_steps = _problem(steps=2)
    variable = keras.Variable(weights[0])
    learning_rate = CASES[case][1]["learning_rate"]
    optimizer = _make(case, learning_rate=lambda: learning_rate)
    for gradients in gradient_steps:
        _apply(optimizer, gradients, [variable])
    assert int(keras.ops.convert_to_numpy(optimizer.iterations)) == 2
    _assert_values(variable, _reference(case, weights, gradient_steps)[0])


@pytest.mark.parametrize("case", sorted(CASES))
def test_gradient_accumulation(case):
    weights, gradient_steps = _problem(steps=4)
    variable = keras.Variable(weights[0])
    optimizer = _make(case, gradient_accumulation_steps=3)
    mean = np.mean([g[0] for g in gradient_steps[:3]], axis=0)
    after_update = _reference(case, weights, [[mean]])
    for micro_step, gradients in enumerate(gradient_steps, start=1):
        _apply(optimizer, gradients, [variable])
        assert int(keras.ops.convert_to_numpy(optimizer._iterations)) == micro_step
        assert int(keras.ops.convert_to_numpy(optimizer.iterations)) == micro_step // 3
        since_update = gradient_steps[3 * (micro_step // 3) : micro_step]
        _assert_values(optimizer._accumulated_gradients[0], sum(g[0] for g in since_update))
        _assert_values(variable, weights[0] if micro_step < 3 else after_update[0])


@pytest.mark.parametrize("accumulation", [None, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_overwrite_with_gradient_is_left_to_keras(case, accumulation):
    # Float8 training's scales and amax histories are such variables: Keras sets them from
    # their "gradient" (under accumulation, the elementwise maximum of the micro-batches' and
    # of the zero-initialized accumulator), and the optimizer updates only the others.
    weights, gradient_steps = _problem(steps=2, variables=2)
    overwritten, variable = [keras.Variable(w) for w in weights]
    overwritten.overwrite_with_gradient = True
    optimizer = _make(case, gradient_accumulation_steps=accumulation)
    for gradients in gradient_steps:
        _apply(optimizer, gradients, [overwritten, variable])
    if accumulation:
        first, second = gradient_steps[0][0], gradient_steps[1][0]
        expected_overwritten = np.maximum(np.maximum(first, 0.0), second)
        steps = [[np.mean([g[1] for g in gradient_steps], axis=0)]]
    else:
        expected_overwritten = gradient_steps[1][0]
        steps = [g[1:] for g in gradient_steps]
    _assert_values(overwritten, expected_overwritten)
    _assert_values(variable, _reference(case, weights[1:], steps)[0])


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="a TensorFlow checkpoint")
@pytest.mark.parametrize("case", sorted(CASES))
def test_checkpoint_restores_the_optimizer_state(case, tmp_path):
    # Keras's test_tf_checkpointing compares the model's predictions only; the step count and
    # the slots must come back too, or the first step after a resume differs.
    import tensorflow as tf

    weights, gradient_steps = _problem(steps=3)
    variable = keras.Variable(weights[0])
    optimizer = _make(case)
    _apply(optimizer, gradient_steps[0], [variable])
    checkpoint = tf.train.Checkpoint(variable=variable, optimizer=optimizer)
    saved = checkpoint.save(str(tmp_path / "checkpoint"))
    _apply(optimizer, gradient_steps[1], [variable])
    checkpoint.restore(saved).assert_consumed()
    _apply(optimizer, gradient_steps[2], [variable])
    resumed = [gradient_steps[0], gradient_steps[2]]
    _assert_values(variable, _reference(case, weights, resumed)[0])


# === Sparse gradients whose rows repeat ===


def _sparse(values, rows, shape):
    """The backend's sparse gradient: ``values[i]`` added to row ``rows[i]``."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.IndexedSlices(keras.ops.convert_to_tensor(values), rows, shape)
    from jax.experimental import sparse

    return sparse.BCOO((values, np.array(rows)[:, None]), shape=shape)


@pytest.mark.skipif(
    keras.backend.backend() not in ("tensorflow", "jax"),
    reason="Keras has sparse gradients on TensorFlow and JAX",
)
@pytest.mark.parametrize("path", ["stateful", "stateless"])
@pytest.mark.parametrize("case", sorted(ALL_CASES))
def test_sparse_gradient_with_repeated_rows_steps_like_the_dense_sum(case, path):
    # Keras's sparse tests use distinct rows. An embedding lookup repeats a row once per
    # occurrence of its token; the moments, the norms and the trust ratio are functions of the
    # summed rows, not of the slices.
    if path == "stateless" and keras.backend.backend() != "jax":
        pytest.skip("Keras has stateless_apply on JAX only")
    shape, rows = (5, 3), [0, 2, 2, 4]
    weights, _ = _problem(steps=1, shape=shape)
    rng = np.random.default_rng(5)
    values = [rng.normal(size=(len(rows), shape[1])).astype("float32") for _ in range(4)]
    dense = [np.zeros(shape, "float32") for _ in values]
    for summed, slices in zip(dense, values):
        np.add.at(summed, rows, slices)
    optimizer_class, ours, _ = ALL_CASES[case]
    steps = ours.get("gradient_accumulation_steps") or 1
    mean_steps = [
        [np.mean(dense[start : start + steps], axis=0)] for start in range(0, len(dense), steps)
    ]

    variable = keras.Variable(weights[0])
    optimizer = optimizer_class(**ours)
    gradients = [_sparse(v, rows, shape) for v in values]
    if path == "stateful":
        for gradient in gradients:
            optimizer.apply([gradient], [variable])
        actual = variable.value
    else:
        import jax

        optimizer.build([variable])
        apply = jax.jit(optimizer.stateless_apply)
        trainable, state = [variable.value], [v.value for v in optimizer.variables]
        for gradient in gradients:
            trainable, state = apply(state, [gradient], trainable)
        actual = trainable[0]
    _assert_values(actual, _reference(case, weights, mean_steps)[0])
