"""What measuring the gradient noise scale costs: step time with and without the callback.

    python benchmarks/gradient_noise_scale.py [--batch-size 256] [--steps 100] [--repeats 15]

Splits the CPU into 2 logical devices and trains a small multilayer perceptron (784-512-512-10,
Fashion-MNIST's shape, synthetic data) with LAMB in two settings: a 2-replica MirroredStrategy
at global batch ``--batch-size``, and one device with 4-step gradient accumulation of
micro-batches of ``--batch-size / 4``. In each setting one model trains plainly and an
identical one with `keras_largebatch.GradientNoiseScale`; each round times ``--steps``
micro-steps of the two back to back (alternating which goes first), for each setting. Prints one
JSON object: the median seconds per step, and per setting the median over rounds of the
round's ratio with / without the callback (aim: < 1.03).
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

from keras_largebatch import LAMB, GradientNoiseScale  # noqa: E402
from keras_largebatch.distribute import configure_logical_cpus  # noqa: E402

ACCUMULATION_STEPS = 4


def synthetic_batches(batch_size, seed=0):
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(8 * batch_size, 784)).astype("float32")
    labels = rng.integers(0, 10, size=(8 * batch_size,))
    dataset = tf.data.Dataset.from_tensor_slices((features, labels))
    return dataset.repeat().batch(batch_size, drop_remainder=True).prefetch(2)


def make_trainer(strategy, batch_size, accumulation_steps, measure, steps):
    """A warmed-up ``run()`` that fits ``steps`` micro-steps of ``batch_size`` examples."""
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((784,)),
                keras.layers.Dense(512, activation="relu"),
                keras.layers.Dense(512, activation="relu"),
                keras.layers.Dense(10),
            ]
        )
        optimizer = LAMB(1e-3, weight_decay=0.01, gradient_accumulation_steps=accumulation_steps)
        model.compile(
            optimizer=optimizer,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    dataset = synthetic_batches(batch_size)
    callbacks = [GradientNoiseScale(batch_size)] if measure else []

    def run():
        model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=callbacks)

    run()  # trace and warm up
    return run


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--batch-size", "--batch_size", type=int, default=256, help="global batch (default 256)"
    )
    parser.add_argument("--steps", type=int, default=100, help="steps per timed fit (default 100)")
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds (default 15)")
    args = parser.parse_args(argv)

    devices = configure_logical_cpus(2)
    settings = {
        "2_replicas": (tf.distribute.MirroredStrategy(devices), args.batch_size, None),
        f"accumulation_{ACCUMULATION_STEPS}": (
            tf.distribute.get_strategy(),
            args.batch_size // ACCUMULATION_STEPS,
            ACCUMULATION_STEPS,
        ),
    }
    trainers = {
        (setting, measure): make_trainer(strategy, batch_size, accumulation, measure, args.steps)
        for setting, (strategy, batch_size, accumulation) in settings.items()
        for measure in (False, True)
    }
    times = {key: [] for key in trainers}
    for round_index in range(args.repeats):
        # Alternate which of each pair goes first, so neither always runs on a warmer machine.
        order = [
            (setting, measure != bool(round_index % 2))
            for setting in settings
            for measure in (False, True)
        ]
        for key in order:
            start = time.perf_counter()
            trainers[key]()
            times[key].append((time.perf_counter() - start) / args.steps)
    report = {
        "batch_size": args.batch_size,
        "steps": args.steps,
        "repeats": args.repeats,
        "seconds_per_step": {
            f"{setting}/{'measured' if measure else 'plain'}": statistics.median(values)
            for (setting, measure), values in times.items()
        },
        # Each round's pair ran back to back, so their ratio sees the same load on the machine.
        "measured_over_plain": {
            setting: statistics.median(
                measured / plain
                for measured, plain in zip(times[(setting, True)], times[(setting, False)])
            )
            for setting in settings
        },
    }
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
