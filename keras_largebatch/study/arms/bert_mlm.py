"""The masked-LM arm's workload: masked-language-model pretraining of a small BERT, the task on
which LAMB was proposed (You et al., "Large Batch Optimization for Deep Learning: Training BERT
in 76 minutes", arXiv:1904.00962).

The model is keras-hub's `BertBackbone` (post-LayerNorm, as BERT: Devlin et al., "BERT:
Pre-training of Deep Bidirectional Transformers for Language Understanding", arXiv:1810.04805)
with keras-hub's masked-LM head. The text is a corpus of English prose
(`bert_mlm_data.CORPORA`): the documentation Debian packages ship (`debian_text`), or, for tests
and quick runs, Python's own documentation.

`load` reads the corpus `bert_mlm_data` prepares and caches: an uncased WordPiece vocabulary,
and sequences ``[CLS] t_1 ... t_k [SEP]`` of ``sequence_length`` (masked-LM only: no sentence
pairs, no next-sentence task) split by document. Training masks every batch anew (dynamic
masking, as RoBERTa: Liu et al., arXiv:1907.11692), by BERT's rule: 15% of the tokens, of which
80% become [MASK], 10% a random token and 10% stay. Evaluation scores positions masked once per
split, so every evaluation of a study scores the same ones; its loss is the mean cross-entropy
over them, on which the study's targets are set.
"""

import math
import os
import weakref

import numpy as np

from keras_largebatch._checks import (
    check_choice,
    check_integer,
    check_number,
    check_optional_integer,
    type_error,
)
from keras_largebatch.bert.data import vocab as vocab_lib
from keras_largebatch.bert.data.masking import DEFAULT_MASKED_LM_PROB, DynamicMasking
from keras_largebatch.study.arms import bert_mlm_data

EVALUATION_SPLITS = ("validation", "test")
EVALUATION_BATCH_SIZE = 500


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
            `bert_mlm_data.default_cache_dir` named by the corpus and a hash of
            `data_settings`.
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
        self.corpus = check_choice("corpus", corpus, tuple(bert_mlm_data.CORPORA))
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
            "split_seed": bert_mlm_data.SPLIT_SEED,
        }

    def data_settings(self):
        """What decides the cached arrays (`bert_mlm_data.data_settings`)."""
        return bert_mlm_data.data_settings(
            self.corpus,
            self.sequence_length,
            self.vocabulary_size,
            self.validation_sequences,
            self.test_sequences,
            self.train_sequences,
        )

    def load(self):
        """The prepared corpus, a `bert_mlm_data.MaskedLanguageModelData`, read from the
        cache in ``data_dir`` (default: a directory of `bert_mlm_data.default_cache_dir` named
        by the corpus and a hash of `data_settings`), prepared and cached first when missing
        (`bert_mlm_data.load`).

        Raises:
            ValueError: the cache directory holds arrays prepared under other settings.
            FileExistsError: the cache directory holds files that are not a cache.
        """
        return bert_mlm_data.load(self.data_settings(), self.data_dir)

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
