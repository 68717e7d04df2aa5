"""A run's plan: its config resolved, once, for the replicas it trains on.

A config says what the user asked for; the plan says what runs. For each phase it fixes the
global batch, the replicas, the micro-batch and the gradient accumulation steps: a phase that
gives ``max_per_replica_batch_size`` and leaves ``gradient_accumulation_steps`` null gets the
fewest micro-batches whose per-replica share fits (`derive_accumulation_steps`), so one config
accumulates on 8 cores and not on 2,048. The user's config object is never changed: each
`PhasePlan` holds its own copy of the phase's settings, and the plans are frozen dataclasses
(shallowly: a phase's ``settings`` and the run's ``record`` are plain copies, not to be
changed).

    plan = plan_run(config, num_replicas=8)
    phase = plan.phases[0]
    phase.micro_batch_size, phase.per_replica_batch_size, phase.gradient_accumulation_steps
    phase.settings.peak_learning_rate     # the recipe's own settings of the phase
    plan.record                           # the config as run_config.json records it
"""

import copy
import dataclasses
from typing import Any

from keras_largebatch.training.config import PROCESS_GROUP_FIELDS


@dataclasses.dataclass(frozen=True)
class PhasePlan:
    """One phase as it runs: its batch split over the replicas, its steps and settings."""

    index: int  # position in the run's phases, from 0
    num_phases: int  # phases of the run
    settings: Any  # a copy of the phase's config (a `config.PhaseConfig` of the recipe's class)
    num_replicas: int  # replicas each micro-batch is split over
    gradient_accumulation_steps: int  # micro-batches per optimizer step
    first_global_step: int  # optimizer steps of the phases before this one

    @property
    def key(self):
        """The phase's config path, as error messages name it: ``phases.0``."""
        return f"phases.{self.index}"

    @property
    def number(self):
        """The phase's number, from 1, as progress lines show it."""
        return self.index + 1

    @property
    def is_last(self):
        return self.index == self.num_phases - 1

    @property
    def steps(self):
        """Optimizer steps of the phase."""
        return self.settings.steps

    @property
    def global_batch_size(self):
        """Examples per optimizer step, over all replicas."""
        return self.settings.global_batch_size

    @property
    def micro_batch_size(self):
        """Examples per micro-batch, over all replicas."""
        return self.global_batch_size // self.gradient_accumulation_steps

    @property
    def per_replica_batch_size(self):
        """Examples of one replica's share of a micro-batch."""
        return self.micro_batch_size // self.num_replicas

    def describe_split(self):
        """``global batch G = R replicas x P examples x K accumulation steps``."""
        return (
            f"global batch {self.global_batch_size} = {_count(self.num_replicas, 'replica')} x "
            f"{_count(self.per_replica_batch_size, 'example')} x "
            f"{_count(self.gradient_accumulation_steps, 'accumulation step')}"
        )


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """The phases of a run on ``num_replicas`` replicas, and the run config they resolve."""

    phases: tuple  # of `PhasePlan`, in order
    num_replicas: int
    record: dict  # the config as plain data, each phase's gradient_accumulation_steps resolved

    @property
    def total_steps(self):
        return sum(phase.steps for phase in self.phases)


def run_record(config):
    """``config`` (a `config.RunConfig`) as plain data without the strategy's process-group
    settings (`config.PROCESS_GROUP_FIELDS`: where the processes meet and which one each is),
    which differ between the processes and the launches of one run: what the processes of a
    run compare, and what its plan records once the accumulation is resolved."""
    record = config.to_dict()
    for name in PROCESS_GROUP_FIELDS:
        record["strategy"].pop(name)
    return record


