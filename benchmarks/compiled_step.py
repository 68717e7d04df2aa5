"""What one optimizer step costs, read from the compiled program instead of the clock.

    python benchmarks/compiled_step.py [--smoke] [--models bert_base resnet50] [--on-device]

For each optimizer, one jitted `stateless_apply` (state and weights donated, as Keras's JAX
trainer does) is compiled on JAX for every variable of a model's shapes, and XLA's cost
analysis gives the bytes the step reads and writes: divided by 4 and by the parameter count,
the float32 streams the step moves per parameter (a stream is one full pass over the
parameters: reading the weights is one, writing them another). The floor a step must move:
AdamW 7 (read w, g, m, v; write w, m, v), LAMB 10 (AdamW's, plus a second pass over w and
the update for the norms, unless fused), SGD with momentum 5, LARS 7. With
``gradient_accumulation_steps=2`` the step also reads and writes the accumulators.

On TensorFlow, each Keras optimizer's ``apply`` in a ``tf.function(jit_compile=True)``:
TensorFlow gives the compiled program (``experimental_get_compiler_ir(...)(stage=
"optimized_hlo")``) but not XLA's cost analysis, so the bytes are counted in that HLO, as the
cost analysis counts them (every instruction reads its operands once and writes its result;
`hlo_bytes`; tests/test_compiled_step.py checks the count against XLA's on a JAX program).
With accumulation ``tf.cond`` stays a conditional there: ``accumulation_2`` is the update
micro-step, ``accumulation_2_accumulate_only`` the other one (JAX's step costs the same on
both, it selects rather than branches).

Collectives: with 2 host devices (``--xla_force_host_platform_device_count=2``) and the
batch split over them by `keras.distribution.DataParallel`, the jitted micro-batch step
(gradient and optimizer) is compiled and its all-reduce ops counted, with the bytes they
carry; with 4-step accumulation an optimizer step runs it 4 times. On TensorFlow, the
micro-batch step under `tf.distribute.MirroredStrategy` over 2 logical CPU devices is traced
(without XLA, as Keras runs a multi-replica step) and its ``CollectiveReduceV2`` ops counted:
those of the step's own graph run every micro-batch, those inside a ``tf.cond`` branch only on
the update step.

Shapes: BERT-base (110M parameters) and ResNet-50 (25.6M), ``--smoke`` a small model. Each
model runs in its own subprocess per backend (two with ``--on-device``: the streams on the
accelerator, the collectives on the host). Figures are for the CPU compiler; on a GPU or TPU the
fusion decisions, and so the bytes, can differ: ``--on-device`` compiles the streams' steps for
the accelerator at hand instead (JAX: a GPU or TPU; TensorFlow: a GPU), as
benchmarks/device_check.py does; the collectives stay on 2 host devices. Each report names the
platform it was compiled for. Prints one JSON object.
"""

import argparse
import json
import math
import os
import re
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
    import jax

    report = {"parameters": parameters, "platform": jax.devices()[0].platform, "streams": {}}
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


# TensorFlow does not expose XLA's cost analysis for a `jit_compile` function, only its
# compiled program (`experimental_get_compiler_ir`); the bytes are counted from the optimized
# HLO instead, the way XLA's cost analysis counts a fused program: every instruction of the
# entry computation (fusions, copies, reductions) reads each of its operands once and writes
# its result once; parameters, constants, tuples and bitcasts move nothing. A `conditional`
# (what `tf.cond` lowers to) runs one of its branches, counted the same way.
_DTYPE_BYTES = {"f64": 8, "s64": 8, "u64": 8, "f32": 4, "s32": 4, "u32": 4, "bf16": 2}
_DTYPE_BYTES.update({"f16": 2, "s16": 2, "u16": 2, "s8": 1, "u8": 1, "pred": 1})
_FREE = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "after-all"}


def _shape_bytes(shape):
    total = 0
    for dtype, dims in re.findall(r"\b([a-z]+[0-9]*)\[([0-9,]*)\]", shape):
        if dtype in _DTYPE_BYTES:
            total += _DTYPE_BYTES[dtype] * math.prod(int(d) for d in dims.split(",") if d)
    return total


