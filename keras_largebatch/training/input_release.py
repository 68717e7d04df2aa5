"""Releasing the input of a `fit` that ended early: stopped by a callback, or raising.

Keras's `fit` walks its input with an epoch iterator whose batches come from a suspended
generator that refers back to the epoch iterator: when a callback sets ``stop_training`` in
the middle of an epoch, or when an error (an interrupt, a callback's exception) leaves `fit`,
the loop ends with the generator suspended, and that reference cycle keeps the input iterator
(a `tf.data` iterator with its prefetching threads, or the JAX backend's) alive until a full
garbage collection. That collection, whenever it comes, then waits in the iterator's
destructor for its threads; with `tf.data`'s autotuning on, one of them is the autotuning
model's, whose sleeps between optimizations lengthen as the iterator ages, so an iterator left
for minutes can hold the collection for tens of seconds. `ReleaseInputOnStop` resets the epoch
iterator as `fit` ends, which drops the generator and the input iterator while it is young;
`fit_releasing_input` runs a `fit` with it, whether a callback stops the `fit` or an error ends it.
"""

import sys

import keras

# Keras's name for the epoch iterator in its backends' `fit` (an `EpochIterator`), which each
# backend makes before it calls the callbacks' `on_train_begin`.
_FIT_EPOCH_ITERATOR = "epoch_iterator"


class ReleaseInputOnStop(keras.callbacks.Callback):
    """Closes the input iterator of a `fit` that ended early. A `fit` stopped by any callback
    (``model.stop_training``) is released as it returns; a `fit` that ran its epochs out has
    nothing left open and is left alone. To release the input of a `fit` that raises too, call
    it inside the callback used as a context manager::

        release = ReleaseInputOnStop()
        with release:
            model.fit(dataset, epochs=3, callbacks=[release])

    Add it to any `fit` whose callbacks may stop training or raise."""

    def __init__(self):
        super().__init__()
        self._epoch_iterator = None

    def on_train_begin(self, logs=None):
        frame = sys._getframe(1)
        while frame is not None:
            iterator = frame.f_locals.get(_FIT_EPOCH_ITERATOR)
            if iterator is not None and hasattr(iterator, "reset"):
                self._epoch_iterator = iterator
                return
            frame = frame.f_back

    def on_train_end(self, logs=None):
        if self.model.stop_training:
            self.release()
        self._epoch_iterator = None

    def release(self):
        """Resets the running (or last interrupted) `fit`'s epoch iterator, which drops its
        suspended generator (closing it) and its input iterator; then forgets it."""
        iterator, self._epoch_iterator = self._epoch_iterator, None
        if iterator is not None:
            iterator.reset()

    def __enter__(self):
        return self

    def __exit__(self, error_type, error, traceback):
        if error_type is not None:
            self.release()
        return False


def fit_releasing_input(model, x, callbacks=(), **fit_arguments):
    """``model.fit(x, callbacks=callbacks, **fit_arguments)``, its input released however the
    `fit` ends: run out, stopped by a callback, or left by an error."""
    release = ReleaseInputOnStop()
    with release:
        return model.fit(x, callbacks=[*callbacks, release], **fit_arguments)
