"""Configuration of a BERT pretraining run: dataclasses, YAML loading and ``key=value`` overrides.

A run is one `PretrainConfig`. Every field has a default, so an empty config is the embedded
default job (BERT-tiny with LAMB on the default corpus, sized for a CPU). A YAML file sets any
subset of the fields with the same nesting:

    model:
      size: large
    phases:
      - {seq_length: 128, max_predictions_per_seq: 20, global_batch_size: 65536, steps: 7038,
         peak_learning_rate: 6.0e-3, warmup_steps: 2000, power: 0.5}
    optimizer:
      weight_decay: 0.01

and overrides change single fields with dotted keys, the value read as YAML:
``model.size=mini``, ``phases.0.steps=100``, ``optimizer.global_clipnorm=null``. Unknown keys
and values of the wrong type are errors that name the key, the value and what is allowed, raised
before any work. Numbers written as ``6e-3`` (which YAML 1.1 reads as a string) are accepted
for numeric fields.
"""

import dataclasses
import os
from typing import ClassVar, Optional

from keras_largebatch import _checks
from keras_largebatch.bert.data.defaults import (
    DEFAULT_CORPUS_DUPE_FACTOR,
    DEFAULT_MASKED_LM_PROB,
    DEFAULT_MAX_PREDICTIONS_PER_SEQ,
    DEFAULT_MAX_SEQ_LENGTH,
    DEFAULT_SEED,
)
from keras_largebatch.training import config as training_config
from keras_largebatch.training import config_loading
from keras_largebatch.training.config import StrategyConfig

__all__ = [
    "BERT_EXCLUSIONS",
    "DEFAULT_CORPUS_DUPE_FACTOR",
    "DEFAULT_MAX_PREDICTIONS_PER_SEQ",
    "DEFAULT_MAX_SEQ_LENGTH",
    "DEFAULT_SEED",
    "DataConfig",
    "MODEL_SIZES",
    "ModelConfig",
    "OPTIMIZER_NAMES",
    "OptimizerConfig",
    "PhaseConfig",
    "PretrainConfig",
    "StrategyConfig",
    "config_from_dict",
    "load_config",
]

OPTIMIZER_NAMES = ("lamb", "adamw")
# google-research/bert's released sizes (its README, "BERT-Tiny" to "BERT-Large"); intermediate
# = 4 x hidden.
MODEL_SIZES = {
    "tiny": {"num_layers": 2, "hidden_dim": 128, "num_heads": 2},
    "mini": {"num_layers": 4, "hidden_dim": 256, "num_heads": 4},
    "small": {"num_layers": 4, "hidden_dim": 512, "num_heads": 8},
    "medium": {"num_layers": 8, "hidden_dim": 512, "num_heads": 8},
    "base": {"num_layers": 12, "hidden_dim": 768, "num_heads": 12},
    "large": {"num_layers": 24, "hidden_dim": 1024, "num_heads": 16},
}
# BertBackbone's paths: "embeddings_layer_norm/gamma", ".../self_attention_layer_norm/beta",
# "mlm_head/intermediate_layer_norm/gamma", ".../query/bias" (rank 2, so a rank rule would miss
# it), "mlm_head/output_bias".
BERT_EXCLUSIONS = ("layer_norm", "bias")


@dataclasses.dataclass
class ModelConfig:
    """The BERT model: a named size, optionally with single dimensions changed, or the
    architecture and weights of a keras-hub preset (continued pretraining)."""

    size: Optional[str] = None  # tiny ... large (google-research/bert); None: tiny, or the preset's
    vocabulary_size: Optional[int] = None  # None: the size of the data's vocabulary file
    num_layers: Optional[int] = None  # None: the size's number of transformer layers
    hidden_dim: Optional[int] = None  # None: the size's hidden width
    num_heads: Optional[int] = None  # None: the size's attention heads
    intermediate_dim: Optional[int] = None  # None: 4 x hidden_dim
    dropout: float = 0.1  # dropout rate of the backbone
    max_sequence_length: Optional[int] = None  # position embeddings; None: longest phase
    preset: Optional[str] = None  # keras-hub BERT preset dir: architecture and weights to start
    init_checkpoint: Optional[str] = None  # a pretraining run dir or its .weights.h5 to start

    def size_name(self):
        """The named size the dimensions start from: ``size``, or tiny when it is None."""
        return self.size or "tiny"

    def dimensions(self):
        """``(num_layers, hidden_dim, num_heads, intermediate_dim)`` after the overrides (of
        the named size; a preset's are in its config, `recipe.preset_architecture`)."""
        size = MODEL_SIZES[self.size_name()]
        num_layers = self.num_layers or size["num_layers"]
        hidden_dim = self.hidden_dim or size["hidden_dim"]
        num_heads = self.num_heads or size["num_heads"]
        return num_layers, hidden_dim, num_heads, self.intermediate_dim or 4 * hidden_dim


