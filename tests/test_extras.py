"""The extras: what setup.cfg installs, the one-line error when an extra is missing, and the core
training without TensorFlow.

A missing package is simulated with `tests.support.without_modules`, which hides installed
packages from the import system of a subprocess.
"""

import configparser
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from keras_largebatch import _extras
from tests.optimizers import reference
from tests.support import core_training

ROOT = Path(__file__).resolve().parents[1]


def _requirement_name(requirement):
    return re.match(r"[A-Za-z0-9._-]+", requirement).group(0).lower()


def _setup_cfg_requirements():
    """``(install_requires, extra -> requirement names)``, the self-references of an extra
    (``keras-largebatch[tensorflow]``) replaced by what they name."""
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    extras = {extra: value.split() for extra, value in setup["options.extras_require"].items()}

    def names(extra):
        for requirement in extras[extra]:
            nested = re.fullmatch(r"keras-largebatch\[(.+)\]", requirement)
            if nested:
                yield from (name for inner in nested.group(1).split(",") for name in names(inner))
            else:
                yield _requirement_name(requirement)

    core = {_requirement_name(line) for line in setup["options"]["install_requires"].split()}
    return core, {extra: set(names(extra)) for extra in extras}


def test_setup_cfg_installs_what_the_messages_name():
    core, extras = _setup_cfg_requirements()
    assert core == {"keras", "numpy"}
    for extra, modules in _extras.EXTRA_MODULES.items():
        assert extras[extra] == {_extras.DISTRIBUTIONS[module] for module in modules}, extra
    # The second edition's arms train keras-hub's ResNet and BERT.
    assert extras["study"] == {"tensorflow", "pyyaml", "keras-hub", "tensorflow-text", "matplotlib"}
    everything = set().union(*(extras[extra] for extra in ("bert", "vision", "plot", "study")))
    assert everything <= extras["test"]
    assert {
        "pytest",
        "pytest-xdist",
        "ruff",
        "jax",
        "torch",
        "papermill",
        "ipykernel",
        "nbformat",
    } <= extras["test"]


def test_missing_extra_error_names_the_extra_and_is_a_module_not_found_error():
    error = _extras.missing_extra(
        "plotting a schedule", "plot", ModuleNotFoundError("No module named 'matplotlib'")
    )
    assert isinstance(error, ModuleNotFoundError)
    assert str(error) == (
        "plotting a schedule needs the plot extra (No module named 'matplotlib'): "
        f'pip install -e "{ROOT}[plot]"'
    )


class _Distribution:
    """What importlib.metadata.distribution returns, as far as install_command reads it."""

    def __init__(self, direct_url):
        self.direct_url = direct_url

    def read_text(self, name):
        assert name == "direct_url.json"
        return None if self.direct_url is None else json.dumps(self.direct_url)


@pytest.mark.parametrize("wheel_exists", [True, False])
def test_install_command_fits_how_the_package_was_installed(tmp_path, monkeypatch, wheel_exists):
    # From a checkout (this one): the editable install of its directory.
    assert _extras.install_command("bert") == f'pip install -e "{ROOT}[bert]"'
    # Installed in site-packages, no setup.cfg above the package.
    monkeypatch.setattr(_extras, "_PACKAGE_DIR", str(tmp_path / "site-packages" / "pkg"))
    wheel = tmp_path / "dist" / "keras_largebatch-0.1.0-py3-none-any.whl"
    if wheel_exists:
        wheel.parent.mkdir()
        wheel.write_bytes(b"")
    installs = {
        "wheel": {"url": wheel.as_uri(), "archive_info": {}},
        "registry": None,  # pip writes no direct_url.json for the registry
        "git": {"url": "https://example.invalid/repo.git", "vcs_info": {"vcs": "git"}},
    }
    found = {}
    for name, direct_url in installs.items():
        monkeypatch.setattr(
            _extras.importlib.metadata,
            "distribution",
            lambda distribution, direct_url=direct_url: _Distribution(direct_url),
        )
        found[name] = _extras.install_command("plot")
    registry = 'pip install "keras-largebatch[plot]"'
    assert found == {
        "wheel": f'pip install "{wheel}[plot]"' if wheel_exists else registry,
        "registry": registry,
        "git": registry,
    }


