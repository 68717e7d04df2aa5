"""BERT pretraining as a recipe of the trainer: its model, data, optimizer and metrics.

`keras_largebatch.training.trainer.Trainer` runs it; `keras_largebatch.bert.pretraining` is the
command around both.
"""

import dataclasses
import os

import tensorflow as tf

from keras_largebatch import input_order
from keras_largebatch.bert.data import manifest, pretraining_data
from keras_largebatch.bert.data import vocab as vocab_lib
from keras_largebatch.bert.pretraining import initial_weights, input_pipeline
from keras_largebatch.bert.pretraining import model as model_lib
from keras_largebatch.schedules import WarmupPolynomialDecay
from keras_largebatch.training.optimizer_factory import create_optimizer
from keras_largebatch.training.recipe import Recipe

# The window metrics reported in progress lines and the summary, in this order.
REPORTED_METRICS = (
    "loss",
    "masked_lm_loss",
    "masked_lm_accuracy",
    "next_sentence_loss",
    "next_sentence_accuracy",
)


class BertPretraining(Recipe):
    """Masked-LM and next-sentence pretraining of the BERT that a `PretrainConfig` describes.

    `prepare` checks the phases' record files (or creates the default corpus's records under
    ``OUTPUT_DIR/data``) and fixes the vocabulary before the model is built.
    """

    name = "pretrain"
    reported_metrics = REPORTED_METRICS
    progress_metrics = (
        ("loss", "loss"),
        ("mlm_acc", "masked_lm_accuracy"),
        ("nsp_acc", "next_sentence_accuracy"),
    )

    def __init__(self, config):
        self.config = config
        self.record_files = None
        self.vocab_file = None
        self.record_counts = None

    def prepare(self, plan, log, record_counts):
        start = initial_weights.starting_point(self.config.model, log)
        if start is not None:
            initial_weights.check_architecture(self.config, start)
        self.record_files, self.vocab_file = prepare_data(self.config, log)
        if start is not None:
            self.vocab_file = initial_weights.check_vocabulary(
                self.config, start, self.record_files
            )
        if self.config.data.dynamic_masking and self.vocab_file is None:
            raise ValueError(
                "data.dynamic_masking=true masks with the records' vocabulary: give "
                "data.vocab_file (model.vocabulary_size alone does not say which token is which)"
            )
        self.record_counts = manifest.manifests_first(record_counts)

    def vocabulary_size(self):
        start = initial_weights.starting_point(self.config.model)
        if start is not None:
            return start.architecture()["vocabulary_size"]
        return self.config.model.vocabulary_size or len(vocab_lib.load_vocabulary(self.vocab_file))

    def initialize(self, model):
        """With ``model.preset`` or ``model.init_checkpoint``, their weights; a resumed run
        never comes here, it restores its own checkpoint."""
        start = initial_weights.starting_point(self.config.model)
        if start is not None:
            start.load(model)

    def build_model(self):
        return build_model(self.config, self.vocabulary_size())

    def layout_map(self, device_mesh):
        """`model.layout_map`'s Megatron-LM split over the mesh's "model" axis; raises
        ValueError unless that axis's size divides the widths it splits: the attention heads,
        the hidden features (of the token embedding) and the feed-forward width."""
        model_axis_size = device_mesh.shape[device_mesh.axis_names.index("model")]
        _, hidden_dim, num_heads, intermediate_dim = initial_weights.model_dimensions(
            self.config.model
        )
        for key, value in (
            ("model.num_heads", num_heads),
            ("model.hidden_dim", hidden_dim),
            ("model.intermediate_dim", intermediate_dim),
        ):
            if value % model_axis_size:
                raise ValueError(
                    f"strategy.model_axis_size={model_axis_size} must divide {key}={value} (of "
                    f"{_architecture_source(self.config.model)}), which "
                    "model_parallel splits over the model axis"
                )
        return model_lib.layout_map(device_mesh)

    def build_optimizer(self, phase, model):
        return build_optimizer(self.config.optimizer, phase, model)

    def dataset(self, phase, batch_size, input_context, start_batch):
        # A pipeline serves num_replicas_in_sync / num_input_pipelines replicas a batch each
        # per micro-batch (`keras_largebatch.training.trainer.make_phase_dataset`): its batches
        # of one optimizer step, over which the step's masked-token count is taken.
        num_pipelines = input_context.num_input_pipelines if input_context else 1
        batches_per_step = phase.global_batch_size // (num_pipelines * batch_size)
        return input_pipeline.make_pretraining_dataset(
            self.record_files[phase.index],
            phase.settings.seq_length,
            phase.settings.max_predictions_per_seq,
            batch_size,
            input_context=input_context,
            seed=input_order.phase_seed(self.config.data.seed, phase.index),
            shuffle_buffer_size=self.config.data.shuffle_buffer_size,
            cycle_length=self.config.data.cycle_length,
            start_batch=start_batch,
            record_counts=self.record_counts,
            batches_per_step=batches_per_step,
            dynamic_masking=self.config.data.dynamic_masking,
            vocabulary=self.vocab_file if self.config.data.dynamic_masking else None,
            masked_lm_prob=self.config.data.masked_lm_prob,
            whole_word_mask=self.config.data.whole_word_mask,
        )

    def phase_summary(self, phase):
        return {"seq_length": phase.settings.seq_length}

    def summary(self):
        start = initial_weights.starting_point(self.config.model)
        return {
            # A start's architecture has no named size.
            "model_size": self.config.model.size_name() if start is None else None,
            "initialized_from": None if start is None else start.name,
            "optimizer": self.config.optimizer.name,
        }


def _architecture_source(model_config):
    """Where the model's dimensions come from, for messages."""
    start = initial_weights.starting_point(model_config)
    if start is not None:
        return start.name
    return f"model.size={model_config.size_name()!r} and its overrides"


