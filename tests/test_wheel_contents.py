"""The wheel built from a clean copy of the repository holds every module and every recipe of
tpu_configs/, and an installed wheel's commands find a recipe by name from any directory."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from keras_largebatch.bert.pretraining import config as bert_config
from keras_largebatch.vision import config as vision_config
from tests.support.wheels import build_wheel

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory):
    """The wheel unpacked, as pip installs a pure-Python wheel into site-packages."""
    directory = tmp_path_factory.mktemp("site-packages")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(directory)
    return directory


def test_the_wheel_holds_every_recipe_and_module(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    recipes = sorted(path.name for path in (ROOT / "tpu_configs").glob("*.yaml"))
    assert len(recipes) >= 7
    assert {f"keras_largebatch/tpu_configs/{name}" for name in recipes} <= names
    assert not any(name.startswith("tpu_configs/") for name in names)
    modules = {str(path.relative_to(ROOT)) for path in (ROOT / "keras_largebatch").rglob("*.py")}
    assert modules <= names, sorted(modules - names)
    for name in recipes:
        packaged = zipfile.ZipFile(wheel).read(f"keras_largebatch/tpu_configs/{name}")
        assert packaged == (ROOT / "tpu_configs" / name).read_bytes()


def _command(installed, cwd, *argv):
    """``python -m MODULE ARGV`` importing the installed wheel, in ``cwd``."""
    return subprocess.run(
        [sys.executable, *argv],
        cwd=cwd,
        env={"PYTHONPATH": str(installed), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_installed_commands_find_a_recipe_by_name_anywhere(installed, tmp_path):
    where = _command(
        installed,
        tmp_path,
        "-c",
        "import keras_largebatch.training.command as c; print(c.__file__); "
        "print(c.bundled_config_directory())",
    )
    assert where.stdout.split() == [
        str(installed / "keras_largebatch" / "training" / "command.py"),
        str(installed / "keras_largebatch" / "tpu_configs"),
    ], where.stderr
    for module, name, config_lib in (
        ("keras_largebatch.bert.pretraining", "bert_large_lamb_32k", bert_config),
        ("keras_largebatch.vision", "resnet50_lars_32k", vision_config),
    ):
        result = _command(installed, tmp_path, "-m", module, "--config", name, "--print-config")
        assert result.returncode == 0, result.stderr
        expected = config_lib.load_config(str(ROOT / "tpu_configs" / f"{name}.yaml"))
        assert yaml.safe_load(result.stdout) == expected.to_dict()


def test_the_installed_command_lists_its_recipes_and_refuses_an_unknown_name(installed, tmp_path):
    bert = sorted(path.stem for path in (ROOT / "tpu_configs").glob("bert_*.yaml"))
    listed = _command(
        installed, tmp_path, "-m", "keras_largebatch.bert.pretraining", "--list-configs"
    )
    assert (listed.returncode, listed.stdout.split()) == (0, bert), listed.stderr
    unknown = _command(
        installed, tmp_path, "-m", "keras_largebatch.bert.pretraining", "--config", "bert_huge"
    )
    assert unknown.returncode == 2
    assert unknown.stderr.strip().endswith(f"bundled configs: {', '.join(bert)}"), unknown.stderr
