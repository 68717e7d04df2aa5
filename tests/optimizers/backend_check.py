"""Run the LAMB/LARS reference cases, then test_keras_contract.py under pytest, on the backend
named by KERAS_BACKEND.

Started in a subprocess by test_backends.py (a process can hold only one Keras backend; one
process serves both, so Keras and the backend are imported once); prints pytest's report, then
one JSON object: "reference_cases", case name -> the largest |actual - expected| / (1e-6 + 1e-5
|expected|) against the NumPy transcription, so values below 1 pass at rtol 1e-5 (atol 1e-6);
"keras_contract", pytest's exit status.
"""

import json
import os

import numpy as np
import pytest

from keras_largebatch import LAMB, LARS
from tests.optimizers import reference, skip_cases, test_lamb, test_lars
from tests.optimizers.runner import run_optimizer


def _tolerance_used(actual, expected):
    return max(
        float(np.max(np.abs(a - e) / (1e-6 + 1e-5 * np.abs(e)))) for a, e in zip(actual, expected)
    )


def _mean_steps(gradient_steps, k):
    count = len(gradient_steps) // k
    return [
        [
            np.mean([gradient_steps[s * k + j][i] for j in range(k)], axis=0)
            for i in range(len(gradient_steps[0]))
        ]
        for s in range(count)
    ]


CONTRACT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_keras_contract.py")


def reference_errors():
    """Case name -> the tolerance each reference case used (module docstring)."""
    import keras

    modes = [None, "jax_jit"] if keras.backend.backend() == "jax" else [None]
    errors = {}
    for mode in modes:
        for optimizer_class, module, run_reference, seed in (
            (LAMB, test_lamb, reference.lamb, 1),
            (LARS, test_lars, reference.lars, 11),
        ):
            weights, gradient_steps = reference.make_problem(steps=12, seed=seed)
            for case, (ours, theirs) in module.CASES.items():
                expected, _ = run_reference(weights, gradient_steps, **theirs)
                actual, _ = run_optimizer(optimizer_class(**ours), weights, gradient_steps, mode)
                errors[f"{optimizer_class.__name__}/{case}/{mode}"] = _tolerance_used(
                    actual, expected
                )
        weights, gradient_steps = reference.make_problem(steps=8, seed=5)
        actual, _ = run_optimizer(
            LAMB(learning_rate=1e-2, weight_decay=0.01, gradient_accumulation_steps=2),
            weights,
            gradient_steps,
            mode,
        )
        expected, _ = reference.lamb(
            weights,
            _mean_steps(gradient_steps, 2),
            lr=1e-2,
            wd=0.01,
            decay_mask=test_lamb.DEFAULT_MASK,
        )
        errors[f"LAMB/accumulation/{mode}"] = _tolerance_used(actual, expected)
        for name in sorted(skip_cases.CASES):
            for accumulation in (None, 2):
                result = skip_cases.run_case(name, accumulation, mode)
                counted = result["skipped_steps"] == 1 and result["iterations"] == 3
                errors[f"{name}/skip_non_finite_steps/{accumulation}/{mode}"] = (
                    result["error"] if counted else float("inf")
                )
    return errors


def main():
    errors = reference_errors()
    # Without the suite's conftest.py: it sets up TensorFlow's logical CPUs, which a process
    # on another backend neither uses nor needs to import TensorFlow for.
    contract = pytest.main(["-q", "-p", "no:cacheprovider", "--noconftest", CONTRACT])
    print(json.dumps({"reference_cases": errors, "keras_contract": int(contract)}))


if __name__ == "__main__":
    main()
