"""The Keras backend read without importing Keras, against Keras's own answer."""

import json
import os
import subprocess
import sys

import pytest

from tests.support.runs import ROOT

PROGRAM = """
import sys
from keras_largebatch._backend import keras_backend
before = keras_backend()
assert "keras" not in sys.modules
import keras
print(before, keras.backend.backend(), keras_backend())
"""


@pytest.mark.parametrize(
    "variable, keras_json, expected",
    [
        ("jax", None, "jax"),
        (None, {"backend": "jax"}, "jax"),
        ("tensorflow", {"backend": "jax"}, "tensorflow"),  # the variable wins
        ("", {"backend": "jax"}, "jax"),  # an empty variable is not set
        (None, None, "tensorflow"),
    ],
)
def test_the_backend_is_read_as_keras_reads_it(tmp_path, variable, keras_json, expected):
    environment = {key: value for key, value in os.environ.items() if key != "KERAS_BACKEND"}
    environment["KERAS_HOME"] = str(tmp_path)
    if variable is not None:
        environment["KERAS_BACKEND"] = variable
    if keras_json is not None:
        (tmp_path / "keras.json").write_text(json.dumps(keras_json))
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [expected] * 3
