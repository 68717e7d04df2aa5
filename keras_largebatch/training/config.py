"""Run configs: dataclasses with defaults and the checks of their values.

A recipe's config is a dataclass derived from `RunConfig` (the settings every run has: its
directory, checkpoints, logging, precision, strategy) whose ``phases`` are derived from
`PhaseConfig` (steps and batch). Every field has a default and a one-line meaning beside it.
`keras_largebatch.training.config_loading` reads one from a YAML file and ``key=value``
overrides (``log_interval=10``, ``phases.0.steps=100``); ``validate`` checks the values and the
relations between fields, raising before any work with the field and the value named.
"""

import dataclasses
import re
from typing import Optional

import yaml

from keras_largebatch import _checks
from keras_largebatch._backend import (
    BACKENDS,
    JAX_STRATEGY_NAMES,
    STRATEGY_NAMES,
    TENSORFLOW_STRATEGY_NAMES,
    keras_backend,
)

MIXED_PRECISION_POLICIES = (None, "mixed_float16", "mixed_bfloat16")

_ADDRESS = re.compile(r"^\S+:\d+$")


@dataclasses.dataclass
class StrategyConfig:
    """The devices to train on (`keras_largebatch.training.devices`): a tf.distribute strategy
    on TensorFlow (`keras_largebatch.distribute.get_strategy`), DataParallel or ModelParallel on
    JAX, where a multi-host run is a group of processes
    (`keras_largebatch.training.process_group`)."""

    name: str = "auto"  # TF: auto, tpu, multi_worker, mirrored, one_device, default; JAX: auto,
    # data_parallel, model_parallel (the recipe's large kernels split over a "model" mesh axis)
    model_axis_size: Optional[int] = None  # JAX, model_parallel only (required there): devices
    # each split kernel is split over; the mesh is (devices / size "batch", size "model")
    tpu: Optional[str] = None  # "local", a TPU name or grpc://host:port (TF: name tpu or auto)
    devices: Optional[list[str]] = None  # TF: for mirrored / one_device; JAX: e.g. ['tpu:0']
    input_pipelines: Optional[int] = None  # JAX: input pipelines the run's data is read in, a
    # multiple of the processes (the data order depends on it, not on the processes); null: one
    # per process
    multi_host: Optional[bool] = None  # JAX: run as a group of processes, one per host; null:
    # when a key below or a KERAS_DISTRIBUTION_* variable names them; true: also when none
    # does (JAX finds them on a Cloud TPU VM, under Slurm or Open MPI); false: one process
    coordinator_address: Optional[str] = None  # JAX: host:port of process 0; null: the first
    # of $KERAS_DISTRIBUTION_JOB_ADDRESSES
    num_processes: Optional[int] = None  # JAX: processes of the run; null:
    # $KERAS_DISTRIBUTION_NUM_PROCESSES
    process_id: Optional[int] = None  # JAX: this process, from 0 (0 writes the run's files);
    # null: $KERAS_DISTRIBUTION_PROCESS_ID
    initialization_timeout: int = 300  # JAX: seconds each process waits for all to join
    peer_timeout: int = 30  # JAX: seconds without a sign of life from another process of the
    # run before this one stops, naming it and the last checkpoint


# Where the processes of a run meet and which one each is: they differ between the processes
# and the launches of one run, so a run neither records nor compares them.
PROCESS_GROUP_FIELDS = (
    "multi_host",
    "coordinator_address",
    "num_processes",
    "process_id",
    "initialization_timeout",
    "peer_timeout",
)
_JAX_ONLY_FIELDS = ("input_pipelines",) + PROCESS_GROUP_FIELDS


