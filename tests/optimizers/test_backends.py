import json
import os
import sys
from pathlib import Path

import pytest

from tests.support import processes

ROOT = Path(__file__).resolve().parents[2]
OTHER_BACKENDS = ["jax", "torch"]


@pytest.fixture(scope="module", params=OTHER_BACKENDS)
def backend_check(request):
    """What ``python -m tests.optimizers.backend_check`` printed with Keras on the backend
    ``request.param`` (a process holds one Keras backend), on the CPU: pytest's report of
    test_keras_contract.py, and the last line's JSON object."""
    backend = request.param
    pytest.importorskip(backend)
    env = dict(os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu")
    result = processes.run(
        [sys.executable, "-m", "tests.optimizers.backend_check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    *report, last = result.stdout.strip().splitlines()
    return backend, report, json.loads(last)


def test_reference_cases_on_other_backends(backend_check):
    backend, _, results = backend_check
    errors = results["reference_cases"]
    # Per mode: 8 LAMB and 7 LARS cases, accumulation, 4 skip_non_finite_steps cases.
    expected_cases = 2 * (8 + 7 + 1 + 4) if backend == "jax" else 8 + 7 + 1 + 4
    assert len(errors) == expected_cases
    worst = {case: used for case, used in errors.items() if used >= 1.0}
    assert not worst, worst


def test_keras_contract_on_other_backends(backend_check):
    # test_keras_contract.py runs in this process on TensorFlow.
    _, report, results = backend_check
    assert results["keras_contract"] == 0, "\n".join(report[-60:])
    summary = report[-1]
    assert " passed" in summary and "error" not in summary, summary
