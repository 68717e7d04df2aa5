"""Small BERT pretraining record files written field by field with tf.train.Example.

An independent reference for the package's record schema: the features are spelled out here as
google-research/bert's ``create_pretraining_data.py`` writes them (input_ids, input_mask,
segment_ids: int64 of seq_length; masked_lm_positions, masked_lm_ids: int64 and
masked_lm_weights: float of max_predictions; next_sentence_labels: int64 of 1), not taken from
the package. For tests that train: random token ids over a small vocabulary, and a varying
number of masked positions per example so that the masked-LM weights differ between examples
(and between replicas).
"""

import numpy as np
import tensorflow as tf


def synthetic_example(rng, seq_length, max_predictions, vocabulary_size, drop=None, lengths=None):
    """One serialized example; ``drop`` leaves out a feature, ``lengths`` changes sizes."""
    length = int(rng.integers(max(6, seq_length // 2), seq_length + 1))
    input_ids = np.zeros(seq_length, np.int64)
    input_ids[:length] = rng.integers(5, vocabulary_size, length)
    split = int(rng.integers(2, length - 2))
    input_ids[0], input_ids[split], input_ids[length - 1] = 2, 3, 3
    segment_ids = np.zeros(seq_length, np.int64)
    segment_ids[split + 1 : length] = 1
    candidates = [position for position in range(1, length - 1) if position != split]
    count = int(rng.integers(1, max_predictions + 1))
    count = min(count, len(candidates))
    positions = np.zeros(max_predictions, np.int64)
    positions[:count] = np.sort(rng.choice(candidates, count, replace=False))
    weights = (np.arange(max_predictions) < count).astype(np.float32)
    labels = np.where(weights > 0, rng.integers(5, vocabulary_size, max_predictions), 0)
    values = {
        "input_ids": input_ids,
        "input_mask": (np.arange(seq_length) < length).astype(np.int64),
        "segment_ids": segment_ids,
        "masked_lm_positions": positions,
        "masked_lm_ids": labels,
        "masked_lm_weights": weights,
        "next_sentence_labels": np.array([rng.integers(0, 2)]),
    }
    feature = {}
    for name, value in values.items():
        if name == drop:
            continue
        value = value[: (lengths or {}).get(name, len(value))]
        if name == "masked_lm_weights":
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=value.tolist()))
        else:
            feature[name] = tf.train.Feature(
                int64_list=tf.train.Int64List(value=[int(v) for v in value])
            )
    # Deterministic, as the package's writer is: the same records in every process.
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString(deterministic=True)


def write_records(
    path,
    num_examples,
    seq_length=16,
    max_predictions=4,
    vocabulary_size=64,
    seed=0,
    drop=None,
    lengths=None,
):
    """Writes ``num_examples`` synthetic examples to the TFRecord file ``path``; returns it."""
    rng = np.random.default_rng(seed)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for _ in range(num_examples):
            writer.write(
                synthetic_example(
                    rng,
                    seq_length,
                    max_predictions,
                    vocabulary_size,
                    drop=drop,
                    lengths=lengths,
                )
            )
    return str(path)
