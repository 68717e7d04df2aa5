"""Tests of keras_largebatch.vision: the image classification recipe and its data."""
