"""Every script in benchmarks/ runs as a user runs it, at smoke size, and prints its figures.

The scripts run in two queues at a time (the data the BERT input benchmarks read is created by
the first of them, in one queue); each must exit 0 and print one JSON object with every
documented key, every figure finite and positive. The TensorFlow scripts share one Python
process, each run in turn as ``python SCRIPT ARGS`` runs it (its own ``sys.argv``, as
``__main__``), so that TensorFlow, Keras and keras-hub are imported once rather than once per
script; the two that start processes of their own (one per backend) run alone. The figures
themselves mean nothing at this size: the Benchmarks page's (docs/benchmarks.md) come from the
full-size commands.
"""

import concurrent.futures
import json
import math
import os
import subprocess
import sys

import pytest

from tests.support.runs import ROOT
from tests.support.xla_flags import NO_LLVM_OPTIMIZATION, with_test_flags

BENCHMARKS = ROOT / "benchmarks"
DATA = "--data-dir=bert-data"  # relative to the run's working directory
# Script -> its smoke-size arguments and the keys its JSON must hold ("a/b": b inside a).
SMOKE = {
    "adaptation_rule.py": (
        ["--rates", "2e-2", "--lars-rates", "0.1", "--seeds", "0", "--train", "64"]
        + ["--validation", "32", "--epochs", "1"],
        [
            f"rate_{rate}/{kind}/seed_0"
            for rate, kinds in (
                ("0.02", ("lamb_exclude_biases_norms", "lamb_adapt_all", "lamb_adapt_all_max_1")),
                ("0.02", ("keras_lamb",)),
                ("0.1", ("lars_exclude_biases_norms", "lars_adapt_all", "sgd_momentum")),
            )
            for kind in kinds
        ],
    ),
    "optimizer_step.py": (
        # Keras's Lamb, on BERT's shapes beside LAMB and AdamW, is timed by the same code as
        # AdamW; a smoke run of it would trace and compile 2 more steps and check nothing new.
        ["--repeats", "1", "--models", "bert_tiny", "resnet_small", "--optimizers", "LAMB", "LARS"],
        [
            f"{model}/{key}"
            for model, ours, baseline in (
                ("bert_tiny", "LAMB", "AdamW"),
                ("resnet_small", "LARS", "SGD_momentum"),
            )
            for key in (
                "variables",
                "parameters",
                *(
                    f"{xla}/seconds/{name}"
                    for xla in ("xla", "no_xla")
                    for name in (ours, baseline)
                ),
                *(f"{xla}/ratio_to_{baseline}/{ours}" for xla in ("xla", "no_xla")),
            )
        ],
    ),
    "compiled_step.py": (
        ["--smoke"],
        [
            f"jax/smoke/streams/{k}/{name}"
            for k, names in (
                ("no_accumulation", ("LAMB", "LARS", "keras_AdamW", "optax_lamb", "optax_lars")),
                ("accumulation_2", ("LAMB", "LARS", "keras_AdamW")),
            )
            for name in names
        ]
        + [
            f"tensorflow/smoke/streams/{k}/{name}"
            for k in ("no_accumulation", "accumulation_2", "accumulation_2_accumulate_only")
            for name in ("LAMB", "LARS", "keras_AdamW", "keras_SGD_momentum", "keras_Lamb")
        ]
        + [
            "jax/smoke/collectives/all_reduces_per_optimizer_step",
            "jax/smoke/collectives/bytes_per_optimizer_step",
        ]
        + [
            f"tensorflow/smoke/collectives/{name}/{key}"
            for name in ("LAMB", "LARS")
            for key in ("all_reduces_per_optimizer_step", "bytes_per_optimizer_step")
        ],
    ),
    "device_check.py": (
        # Its step_time and compiled_step sections run optimizer_step.py and compiled_step.py,
        # smoke-tested on their own here.
        ["--smoke", "--sections", "reference", "pretraining"],
        [
            *(
                f"reference/{backend}/errors/{name}/{mode}"
                for backend in ("tensorflow", "jax")
                for name in ("LAMB", "LARS")
                for mode in ("eager", "xla")
            ),
            # Keras on PyTorch has no XLA step: eager only, and no throughput section.
            "reference/torch/errors/LAMB/eager",
            "reference/torch/errors/LARS/eager",
            *(
                f"pretraining/{backend}/{key}"
                for backend in ("tensorflow", "jax")
                for key in ("examples_per_second/LAMB", "examples_per_second/AdamW")
            ),
            "seconds",
        ],
    ),
    "distributed_step.py": (
        ["--size", "tiny", "--num-layers", "1", "--global-batch-size", "4", "--steps", "1"]
        + ["--repeats", "1"],
        [
            "seconds_per_step/1_replicas/LAMB",
            "seconds_per_step/2_replicas/AdamW",
            "lamb_over_adamw/1_replicas",
            "lamb_over_adamw/2_replicas",
        ],
    ),
    "gradient_noise_scale.py": (
        ["--batch-size", "8", "--steps", "1", "--repeats", "1"],
        [
            "seconds_per_step/2_replicas/measured",
            "seconds_per_step/accumulation_4/plain",
            "measured_over_plain/2_replicas",
            "measured_over_plain/accumulation_4",
        ],
    ),
    "image_training.py": (
        "--num-images 8 --num-files 2 --height 40 --width 48 --image-size 32 --batch-size 4 "
        "--steps 2 --warmup-steps 1 --rounds 1 --architecture small --train-steps 1 "
        "--train-rounds 1".split(),
        ["pipeline_images_per_second", "training_images_per_second", "pipeline_over_training"],
    ),
    "input_pipeline.py": (
        [DATA, "--dupe-factor", "1", "--batch-size", "4", "--steps", "5", "--warmup-steps", "2"]
        + ["--rounds", "1"],
        ["examples_per_second", "num_examples", "files"],
    ),
    "pretraining.py": (
        [DATA, "--dupe-factor", "1", "--model-size", "tiny", "--num-layers", "1"]
        + ["--batch-size", "4", "--steps", "1", "--rounds", "1", "--pipeline-batches", "5"],
        [
            "lamb_examples_per_second",
            "adamw_examples_per_second",
            "lamb_over_adamw",
            "pipeline_examples_per_second",
            "pipeline_over_training",
        ],
    ),
    "resume.py": (
        [DATA, "--dupe-factor", "1", "--batch-size", "4", "--late-step", "1000"]
        + ["--replay-step", "20", "--rounds", "1", "--num-layers", "1"],
        [
            "seconds_to_first_step/step_10",
            "seconds_to_first_step/step_1000",
            "late_over_early",
            "replay_seconds_to_first_step/step_20",
            "replay_late_over_early",
        ],
    ),
}
# The two scripts that start a process per backend of their own run alone, one after the
# other; the rest, all on TensorFlow, share one process at the same time, in this order: the 2
# logical CPU devices of the first two are set before any TensorFlow op runs, and the data the
# BERT input benchmarks read is created by the first of them.
ALONE = ["device_check.py", "compiled_step.py"]
SHARED = ["distributed_step.py", "gradient_noise_scale.py", "input_pipeline.py", "pretraining.py"]
SHARED += ["resume.py", "image_training.py", "optimizer_step.py", "adaptation_rule.py"]
# LLVM's optimization of the code XLA generates is most of what compiling these small programs
# costs; nothing here depends on the code's speed, and the device check's reference passes its
# tolerances against NumPy without it too. The cheaper fusion emitters every test process has
# (tests/support/xla_flags.py) build the same programs: the same collectives, streams within
# 0.1%; the device check's JAX child 18 -> 12.6 CPU-s, compiled_step.py's 7.9 -> 5.5.
ENV = dict(
    os.environ,
    TF_CPP_MIN_LOG_LEVEL="2",
    XLA_FLAGS=with_test_flags(f"{os.environ.get('XLA_FLAGS', '')} {NO_LLVM_OPTIMIZATION}".strip()),
)
# Runs each script in turn as `python SCRIPT ARGS` would (its own sys.argv, as __main__, its
# directory first on the path) and writes {script: [exit status, stdout, stderr]} to a file.
RUN_IN_TURN = """
import contextlib, io, json, runpy, sys, traceback
output, directory, runs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
sys.path.insert(0, directory)
results = {}
for script, arguments in runs:
    sys.argv = [f"{directory}/{script}", *arguments]
    stdout, stderr, status = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
        except SystemExit as exit:
            status = 0 if exit.code is None else exit.code if isinstance(exit.code, int) else 1
        except BaseException:
            traceback.print_exc()
            status = 1
    results[script] = [status, stdout.getvalue(), stderr.getvalue()]
with open(output, "w") as file:
    json.dump(results, file)
"""


