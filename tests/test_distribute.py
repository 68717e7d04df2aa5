"""Tests for keras_largebatch.distribute and the multi-worker harness in tests/support.

No TPU or GPU is attached here, so the "auto" branches are tested by replacing
`tf.config.list_physical_devices` and setting TF_CONFIG, and the TPU path by replacing the
TensorFlow TPU calls. The multi-worker tests run real 2-process clusters on localhost; the
training of `fit_tiny_model` on two workers, against one device, runs in the suite's one
two-worker launch (tests/training/test_multi_worker_trainer.py).
"""

import json
import os
import socket
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch import distribute
from keras_largebatch.distribute import (
    configure_logical_cpus,
    describe_strategy,
    get_strategy,
    resolve_strategy_name,
    tf_config_num_workers,
)
from keras_largebatch.distribute import strategy as strategy_lib
from tests.support import processes
from tests.support.multiworker import run_multi_worker
from tests.support.regression import build_model

TWO_WORKERS = json.dumps(
    {
        "cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]},
        "task": {"type": "worker", "index": 0},
    }
)


@pytest.fixture
def machine(monkeypatch):
    """Pretends the machine has the given accelerators and TF_CONFIG; returns a setter."""

    def set_machine(tpus=0, gpus=0, tf_config=None):
        fake = {
            "TPU": [
                tf.config.PhysicalDevice(f"/physical_device:TPU:{i}", "TPU") for i in range(tpus)
            ],
            "GPU": [
                tf.config.PhysicalDevice(f"/physical_device:GPU:{i}", "GPU") for i in range(gpus)
            ],
            "CPU": [tf.config.PhysicalDevice("/physical_device:CPU:0", "CPU")],
        }
        monkeypatch.setattr(
            tf.config,
            "list_physical_devices",
            lambda device_type=None: (
                fake[device_type] if device_type else fake["CPU"] + fake["GPU"] + fake["TPU"]
            ),
        )
        if tf_config is None:
            monkeypatch.delenv("TF_CONFIG", raising=False)
        else:
            monkeypatch.setenv("TF_CONFIG", tf_config)

    return set_machine


@pytest.mark.parametrize(
    "tpus, gpus, tf_config, expected",
    [
        (8, 0, None, "tpu"),
        (8, 2, TWO_WORKERS, "tpu"),
        (0, 4, TWO_WORKERS, "multi_worker"),
        (0, 0, TWO_WORKERS, "multi_worker"),
        (
            0,
            0,
            '{"cluster": {"chief": ["h:1"], "worker": ["h:2"]}, '
            '"task": {"type": "chief", "index": 0}}',
            "multi_worker",
        ),
        (
            0,
            0,
            '{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0}}',
            "default",
        ),
        (0, 2, None, "mirrored"),
        (0, 1, None, "default"),
        (0, 0, None, "default"),
        (0, 0, "", "default"),
    ],
)
def test_auto_resolution_order(machine, tpus, gpus, tf_config, expected):
    machine(tpus=tpus, gpus=gpus, tf_config=tf_config)
    assert resolve_strategy_name("auto") == expected


def test_auto_with_a_tpu_address_selects_the_tpu_without_one_attached(machine):
    machine(gpus=2)
    assert resolve_strategy_name("auto", tpu="grpc://10.0.0.2:8470") == "tpu"


def test_explicit_names_are_not_resolved(machine):
    machine(tpus=8, gpus=2, tf_config=TWO_WORKERS)
    for name in ("tpu", "multi_worker", "mirrored", "one_device", "default"):
        assert resolve_strategy_name(name) == name


