"""The trainer on a recipe that is not BERT: progress, summary, resume, unreadable checkpoints.

Runs are the toy regression of `tests.support.toy_recipe` (two phases of 6 steps, windows of
2, checkpoints every 4); weights are compared through the checkpoint files the runs write.
"""

import ast
import copy
import glob
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch.training import trainer
from keras_largebatch.training.plan import plan_phase
from tests.support.runs import Interrupt, InterruptAfter, checkpoint_arrays
from tests.support.toy_recipe import ToyRegression, load

TRAINING = Path(trainer.__file__).parent
RECIPES = ("keras_largebatch.bert", "keras_largebatch.vision", "keras_largebatch.study")


def _run(config, callbacks=(), lines=None):
    log = lines.append if lines is not None else lambda line: None
    return trainer.train(config, ToyRegression(config), callbacks, log)


def _assert_same_weights(summary, expected):
    resumed = checkpoint_arrays(summary["checkpoint"])
    reference = checkpoint_arrays(expected["checkpoint"])
    assert resumed.keys() == reference.keys() and len(reference) > 6
    for name in reference:
        np.testing.assert_array_equal(resumed[name], reference[name], err_msg=name)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    config = load(tmp_path_factory.mktemp("uninterrupted"))
    lines = []
    return config, _run(config, lines=lines), lines


