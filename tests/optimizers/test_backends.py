import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OTHER_BACKENDS = ["jax", "torch"]


def _run_on(backend, *arguments):
    """Run ``python arguments`` from the repository root with Keras on ``backend`` (a process
    holds one Keras backend), on the CPU."""
    pytest.importorskip(backend)
    env = dict(os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu")
    return subprocess.run(
        [sys.executable, *arguments], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_reference_cases_on_other_backends(backend):
    result = _run_on(backend, "-m", "tests.optimizers.backend_check")
    assert result.returncode == 0, result.stderr[-4000:]
    errors = json.loads(result.stdout.strip().splitlines()[-1])
    # Per mode: 8 LAMB and 7 LARS cases, accumulation, 4 skip_non_finite_steps cases.
    expected_cases = 2 * (8 + 7 + 1 + 4) if backend == "jax" else 8 + 7 + 1 + 4
    assert len(errors) == expected_cases
    worst = {case: used for case, used in errors.items() if used >= 1.0}
    assert not worst, worst


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_keras_contract_on_other_backends(backend):
    # test_keras_contract.py runs in this process on TensorFlow.
    module = "tests/optimizers/test_keras_contract.py"
    result = _run_on(backend, "-m", "pytest", "-q", "-p", "no:cacheprovider", module)
    assert result.returncode == 0, result.stdout[-4000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "error" not in summary, summary
