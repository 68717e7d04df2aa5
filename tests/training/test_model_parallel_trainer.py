"""The trainer with `keras.distribution.ModelParallel` on JAX (``strategy.name=model_parallel``):
the tiny BERT with its kernels split Megatron-style over the "model" axis of a (1, 2) and a
(2, 2) mesh, in one process and in two, trains the weights of one device under DataParallel;
resume; the mesh in the summary and the progress lines; settings that cannot run refused
before any work.

The runs happen in subprocesses on JAX with host CPU devices (tests/support/
model_parallel_training.py): one process of 4 devices and, at the same time, a group of 2
processes of 2; weights and optimizer state are compared through their checkpoints.
"""

import concurrent.futures

import numpy as np
import pytest

from tests.support.bert_records import write_records
from tests.support.model_parallel_training import launch
from tests.support.runs import checkpoint_arrays

# Every trainable variable of the tiny BertPretrainer (1 layer, hidden 16, 2 heads of 8,
# feed-forward 64, vocabulary 64, 16 positions) -> (shape, the mesh axis of each dimension), as
# Megatron-LM splits a transformer layer: query, key and value by heads, the attention output
# by the same heads, the feed-forward intermediate by columns and its output by rows; the token
# embedding by its hidden features. Everything else is replicated.
LAYOUTS = {
    "token_embedding/embeddings": ((64, 16), (None, "model")),
    "position_embedding/embeddings": ((16, 16), (None, None)),
    "segment_embedding/embeddings": ((2, 16), (None, None)),
    "embeddings_layer_norm/gamma": ((16,), (None,)),
    "embeddings_layer_norm/beta": ((16,), (None,)),
    **{
        f"transformer_layer_0/self_attention_layer/{name}/kernel": (
            (16, 2, 8),
            (None, "model", None),
        )
        for name in ("query", "key", "value")
    },
    **{
        f"transformer_layer_0/self_attention_layer/{name}/bias": ((2, 8), ("model", None))
        for name in ("query", "key", "value")
    },
    "transformer_layer_0/self_attention_layer/attention_output/kernel": (
        (2, 8, 16),
        ("model", None, None),
    ),
    "transformer_layer_0/self_attention_layer/attention_output/bias": ((16,), (None,)),
    "transformer_layer_0/self_attention_layer_norm/gamma": ((16,), (None,)),
    "transformer_layer_0/self_attention_layer_norm/beta": ((16,), (None,)),
    "transformer_layer_0/feedforward_layer_norm/gamma": ((16,), (None,)),
    "transformer_layer_0/feedforward_layer_norm/beta": ((16,), (None,)),
    "transformer_layer_0/feedforward_intermediate_dense/kernel": ((16, 64), (None, "model")),
    "transformer_layer_0/feedforward_intermediate_dense/bias": ((64,), ("model",)),
    "transformer_layer_0/feedforward_output_dense/kernel": ((64, 16), ("model", None)),
    "transformer_layer_0/feedforward_output_dense/bias": ((16,), (None,)),
    "pooled_dense/kernel": ((16, 16), (None, None)),
    "pooled_dense/bias": ((16,), (None,)),
    "mlm_head/output_bias": ((64,), (None,)),
    "mlm_head/intermediate_dense/kernel": ((16, 16), (None, None)),
    "mlm_head/intermediate_dense/bias": ((16,), (None,)),
    "mlm_head/intermediate_layer_norm/gamma": ((16,), (None,)),
    "mlm_head/intermediate_layer_norm/beta": ((16,), (None,)),
    "nsp_head/kernel": ((16, 2), (None, None)),
    "nsp_head/bias": ((2,), (None,)),
}
MODEL_AXIS_SIZE = 2
# tests/bert/test_pretrain_jax.py's bound for 2 devices against 1: the split matmuls and norms
# add their partial sums in another order, which rounds differently by a few float32 ulps.
TOLERANCE = dict(rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """What the one process of 4 devices and the group of 2 processes printed, run at once."""
    pytest.importorskip("jax")
    directory = tmp_path_factory.mktemp("model_parallel")
    records = [
        write_records(directory / f"bert-{index}.tfrecord", 32, seed=index + 1)
        for index in range(2)
    ]
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        group = executor.submit(launch, "group", directory / "group", records, 2, 2)
        (one_process,) = launch("one_process", directory / "one_process", records, 1, 4)
        return dict(one_process, group=group.result())


def _assert_arrays(summary, expected, **tolerance):
    actual = checkpoint_arrays(summary["checkpoint"])
    reference = checkpoint_arrays(expected["checkpoint"])
    assert actual.keys() == reference.keys() and len(reference) > 30
    assert "layers/bert_backbone/layers/embedding/vars/0" in reference
    for name in reference:
        if tolerance:
            np.testing.assert_allclose(actual[name], reference[name], err_msg=name, **tolerance)
        else:
            np.testing.assert_array_equal(actual[name], reference[name], err_msg=name)


def _expected_layouts(devices):
    """`LAYOUTS` as the subprocess records a variable: its axes, one device's part of it, and
    the devices that hold it."""
    return {
        path: {
            "axes": list(axes),
            "part": [
                size // MODEL_AXIS_SIZE if axis == "model" else size
                for size, axis in zip(shape, axes)
            ],
            "devices": devices,
        }
        for path, (shape, axes) in LAYOUTS.items()
    }


@pytest.mark.parametrize(
    "name, mesh_shape, per_replica_batch_size",
    [("two_devices", {"batch": 1, "model": 2}, 4), ("four_devices", {"batch": 2, "model": 2}, 2)],
)
def test_model_parallel_trains_the_weights_of_one_device(
    runs, name, mesh_shape, per_replica_batch_size
):
    run, one_device = runs[name], runs["one_device"]
    assert one_device["strategy"]["kind"] == "data_parallel"
    assert one_device["strategy"]["devices"] == ["cpu:0"]
    strategy = run["strategy"]
    assert strategy["kind"] == "model_parallel"
    assert strategy["mesh_shape"] == mesh_shape
    assert strategy["devices"] == [f"cpu:{index}" for index in range(2 * mesh_shape["batch"])]
    # The batch is split over the rows of the mesh only: 8 = rows x per replica x 2 micro-batches.
    assert strategy["num_replicas"] == run["phases"][0]["num_replicas"] == mesh_shape["batch"]
    assert run["phases"][0]["per_replica_batch_size"] == per_replica_batch_size
    assert run["phases"][0]["gradient_accumulation_steps"] == 2
    assert run["global_steps"] == one_device["global_steps"] == 6
    _assert_arrays(run, one_device, **TOLERANCE)
    # The comparison can tell a step: training moved the loss.
    assert abs(run["final"]["loss"] - run["initial"]["loss"]) > 1e-3


@pytest.mark.parametrize("name, devices", [("two_devices", 2), ("four_devices", 4)])
def test_every_variable_is_laid_out_as_megatron_splits_it_while_training(runs, name, devices):
    # One `fit` per run (6 steps are 3 whole logging windows), recorded at its first step.
    assert runs["layouts"][name] == [_expected_layouts(devices)]


def test_the_progress_lines_name_the_mesh_and_the_replicas_of_the_batch(runs):
    lines = runs["lines"]
    assert lines[0] == (
        "jax backend, strategy model_parallel with 2 replica(s) on ['cpu:0', 'cpu:1', 'cpu:2', "
        "'cpu:3'], a mesh of 2 (batch) x 2 (model); mixed precision None"
    )
    assert (
        "phase 1/1: 6 steps, global batch 8 = 2 replicas x 2 examples x 2 accumulation steps, "
        "seq_length 16"
    ) in lines


def test_resume_after_an_interruption_is_bitwise(runs):
    resumed = runs["resumed"]
    assert resumed["resumed_from_step"] == 4 and resumed["global_steps"] == 6
    assert resumed["strategy"]["mesh_shape"] == {"batch": 2, "model": 2}
    _assert_arrays(resumed, runs["four_devices"])


def test_a_group_of_two_processes_trains_the_weights_of_one(runs):
    group = runs["group"]
    first, second = group[0]["group"], group[1]["group"]
    assert first["strategy"]["num_workers"] == 2
    assert first["strategy"]["mesh_shape"] == {"batch": 2, "model": 2}
    # Each process holds one row of the mesh and reads one of the 2 input pipelines.
    assert [len(process["group"]["strategy"]["local_devices"]) for process in group] == [2, 2]
    assert first["strategy"]["input_pipelines"] == 2
    assert second["final"] == first["final"]
    assert [process["layouts"] for process in group] == [[_expected_layouts(4)]] * 2
    # Only process 0 writes; its checkpoint holds the group's weights: those of one process on
    # the same mesh, bitwise (each all-reduce over "batch" adds 2 parts, in either order the
    # same sum), and of one device.
    _assert_arrays(first, runs["four_devices"])
    _assert_arrays(first, runs["one_device"], **TOLERANCE)


@pytest.mark.parametrize(
    "case, message",
    [
        (
            "model_axis_size=3",
            "strategy.model_axis_size=3 must divide the 4 devices of the run (the devices JAX "
            "lists: ['cpu:0', 'cpu:1', 'cpu:2', 'cpu:3']); the mesh is (devices / "
            "model_axis_size, model_axis_size)",
        ),
        (
            "model_axis_size=4",
            "strategy.model_axis_size=4 must divide model.num_heads=2 (of model.size='tiny' and "
            "its overrides), which model_parallel splits over the model axis",
        ),
        (
            "images",
            "strategy.name=model_parallel needs a layout map of the model's variables, and the "
            "'train' recipe (ImageClassification) has none; allowed for it: "
            "strategy.name=data_parallel (or auto)",
        ),
    ],
)
def test_settings_that_cannot_run_are_refused_before_any_work(runs, case, message):
    text, made_output_dir = runs["refused"][case]
    assert text == message
    # Refused when the devices are picked: before the recipe reads its data (the image
    # recipe's training files do not exist) and before the run directory is made.
    assert not made_output_dir


def test_a_model_axis_across_processes_is_refused_before_any_work(runs):
    for process in runs["group"]:
        text, made_output_dir = process["refused"]
        assert text.startswith(
            "strategy.model_axis_size=4 must divide the 2 devices of each of the 2 processes: "
            "a row of the (batch, model) mesh must lie within one process"
        )
        assert not made_output_dir
