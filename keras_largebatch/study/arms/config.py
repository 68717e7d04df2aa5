"""The second edition's settings: which arm, its workload, the pilot, the cells' search and
seeds, and the presets; checked before any training. Imports nothing heavy."""

import copy
import dataclasses
import math
from typing import NamedTuple, Optional

from keras_largebatch import _checks


class Arm(NamedTuple):
    """A claim where it was made: a workload, the layer-wise optimizer and its baseline, and
    the weight decay of the workload's published recipe (the same for both)."""

    workload: str  # "resnet" or "bert_mlm"
    layerwise: str  # a key of `spaces.OPTIMIZERS`
    baseline: str
    weight_decay: float
    label: str


ARMS = {
    # MLPerf's ResNet-50 LARS decays with 5e-5 at batch 16K-32K (2.5e-5 to 1e-4 across its
    # submissions); BERT's AdamW and LAMB decay with 0.01.
    "resnet_lars": Arm("resnet", "lars", "nesterov", 5e-5, "LARS against Nesterov on a ResNet"),
    "bert_lamb": Arm("bert_mlm", "lamb", "adamw", 0.01, "LAMB against AdamW on a BERT"),
}


@dataclasses.dataclass
class ArmConfig:
    """One arm's run: a pilot of the baseline alone at ``pilot_batch_sizes`` measures its
    critical batch size ``B_crit``; the main cells then run both optimizers at ``B_crit``
    times each of ``multiples``, or at ``batch_sizes`` when given.

    The main batch sizes are the pilot's smallest batch size times the power of ``main_grid``
    nearest to each multiple in log scale, halves up (with ``main_grid`` 4 and a pilot a
    factor of 4 apart, they are the pilot's own batch sizes or its grid continued); those
    above ``max_batch_size`` are left out. With ``reuse_pilot``, the baseline's main cell at
    one of the pilot's batch sizes continues the pilot's cell there: its search and
    refinement are the pilot's (the same planned trials: the same points, seed 0, budgets and
    stopping steps), and its ``seeds`` are fresh, numbered after the pilot's.

    Every cell (an optimizer at a batch size) runs ``search_trials`` scrambled Sobol points of
    the optimizer's space at that batch size, then ``refinement_trials`` points around the
    best, then the best settings with ``seeds`` fresh seeds (1 .. seeds, or after the
    pilot's in a continued cell; the search's trials use seed 0). A trial stops at the
    target, at divergence, at its budget of ``max(ceil(budget_examples / B), min_steps)``
    steps, or (search and refinement) at the step where the cell's best so far reached the
    target: it can no longer be the best.
    """

    arm: str = "resnet_lars"
    workload: dict = dataclasses.field(default_factory=dict)  # the workload's arguments
    target: float = 0.9  # of the workload's metric (validation accuracy or masked-LM loss)
    pilot_batch_sizes: list = dataclasses.field(default_factory=lambda: [64, 256, 1024, 4096])
    multiples: list = dataclasses.field(default_factory=lambda: [0.5, 2, 8, 32])
    batch_sizes: Optional[list] = None  # the main cells' batch sizes; None: from the pilot
    main_grid: int = 2  # main batch sizes: the pilot's smallest times a power of this
    max_batch_size: Optional[int] = None  # main batch sizes above it are left out
    reuse_pilot: bool = False  # the baseline's main cells continue its pilot cells
    budget_examples: int = 3_000_000  # examples of a trial's budget above its floor
    min_steps: int = 600  # the floor of every budget
    search_trials: int = 8  # per cell, a power of 2
    refinement_trials: int = 4  # per cell, around the search's best
    max_warmup_steps: int = 400  # the warmup's range: 1 to this many steps, log-uniform
    refinement_width: float = 0.125  # of each unit range, either side of the best point
    seeds: int = 4  # fresh seeds of the best settings per main cell
    pilot_seeds: int = 2  # per pilot cell
    evaluation_growth: float = 1.05  # the validation set is evaluated at steps growing so
    first_evaluation: int = 5  # the first evaluated step
    search_seed: int = 0  # of the Sobol scramble
    bootstrap_samples: int = 2000  # of the B_crit interval and of the noise scale's
    noise_micro_batches: int = 128  # per measurement of the noise scale (`noise_scale`)
    noise_growth: float = 1.15  # the noise scale's measured steps grow by this factor
    data_dir: Optional[str] = None  # where the workload's data are read or cached

    @property
    def definition(self):
        """The `Arm`."""
        return ARMS[self.arm]

    def settings(self):
        """The fields that decide the results (the data's location may change)."""
        settings = dataclasses.asdict(self)
        del settings["data_dir"]
        return settings

    def step_budget(self, batch_size):
        return max(math.ceil(self.budget_examples / batch_size), self.min_steps)

    def continues_pilot(self, optimizer, batch_size):
        """Whether ``optimizer``'s main cell at ``batch_size`` continues its pilot cell: with
        ``reuse_pilot``, the baseline's cells at the pilot's batch sizes."""
        return (
            self.reuse_pilot
            and optimizer == self.definition.baseline
            and batch_size in self.pilot_batch_sizes
        )

    def validate(self):
        """Checks every field; raises naming the field, the value and what is allowed."""
        _checks.check_choice("arm", self.arm, ARMS)
        if not isinstance(self.workload, dict):
            raise TypeError(
                f"workload must be a dict of the workload's arguments, got {self.workload!r}"
            )
        _checks.check_number("target", self.target, low=0, low_open=True)
        _check_sizes("pilot_batch_sizes", self.pilot_batch_sizes, minimum=2)
        if not isinstance(self.multiples, (list, tuple)) or not self.multiples:
            raise ValueError(
                f"multiples must be a non-empty ascending list, got {self.multiples!r}"
            )
        for multiple in self.multiples:
            _checks.check_number("multiples", multiple, low=0, low_open=True)
        if list(self.multiples) != sorted(set(self.multiples)):
            raise ValueError(f"multiples must be ascending without repeats, got {self.multiples!r}")
        if self.batch_sizes is not None:
            _check_sizes("batch_sizes", self.batch_sizes, minimum=1)
        _checks.check_integer("main_grid", self.main_grid, low=2)
        if self.max_batch_size is not None:
            _checks.check_integer(
                "max_batch_size", self.max_batch_size, low=self.pilot_batch_sizes[0]
            )
        _checks.check_bool("reuse_pilot", self.reuse_pilot)
        _checks.check_integer("budget_examples", self.budget_examples, low=1)
        _checks.check_integer("min_steps", self.min_steps, low=1)
        _checks.check_integer("search_trials", self.search_trials, low=1)
        if self.search_trials & (self.search_trials - 1):
            raise ValueError(
                "search_trials must be a power of 2 (the Sobol points then cover each range "
                f"evenly), got {self.search_trials}"
            )
        _checks.check_integer("refinement_trials", self.refinement_trials, low=0)
        _checks.check_number(
            "refinement_width", self.refinement_width, low=0, high=0.5, low_open=True
        )
        _checks.check_integer("seeds", self.seeds, low=1)
        _checks.check_integer("pilot_seeds", self.pilot_seeds, low=1)
        _checks.check_number("evaluation_growth", self.evaluation_growth, low=1, low_open=True)
        _checks.check_integer("first_evaluation", self.first_evaluation, low=1)
        _checks.check_integer("search_seed", self.search_seed, low=0)
        _checks.check_integer("bootstrap_samples", self.bootstrap_samples, low=1)
        _checks.check_integer("noise_micro_batches", self.noise_micro_batches, low=2)
        _checks.check_number("noise_growth", self.noise_growth, low=1, low_open=True)
        if self.data_dir is not None:
            _checks.check_string("data_dir", self.data_dir)
        return self