def check_strategy_config(strategy, backend=None):
    """Raises ValueError unless the ``strategy`` settings (a `StrategyConfig`) run on
    ``backend`` (default: Keras's backend); names the key, its value, the backend and what is
    allowed there. Touches no device and reads no environment variable."""
    backend = backend or keras_backend()
    if backend not in BACKENDS:
        raise ValueError(
            f"the trainer runs on the Keras backends {BACKENDS}, got KERAS_BACKEND={backend!r}"
        )
    allowed = TENSORFLOW_STRATEGY_NAMES if backend == "tensorflow" else JAX_STRATEGY_NAMES
    if strategy.name not in allowed:
        raise ValueError(
            f"strategy.name={strategy.name!r} is not available on the {backend} backend; "
            f"allowed there: {allowed}"
            + (
                " (JAX trains on keras.distribution.DataParallel or ModelParallel, not "
                "tf.distribute)"
                if backend == "jax"
                else " (data_parallel and model_parallel are keras.distribution's DataParallel "
                "and ModelParallel, for KERAS_BACKEND=jax)"
            )
        )
    _check_model_axis(strategy)
    if backend != "jax":
        defaults = StrategyConfig()
        for name in _JAX_ONLY_FIELDS:
            if getattr(strategy, name) != getattr(defaults, name):
                raise ValueError(
                    f"strategy.{name}={getattr(strategy, name)!r} is a setting of the jax "
                    "backend's process group and input pipelines, not used on the "
                    f"{backend} backend, where tf.distribute finds the workers in TF_CONFIG "
                    "(strategy.name=multi_worker) and reads one input pipeline per worker; "
                    f"allowed there: {_yaml(getattr(defaults, name))}"
                )
        return
    _check_process_group(strategy)
    if strategy.tpu is not None:
        raise ValueError(
            f"strategy.tpu={strategy.tpu!r} is a tf.distribute setting, not used on the jax "
            "backend, which trains on the devices JAX lists (a TPU VM's TPU included); "
            "allowed there: null"
        )
    for device in strategy.devices or ():
        kind, _, index = str(device).partition(":")
        if not (kind.isalpha() and index.isdigit()):
            raise ValueError(
                f"strategy.devices={strategy.devices!r}: {device!r} is not a JAX device name; "
                "on the jax backend give names such as 'tpu:0' or 'cpu:1' (as "
                "keras.distribution.list_devices() writes them), or null for all of them"
            )


def _check_model_axis(strategy):
    """``strategy.model_axis_size``: an integer >= 1 with ``model_parallel``, null otherwise.
    That it divides the devices is checked where they are known
    (`keras_largebatch.training.devices.JaxDevices`)."""
    size = strategy.model_axis_size
    if strategy.name != "model_parallel":
        if size is not None:
            raise ValueError(
                f"strategy.model_axis_size={size!r} sizes the model axis of "
                f"strategy.name=model_parallel, but strategy.name={strategy.name!r}; allowed "
                "with it: null (or set strategy.name=model_parallel on the jax backend)"
            )
        return
    if size is None:
        raise ValueError(
            "strategy.name=model_parallel needs strategy.model_axis_size, the number of devices "
            "each split kernel is split over (a divisor of the run's devices, e.g. 2, 4 or 8), "
            "got null"
        )
    _checks.check_integer("strategy.model_axis_size", size, low=1)


def _check_process_group(strategy):
    """The JAX process-group and input-pipeline settings' own ranges."""
    for name, low in (("input_pipelines", 1), ("num_processes", 1), ("process_id", 0)):
        _checks.check_optional_integer(f"strategy.{name}", getattr(strategy, name), low=low)
    _checks.check_integer("strategy.initialization_timeout", strategy.initialization_timeout, low=1)
    _checks.check_integer("strategy.peer_timeout", strategy.peer_timeout, low=2)
    if strategy.multi_host is not None:
        _checks.check_bool("strategy.multi_host", strategy.multi_host)
    if None not in (strategy.num_processes, strategy.process_id) and not (
        strategy.process_id < strategy.num_processes
    ):
        raise ValueError(
            f"strategy.process_id must be in [0, strategy.num_processes={strategy.num_processes}"
            f"), got {strategy.process_id}"
        )
    address = strategy.coordinator_address
    if address is not None and not _ADDRESS.match(address):
        raise ValueError(
            f"strategy.coordinator_address must be host:port (e.g. 10.0.0.1:1234), got {address!r}"
        )
    if strategy.multi_host is False:
        given = [
            f"strategy.{name}={getattr(strategy, name)!r}"
            for name in ("coordinator_address", "num_processes", "process_id")
            if getattr(strategy, name) is not None
        ]
        if given:
            raise ValueError(
                f"strategy.multi_host=false runs one process, but {', '.join(given)} name a "
                "process group; leave multi_host null (or true) to start one"
            )


