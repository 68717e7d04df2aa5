"""A run as a group of JAX processes, one per host, here on one machine: the same weights as one
process over the same input pipelines, each process reading its share, only process 0 writing,
a killed run resuming, and launches that cannot work failing before any training.

The runs are the toy recipe's, the tiny BERT's and the image recipe's, with 2 micro-batches per
step in their first phase and 2 input pipelines (tests/support/multi_host.py), in processes of 1
or 2 CPU devices whose collectives go over gloo; weights and optimizer state are compared
through the checkpoints.
"""

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch.training.plan import plan_run
from tests.support.multi_host import (
    JOIN_TIMEOUT,
    LOST_PEER_KILLED_AT,
    LOST_PEER_TIMEOUT,
    files_written,
    run_group,
    write_recipe_data,
)
from tests.support.runs import checkpoint_arrays
from tests.support.toy_recipe import ToyRegression, load


@pytest.fixture(scope="module")
def work_dir(tmp_path_factory):
    pytest.importorskip("jax")
    directory = tmp_path_factory.mktemp("multi_host")
    write_recipe_data(directory)
    return directory


def _launch(mode, work_dir, num_processes, devices_per_process, returncode=0, **kwargs):
    launch = run_group(mode, work_dir, num_processes, devices_per_process, **kwargs)
    assert launch.returncodes == [returncode] * num_processes, "\n".join(
        f"--- process {index}:\n{text[-4000:]}" for index, text in enumerate(launch.stderr)
    )
    return launch


@pytest.fixture(scope="module")
def reference(work_dir):
    """One process of 2 devices: each recipe's run on both, and on one."""
    return _launch("reference", work_dir, 1, 2).results[0]


@pytest.fixture(scope="module")
def group(work_dir):
    """Two processes of 1 device (process 1 traced): the toy runs and BERT; the last run kills
    both."""
    return _launch("group", work_dir, 2, 1, returncode=-9, trace=(1,))


@pytest.fixture(scope="module")
def lost_peer(work_dir):
    """Two processes of 1 device: process 1 is killed after step 4's checkpoint; process 0
    stops on its own."""
    launch = run_group("lost_peer", work_dir, 2, 1)
    # When process 0 last wrote to its stderr (the next launch writes the file anew).
    launch.stopped_at = os.path.getmtime(work_dir / "stderr-0.txt")
    return launch


@pytest.fixture(scope="module")
def resume(work_dir, group, lost_peer):
    """Two processes of 2 devices: the killed runs resumed; a toy run of their own; the
    images."""
    return _launch("resume", work_dir, 2, 2).results


def _assert_arrays(summary, expected):
    actual = checkpoint_arrays(summary["checkpoint"])
    reference = checkpoint_arrays(expected["checkpoint"])
    assert actual.keys() == reference.keys() and len(reference) > 6
    for name in reference:
        np.testing.assert_allclose(
            actual[name], reference[name], rtol=1e-5, atol=1e-6, err_msg=name
        )


def test_processes_train_the_weights_of_one_process_over_the_same_input_pipelines(
    reference, group, resume
):
    two_processes, wide = group.results[0]["group"], resume[0]["wide"]
    assert two_processes["global_steps"] == wide["global_steps"] == 12
    for expected in (reference["two_devices"], reference["one_device"]):
        _assert_arrays(two_processes, expected)
        _assert_arrays(wide, expected)
    # Every process returns the summary of the same run.
    assert group.results[1]["group"]["final"] == two_processes["final"]


def _assert_split(summary, num_workers, num_replicas):
    assert summary["strategy"]["num_workers"] == num_workers
    assert summary["strategy"]["num_replicas"] == num_replicas
    assert summary["strategy"]["input_pipelines"] == 2
    phase = summary["phases"][0]
    assert phase["gradient_accumulation_steps"] == 2
    assert phase["per_replica_batch_size"] == 8 // (2 * num_replicas)


def test_bert_with_accumulation_on_two_devices_equals_one_device(reference):
    _assert_arrays(reference["bert_two_devices"], reference["bert_one_device"])


