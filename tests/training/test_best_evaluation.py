"""The trainer keeps the weights of a recipe's best evaluation: only a strictly better one
replaces them, they survive a resume, and a fresh run starts without them.

Runs are the toy regression of `tests.support.toy_recipe` (two phases of 6 steps, windows of
2, checkpoints every 4), evaluated every 2 steps with scores scripted by the global step, so
which evaluation is best is known in advance.
"""

import json
import os

import numpy as np
import pytest

from keras_largebatch.training import trainer
from tests.support.runs import Interrupt, InterruptAfter, checkpoint_arrays
from tests.support.toy_recipe import ToyRegression, load

# Global step -> score: the first is NaN, which is never kept; the best is at 6, the end of
# phase 1; 8 ties it and 10 is NaN, neither replaces it.
SCORES = {2: float("nan"), 4: 0.5, 6: 0.9, 8: 0.9, 10: float("nan"), 12: 0.7}


class ScoredToy(ToyRegression):
    """The toy regression, evaluated every 2 steps with `SCORES` (and its loss)."""

    def evaluation_interval(self, phase):
        self.phase = phase
        return 2

    def evaluate(self, model):
        global_step = self.phase.first_global_step + int(model.optimizer.iterations.numpy())
        return {**super().evaluate(model), "score": SCORES[global_step]}

    def best_metric(self):
        return "score"


def _run(config, callbacks=()):
    return trainer.train(config, ScoredToy(config), callbacks, log=lambda line: None)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    # Every checkpoint kept, so the best's weights can be compared with the checkpoint of its step.
    config = load(tmp_path_factory.mktemp("best"), "keep_checkpoints=10", "checkpoint_interval=2")
    return config, _run(config)


def _assert_same_arrays(path, reference):
    arrays, expected = checkpoint_arrays(path), checkpoint_arrays(reference)
    assert arrays.keys() == expected.keys() and len(expected) > 6
    for name in expected:
        np.testing.assert_array_equal(arrays[name], expected[name], err_msg=name)


def test_the_best_evaluation_is_kept_and_never_replaced_by_a_worse_or_equal_one(uninterrupted):
    config, summary = uninterrupted
    scores = [evaluation["score"] for evaluation in summary["evaluations"]]
    assert [e["global_step"] for e in summary["evaluations"]] == sorted(SCORES)
    np.testing.assert_array_equal(scores, list(SCORES.values()))
    best = summary["best"]
    assert best["global_step"] == 6 and best["score"] == 0.9
    checkpoints = os.path.join(config.output_dir, "checkpoints")
    assert best["checkpoint"] == os.path.join(checkpoints, "best-000000006.weights.h5")
    _assert_same_arrays(best["checkpoint"], os.path.join(checkpoints, "ckpt-000000006.weights.h5"))
    with open(os.path.join(checkpoints, "best.json")) as stream:
        assert json.load(stream) == best
    # Only the best's weights are kept.
    assert [name for name in os.listdir(checkpoints) if name.startswith("best-")] == [
        "best-000000006.weights.h5"
    ]


def test_the_best_survives_a_resume(tmp_path, uninterrupted):
    _, expected = uninterrupted
    config = load(tmp_path, "keep_checkpoints=10", "checkpoint_interval=4")
    with pytest.raises(Interrupt):  # at step 7: the best (6) and the checkpoint of 6 are kept
        _run(config, [InterruptAfter(7)])
    assert json.load(open(tmp_path / "checkpoints" / "best.json"))["global_step"] == 6
    summary = _run(config)
    # Evaluated again after the resume at 8 (a tie), 10 and 12 (worse): the best stays.
    assert summary["resumed_from_step"] == 6
    assert (summary["best"]["global_step"], summary["best"]["score"]) == (6, 0.9)
    _assert_same_arrays(summary["best"]["checkpoint"], expected["best"]["checkpoint"])


def test_a_fresh_run_drops_the_best_of_a_run_without_checkpoints(tmp_path):
    config = load(tmp_path, "keep_checkpoints=10", "checkpoint_interval=6")
    with pytest.raises(Interrupt):  # at step 5: the best of step 4, no checkpoint yet
        _run(config, [InterruptAfter(5)])
    best_file = tmp_path / "checkpoints" / "best.json"
    stale = json.loads(best_file.read_text())
    assert stale["global_step"] == 4
    # As if another run had scored better: a run that starts over must not keep it, even one
    # that checkpoints before its first kept evaluation (step 2's is NaN) and then resumes.
    best_file.write_text(json.dumps(dict(stale, score=99.0)))
    config = load(tmp_path, "keep_checkpoints=10", "checkpoint_interval=2")
    with pytest.raises(Interrupt):  # at step 3: the checkpoint of step 2 the newest
        _run(config, [InterruptAfter(3)])
    summary = _run(config)
    assert summary["resumed_from_step"] == 2
    assert (summary["best"]["global_step"], summary["best"]["score"]) == (6, 0.9)


def test_overwrite_drops_the_best_and_a_recipe_without_a_best_metric_keeps_none(tmp_path):
    config = load(tmp_path)
    assert _run(config)["best"]["global_step"] == 6
    config = load(tmp_path, "overwrite=true")
    summary = trainer.train(
        config, ToyRegression(config, evaluation_interval=4), log=lambda line: None
    )
    assert "best" not in summary and summary["evaluations"]
    assert not any(name.startswith("best") for name in os.listdir(tmp_path / "checkpoints"))
