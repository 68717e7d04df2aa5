"""Tests of keras_largebatch.training: the harness that runs any recipe."""
