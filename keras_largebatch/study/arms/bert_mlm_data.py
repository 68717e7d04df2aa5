"""The masked-LM arm's corpus, prepared once and cached: English prose (`CORPORA`), an uncased
WordPiece vocabulary learned from it, its documents tokenized and packed into sequences
``[CLS] t_1 ... t_k [SEP]`` of ``sequence_length`` (masked-LM only: no sentence pairs), split by
document so that no document has sequences in two splits.

The corpus is the documentation Debian packages ship (`debian_text`), or, for tests and quick
runs, Python's own documentation (`keras_largebatch.bert.data.corpus.default_corpus_documents`).
The vocabulary is learned from the whole corpus, as BERT's was (Devlin et al.,
arXiv:1810.04805). `load` reads the arrays from a cache directory (by default one named by the
settings that decide them, `data_settings`), preparing and writing it first when it is missing.
"""

import dataclasses
import hashlib
import json
import math
import os
import sys

import numpy as np

from keras_largebatch import _files
from keras_largebatch.bert.data import vocab as vocab_lib
from keras_largebatch.bert.data.corpus import default_corpus_documents
from keras_largebatch.study.arms import debian_text

# How each corpus is read: a function returning documents, each a list of sentences.
CORPORA = {
    "debian": debian_text.debian_documents,
    "python": default_corpus_documents,
}
SPLITS = ("train", "validation", "test")
# The document order the splits are drawn in.
SPLIT_SEED = 0
# The vocabulary is learned from at most this many sentences, evenly spread over the corpus:
# the learner's time grows with the text, its vocabulary hardly does past a few million words.
VOCABULARY_SENTENCES = 400_000
TOKENIZE_BATCH_SIZE = 8192
# Bumped whenever the cached arrays change meaning, so that an old cache is not read.
CACHE_FORMAT = 1
ARRAYS_FILE = "arrays.npz"
SETTINGS_FILE = "settings.json"


def default_cache_dir():
    """Where `load` caches its arrays unless told:
    ``~/.cache/keras_largebatch/study_bert_mlm``."""
    return os.path.join(os.path.expanduser("~"), ".cache", "keras_largebatch", "study_bert_mlm")


@dataclasses.dataclass(frozen=True, eq=False)
class MaskedLanguageModelData:
    """A corpus prepared for masked-LM training, read from the cache.

    Attributes:
        vocabulary: the WordPiece tokens, ``[PAD]`` (id 0) and the special tokens first.
        sequences: ``{split: int32 [n, sequence_length]}`` token ids, ``[CLS] ... [SEP]``
            then ``[PAD]`` for each of `SPLITS`.
        documents: ``{split: int32 [n]}`` the corpus index of each sequence's document.
        fingerprint: 16 hex digits of SHA-256 over the vocabulary and the three splits.
    """

    vocabulary: tuple
    sequences: dict
    documents: dict
    fingerprint: str

    @property
    def train_examples(self):
        """The number of training sequences."""
        return len(self.sequences["train"])

    def tokens(self, split):
        """The number of tokens (not [PAD]) in ``split``'s sequences."""
        return int(np.count_nonzero(self.sequences[split]))


def pack_document(token_ids, sequence_length, cls_id, sep_id):
    """The sequences of one document's ``token_ids``: consecutive runs of
    ``sequence_length - 2`` tokens (the last one shorter), each as ``[CLS] run [SEP]`` padded
    with 0 (``[PAD]``) to ``sequence_length``; int32 ``[ceil(len / (sequence_length - 2)),
    sequence_length]``."""
    body = sequence_length - 2
    count = math.ceil(len(token_ids) / body)
    runs = np.zeros(count * body, np.int32)
    runs[: len(token_ids)] = token_ids
    sequences = np.zeros((count, sequence_length), np.int32)
    sequences[:, 0] = cls_id
    sequences[:, 1 : body + 1] = runs.reshape(count, body)
    lengths = np.minimum(body, len(token_ids) - body * np.arange(count))
    sequences[np.arange(count), lengths + 1] = sep_id
    return sequences


