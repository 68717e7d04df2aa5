"""Choosing a `tf.distribute` strategy for the machine the code runs on.

`get_strategy()` is the one call a training script makes:

    strategy = get_strategy()            # TPU, else multi-worker, else all GPUs, else default
    with strategy.scope():
        model = ...
        model.compile(optimizer=LAMB(...), ...)

"auto" resolves in this order (the first that applies wins):

1. `tpu` given, or TensorFlow lists a local TPU device  -> "tpu"
2. `TF_CONFIG` names a cluster of more than one worker  -> "multi_worker"
3. more than one local GPU                              -> "mirrored"
4. otherwise (one GPU or CPU only)                      -> "default"

Multi-worker is checked before local GPUs because every worker of a GPU cluster also sees
several local GPUs: choosing MirroredStrategy there would silently train one independent
model per worker. One GPU gets the default strategy rather than OneDeviceStrategy because
Keras turns off its automatic XLA compilation under any explicit tf.distribute strategy,
while the default strategy already places everything on the GPU.

Nothing here runs at import time; TensorFlow devices are only listed (and the runtime only
initialized) when one of these functions is called.
"""

import json
import os
import socket
import urllib.parse

from keras_largebatch import _extras
from keras_largebatch._backend import TENSORFLOW_STRATEGY_NAMES as STRATEGY_NAMES
from keras_largebatch._checks import check_choice, check_number, check_string
from keras_largebatch.distribute.keras_workarounds import KerasMultiWorkerMirroredStrategy

try:
    import tensorflow as tf
except ModuleNotFoundError as error:
    raise _extras.missing_extra(__name__, "tensorflow", error) from error

COMMUNICATION_NAMES = ("auto", "ring", "nccl")

# TF_CONFIG job names that MultiWorkerMirroredStrategy trains with; an "evaluator" task may
# also be present and runs outside the all-reduce.
_TRAINING_JOBS = ("chief", "worker")
_ALLOWED_JOBS = _TRAINING_JOBS + ("evaluator",)


