"""The Colab notebooks: stored clean, with a papermill parameters cell, and executed headless.

Each notebook runs in a Jupyter kernel of this interpreter (papermill's ``python3``), with
``SMOKE_TEST=True`` and its output directory injected after the parameters cell, as a user would
run it with ``papermill -p SMOKE_TEST True``. On this CPU-only machine that takes the no-TPU
fallback; the assertions read what the run wrote. The quickstart runs on both roads, the BERT
notebook on its default, JAX.
"""

import ast
import json
import math
from pathlib import Path

import nbformat
import papermill
import pytest
from IPython.core.inputtransformer2 import TransformerManager

from keras_largebatch import scale_learning_rate
from keras_largebatch.bert.pretraining import config as bert_config
from keras_largebatch.training import command
from tests.support.xla_flags import NO_LLVM_OPTIMIZATION, with_test_flags

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "colab").glob("*.ipynb"))
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FALLBACK = "No TPU found"


def _code_cells(path):
    notebook = nbformat.read(path, as_version=4)
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def _parameters(path):
    """The parameters cell's assignments, as Python values."""
    (cell,) = [cell for cell in _code_cells(path) if "parameters" in cell.metadata.get("tags", [])]
    return {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in ast.parse(cell.source).body
        if isinstance(node, ast.Assign)
    }