def test_bert_on_processes_trains_the_weights_of_one_process(reference, group):
    two_processes = group.results[0]["bert"]
    _assert_split(two_processes, num_workers=2, num_replicas=2)
    _assert_split(reference["bert_two_devices"], num_workers=1, num_replicas=2)
    _assert_split(reference["bert_one_device"], num_workers=1, num_replicas=1)
    assert two_processes["global_steps"] == 2
    for expected in (reference["bert_two_devices"], reference["bert_one_device"]):
        _assert_arrays(two_processes, expected)
    assert group.results[1]["bert"]["final"] == two_processes["final"]


def test_images_on_processes_train_the_weights_of_one_process_batch_norm_included(
    reference, resume
):
    two_processes = resume[0]["images"]
    _assert_split(two_processes, num_workers=2, num_replicas=4)
    _assert_split(reference["images_one_device"], num_workers=1, num_replicas=1)
    assert two_processes["global_steps"] == 2
    # Against one device (2 devices against 1 is tests/vision/test_train_jax.py's).
    expected = reference["images_one_device"]
    # The batch-norm moving statistics are among the arrays: statistics of each process's or
    # device's share of the micro-batch would differ.
    assert any("batch_normalization" in name for name in checkpoint_arrays(expected["checkpoint"]))
    _assert_arrays(two_processes, expected)
    assert [e["accuracy"] for e in two_processes["evaluations"]] == pytest.approx(
        [e["accuracy"] for e in expected["evaluations"]]
    )
    # Every evaluation image once, split over the processes, the same loss as one process.
    assert [e["examples"] for e in two_processes["evaluations"]] == [20]
    assert [e["loss"] for e in two_processes["evaluations"]] == pytest.approx(
        [e["loss"] for e in expected["evaluations"]], rel=1e-4
    )
    assert resume[1]["images"]["final"] == two_processes["final"]


def _first_batch(pipeline, num_pipelines=2):
    """The targets of pipeline ``pipeline``'s first batch in phase 1 of the toy run."""
    config = load("unused", "phases.0.gradient_accumulation_steps=2")
    phase = plan_run(config, 1).phases[0]
    context = tf.distribute.InputContext(num_pipelines, pipeline, num_pipelines)
    dataset = ToyRegression(config).dataset(phase, 2, context, 0)
    return next(iter(dataset))[1].numpy().ravel().tolist()


def test_each_process_reads_its_share_of_the_global_micro_batch(reference, group):
    # Phase 1's first micro-batch: 4 examples, 2 of each pipeline, in pipeline order.
    first, second = _first_batch(0), _first_batch(1)
    assert reference["first_micro_batch"] == {"local": first + second, "global": first + second}
    assert [results["first_micro_batch"] for results in group.results] == [
        {"local": first, "global": first + second},
        {"local": second, "global": first + second},
    ]


def _files(directory):
    names = []
    for root, _, files in os.walk(directory):
        for name in files:
            # A TensorBoard event file is named after its time, host and process.
            name = re.sub(r"^events\.out\.tfevents\..*", "events.out.tfevents", name)
            names.append(os.path.relpath(os.path.join(root, name), directory))
    return sorted(names)


def test_only_process_0_writes(work_dir, reference, group):
    assert _files(work_dir / "two_devices") == [
        "checkpoints/ckpt-000000010.weights.h5",
        "checkpoints/ckpt-000000012.weights.h5",
        "checkpoints/state.json",
        "logs/events.out.tfevents",
        "run_config.json",
        "summary.json",
    ]
    assert _files(work_dir / "group") == _files(work_dir / "two_devices")
    assert _files(work_dir / "bert") == _files(work_dir / "bert_two_devices")
    if group.traced != [1]:
        pytest.skip("strace cannot trace here: process 1's file system calls are not known")
    trace = work_dir / "strace-1.txt"
    assert files_written(trace, work_dir / "group") == []
    assert files_written(trace, work_dir / "killed") == []
    assert files_written(trace, work_dir / "bert") == []
    assert files_written(trace, work_dir) != []  # its results: the trace sees its writes


