"""The optimizer's current learning rate in the logs."""

import keras

from keras_largebatch.callbacks._optimizer import current_learning_rate, unwrap


class LearningRateLogger(keras.callbacks.Callback):
    """Puts the optimizer's current learning rate into the logs.

    At the end of each epoch (and of each batch with `log_batches=True`),
    `logs["learning_rate"] = optimizer.learning_rate`: for a schedule that is
    `schedule(optimizer.iterations)`, the rate of the next step. `History`,
    `CSVLogger` and Keras's `TensorBoard` (as `epoch_learning_rate` and
    `batch_learning_rate`) then show it. Put this callback before them in
    the `callbacks` list, since callbacks see the logs in list order.

    Args:
        log_batches: also log per batch (once per execution when
            `steps_per_execution > 1`). Defaults to `False`.
    """

    def __init__(self, log_batches=False):
        super().__init__()
        self.log_batches = log_batches

    def _log(self, logs):
        if logs is not None:
            logs["learning_rate"] = current_learning_rate(unwrap(self.model.optimizer))

    def on_train_batch_end(self, batch, logs=None):
        if self.log_batches:
            self._log(logs)

    def on_epoch_end(self, epoch, logs=None):
        self._log(logs)
