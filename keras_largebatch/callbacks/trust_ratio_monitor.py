"""Statistics of the per-layer trust ratios in the logs and, optionally, TensorBoard."""

import keras
import numpy as np

from keras_largebatch._checks import check_integer
from keras_largebatch.callbacks._optimizer import unwrap

# The statistics of the ratios in the logs and the TensorBoard scalars.
_STATISTICS = ("min", "median", "max")


class TrustRatioMonitor(keras.callbacks.Callback):
    """Logs statistics of the per-layer trust ratios at the end of each epoch.

    Reads `optimizer.trust_ratios()` (a `LAMB` or `LARS` constructed with
    `record_trust_ratio=True`; a `LossScaleOptimizer` is unwrapped): the
    ratio each variable got at the last step of the epoch. Variables excluded
    from layer adaptation report 1.0 and count in the statistics. Adds to the epoch
    logs, so `History` and Keras's `TensorBoard` show them:

    - `trust_ratio_min`, `trust_ratio_median`, `trust_ratio_max`.

    and appends to `self.records` a dict per epoch with those statistics plus
    `smallest` and `largest`: the `num_extremes` `(variable path, ratio)`
    pairs with the smallest and largest ratios. The layer names are kept out
    of the logs because every Keras logger (`TensorBoard`, the progress bar)
    treats each log value as a number.

    With `log_dir`, also writes a TensorBoard event file there (step =
    epoch): scalars `trust_ratio/min`, `trust_ratio/median`,
    `trust_ratio/max`; the histogram `trust_ratio/all` of every variable's
    ratio; and text `trust_ratio/smallest`, `trust_ratio/largest` listing the
    extreme layers. Pass the `train` subfolder of Keras's `TensorBoard`
    `log_dir` to see them in the same run. The events are written with
    `tf.summary.write`, so the `tensorboard` package is needed only to view
    them.

    Args:
        log_dir: folder for the TensorBoard event file, or `None` (default).
        num_extremes: `> 0`, how many smallest and largest layers to keep.
            Defaults to `3`.
        histogram_buckets: `> 0`, buckets of the histogram. Defaults to `30`.

    Raises:
        ValueError: at the start of training, if the optimizer does not
            record trust ratios.
    """

    def __init__(self, log_dir=None, num_extremes=3, histogram_buckets=30):
        super().__init__()
        check_integer("num_extremes", num_extremes, low=1)
        check_integer("histogram_buckets", histogram_buckets, low=1)
        self.log_dir = log_dir
        self.num_extremes = num_extremes
        self.histogram_buckets = histogram_buckets
        self.records = []
        self._writer = None

    def on_train_begin(self, logs=None):
        optimizer = unwrap(self.model.optimizer)
        if not (
            callable(getattr(optimizer, "trust_ratios", None))
            and getattr(optimizer, "record_trust_ratio", False)
        ):
            raise ValueError(
                "TrustRatioMonitor needs an optimizer that records its trust "
                f"ratios; {type(optimizer).__name__} does not. Construct the "
                "optimizer with record_trust_ratio=True (keras_largebatch."
                "optimizers.LAMB or LARS)"
            )
        if self.log_dir is not None and self._writer is None:
            # TensorFlow is imported only to write event files, so that this
            # module loads quickly on the JAX and PyTorch backends.
            from keras_largebatch._tensorboard import SummaryWriter

            self._writer = SummaryWriter(self.log_dir)

    def on_epoch_end(self, epoch, logs=None):
        ratios = unwrap(self.model.optimizer).trust_ratios()
        if not ratios:
            # An epoch of zero steps never builds the optimizer: nothing to report yet.
            return
        by_ratio = sorted(ratios.items(), key=lambda item: item[1])
        values = np.array([ratio for _, ratio in by_ratio], dtype=np.float64)
        record = {
            "epoch": epoch,
            "min": float(values[0]),
            "median": float(np.median(values)),
            "max": float(values[-1]),
            "smallest": by_ratio[: self.num_extremes],
            "largest": by_ratio[::-1][: self.num_extremes],
        }
        self.records.append(record)
        if logs is not None:
            for statistic in _STATISTICS:
                logs[f"trust_ratio_{statistic}"] = record[statistic]
        if self._writer is not None:
            self._write_summaries(epoch, record, values)

    def _write_summaries(self, epoch, record, values):
        self._writer.write_scalars(
            epoch, {f"trust_ratio/{statistic}": record[statistic] for statistic in _STATISTICS}
        )
        self._writer.write_histogram(epoch, "trust_ratio/all", values, self.histogram_buckets)
        self._writer.write_texts(
            epoch,
            {
                f"trust_ratio/{extreme}": "\n\n".join(
                    f"`{path}`: {ratio:.6g}" for path, ratio in record[extreme]
                )
                for extreme in ("smallest", "largest")
            },
        )

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None
