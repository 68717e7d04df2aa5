"""One command for a GPU or TPU: correctness, step times, throughput and compiled cost there.

    python benchmarks/device_check.py [--output report.json] [--smoke]

Writes one JSON report (to ``--output``, default stdout) with a section per check, each with the
seconds it took; at full size it runs in under 8 minutes on one accelerator:

- ``reference``: LAMB and LARS (every variable decayed and adapted) run 3 steps on the device,
  eagerly and compiled with XLA on TensorFlow and on JAX, eagerly on PyTorch, against a float64
  NumPy transcription of their equations (below); ``passed`` when every weight is within rtol
  1e-5, atol 1e-6.
- ``step_time``: `benchmarks/optimizer_step.py` on BERT-base and ResNet-50 shapes (TensorFlow,
  XLA on and off; JAX, jitted, where TensorFlow is not installed or not selected): LAMB / AdamW
  and LARS / SGD-momentum, timed side by side in one run.
- ``pretraining``: the pretraining recipe's BERT (base; ``--smoke``: tiny, one layer) in
  ``mixed_bfloat16``, `model.fit` on synthetic NumPy batches at sequence length 128, examples
  per second with LAMB and with Keras's AdamW in alternating rounds, on TensorFlow and on JAX.
- ``compiled_step``: `benchmarks/compiled_step.py --on-device --no-collectives`, the float32
  streams of one optimizer step on BERT-base shapes as the accelerator's compiler builds it.

Each backend runs in its own subprocess (Keras fixes its backend per process); ``--backends``
picks some, by default every one installed (a machine without TensorFlow runs the rest, and the
report lists the missing ones under ``not_installed``). ``device`` names what each backend
found: TensorFlow uses a GPU when one is visible, and the host CPU on a TPU VM (it reaches a TPU
only through `TPUStrategy`). ``--smoke`` runs the same checks at toy size, on a CPU in about a
minute.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BACKENDS = ("tensorflow", "jax", "torch")
# The checks each backend runs: the reference on every one, the throughput on TensorFlow and JAX.
PER_BACKEND = {
    "tensorflow": ("reference", "pretraining"),
    "jax": ("reference", "pretraining"),
    "torch": ("reference",),
}
SHAPES = [(32, 16), (16,), (4, 6, 3)]
STEPS = 3
LAMB_ARGS = dict(learning_rate=1e-2, beta_1=0.9, beta_2=0.999, epsilon=1e-6, weight_decay=0.01)
LARS_ARGS = dict(
    learning_rate=0.5, momentum=0.9, trust_coefficient=0.001, epsilon=0.0, weight_decay=1e-4
)


# --- The NumPy transcription (float64), from the papers' equations -------------------------
# LAMB: You et al. 2020, arXiv:1904.00962, Algorithm 2 (bias-corrected Adam direction plus
# decoupled decay, scaled by ||w|| / ||update||). LARS: You, Gitman, Ginsburg 2017,
# arXiv:1708.03888, in the MLPerf ResNet-50 form (trust ratio eta ||w|| / (||g|| + wd ||w||),
# applied inside the momentum).


def numpy_lamb(weights, gradient_steps, learning_rate, beta_1, beta_2, epsilon, weight_decay):
    import numpy as np

    w = [np.asarray(x, np.float64) for x in weights]
    m = [np.zeros_like(x) for x in w]
    v = [np.zeros_like(x) for x in w]
    for t, grads in enumerate(gradient_steps, start=1):
        for i, g in enumerate(np.asarray(x, np.float64) for x in grads):
            m[i] = beta_1 * m[i] + (1 - beta_1) * g
            v[i] = beta_2 * v[i] + (1 - beta_2) * g * g
            direction = (m[i] / (1 - beta_1**t)) / (np.sqrt(v[i] / (1 - beta_2**t)) + epsilon)
            update = direction + weight_decay * w[i]
            w_norm, u_norm = np.linalg.norm(w[i]), np.linalg.norm(update)
            trust = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
            w[i] = w[i] - learning_rate * trust * update
    return w


def numpy_lars(
    weights, gradient_steps, learning_rate, momentum, trust_coefficient, epsilon, weight_decay
):
    import numpy as np

    w = [np.asarray(x, np.float64) for x in weights]
    velocity = [np.zeros_like(x) for x in w]
    for grads in gradient_steps:
        for i, g in enumerate(np.asarray(x, np.float64) for x in grads):
            w_norm, g_norm = np.linalg.norm(w[i]), np.linalg.norm(g)
            trust = 1.0
            if w_norm > 0 and g_norm > 0:
                trust = trust_coefficient * w_norm / (g_norm + weight_decay * w_norm + epsilon)
            velocity[i] = momentum * velocity[i] + learning_rate * trust * (g + weight_decay * w[i])
            w[i] = w[i] - velocity[i]
    return w


# --- Children: one backend per process --------------------------------------------------------


def _device_name():
    import keras

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        return {
            "platform": device.platform,
            "kind": device.device_kind,
            "count": jax.device_count(),
        }
    if backend == "torch":
        import torch

        if torch.cuda.is_available():
            return {
                "platform": "gpu",
                "kind": torch.cuda.get_device_name(0),
                "count": torch.cuda.device_count(),
            }
        return {"platform": "cpu", "count": 1}
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    return {"platform": "gpu" if gpus else "cpu", "count": len(gpus) or 1}


def reference_check():
    """Each optimizer, eager and (on TensorFlow and JAX) under XLA, against the transcription:
    the largest |actual - expected| / (1e-6 + 1e-5 |expected|) (below 1 passes)."""
    import keras
    import numpy as np

    from keras_largebatch import LAMB, LARS

    rng = np.random.default_rng(0)
    weights = [rng.normal(size=s).astype("float32") for s in SHAPES]
    gradient_steps = [[rng.normal(size=s).astype("float32") for s in SHAPES] for _ in range(STEPS)]
    exclusions = dict(exclude_from_weight_decay=[], exclude_from_layer_adaptation=[])
    cases = {
        "LAMB": (LAMB, LAMB_ARGS, numpy_lamb),
        "LARS": (LARS, LARS_ARGS, numpy_lars),
    }
    report = {"device": _device_name(), "errors": {}}
    for name, (optimizer_class, arguments, reference) in cases.items():
        expected = reference(weights, gradient_steps, **arguments)
        modes = ("eager",) if keras.backend.backend() == "torch" else ("eager", "xla")
        for mode in modes:
            variables = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(weights)]
            optimizer = optimizer_class(**arguments, **exclusions)
            optimizer.build(variables)
            if mode == "xla":
                apply = _compiled_apply(optimizer, variables)
            else:
                apply = lambda grads: optimizer.apply(grads, variables)  # noqa: B023, E731
            for grads in gradient_steps:
                apply([keras.ops.convert_to_tensor(g) for g in grads])
            error = max(
                float(
                    np.max(
                        np.abs(np.asarray(v.numpy(), np.float64) - e) / (1e-6 + 1e-5 * np.abs(e))
                    )
                )
                for v, e in zip(variables, expected)
            )
            report["errors"][f"{name}/{mode}"] = error
    report["passed"] = all(e < 1 for e in report["errors"].values())
    return report


def _compiled_apply(optimizer, variables):
    """``optimizer.apply`` compiled with XLA: a `jit_compile` `tf.function`, or a `jax.jit`
    of `stateless_apply` whose results are written back."""
    import keras

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.function(lambda grads: optimizer.apply(grads, variables), jit_compile=True)
    import jax

    step = jax.jit(optimizer.stateless_apply)

    def apply(grads):
        new_variables, new_state = step(
            [v.value for v in optimizer.variables], grads, [v.value for v in variables]
        )
        for variable, value in zip(variables, new_variables):
            variable.assign(value)
        for variable, value in zip(optimizer.variables, new_state):
            variable.assign(value)

    return apply


def pretraining_throughput(size, batch_size, seq_length, steps, rounds, num_layers=None):
    """Examples/s of `model.fit` on the recipe's BERT in mixed_bfloat16, LAMB against AdamW
    (same weights, same batches), alternating rounds; the median round counts. The batches are
    NumPy arrays, so no backend needs TensorFlow for them."""
    import statistics

    import keras
    import numpy as np

    from keras_largebatch import LAMB
    from keras_largebatch.bert.pretraining import model as model_lib

    vocabulary = 30522 if size != "tiny" else 1000
    predictions = 20
    rng = np.random.default_rng(0)
    features = {
        "token_ids": rng.integers(0, vocabulary, (batch_size, seq_length)),
        "segment_ids": (np.arange(seq_length) >= seq_length // 2)[None].repeat(batch_size, 0),
        "padding_mask": np.ones((batch_size, seq_length)),
        "mask_positions": rng.integers(1, seq_length, (batch_size, predictions)),
    }
    features = {key: value.astype("int32") for key, value in features.items()}
    labels = {
        "masked_lm": rng.integers(0, vocabulary, (batch_size, predictions)).astype("int32"),
        "next_sentence": rng.integers(0, 2, (batch_size,)).astype("int32"),
    }
    weights = {
        "masked_lm": np.ones((batch_size, predictions), "float32"),
        "next_sentence": np.ones((batch_size,), "float32"),
    }

    def fit(model, steps):
        # The same batch `steps` times, in order: an epoch of `steps` steps.
        def repeated(tree):
            return {key: np.concatenate([value] * steps) for key, value in tree.items()}

        model.fit(
            repeated(features),
            repeated(labels),
            sample_weight=repeated(weights),
            batch_size=batch_size,
            epochs=1,
            shuffle=False,
            verbose=0,
        )

    optimizers = {
        "LAMB": lambda: LAMB(1e-4, weight_decay=0.01),
        "AdamW": lambda: keras.optimizers.AdamW(1e-4, weight_decay=0.01),
    }
    models = {}
    for name, make in optimizers.items():
        keras.utils.set_random_seed(0)
        backbone = model_lib.bert_backbone(
            size,
            vocabulary_size=vocabulary,
            max_sequence_length=seq_length,
            dtype="mixed_bfloat16",
            num_layers=num_layers,
        )
        model = model_lib.BertPretrainer(backbone)
        model.compile(optimizer=make())
        # The first fit traces and compiles the train function; it is not timed.
        fit(model, 2)
        models[name] = model
    rates = {name: [] for name in models}
    for _ in range(rounds):
        for name, model in models.items():
            start = time.perf_counter()
            fit(model, steps)
            rates[name].append(steps * batch_size / (time.perf_counter() - start))
    medians = {name: statistics.median(values) for name, values in rates.items()}
    return {
        "device": _device_name(),
        "model_size": size,
        "num_layers": num_layers or model_lib.MODEL_SIZES[size]["num_layers"],
        "parameters": int(models["LAMB"].count_params()),
        "batch_size": batch_size,
        "seq_length": seq_length,
        "dtype_policy": "mixed_bfloat16",
        "examples_per_second": medians,
        "lamb_over_adamw": medians["LAMB"] / medians["AdamW"],
    }


# --- The parent ---------------------------------------------------------------------------------

SECTIONS = ("reference", "pretraining", "step_time", "compiled_step")
SIZES = {
    # check -> (full size, smoke size)
    "pretraining": (
        dict(size="base", batch_size=32, seq_length=128, steps=10, rounds=3),
        # One transformer layer: tracing and compiling the step is most of a smoke run.
        dict(size="tiny", num_layers=1, batch_size=2, seq_length=128, steps=1, rounds=1),
    ),
    "step_time": (
        ["--models", "bert_base", "resnet50", "--repeats", "5"],
        ["--models", "bert_tiny", "resnet_small", "--repeats", "1"],
    ),
    "compiled_step": (
        # Per parameter, ResNet-50's streams equal BERT-base's on the CPU; BERT-base alone
        # keeps the check within its time.
        ["--models", "bert_base"],
        ["--models", "smoke"],
    ),
}


def _installed(backend):
    """Whether ``backend``'s framework can be found (this process imports none of them)."""
    import importlib.util

    try:
        return importlib.util.find_spec(backend) is not None
    except ImportError:
        return False


