"""The ImageNet record schema: parsing hand-written records, and the file check's errors."""

import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch.vision import imagenet_records
from tests.support.imagenet_records import encode_jpeg, position_image, write_imagenet_records


def _parse_all(path, label_offset):
    dataset = tf.data.TFRecordDataset(path).map(
        lambda record: imagenet_records.parse_record(record, label_offset)
    )
    return list(dataset.as_numpy_iterator())


@pytest.mark.parametrize(
    "label_offset, labels, classes",
    [
        (1, [1, 7, 1000], [0, 6, 999]),
        (0, [0, 7, 999], [0, 7, 999]),
    ],
)
def test_parse_record_maps_labels_with_the_offset(tmp_path, label_offset, labels, classes):
    path = write_imagenet_records(tmp_path / "train-00000", labels)
    parsed = _parse_all(path, label_offset)
    assert [int(class_id) for _, class_id in parsed] == classes
    assert all(class_id.dtype == np.int32 for _, class_id in parsed)
    # The bytes are the JPEG as written.
    assert parsed[1][0] == encode_jpeg(position_image(32, 40, labels[1]))


def test_parse_record_needs_only_the_image_and_the_label(tmp_path):
    optional = ("image/height", "image/width", "image/format", "image/filename", "image/class/text")
    path = write_imagenet_records(tmp_path / "bare", [3, 4], drop=optional)
    assert [int(class_id) for _, class_id in _parse_all(path, 1)] == [2, 3]
    assert imagenet_records.check_record_file(path, num_classes=10) == 2


def test_check_record_file_reads_the_first_records(tmp_path):
    path = write_imagenet_records(tmp_path / "ok", [1, 2, 3, 4, 5, 6])
    assert imagenet_records.check_record_file(path, num_classes=6) == 4
    assert imagenet_records.check_record_file(path, num_classes=6, num_records=10) == 6


@pytest.mark.parametrize("feature", ["image/encoded", "image/class/label"])
def test_missing_feature_names_the_file_and_the_feature(tmp_path, feature):
    path = write_imagenet_records(tmp_path / "missing", [1, 2], drop=(feature,))
    with pytest.raises(
        ValueError,
        match=rf"record file '.*missing', record 0 lacks feature "
        rf"'{feature}'; it has \[",
    ):
        imagenet_records.check_record_file(path)


def test_corrupt_jpeg_names_the_file_record_and_feature(tmp_path):
    path = write_imagenet_records(tmp_path / "corrupt", [1, 2, 3], corrupt=(2,))
    with pytest.raises(
        ValueError,
        match=r"record file '.*corrupt', record 2: feature "
        r"'image/encoded' does not decode as a JPEG image: ",
    ):
        imagenet_records.check_record_file(path)


@pytest.mark.parametrize(
    "label_offset, label, allowed",
    [
        (1, 0, r"\[1, 11\)"),
        (1, 11, r"\[1, 11\)"),
        (0, 10, r"\[0, 10\)"),
        (0, -1, r"\[0, 10\)"),
    ],
)
def test_label_out_of_range_names_the_value_and_the_range(tmp_path, label_offset, label, allowed):
    path = write_imagenet_records(tmp_path / "labels", [label_offset, label])
    with pytest.raises(
        ValueError,
        match=rf"'.*labels', record 1: feature 'image/class/label' "
        rf"is {label}, outside {allowed} \(label_offset="
        rf"{label_offset}, num_classes=10\)",
    ):
        imagenet_records.check_record_file(path, num_classes=10, label_offset=label_offset)


def test_feature_of_the_wrong_type_or_length(tmp_path):
    as_bytes = tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"3"]))
    path = write_imagenet_records(
        tmp_path / "text_label", [3], overrides={"image/class/label": as_bytes}
    )
    with pytest.raises(
        ValueError, match="feature 'image/class/label' is a bytes_list, expected int64_list"
    ):
        imagenet_records.check_record_file(path)
    two_labels = tf.train.Feature(int64_list=tf.train.Int64List(value=[3, 4]))
    path = write_imagenet_records(
        tmp_path / "two_labels", [3], overrides={"image/class/label": two_labels}
    )
    with pytest.raises(ValueError, match="feature 'image/class/label' has 2 values, expected 1"):
        imagenet_records.check_record_file(path)


def test_empty_file_and_a_file_that_is_not_tfrecords(tmp_path):
    empty = tmp_path / "empty"
    write_imagenet_records(empty, [])
    with pytest.raises(ValueError, match=r"record file '.*empty' contains no records"):
        imagenet_records.check_record_file(str(empty))
    text = tmp_path / "notes.txt"
    text.write_text("not a record file, but long enough to look like a header\n" * 4)
    with pytest.raises(
        ValueError,
        match=r"record file '.*notes.txt' cannot be read as "
        r"TFRecords: ",
    ):
        imagenet_records.check_record_file(str(text))


def test_argument_checks(tmp_path):
    path = write_imagenet_records(tmp_path / "ok", [1])
    with pytest.raises(ValueError, match="num_classes must be in"):
        imagenet_records.check_record_file(path, num_classes=0)
    with pytest.raises(TypeError, match="label_offset must be an integer, got '1'"):
        imagenet_records.check_record_file(path, label_offset="1")