def get_strategy(
    name="auto",
    tpu=None,
    devices=None,
    communication="auto",
    tpu_connect_timeout=10.0,
):
    """Returns the `tf.distribute.Strategy` named by `name` ("auto": the best one available).

    Create the strategy before any other TensorFlow op runs: MultiWorkerMirroredStrategy
    must configure collective ops before the runtime starts, and the TPU system must be
    initialized before variables are placed. Build the model and optimizer inside
    `strategy.scope()`. A process has one MultiWorkerMirroredStrategy: the first call makes
    it, later ones return it.

    Args:
        name: one of `STRATEGY_NAMES`:
            "auto": resolved by `resolve_strategy_name()` (see the module docstring).
            "tpu": `TPUStrategy` on the TPU named by `tpu` ("local" when None).
            "multi_worker": `MultiWorkerMirroredStrategy`; the cluster comes from `TF_CONFIG`
                (without `TF_CONFIG` it is a single worker over the local devices).
            "mirrored": `MirroredStrategy` over `devices` (default: every local GPU, or the
                CPU when there is none).
            "one_device": `OneDeviceStrategy` on `devices` (default "/gpu:0" when a GPU is
                present, else "/cpu:0").
            "default": `tf.distribute.get_strategy()`, the no-op strategy of a plain script
                (call it outside any other strategy's scope, which it would return instead).
        tpu: where the TPU is, for "tpu" or "auto". "local" for a TPU attached to this VM
            (Cloud TPU VMs, Colab and Kaggle TPU runtimes), "grpc://host:port" for a TPU
            worker address, or a Cloud TPU name (resolved through the Cloud TPU API).
            Giving it with "auto" selects the TPU. Default None.
        devices: device strings for "mirrored" (a list) or "one_device" (a string or a list
            of one). Default None (see `name`).
        communication: all-reduce implementation for "multi_worker", one of
            `COMMUNICATION_NAMES`. "auto" lets TensorFlow choose (ring on CPU, NCCL on GPU).
            Default "auto".
        tpu_connect_timeout: seconds to wait for a TCP connection to a "grpc://" TPU address
            before giving up; TensorFlow itself would wait indefinitely. Default 10.0.

    Returns:
        A `tf.distribute.Strategy`.

    Raises:
        TypeError: `tpu` that is not a string or `tpu_connect_timeout` that is not a number.
        ValueError: an unknown `name` or `communication`, `tpu`/`devices`/`communication`
            given with a strategy that does not use them, a `tpu_connect_timeout` <= 0, a
            malformed `TF_CONFIG`, or a `communication` (other than "auto") other than that
            of the process's MultiWorkerMirroredStrategy. Raised before any device is
            touched.
        RuntimeError: the requested TPU cannot be found or reached.
    """
    check_choice("name", name, STRATEGY_NAMES)
    check_choice("communication", communication, COMMUNICATION_NAMES)
    if tpu is not None and name not in ("auto", "tpu"):
        raise ValueError(
            f"tpu is only used with name='tpu' or name='auto', got tpu={tpu!r} with name={name!r}"
        )
    if devices is not None and name not in ("mirrored", "one_device"):
        raise ValueError(
            "devices is only used with name='mirrored' or name='one_device', "
            f"got devices={devices!r} with name={name!r}"
        )
    if communication != "auto" and name not in ("auto", "multi_worker"):
        raise ValueError(
            "communication is only used with name='multi_worker' or name='auto', "
            f"got communication={communication!r} with name={name!r}"
        )
    if name == "one_device" and devices is not None:
        _single_device(devices)
    if tpu is not None:
        _check_tpu_address(tpu)
    check_number("tpu_connect_timeout", tpu_connect_timeout, low=0, low_open=True)
    if name == "multi_worker":
        tf_config_num_workers()

    kind = resolve_strategy_name(name, tpu=tpu)
    if kind == "tpu":
        return _tpu_strategy("local" if tpu is None else tpu, tpu_connect_timeout)
    if kind == "multi_worker":
        return _multi_worker_strategy(communication)
    if kind == "mirrored":
        # Collective all-reduce gains nothing between CPU devices of one process, and its group
        # keys restart at 1 for every strategy: a second CPU strategy of another size in the same
        # process (a notebook, a test session) would join the first one's group and abort.
        cross_device_ops = None
        if devices is not None and all("cpu" in str(device).lower() for device in devices):
            cross_device_ops = tf.distribute.ReductionToOneDevice()
        return tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=cross_device_ops)
    if kind == "one_device":
        return tf.distribute.OneDeviceStrategy(_single_device(devices))
    return tf.distribute.get_strategy()


def resolve_strategy_name(name="auto", tpu=None):
    """Returns the concrete strategy name `get_strategy(name, tpu)` builds, without building it.

    Only "auto" needs resolving (order in the module docstring); any other valid name is
    returned as is. Lists physical devices (which does not initialize the TensorFlow runtime)
    and reads the `TF_CONFIG` environment variable.

    Raises:
        ValueError: an unknown `name`, or a malformed `TF_CONFIG` (for "auto").
    """
    check_choice("name", name, STRATEGY_NAMES)
    if name != "auto":
        return name
    num_workers = tf_config_num_workers()
    if tpu is not None or tf.config.list_physical_devices("TPU"):
        return "tpu"
    if num_workers > 1:
        return "multi_worker"
    if len(tf.config.list_physical_devices("GPU")) > 1:
        return "mirrored"
    return "default"


