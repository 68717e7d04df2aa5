"""Pretraining throughput: LAMB against AdamW, and the input pipeline against the training step.

    python benchmarks/pretraining.py [--model-size mini] [--batch-size 32] [--steps 10]

On the default corpus's records at sequence length 128 (created in ``--data-dir`` if missing),
with the pretraining command's own model, optimizers and dataset:

- ``lamb_examples_per_second`` / ``adamw_examples_per_second``: training throughput of two
  copies of the same BERT (same initial weights, same batches), one compiled with
  `keras_largebatch.LAMB` and one with `keras.optimizers.AdamW`, both with BERT's decay 0.01,
  LayerNorm and bias exclusions and clipping at 1.0. Timed side by side, alternating rounds of
  ``--steps`` steps, so that load changes on the machine hit both; the median round counts.
  The target is a ratio LAMB / AdamW of at least 0.95.
- ``pipeline_examples_per_second``: the same input pipeline read with nothing consuming it, in
  the training order the harness uses (`keras_largebatch.input_order`). The pipeline is never
  the bottleneck when this is well above the training throughput.

Prints one JSON object.
"""

import argparse
import json
import statistics
import time

import keras
import tensorflow as tf
from throughput import add_default_data_arguments, median_items_per_second

from keras_largebatch import input_order
from keras_largebatch.bert.data import pretraining_data
from keras_largebatch.bert.pretraining.config import MODEL_SIZES, load_config
from keras_largebatch.bert.pretraining.recipe import BertPretraining
from keras_largebatch.training import trainer
from keras_largebatch.training.devices import TensorFlowDevices
from keras_largebatch.training.plan import plan_run


def _recipe(
    record_files,
    vocab_file,
    model_size=None,
    batch_size=32,
    optimizer_name="lamb",
    num_layers=None,
):
    """The pretraining command's recipe for one phase at sequence length 128 on the records,
    and the plan of that phase on one replica."""
    config = load_config(
        overrides=[
            f"model.size={model_size or 'tiny'}",
            *([f"model.num_layers={num_layers}"] if num_layers else []),
            f"optimizer.name={optimizer_name}",
            f"phases.0.global_batch_size={batch_size}",
            f"phases.0.input_files={json.dumps(record_files)}",
            f"data.vocab_file={vocab_file}",
            "strategy.name=default",
        ]
    )
    recipe = BertPretraining(config)
    plan = plan_run(config, num_replicas=1)
    recipe.prepare(plan, lambda line: None, input_order.RecordCounts())
    return recipe, plan.phases[0]


def measure_training(
    model_size, batch_size, record_files, vocab_file, steps, rounds, num_layers=None
):
    """Median examples/s per optimizer over alternating timed rounds of ``steps`` steps."""
    devices = TensorFlowDevices(tf.distribute.get_strategy())
    models = {}
    for name in ("lamb", "adamw"):
        recipe, phase = _recipe(record_files, vocab_file, model_size, batch_size, name, num_layers)
        keras.utils.set_random_seed(0)
        model = recipe.build_model()
        model.compile(optimizer=recipe.build_optimizer(phase, model))
        dataset = trainer.make_phase_dataset(devices, recipe, phase)
        # The first fit traces and compiles the train function; it is not timed.
        model.fit(dataset, epochs=1, steps_per_epoch=2, verbose=0, shuffle=False)
        models[name] = (model, dataset)
    rates = {name: [] for name in models}
    for _ in range(rounds):
        for name, (model, dataset) in models.items():
            start = time.perf_counter()
            model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0, shuffle=False)
            rates[name].append(steps * batch_size / (time.perf_counter() - start))
    return {name: statistics.median(values) for name, values in rates.items()}


def measure_pipeline(record_files, vocab_file, batch_size, batches):
    """Examples/s of the phase dataset with nothing consuming it (median of 5 rounds of
    ``batches`` batches, after 20)."""
    recipe, phase = _recipe(record_files, vocab_file, batch_size=batch_size)
    dataset = trainer.make_phase_dataset(
        TensorFlowDevices(tf.distribute.get_strategy()), recipe, phase
    )
    return median_items_per_second(iter(dataset), batch_size, batches, warmup_steps=20)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    add_default_data_arguments(parser)
    parser.add_argument("--model-size", "--model_size", default="mini", choices=list(MODEL_SIZES))
    parser.add_argument(
        "--num-layers",
        "--num_layers",
        type=int,
        help="transformer layers, in place of the model size's (a quick check: 1)",
    )
    parser.add_argument("--batch-size", "--batch_size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10, help="steps per timed round")
    # Fewer rounds let one fast first round decide the median (3 gave LAMB / AdamW 1.32 once).
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per optimizer")
    parser.add_argument(
        "--pipeline-batches",
        "--pipeline_batches",
        type=int,
        default=200,
        help="batches per timed round of the input pipeline alone",
    )
    args = parser.parse_args(argv)
    data = pretraining_data.create_default_pretraining_data(
        args.data_dir, dupe_factor=args.dupe_factor
    )
    files = list(data.record_files)
    training = measure_training(
        args.model_size,
        args.batch_size,
        files,
        data.vocab_file,
        args.steps,
        args.rounds,
        args.num_layers,
    )
    pipeline = measure_pipeline(files, data.vocab_file, args.batch_size, args.pipeline_batches)
    print(
        json.dumps(
            {
                "model_size": args.model_size,
                "num_layers": args.num_layers or MODEL_SIZES[args.model_size]["num_layers"],
                "seq_length": 128,
                "global_batch_size": args.batch_size,
                "lamb_examples_per_second": training["lamb"],
                "adamw_examples_per_second": training["adamw"],
                "lamb_over_adamw": training["lamb"] / training["adamw"],
                "pipeline_examples_per_second": pipeline,
                "pipeline_over_training": pipeline / max(training.values()),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
