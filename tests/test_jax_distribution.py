"""LAMB and LARS under JAX's `keras.distribution.DataParallel` equal one device (issue: correct at scale).

On JAX the gradient of a data-parallel step is already the global-batch gradient (XLA
inserts the all-reduce), so our optimizers must give the one-device weights with and
without gradient accumulation. Two host devices come from XLA_FLAGS in a subprocess on the
JAX backend (tests/support/jax_data_parallel.py), as this process runs Keras on TensorFlow.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
CASES = [f"{name}/accumulation={k}" for name in ("LAMB", "LARS") for k in (None, 2)]


@pytest.fixture(scope="module")
def runs():
    pytest.importorskip("jax")
    env = dict(
        os.environ,
        KERAS_BACKEND="jax",
        XLA_FLAGS="--xla_force_host_platform_device_count=2",
        JAX_PLATFORMS="cpu",
        CUDA_VISIBLE_DEVICES="",
    )
    result = subprocess.run(
        [sys.executable, "-m", "tests.support.jax_data_parallel"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", CASES)
def test_data_parallel_over_two_devices_matches_one_device(case, runs):
    one_device, data_parallel = runs[case]["one_device"], runs[case]["data_parallel"]
    assert (one_device["devices"], data_parallel["devices"]) == (1, 2)
    # 4 optimizer steps of the same 16 examples each, whether in 1 or 2 micro-batches.
    assert one_device["iterations"] == data_parallel["iterations"] == 4
    assert len(data_parallel["weights"]) == len(one_device["weights"]) == len(runs["initial"]) == 6
    for index, (actual, expected) in enumerate(zip(data_parallel["weights"], one_device["weights"])):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6, err_msg=f"weight {index}")
    assert not np.allclose(one_device["weights"][0], runs["initial"][0], atol=1e-3)
