"""WordPiece vocabularies for BERT pretraining: build one from text, or load one from a file.

A vocabulary is a list of token strings; a token's id is its index. Files hold one token per line
(the google-research/bert ``vocab.txt`` format), so the published uncased BERT vocabulary loads
as is. Text is tokenized uncased: lowercased with accents stripped, then split into WordPieces.

Learning a vocabulary needs tensorflow-text and tokenizing needs keras-hub (both in the ``bert``
extra); they are imported where they are used, so that reading records and a vocabulary file
needs TensorFlow only.
"""

import os

import tensorflow as tf

from keras_largebatch import _extras, _files

PAD_TOKEN = "[PAD]"
UNK_TOKEN = "[UNK]"
CLS_TOKEN = "[CLS]"
SEP_TOKEN = "[SEP]"
MASK_TOKEN = "[MASK]"
# Built vocabularies put these first, so [PAD] is id 0 (the padding value of every record).
SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN)

DEFAULT_VOCABULARY_SIZE = 8000
DEFAULT_MIN_TOKEN_COUNT = 2


def build_vocabulary(
    sentences,
    vocabulary_size=DEFAULT_VOCABULARY_SIZE,
    min_token_count=DEFAULT_MIN_TOKEN_COUNT,
):
    """Learns an uncased WordPiece vocabulary of at most ``vocabulary_size`` tokens.

    Uses tensorflow-text's ``bert_vocab_from_dataset`` (the learner behind keras-hub's
    ``compute_word_piece_vocabulary``), offline. The special tokens come first, in the order
    ``[PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4``. The learner keeps only word pieces seen at
    least ``min_token_count`` times, so a small corpus, such as the default one, yields fewer
    than ``vocabulary_size`` tokens; keras-hub's, which leaves tensorflow-text's threshold
    (``lower_thresh``) at its default of 10, would leave such a corpus with far fewer.

    Args:
        sentences: a list of strings (any segmentation; sentences or lines).
        vocabulary_size: upper bound on the number of tokens, special tokens included.
        min_token_count: the smallest count a word piece needs to enter the vocabulary.

    Returns:
        The vocabulary as a list of token strings.
    """
    if vocabulary_size <= len(SPECIAL_TOKENS):
        raise ValueError(
            f"vocabulary_size must be greater than the {len(SPECIAL_TOKENS)} special tokens, "
            f"got {vocabulary_size}"
        )
    if min_token_count < 1:
        raise ValueError(f"min_token_count must be >= 1, got {min_token_count}")
    if not sentences:
        raise ValueError(
            "sentences must contain at least one string to learn a vocabulary, got none"
        )
    try:
        from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset
    except ModuleNotFoundError as error:
        raise _extras.missing_extra("learning a WordPiece vocabulary", "bert", error) from error
    dataset = tf.data.Dataset.from_tensor_slices(list(sentences)).batch(1024)
    return bert_vocab_from_dataset.bert_vocab_from_dataset(
        dataset,
        vocab_size=vocabulary_size,
        reserved_tokens=list(SPECIAL_TOKENS),
        bert_tokenizer_params={"lower_case": True},
        learn_params={"lower_thresh": min_token_count},
    )


def save_vocabulary(vocabulary, path):
    """Writes ``vocabulary`` to ``path``, one token per line, and returns ``path``."""
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    return _files.write_text(path, "".join(token + "\n" for token in vocabulary))


def load_vocabulary(path):
    """Reads a vocabulary file (one token per line) and checks its special tokens.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the file lacks a special token, repeats a token, or does not have ``[PAD]``
            at id 0.
    """
    # tf.io.gfile so that a vocabulary in Cloud Storage (gs://...) reads like a local one.
    if not tf.io.gfile.exists(path) or tf.io.gfile.isdir(path):
        raise FileNotFoundError(f"vocabulary file {path!r} does not exist")
    with tf.io.gfile.GFile(path) as vocabulary_file:
        # split("\n"), not splitlines(): tokens may hold other Unicode line separators.
        vocabulary = [line.rstrip("\r") for line in vocabulary_file.read().split("\n")]
    while vocabulary and not vocabulary[-1]:
        vocabulary.pop()
    check_vocabulary(vocabulary, source=path)
    return vocabulary


