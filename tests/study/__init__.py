"""Tests of keras_largebatch.study: the batch-size study of the optimizers."""