def build_model(config, vocabulary_size):
    """The `BertPretrainer` that ``config.model`` and ``config.mixed_precision`` describe, its
    weights random (with ``model.preset`` or ``model.init_checkpoint``, of their architecture:
    `BertPretraining.initialize` loads their weights)."""
    model_config = config.model
    if model_config.preset is not None:
        backbone = model_lib.backbone_from_preset(
            model_config.preset, dropout=model_config.dropout, dtype=config.mixed_precision
        )
        return model_lib.BertPretrainer(backbone)
    if model_config.init_checkpoint is not None:
        start = initial_weights.starting_point(model_config)
        source = start.config
        # The source run's architecture, trained with this run's dropout and precision.
        source = dataclasses.replace(
            source,
            model=dataclasses.replace(source.model, dropout=model_config.dropout),
            mixed_precision=config.mixed_precision,
        )
        return build_model(source, start.architecture()["vocabulary_size"])
    num_layers, hidden_dim, num_heads, intermediate_dim = model_config.dimensions()
    backbone = model_lib.bert_backbone(
        model_config.size_name(),
        vocabulary_size=vocabulary_size,
        max_sequence_length=(
            model_config.max_sequence_length or max(p.seq_length for p in config.phases)
        ),
        dropout=model_config.dropout,
        num_layers=num_layers,
        hidden_dim=hidden_dim,
        num_heads=num_heads,
        intermediate_dim=intermediate_dim,
        dtype=config.mixed_precision,
    )
    return model_lib.BertPretrainer(backbone)


def build_optimizer(optimizer_config, phase, model):
    """A fresh optimizer for one phase (a `keras_largebatch.training.plan.PhasePlan`), with its
    warmup + polynomial-decay schedule: LAMB (`keras_largebatch.LAMB`), or Keras's AdamW with
    the same weight-decay exclusions (`keras_largebatch.training.optimizer_factory`)."""
    settings = phase.settings
    schedule = WarmupPolynomialDecay(
        peak_learning_rate=settings.peak_learning_rate,
        total_steps=phase.steps,
        warmup_steps=settings.warmup_steps,
        end_learning_rate=settings.end_learning_rate,
        power=settings.power,
    )
    return optimizer_with_schedule(optimizer_config, schedule, phase, model)


def optimizer_with_schedule(optimizer_config, schedule, phase, model):
    """The optimizer that ``optimizer_config`` (a `config.OptimizerConfig`) names, following
    ``schedule``, for one phase of ``model``: its weight-decay and trust-ratio exclusions,
    accumulation and clipping; it records trust ratios. Pretraining and fine-tuning share it."""
    return create_optimizer(
        optimizer_config.name,
        schedule,
        weight_decay=optimizer_config.weight_decay,
        exclude_from_weight_decay=list(optimizer_config.exclude_from_weight_decay),
        exclude_from_layer_adaptation=list(optimizer_config.exclude_from_layer_adaptation),
        variables=model.trainable_variables,
        gradient_accumulation_steps=phase.gradient_accumulation_steps,
        record_trust_ratio=True,
        beta_1=optimizer_config.beta_1,
        beta_2=optimizer_config.beta_2,
        epsilon=optimizer_config.epsilon,
        global_clipnorm=optimizer_config.global_clipnorm,
    )


def prepare_data(config, log):
    """Returns ``(record files per phase, vocabulary file)``: the phases' checked input files,
    or the default corpus's records, created under OUTPUT_DIR/data when missing."""
    record_files = [None] * len(config.phases)
    for index, phase in enumerate(config.phases):
        if phase.input_files is not None:
            files = input_pipeline.resolve_record_files(phase.input_files)
            for path in files:
                input_pipeline.check_record_file(
                    path,
                    phase.seq_length,
                    phase.max_predictions_per_seq,
                    config.data.dynamic_masking,
                )
            record_files[index] = files
    vocab_file = config.data.vocab_file
    if vocab_file is not None and not tf.io.gfile.exists(vocab_file):
        raise ValueError(f"data.vocab_file {vocab_file!r} does not exist")
    if (
        vocab_file is None
        and config.model.vocabulary_size is None
        and config.model.preset is None
        and config.model.init_checkpoint is None
        and all(record_files)
    ):
        raise ValueError(
            "model.vocabulary_size is null and data.vocab_file is null: give one of them for "
            "records from input_files (the model's vocabulary must match the records' ids)"
        )
    for index, phase in enumerate(config.phases):
        if record_files[index] is not None:
            continue
        data = pretraining_data.create_default_pretraining_data(
            phase.default_data_dir(config.output_dir, config.data.dynamic_masking),
            max_seq_length=phase.seq_length,
            max_predictions_per_seq=phase.max_predictions_per_seq,
            vocabulary_size=config.data.vocabulary_size,
            dupe_factor=config.data.dupe_factor,
            seed=config.data.seed,
            overwrite=config.overwrite,
            progress=True,
            dynamic_masking=config.data.dynamic_masking,
            masked_lm_prob=config.data.masked_lm_prob,
        )
        log(
            f"phase {index + 1} data: {data.num_examples} examples in "
            f"{os.path.dirname(data.record_files[0])}"
        )
        if vocab_file is None:
            vocab_file = data.vocab_file
        elif vocab_lib.load_vocabulary(vocab_file) != vocab_lib.load_vocabulary(data.vocab_file):
            raise ValueError(
                f"phase {index + 1}'s default records use vocabulary {data.vocab_file}, which "
                f"differs from {vocab_file}; the model has one vocabulary for every phase"
            )
        record_files[index] = data.record_files
    return record_files, vocab_file