def _run_alone(scripts, work_dir):
    return {
        script: subprocess.run(
            [sys.executable, str(BENCHMARKS / script), *SMOKE[script][0]],
            capture_output=True,
            text=True,
            cwd=work_dir,
            env=ENV,
            timeout=600,
        )
        for script in scripts
    }


def _run_shared(scripts, work_dir):
    output = work_dir / "shared.json"
    runs = json.dumps([[script, SMOKE[script][0]] for script in scripts])
    process = subprocess.run(
        [sys.executable, "-c", RUN_IN_TURN, str(output), str(BENCHMARKS), runs],
        capture_output=True,
        text=True,
        cwd=work_dir,
        env=dict(ENV, KERAS_BACKEND="tensorflow"),
        timeout=1800,
    )
    if not output.exists():  # the process itself died: every script failed with it
        return {script: process for script in scripts}
    return {
        script: subprocess.CompletedProcess(script, status, stdout, stderr)
        for script, (status, stdout, stderr) in json.loads(output.read_text()).items()
    }


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("benchmarks")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        shared = pool.submit(_run_shared, SHARED, work_dir)
        alone = pool.submit(_run_alone, ALONE, work_dir)
        return {**shared.result(), **alone.result()}


def _figures(value, path=""):
    """Every number in a JSON value, with its path."""
    if isinstance(value, dict):
        return [f for key, item in value.items() for f in _figures(item, f"{path}{key}/")]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [(path.rstrip("/"), value)]
    return []


