"""The pretraining run: replicas, accumulation, resume after interruption, and bad inputs.

Every run is a tiny BERT (1 layer, hidden 16) on synthetic records written by hand, so a run
takes a few seconds. Weights are compared through the checkpoint files the runs write.
"""

import contextlib
import glob
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch import input_order
from keras_largebatch.bert import pretraining as pretrain_lib
from keras_largebatch.bert.pretraining import __main__ as pretrain_command
from keras_largebatch.bert.pretraining import config as config_lib
from keras_largebatch.bert.pretraining import recipe as recipe_lib
from keras_largebatch.training.optimizer_factory import decays
from keras_largebatch.training.plan import plan_run
from keras_largebatch.training.run_directory import SUMMARY_FILENAME
from tests.support import processes
from tests.support.bert_records import write_records
from tests.support.multiworker import run_multi_worker


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    directory = tmp_path_factory.mktemp("records")
    return {
        "varied": write_records(directory / "varied.tfrecord", 256, seed=1),
        "missing": write_records(directory / "missing.tfrecord", 4, drop="masked_lm_ids"),
        "short": write_records(directory / "short.tfrecord", 4, lengths={"input_ids": 15}),
    }


def _config(output_dir, record_file, *overrides):
    """Two phases of 6 steps on one record file; checkpoints every 4 steps, windows of 2."""
    phase = (
        "{seq_length: 16, max_predictions_per_seq: 4, global_batch_size: %d, steps: 6, "
        "warmup_steps: 1, peak_learning_rate: 1.0e-2, input_files: ['%s']}"
    )
    return config_lib.load_config(
        overrides=[
            f"output_dir={output_dir}",
            "model.num_layers=1",
            "model.hidden_dim=16",
            "model.num_heads=2",
            "model.vocabulary_size=64",
            "model.dropout=0.0",
            f"phases=[{phase % (8, record_file)}, {phase % (4, record_file)}]",
            "log_interval=2",
            "checkpoint_interval=4",
            "strategy.name=default",
            *overrides,
        ]
    )


def _weights(summary):
    """Every array of the final checkpoint: model weights and optimizer state."""
    arrays = {}
    with h5py.File(summary["checkpoint"], "r") as file:
        file.visititems(
            lambda name, item: (
                arrays.__setitem__(name, item[()]) if isinstance(item, h5py.Dataset) else None
            )
        )
    return arrays


class _Interrupt(Exception):
    pass


class _InterruptAfter:
    """A Keras callback that raises after ``batches`` training calls, like a preemption."""

    def __new__(cls, batches):
        import keras

        class Callback(keras.callbacks.Callback):
            seen = 0

            def on_train_batch_end(self, batch, logs=None):
                Callback.seen += 1
                if Callback.seen == batches:
                    raise _Interrupt(f"interrupted after {batches} steps")

        return Callback()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, records):
    output_dir = tmp_path_factory.mktemp("uninterrupted")
    config = _config(output_dir, records["varied"])
    return config, pretrain_lib.pretrain(config, log=lambda line: None)


def test_run_reports_steps_throughput_and_metrics(uninterrupted):
    config, summary = uninterrupted
    assert summary["global_steps"] == 12
    assert [phase["steps"] for phase in summary["phases"]] == [6, 6]
    assert summary["examples_per_second"] > 0
    for key in recipe_lib.REPORTED_METRICS:
        assert np.isfinite(summary["initial"][key]) and np.isfinite(summary["final"][key])
    with open(os.path.join(config.output_dir, "summary.json")) as stream:
        assert json.load(stream) == summary
    # Keeps the newest 2 checkpoints: global steps 10 (phase 2, step 4) and 12 (the end).
    assert sorted(os.listdir(os.path.join(config.output_dir, "checkpoints"))) == [
        "ckpt-000000010.weights.h5",
        "ckpt-000000012.weights.h5",
        "state.json",
    ]
    tags = set()
    for event_file in glob.glob(os.path.join(config.output_dir, "logs", "*")):
        for event in tf.compat.v1.train.summary_iterator(event_file):
            tags.update(value.tag for value in event.summary.value)
    assert {
        "loss",
        "masked_lm_loss",
        "masked_lm_accuracy",
        "next_sentence_accuracy",
        "learning_rate",
        "trust_ratio_min",
        "trust_ratio_median",
        "trust_ratio_max",
        "examples_per_second",
    } <= tags


