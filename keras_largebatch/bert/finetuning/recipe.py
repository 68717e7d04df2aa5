"""BERT fine-tuning on a GLUE task as a recipe of the trainer: its classifier, data, optimizer,
evaluation and best checkpoint.

The classifier is keras-hub's `BertTextClassifier` on a preset's backbone (its pooled output,
dropout, a fresh dense head), or the same architecture freshly initialized
(``model.random_init``): the baseline that says what pretraining gave. The preset's
`BertTextClassifierPreprocessor` tokenizes the raw strings (pairs as two segments) in the
`tf.data` pipeline, so the model trains on token ids on any strategy. Classification trains
with softmax cross-entropy; STS-B is a regression of one output with mean squared error, whose
predictions are scored as they are (not clipped to the scores' range [0, 5], as GLUE's own
scorer reads them). Each dev split is scored every epoch and at the end with its GLUE metrics
(`keras_largebatch.bert.finetuning.glue_metrics`), and the weights of the best evaluation of the
task's main metric on the first dev split are kept
(`keras_largebatch.training.recipe.Recipe.best_metric`).

`keras_largebatch.bert.finetuning` is the command around it.
"""

import dataclasses
import json
import os

import keras
import numpy as np
import tensorflow as tf

from keras_largebatch import _extras, input_order
from keras_largebatch.bert.finetuning import glue, glue_metrics
from keras_largebatch.bert.pretraining import recipe as pretraining_recipe
from keras_largebatch.schedules import WarmupPolynomialDecay
from keras_largebatch.training.recipe import Recipe

try:
    import keras_hub
except ModuleNotFoundError as error:
    raise _extras.missing_extra(__name__, "bert", error) from error

# The registered names of a BERT text classifier's preset files (keras-hub's serialization).
BACKBONE_CLASS = "keras_hub>BertBackbone"
TOKENIZER_CLASS = "keras_hub>BertTokenizer"
PREPROCESSOR_CLASS = "keras_hub>BertTextClassifierPreprocessor"
VOCABULARY_FILE = os.path.join("assets", "tokenizer", "vocabulary.txt")


@dataclasses.dataclass(frozen=True)
class Preset:
    """What the recipe reads of a keras-hub BERT preset directory before loading it."""

    path: str
    num_layers: int
    hidden_dim: int
    vocabulary_size: int
    max_sequence_length: int  # rows of the backbone's position embedding
    sequence_length: int  # its preprocessor's (without one, max_sequence_length)


@dataclasses.dataclass(frozen=True)
class FinetuneInputs:
    """A run's checked inputs: the task, its examples per split, the preset, the length."""

    task: glue.Task
    examples: dict  # split name -> `glue.Examples`: "train" and the task's dev splits
    preset: Preset
    sequence_length: int  # tokens per example the preprocessor packs


def read_preset(path):
    """Checks that ``path`` (``model.preset``) is a keras-hub BERT preset directory that
    `keras_hub.models.BertTextClassifier.from_preset` loads, and returns its `Preset`.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: ``path`` is no preset directory, or not a BERT one (its backbone is not a
            ``BertBackbone``, its tokenizer not a ``BertTokenizer``, its vocabulary is
            missing), naming the file.
    """
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"model.preset {path!r} does not exist; give a keras-hub preset directory on disk: "
            "keras-largebatch-export RUN_DIR PRESET_DIR writes one from a pretraining run, and "
            "a keras-hub preset such as bert_tiny_en_uncased is downloaded once (see the "
            "fine-tuning guide)"
        )
    if not os.path.isdir(path):
        raise ValueError(f"model.preset {path!r} is a file, not a keras-hub preset directory")
    config = _preset_file(path, "config.json")
    if config.get("registered_name") != BACKBONE_CLASS:
        raise ValueError(
            f"model.preset {path!r}: config.json describes a {config.get('registered_name')!r}, "
            f"not a {BACKBONE_CLASS!r}; the recipe fine-tunes keras-hub's BertTextClassifier, "
            "which needs a BERT preset"
        )
    tokenizer = _preset_file(path, "tokenizer.json")
    if tokenizer.get("registered_name") != TOKENIZER_CLASS:
        raise ValueError(
            f"model.preset {path!r}: tokenizer.json describes a "
            f"{tokenizer.get('registered_name')!r}, not a {TOKENIZER_CLASS!r}, which "
            "BertTextClassifier tokenizes with"
        )
    if not os.path.isfile(os.path.join(path, VOCABULARY_FILE)):
        raise ValueError(
            f"model.preset {path!r} holds no {VOCABULARY_FILE}, the BertTokenizer's vocabulary"
        )
    backbone = config.get("config", {})
    max_sequence_length = int(backbone["max_sequence_length"])
    sequence_length = max_sequence_length
    if os.path.isfile(os.path.join(path, "preprocessor.json")):
        preprocessor = _preset_file(path, "preprocessor.json")
        if preprocessor.get("registered_name") == PREPROCESSOR_CLASS:
            sequence_length = int(preprocessor["config"]["sequence_length"])
    return Preset(
        path=path,
        num_layers=int(backbone["num_layers"]),
        hidden_dim=int(backbone["hidden_dim"]),
        vocabulary_size=int(backbone["vocabulary_size"]),
        max_sequence_length=max_sequence_length,
        sequence_length=sequence_length,
    )