def _versions(backends):
    """The installed versions of Python, Keras, keras-hub and each backend's framework."""
    import importlib.metadata
    import platform

    versions = {"python": platform.python_version()}
    for name in ("keras", "keras-hub", *backends):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _run(command, backend, timeout):
    env = dict(
        os.environ,
        KERAS_BACKEND=backend,
        TF_CPP_MIN_LOG_LEVEL="2",
        TF_FORCE_GPU_ALLOW_GROWTH="true",
        XLA_PYTHON_CLIENT_PREALLOCATE="false",
    )
    result = subprocess.run(
        [sys.executable, *command], env=env, capture_output=True, text=True, timeout=timeout
    )
    if result.returncode != 0:
        return {"error": result.stderr[-2000:]}
    return json.loads(result.stdout[result.stdout.index("{") :])


def _timed(fn):
    start = time.perf_counter()
    report = fn()
    report["seconds"] = round(time.perf_counter() - start, 1)
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", help="where to write the JSON report (default: stdout)")
    parser.add_argument("--smoke", action="store_true", help="toy sizes (a CPU, about a minute)")
    parser.add_argument(
        "--sections",
        nargs="+",
        choices=SECTIONS,
        default=list(SECTIONS),
        help="the checks to run (default: all); step_time and compiled_step run "
        "benchmarks/optimizer_step.py and compiled_step.py",
    )
    parser.add_argument(
        "--backends",
        nargs="+",
        choices=BACKENDS,
        default=list(BACKENDS),
        help="the Keras backends to check (default: every one installed; the report names "
        "those asked for but not installed)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.output and os.path.exists(args.output):
        parser.error(f"--output {args.output!r} exists; give a new path (nothing is overwritten)")
    if args.child:
        # One process per backend runs its checks.
        checks = {
            "reference": reference_check,
            "pretraining": lambda: pretraining_throughput(**SIZES["pretraining"][args.smoke]),
        }
        print(json.dumps({name: _timed(checks[name]) for name in args.sections}))
        return
    size = int(args.smoke)
    smoke = ["--smoke"] if args.smoke else []
    backends = [b for b in args.backends if _installed(b)]
    report = {"smoke": args.smoke, "backends": backends, "versions": _versions(backends)}
    missing = [b for b in args.backends if b not in backends]
    if missing:
        report["not_installed"] = missing
    start = time.perf_counter()
    for backend in backends:
        checks = [c for c in PER_BACKEND[backend] if c in args.sections]
        if not checks:
            continue
        result = _run(
            [os.path.abspath(__file__), "--child", *smoke, "--sections", *checks], backend, 900
        )
        for check in checks:
            report.setdefault(check, {})[backend] = result.get(check, result)
    # The optimizer step is timed on TensorFlow (XLA on and off) where it is installed and
    # selected, else on JAX; a section that has neither is reported as skipped.
    step_backend = next((b for b in ("tensorflow", "jax") if b in backends), None)
    if "step_time" in args.sections and not step_backend:
        report["step_time"] = {"skipped": "needs TensorFlow or JAX among the backends"}
    elif "step_time" in args.sections:
        report["step_time"] = _timed(
            lambda: _run(
                [os.path.join(HERE, "optimizer_step.py"), *SIZES["step_time"][size]],
                step_backend,
                900,
            )
        )
        report["step_time"]["backend"] = step_backend
    if "compiled_step" in args.sections and "jax" not in backends:
        report["compiled_step"] = {"skipped": "needs JAX among the backends"}
    elif "compiled_step" in args.sections:
        report["compiled_step"] = _timed(
            lambda: _run(
                [
                    os.path.join(HERE, "compiled_step.py"),
                    "--on-device",
                    "--no-collectives",
                    "--backends",
                    *[b for b in ("jax", "tensorflow") if b in backends],
                    *SIZES["compiled_step"][size],
                ],
                "jax",
                900,
            )
        )
    report["seconds"] = round(time.perf_counter() - start, 1)
    text = json.dumps(report, indent=1)
    if args.output:
        with open(args.output, "x") as file:
            file.write(text + "\n")
    else:
        print(text)
    if "reference" in report and not all(r.get("passed") for r in report["reference"].values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