def _assert_every_array_equal(actual, expected):
    """Bitwise equality of two checkpoints' arrays: every weight, embeddings included, and
    the optimizer state."""
    assert actual.keys() == expected.keys()
    assert sum("embedding" in name for name in expected) == 3  # token, position, segment
    assert any(name.startswith("optimizer/") for name in expected)
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)


# Pretrains from the command line's overrides, and after the given number of batches marks
# a file and sleeps: the parent kills it there, at a known step.
_RUN_THAT_STALLS = """
import sys, time
import keras
from keras_largebatch.bert.pretraining import config
from keras_largebatch.bert import pretraining as pretrain

class Stall(keras.callbacks.Callback):
    seen = 0
    def on_train_batch_end(self, batch, logs=None):
        Stall.seen += 1
        if Stall.seen == int(sys.argv[1]):
            open(sys.argv[2], "w").close()
            time.sleep(600)

pretrain.pretrain(config.load_config(None, sys.argv[3:]), callbacks=[Stall()])
"""


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory, records):
    """One run stopped twice, each stop resumed: ``(stalled, lines, summary)``.

    A process killed in phase 1 after step 5 (the checkpoint of step 4 the newest); resumed in
    this process and interrupted by an exception in phase 2 after step 3 (phase 1's end the
    newest); finished by the command line's ``main``. ``lines``: the progress lines of the two
    resumed runs; ``summary``: what the command printed."""
    output_dir = tmp_path_factory.mktemp("resumed")
    config = _config(output_dir, records["varied"])
    overrides = [f"{key}={value}" for key, value in _flatten(config)]
    stalled = output_dir.parent / f"{output_dir.name}-stalled"
    process = processes.Popen(
        [sys.executable, "-c", _RUN_THAT_STALLS, "5", str(stalled)] + overrides,
        # This process's path, as tests.support.multiworker passes it on: its workers and this
        # command then fork from one process server (tests.support.processes).
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(path or os.getcwd() for path in sys.path)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 120
        while not stalled.exists() and time.time() < deadline and process.poll() is None:
            time.sleep(0.05)
        stalled_exit = process.poll()
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    lines = []
    if stalled.exists():
        with pytest.raises(_Interrupt):
            pretrain_lib.pretrain(config, callbacks=[_InterruptAfter(5)], log=lines.append)
    printed, logged = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(logged):
        status = pretrain_command.main(overrides)
    assert status == 0, logged.getvalue()[-2000:]
    lines += logged.getvalue().splitlines()
    return (stalled.exists(), stalled_exit), lines, json.loads(printed.getvalue())


def test_killed_process_resumes(resumed_run, uninterrupted):
    (stalled, stalled_exit), lines, summary = resumed_run
    assert stalled, f"no stall after step 5 (exit code {stalled_exit})"
    # The killed process's newest checkpoint, step 4: the resumed run trains from step 5 on.
    assert any("resuming from" in line and "phase 1, step 4" in line for line in lines)
    assert summary["global_steps"] == 12
    _assert_every_array_equal(_weights(summary), _weights(uninterrupted[1]))


def test_resume_after_interruptions_equals_uninterrupted_run(resumed_run, uninterrupted):
    _, expected = uninterrupted
    (stalled, _), lines, summary = resumed_run
    assert stalled
    # Interrupted at phase 2, step 3: resumes at the start of phase 2 from phase 1's weights,
    # with a fresh optimizer.
    assert any("phase 2, step 0 (global step 6)" in line for line in lines)
    assert summary["global_steps"] == 12 and summary["resumed_from_step"] == 6
    assert summary["initial"] == expected["initial"]
    _assert_every_array_equal(_weights(summary), _weights(expected))


def _flatten(config):
    values = config.to_dict()
    return [(key, json.dumps(values[key])) for key in values if key not in ("phases",)] + [
        ("phases", json.dumps(values["phases"]))
    ]


def test_completed_run_is_reported_not_retrained(uninterrupted):
    config, summary = uninterrupted
    lines = []
    assert pretrain_lib.pretrain(config, log=lines.append) == summary
    assert lines and "already complete (12 steps)" in lines[0]


def test_run_killed_before_its_summary_writes_it_without_training(tmp_path, records, uninterrupted):
    # The last checkpoint marks the run complete; a kill before summary.json must not strand it.
    # A copy of the uninterrupted run's directory (a moved run resumes) without its summary.
    uninterrupted_config, expected = uninterrupted
    shutil.copytree(uninterrupted_config.output_dir, tmp_path, dirs_exist_ok=True)
    os.remove(os.path.join(tmp_path, SUMMARY_FILENAME))
    config = _config(tmp_path, records["varied"])
    lines = []
    summary = pretrain_lib.pretrain(config, log=lines.append)
    assert not any(" step " in line and "loss" in line for line in lines)
    assert summary["global_steps"] == expected["global_steps"] == 12
    assert summary["initial"] == expected["initial"] and summary["final"] == expected["final"]
    assert os.path.exists(os.path.join(tmp_path, SUMMARY_FILENAME))


def test_two_replicas_equal_one_device(tmp_path, records, uninterrupted):
    _, expected = uninterrupted
    # One record file: the two input pipelines take alternate records, so every global batch
    # holds the same examples as the single pipeline's.
    summary = pretrain_lib.pretrain(
        _config(
            tmp_path,
            records["varied"],
            "strategy.name=mirrored",
            "strategy.devices=['/cpu:0', '/cpu:1']",
        ),
        log=lambda line: None,
    )
    assert summary["strategy"]["num_replicas"] == 2
    _assert_arrays_close(_weights(summary), _weights(expected), rtol=1e-5, atol=1e-6)


def _assert_arrays_close(actual, expected, rtol, atol, prefix=""):
    """The arrays of two checkpoints whose names start with ``prefix`` agree ("layers/": the
    weights, "": the optimizer state too). The segment embedding is among them: its gradient
    is a tf.IndexedSlices with repeated rows, the case a sparse update gets wrong."""
    actual = {name: value for name, value in actual.items() if name.startswith(prefix)}
    expected = {name: value for name, value in expected.items() if name.startswith(prefix)}
    assert actual.keys() == expected.keys()
    assert "layers/bert_backbone/layers/embedding/vars/0" in expected
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=rtol, atol=atol, err_msg=name)


