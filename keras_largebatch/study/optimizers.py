"""The four optimizers of the study and the starting point of each one's learning-rate search.

Each starts from a rate set at `BASE_BATCH_SIZE` and scaled to the trial's batch size by its
rule (`keras_largebatch.scaling.scale_learning_rate`): linear for SGD with Nesterov momentum and
for LARS (Goyal et al., arXiv:1706.02677; You, Gitman, Ginsburg, arXiv:1708.03888), square root
for AdamW and LAMB (You et al., arXiv:1904.00962). The rule only centres the search: Shallue et
al. (arXiv:1811.03600) find that the best rate follows neither rule.
"""

from typing import NamedTuple

BASE_BATCH_SIZE = 256
MOMENTUM = 0.9


class OptimizerSpec(NamedTuple):
    """An optimizer of the study: its starting rate at `BASE_BATCH_SIZE` and scaling rule, and
    how `keras_largebatch.training.optimizer_factory` makes it."""

    base_learning_rate: float
    scaling_rule: str
    factory_name: str  # the optimizer factory's name of it
    hyperparameters: dict  # its own arguments beyond rate, decay and accumulation


OPTIMIZERS = {
    "sgd_nesterov": OptimizerSpec(0.1, "linear", "sgd", {"momentum": MOMENTUM, "nesterov": True}),
    "adamw": OptimizerSpec(8e-3, "sqrt", "adamw", {}),
    "lars": OptimizerSpec(4.0, "linear", "lars", {"momentum": MOMENTUM}),
    "lamb": OptimizerSpec(2e-2, "sqrt", "lamb", {}),
}
