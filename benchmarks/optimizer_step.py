"""Time one optimizer step on real model variable shapes, side by side, and print ratios.

    python benchmarks/optimizer_step.py [--repeats 7] [--models bert_base resnet50]
        [--optimizers LAMB LARS]

BERT-base shapes (keras_hub.models.BertBackbone, 199 variables, 109.5M parameters):
LAMB against keras AdamW and keras Lamb. ResNet-50 shapes (keras.applications.ResNet50,
214 trainable variables, 25.6M parameters): LARS against keras SGD(momentum=0.9).
On TensorFlow (the default backend here) XLA on and off; on JAX (``KERAS_BACKEND=jax``) a
`jax.jit` of the optimizer's stateless step, XLA only. Each round times every optimizer once,
in turn, so slow drifts of a shared machine hit all of them alike; the figure is the median
over rounds. ``--optimizers`` times some of them only (each model's baseline always).
"""

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_largebatch import LAMB, LARS  # noqa: E402


def bert_shapes(num_layers=12, hidden_dim=768, num_heads=12):
    """The trainable shapes of a keras-hub BertBackbone (BERT-base by default)."""
    import keras_hub

    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=30522,
        num_layers=num_layers,
        num_heads=num_heads,
        hidden_dim=hidden_dim,
        intermediate_dim=4 * hidden_dim,
        max_sequence_length=512,
        num_segments=2,
    )
    return [tuple(v.shape) for v in backbone.trainable_variables]


def resnet50_shapes():
    model = keras.applications.ResNet50(weights=None)
    return [tuple(v.shape) for v in model.trainable_variables]


def small_resnet_shapes():
    """The image recipe's small ResNet for 28x28 images: a quick stand-in (smoke runs)."""
    from keras_largebatch.vision.model import image_classifier

    return [tuple(v.shape) for v in image_classifier("small", 10, (28, 28, 1)).trainable_variables]


BERT_OPTIMIZERS = {
    "AdamW": lambda: keras.optimizers.AdamW(1e-3, weight_decay=0.01),
    "keras.Lamb": lambda: keras.optimizers.Lamb(1e-3),
    "LAMB": lambda: LAMB(1e-3, weight_decay=0.01),
}
RESNET_OPTIMIZERS = {
    "SGD_momentum": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
    "LARS": lambda: LARS(0.1, weight_decay=1e-4),
}
# Model name -> (its variables' shapes, the optimizers timed on them, the baseline of the ratios).
MODELS = {
    "bert_base": (bert_shapes, BERT_OPTIMIZERS, "AdamW"),
    "bert_tiny": (lambda: bert_shapes(2, 128, 2), BERT_OPTIMIZERS, "AdamW"),
    "resnet50": (resnet50_shapes, RESNET_OPTIMIZERS, "SGD_momentum"),
    "resnet_small": (small_resnet_shapes, RESNET_OPTIMIZERS, "SGD_momentum"),
}


def make_step(optimizer, shapes, jit_compile, seed=0):
    rng = np.random.default_rng(seed)
    variables = [
        keras.Variable(rng.normal(0, 0.02, s).astype("float32"), name=f"v{i}")
        for i, s in enumerate(shapes)
    ]
    grads = [keras.ops.convert_to_tensor(rng.normal(0, 1e-3, s).astype("float32")) for s in shapes]
    optimizer.build(variables)
    if keras.backend.backend() == "jax":
        import jax

        # The state lives in arrays the jitted step donates and returns, as in a JAX train step.
        update = jax.jit(optimizer.stateless_apply, donate_argnums=(0, 2))
        state = [[v.value for v in optimizer.variables], [v.value for v in variables]]

        def run():
            state[1], state[0] = update(state[0], grads, state[1])
            jax.block_until_ready(state[1][-1])

    else:
        import tensorflow as tf

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


def benchmark(shapes, optimizers, baseline, repeats, selected=None):
    if selected:
        optimizers = {
            name: factory
            for name, factory in optimizers.items()
            if name in selected or name == baseline
        }
    results = {}
    # JAX has no uncompiled step to time: its eager ops are not what a train step runs.
    modes = (True,) if keras.backend.backend() == "jax" else (True, False)
    for jit_compile in modes:
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
        "--repeats",
        type=int,
        default=7,
        help="timed rounds per configuration (default 7)",
    )
    parser.add_argument(
        "--models",
        nargs="+",
        default=["bert_base", "resnet50"],
        choices=list(MODELS),
        help="the variables' shapes (bert_tiny and resnet_small: quick stand-ins)",
    )
    parser.add_argument(
        "--optimizers",
        nargs="+",
        choices=sorted({*BERT_OPTIMIZERS, *RESNET_OPTIMIZERS}),
        help="time only these (and each model's baseline; default: every one)",
    )
    args = parser.parse_args(argv)

    report = {}
    for name in args.models:
        shapes_of, optimizers, baseline = MODELS[name]
        shapes = shapes_of()
        report[name] = {
            "variables": len(shapes),
            "parameters": int(sum(np.prod(s) for s in shapes)),
            **benchmark(shapes, optimizers, baseline, args.repeats, args.optimizers),
        }
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