def test_steps_per_execution_gives_the_same_run(tmp_path, records, uninterrupted):
    _, expected = uninterrupted
    summary = pretrain_lib.pretrain(
        _config(tmp_path, records["varied"], "steps_per_execution=2"), log=lambda line: None
    )
    assert summary["global_steps"] == 12
    reference = _weights(expected)
    for name, value in _weights(summary).items():
        np.testing.assert_allclose(value, reference[name], rtol=1e-6, atol=1e-7, err_msg=name)


# One step of 8 examples with different numbers of masked tokens (1 to 4 each), so that a loss
# normalized per micro-batch or per replica differs from the full-batch loss. No layer
# adaptation, epsilon 1 and no clipping keep the update linear in the gradient, so a gradient
# of the wrong scale shows in every weight (and the trust ratio would rescale a layer's update
# to the layer's norm, turning the rounding noise of a layer whose gradient nearly cancels into
# a full-size step).
_LINEAR_STEP = [
    "optimizer.exclude_from_layer_adaptation=['.']",
    "optimizer.epsilon=1.0",
    "optimizer.global_clipnorm=null",
]


def _linear_step_config(output_dir, record_files, accumulation=1, *overrides):
    phase = (
        "phases=[{seq_length: 16, max_predictions_per_seq: 4, global_batch_size: 8, "
        "steps: 1, warmup_steps: 0, peak_learning_rate: 1.0e-2, "
        f"gradient_accumulation_steps: {accumulation}, "
        f"input_files: [{', '.join(repr(str(path)) for path in record_files)}]}}]"
    )
    return _config(output_dir, record_files[0], phase, *_LINEAR_STEP, *overrides)