def test_unknown_name_fails_before_touching_devices(monkeypatch):
    def no_device_listing(*args):
        raise AssertionError("devices were listed before the name was checked")

    monkeypatch.setattr(tf.config, "list_physical_devices", no_device_listing)
    with pytest.raises(ValueError) as raised:
        get_strategy("gpu")
    message = str(raised.value)
    assert "name" in message and "'gpu'" in message
    for allowed in distribute.STRATEGY_NAMES:
        assert f"'{allowed}'" in message


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"communication": "mpi"}, ValueError, ["communication", "'mpi'", "'ring'"]),
        ({"name": "mirrored", "tpu": "local"}, ValueError, ["tpu", "'local'", "'mirrored'"]),
        ({"name": "default", "devices": ["/cpu:0"]}, ValueError, ["devices", "'default'"]),
        (
            {"name": "mirrored", "communication": "ring"},
            ValueError,
            ["communication", "'mirrored'"],
        ),
        (
            {"name": "tpu", "tpu": "grpc://no-port"},
            ValueError,
            ["grpc://host:port", "'grpc://no-port'"],
        ),
        ({"name": "tpu", "tpu": ""}, ValueError, ["tpu", "''"]),
        ({"tpu_connect_timeout": 0}, ValueError, ["tpu_connect_timeout", "0"]),
        # Wrong types are TypeErrors (tpu_connect_timeout="10" was a ValueError before).
        ({"tpu_connect_timeout": "10"}, TypeError, ["tpu_connect_timeout", "'10'"]),
        ({"name": "tpu", "tpu": 5}, TypeError, ["tpu", "5"]),
        (
            {"name": "one_device", "devices": ["/cpu:0", "/cpu:1"]},
            ValueError,
            ["one_device", "/cpu:1"],
        ),
    ],
)
def test_bad_arguments_name_the_argument_and_value(machine, kwargs, error, words):
    machine()
    with pytest.raises(error) as raised:
        get_strategy(**kwargs)
    for word in words:
        assert word in str(raised.value)


@pytest.mark.parametrize(
    "tf_config, words",
    [
        ("{cluster: }", ["not valid JSON", "{cluster: }"]),
        ('["h:1"]', ['"cluster" object']),
        ('{"cluster": {"ps": ["h:1"], "worker": ["h:2"]}}', ["'ps'", "ParameterServerStrategy"]),
        ('{"cluster": {"worker": "h:1,h:2"}}', ["host:port", "'h:1,h:2'"]),
        ('{"cluster": {"worker": ["h:1", "h:2"]}}', ['"task"']),
        (
            '{"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 2}}',
            ["index", "[0, 2)", "2"],
        ),
        (
            '{"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "chief", "index": 0}}',
            ["'chief'", "['worker']"],
        ),
    ],
)
def test_malformed_tf_config_is_a_clear_error(machine, tf_config, words):
    machine(tf_config=tf_config)
    for call in (lambda: get_strategy("auto"), lambda: get_strategy("multi_worker")):
        with pytest.raises(ValueError) as raised:
            call()
        assert "TF_CONFIG" in str(raised.value)
        for word in words:
            assert word in str(raised.value)


def test_tf_config_counts_chief_and_workers_but_not_the_evaluator():
    config = {
        "cluster": {"chief": ["h:0"], "worker": ["h:1", "h:2"], "evaluator": ["h:3"]},
        "task": {"type": "evaluator", "index": 0},
    }
    assert tf_config_num_workers(json.dumps(config)) == 3


@pytest.mark.parametrize(
    "communication, implementation", [("auto", "AUTO"), ("ring", "RING"), ("nccl", "NCCL")]
)
def test_communication_chooses_the_all_reduce_implementation(
    machine, monkeypatch, communication, implementation
):
    # A real MultiWorkerMirroredStrategy cannot be created once this process has run ops, so
    # the class is replaced by one that records its options.
    machine(tf_config=TWO_WORKERS)
    created = []
    monkeypatch.setattr(
        strategy_lib,
        "KerasMultiWorkerMirroredStrategy",
        lambda communication_options: created.append(communication_options) or object(),
    )
    for name in ("auto", "multi_worker"):
        monkeypatch.setattr(strategy_lib, "_multi_worker", {})  # as in a fresh process
        get_strategy(name, communication=communication)
    expected = getattr(tf.distribute.experimental.CommunicationImplementation, implementation)
    assert [options.implementation for options in created] == [expected, expected]


