"""The ImageNet input pipeline on hand-written record files of position-encoding JPEGs."""

import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch.vision import input_pipeline
from tests.support.imagenet_records import LABEL_STEP, write_imagenet_records

IMAGE_SIZE = 24
NUM_CLASSES = 20
RAW = {"mean": (0.0, 0.0, 0.0), "stddev": (1.0, 1.0, 1.0)}  # outputs in pixel values
# 3 files of 6 records; labels 1..18 (1-based), so the records are told apart by label.
FILE_LABELS = [list(range(1, 7)), list(range(7, 13)), list(range(13, 19))]
ALL_CLASSES = set(range(18))


@pytest.fixture
def record_files(tmp_path):
    return [
        write_imagenet_records(tmp_path / f"train-{index:05d}-of-00003", labels)
        for index, labels in enumerate(FILE_LABELS)
    ]


def _dataset(files, batch_size=4, is_training=False, **arguments):
    return input_pipeline.make_imagenet_dataset(
        files, IMAGE_SIZE, batch_size, is_training, num_classes=NUM_CLASSES, **arguments
    )


def _batches(dataset):
    return [(images.numpy(), labels.numpy()) for images, labels in dataset]


def _context(num_pipelines, pipeline_id):
    return tf.distribute.InputContext(num_pipelines, pipeline_id, num_pipelines)


def test_eval_batches_have_static_shapes_and_the_right_labels(record_files, tmp_path):
    dataset = _dataset(str(tmp_path / "train-*"), **RAW)
    images_spec, labels_spec = dataset.element_spec
    assert images_spec.shape == (4, IMAGE_SIZE, IMAGE_SIZE, 3) and images_spec.dtype == tf.float32
    assert labels_spec.shape == (4,) and labels_spec.dtype == tf.int32
    batches = _batches(dataset)
    assert len(batches) == 4  # 18 records, the last 2 dropped
    labels = np.concatenate([batch_labels for _, batch_labels in batches])
    assert len(set(labels)) == 16 and set(labels) <= ALL_CLASSES
    # Each image is its record's: the blue channel encodes the 1-based label.
    images = np.concatenate([batch_images for batch_images, _ in batches])
    np.testing.assert_allclose(
        images[..., 2].mean(axis=(1, 2)), LABEL_STEP * ((labels + 1) % 32), atol=2
    )


def test_label_offset_zero_and_bfloat16(tmp_path):
    path = write_imagenet_records(tmp_path / "zero-based", [0, 5, 19, 3])
    dataset = _dataset(path, label_offset=0, dtype=tf.bfloat16)
    assert dataset.element_spec[0].dtype == tf.bfloat16
    ((images, labels),) = _batches(dataset)
    assert sorted(labels.tolist()) == [0, 3, 5, 19]
    assert images.shape == (4, IMAGE_SIZE, IMAGE_SIZE, 3)


def _labels_read(files, input_context, is_training=False):
    batches = _batches(
        _dataset(files, batch_size=1, is_training=is_training, input_context=input_context)
    )
    return [int(labels[0]) for _, labels in batches]


@pytest.mark.parametrize("num_files, num_pipelines", [(3, 2), (1, 2), (3, 4)])
def test_pipelines_read_disjoint_records_that_make_up_the_data(
    record_files, num_files, num_pipelines
):
    files = record_files[:num_files]
    expected = set(range(6 * num_files))
    shares = [
        _labels_read(files, _context(num_pipelines, pipeline_id))
        for pipeline_id in range(num_pipelines)
    ]
    assert sum(len(share) for share in shares) == len(expected)
    assert set().union(*shares) == expected
    if num_files >= num_pipelines:  # whole files per pipeline: 2 and 1 of the 3
        assert [len(share) for share in shares] == [12, 6]
    else:  # every num_pipelines-th record of each file of 6
        assert [len(share) for share in shares] == [
            num_files * len(range(pipeline_id, 6, num_pipelines))
            for pipeline_id in range(num_pipelines)
        ]
    assert [
        input_pipeline.count_records(files, _context(num_pipelines, pipeline_id))
        for pipeline_id in range(num_pipelines)
    ] == [len(share) for share in shares]


def test_distribute_datasets_from_function_gives_each_replica_a_static_batch(record_files):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])

    def dataset_fn(input_context):
        return _dataset(
            record_files,
            input_context.get_per_replica_batch_size(8),
            is_training=True,
            input_context=input_context,
            start_batch=1,
        )

    images, labels = next(iter(strategy.distribute_datasets_from_function(dataset_fn)))
    for replica_images, replica_labels in zip(
        strategy.experimental_local_results(images), strategy.experimental_local_results(labels)
    ):
        assert replica_images.shape == (4, IMAGE_SIZE, IMAGE_SIZE, 3)
        assert replica_labels.shape == (4,)


