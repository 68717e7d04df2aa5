"""Runs of the trainer on the JAX backend, on one device and under DataParallel over two.

Run by tests/training/test_jax_trainer.py, tests/bert/test_pretrain_jax.py,
tests/bert/test_continued_pretraining.py and tests/vision/test_train_jax.py as

    KERAS_BACKEND=jax XLA_FLAGS=--xla_force_host_platform_device_count=2 JAX_PLATFORMS=cpu \
        python -m tests.support.jax_training {toy,bert,images} WORK_DIR [RECORD_FILE]
        python -m tests.support.jax_training bert_preset WORK_DIR PRESET_DIR RECORD_FILE

(a process holds one Keras backend, and the test process runs on TensorFlow). Each run writes
its run directory under WORK_DIR; the last line printed is one JSON object: run name -> its
summary (whose "checkpoint" the tests read), plus what the mode adds (progress lines, the
messages of refused settings, the BERT loss comparison).
"""

import json
import logging
import os
import sys

import keras
import numpy as np
import yaml

from keras_largebatch.training import trainer
from tests.support.runs import Interrupt, InterruptAfter

ONE_DEVICE = "strategy.devices=['cpu:0']"
DATA_PARALLEL = "strategy.name=data_parallel"


class DevicesOfTheWeights(keras.callbacks.Callback):
    """Records, at the end of each `fit`, how many devices hold the model's first weight: 2 only
    when DataParallel was in force while the model trained (it replicates the weights)."""

    def __init__(self):
        super().__init__()
        self.counts = []

    def on_train_end(self, logs=None):
        self.counts.append(len(self.model.trainable_variables[0].value.sharding.device_set))


