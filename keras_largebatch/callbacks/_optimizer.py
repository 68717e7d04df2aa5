"""What the callbacks read from a model's optimizer."""

import keras


def unwrap(optimizer):
    """The optimizer that does the update (inside a `LossScaleOptimizer`)."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return optimizer.inner_optimizer
    return optimizer


def current_learning_rate(optimizer):
    """The rate of the next step: for a schedule, ``schedule(optimizer.iterations)``."""
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))
