"""The study's settings, its presets, and the checks that run before any training."""

import copy
import dataclasses
import math
from typing import Optional

from keras_largebatch import _checks
from keras_largebatch.study.optimizers import OPTIMIZERS

# A cell whose best trial needs more than this share of its budget is searched again with
# twice the budget (once).
BUDGET_RERUN_FRACTION = 0.8


@dataclasses.dataclass
class StudyConfig:
    """One study: what is trained, for how long, how it is searched and what is recorded.

    The step budget of batch size ``B`` is ``max(ceil(budget_examples / B), min_steps)``
    (`step_budget`).
    """

    optimizers: list[str] = dataclasses.field(default_factory=lambda: list(OPTIMIZERS))
    batch_sizes: list[int] = dataclasses.field(
        default_factory=lambda: [64, 128, 256, 512, 1024, 2048, 4096]
    )  # ascending; the smallest also measures the noise scale
    budget_examples: int = 262_500  # examples a budget holds above its floor (2.5 x 105,000)
    min_steps: int = 300  # the floor of every step budget
    targets: list[float] = dataclasses.field(
        default_factory=lambda: [0.85, 0.87, 0.88]
    )  # validation accuracies whose first step is recorded; a search trial stops at the last
    primary_target: float = 0.87  # the target that selects a cell's best settings
    evaluations_per_budget: int = 40  # validation evaluations spread over a full budget
    trials_per_cell: int = 16  # quasi-random trials per (optimizer, batch size), a power of 2
    extension_trials: int = 4  # extra trials beyond each range edge a cell's best point is at
    seeds: int = 3  # runs of each cell's best settings: its own seed and seeds-1 more
    validation_examples: int = 10_000  # split off the training set, stratified by class
    train_examples: Optional[int] = None  # first N training images before the split; None: all
    split_seed: int = 0  # seed of the validation split
    search_seed: int = 0  # seed of the Sobol scramble
    divergence_loss: float = 2 * math.log(10)  # validation loss above this (2x chance): diverged
    noise_scale_points: int = 10  # B_simple measurements along the smallest batch's best runs
    noise_scale_micro_batches: int = 128  # independent micro-batches per measurement
    bootstrap_samples: int = 2000  # resamples of the B_crit and B_simple intervals
    criteria_min_batch_size: int = 1024  # the claim's criteria count batch sizes from here
    data_dir: Optional[str] = None  # the Fashion-MNIST files; None: the Keras cache

    def settings(self):
        """The fields that decide the results: what a resumed study must share (the data's
        location may change)."""
        settings = dataclasses.asdict(self)
        del settings["data_dir"]
        return settings

    def step_budget(self, batch_size):
        """The first-round step budget of ``batch_size``."""
        return max(math.ceil(self.budget_examples / batch_size), self.min_steps)

    def validate(self):
        """Checks every field alone and the fields together; raises naming the field, the
        value and what is allowed. The batch sizes against the data: `check_data`. Returns
        self."""
        if not isinstance(self.optimizers, (list, tuple)) or not self.optimizers:
            raise ValueError(
                f"optimizers must be a non-empty list of {list(OPTIMIZERS)}, "
                f"got {self.optimizers!r}"
            )
        for name in self.optimizers:
            _checks.check_choice("optimizers", name, OPTIMIZERS)
        if len(set(self.optimizers)) != len(self.optimizers):
            raise ValueError(f"optimizers must not repeat a name, got {self.optimizers!r}")
        _check_ascending(
            "batch_sizes",
            self.batch_sizes,
            lambda v: _checks.check_integer("batch_sizes", v, low=1),
        )
        _checks.check_integer("budget_examples", self.budget_examples, low=1)
        _checks.check_integer("min_steps", self.min_steps, low=1)
        _check_ascending(
            "targets",
            self.targets,
            lambda v: _checks.check_number("targets", v, low=0, high=1, low_open=True),
        )
        _checks.check_choice("primary_target", self.primary_target, self.targets)
        _checks.check_integer("evaluations_per_budget", self.evaluations_per_budget, low=1)
        _checks.check_integer("trials_per_cell", self.trials_per_cell, low=1)
        if self.trials_per_cell & (self.trials_per_cell - 1):
            raise ValueError(
                "trials_per_cell must be a power of 2 (the Sobol points of a cell then cover "
                f"each range evenly), got {self.trials_per_cell}"
            )
        _checks.check_integer("extension_trials", self.extension_trials, low=1)
        _checks.check_integer("seeds", self.seeds, low=1)
        _checks.check_integer("validation_examples", self.validation_examples, low=1)
        _checks.check_optional_integer("train_examples", self.train_examples, low=2)
        _checks.check_integer("split_seed", self.split_seed, low=0)
        _checks.check_integer("search_seed", self.search_seed, low=0)
        _checks.check_number("divergence_loss", self.divergence_loss, low=0, low_open=True)
        _checks.check_integer("noise_scale_points", self.noise_scale_points, low=0)
        _checks.check_integer("noise_scale_micro_batches", self.noise_scale_micro_batches, low=2)
        _checks.check_integer("bootstrap_samples", self.bootstrap_samples, low=1)
        _checks.check_integer("criteria_min_batch_size", self.criteria_min_batch_size, low=1)
        if self.data_dir is not None:
            _checks.check_string("data_dir", self.data_dir)
        return self

    def check_data(self, num_train_examples):
        """Raises unless one step of every batch size fits in the ``num_train_examples`` left
        after the validation split, and so do the noise-scale measurement's micro-batches of
        the smallest batch."""
        largest = self.batch_sizes[-1]
        if largest > num_train_examples:
            raise ValueError(
                f"batch_sizes must be <= the {num_train_examples} training examples left after "
                f"the validation split, got {largest}"
            )
        needed = self.noise_scale_micro_batches * self.batch_sizes[0]
        if self.noise_scale_points and needed > num_train_examples:
            raise ValueError(
                f"noise_scale_micro_batches={self.noise_scale_micro_batches} micro-batches of "
                f"batch_sizes[0]={self.batch_sizes[0]} need {needed} training examples, there "
                f"are {num_train_examples} (or set noise_scale_points=0)"
            )


