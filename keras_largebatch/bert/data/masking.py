"""Masked-LM masking, once for writing records and for masking them while reading.

The rule of google-research/bert's ``create_pretraining_data.py`` (Devlin et al., "BERT:
Pre-training of Deep Bidirectional Transformers for Language Understanding", arXiv:1810.04805).
A sequence ``[CLS] A [SEP] B [SEP]`` of ``n`` tokens gets

    num_to_predict = min(max_predictions_per_seq, max(1, round(n * masked_lm_prob)))

positions (fewer only when fewer tokens are neither [CLS] nor [SEP]), drawn uniformly among the
tokens that are neither; ``round`` halves to even, as Python's does. Each chosen token becomes
[MASK] with probability 0.8, a random non-special token with probability 0.1, and stays itself
with probability 0.1.

With whole-word masking (google-research/bert's ``--do_whole_word_mask``, behind its "whole
word masking" models) the candidates are words, not tokens: a token and the ``##``
continuations right after it. The words are taken in a random order and each is masked whole
while it fits in ``num_to_predict`` (a word that would pass it is skipped, so no word is ever
partly masked and the count can fall short of ``num_to_predict``); each masked token then gets
its own 80/10/10 draw.

``mask_tokens`` masks one id list with a ``random.Random`` (data creation, where the seed fixes
the bytes); ``mask_token_batch`` masks a batch with stateless TensorFlow ops and static shapes
(the input pipeline's dynamic masking).
"""

import dataclasses
import os

import numpy as np
import tensorflow as tf

from keras_largebatch._checks import check_bool, check_number
from keras_largebatch.bert.data import defaults
from keras_largebatch.bert.data import vocab as vocab_lib

# Stated in `defaults`, which the pretraining config reads without TensorFlow.
DEFAULT_MASKED_LM_PROB = defaults.DEFAULT_MASKED_LM_PROB
# The 80/10/10 rule for a uniform draw in [0, 1): [MASK] below MASK_BELOW, a random token
# below RANDOM_TOKEN_BELOW, the token itself above.
MASK_BELOW = 0.8
RANDOM_TOKEN_BELOW = 0.9


# num_to_predict's operations for tensors; tf.round halves to even, like Python's round.
TENSORFLOW_OPS = {
    "minimum": tf.minimum,
    "maximum": tf.maximum,
    "round_half_even": lambda value: tf.cast(tf.round(value), tf.int32),
}


@dataclasses.dataclass(frozen=True)
class TokenIds:
    """The vocabulary ids masking needs: [CLS], [SEP], [MASK] and the random replacements."""

    cls_id: int
    sep_id: int
    mask_id: int
    replacement_ids: tuple
    continuation_ids: frozenset = frozenset()

    @classmethod
    def from_vocabulary(cls, vocabulary):
        special = vocab_lib.special_token_ids(vocabulary)
        return cls(
            cls_id=special[vocab_lib.CLS_TOKEN],
            sep_id=special[vocab_lib.SEP_TOKEN],
            mask_id=special[vocab_lib.MASK_TOKEN],
            replacement_ids=tuple(vocab_lib.replacement_token_ids(vocabulary)),
            continuation_ids=frozenset(
                index for index, token in enumerate(vocabulary) if token.startswith("##")
            ),
        )

    @property
    def protected_ids(self):
        """Ids never masked."""
        return (self.cls_id, self.sep_id)


def check_masked_lm_prob(masked_lm_prob):
    """Raises unless ``masked_lm_prob`` is a number in (0, 1)."""
    check_number("masked_lm_prob", masked_lm_prob, low=0, high=1, low_open=True, high_open=True)


def num_to_predict(
    num_tokens,
    num_candidates,
    max_predictions_per_seq,
    masked_lm_prob,
    minimum=min,
    maximum=max,
    round_half_even=round,
):
    """Masked positions for a sequence (module docstring); Python numbers by default, int32
    tensors with ``**TENSORFLOW_OPS`` (``num_tokens`` then a float64 tensor)."""
    return minimum(
        minimum(max_predictions_per_seq, num_candidates),
        maximum(1, round_half_even(num_tokens * masked_lm_prob)),
    )


