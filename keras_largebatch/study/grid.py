"""The trials of a study: a log grid of learning rates per (optimizer, batch size).

Every optimizer gets the same number of rates at every batch size, the equal tuning budget of
Nado et al. (arXiv:2102.06356). The grid is centred on the optimizer's rate scaled to the
batch size (`keras_largebatch.scaling.scale_learning_rate`): with ``k`` rates, ratio ``r``
between neighbours and ``lr_0`` the scaled start,

```
lr_i = lr_0 * r^(i - (k - 1) / 2),    i = 0 .. k - 1
```
"""

from typing import NamedTuple

from keras_largebatch.scaling import scale_learning_rate
from keras_largebatch.study.optimizers import BASE_BATCH_SIZE, OPTIMIZERS


class Trial(NamedTuple):
    """One training run of the study."""

    optimizer: str
    batch_size: int
    learning_rate_index: int  # position in the cell's grid, 0 = the smallest rate
    learning_rate: float
    scaling_rule: str = "sqrt"  # the rule that centred the cell's grid

    def key(self):
        """What identifies the trial in the ledger."""
        return (self.optimizer, self.batch_size, self.learning_rate_index)


def learning_rate_grid(start, count, ratio):
    """``count`` rates spaced by ``ratio``, centred (geometrically) on ``start``."""
    return [start * ratio ** (index - (count - 1) / 2) for index in range(count)]


def starting_learning_rate(optimizer, batch_size, rule=None):
    """The centre of ``optimizer``'s grid at ``batch_size``: its base rate scaled by ``rule``
    (None: the optimizer's own rule)."""
    spec = OPTIMIZERS[optimizer]
    return scale_learning_rate(
        spec.base_learning_rate, BASE_BATCH_SIZE, batch_size, rule=rule or spec.scaling_rule
    )


def scaling_rule(config, optimizer):
    """The rule that centres ``optimizer``'s grids in ``config``: ``config.scaling_rules`` where
    it names the optimizer, else the optimizer's own."""
    return config.scaling_rules.get(optimizer, OPTIMIZERS[optimizer].scaling_rule)


def trials(config):
    """Every trial of ``config`` (a `StudyConfig`), batch size by batch size, so that a
    partial study covers the small batches of every optimizer first."""
    return [
        Trial(optimizer, batch_size, index, learning_rate, scaling_rule(config, optimizer))
        for batch_size in config.batch_sizes
        for optimizer in config.optimizers
        for index, learning_rate in enumerate(
            learning_rate_grid(
                starting_learning_rate(optimizer, batch_size, rule=scaling_rule(config, optimizer)),
                config.learning_rates_per_cell,
                config.learning_rate_ratio,
            )
        )
    ]