def plan_run(config, num_replicas, input_pipelines=None, num_processes=1):
    """The `RunPlan` of ``config`` (a validated `config.RunConfig`) on ``num_replicas``
    replicas over ``num_processes`` processes that read ``input_pipelines`` input pipelines
    (the JAX road's `devices.JaxDevices.input_pipelines`; None: as the strategy decides, one
    per worker on TensorFlow); ``config`` is not changed. The replicas are what a micro-batch
    is split over: the devices, or under JAX's model_parallel the rows of the (batch, model)
    mesh, whose devices share their examples.

    Every phase's split is checked against the config's limits here
    (`RunConfig.check_accumulation`), its accumulation given or derived, so that a config
    built or changed in Python cannot train a batch other than the one it names.

    Raises:
        ValueError: a phase's batch does not split over the replicas (`plan_phase`) or the
            input pipelines, the input pipelines do not split over the processes, or a
            phase's accumulation breaks a limit of the config.
    """
    record = run_record(config)
    if input_pipelines is not None:
        # Named as given: null (one per process) splits both ways whenever the replicas do.
        pipelines = f"strategy.input_pipelines={input_pipelines}"
        if input_pipelines % num_processes:
            raise ValueError(
                f"{pipelines} must be a multiple of the {num_processes} processes of the run "
                "(each process reads the same number of them)"
            )
        # A run of one pipeline records null, as runs recorded before the key existed do.
        record["strategy"]["input_pipelines"] = input_pipelines if input_pipelines > 1 else None
    phases = []
    first_global_step = 0
    for index, phase_config in enumerate(config.phases):
        phase = plan_phase(phase_config, num_replicas, index, len(config.phases), first_global_step)
        config.check_accumulation(phase.key, phase_config, phase.gradient_accumulation_steps)
        if input_pipelines is not None and phase.micro_batch_size % input_pipelines:
            raise ValueError(
                f"{phase.key}.global_batch_size={phase.global_batch_size} / "
                f"gradient_accumulation_steps={phase.gradient_accumulation_steps} = "
                f"{phase.micro_batch_size} examples per micro-batch must be divisible by "
                f"{pipelines} (each reads an equal share of every micro-batch)"
            )
        record["phases"][index]["gradient_accumulation_steps"] = phase.gradient_accumulation_steps
        phases.append(phase)
        first_global_step += phase.steps
    return RunPlan(phases=tuple(phases), num_replicas=num_replicas, record=record)


def plan_phase(phase_config, num_replicas, index=0, num_phases=1, first_global_step=0):
    """The `PhasePlan` of one phase's config (``phases[index]`` of ``num_phases``, after
    ``first_global_step`` steps of the phases before it) on ``num_replicas`` replicas:
    ``gradient_accumulation_steps`` as given, or derived (`derive_accumulation_steps`).

    Raises:
        ValueError: no accumulation splits the batch within ``max_per_replica_batch_size``, the
            micro-batch does not divide over the replicas, or a given accumulation leaves more
            than ``max_per_replica_batch_size`` examples per replica.
    """
    key = f"phases.{index}"
    global_batch_size = phase_config.global_batch_size
    limit = phase_config.max_per_replica_batch_size
    accumulation = phase_config.gradient_accumulation_steps
    if accumulation is None:
        accumulation = derive_accumulation_steps(key, global_batch_size, num_replicas, limit)
    micro_batch = global_batch_size // accumulation
    if micro_batch % num_replicas:
        raise ValueError(
            f"{key}.global_batch_size={global_batch_size} / gradient_accumulation_steps="
            f"{accumulation} = {micro_batch} examples per micro-batch must be divisible by the "
            f"{num_replicas} replicas of the strategy"
        )
    per_replica = micro_batch // num_replicas
    if limit is not None and per_replica > limit:
        raise ValueError(
            f"{key}.global_batch_size={global_batch_size} / ({num_replicas} replicas x "
            f"gradient_accumulation_steps={accumulation}) = {per_replica} examples per replica "
            f"exceeds {key}.max_per_replica_batch_size={limit}; raise "
            "gradient_accumulation_steps or leave it null to derive it"
        )
    return PhasePlan(
        index=index,
        num_phases=num_phases,
        settings=copy.deepcopy(phase_config),
        num_replicas=num_replicas,
        gradient_accumulation_steps=accumulation,
        first_global_step=first_global_step,
    )


def derive_accumulation_steps(key, global_batch_size, num_replicas, max_per_replica_batch_size):
    """The fewest micro-batches per optimizer step that split ``global_batch_size`` evenly over
    ``num_replicas`` replicas, at most ``max_per_replica_batch_size`` examples each (None: no
    limit, so 1): the smallest k with ``global_batch_size % (num_replicas * k) == 0`` and
    ``global_batch_size / (num_replicas * k) <= max_per_replica_batch_size``. ``key`` names
    the phase in the message.

    Raises:
        ValueError: no number of micro-batches does.
    """
    if max_per_replica_batch_size is None:
        return 1
    for steps in range(1, global_batch_size // num_replicas + 1):
        per_replica, remainder = divmod(global_batch_size, num_replicas * steps)
        if not remainder and per_replica <= max_per_replica_batch_size:
            return steps
    raise ValueError(
        f"{key}.global_batch_size={global_batch_size} cannot be split over {num_replicas} "
        f"replicas into micro-batches of at most {key}.max_per_replica_batch_size="
        f"{max_per_replica_batch_size} examples per replica: no gradient_accumulation_steps k "
        f"has {global_batch_size} divisible by {num_replicas} x k with {global_batch_size} / "
        f"({num_replicas} x k) <= {max_per_replica_batch_size}"
    )


def _count(number, noun):
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