def _linear_step(output_dir, record_files, accumulation=1, *overrides):
    return pretrain_lib.pretrain(
        _linear_step_config(output_dir, record_files, accumulation, *overrides),
        log=lambda line: None,
    )


@pytest.fixture(scope="module")
def step_files(tmp_path_factory, records):
    """The first 8 records of "varied" in two files of 4: the examples of every linear step,
    whatever order an input pipeline shuffles them in (one step of 8 takes all of them)."""
    directory = tmp_path_factory.mktemp("step_files")
    serialized = [record.numpy() for record in tf.data.TFRecordDataset(records["varied"]).take(8)]
    files = [str(directory / "first.tfrecord"), str(directory / "second.tfrecord")]
    for path, part in zip(files, (serialized[:4], serialized[4:])):
        with tf.io.TFRecordWriter(path) as writer:
            for record in part:
                writer.write(record)
    return files


@pytest.fixture(scope="module")
def linear_step_on_one_device(tmp_path_factory, step_files):
    return _linear_step(tmp_path_factory.mktemp("linear"), step_files)


def test_linear_step_batch_has_unequal_masked_counts(tmp_path, step_files):
    # What makes the accumulation tests below able to fail: the step's 8 examples, in the
    # order the input pipeline gives them, split into micro-batches of 2 (4 accumulation
    # steps) or of 4 (2 steps) that carry different numbers of masked tokens.
    config = _linear_step_config(tmp_path, step_files)
    recipe = recipe_lib.BertPretraining(config)
    plan = plan_run(config, num_replicas=1)
    recipe.prepare(plan, lambda line: None, record_counts=input_order.count_records)
    (_, _, weights), *_ = recipe.dataset(plan.phases[0], 8, None, 0).take(1)
    counts = weights["masked_lm"].numpy().sum(axis=1)
    for size in (2, 4):
        micro_batch_counts = [counts[i : i + size].sum() for i in range(0, 8, size)]
        assert len(set(micro_batch_counts)) > 1, (size, micro_batch_counts)


@pytest.mark.parametrize("accumulation", [2, 4])
def test_gradient_accumulation_equals_the_full_batch(
    tmp_path, step_files, linear_step_on_one_device, accumulation
):
    summary = _linear_step(tmp_path, step_files, accumulation)
    assert summary["global_steps"] == 1
    # The weights only: the optimizer also holds the accumulators here.
    _assert_arrays_close(
        _weights(summary),
        _weights(linear_step_on_one_device),
        rtol=1e-5,
        atol=1e-7,
        prefix="layers/",
    )


def test_accumulation_on_two_replicas_equals_the_full_batch(
    tmp_path, step_files, linear_step_on_one_device
):
    # 2 micro-batches of 4, each split over 2 replicas: one input pipeline serves both
    # replicas, so every replica's micro-batch of 2 needs the whole step's masked count.
    summary = _linear_step(
        tmp_path,
        step_files,
        2,
        "strategy.name=mirrored",
        "strategy.devices=['/cpu:0', '/cpu:1']",
    )
    assert summary["strategy"]["num_replicas"] == 2
    _assert_arrays_close(
        _weights(summary),
        _weights(linear_step_on_one_device),
        rtol=1e-5,
        atol=1e-7,
        prefix="layers/",
    )


def accumulate_on_workers(strategy, output_dir, record_files):
    """Worker side: one step of 8 examples as 2 accumulated micro-batches on 2 workers, each
    reading its own file of 4, so a worker's micro-batch of 2 needs the masked count of the
    whole step, summed over both workers and both micro-batches."""
    summary = _linear_step(output_dir, record_files, 2, "strategy.name=multi_worker")
    arrays = _weights(summary) if strategy.cluster_resolver.task_id == 0 else {}
    return {
        "num_replicas": np.array(summary["strategy"]["num_replicas"]),
        "global_steps": np.array(summary["global_steps"]),
        **{name: value for name, value in arrays.items() if name.startswith("layers/")},
    }


