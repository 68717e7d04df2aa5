"""tf.data input for image classification on ImageNet-format records.

`make_imagenet_dataset` yields ``(images, labels)`` batches that ``keras.Model.fit`` takes as
they are, with static shapes (so they run on TPU):

======  ========================  ==========================================================
        dtype, shape              content
======  ========================  ==========================================================
images  ``dtype`` (float32),      decoded, cropped (and for training flipped), normalized:
        [batch, size, size, 3]    `keras_largebatch.vision.preprocessing`
labels  int32 [batch]             sparse class ids ``image/class/label - label_offset`` in
                                  ``[0, num_classes)``, for sparse categorical cross-entropy
======  ========================  ==========================================================

The steps follow the Cloud TPU reference (``tensorflow/tpu``
``models/official/resnet/imagenet_input.py``) and TF Model Garden
(``official/vision/dataloaders``): each input pipeline reads its own files, several at a time
(parallel interleave), parses and decodes records in parallel (``tf.data.AUTOTUNE``), batches
with ``drop_remainder=True`` and prefetches.

Training is endless, in an order drawn from ``(shuffle_seed, epoch)``: every epoch reads the
pipeline's files in a new order, ``cycle_length`` at a time interleaved record by record, and
permutes each window of ``shuffle_buffer_size`` records
(`keras_largebatch.input_order.shuffled_records`). The stream starts at batch ``start_batch``
without reading the batches before it, so a run resumed at any step sees the images an
uninterrupted one sees there. Every training record's crop and flip are drawn from its content
hash, ``augmentation_seed`` and the epoch: new crops every epoch, the same ones on a resumed
run, and the same whichever input pipeline reads the record.
"""

import collections

import tensorflow as tf

from keras_largebatch import _checks, input_order
from keras_largebatch._file_patterns import resolve_record_files
from keras_largebatch.vision import imagenet_records, preprocessing

# TFRecord read buffer of the Cloud TPU reference: fewer, larger reads from network storage.
_READ_BUFFER_BYTES = 8 * 1024 * 1024
# Crops are seeded by (content hash, augmentation seed x this + epoch).
_EPOCHS_PER_SEED = 2**32

_PipelineShare = collections.namedtuple(
    "_PipelineShare", ["files", "record_shards", "record_shard_index", "description"]
)


