"""The image recipe on the JAX backend: DataParallel over 2 devices equals 1 device, batch norm
included (on JAX its statistics span the devices), and synchronized batch norm, a TensorFlow
setting, is refused.

The runs happen in a subprocess on JAX with 2 host devices (tests/support/jax_training.py).
"""

import numpy as np
import pytest

from tests.support.runs import checkpoint_arrays, run_on_jax


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    pytest.importorskip("jax")
    return run_on_jax(
        "tests.support.jax_training",
        "images",
        tmp_path_factory.mktemp("jax"),
        optimize_compiled_code=False,
    )


def test_two_devices_equal_one_device(runs):
    one_device, data_parallel = runs["one_device"], runs["data_parallel"]
    assert data_parallel["strategy"]["backend"] == "jax"
    assert data_parallel["strategy"]["devices"] == ["cpu:0", "cpu:1"]
    assert data_parallel["global_steps"] == 4
    assert [e["global_step"] for e in data_parallel["evaluations"]] == [4]
    np.testing.assert_allclose(
        data_parallel["evaluations"][0]["accuracy"], one_device["evaluations"][0]["accuracy"]
    )
    reference = checkpoint_arrays(one_device["checkpoint"])
    actual = checkpoint_arrays(data_parallel["checkpoint"])
    assert actual.keys() == reference.keys() and len(reference) > 30
    # The batch-norm moving statistics are among them: per-device statistics would differ.
    assert any("batch_normalization" in name for name in reference)
    for name in reference:
        np.testing.assert_allclose(
            actual[name], reference[name], rtol=2e-4, atol=2e-5, err_msg=name
        )


def test_synchronized_batch_norm_is_refused_on_jax(runs):
    assert runs["sync_batch_norm"].startswith(
        "model.sync_batch_norm=true is a TensorFlow setting, got it on the jax backend"
    )
    assert runs["sync_batch_norm"].endswith("allowed there: false")
