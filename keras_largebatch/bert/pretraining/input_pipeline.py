"""tf.data input pipeline for BERT pretraining records (google-research/bert schema).

``make_pretraining_dataset`` yields ``(features, labels, sample_weights)`` batches that
``keras.Model.fit`` takes as they are, every tensor with a static shape (so it runs on TPU):

==============================  =======  ========================  ============================
key                             dtype    shape                     from record feature
==============================  =======  ========================  ============================
features["token_ids"]           int32    [batch, seq_length]       input_ids / input_word_ids
features["segment_ids"]         int32    [batch, seq_length]       segment_ids / input_type_ids
features["padding_mask"]        int32    [batch, seq_length]       input_mask
features["mask_positions"]      int32    [batch, max_predictions]  masked_lm_positions
labels["masked_lm"]             int32    [batch, max_predictions]  masked_lm_ids
labels["next_sentence"]         int32    [batch]                   next_sentence_labels
sample_weights["masked_lm"]     float32  [batch, max_predictions]  masked_lm_weights
sample_weights["next_sentence"] float32  [batch]                   (all ones)
sample_weights["masked_lm_      float32  [batch]                   (see below)
step_share"]
==============================  =======  ========================  ============================

The records follow the schema of ``records``. The feature names are those of keras-hub's
``BertBackbone`` inputs plus ``BertMaskedLM``'s ``mask_positions``; a model with outputs named
``masked_lm`` (logits ``[batch, max_predictions, vocabulary_size]``) and ``next_sentence``
(logits ``[batch, 2]``) trains on these batches with sparse categorical cross-entropy losses,
and the padded predictions weigh nothing.

``masked_lm_step_share`` carries the masked-token count of the optimizer step each batch
belongs to, so that a loss over accumulated micro-batches is exactly the loss of the whole
step: the pipeline's ``batches_per_step`` consecutive batches (the micro-batches of all the
replicas it serves, in one optimizer step) are one group whose summed ``masked_lm_weights``,
``T``, is split evenly over the group's batches, on the first example of each batch (the
others 0). Summed over the global batch of one micro-batch (all replicas, all pipelines) the
shares give ``N / k``: the step's masked-token count ``N`` over its ``k`` micro-batches
(`model.BertPretrainer` divides by this sum).

With ``dynamic_masking=True`` the records are the unmasked variant ``create_data`` writes with
``--dynamic_masking`` (no ``masked_lm_*`` features), and every batch gets fresh 80/10/10 masks
from vectorized TensorFlow ops (``masking.mask_token_batch``), so each epoch sees different masks.
"""

import tensorflow as tf

from keras_largebatch import input_order
from keras_largebatch._checks import check_bool, check_integer, check_optional_integer
from keras_largebatch._file_patterns import resolve_record_files
from keras_largebatch.bert.data import masking, records
from keras_largebatch.bert.data.masking import mask_token_batch  # noqa: F401 (public here too)
from keras_largebatch.bert.data.records import FEATURE_ALIASES, MASKED_LM_FEATURES  # noqa: F401

# Dynamic masks are seeded by (seed, batch number x this + pipeline id).
_MAX_PIPELINES = 2**16


