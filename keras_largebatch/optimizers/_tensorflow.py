"""The TensorFlow-only half of the optimizer step, imported only on that backend.

`base.py` and the optimizers call these where TensorFlow needs something the other backends
do not: the cross-replica sum (`tf.distribute` hands each replica its own share of the
gradient), dense embedding gradients, updates that run once per device through the
strategy, the fused momentum kernel and the fused ``l2_loss`` norm. JAX's `DataParallel` and
a single device already produce the global-batch gradient, and there the plain `keras.ops`
code in the calling module is the whole step. The gradient noise scale measurement adds the
replica count and a scope to create its variables in.
"""

import keras
import tensorflow as tf
from keras import ops

from keras_largebatch.optimizers import _keras_internals


def multi_replica_context():
    """The replica context when each replica holds its own share of the gradient, else None.

    The gradients must then be summed over replicas before anything reads them.
    """
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return None
    return context


def densify(grads):
    """Embedding gradients arrive as `tf.IndexedSlices`, whose rows may repeat (a row per
    occurrence of a token). The second moment, the norms and the clip factor are functions of
    the summed rows, so they are computed on the dense gradient; squaring the slices instead
    (as Keras's Adam does) gets them wrong whenever a row repeats.
    """
    return [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]


def read_after(counter, grads):
    """The value of the micro-step ``counter``, read once ``grads`` exist.

    `fit` ends an epoch over data of unknown length (e.g. filtered TFRecords) by calling its
    train function on the exhausted iterator, whose `get_next` fails. Inside that
    `tf.function`, ops that do not depend on the batch could still run first: Keras's
    increment of this counter (one extra micro-step per epoch for LARS and for LAMB without
    bias correction, as for Keras's own SGD) and, on an update micro-step, the accumulator
    reset to zeros. Automatic control dependencies run the later increment after this read,
    and the accumulation `cond`s take their branch from it, so both now wait for the batch.
    """
    with tf.control_dependencies(grads):
        return counter.value.read_value()


def update_per_device(optimizer, fn, variables, columns, shared):
    """Run ``fn(variable, *[column[i] for column in columns], *shared)`` on every device.

    Goes through the strategy's ``extended.update`` (from a `merge_call` when in a replica
    context), which runs ``fn`` once per device on that device's copy of the variable with
    that device's values, as Keras's own TensorFlow optimizer does.
    """

    def update_on_devices(distribution, columns, shared):
        for i, variable in enumerate(variables):
            tf_variable = variable.value if isinstance(variable, keras.Variable) else variable
            args = tuple(column[i] for column in columns) + tuple(shared)
            distribution.extended.update(tf_variable, fn, args=args, group=False)

    tf.__internal__.distribute.interim.maybe_merge_call(
        update_on_devices,
        _keras_internals.distribution_strategy(optimizer),
        [list(c) for c in columns],
        tuple(shared),
    )


def momentum_step(variable, velocity, direction, step_size, momentum, nesterov):
    """``m = momentum * m - step_size * direction``; ``w += m`` (Nesterov:
    ``w += momentum * m - step_size * direction``), as the fused ``ResourceApplyKerasMomentum``
    kernel: one pass over w, m and the direction, also under XLA.
    """
    momentum_buffer = velocity.value if isinstance(velocity, keras.Variable) else velocity
    weights = variable.value if isinstance(variable, keras.Variable) else variable
    tf.raw_ops.ResourceApplyKerasMomentum(
        var=weights.handle,
        accum=momentum_buffer.handle,
        lr=step_size,
        grad=direction,
        momentum=ops.cast(momentum, variable.dtype),
        use_nesterov=nesterov,
    )


def l2_norm(x):
    """``sqrt(sum(x**2))`` of a float32 tensor through `tf.nn.l2_loss` (``sum(x**2) / 2`` in
    one fused kernel), faster than squaring and summing, with and without XLA.
    """
    return ops.sqrt(2.0 * tf.nn.l2_loss(x))


def squared_norm(tensors):
    """``sum_i |x_i|^2`` of float32 tensors: one fused ``l2_loss`` each and one sum, a few ops
    for the whole model (the measurement runs on CPU graphs where every op costs)."""
    return 2.0 * tf.add_n([tf.nn.l2_loss(x) for x in tensors])


def num_replicas(optimizer):
    """The replicas whose gradients ``optimizer`` sums: those of the strategy it was made in."""
    return _keras_internals.distribution_strategy(optimizer).num_replicas_in_sync


def variable_scope(optimizer):
    """The scope to create ``optimizer``'s variables in after `build` (e.g. from a callback):
    its strategy's, so that every replica holds a copy."""
    return _keras_internals.distribution_strategy(optimizer).scope()


def replica_local_accumulator(optimizer, reference_variable, name):
    """An accumulator each replica keeps to itself (``synchronization="on_read"``,
    ``aggregation="sum"``: read across replicas it is their sum), or None on one replica.

    Each replica adds its own micro-batch gradients to its copy with no communication; the
    copies are summed once, at the step that applies them (`sum_on_update_step`).
    """
    strategy = _keras_internals.distribution_strategy(optimizer)
    if strategy.num_replicas_in_sync == 1:
        return None
    with keras.name_scope(optimizer.name, caller=optimizer):
        variable = keras.Variable(
            initializer="zeros",
            shape=reference_variable.shape,
            dtype=reference_variable.dtype,
            trainable=False,
            aggregation="sum",
            synchronization="on_read",
            name=f"{reference_variable.path.replace('/', '_')}_{name}",
        )
    _keras_internals.track_variable(optimizer, variable)
    return variable


def sum_on_update_step(totals, is_update_step):
    """In a replica context: on an update step, the sum over replicas of each replica's
    ``totals`` (one batched reduction for all of them); on other steps, this replica's own
    ``totals``, with no communication.

    A `merge_call` holds the `cond`, so the reduction runs in the cross-replica context
    where `tf.distribute` allows collectives, and every replica takes the same branch (the
    step counter is replica 0's).
    """
    context = tf.distribute.get_replica_context()

    def merge(strategy, totals, is_update_step):
        flag = strategy.experimental_local_results(is_update_step)[0]
        # This worker's replicas (every worker of MultiWorkerMirroredStrategy has as many).
        replicas = len(strategy.experimental_local_results(totals[0]))

        def reduce():
            summed = strategy.extended.batch_reduce_to(
                tf.distribute.ReduceOp.SUM, [(t, t) for t in totals]
            )
            return [v for s in summed for v in strategy.experimental_local_results(s)]

        def keep():
            return [v for t in totals for v in strategy.experimental_local_results(t)]

        flat = tf.cond(flag, reduce, keep)
        return strategy.experimental_distribute_values_from_function(
            lambda replica: [
                flat[i * replicas + replica.replica_id_in_sync_group % replicas]
                for i in range(len(totals))
            ]
        )

    return context.merge_call(merge, args=(list(totals), is_update_step))
