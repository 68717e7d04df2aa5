"""What one optimizer step costs, read from the compiled program instead of the clock.

    python benchmarks/compiled_step.py [--smoke]

For each optimizer, one jitted `stateless_apply` (state and weights donated, as Keras's JAX
trainer does) is compiled on JAX for every variable of a model's shapes, and XLA's cost
analysis gives the bytes the step reads and writes: divided by 4 and by the parameter count,
the float32 streams the step moves per parameter (a stream is one full pass over the
parameters: reading the weights is one, writing them another). The floor a step must move:
AdamW 7 (read w, g, m, v; write w, m, v), LAMB 10 (AdamW's, plus a second pass over w and
the update for the norms, unless fused), SGD with momentum 5, LARS 7. With
``gradient_accumulation_steps=2`` the step also reads and writes the accumulators.

Collectives: with 2 host devices (``--xla_force_host_platform_device_count=2``) and the
batch split over them by `keras.distribution.DataParallel`, the jitted micro-batch step
(gradient and optimizer) is compiled and its all-reduce ops counted, with the bytes they
carry; with 4-step accumulation an optimizer step runs it 4 times.

Shapes: BERT-base (110M parameters) and ResNet-50 (25.6M), ``--smoke`` a small model. Each
model runs in its own subprocess. Figures are for the CPU compiler; on a GPU or TPU the
fusion decisions, and so the bytes, can differ (benchmarks/device_check.py measures there).
Prints one JSON object.
"""

import argparse
import json
import os
import subprocess
import sys

FLOORS = {"AdamW": 7, "LAMB": 10, "SGD_momentum": 5, "LARS": 7}


def bert_base_shapes(vocab=30522, hidden=768, layers=12, ffn=3072):
    shapes = [(vocab, hidden), (512, hidden), (2, hidden), (hidden,), (hidden,)]
    for _ in range(layers):
        shapes += [(hidden, hidden), (hidden,)] * 4 + [(hidden,), (hidden,)]
        shapes += [(hidden, ffn), (ffn,), (ffn, hidden), (hidden,), (hidden,), (hidden,)]
    return shapes + [(hidden, hidden), (hidden,)]


def resnet50_shapes():
    shapes = [(7, 7, 3, 64), (64,), (64,)]
    channels = 64
    for blocks, width in ((3, 64), (4, 128), (6, 256), (3, 512)):
        for block in range(blocks):
            out = 4 * width
            if block == 0:
                shapes += [(1, 1, channels, out), (out,), (out,)]
            shapes += [(1, 1, channels, width), (width,), (width,)]
            shapes += [(3, 3, width, width), (width,), (width,)]
            shapes += [(1, 1, width, out), (out,), (out,)]
            channels = out
    return shapes + [(2048, 1000), (1000,)]


MODELS = {
    "smoke": lambda: [(64, 256), (256,), (256, 64), (64,)],
    "bert_base": bert_base_shapes,
    "resnet50": resnet50_shapes,
}


def optimizers():
    import keras
    import optax

    from keras_largebatch import LAMB, LARS

    return {
        "LAMB": lambda k: LAMB(1e-3, weight_decay=0.01, gradient_accumulation_steps=k),
        "LARS": lambda k: LARS(0.1, weight_decay=1e-4, gradient_accumulation_steps=k),
        "keras_AdamW": lambda k: keras.optimizers.AdamW(1e-3, gradient_accumulation_steps=k),
        "keras_SGD_momentum": lambda k: keras.optimizers.SGD(
            0.1, momentum=0.9, gradient_accumulation_steps=k
        ),
        "keras_Lamb": lambda k: keras.optimizers.Lamb(1e-3, gradient_accumulation_steps=k),
        "optax_lamb": lambda k: None if k else optax.lamb(1e-3, weight_decay=0.01),
        "optax_lars": lambda k: None if k else optax.lars(0.1, weight_decay=1e-4),
    }


def _bytes(compiled):
    analysis = compiled.cost_analysis()
    if isinstance(analysis, list):
        analysis = analysis[0]
    return float(analysis["bytes accessed"])


def keras_streams(make, shapes):
    import jax
    import keras
    import numpy as np

    variables = [keras.Variable(np.ones(s, "float32"), name=f"w{i}") for i, s in enumerate(shapes)]
    optimizer = make()
    optimizer.build(variables)
    grads = [jax.numpy.ones(s, "float32") for s in shapes]
    step = jax.jit(
        lambda state, grads, weights: optimizer.stateless_apply(state, grads, weights)[::-1],
        donate_argnums=(0, 2),
    )
    compiled = step.lower(
        [v.value for v in optimizer.variables], grads, [v.value for v in variables]
    ).compile()
    return _bytes(compiled)


