"""Scaling rules: the learning rate and warmup for a new global batch size.

With ``k = batch_size / base_batch_size``:

* square-root rule, ``lr * sqrt(k)``: You et al., "Large Batch Optimization for Deep
  Learning: Training BERT in 76 minutes" (LAMB), ICLR 2020, arXiv:1904.00962;
* linear rule, ``lr * k``: Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet
  in 1 Hour", arXiv:1706.02677;
* LEGW, ``lr * sqrt(k)`` and warmup epochs ``* k``: You et al., "Large-Batch Training for
  LSTM and Beyond", SC 2019, arXiv:1901.08256.
"""

import math
from typing import NamedTuple

from keras_largebatch._checks import check_choice, check_number

RULES = ("sqrt", "linear")


def scale_learning_rate(base_learning_rate, base_batch_size, batch_size, rule="sqrt"):
    """The learning rate for `batch_size`, scaled from `base_batch_size`.

    With `k = batch_size / base_batch_size`:

    ```
    rule="sqrt":    lr = base_learning_rate * sqrt(k)    (LAMB, You et al.)
    rule="linear":  lr = base_learning_rate * k          (Goyal et al.)
    ```

    Args:
        base_learning_rate: `> 0`, the rate tuned at `base_batch_size`.
        base_batch_size: `> 0`.
        batch_size: `> 0`, the new global batch size.
        rule: `"sqrt"` (default) or `"linear"`.

    Returns:
        The scaled learning rate, a float.
    """
    check_number("base_learning_rate", base_learning_rate, low=0, low_open=True)
    check_number("base_batch_size", base_batch_size, low=0, low_open=True)
    check_number("batch_size", batch_size, low=0, low_open=True)
    check_choice("rule", rule, RULES)
    ratio = batch_size / base_batch_size
    if rule == "sqrt":
        return base_learning_rate * math.sqrt(ratio)
    return base_learning_rate * ratio


class LegwScaled(NamedTuple):
    """The result of `legw_scale`."""

    learning_rate: float
    warmup_epochs: float


def legw_scale(base_learning_rate, base_warmup_epochs, base_batch_size, batch_size):
    """Linear-epoch gradual warmup (LEGW): scaled rate and warmup length.

    With `k = batch_size / base_batch_size` (You et al., SC 2019):

    ```
    learning_rate = base_learning_rate * sqrt(k)
    warmup_epochs = base_warmup_epochs * k
    ```

    The warmup measured in steps, `warmup_epochs * dataset_size /
    batch_size`, therefore stays the same at every batch size.

    Args:
        base_learning_rate: `> 0`, the rate tuned at `base_batch_size`.
        base_warmup_epochs: `>= 0`, the warmup tuned at `base_batch_size`.
        base_batch_size: `> 0`.
        batch_size: `> 0`, the new global batch size.

    Returns:
        `LegwScaled(learning_rate, warmup_epochs)`.
    """
    check_number("base_warmup_epochs", base_warmup_epochs, low=0)
    learning_rate = scale_learning_rate(
        base_learning_rate, base_batch_size, batch_size, rule="sqrt"
    )
    return LegwScaled(
        learning_rate=learning_rate,
        warmup_epochs=base_warmup_epochs * batch_size / base_batch_size,
    )
