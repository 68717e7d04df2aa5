"""WordPiece vocabulary building, loading and uncased tokenization."""

import numpy as np
import pytest

from keras_largebatch.bert.data import vocab as vocab_lib

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A quick brown dog naps while the fox watches.",
    "The lazy dog sleeps; the quick fox runs away.",
] * 4


def test_build_vocabulary_puts_special_tokens_first_and_keeps_frequent_words():
    vocabulary = vocab_lib.build_vocabulary(SENTENCES, vocabulary_size=200)
    assert vocabulary[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert len(vocabulary) <= 200 and len(set(vocabulary)) == len(vocabulary)
    # Every word occurs at least 4 times (min_token_count 2), so each is a whole token.
    words = {
        word
        for sentence in SENTENCES
        for word in sentence.lower().replace(".", " ").replace(";", " ").split()
    }
    assert words <= set(vocabulary)
    assert vocabulary == vocab_lib.build_vocabulary(SENTENCES, vocabulary_size=200)


def test_min_token_count_drops_rare_words():
    sentences = SENTENCES + ["Zebra."]
    assert "zebra" not in vocab_lib.build_vocabulary(sentences, 200, min_token_count=2)
    assert "zebra" in vocab_lib.build_vocabulary(sentences, 200, min_token_count=1)


def test_tokenizer_is_uncased_and_splits_word_pieces():
    vocabulary = list(vocab_lib.SPECIAL_TOKENS) + ["the", "cafe", "fox", "##es", "."]
    tokenizer = vocab_lib.make_tokenizer(vocabulary)
    ids = np.asarray(tokenizer("The CAFÉ foxes. Zzz"))
    np.testing.assert_array_equal(ids, [5, 6, 7, 8, 9, 1])


def test_save_and_load_round_trip(tmp_path):
    vocabulary = list(vocab_lib.SPECIAL_TOKENS) + ["hello", "##s"]
    path = vocab_lib.save_vocabulary(vocabulary, str(tmp_path / "sub" / "vocab.txt"))
    assert open(path, encoding="utf-8").read() == "\n".join(vocabulary) + "\n"
    assert vocab_lib.load_vocabulary(path) == vocabulary


@pytest.mark.parametrize(
    "tokens, message",
    [
        (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a"], r"lacks the special tokens \['\[MASK\]'\]"),
        (
            ["a", "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
            r"has 'a' at id 0.*must be '\[PAD\]'",
        ),
        (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "a"], r"repeats the tokens \['a'\]"),
    ],
)
def test_load_rejects_bad_vocabularies(tmp_path, tokens, message):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(tokens) + "\n")
    with pytest.raises(ValueError, match=f"{path}.*" + message):
        vocab_lib.load_vocabulary(str(path))


def test_load_missing_file_and_bad_sizes(tmp_path):
    with pytest.raises(FileNotFoundError, match="vocabulary file .*nope.txt' does not exist"):
        vocab_lib.load_vocabulary(str(tmp_path / "nope.txt"))
    with pytest.raises(
        ValueError, match="vocabulary_size must be greater than the 5 special tokens, got 5"
    ):
        vocab_lib.build_vocabulary(SENTENCES, vocabulary_size=5)
    with pytest.raises(ValueError, match="min_token_count must be >= 1, got 0"):
        vocab_lib.build_vocabulary(SENTENCES, min_token_count=0)


def test_special_and_replacement_ids_follow_the_vocabulary_order():
    # The google-research/bert layout: [PAD]=0, [unused0], [UNK]=2, [CLS]=3, [SEP]=4, [MASK]=5.
    vocabulary = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a"]
    assert vocab_lib.special_token_ids(vocabulary) == {
        "[PAD]": 0,
        "[UNK]": 2,
        "[CLS]": 3,
        "[SEP]": 4,
        "[MASK]": 5,
    }
    assert vocab_lib.replacement_token_ids(vocabulary) == [1, 6, 7]
