"""The four optimizers of the study and the space each one is searched over.

Every optimizer shares the ranges of ``1 - momentum`` (or ``1 - beta_1``) and of the warmup
fraction (`COMMON`); its learning-rate range spans three decades placed around the rates that
work for it on this network, and is the same at every batch size. Weight decay is 0 for all:
Keras's SGD and AdamW and our LAMB and LARS decay different variables in different forms, and
equal treatment is no decay.

- ``sgd_momentum``: Keras's `SGD`, Nesterov momentum on or off.
- ``adamw``: Keras's `AdamW` (weight decay 0: Adam), ``beta_2`` 0.99 or 0.999.
- ``lamb``: `keras_largebatch.LAMB`, ``beta_2`` 0.99 or 0.999; biases and other rank-1
  variables are excluded from layer adaptation (its default rule, as in BERT's LAMB).
- ``lars``: `keras_largebatch.LARS` with two choices. *Bias adaptation*: on, every variable
  takes the trust ratio (a zero-initialized bias takes the plain step until its norm is not
  0); off, the default rule excludes biases, which then take plain momentum steps at the
  global rate, as batch-norm networks' biases do in the MLPerf reference. *Trust coefficient*
  ``eta``: 0.001 (You, Gitman, Ginsburg, arXiv:1708.03888; MLPerf) or 0.02 (NVIDIA apex's
  LARC). An adapted variable's step is ``lr * eta * ||w||`` in norm, so the searched rate is
  the layer-wise rate ``lr * eta`` and the optimizer's global rate is that over ``eta``: the
  coefficient then sets how fast the excluded biases move against the kernels (1000x or 50x
  the layer-wise rate), the fault of a LARS set up for a batch-norm network when it is not one.
"""

from typing import NamedTuple

from keras_largebatch.study.search import Choice, Dimension

COMMON = (
    # Momentum or beta_1 from 0 to 0.999 (below 0 it is no momentum: a natural end).
    Dimension("one_minus_momentum", 0.001, 1.0, extend_high=False),
    Dimension("warmup_fraction", 0.0, 0.3, log=False, extend_low=False),
)


class OptimizerSpec(NamedTuple):
    """An optimizer of the study: its name in tables and plots, its learning-rate dimension,
    and its choices."""

    label: str
    learning_rate: Dimension
    choices: tuple

    @property
    def dimensions(self):
        """The continuous dimensions: learning rate, then `COMMON`."""
        return (self.learning_rate, *COMMON)


OPTIMIZERS = {
    "sgd_momentum": OptimizerSpec(
        "SGD-momentum",
        Dimension("learning_rate", 1e-3, 1.0),
        (Choice("nesterov", (False, True)),),
    ),
    "adamw": OptimizerSpec(
        "AdamW", Dimension("learning_rate", 1e-4, 1e-1), (Choice("beta_2", (0.99, 0.999)),)
    ),
    "lars": OptimizerSpec(
        "LARS",
        Dimension("layerwise_rate", 1e-4, 1e-1),
        (Choice("bias_adaptation", (False, True)), Choice("trust_coefficient", (0.001, 0.02))),
    ),
    "lamb": OptimizerSpec(
        "LAMB", Dimension("learning_rate", 1e-3, 1.0), (Choice("beta_2", (0.99, 0.999)),)
    ),
}

# The pairs the claim compares: a layer-wise optimizer and the generic one it is said to beat.
PAIRS = (("lamb", "adamw"), ("lars", "sgd_momentum"))


def peak_learning_rate(optimizer, settings):
    """The peak of the schedule handed to ``optimizer``: LARS's global rate is the
    layer-wise rate over the trust coefficient; the others' is their learning rate."""
    if optimizer == "lars":
        return settings["layerwise_rate"] / settings["trust_coefficient"]
    return settings["learning_rate"]
