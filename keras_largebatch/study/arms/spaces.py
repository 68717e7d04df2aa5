"""The optimizers of the second edition's arms and the space each is searched over.

Each arm pairs a layer-wise optimizer with the generic one said to match it, as the claims
were made (You, Gitman, Ginsburg, arXiv:1708.03888; You et al., arXiv:1904.00962; Nado et
al., arXiv:2102.06356):

- arm A (``resnet_lars``): `keras_largebatch.LARS` with the MLPerf ResNet-50 reference's choices
  (trust coefficient 0.001, batch-norm parameters and biases left out of the trust ratio and
  of weight decay) against Keras's `SGD` with Nesterov momentum;
- arm B (``bert_lamb``): `keras_largebatch.LAMB` against Keras's `AdamW`, both decaying every
  weight but LayerNorm parameters and biases, as google-research/bert does.

Weight decay is each published recipe's value, the same for both optimizers of an arm, each
in its optimizer's own form (LARS adds it to the gradient before the trust ratio, LAMB to the
update, Keras's `SGD` and `AdamW` subtract ``lr * wd * w``).

The learning-rate range of a cell is centred by the optimizer's scaling rule: at batch ``B``
the centre is ``reference_rate * (B / reference_batch) ** exponent`` (1: Goyal et al.'s linear
rule, arXiv:1706.02677; 1/2: the square-root rule LAMB's paper uses) and the range spans
`RATE_DECADES` decades around it, log-uniform. ``1 - momentum`` (``1 - beta_1``) and the
warmup's length in steps (log-uniform from 1 to `ArmConfig.max_warmup_steps`) are searched
over the same ranges at every batch size: a warmup of
a fixed number of steps is what LEGW's rule (You et al., arXiv:1901.08256) keeps constant
as the batch grows. After the warmup the rate stays constant, so the steps to a target do
not depend on a budget's end.
"""

from typing import NamedTuple

from keras_largebatch.study.search import Choice, Dimension

RATE_DECADES = 3.0  # the width of every learning-rate range, centred by the scaling rule

MOMENTUM = Dimension("one_minus_momentum", 0.01, 0.3, extend_high=False)


class OptimizerSpec(NamedTuple):
    """One optimizer of an arm: how it is named, how its rate range moves with the batch,
    and its choices."""

    label: str
    factory_name: str  # the name `training.optimizer_factory.create_optimizer` takes
    reference_rate: float  # the range's centre at reference_batch
    reference_batch: int
    exponent: float  # of the scaling rule
    choices: tuple
    fixed: dict  # arguments of the optimizer that are not searched

    def rate_dimension(self, batch_size):
        """The learning-rate `Dimension` at ``batch_size``."""
        centre = self.reference_rate * (batch_size / self.reference_batch) ** self.exponent
        half = 10 ** (RATE_DECADES / 2)
        return Dimension("learning_rate", centre / half, centre * half)

    def dimensions(self, batch_size, max_warmup_steps):
        """The continuous dimensions at ``batch_size``: learning rate, `MOMENTUM`, and the
        warmup's steps, log-uniform from 1 to ``max_warmup_steps``."""
        warmup = Dimension("warmup_steps", 1.0, float(max_warmup_steps), extend_low=False)
        return (self.rate_dimension(batch_size), MOMENTUM, warmup)


# The centres are the published recipes' rates moved to the reference batch by each rule:
# MLPerf's LARS at 32,768 (peak rate 21.2) by the square-root rule; BERT's AdamW at 256 (1e-4)
# and LAMB at 32,768 (5e-3) raised tenfold for a network 100x smaller (a small BERT takes
# larger rates); Nesterov at 0.1 per 256 images (Goyal et al.). The pilot's search shows
# whether a range sits where the small networks want it.
OPTIMIZERS = {
    "nesterov": OptimizerSpec("Nesterov", "sgd", 0.1, 256, 1.0, (), dict(nesterov=True)),
    "lars": OptimizerSpec(
        "LARS", "lars", 21.2 * (256 / 32768) ** 0.5, 256, 0.5, (), dict(trust_coefficient=0.001)
    ),
    "adamw": OptimizerSpec(
        "AdamW", "adamw", 10 * 1e-4, 256, 0.5, (Choice("beta_2", (0.98, 0.999)),), {}
    ),
    "lamb": OptimizerSpec(
        "LAMB",
        "lamb",
        10 * 5e-3 * (256 / 32768) ** 0.5,
        256,
        0.5,
        (Choice("beta_2", (0.98, 0.999)),),
        {},
    ),
}
