"""The trainer under MultiWorkerMirroredStrategy: two workers on localhost train one run.

- Given different configs, both workers fail before any training, with one message naming
  the key and both values (the workers compare what they agree on through the strategy's
  all-gather, as JAX's processes do through theirs).
- Given the same config, they train it to the end: a checkpoint every 4 steps and the best
  evaluation's weights, which only the chief writes. Saving mirrored variables is a
  collective, so the other worker joins each save with a throwaway copy; without it the
  chief's first checkpoint aborts both.
- Run again, both find the run complete and return its summary without training.
- Killed at step 5 on both workers and started again, they resume from the checkpoint of
  step 4 and end with the uninterrupted run's loss, to the bit.

The reference is one process: the same config trained without a strategy reaches the same
number of steps and keeps the same files. (The losses differ: each worker reads half of the
examples, so the global batches are not the one process's.)
"""

import json
import os

import keras
import numpy as np
import pytest

from keras_largebatch.training import trainer
from tests.support.multiworker import run_multi_worker
from tests.support.toy_recipe import ToyRegression, load

# One phase of 8 steps: a checkpoint at 4 and 8, evaluations every 2.
ONE_PHASE = ("strategy.name=multi_worker", "phases=[{steps: 8}]")


class BestLossToy(ToyRegression):
    """The toy regression evaluated every 2 steps, the weights of its lowest loss kept."""

    def evaluation_interval(self, phase):
        return 2

    def evaluate(self, model):
        evaluation = super().evaluate(model)
        return {**evaluation, "negative_loss": -evaluation["loss"]}

    def best_metric(self):
        return "negative_loss"


def _text(value):
    return np.frombuffer(value.encode(), np.uint8)


class KillAtStep5(keras.callbacks.Callback):
    """Ends the run at its 5th step, as a kill would, after the checkpoint of step 4."""

    def __init__(self):
        super().__init__()
        self.steps = 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        if self.steps == 5:
            raise KeyboardInterrupt("killed at step 5")


def train_on_workers(strategy, output_dir):
    """Worker side: a config that differs on worker 1, then the run, then the run again;
    then the run in another directory, killed at step 5 and resumed."""
    task = strategy.cluster_resolver.task_id
    results = {}
    mismatched = load(output_dir, *ONE_PHASE, f"phases.0.steps={8 + 2 * task}")
    try:
        trainer.train(mismatched, BestLossToy(mismatched), log=lambda line: None)
    except ValueError as error:
        results["mismatch"] = _text(str(error))
    config = load(output_dir, *ONE_PHASE)
    for name in ("first", "again"):
        summary = trainer.train(config, BestLossToy(config), log=lambda line: None)
        results[f"{name}/global_steps"] = np.array(summary["global_steps"])
        results[f"{name}/loss"] = np.array(summary["final"]["loss"])
    killed = load(f"{output_dir}-killed", *ONE_PHASE)
    try:
        trainer.train(killed, BestLossToy(killed), [KillAtStep5()], log=lambda line: None)
    except KeyboardInterrupt:
        pass
    summary = trainer.train(killed, BestLossToy(killed), log=lambda line: None)
    results["resumed/from"] = np.array(summary["resumed_from_step"])
    results["resumed/loss"] = np.array(summary["final"]["loss"])
    results["files"] = _text(
        json.dumps(sorted(os.listdir(os.path.join(output_dir, "checkpoints"))))
    )
    return results


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    output_dir = str(tmp_path_factory.mktemp("multi_worker_trainer") / "run")
    return run_multi_worker(
        train_on_workers, num_workers=2, kwargs={"output_dir": output_dir}, timeout=240
    )


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    config = load(tmp_path_factory.mktemp("one_process") / "run", "phases=[{steps: 8}]")
    summary = trainer.train(config, BestLossToy(config), log=lambda line: None)
    return summary, sorted(os.listdir(os.path.join(config.output_dir, "checkpoints")))


def test_workers_given_different_configs_both_fail_naming_the_key(workers):
    expected = (
        "the run's processes disagree on the run's config (start every process with the "
        "same): process 1 has phases.0.steps=10 where process 0 has 8"
    )
    assert [bytes(result["mismatch"]).decode() for result in workers] == [expected] * 2


def test_the_workers_train_the_run_to_the_end_and_keep_one_set_of_files(workers, one_process):
    summary, files = one_process
    for result in workers:
        assert int(result["first/global_steps"]) == summary["global_steps"] == 8
        # One model: the workers' final losses are the same number.
        assert float(result["first/loss"]) == float(workers[0]["first/loss"])
        kept = json.loads(bytes(result["files"]).decode())
        # The best evaluation's step may differ from the one process's; one is kept.
        assert [name for name in kept if not name.startswith("best-")] == [
            name for name in files if not name.startswith("best-")
        ]
        assert len([name for name in kept if name.startswith("best-")]) == 1
    assert "best.json" in files and "state.json" in files


def test_a_rerun_finds_the_run_complete_on_every_worker(workers):
    for result in workers:
        assert int(result["again/global_steps"]) == 8
        assert float(result["again/loss"]) == float(result["first/loss"])


def test_a_run_killed_on_both_workers_resumes_to_the_same_weights(workers):
    for result in workers:
        assert int(result["resumed/from"]) == 4
        assert float(result["resumed/loss"]) == float(result["first/loss"])