def mask_tokens(tokens, options, token_ids, rng):
    """Masks a ``[CLS] A [SEP] B [SEP]`` id list (module docstring).

    Args:
        tokens: the ids.
        options: has ``max_predictions_per_seq``, ``masked_lm_prob`` and ``whole_word_mask``
            (an ``InstanceOptions``).
        token_ids: a ``TokenIds``.
        rng: a ``random.Random``, the only source of randomness.

    Returns:
        ``(masked_tokens, positions, original_ids)`` with positions ascending.
    """
    candidates = [
        position for position, token in enumerate(tokens) if token not in token_ids.protected_ids
    ]
    count = num_to_predict(
        len(tokens), len(candidates), options.max_predictions_per_seq, options.masked_lm_prob
    )
    if options.whole_word_mask:
        positions = _whole_word_positions(tokens, token_ids, count, rng)
    else:
        positions = sorted(rng.sample(candidates, count))
    masked_tokens = list(tokens)
    for position in positions:
        draw = rng.random()
        if draw < MASK_BELOW:
            masked_tokens[position] = token_ids.mask_id
        elif draw < RANDOM_TOKEN_BELOW:
            masked_tokens[position] = rng.choice(token_ids.replacement_ids)
    return masked_tokens, positions, [tokens[position] for position in positions]


def _whole_word_positions(tokens, token_ids, count, rng):
    """Ascending positions of whole words, at most ``count`` of them (module docstring)."""
    words = []
    for position, token in enumerate(tokens):
        if token in token_ids.protected_ids:
            continue
        if token in token_ids.continuation_ids and words and words[-1][-1] == position - 1:
            words[-1].append(position)
        else:
            words.append([position])
    rng.shuffle(words)
    positions = []
    for word in words:
        if len(positions) >= count:
            break
        if len(positions) + len(word) <= count:
            positions.extend(word)
    return sorted(positions)