def check_vocabulary(vocabulary, source="vocabulary"):
    """Raises ValueError unless ``vocabulary`` has unique tokens, all special ones, [PAD] first."""
    missing = [token for token in SPECIAL_TOKENS if token not in vocabulary]
    if missing:
        raise ValueError(
            f"{source} lacks the special tokens {missing}; a BERT vocabulary needs all of "
            f"{list(SPECIAL_TOKENS)}"
        )
    if vocabulary[0] != PAD_TOKEN:
        raise ValueError(
            f"{source} has {vocabulary[0]!r} at id 0; records pad with 0, so id 0 must be "
            f"{PAD_TOKEN!r}"
        )
    if len(set(vocabulary)) != len(vocabulary):
        seen = set()
        repeated = sorted({token for token in vocabulary if token in seen or seen.add(token)})
        raise ValueError(f"{source} repeats the tokens {repeated[:10]}; every token must be unique")


def special_token_ids(vocabulary):
    """Returns a dict from each special token string to its id in ``vocabulary``."""
    return {token: vocabulary.index(token) for token in SPECIAL_TOKENS}


def replacement_token_ids(vocabulary):
    """Ids a masked position may be replaced with in the 10% "random token" case.

    Every id except the special tokens: google-research/bert also draws [CLS], [SEP] and [PAD]
    here, which would put structural tokens where the model must see text.
    """
    special = set(SPECIAL_TOKENS)
    return [token_id for token_id, token in enumerate(vocabulary) if token not in special]


def make_tokenizer(vocabulary, lowercase=True, strip_accents=True):
    """Returns the keras-hub ``WordPieceTokenizer`` for ``vocabulary`` (a list of tokens),
    uncased by default.

    Lowercasing and accent stripping match how ``build_vocabulary`` learns, and the uncased
    google-research/bert vocabulary; a preset's tokenizer may set them otherwise
    (`preset_tokenization`).
    """
    try:
        import keras_hub
    except ModuleNotFoundError as error:
        raise _extras.missing_extra("a WordPiece tokenizer", "bert", error) from error
    return keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=list(vocabulary),
        lowercase=lowercase,
        strip_accents=strip_accents,
        oov_token=UNK_TOKEN,
    )


def preset_tokenization(preset):
    """How a keras-hub BERT preset directory tokenizes, read by keras-hub's
    `BertTokenizer.from_preset`: ``{"vocab_file", "lowercase", "strip_accents"}``, the file its
    assets hold (checked to be the tokenizer's vocabulary) and its casing settings.

    Raises:
        ValueError: ``preset`` is not a directory with a BERT tokenizer, or its assets hold no
            ``vocabulary.txt`` equal to the tokenizer's vocabulary.
    """
    if not os.path.isfile(os.path.join(str(preset), "tokenizer.json")):
        raise ValueError(
            f"preset {preset!r} is not a keras-hub preset directory with a tokenizer "
            "(no tokenizer.json in it)"
        )
    try:
        import keras_hub
    except ModuleNotFoundError as error:
        raise _extras.missing_extra("a keras-hub preset", "bert", error) from error
    tokenizer = keras_hub.models.BertTokenizer.from_preset(str(preset))
    path = os.path.join(str(preset), "assets", "tokenizer", "vocabulary.txt")
    if not os.path.isfile(path) or load_vocabulary(path) != list(tokenizer.get_vocabulary()):
        raise ValueError(
            f"preset {preset!r} holds no assets/tokenizer/vocabulary.txt equal to its "
            "tokenizer's vocabulary"
        )
    return {
        "vocab_file": path,
        "lowercase": bool(tokenizer.lowercase),
        "strip_accents": bool(tokenizer.strip_accents),
    }


def first_difference(vocabulary, other):
    """``(id, token, other token)`` of the first id where two vocabularies differ (a token
    is None past a vocabulary's end), or None when they are equal."""
    for token_id in range(max(len(vocabulary), len(other))):
        token = vocabulary[token_id] if token_id < len(vocabulary) else None
        other_token = other[token_id] if token_id < len(other) else None
        if token != other_token:
            return token_id, token, other_token
    return None
