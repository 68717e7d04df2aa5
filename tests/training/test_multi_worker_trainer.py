"""The trainer under MultiWorkerMirroredStrategy: two workers on localhost train one run.

- Each worker reads only its own record files, positioned at the resumed step, as the JAX
  road's processes do: the BERT recipe's phase dataset built through the harness
  (`trainer.make_phase_dataset` on `devices.TensorFlowDevices`) at step 3 of a phase of 4
  files whose records carry their file and place in ``input_ids[1]``; the reference is one
  process's pipeline for the same input context, read without any strategy.

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

The reference of the runs is one process: the same config trained without a strategy reaches
the same number of steps and keeps the same files. (The losses differ: each worker reads half of
the examples, so the global batches are not the one process's.)

One launch of the two workers serves every two-worker test of the suite, since each worker
process costs seconds of TensorFlow start-up: after the trainer's runs, the workers also train
the tiny model of tests/test_distribute.py, the clipped optimizer configurations of
tests/test_distributed_training.py (each compared here with one device) and the
steps-per-execution fits of tests/test_steps_per_execution.py. The workers make their strategy
as "auto", which checks that a 2-worker TF_CONFIG selects multi_worker; the trainer's
"multi_worker" then finds that strategy (a process has one).
"""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch import input_order
from keras_largebatch.bert.pretraining import config as config_lib
from keras_largebatch.bert.pretraining.recipe import BertPretraining
from keras_largebatch.training import trainer
from keras_largebatch.training.devices import TensorFlowDevices
from keras_largebatch.training.plan import plan_run
from tests.bert.test_input_pipeline import MAX_PREDICTIONS, SEQ_LENGTH, VOCABULARY, _write_files
from tests.support.multiworker import run_multi_worker
from tests.support.toy_recipe import ToyRegression, load
from tests.test_distribute import assert_same_training, fit_tiny_model
from tests.test_distributed_training import (
    CLIPPED,
    assert_same_weights,
    train_configs_on_workers,
    train_model,
)
from tests.test_steps_per_execution import train_steps_per_execution_on_workers

# One phase of 8 steps: a checkpoint at 4 and 8, evaluations every 2.
ONE_PHASE = ("strategy.name=multi_worker", "phases=[{steps: 8}]")
# The BERT input: records per file, the step read from, micro-batches read per worker (16
# examples, more than a worker's 12 records).
PER_FILE = 6
START_STEP = 3
BATCHES = 4


def _bert_recipe(files, vocab_file, num_replicas):
    config = config_lib.load_config(
        overrides=[
            "output_dir=unused",
            f"data.vocab_file={vocab_file}",
            "data.shuffle_buffer_size=5",
            "strategy.name=default",
            f"phases=[{{seq_length: {SEQ_LENGTH}, max_predictions_per_seq: {MAX_PREDICTIONS}, "
            "global_batch_size: 4, steps: 10, warmup_steps: 1, "
            f"input_files: {json.dumps(files)}}}]",
        ]
    )
    recipe = BertPretraining(config)
    plan = plan_run(config, num_replicas)
    recipe.prepare(plan, lambda line: None, input_order.RecordCounts())
    return recipe, plan.phases[0]


def read_phase_input(strategy, files, vocab_file):
    """Worker side: the record ids of this worker's replicas' first `BATCHES` micro-batches."""
    recipe, phase = _bert_recipe(files, vocab_file, strategy.num_replicas_in_sync)
    dataset = trainer.make_phase_dataset(TensorFlowDevices(strategy), recipe, phase, START_STEP)
    ids, iterator = [], iter(dataset)
    for _ in range(BATCHES):
        features, _, _ = next(iterator)
        for tokens in strategy.experimental_local_results(features["token_ids"]):
            ids.extend(int(token) for token in tokens[:, 1])
    return {"ids": np.array(ids), "task": np.array(strategy.cluster_resolver.task_id)}


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


def train_on_workers(strategy, output_dir, files, vocab_file):
    """Worker side: `read_phase_input`; a config that differs on worker 1, then the run, then
    the run again; then the run in another directory, killed at step 5 and resumed."""
    task = strategy.cluster_resolver.task_id
    results = read_phase_input(strategy, files, vocab_file)
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


