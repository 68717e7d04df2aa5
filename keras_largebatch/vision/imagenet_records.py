"""The ImageNet TFRecord schema: one `tf.train.Example` per image.

====================  =====  ======================================================
feature               type   meaning
====================  =====  ======================================================
image/encoded         bytes  the JPEG file, as it was on disk (required)
image/class/label     int64  the class, 1..1000: 1-based, 0 being "background" (required)
image/height, /width  int64  the image's size (optional, not read)
image/format          bytes  ``JPEG`` (optional, not read)
image/filename        bytes  the source file's name (optional, not read)
image/class/text      bytes  the class's human-readable name (optional, not read)
====================  =====  ======================================================

This is the format that the Cloud TPU reference writes (``tensorflow/tpu``,
``tools/datasets/imagenet_to_gcs.py``) and reads (``models/official/resnet/imagenet_input.py``),
and that TF Model Garden's ``official/vision/dataloaders/classification_input.py`` reads. Its
labels start at 1 because the 1001-class Inception models reserve class 0 for background; with
``label_offset`` (1 by default; 0 for records whose labels start at 0) a record's label ``L`` is
the model's class ``L - label_offset``, in ``[0, num_classes)``.
"""

import tensorflow as tf

from keras_largebatch import _checks

ENCODED_IMAGE = "image/encoded"
LABEL = "image/class/label"
# The one statement of the features read; the parser and the file check both use it.
FEATURE_SPEC = {
    ENCODED_IMAGE: tf.io.FixedLenFeature([], tf.string),
    LABEL: tf.io.FixedLenFeature([], tf.int64),
}
_PROTO_KIND = {tf.string: "bytes_list", tf.int64: "int64_list"}
DEFAULT_LABEL_OFFSET = 1
DEFAULT_NUM_CLASSES = 1000


def check_label_arguments(num_classes, label_offset):
    """Raises unless ``num_classes`` >= 1 and ``label_offset`` >= 0 are integers."""
    _checks.check_integer("num_classes", num_classes, low=1)
    _checks.check_integer("label_offset", label_offset, low=0)


def parse_record(serialized, label_offset=DEFAULT_LABEL_OFFSET):
    """Parses one serialized record.

    Returns:
        ``(image_bytes, class_id)``: a scalar `tf.string` of JPEG bytes and a scalar int32
        ``label - label_offset``.
    """
    features = tf.io.parse_single_example(serialized, FEATURE_SPEC)
    return features[ENCODED_IMAGE], tf.cast(features[LABEL] - label_offset, tf.int32)


def check_record_file(
    path, num_classes=DEFAULT_NUM_CLASSES, label_offset=DEFAULT_LABEL_OFFSET, num_records=4
):
    """Checks the first ``num_records`` records of ``path`` against the schema; call it before
    training, so that a wrong file fails at once rather than hours into a run.

    Returns:
        The number of records checked (fewer than ``num_records`` for a shorter file).

    Raises:
        ValueError: naming the file, the record and the feature, when the file is empty or not
            TFRecords, a record is not a `tf.train.Example`, a feature is missing or of the wrong
            type, ``image/encoded`` does not decode as a JPEG image, or ``image/class/label`` is
            outside ``[label_offset, label_offset + num_classes)``.
    """
    check_label_arguments(num_classes, label_offset)
    _checks.check_integer("num_records", num_records, low=1)
    try:
        records = list(tf.data.TFRecordDataset(path).take(num_records).as_numpy_iterator())
    except tf.errors.OpError as error:
        raise ValueError(
            f"record file {path!r} cannot be read as TFRecords: {_first_line(error)}"
        ) from error
    if not records:
        raise ValueError(f"record file {path!r} contains no records")
    for index, record in enumerate(records):
        where = f"record file {path!r}, record {index}"
        features = _example_features(record, where)
        for name, spec in FEATURE_SPEC.items():
            _check_feature(features, name, _PROTO_KIND[spec.dtype], where)
        label = features[LABEL].int64_list.value[0]
        if not label_offset <= label < label_offset + num_classes:
            raise ValueError(
                f"{where}: feature {LABEL!r} is {label}, outside [{label_offset}, "
                f"{label_offset + num_classes}) (label_offset={label_offset}, "
                f"num_classes={num_classes})"
            )
        try:
            tf.io.decode_jpeg(features[ENCODED_IMAGE].bytes_list.value[0], channels=3)
        except tf.errors.OpError as error:
            raise ValueError(
                f"{where}: feature {ENCODED_IMAGE!r} does not decode as a JPEG "
                f"image: {_first_line(error)}"
            ) from error
    return len(records)


def _example_features(record, where):
    try:
        return tf.train.Example.FromString(record).features.feature
    except Exception as error:  # protobuf's DecodeError is not importable from one stable place
        raise ValueError(f"{where} is not a tf.train.Example ({error})") from error


def _check_feature(features, name, kind, where):
    if name not in features:
        raise ValueError(f"{where} lacks feature {name!r}; it has {sorted(features)}")
    actual_kind = features[name].WhichOneof("kind")
    if actual_kind != kind:
        raise ValueError(f"{where}: feature {name!r} is a {actual_kind}, expected {kind}")
    count = len(getattr(features[name], kind).value)
    if count != 1:
        raise ValueError(f"{where}: feature {name!r} has {count} values, expected 1")


def _first_line(error):
    """TensorFlow's message without the ``{{function_node ...}}`` prefix eager ops add."""
    return error.message.split("}}")[-1].strip().splitlines()[0]
