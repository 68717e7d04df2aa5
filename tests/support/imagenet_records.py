"""ImageNet-format record files written field by field with tf.train.Example.

The features are spelled out here from the published format (the Cloud TPU reference's
``imagenet_to_gcs.py``), not taken from the package, so that the package's schema is checked
against an independent statement of it. The images are real JPEGs whose pixels say where they
are: red = ``ROW_STEP * row``, green = ``COLUMN_STEP * column``, blue = ``LABEL_STEP * (label %
32)``; a crop can be read back from its pixels and an image matched to its label.
"""

import numpy as np
import tensorflow as tf

ROW_STEP = 8
COLUMN_STEP = 6
LABEL_STEP = 8


def position_image(height, width, label):
    """uint8 ``[height, width, 3]``, pixels as the module docstring says (height <= 32)."""
    image = np.zeros((height, width, 3), np.uint8)
    image[..., 0] = ROW_STEP * np.arange(height)[:, None]
    image[..., 1] = COLUMN_STEP * np.arange(width)[None, :]
    image[..., 2] = LABEL_STEP * (label % 32)
    return image


def encode_jpeg(image):
    """JPEG bytes of a uint8 image, at quality 100 without chroma subsampling, so that decoded
    pixels are within a few levels of the originals."""
    return tf.io.encode_jpeg(image, quality=100, chroma_downsampling=False).numpy()


def _bytes(value):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int64(value):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def image_example(image_bytes, label, height, width, drop=(), overrides=None):
    """One serialized example with every feature of the format, less ``drop``; ``overrides``
    maps feature names to replacement `tf.train.Feature`s."""
    feature = {
        "image/encoded": _bytes(image_bytes),
        "image/class/label": _int64(label),
        "image/height": _int64(height),
        "image/width": _int64(width),
        "image/format": _bytes(b"JPEG"),
        "image/filename": _bytes(f"n{label:08d}_{label}.JPEG".encode()),
        "image/class/text": _bytes(f"class {label}".encode()),
    }
    feature.update(overrides or {})
    for name in drop:
        del feature[name]
    # Deterministic: a protobuf map's serialized order otherwise varies between processes, and
    # the training crops are seeded by the record's bytes, so each process trained on other crops.
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString(deterministic=True)


def write_imagenet_records(path, labels, height=32, width=40, drop=(), overrides=None, corrupt=()):
    """Writes one record per label to the TFRecord file ``path``; returns it as a str.

    ``drop`` and ``overrides`` apply to every record (see `image_example`); the records at the
    indices in ``corrupt`` hold a JPEG cut off halfway.
    """
    with tf.io.TFRecordWriter(str(path)) as writer:
        for index, label in enumerate(labels):
            image_bytes = encode_jpeg(position_image(height, width, label))
            if index in corrupt:
                image_bytes = image_bytes[: len(image_bytes) // 2]
            writer.write(image_example(image_bytes, label, height, width, drop, overrides))
    return str(path)
