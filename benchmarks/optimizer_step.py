"""Time one optimizer step on real model variable shapes, side by side, and print ratios.

    python benchmarks/optimizer_step.py [--repeats 7] [--models bert_base resnet50]

BERT-base shapes (keras_hub.models.BertBackbone, 199 variables, 109.5M parameters):
LAMB against keras AdamW and keras Lamb. ResNet-50 shapes (keras.applications.ResNet50,
214 trainable variables, 25.6M parameters): LARS against keras SGD(momentum=0.9).
TensorFlow backend, XLA on and off. Each round times every optimizer once, in turn, so slow
drifts of a shared machine hit all of them alike; the figure is the median over rounds.
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

from keras_largebatch import LAMB, LARS  # noqa: E402


def bert_base_shapes():
    import keras_hub

    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=30522,
        num_layers=12,
        num_heads=12,
        hidden_dim=768,
        intermediate_dim=3072,
        max_sequence_length=512,
        num_segments=2,
    )
    return [tuple(v.shape) for v in backbone.trainable_variables]


def resnet50_shapes():
    model = keras.applications.ResNet50(weights=None)
    return [tuple(v.shape) for v in model.trainable_variables]


def make_step(optimizer, shapes, jit_compile, seed=0):
    rng = np.random.default_rng(seed)
    variables = [
        keras.Variable(rng.normal(0, 0.02, s).astype("float32"), name=f"v{i}")
        for i, s in enumerate(shapes)
    ]
    grads = [tf.constant(rng.normal(0, 1e-3, s).astype("float32")) for s in shapes]
    optimizer.build(variables)

    @tf.function(jit_compile=jit_compile)
    def step():
        optimizer.apply(grads, variables)

    def run():
        step()
        # A read of one weight waits for the step's last kernel without copying much.
        variables[-1].numpy()

    run()
    run()
    return run


def time_round(steps):
    times = {}
    for name, run in steps.items():
        start = time.perf_counter()
        run()
        times[name] = time.perf_counter() - start
    return times


def benchmark(shapes, optimizers, baseline, repeats):
    results = {}
    for jit_compile in (True, False):
        steps = {
            name: make_step(factory(), shapes, jit_compile) for name, factory in optimizers.items()
        }
        rounds = [time_round(steps) for _ in range(repeats)]
        medians = {name: statistics.median(r[name] for r in rounds) for name in optimizers}
        results["xla" if jit_compile else "no_xla"] = {
            "seconds": medians,
            "ratio_to_" + baseline: {
                name: medians[name] / medians[baseline] for name in optimizers
            },
        }
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeats", type=int, default=7, help="timed rounds per configuration (default 7)"
    )
    parser.add_argument(
        "--models", nargs="+", default=["bert_base", "resnet50"], choices=["bert_base", "resnet50"]
    )
    args = parser.parse_args(argv)

    report = {}
    if "bert_base" in args.models:
        shapes = bert_base_shapes()
        report["bert_base"] = {
            "variables": len(shapes),
            "parameters": int(sum(np.prod(s) for s in shapes)),
            **benchmark(
                shapes,
                {
                    "AdamW": lambda: keras.optimizers.AdamW(1e-3, weight_decay=0.01),
                    "keras.Lamb": lambda: keras.optimizers.Lamb(1e-3),
                    "LAMB": lambda: LAMB(1e-3, weight_decay=0.01),
                },
                "AdamW",
                args.repeats,
            ),
        }
    if "resnet50" in args.models:
        shapes = resnet50_shapes()
        report["resnet50"] = {
            "variables": len(shapes),
            "parameters": int(sum(np.prod(s) for s in shapes)),
            **benchmark(
                shapes,
                {
                    "SGD_momentum": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
                    "LARS": lambda: LARS(0.1, weight_decay=1e-4),
                },
                "SGD_momentum",
                args.repeats,
            ),
        }
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
