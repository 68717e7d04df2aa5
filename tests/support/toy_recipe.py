"""A recipe that is not BERT, for the trainer's tests: regression of a small MLP with LAMB.

64 fixed examples of 4 features; a run of a few steps takes about a second. Each input
pipeline's examples are shuffled by (seed, epoch) (`keras_largebatch.input_order`), so a resumed
run must equal an uninterrupted one bitwise.
"""

import dataclasses

import keras
import numpy as np
import tensorflow as tf

from keras_largebatch import input_order
from keras_largebatch.optimizers import LAMB, biases_and_norms
from keras_largebatch.training import config as training_config
from keras_largebatch.training import config_loading
from keras_largebatch.training.recipe import Recipe

NUM_EXAMPLES = 64


@dataclasses.dataclass
class ToyPhase(training_config.PhaseConfig):
    """A phase of the toy run."""

    global_batch_size: int = 8  # examples per optimizer step
    steps: int = 6  # optimizer steps of this phase
    learning_rate: float = 0.05  # LAMB's constant rate


@dataclasses.dataclass
class ToyConfig(training_config.RunConfig):
    """Two phases of 6 steps; windows of 2 steps, checkpoints every 4."""

    log_interval: int = 2  # optimizer steps per progress line
    checkpoint_interval: int = 4  # optimizer steps between checkpoints
    phases: list[ToyPhase] = dataclasses.field(
        default_factory=lambda: [ToyPhase(), ToyPhase(global_batch_size=4)]
    )
    strategy: training_config.StrategyConfig = dataclasses.field(
        default_factory=lambda: training_config.StrategyConfig(name="default")
    )


def load(output_dir, *overrides):
    return config_loading.load_config(ToyConfig, overrides=[f"output_dir={output_dir}", *overrides])


class ToyRegression(Recipe):
    name = "toy"
    reported_metrics = ("loss", "mean_absolute_error")
    progress_metrics = (("loss", "loss"), ("mae", "mean_absolute_error"))

    def __init__(self, config, evaluation_interval=None, target_loss=None):
        self.config = config
        self.interval = evaluation_interval
        self.target_loss = target_loss
        self.prepared = False
        self.seed = 0
        random = np.random.default_rng(0)
        self.features = random.normal(size=(NUM_EXAMPLES, 4)).astype("float32")
        self.targets = self.features @ np.array(
            [[1.0], [-2.0], [0.5], [3.0]], "float32"
        ) + 0.1 * random.normal(size=(NUM_EXAMPLES, 1)).astype("float32")

    def prepare(self, plan, log, record_counts):
        self.prepared = True

    def build_model(self):
        return keras.Sequential(
            [
                keras.Input((4,)),
                keras.layers.Dense(8, activation="tanh", name="hidden"),
                keras.layers.Dense(1, name="output"),
            ]
        )

    def build_optimizer(self, phase, model):
        accumulation = phase.gradient_accumulation_steps
        return LAMB(
            learning_rate=phase.settings.learning_rate,
            weight_decay=0.01,
            record_trust_ratio=True,
            # The rule the trainer tests' tolerances were set with (LAMB's default until
            # every variable became adapted by default).
            exclude_from_layer_adaptation=biases_and_norms,
            gradient_accumulation_steps=accumulation if accumulation > 1 else None,
        )

    def compile_arguments(self, phase):
        return {"loss": "mean_squared_error", "metrics": ["mean_absolute_error"]}

    def dataset(self, phase, batch_size, input_context, start_batch):
        share = slice(input_context.input_pipeline_id, None, input_context.num_input_pipelines)
        features, targets = self.features[share], self.targets[share]
        indices = input_order.shuffled_indices(
            len(features), input_order.phase_seed(self.seed, phase.index), start_batch * batch_size
        )
        return indices.batch(batch_size, drop_remainder=True).map(
            lambda index, epoch: (tf.gather(features, index), tf.gather(targets, index))
        )

    def evaluation_interval(self, phase):
        return self.interval

    def evaluate(self, model):
        return model.evaluate(
            self.features, self.targets, batch_size=NUM_EXAMPLES, verbose=0, return_dict=True
        )

    def target_reached(self, evaluation):
        return self.target_loss is not None and evaluation["loss"] <= self.target_loss

    def phase_summary(self, phase):
        return {"learning_rate": phase.settings.learning_rate}

    def summary(self):
        return {"task": "toy regression"}
