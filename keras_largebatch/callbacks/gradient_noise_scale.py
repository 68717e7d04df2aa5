"""The gradient noise scale as a training callback: how large a batch still pays."""

import keras

from keras_largebatch._checks import check_bool, check_integer, check_number
from keras_largebatch.callbacks._optimizer import unwrap
from keras_largebatch.optimizers.base import LayerwiseAdaptiveOptimizer


class GradientNoiseScale(keras.callbacks.Callback):
    """Puts the simple gradient noise scale ``B_simple`` (in examples) into the logs.

    McCandlish et al., "An Empirical Model of Large-Batch Training" (arXiv:1812.06162):

    ```
    B_simple = tr(Sigma) / |G|^2
    ```

    with ``G`` the gradient of the mean loss over the data and ``Sigma`` the covariance of the
    per-example gradients. Batches well below ``B_simple`` are dominated by gradient noise
    (doubling the batch about halves the steps); beyond it the extra examples add little.

    `LAMB` and `LARS` measure it at no extra forward or backward pass, from two gradients each
    step already has (their Appendix A): the gradient of a small batch, of ``B_small``
    examples, and of a big one, of ``B_big``. With squared norms ``S`` (small, averaged over
    the small batches of the step) and ``L`` (big),

    ```
    |G|^2     ~ (B_big * L - B_small * S) / (B_big - B_small)
    tr(Sigma) ~ (S - L) / (1 / B_small - 1 / B_big)
    B_simple  = EMA[tr(Sigma)] / EMA[|G|^2]
    ```

    - Under a `tf.distribute` strategy with 2 or more replicas: the small batch is one
      replica's share, ``batch_size / replicas``, the big one the global batch.
    - With ``gradient_accumulation_steps = k >= 2`` (any backend, JAX's `DataParallel`
      included): the small batch is a micro-batch, the big one the ``k`` micro-batches of an
      update, ``batch_size * k``. With both, the small batch is one replica's share of a
      micro-batch.

    The estimates assume the loss is the mean over the examples (Keras's default
    ``"sum_over_batch_size"`` reduction) and every batch is full (batch a dataset with
    ``drop_remainder=True``); the gradients are taken before clipping. The logs get
    ``gradient_noise_scale`` at the end of each epoch (and of each batch with
    ``log_batches=True``, which reads two optimizer variables per batch), so `History`,
    `CSVLogger` and `TensorBoard` show it: put this callback before them in the list. It is
    NaN until the first optimizer step.

    The measurement is off in an optimizer until this callback switches it on at the start
    of training (the train step is traced again once); it stays on for later `fit` calls.
    Its averages are optimizer variables that `LAMB`'s and `LARS`'s checkpoints leave out, so
    they start again after a restore. Inside Keras's `LossScaleOptimizer` (mixed float16),
    which saves its inner optimizer's variables itself, they are saved: such a checkpoint
    written while measuring restores only into an optimizer that measures (Keras warns and
    skips the optimizer's state otherwise).

    Args:
        batch_size: int, the examples of one train step over all replicas: the
            ``batch_size`` given to `fit`, or the batch of the dataset (a micro-batch under
            gradient accumulation). Must be a multiple of the number of replicas.
        ema_decay: in [0, 1), the decay of both averages; about ``2 / (1 - ema_decay)``
            steps contribute. Defaults to ``0.99``.
        log_batches: also log per batch (once per execution when
            ``steps_per_execution > 1``). Defaults to ``False``.

    Raises:
        ValueError: at the start of training, if the optimizer is not `LAMB` or `LARS` (a
            `LossScaleOptimizer` is unwrapped), or there is one replica and no gradient
            accumulation, so only one batch size.

    Example:

    ```python
    with tf.distribute.MirroredStrategy().scope():
        model.compile(optimizer=keras_largebatch.LAMB(1e-3), loss="mse")
    model.fit(x, y, batch_size=256, callbacks=[keras_largebatch.GradientNoiseScale(256)])
    ```
    """

    def __init__(self, batch_size, ema_decay=0.99, log_batches=False):
        super().__init__()
        self.batch_size = check_integer("batch_size", batch_size, low=1)
        self.ema_decay = check_number("ema_decay", ema_decay, low=0.0, high=1.0, high_open=True)
        self.log_batches = check_bool("log_batches", log_batches)

    def on_train_begin(self, logs=None):
        optimizer = unwrap(self.model.optimizer)
        if not isinstance(optimizer, LayerwiseAdaptiveOptimizer):
            raise ValueError(
                "GradientNoiseScale needs keras_largebatch's LAMB or LARS, which measure the "
                f"squared gradient norms; got {type(optimizer).__name__}"
            )
        if optimizer.measure_gradient_noise_scale(self.batch_size, self.ema_decay):
            # `fit` traced its train step before this hook, without the measurement.
            self.model.make_train_function(force=True)

    def _log(self, logs):
        if logs is not None:
            logs["gradient_noise_scale"] = unwrap(self.model.optimizer).gradient_noise_scale()

    def on_train_batch_end(self, batch, logs=None):
        if self.log_batches:
            self._log(logs)

    def on_epoch_end(self, epoch, logs=None):
        self._log(logs)
