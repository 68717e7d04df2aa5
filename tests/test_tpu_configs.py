"""Every recipe in tpu_configs/ loads, names its source, and plans its run through its real
command; one recipe of each shape trains through it.

Each recipe goes through `main` of the command its header names, given by its name (``--config
bert_large_lamb_32k``), with the sizes overridden (a tiny model, a small batch and per-replica
cap, local records written here) and everything else as the file has it: phases, schedules,
optimizer, derived accumulation, exclusions. Every recipe resolves there, is planned on the CPU's
one replica and builds each phase's optimizer and schedule. Recipes of the same shape (number of
phases, a per-replica cap or none, the optimizer) differ only in numbers once their sizes are
overridden, so one of each shape runs two optimizer steps (`TRAINED`). Every recipe's strategy
settings are valid on both backends, so one file runs on the TensorFlow road and the JAX road.
"""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from keras_largebatch._backend import BACKENDS
from keras_largebatch.bert.pretraining import __main__ as pretrain
from keras_largebatch.bert.pretraining import config as bert_config
from keras_largebatch.bert.pretraining.recipe import REPORTED_METRICS
from keras_largebatch.bert.pretraining.recipe import build_optimizer as build_bert_optimizer
from keras_largebatch.training.config import check_strategy_config
from keras_largebatch.training.plan import plan_run
from keras_largebatch.vision import __main__ as train
from keras_largebatch.vision import config as vision_config
from keras_largebatch.vision.recipe import ImageClassification
from tests.support.bert_records import write_records
from tests.support.imagenet_records import write_imagenet_records

CONFIGS = Path(__file__).resolve().parents[1] / "tpu_configs"
BERT = sorted(path.name for path in CONFIGS.glob("bert_*.yaml"))
IMAGES = sorted(path.name for path in CONFIGS.glob("resnet50_*.yaml"))
# A paper's arXiv id, or the public repository path of the implementation reproduced.
SOURCE = re.compile(r"arXiv:\d{4}\.\d{4,5}|NVIDIA/DeepLearningExamples|mlcommons/training")
# One recipe of each shape trains: BERT in one uncapped phase and in two capped phases, the
# ResNet in one capped phase.
TRAINED = ["bert_tiny_default.yaml", "bert_large_lamb_64k_32k.yaml", "resnet50_lars_32k.yaml"]


def test_every_config_is_a_bert_or_an_image_recipe():
    assert sorted(path.name for path in CONFIGS.glob("*.yaml")) == sorted(BERT + IMAGES)
    assert len(BERT) >= 5 and len(IMAGES) >= 2


@pytest.mark.parametrize("name", BERT + IMAGES)
def test_the_header_names_a_source_and_the_command(name):
    text = (CONFIGS / name).read_text()
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    assert text.startswith("# ") and SOURCE.search(header), name
    command = "keras-largebatch-pretrain" if name in BERT else "keras-largebatch-train-images"
    assert f"{command} --config {Path(name).stem}" in header


@pytest.mark.parametrize("name", BERT)
def test_bert_configs_load(name):
    assert bert_config.load_config(str(CONFIGS / name)).phases


@pytest.mark.parametrize("name", IMAGES)
def test_image_configs_load(name):
    assert vision_config.load_config(str(CONFIGS / name)).phases


def _load(name):
    module = bert_config if name in BERT else vision_config
    return module.load_config(str(CONFIGS / name))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", BERT + IMAGES)
def test_the_strategy_runs_on_both_backends(name, backend):
    strategy = _load(name).strategy
    check_strategy_config(strategy, backend=backend)  # raises on a setting of the other backend
    assert (strategy.name, strategy.tpu) == ("auto", None)
    header = (CONFIGS / name).read_text().split("\noutput_dir:")[0]
    # The header says what each road needs: KERAS_BACKEND=jax, or strategy.tpu on TensorFlow.
    assert "KERAS_BACKEND=jax" in header and "strategy.tpu=" in header, name


@pytest.mark.parametrize("name", BERT + IMAGES)
def test_recipes_for_tpus_cap_the_per_replica_batch_instead_of_fixing_the_accumulation(name):
    for phase in _load(name).phases:
        assert phase.gradient_accumulation_steps is None
        assert (phase.max_per_replica_batch_size is None) == (name == "bert_tiny_default.yaml")