def test_accumulation_on_two_workers_equals_the_full_batch(
    tmp_path, step_files, linear_step_on_one_device
):
    # Each worker reads its own file of 4 records: one step's examples in all, whatever order
    # each pipeline shuffles them in. Their masked counts differ, so a loss normalized per
    # worker would weigh the tokens of one worker's file more.
    counts = [
        sum(_masked_lm_weights(record.numpy()) for record in tf.data.TFRecordDataset(path))
        for path in step_files
    ]
    assert counts[0] != counts[1], counts
    chief, other = run_multi_worker(
        accumulate_on_workers,
        num_workers=2,
        kwargs={"output_dir": str(tmp_path / "workers"), "record_files": step_files},
        timeout=240,
    )
    assert int(chief["num_replicas"]) == int(other["num_replicas"]) == 2
    assert int(chief["global_steps"]) == int(other["global_steps"]) == 1
    weights = {name: value for name, value in chief.items() if name.startswith("layers/")}
    _assert_arrays_close(
        weights, _weights(linear_step_on_one_device), rtol=1e-5, atol=1e-7, prefix="layers/"
    )


def _masked_lm_weights(serialized):
    example = tf.train.Example.FromString(serialized)
    return sum(example.features.feature["masked_lm_weights"].float_list.value)


def test_two_replicas_equal_one_device_in_a_step_linear_in_the_gradient(
    tmp_path, step_files, linear_step_on_one_device
):
    # LAMB with its trust ratio and clip, as above, is blind to a uniformly scaled gradient.
    summary = _linear_step(
        tmp_path,
        step_files,
        1,
        "strategy.name=mirrored",
        "strategy.devices=['/cpu:0', '/cpu:1']",
    )
    assert summary["strategy"]["num_replicas"] == 2
    _assert_arrays_close(
        _weights(summary), _weights(linear_step_on_one_device), rtol=1e-5, atol=1e-7
    )


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_trains_with_float32_weights(tmp_path, records, uninterrupted, policy):
    # mixed_float16 also wraps the optimizer in a LossScaleOptimizer (GPU runs). The same run in
    # float32 (`uninterrupted`) is the reference: the losses follow it within the rounding of
    # 16-bit activations.
    summary = pretrain_lib.pretrain(
        _config(tmp_path, records["varied"], f"mixed_precision={policy}"), log=lambda line: None
    )
    reference = uninterrupted[1]
    # Measured: the losses differ from float32's by 5e-5 (both policies, 12 steps).
    for key in ("loss", "masked_lm_loss", "next_sentence_loss"):
        assert abs(summary["final"][key] - reference["final"][key]) < 1e-3, key
    assert summary["final"]["masked_lm_loss"] < summary["initial"]["masked_lm_loss"]
    assert np.isfinite(summary["final"]["loss"])
    weights = _weights(summary)
    assert {value.dtype for name, value in weights.items() if name.startswith("layers/")} == {
        np.dtype("float32")
    }


def test_a_fixed_config_runs_after_a_refused_one_and_a_different_one_is_refused(tmp_path, records):
    # A run refused before its first checkpoint leaves nothing to resume: the corrected
    # command takes the directory over. One phase of 1 or 2 steps: the refusals and the
    # take-overs read the run directory, not the training.
    def one_phase(record_file, steps):
        return _config(
            tmp_path,
            record_file,
            "phases=[{seq_length: 16, max_predictions_per_seq: 4, global_batch_size: 4, "
            f"steps: {steps}, warmup_steps: 0, input_files: ['{record_file}']}}]",
        )

    with pytest.raises(ValueError, match="matches no file"):
        pretrain_lib.pretrain(
            one_phase(str(tmp_path / "typo-*.tfrecord"), 1), log=lambda line: None
        )
    config = one_phase(records["varied"], 1)
    assert pretrain_lib.pretrain(config, log=lambda line: None)["global_steps"] == 1
    changed = one_phase(records["varied"], 2)
    with pytest.raises(
        ValueError,
        match=r"holds a run with a different config \(differs at "
        r"\['phases.0.steps'\]\).*overwrite=true",
    ):
        pretrain_lib.pretrain(changed, log=lambda line: None)
    user_file = tmp_path / "notes.txt"
    user_file.write_text("mine")
    changed.overwrite = True
    summary = pretrain_lib.pretrain(changed, log=lambda line: None)
    assert summary["global_steps"] == 2 and summary["resumed_from_step"] is None
    assert user_file.read_text() == "mine"


