"""The private parts of Keras's optimizer that `LayerwiseAdaptiveOptimizer` (optimizers/base.py)
overrides, calls or reads, pinned.

Keras does not promise them. A release that renamed `_backend_apply_gradients` would leave our
override uncalled: Keras would then clip each replica's gradient before the cross-replica sum and
apply weight decay outside the trust ratio, and training would go on, wrong. Each test below
names the hook it checks, so such a release fails here first. The same hooks, with the same
arguments, are in Keras 3.10.0 (the first release with `add_optimizer_variables`) and 3.15.1.

The suite runs this module on TensorFlow; `test_hooks_on_other_backends` runs it again on JAX
and on PyTorch, whose optimizer classes override some of these methods themselves.
"""

import inspect
import os
import sys

import keras
import numpy as np
import pytest

from keras_largebatch import LAMB
from keras_largebatch.optimizers import _keras_internals
from keras_largebatch.optimizers.base import LayerwiseAdaptiveOptimizer
from tests.support import processes
from tests.support.runs import ROOT

OVERRIDDEN = _keras_internals.OVERRIDDEN
CALLED = _keras_internals.CALLED
ATTRIBUTES = _keras_internals.ATTRIBUTES


def _where():
    return f"keras {keras.version()} on {keras.backend.backend()}"


def _parameters(function):
    return tuple(inspect.signature(function).parameters)


@pytest.mark.parametrize("name", sorted(OVERRIDDEN) + sorted(CALLED))
def test_keras_method_hook(name):
    keras_class = keras.optimizers.Optimizer
    owner = next((c for c in keras_class.__mro__ if name in vars(c)), None)
    assert owner is not None, (
        f"Keras's Optimizer has no method {name!r} ({_where()}); "
        "keras_largebatch/optimizers/base.py overrides or calls it"
    )
    expected = {**OVERRIDDEN, **CALLED}[name]
    found = _parameters(vars(owner)[name])
    assert found == expected, (
        f"Keras's {owner.__qualname__}.{name} now takes {found}, base.py was written for "
        f"{expected} ({_where()})"
    )
    if name in OVERRIDDEN:
        assert _parameters(vars(LayerwiseAdaptiveOptimizer)[name]) == expected


def test_keras_calls_the_overridden_hooks():
    calls = []

    class Spy(LAMB):
        def _backend_apply_gradients(self, grads, trainable_variables):
            calls.append("_backend_apply_gradients")
            super()._backend_apply_gradients(grads, trainable_variables)

        def _get_current_learning_rate(self):
            calls.append("_get_current_learning_rate")
            return super()._get_current_learning_rate()

    variable = keras.Variable(np.ones((2, 2), "float32"))
    optimizer = Spy(learning_rate=0.1)
    optimizer.apply([keras.ops.ones((2, 2))], [variable])
    assert "_backend_apply_gradients" in calls, (
        f"Keras's Optimizer.apply no longer calls _backend_apply_gradients ({_where()})"
    )
    calls.clear()
    optimizer.learning_rate
    assert calls == ["_get_current_learning_rate"], (
        f"Keras's Optimizer.learning_rate no longer reads _get_current_learning_rate ({_where()})"
    )


def _built_optimizer():
    """A LAMB with every feature whose Keras attributes base.py reads, built on two variables."""
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)
    variables = [keras.Variable(np.ones((2, 3), "float32")), keras.Variable(np.ones(4, "float32"))]
    optimizer = LAMB(
        learning_rate=schedule,
        use_ema=True,
        ema_overwrite_frequency=2,
        gradient_accumulation_steps=2,
    )
    optimizer.build(variables)
    return optimizer, variables, schedule


def _one_per_variable(values, variables):
    return isinstance(values, list) and [tuple(v.shape) for v in values] == [
        tuple(v.shape) for v in variables
    ]


@pytest.mark.parametrize("name", ATTRIBUTES)
def test_keras_attribute_hook(name):
    if name == "_distribution_strategy" and keras.backend.backend() != "tensorflow":
        pytest.skip("read on TensorFlow only")
    optimizer, variables, schedule = _built_optimizer()
    assert hasattr(optimizer, name), (
        f"Keras's Optimizer no longer has {name!r} ({_where()}); base.py reads it"
    )
    value = getattr(optimizer, name)
    if name == "_trainable_variables":
        holds = isinstance(value, list) and all(a is b for a, b in zip(value, variables))
        meaning = "the built variables, in order"
    elif name in ("_accumulated_gradients", "_model_variables_moving_average"):
        holds = _one_per_variable(value, variables)
        meaning = "a list of one variable per trainable variable, in order"
    elif name == "_iterations":
        # base.py counts micro-batches with it; Keras's `iterations` counts updates.
        optimizer.assign(value, 5)
        holds = isinstance(value, keras.Variable) and int(optimizer.iterations) == 2
        meaning = "the micro-batch counter, `iterations` its quotient by the accumulation steps"
    elif name == "_learning_rate":
        holds = value is schedule
        meaning = "the schedule passed as learning_rate"
    else:
        import tensorflow as tf

        holds = value is tf.distribute.get_strategy()
        meaning = "the tf.distribute strategy the optimizer was made in"
    assert holds, f"Keras's Optimizer.{name} is no longer {meaning} ({_where()}): got {value!r}"


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_hooks_on_other_backends(backend):
    if keras.backend.backend() != "tensorflow":
        pytest.skip("run from the TensorFlow suite")
    pytest.importorskip(backend)
    environment = dict(
        os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu"
    )
    result = processes.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest", __file__],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-4000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert "failed" not in summary and "error" not in summary, summary