def split_documents(sequences_per_document, validation_sequences, test_sequences, seed):
    """``{split: (sequences, document indices)}``: the documents in a random order of
    ``seed``, the first ones to validation until it holds ``validation_sequences``, the next
    to test until it holds ``test_sequences``, the rest to training. A document lies in one
    split only: the surplus sequences of the last document of validation and of test are
    left out of every split.

    Raises:
        ValueError: the documents hold too few sequences for both evaluation splits and one
            training sequence.
    """
    total = sum(len(sequences) for sequences in sequences_per_document)
    if validation_sequences + test_sequences >= total:
        raise ValueError(
            f"validation_sequences + test_sequences must be < the {total} sequences of the "
            f"corpus, got {validation_sequences} + {test_sequences}"
        )
    order = np.random.default_rng(seed).permutation(len(sequences_per_document))
    quotas = {"validation": validation_sequences, "test": test_sequences, "train": None}
    taken = {split: [] for split in quotas}
    split_names = iter(quotas)
    split = next(split_names)
    held = 0
    for document in order:
        if quotas[split] is not None and held >= quotas[split]:
            split, held = next(split_names), 0
        taken[split].append(document)
        held += len(sequences_per_document[document])
    held_by = {
        split: sum(len(sequences_per_document[index]) for index in documents)
        for split, documents in taken.items()
    }
    if not taken["train"] or held_by["test"] < test_sequences:
        raise ValueError(
            f"validation_sequences={validation_sequences} and test_sequences={test_sequences} "
            f"need whole documents: those of the corpus's {total} sequences leave "
            f"{held_by['train']} to train on, and {held_by['test']} to test"
        )
    splits = {}
    for split, documents in taken.items():
        sequences = np.concatenate([sequences_per_document[index] for index in documents])
        document_ids = np.concatenate(
            [np.full(len(sequences_per_document[index]), index, np.int32) for index in documents]
        )
        splits[split] = (sequences[: quotas[split]], document_ids[: quotas[split]])
    return splits


def tokenize_documents(documents, vocabulary):
    """Each document's WordPiece ids (its sentences' ids, concatenated), int32 arrays."""
    import tensorflow as tf

    tokenizer = vocab_lib.make_tokenizer(vocabulary)
    sentences = [sentence for document in documents for sentence in document]
    # In a tf.data map the tokenizer returns ragged tensors (called eagerly, Python lists).
    batches = tf.data.Dataset.from_tensor_slices(sentences).batch(TOKENIZE_BATCH_SIZE)
    flat, lengths = [], []
    for ragged in batches.map(tokenizer).prefetch(1):
        flat.append(ragged.flat_values.numpy().astype(np.int32))
        lengths.append(ragged.row_lengths().numpy())
    flat = np.concatenate(flat)
    sentence_ends = np.cumsum(np.concatenate(lengths))
    document_ends = np.cumsum([len(document) for document in documents])
    token_ends = np.concatenate([[0], sentence_ends[document_ends - 1]])
    return [flat[token_ends[i] : token_ends[i + 1]] for i in range(len(documents))]


def vocabulary_sample(documents, limit=VOCABULARY_SENTENCES):
    """At most ``limit`` of the documents' sentences, evenly spread (every k-th one)."""
    sentences = [sentence for document in documents for sentence in document]
    return sentences[:: max(1, math.ceil(len(sentences) / limit))]


def prepare_arrays(documents, settings):
    """The arrays of the cache for ``documents`` under the data ``settings`` (see
    `data_settings`): the vocabulary, and each split's sequences and document indices."""
    vocabulary = vocab_lib.build_vocabulary(
        vocabulary_sample(documents), settings["vocabulary_size"]
    )
    if len(vocabulary) > settings["vocabulary_size"]:
        raise ValueError(
            f"the learned vocabulary has {len(vocabulary)} tokens, more than "
            f"vocabulary_size={settings['vocabulary_size']}"
        )
    special = vocab_lib.special_token_ids(vocabulary)
    cls_id, sep_id = special[vocab_lib.CLS_TOKEN], special[vocab_lib.SEP_TOKEN]
    sequences_per_document = [
        pack_document(token_ids, settings["sequence_length"], cls_id, sep_id)
        for token_ids in tokenize_documents(documents, vocabulary)
    ]
    splits = split_documents(
        sequences_per_document,
        settings["validation_sequences"],
        settings["test_sequences"],
        settings["split_seed"],
    )
    train_sequences = settings["train_sequences"]
    if train_sequences is not None:
        available = len(splits["train"][0])
        if train_sequences > available:
            raise ValueError(
                f"train_sequences must be <= the {available} training sequences of the "
                f"corpus, got {train_sequences}"
            )
        splits["train"] = tuple(array[:train_sequences] for array in splits["train"])
    arrays = {"vocabulary": np.array(vocabulary)}
    for split, (sequences, document_ids) in splits.items():
        # uint16 halves the cache; vocabulary_size is at most 2**16.
        arrays[f"{split}_sequences"] = sequences.astype(np.uint16)
        arrays[f"{split}_documents"] = document_ids
    return arrays


