"""The trainer on the JAX backend: DataParallel over 2 devices equals 1, with accumulation given
or derived; resume; the summary's backend and devices; TensorFlow settings refused.

The runs are the toy recipe's (tests/support/toy_recipe.py) in a subprocess on JAX with 2 host
devices (tests/support/jax_training.py); weights are compared through their checkpoints.
"""

import re

import numpy as np
import pytest

from tests.support.runs import checkpoint_arrays, run_on_jax


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    pytest.importorskip("jax")
    return run_on_jax(
        "tests.support.jax_training",
        "toy",
        tmp_path_factory.mktemp("jax"),
        optimize_compiled_code=False,
    )


def _assert_arrays(summary, expected, **tolerance):
    actual = checkpoint_arrays(summary["checkpoint"])
    reference = checkpoint_arrays(expected["checkpoint"])
    assert actual.keys() == reference.keys() and len(reference) > 6
    for name in reference:
        if tolerance:
            np.testing.assert_allclose(actual[name], reference[name], err_msg=name, **tolerance)
        else:
            np.testing.assert_array_equal(actual[name], reference[name], err_msg=name)


def test_two_devices_equal_one_device_with_accumulation(runs):
    one_device, data_parallel = runs["one_device"], runs["data_parallel"]
    assert one_device["strategy"] == {
        "backend": "jax",
        "kind": "data_parallel",
        "num_replicas": 1,
        "num_workers": 1,
        "devices": ["cpu:0"],
        "process_index": 0,
        "local_devices": ["cpu:0"],
        "input_pipelines": 1,
    }
    assert data_parallel["strategy"]["devices"] == ["cpu:0", "cpu:1"]
    assert [p["gradient_accumulation_steps"] for p in data_parallel["phases"]] == [2, 1]
    assert data_parallel["global_steps"] == one_device["global_steps"] == 12
    # Each phase's fit ran under the distribution: its weights were on both devices.
    assert runs["devices_of_the_weights"] == {"one_device": [1, 1], "data_parallel": [2, 2]}
    # One compiled train step per phase, however many epochs its fit has, on one device too
    # (whose state Keras leaves uncommitted: devices.CommitTrainingState).
    assert runs["train_step_compiles"] == {"one_device": 2, "data_parallel": 2}
    _assert_arrays(data_parallel, one_device, rtol=1e-5, atol=1e-6)


def test_non_finite_variables_are_named_on_jax(runs):
    # One compiled check of every variable (tests/training/test_divergence.py's on TensorFlow).
    found, expected = runs["non_finite_variables"]
    assert found == expected and len(expected) == 2


def test_progress_lines_name_the_backend_devices_and_split(runs):
    lines = runs["lines"]
    assert lines[0] == (
        "jax backend, strategy data_parallel with 2 replica(s) on ['cpu:0', 'cpu:1']; "
        "mixed precision None"
    )
    assert (
        "phase 1/2: 6 steps, global batch 8 = 2 replicas x 2 examples x 2 accumulation steps, "
        "learning_rate 0.05"
    ) in lines
    assert (
        "phase 2/2: 6 steps, global batch 4 = 2 replicas x 2 examples x 1 accumulation step, "
        "learning_rate 0.05"
    ) in lines


def test_a_derived_accumulation_equals_the_explicit_one(runs):
    derived = runs["derived"]
    # At most 2 examples per device: 8 = 2 x 2 x 2, and 4 = 2 x 2 x 1.
    assert [
        (p["per_replica_batch_size"], p["gradient_accumulation_steps"]) for p in derived["phases"]
    ] == [(2, 2), (2, 1)]
    _assert_arrays(derived, runs["data_parallel"])


def test_resume_after_an_interruption_is_bitwise(runs):
    resumed = runs["resumed"]
    assert resumed["resumed_from_step"] == 4 and resumed["global_steps"] == 12
    _assert_arrays(resumed, runs["data_parallel"])


@pytest.mark.parametrize(
    "override, message",
    [
        ("strategy.name=mirrored", r"strategy.name='mirrored' is not available on the jax"),
        ("strategy.name=default", r"strategy.name='default' is not available on the jax"),
        ("strategy.tpu=local", r"strategy.tpu='local' is a tf.distribute setting"),
        ("strategy.devices=['/cpu:0']", r"'/cpu:0' is not a JAX device name"),
    ],
)
def test_tensorflow_settings_are_refused_on_jax_before_any_work(runs, override, message):
    text, prepared, made_output_dir = runs["refused"][override]
    assert re.search(message, text), text
    assert "allowed there" in text or "give names such as 'tpu:0'" in text
    assert not prepared and not made_output_dir