def _preset_file(path, name):
    """The JSON object of a preset's file ``name``; ValueError naming it if absent or bad."""
    file_path = os.path.join(path, name)
    if not os.path.isfile(file_path):
        raise ValueError(
            f"model.preset {path!r} holds no {name}, so it is not a keras-hub preset directory"
        )
    try:
        with open(file_path, encoding="utf-8") as stream:
            content = json.load(stream)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"model.preset {path!r}: {file_path} is not JSON ({error})") from None
    if not isinstance(content, dict):
        raise ValueError(f"model.preset {path!r}: {file_path} does not hold a JSON object")
    return content


def load_inputs(config):
    """Checks and reads the inputs of the run that ``config`` (a `FinetuneConfig` with a
    ``model.preset`` and a ``data.glue_dir``) describes, before any training.

    Raises:
        FileNotFoundError: the preset, the task's directory or one of its files is missing.
        ValueError: the preset is not a BERT one, ``data.sequence_length`` exceeds its
            position embeddings, or a task file has a fault (named with its line).
    """
    preset = read_preset(config.model.preset)
    sequence_length = config.data.sequence_length or preset.sequence_length
    if sequence_length > preset.max_sequence_length:
        given = "" if config.data.sequence_length else " (null: the preset preprocessor's)"
        raise ValueError(
            f"data.sequence_length={sequence_length}{given} exceeds the max_sequence_length "
            f"{preset.max_sequence_length} of model.preset {preset.path!r} (the rows of its "
            "position embedding)"
        )
    task = glue.get_task(config.data.task)
    return FinetuneInputs(
        task=task,
        examples=glue.read_task(task, config.data.glue_dir),
        preset=preset,
        sequence_length=sequence_length,
    )


