"""Helpers for tests of training runs: read a checkpoint's arrays, interrupt a run."""

import h5py
import keras


def checkpoint_arrays(path):
    """Every array of a Keras weights file (model weights and optimizer state), by HDF5 path."""
    arrays = {}
    with h5py.File(path, "r") as file:
        file.visititems(
            lambda name, item: (
                arrays.__setitem__(name, item[()]) if isinstance(item, h5py.Dataset) else None
            )
        )
    return arrays


class Interrupt(Exception):
    """Raised by `InterruptAfter`, as a preemption would end a run."""


class InterruptAfter(keras.callbacks.Callback):
    """Raises `Interrupt` after ``batches`` training calls."""

    def __init__(self, batches):
        super().__init__()
        self.batches = batches
        self.seen = 0

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        if self.seen == self.batches:
            raise Interrupt(f"interrupted after {self.batches} training calls")