def _yaml(value):
    return "null" if value is None else repr(value)


DIVERGENCE_ACTIONS = ("stop", "rollback")


@dataclasses.dataclass
class DivergenceConfig:
    """What the trainer does when the run diverges (`keras_largebatch.training.divergence`): a
    logging window's loss that is not finite, or above ``max_loss_ratio`` times the mean of the
    recent windows'. No checkpoint is written with non-finite weights or optimizer state."""

    action: str = "stop"  # stop: end the run (non-zero exit); rollback: restore the last good
    # checkpoint of the phase, skip the input past the divergence and go on
    max_loss_ratio: Optional[float] = None  # a window loss above this x the recent windows' mean
    # is a spike (e.g. 2.0); null: only a non-finite loss diverges
    recent_windows: int = 5  # finite windows whose mean loss a spike is measured against
    skip_batches: int = 0  # rollback: optimizer steps of input skipped past the window that
    # diverged (its own steps are always skipped)
    max_rollbacks: int = 3  # rollback: rollbacks in the run before it stops as with action=stop

    def validate(self):
        _checks.check_choice("divergence.action", self.action, DIVERGENCE_ACTIONS)
        if self.max_loss_ratio is not None:
            _checks.check_number(
                "divergence.max_loss_ratio", self.max_loss_ratio, low=1, low_open=True
            )
        _checks.check_integer("divergence.recent_windows", self.recent_windows, low=1)
        _checks.check_integer("divergence.skip_batches", self.skip_batches, low=0)
        _checks.check_integer("divergence.max_rollbacks", self.max_rollbacks, low=0)


@dataclasses.dataclass
class PhaseConfig:
    """One phase of a run: a number of optimizer steps at one global batch size.

    Every phase continues from the weights the previous one ended with and starts a fresh
    optimizer. A recipe derives its phases from this class to add its own fields. How the
    batch is split over the replicas of a run is its plan (`keras_largebatch.training.plan`).
    """

    global_batch_size: int = 32  # examples per optimizer step, over all replicas
    steps: int = 600  # optimizer steps of this phase
    gradient_accumulation_steps: Optional[int] = None  # micro-batches per optimizer step; null:
    # the fewest that fit max_per_replica_batch_size on the replicas present (1 without it)
    max_per_replica_batch_size: Optional[int] = None  # largest per-replica micro-batch; null: any

    def validate(self, key):
        """Checks this phase's own fields (``key``: its config path, e.g. ``phases.0``).

        A recipe's phase extends this with its own fields' checks and calls it.
        """
        for name in ("global_batch_size", "steps"):
            _checks.check_integer(f"{key}.{name}", getattr(self, name), low=1)
        for name in ("gradient_accumulation_steps", "max_per_replica_batch_size"):
            if getattr(self, name) is not None:
                _checks.check_integer(f"{key}.{name}", getattr(self, name), low=1)