class TrainStepCompiles(logging.Handler):
    """Counts JAX's compilations of the train step while it is entered (JAX logs each one
    under ``jax_log_compiles``)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def emit(self, record):
        self.count += record.getMessage().startswith("Compiling jit(train_step)")

    def __enter__(self):
        import jax

        jax.config.update("jax_log_compiles", True)
        logging.getLogger("jax").addHandler(self)
        return self

    def __exit__(self, *exc_info):
        import jax

        logging.getLogger("jax").removeHandler(self)
        jax.config.update("jax_log_compiles", False)


def toy_runs(work_dir):
    """The toy recipe (two phases of 6 steps at global batches 8 and 4, 2 micro-batches per
    step in the first): on 1 device, on 2, on 2 with the accumulation derived from
    ``max_per_replica_batch_size``, and on 2 interrupted and resumed; the progress lines of
    the 2-device run; how many times each of the first two compiled its train step; the
    messages of the TensorFlow settings refused on JAX."""
    from tests.support.toy_recipe import ToyRegression, load

    def run(name, *overrides, callbacks=(), lines=None):
        config = load(os.path.join(work_dir, name), DATA_PARALLEL, *overrides)
        log = lines.append if lines is not None else lambda line: None
        return trainer.train(config, ToyRegression(config), callbacks, log)

    accumulate = "phases.0.gradient_accumulation_steps=2"
    lines = []
    one_device, data_parallel = DevicesOfTheWeights(), DevicesOfTheWeights()
    with TrainStepCompiles() as one_device_compiles:
        one_device_run = run("one_device", ONE_DEVICE, accumulate, callbacks=[one_device])
    with TrainStepCompiles() as data_parallel_compiles:
        data_parallel_run = run("data_parallel", accumulate, callbacks=[data_parallel], lines=lines)
    results = {
        "one_device": one_device_run,
        "data_parallel": data_parallel_run,
        "devices_of_the_weights": {
            "one_device": one_device.counts,
            "data_parallel": data_parallel.counts,
        },
        "train_step_compiles": {
            "one_device": one_device_compiles.count,
            "data_parallel": data_parallel_compiles.count,
        },
        "derived": run(
            "derived",
            "phases.0.max_per_replica_batch_size=2",
            "phases.1.max_per_replica_batch_size=2",
        ),
        "lines": lines,
    }
    try:
        run("resumed", accumulate, callbacks=[InterruptAfter(9)])  # step 4.5 of phase 1
    except Interrupt:
        pass
    results["resumed"] = run("resumed", accumulate)
    refused = {}
    for override in (
        "strategy.name=mirrored",
        "strategy.name=default",
        "strategy.tpu=local",
        "strategy.devices=['/cpu:0']",
    ):
        output_dir = os.path.join(work_dir, "refused")
        config = load(output_dir, DATA_PARALLEL)
        key, value = override.split("=")
        setattr(config.strategy, key.split(".")[1], yaml.safe_load(value))
        recipe = ToyRegression(config)
        try:
            trainer.train(config, recipe, log=lambda line: None)
        except ValueError as error:
            # Refused before the recipe prepares its data or the run directory is made.
            refused[override] = [str(error), recipe.prepared, os.path.exists(output_dir)]
    results["refused"] = refused
    from keras_largebatch.training.divergence import non_finite_variables
    from tests.training.test_divergence import mixed_variables

    variables, expected = mixed_variables()
    results["non_finite_variables"] = [non_finite_variables(variables), expected]
    return results


def tiny_bert_config(output_dir, record_files, *overrides):
    """The config of the tiny BERT of tests/bert/test_pretrain.py (dropout 0) for one phase of
    6 steps of 8 examples read from ``record_files``, under DataParallel; ``overrides`` last."""
    from keras_largebatch.bert.pretraining import config as config_lib

    return config_lib.load_config(
        overrides=[
            f"output_dir={output_dir}",
            "model.num_layers=1",
            "model.hidden_dim=16",
            "model.num_heads=2",
            "model.vocabulary_size=64",
            "model.dropout=0.0",
            "phases=[{seq_length: 16, max_predictions_per_seq: 4, global_batch_size: 8, "
            "steps: 6, warmup_steps: 1, peak_learning_rate: 1.0e-2, "
            f"input_files: {json.dumps([str(path) for path in record_files])}}}]",
            "log_interval=2",
            "checkpoint_interval=4",
            DATA_PARALLEL,
            *overrides,
        ]
    )


def bert_runs(work_dir, record_file):
    """`tiny_bert_config`'s run, for 2 steps, on 1 and 2 devices; one step linear in the
    gradient on 1 device and on 2 devices with 2 micro-batches (of 2 examples per device); and
    `bert_loss_runs`. (Runs with 2 micro-batches per step on 1 and 2 devices are
    tests/training/test_multi_host.py's reference runs.)"""
    from keras_largebatch.bert import pretraining as pretrain

    def run(name, *overrides):
        config = tiny_bert_config(os.path.join(work_dir, name), [record_file], *overrides)
        return pretrain.pretrain(config, log=lambda line: None)

    accumulate = "phases.0.gradient_accumulation_steps=2"
    # 2 steps (the warmup's and one at the peak rate) tell the weights apart as well as 6.
    two_steps = "phases.0.steps=2"
    results = {
        "one_device": run("one_device", ONE_DEVICE, two_steps),
        "data_parallel": run("data_parallel", two_steps),
    }
    # No layer adaptation, epsilon 1 and no clipping: an update linear in the gradient, which
    # shows a gradient of the wrong scale in every weight.
    linear_step = (
        "phases.0.steps=1",
        "phases.0.warmup_steps=0",
        "optimizer.exclude_from_layer_adaptation=['.']",
        "optimizer.epsilon=1.0",
        "optimizer.global_clipnorm=null",
    )
    results["linear_one_device"] = run("linear_one_device", ONE_DEVICE, *linear_step)
    results["linear_data_parallel_accumulation"] = run(
        "linear_data_parallel_accumulation", accumulate, *linear_step
    )
    results["loss"] = bert_loss_runs()
    return results


def bert_loss_runs():
    """One SGD step (learning rate 1: the step is minus the gradient) of a tiny BertPretrainer
    on 8 examples whose first half masks 4 tokens each and second half 1: on 1 device, on 2
    (one half each), and the step a per-device normalization would take, the mean of the two
    halves' own normalized losses. Returns each one's weights and loss, and the initial weights.

    The per-device step is a 1-device step with the masked-LM weights of each half scaled by
    ``W / (2 W_half)``: their sum stays ``W``, and ``sum(w' CE) / W`` is the mean over the
    halves of ``sum_half(w CE) / W_half``.
    """
    from keras_largebatch.bert.pretraining import model as model_lib

    rng = np.random.default_rng(0)
    batch, seq_length, predictions, vocabulary = 8, 12, 4, 50
    features = {
        "token_ids": rng.integers(5, vocabulary, (batch, seq_length)).astype("int32"),
        "segment_ids": (np.arange(seq_length)[None] >= seq_length // 2)
        .astype("int32")
        .repeat(batch, 0),
        "padding_mask": np.ones((batch, seq_length), "int32"),
        "mask_positions": rng.integers(1, seq_length, (batch, predictions)).astype("int32"),
    }
    counts = np.array([predictions] * (batch // 2) + [1] * (batch // 2))
    masked_lm_weights = (np.arange(predictions)[None] < counts[:, None]).astype("float32")
    labels = {
        "masked_lm": rng.integers(0, vocabulary, (batch, predictions)).astype("int32"),
        "next_sentence": rng.integers(0, 2, batch).astype("int32"),
    }
    halves = masked_lm_weights.reshape(2, batch // 2, predictions)
    per_device_weights = (
        halves * masked_lm_weights.sum() / (2 * halves.sum(axis=(1, 2), keepdims=True))
    ).reshape(batch, predictions)

    def step(devices, masked_lm_weights):
        """(initial weights, weights after the step, loss) of one step on ``devices``."""
        keras.utils.set_random_seed(7)
        with keras.distribution.DataParallel(devices=devices).scope():
            backbone = model_lib.bert_backbone(
                "tiny", vocabulary, seq_length, 0.0, num_layers=1, hidden_dim=16, num_heads=2
            )
            model = model_lib.BertPretrainer(backbone)
            initial = [np.asarray(w) for w in model.get_weights()]
            model.compile(optimizer=keras.optimizers.SGD(1.0))
            history = model.fit(
                features,
                labels,
                sample_weight={
                    "masked_lm": masked_lm_weights,
                    "next_sentence": np.ones(batch, "float32"),
                },
                batch_size=batch,
                epochs=1,
                shuffle=False,
                verbose=0,
            )
            final = [np.asarray(w) for w in model.get_weights()]
        return initial, final, history.history["loss"][0]

    initial, one_weights, one_loss = step(["cpu:0"], masked_lm_weights)
    _, two_weights, two_loss = step(["cpu:0", "cpu:1"], masked_lm_weights)
    _, per_device_mean, per_device_loss = step(["cpu:0"], per_device_weights)
    return {
        name: {"weights": [np.asarray(w).tolist() for w in values], "loss": float(loss)}
        for name, values, loss in (
            ("initial", initial, float("nan")),
            ("one_device", one_weights, one_loss),
            ("data_parallel", two_weights, two_loss),
            ("per_device_mean", per_device_mean, per_device_loss),
        )
    }


def write_image_records(directory):
    """ImageNet-format records of 32 training images of 10 classes, in 2 files, and 20
    evaluation images (two batches of 8 and a padded one); returns ``(train_files,
    eval_files)``."""
    from tests.support.imagenet_records import write_imagenet_records

    labels = [1 + index % 10 for index in range(32)]  # 1-based, as in the TPU records
    train_files = [
        write_imagenet_records(os.path.join(directory, f"train-{shard}"), labels[shard::2])
        for shard in range(2)
    ]
    eval_files = [write_imagenet_records(os.path.join(directory, "validation"), labels[:20])]
    return train_files, eval_files


def small_image_config(output_dir, train_files, eval_files, *overrides):
    """The config of the image recipe's small ResNet with LARS on the records of
    `write_image_records`, 4 steps of 8 images with an evaluation at the end, under
    DataParallel; ``overrides`` last.

    The peak rate is 0.1: LARS leaves the batch-norm scales and offsets unadapted, so they take
    plain momentum steps at it, and at 1.0 they amplified the round-off of another summation
    order (2 devices against 1) to 7e-4 relative once on CI, past the comparisons' bounds.
    """
    from keras_largebatch.vision import config as config_lib

    return config_lib.load_config(
        overrides=[
            f"output_dir={output_dir}",
            "data.dataset=imagenet",
            f"data.train_files={json.dumps(train_files)}",
            f"data.eval_files={json.dumps(eval_files)}",
            "data.num_train_examples=32",
            "data.eval_batch_size=8",
            "model.num_classes=10",
            "model.image_size=24",
            "phases.0.global_batch_size=8",
            "phases.0.steps=4",
            "phases.0.warmup_epochs=0.25",
            "phases.0.peak_learning_rate=0.1",
            "log_interval=2",
            "checkpoint_interval=2",
            "eval_interval=4",
            "target_accuracy=null",
            DATA_PARALLEL,
            *overrides,
        ]
    )


def image_runs(work_dir):
    """`small_image_config`'s run on 1 device and on 2 (batch norm unsynchronized, the
    default); and the message refusing ``model.sync_batch_norm=true`` on JAX."""
    from keras_largebatch import vision as train

    files = write_image_records(work_dir)

    def load(name, *overrides):
        return small_image_config(os.path.join(work_dir, name), *files, *overrides)

    results = {
        "one_device": train.train(load("one_device", ONE_DEVICE), log=lambda line: None),
        "data_parallel": train.train(load("data_parallel"), log=lambda line: None),
    }
    try:
        load("refused", "model.sync_batch_norm=true")
    except ValueError as error:
        results["sync_batch_norm"] = str(error)
    return results


def bert_preset_run(work_dir, preset, record_file):
    """A run from the keras-hub preset ``preset`` under DataParallel over 2 devices: its
    summary, and the largest difference between the weights it started from and the preset's,
    read back by keras-hub's own loader in this process (0.0 when it started from the preset)."""
    import keras_hub

    from keras_largebatch.bert import pretraining
    from keras_largebatch.bert.pretraining import config as config_lib

    phase = (
        "{seq_length: 16, max_predictions_per_seq: 4, global_batch_size: 8, steps: 2, "
        f"warmup_steps: 1, input_files: ['{record_file}']}}"
    )
    config = config_lib.load_config(
        overrides=[
            f"output_dir={os.path.join(work_dir, 'bert_preset')}",
            f"model.preset={preset}",
            "model.dropout=0.0",
            f"phases=[{phase}]",
            DATA_PARALLEL,
        ]
    )
    started = {}

    class RecordStart(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            started["backbone"] = self.model.backbone.get_weights()
            started["mlm_head"] = self.model.get_layer("mlm_head").get_weights()

    summary = pretraining.pretrain(config, callbacks=[RecordStart()], log=lambda line: None)
    reference = keras_hub.models.BertMaskedLM.from_preset(preset, preprocessor=None)
    expected = {
        "backbone": reference.backbone.get_weights(),
        "mlm_head": reference.masked_lm_head.get_weights(),
    }
    difference = max(
        float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
        for part in expected
        for a, b in zip(started[part], expected[part], strict=True)
    )
    return {"summary": summary, "start_minus_preset": difference}


MODES = {
    "toy": toy_runs,
    "bert": bert_runs,
    "bert_preset": bert_preset_run,
    "images": image_runs,
}


def main(argv):
    assert keras.backend.backend() == "jax", keras.backend.backend()
    print(json.dumps(MODES[argv[0]](*argv[1:])))


if __name__ == "__main__":
    main(sys.argv[1:])
