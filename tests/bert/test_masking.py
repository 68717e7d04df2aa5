"""The masked-LM rule, in Python (data creation) and in TensorFlow ops (dynamic masking)."""

import random

import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch.bert.data import masking
from keras_largebatch.bert.data import vocab as vocab_lib
from keras_largebatch.bert.data.instances import InstanceOptions

CLS, SEP, MASK = 2, 3, 4
VOCABULARY = list(vocab_lib.SPECIAL_TOKENS) + [f"word{index}" for index in range(40)]
TOKEN_IDS = masking.TokenIds.from_vocabulary(VOCABULARY)


def _reference_num_to_predict(num_tokens, num_candidates, max_predictions, masked_lm_prob):
    # google-research/bert's min(max_predictions_per_seq, max(1, int(round(n * masked_lm_prob))))
    # under Python 3, and never more than the candidates.
    return min(max_predictions, max(1, round(num_tokens * masked_lm_prob)), num_candidates)


def test_token_ids_from_vocabulary():
    assert (TOKEN_IDS.cls_id, TOKEN_IDS.sep_id, TOKEN_IDS.mask_id) == (CLS, SEP, MASK)
    assert TOKEN_IDS.protected_ids == (CLS, SEP)
    assert TOKEN_IDS.replacement_ids == tuple(range(5, 45))


def test_num_to_predict_is_the_same_in_python_and_tensorflow():
    # 10 * 0.15 = 1.5 -> 2 and 30 * 0.15 = 4.5 -> 4: halves round to even, in both.
    num_tokens = np.arange(1, 200)
    num_candidates = np.maximum(num_tokens - 3, 0)
    python = [
        masking.num_to_predict(int(n), int(c), 20, 0.15) for n, c in zip(num_tokens, num_candidates)
    ]
    assert python == [
        _reference_num_to_predict(int(n), int(c), 20, 0.15)
        for n, c in zip(num_tokens, num_candidates)
    ]
    tensorflow = masking.num_to_predict(
        tf.constant(num_tokens, tf.float64),
        tf.constant(num_candidates, tf.int32),
        20,
        0.15,
        **masking.TENSORFLOW_OPS,
    )
    assert tensorflow.numpy().tolist() == python
    assert python[9] == 2 and python[29] == 4