def tf_config_num_workers(tf_config=None):
    """Returns how many training workers (chief + worker tasks) `TF_CONFIG` describes.

    Args:
        tf_config: the JSON text to read; default None reads the `TF_CONFIG` environment
            variable. Unset or empty means no cluster, 0 workers.

    Raises:
        ValueError: the text is not JSON, has no "cluster" object, names a job other than
            chief/worker/evaluator (e.g. "ps", which needs ParameterServerStrategy), lists
            tasks as anything but a list of "host:port" strings, or has a "task" that is not
            in the cluster.
    """
    if tf_config is None:
        tf_config = os.environ.get("TF_CONFIG", "")
    if not tf_config.strip():
        return 0
    try:
        config = json.loads(tf_config)
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not valid JSON ({error}), got {tf_config!r}") from None
    if not isinstance(config, dict) or not isinstance(config.get("cluster"), dict):
        raise ValueError(
            'TF_CONFIG must be a JSON object with a "cluster" object, e.g. '
            '{"cluster": {"worker": ["host1:port", "host2:port"]}, '
            f'"task": {{"type": "worker", "index": 0}}}}, got {tf_config!r}'
        )
    cluster = config["cluster"]
    for job, addresses in cluster.items():
        if job not in _ALLOWED_JOBS:
            raise ValueError(
                f"TF_CONFIG cluster job {job!r} is not supported by get_strategy(); allowed jobs "
                f"are {_ALLOWED_JOBS} (parameter-server clusters need "
                f"tf.distribute.ParameterServerStrategy), got cluster {cluster!r}"
            )
        if not isinstance(addresses, list) or not all(
            isinstance(address, str) and ":" in address for address in addresses
        ):
            raise ValueError(
                f'TF_CONFIG cluster job {job!r} must be a list of "host:port" strings, '
                f"got {addresses!r}"
            )
    num_workers = sum(len(cluster.get(job, [])) for job in _TRAINING_JOBS)
    task = config.get("task")
    if num_workers > 1 or task is not None:
        _check_task(task, cluster, tf_config)
    return num_workers


def describe_strategy(strategy):
    """Returns a dict describing `strategy`, for logs and run metadata.

    Keys: "kind" (a name from `STRATEGY_NAMES`, or the class name of any other strategy),
    "num_replicas" (replicas in sync, over all workers), "num_workers" (workers in the
    cluster, 1 without one) and "devices" (this worker's replica devices).
    """
    kinds = (
        (tf.distribute.TPUStrategy, "tpu"),
        (tf.distribute.MultiWorkerMirroredStrategy, "multi_worker"),
        (tf.distribute.MirroredStrategy, "mirrored"),
        (tf.distribute.OneDeviceStrategy, "one_device"),
    )
    kind = next((kind for cls, kind in kinds if isinstance(strategy, cls)), None)
    # TensorFlow exports no class for the default strategy, and inside another strategy's
    # scope `tf.distribute.get_strategy()` is not it, so only the class name identifies it.
    if kind is None and type(strategy).__name__ == "_DefaultDistributionStrategy":
        kind = "default"
    if kind == "default":
        # The default strategy has no device list; its ops go where TensorFlow places them,
        # on the first GPU when there is one.
        logical = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        devices = [logical[0].name]
    else:
        devices = list(strategy.extended.worker_devices)
    num_workers = 1
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is not None:
        jobs = resolver.cluster_spec().as_dict()
        num_workers = max(1, sum(len(jobs.get(job, [])) for job in _TRAINING_JOBS))
    return {
        "kind": kind or type(strategy).__name__,
        "num_replicas": int(strategy.num_replicas_in_sync),
        "num_workers": num_workers,
        "devices": devices,
    }


def _check_task(task, cluster, tf_config):
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise ValueError(
            'TF_CONFIG needs a "task" object like {"type": "worker", "index": 0} naming this '
            f"process's place in the cluster, got {tf_config!r}"
        )
    job, index = task["type"], task["index"]
    if job not in cluster:
        raise ValueError(
            f"TF_CONFIG task type {job!r} is not a job of the cluster {sorted(cluster)}"
        )
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(cluster[job]):
        raise ValueError(
            f"TF_CONFIG task index must be an int in [0, {len(cluster[job])}) for job {job!r}, "
            f"got {index!r}"
        )