def train_everything_on_workers(strategy, output_dir, files, vocab_file):
    """Worker side: `train_on_workers`, then the tiny model (`fit_tiny_model`, under
    "tiny/"), the clipped configurations at 2 accumulation steps (`train_configs_on_workers`,
    under "configs/") and the steps-per-execution fits (under "steps_per_execution/")."""
    results = train_on_workers(strategy, output_dir, files, vocab_file)
    for prefix, result in (
        ("tiny", fit_tiny_model(strategy)),
        ("configs", train_configs_on_workers(strategy, CLIPPED, accumulation=2)),
        ("steps_per_execution", train_steps_per_execution_on_workers(strategy)),
    ):
        results.update({f"{prefix}/{name}": value for name, value in result.items()})
    return results


def _under(result, prefix):
    """The entries of one worker's result under ``prefix/``, without it."""
    return {
        name[len(prefix) + 1 :]: value
        for name, value in result.items()
        if name.startswith(f"{prefix}/")
    }


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """4 BERT record files of `PER_FILE` records and a vocabulary file."""
    directory = tmp_path_factory.mktemp("multi_worker_input")
    files, _ = _write_files(directory, num_files=4, per_file=PER_FILE)
    vocab_file = directory / "vocab.txt"
    vocab_file.write_text("\n".join(VOCABULARY) + "\n")
    return files, str(vocab_file)


@pytest.fixture(scope="module")
def workers(tmp_path_factory, inputs):
    output_dir = str(tmp_path_factory.mktemp("multi_worker_trainer") / "run")
    files, vocab_file = inputs
    return run_multi_worker(
        train_everything_on_workers,
        num_workers=2,
        strategy="auto",
        kwargs={"output_dir": output_dir, "files": files, "vocab_file": vocab_file},
        timeout=450,
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


def test_each_worker_reads_only_its_files_from_the_resumed_position(workers, inputs):
    files, vocab_file = inputs
    by_task = {int(result["task"]): result["ids"].tolist() for result in workers}
    for task, ids in by_task.items():
        # The records of file f carry 1000 + f * PER_FILE + i; worker w owns files w and w + 2.
        owners = {(value - 1000) // PER_FILE % 2 for value in ids}
        assert owners == {task}, (task, ids)
        # The reference: one process's pipeline of the same input context (2 pipelines, this
        # one's id), started at the same step, read without a strategy.
        recipe, phase = _bert_recipe(files, vocab_file, num_replicas=2)
        context = tf.distribute.InputContext(2, task, 2)
        batch_size = context.get_per_replica_batch_size(phase.micro_batch_size)
        # One batch of 2 examples per pipeline per step of 4 (no accumulation).
        assert batch_size == 2
        reference = recipe.dataset(phase, batch_size, context, START_STEP)
        expected = [
            int(token)
            for features, _, _ in reference.take(BATCHES).as_numpy_iterator()
            for token in features["token_ids"][:, 1]
        ]
        assert ids == expected
    assert not set(by_task[0]) & set(by_task[1])


def test_two_workers_formed_one_cluster_of_two_replicas(workers):
    assert [int(result["configs/task_id"]) for result in workers] == [0, 1]
    for result in workers:
        assert int(result["configs/num_workers"]) == int(result["configs/num_replicas"]) == 2
        assert float(result["configs/replicas_summed"]) == 2.0


@pytest.mark.parametrize("config", CLIPPED)
def test_multi_worker_matches_single_device(config, workers):
    # The single-device reference of tests/test_distributed_training.py (4 steps of 16).
    expected = train_model(tf.distribute.get_strategy(), config)
    for result in workers:
        run = _under(result, f"configs/{config}")
        assert int(run["num_replicas"]) == 2 and int(run["iterations"]) == 4
        assert_same_weights(run, expected)


def test_two_workers_run_two_steps_per_execution_as_single_steps(workers):
    for result in workers:
        single = _under(result, "steps_per_execution/steps1")
        assert len(single) > 4
        for name, value in single.items():
            np.testing.assert_allclose(
                result[f"steps_per_execution/steps2/{name}"], value, rtol=1e-6, atol=1e-7
            )


def test_two_workers_match_one_device_at_the_same_global_batch(workers):
    # With the stock MultiWorkerMirroredStrategy, model.fit fails here (keras issue 20585).
    reference = fit_tiny_model(tf.distribute.get_strategy())
    for result in workers:
        tiny = _under(result, "tiny")
        assert str(tiny["kind"]) == "multi_worker"
        assert int(tiny["num_replicas"]) == 2 and int(tiny["num_workers"]) == 2
        assert_same_training(tiny, reference)
