"""Drive an optimizer over a fixed sequence of gradients, on whichever Keras backend is active."""

import keras
import numpy as np


def run_optimizer(optimizer, weights, gradient_steps, compile_mode=None):
    """Apply ``gradient_steps`` to fresh variables initialised to ``weights``.

    ``compile_mode`` is None (eager), "graph" (tf.function) or "xla" (tf.function with
    jit_compile=True) on TensorFlow, or "jax_jit" (`stateless_apply` under `jax.jit`, the
    path `model.fit` takes on JAX).

    Returns (final weights as float32 arrays, per-step trust ratios or None).
    """
    variables = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(weights)]
    optimizer.build(variables)

    def step(grads):
        optimizer.apply(grads, variables)

    if compile_mode == "jax_jit":
        return _run_stateless_jax(optimizer, variables, gradient_steps)
    if compile_mode is not None:
        import tensorflow as tf

        step = tf.function(step, jit_compile=compile_mode == "xla")
    ratios = []
    for grads in gradient_steps:
        step([keras.ops.convert_to_tensor(g) for g in grads])
        if getattr(optimizer, "record_trust_ratio", False):
            by_path = optimizer.trust_ratios()
            ratios.append([by_path[v.path] for v in variables])
    return [np.asarray(keras.ops.convert_to_numpy(v)) for v in variables], (ratios or None)


def _run_stateless_jax(optimizer, variables, gradient_steps):
    import jax

    apply = jax.jit(optimizer.stateless_apply)
    trainable = [v.value for v in variables]
    state = [v.value for v in optimizer.variables]
    ratios = []
    for grads in gradient_steps:
        trainable, state = apply(state, [keras.ops.convert_to_tensor(g) for g in grads], trainable)
        if getattr(optimizer, "record_trust_ratio", False):
            for variable, value in zip(optimizer.variables, state):
                variable.assign(value)
            by_path = optimizer.trust_ratios()
            ratios.append([by_path[v.path] for v in variables])
    return [np.asarray(t) for t in trainable], (ratios or None)


def assert_close(actual, expected, rtol=1e-5, atol=1e-6):
    """Elementwise relative comparison of two lists of arrays."""
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)
