"""One BERT pretraining step on 1 and 2 replicas, LAMB against AdamW, side by side.

    python benchmarks/distributed_step.py [--size mini] [--global-batch-size 32] [--repeats 5]
        [--num-layers N]

Splits the CPU into 2 logical devices and trains `BertPretrainer` (BERT-mini by default,
sequence length 128) on synthetic batches in the pretraining pipeline's structure, with
`model.fit` under the default strategy (1 replica) and a 2-replica MirroredStrategy at the same
global batch. Each round times a fixed number of steps for every (replicas, optimizer) pair in
turn; the figure is the median over rounds. Prints JSON with seconds per step and the ratio
LAMB / AdamW for each replica count (target: within 5%).
"""

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_largebatch import LAMB  # noqa: E402
from keras_largebatch.bert.pretraining.config import MODEL_SIZES  # noqa: E402
from keras_largebatch.bert.pretraining.model import BertPretrainer, bert_backbone  # noqa: E402
from keras_largebatch.distribute import configure_logical_cpus  # noqa: E402

VOCABULARY_SIZE = 8000
EXCLUDED = ["layer_norm", "layernorm", "bias"]


def synthetic_batches(global_batch_size, seq_length=128, max_predictions=20, seed=0):
    """An endless dataset of random but well-formed pretraining batches."""
    rng = np.random.default_rng(seed)
    count = 4 * global_batch_size
    features = {
        "token_ids": rng.integers(5, VOCABULARY_SIZE, (count, seq_length), dtype=np.int32),
        "segment_ids": np.repeat(
            [[0] * (seq_length // 2) + [1] * (seq_length - seq_length // 2)], count, 0
        ).astype(np.int32),
        "padding_mask": np.ones((count, seq_length), np.int32),
        "mask_positions": np.sort(
            rng.choice(np.arange(1, seq_length), (count, max_predictions)), axis=1
        ).astype(np.int32),
    }
    labels = {
        "masked_lm": rng.integers(5, VOCABULARY_SIZE, (count, max_predictions), dtype=np.int32),
        "next_sentence": rng.integers(0, 2, (count,), dtype=np.int32),
    }
    weights = {
        "masked_lm": np.ones((count, max_predictions), np.float32),
        "next_sentence": np.ones((count,), np.float32),
    }
    return (
        tf.data.Dataset.from_tensor_slices((features, labels, weights))
        .repeat()
        .batch(global_batch_size, drop_remainder=True)
    )


def optimizer(name):
    if name == "LAMB":
        return LAMB(
            1e-3,
            weight_decay=0.01,
            exclude_from_weight_decay=EXCLUDED,
            exclude_from_layer_adaptation=EXCLUDED,
            global_clipnorm=1.0,
        )
    adamw = keras.optimizers.AdamW(1e-3, weight_decay=0.01, global_clipnorm=1.0)
    adamw.exclude_from_weight_decay(var_names=["gamma", "beta", "bias"])
    return adamw


def make_trainer(strategy, optimizer_name, size, global_batch_size, steps, num_layers=None):
    with strategy.scope():
        model = BertPretrainer(
            bert_backbone(
                size, VOCABULARY_SIZE, max_sequence_length=128, dropout=0.0, num_layers=num_layers
            )
        )
        model.compile(optimizer=optimizer(optimizer_name))
    dataset = synthetic_batches(global_batch_size)

    def run():
        model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0)

    run()  # trace and warm up
    return run


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="mini", help="BERT size (default mini)")
    parser.add_argument(
        "--num-layers",
        "--num_layers",
        type=int,
        help="transformer layers, in place of the size's (a quick check: 1)",
    )
    parser.add_argument(
        "--global-batch-size",
        "--global_batch_size",
        type=int,
        default=32,
        help="examples per step (default 32)",
    )
    parser.add_argument("--steps", type=int, default=5, help="steps per timed fit call (default 5)")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (default 5)")
    args = parser.parse_args(argv)

    devices = configure_logical_cpus(2)
    strategies = {
        1: tf.distribute.get_strategy(),
        2: tf.distribute.MirroredStrategy(
            devices, cross_device_ops=tf.distribute.ReductionToOneDevice()
        ),
    }
    trainers = {
        (replicas, name): make_trainer(
            strategy, name, args.size, args.global_batch_size, args.steps, args.num_layers
        )
        for replicas, strategy in strategies.items()
        for name in ("AdamW", "LAMB")
    }
    times = {key: [] for key in trainers}
    for _ in range(args.repeats):
        for key, run in trainers.items():
            start = time.perf_counter()
            run()
            times[key].append((time.perf_counter() - start) / args.steps)
    seconds = {key: statistics.median(values) for key, values in times.items()}
    report = {
        "size": args.size,
        "num_layers": args.num_layers or MODEL_SIZES[args.size]["num_layers"],
        "global_batch_size": args.global_batch_size,
        "seconds_per_step": {f"{r}_replicas/{name}": s for (r, name), s in seconds.items()},
        "lamb_over_adamw": {
            f"{r}_replicas": seconds[(r, "LAMB")] / seconds[(r, "AdamW")] for r in strategies
        },
    }
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
