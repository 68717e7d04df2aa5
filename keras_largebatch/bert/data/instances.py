"""Documents to sentence-pair instances, as google-research/bert's ``create_pretraining_data.py``.

Input text files hold one sentence per line and a blank line between documents. A document is
cut into instances like this:

* A target length of ``max_seq_length - 3`` tokens (with probability ``short_seq_prob`` a random
  length in ``[2, max_seq_length - 3]`` instead, so the model also sees short sequences).
* Sentences are gathered until they reach the target length; a random cut splits them into
  segment A and segment B. With probability 1/2 (always, if only one sentence was gathered)
  segment B is replaced by text starting at a random sentence of another document:
  ``next_sentence_labels = 1`` means "B is a random next", 0 means "B is the actual next".
  Unused sentences are put back for the next instance.
* The longer segment is trimmed one token at a time, from its front or back at random, until
  ``[CLS] A [SEP] B [SEP]`` fits in ``max_seq_length``.
* Unless ``dynamic_masking``, the tokens are masked (``masking.mask_tokens``).

Every random choice comes from the ``random.Random`` passed in.
"""

import dataclasses

import tensorflow as tf

from keras_largebatch._checks import check_bool, check_number
from keras_largebatch._file_patterns import resolve_file_patterns
from keras_largebatch.bert.data import masking, records
from keras_largebatch.bert.data.defaults import (
    DEFAULT_MAX_PREDICTIONS_PER_SEQ,
    DEFAULT_MAX_SEQ_LENGTH,
)

# google-research/bert's default for --short_seq_prob.
DEFAULT_SHORT_SEQ_PROB = 0.1
# Sentences per tokenizer call: large enough to amortize the TF call, small enough for memory.
TOKENIZE_BATCH_SIZE = 8192
# [CLS] A [SEP] B [SEP] with A and B at least one token each.
MIN_SEQ_LENGTH = 5


@dataclasses.dataclass(frozen=True)
class InstanceOptions:
    """How instances are cut and masked (see the module docstring)."""

    max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH
    max_predictions_per_seq: int = DEFAULT_MAX_PREDICTIONS_PER_SEQ
    masked_lm_prob: float = masking.DEFAULT_MASKED_LM_PROB
    short_seq_prob: float = DEFAULT_SHORT_SEQ_PROB
    dynamic_masking: bool = False
    whole_word_mask: bool = False

    def __post_init__(self):
        records.check_lengths(
            self.max_seq_length,
            self.max_predictions_per_seq,
            seq_length_argument="max_seq_length",
            min_seq_length=MIN_SEQ_LENGTH,
        )
        masking.check_masked_lm_prob(self.masked_lm_prob)
        check_number("short_seq_prob", self.short_seq_prob, low=0, high=1)
        check_bool("dynamic_masking", self.dynamic_masking)
        check_bool("whole_word_mask", self.whole_word_mask)
        if self.whole_word_mask and self.dynamic_masking:
            raise ValueError(
                "whole_word_mask=True masks the records as they are written, but "
                "dynamic_masking=True writes them unmasked: give whole_word_mask=True to the "
                "input pipeline instead (make_pretraining_dataset), which masks whole words "
                "anew every epoch"
            )


@dataclasses.dataclass(frozen=True)
class Instance:
    """One sentence pair, before padding: ``tokens`` is ``[CLS] A [SEP] B [SEP]`` (masked)."""

    tokens: list
    segment_ids: list
    is_random_next: bool
    masked_lm_positions: list
    masked_lm_ids: list


def resolve_input_files(input_files):
    """Expands paths and patterns (``resolve_file_patterns``), raising ValueError for one that
    matches nothing."""
    return resolve_file_patterns(input_files, "input_files", "input")


def read_documents(input_files):
    """Reads text files into documents, each a list of sentence strings.

    Args:
        input_files: paths or glob patterns (``gs://`` works through ``tf.io.gfile``); each file
            has one sentence per line and a blank line between documents.

    Returns:
        The non-empty documents of all files, files in the given order (patterns expanded in
        sorted order).
    """
    documents = []
    for path in resolve_input_files(input_files):
        sentences = []
        with tf.io.gfile.GFile(path, "r") as text_file:
            for line in text_file:
                line = line.strip()
                if line:
                    sentences.append(line)
                elif sentences:
                    documents.append(sentences)
                    sentences = []
        if sentences:
            documents.append(sentences)
    return documents


