"""keras-largebatch: LARS and LAMB, large-batch schedules and a BERT pretraining recipe for Keras 3."""

from keras_largebatch.optimizers import LAMB, LARS

__version__ = "0.1.0"

__all__ = ["LAMB", "LARS"]