def test_a_process_has_one_multi_worker_strategy(machine, monkeypatch):
    # A second strategy's collectives would abort on the first one's keys: the first is
    # returned again, and another explicit communication is refused.
    machine(tf_config=TWO_WORKERS)
    monkeypatch.setattr(
        strategy_lib, "KerasMultiWorkerMirroredStrategy", lambda **options: object()
    )
    monkeypatch.setattr(strategy_lib, "_multi_worker", {})
    first = get_strategy("multi_worker", communication="ring")
    assert get_strategy("auto", communication="ring") is first
    assert get_strategy("multi_worker", communication="ring") is first
    # The trainer's call, which names no communication, takes the strategy as it was made.
    assert get_strategy("multi_worker") is first
    with pytest.raises(ValueError, match="communication='nccl'.*communication='ring'"):
        get_strategy("multi_worker", communication="nccl")


def test_default_strategy_on_a_cpu_machine(machine):
    machine()
    strategy = get_strategy()
    assert strategy is tf.distribute.get_strategy()
    assert describe_strategy(strategy) == {
        "kind": "default",
        "num_replicas": 1,
        "num_workers": 1,
        "devices": ["/device:CPU:0"],
    }


def test_mirrored_and_one_device_over_logical_cpus():
    mirrored = get_strategy("mirrored", devices=["/cpu:0", "/cpu:1"])
    description = describe_strategy(mirrored)
    assert description["kind"] == "mirrored"
    assert description["num_replicas"] == 2
    assert [device.rsplit("/", 1)[-1] for device in description["devices"]] == [
        "device:CPU:0",
        "device:CPU:1",
    ]
    one_device = describe_strategy(get_strategy("one_device", devices="/cpu:3"))
    assert one_device["kind"] == "one_device"
    assert one_device["num_replicas"] == 1
    assert one_device["devices"][0].endswith("device:CPU:3")


def test_local_tpu_absent_is_a_fast_clear_error(machine):
    machine(gpus=1)
    start = time.monotonic()
    with pytest.raises(RuntimeError) as raised:
        get_strategy("tpu")
    assert time.monotonic() - start < 1.0
    assert "tpu='local'" in str(raised.value)
    assert "no TPU" in str(raised.value)
    assert "GPU:0" in str(raised.value)


def test_unreachable_tpu_address_is_a_fast_clear_error(machine):
    machine()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    address = f"grpc://127.0.0.1:{closed_port}"
    start = time.monotonic()
    with pytest.raises(RuntimeError) as raised:
        get_strategy(tpu=address, tpu_connect_timeout=2.0)
    assert time.monotonic() - start < 2.5
    assert address in str(raised.value)


def test_tpu_connection_wait_is_bounded_by_the_timeout(machine, monkeypatch):
    machine()
    waits = []

    def unanswered_connection(address, timeout):
        waits.append((address, timeout))
        raise socket.timeout("timed out")

    monkeypatch.setattr(socket, "create_connection", unanswered_connection)
    with pytest.raises(RuntimeError) as raised:
        get_strategy("tpu", tpu="grpc://10.1.2.3:8470", tpu_connect_timeout=0.25)
    assert waits == [(("10.1.2.3", 8470), 0.25)]
    assert "grpc://10.1.2.3:8470" in str(raised.value) and "0.25 s" in str(raised.value)


class FakeTPUClusterResolver:
    """Stands in for TPUClusterResolver: resolves a TPU name to a fixed grpc address."""

    master_address = "grpc://127.0.0.1:1"

    def __init__(self, tpu):
        if tpu == "unknown-tpu":
            raise ValueError("Could not lookup TPU metadata")
        self.tpu = tpu

    def master(self):
        return "" if self.tpu == "local" else self.master_address


