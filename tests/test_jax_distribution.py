"""LAMB and LARS under JAX's `keras.distribution.DataParallel` equal one device.

On JAX the gradient of a data-parallel step is already the global-batch gradient (XLA
inserts the all-reduce), so our optimizers must give the one-device weights with and
without gradient accumulation. Two host devices come from XLA_FLAGS in a subprocess on the
JAX backend (tests/support/jax_data_parallel.py), as this process runs Keras on TensorFlow.
"""

import numpy as np
import pytest

from tests.support.runs import run_on_jax

NAMES = ("LAMB", "LARS", "LARS_sgd_loose_clip")
CASES = [f"{name}/accumulation={k}" for name in NAMES for k in (None, 2)]
# Whether each case's global_clipnorm changes its weights: only where it does not can the
# comparison see a gradient of the wrong scale (LAMB and adapted LARS divide it out).
CLIP_BINDS = {"LAMB": True, "LARS": True, "LARS_sgd_loose_clip": False}


@pytest.fixture(scope="module")
def runs():
    pytest.importorskip("jax")
    return run_on_jax("tests.support.jax_data_parallel", optimize_compiled_code=False)


@pytest.mark.parametrize("case", CASES)
def test_data_parallel_over_two_devices_matches_one_device(case, runs):
    one_device, data_parallel = runs[case]["one_device"], runs[case]["data_parallel"]
    assert (one_device["devices"], data_parallel["devices"]) == (1, 2)
    # 4 optimizer steps of the same 16 examples each, whether in 1 or 2 micro-batches: both
    # runs equal one device without accumulation.
    expected = runs[case.replace("accumulation=2", "accumulation=None")]["one_device"]
    assert one_device["iterations"] == data_parallel["iterations"] == expected["iterations"] == 4
    assert len(data_parallel["weights"]) == len(expected["weights"]) == len(runs["initial"]) == 6
    for run, name in ((one_device, "one device"), (data_parallel, "data parallel")):
        for index, (actual, wanted) in enumerate(zip(run["weights"], expected["weights"])):
            np.testing.assert_allclose(
                actual, wanted, rtol=1e-5, atol=1e-6, err_msg=f"{name}, weight {index}"
            )
    assert not np.allclose(expected["weights"][0], runs["initial"][0], atol=1e-3)


@pytest.mark.parametrize("case", CASES)
def test_global_clipnorm_binds_only_where_meant(case, runs):
    clipped, unclipped = runs[case]["one_device"], runs[case]["one_device_unclipped"]
    difference = max(
        np.max(np.abs(np.subtract(a, b))) for a, b in zip(clipped["weights"], unclipped["weights"])
    )
    if CLIP_BINDS[case.split("/")[0]]:
        assert difference > 1e-3
    else:
        assert difference < 1e-6
