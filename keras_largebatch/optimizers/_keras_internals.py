"""Every private member of Keras's optimizer that our optimizers use, in one place.

Keras does not promise these. `LayerwiseAdaptiveOptimizer` (`base.py`) overrides the methods
in `OVERRIDDEN`, calls those in `CALLED` and reads the attributes in `ATTRIBUTES`;
`tests/optimizers/test_keras_hooks.py` checks each against the installed Keras, so a release
that renames one fails there first instead of training on, wrong. The functions below are the
accessors the package uses, so a rename is fixed here once.
"""

# Methods base.py overrides: Keras calls ours in place of its own. Name -> parameters.
OVERRIDDEN = {
    "_backend_apply_gradients": ("self", "grads", "trainable_variables"),
    "_apply_weight_decay": ("self", "variables"),
    "_get_current_learning_rate": ("self",),
}
# Methods base.py (and the optimizer factory, for Keras's own optimizers) calls.
CALLED = {
    "_use_weight_decay": ("self", "variable"),
    "_get_variable_index": ("self", "variable"),
    "_clip_gradients": ("self", "grads"),
    "_update_model_variables_moving_average": ("self", "trainable_variables"),
    "_overwrite_model_variables_with_average_value": ("self", "trainable_variables"),
    "_track_variable": ("self", "variable"),
}
# Attributes read (`_distribution_strategy`: _tensorflow.py, on TensorFlow only).
ATTRIBUTES = (
    "_trainable_variables",
    "_accumulated_gradients",
    "_model_variables_moving_average",
    "_iterations",
    "_learning_rate",
    "_distribution_strategy",
)


def variable_index(optimizer, variable):
    """The position of ``variable`` in the optimizer's per-variable lists.

    Raises KeyError if the optimizer was not built with ``variable``.
    """
    return optimizer._get_variable_index(variable)


def keras_decays(optimizer, variable):
    """Whether one of Keras's own optimizers decays ``variable`` (its weight decay set and the
    variable not excluded by `exclude_from_weight_decay`)."""
    return bool(optimizer.weight_decay) and optimizer._use_weight_decay(variable)


def trainable_variables(optimizer):
    """The variables the optimizer was built with, in build order."""
    return optimizer._trainable_variables


def distribution_strategy(optimizer):
    """The `tf.distribute` strategy the optimizer was made in (TensorFlow only)."""
    return optimizer._distribution_strategy


def track_variable(optimizer, variable):
    """Makes ``variable``, created outside `add_variable`, one of the optimizer's variables (saved
    and restored with them)."""
    optimizer._track_variable(variable)