def test_tpu_name_that_cannot_be_resolved_names_the_tpu(machine, monkeypatch):
    machine()
    monkeypatch.setattr(
        tf.distribute.cluster_resolver, "TPUClusterResolver", FakeTPUClusterResolver
    )
    with pytest.raises(RuntimeError) as raised:
        get_strategy(tpu="unknown-tpu")
    assert "'unknown-tpu'" in str(raised.value)
    assert "Could not lookup TPU metadata" in str(raised.value)


def test_tpu_name_resolving_to_an_unreachable_address_names_both(machine, monkeypatch):
    machine()
    monkeypatch.setattr(
        tf.distribute.cluster_resolver, "TPUClusterResolver", FakeTPUClusterResolver
    )
    with pytest.raises(RuntimeError) as raised:
        get_strategy("tpu", tpu="my-tpu", tpu_connect_timeout=2.0)
    assert "grpc://127.0.0.1:1" in str(raised.value) and "'my-tpu'" in str(raised.value)


def test_tpu_path_follows_the_tpu_vm_recipe(machine, monkeypatch):
    machine(tpus=8)
    calls = []
    monkeypatch.setattr(
        tf.distribute.cluster_resolver, "TPUClusterResolver", FakeTPUClusterResolver
    )
    monkeypatch.setattr(
        tf.config,
        "experimental_connect_to_cluster",
        lambda resolver: calls.append(("connect", resolver)),
    )
    monkeypatch.setattr(
        tf.tpu.experimental,
        "initialize_tpu_system",
        lambda resolver: calls.append(("initialize", resolver)),
    )
    monkeypatch.setattr(
        tf.distribute,
        "TPUStrategy",
        lambda resolver: calls.append(("strategy", resolver)) or "tpu-strategy",
    )
    assert get_strategy() == "tpu-strategy"
    assert [step for step, _ in calls] == ["connect", "initialize", "strategy"]
    resolvers = {id(resolver) for _, resolver in calls}
    assert len(resolvers) == 1 and calls[0][1].tpu == "local"


def test_configure_logical_cpus_cannot_change_an_initialized_runtime():
    # conftest.py configured 4 logical CPUs; listing them initializes the runtime.
    assert len(tf.config.list_logical_devices("CPU")) == 4
    assert configure_logical_cpus(4) == ["/cpu:0", "/cpu:1", "/cpu:2", "/cpu:3"]
    with pytest.raises(RuntimeError) as raised:
        configure_logical_cpus(2)
    assert "num_devices=2" in str(raised.value) and "4 logical CPU" in str(raised.value)
    with pytest.raises(ValueError, match=r"num_devices must be in \[1, inf\], got 0"):
        configure_logical_cpus(0)
    for bad in (2.0, True):
        with pytest.raises(TypeError, match="num_devices must be an integer"):
            configure_logical_cpus(bad)


def test_import_does_not_initialize_tensorflow():
    # A fresh process: configuring devices after the import only works if the import left
    # the runtime uninitialized.
    script = (
        "import keras_largebatch.distribute as d\n"
        "names = d.configure_logical_cpus(3)\n"
        "import tensorflow as tf\n"
        "print(len(tf.config.list_logical_devices('CPU')), names)\n"
    )
    completed = processes.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip().splitlines()[-1] == "3 ['/cpu:0', '/cpu:1', '/cpu:2']"


def tiny_regression_data(num_examples):
    rng = np.random.default_rng(0)
    features = rng.normal(size=(num_examples, 3)).astype("float32")
    targets = features @ np.array([[1.0], [-2.0], [0.5]], "float32") + 0.3
    return features, targets