def read_cache(directory):
    """The `MaskedLanguageModelData` cached in ``directory``."""
    with np.load(os.path.join(directory, ARRAYS_FILE), allow_pickle=False) as arrays:
        vocabulary = tuple(str(token) for token in arrays["vocabulary"])
        sequences = {split: arrays[f"{split}_sequences"].astype(np.int32) for split in SPLITS}
        documents = {split: arrays[f"{split}_documents"] for split in SPLITS}
    digest = hashlib.sha256("\n".join(vocabulary).encode())
    for split in SPLITS:
        digest.update(np.ascontiguousarray(sequences[split]).tobytes())
    return MaskedLanguageModelData(vocabulary, sequences, documents, digest.hexdigest()[:16])


def data_settings(
    corpus, sequence_length, vocabulary_size, validation_sequences, test_sequences, train_sequences
):
    """What decides the cached arrays: the corpus and its versions (the Debian packages', or
    Python's for its documentation), the sequences and the split. Installs the Debian
    packages when ``corpus`` is "debian" and they are missing."""
    if corpus == "debian":
        debian_text.ensure_installed()
        versions = debian_text.package_versions()
    else:
        versions = {"python": sys.version.split()[0]}
    return {
        "cache_format": CACHE_FORMAT,
        "corpus": corpus,
        "versions": versions,
        "sequence_length": sequence_length,
        "vocabulary_size": vocabulary_size,
        "validation_sequences": validation_sequences,
        "test_sequences": test_sequences,
        "train_sequences": train_sequences,
        "split_seed": SPLIT_SEED,
    }


def load(settings, data_dir=None):
    """The prepared corpus of ``settings`` (`data_settings`), a `MaskedLanguageModelData`:
    read from the cache in ``data_dir`` (default a directory of `default_cache_dir` named by
    the corpus and a hash of ``settings``) when it holds it, else prepared (`prepare_arrays`)
    and cached first.

    The cache is written as a whole directory (`keras_largebatch._files.new_directory`),
    which never replaces one holding anything.

    Raises:
        ValueError: the cache directory holds arrays prepared under other settings.
        FileExistsError: the cache directory holds files that are not a cache.
    """
    directory = data_dir or os.path.join(
        default_cache_dir(),
        f"{settings['corpus']}-"
        + hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12],
    )
    if not _holds_cache(directory, settings):
        if os.path.isdir(directory) and os.listdir(directory):
            raise FileExistsError(
                f"data_dir {directory} holds files but no cache ({SETTINGS_FILE}); nothing "
                "there was changed: give an empty or new data_dir"
            )
        arrays = prepare_arrays(CORPORA[settings["corpus"]](), settings)
        try:
            with _files.new_directory(directory) as temporary:
                np.savez(os.path.join(temporary, ARRAYS_FILE), **arrays)
                _files.write_text(
                    os.path.join(temporary, SETTINGS_FILE),
                    json.dumps(settings, indent=1, sort_keys=True) + "\n",
                )
        except FileExistsError:
            # Another process may have cached the same arrays meanwhile.
            if not _holds_cache(directory, settings):
                raise
    return read_cache(directory)


def _holds_cache(directory, settings):
    path = os.path.join(directory, SETTINGS_FILE)
    if not os.path.isfile(path):
        return False
    with open(path, encoding="utf-8") as stream:
        stored = json.load(stream)
    if stored != settings:
        different = sorted(
            key for key in set(stored) | set(settings) if stored.get(key) != settings.get(key)
        )
        raise ValueError(
            f"data_dir {directory} holds arrays prepared with other settings (differing in "
            f"{different}); give another data_dir or remove that one"
        )
    return True
