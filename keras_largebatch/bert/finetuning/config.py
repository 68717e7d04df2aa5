"""Configuration of a BERT fine-tuning run on a GLUE task: a `FinetuneConfig` of dataclasses.

Every field has a default, so an empty config is the embedded default: the default tiny
pretraining run exported to a preset, then fine-tuned on the default ``next_sentence`` task from
the pretrained backbone and from a random initialization of the same architecture
(`keras_largebatch.bert.finetuning`). With ``model.preset`` and ``data.glue_dir`` it is one run
on a GLUE task:

    model:
      preset: presets/bert_base_en_uncased
    data:
      task: sst2
      glue_dir: glue_data/SST-2
    phases:
      - {global_batch_size: 32, epochs: 3, peak_learning_rate: 2.0e-5}

YAML files and ``key=value`` overrides work as for every recipe
(`keras_largebatch.training.config`): ``data.task=mrpc``, ``phases.0.peak_learning_rate=3e-5``,
``optimizer.name=lamb``. A phase's ``steps`` left null is ``epochs`` passes over the training
set, resolved once the training set is read (`FinetuneConfig.with_steps`).

The defaults are BERT's fine-tuning recipe (Devlin et al., "BERT: Pre-training of Deep
Bidirectional Transformers for Language Understanding", arXiv 1810.04805, appendix A.3: Adam
with weight decay 0.01, 10% linear warmup then linear decay, batch 32, 3 epochs), except the
peak learning rate: BERT-Base and -Large take 2e-5 to 5e-5, the default tiny model (2 layers,
hidden 128) more (``PhaseConfig.peak_learning_rate``).
"""

import copy
import dataclasses
from typing import Optional

from keras_largebatch import _checks
from keras_largebatch.bert.finetuning.default_task import DEFAULT_NUM_DEV, DEFAULT_NUM_TRAIN
from keras_largebatch.bert.finetuning.glue import TASK_NAMES
from keras_largebatch.bert.pretraining import config as bert_config
from keras_largebatch.training import config as training_config
from keras_largebatch.training import config_loading

OPTIMIZER_NAMES = ("adamw", "lamb")
DEFAULT_TASK = "next_sentence"


@dataclasses.dataclass
class ModelConfig:
    """The classifier: keras-hub's `BertTextClassifier` on a preset's backbone."""

    preset: Optional[str] = None  # a keras-hub BERT preset directory (keras-largebatch-export's,
    # or any on disk); null: the embedded default (the default pretraining run, exported)
    random_init: bool = False  # the preset's architecture with fresh weights: the baseline
    classifier_dropout: float = 0.1  # dropout before the classification head (BERT's 0.1);
    # the backbone's own dropout is the preset's


@dataclasses.dataclass
class PhaseConfig(training_config.PhaseConfig):
    """One fine-tuning phase: batch, length and a linear warmup then linear decay."""

    global_batch_size: int = 32  # examples per optimizer step (BERT: 32)
    steps: Optional[int] = None  # optimizer steps; null: epochs x training examples / batch
    epochs: float = 3.0  # passes over the training set, when steps is null (BERT: 3)
    # A tiny BERT's (2 layers, hidden 128): on the default task 1e-4 to 4e-4 keep what
    # pretraining gave (dev accuracy 0.565 to 0.577) and 1e-3 loses most of it (0.512; the
    # fine-tuning guide).
    # BERT-Base and -Large: 2e-5, 3e-5 or 5e-5.
    peak_learning_rate: float = 2.0e-4  # rate at the end of warmup
    warmup_proportion: float = 0.1  # of the phase's steps, linear warmup from 0 (BERT: 0.1)
    end_learning_rate: float = 0.0  # rate at the end of the decay (BERT: 0)
    power: float = 1.0  # decay power (1: BERT's linear decay)

    def validate(self, key):
        # Null steps are checked once resolved from the epochs (`FinetuneConfig.with_steps`).
        resolved = self if self.steps is not None else dataclasses.replace(self, steps=1)
        training_config.PhaseConfig.validate(resolved, key)
        _checks.check_number(f"{key}.epochs", self.epochs, low=0, low_open=True)
        _checks.check_number(
            f"{key}.warmup_proportion", self.warmup_proportion, low=0, high=1, high_open=True
        )
        steps = self.steps or 1
        _checks.check_warmup_decay(
            self.peak_learning_rate,
            self.warmup_steps(steps),
            steps,
            self.end_learning_rate,
            self.power,
            key=f"{key}.",
            warmup_name=f"{key}.warmup_proportion x steps",
            total_name=f"{key}.steps",
        )

    def warmup_steps(self, steps):
        """Warmup steps of a phase of ``steps`` steps (BERT's ``int(steps x proportion)``)."""
        return int(steps * self.warmup_proportion)


@dataclasses.dataclass
class OptimizerConfig(bert_config.OptimizerConfig):
    """The optimizer of every phase (each phase gets a fresh one): pretraining's settings and
    exclusions (LayerNorm parameters and biases, BERT's), with AdamW first."""

    name: str = "adamw"  # adamw (keras.optimizers.AdamW, BERT's) or lamb (keras_largebatch.LAMB,
    # for large-batch fine-tuning)