def make_imagenet_dataset(
    file_patterns,
    image_size,
    batch_size,
    is_training,
    input_context=None,
    shuffle_seed=None,
    label_offset=imagenet_records.DEFAULT_LABEL_OFFSET,
    num_classes=imagenet_records.DEFAULT_NUM_CLASSES,
    augmentation_seed=0,
    dtype=tf.float32,
    mean=preprocessing.MEAN_RGB,
    stddev=preprocessing.STDDEV_RGB,
    shuffle_buffer_size=10000,
    cycle_length=16,
    start_batch=0,
    record_counts=None,
):
    """Returns a ``tf.data.Dataset`` of ``(images, labels)`` batches (module docstring).

    For ``strategy.distribute_datasets_from_function(lambda ctx: make_imagenet_dataset(...,
    input_context=ctx))``: each input pipeline reads every ``num_input_pipelines``-th file (the
    training files must divide evenly over the pipelines; for evaluation, when there are fewer
    files than pipelines, each reads every ``num_input_pipelines``-th record of each file), so
    no two pipelines read the same record and together they read all.

    Args:
        file_patterns: a glob pattern or path, or a list of them.
        image_size: side of the square images.
        batch_size: examples per batch of this input pipeline; for evaluation, None gives
            the ``(image, label)`` examples unbatched (to pad the last batch:
            `keras_largebatch.training.evaluation.pad_to_batches`).
        is_training: random resized crop and flip; otherwise the central crop.
        input_context: a ``tf.distribute.InputContext``, or None for one pipeline.
        shuffle_seed: seed of the training order; None draws one, so the order then differs
            between calls. Not used for evaluation, which reads one pass in a fixed order.
        label_offset: the records' label of class 0 (1 for the TPU / Model Garden records).
        num_classes: the number of classes.
        augmentation_seed: seed of the training crops and flips, drawn per record and epoch.
        dtype: of the images, e.g. ``tf.bfloat16``.
        mean: per-channel means of the normalization, 0-255 range.
        stddev: per-channel standard deviations of the normalization, 0-255 range.
        shuffle_buffer_size: records of each permuted window (training).
        cycle_length: files read at once (training).
        start_batch: the training batch of this pipeline to start at.
        record_counts: a ``files -> [records of each]`` function, such as a
            `keras_largebatch.input_order.RecordCounts`; None counts the pipeline's files.

    Raises:
        TypeError, ValueError: for bad arguments, and, before any batch is read, for the
            errors of `check_imagenet_input`.
    """
    _checks.check_bool("is_training", is_training)
    _checks.check_optional_integer("shuffle_seed", shuffle_seed)
    _checks.check_integer("augmentation_seed", augmentation_seed)
    _checks.check_integer("shuffle_buffer_size", shuffle_buffer_size, low=1)
    _checks.check_integer("cycle_length", cycle_length, low=1)
    _checks.check_integer("start_batch", start_batch, low=0)
    dtype = preprocessing.check_preprocessing_arguments(image_size, mean, stddev, dtype)
    files = resolve_record_files(file_patterns)
    share = _pipeline_share(files, input_context)
    if batch_size is None and is_training:
        raise ValueError("batch_size=None (unbatched examples) is for evaluation only")
    _check_share(share, 1 if batch_size is None else batch_size, num_classes, label_offset)

    def train_example(serialized, seed):
        image_bytes, label = imagenet_records.parse_record(serialized, label_offset)
        image = preprocessing.preprocess_for_train(
            image_bytes, image_size, seed, mean, stddev, dtype
        )
        return image, label

    def eval_example(serialized):
        image_bytes, label = imagenet_records.parse_record(serialized, label_offset)
        return preprocessing.preprocess_for_eval(
            image_bytes, image_size, mean, stddev, dtype
        ), label

    if is_training:
        num_pipelines = input_context.num_input_pipelines if input_context else 1
        pipeline_id = input_context.input_pipeline_id if input_context else 0
        own_files = input_order.pipeline_files(files, num_pipelines, pipeline_id)
        if shuffle_seed is None:
            shuffle_seed = int(tf.random.uniform([], maxval=2**62, dtype=tf.int64))
        records = input_order.shuffled_records(
            own_files,
            (record_counts or input_order.count_records)(own_files),
            shuffle_seed,
            start=start_batch * batch_size,
            cycle_length=cycle_length,
            window_size=shuffle_buffer_size,
            read_file=_read_file,
        )
        dataset = records.map(
            lambda serialized, epoch: train_example(
                serialized, _augmentation_seed(serialized, augmentation_seed, epoch)
            ),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
    else:
        dataset = _read_records(share, cycle_length=1).map(
            eval_example, num_parallel_calls=tf.data.AUTOTUNE
        )
    if batch_size is None:
        return dataset.prefetch(tf.data.AUTOTUNE)
    return dataset.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def check_imagenet_input(
    file_patterns,
    batch_size,
    input_context=None,
    num_classes=imagenet_records.DEFAULT_NUM_CLASSES,
    label_offset=imagenet_records.DEFAULT_LABEL_OFFSET,
):
    """Checks what one input pipeline would read, before any training.

    Runs `imagenet_records.check_record_file` on each of the pipeline's files and counts its
    records up to ``batch_size``: a pipeline with fewer records than one batch would yield no
    batch at all (``drop_remainder=True``), and a trainer repeating it would wait forever.

    Raises:
        ValueError: when a pattern matches no file, a file fails its check, or the pipeline has
            fewer records than ``batch_size`` (naming both numbers).
    """
    _check_share(
        _pipeline_share(resolve_record_files(file_patterns), input_context),
        batch_size,
        num_classes,
        label_offset,
    )


def _check_share(share, batch_size, num_classes, label_offset):
    _checks.check_integer("batch_size", batch_size, low=1)
    imagenet_records.check_label_arguments(num_classes, label_offset)
    for path in share.files:
        imagenet_records.check_record_file(path, num_classes, label_offset)
    num_records = _count(_read_records(share, cycle_length=1), limit=batch_size)
    if num_records < batch_size:
        raise ValueError(
            f"{share.description} holds {num_records} records, fewer than batch_size="
            f"{batch_size}: batches drop the remainder, so it would yield no batch; use a "
            f"batch_size of at most {num_records} or more data"
        )


def count_records(file_patterns, input_context=None, limit=None):
    """The number of records one input pipeline reads (all of them with no ``input_context``),
    counting no further than ``limit`` when it is given."""
    _checks.check_optional_integer("limit", limit, low=0)
    share = _pipeline_share(resolve_record_files(file_patterns), input_context)
    return _count(_read_records(share, cycle_length=1), limit)


def _count(records, limit):
    if limit is not None:
        records = records.take(limit)
    return int(records.reduce(tf.constant(0, tf.int64), lambda count, _: count + 1))


def _augmentation_seed(serialized, augmentation_seed, epoch):
    """The seed of a training record's crop and flip in ``epoch``: its content hash, with
    ``augmentation_seed`` and the epoch, so the same record gets the same crop in an epoch
    whichever input pipeline reads it, and a new one every epoch."""
    return tf.stack(
        [
            tf.strings.to_hash_bucket_fast(serialized, 2**62),
            tf.constant(augmentation_seed, tf.int64) * _EPOCHS_PER_SEED + epoch,
        ]
    )


def _pipeline_share(files, input_context):
    """The files (and the records of each) that one input pipeline reads."""
    num_pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline_id = input_context.input_pipeline_id if input_context else 0
    if num_pipelines == 1:
        return _PipelineShare(files, 1, 0, f"the data ({_describe(files)})")
    where = f"input pipeline {pipeline_id} of {num_pipelines}"
    if len(files) >= num_pipelines:
        own = files[pipeline_id::num_pipelines]
        return _PipelineShare(own, 1, 0, f"{where} ({_describe(own)})")
    # Too few files to give each pipeline its own: each reads every num_pipelines-th record.
    records = f"records {pipeline_id}, {pipeline_id + num_pipelines}, ..."
    return _PipelineShare(
        files, num_pipelines, pipeline_id, f"{where} ({records} of each of {_describe(files)})"
    )


def _describe(files):
    if len(files) <= 3:
        return f"files {files}"
    return f"{len(files)} files: {files[0]!r} ... {files[-1]!r}"


def _read_file(path):
    return tf.data.TFRecordDataset(path, buffer_size=_READ_BUFFER_BYTES)


def _read_records(share, cycle_length):
    """The serialized records of a share, once, in a fixed order."""

    def read_file(path):
        # Sharding inside each file keeps the split disjoint when there are fewer files than
        # pipelines.
        return _read_file(path).shard(share.record_shards, share.record_shard_index)

    return tf.data.Dataset.from_tensor_slices(share.files).interleave(
        read_file, cycle_length=min(cycle_length, len(share.files))
    )
