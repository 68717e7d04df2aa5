import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_reference_cases_on_other_backends(backend):
    pytest.importorskip(backend)
    env = dict(os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, "-m", "tests.optimizers.backend_check"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    errors = json.loads(result.stdout.strip().splitlines()[-1])
    expected_cases = 2 * (7 + 7 + 1) if backend == "jax" else 7 + 7 + 1
    assert len(errors) == expected_cases
    worst = {case: used for case, used in errors.items() if used >= 1.0}
    assert not worst, worst
