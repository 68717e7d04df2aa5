"""The search space of the study: what a trial's settings are, and how a point of the unit
cube becomes them.

Every optimizer is searched over three continuous dimensions, the same ranges at every batch
size (Shallue et al., arXiv:1811.03600; Nado et al., arXiv:2102.06356), and one or two
choices of its own:

- its learning rate, log-uniform (LARS: the layer-wise rate, see
  `keras_largebatch.study.optimizers`);
- ``1 - momentum`` (SGD, LARS) or ``1 - beta_1`` (AdamW, LAMB), log-uniform;
- the warmup's share of the step budget, uniform.

A point is ``CONTINUOUS + CHOICES`` unit coordinates; a choice coordinate ``u`` picks
``values[floor(u * len(values))]``. Coordinates of the continuous dimensions may lie outside
``[0, 1)``: the extra trials beyond an edge of a range (`edges`, `extension_points`).
"""

import math
from typing import NamedTuple

CONTINUOUS = 3  # learning rate, 1 - momentum, warmup fraction
CHOICES = 2  # the most choices an optimizer has
DIMENSIONS = CONTINUOUS + CHOICES
EDGE = 1 / 8  # a best point this close to an end of a range is at its edge
EXTENSION = 1 / 4  # the extra trials go this far beyond the edge, as a share of the range


class Dimension(NamedTuple):
    """A continuous dimension: a value in ``[low, high]``, log-uniform or uniform in the unit
    coordinate; ``extend_low`` / ``extend_high`` False where the end is a natural bound that
    no trial may cross (a warmup of less than nothing)."""

    name: str
    low: float
    high: float
    log: bool = True
    extend_low: bool = True
    extend_high: bool = True

    def value(self, unit):
        """The value at unit coordinate ``unit`` (0: ``low``, 1: ``high``)."""
        if self.log:
            return self.low * (self.high / self.low) ** unit
        return self.low + (self.high - self.low) * unit


class Choice(NamedTuple):
    """A categorical dimension, its values equally likely."""

    name: str
    values: tuple

    def value(self, unit):
        """The value whose share of ``[0, 1)`` holds ``unit``."""
        return self.values[min(math.floor(unit * len(self.values)), len(self.values) - 1)]


def settings(dimensions, choices, point):
    """The settings (a dict: name -> value) at ``point`` of the space of ``dimensions`` (the
    `CONTINUOUS` `Dimension`s) and ``choices`` (at most `CHOICES` `Choice`s)."""
    values = {dimension.name: dimension.value(u) for dimension, u in zip(dimensions, point)}
    for choice, u in zip(choices, point[CONTINUOUS:]):
        values[choice.name] = choice.value(u)
    return values


def edges(dimensions, point):
    """``(dimension index, side)`` for each continuous coordinate of ``point`` within `EDGE`
    of an end of its range that may be extended; side -1 is the low end, +1 the high."""
    found = []
    for index, dimension in enumerate(dimensions):
        if point[index] < EDGE and dimension.extend_low:
            found.append((index, -1))
        elif point[index] > 1 - EDGE and dimension.extend_high:
            found.append((index, 1))
    return found


def extension_points(point, index, side, count):
    """``count`` copies of ``point`` whose coordinate ``index`` is moved beyond the ``side``
    end of its range, evenly out to `EXTENSION`: ``-EXTENSION * k / count`` (low) or
    ``1 + EXTENSION * k / count`` (high) for ``k = 1 .. count``."""
    moved = []
    for k in range(1, count + 1):
        offset = EXTENSION * k / count
        coordinates = list(point)
        coordinates[index] = -offset if side < 0 else 1 + offset
        moved.append(tuple(coordinates))
    return moved
