"""The BERT pretraining record, defined once for the writer, the checker and the parser.

One ``tf.train.Example`` per sentence pair, in the schema of google-research/bert's
``create_pretraining_data.py`` (Devlin et al., "BERT: Pre-training of Deep Bidirectional
Transformers for Language Understanding", arXiv:1810.04805):

=====================  =======  ===========================  ==================================
feature                type     length                       meaning
=====================  =======  ===========================  ==================================
input_ids              int64    seq_length                   token ids, 0-padded
input_mask             int64    seq_length                   1 real token, 0 padding
segment_ids            int64    seq_length                   0 segment A ([CLS] A [SEP]), 1 B
masked_lm_positions    int64    max_predictions_per_seq      masked positions, ascending, 0-padded
masked_lm_ids          int64    max_predictions_per_seq      original ids there, 0-padded
masked_lm_weights      float    max_predictions_per_seq      1.0 real prediction, 0.0 padding
next_sentence_labels   int64    1                            1 random next, 0 actual next
=====================  =======  ===========================  ==================================

TF Model Garden (``official/nlp/data/pretrain_dataloader.py``) may spell ``input_ids`` and
``segment_ids`` as ``input_word_ids`` and ``input_type_ids``; readers accept either. Unmasked
records, for masking while reading, have no ``masked_lm_*`` features.
"""

import dataclasses

import tensorflow as tf

from keras_largebatch._checks import check_integer

# tf.train.Feature kind -> (its value list, the dtype a parser reads it as).
_KINDS = {
    "int64_list": (tf.train.Int64List, tf.int64),
    "float_list": (tf.train.FloatList, tf.float32),
}
# What sets a feature's number of values: the argument of that name, or the schema itself.
SEQ_LENGTH = "seq_length"
MAX_PREDICTIONS = "max_predictions_per_seq"


@dataclasses.dataclass(frozen=True)
class RecordFeature:
    """One feature of the record: its ``tf.train.Feature`` kind and what sets its length."""

    name: str
    kind: str  # "int64_list" or "float_list"
    length: object  # SEQ_LENGTH, MAX_PREDICTIONS, or a fixed number of values
    aliases: tuple = ()  # other spellings a reader accepts

    def num_values(self, seq_length, max_predictions_per_seq):
        return {SEQ_LENGTH: seq_length, MAX_PREDICTIONS: max_predictions_per_seq}.get(
            self.length, self.length
        )

    @property
    def dtype(self):
        return _KINDS[self.kind][1]


FEATURES = (
    RecordFeature("input_ids", "int64_list", SEQ_LENGTH, aliases=("input_word_ids",)),
    RecordFeature("input_mask", "int64_list", SEQ_LENGTH),
    RecordFeature("segment_ids", "int64_list", SEQ_LENGTH, aliases=("input_type_ids",)),
    RecordFeature("masked_lm_positions", "int64_list", MAX_PREDICTIONS),
    RecordFeature("masked_lm_ids", "int64_list", MAX_PREDICTIONS),
    RecordFeature("masked_lm_weights", "float_list", MAX_PREDICTIONS),
    RecordFeature("next_sentence_labels", "int64_list", 1),
)
MASKED_LM_FEATURES = tuple(
    feature.name for feature in FEATURES if feature.length == MAX_PREDICTIONS
)
# Record feature name -> accepted spellings.
FEATURE_ALIASES = {
    feature.name: (feature.name, *feature.aliases) for feature in FEATURES if feature.aliases
}
DEFAULT_SPELLINGS = tuple(FEATURE_ALIASES)


def record_features(masked=True):
    """The features of a masked record, or of an unmasked one (no ``masked_lm_*``)."""
    return tuple(
        feature for feature in FEATURES if masked or feature.name not in MASKED_LM_FEATURES
    )


def check_lengths(
    seq_length, max_predictions_per_seq, seq_length_argument=SEQ_LENGTH, min_seq_length=1
):
    """Raises unless the two record lengths are integers with ``1 <= max_predictions_per_seq <=
    seq_length`` and ``seq_length >= min_seq_length``; ``seq_length_argument`` names the first
    in the messages."""
    check_integer(seq_length_argument, seq_length)
    check_integer(MAX_PREDICTIONS, max_predictions_per_seq)
    if seq_length < min_seq_length:
        raise ValueError(f"{seq_length_argument} must be >= {min_seq_length}, got {seq_length}")
    if not 1 <= max_predictions_per_seq <= seq_length:
        raise ValueError(
            f"{MAX_PREDICTIONS} must be in [1, {seq_length_argument}={seq_length}], "
            f"got {max_predictions_per_seq}"
        )


def serialize_example(values, seq_length, max_predictions_per_seq):
    """Pads each feature of ``values`` (name -> list) with zeros to its length; returns the
    serialized ``tf.train.Example``. ``values`` holds every feature of a masked or an unmasked
    record."""
    feature = {}
    for record_feature in record_features(masked=MASKED_LM_FEATURES[0] in values):
        value = list(values[record_feature.name])
        value += [0] * (record_feature.num_values(seq_length, max_predictions_per_seq) - len(value))
        feature[record_feature.name] = tf.train.Feature(
            **{record_feature.kind: _KINDS[record_feature.kind][0](value=value)}
        )
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    # Map fields serialize in hash order, which differs between processes; sorting the keys
    # keeps the bytes independent of which process wrote them.
    return example.SerializeToString(deterministic=True)


def feature_spellings(feature_map, source):
    """``(input_ids name, segment_ids name)`` as ``feature_map`` (an Example's features) spells
    them; raises ValueError, naming ``source``, when one is missing."""
    spellings = []
    for name in DEFAULT_SPELLINGS:
        found = [candidate for candidate in FEATURE_ALIASES[name] if candidate in feature_map]
        if not found:
            accepted = " or ".join(map(repr, FEATURE_ALIASES[name]))
            raise ValueError(f"{source} lacks feature {accepted}; it has {sorted(feature_map)}")
        spellings.append(found[0])
    return tuple(spellings)


def _name_in_file(feature, spellings):
    return dict(zip(DEFAULT_SPELLINGS, spellings)).get(feature.name, feature.name)


def check_example_features(
    feature_map, seq_length, max_predictions_per_seq, masked, spellings, source
):
    """Raises ValueError, naming ``source``, for a feature of the schema that ``feature_map``
    lacks, holds as another kind, or holds with another number of values."""
    for feature in record_features(masked):
        name = _name_in_file(feature, spellings)
        if name not in feature_map:
            raise ValueError(f"{source} lacks feature {name!r}; it has {sorted(feature_map)}")
        actual_kind = feature_map[name].WhichOneof("kind")
        if actual_kind != feature.kind:
            raise ValueError(
                f"{source}: feature {name!r} is a {actual_kind}, expected a {feature.kind}"
            )
        actual_length = len(getattr(feature_map[name], feature.kind).value)
        expected_length = feature.num_values(seq_length, max_predictions_per_seq)
        if actual_length != expected_length:
            argument = f"{feature.length}=" if isinstance(feature.length, str) else ""
            raise ValueError(
                f"{source}: feature {name!r} has {actual_length} values, expected "
                f"{expected_length} ({argument}{expected_length})"
            )


def parsing_spec(seq_length, max_predictions_per_seq, masked, spellings=DEFAULT_SPELLINGS):
    """The ``tf.io.parse_example`` spec of the record, keyed by the spellings the files use."""
    return {
        _name_in_file(feature, spellings): tf.io.FixedLenFeature(
            [feature.num_values(seq_length, max_predictions_per_seq)], feature.dtype
        )
        for feature in record_features(masked)
    }
