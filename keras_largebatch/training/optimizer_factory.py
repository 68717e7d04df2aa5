"""One way every recipe makes its optimizer: ours (`LAMB`, `LARS`) or one of Keras's baselines
(`SGD`, `AdamW`, `Lamb`), with the same weight-decay exclusions.

Our optimizers take exclusion rules (`keras_largebatch.optimizers.ExclusionRule`: None for the
default rule, regular expressions searched in variable paths, or a callable). Keras's
`exclude_from_weight_decay(var_names=...)` matches only short variable names ("kernel",
"gamma"), so a path pattern such as "layer_norm" would match nothing there: the baselines get
the variables the rule excludes as an explicit list, so a comparison decays the same ones.

Keras's optimizers evaluate a learning-rate schedule at their micro-batch counter, so with
gradient accumulation a schedule would run ``gradient_accumulation_steps`` times too fast;
ours count optimizer steps. A baseline with a schedule and accumulation is refused here; a
recipe's config refuses it at load (`keras_largebatch.training.config.check_baseline_accumulation`).
"""

import inspect

import keras

from keras_largebatch._checks import check_choice
from keras_largebatch.optimizers import LAMB, LARS, ExclusionRule, _keras_internals
from keras_largebatch.optimizers.base import LayerwiseAdaptiveOptimizer

LAYERWISE_OPTIMIZERS = {"lamb": LAMB, "lars": LARS}
KERAS_BASELINES = {
    "sgd": keras.optimizers.SGD,
    "adamw": keras.optimizers.AdamW,
    "keras_lamb": keras.optimizers.Lamb,
}
OPTIMIZER_NAMES = tuple(LAYERWISE_OPTIMIZERS) + tuple(KERAS_BASELINES)


def create_optimizer(
    name,
    learning_rate,
    weight_decay=0.0,
    exclude_from_weight_decay=None,
    exclude_from_layer_adaptation=None,
    variables=None,
    gradient_accumulation_steps=1,
    record_trust_ratio=False,
    skip_non_finite_steps=True,
    **hyperparameters,
):
    """A fresh optimizer ``name`` (one of `OPTIMIZER_NAMES`).

    Args:
        name: "lamb" or "lars" (ours), or "sgd", "adamw", "keras_lamb" (Keras's).
        learning_rate: a float or a `keras.optimizers.schedules.LearningRateSchedule`.
        weight_decay: each optimizer's own decoupled decay; 0 decays nothing.
        exclude_from_weight_decay: the exclusion rule (`ExclusionRule`'s spec); for Keras's
            optimizers turned into the list of ``variables`` it excludes.
        exclude_from_layer_adaptation: our optimizers' trust-ratio exclusions; unused by
            Keras's, which have no trust ratio.
        variables: the model's trainable variables; needed by a Keras baseline whose rule
            excludes something (not by ``exclude_from_weight_decay=[]``).
        gradient_accumulation_steps: micro-batches per optimizer step (1: none).
        record_trust_ratio: our optimizers record their trust ratios
            (`keras_largebatch.TrustRatioMonitor` reads them); unused by Keras's.
        skip_non_finite_steps: our optimizers skip (and count) a step whose global gradient
            is not finite, where this version of them can; unused by Keras's.
        **hyperparameters: the optimizer's own arguments (``momentum``, ``nesterov``,
            ``beta_1``, ``beta_2``, ``epsilon``, ``trust_coefficient``, ``global_clipnorm``...).

    Raises:
        ValueError: an unknown name, a Keras baseline with a schedule and accumulation, or one
            whose exclusions need ``variables`` that were not given.
    """
    check_choice("optimizer", name, OPTIMIZER_NAMES)
    accumulation = gradient_accumulation_steps if gradient_accumulation_steps > 1 else None
    if name in LAYERWISE_OPTIMIZERS:
        optimizer_class = LAYERWISE_OPTIMIZERS[name]
        if "skip_non_finite_steps" in inspect.signature(optimizer_class).parameters:
            hyperparameters["skip_non_finite_steps"] = skip_non_finite_steps
        return optimizer_class(
            learning_rate=learning_rate,
            weight_decay=weight_decay,
            exclude_from_weight_decay=exclude_from_weight_decay,
            exclude_from_layer_adaptation=exclude_from_layer_adaptation,
            record_trust_ratio=record_trust_ratio,
            gradient_accumulation_steps=accumulation,
            **hyperparameters,
        )
    if accumulation and isinstance(learning_rate, keras.optimizers.schedules.LearningRateSchedule):
        raise ValueError(
            f"gradient_accumulation_steps={gradient_accumulation_steps} with a learning-rate "
            f"schedule needs one of {tuple(LAYERWISE_OPTIMIZERS)}, got optimizer {name!r}: "
            "Keras's optimizers advance their schedule per micro-batch"
        )
    optimizer = KERAS_BASELINES[name](
        learning_rate=learning_rate,
        weight_decay=weight_decay,
        gradient_accumulation_steps=accumulation,
        **hyperparameters,
    )
    if weight_decay:
        optimizer.exclude_from_weight_decay(
            var_list=excluded_variables(exclude_from_weight_decay, variables)
        )
    return optimizer


def excluded_variables(exclude_from_weight_decay, variables):
    """The ``variables`` that the exclusion rule ``exclude_from_weight_decay`` excludes."""
    if isinstance(exclude_from_weight_decay, (list, tuple)) and not exclude_from_weight_decay:
        return []
    if variables is None:
        raise ValueError(
            f"exclude_from_weight_decay={exclude_from_weight_decay!r} excludes variables by "
            "rule, so Keras's optimizers need them: pass variables=model.trainable_variables"
        )
    rule = ExclusionRule(exclude_from_weight_decay, "exclude_from_weight_decay")
    return [variable for variable in variables if rule.excludes(variable)]


def decays(optimizer, variable):
    """Whether ``optimizer`` (ours or one of `KERAS_BASELINES`) applies weight decay to
    ``variable``: ours answer `optimizer.decays`; Keras's decay it when their ``weight_decay``
    is set and `exclude_from_weight_decay` did not exclude it."""
    if isinstance(optimizer, LayerwiseAdaptiveOptimizer):
        return optimizer.decays(variable)
    return _keras_internals.keras_decays(optimizer, variable)


def adapts(optimizer, variable):
    """Whether ``optimizer`` scales ``variable``'s step by a trust ratio: ours answer
    `optimizer.adapts`; Keras's `Lamb` adapts every variable (it has no exclusion), its
    `SGD` and `AdamW` none."""
    if isinstance(optimizer, LayerwiseAdaptiveOptimizer):
        return optimizer.adapts(variable)
    return isinstance(optimizer, keras.optimizers.Lamb)
