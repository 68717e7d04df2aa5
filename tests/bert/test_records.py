"""The record schema against records written field by field by hand (tests/support)."""

import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch.bert.data import defaults, records
from tests.support.bert_records import synthetic_example

SEQ_LENGTH = 16
MAX_PREDICTIONS = 4


def _hand_written(seed=0):
    return synthetic_example(np.random.default_rng(seed), SEQ_LENGTH, MAX_PREDICTIONS, 64)


def _decoded(serialized):
    """name -> (kind, values) by tf.train.Example alone."""
    features = tf.train.Example.FromString(serialized).features.feature
    return {
        name: (feature.WhichOneof("kind"), list(getattr(feature, feature.WhichOneof("kind")).value))
        for name, feature in features.items()
    }


def test_hand_written_record_parses_with_the_schema():
    serialized = _hand_written()
    decoded = _decoded(serialized)
    spec = records.parsing_spec(SEQ_LENGTH, MAX_PREDICTIONS, masked=True)
    assert sorted(spec) == sorted(decoded)
    parsed = tf.io.parse_single_example(serialized, spec)
    for name, (_, values) in decoded.items():
        np.testing.assert_array_equal(parsed[name].numpy(), values)
    assert parsed["masked_lm_weights"].dtype == tf.float32 and parsed["input_ids"].dtype == tf.int64
    features = tf.train.Example.FromString(serialized).features.feature
    spellings = records.feature_spellings(features, "hand")
    assert spellings == ("input_ids", "segment_ids")
    records.check_example_features(features, SEQ_LENGTH, MAX_PREDICTIONS, True, spellings, "hand")


def test_model_garden_spellings_parse_and_check():
    example = tf.train.Example.FromString(_hand_written())
    feature_map = example.features.feature
    for name, garden_name in (("input_ids", "input_word_ids"), ("segment_ids", "input_type_ids")):
        feature_map[garden_name].CopyFrom(feature_map[name])
        del feature_map[name]
    spellings = records.feature_spellings(feature_map, "garden")
    assert spellings == ("input_word_ids", "input_type_ids")
    records.check_example_features(
        feature_map, SEQ_LENGTH, MAX_PREDICTIONS, True, spellings, "garden"
    )
    spec = records.parsing_spec(SEQ_LENGTH, MAX_PREDICTIONS, True, spellings)
    parsed = tf.io.parse_single_example(example.SerializeToString(), spec)
    assert parsed["input_word_ids"].shape == [SEQ_LENGTH]


def test_serialize_example_pads_to_the_published_lengths():
    values = {
        "input_ids": [2, 7, 3, 8, 3],
        "input_mask": [1] * 5,
        "segment_ids": [0, 0, 0, 1, 1],
        "masked_lm_positions": [1, 3],
        "masked_lm_ids": [9, 10],
        "masked_lm_weights": [1.0, 1.0],
        "next_sentence_labels": [1],
    }
    decoded = _decoded(records.serialize_example(values, 8, 3))
    assert decoded == {
        "input_ids": ("int64_list", [2, 7, 3, 8, 3, 0, 0, 0]),
        "input_mask": ("int64_list", [1, 1, 1, 1, 1, 0, 0, 0]),
        "segment_ids": ("int64_list", [0, 0, 0, 1, 1, 0, 0, 0]),
        "masked_lm_positions": ("int64_list", [1, 3, 0]),
        "masked_lm_ids": ("int64_list", [9, 10, 0]),
        "masked_lm_weights": ("float_list", [1.0, 1.0, 0.0]),
        "next_sentence_labels": ("int64_list", [1]),
    }
    unmasked = {name: value for name, value in values.items() if not name.startswith("masked")}
    decoded = _decoded(records.serialize_example(unmasked, 8, 3))
    assert sorted(decoded) == ["input_ids", "input_mask", "next_sentence_labels", "segment_ids"]
    assert sorted(records.parsing_spec(8, 3, masked=False)) == sorted(decoded)


def test_check_names_the_feature_and_what_was_expected():
    features = tf.train.Example.FromString(_hand_written()).features.feature
    names = ("input_ids", "segment_ids")
    with pytest.raises(
        ValueError,
        match=r"src: feature 'masked_lm_positions' has 4 values, "
        r"expected 5 \(max_predictions_per_seq=5\)",
    ):
        records.check_example_features(features, SEQ_LENGTH, 5, True, names, "src")
    features["next_sentence_labels"].float_list.value.append(1.0)
    with pytest.raises(
        ValueError,
        match="src: feature 'next_sentence_labels' is a float_list, expected a int64_list",
    ):
        records.check_example_features(features, SEQ_LENGTH, MAX_PREDICTIONS, True, names, "src")
    del features["segment_ids"]
    with pytest.raises(ValueError, match="src lacks feature 'segment_ids' or 'input_type_ids'"):
        records.feature_spellings(features, "src")


def test_check_lengths():
    records.check_lengths(defaults.DEFAULT_MAX_SEQ_LENGTH, defaults.DEFAULT_MAX_PREDICTIONS_PER_SEQ)
    with pytest.raises(TypeError, match="seq_length must be an integer, got '128' of type str"):
        records.check_lengths("128", 20)
    with pytest.raises(TypeError, match="max_predictions_per_seq must be an integer, got 2.0"):
        records.check_lengths(128, 2.0)
    with pytest.raises(ValueError, match="max_seq_length must be >= 5, got 4"):
        records.check_lengths(4, 2, seq_length_argument="max_seq_length", min_seq_length=5)
    with pytest.raises(
        ValueError,
        match=r"max_predictions_per_seq must be in \[1, seq_length=8\], "
        "got 9",
    ):
        records.check_lengths(8, 9)