def test_there_are_the_two_notebooks():
    assert [path.name for path in NOTEBOOKS] == ["pretrain_bert.ipynb", "quickstart.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_stored_valid_and_without_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    assert notebook.nbformat == 4 and notebook.metadata.kernelspec.name == "python3"
    for cell in _code_cells(path):
        assert cell.outputs == [] and cell.execution_count is None, cell.source[:80]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_every_code_cell_parses(path):
    # IPython's own transformation turns the ! and % lines into Python, indented ones included.
    for cell in _code_cells(path):
        ast.parse(TransformerManager().transform_cell(cell.source))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_the_first_code_cell_holds_the_parameters(path):
    first, second = _code_cells(path)[:2]
    assert first.metadata["tags"] == ["parameters"]
    parameters = _parameters(path)
    assert parameters["SMOKE_TEST"] is False
    assert parameters["ROAD"] in ("jax", "tensorflow") and parameters["OUTPUT_DIR"]
    # The backend follows ROAD, set in the cell that papermill's injected values precede and
    # before anything imports Keras.
    assert 'os.environ["KERAS_BACKEND"] = ROAD' in second.source
    assert not any("import keras" in cell.source for cell in _code_cells(path)[:2])


def test_the_bert_notebook_defaults_to_a_tpu_config_on_the_jax_road():
    parameters = _parameters(ROOT / "colab" / "pretrain_bert.ipynb")
    # A bundled config's name, which the installed package finds wherever the notebook runs.
    assert parameters["CONFIG"] in command.bundled_configs(bert_config.load_config)
    assert parameters["ROAD"] == "jax"  # Colab's TPU runtimes ship JAX, not TensorFlow


def _execute(path, tmp_path, **parameters):
    executed = tmp_path / path.name
    papermill.execute_notebook(
        str(path),
        str(executed),
        parameters=dict(SMOKE_TEST=True, **parameters),
        kernel_name="python3",
        cwd=str(ROOT),
        progress_bar=False,
    )
    return "".join(
        "".join(output.get("text", ""))
        for cell in _code_cells(executed)
        for output in cell.outputs
        if output.output_type == "stream"
    )


@pytest.mark.parametrize("road", ["jax", "tensorflow"])
def test_quickstart_trains_and_plots(road, tmp_path, monkeypatch):
    if road == "jax":
        # The kernel compiles without LLVM's optimization of XLA's code, as the BERT
        # notebook's test below does: what is asserted is the loss falling and the schedule.
        monkeypatch.setenv("XLA_FLAGS", with_test_flags(NO_LLVM_OPTIMIZATION))
    output_dir = tmp_path / "quickstart"
    printed = _execute(
        ROOT / "colab" / "quickstart.ipynb", tmp_path, ROAD=road, OUTPUT_DIR=str(output_dir)
    )
    history = json.loads((output_dir / "history.json").read_text())
    assert (history["road"], history["backend"], history["on_tpu"]) == (road, road, False)
    assert FALLBACK in printed and f"on {road}" in printed
    # SMOKE_TEST: 1,024 synthetic images in batches of 16, 2 epochs.
    assert history["global_batch_size"] == 16 and history["steps"] == 2 * 1024 // 16
    assert len(history["losses"]) == len(history["learning_rates"]) == history["steps"]
    assert all(math.isfinite(loss) for loss in history["losses"])
    assert history["losses"][-1] < history["losses"][0]
    # Warmup over the first epoch to the square-root-scaled peak, then decay to 0.
    peak = scale_learning_rate(2e-3, 128, 16)
    assert max(history["learning_rates"]) == pytest.approx(peak, rel=1e-5)
    assert history["learning_rates"][63] == pytest.approx(peak, rel=1e-5)
    assert history["learning_rates"][-1] == pytest.approx(0.0, abs=1e-9)
    plot = (output_dir / "loss_and_learning_rate.png").read_bytes()
    assert plot.startswith(PNG_SIGNATURE) and len(plot) > 1000


def test_pretrain_bert_runs_the_tiny_default_job_on_the_jax_road(tmp_path, monkeypatch):
    # Executed on its default road only, to keep the suite short: the harness's TensorFlow road
    # is what tests/bert/test_pretrain.py runs, and the notebook's own TensorFlow branch is the
    # few lines that find a TPU. The kernel compiles without LLVM's optimization of XLA's code
    # (most of what compiling the tiny BERT costs); nothing here depends on its speed.
    monkeypatch.setenv("XLA_FLAGS", with_test_flags(NO_LLVM_OPTIMIZATION))
    output_dir = tmp_path / "run"
    printed = _execute(
        ROOT / "colab" / "pretrain_bert.ipynb",
        tmp_path,
        ROAD="jax",
        CONFIG="bert_tiny_default",
        OUTPUT_DIR=str(output_dir),
        DATA_DIR=str(tmp_path / "data"),
    )
    assert FALLBACK in printed and "keras-largebatch-pretrain --config" in printed
    run_config = json.loads((output_dir / "run_config.json").read_text())
    summary = json.loads((output_dir / "summary.json").read_text())
    configured_steps = sum(phase["steps"] for phase in run_config["phases"])
    assert summary["global_steps"] == configured_steps == 4
    assert run_config["strategy"] == {
        "name": "auto",
        "model_axis_size": None,
        "tpu": None,
        "devices": None,
        "input_pipelines": None,
    }
    # strategy.name=auto on JAX: DataParallel over every device JAX lists (the one CPU here).
    assert (
        summary["strategy"]["backend"] == "jax" and summary["strategy"]["kind"] == "data_parallel"
    )
    assert summary["strategy"]["num_replicas"] == 1
    # SMOKE_TEST's batch of 8 on the CPU's one device: the derived accumulation is 1.
    assert "global batch 8 = 1 replica x 8 examples x 1 accumulation step" in printed
    assert [phase["gradient_accumulation_steps"] for phase in summary["phases"]] == [1]
    assert summary["model_size"] == "tiny" and summary["optimizer"] == "lamb"
    for window in ("initial", "final"):
        assert all(math.isfinite(value) for value in summary[window].values()), summary[window]
    assert f"loss: {summary['initial']['loss']:.4f} -> {summary['final']['loss']:.4f}" in printed


def _docs_hook():
    """docs/_hooks/colab_notebooks.py, the MkDocs hook that shows the notebooks executed."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "colab_notebooks_hook", ROOT / "docs" / "_hooks" / "colab_notebooks.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_hook_executes_a_notebook_once_at_smoke_size_in_a_directory_of_its_own(
    tmp_path, monkeypatch
):
    # CI builds the site with KERAS_LARGEBATCH_DOCS_EXECUTE=0: the notebooks themselves run
    # above. Here the hook's own work, on a stand-in notebook that writes into its OUTPUT_DIR.
    hook = _docs_hook()
    notebook = tmp_path / "colab" / "standin.ipynb"
    notebook.parent.mkdir()
    parameters = nbformat.v4.new_code_cell(
        'SMOKE_TEST = False\nOUTPUT_DIR = "/content/out"\nROAD = "jax"'
    )
    parameters.metadata["tags"] = ["parameters"]
    work = nbformat.v4.new_code_cell(
        "import os\nos.makedirs(OUTPUT_DIR)\n"
        "open(os.path.join(OUTPUT_DIR, 'ran'), 'w').close()\n"
        "print(SMOKE_TEST, OUTPUT_DIR, os.path.isabs(OUTPUT_DIR), ROAD)"
    )
    document = nbformat.v4.new_notebook(cells=[parameters, work])
    document.metadata.update(nbformat.read(str(NOTEBOOKS[0]), as_version=4).metadata)
    nbformat.write(document, str(notebook))
    monkeypatch.delenv(hook.EXECUTE_ENV, raising=False)
    executed = hook._executed(notebook, tmp_path)
    assert executed.parent.parent == tmp_path / hook.CACHE_DIRECTORY
    assert executed.name == "standin.ipynb" and executed.parent.name.startswith("standin-")
    document = nbformat.read(str(executed), as_version=4)
    assert (
        document.cells[0].cell_type == "markdown" and "SMOKE_TEST=True" in document.cells[0].source
    )
    printed = "".join(
        "".join(output.get("text", ""))
        for cell in document.cells
        for output in cell.get("outputs", [])
    )
    # Smoke size, its directories relative to a temporary working directory, the rest as stored.
    assert printed == "True output_dir False jax\n"
    assert not (tmp_path / "output_dir").exists() and not Path("/content/out").exists()
    # Kept: a second build reads the copy without executing; a changed notebook runs anew.
    monkeypatch.setattr(papermill, "execute_notebook", lambda *args, **kwargs: 1 / 0)
    assert hook._executed(notebook, tmp_path) == executed
    monkeypatch.setenv(hook.EXECUTE_ENV, "0")
    assert hook._executed(notebook, tmp_path) is None