def mask_token_batch(
    token_ids,
    padding_mask,
    seed,
    max_predictions_per_seq,
    masked_lm_prob,
    mask_id,
    protected_ids,
    replacement_ids,
    continuation_ids=None,
):
    """Masks a batch of ``[CLS] A [SEP] B [SEP]`` sequences (module docstring), static shapes only.

    The ``n`` of a sequence is ``sum(padding_mask)``; its positions are the top
    ``num_to_predict`` of uniform scores over the real tokens not in ``protected_ids``, and a
    random token is a uniform draw from ``replacement_ids``. With ``continuation_ids`` (whole-word
    masking), the candidates are words, a token with the ``continuation_ids`` right after it
    (`whole_word_positions`).

    Args:
        token_ids: int32 ``[batch, seq_length]``.
        padding_mask: int32 ``[batch, seq_length]``, 1 for real tokens.
        seed: int ``[2]`` seed of the stateless random ops.
        continuation_ids: None for token masking, or the ids of ``##`` tokens (a collection)
            for whole-word masking.

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
    count = num_to_predict(
        tf.reduce_sum(tf.cast(padding_mask > 0, tf.float64), axis=1),
        tf.reduce_sum(tf.cast(is_candidate, tf.int32), 1),
        max_predictions_per_seq,
        masked_lm_prob,
        **TENSORFLOW_OPS,
    )
    if continuation_ids is None:
        # Non-candidates score -1, below every uniform score, so top_k picks candidates first.
        scores = tf.where(
            is_candidate, tf.random.stateless_uniform([batch_size, seq_length], score_seed), -1.0
        )
        _, top_positions = tf.math.top_k(scores, k=max_predictions_per_seq)
        is_chosen = tf.range(max_predictions_per_seq)[None, :] < count[:, None]
    else:
        chosen = whole_word_positions(token_ids, is_candidate, count, continuation_ids, score_seed)
        # The chosen positions, earliest first (scored seq_length - position), then the rest.
        scores = tf.where(chosen, seq_length - tf.range(seq_length)[None, :], -1)
        top_scores, top_positions = tf.math.top_k(scores, k=max_predictions_per_seq)
        is_chosen = top_scores > 0
    # Unchosen slots sort last as seq_length, then become padding.
    positions = tf.sort(tf.where(is_chosen, top_positions, seq_length), axis=1)
    is_real = positions < seq_length
    positions = tf.where(is_real, positions, 0)
    original_ids = tf.where(is_real, tf.gather(token_ids, positions, batch_dims=1), 0)

    draw = tf.random.stateless_uniform([batch_size, max_predictions_per_seq], choice_seed)
    random_ids = tf.gather(
        tf.constant(replacement_ids, token_ids.dtype),
        tf.random.stateless_uniform(
            [batch_size, max_predictions_per_seq],
            replacement_seed,
            minval=0,
            maxval=len(replacement_ids),
            dtype=tf.int32,
        ),
    )
    new_ids = tf.where(
        draw < MASK_BELOW, mask_id, tf.where(draw < RANDOM_TOKEN_BELOW, random_ids, original_ids)
    )
    # A one-hot sum instead of a scatter: padding slots all point at position 0, and a scatter
    # with repeated indices has no defined winner.
    placement = (
        tf.one_hot(positions, seq_length, dtype=token_ids.dtype)
        * tf.cast(is_real, token_ids.dtype)[:, :, None]
    )
    is_masked = tf.reduce_sum(placement, axis=1) > 0
    masked_token_ids = tf.where(
        is_masked, tf.reduce_sum(placement * new_ids[:, :, None], axis=1), token_ids
    )
    return masked_token_ids, positions, original_ids, tf.cast(is_real, tf.float32)


def whole_word_positions(token_ids, is_candidate, count, continuation_ids, seed):
    """Whole-word choice in TensorFlow ops, as `mask_tokens` makes it in Python
    (google-research/bert's ``create_masked_lm_predictions`` with ``do_whole_word_mask``):
    the words of a sequence (a candidate token with the continuation tokens right after it) in
    a random order, each taken whole while it fits in the sequence's ``count``, never in part.

    Returns:
        bool ``[batch, seq_length]``: the chosen positions.
    """
    batch_size, seq_length = token_ids.shape
    continuation_ids = sorted(continuation_ids)
    table_size = (continuation_ids[-1] + 1) if continuation_ids else 1
    table = np.zeros(table_size, dtype=bool)
    table[continuation_ids] = True
    in_table = token_ids < table_size
    is_continuation = tf.logical_and(
        in_table, tf.gather(tf.constant(table), tf.where(in_table, token_ids, 0))
    )
    follows_candidate = tf.pad(is_candidate[:, :-1], [[0, 0], [1, 0]])
    is_word_start = tf.logical_and(
        is_candidate, tf.logical_not(tf.logical_and(is_continuation, follows_candidate))
    )
    # Word index of every candidate (seq_length for the others: no word).
    word = tf.where(
        is_candidate, tf.cumsum(tf.cast(is_word_start, tf.int32), axis=1) - 1, seq_length
    )
    word_length = tf.reduce_sum(
        tf.one_hot(word, seq_length, dtype=tf.int32), axis=1
    )  # [batch, seq_length words]
    # A random order of the words (empty ones last: they never fit anything anyway).
    scores = tf.where(
        word_length > 0, tf.random.stateless_uniform([batch_size, seq_length], seed), -1.0
    )
    _, order = tf.math.top_k(scores, k=seq_length)
    ordered_length = tf.gather(word_length, order, batch_dims=1)

    def take(total, length):
        fits = tf.logical_and(length > 0, total + length <= count)
        return total + tf.where(fits, length, 0)

    totals = tf.scan(
        take, tf.transpose(ordered_length), initializer=tf.zeros([batch_size], tf.int32)
    )  # [words, batch]: the count taken after each word in the order
    before = tf.concat([tf.zeros([1, batch_size], tf.int32), totals[:-1]], axis=0)
    taken = tf.transpose(totals > before)  # [batch, words in the order]
    chosen_words = tf.reduce_any(
        tf.logical_and(
            tf.one_hot(order, seq_length, on_value=True, off_value=False), taken[:, :, None]
        ),
        axis=1,
    )  # [batch, word index]
    return tf.logical_and(
        is_candidate, tf.gather(chosen_words, tf.minimum(word, seq_length - 1), batch_dims=1)
    )


@dataclasses.dataclass(frozen=True)
class DynamicMasking:
    """Masks a parsed batch ``(features, labels, sample_weights)`` of unmasked sequences."""

    token_ids: TokenIds
    masked_lm_prob: float
    max_predictions_per_seq: int
    whole_word_mask: bool = False

    @classmethod
    def from_vocabulary(
        cls, vocabulary, masked_lm_prob, max_predictions_per_seq, whole_word_mask=False
    ):
        """``vocabulary``: a list of tokens or a vocabulary file."""
        if isinstance(vocabulary, (str, os.PathLike)):
            vocabulary = vocab_lib.load_vocabulary(os.fspath(vocabulary))
        else:
            vocab_lib.check_vocabulary(list(vocabulary))
        check_bool("whole_word_mask", whole_word_mask)
        return cls(
            TokenIds.from_vocabulary(vocabulary),
            masked_lm_prob,
            max_predictions_per_seq,
            whole_word_mask,
        )

    def __call__(self, batch, seed):
        features, labels, sample_weights = batch
        masked_token_ids, positions, original_ids, weights = mask_token_batch(
            features["token_ids"],
            features["padding_mask"],
            seed,
            self.max_predictions_per_seq,
            self.masked_lm_prob,
            self.token_ids.mask_id,
            self.token_ids.protected_ids,
            self.token_ids.replacement_ids,
            self.token_ids.continuation_ids if self.whole_word_mask else None,
        )
        features = {**features, "token_ids": masked_token_ids, "mask_positions": positions}
        return (
            features,
            {**labels, "masked_lm": original_ids},
            {**sample_weights, "masked_lm": weights},
        )