def _single_device(devices):
    if devices is None:
        return "/gpu:0" if tf.config.list_physical_devices("GPU") else "/cpu:0"
    if isinstance(devices, str):
        return devices
    if len(devices) == 1:
        return devices[0]
    raise ValueError(f"devices for name='one_device' must be one device string, got {devices!r}")


def _check_tpu_address(tpu):
    check_string("tpu", tpu)
    if not tpu:
        raise ValueError(f'tpu must be "local", a TPU name or "grpc://host:port", got {tpu!r}')
    if tpu.startswith("grpc://"):
        _grpc_host_port(tpu)


def _grpc_host_port(address):
    parsed = urllib.parse.urlparse(address)
    try:
        host, port = parsed.hostname, parsed.port
    except ValueError:
        host = port = None
    if not host or port is None:
        raise ValueError(f'a TPU grpc address must look like "grpc://host:port", got {address!r}')
    return host, port


# The process's MultiWorkerMirroredStrategy and its communication, once made.
_multi_worker = {}


def _multi_worker_strategy(communication):
    """The process's one MultiWorkerMirroredStrategy: made on the first call, returned again
    on the next ones. A second strategy would configure the runtime's collectives again, and
    its collective keys would restart where the first one's are still in use: its first
    collective aborts ("Delete called on non-empty BufRendezvous"). So a process that trains
    twice (pretraining, then fine-tuning) trains both on the first. ``communication="auto"``
    takes the strategy as it was made; another value must be the one it was made with."""
    if "strategy" in _multi_worker:
        if communication not in ("auto", _multi_worker["communication"]):
            raise ValueError(
                f"communication={communication!r}: this process's MultiWorkerMirroredStrategy "
                f"was made with communication={_multi_worker['communication']!r}, and a "
                "process can have only one"
            )
        return _multi_worker["strategy"]
    implementation = {
        "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
        "ring": tf.distribute.experimental.CommunicationImplementation.RING,
        "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
    }[communication]
    strategy = KerasMultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=implementation
        )
    )
    _multi_worker.update(strategy=strategy, communication=communication)
    return strategy


def _tpu_strategy(tpu, connect_timeout):
    """Connects to the TPU system and returns a TPUStrategy over all its cores.

    The recipe for TPU VMs (Colab included) is resolver -> connect -> initialize -> strategy.
    The failures are checked first because TensorFlow reports them badly: with no TPU
    attached, "local" fails deep inside initialization with a kernel-registration error, and
    an unreachable grpc address makes `experimental_connect_to_cluster` wait forever.
    """
    if tpu == "local" and not tf.config.list_physical_devices("TPU"):
        raise RuntimeError(
            "tpu='local': TensorFlow sees no TPU on this machine (physical devices: "
            f"{[device.name for device in tf.config.list_physical_devices()]}). On a TPU VM "
            "or Colab TPU runtime install `tensorflow-tpu` (with libtpu); elsewhere pass "
            "the TPU's grpc address or name"
        )
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
    except Exception as error:
        # A TPU name is looked up through the GCE metadata server and the Cloud TPU API;
        # off Google Cloud that fails with a network or credentials error.
        raise RuntimeError(
            f"could not resolve tpu={tpu!r} through the Cloud TPU API: {error}"
        ) from error
    master = resolver.master()
    if tpu != "local" and master.startswith("grpc://"):
        _check_reachable(master, connect_timeout, tpu)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def _check_reachable(address, timeout, tpu):
    """Raises RuntimeError unless a TCP connection to `address` ("grpc://host:port") opens
    within `timeout` seconds."""
    host, port = _grpc_host_port(address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as error:
        where = address if address == tpu else f"{address} (resolved from tpu={tpu!r})"
        raise RuntimeError(
            f"cannot reach the TPU at {where} within {timeout} s ({error}); check the "
            "address and that the TPU is running, or pass tpu='local' on a TPU VM"
        ) from None
