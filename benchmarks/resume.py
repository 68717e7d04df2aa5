"""Resume time: from the start of a resumed phase to its first trained step, at an early and a
late step.

    python benchmarks/resume.py [--early-step 10] [--late-step 100000] [--rounds 3]

On the default corpus's records (created in ``--data-dir`` if missing) with the pretraining
command's recipe (BERT-tiny, LAMB, global batch ``--batch-size``, one phase of ``--late-step +
10`` steps on one device), each round times, for a resume at ``--early-step`` and at
``--late-step`` of the same phase, the harness's resume path after the model is built and
compiled: `trainer.make_phase_dataset` positioned at the step, then one `fit` step on its first
batch. The model is compiled and traced before the first round, so the rounds time the input's
positioning and one step alike. Reported:

- ``seconds_to_first_step``: the median over ``--rounds`` rounds at each step;
- ``late_over_early``: their ratio (the aim is at most 1.2: the input is located, not replayed);
- ``replay_seconds_to_first_step``: for contrast, the same first step when the input is
  replayed to the position (the stream from step 0, then ``dataset.skip``, as the harness did
  before), at ``--early-step`` and at ``--replay-step`` (default 1,000: replaying 100,000
  steps takes minutes); and its ratio, which grows with the step.

Prints one JSON object.
"""

import argparse
import json
import statistics
import time

import keras
import tensorflow as tf
from throughput import add_default_data_arguments

from keras_largebatch import input_order
from keras_largebatch.bert.data import pretraining_data
from keras_largebatch.bert.pretraining.config import load_config
from keras_largebatch.bert.pretraining.recipe import BertPretraining
from keras_largebatch.training import trainer
from keras_largebatch.training.devices import TensorFlowDevices
from keras_largebatch.training.plan import plan_run


def _replayed(devices, recipe, phase, step):
    """The phase's input from step 0 with the batches of ``step`` steps read and dropped."""
    skip = step * phase.gradient_accumulation_steps

    def dataset_fn(input_context):
        batch_size = input_context.get_per_replica_batch_size(phase.micro_batch_size)
        return recipe.dataset(phase, batch_size, input_context, 0).skip(skip)

    return devices.distribute(dataset_fn)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    add_default_data_arguments(parser)
    parser.add_argument("--batch-size", "--batch_size", type=int, default=32)
    parser.add_argument("--early-step", "--early_step", type=int, default=10)
    parser.add_argument("--late-step", "--late_step", type=int, default=100_000)
    parser.add_argument("--replay-step", "--replay_step", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds at each step")
    parser.add_argument(
        "--num-layers",
        "--num_layers",
        type=int,
        help="BERT-tiny's transformer layers, in place of its 2 (a quick check: 1)",
    )
    args = parser.parse_args(argv)
    data = pretraining_data.create_default_pretraining_data(
        args.data_dir, dupe_factor=args.dupe_factor
    )
    config = load_config(
        overrides=[
            "model.size=tiny",
            *([f"model.num_layers={args.num_layers}"] if args.num_layers else []),
            f"phases.0.global_batch_size={args.batch_size}",
            f"phases.0.steps={args.late_step + 10}",
            f"phases.0.input_files={json.dumps(list(data.record_files))}",
            f"data.vocab_file={data.vocab_file}",
            "strategy.name=default",
        ]
    )
    recipe = BertPretraining(config)
    plan = plan_run(config, num_replicas=1)
    recipe.prepare(plan, lambda line: None, input_order.RecordCounts())
    phase = plan.phases[0]
    devices = TensorFlowDevices(tf.distribute.get_strategy())
    keras.utils.set_random_seed(0)
    model = recipe.build_model()
    model.compile(optimizer=recipe.build_optimizer(phase, model))

    def first_step(dataset):
        start = time.perf_counter()
        model.fit(dataset(), epochs=1, steps_per_epoch=1, verbose=0, shuffle=False)
        return time.perf_counter() - start

    def positioned(step):
        return lambda: trainer.make_phase_dataset(devices, recipe, phase, step)

    def replayed(step):
        return lambda: _replayed(devices, recipe, phase, step)

    first_step(positioned(0))  # traces and compiles the train function; not timed
    steps = {"positioned": (args.early_step, args.late_step), "replayed": (args.early_step,)}
    steps["replayed"] += (args.replay_step,)
    times = {(kind, step): [] for kind, pair in steps.items() for step in pair}
    for _ in range(args.rounds):
        for kind, step in times:
            make = positioned if kind == "positioned" else replayed
            times[kind, step].append(first_step(make(step)))
    median = {key: statistics.median(values) for key, values in times.items()}
    early, late = args.early_step, args.late_step
    print(
        json.dumps(
            {
                "global_batch_size": args.batch_size,
                "epoch_steps": data.num_examples // args.batch_size,
                "seconds_to_first_step": {
                    f"step_{early}": median["positioned", early],
                    f"step_{late}": median["positioned", late],
                },
                "late_over_early": median["positioned", late] / median["positioned", early],
                "replay_seconds_to_first_step": {
                    f"step_{early}": median["replayed", early],
                    f"step_{args.replay_step}": median["replayed", args.replay_step],
                },
                "replay_late_over_early": (
                    median["replayed", args.replay_step] / median["replayed", early]
                ),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