@dataclasses.dataclass
class RunConfig:
    """The settings every training run has; a recipe's config derives from it."""

    output_dir: str = "runs/run"  # run directory: config, checkpoints, logs, summary
    checkpoint_dir: Optional[str] = None  # None: OUTPUT_DIR/checkpoints
    checkpoint_interval: int = 100  # optimizer steps between checkpoints (and at phase ends)
    log_interval: int = 25  # optimizer steps per progress line and TensorBoard point
    keep_checkpoints: int = 2  # newest checkpoints kept
    steps_per_execution: int = 1  # training steps per compiled call (TPU: e.g. 100)
    mixed_precision: Optional[str] = None  # null, mixed_float16 (GPU) or mixed_bfloat16 (TPU)
    seed: int = 0  # seed of the weight initialization and dropout
    overwrite: bool = False  # start over in an OUTPUT_DIR that holds a different run
    phases: list[PhaseConfig] = dataclasses.field(default_factory=lambda: [PhaseConfig()])
    strategy: StrategyConfig = dataclasses.field(default_factory=StrategyConfig)
    divergence: DivergenceConfig = dataclasses.field(default_factory=DivergenceConfig)

    def to_dict(self):
        """The config as plain data (what YAML and the run directory's run_config.json hold)."""
        return dataclasses.asdict(self)

    def to_yaml(self):
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def validate(self):
        """Checks values and relations between fields; raises naming the field. Returns self.

        Changes nothing. A recipe's config extends this with its own checks and calls it. A
        phase whose accumulation is derived from the replicas (``max_per_replica_batch_size``
        without ``gradient_accumulation_steps``) has its split checked by
        `check_accumulation` once the plan of a run derives it.
        """
        _checks.check_choice("mixed_precision", self.mixed_precision, MIXED_PRECISION_POLICIES)
        _checks.check_choice("strategy.name", self.strategy.name, STRATEGY_NAMES)
        check_strategy_config(self.strategy)
        self.divergence.validate()
        for name in (
            "checkpoint_interval",
            "log_interval",
            "keep_checkpoints",
            "steps_per_execution",
        ):
            _checks.check_integer(name, getattr(self, name), low=1)
        if self.checkpoint_interval % self.log_interval:
            raise ValueError(
                f"checkpoint_interval must be a multiple of log_interval={self.log_interval} "
                f"(checkpoints are written at the end of a logging window), got "
                f"{self.checkpoint_interval}"
            )
        if not self.phases:
            raise ValueError("phases must hold at least one phase, got []")
        for index, phase in enumerate(self.phases):
            phase.validate(f"phases.{index}")
            if phase.gradient_accumulation_steps or not phase.max_per_replica_batch_size:
                self.check_accumulation(
                    f"phases.{index}", phase, phase.gradient_accumulation_steps or 1
                )
        return self

    def check_accumulation(self, key, phase, accumulation_steps):
        """Checks that ``phase`` (at config path ``key``) can run as ``accumulation_steps``
        micro-batches per optimizer step: given in the config, or derived for the replicas of
        a run (`keras_largebatch.training.plan`). A recipe's config extends it with the
        limits of its optimizers.
        """
        if phase.global_batch_size % accumulation_steps:
            raise ValueError(
                f"{key}.global_batch_size={phase.global_batch_size} must be divisible by "
                f"{key}.gradient_accumulation_steps={accumulation_steps}"
            )
        # One training call runs steps_per_execution micro-batches; Keras would run past the
        # end of a logging window (and of the phase) that is not a whole number of calls.
        for steps, what in (
            (self.log_interval, "log_interval"),
            (phase.steps % self.log_interval, f"{key}.steps % log_interval"),
        ):
            micro_steps = steps * accumulation_steps
            if micro_steps % self.steps_per_execution:
                raise ValueError(
                    f"steps_per_execution={self.steps_per_execution} must divide {what} x "
                    f"{key}.gradient_accumulation_steps = {micro_steps} (training calls of a "
                    "logging window)"
                )


def config_differences(old, new, prefix=""):
    """The dotted keys where two configs (plain data) differ; a key one of them lacks counts
    as null, so a run recorded before a field with a null default existed still resumes."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = set(old) | set(new)
        return [
            difference
            for key in keys
            for difference in config_differences(old.get(key), new.get(key), f"{prefix}{key}.")
        ]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            difference
            for index, (a, b) in enumerate(zip(old, new))
            for difference in config_differences(a, b, f"{prefix}{index}.")
        ]
    return [] if old == new else [prefix.rstrip(".")]


def check_baseline_accumulation(key, accumulation_steps, optimizer_name, layerwise):
    """Refuses ``accumulation_steps`` > 1 micro-batches for phase ``key`` unless
    ``optimizer.name`` is the recipe's layer-wise optimizer ``layerwise``: Keras's optimizers
    evaluate the learning-rate schedule at their micro-batch counter, so a baseline's warmup
    and decay would run that many times too fast; ours count optimizer steps
    (`keras_largebatch.training.optimizer_factory`)."""
    if accumulation_steps > 1 and optimizer_name != layerwise:
        raise ValueError(
            f"{key}.gradient_accumulation_steps={accumulation_steps} needs optimizer.name="
            f"{layerwise!r}; Keras's {optimizer_name} optimizer advances its learning-rate "
            "schedule per micro-batch"
        )