def test_training_is_endless_reproducible_and_starts_at_any_batch(record_files):
    def run(start_batch=0, seed=5, take=9):
        return _batches(
            _dataset(
                record_files, is_training=True, shuffle_seed=seed, start_batch=start_batch
            ).take(take)
        )

    first = run()
    for (images, labels), (images_again, labels_again) in zip(first, run()):
        np.testing.assert_array_equal(images, images_again)
        np.testing.assert_array_equal(labels, labels_again)
    # Two passes over the 18 records and more: each pass reads every record once, in a new
    # order, with new crops.
    labels = np.concatenate([batch_labels for _, batch_labels in first])
    assert len(labels) == 36
    assert sorted(labels[:18]) == sorted(labels[18:36]) == sorted(ALL_CLASSES)
    assert not np.array_equal(labels[:18], labels[18:36])
    # A resumed run (started at batch 3) sees what an uninterrupted one does, crops included.
    for (images, labels), (images_resumed, labels_resumed) in zip(first[3:], run(3, take=6)):
        np.testing.assert_array_equal(images, images_resumed)
        np.testing.assert_array_equal(labels, labels_resumed)
    other = np.concatenate([batch_labels for _, batch_labels in run(seed=6)])
    assert not np.array_equal(other, labels)


def test_a_record_gets_the_same_crop_in_an_epoch_whichever_pipeline_reads_it(record_files):
    # One record file per pipeline: the crop of a record depends on its content and epoch.
    one = _batches(_dataset(record_files[:2], batch_size=1, is_training=True).take(12))
    shares = [
        _batches(
            _dataset(
                record_files[:2], batch_size=1, is_training=True, input_context=_context(2, i)
            ).take(6)
        )
        for i in range(2)
    ]
    crops = {int(labels[0]): images for images, labels in one}
    for share in shares:
        for images, labels in share:
            np.testing.assert_array_equal(images, crops[int(labels[0])])


def test_training_files_that_do_not_divide_over_the_pipelines_are_refused(record_files):
    with pytest.raises(ValueError, match=r"3 training file\(s\) do not divide evenly over 2"):
        _dataset(record_files, batch_size=1, is_training=True, input_context=_context(2, 0))


def test_batch_larger_than_the_data_is_refused(record_files):
    with pytest.raises(
        ValueError,
        match=r"the data \(files \[.*\]\) holds 18 records, fewer "
        r"than batch_size=19: .* no batch",
    ):
        _dataset(record_files, batch_size=19)
    with pytest.raises(
        ValueError,
        match=r"input pipeline 1 of 2 \(files \['.*train-00001-of-"
        r"00003'\]\) holds 6 records, fewer than batch_size=7",
    ):
        _dataset(record_files, batch_size=7, input_context=_context(2, 1))
    input_pipeline.check_imagenet_input(record_files, 18, num_classes=NUM_CLASSES)
    with pytest.raises(ValueError, match="holds 18 records, fewer than batch_size=19"):
        input_pipeline.check_imagenet_input(record_files, 19, num_classes=NUM_CLASSES)
    assert input_pipeline.count_records(record_files) == 18
    with pytest.raises(
        ValueError,
        match=r"input pipeline 3 of 4 \(records 3, 7, \.\.\. of each "
        r"of files \[.*\]\) holds 3 records, fewer than "
        r"batch_size=4",
    ):
        _dataset(record_files, batch_size=4, input_context=_context(4, 3))
    assert input_pipeline.count_records(record_files, limit=5) == 5


@pytest.mark.parametrize(
    "fault, message",
    [
        ({"drop": ("image/class/label",)}, "record 0 lacks feature 'image/class/label'"),
        ({"corrupt": (1,)}, "record 1: feature 'image/encoded' does not decode as a JPEG image"),
        ({"labels": [1, 21]}, r"record 1: feature 'image/class/label' is 21, outside \[1, 21\)"),
    ],
)
def test_bad_records_fail_before_any_batch(record_files, tmp_path, fault, message):
    labels = fault.pop("labels", [1, 2])
    bad = write_imagenet_records(tmp_path / "train-bad", labels, **fault)
    with pytest.raises(ValueError, match=rf"record file '.*train-bad', {message}"):
        _dataset(record_files + [bad], batch_size=1)


def test_no_matching_file_and_argument_checks(record_files, tmp_path):
    with pytest.raises(ValueError, match=r"record file pattern '.*nothing-\*' matches no file"):
        _dataset(str(tmp_path / "nothing-*"))
    with pytest.raises(TypeError, match="is_training must be True or False, got 'yes'"):
        _dataset(record_files, is_training="yes")
    with pytest.raises(TypeError, match="shuffle_seed must be an integer or None, got 1.5"):
        _dataset(record_files, shuffle_seed=1.5)
    with pytest.raises(ValueError, match=r"batch_size must be in \[1, inf\], got 0"):
        _dataset(record_files, batch_size=0)