def test_the_tiny_default_is_the_empty_config():
    written = bert_config.load_config(str(CONFIGS / "bert_tiny_default.yaml"))
    assert written.to_dict() == bert_config.load_config().to_dict()
    # Every field is written out, so the file shows the whole job.
    document = yaml.safe_load((CONFIGS / "bert_tiny_default.yaml").read_text())
    assert _keys(document) == _keys(bert_config.load_config().to_dict())


def _keys(values, prefix=""):
    if isinstance(values, list) and values and isinstance(values[0], dict):
        return set().union(*(_keys(item, f"{prefix}{index}.") for index, item in enumerate(values)))
    if not isinstance(values, dict):
        return {prefix.rstrip(".")}
    return set().union(*(_keys(value, f"{prefix}{key}.") for key, value in values.items()))


def _summary(main, argv, capsys):
    capsys.readouterr()
    status = main(argv)
    captured = capsys.readouterr()
    assert status == 0, captured.err[-3000:]
    return json.loads(captured.out)


def _two_steps(num_phases):
    """Steps per phase that make two optimizer steps over a run of one or two phases."""
    return [2] if num_phases == 1 else [1, 1]


@pytest.fixture(scope="module")
def bert_records(tmp_path_factory):
    return write_records(tmp_path_factory.mktemp("bert") / "records.tfrecord", 64, seed=3)


def _bert_overrides(name, records, output_dir):
    """The size overrides of recipe ``name`` for two optimizer steps on records ``records``,
    and the accumulation each phase derives on one replica."""
    recipe = bert_config.load_config(str(CONFIGS / name))
    assert len(recipe.phases) <= 2
    overrides = [
        f"output_dir={output_dir}",
        "model.num_layers=1",
        "model.hidden_dim=16",
        "model.num_heads=2",
        "model.intermediate_dim=32",
        "model.vocabulary_size=64",
        "model.max_sequence_length=16",
        "log_interval=1",
        "checkpoint_interval=1",
        "steps_per_execution=1",
        "mixed_precision=null",  # bfloat16 is slow on CPUs; the TPU precision is not tested
    ]
    accumulations = []
    for index, (phase, steps) in enumerate(zip(recipe.phases, _two_steps(len(recipe.phases)))):
        overrides += [
            f"phases.{index}.seq_length=16",
            f"phases.{index}.max_predictions_per_seq=4",
            f"phases.{index}.steps={steps}",
            f"phases.{index}.warmup_steps=0",
            f"phases.{index}.input_files=['{records}']",
        ]
        if phase.max_per_replica_batch_size is None:
            overrides.append(f"phases.{index}.global_batch_size=2")
            accumulations.append(1)
        else:
            # A cap of 2 on the CPU's one replica: the command derives 2 micro-batches of 2.
            overrides += [
                f"phases.{index}.global_batch_size=4",
                f"phases.{index}.max_per_replica_batch_size=2",
            ]
            accumulations.append(2)
    return overrides, accumulations


def _shape(name):
    """What tells recipes apart once their sizes are overridden: phases, caps, optimizer."""
    config = _load(name)
    capped = tuple(phase.max_per_replica_batch_size is not None for phase in config.phases)
    return (name in BERT, capped, config.optimizer.name)


def test_one_recipe_of_each_shape_trains():
    assert set(TRAINED) <= set(BERT + IMAGES)
    assert {_shape(name) for name in TRAINED} == {_shape(name) for name in BERT + IMAGES}


def _resolved(module, main, name, overrides, tmp_path, capsys):
    """The config the command resolves for recipe ``name`` and ``overrides`` (by name, as a
    user of the wheel runs it: the command finds the bundled file), as `--print-config`
    prints it: the file's with the overrides applied."""
    capsys.readouterr()
    status = main(["--config", Path(name).stem, *overrides, "--print-config"])
    captured = capsys.readouterr()
    assert status == 0, captured.err[-3000:]
    printed = tmp_path / "resolved.yaml"
    printed.write_text(captured.out)
    config = module.load_config(str(printed))
    assert config.to_dict() == module.load_config(str(CONFIGS / name), overrides).to_dict()
    return config


def _tiny_model():
    import keras

    inputs = keras.Input((4,))
    normalized = keras.layers.LayerNormalization(name="layer_norm")(inputs)
    return keras.Model(inputs, keras.layers.Dense(2, name="dense")(normalized))


