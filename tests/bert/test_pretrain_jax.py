"""BERT pretraining on the JAX backend: DataParallel over 2 devices equals 1 device,
accumulated micro-batches with unequal masked counts equal the full batch, and the masked-LM
loss is normalized over the global batch. (With 2 micro-batches per step, 2 devices against 1 is
tests/training/test_multi_host.py's
``test_bert_with_accumulation_on_two_devices_equals_one_device``.)

The runs happen in a subprocess on JAX with 2 host devices (tests/support/jax_training.py): the
tiny BERT of tests/bert/test_pretrain.py, and one SGD step of a tiny BertPretrainer on a batch
whose halves, one per device, mask 4 and 1 tokens per example. The TensorFlow counterpart of
the second is tests/bert/test_model.py's MirroredStrategy comparison.
"""

import numpy as np
import pytest

from tests.support.bert_records import write_records
from tests.support.runs import checkpoint_arrays, run_on_jax


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    pytest.importorskip("jax")
    directory = tmp_path_factory.mktemp("jax_bert")
    records = write_records(directory / "varied.tfrecord", 256, seed=1)
    return run_on_jax(
        "tests.support.jax_training",
        "bert",
        directory,
        records,
        timeout=600,
        optimize_compiled_code=False,
    )


def test_two_devices_equal_one_device(runs):
    one_device, data_parallel = runs["one_device"], runs["data_parallel"]
    assert (one_device["strategy"]["backend"], data_parallel["strategy"]["backend"]) == (
        "jax",
        "jax",
    )
    assert one_device["strategy"]["devices"] == ["cpu:0"]
    assert data_parallel["strategy"]["devices"] == ["cpu:0", "cpu:1"]
    assert data_parallel["phases"][0]["gradient_accumulation_steps"] == 1
    assert data_parallel["phases"][0]["per_replica_batch_size"] == 4
    actual = checkpoint_arrays(data_parallel["checkpoint"])
    expected = checkpoint_arrays(one_device["checkpoint"])
    assert actual.keys() == expected.keys()
    assert "layers/bert_backbone/layers/embedding/vars/0" in expected
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_accumulation_on_two_devices_equals_the_full_batch(runs):
    # One step of 8 records with 1 to 4 masked tokens each: 2 micro-batches of 4 (2 per
    # device) hold unequal counts, so only a loss over the whole step's count matches.
    actual = checkpoint_arrays(runs["linear_data_parallel_accumulation"]["checkpoint"])
    expected = checkpoint_arrays(runs["linear_one_device"]["checkpoint"])
    assert runs["linear_data_parallel_accumulation"]["global_steps"] == 1
    weights = [name for name in expected if name.startswith("layers/")]
    assert "layers/bert_backbone/layers/embedding/vars/0" in weights
    for name in weights:
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-5, atol=1e-7, err_msg=name)


def test_masked_lm_loss_is_normalized_over_the_global_batch(runs):
    loss = runs["loss"]
    one_device, data_parallel = loss["one_device"], loss["data_parallel"]
    np.testing.assert_allclose(data_parallel["loss"], one_device["loss"], rtol=1e-6)
    for actual, expected in zip(data_parallel["weights"], one_device["weights"]):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)
    # The comparison can tell: the mean of the two devices' own normalized gradients would step
    # elsewhere, as far as the step itself goes.
    distance = max(
        np.max(np.abs(np.subtract(a, b)))
        for a, b in zip(loss["per_device_mean"]["weights"], one_device["weights"])
    )
    step = max(
        np.max(np.abs(np.subtract(a, b)))
        for a, b in zip(loss["initial"]["weights"], one_device["weights"])
    )
    assert distance > 0.1 * step > 1e-3
    assert abs(loss["per_device_mean"]["loss"] - one_device["loss"]) > 1e-3
