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
==============================  =======  ========================  ============================

The records follow the schema of ``records``. The feature names are those of keras-hub's
``BertBackbone`` inputs plus ``BertMaskedLM``'s ``mask_positions``; a model with outputs named
``masked_lm`` (logits ``[batch, max_predictions, vocabulary_size]``) and ``next_sentence``
(logits ``[batch, 2]``) trains on these batches with sparse categorical cross-entropy losses,
and the padded predictions weigh nothing.

With ``dynamic_masking=True`` the records are the unmasked variant ``create_data`` writes with
``--dynamic_masking`` (no ``masked_lm_*`` features), and every batch gets fresh 80/10/10 masks
from vectorized TensorFlow ops, so each epoch sees different masks.
"""

import dataclasses
import os

import tensorflow as tf

from keras_largebatch._file_patterns import resolve_file_patterns
from keras_largebatch.bert import records
from keras_largebatch.bert import vocab as vocab_lib
from keras_largebatch.bert.records import FEATURE_ALIASES, MASKED_LM_FEATURES  # noqa: F401


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
    masked_lm_prob=0.15,
):
    """Returns a ``tf.data.Dataset`` of pretraining batches (structure in the module docstring).

    For ``strategy.distribute_datasets_from_function(lambda ctx: make_pretraining_dataset(...,
    input_context=ctx))``: each input pipeline reads its own subset of the files (every
    ``num_input_pipelines``-th file, or every ``num_input_pipelines``-th record of each file when
    there are fewer files than pipelines), so replicas never see the same example.

    Training reads files in parallel without a fixed order, shuffles, and repeats forever;
    evaluation (``is_training=False``) reads the files once, in order. Both batch with
    ``drop_remainder=True`` so that shapes are static.

    Args:
        file_patterns: a glob pattern or path, or a list of them.
        seq_length: length of ``input_ids`` in the records.
        max_predictions_per_seq: length of the ``masked_lm_*`` features (with dynamic masking,
            the number of masked positions per sequence at most).
        batch_size_per_replica: examples per batch of one input pipeline.
        is_training: shuffle and repeat; otherwise one deterministic pass.
        input_context: a ``tf.distribute.InputContext`` or None (one pipeline).
        seed: seed for file order, shuffling and dynamic masks; None is nondeterministic. Even
            with a seed, parallel reading makes the training order vary between runs.
        shuffle_buffer_size: examples in the shuffle buffer.
        cycle_length: files read at once.
        dynamic_masking: mask every batch anew; the records must be the unmasked variant.
        vocabulary: list of tokens or vocabulary file, required with ``dynamic_masking``.
        masked_lm_prob: fraction of tokens to mask with ``dynamic_masking``.

    Raises:
        ValueError: before any training, when no file matches a pattern, a file's first record
            lacks a feature or has a wrong length, or the arguments are out of range.
    """
    _check_arguments(seq_length, max_predictions_per_seq, batch_size_per_replica, masked_lm_prob,
                     shuffle_buffer_size, cycle_length)
    files = resolve_record_files(file_patterns)
    masking = None
    if dynamic_masking:
        if vocabulary is None:
            raise ValueError(
                "dynamic_masking=True needs vocabulary (a token list or vocabulary file), got None"
            )
        masking = _DynamicMasking.from_vocabulary(
            vocabulary, masked_lm_prob, max_predictions_per_seq
        )
    feature_names = check_record_file(files[0], seq_length, max_predictions_per_seq,
                                      dynamic_masking)
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

    dataset = tf.data.Dataset.from_tensor_slices(files)
    shard_records = len(files) < num_pipelines
    if num_pipelines > 1 and not shard_records:
        dataset = dataset.shard(num_pipelines, pipeline_id)
    if is_training:
        dataset = dataset.shuffle(len(files), seed=seed, reshuffle_each_iteration=True).repeat()

    def read_file(path):
        records = tf.data.TFRecordDataset(path)
        # Sharding inside each file (not after interleaving) keeps the split disjoint even though
        # the interleaved order is not deterministic.
        return records.shard(num_pipelines, pipeline_id) if shard_records else records

    dataset = dataset.interleave(
        read_file,
        cycle_length=min(cycle_length, len(files)) if is_training else 1,
        num_parallel_calls=tf.data.AUTOTUNE if is_training else None,
        deterministic=False if is_training else None,
    )
    if is_training:
        dataset = dataset.shuffle(shuffle_buffer_size, seed=seed)
    # Parsing whole batches with one parse_example call is several times faster than per record.
    dataset = dataset.batch(batch_size_per_replica, drop_remainder=True)
    parse = _make_parser(feature_names, seq_length, max_predictions_per_seq, dynamic_masking)
    if masking is None:
        dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    else:
        # One random value per batch, paired with the pipeline id, seeds the stateless mask
        # draws: reproducible for a seed, different for every batch and pipeline, and for every
        # pass over the data (rerandomized when Keras starts a new iterator each epoch).
        batch_seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).map(
            lambda value: tf.stack([value, tf.constant(pipeline_id, tf.int64)])
        )
        dataset = tf.data.Dataset.zip((dataset, batch_seeds)).map(
            lambda serialized, batch_seed: masking(parse(serialized), batch_seed),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
    return dataset.prefetch(tf.data.AUTOTUNE)


def _check_arguments(seq_length, max_predictions_per_seq, batch_size_per_replica, masked_lm_prob,
                     shuffle_buffer_size, cycle_length):
    if seq_length < 1:
        raise ValueError(f"seq_length must be >= 1, got {seq_length}")
    if not 1 <= max_predictions_per_seq <= seq_length:
        raise ValueError(
            f"max_predictions_per_seq must be in [1, seq_length={seq_length}], "
            f"got {max_predictions_per_seq}"
        )
    if batch_size_per_replica < 1:
        raise ValueError(f"batch_size_per_replica must be >= 1, got {batch_size_per_replica}")
    if not 0.0 < masked_lm_prob < 1.0:
        raise ValueError(f"masked_lm_prob must be in (0, 1), got {masked_lm_prob}")
    if shuffle_buffer_size < 1:
        raise ValueError(f"shuffle_buffer_size must be >= 1, got {shuffle_buffer_size}")
    if cycle_length < 1:
        raise ValueError(f"cycle_length must be >= 1, got {cycle_length}")


def resolve_record_files(file_patterns):
    """Expands record file patterns (``resolve_file_patterns``): sorted, each file once; raises
    ValueError naming a pattern that matches none."""
    return sorted(set(resolve_file_patterns(file_patterns, "file_patterns", "record")))


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
        raise ValueError(f"record file {path!r}: first record is not a tf.train.Example "
                         f"({error})") from error

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
    records.check_example_features(features, seq_length, max_predictions_per_seq,
                                   not dynamic_masking, names, source)
    return names


def _make_parser(feature_names, seq_length, max_predictions_per_seq, dynamic_masking):
    """A function from a batch of serialized records to ``(features, labels, sample_weights)``."""
    input_ids_name, segment_ids_name = feature_names
    spec = records.parsing_spec(seq_length, max_predictions_per_seq, not dynamic_masking,
                                feature_names)

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


@dataclasses.dataclass(frozen=True)
class _DynamicMasking:
    """Masks a parsed batch of unmasked sequences the way ``create_data`` does, in TF ops."""

    mask_id: int
    protected_ids: tuple
    replacement_ids: tuple
    masked_lm_prob: float
    max_predictions_per_seq: int

    @classmethod
    def from_vocabulary(cls, vocabulary, masked_lm_prob, max_predictions_per_seq):
        if isinstance(vocabulary, (str, os.PathLike)):
            vocabulary = vocab_lib.load_vocabulary(os.fspath(vocabulary))
        else:
            vocab_lib.check_vocabulary(list(vocabulary))
        special = vocab_lib.special_token_ids(vocabulary)
        return cls(
            mask_id=special[vocab_lib.MASK_TOKEN],
            protected_ids=(special[vocab_lib.CLS_TOKEN], special[vocab_lib.SEP_TOKEN]),
            replacement_ids=tuple(vocab_lib.replacement_token_ids(vocabulary)),
            masked_lm_prob=masked_lm_prob,
            max_predictions_per_seq=max_predictions_per_seq,
        )

    def __call__(self, batch, seed):
        features, labels, sample_weights = batch
        masked_token_ids, positions, original_ids, weights = mask_token_batch(
            features["token_ids"], features["padding_mask"], seed, self.max_predictions_per_seq,
            self.masked_lm_prob, self.mask_id, self.protected_ids, self.replacement_ids,
        )
        features = {**features, "token_ids": masked_token_ids, "mask_positions": positions}
        return (features, {**labels, "masked_lm": original_ids},
                {**sample_weights, "masked_lm": weights})


def mask_token_batch(token_ids, padding_mask, seed, max_predictions_per_seq, masked_lm_prob,
                     mask_id, protected_ids, replacement_ids):
    """80/10/10 masking of a batch of ``[CLS] A [SEP] B [SEP]`` sequences, static shapes only.

    Per sequence with ``n = sum(padding_mask)`` tokens, ``k = min(max_predictions_per_seq,
    max(1, round(n * masked_lm_prob)))`` positions are drawn uniformly without replacement among
    the real tokens that are not ``protected_ids`` (the top ``k`` of uniform scores); each becomes
    ``mask_id`` with probability 0.8, a uniform draw from ``replacement_ids`` with 0.1, and stays
    with 0.1. ``round`` halves to even, like Python's in ``create_data``.

    Args:
        token_ids, padding_mask: int32 ``[batch, seq_length]``.
        seed: int ``[2]`` seed of the stateless random ops.

    Returns:
        ``(masked_token_ids, positions, original_ids, weights)``: positions ascending, padded
        with 0; original ids padded with 0; weights 1.0 for real predictions, 0.0 for padding.
    """
    batch_size, seq_length = token_ids.shape
    score_seed, choice_seed, replacement_seed = tf.unstack(
        tf.random.experimental.stateless_split(seed, 3)
    )
    is_protected = tf.reduce_any(
        token_ids[:, :, None] == tf.constant(protected_ids, token_ids.dtype), axis=-1
    )
    is_candidate = tf.logical_and(padding_mask > 0, tf.logical_not(is_protected))
    num_tokens = tf.reduce_sum(tf.cast(padding_mask > 0, tf.float64), axis=1)
    num_to_predict = tf.minimum(
        tf.cast(tf.maximum(tf.round(num_tokens * masked_lm_prob), 1.0), tf.int32),
        tf.minimum(max_predictions_per_seq, tf.reduce_sum(tf.cast(is_candidate, tf.int32), 1)),
    )
    # Non-candidates score -1, below every uniform score, so top_k picks candidates first.
    scores = tf.where(
        is_candidate, tf.random.stateless_uniform([batch_size, seq_length], score_seed), -1.0
    )
    _, top_positions = tf.math.top_k(scores, k=max_predictions_per_seq)
    is_chosen = tf.range(max_predictions_per_seq)[None, :] < num_to_predict[:, None]
    # Unchosen slots sort last as seq_length, then become padding.
    positions = tf.sort(tf.where(is_chosen, top_positions, seq_length), axis=1)
    is_real = positions < seq_length
    positions = tf.where(is_real, positions, 0)
    original_ids = tf.where(is_real, tf.gather(token_ids, positions, batch_dims=1), 0)

    choice = tf.random.stateless_uniform([batch_size, max_predictions_per_seq], choice_seed)
    random_ids = tf.gather(
        tf.constant(replacement_ids, token_ids.dtype),
        tf.random.stateless_uniform(
            [batch_size, max_predictions_per_seq], replacement_seed,
            minval=0, maxval=len(replacement_ids), dtype=tf.int32,
        ),
    )
    new_ids = tf.where(choice < 0.8, mask_id, tf.where(choice < 0.9, random_ids, original_ids))
    # A one-hot sum instead of a scatter: padding slots all point at position 0, and a scatter
    # with repeated indices has no defined winner.
    placement = tf.one_hot(positions, seq_length, dtype=token_ids.dtype) * tf.cast(
        is_real, token_ids.dtype
    )[:, :, None]
    is_masked = tf.reduce_sum(placement, axis=1) > 0
    masked_token_ids = tf.where(
        is_masked, tf.reduce_sum(placement * new_ids[:, :, None], axis=1), token_ids
    )
    return masked_token_ids, positions, original_ids, tf.cast(is_real, tf.float32)