def _closing(text, start):
    """The index after the bracket that closes the one at ``text[start]``."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i + 1
    raise ValueError(f"unbalanced HLO line: {text[:200]}")


def parse_hlo(text):
    """``{computation: [(name, shape, opcode, operands, attributes)]}`` and the entry's name."""
    computations, entry, current = {}, None, None
    for line in text.splitlines():
        header = re.match(r"^(ENTRY )?%(\S+) .*\{$", line)
        if header:
            current = computations.setdefault(header.group(2), [])
            entry = header.group(2) if header.group(1) else entry
            continue
        found = re.match(r"^\s+(?:ROOT )?%(\S+) = ", line)
        if not found or current is None:
            continue
        rest = line[found.end() :]
        end = _closing(rest, 0) if rest.startswith("(") else rest.index(" ")
        shape, rest = rest[:end], rest[end:].lstrip()
        opcode = rest[: rest.index("(")]
        close = _closing(rest, len(opcode))
        operands = re.findall(r"%([^\s,()]+)", rest[len(opcode) : close])
        current.append((found.group(1), shape, opcode, operands, rest[close:]))
    return computations, entry


def hlo_bytes(text, branch):
    """Bytes one run of the optimized HLO ``text`` moves, taking branch ``branch`` (0: the
    true or first branch, 1: the false or second) of every conditional."""
    computations, entry = parse_hlo(text)

    def count(name):
        shapes = {n: shape for n, shape, *_ in computations[name]}
        moved = 0
        for _, shape, opcode, operands, attributes in computations[name]:
            if opcode == "conditional":
                branches = re.findall(
                    r"(?:true_computation|false_computation)=%([^\s,]+)", attributes
                ) or re.findall(r"%([^\s,{}]+)", attributes.split("branch_computations=")[-1])
                moved += count(branches[min(branch, len(branches) - 1)])
            elif opcode not in _FREE:
                moved += _shape_bytes(shape) + sum(_shape_bytes(shapes[o]) for o in set(operands))
        return moved

    return count(entry)


def _jit_apply(optimizer, variables):
    import tensorflow as tf

    return tf.function(lambda grads: optimizer.apply(grads, variables), jit_compile=True)


def tf_streams(model):
    """Float32 streams per step of each Keras optimizer in a `jit_compile` `tf.function`."""
    import gc

    import keras
    import numpy as np
    import tensorflow as tf

    shapes = MODELS[model]()
    parameters = int(sum(np.prod(s) for s in shapes))
    report = {
        "parameters": parameters,
        "platform": "gpu" if tf.config.list_physical_devices("GPU") else "cpu",
        "bytes": "counted in the optimized HLO",
        "streams": {},
    }
    grads = [tf.ones(s, "float32") for s in shapes]
    for name, make in optimizers().items():
        if name.startswith("optax"):
            continue
        for k in (None, 2):
            variables = [
                keras.Variable(np.ones(s, "float32"), name=f"w{i}") for i, s in enumerate(shapes)
            ]
            optimizer = make(k)
            optimizer.build(variables)

            step = _jit_apply(optimizer, variables)

            text = step.experimental_get_compiler_ir(grads)(stage="optimized_hlo")
            moved = [hlo_bytes(text, branch) for branch in (0, 1)]
            if k is None:
                report["streams"].setdefault("no_accumulation", {})[name] = round(
                    moved[0] / 4 / parameters, 2
                )
            else:
                # The update micro-step does more than the one that only accumulates.
                update, accumulate = max(moved), min(moved)
                for key, value in (("", update), ("_accumulate_only", accumulate)):
                    report["streams"].setdefault(f"accumulation_{k}{key}", {})[name] = round(
                        value / 4 / parameters, 2
                    )
            variables = optimizer = step = None
            gc.collect()
    return report


