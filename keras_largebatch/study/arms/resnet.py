"""Arm A's workload: a batch-normalized keras-hub ResNet on Fashion-MNIST, target a
validation accuracy.

The network is keras-hub's `ResNetBackbone` (He et al., arXiv:1512.03385; batch normalization
after every convolution, as in the ResNet-50 that LARS was made for) narrowed to fit CPUs: a
3x3 stem and two stages of one basic block each (stem and first stage 64 filters
wide, the narrowest keras-hub allows), then global average pooling and a dense layer. The
data are the first edition's: Fashion-MNIST's training images split into training and
validation images stratified by class (`keras_largebatch.study.data`), the test images read
once per seed at its end.
"""

import math

import keras
import numpy as np
import tensorflow as tf

from keras_largebatch import _checks
from keras_largebatch.study import data as data_lib
from keras_largebatch.vision import fashion_mnist

EVALUATION_BATCH_SIZE = 2000
# keras-hub's ResNetBackbone requires 64 filters in its first stage, and a basic block
# without a projection shortcut the same in its stem.
FIRST_STAGE_FILTERS = 64


class ResNetWorkload:
    """Train a narrow ResNet on Fashion-MNIST; ``metric`` is the validation accuracy (higher
    is better)."""

    metric = "accuracy"
    divergence_loss = 2 * math.log(10)  # twice a constant prediction's validation loss
    # MLPerf's ResNet-50 leaves batch-norm parameters and biases out of weight decay and of
    # LARS's trust ratio.
    decay_exclusions = ("gamma$", "beta$", "bias$")

    def __init__(
        self,
        second_stage_filters=64,
        validation_examples=5000,
        train_examples=None,
        split_seed=0,
        data_dir=None,
    ):
        _checks.check_integer("second_stage_filters", second_stage_filters, low=1)
        _checks.check_integer("validation_examples", validation_examples, low=1)
        _checks.check_optional_integer("train_examples", train_examples, low=2)
        _checks.check_integer("split_seed", split_seed, low=0)
        if data_dir is not None:
            _checks.check_string("data_dir", data_dir)
        self.second_stage_filters = second_stage_filters
        self.validation_examples = validation_examples
        self.train_examples = train_examples
        self.split_seed = split_seed
        self.data_dir = data_dir

    def settings(self):
        """What decides the results (the data's location may change)."""
        return dict(
            workload="resnet",
            second_stage_filters=self.second_stage_filters,
            validation_examples=self.validation_examples,
            train_examples=self.train_examples,
            split_seed=self.split_seed,
        )

    def load(self):
        """The three sets (`keras_largebatch.study.data.StudyData`), with ``fingerprint`` and
        ``train_examples``."""
        data = data_lib.load(
            self.data_dir, self.train_examples, self.validation_examples, self.split_seed
        )
        return _ImageData(data)

    def build_model(self, seed):
        """The ResNet with weights drawn from ``seed``, returning logits."""
        import keras_hub

        keras.utils.set_random_seed(seed)
        backbone = keras_hub.models.ResNetBackbone(
            input_conv_filters=[FIRST_STAGE_FILTERS],
            input_conv_kernel_sizes=[3],
            stackwise_num_filters=[FIRST_STAGE_FILTERS, self.second_stage_filters],
            stackwise_num_blocks=[1, 1],
            stackwise_num_strides=[1, 2],
            block_type="basic_block",
            image_shape=fashion_mnist.IMAGE_SHAPE,
        )
        inputs = keras.Input(fashion_mnist.IMAGE_SHAPE)
        pooled = keras.layers.GlobalAveragePooling2D()(backbone(inputs))
        logits = keras.layers.Dense(fashion_mnist.NUM_CLASSES, name="predictions")(pooled)
        return keras.Model(inputs, logits, name="study_resnet")

    def compile(self, model, optimizer):
        model.compile(
            optimizer=optimizer,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )

    def train_dataset(self, data, batch_size, seed):
        """Full batches, shuffled anew every pass, repeated (indices shuffled, not images)."""
        images = tf.constant(data.study.train_images)
        labels = tf.constant(data.study.train_labels)
        count = len(data.study.train_images)
        dataset = tf.data.Dataset.range(count).shuffle(count, seed=seed).repeat()
        dataset = dataset.batch(batch_size, drop_remainder=True)
        dataset = dataset.map(
            lambda indices: (tf.gather(images, indices), tf.gather(labels, indices))
        )
        return dataset.prefetch(tf.data.AUTOTUNE)

    def evaluate(self, model, data, split):
        """``{"accuracy", "loss"}`` of ``model`` (inference mode: batch norm's moving
        statistics) on the ``"validation"`` or ``"test"`` images."""
        _checks.check_choice("split", split, ("validation", "test"))
        images, labels = (
            (data.study.validation_images, data.study.validation_labels)
            if split == "validation"
            else (data.study.test_images, data.study.test_labels)
        )
        forward = getattr(model, "_study_forward", None)
        if forward is None:
            forward = tf.function(lambda batch: model(batch, training=False))
            model._study_forward = forward
        logits = np.concatenate(
            [
                forward(tf.constant(images[start : start + EVALUATION_BATCH_SIZE])).numpy()
                for start in range(0, len(images), EVALUATION_BATCH_SIZE)
            ]
        ).astype(np.float64)
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        loss = -log_probabilities[np.arange(len(labels)), labels].mean()
        return {"accuracy": float((logits.argmax(axis=1) == labels).mean()), "loss": float(loss)}


class _ImageData:
    def __init__(self, study):
        self.study = study
        self.fingerprint = study.split_fingerprint
        self.train_examples = len(study.train_images)
