"""The masked-LM arm's workload: masked-language-model pretraining of a small BERT, the task on
which LAMB was proposed (You et al., "Large Batch Optimization for Deep Learning: Training BERT
in 76 minutes", arXiv:1904.00962).

The model is keras-hub's `BertBackbone` (post-LayerNorm, as BERT: Devlin et al., "BERT:
Pre-training of Deep Bidirectional Transformers for Language Understanding", arXiv:1810.04805)
with keras-hub's masked-LM head. The text is a corpus of English prose (`CORPORA`): the
documentation Debian packages ship (`debian_text`), or, for tests and quick runs, Python's own
documentation (`keras_largebatch.bert.data.corpus.default_corpus_documents`).

`load` learns an uncased WordPiece vocabulary, tokenizes each document, packs its tokens into
sequences ``[CLS] t_1 ... t_k [SEP]`` of ``sequence_length`` (masked-LM only: no sentence
pairs, no next-sentence task) and splits them by document, so that no document has sequences
in two splits. The vocabulary is learned from the whole corpus, as BERT's was. The arrays are
cached. Training masks every batch anew (dynamic masking, as RoBERTa: Liu et al.,
arXiv:1907.11692), by BERT's rule: 15% of the tokens, of which 80% become [MASK], 10% a random
token and 10% stay. Evaluation scores positions masked once per split, so every evaluation of a
study scores the same ones; its loss is the mean cross-entropy over them, on which the study's
targets are set.
"""

import dataclasses
import hashlib
import json
import math
import os
import sys
import weakref

import numpy as np

from keras_largebatch import _files
from keras_largebatch._checks import (
    check_choice,
    check_integer,
    check_number,
    check_optional_integer,
    type_error,
)
from keras_largebatch.bert.data import vocab as vocab_lib
from keras_largebatch.bert.data.corpus import default_corpus_documents
from keras_largebatch.bert.data.masking import DEFAULT_MASKED_LM_PROB, DynamicMasking
from keras_largebatch.study.arms import debian_text

# How each corpus is read: a function returning documents, each a list of sentences.
CORPORA = {
    "debian": debian_text.debian_documents,
    "python": default_corpus_documents,
}
SPLITS = ("train", "validation", "test")
EVALUATION_SPLITS = ("validation", "test")
# The document order the splits are drawn in.
SPLIT_SEED = 0
# The vocabulary is learned from at most this many sentences, evenly spread over the corpus:
# the learner's time grows with the text, its vocabulary hardly does past a few million words.
VOCABULARY_SENTENCES = 400_000
EVALUATION_BATCH_SIZE = 500
TOKENIZE_BATCH_SIZE = 8192
# Bumped whenever the cached arrays change meaning, so that an old cache is not read.
CACHE_FORMAT = 1
ARRAYS_FILE = "arrays.npz"
SETTINGS_FILE = "settings.json"


def default_cache_dir():
    """Where `MaskedLanguageModelWorkload.load` caches its arrays unless told:
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
    `MaskedLanguageModelWorkload.data_settings`): the vocabulary, and each split's
    sequences and document indices."""
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


