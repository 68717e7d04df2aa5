"""TensorBoard event files written with `tf.summary.write` and each plugin's metadata.

TensorBoard shows a summary in the plugin (dashboard) its metadata names: ``scalars``,
``histograms``, ``text``. `tf.summary.scalar` and its siblings set that metadata but come from
the `tensorboard` package; `tf.summary.write` with the metadata set here needs TensorFlow only,
so the `tensorboard` package is needed only to view the files.
"""

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import summary_pb2


class SummaryWriter:
    """Writes scalars, histograms and text at a step into an event file in ``log_dir``.

    Each ``write_*`` call flushes, so TensorBoard (and a test reading the file) sees the
    values at once.
    """

    def __init__(self, log_dir):
        tf.io.gfile.makedirs(log_dir)
        self._writer = tf.summary.create_file_writer(log_dir)

    def write_scalars(self, step, scalars):
        """``scalars``: ``{tag: number}``, each written as a float32 scalar."""
        self._write(
            "scalars", step, {tag: tf.constant(value, tf.float32) for tag, value in scalars.items()}
        )

    def write_histogram(self, step, tag, values, buckets):
        """The histogram of ``values`` (an array) in ``buckets`` equal-width buckets."""
        counts, edges = np.histogram(values, bins=buckets)
        # The histograms plugin's format: one row per bucket, [left edge, right edge, count].
        rows = np.stack([edges[:-1], edges[1:], counts], axis=1)
        self._write("histograms", step, {tag: tf.constant(rows, tf.float64)})

    def write_texts(self, step, texts):
        """``texts``: ``{tag: string}``, each shown as Markdown."""
        self._write("text", step, {tag: tf.constant(text) for tag, text in texts.items()})

    def _write(self, plugin_name, step, tensors):
        metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=plugin_name)
        )
        with self._writer.as_default():
            for tag, tensor in tensors.items():
                tf.summary.write(tag, tensor, step=step, metadata=metadata)
        self._writer.flush()

    def close(self):
        self._writer.close()