class GlueFineTuning(Recipe):
    """Fine-tunes the classifier that a `config.FinetuneConfig` describes.

    Args:
        config: the run's config; its phases' ``steps`` resolved
            (`config.FinetuneConfig.with_steps`).
        inputs: the run's `FinetuneInputs` (`load_inputs`); None reads them in `prepare`.
    """

    name = "finetune"

    def __init__(self, config, inputs=None):
        self.config = config
        self.inputs = inputs
        self.task = glue.get_task(config.data.task)
        self.preprocessor = None
        self._dev_datasets = {}
        if self.is_regression:
            self.reported_metrics = ("loss",)
            self.progress_metrics = (("loss", "loss"),)
        else:
            self.reported_metrics = ("loss", "accuracy")
            self.progress_metrics = (("loss", "loss"), ("acc", "accuracy"))

    @property
    def is_regression(self):
        return self.task.num_classes == 1

    def num_train_examples(self):
        return len(self.inputs.examples[glue.TRAIN_SPLIT].labels)

    def prepare(self, plan, log, record_counts):
        for phase in plan.phases:
            if phase.settings.steps is None:
                raise ValueError(
                    f"{phase.key}.steps is null: resolve the epochs into steps first "
                    "(FinetuneConfig.with_steps, as keras_largebatch.bert.finetuning does)"
                )
        if self.inputs is None:
            self.inputs = load_inputs(self.config)
        inputs = self.inputs
        self.preprocessor = keras_hub.models.BertTextClassifierPreprocessor.from_preset(
            inputs.preset.path, sequence_length=inputs.sequence_length
        )
        preset = inputs.preset
        dev = ", ".join(
            f"{len(inputs.examples[split].labels)} {split}" for split in self.task.dev_splits
        )
        log(
            f"task {self.task.name}: {self.num_train_examples()} training examples, {dev}; "
            f"{'random initialization of ' if self.config.model.random_init else ''}preset "
            f"{preset.path} ({preset.num_layers}-layer BERT, hidden {preset.hidden_dim}, "
            f"vocabulary {preset.vocabulary_size}), sequence length {inputs.sequence_length}"
        )

    def build_model(self):
        return keras_hub.models.BertTextClassifier.from_preset(
            self.inputs.preset.path,
            num_classes=self.task.num_classes,
            # Tokenized in the input pipeline (`dataset`), so the model takes token ids.
            preprocessor=None,
            load_weights=not self.config.model.random_init,
            dropout=self.config.model.classifier_dropout,
            dtype=self.config.mixed_precision,
        )

    def build_optimizer(self, phase, model):
        """AdamW (BERT's) or LAMB with a linear warmup over ``warmup_proportion`` of the
        phase's steps, then a polynomial (by default linear) decay to ``end_learning_rate``;
        LayerNorm parameters and biases are not decayed."""
        settings, optimizer = phase.settings, self.config.optimizer
        schedule = WarmupPolynomialDecay(
            peak_learning_rate=settings.peak_learning_rate,
            total_steps=phase.steps,
            warmup_steps=settings.warmup_steps(phase.steps),
            end_learning_rate=settings.end_learning_rate,
            power=settings.power,
        )
        return pretraining_recipe.optimizer_with_schedule(optimizer, schedule, phase, model)

    def compile_arguments(self, phase):
        if self.is_regression:
            return {"loss": keras.losses.MeanSquaredError()}
        return {
            "loss": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            "metrics": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        }

    def dataset(self, phase, batch_size, input_context, start_batch):
        train = self.inputs.examples[glue.TRAIN_SPLIT]
        share = slice(input_context.input_pipeline_id, None, input_context.num_input_pipelines)
        texts = tuple(tf.constant(column[share]) for column in _text_columns(train))
        labels = tf.constant(self._labels(train)[share])
        indices = input_order.shuffled_indices(
            len(texts[0]),
            input_order.phase_seed(self.config.data.seed, phase.index),
            start_batch * batch_size,
        )
        return (
            indices.batch(batch_size, drop_remainder=True)
            .map(
                lambda index, epoch: self.preprocessor(
                    tuple(tf.gather(column, index) for column in texts),
                    y=tf.gather(labels, index),
                ),
                num_parallel_calls=tf.data.AUTOTUNE,
            )
            .prefetch(tf.data.AUTOTUNE)
        )

    def _labels(self, examples):
        if self.is_regression:
            return examples.labels.astype(np.float32).reshape(-1, 1)
        return examples.labels

    def evaluation_interval(self, phase):
        """``eval_interval``, or an epoch of the phase rounded down to a multiple of
        ``log_interval`` (at least one window)."""
        if self.config.eval_interval is not None:
            return self.config.eval_interval
        log_interval = self.config.log_interval
        steps_per_epoch = self.num_train_examples() // phase.global_batch_size
        return max(log_interval, steps_per_epoch // log_interval * log_interval)

    def evaluate(self, model):
        """The task's GLUE metrics on each dev split, as ``{split}_{metric}``."""
        evaluation = {}
        for split in self.task.dev_splits:
            examples = self.inputs.examples[split]
            if split not in self._dev_datasets:
                self._dev_datasets[split] = self.prediction_dataset(examples)
            outputs = model.predict(self._dev_datasets[split], verbose=0)
            predictions = self.predictions(outputs[: len(examples.labels)])
            scores = glue_metrics.score(self.task, examples.labels, predictions)
            evaluation.update({f"{split}_{metric}": value for metric, value in scores.items()})
        return evaluation

    def prediction_dataset(self, examples):
        """The token batches of ``examples`` (a `glue.Examples`) to predict on, in order,
        padded with empty texts to whole batches of ``data.eval_batch_size``, so that every
        batch splits over the replicas alike; tokenized once, on the first pass, and cached."""
        batch_size = self.config.data.eval_batch_size
        padding = [""] * (-len(examples.labels) % batch_size)
        columns = tuple(tf.constant(list(column) + padding) for column in _text_columns(examples))
        return (
            tf.data.Dataset.from_tensor_slices(columns)
            .batch(batch_size)
            # y given, so that keras-hub does not read a pair of texts as (x, y).
            .map(
                lambda *texts: self.preprocessor(texts, y=None), num_parallel_calls=tf.data.AUTOTUNE
            )
            .cache()
        )

    def predictions(self, outputs):
        """The class ids of the model's ``outputs`` (the argmax of the logits); for STS-B the
        scores, unclipped."""
        outputs = np.asarray(outputs, np.float32)
        if self.is_regression:
            return outputs[:, 0]
        return np.argmax(outputs, axis=-1).astype(np.int32)

    def best_metric(self):
        return f"{self.task.dev_splits[0]}_{self.task.main_metric}"

    def phase_summary(self, phase):
        return {"epochs": phase.steps * phase.global_batch_size / self.num_train_examples()}

    def summary(self):
        return {
            "task": self.task.name,
            "main_metric": self.best_metric(),
            "preset": self.inputs.preset.path,
            "random_init": self.config.model.random_init,
            "sequence_length": self.inputs.sequence_length,
            "num_train_examples": self.num_train_examples(),
            "num_dev_examples": {
                split: len(self.inputs.examples[split].labels) for split in self.task.dev_splits
            },
            "optimizer": self.config.optimizer.name,
        }


def _text_columns(examples):
    """The text columns of a `glue.Examples`: one, or two for a pair task."""
    return (examples.first,) if examples.second is None else (examples.first, examples.second)
