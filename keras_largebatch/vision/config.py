"""Configuration of an image-classification run: a `TrainConfig` of dataclasses.

Every field has a default, so an empty config is the embedded default job: the small ResNet
with LARS on Fashion-MNIST, until 90% test accuracy (sized for a CPU). YAML files
and ``key=value`` overrides work as for every recipe (`keras_largebatch.training.config`):
``model.architecture=resnet50``, ``phases.0.global_batch_size=32768``,
``data.train_files=['gs://bucket/train-*']``.
"""

import dataclasses
from typing import ClassVar, Optional

from keras_largebatch import _checks
from keras_largebatch._backend import keras_backend
from keras_largebatch.training import config as training_config
from keras_largebatch.training import config_loading
from keras_largebatch.vision import fashion_mnist

DATASETS = ("fashion_mnist", "imagenet")
OPTIMIZER_NAMES = ("lars", "sgd")
# The MLPerf ResNet reference's exclusions from weight decay and layer adaptation: batch-norm
# scales (gamma) and offsets (beta), and biases.
MLPERF_EXCLUSIONS = ("gamma$", "beta$", "bias$")
# Training images of ILSVRC-2012, the epoch of every published ImageNet recipe.
IMAGENET_TRAIN_EXAMPLES = 1_281_167


def _imagenet_resnet(block_type, blocks):
    """The ImageNet ResNets' shape (He et al. 2016, table 1): a 7x7 stem, four stages."""
    return dict(
        input_conv_filters=[64],
        input_conv_kernel_sizes=[7],
        stackwise_num_filters=[64, 128, 256, 512],
        stackwise_num_blocks=blocks,
        stackwise_num_strides=[1, 2, 2, 2],
        block_type=block_type,
    )


# Arguments of keras_hub.models.ResNetBackbone per architecture.
ARCHITECTURES = {
    # A 3x3 stem and two stages: 28x28 images are 7x7 after the stem's stride and pooling.
    "small": dict(
        input_conv_filters=[64],
        input_conv_kernel_sizes=[3],
        stackwise_num_filters=[64, 128],
        stackwise_num_blocks=[1, 1],
        stackwise_num_strides=[1, 2],
        block_type="basic_block",
    ),
    "resnet18": _imagenet_resnet("basic_block", [2, 2, 2, 2]),
    "resnet34": _imagenet_resnet("basic_block", [3, 4, 6, 3]),
    "resnet50": _imagenet_resnet("bottleneck_block", [3, 4, 6, 3]),
}


@dataclasses.dataclass
class ModelConfig:
    """The classifier: a keras-hub ResNet and its head."""

    architecture: str = "small"  # small (28x28 images), resnet18, resnet34, resnet50 (v1.5)
    num_classes: int = 10  # classes of the head (1000 for ImageNet)
    image_size: int = 28  # height and width of the network's input
    label_smoothing: float = 0.1  # of the cross-entropy (MLPerf ResNet-50: 0.1)
    sync_batch_norm: bool = False  # TF: statistics over all replicas, not each (JAX: always)


@dataclasses.dataclass
class PhaseConfig(training_config.PhaseConfig):
    """One phase: batch, steps, and the MLPerf LARS schedule (warmup, then power-2 decay)."""

    global_batch_size: int = 1024  # images per optimizer step, over all replicas
    steps: int = 348  # optimizer steps (6 epochs of Fashion-MNIST at 1024)
    peak_learning_rate: float = 8.0  # rate at the end of warmup (MLPerf "base learning rate")
    warmup_epochs: float = 1.0  # linear warmup from 0, in epochs of data.num_train_examples
    end_learning_rate: float = 1.0e-4  # rate at the end of the decay (MLPerf: 1e-4)
    power: float = 2.0  # decay power (MLPerf: 2)

    def validate(self, key):
        super().validate(key)
        _checks.check_number(f"{key}.warmup_epochs", self.warmup_epochs, low=0)
        # The warmup against the steps needs the epoch's length: `TrainConfig.validate`.


