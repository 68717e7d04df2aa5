"""Configuration of a BERT pretraining run: dataclasses, YAML loading and ``key=value`` overrides.

A run is one `PretrainConfig`. Every field has a default, so an empty config is the embedded
default job (BERT-tiny with LAMB on the default corpus, a few minutes on 2 CPU cores). A YAML
file sets any subset of the fields with the same nesting::

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
import re
import types
import typing
from typing import Optional

import yaml

from keras_largebatch.bert.model import MODEL_SIZES
from keras_largebatch.distribute import STRATEGY_NAMES

MIXED_PRECISION_POLICIES = (None, "mixed_float16", "mixed_bfloat16")
OPTIMIZER_NAMES = ("lamb", "adamw")
# BertBackbone's paths: "embeddings_layer_norm/gamma", ".../self_attention_layer_norm/beta",
# "mlm_head/intermediate_layer_norm/gamma", ".../query/bias" (rank 2, so a rank rule would miss
# it), "mlm_head/output_bias". tests/bert/test_model.py checks these against a real backbone.
BERT_EXCLUSIONS = ("layer_norm", "bias")

_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


@dataclasses.dataclass
class ModelConfig:
    """The BERT model: a named size, optionally with single dimensions changed."""

    size: str = "tiny"  # one of tiny, mini, small, medium, base, large (google-research/bert)
    vocabulary_size: Optional[int] = None  # None: the size of the data's vocabulary file
    num_layers: Optional[int] = None  # None: the size's number of transformer layers
    hidden_dim: Optional[int] = None  # None: the size's hidden width
    num_heads: Optional[int] = None  # None: the size's attention heads
    intermediate_dim: Optional[int] = None  # None: 4 x hidden_dim
    dropout: float = 0.1  # dropout rate of the backbone
    max_sequence_length: Optional[int] = None  # position embeddings; None: longest phase

    def dimensions(self):
        """``(num_layers, hidden_dim, num_heads, intermediate_dim)`` after the overrides."""
        size = MODEL_SIZES[self.size]
        num_layers = self.num_layers or size["num_layers"]
        hidden_dim = self.hidden_dim or size["hidden_dim"]
        num_heads = self.num_heads or size["num_heads"]
        return num_layers, hidden_dim, num_heads, self.intermediate_dim or 4 * hidden_dim


@dataclasses.dataclass
class PhaseConfig:
    """One pretraining phase: its data, batch, length and learning-rate schedule.

    Every phase continues from the weights the previous one ended with and starts a fresh
    optimizer whose rate warms up again from 0 (the LAMB 64K/32K mixed-batch run).
    """

    seq_length: int = 128  # tokens per example (the records' max_seq_length)
    max_predictions_per_seq: int = 20  # masked positions per example (the records')
    global_batch_size: int = 32  # examples per optimizer step, over all replicas
    steps: int = 600  # optimizer steps of this phase
    peak_learning_rate: float = 1.0e-2  # rate at the end of warmup
    warmup_steps: int = 60  # linear warmup from 0, in optimizer steps
    end_learning_rate: float = 0.0  # rate at the end of the polynomial decay
    power: float = 1.0  # decay power (1.0 in the LAMB paper, 0.5 in NVIDIA's recipe)
    gradient_accumulation_steps: int = 1  # micro-batches per optimizer step
    input_files: Optional[list[str]] = None  # record globs; None: the default corpus's records


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


@dataclasses.dataclass
class DataConfig:
    """Where the records come from and how they are read."""

    vocab_file: Optional[str] = None  # vocabulary of the records; None: the default corpus's
    vocabulary_size: int = 8000  # most tokens of the default corpus's built vocabulary
    dupe_factor: int = 5  # passes over the default corpus when its records are created
    deterministic: bool = True  # fixed read order: exact resume; False: parallel, reseeded
    shuffle_buffer_size: int = 10000  # examples in the shuffle buffer (deterministic=False)
    seed: int = 12345  # seed of the default records and of the shuffle


@dataclasses.dataclass
class StrategyConfig:
    """The tf.distribute strategy, passed to keras_largebatch.distribute.get_strategy."""

    name: str = "auto"  # auto, tpu, multi_worker, mirrored, one_device or default
    tpu: Optional[str] = None  # "local", a TPU name or grpc://host:port (name tpu or auto)
    devices: Optional[list[str]] = None  # devices for mirrored / one_device


@dataclasses.dataclass
class PretrainConfig:
    """A whole pretraining run; the defaults are the embedded default job."""

    output_dir: str = "runs/bert_tiny_lamb"  # run directory: config, data, checkpoints, logs
    checkpoint_dir: Optional[str] = None  # None: OUTPUT_DIR/checkpoints
    checkpoint_interval: int = 100  # optimizer steps between checkpoints (and at phase ends)
    log_interval: int = 25  # optimizer steps per progress line and TensorBoard point
    keep_checkpoints: int = 2  # newest checkpoints kept
    steps_per_execution: int = 1  # training steps per compiled call (TPU: e.g. 100)
    mixed_precision: Optional[str] = None  # null, mixed_float16 (GPU) or mixed_bfloat16 (TPU)
    seed: int = 0  # seed of the weight initialization and dropout
    overwrite: bool = False  # start over in an OUTPUT_DIR that holds a different run
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    phases: list[PhaseConfig] = dataclasses.field(default_factory=lambda: [PhaseConfig()])
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    strategy: StrategyConfig = dataclasses.field(default_factory=StrategyConfig)

    def to_dict(self):
        """The config as plain data (what YAML and the run directory's run_config.json hold)."""
        return dataclasses.asdict(self)

    def to_yaml(self):
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def validate(self):
        """Checks values and relations between fields; raises ValueError naming the field."""
        _check_choice("model.size", self.model.size, tuple(MODEL_SIZES))
        _check_choice("mixed_precision", self.mixed_precision, MIXED_PRECISION_POLICIES)
        _check_choice("optimizer.name", self.optimizer.name, OPTIMIZER_NAMES)
        _check_choice("strategy.name", self.strategy.name, STRATEGY_NAMES)
        for name in ("checkpoint_interval", "log_interval", "keep_checkpoints",
                     "steps_per_execution"):
            _check_at_least(name, getattr(self, name), 1)
        if self.checkpoint_interval % self.log_interval:
            raise ValueError(
                f"checkpoint_interval must be a multiple of log_interval={self.log_interval} "
                f"(checkpoints are written at the end of a logging window), got "
                f"{self.checkpoint_interval}"
            )
        for name in ("vocabulary_size", "num_layers", "hidden_dim", "num_heads",
                     "intermediate_dim", "max_sequence_length"):
            value = getattr(self.model, name)
            if value is not None:
                _check_at_least(f"model.{name}", value, 1)
        _check_in_range("model.dropout", self.model.dropout, 0.0, 1.0)
        _, hidden_dim, num_heads, _ = self.model.dimensions()
        if hidden_dim % num_heads:
            raise ValueError(
                f"model.hidden_dim={hidden_dim} must be divisible by model.num_heads={num_heads}"
            )
        _check_at_least("data.vocabulary_size", self.data.vocabulary_size, 10)
        _check_at_least("data.dupe_factor", self.data.dupe_factor, 1)
        _check_at_least("data.shuffle_buffer_size", self.data.shuffle_buffer_size, 1)
        _check_at_least("optimizer.weight_decay", self.optimizer.weight_decay, 0)
        _check_in_range("optimizer.beta_1", self.optimizer.beta_1, 0.0, 1.0)
        _check_in_range("optimizer.beta_2", self.optimizer.beta_2, 0.0, 1.0)
        _check_at_least("optimizer.epsilon", self.optimizer.epsilon, 0)
        if self.optimizer.global_clipnorm is not None and not self.optimizer.global_clipnorm > 0:
            raise ValueError(
                "optimizer.global_clipnorm must be > 0 or null, got "
                f"{self.optimizer.global_clipnorm}"
            )
        if not self.phases:
            raise ValueError("phases must hold at least one phase, got []")
        for index, phase in enumerate(self.phases):
            if phase.input_files is None and "://" in str(self.output_dir):
                # The default corpus's corpus, vocabulary and manifest are written with local
                # file I/O under output_dir.
                raise ValueError(
                    f"phases.{index}.input_files is null, so the default corpus's records would "
                    f"be created under output_dir {self.output_dir!r}, which must then be local; "
                    f"give phases.{index}.input_files for a remote output_dir"
                )
        if self.optimizer.name == "adamw":
            for index, phase in enumerate(self.phases):
                if phase.gradient_accumulation_steps > 1:
                    # Keras's optimizers evaluate the schedule at the micro-batch counter, so
                    # AdamW's warmup and decay would run gradient_accumulation_steps times
                    # too fast; keras_largebatch.LAMB counts optimizer steps.
                    raise ValueError(
                        f"phases.{index}.gradient_accumulation_steps="
                        f"{phase.gradient_accumulation_steps} needs optimizer.name='lamb'; "
                        "Keras's AdamW advances its learning-rate schedule per micro-batch"
                    )
        for index, phase in enumerate(self.phases):
            _check_phase(f"phases.{index}", phase, self.steps_per_execution, self.log_interval)
        longest = max(phase.seq_length for phase in self.phases)
        if self.model.max_sequence_length is not None and self.model.max_sequence_length < longest:
            raise ValueError(
                f"model.max_sequence_length must be >= the longest phase's seq_length={longest}, "
                f"got {self.model.max_sequence_length}"
            )
        return self


def _check_phase(key, phase, steps_per_execution, log_interval):
    _check_at_least(f"{key}.seq_length", phase.seq_length, 5)
    if not 1 <= phase.max_predictions_per_seq <= phase.seq_length:
        raise ValueError(
            f"{key}.max_predictions_per_seq must be in [1, {key}.seq_length={phase.seq_length}], "
            f"got {phase.max_predictions_per_seq}"
        )
    for name in ("global_batch_size", "steps", "gradient_accumulation_steps"):
        _check_at_least(f"{key}.{name}", getattr(phase, name), 1)
    _check_at_least(f"{key}.warmup_steps", phase.warmup_steps, 0)
    if not phase.warmup_steps < phase.steps:
        raise ValueError(
            f"{key}.warmup_steps must be < {key}.steps={phase.steps}, got {phase.warmup_steps}"
        )
    if not phase.peak_learning_rate > 0:
        raise ValueError(f"{key}.peak_learning_rate must be > 0, got {phase.peak_learning_rate}")
    if not 0 <= phase.end_learning_rate <= phase.peak_learning_rate:
        raise ValueError(
            f"{key}.end_learning_rate must be in [0, peak_learning_rate="
            f"{phase.peak_learning_rate}], got {phase.end_learning_rate}"
        )
    if not phase.power > 0:
        raise ValueError(f"{key}.power must be > 0, got {phase.power}")
    if phase.global_batch_size % phase.gradient_accumulation_steps:
        raise ValueError(
            f"{key}.global_batch_size={phase.global_batch_size} must be divisible by "
            f"{key}.gradient_accumulation_steps={phase.gradient_accumulation_steps}"
        )
    # One training call runs steps_per_execution micro-batches; Keras would run past the end
    # of a logging window (and of the phase) that is not a whole number of calls.
    for steps, what in ((log_interval, "log_interval"),
                        (phase.steps % log_interval, f"{key}.steps % log_interval")):
        micro_steps = steps * phase.gradient_accumulation_steps
        if micro_steps % steps_per_execution:
            raise ValueError(
                f"steps_per_execution={steps_per_execution} must divide {what} x "
                f"{key}.gradient_accumulation_steps = {micro_steps} (training calls of a "
                "logging window)"
            )
    if phase.input_files is not None and not phase.input_files:
        raise ValueError(f"{key}.input_files must be null or name at least one pattern, got []")


def _check_choice(key, value, allowed):
    if value not in allowed:
        raise ValueError(f"{key} must be one of {list(allowed)}, got {value!r}")


def _check_at_least(key, value, low):
    if not value >= low:
        raise ValueError(f"{key} must be >= {low}, got {value!r}")


def _check_in_range(key, value, low, high):
    if not low <= value < high:
        raise ValueError(f"{key} must be in [{low}, {high}), got {value!r}")


def config_from_dict(values, key="config"):
    """Builds a `PretrainConfig` from nested plain data (a loaded YAML document)."""
    return _build(PretrainConfig, values if values is not None else {}, key)


def load_config(path=None, overrides=()):
    """Loads a config: defaults, then the YAML file at ``path`` (if any), then the overrides.

    Args:
        path: a YAML file with any subset of the fields, or None for the defaults.
        overrides: ``"key=value"`` strings; dotted keys reach nested fields and list items
            (``phases.1.steps=1563``); values are parsed as YAML.

    Returns:
        A validated `PretrainConfig`.

    Raises:
        ValueError: an unknown key, a value of the wrong type or out of range, a malformed
            override, or a file that is not a YAML mapping; the message names the key and value.
    """
    values = {}
    if path is not None:
        with open(path, encoding="utf-8") as stream:
            values = yaml.safe_load(stream)
        if values is None:
            values = {}
        if not isinstance(values, dict):
            raise ValueError(f"config file {path!r} must hold a YAML mapping, got {values!r}")
    config = config_from_dict(values)
    for override in overrides:
        config = apply_override(config, override)
    return config.validate()


def apply_override(config, override):
    """Returns a new `PretrainConfig` with one ``"key=value"`` override applied (not validated)."""
    if not isinstance(override, str) or "=" not in override:
        raise ValueError(f"an override must look like key=value (e.g. model.size=mini), "
                         f"got {override!r}")
    key, text = override.split("=", 1)
    key = key.strip()
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError as error:
        raise ValueError(f"override {override!r}: the value is not valid YAML ({error})") from None
    values = config.to_dict()
    parts = key.split(".")
    target = values
    for depth, part in enumerate(parts[:-1]):
        target = _child(target, part, ".".join(parts[: depth + 1]), key)
    _set_child(target, parts[-1], value, key)
    return config_from_dict(values)


def _child(container, part, path, key):
    if isinstance(container, list):
        index = _list_index(container, part, path, key)
        return container[index]
    if not isinstance(container, dict) or part not in container:
        valid = sorted(container) if isinstance(container, dict) else []
        raise ValueError(f"unknown config key {path!r} in override {key!r}; valid keys here: "
                         f"{valid}")
    if container[part] is None:
        raise ValueError(f"config key {path!r} is null; set it whole (e.g. {path}=[...]) rather "
                         f"than an item of it")
    return container[part]


def _set_child(container, part, value, key):
    if isinstance(container, list):
        container[_list_index(container, part, key, key)] = value
        return
    if part not in container:
        raise ValueError(f"unknown config key {key!r}; valid keys here: {sorted(container)}")
    container[part] = value


def _list_index(container, part, path, key):
    if not part.isdigit() or int(part) >= len(container):
        raise ValueError(
            f"config key {path!r} in override {key!r}: {part!r} must be a list index in "
            f"[0, {len(container)})"
        )
    return int(part)


def _build(cls, values, key):
    if isinstance(values, cls):
        return values
    if not isinstance(values, dict):
        raise ValueError(f"{key} must be a mapping of {cls.__name__} fields, got {values!r}")
    fields = {field.name: field for field in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        prefix = "" if key == "config" else f"{key}."
        raise ValueError(f"unknown config key {prefix}{unknown[0]!s}; valid keys: "
                         f"{sorted(fields)}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, value in values.items():
        field_key = name if key == "config" else f"{key}.{name}"
        kwargs[name] = _coerce(hints[name], value, field_key)
    return cls(**kwargs)


def _coerce(annotation, value, key):
    """Checks ``value`` against a field's type; converts YAML's string numbers ("6e-3")."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            return None
        return _coerce(inner, value, key)
    if origin is list:
        (item_type,) = typing.get_args(annotation)
        if not isinstance(value, list):
            raise ValueError(f"{key} must be a list, got {value!r}")
        return [_coerce(item_type, item, f"{key}.{index}") for index, item in enumerate(value)]
    if dataclasses.is_dataclass(annotation):
        return _build(annotation, value, key)
    if annotation is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{key} must be true or false, got {value!r}")
        return value
    if annotation is str:
        if not isinstance(value, str):
            raise ValueError(f"{key} must be a string, got {value!r}")
        return value
    if annotation in (int, float):
        number = value
        if isinstance(value, str) and _NUMBER.match(value.strip()):
            number = float(value)
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise ValueError(f"{key} must be {'an integer' if annotation is int else 'a number'}, "
                             f"got {value!r}")
        if annotation is int:
            if number != int(number):
                raise ValueError(f"{key} must be an integer, got {value!r}")
            return int(number)
        return float(number)
    raise TypeError(f"unsupported config field type {annotation!r} for {key}")
