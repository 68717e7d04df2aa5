"""The four optimizers of the study and the starting point of each one's learning-rate search.

Each starts from a rate set at `BASE_BATCH_SIZE` and scaled to the trial's batch size by its
rule (`keras_largebatch.scaling.scale_learning_rate`): linear for SGD with Nesterov momentum and
for LARS (Goyal et al., arXiv:1706.02677; You, Gitman, Ginsburg, arXiv:1708.03888), square root
for AdamW and LAMB (You et al., arXiv:1904.00962). The rule only centres the search: Shallue et
al. (arXiv:1811.03600) find that the best rate follows neither rule.
"""

from typing import NamedTuple

import keras

from keras_largebatch.optimizers import LAMB, LARS

BASE_BATCH_SIZE = 256
MOMENTUM = 0.9


class OptimizerSpec(NamedTuple):
    """An optimizer of the study: its starting rate at `BASE_BATCH_SIZE` and scaling rule."""

    base_learning_rate: float
    scaling_rule: str


OPTIMIZERS = {
    "sgd_nesterov": OptimizerSpec(base_learning_rate=0.1, scaling_rule="linear"),
    "adamw": OptimizerSpec(base_learning_rate=8e-3, scaling_rule="sqrt"),
    "lars": OptimizerSpec(base_learning_rate=4.0, scaling_rule="linear"),
    "lamb": OptimizerSpec(base_learning_rate=2e-2, scaling_rule="sqrt"),
}


def build_optimizer(name, learning_rate, weight_decay, gradient_accumulation_steps=None):
    """The optimizer ``name`` (a key of `OPTIMIZERS`) with ``learning_rate`` (a float or a
    schedule). ``weight_decay`` goes to each optimizer's own decay: decoupled in Keras's SGD and
    AdamW and in LAMB, added to the gradient in LARS."""
    common = dict(
        learning_rate=learning_rate,
        weight_decay=weight_decay,
        gradient_accumulation_steps=gradient_accumulation_steps,
    )
    if name == "sgd_nesterov":
        return keras.optimizers.SGD(momentum=MOMENTUM, nesterov=True, **common)
    if name == "adamw":
        return keras.optimizers.AdamW(**common)
    if name == "lars":
        return LARS(momentum=MOMENTUM, **common)
    if name == "lamb":
        return LAMB(**common)
    raise ValueError(f"optimizer must be one of {list(OPTIMIZERS)}, got {name!r}")
