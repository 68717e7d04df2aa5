"""The study's settings, its presets, and the checks that run before any training."""

import copy
import dataclasses
import math
from typing import Optional

from keras_largebatch import _checks
from keras_largebatch.scaling import RULES
from keras_largebatch.study.optimizers import OPTIMIZERS


@dataclasses.dataclass
class StudyConfig:
    """One study: what is trained, for how long, and what is recorded."""

    optimizers: list[str] = dataclasses.field(default_factory=lambda: list(OPTIMIZERS))
    batch_sizes: list[int] = dataclasses.field(
        default_factory=lambda: [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
    )  # global batch sizes, ascending; the smallest also measures the noise scale
    scaling_rules: dict[str, str] = dataclasses.field(
        default_factory=dict
    )  # optimizer -> "linear" or "sqrt", replacing the rule that centres its grid
    learning_rates_per_cell: int = 3  # k: rates tried per (optimizer, batch size), same for all
    learning_rate_ratio: float = 4.0  # ratio of neighbouring rates of the log grid
    epochs: int = 2  # epoch budget of every trial
    evaluations_per_epoch: int = 4  # test-set evaluations per epoch (fewer if fewer steps)
    target_accuracy: float = 0.85  # test accuracy whose first step is recorded
    warmup_fraction: float = 0.1  # share of a trial's steps in linear warmup (then linear decay)
    weight_decay: float = 1e-4  # every optimizer's own weight decay
    divergence_loss: float = 2 * math.log(10)  # test loss above this (2x chance): diverged
    noise_scale_epochs: float = 1.0  # length of the B_simple measurement run; 0: none
    train_examples: Optional[int] = None  # first N training images; None: all
    seed: int = 0  # seed of the weights and the data order of every trial
    data_dir: Optional[str] = None  # the Fashion-MNIST files; None: the Keras cache

    def settings(self):
        """The fields that decide the results: what a resumed study must share (the data's
        location may change)."""
        settings = dataclasses.asdict(self)
        del settings["data_dir"]
        return settings

    def validate(self):
        """Checks every field alone; raises naming the field, the value and what is
        allowed. The batch sizes against the data: `check_batch_sizes`. Returns self."""
        if not isinstance(self.optimizers, (list, tuple)) or not self.optimizers:
            raise ValueError(
                f"optimizers must be a non-empty list of {list(OPTIMIZERS)}, "
                f"got {self.optimizers!r}"
            )
        for name in self.optimizers:
            _checks.check_choice("optimizers", name, OPTIMIZERS)
        if len(set(self.optimizers)) != len(self.optimizers):
            raise ValueError(f"optimizers must not repeat a name, got {self.optimizers!r}")
        if not isinstance(self.batch_sizes, (list, tuple)) or not self.batch_sizes:
            raise ValueError(
                f"batch_sizes must be a non-empty list of integers >= 1, got {self.batch_sizes!r}"
            )
        for batch_size in self.batch_sizes:
            _checks.check_integer("batch_sizes", batch_size, low=1)
        if list(self.batch_sizes) != sorted(set(self.batch_sizes)):
            raise ValueError(
                f"batch_sizes must be ascending without repeats, got {self.batch_sizes!r}"
            )
        if not isinstance(self.scaling_rules, dict):
            raise TypeError(
                "scaling_rules must be a mapping of optimizer names to scaling rules, "
                f"got {self.scaling_rules!r}"
            )
        for name, rule in self.scaling_rules.items():
            _checks.check_choice("scaling_rules", name, self.optimizers)
            _checks.check_choice(f"scaling_rules[{name!r}]", rule, RULES)
        _checks.check_integer("learning_rates_per_cell", self.learning_rates_per_cell, low=1)
        _checks.check_number(
            "learning_rate_ratio", self.learning_rate_ratio, low=1.0, low_open=True
        )
        _checks.check_integer("epochs", self.epochs, low=1)
        _checks.check_integer("evaluations_per_epoch", self.evaluations_per_epoch, low=1)
        _checks.check_number("target_accuracy", self.target_accuracy, low=0, high=1)
        _checks.check_number("warmup_fraction", self.warmup_fraction, low=0, high=1, high_open=True)
        _checks.check_number("weight_decay", self.weight_decay, low=0)
        _checks.check_number("divergence_loss", self.divergence_loss, low=0, low_open=True)
        _checks.check_number("noise_scale_epochs", self.noise_scale_epochs, low=0)
        _checks.check_optional_integer("train_examples", self.train_examples, low=1)
        _checks.check_integer("seed", self.seed, low=0)
        if self.data_dir is not None:
            _checks.check_string("data_dir", self.data_dir)
        return self

    def check_batch_sizes(self, num_train_examples):
        """Raises unless one step of every batch size fits in the ``num_train_examples``
        trained on (and two of the smallest, for the noise-scale measurement)."""
        largest = self.batch_sizes[-1]
        if largest > num_train_examples:
            raise ValueError(
                f"batch_sizes must be <= the {num_train_examples} training examples, got {largest}"
            )
        smallest = self.batch_sizes[0]
        if self.noise_scale_epochs and 2 * smallest > num_train_examples:
            raise ValueError(
                f"batch_sizes[0]={smallest} must be <= half the {num_train_examples} "
                "training examples: the noise scale is measured with two micro-batches "
                "per step (or set noise_scale_epochs=0)"
            )


PRESETS = {
    # The whole grid on a few CPU cores; large: more epochs, rates and batch sizes.
    "default": StudyConfig(),
    "large": StudyConfig(
        batch_sizes=[64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768],
        learning_rates_per_cell=5,
        learning_rate_ratio=4.0,
        epochs=4,
        target_accuracy=0.87,
    ),
    # The same files from a few hundred images, for tests.
    "tiny": StudyConfig(
        batch_sizes=[16, 64],
        learning_rates_per_cell=2,
        epochs=1,
        evaluations_per_epoch=2,
        target_accuracy=0.25,
        train_examples=256,
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
