"""Instance creation split into fixed, separately seeded tasks, run inline or by a process pool.

Randomness comes from ``seed`` alone: the work is split into fixed tasks (one per pass over
a fixed block of documents), each with its own generator derived from ``(seed, pass, block)``,
so the records are byte-identical whatever the number of worker processes.
"""

import dataclasses
import multiprocessing
import os
import random

import numpy as np

from keras_largebatch.bert.data import instances, masking

# Documents per task. Fixed, not derived from the worker count, so that tasks and their seeds,
# hence the output, do not depend on how many processes run them.
DOCUMENTS_PER_TASK = 32
# Below this many corpus tokens times dupe passes, starting worker processes (each imports
# TensorFlow) costs more than the work they take over.
PARALLEL_MIN_TOKEN_PASSES = 20_000_000


@dataclasses.dataclass(frozen=True)
class Task:
    """One pass (``dupe_index``) over the documents ``[first, last)``, with its own seed."""

    dupe_index: int
    first: int
    last: int
    seed: int


def make_tasks(num_documents, dupe_factor, seed):
    """The tasks of a run, in the order their records are concatenated."""
    tasks = []
    for dupe_index in range(dupe_factor):
        for block, first in enumerate(range(0, num_documents, DOCUMENTS_PER_TASK)):
            task_seed = int(np.random.SeedSequence([seed, dupe_index, block]).generate_state(1)[0])
            tasks.append(
                Task(dupe_index, first, min(first + DOCUMENTS_PER_TASK, num_documents), task_seed)
            )
    return tasks


def default_num_workers():
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def choose_num_workers(num_workers, num_tokens, dupe_factor, num_tasks):
    """Worker processes for a run: ``num_workers`` if given, else all CPUs when that pays off.

    With ``num_workers=None`` a run uses one process below ``PARALLEL_MIN_TOKEN_PASSES`` corpus
    tokens times passes, where starting the workers would cost more than they save, and every
    available CPU above. Never more workers than tasks.
    """
    if num_workers is None:
        parallel = num_tokens * dupe_factor >= PARALLEL_MIN_TOKEN_PASSES
        num_workers = default_num_workers() if parallel else 1
    return max(1, min(num_workers, num_tasks))


def run_tasks(tasks, documents, options, token_ids, num_workers, progress):
    """Runs the tasks on the tokenized ``documents``, in parallel when ``num_workers > 1``;
    returns the serialized instances in task order."""
    if num_workers == 1:
        run = _TaskRunner(documents, options, token_ids)
        return _collect(([run(task)] for task in tasks), len(tasks), num_workers, progress)
    # Pool.imap pickles the callable, corpus included, with every item: sending a few
    # contiguous groups of tasks instead of single tasks keeps that cost negligible.
    num_groups = min(len(tasks), 4 * num_workers)
    bounds = [len(tasks) * group // num_groups for group in range(num_groups + 1)]
    groups = [tasks[first:last] for first, last in zip(bounds, bounds[1:])]
    # "spawn", not "fork": this process already runs TensorFlow threads, and forking a
    # multithreaded process can deadlock the child.
    with multiprocessing.get_context("spawn").Pool(num_workers) as pool:
        results = pool.imap(_TaskGroupRunner(documents, options, token_ids), groups)
        return _collect(results, len(tasks), num_workers, progress)


def _run_task(task, documents, options, token_ids):
    """Serialized instances of one task; a top-level function so worker processes can run it."""
    rng = random.Random(task.seed)
    return [
        instances.serialize_instance(instance, options)
        for document_index in range(task.first, task.last)
        for instance in instances.create_instances_from_document(
            documents, document_index, options, token_ids, rng
        )
    ]


def _collect(results, num_tasks, num_workers, progress):
    """Concatenates per-task record lists arriving in groups, reporting about 10 times."""
    records = []
    done = 0
    next_report = 0
    for group_records in results:
        for task_records in group_records:
            records.extend(task_records)
        done += len(group_records)
        if done >= next_report or done == num_tasks:
            progress(
                f"created instances: task {done}/{num_tasks}, "
                f"{len(records)} examples so far ({num_workers} worker(s))"
            )
            next_report = done + max(1, num_tasks // 10)
    return records


@dataclasses.dataclass(frozen=True)
class _TaskRunner:
    """Picklable callable binding the corpus to ``_run_task``."""

    documents: list
    options: instances.InstanceOptions
    token_ids: masking.TokenIds

    def __call__(self, task):
        return _run_task(task, self.documents, self.options, self.token_ids)


class _TaskGroupRunner(_TaskRunner):
    """Runs a list of tasks in a worker process; returns one record list per task."""

    def __call__(self, tasks):
        return [super(_TaskGroupRunner, self).__call__(task) for task in tasks]