@dataclasses.dataclass
class OptimizerConfig:
    """The optimizer of every phase (each phase gets a fresh one)."""

    name: str = "lars"  # lars (keras_largebatch.LARS) or sgd (Keras's SGD with momentum)
    momentum: float = 0.9  # MLPerf: 0.9; 0.94-0.95 at 32K-64K
    weight_decay: float = 5.0e-4  # decoupled, inside the update (MLPerf 32K: 2.5e-5)
    trust_coefficient: float = 0.001  # LARS's eta
    epsilon: float = 0.0  # in the trust ratio's denominator (MLPerf: 0)
    nesterov: bool = False  # Nesterov momentum
    exclude_from_weight_decay: list[str] = dataclasses.field(
        default_factory=lambda: list(MLPERF_EXCLUSIONS)
    )  # regexes searched in variable paths (MLPerf's: batch-norm scales, offsets and biases)
    exclude_from_layer_adaptation: list[str] = dataclasses.field(
        default_factory=lambda: list(MLPERF_EXCLUSIONS)
    )  # the same for LARS's trust ratio (ratio 1); [] adapts every variable; unused by sgd


@dataclasses.dataclass
class DataConfig:
    """Where the images come from and how they are read."""

    # Keys of earlier versions, refused with what replaced them.
    REMOVED_FIELDS: ClassVar[dict] = {
        "deterministic": "the training order is always shuffled by data.seed and the epoch and "
        "resumed exactly, as fast at any step (keras_largebatch.input_order)"
    }

    dataset: str = "fashion_mnist"  # fashion_mnist (keras.datasets) or imagenet (TFRecords)
    fashion_mnist_dir: str = fashion_mnist.DEBIAN_DIR  # copied to the Keras cache if missing
    train_files: Optional[list[str]] = None  # ImageNet-format training record globs
    eval_files: Optional[list[str]] = None  # ImageNet-format validation record globs
    label_offset: int = 1  # record label of class 0 (1 in the TPU / TF Model Garden records)
    num_train_examples: Optional[int] = None  # an epoch; None: 60,000 or ImageNet's 1,281,167
    eval_batch_size: int = 500  # images per evaluation batch, over all replicas
    shuffle_buffer_size: int = 10000  # records of each shuffled window of the order (ImageNet)
    cycle_length: int = 16  # record files read at once, interleaved (ImageNet)
    seed: int = 12345  # seed of the training order and of the crops