def fit_tiny_model(strategy, global_batch_size=8, steps=3, learning_rate=0.1):
    """Trains a 2-layer model for `steps` SGD steps under `strategy`; a multi-worker function.

    Returns the weights before and after, the logged and evaluated losses, and how the
    strategy was set up.
    """
    features, targets = tiny_regression_data(global_batch_size * steps)
    options = tf.data.Options()
    # DATA sharding gives each worker its slice of every global batch, so a step sees the
    # same examples as a single-device step; OFF would give each worker the whole dataset.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = (
        tf.data.Dataset.from_tensor_slices((features, targets))
        .batch(global_batch_size)
        .with_options(options)
    )
    with strategy.scope():
        model = build_model(inputs=3, hidden=4, outputs=1, layer_norm=False)
        model.compile(optimizer=keras.optimizers.SGD(learning_rate), loss="mse")
    initial = model.get_weights()
    history = model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)
    description = describe_strategy(strategy)
    result = {f"initial_{i}": weight for i, weight in enumerate(initial)}
    result.update({f"final_{i}": weight for i, weight in enumerate(model.get_weights())})
    # The logged and evaluated losses go through the strategy's reduce of scalars.
    result["fit_loss"] = history.history["loss"][-1]
    result["evaluate_loss"] = model.evaluate(dataset, steps=steps, verbose=0)
    result["kind"] = description["kind"]
    result["num_replicas"] = description["num_replicas"]
    result["num_workers"] = description["num_workers"]
    return result


def fail_on_worker(strategy, failing_index):
    """Raises on one worker, while the others wait for it in an all-reduce; a multi-worker
    function."""
    if strategy.cluster_resolver.task_id == failing_index:
        raise ValueError(f"worker {failing_index} fails on purpose")
    total = strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
    return {"total": total}


def assert_same_training(result, reference):
    for i in range(4):
        np.testing.assert_allclose(
            result[f"initial_{i}"], reference[f"initial_{i}"], rtol=0, atol=0
        )
        np.testing.assert_allclose(
            result[f"final_{i}"], reference[f"final_{i}"], rtol=1e-5, atol=1e-7
        )
    for loss in ("fit_loss", "evaluate_loss"):
        np.testing.assert_allclose(result[loss], reference[loss], rtol=1e-5)
    # The comparison means something only if the steps moved the weights.
    moved = max(
        np.max(np.abs(reference[f"final_{i}"] - reference[f"initial_{i}"])) for i in range(4)
    )
    assert moved > 1e-2


def test_mirrored_two_cpus_matches_one_device():
    reference = fit_tiny_model(tf.distribute.get_strategy())
    result = fit_tiny_model(get_strategy("mirrored", devices=["/cpu:0", "/cpu:1"]))
    assert result["num_replicas"] == 2
    assert_same_training(result, reference)


def test_a_failing_worker_reports_every_workers_stderr():
    with pytest.raises(RuntimeError) as raised:
        run_multi_worker(fail_on_worker, num_workers=2, kwargs={"failing_index": 1}, timeout=90)
    message = str(raised.value)
    assert "worker 1 fails on purpose" in message
    # Worker 0 is stuck in the all-reduce or has failed in it by now; either way it is reported.
    assert "--- worker 0 (" in message and "--- worker 1 (exit code 1)" in message


def test_a_run_past_its_timeout_is_killed():
    start = time.monotonic()
    with pytest.raises(TimeoutError) as raised:
        run_multi_worker(fit_tiny_model, num_workers=2, timeout=1.0)
    assert time.monotonic() - start < 5.0
    assert "within 1.0 s" in str(raised.value)
    assert "--- worker 0 (still running)" in str(raised.value)


@pytest.mark.parametrize(
    "function, words",
    [
        (lambda strategy: {}, ["module-level", "lambda"]),
        ("no_colon", ["package.module:function", "'no_colon'"]),
    ],
)
def test_run_multi_worker_rejects_functions_workers_cannot_import(function, words):
    with pytest.raises(ValueError) as raised:
        run_multi_worker(function)
    for word in words:
        assert word in str(raised.value)