class MaskedLanguageModelWorkload:
    """Masked-LM pretraining of a small BERT on an English corpus (module docstring).

    Args:
        corpus: "debian" (`debian_text`: installs its packages when missing) or "python".
        sequence_length: tokens per sequence, [CLS] and [SEP] included; the model's
            ``max_sequence_length``.
        vocabulary_size: the WordPiece vocabulary's size at most, and the model's.
        num_layers: `BertBackbone`'s.
        hidden_dim: `BertBackbone`'s.
        num_heads: `BertBackbone`'s.
        intermediate_dim: `BertBackbone`'s.
        dropout: `BertBackbone`'s.
        validation_sequences: the sequences of the validation split.
        test_sequences: the sequences of the test split.
        train_sequences: the training sequences to keep, or None for every one left.
        data_dir: the cache directory of the prepared arrays; default a directory of
            `default_cache_dir` named by the corpus and a hash of `data_settings`.
    """

    metric = "loss"
    # google-research/bert's AdamWeightDecayOptimizer leaves LayerNorm and biases out of weight
    # decay ("LayerNorm", "layer_norm", "bias"); these match keras-hub's paths for them:
    # ".../self_attention_layer_norm/gamma", ".../query/bias", "mlm_head/output_bias". Regular
    # expressions searched in a variable's path (`keras_largebatch.optimizers.ExclusionRule`).
    decay_exclusions = ("layer_norm", "bias")

    @property
    def divergence_loss(self):
        """A validation loss above this has diverged: twice a uniform prediction's over the
        vocabulary, ``2 ln V``."""
        return 2 * math.log(self.vocabulary_size)

    def __init__(
        self,
        corpus="debian",
        sequence_length=64,
        vocabulary_size=8192,
        num_layers=2,
        hidden_dim=128,
        num_heads=2,
        intermediate_dim=512,
        dropout=0.1,
        validation_sequences=10_000,
        test_sequences=10_000,
        train_sequences=None,
        data_dir=None,
    ):
        self.corpus = check_choice("corpus", corpus, tuple(CORPORA))
        self.sequence_length = check_integer("sequence_length", sequence_length, low=3)
        self.vocabulary_size = check_integer(
            "vocabulary_size", vocabulary_size, low=len(vocab_lib.SPECIAL_TOKENS) + 1, high=2**16
        )
        self.num_layers = check_integer("num_layers", num_layers, low=1)
        self.hidden_dim = check_integer("hidden_dim", hidden_dim, low=1)
        self.num_heads = check_integer("num_heads", num_heads, low=1)
        if self.hidden_dim % self.num_heads:
            raise ValueError(
                f"hidden_dim must be a multiple of num_heads={self.num_heads}, got {hidden_dim}"
            )
        self.intermediate_dim = check_integer("intermediate_dim", intermediate_dim, low=1)
        self.dropout = check_number("dropout", dropout, low=0, high=1, high_open=True)
        self.validation_sequences = check_integer(
            "validation_sequences", validation_sequences, low=1
        )
        self.test_sequences = check_integer("test_sequences", test_sequences, low=1)
        self.train_sequences = check_optional_integer("train_sequences", train_sequences, low=1)
        if data_dir is not None and not isinstance(data_dir, (str, os.PathLike)):
            raise type_error("data_dir", data_dir, "a path (a string) or None")
        self.data_dir = None if data_dir is None else os.fspath(data_dir)
        # The most positions a sequence masks: round(sequence_length * 15%), as BERT's
        # max_predictions_per_seq (20 for 128 tokens), so that none is ever cut.
        self.max_predictions = max(1, round(sequence_length * DEFAULT_MASKED_LM_PROB))
        self._evaluation_inputs = {}
        # The traced forward pass of the last model evaluated (a trial evaluates one model many
        # times); one pair only, so that models of finished trials can be freed.
        self._forward_model = None
        self._forward = None

    def settings(self):
        """The fields that decide results: the corpus, the model and the masking."""
        return {
            "workload": "bert_mlm",
            "corpus": self.corpus,
            "sequence_length": self.sequence_length,
            "vocabulary_size": self.vocabulary_size,
            "num_layers": self.num_layers,
            "hidden_dim": self.hidden_dim,
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "dropout": self.dropout,
            "validation_sequences": self.validation_sequences,
            "test_sequences": self.test_sequences,
            "train_sequences": self.train_sequences,
            "masked_lm_prob": DEFAULT_MASKED_LM_PROB,
            "max_predictions": self.max_predictions,
            "split_seed": SPLIT_SEED,
        }

    def data_settings(self):
        """What decides the cached arrays: the corpus and its versions (the Debian
        packages', or Python's for its documentation), the sequences and the split."""
        if self.corpus == "debian":
            debian_text.ensure_installed()
            versions = debian_text.package_versions()
        else:
            versions = {"python": sys.version.split()[0]}
        return {
            "cache_format": CACHE_FORMAT,
            "corpus": self.corpus,
            "versions": versions,
            "sequence_length": self.sequence_length,
            "vocabulary_size": self.vocabulary_size,
            "validation_sequences": self.validation_sequences,
            "test_sequences": self.test_sequences,
            "train_sequences": self.train_sequences,
            "split_seed": SPLIT_SEED,
        }

    def load(self):
        """The prepared corpus, a `MaskedLanguageModelData`: read from the cache when it
        holds it, else prepared (`prepare_arrays`) and cached first.

        The cache is written as a whole directory (`keras_largebatch._files.new_directory`),
        which never replaces one holding anything.

        Raises:
            ValueError: the cache directory holds arrays prepared under other settings.
            FileExistsError: the cache directory holds files that are not a cache.
        """
        settings = self.data_settings()
        directory = self.data_dir or os.path.join(
            default_cache_dir(),
            f"{self.corpus}-"
            + hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12],
        )
        if not self._holds_cache(directory, settings):
            if os.path.isdir(directory) and os.listdir(directory):
                raise FileExistsError(
                    f"data_dir {directory} holds files but no cache ({SETTINGS_FILE}); nothing "
                    "there was changed: give an empty or new data_dir"
                )
            arrays = prepare_arrays(CORPORA[self.corpus](), settings)
            try:
                with _files.new_directory(directory) as temporary:
                    np.savez(os.path.join(temporary, ARRAYS_FILE), **arrays)
                    _files.write_text(
                        os.path.join(temporary, SETTINGS_FILE),
                        json.dumps(settings, indent=1, sort_keys=True) + "\n",
                    )
            except FileExistsError:
                # Another process may have cached the same arrays meanwhile.
                if not self._holds_cache(directory, settings):
                    raise
        return read_cache(directory)

    @staticmethod
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

    def build_model(self, seed):
        """keras-hub's `BertMaskedLM` (a `BertBackbone` of this workload's size with its
        masked-LM head, no preprocessor), weights drawn from ``seed``, not compiled. The
        pooler (which only the next-sentence task reads) is frozen: it gets no gradient."""
        import keras
        import keras_hub

        check_integer("seed", seed, low=0)
        keras.utils.set_random_seed(seed)
        backbone = keras_hub.models.BertBackbone(
            vocabulary_size=self.vocabulary_size,
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            hidden_dim=self.hidden_dim,
            intermediate_dim=self.intermediate_dim,
            dropout=self.dropout,
            max_sequence_length=self.sequence_length,
        )
        backbone.get_layer("pooled_dense").trainable = False
        return keras_hub.models.BertMaskedLM(backbone, preprocessor=None)

    def compile(self, model, optimizer):
        """Compiles ``model`` with ``optimizer`` and the masked-LM loss: the mean cross-entropy
        over the masked positions (the sample weights are 1 there, 0 on padding slots)."""
        import keras

        model.compile(
            optimizer=optimizer,
            loss=keras.losses.SparseCategoricalCrossentropy(
                from_logits=True, reduction="mean_with_sample_weight"
            ),
        )

    def _masking(self, data):
        return DynamicMasking.from_vocabulary(
            data.vocabulary, DEFAULT_MASKED_LM_PROB, self.max_predictions
        )

    def _features(self, token_ids):
        import tensorflow as tf

        return {
            "token_ids": token_ids,
            "padding_mask": tf.cast(token_ids != 0, tf.int32),
            "segment_ids": tf.zeros_like(token_ids),
        }

    def train_dataset(self, data, batch_size, seed):
        """``(x, y, sample_weight)`` batches of ``batch_size`` training sequences, repeated
        forever, each pass in a new order drawn from ``seed``, each batch masked anew
        (``x["mask_positions"]``; ``y`` the original ids there; ``sample_weight`` 1 for a
        masked position, 0 for a padding slot)."""
        import tensorflow as tf

        check_integer("batch_size", batch_size, low=1, high=data.train_examples)
        check_integer("seed", seed, low=0)
        sequences = tf.constant(data.sequences["train"])
        masking = self._masking(data)
        count = data.train_examples

        def masked_batch(step, indices):
            features = self._features(tf.gather(sequences, indices))
            # A stateless seed per (trial seed, step): the same trial masks the same way.
            mask_seed = tf.stack([tf.constant(seed, tf.int64), step])
            features, labels, weights = masking((features, {}, {}), mask_seed)
            return features, labels["masked_lm"], weights["masked_lm"]

        dataset = tf.data.Dataset.range(count).shuffle(
            count, seed=seed, reshuffle_each_iteration=True
        )
        dataset = dataset.repeat().batch(batch_size, drop_remainder=True).enumerate()
        dataset = dataset.map(masked_batch, num_parallel_calls=tf.data.AUTOTUNE)
        return dataset.prefetch(tf.data.AUTOTUNE)

    def evaluation_inputs(self, data, split):
        """``(x, y, sample_weight)`` of ``split`` as NumPy arrays, masked once: the same
        positions for every evaluation of this data (stateless seeds of the split, apart
        from every training seed)."""
        import tensorflow as tf

        check_choice("split", split, EVALUATION_SPLITS)
        key = (data.fingerprint, split)
        if key not in self._evaluation_inputs:
            masking = self._masking(data)
            sequences = data.sequences[split]
            parts = []
            for chunk, start in enumerate(range(0, len(sequences), EVALUATION_BATCH_SIZE)):
                features = self._features(
                    tf.constant(sequences[start : start + EVALUATION_BATCH_SIZE])
                )
                # Negative first halves: training seeds are >= 0.
                mask_seed = tf.constant([-1 - EVALUATION_SPLITS.index(split), chunk], tf.int64)
                parts.append(masking((features, {}, {}), mask_seed))
            x = {
                name: np.concatenate([part[0][name].numpy() for part in parts])
                for name in parts[0][0]
            }
            y = np.concatenate([part[1]["masked_lm"].numpy() for part in parts])
            weights = np.concatenate([part[2]["masked_lm"].numpy() for part in parts])
            self._evaluation_inputs[key] = (x, y, weights)
        return self._evaluation_inputs[key]

    def _forward_pass(self, model):
        """``model``'s per-position cross-entropy and correctness, traced once per model."""
        import tensorflow as tf

        if self._forward_model is None or self._forward_model() is not model:
            length, predictions = self.sequence_length, self.max_predictions
            specs = {
                "token_ids": tf.TensorSpec([None, length], tf.int32),
                "padding_mask": tf.TensorSpec([None, length], tf.int32),
                "segment_ids": tf.TensorSpec([None, length], tf.int32),
                "mask_positions": tf.TensorSpec([None, predictions], tf.int32),
            }

            @tf.function(input_signature=[specs, tf.TensorSpec([None, predictions], tf.int32)])
            def forward(x, y):
                logits = tf.cast(model(x, training=False), tf.float32)
                cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
                correct = tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), y)
                return cross_entropy, correct

            self._forward_model, self._forward = weakref.ref(model), forward
        return self._forward

    def evaluate(self, model, data, split):
        """``{"loss", "accuracy"}`` of ``model`` on ``split`` ("validation" or "test"): the
        mean masked-LM cross-entropy and the accuracy over the split's fixed masked positions
        (`evaluation_inputs`)."""
        x, y, weights = self.evaluation_inputs(data, split)
        forward = self._forward_pass(model)
        losses, correct = [], []
        for start in range(0, len(y), EVALUATION_BATCH_SIZE):
            chunk = slice(start, start + EVALUATION_BATCH_SIZE)
            cross_entropy, is_correct = forward({name: x[name][chunk] for name in x}, y[chunk])
            losses.append(cross_entropy.numpy())
            correct.append(is_correct.numpy())
        weights = weights.astype(np.float64)
        total = weights.sum()
        return {
            "loss": float((np.concatenate(losses) * weights).sum() / total),
            "accuracy": float((np.concatenate(correct) * weights).sum() / total),
        }