def test_every_benchmark_is_smoke_tested():
    scripts = sorted(path.name for path in BENCHMARKS.glob("*.py") if path.name != "throughput.py")
    assert scripts == sorted(SMOKE)
    assert sorted(SHARED + ALONE) == sorted(SMOKE)


@pytest.mark.parametrize("script", sorted(SMOKE))
def test_the_benchmark_prints_its_figures(outputs, script):
    result = outputs[script]
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    figures = dict(_figures(report))
    missing = [key for key in SMOKE[script][1] if key not in figures]
    assert not missing, (missing, sorted(figures))
    bad = {key: value for key, value in figures.items() if not (math.isfinite(value) and value > 0)}
    assert not bad, bad


def test_tensorflow_accumulation_reduces_the_gradients_once_per_optimizer_step(outputs):
    # Replica-local accumulators: on 2 mirrored replicas with 4-step accumulation, each
    # micro-batch all-reduces one float (whether it is finite everywhere) and the update step
    # all-reduces the accumulated gradients once.
    collectives = json.loads(outputs["compiled_step.py"].stdout)["tensorflow"]["smoke"][
        "collectives"
    ]
    for name in ("LAMB", "LARS"):
        assert collectives[name]["all_reduces_on_update_step"] == 1
        assert collectives[name]["all_reduces_per_optimizer_step"] == 5
        assert (
            collectives[name]["bytes_per_optimizer_step"] == collectives["gradient_bytes"] + 4 * 4
        )


def test_the_device_check_passes_its_reference_check_on_every_backend(outputs):
    report = json.loads(outputs["device_check.py"].stdout)
    assert report["smoke"] is True
    assert report["backends"] == ["tensorflow", "jax", "torch"] and "not_installed" not in report
    assert all(report["versions"][name] for name in ("python", "keras", *report["backends"]))
    for backend in ("tensorflow", "jax", "torch"):
        assert report["reference"][backend]["passed"] is True, report["reference"][backend]
    for backend in ("tensorflow", "jax"):
        assert report["pretraining"][backend]["dtype_policy"] == "mixed_bfloat16"
    assert "step_time" not in report and "compiled_step" not in report  # not asked for


def test_the_device_check_never_overwrites_its_output(tmp_path):
    existing = tmp_path / "report.json"
    existing.write_text("keep me")
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "device_check.py"), "--output", str(existing)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--output" in result.stderr and "exists" in result.stderr
    assert existing.read_text() == "keep me"


def test_the_optimizer_step_is_timed_as_a_jitted_step_on_jax():
    # What the device check runs where TensorFlow is not installed.
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "optimizer_step.py"), "--models", "resnet_small"]
        + ["--repeats", "1"],
        capture_output=True,
        text=True,
        env=dict(ENV, KERAS_BACKEND="jax"),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)["resnet_small"]
    assert list(report) == ["variables", "parameters", "xla"]  # no uncompiled step on JAX
    assert all(seconds > 0 for seconds in report["xla"]["seconds"].values())
    assert report["xla"]["ratio_to_SGD_momentum"]["SGD_momentum"] == 1.0