def test_command_exits_with_one_line_naming_every_missing_distribution(monkeypatch, capsys):
    present = {"tensorflow"}
    monkeypatch.setattr(
        _extras.importlib.util, "find_spec", lambda name: object() if name in present else None
    )
    with pytest.raises(SystemExit) as exit_info:
        _extras.exit_unless_installed("keras-largebatch-pretrain", "bert")
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        "keras-largebatch-pretrain: error: the command needs the bert extra (pyyaml, keras-hub "
        f'and tensorflow-text are not installed): pip install -e "{ROOT}[bert]"\n'
    )
    present.update(["yaml", "keras_hub", "tensorflow_text"])
    assert _extras.exit_unless_installed("keras-largebatch-pretrain", "bert") is None


def _run_without(hidden, *arguments, backend="tensorflow"):
    env = dict(os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu")
    return subprocess.run(
        [sys.executable, "-m", "tests.support.without_modules", hidden, *arguments],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


PLOT_ARGUMENTS = ["--peak-learning-rate", "1", "--total-steps", "10", "--warmup-steps", "2"]


@pytest.mark.parametrize(
    "hidden, module, extra, missing",
    [
        ("matplotlib", "keras_largebatch.plot_schedule", "plot", "matplotlib is"),
        ("yaml", "keras_largebatch.plot_schedule", "plot", "pyyaml is"),
        ("keras_hub", "keras_largebatch.bert.pretraining", "bert", "keras-hub is"),
        ("keras_hub", "keras_largebatch.bert.export", "bert", "keras-hub is"),
        ("tensorflow_text", "keras_largebatch.bert.pretraining", "bert", "tensorflow-text is"),
        ("tensorflow_text", "keras_largebatch.bert.data", "bert", "tensorflow-text is"),
        (
            "tensorflow,keras_hub",
            "keras_largebatch.vision",
            "vision",
            "tensorflow and keras-hub are",
        ),
    ],
)
def test_command_without_its_extra_fails_in_one_line_before_any_work(
    tmp_path, hidden, module, extra, missing
):
    output = tmp_path / "output"
    if module == "keras_largebatch.plot_schedule":
        arguments = [str(output), *PLOT_ARGUMENTS]
    elif module == "keras_largebatch.bert.export":
        arguments = [str(tmp_path / "run"), str(output)]
    elif module == "keras_largebatch.bert.data":
        arguments = ["--default-corpus", "--output-dir", str(output)]
    else:
        arguments = [f"output_dir={output}"]
    result = _run_without(hidden, module, *arguments)
    prog = {
        "keras_largebatch.plot_schedule": "keras-largebatch-plot-schedule",
        "keras_largebatch.bert.pretraining": "keras-largebatch-pretrain",
        "keras_largebatch.bert.data": "keras-largebatch-create-data",
        "keras_largebatch.bert.export": "keras-largebatch-export",
        "keras_largebatch.vision": "keras-largebatch-train-images",
    }[module]
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr == (
        f"{prog}: error: the command needs the {extra} extra ({missing} not installed): "
        f'pip install -e "{ROOT}[{extra}]"\n'
    )
    assert result.stdout == ""
    assert not output.exists()


# Each line: the check, then what it raised as "type name: message".
LIBRARY_CHECKS = """
import json

def outcome(check):
    try:
        check()
    except ModuleNotFoundError as error:
        return f"{type(error).__name__} {error.name}: {error}"
    return "no error"

results = {}
"""


def _library_outcomes(hidden, checks, tmp_path):
    code = LIBRARY_CHECKS + "".join(
        f"def check_{index}():\n    {statement}\nresults[{statement!r}] = outcome(check_{index})\n"
        for index, statement in enumerate(checks)
    )
    code += "print(json.dumps(results))\n"
    # JAX, so that only the modules that need TensorFlow import it.
    result = _run_without(hidden, "-c", code, backend="jax")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _error(name, feature, extra):
    return (
        f"MissingExtraError {name}: {feature} needs the {extra} extra (No module named "
        f"'{name}'): pip install -e \"{ROOT}[{extra}]\""
    )


def test_library_modules_name_the_extra_they_need(tmp_path):
    plot_file = tmp_path / "lr.png"
    outcomes = _library_outcomes(
        "tensorflow,keras_hub,tensorflow_text,matplotlib",
        [
            "import keras_largebatch.distribute",
            "import keras_largebatch.vision.model",
            "import keras_largebatch.schedules, keras_largebatch.schedules.plot as plot; "
            "plot.plot_schedule(keras_largebatch.schedules.WarmupPolynomialDecay(1.0, 10, 2), "
            f"{str(plot_file)!r})",
        ],
        tmp_path,
    )
    assert list(outcomes.values()) == [
        _error("tensorflow", "keras_largebatch.distribute", "tensorflow"),
        _error("keras_hub", "keras_largebatch.vision.model", "vision"),
        _error("matplotlib", "plotting a schedule", "plot"),
    ]
    assert not plot_file.exists()


def test_bert_modules_name_the_bert_extra(tmp_path):
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"]
    outcomes = _library_outcomes(
        "keras_hub,tensorflow_text",
        [
            # The vocabulary module loads without either, for the records and the masking.
            "from keras_largebatch.bert.data import masking, vocab",
            "from keras_largebatch.bert.data import vocab; vocab.build_vocabulary(['a b', 'a c'])",
            f"from keras_largebatch.bert.data import vocab; vocab.make_tokenizer({vocabulary!r})",
            "import keras_largebatch.bert.pretraining.model",
        ],
        tmp_path,
    )
    assert list(outcomes.values()) == [
        "no error",
        _error("tensorflow_text", "learning a WordPiece vocabulary", "bert"),
        _error("keras_hub", "a WordPiece tokenizer", "bert"),
        _error("keras_hub", "keras_largebatch.bert.pretraining.model", "bert"),
    ]


def _reference_runs():
    """The NumPy transcriptions (tests/optimizers/reference.py) of the two runs of
    `core_training`: by default the bias is adapted but not decayed."""
    features, coefficients, kernel, bias = (x.astype(np.float64) for x in core_training.problem())
    gradients = [features.T @ coefficients / len(features), coefficients.mean(axis=0)]
    steps = [gradients] * core_training.EPOCHS
    masks = dict(decay_mask=[True, False])

    def warmup_linear_decay(step):  # WarmupPolynomialDecay(0.05, total_steps=6, warmup_steps=2)
        return 0.05 * step / 2 if step < 2 else 0.05 * (1 - (step - 2) / 4)

    lamb = reference.lamb(
        [kernel, bias], steps, lr_at_step=warmup_linear_decay, wd=0.01, eps=1e-6, **masks
    )
    lars = reference.lars([kernel, bias], steps, lr=1.0, momentum=0.9, eta=0.02, wd=1e-3, **masks)
    rates = [warmup_linear_decay(step) for step in range(1, core_training.EPOCHS + 1)]
    return {"lamb": (lamb, rates), "lars": (lars, [1.0] * core_training.EPOCHS)}


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_core_trains_without_tensorflow(backend):
    pytest.importorskip(backend)
    result = _run_without("tensorflow", "tests.support.core_training", backend=backend)
    assert result.returncode == 0, result.stderr[-4000:]
    runs = json.loads(result.stdout.strip().splitlines()[-1])
    assert runs["backend"] == backend and runs["tensorflow_imported"] is False
    assert "LAMB" in runs["public_names"] and "TrustRatioMonitor" in runs["public_names"]
    initial = core_training.problem()[2:]
    for name, ((weights, ratios), rates) in _reference_runs().items():
        run = runs[name]
        for start, trained, expected in zip(initial, run["weights"], weights):
            # The displacement, so that a step not taken cannot pass for a small one.
            np.testing.assert_allclose(
                np.subtract(trained, start), expected - start, rtol=1e-4, atol=1e-6
            )
        np.testing.assert_allclose(run["learning_rate"], rates, rtol=1e-6)
        # Of the kernel's ratio and the bias's 1.0 (excluded), at the last step of each epoch.
        np.testing.assert_allclose(run["trust_ratio_min"], [min(r) for r in ratios], rtol=1e-4)
        np.testing.assert_allclose(run["trust_ratio_max"], [max(r) for r in ratios], rtol=1e-4)


@pytest.mark.parametrize(
    "module, prog, positional",
    [
        ("keras_largebatch.plot_schedule", "keras-largebatch-plot-schedule", ["out.png"]),
        ("keras_largebatch.bert.pretraining", "keras-largebatch-pretrain", []),
        ("keras_largebatch.bert.export", "keras-largebatch-export", ["run", "preset"]),
        ("keras_largebatch.bert.finetuning", "keras-largebatch-finetune", []),
        ("keras_largebatch.vision", "keras-largebatch-train-images", []),
    ],
)
def test_help_needs_no_extra(module, prog, positional):
    # --help is how a user finds out what to install: it prints with every extra hidden, and a
    # usage error is reported as one, before the missing extra.
    hidden = "tensorflow,tensorflow_text,keras_hub,matplotlib,yaml"
    result = _run_without(hidden, module, "--help")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith(f"usage: {prog} ")
    result = _run_without(hidden, module, *positional, "--no-such-flag")
    assert result.returncode == 2
    assert result.stderr.endswith(f"{prog}: error: unrecognized arguments: --no-such-flag\n")