def _imported_modules(path, package):
    """The absolute names of the modules a file imports, wherever the import stands (a function
    body too): ``import a.b`` gives a.b; ``from a import b`` gives a and a.b, since b may be a
    module; a relative import is resolved against ``package``, the file's own package."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module) if part)
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def test_the_harness_imports_no_recipe():
    # The harness runs any recipe, so it may not depend on one: recipes import the harness,
    # never the other way round.
    for path in sorted(TRAINING.rglob("*.py")):
        package = ".".join((trainer.__package__, *path.relative_to(TRAINING).parent.parts))
        imported = _imported_modules(path, package)
        recipes = sorted(name for name in imported if ".".join(name.split(".")[:2]) in RECIPES)
        assert not recipes, f"{path} imports {recipes}"


def test_progress_lines_summary_and_tensorboard(uninterrupted):
    config, summary, lines = uninterrupted
    progress = [line for line in lines if re.match(r"phase \d step ", line)]
    assert len(progress) == 6  # 3 windows per phase
    pattern = (
        r"phase 2 step 4/6 \(global 10\): loss \d+\.\d{4} mae \d+\.\d{4} lr 0\.05 "
        r"[\d,]+ examples/s, \d+ s elapsed"
    )
    assert re.fullmatch(pattern, progress[4]), progress[4]
    assert (
        "phase 1/2: 6 steps, global batch 8 = 1 replica x 8 examples x 1 accumulation step, "
        "learning_rate 0.05"
    ) in lines
    assert summary["global_steps"] == 12 and summary["resumed_from_step"] is None
    assert summary["task"] == "toy regression"
    assert [
        (p["phase"], p["steps"], p["global_batch_size"], p["learning_rate"])
        for p in summary["phases"]
    ] == [(1, 6, 8, 0.05), (2, 6, 4, 0.05)]
    assert all(p["examples_per_second"] > 0 for p in summary["phases"])
    assert set(summary["initial"]) == {"loss", "mean_absolute_error"}
    assert summary["final"]["loss"] < summary["initial"]["loss"]
    assert summary["strategy"]["num_replicas"] == 1
    assert summary["checkpoint"].endswith("ckpt-000000012.weights.h5")
    steps = {}
    for event_file in glob.glob(os.path.join(config.output_dir, "logs", "*")):
        for event in tf.compat.v1.train.summary_iterator(event_file):
            for value in event.summary.value:
                steps.setdefault(value.tag, []).append(event.step)
    assert sorted(steps["loss"]) == [2, 4, 6, 8, 10, 12]  # the global optimizer step
    assert {
        "mean_absolute_error",
        "learning_rate",
        "examples_per_second",
        "trust_ratio_median",
    } <= set(steps)


def test_a_completed_run_reports_its_summary(uninterrupted):
    config, summary, _ = uninterrupted
    lines = []
    assert _run(config, lines=lines) == summary
    assert len(lines) == 1 and "already complete (12 steps)" in lines[0]


def test_resume_after_interruptions_is_bitwise(tmp_path, uninterrupted):
    _, expected, _ = uninterrupted
    config = load(tmp_path)
    lines = []
    with pytest.raises(Interrupt):  # phase 1, step 5: the checkpoint of step 4 is the newest
        _run(config, [InterruptAfter(5)], lines)
    with pytest.raises(Interrupt):  # resumed at step 4, stopped in phase 2
        _run(config, [InterruptAfter(5)], lines)
    assert any("resuming from" in line and "phase 1, step 4" in line for line in lines)
    summary = _run(config, lines=lines)
    assert any("phase 2, step 0 (global step 6)" in line for line in lines)
    assert summary["resumed_from_step"] == 6 and summary["global_steps"] == 12
    assert summary["initial"] == expected["initial"]
    _assert_same_weights(summary, expected)


def test_a_truncated_newest_checkpoint_resumes_from_the_older_one(tmp_path, uninterrupted):
    _, expected, _ = uninterrupted
    config = load(tmp_path)
    with pytest.raises(Interrupt):  # phase 2, step 5: checkpoints at global 6 and 10
        _run(config, [InterruptAfter(11)])
    newest = os.path.join(tmp_path, "checkpoints", "ckpt-000000010.weights.h5")
    with open(newest, "r+b") as stream:
        stream.truncate(os.path.getsize(newest) // 3)
    lines = []
    summary = _run(config, lines=lines)
    warnings = [line for line in lines if line.startswith("warning:")]
    assert len(warnings) == 1
    assert warnings[0].startswith(f"warning: checkpoint {newest} cannot be read (")
    assert f"kept as {newest}.unreadable" in warnings[0]
    assert summary["resumed_from_step"] == 6
    _assert_same_weights(summary, expected)
    assert os.path.exists(newest + ".unreadable")


def test_no_readable_checkpoint_stops_the_run(tmp_path):
    config = load(tmp_path)
    with pytest.raises(Interrupt):
        _run(config, [InterruptAfter(11)])
    directory = os.path.join(tmp_path, "checkpoints")
    for path in glob.glob(os.path.join(directory, "ckpt-*")):
        with open(path, "r+b") as stream:
            stream.truncate(64)
    before = sorted(os.listdir(directory))
    with pytest.raises(
        OSError,
        match=r"no checkpoint of the run .*ckpt-000000010.*"
        r"ckpt-000000006",
    ):
        _run(config)
    assert sorted(os.listdir(directory)) == before


def test_two_replicas_equal_one_device(tmp_path, uninterrupted):
    _, expected, _ = uninterrupted
    summary = _run(
        load(tmp_path, "strategy.name=mirrored", "strategy.devices=['/cpu:0', '/cpu:1']")
    )
    assert summary["strategy"]["num_replicas"] == 2
    reference = checkpoint_arrays(expected["checkpoint"])
    for name, value in checkpoint_arrays(summary["checkpoint"]).items():
        np.testing.assert_allclose(value, reference[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_a_batch_that_does_not_split_over_the_replicas_is_refused_first(tmp_path):
    config = load(
        tmp_path,
        "phases.1.global_batch_size=3",
        "strategy.name=mirrored",
        "strategy.devices=['/cpu:0', '/cpu:1']",
    )
    recipe = ToyRegression(config)
    with pytest.raises(
        ValueError,
        match=r"phases.1.global_batch_size=3 / "
        r"gradient_accumulation_steps=1 = 3 examples per "
        r"micro-batch must be divisible by the 2 replicas",
    ):
        trainer.train(config, recipe, log=lambda line: None)
    assert not recipe.prepared
    assert not os.path.exists(os.path.join(tmp_path, "checkpoints"))


def test_per_replica_batch_size_with_accumulation():
    def phase():
        return load(
            "unused", "phases.0.global_batch_size=32", "phases.0.gradient_accumulation_steps=4"
        ).phases[0]

    assert plan_phase(phase(), 2).per_replica_batch_size == 4
    assert plan_phase(phase(), 8).per_replica_batch_size == 1
    with pytest.raises(
        ValueError, match="8 examples per micro-batch must be divisible by the 16 replicas"
    ):
        plan_phase(phase(), 16)


def test_a_derived_accumulation_trains_as_the_explicit_one(tmp_path):
    # 8 examples at most 4 per replica: 2 micro-batches in phase 1; phase 2's 4 fit in one.
    limited = load(
        tmp_path / "derived",
        "phases.0.max_per_replica_batch_size=4",
        "phases.1.max_per_replica_batch_size=4",
    )
    lines = []
    derived = _run(limited, lines=lines)
    explicit = _run(load(tmp_path / "explicit", "phases.0.gradient_accumulation_steps=2"))
    _assert_same_weights(derived, explicit)
    assert any(
        line.startswith(
            "phase 1/2: 6 steps, global batch 8 = 1 replica x 4 examples x 2 accumulation steps"
        )
        for line in lines
    )
    assert [
        (p["per_replica_batch_size"], p["gradient_accumulation_steps"]) for p in derived["phases"]
    ] == [(4, 2), (4, 1)]
    with open(tmp_path / "derived" / "run_config.json") as stream:
        recorded = json.load(stream)["phases"]
    assert [
        (p["gradient_accumulation_steps"], p["max_per_replica_batch_size"]) for p in recorded
    ] == [
        (2, 4),
        (1, 4),
    ]


def test_the_users_config_is_not_changed_by_a_run_and_its_resume(tmp_path):
    # A derived accumulation is where a trainer resolving in place would write into it.
    config = load(tmp_path, "phases.0.max_per_replica_batch_size=4")  # 2 micro-batches a step
    before = copy.deepcopy(config.to_dict())
    with pytest.raises(Interrupt):
        _run(config, [InterruptAfter(10)])  # in step 5: the checkpoint of step 4 is the newest
    assert config.to_dict() == before
    summary = _run(config)
    assert summary["resumed_from_step"] == 4
    assert summary["phases"][0]["gradient_accumulation_steps"] == 2
    assert config.to_dict() == before
    assert config.phases[0].gradient_accumulation_steps is None


def test_a_run_recorded_before_max_per_replica_batch_size_resumes(tmp_path, uninterrupted):
    _, expected, _ = uninterrupted
    config = load(tmp_path)
    with pytest.raises(Interrupt):
        _run(config, [InterruptAfter(5)])
    # What an earlier version recorded: no max_per_replica_batch_size key.
    for path, key in (
        (tmp_path / "run_config.json", None),
        (tmp_path / "checkpoints" / "state.json", "config"),
    ):
        with open(path) as stream:
            record = json.load(stream)
        for phase in (record[key] if key else record)["phases"]:
            del phase["max_per_replica_batch_size"]
        with open(path, "w") as stream:
            json.dump(record, stream)
    summary = _run(load(tmp_path))
    assert summary["resumed_from_step"] == 4
    _assert_same_weights(summary, expected)


def test_a_setting_of_the_other_backend_is_refused_first(tmp_path):
    config = load(tmp_path)
    config.strategy.name = "data_parallel"  # JAX's
    recipe = ToyRegression(config)
    with pytest.raises(
        ValueError,
        match=r"strategy.name='data_parallel' is not available on the tensorflow backend; "
        r"allowed there: \('auto', 'tpu', .*keras.distribution's DataParallel and "
        r"ModelParallel, for KERAS_BACKEND=jax",
    ):
        trainer.train(config, recipe, log=lambda line: None)
    assert not recipe.prepared and not os.path.exists(tmp_path / "run_config.json")


def test_evaluations_and_a_reached_target_end_the_run(tmp_path):
    config = load(tmp_path)
    lines = []
    recipe = ToyRegression(config, evaluation_interval=4)
    summary = trainer.train(config, recipe, log=lines.append)
    # Every 4 steps and at each phase's end: global steps 4, 6, 10, 12.
    assert [e["global_step"] for e in summary["evaluations"]] == [4, 6, 10, 12]
    assert summary["target_reached_at_step"] is None and summary["time_to_target_seconds"] is None
    losses = [e["loss"] for e in summary["evaluations"]]
    # A target between the first and second evaluation's loss stops the run at global step 6.
    target = (losses[0] + losses[1]) / 2
    assert losses[1] < target < losses[0]
    stopped = tmp_path / "stopped"
    config = load(stopped)
    lines = []
    summary = trainer.train(config, ToyRegression(config, 4, target), log=lines.append)
    assert summary["global_steps"] == 6 and summary["target_reached_at_step"] == 6
    assert 0 < summary["time_to_target_seconds"] <= summary["wall_time_seconds"]
    assert [p["phase"] for p in summary["phases"]] == [1]
    assert any(
        "evaluation at global step 6: loss" in line and "target reached" in line for line in lines
    )
    assert not any(line.startswith("phase 2") for line in lines)
    assert os.listdir(stopped / "checkpoints").count("ckpt-000000006.weights.h5") == 1
    lines = []
    assert trainer.train(config, ToyRegression(config, 4, target), log=lines.append) == summary
    assert "already complete (6 steps)" in lines[0]


def test_the_processes_meet_before_training_and_after_the_summary(tmp_path, monkeypatch):
    # What every process of a run compares, in order; the last meeting comes once the writer
    # wrote the summary, so that no process returns before it is on disk.
    from keras_largebatch.training.devices import TensorFlowDevices

    met = []

    def check_same(self, description, value):
        met.append((description.split(" (")[0], os.path.exists(tmp_path / "summary.json")))

    monkeypatch.setattr(TensorFlowDevices, "check_same", check_same)
    config = load(tmp_path)
    trainer.train(config, ToyRegression(config), log=lambda line: None)
    assert [description for description, _ in met] == [
        "the run's config",
        f"what output_dir {str(tmp_path)!r} holds",
        "the run's end",
    ]
    assert [written for _, written in met] == [False, False, True]