def test_the_summary_and_progress_lines_state_processes_devices_and_replicas(work_dir, group):
    with open(work_dir / "group" / "summary.json") as stream:
        strategy = json.load(stream)["strategy"]
    devices = strategy["devices"]
    assert strategy == {
        "backend": "jax",
        "kind": "data_parallel",
        "num_replicas": 2,
        "num_workers": 2,
        "devices": devices,
        "process_index": 0,
        "local_devices": devices[:1],
        "input_pipelines": 2,
    }
    assert group.results[1]["group"]["strategy"]["process_index"] == 1
    assert group.results[1]["lines"][0] == (
        f"jax backend, strategy data_parallel with 2 replica(s) on {devices} in 2 processes; "
        f"this is process 1, on {devices[1:]}, reading 1 of the 2 input pipelines; mixed "
        "precision None"
    )
    with open(work_dir / "group" / "run_config.json") as stream:
        recorded = json.load(stream)["strategy"]
    # The number of pipelines is recorded; where the processes meet and which one wrote, not.
    assert recorded["input_pipelines"] == 2 and "process_id" not in recorded


def test_a_killed_run_resumes_to_the_weights_of_the_uninterrupted_one(work_dir, group, resume):
    resumed = resume[0]["resumed"]
    assert resumed["resumed_from_step"] == 4 and resumed["global_steps"] == 12
    assert resume[1]["resumed"]["resumed_from_step"] == 4
    # Killed on 2 processes of 1 device, resumed on 2 of 2: the same 2 input pipelines.
    _assert_arrays(resumed, group.results[0]["group"])


def test_a_lost_peer_stops_the_other_process_in_time_naming_it_and_the_checkpoint(
    work_dir, lost_peer, resume
):
    assert lost_peer.returncodes == [3, -9], lost_peer.stderr[0][-4000:]
    checkpoint = work_dir / "lost" / "checkpoints" / "ckpt-000000004.weights.h5"
    line = re.search(r"error: process 1 of the run is lost .*", lost_peer.stderr[0])
    assert line, lost_peer.stderr[0][-4000:]
    assert re.fullmatch(
        rf"error: process 1 of the run is lost \(no heartbeat for \d+ s; strategy.peer_timeout="
        rf"{LOST_PEER_TIMEOUT}\); process 0 stops. The last checkpoint is "
        rf"{re.escape(str(checkpoint))}: run the same command again on every host to resume "
        "from it",
        line.group(0),
    )
    # The line is process 0's last; it came within the timeout of process 1's death (and 1 s
    # for a machine shared with other work).
    killed_at = float((work_dir / LOST_PEER_KILLED_AT).read_text())
    stopped_after = lost_peer.stopped_at - killed_at
    assert 0 < stopped_after < LOST_PEER_TIMEOUT + 1, stopped_after
    # Run again, it resumes from that checkpoint.
    assert [results["lost_resumed"]["resumed_from_step"] for results in resume] == [4, 4]
    assert resume[0]["lost_resumed"]["global_steps"] == 12


def test_processes_given_different_configs_fail_before_any_work(work_dir, group):
    message = (
        "the run's processes disagree on the run's config (start every process with the "
        "same): process 1 has phases.0.learning_rate=0.1 where process 0 has 0.05"
    )
    assert [results["mismatch"] for results in group.results] == [message, message]
    assert not (work_dir / "mismatch").exists()


def test_a_peer_that_never_joins_fails_within_the_timeout_naming_the_address(work_dir):
    launch = _launch("join_timeout", work_dir / "join", 1, 1, returncode=2, timeout=60)
    assert re.search(
        rf"error: process 0 of 2 waited {JOIN_TIMEOUT} s \(strategy.initialization_timeout\) "
        r"for the run's processes to join its JAX process group at 127\.0\.0\.1:\d+, and not "
        "all did",
        launch.stderr[0],
    ), launch.stderr[0][-4000:]
    # JAX's own wait would be 300 s; start-up and the 3 s are well within this.
    assert launch.seconds < 45
    assert not (work_dir / "join" / "join_timeout").exists()
