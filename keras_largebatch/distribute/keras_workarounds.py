"""Two Keras 3 workarounds under `tf.distribute`: a multi-step train function that runs under
MirroredStrategy (`unroll_steps_per_execution`) and a MultiWorkerMirroredStrategy whose `reduce`
answers the calls `model.fit` makes (`KerasMultiWorkerMirroredStrategy`). Each says which Keras
issue it works around; remove it when Keras fixes that issue."""

from keras_largebatch import _extras

try:
    import tensorflow as tf
except ModuleNotFoundError as error:
    raise _extras.missing_extra(__name__, "tensorflow", error) from error


def unroll_steps_per_execution(model):
    """Makes ``model.fit`` run ``steps_per_execution`` steps per call under MirroredStrategy.

    Keras 3's multi-step train function wraps each step in a ``tf.cond`` inside a
    ``tf.while_loop``; under a `MirroredStrategy` with collective all-reduce (its default) or
    NCCL, and a `MultiWorkerMirroredStrategy`, the replica step inside that ``cond`` fails
    with ``InvalidArgumentError: You must feed a value for placeholder tensor
    '.../while/cond/Placeholder...'`` (keras-team/keras issue #19246), whatever the optimizer.
    This replaces ``model.train_function`` with one that runs the ``steps_per_execution``
    replica steps one after another, unrolled in one graph, and averages the logs over the
    replicas as Keras does (the metrics are already synchronized). The steps are the same
    ones Keras would run, so the weights equal those of single steps.

    Call it after ``model.compile`` (which resets the train function) and before
    ``model.fit``, in or out of the strategy's scope. It needs an input that does not end
    within an execution (a repeated dataset, or one of a whole number of executions), as
    the harness's are. Does nothing unless the model's strategy is a `MirroredStrategy` or
    `MultiWorkerMirroredStrategy` and ``steps_per_execution > 1``; Keras's own function
    works elsewhere (a TPUStrategy, the default strategy). Returns the model.
    """
    strategy = model.distribute_strategy
    steps = model.steps_per_execution
    mirrored = (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)
    if steps <= 1 or not isinstance(strategy, mirrored):
        return model

    @tf.function(reduce_retracing=True)
    def train_function(iterator):
        for _ in range(steps):
            logs = strategy.run(model.train_step, args=(next(iterator),))
        return tf.nest.map_structure(
            lambda value: strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None), logs
        )

    model.train_function = train_function
    return model


class KerasMultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    """MultiWorkerMirroredStrategy whose `reduce` accepts the calls Keras 3's `model.fit` makes.

    Without this, `model.fit` does not run under MultiWorkerMirroredStrategy at all
    (keras-team/keras issue #20585), because of three `reduce` calls:
    - the first batch, an `(x, y)` tuple, is reduced in one call, but the stock strategy
      reduces only a single value across workers ("Attempt to convert a value (PerReplica...)");
    - the per-step logs (scalar losses and metrics) are reduced with `axis=0`, which is out
      of range for a scalar;
    - a "sum" reduction passes no `axis` at all.
    Each is answered with its evident meaning: the structure is reduced leaf by leaf, a
    scalar has no axis to average within a replica so only the cross-replica reduction
    applies, and a missing `axis` is `None`. Other calls behave exactly as the stock ones.
    """

    def reduce(self, reduce_op, value, axis=None):
        reduce_one = super().reduce

        def reduce_leaf(leaf):
            local = self.experimental_local_results(leaf)[0]
            scalar = tf.TensorShape(getattr(local, "shape", ())).rank == 0
            return reduce_one(reduce_op, leaf, None if scalar else axis)

        return tf.nest.map_structure(reduce_leaf, value)