def optax_streams(transform, shapes):
    import jax
    import optax

    weights = [jax.numpy.ones(s, "float32") for s in shapes]
    grads = [jax.numpy.ones(s, "float32") for s in shapes]

    def step(state, grads, weights):
        updates, state = transform.update(grads, state, weights)
        return optax.apply_updates(weights, updates), state

    step = jax.jit(step, donate_argnums=(0, 2))
    return _bytes(step.lower(transform.init(weights), grads, weights).compile())


def streams(model):
    import numpy as np

    shapes = MODELS[model]()
    parameters = int(sum(np.prod(s) for s in shapes))
    report = {"parameters": parameters, "streams": {}}
    for name, make in optimizers().items():
        for k in (None, 2):
            if name.startswith("optax"):
                transform = make(k)
                if transform is None:
                    continue
                moved = optax_streams(transform, shapes)
            else:
                moved = keras_streams(lambda: make(k), shapes)
            key = "no_accumulation" if k is None else f"accumulation_{k}"
            report["streams"].setdefault(key, {})[name] = round(moved / 4 / parameters, 2)
    return report


def collectives(model, accumulation=4):
    """All-reduce ops, and their bytes, in the compiled micro-batch step on 2 devices."""
    import re

    import jax
    import keras
    import numpy as np

    from keras_largebatch import LAMB

    devices = jax.devices()
    assert len(devices) == 2, devices
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
    shapes = [s for s in MODELS[model]() if len(s) == 2]
    variables = [
        keras.Variable(np.ones(s, "float32") * 0.01, name=f"w{i}") for i, s in enumerate(shapes)
    ]
    optimizer = LAMB(1e-3, gradient_accumulation_steps=accumulation)
    optimizer.build(variables)
    batch = 8
    data_sharding = jax.sharding.NamedSharding(
        jax.sharding.Mesh(np.array(devices), ("batch",)), jax.sharding.PartitionSpec("batch")
    )

    def loss(weights, inputs):
        # Each matrix of the model is trained on its own row inputs: one gradient per weight.
        return sum(
            jax.numpy.mean(jax.numpy.square(x[:, : w.shape[0]] @ w))
            for w, x in zip(weights, inputs)
        )

    def micro_step(state, weights, inputs):
        grads = jax.grad(loss)(weights, inputs)
        return optimizer.stateless_apply(state, grads, weights)

    inputs = [jax.device_put(np.ones((batch, s[0]), "float32"), data_sharding) for s in shapes]
    weights = [v.value for v in variables]
    state = [v.value for v in optimizer.variables]
    text = jax.jit(micro_step).lower(state, weights, inputs).compile().as_text()
    keras.distribution.set_distribution(None)
    ops = re.findall(r"= (\([^)]*\)|\S+) all-reduce(?:-start)?\(", text)
    moved = 0
    for shape in ops:
        for dtype, dims in re.findall(r"(f32|bf16|f16|s32|pred)\[([0-9,]*)\]", shape):
            size = {"f32": 4, "s32": 4, "bf16": 2, "f16": 2, "pred": 1}[dtype]
            moved += size * int(np.prod([int(d) for d in dims.split(",") if d] or [1]))
    return {
        "accumulation_steps": accumulation,
        "all_reduces_per_micro_batch": len(ops),
        "all_reduces_per_optimizer_step": len(ops) * accumulation,
        "bytes_per_optimizer_step": moved * accumulation,
        "gradient_bytes": int(sum(4 * np.prod(s) for s in shapes)),
    }


def _child(args):
    result = streams(args.model) if args.child == "streams" else collectives(args.model)
    print(json.dumps(result))


def _run_child(part, model):
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2")
    if part == "collectives":
        env["XLA_FLAGS"] = (
            env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
        ).strip()
    result = subprocess.run(
        [sys.executable, __file__, "--child", part, "--model", model],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{part} {model} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a small model only")
    parser.add_argument("--child", choices=["streams", "collectives"], help=argparse.SUPPRESS)
    parser.add_argument("--model", choices=sorted(MODELS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    models = ["smoke"] if args.smoke else ["bert_base", "resnet50"]
    report = {"floors": FLOORS, "jax": {}}
    for model in models:
        report["jax"][model] = _run_child("streams", model)
        report["jax"][model]["collectives"] = _run_child("collectives", model)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
