"""`skip_non_finite_steps` on the active backend, against the NumPy references run without
the skipped optimizer step (used by test_skip_non_finite.py and, on JAX, backend_check.py).
"""

import keras
import numpy as np

from keras_largebatch import LAMB, LARS
from tests.optimizers import reference

DEFAULT_MASK = [True, False, True, False]
CASES = {
    "LAMB": (
        lambda **kw: LAMB(learning_rate=1e-2, weight_decay=0.01, **kw),
        lambda weights, steps: reference.lamb(
            weights, steps, lr=1e-2, wd=0.01, decay_mask=DEFAULT_MASK
        ),
    ),
    "LARS": (
        lambda **kw: LARS(learning_rate=0.1, trust_coefficient=0.1, weight_decay=1e-2, **kw),
        lambda weights, steps: reference.lars(
            weights,
            steps,
            lr=0.1,
            eta=0.1,
            wd=1e-2,
            decay_mask=DEFAULT_MASK,
        ),
    ),
}


def micro_batch_means(gradient_steps, k):
    if k is None:
        return gradient_steps
    return [
        [
            np.mean([gradient_steps[s * k + j][i] for j in range(k)], axis=0)
            for i in range(len(gradient_steps[0]))
        ]
        for s in range(len(gradient_steps) // k)
    ]


def poisoned(grads, value):
    bad = [np.array(g) for g in grads]
    bad[0].flat[1] = value
    return bad


def run_case(name, accumulation, compile_mode=None):
    """Largest |difference| / tolerance against the reference, and the counters.

    The gradients of optimizer step 1 (with accumulation: its first micro-batch) hold a NaN;
    the optimizer must apply the other steps only, exactly as if step 1 had not been there.
    """
    make, run_reference = CASES[name]
    k = accumulation or 1
    weights, steps = reference.make_problem(steps=4 * k, seed=21)
    fed = list(steps)
    fed[k] = poisoned(steps[k], np.nan)
    kept = steps[:k] + steps[2 * k :]
    optimizer = make(gradient_accumulation_steps=accumulation, skip_non_finite_steps=True)
    variables = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(weights)]
    optimizer.build(variables)
    if compile_mode == "jax_jit":
        import jax

        apply = jax.jit(optimizer.stateless_apply)
        trainable = [v.value for v in variables]
        state = [v.value for v in optimizer.variables]
        for grads in fed:
            trainable, state = apply(
                state, [keras.ops.convert_to_tensor(g) for g in grads], trainable
            )
        for variable, value in zip(variables, trainable):
            variable.assign(value)
        for variable, value in zip(optimizer.variables, state):
            variable.assign(value)
    else:
        step = lambda grads: optimizer.apply(grads, variables)  # noqa: E731
        if compile_mode is not None:
            import tensorflow as tf

            step = tf.function(step, jit_compile=compile_mode == "xla")
        for grads in fed:
            step([keras.ops.convert_to_tensor(g) for g in grads])
    expected, _ = run_reference(weights, micro_batch_means(kept, accumulation))
    error = max(
        float(np.max(np.abs(np.asarray(v.numpy()) - e) / (1e-6 + 1e-5 * np.abs(e))))
        for v, e in zip(variables, expected)
    )
    return {
        "error": error,
        "skipped_steps": int(keras.ops.convert_to_numpy(optimizer.skipped_steps)),
        "iterations": int(keras.ops.convert_to_numpy(optimizer.iterations)),
        "applied": len(kept) // k,
    }