def make_pretraining_dataset(
    file_patterns,
    seq_length,
    max_predictions_per_seq,
    batch_size_per_replica,
    is_training=True,
    input_context=None,
    seed=None,
    shuffle_buffer_size=10000,
    cycle_length=8,
    dynamic_masking=False,
    vocabulary=None,
    masked_lm_prob=masking.DEFAULT_MASKED_LM_PROB,
    start_batch=0,
    record_counts=None,
    batches_per_step=1,
    whole_word_mask=False,
):
    """Returns a ``tf.data.Dataset`` of pretraining batches (structure in the module docstring).

    For ``strategy.distribute_datasets_from_function(lambda ctx: make_pretraining_dataset(...,
    input_context=ctx))``: each input pipeline reads its own subset of the files (every
    ``num_input_pipelines``-th file), so replicas never see the same example.

    Training is endless: every epoch reads the pipeline's files in an order drawn from
    ``(seed, epoch)``, ``cycle_length`` files at a time interleaved record by record, and
    permutes each window of ``shuffle_buffer_size`` records
    (`keras_largebatch.input_order.shuffled_records`); the stream starts at batch
    ``start_batch`` without reading the batches before it, so the same arguments give the same
    batches from any start. Evaluation (``is_training=False``) reads the files once, in order
    (every ``num_input_pipelines``-th record of each file when there are fewer files than
    pipelines). Both batch with ``drop_remainder=True`` so that shapes are static.

    Args:
        file_patterns: a glob pattern or path, or a list of them.
        seq_length: length of ``input_ids`` in the records.
        max_predictions_per_seq: length of the ``masked_lm_*`` features (with dynamic masking,
            the number of masked positions per sequence at most).
        batch_size_per_replica: examples per batch of one input pipeline.
        is_training: shuffle and repeat; otherwise one deterministic pass.
        input_context: a ``tf.distribute.InputContext`` or None (one pipeline).
        seed: seed of the training order and of dynamic masks; None draws one, so the order
            then differs between calls.
        shuffle_buffer_size: records in each permuted window (training).
        cycle_length: files read at once (training).
        dynamic_masking: mask every batch anew; the records must be the unmasked variant.
        vocabulary: list of tokens or vocabulary file, required with ``dynamic_masking``.
        masked_lm_prob: fraction of tokens to mask with ``dynamic_masking``.
        start_batch: the training batch of this pipeline to start at.
        record_counts: a ``files -> [records of each]`` function, such as a
            `keras_largebatch.input_order.RecordCounts` (which caches them); None counts the
            pipeline's files by reading them once.
        batches_per_step: this pipeline's batches in one optimizer step (its replicas times
            the gradient accumulation steps), over which ``masked_lm_step_share`` is counted;
            ``start_batch`` must be a multiple of it.
        whole_word_mask: with ``dynamic_masking``, mask whole words (a token and its ``##``
            continuations), never part of one (`masking.whole_word_positions`).

    Raises:
        TypeError: for an argument of the wrong type.
        ValueError: before any training, when no file matches a pattern, a file's first record
            lacks a feature or has a wrong length, the training files do not divide evenly
            over the input pipelines, or the arguments are out of range.
    """
    records.check_lengths(seq_length, max_predictions_per_seq)
    for argument, value in (
        ("batch_size_per_replica", batch_size_per_replica),
        ("shuffle_buffer_size", shuffle_buffer_size),
        ("cycle_length", cycle_length),
    ):
        check_integer(argument, value, low=1)
    check_integer("start_batch", start_batch, low=0)
    check_integer("batches_per_step", batches_per_step, low=1)
    if start_batch % batches_per_step:
        raise ValueError(
            f"start_batch={start_batch} must be a multiple of batches_per_step="
            f"{batches_per_step}: a stream starts at an optimizer step"
        )
    masking.check_masked_lm_prob(masked_lm_prob)
    check_bool("is_training", is_training)
    check_bool("dynamic_masking", dynamic_masking)
    check_bool("whole_word_mask", whole_word_mask)
    if whole_word_mask and not dynamic_masking:
        raise ValueError(
            "whole_word_mask=True masks in the pipeline, which needs dynamic_masking=True; "
            "records masked when written take create-data --whole-word-mask instead"
        )
    check_optional_integer("seed", seed)
    files = resolve_record_files(file_patterns)
    dynamic_masker = None
    if dynamic_masking:
        if vocabulary is None:
            raise ValueError(
                "dynamic_masking=True needs vocabulary (a token list or vocabulary file), got None"
            )
        dynamic_masker = masking.DynamicMasking.from_vocabulary(
            vocabulary, masked_lm_prob, max_predictions_per_seq, whole_word_mask
        )
    feature_names = check_record_file(
        files[0], seq_length, max_predictions_per_seq, dynamic_masking
    )
    for path in files[1:]:
        names = check_record_file(path, seq_length, max_predictions_per_seq, dynamic_masking)
        # One parser reads every file, so the spellings must agree.
        if names != feature_names:
            raise ValueError(
                f"record file {path!r} names its features {names}, but {files[0]!r} names them "
                f"{feature_names}; use one spelling for all files"
            )
    num_pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline_id = input_context.input_pipeline_id if input_context else 0
    if seed is None:
        seed = int(tf.random.uniform([], maxval=2**62, dtype=tf.int64))

    if is_training:
        own_files = input_order.pipeline_files(files, num_pipelines, pipeline_id)
        counts = (record_counts or input_order.count_records)(own_files)
        dataset = input_order.shuffled_records(
            own_files,
            counts,
            seed,
            start=start_batch * batch_size_per_replica,
            cycle_length=cycle_length,
            window_size=shuffle_buffer_size,
        )
    else:
        dataset = _evaluation_records(files, num_pipelines, pipeline_id)
    # Parsing whole batches with one parse_example call is several times faster than per record.
    dataset = dataset.batch(batch_size_per_replica, drop_remainder=True)
    if is_training:
        dataset = dataset.map(lambda batch, epochs: batch)  # a batch's epochs: not needed here
    parse = _make_parser(feature_names, seq_length, max_predictions_per_seq, dynamic_masking)
    if dynamic_masker is None:
        dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    else:
        if is_training:
            # The batch's number in the stream and the pipeline seed its stateless mask draws:
            # reproducible from any start, different for every batch and pipeline.
            batch_seeds = tf.data.Dataset.range(start_batch, 2**62).map(
                lambda index: tf.stack(
                    [tf.constant(seed, tf.int64), index * _MAX_PIPELINES + pipeline_id]
                )
            )
        else:
            # One random value per batch, with the pipeline id: new masks on every pass over
            # the data (rerandomized when Keras starts a new iterator each epoch).
            batch_seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).map(
                lambda value: tf.stack([value, tf.constant(pipeline_id, tf.int64)])
            )
        dataset = tf.data.Dataset.zip((dataset, batch_seeds)).map(
            lambda serialized, batch_seed: dynamic_masker(parse(serialized), batch_seed),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
    dataset = dataset.batch(batches_per_step, drop_remainder=True)
    dataset = dataset.map(_with_step_share, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    return dataset.prefetch(tf.data.AUTOTUNE)


def _with_step_share(features, labels, sample_weights):
    """A group of one step's batches (``[batches_per_step, batch, ...]`` tensors) with
    ``masked_lm_step_share``: the group's masked-token count over its batches, on the first
    example of each batch."""
    weights = sample_weights["masked_lm"]
    batches, batch_size = tf.shape(weights)[0], tf.shape(weights)[1]
    share = tf.reduce_sum(weights) / tf.cast(batches, tf.float32)
    first_example = tf.one_hot(tf.zeros([batches], tf.int32), batch_size, dtype=tf.float32)
    sample_weights = dict(sample_weights, masked_lm_step_share=share * first_example)
    return features, labels, sample_weights


def _evaluation_records(files, num_pipelines, pipeline_id):
    """One pass over a pipeline's records in order: its files, or, with fewer files than
    pipelines, every ``num_pipelines``-th record of each."""
    dataset = tf.data.Dataset.from_tensor_slices(files)
    shard_records = len(files) < num_pipelines
    if num_pipelines > 1 and not shard_records:
        dataset = dataset.shard(num_pipelines, pipeline_id)

    def read_file(path):
        records = tf.data.TFRecordDataset(path)
        return records.shard(num_pipelines, pipeline_id) if shard_records else records

    return dataset.interleave(read_file, cycle_length=1)


def check_record_file(path, seq_length, max_predictions_per_seq, dynamic_masking=False):
    """Reads the first record of ``path`` and checks it against the schema.

    Returns:
        ``(input_ids_name, segment_ids_name)``: the spellings this file uses.

    Raises:
        ValueError: naming the file and the feature that is missing, has the wrong type, or has
            the wrong number of values.
    """
    first = list(tf.data.TFRecordDataset(path).take(1).as_numpy_iterator())
    if not first:
        raise ValueError(f"record file {path!r} contains no records")
    try:
        features = tf.train.Example.FromString(first[0]).features.feature
    except Exception as error:  # protobuf's DecodeError is not importable from one stable place
        raise ValueError(
            f"record file {path!r}: first record is not a tf.train.Example ({error})"
        ) from error

    source = f"record file {path!r}"
    names = records.feature_spellings(features, source)
    has_masked_lm = any(name in features for name in MASKED_LM_FEATURES)
    if dynamic_masking and has_masked_lm:
        raise ValueError(
            f"{source} holds masked records (it has masked_lm_* features), but "
            "dynamic_masking=True needs unmasked ones: write them with create_data "
            "--dynamic_masking, or pass dynamic_masking=False"
        )
    if not dynamic_masking and not has_masked_lm:
        raise ValueError(
            f"{source} lacks masked_lm_positions, masked_lm_ids and masked_lm_weights: it holds "
            "unmasked records; pass dynamic_masking=True with a vocabulary to mask them while "
            "reading"
        )
    records.check_example_features(
        features, seq_length, max_predictions_per_seq, not dynamic_masking, names, source
    )
    return names


def _make_parser(feature_names, seq_length, max_predictions_per_seq, dynamic_masking):
    """A function from a batch of serialized records to ``(features, labels, sample_weights)``."""
    input_ids_name, segment_ids_name = feature_names
    spec = records.parsing_spec(
        seq_length, max_predictions_per_seq, not dynamic_masking, feature_names
    )

    def parse(serialized):
        # TPUs have no int64 arithmetic to speak of; every id fits in int32.
        record = {
            name: tf.cast(value, tf.int32) if value.dtype == tf.int64 else value
            for name, value in tf.io.parse_example(serialized, spec).items()
        }
        next_sentence = record["next_sentence_labels"][:, 0]
        features = {
            "token_ids": record[input_ids_name],
            "segment_ids": record[segment_ids_name],
            "padding_mask": record["input_mask"],
        }
        labels = {"next_sentence": next_sentence}
        sample_weights = {"next_sentence": tf.ones_like(next_sentence, tf.float32)}
        if not dynamic_masking:
            features["mask_positions"] = record["masked_lm_positions"]
            labels["masked_lm"] = record["masked_lm_ids"]
            sample_weights["masked_lm"] = record["masked_lm_weights"]
        return features, labels, sample_weights

    return parse