@dataclasses.dataclass
class DataConfig:
    """The GLUE task and how its text is read."""

    task: str = DEFAULT_TASK  # cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli,
    # next_sentence
    glue_dir: Optional[str] = None  # the task's directory as the GLUE download lays it out
    # (train.tsv, dev.tsv); null: the embedded default's next_sentence task, written for it
    sequence_length: Optional[int] = None  # tokens per example; null: the preset
    # preprocessor's (without one, the backbone's max_sequence_length)
    eval_batch_size: int = 64  # examples per prediction batch on the dev splits
    seed: int = 12345  # seed of the training order
    default_train_examples: int = DEFAULT_NUM_TRAIN  # train examples of the embedded default's
    # next_sentence task (data.glue_dir null; an even number from 4, half of each class)
    default_dev_examples: int = DEFAULT_NUM_DEV  # its dev examples (an even number from 4)


@dataclasses.dataclass
class FinetuneConfig(training_config.RunConfig):
    """A whole fine-tuning run; the defaults are the embedded default."""

    output_dir: str = "runs/bert_tiny_finetune"  # run directory (the embedded default's: its
    # preset/, data/ and one run directory per initialization)
    log_interval: int = 25  # optimizer steps per progress line
    checkpoint_interval: int = 50  # optimizer steps between checkpoints (the default task's
    # epoch, 62 steps, rounded down to a multiple of log_interval)
    eval_interval: Optional[int] = None  # optimizer steps between dev evaluations (a multiple
    # of log_interval); null: an epoch, rounded down to a multiple of log_interval
    phases: list[PhaseConfig] = dataclasses.field(default_factory=lambda: [PhaseConfig()])
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)

    def is_embedded_default(self):
        """True when ``model.preset`` is null: the default pretraining run is exported and
        fine-tuned next to a random initialization."""
        return self.model.preset is None

    def validate(self):
        """Checks values and relations between fields; raises naming the field. Returns self."""
        _checks.check_choice("optimizer.name", self.optimizer.name, OPTIMIZER_NAMES)
        _checks.check_choice("data.task", self.data.task, TASK_NAMES)
        super().validate()
        if self.eval_interval is not None:
            _checks.check_integer("eval_interval", self.eval_interval, low=1)
            if self.eval_interval % self.log_interval:
                raise ValueError(
                    f"eval_interval must be a multiple of log_interval={self.log_interval} "
                    f"(evaluations run at the end of a logging window), got {self.eval_interval}"
                )
        _checks.check_number(
            "model.classifier_dropout",
            self.model.classifier_dropout,
            low=0.0,
            high=1.0,
            high_open=True,
        )
        if self.is_embedded_default() and self.model.random_init:
            raise ValueError(
                "model.random_init=true needs model.preset: with model.preset null, the "
                "embedded default fine-tunes both the pretrained backbone and a random "
                "initialization of it"
            )
        if self.data.glue_dir is None and not (
            self.is_embedded_default() and self.data.task == DEFAULT_TASK
        ):
            raise ValueError(
                f"data.glue_dir is null, which stands for the embedded default's "
                f"{DEFAULT_TASK!r} task (with model.preset null); give the directory of the "
                f"TSV files of task {self.data.task!r} (e.g. glue_data/SST-2)"
            )
        _checks.check_optional_integer("data.sequence_length", self.data.sequence_length, low=3)
        _checks.check_integer("data.eval_batch_size", self.data.eval_batch_size, low=1)
        for name in ("default_train_examples", "default_dev_examples"):
            value = _checks.check_integer(f"data.{name}", getattr(self.data, name), low=4)
            if value % 2:
                raise ValueError(
                    f"data.{name} must be even (each pair of sentences of the "
                    f"{DEFAULT_TASK} task gives one example of each class), got {value}"
                )
        self.optimizer.validate()
        return self

    def check_accumulation(self, key, phase, accumulation_steps):
        if phase.steps is None:
            # The steps' own check waits for them (`with_steps`); the batch's is made now.
            phase = dataclasses.replace(phase, steps=self.log_interval)
        super().check_accumulation(key, phase, accumulation_steps)
        training_config.check_baseline_accumulation(
            key, accumulation_steps, self.optimizer.name, layerwise="lamb"
        )

    def with_steps(self, num_train_examples):
        """A validated copy whose phases' null ``steps`` are their ``epochs`` over
        ``num_train_examples`` training examples: ``int(num_train_examples /
        global_batch_size x epochs)`` (BERT's count), at least 1. This config is not changed.
        """
        _checks.check_integer("num_train_examples", num_train_examples, low=1)
        config = copy.deepcopy(self)
        for phase in config.phases:
            if phase.steps is None:
                phase.steps = max(
                    1, int(num_train_examples / phase.global_batch_size * phase.epochs)
                )
        return config.validate()

    def for_run(self, output_dir, preset, glue_dir, random_init):
        """A validated copy for one of the embedded default's runs: the same settings in
        ``output_dir``, from ``preset`` on the task in ``glue_dir``."""
        config = copy.deepcopy(self)
        config.output_dir = output_dir
        config.model.preset = preset
        config.model.random_init = random_init
        config.data.glue_dir = glue_dir
        return config.validate()


def config_from_dict(values, key="config"):
    """Builds a `FinetuneConfig` from nested plain data (a loaded YAML document)."""
    return config_loading.config_from_dict(FinetuneConfig, values, key)


def load_config(path=None, overrides=()):
    """Loads a `FinetuneConfig`: defaults, then the YAML file at ``path``, then the overrides.

    See `keras_largebatch.training.config_loading.load_config`.
    """
    return config_loading.load_config(FinetuneConfig, path, overrides)