def _check_sizes(argument, values, minimum):
    if not isinstance(values, (list, tuple)) or len(values) < minimum:
        raise ValueError(
            f"{argument} must be an ascending list of at least {minimum} batch sizes, "
            f"got {values!r}"
        )
    for value in values:
        _checks.check_integer(argument, value, low=1)
    if list(values) != sorted(set(values)):
        raise ValueError(f"{argument} must be ascending without repeats, got {values!r}")


_TINY = dict(
    pilot_batch_sizes=[8, 16],
    multiples=[2],
    budget_examples=320,
    min_steps=10,
    search_trials=1,
    refinement_trials=1,
    max_warmup_steps=4,
    seeds=1,
    pilot_seeds=1,
    evaluation_growth=1.5,
    first_evaluation=2,
    bootstrap_samples=50,
    noise_micro_batches=4,
    noise_growth=1.5,
)
_TINY_RESNET = dict(train_examples=320, validation_examples=64, second_stage_filters=8)
_TINY_BERT = dict(
    corpus="python",
    sequence_length=32,
    vocabulary_size=500,
    num_layers=1,
    hidden_dim=16,
    num_heads=1,
    intermediate_dim=32,
    validation_sequences=64,
    test_sequences=64,
    train_sequences=512,
)

PRESETS = {
    # The full run of each arm, sized by --estimate and a measured curve to fit the study's
    # 10 CPU hours: multiples up to 8x B_crit, evaluations 10% apart on a 2,000-example
    # validation split.
    ("resnet_lars", "full"): ArmConfig(
        workload=dict(validation_examples=2000),
        target=0.87,
        multiples=[0.5, 2, 8],
        budget_examples=400_000,
        min_steps=300,
        evaluation_growth=1.1,
        first_evaluation=10,
    ),
    ("bert_lamb", "full"): ArmConfig(
        arm="bert_lamb",
        # AdamW at batch 256 and rate 1e-3 reached validation loss 6.35 after 300 steps (the
        # loss of a uniform guess is ln 8192 = 9.0): an early target, as a CPU allows.
        workload=dict(corpus="debian", validation_sequences=2000, test_sequences=2000),
        target=6.3,
        pilot_batch_sizes=[32, 128, 512, 2048],
        multiples=[0.5, 2, 8],
        # The largest batch sizes cost most (the examples to the target grow as
        # 1 + B / B_crit): the main cells stay on the pilot's grid, where AdamW's cells are
        # its pilot cells continued, and end at the pilot's largest batch size.
        main_grid=4,
        max_batch_size=2048,
        reuse_pilot=True,
        budget_examples=300_000,
        min_steps=300,
        evaluation_growth=1.1,
        first_evaluation=10,
    ),
    # Both arms end to end on a few hundred examples, for the suite: the protocol's every
    # part (pilot, fit, search, refinement, seeds, report) once, in about a minute each.
    ("resnet_lars", "tiny"): ArmConfig(workload=dict(_TINY_RESNET), target=0.2, **_TINY),
    ("bert_lamb", "tiny"): ArmConfig(
        arm="bert_lamb", workload=dict(_TINY_BERT), target=6.1, **_TINY
    ),
}


def preset(arm, name, **overrides):
    """The preset ``name`` of ``arm`` with fields replaced by ``overrides`` (None values are
    ignored), validated."""
    _checks.check_choice("arm", arm, ARMS)
    names = sorted({preset_name for arm_name, preset_name in PRESETS if arm_name == arm})
    _checks.check_choice("preset", name, names)
    unknown = sorted(set(overrides) - {field.name for field in dataclasses.fields(ArmConfig)})
    if unknown:
        raise ValueError(f"unknown study settings {unknown}")
    overrides = {key: value for key, value in overrides.items() if value is not None}
    return dataclasses.replace(copy.deepcopy(PRESETS[arm, name]), **overrides).validate()


def make_workload(config):
    """The arm's workload built from ``config.workload`` (and ``config.data_dir``)."""
    arguments = dict(config.workload)
    if config.data_dir is not None:
        arguments["data_dir"] = config.data_dir
    if config.definition.workload == "resnet":
        from keras_largebatch.study.arms.resnet import ResNetWorkload

        return ResNetWorkload(**arguments)
    from keras_largebatch.study.arms.bert_mlm import MaskedLanguageModelWorkload

    return MaskedLanguageModelWorkload(**arguments)