@dataclasses.dataclass
class TrainConfig(training_config.RunConfig):
    """A whole image-classification run; the defaults are the embedded default job."""

    output_dir: str = "runs/fashion_mnist_lars"  # run directory: config, checkpoints, logs
    log_interval: int = 29  # optimizer steps per progress line (half an epoch)
    checkpoint_interval: int = 58  # optimizer steps between checkpoints (and at phase ends)
    eval_interval: int = 58  # optimizer steps between evaluations (a multiple of log_interval)
    target_accuracy: Optional[float] = 0.9  # top-1 evaluation accuracy ending the run; null
    phases: list[PhaseConfig] = dataclasses.field(default_factory=lambda: [PhaseConfig()])
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)

    def num_train_examples(self):
        """Images per epoch."""
        if self.data.num_train_examples is not None:
            return self.data.num_train_examples
        if self.data.dataset == "fashion_mnist":
            return fashion_mnist.NUM_TRAIN_EXAMPLES
        return IMAGENET_TRAIN_EXAMPLES

    def validate(self):
        """Checks values and relations between fields; raises naming the field. Returns self."""
        _checks.check_choice("model.architecture", self.model.architecture, tuple(ARCHITECTURES))
        _checks.check_choice("optimizer.name", self.optimizer.name, OPTIMIZER_NAMES)
        _checks.check_choice("data.dataset", self.data.dataset, DATASETS)
        super().validate()
        _checks.check_integer("eval_interval", self.eval_interval, low=1)
        if self.eval_interval % self.log_interval:
            raise ValueError(
                f"eval_interval must be a multiple of log_interval={self.log_interval} "
                f"(evaluations run at the end of a logging window), got {self.eval_interval}"
            )
        if self.target_accuracy is not None:
            _checks.check_number("target_accuracy", self.target_accuracy, low=0, high=1)
        _checks.check_bool("model.sync_batch_norm", self.model.sync_batch_norm)
        if self.model.sync_batch_norm and keras_backend() != "tensorflow":
            # Keras synchronizes batch norm only on TensorFlow; on JAX a step is one program
            # over the batch of every device, so its statistics already cover them all.
            raise ValueError(
                f"model.sync_batch_norm=true is a TensorFlow setting, got it on the "
                f"{keras_backend()} backend, where batch-norm statistics are computed "
                "over the micro-batch of all devices already; allowed there: false"
            )
        _checks.check_integer("model.num_classes", self.model.num_classes, low=2)
        _checks.check_integer("model.image_size", self.model.image_size, low=8)
        _checks.check_number(
            "model.label_smoothing", self.model.label_smoothing, low=0, high=1, high_open=True
        )
        optimizer = self.optimizer
        _checks.check_number(
            "optimizer.momentum", optimizer.momentum, low=0, high=1, high_open=True
        )
        _checks.check_number("optimizer.weight_decay", optimizer.weight_decay, low=0)
        _checks.check_number(
            "optimizer.trust_coefficient", optimizer.trust_coefficient, low=0, low_open=True
        )
        _checks.check_number("optimizer.epsilon", optimizer.epsilon, low=0)
        data = self.data
        _checks.check_integer("data.label_offset", data.label_offset, low=0)
        _checks.check_optional_integer("data.num_train_examples", data.num_train_examples, low=1)
        _checks.check_integer("data.eval_batch_size", data.eval_batch_size, low=1)
        _checks.check_integer("data.shuffle_buffer_size", data.shuffle_buffer_size, low=1)
        _checks.check_integer("data.cycle_length", data.cycle_length, low=1)
        if data.dataset == "imagenet":
            for name in ("train_files", "eval_files"):
                if not getattr(data, name):
                    raise ValueError(
                        f"data.{name} must name record files for data.dataset="
                        f"'imagenet', got {getattr(data, name)!r}"
                    )
        elif (self.model.image_size, self.model.num_classes) != (28, 10):
            raise ValueError(
                "data.dataset='fashion_mnist' has 28x28 images of 10 classes: model.image_size "
                f"must be 28 and model.num_classes 10, got {self.model.image_size} and "
                f"{self.model.num_classes}"
            )
        for index, phase in enumerate(self.phases):
            key = f"phases.{index}."
            steps_per_epoch = self.num_train_examples() / phase.global_batch_size
            _checks.check_warmup_epochs(
                phase.warmup_epochs, steps_per_epoch, phase.steps, key, f"{key}steps"
            )
            _checks.check_warmup_decay(
                phase.peak_learning_rate,
                phase.warmup_epochs * steps_per_epoch,
                phase.steps,
                phase.end_learning_rate,
                phase.power,
                key=key,
                warmup_name=f"{key}warmup_epochs * steps_per_epoch",
                total_name=f"{key}steps",
            )
        return self

    def check_accumulation(self, key, phase, accumulation_steps):
        super().check_accumulation(key, phase, accumulation_steps)
        training_config.check_baseline_accumulation(
            key, accumulation_steps, self.optimizer.name, layerwise="lars"
        )


def config_from_dict(values, key="config"):
    """Builds a `TrainConfig` from nested plain data (a loaded YAML document)."""
    return config_loading.config_from_dict(TrainConfig, values, key)


def load_config(path=None, overrides=()):
    """Loads a `TrainConfig`: defaults, then the YAML file at ``path``, then the overrides."""
    return config_loading.load_config(TrainConfig, path, overrides)
