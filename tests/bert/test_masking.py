"""The masked-LM rule, in Python (data creation) and in TensorFlow ops (dynamic masking)."""

import random

import numpy as np
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