def test_mask_tokens_masks_the_rule_s_count_and_never_a_special_token():
    options = InstanceOptions(max_seq_length=64, max_predictions_per_seq=8)
    rng = random.Random(0)
    outcomes = {"mask": 0, "kept": 0, "random": 0}
    for _ in range(400):
        length = rng.randint(6, 64)
        tokens = [CLS] + [rng.randint(5, 44) for _ in range(length - 2)] + [SEP]
        tokens[length // 2] = SEP
        masked, positions, originals = masking.mask_tokens(tokens, options, TOKEN_IDS, rng)
        assert len(positions) == _reference_num_to_predict(length, length - 3, 8, 0.15)
        assert positions == sorted(set(positions))
        assert not {0, length // 2, length - 1} & set(positions)
        assert originals == [tokens[position] for position in positions]
        unchanged = [index for index in range(length) if index not in positions]
        assert [masked[index] for index in unchanged] == [tokens[index] for index in unchanged]
        for position in positions:
            new, old = masked[position], tokens[position]
            outcomes["mask" if new == MASK else "kept" if new == old else "random"] += 1
    total = sum(outcomes.values())
    # A random replacement equals the original with probability 1/40, counted as "kept".
    for outcome, probability in (
        ("mask", 0.8),
        ("kept", 0.1 + 0.1 / 40),
        ("random", 0.1 - 0.1 / 40),
    ):
        tolerance = 4 * np.sqrt(probability * (1 - probability) / total)
        assert abs(outcomes[outcome] / total - probability) < tolerance, (outcome, outcomes)


def test_mask_token_batch_round_half_to_even():
    # 30 real tokens * 0.15 = 4.5 predictions, which rounds to 4 (as Python's round does).
    tokens = tf.constant([[CLS] + [10] * 28 + [SEP] + [0] * 34], tf.int32)
    padding_mask = tf.cast(tokens != 0, tf.int32)
    _, _, _, weights = masking.mask_token_batch(
        tokens,
        padding_mask,
        tf.constant([1, 2], tf.int64),
        8,
        0.15,
        MASK,
        (CLS, SEP),
        tuple(range(5, 45)),
    )
    assert float(tf.reduce_sum(weights)) == round(30 * 0.15) == 4


# === Whole-word masking ===

WORD_VOCABULARY = list(vocab_lib.SPECIAL_TOKENS) + [
    "un",
    "##break",
    "##able",
    "the",
    "cat",
    "##s",
    "sat",
    "on",
    "mat",
    "##ted",
    "rug",
]
# [CLS] unbreakable the cats sat [SEP] on matted rug cats [SEP], as strings.
WORD_SEQUENCE = [
    "[CLS]",
    "un",
    "##break",
    "##able",
    "the",
    "cat",
    "##s",
    "sat",
    "[SEP]",
    "on",
    "mat",
    "##ted",
    "rug",
    "cat",
    "##s",
    "[SEP]",
]


def _reference_whole_word_mask(tokens, vocabulary, max_predictions, masked_lm_prob, rng):
    """The whole-word rule on token strings, written from google-research/bert's description:
    words are a token and the ## pieces after it; shuffle them; take each whole while it fits."""
    words, current = [], None
    for position, token in enumerate(tokens):
        if token in ("[CLS]", "[SEP]"):
            current = None
        elif token.startswith("##") and current is not None:
            current.append(position)
        else:
            current = [position]
            words.append(current)
    candidates = sum(len(word) for word in words)
    target = min(max_predictions, max(1, round(len(tokens) * masked_lm_prob)), candidates)
    rng.shuffle(words)
    chosen = []
    for word in words:
        if len(chosen) >= target:
            break
        if len(chosen) + len(word) <= target:
            chosen += word
    masked = list(tokens)
    replacements = [t for t in vocabulary if t not in vocab_lib.SPECIAL_TOKENS]
    for position in sorted(chosen):
        draw = rng.random()
        if draw < 0.8:
            masked[position] = "[MASK]"
        elif draw < 0.9:
            masked[position] = rng.choice(replacements)
    return masked, sorted(chosen)


def _words(tokens):
    """Position lists of the words of a string token list (a token and its ## pieces)."""
    words = []
    for position, token in enumerate(tokens):
        if token.startswith("##") and words and words[-1][-1] == position - 1:
            words[-1].append(position)
        elif token not in ("[CLS]", "[SEP]"):
            words.append([position])
    return words


def test_whole_word_mask_continuation_ids_from_vocabulary():
    token_ids = masking.TokenIds.from_vocabulary(WORD_VOCABULARY)
    assert token_ids.continuation_ids == {
        WORD_VOCABULARY.index(token) for token in ("##break", "##able", "##s", "##ted")
    }


def test_whole_word_mask_equals_the_reference_and_never_splits_a_word():
    token_ids = masking.TokenIds.from_vocabulary(WORD_VOCABULARY)
    ids = [WORD_VOCABULARY.index(token) for token in WORD_SEQUENCE]
    words = _words(WORD_SEQUENCE)
    # 16 tokens: 4 predictions at 0.25, 2 (round(2.4)) at 0.15; a word that would pass the
    # count is skipped for a later, shorter one.
    seen_sizes = set()
    for seed in range(200):
        for max_predictions, masked_lm_prob in ((4, 0.25), (8, 0.15)):
            options = InstanceOptions(
                max_seq_length=16,
                max_predictions_per_seq=max_predictions,
                masked_lm_prob=masked_lm_prob,
                whole_word_mask=True,
            )
            masked_ids, positions, labels = masking.mask_tokens(
                ids, options, token_ids, random.Random(seed)
            )
            expected_tokens, expected_positions = _reference_whole_word_mask(
                WORD_SEQUENCE, WORD_VOCABULARY, max_predictions, masked_lm_prob, random.Random(seed)
            )
            assert [WORD_VOCABULARY[i] for i in masked_ids] == expected_tokens
            assert positions == expected_positions
            assert labels == [ids[p] for p in positions]
            for word in words:
                assert set(word) <= set(positions) or not set(word) & set(positions), word
            seen_sizes.add(len(positions))
    assert seen_sizes == {2, 4}


def test_whole_word_mask_hand_worked():
    # Words of the sequence: "unbreakable" (1-3), the (4), "cats" (5-6), sat (7), on (9),
    # "matted" (10-11), rug (12), "cats" (13-14). With 3 to predict (round(16 * 0.2)), the
    # first shuffled word "unbreakable" fills it exactly.
    token_ids = masking.TokenIds.from_vocabulary(WORD_VOCABULARY)
    ids = [WORD_VOCABULARY.index(token) for token in WORD_SEQUENCE]
    options = InstanceOptions(
        max_seq_length=16, max_predictions_per_seq=3, masked_lm_prob=0.2, whole_word_mask=True
    )
    for seed in range(50):
        order = _words(WORD_SEQUENCE)
        random.Random(seed).shuffle(order)
        if order[0] == [1, 2, 3]:
            break
    _, positions, _ = masking.mask_tokens(ids, options, token_ids, random.Random(seed))
    assert positions == [1, 2, 3]


def test_whole_word_mask_with_dynamic_masking_is_refused():
    with pytest.raises(ValueError, match="whole_word_mask=True .* dynamic_masking=True"):
        InstanceOptions(whole_word_mask=True, dynamic_masking=True)


# === Whole-word masking in the input pipeline ===


def _dynamic_whole_word_positions(ids, seed, max_predictions, masked_lm_prob, token_ids):
    """Masks ``ids`` (rows, padded with 0) with whole-word dynamic masking; returns the
    ``(masked ids, positions, labels, weights)`` arrays."""
    tokens = tf.constant(ids, tf.int32)
    outputs = masking.mask_token_batch(
        tokens,
        tf.cast(tokens != 0, tf.int32),
        tf.constant([seed, 7], tf.int64),
        max_predictions,
        masked_lm_prob,
        token_ids.mask_id,
        token_ids.protected_ids,
        token_ids.replacement_ids,
        token_ids.continuation_ids,
    )
    return [output.numpy() for output in outputs]


def test_dynamic_whole_word_mask_hand_worked():
    # [CLS] a ##b ##c d [SEP] e ##f [SEP]: words {1, 2, 3}, {4}, {6, 7}; 4 to predict
    # (min(4, round(9 * 0.5))). Taken in a random order while they fit: "a##b##c" first, or
    # "d" then "a##b##c", gives {1, 2, 3, 4} (probability 1/3 + 1/6); any other order gives
    # {4, 6, 7} ("e##f" and "d"; "a##b##c" no longer fits).
    vocabulary = list(vocab_lib.SPECIAL_TOKENS) + ["a", "##b", "##c", "d", "e", "##f"]
    token_ids = masking.TokenIds.from_vocabulary(vocabulary)
    row = [CLS, 5, 6, 7, 8, SEP, 9, 10, SEP, 0, 0, 0]
    outcomes = {(1, 2, 3, 4): 0, (4, 6, 7): 0}
    rows = 800  # each row draws its own order
    masked, positions, labels, weights = _dynamic_whole_word_positions(
        [row] * rows, 0, 4, 0.5, token_ids
    )
    for index in range(rows):
        chosen = tuple(int(p) for p, w in zip(positions[index], weights[index]) if w)
        assert chosen in outcomes, chosen
        outcomes[chosen] += 1
        # 80/10/10 per token: labels are the originals; a masked token is [MASK], a
        # replacement or itself; every other token is unchanged.
        assert [row[p] for p in chosen] == labels[index][: len(chosen)].tolist()
        for position, token in enumerate(masked[index]):
            if position not in chosen:
                assert token == row[position]
            else:
                assert token == MASK or token in token_ids.replacement_ids or token == row[position]
    assert abs(outcomes[(1, 2, 3, 4)] / rows - 0.5) < 0.06, outcomes


def test_dynamic_whole_word_mask_never_splits_a_word_of_the_default_corpus():
    from keras_largebatch.bert.data import corpus as corpus_lib
    from keras_largebatch.bert.data import instances

    documents = corpus_lib.default_corpus_documents()[:60]
    sentences = [sentence for document in documents for sentence in document]
    vocabulary = vocab_lib.build_vocabulary(sentences, 2000)
    token_ids = masking.TokenIds.from_vocabulary(vocabulary)
    tokenized = instances.tokenize_documents([sentences], vocab_lib.make_tokenizer(vocabulary))[0]
    stream = [token for sentence in tokenized for token in sentence]
    seq_length, rows = 128, 64
    body = seq_length - 2
    ids = np.array(
        [[CLS] + stream[index * body : (index + 1) * body] + [SEP] for index in range(rows)]
    )
    assert ids.shape == (rows, seq_length)
    masked_lm_prob = 0.15
    _, positions, _, weights = _dynamic_whole_word_positions(
        ids.tolist(), 3, 40, masked_lm_prob, token_ids
    )
    # A continuation that follows a word's token (not [CLS] or [SEP]).
    is_continuation = np.isin(ids, list(token_ids.continuation_ids))
    inside_word = is_continuation[:, 1:] & ~np.isin(ids[:, :-1], [CLS, SEP])
    chosen = np.zeros(ids.shape, bool)
    for index in range(rows):
        chosen[index, positions[index][weights[index] > 0]] = True
    # A word is split where such a continuation and the token before it differ in being masked.
    assert not np.any(inside_word & (chosen[:, 1:] != chosen[:, :-1]))
    assert np.any(inside_word & chosen[:, 1:])  # words of several tokens were masked
    assert is_continuation.mean() > 0.03  # the vocabulary splits words often enough to tell
    fraction = weights.sum() / ids.size
    assert abs(fraction - masked_lm_prob) < 0.01, fraction
