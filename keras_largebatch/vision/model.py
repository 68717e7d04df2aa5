"""Image classifiers on keras-hub's `ResNetBackbone`: ResNet-18/34/50 and a small ResNet.

ResNet-50 is the v1.5 shape of the MLPerf and TF Model Garden references (He et al. 2016,
"Deep Residual Learning for Image Recognition", arXiv:1512.03385; v1.5 strides the 3x3
convolution of a bottleneck rather than its first 1x1, which keras-hub's bottleneck block
does). "small" is a two-stage ResNet for 28x28 images (Fashion-MNIST).
"""

import keras

from keras_largebatch import _checks, _extras
from keras_largebatch.vision.config import ARCHITECTURES

try:
    import keras_hub
except ModuleNotFoundError as error:
    raise _extras.missing_extra(__name__, "vision", error) from error


def image_classifier(architecture, num_classes, image_shape, dtype=None, sync_batch_norm=False):
    """A ResNet classifier that outputs float32 logits: keras-hub's `ResNetBackbone`, global
    average pooling and one dense layer; built offline, with fresh weights.

    A plain functional `keras.Model` rather than keras-hub's `ResNetImageClassifier`, whose
    `fit` converts its input to a dataset and so cannot take a `tf.distribute` dataset.

    Args:
        architecture: a key of `ARCHITECTURES`.
        num_classes: classes of the head.
        image_shape: ``(height, width, channels)`` of the input.
        dtype: a dtype policy name such as ``"mixed_bfloat16"``, or None.
        sync_batch_norm: compute the batch-norm statistics of a training step over all
            replicas (TensorFlow backend) instead of per replica. Per-replica statistics are
            the usual practice at scale (the MLPerf references); synchronized ones make a
            multi-replica step equal the single-device step of the same global batch.
    """
    _checks.check_choice("architecture", architecture, tuple(ARCHITECTURES))
    _checks.check_integer("num_classes", num_classes, low=2)
    backbone = keras_hub.models.ResNetBackbone(
        image_shape=tuple(image_shape), dtype=dtype, **ARCHITECTURES[architecture]
    )
    _checks.check_bool("sync_batch_norm", sync_batch_norm)
    if sync_batch_norm:
        for layer in backbone.layers:
            if isinstance(layer, keras.layers.BatchNormalization):
                # Read when the training step is traced (Keras's `ops.moments`).
                layer.synchronized = True
    inputs = keras.Input(tuple(image_shape), name="images")
    pooled = keras.layers.GlobalAveragePooling2D(name="pooler", dtype=dtype)(backbone(inputs))
    # The head computes in float32 under mixed precision, so the loss sees float32 logits.
    logits = keras.layers.Dense(num_classes, name="predictions", dtype="float32")(pooled)
    return keras.Model(inputs, logits, name=f"{architecture}_classifier")