@dataclasses.dataclass
class PhaseConfig(training_config.PhaseConfig):
    """One pretraining phase: its data, batch, length and learning-rate schedule.

    Every phase continues from the weights the previous one ended with and starts a fresh
    optimizer whose rate warms up again from 0 (the LAMB 64K/32K mixed-batch run).
    """

    # The embedded default's: enough for its next-sentence prediction to be learned, which the
    # fine-tuning default's task (`keras_largebatch.bert.finetuning.default_task`) builds on.
    steps: int = 2000  # optimizer steps of this phase
    seq_length: int = DEFAULT_MAX_SEQ_LENGTH  # tokens per example (the records')
    max_predictions_per_seq: int = DEFAULT_MAX_PREDICTIONS_PER_SEQ  # masked positions
    peak_learning_rate: float = 1.0e-2  # rate at the end of warmup
    warmup_steps: int = 200  # linear warmup from 0, in optimizer steps
    end_learning_rate: float = 0.0  # rate at the end of the polynomial decay
    power: float = 1.0  # decay power (1.0 in the LAMB paper, 0.5 in NVIDIA's recipe)
    input_files: Optional[list[str]] = None  # record globs; None: the default corpus's records

    def default_data_dir(self, output_dir, dynamic_masking=False):
        """Where a run in ``output_dir`` keeps this phase's records of the default corpus
        (`pretraining_data.create_default_pretraining_data`), by their length and
        predictions: ``output_dir/data/seq128-pred20``, ``-dynamic`` after it for the unmasked
        records of dynamic masking."""
        name = f"seq{self.seq_length}-pred{self.max_predictions_per_seq}"
        return os.path.join(output_dir, "data", name + ("-dynamic" if dynamic_masking else ""))

    def validate(self, key):
        _checks.check_integer(f"{key}.seq_length", self.seq_length, low=5)
        if not 1 <= self.max_predictions_per_seq <= self.seq_length:
            raise ValueError(
                f"{key}.max_predictions_per_seq must be in [1, {key}.seq_length="
                f"{self.seq_length}], got {self.max_predictions_per_seq}"
            )
        super().validate(key)
        _checks.check_integer(f"{key}.warmup_steps", self.warmup_steps, low=0)
        _checks.check_warmup_decay(
            self.peak_learning_rate,
            self.warmup_steps,
            self.steps,
            self.end_learning_rate,
            self.power,
            key=f"{key}.",
            warmup_name=f"{key}.warmup_steps",
            total_name=f"{key}.steps",
        )
        if self.input_files is not None and not self.input_files:
            raise ValueError(f"{key}.input_files must be null or name at least one pattern, got []")


@dataclasses.dataclass
class OptimizerConfig:
    """The optimizer of every phase (each phase gets a fresh one)."""

    name: str = "lamb"  # lamb (keras_largebatch.LAMB) or adamw (keras.optimizers.AdamW)
    weight_decay: float = 0.01  # decoupled weight decay (BERT's 0.01)
    beta_1: float = 0.9  # first-moment decay
    beta_2: float = 0.999  # second-moment decay
    epsilon: float = 1.0e-6  # added to sqrt(v_hat)
    global_clipnorm: Optional[float] = 1.0  # clip the global-batch gradient norm; null: off
    exclude_from_weight_decay: list[str] = dataclasses.field(
        default_factory=lambda: list(BERT_EXCLUSIONS)
    )  # regexes searched in variable paths
    exclude_from_layer_adaptation: list[str] = dataclasses.field(
        default_factory=lambda: list(BERT_EXCLUSIONS)
    )  # regexes for LAMB's trust ratio (ratio 1)

    def validate(self):
        """Raises ValueError for a value out of range (the run's config checks the name
        against the optimizers its recipe builds)."""
        _checks.check_number("optimizer.weight_decay", self.weight_decay, low=0)
        for name in ("beta_1", "beta_2"):
            _checks.check_number(
                f"optimizer.{name}", getattr(self, name), low=0.0, high=1.0, high_open=True
            )
        _checks.check_number("optimizer.epsilon", self.epsilon, low=0)
        if self.global_clipnorm is not None:
            _checks.check_number(
                "optimizer.global_clipnorm", self.global_clipnorm, low=0, low_open=True
            )


@dataclasses.dataclass
class DataConfig:
    """Where the records come from and how they are read."""

    # Keys of earlier versions, refused with what replaced them.
    REMOVED_FIELDS: ClassVar[dict] = {
        "deterministic": "the training order is always shuffled by data.seed and the epoch and "
        "resumed exactly, as fast at any step (keras_largebatch.input_order)"
    }

    vocab_file: Optional[str] = None  # vocabulary of the records; None: the default corpus's
    vocabulary_size: int = 8000  # most tokens of the default corpus's built vocabulary
    dupe_factor: int = DEFAULT_CORPUS_DUPE_FACTOR  # passes over the corpus
    shuffle_buffer_size: int = 10000  # records of each shuffled window of the training order
    cycle_length: int = 8  # record files read at once, interleaved
    seed: int = DEFAULT_SEED  # seed of the default records and of the training order
    dynamic_masking: bool = False  # mask every batch anew in the input pipeline (unmasked records)
    whole_word_mask: bool = False  # with dynamic_masking: mask whole words (a token and its ##s)
    masked_lm_prob: float = DEFAULT_MASKED_LM_PROB  # fraction of tokens dynamic masking masks