def tokenize_documents(documents, tokenizer):
    """Tokenizes every sentence; returns documents as lists of token-id lists.

    Sentences that tokenize to nothing and documents left empty are dropped.
    """
    sentences = [sentence for document in documents for sentence in document]
    token_ids = []
    for start in range(0, len(sentences), TOKENIZE_BATCH_SIZE):
        batch = tf.constant(sentences[start : start + TOKENIZE_BATCH_SIZE])
        token_ids.extend(list(map(int, ids)) for ids in tokenizer(batch))
    tokenized_documents = []
    position = 0
    for document in documents:
        tokenized = [ids for ids in token_ids[position : position + len(document)] if ids]
        position += len(document)
        if tokenized:
            tokenized_documents.append(tokenized)
    return tokenized_documents


def create_instances_from_document(documents, document_index, options, token_ids, rng):
    """Cuts ``documents[document_index]`` into sentence-pair instances (module docstring).

    ``token_ids`` is a ``masking.TokenIds``, ``rng`` a ``random.Random``.
    """
    document = documents[document_index]
    max_num_tokens = options.max_seq_length - 3
    target_length = max_num_tokens
    if rng.random() < options.short_seq_prob:
        target_length = rng.randint(2, max_num_tokens)
    instances = []
    chunk = []
    chunk_length = 0
    sentence_index = 0
    while sentence_index < len(document):
        chunk.append(document[sentence_index])
        chunk_length += len(document[sentence_index])
        if sentence_index == len(document) - 1 or chunk_length >= target_length:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = [token for sentence in chunk[:a_end] for token in sentence]
            if len(chunk) == 1 or rng.random() < 0.5:
                is_random_next = True
                tokens_b = _random_next_tokens(
                    documents, document_index, target_length - len(tokens_a), rng
                )
                # The sentences after the cut were not used; the next instance starts with them.
                sentence_index -= len(chunk) - a_end
            else:
                is_random_next = False
                tokens_b = [token for sentence in chunk[a_end:] for token in sentence]
            _truncate_pair(tokens_a, tokens_b, max_num_tokens, rng)
            tokens = [token_ids.cls_id, *tokens_a, token_ids.sep_id, *tokens_b, token_ids.sep_id]
            segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
            if options.dynamic_masking:
                positions, labels = [], []
            else:
                tokens, positions, labels = masking.mask_tokens(tokens, options, token_ids, rng)
            instances.append(Instance(tokens, segment_ids, is_random_next, positions, labels))
            chunk = []
            chunk_length = 0
        sentence_index += 1
    return instances


def _random_next_tokens(documents, document_index, target_length, rng):
    """At least ``target_length`` tokens (or a document's rest) from another random document."""
    # Drawing from the other documents directly avoids google-research/bert's retry loop, which
    # can fall back to the same document.
    other_index = rng.randrange(len(documents) - 1)
    if other_index >= document_index:
        other_index += 1
    other_document = documents[other_index]
    tokens = []
    for sentence in other_document[rng.randrange(len(other_document)) :]:
        tokens.extend(sentence)
        if len(tokens) >= target_length:
            break
    return tokens


def _truncate_pair(tokens_a, tokens_b, max_num_tokens, rng):
    """Trims the longer list in place, from the front or the back at random, until both fit."""
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        # Trimming both ends keeps the model from learning where truncation happens.
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def serialize_instance(instance, options):
    """Pads an instance to the record lengths and serializes it as a ``tf.train.Example``
    (``records``); without ``masked_lm_*`` features when ``options.dynamic_masking``."""
    values = {
        "input_ids": instance.tokens,
        "input_mask": [1] * len(instance.tokens),
        "segment_ids": instance.segment_ids,
        "next_sentence_labels": [int(instance.is_random_next)],
    }
    if not options.dynamic_masking:
        values["masked_lm_positions"] = instance.masked_lm_positions
        values["masked_lm_ids"] = instance.masked_lm_ids
        values["masked_lm_weights"] = [1.0] * len(instance.masked_lm_positions)
    return records.serialize_example(
        values, options.max_seq_length, options.max_predictions_per_seq
    )
