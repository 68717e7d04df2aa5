"""The divergence guard: its decisions against a transcription of the rule, a rate that
diverges (the run stops, no checkpoint holds a non-finite array), and a batch made non-finite
on purpose (a rollback skips it: the same weights as a run that never read it, also when the
run is killed after the rollback and run again)."""

import json
import math
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch import input_order
from keras_largebatch.optimizers import LAMB
from keras_largebatch.training import trainer
from keras_largebatch.training.config import DivergenceConfig
from keras_largebatch.training.divergence import (
    DivergenceGuard,
    TrainingDiverged,
    non_finite_variables,
)
from tests.support.runs import Interrupt, InterruptAfter, checkpoint_arrays
from tests.support.toy_recipe import ToyRegression, load

# The toy run's first phase: 6 steps of one batch each, windows of 2, a checkpoint at step 4.
POISONED_POSITION = 4  # the batch that step 5 reads: its targets are NaN


def mixed_variables():
    """Variables of several shapes and dtypes, two of them holding a NaN or an infinity, and
    the paths `non_finite_variables` must name (JAX's check: tests/support/jax_training.py)."""
    values = {
        "finite": np.ones((2, 3), "float32"),
        "nan": np.array([1.0, np.nan], "float32"),
        "count": np.array([7], "int64"),
        "infinite": np.full((2, 2, 2), np.inf, "float16"),
        "scalar": np.float32(0.5),
    }
    variables = [keras.Variable(value, name=name) for name, value in values.items()]
    return variables, [variables[1].path, variables[3].path]


def test_non_finite_variables_are_named():
    variables, expected = mixed_variables()
    assert non_finite_variables(variables) == expected
    assert non_finite_variables(variables[:1]) == non_finite_variables([]) == []


def test_the_guard_decides_as_the_rule_says():
    losses = [4.0, 3.0, 2.5, 2.0, 6.0, 1.0, float("inf"), float("nan"), 30.0]
    ratio, recent = 2.0, 3
    guard = DivergenceGuard(DivergenceConfig(max_loss_ratio=ratio, recent_windows=recent))
    kept = []
    for loss in losses:
        expected = not math.isfinite(loss) or bool(kept and loss > ratio * np.mean(kept[-recent:]))
        assert (guard.check(loss) is not None) == expected, loss
        if not expected:
            kept.append(loss)
    assert guard.state() == {"recent_losses": kept[-recent:]}
    # Without a ratio only a non-finite loss diverges.
    plain = DivergenceGuard(DivergenceConfig(), recent_losses=[1.0])
    assert plain.check(1e30) is None and "loss nan" in plain.check(float("nan"))


@pytest.mark.parametrize(
    "override, message",
    [
        ("divergence.action=undo", "divergence.action"),
        ("divergence.max_loss_ratio=1", "divergence.max_loss_ratio"),
        ("divergence.skip_batches=-1", "divergence.skip_batches"),
        ("divergence.max_rollbacks=-1", "divergence.max_rollbacks"),
    ],
)
def test_bad_settings_are_refused_at_load(tmp_path, override, message):
    with pytest.raises(ValueError, match=message):
        load(tmp_path, override)


