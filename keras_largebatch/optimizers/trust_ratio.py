"""The layer-wise trust ratio shared by LAMB and LARS, and the variable-exclusion rules.

Both optimizers are "a base update, plus decoupled weight decay, scaled per variable by a
trust ratio". This module holds the parts they share:

* `trust_ratio`: ``coefficient * ||w|| / denominator`` with the zero-norm rule and optional
  bounds, in `keras.ops` so it runs on every backend;
* `ExclusionRule`: which variables are left out of weight decay or of layer adaptation,
  decided once per variable when the optimizer is built (free at step time).
"""

import math
import re

import keras
from keras import ops


def l2_norm(x):
    """Euclidean norm of all elements of ``x``, accumulated in float32.

    Accumulating in float32 keeps float16/bfloat16 variables from overflowing or losing the
    small terms of the sum. TensorFlow computes it with one fused kernel.
    """
    x = ops.cast(x, "float32")
    if keras.backend.backend() == "tensorflow":
        from keras_largebatch.optimizers import _tensorflow

        return _tensorflow.l2_norm(x)
    return ops.sqrt(ops.sum(ops.square(x)))


def trust_ratio(
    weight_norm,
    update_norm,
    *,
    trust_coefficient=1.0,
    denominator=None,
    min_trust_ratio=None,
    max_trust_ratio=None,
):
    """Layer-wise trust ratio ``coefficient * ||w|| / denominator``.

    ``denominator`` defaults to ``update_norm`` (LAMB: ``||w|| / ||u||``); LARS passes
    ``||g|| + wd * ||w|| + eps``. The ratio is exactly 1 when ``||w|| == 0`` (a freshly
    zero-initialised variable) or ``||update|| == 0`` (no signal), as in the paper and in
    every reference implementation; `min_trust_ratio` / `max_trust_ratio` clamp the ratio
    where it is defined (DeepSpeed's min/max coefficients, timm's ``trust_clip`` is
    ``max_trust_ratio=1``) and never touch that fallback of 1.

    Args:
        weight_norm: float32 scalar ``||w||``.
        update_norm: float32 scalar norm of the update direction; decides the zero rule.
        trust_coefficient: python float or scalar multiplying the ratio (LARS's eta).
        denominator: float32 scalar, or None to use ``update_norm``.
        min_trust_ratio: lower clamp, or None.
        max_trust_ratio: upper clamp, or None.

    Returns:
        float32 scalar.
    """
    if denominator is None:
        denominator = update_norm
    defined = ops.logical_and(ops.greater(weight_norm, 0.0), ops.greater(update_norm, 0.0))
    # Divide by 1 where the ratio is undefined so that no inf/NaN reaches `where`'s
    # gradient-free but still-evaluated branch.
    safe_denominator = ops.where(ops.greater(denominator, 0.0), denominator, 1.0)
    ratio = trust_coefficient * weight_norm / safe_denominator
    if min_trust_ratio is not None or max_trust_ratio is not None:
        lower = -math.inf if min_trust_ratio is None else min_trust_ratio
        upper = math.inf if max_trust_ratio is None else max_trust_ratio
        ratio = ops.clip(ratio, lower, upper)
    return ops.where(defined, ratio, 1.0)


@keras.saving.register_keras_serializable(package="keras_largebatch")
def biases_and_norms(variable):
    """True for biases and normalization scales and offsets: what the BERT and MLPerf
    references leave out of weight decay and layer adaptation.

    Pass it as ``exclude_from_weight_decay`` or ``exclude_from_layer_adaptation`` (it is
    registered, so it survives `get_config` and `model.save`).

    Rank-0 and rank-1 variables, and every variable named ``bias`` whatever its rank:
    keras-hub's attention layers (`EinsumDense`) hold their query/key/value biases as
    rank-2 ``(heads, head_dim)`` variables, which google-research/bert, NVIDIA's LAMB and
    TF Model Garden all exclude (they match "bias" in the name).
    """
    # A plain `tf.Variable` (Keras accepts them) has a name but no path.
    path = getattr(variable, "path", variable.name)
    return len(variable.shape) <= 1 or variable.name == "bias" or path.endswith("/bias")


class ExclusionRule:
    """Decides whether a variable is excluded from weight decay or layer adaptation.

    ``spec`` is one of:

    * ``None``: the argument's default, ``default``;
    * a list (or tuple) of regular expressions, searched (``re.search``) in the variable's
      full path, e.g. ``"layer_norm"`` matches
      ``transformer_layer_0/self_attention_layer_norm/gamma``. ``[]`` excludes nothing;
    * a callable taking the variable and returning True to exclude it, such as
      `biases_and_norms`. To survive `get_config` / `model.save`, register it with
      ``@keras.saving.register_keras_serializable()``.

    Args:
        spec: the rule, as above.
        argument: the constructor argument's name, used in error messages.
        default: the rule ``None`` stands for, a list or a callable: `biases_and_norms`
            unless given (LAMB and LARS pass ``()`` for ``exclude_from_layer_adaptation``).
    """

    def __init__(self, spec, argument, default=biases_and_norms):
        self.argument = argument
        self.spec = spec
        if spec is None:
            spec = default
        if callable(spec):
            self._match = spec
        elif isinstance(spec, (list, tuple)):
            patterns = []
            for pattern in spec:
                if not isinstance(pattern, str):
                    raise TypeError(
                        f"{argument} must hold regular-expression strings, got "
                        f"{pattern!r} of type {type(pattern).__name__}"
                    )
                try:
                    patterns.append(re.compile(pattern))
                except re.error as error:
                    raise ValueError(
                        f"{argument} holds an invalid regular expression {pattern!r}: {error}"
                    ) from None
            self._match = lambda variable: any(p.search(variable.path) for p in patterns)
        else:
            raise TypeError(
                f"{argument} must be None, a list of regular expressions or a callable, "
                f"got {spec!r} of type {type(spec).__name__}"
            )

    def excludes(self, variable):
        """True if ``variable`` is excluded."""
        return bool(self._match(variable))

    def get_config(self):
        """The JSON-friendly form stored in the optimizer's config."""
        if callable(self.spec):
            return keras.saving.serialize_keras_object(self.spec)
        return None if self.spec is None else list(self.spec)

    @staticmethod
    def spec_from_config(value):
        """Inverse of `get_config`: a pattern list, None, or a deserialized callable."""
        if isinstance(value, dict):
            return keras.saving.deserialize_keras_object(value)
        return value
