"""The study's network: Shallue et al.'s simple CNN for Fashion-MNIST (arXiv:1811.03600: two
5x5 convolutions, each followed by max-pooling, then fully connected layers), narrowed so that
the study's searches train on a few CPU cores (11,978 weights; no batch normalization)."""

import keras

from keras_largebatch.vision import fashion_mnist


def simple_cnn(conv_filters=(8, 16), dense_units=32):
    """The CNN, returning logits of the 10 classes."""
    layers = [keras.Input(fashion_mnist.IMAGE_SHAPE)]
    for filters in conv_filters:
        layers += [keras.layers.Conv2D(filters, 5, activation="relu"), keras.layers.MaxPool2D()]
    layers += [
        keras.layers.Flatten(),
        keras.layers.Dense(dense_units, activation="relu"),
        keras.layers.Dense(fashion_mnist.NUM_CLASSES),
    ]
    return keras.Sequential(layers, name="simple_cnn")