def test_a_rate_that_diverges_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path):
    # The second phase's rate overflows the loss in its first window; the first phase ended
    # with a checkpoint at global step 6, the one checkpoint kept.
    config = load(tmp_path, "phases.1.learning_rate=1e30", "keep_checkpoints=1")
    with pytest.raises(TrainingDiverged) as raised:
        trainer.train(config, ToyRegression(config))
    good = str(tmp_path / "checkpoints" / "ckpt-000000006.weights.h5")
    assert str(raised.value) == (
        f"the run diverged in phase 2 at step 2 (global 8): loss inf; the last good "
        f"checkpoint is {good}"
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["diverged"] == {
        "phase": 2,
        "step": 2,
        "global_step": 8,
        "reason": "loss inf",
        "last_good_checkpoint": good,
    }
    assert sorted(map(str, tmp_path.glob("checkpoints/ckpt-*.weights.h5"))) == [good]
    for name, array in checkpoint_arrays(good).items():
        assert np.all(np.isfinite(array)), name


class _PoisonedRegression(ToyRegression):
    """The toy run whose first phase reads NaN targets in the batch at ``poisoned`` (an input
    position), or, with ``skipped``, never reads the input positions in it (the reference)."""

    def __init__(self, config, poisoned=None, skipped=(), value=float("nan")):
        super().__init__(config)
        self.poisoned = (
            () if poisoned is None else (poisoned,) if isinstance(poisoned, int) else poisoned
        )
        self.skipped = set(skipped)
        self.value = value

    def dataset(self, phase, batch_size, input_context, start_batch):
        dataset = super().dataset(phase, batch_size, input_context, start_batch)
        positions = tf.data.Dataset.range(start_batch, input_order._LAST_EPOCH)
        dataset = tf.data.Dataset.zip(positions, dataset)
        if phase.index == 0 and self.skipped:
            skipped = tf.constant(sorted(self.skipped), tf.int64)
            dataset = dataset.filter(
                lambda position, batch: tf.reduce_all(tf.not_equal(position, skipped))
            )
        poisoned = tf.constant([-1, *(() if phase.index else self.poisoned)], tf.int64)
        return dataset.map(
            lambda position, batch: (
                batch[0],
                tf.where(tf.reduce_any(position == poisoned), self.value, batch[1]),
            )
        )


def _final_arrays(summary):
    return checkpoint_arrays(summary["checkpoint"])


def test_a_batch_made_non_finite_is_rolled_back_and_skipped(tmp_path):
    overrides = ("divergence.action=rollback", "divergence.skip_batches=1")
    config = load(tmp_path / "rolled", *overrides)
    lines = []
    summary = trainer.train(
        config, _PoisonedRegression(config, poisoned=POISONED_POSITION), log=lines.append
    )
    # Step 5 read the NaN batch; the window of steps 5-6 diverged; the checkpoint of step 4
    # is restored, and steps 5-6 read positions 7 and 8 (past step 6's input, plus one).
    (rollback,) = summary["rollbacks"]
    assert {key: rollback[key] for key in ("phase", "step", "restored_step", "input_offset")} == {
        "phase": 1,
        "step": 6,
        "restored_step": 4,
        "input_offset": 3,
    }
    assert json.loads((tmp_path / "rolled" / "rollbacks.json").read_text()) == [rollback]
    assert any(line.startswith("the run diverged in phase 1 at step 6") for line in lines)
    assert "diverged" not in summary and summary["global_steps"] == 12
    reference_config = load(tmp_path / "reference")
    reference = trainer.train(
        reference_config, _PoisonedRegression(reference_config, skipped=(4, 5, 6))
    )
    expected = _final_arrays(reference)
    for name, array in _final_arrays(summary).items():
        np.testing.assert_array_equal(array, expected[name], err_msg=name)

    # Killed after the rollback, before its next checkpoint, and run again: the same decision.
    killed = load(tmp_path / "killed", *overrides)
    with pytest.raises(Interrupt):
        trainer.train(
            killed, _PoisonedRegression(killed, poisoned=POISONED_POSITION), [InterruptAfter(7)]
        )
    assert os.path.exists(tmp_path / "killed" / "rollbacks.json")
    again = trainer.train(killed, _PoisonedRegression(killed, poisoned=POISONED_POSITION))
    assert [entry["input_offset"] for entry in again["rollbacks"]] == [3]
    for name, array in _final_arrays(again).items():
        np.testing.assert_array_equal(array, expected[name], err_msg=name)


def test_rollbacks_stop_at_their_cap(tmp_path):
    config = load(tmp_path, "divergence.action=rollback", "divergence.max_rollbacks=0")
    with pytest.raises(TrainingDiverged, match=r"divergence.max_rollbacks=0 rollbacks done"):
        trainer.train(config, _PoisonedRegression(config, poisoned=POISONED_POSITION))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["diverged"]["step"] == 6
    assert summary["diverged"]["last_good_checkpoint"].endswith("ckpt-000000004.weights.h5")


class _CountingRegression(ToyRegression):
    """The toy run whose optimizer reports 2 skipped steps, as ours count the steps they skip
    for a non-finite gradient."""

    def build_optimizer(self, phase, model):
        optimizer = super().build_optimizer(phase, model)
        optimizer.skipped_steps = keras.Variable(2, dtype="int64", trainable=False)
        return optimizer


def test_progress_lines_count_the_steps_the_optimizer_skipped(tmp_path):
    config = load(tmp_path, "phases=[{steps: 2}]")
    lines = []
    trainer.train(config, _CountingRegression(config), log=lines.append)
    (progress,) = [line for line in lines if line.startswith("phase 1 step 2/2")]
    assert "examples/s, 2 step(s) skipped (gradient not finite), " in progress


class _Float16Regression(_PoisonedRegression):
    """The poisoned toy run with its layers computing in float16, and LAMB skipping a step
    whose gradient is not finite (as the harness's optimizer factory sets it)."""

    def build_model(self):
        return keras.Sequential(
            [
                keras.Input((4,)),
                keras.layers.Dense(8, activation="tanh", name="hidden", dtype="mixed_float16"),
                keras.layers.Dense(1, name="output", dtype="mixed_float16"),
            ]
        )

    def build_optimizer(self, phase, model):
        optimizer = super().build_optimizer(phase, model)
        return LAMB.from_config({**optimizer.get_config(), "skip_non_finite_steps": True})


def test_steps_that_applied_nothing_still_count_and_the_run_ends(tmp_path):
    # Under mixed_float16 Keras's LossScaleOptimizer starts at a scale of 2**15, which
    # overflows the float16 gradients of the first steps: it skips them (the step count stays)
    # and halves the scale. Before, the phase then ended short and the run failed ("a callback
    # stopped training early"); now a skipped step counts, so that windows, checkpoints, the
    # schedule and a resumed run's input stay aligned with the input read.
    config = load(tmp_path, "mixed_precision=mixed_float16")
    summary = trainer.train(config, _Float16Regression(config))
    assert summary["global_steps"] == 12 and "diverged" not in summary
    files = sorted(path.name for path in (tmp_path / "checkpoints").glob("ckpt-*.weights.h5"))
    assert files == ["ckpt-000000010.weights.h5", "ckpt-000000012.weights.h5"]
    scales = [
        value
        for name, value in _final_arrays(summary).items()
        if name.startswith("optimizer") and value.shape == () and value.dtype == np.float32
    ]
    assert any(0 < scale < 2**15 for scale in scales), scales


def test_a_window_whose_every_gradient_is_not_finite_diverged(tmp_path):
    # Targets of 1e6 overflow the float16 gradient (the float32 loss stays finite): LAMB skips
    # steps 5 and 6, the whole third window, which read input positions 4 and 5.
    config = load(tmp_path)
    recipe = _Float16Regression(config, poisoned=(4, 5), value=1e6)
    lines = []
    with pytest.raises(TrainingDiverged) as raised:
        trainer.train(config, recipe, log=lines.append)
    good = tmp_path / "checkpoints" / "ckpt-000000004.weights.h5"
    assert str(raised.value) == (
        "the run diverged in phase 1 at step 6 (global 6): every step of the window had a "
        f"non-finite gradient (2 skipped); the last good checkpoint is {good}"
    )
    assert any("phase 1 step 6/6" in line and "2 step(s) skipped" in line for line in lines)