def _check_ascending(argument, values, check):
    """Raises unless ``values`` is a non-empty list whose items pass ``check``, ascending
    without repeats."""
    if not isinstance(values, (list, tuple)) or not values:
        raise ValueError(f"{argument} must be a non-empty ascending list, got {values!r}")
    for value in values:
        check(value)
    if list(values) != sorted(set(values)):
        raise ValueError(f"{argument} must be ascending without repeats, got {values!r}")


PRESETS = {
    # The protocol: seven batch sizes, 16 trials a cell, three seeds; its committed run took
    # 560 trials and 7.5 hours of training on 2 CPU cores.
    "full": StudyConfig(),
    # The same protocol on four batch sizes with smaller budgets, half the trials and two
    # seeds: about an hour on two CPU cores.
    "default": StudyConfig(
        batch_sizes=[64, 256, 1024, 2048],
        budget_examples=157_500,
        min_steps=200,
        evaluations_per_budget=25,
        trials_per_cell=8,
        extension_trials=2,
        seeds=2,
        noise_scale_points=6,
        noise_scale_micro_batches=64,
    ),
    # The same files from a few hundred images, for tests.
    "tiny": StudyConfig(
        batch_sizes=[16, 64],
        budget_examples=768,
        min_steps=6,
        targets=[0.15, 0.2, 0.25],
        primary_target=0.2,
        evaluations_per_budget=4,
        trials_per_cell=2,
        extension_trials=1,
        seeds=2,
        validation_examples=64,
        train_examples=256,
        noise_scale_points=2,
        noise_scale_micro_batches=4,
        bootstrap_samples=50,
        criteria_min_batch_size=16,
    ),
}


def preset(name, **overrides):
    """The preset ``name`` (a key of `PRESETS`) with fields replaced by ``overrides``
    (None values are ignored: an option not given on the command line); validated."""
    _checks.check_choice("preset", name, PRESETS)
    unknown = sorted(set(overrides) - {field.name for field in dataclasses.fields(StudyConfig)})
    if unknown:
        raise ValueError(f"unknown study settings {unknown}")
    overrides = {key: value for key, value in overrides.items() if value is not None}
    return dataclasses.replace(copy.deepcopy(PRESETS[name]), **overrides).validate()
