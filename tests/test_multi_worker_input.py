"""Under MultiWorkerMirroredStrategy each worker reads only its own record files, positioned at
the resumed step, as the JAX road's processes do.

Two workers on localhost build the BERT recipe's phase dataset through the harness
(`trainer.make_phase_dataset` on `devices.TensorFlowDevices`) at step 3 of a phase of 4 files
whose records carry their file and place in ``input_ids[1]``; the reference is one process's
pipeline for the same input context, read without any strategy.
"""

import json

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

PER_FILE = 6
START_STEP = 3
BATCHES = 4  # micro-batches read per worker: 16 examples, more than a worker's 12 records


def _recipe(files, vocab_file, num_replicas):
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
    recipe, phase = _recipe(files, vocab_file, strategy.num_replicas_in_sync)
    dataset = trainer.make_phase_dataset(TensorFlowDevices(strategy), recipe, phase, START_STEP)
    ids, iterator = [], iter(dataset)
    for _ in range(BATCHES):
        features, _, _ = next(iterator)
        for tokens in strategy.experimental_local_results(features["token_ids"]):
            ids.extend(int(token) for token in tokens[:, 1])
    return {"ids": np.array(ids), "task": np.array(strategy.cluster_resolver.task_id)}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    directory = tmp_path_factory.mktemp("multi_worker_input")
    files, _ = _write_files(directory, num_files=4, per_file=PER_FILE)
    vocab_file = directory / "vocab.txt"
    vocab_file.write_text("\n".join(VOCABULARY) + "\n")
    return files, str(vocab_file)


def test_each_worker_reads_only_its_files_from_the_resumed_position(inputs):
    files, vocab_file = inputs
    results = run_multi_worker(
        read_phase_input,
        num_workers=2,
        kwargs={"files": files, "vocab_file": vocab_file},
        timeout=240,
    )
    by_task = {int(result["task"]): result["ids"].tolist() for result in results}
    for task, ids in by_task.items():
        # The records of file f carry 1000 + f * PER_FILE + i; worker w owns files w and w + 2.
        owners = {(value - 1000) // PER_FILE % 2 for value in ids}
        assert owners == {task}, (task, ids)
        # The reference: one process's pipeline of the same input context (2 pipelines, this
        # one's id), started at the same step, read without a strategy.
        recipe, phase = _recipe(files, vocab_file, num_replicas=2)
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