@dataclasses.dataclass
class PretrainConfig(training_config.RunConfig):
    """A whole pretraining run; the defaults are the embedded default job."""

    output_dir: str = "runs/bert_tiny_lamb"  # run directory: config, data, checkpoints, logs
    phases: list[PhaseConfig] = dataclasses.field(default_factory=lambda: [PhaseConfig()])
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)

    def validate(self):
        """Checks values and relations between fields; raises naming the field. Returns self."""
        if self.model.size is not None:
            _checks.check_choice("model.size", self.model.size, tuple(MODEL_SIZES))
        if self.model.preset is not None and self.model.init_checkpoint is not None:
            raise ValueError(
                f"model.preset={self.model.preset!r} and model.init_checkpoint="
                f"{self.model.init_checkpoint!r} both name the weights to start from; give one"
            )
        if self.model.preset is not None and "://" in str(self.model.preset):
            raise ValueError(
                f"model.preset must be a local directory (keras-hub reads presets with local "
                f"file I/O here), got {self.model.preset!r}"
            )
        _checks.check_choice("optimizer.name", self.optimizer.name, OPTIMIZER_NAMES)
        super().validate()
        for name in (
            "vocabulary_size",
            "num_layers",
            "hidden_dim",
            "num_heads",
            "intermediate_dim",
            "max_sequence_length",
        ):
            _checks.check_optional_integer(f"model.{name}", getattr(self.model, name), low=1)
        _checks.check_number("model.dropout", self.model.dropout, low=0.0, high=1.0, high_open=True)
        _, hidden_dim, num_heads, _ = self.model.dimensions()
        if hidden_dim % num_heads:
            raise ValueError(
                f"model.hidden_dim={hidden_dim} must be divisible by model.num_heads={num_heads}"
            )
        _checks.check_integer("data.vocabulary_size", self.data.vocabulary_size, low=10)
        _checks.check_integer("data.dupe_factor", self.data.dupe_factor, low=1)
        _checks.check_integer("data.shuffle_buffer_size", self.data.shuffle_buffer_size, low=1)
        _checks.check_integer("data.cycle_length", self.data.cycle_length, low=1)
        _checks.check_bool("data.dynamic_masking", self.data.dynamic_masking)
        _checks.check_bool("data.whole_word_mask", self.data.whole_word_mask)
        _checks.check_number(
            "data.masked_lm_prob",
            self.data.masked_lm_prob,
            low=0,
            high=1,
            low_open=True,
            high_open=True,
        )
        if self.data.whole_word_mask and not self.data.dynamic_masking:
            raise ValueError(
                "data.whole_word_mask=true masks in the input pipeline, which needs "
                "data.dynamic_masking=true; for records masked when written, make them with "
                "keras-largebatch-create-data --whole-word-mask instead"
            )
        self.optimizer.validate()
        for index, phase in enumerate(self.phases):
            if phase.input_files is None and "://" in str(self.output_dir):
                # The default corpus's corpus, vocabulary and manifest are written with local
                # file I/O under output_dir.
                raise ValueError(
                    f"phases.{index}.input_files is null, so the default corpus's records would "
                    f"be created under output_dir {self.output_dir!r}, which must then be local; "
                    f"give phases.{index}.input_files for a remote output_dir"
                )
            if phase.input_files is None and self.model.preset is not None:
                raise ValueError(
                    f"phases.{index}.input_files is null with model.preset="
                    f"{self.model.preset!r}: the default corpus builds its own vocabulary, "
                    "and the preset's model needs records of its vocabulary (keras-largebatch-"
                    "create-data --preset PRESET_DIR writes them); give input_files"
                )
        longest = max(phase.seq_length for phase in self.phases)
        if self.model.max_sequence_length is not None and self.model.max_sequence_length < longest:
            raise ValueError(
                f"model.max_sequence_length must be >= the longest phase's seq_length={longest}, "
                f"got {self.model.max_sequence_length}"
            )
        return self

    def check_accumulation(self, key, phase, accumulation_steps):
        super().check_accumulation(key, phase, accumulation_steps)
        training_config.check_baseline_accumulation(
            key, accumulation_steps, self.optimizer.name, layerwise="lamb"
        )


def config_from_dict(values, key="config"):
    """Builds a `PretrainConfig` from nested plain data (a loaded YAML document)."""
    return config_loading.config_from_dict(PretrainConfig, values, key)


def load_config(path=None, overrides=()):
    """Loads a `PretrainConfig`: defaults, then the YAML file at ``path``, then the overrides.

    See `keras_largebatch.training.config_loading.load_config`.
    """
    return config_loading.load_config(PretrainConfig, path, overrides)
