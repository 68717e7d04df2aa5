"""Image classification as a recipe of the trainer: ResNet with LARS, the MLPerf way.

The MLPerf ResNet-50 reference (mlcommons/training ``image_classification``) trains with LARS
(You, Gitman, Ginsburg 2017, "Large Batch Training of Convolutional Networks",
arXiv:1708.03888), a linear warmup over epochs then power-2 decay (`LarsMLPerfSchedule`),
label smoothing 0.1, batch-norm parameters and biases excluded from weight decay and
adaptation (MLPerf's rule, the config's `optimizer.exclude_from_*`), evaluates every few epochs
and stops at a target top-1 accuracy. `keras_largebatch.vision` is the command around it.
"""

import keras
import tensorflow as tf

from keras_largebatch import input_order
from keras_largebatch.schedules import LarsMLPerfSchedule
from keras_largebatch.training import evaluation
from keras_largebatch.training.optimizer_factory import create_optimizer
from keras_largebatch.training.recipe import Recipe
from keras_largebatch.vision import fashion_mnist, input_pipeline
from keras_largebatch.vision.model import image_classifier


class ImageClassification(Recipe):
    """Trains the classifier that a `vision.config.TrainConfig` describes."""

    name = "train"
    reported_metrics = ("loss", "accuracy", "top5_accuracy")
    progress_metrics = (("loss", "loss"), ("acc", "accuracy"))

    def __init__(self, config):
        self.config = config
        self._arrays = None
        self.record_counts = None

    def prepare(self, plan, log, record_counts):
        self.record_counts = record_counts
        config, data = self.config, self.config.data
        micro_batch = max(phase.micro_batch_size for phase in plan.phases)
        if data.dataset == "fashion_mnist":
            (train_x, train_y), (test_x, test_y) = fashion_mnist.load(data.fashion_mnist_dir)
            self._arrays = {"train": (train_x, train_y), "eval": (test_x, test_y)}
            if len(train_x) < micro_batch:
                raise ValueError(
                    f"Fashion-MNIST's train split holds {len(train_x)} images, fewer than one "
                    f"batch of {micro_batch}"
                )
            log(f"Fashion-MNIST: {len(train_x)} training and {len(test_x)} test images")
            return
        # Evaluation pads its last batch, so one record of it is enough.
        for files, batch in ((data.train_files, micro_batch), (data.eval_files, 1)):
            input_pipeline.check_imagenet_input(
                files, batch, None, config.model.num_classes, data.label_offset
            )

    def build_model(self):
        model = self.config.model
        channels = 1 if self.config.data.dataset == "fashion_mnist" else 3
        return image_classifier(
            model.architecture,
            model.num_classes,
            (model.image_size, model.image_size, channels),
            dtype=self.config.mixed_precision,
            sync_batch_norm=model.sync_batch_norm,
        )

    def build_optimizer(self, phase, model):
        """LARS, or Keras's SGD with momentum, excluding the same variables from weight decay
        (by default MLPerf's: batch-norm parameters and biases, also left unadapted)."""
        settings, optimizer = phase.settings, self.config.optimizer
        schedule = LarsMLPerfSchedule(
            peak_learning_rate=settings.peak_learning_rate,
            steps_per_epoch=self.config.num_train_examples() / phase.global_batch_size,
            warmup_epochs=settings.warmup_epochs,
            total_steps=phase.steps,
            end_learning_rate=settings.end_learning_rate,
            power=settings.power,
        )
        hyperparameters = dict(momentum=optimizer.momentum, nesterov=optimizer.nesterov)
        if optimizer.name == "lars":
            hyperparameters.update(
                trust_coefficient=optimizer.trust_coefficient,
                epsilon=optimizer.epsilon,
                exclude_from_layer_adaptation=list(optimizer.exclude_from_layer_adaptation),
            )
        return create_optimizer(
            optimizer.name,
            schedule,
            weight_decay=optimizer.weight_decay,
            exclude_from_weight_decay=list(optimizer.exclude_from_weight_decay),
            variables=model.trainable_variables,
            gradient_accumulation_steps=phase.gradient_accumulation_steps,
            record_trust_ratio=True,
            **hyperparameters,
        )

    def compile_arguments(self, phase):
        return {
            "loss": keras.losses.CategoricalCrossentropy(
                from_logits=True, label_smoothing=self.config.model.label_smoothing
            ),
            "metrics": [
                keras.metrics.CategoricalAccuracy(name="accuracy"),
                keras.metrics.TopKCategoricalAccuracy(k=5, name="top5_accuracy"),
            ],
        }

    def dataset(self, phase, batch_size, input_context, start_batch):
        config, data = self.config, self.config.data
        seed = input_order.phase_seed(data.seed, phase.index)
        if data.dataset == "fashion_mnist":
            images, labels = self._arrays["train"]
            share = slice(input_context.input_pipeline_id, None, input_context.num_input_pipelines)
            images, labels = images[share], labels[share]
            dataset = (
                input_order.shuffled_indices(len(images), seed, start_batch * batch_size)
                .batch(batch_size, drop_remainder=True)
                .map(
                    lambda index, epoch: fashion_mnist.normalize(
                        tf.gather(images, index), tf.gather(labels, index)
                    ),
                    num_parallel_calls=tf.data.AUTOTUNE,
                )
            )
        else:
            dataset = input_pipeline.make_imagenet_dataset(
                data.train_files,
                config.model.image_size,
                batch_size,
                is_training=True,
                input_context=input_context,
                shuffle_seed=seed,
                label_offset=data.label_offset,
                num_classes=config.model.num_classes,
                augmentation_seed=data.seed,
                shuffle_buffer_size=data.shuffle_buffer_size,
                cycle_length=data.cycle_length,
                start_batch=start_batch,
                record_counts=self.record_counts,
            )
        return self._one_hot(dataset)

    def _evaluation_dataset(self):
        """The evaluation set in batches of ``data.eval_batch_size``, the last padded with
        zero-weight examples (`training.evaluation.pad_to_batches`)."""
        config, data = self.config, self.config.data
        if data.dataset == "fashion_mnist":
            examples = tf.data.Dataset.from_tensor_slices(self._arrays["eval"]).map(
                fashion_mnist.normalize, num_parallel_calls=tf.data.AUTOTUNE
            )
        else:
            examples = input_pipeline.make_imagenet_dataset(
                data.eval_files,
                config.model.image_size,
                None,
                is_training=False,
                label_offset=data.label_offset,
                num_classes=config.model.num_classes,
            )
        return self._one_hot(evaluation.pad_to_batches(examples, data.eval_batch_size))

    def _one_hot(self, dataset):
        num_classes = self.config.model.num_classes
        return dataset.map(
            lambda images, labels, *weights: (images, tf.one_hot(labels, num_classes), *weights)
        )

    def evaluation_interval(self, phase):
        return self.config.eval_interval

    def evaluate(self, model):
        """Loss (with the training's label smoothing), top-1 and top-5 accuracy over every
        evaluation image once, and how many there were."""
        return evaluation.evaluate_weighted(
            model,
            self._evaluation_dataset(),
            [
                keras.metrics.CategoricalCrossentropy(
                    name="loss",
                    from_logits=True,
                    label_smoothing=self.config.model.label_smoothing,
                ),
                keras.metrics.CategoricalAccuracy(name="accuracy"),
                keras.metrics.TopKCategoricalAccuracy(k=5, name="top5_accuracy"),
            ],
        )

    def target_reached(self, evaluation):
        target = self.config.target_accuracy
        return target is not None and evaluation["accuracy"] >= target

    def phase_summary(self, phase):
        return {"epochs": phase.steps * phase.global_batch_size / self.config.num_train_examples()}

    def summary(self):
        return {
            "architecture": self.config.model.architecture,
            "dataset": self.config.data.dataset,
            "optimizer": self.config.optimizer.name,
            "target_accuracy": self.config.target_accuracy,
        }
