"""``import keras_largebatch`` registers every serializable class with Keras, in a fresh process,
without importing Keras itself.

Each backend's save and load processes (tests/support/registration_round_trip.py) run once and
serve every test that reads them: their import orders are those the registration must survive."""

import ast
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.support.runs import ROOT

PACKAGE = ROOT / "keras_largebatch"
# "keras_first" also loads without the package, before importing it.
LOAD_ORDERS = ("package_first", "keras_first")


def _run(*args, backend="jax"):
    environment = dict(os.environ, KERAS_BACKEND=backend, JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _decorated_names():
    """``package>name`` of every object the package's source decorates with
    `keras.saving.register_keras_serializable`, read from the source, as Keras names them."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                continue
            for decorator in node.decorator_list:
                if (
                    isinstance(decorator, ast.Call)
                    and isinstance(decorator.func, ast.Attribute)
                    and decorator.func.attr == "register_keras_serializable"
                ):
                    arguments = {k.arg: ast.literal_eval(k.value) for k in decorator.keywords}
                    package = arguments.get("package", "Custom")
                    names.add(f"{package}>{arguments.get('name', node.name)}")
    return names


REGISTERED = """
import json, sys
{first}
import keras
print(json.dumps(sorted(
    name for name, value in keras.saving.get_custom_objects().items()
    if value.__module__.startswith("keras_largebatch.")
)))
"""


@pytest.fixture(scope="module")
def round_trip(tmp_path_factory):
    """backend -> (work directory, what the save process and each load process printed), each
    backend's processes run once for every test that reads them."""
    runs = {}

    def run(backend):
        if backend not in runs:
            work_dir = tmp_path_factory.mktemp(f"round_trip_{backend}")
            module = "tests.support.registration_round_trip"
            saved = _run("-m", module, "save", work_dir, backend=backend)
            with ThreadPoolExecutor(max_workers=2) as pool:
                loaded = pool.map(
                    lambda order: _run("-m", module, "load", work_dir, order, backend=backend),
                    LOAD_ORDERS,
                )
                printed = {"save": saved}
                for result in loaded:
                    printed.update(result)
            runs[backend] = work_dir, printed
        return runs[backend]

    return run


def test_the_package_registers_every_decorated_class_in_either_import_order(round_trip):
    expected = _decorated_names()
    # 6 classes and the `biases_and_norms` rule.
    assert "keras_largebatch>biases_and_norms" in expected and len(expected) == 7, expected
    # Fresh processes of the round trip: the package imported first, Keras imported first, and
    # (the save) the package imported, then Keras looked up without importing it, which leaves
    # the registration to come.
    _, printed = round_trip("jax")
    for order in ("package_first", "keras_first", "save"):
        assert set(printed[order]["registered"]) == expected, order


def test_registration_works_whichever_of_its_modules_is_imported_first(round_trip):
    # Registration imports these modules when Keras finishes loading, and Keras may be loading
    # because one of them, half-imported, asked for it. Importing `keras_largebatch.a.b` runs
    # `keras_largebatch.a` first, so each top-level module or subpackage is one case.
    modules = round_trip("jax")[1]["package_first"]["modules"]
    assert "keras_largebatch.optimizers.lamb" in modules, modules
    firsts = sorted({".".join(module.split(".")[:2]) for module in modules})
    assert "keras_largebatch.schedules" in firsts, firsts
    expected = _decorated_names()
    with ThreadPoolExecutor(max_workers=2) as pool:
        registered = list(
            pool.map(lambda module: _run("-c", REGISTERED.format(first=f"import {module}")), firsts)
        )
    assert {m: set(names) for m, names in zip(firsts, registered)} == dict.fromkeys(
        firsts, expected
    )


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_a_model_saved_with_our_optimizers_loads_in_a_fresh_process(backend, round_trip):
    work_dir, loaded = round_trip(backend)

    # Without the package Keras cannot find the classes; this is what the import fixes.
    assert "Could not locate class 'LAMB'" in loaded["without_package"]["lamb"]["error"]
    assert "Could not locate class 'LARS'" in loaded["without_package"]["lars"]["error"]
    assert loaded["without_package"]["deserialized_lamb"] == {"returned": "'LAMB'"}
    assert loaded["without_package"]["deserialized_lars"] == {"returned": "'LARS'"}
    assert loaded["package_first"]["imported_with_package"] == []

    classes = {
        "lamb": ("lamb.LAMB", "polynomial.WarmupPolynomialDecay"),
        "lars": ("lars.LARS", "warmup.WarmUp"),
        "deserialized_lamb": ("lamb.LAMB", "multi_phase.MultiPhaseSchedule"),
        "deserialized_lars": ("lars.LARS", "polynomial.LarsMLPerfSchedule"),
    }
    for order in ("package_first", "keras_first"):
        for case, (optimizer, schedule) in classes.items():
            assert loaded[order][case]["optimizer"] == f"keras_largebatch.optimizers.{optimizer}"
            assert loaded[order][case]["learning_rate"] == f"keras_largebatch.schedules.{schedule}"
            if case.startswith("deserialized_"):
                assert loaded[order][case]["same_config"], (order, case)
        for case in ("lamb", "lars"):
            # N steps, save, load in a fresh process, N steps: the weights of 2N steps.
            uninterrupted = np.load(work_dir / f"{case}_uninterrupted.npz")
            resumed = np.load(work_dir / f"{order}_{case}.npz")
            assert len(resumed.files) == len(uninterrupted.files) == 6
            for name in uninterrupted.files:
                np.testing.assert_array_equal(resumed[name], uninterrupted[name])