def tf_collectives(model, accumulation=4):
    """All-reduce ops, and their bytes, in the micro-batch step under `MirroredStrategy` over 2
    logical CPU devices: those of the step's own graph run every micro-batch, those inside a
    `tf.cond` branch only when it is taken (the optimizer's update step)."""
    import keras
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph

    from keras_largebatch import LAMB, LARS

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    shapes = [s for s in MODELS[model]() if len(s) == 2]
    makers = {
        "LAMB": lambda: LAMB(1e-3, gradient_accumulation_steps=accumulation),
        "LARS": lambda: LARS(0.1, gradient_accumulation_steps=accumulation),
        "keras_AdamW": lambda: keras.optimizers.AdamW(
            1e-3, gradient_accumulation_steps=accumulation
        ),
        "keras_SGD_momentum": lambda: keras.optimizers.SGD(
            0.1, momentum=0.9, gradient_accumulation_steps=accumulation
        ),
    }
    batch = 8
    report = {
        "accumulation_steps": accumulation,
        "devices": 2,
        "gradient_bytes": int(sum(4 * np.prod(s) for s in shapes)),
    }
    for name, make in makers.items():
        with strategy.scope():
            variables = [
                keras.Variable(np.ones(s, "float32") * 0.01, name=f"w{i}")
                for i, s in enumerate(shapes)
            ]
            optimizer = make()
            optimizer.build(variables)

        def replica_step(inputs, optimizer=optimizer, variables=variables):
            with tf.GradientTape() as tape:
                loss = tf.add_n(
                    [
                        tf.reduce_mean(tf.square(x[:, : v.shape[0]] @ v.value))
                        for v, x in zip(variables, inputs)
                    ]
                )
            optimizer.apply(tape.gradient(loss, [v.value for v in variables]), variables)

        @tf.function
        def micro_step(inputs, replica_step=replica_step):
            strategy.run(replica_step, args=(inputs,))

        inputs = strategy.experimental_distribute_values_from_function(
            lambda context: [tf.ones((batch // 2, s[0])) for s in shapes]
        )
        try:
            graph = micro_step.get_concrete_function(inputs).graph
        except RuntimeError as error:  # Keras's own accumulation, e.g. AdamW's weight decay
            found = re.search(r"`merge_call` called .*?tf\.function\.", str(error))
            report[name] = {"error": found.group(0) if found else str(error)[:300]}
            continue

        def all_reduces(operations):
            # One op per device takes part in each all-reduce: count those on the first.
            return [
                op.inputs[0].dtype.size * math.prod(op.inputs[0].shape)
                for op in operations
                if op.type.startswith("CollectiveReduce") and op.device.endswith("CPU:0")
            ]

        every = all_reduces(graph.get_operations())
        branch = []
        for function in graph.as_graph_def().library.function:
            if any(n.op.startswith("CollectiveReduce") for n in function.node_def):
                branch += all_reduces(function_def_to_graph(function).get_operations())
        report[name] = {
            "all_reduces_per_micro_batch": len(every),
            "all_reduces_on_update_step": len(branch),
            "all_reduces_per_optimizer_step": len(every) * accumulation + len(branch),
            "bytes_per_optimizer_step": sum(every) * accumulation + sum(branch),
        }
    return report


def _child(args):
    # The collectives first: TensorFlow's 2 logical CPU devices are set before its first op.
    parts = {
        "collectives": tf_collectives if args.backend == "tensorflow" else collectives,
        "streams": tf_streams if args.backend == "tensorflow" else streams,
    }
    print(json.dumps({part: run(args.model) for part, run in parts.items() if part in args.child}))


def _run_child(parts, model, backend="jax", on_device=False):
    """``{part: its report}`` for ``parts`` of ``model`` on ``backend``, from one subprocess."""
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2")
    if not on_device or parts == ["collectives"]:
        # The collectives need 2 devices: 2 host CPU devices stand in for them. A step on one
        # device compiles the same with 2 present, so the streams can share their process.
        env.update(JAX_PLATFORMS="cpu")
        if backend == "tensorflow":
            env["CUDA_VISIBLE_DEVICES"] = ""
    if "collectives" in parts and backend == "jax":
        env["XLA_FLAGS"] = (
            env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
        ).strip()
    result = subprocess.run(
        [sys.executable, __file__, "--child", *parts, "--model", model, "--backend", backend],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{backend} {' '.join(parts)} {model} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a small model only")
    parser.add_argument(
        "--models",
        nargs="+",
        choices=sorted(MODELS),
        help="the shapes (default: bert_base resnet50; smoke with --smoke)",
    )
    parser.add_argument(
        "--on-device",
        action="store_true",
        help="compile the streams' steps for the accelerator at hand instead of the CPU",
    )
    parser.add_argument("--no-collectives", action="store_true", help="the streams only")
    parser.add_argument(
        "--backends",
        nargs="+",
        choices=["jax", "tensorflow"],
        default=["jax", "tensorflow"],
        help="the Keras backends whose compiled steps are read (default: both)",
    )
    parser.add_argument(
        "--child", nargs="+", choices=["streams", "collectives"], help=argparse.SUPPRESS
    )
    parser.add_argument("--model", choices=sorted(MODELS), help=argparse.SUPPRESS)
    parser.add_argument("--backend", default="jax", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    models = args.models or (["smoke"] if args.smoke else ["bert_base", "resnet50"])
    report = {"floors": FLOORS, **{backend: {} for backend in args.backends}}
    for backend in args.backends:
        for model in models:
            if args.no_collectives:
                runs = [["streams"]]
            elif args.on_device:  # the streams on the accelerator, the collectives on the host
                runs = [["streams"], ["collectives"]]
            else:
                runs = [["streams", "collectives"]]
            parts = {}
            for run in runs:
                parts.update(_run_child(run, model, backend, args.on_device))
            report[backend][model] = parts["streams"]
            if "collectives" in parts:
                report[backend][model]["collectives"] = parts["collectives"]
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
