"""Evaluation that counts every example once, in batches of one static shape.

A recipe that evaluates in fixed-size batches (static shapes for XLA and TPUs, equal shares for
the replicas) would drop the last partial batch with ``drop_remainder=True``: 50,000 images at
batch 1,024 would evaluate 49,152. `pad_to_batches` pads that batch instead with examples of
weight 0, and `evaluate_weighted` weighs every metric (the loss too, as a weighted mean) by the
examples' weights, so the padding changes no figure and the evaluation reports how many
examples it saw.
"""

import keras
import numpy as np
import tensorflow as tf

# The key of `evaluate_weighted`'s result that counts the examples evaluated.
EXAMPLES = "examples"


def pad_to_batches(examples, batch_size):
    """``(features, labels)`` batches of ``batch_size`` with a third element, the weights: 1
    for each example of the ``examples`` dataset (unbatched ``(features, label)`` pairs), 0 for
    the all-zero examples that fill the last batch; a set that ``batch_size`` divides gets no
    padding."""
    padding = tf.nest.map_structure(
        lambda spec: tf.zeros(spec.shape, spec.dtype), examples.element_spec
    )
    weighted = examples.map(lambda features, label: (features, label, tf.constant(1.0)))
    filler = tf.data.Dataset.from_tensors((*padding, tf.constant(0.0))).repeat(batch_size - 1)
    # N examples and batch_size - 1 fillers make ceil(N / batch_size) whole batches.
    return weighted.concatenate(filler).batch(batch_size, drop_remainder=True)


def evaluate_weighted(model, batches, metrics):
    """Updates each of ``metrics`` (fresh Keras metrics taking ``(labels, predictions,
    sample_weight)``: a `keras.metrics.CategoricalCrossentropy` named "loss" for the loss) with
    the model's predictions on ``batches`` (``(features, labels, weights)``, as
    `pad_to_batches` makes them), weighted; returns ``{metric name: result}`` and
    ``{EXAMPLES: the sum of the weights}``.

    The predictions come from `keras.Model.predict`, which splits each batch over the
    replicas of the model's distribution, or in a JAX run of several processes from
    `_predictions_over_processes`; labels and weights are read in a second pass."""
    features = batches.map(lambda features, labels, weights: features)
    if keras.backend.backend() == "jax" and _process_count() > 1:
        predictions = np.concatenate(
            [_predictions_over_processes(model, batch.numpy()) for batch in features]
        )
    else:
        predictions = model.predict(features, verbose=0)
    labels, weights = (
        np.concatenate(parts)
        for parts in zip(
            *(
                (labels.numpy(), weights.numpy())
                for labels, weights in batches.map(
                    lambda features, labels, weights: (labels, weights)
                )
            )
        )
    )
    for metric in metrics:
        metric.update_state(labels, predictions, sample_weight=weights)
    results = {
        metric.name: float(keras.ops.convert_to_numpy(metric.result())) for metric in metrics
    }
    results[EXAMPLES] = int(weights.sum())
    return results


def _process_count():
    import jax

    return jax.process_count()


def _predictions_over_processes(model, batch):
    """The model's predictions on ``batch`` (the same whole batch in every process) in a JAX
    run of several processes: each process hands its slice of the batch to the distribution's
    global batch, the forward pass runs once over every process's devices, and every process
    gathers all the predictions. (`keras.Model.predict` cannot read back outputs that span
    other processes' devices.)"""
    import jax
    from jax.experimental import multihost_utils

    distribution = keras.distribution.distribution()
    share = len(batch) // jax.process_count()
    local = batch[jax.process_index() * share : (jax.process_index() + 1) * share]
    layout = distribution.get_data_layout(batch.shape)
    inputs = jax.make_array_from_process_local_data(layout.backend_layout, local, batch.shape)
    outputs, _ = model.stateless_call(
        [variable.value for variable in model.trainable_variables],
        [variable.value for variable in model.non_trainable_variables],
        inputs,
        training=False,
    )
    return np.asarray(multihost_utils.process_allgather(outputs, tiled=True))
