"""Releasing the input of a `fit` that a callback stopped early.

Keras's `fit` walks its input with an epoch iterator whose batches come from a suspended
generator that refers back to the epoch iterator: when a callback sets ``stop_training`` in
the middle of an epoch, the loop breaks with the generator suspended, and that reference cycle
keeps the input iterator (a `tf.data` iterator with its prefetching threads, or the JAX
backend's) alive until a full garbage collection. That collection, whenever it comes, then
waits in the iterator's destructor for its threads; a study that stops dozens of trials early
piles them up. `ReleaseInputOnStop` resets the epoch iterator as training ends, which drops the
generator and the input iterator while `fit` returns.
"""

import sys

import keras

# Keras's name for the epoch iterator in its backends' `fit` (an `EpochIterator`).
_FIT_EPOCH_ITERATOR = "epoch_iterator"


class ReleaseInputOnStop(keras.callbacks.Callback):
    """Closes the input iterator of a `fit` stopped early (``model.stop_training`` set by any
    callback); a `fit` that ran its epochs out has nothing left open and is left alone. Add it
    to any `fit` whose callbacks may stop training."""

    def on_train_end(self, logs=None):
        if not self.model.stop_training:
            return
        frame = sys._getframe(1)
        while frame is not None:
            iterator = frame.f_locals.get(_FIT_EPOCH_ITERATOR)
            if iterator is not None and hasattr(iterator, "reset"):
                # Drops the suspended generator (which closes it) and the input iterator.
                iterator.reset()
                return
            frame = frame.f_back