@pytest.mark.parametrize("name", BERT)
def test_bert_config_is_planned_through_the_command(name, tmp_path, capsys):
    overrides, accumulations = _bert_overrides(name, tmp_path / "records", tmp_path / "run")
    config = _resolved(bert_config, pretrain.main, name, overrides, tmp_path, capsys)
    plan = plan_run(config, num_replicas=1)
    assert [phase.gradient_accumulation_steps for phase in plan.phases] == accumulations
    model = _tiny_model()
    for phase in plan.phases:
        optimizer = build_bert_optimizer(config.optimizer, phase, model)
        assert type(optimizer).__name__.lower() == config.optimizer.name


@pytest.mark.parametrize("name", [name for name in BERT if name in TRAINED])
def test_bert_config_trains_two_steps_through_the_command(name, bert_records, tmp_path, capsys):
    recipe = bert_config.load_config(str(CONFIGS / name))
    overrides, accumulations = _bert_overrides(name, bert_records, tmp_path / "run")
    # By name, as a user of the wheel runs it: the command finds the bundled file.
    summary = _summary(pretrain.main, ["--config", Path(name).stem, *overrides], capsys)
    assert summary["global_steps"] == 2
    assert [
        (
            phase["num_replicas"],
            phase["per_replica_batch_size"],
            phase["gradient_accumulation_steps"],
        )
        for phase in summary["phases"]
    ] == [(1, 2, accumulation) for accumulation in accumulations]
    assert sum(phase["steps"] for phase in summary["phases"]) == 2
    assert summary["optimizer"] == recipe.optimizer.name
    for key in REPORTED_METRICS:
        assert np.isfinite(summary["final"][key]), (key, summary["final"])
    assert np.isfinite(summary["final"]["loss"])


@pytest.fixture(scope="module")
def image_records(tmp_path_factory):
    directory = tmp_path_factory.mktemp("imagenet")
    labels = [1 + index % 10 for index in range(16)]  # 1-based, as in the TPU records
    return {
        "train": [write_imagenet_records(directory / "train-0", labels)],
        "eval": [write_imagenet_records(directory / "validation-0", labels[:10])],
    }


def _image_overrides(output_dir, records):
    return [
        f"output_dir={output_dir}",
        f"data.train_files={json.dumps(records['train'])}",
        f"data.eval_files={json.dumps(records['eval'])}",
        "data.num_train_examples=16",
        "data.eval_batch_size=10",
        "model.architecture=small",
        "model.num_classes=10",
        "model.image_size=24",
        "phases.0.global_batch_size=8",
        "phases.0.max_per_replica_batch_size=4",  # the command derives 2 micro-batches of 4
        "phases.0.steps=2",
        "phases.0.warmup_epochs=0",
        "log_interval=1",
        "checkpoint_interval=2",
        "eval_interval=2",
        "steps_per_execution=1",
        "target_accuracy=null",
        "mixed_precision=null",
    ]


@pytest.mark.parametrize("name", IMAGES)
def test_image_config_is_planned_through_the_command(name, tmp_path, capsys):
    records = {"train": [str(tmp_path / "train-0")], "eval": [str(tmp_path / "validation-0")]}
    overrides = _image_overrides(tmp_path / "run", records)
    config = _resolved(vision_config, train.main, name, overrides, tmp_path, capsys)
    (phase,) = plan_run(config, num_replicas=1).phases
    assert phase.gradient_accumulation_steps == 2
    optimizer = ImageClassification(config).build_optimizer(phase, _tiny_model())
    assert type(optimizer).__name__.lower() == config.optimizer.name


@pytest.mark.parametrize("name", [name for name in IMAGES if name in TRAINED])
def test_image_config_trains_two_steps_through_the_command(name, image_records, tmp_path, capsys):
    overrides = _image_overrides(tmp_path / "run", image_records)
    summary = _summary(train.main, ["--config", Path(name).stem, *overrides], capsys)
    assert summary["global_steps"] == 2
    (phase,) = summary["phases"]
    assert (phase["per_replica_batch_size"], phase["gradient_accumulation_steps"]) == (4, 2)
    assert np.isfinite(summary["final"]["loss"])
    assert [evaluation["global_step"] for evaluation in summary["evaluations"]] == [2]
