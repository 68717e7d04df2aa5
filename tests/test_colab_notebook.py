"""The Colab notebook is valid, its Python parses, and the run config it builds loads."""

import ast
import json
import re
from pathlib import Path

import pytest

from keras_largebatch.bert import config as config_lib

NOTEBOOK = Path(__file__).resolve().parents[1] / "colab" / "pretrain_bert_lamb.ipynb"


def _code_cells():
    notebook = json.loads(NOTEBOOK.read_text())
    assert notebook["nbformat"] == 4
    return ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"]


def _python(source):
    # IPython shell (!) and magic (%) lines are not Python.
    return "\n".join(
        line for line in source.splitlines() if not line.lstrip().startswith(("!", "%"))
    )


def test_every_code_cell_parses():
    cells = _code_cells()
    assert len(cells) >= 4
    for source in cells:
        ast.parse(_python(source))


@pytest.mark.parametrize("on_tpu", [True, False])
def test_the_notebook_run_config_loads(on_tpu):
    cell = next(source for source in _code_cells() if "load_config(" in source)
    call = next(
        node
        for node in ast.walk(ast.parse(_python(cell)))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "load_config"
    )
    (keyword,) = [keyword for keyword in call.keywords if keyword.arg == "overrides"]
    overrides = [
        (
            ast.literal_eval(item.body if on_tpu else item.orelse)
            if isinstance(item, ast.IfExp)
            else ast.literal_eval(item)
        )
        for item in keyword.value.elts
    ]
    loaded = config_lib.load_config(overrides=overrides)
    assert loaded.phases[0].global_batch_size == (256 if on_tpu else 32)
    assert loaded.mixed_precision == ("mixed_bfloat16" if on_tpu else None)
    assert re.fullmatch(r"/content/runs/\w+", loaded.output_dir)