def _refused_before_training(config, message):
    with pytest.raises(ValueError, match=message):
        pretrain_lib.pretrain(config, log=lambda line: None)
    assert not os.path.exists(os.path.join(config.output_dir, "checkpoints"))


def test_pattern_matching_no_file(tmp_path):
    _refused_before_training(
        _config(tmp_path / "run", str(tmp_path / "nothing-*.tfrecord")),
        r"record file pattern '.*nothing-\*.tfrecord' matches no file",
    )


def test_record_with_a_missing_feature(tmp_path, records):
    _refused_before_training(
        _config(tmp_path / "run", records["missing"]),
        r"missing.tfrecord' lacks feature 'masked_lm_ids'",
    )


def test_record_with_a_wrong_length(tmp_path, records):
    _refused_before_training(
        _config(tmp_path / "run", records["short"]),
        r"short.tfrecord': feature 'input_ids' has 15 values, expected 16",
    )


def test_batch_that_does_not_split_over_replicas(tmp_path, records):
    _refused_before_training(
        _config(
            tmp_path / "run",
            records["varied"],
            "phases.0.global_batch_size=9",
            "strategy.name=mirrored",
            "strategy.devices=['/cpu:0', '/cpu:1']",
        ),
        r"phases.0.global_batch_size=9 / gradient_accumulation_steps=1 = 9 examples per "
        r"micro-batch must be divisible by the 2 replicas",
    )


def test_non_empty_directory_of_something_else(tmp_path, records):
    (tmp_path / "thesis.tex").write_text("mine")
    _refused_before_training(
        _config(tmp_path, records["varied"]), r"is not empty and holds no run_config.json"
    )
    assert (tmp_path / "thesis.tex").read_text() == "mine"


def test_command_line_errors_and_print_config(capsys):
    assert pretrain_command.main(["model.size=huge"]) == 2
    assert "error: model.size must be one of" in capsys.readouterr().err
    assert pretrain_command.main(["phases.0.max_predictions_per_seq=300"]) == 2
    assert "max_predictions_per_seq must be in [1, phases.0.seq_length=128], got 300" in (
        capsys.readouterr().err
    )
    assert pretrain_command.main(["optimizer.weight_decay=much"]) == 2
    assert "optimizer.weight_decay must be a number, got 'much'" in capsys.readouterr().err
    assert (
        pretrain_command.main(
            [
                "--print_config",
                "phases.0.steps=7",
                "phases.0.warmup_steps=1",
                "log_interval=1",
                "checkpoint_interval=7",
            ]
        )
        == 0
    )
    printed = config_lib.config_from_dict(__import__("yaml").safe_load(capsys.readouterr().out))
    assert printed.phases[0].steps == 7 and printed.model.size_name() == "tiny"


def test_adamw_for_comparison_excludes_the_same_variables_from_decay(tmp_path, records):
    config = _config(tmp_path, records["varied"], "optimizer.name=adamw")
    model = recipe_lib.build_model(config, vocabulary_size=64)
    phase = plan_run(config, num_replicas=1).phases[0]
    optimizer = recipe_lib.build_optimizer(config.optimizer, phase, model)
    optimizer.build(model.trainable_variables)
    decayed = {v.path for v in model.trainable_variables if decays(optimizer, v)}
    excluded = {v.path for v in model.trainable_variables} - decayed
    assert excluded and all("layer_norm" in path or path.endswith("bias") for path in excluded)
    assert any(path.endswith("token_embedding/embeddings") for path in decayed)
    assert not any("layer_norm" in path or path.endswith("/bias") for path in decayed)
