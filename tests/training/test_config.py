"""The generic run config: defaults, YAML and overrides, and checks that name key and value."""

import subprocess
import sys

import pytest

from keras_largebatch.training import config as training_config
from keras_largebatch.training import config_loading, plan
from tests.support.config_fields import assert_fields_documented
from tests.support.runs import ROOT
from tests.support.toy_recipe import ToyConfig, ToyPhase


def test_every_field_has_a_default_and_a_meaning():
    for cls in (
        training_config.RunConfig,
        training_config.PhaseConfig,
        training_config.StrategyConfig,
    ):
        cls()
        assert_fields_documented(cls)


def test_a_recipe_config_extends_the_run_config(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(
        "log_interval: 3\ncheckpoint_interval: 6\n"
        "phases:\n  - {global_batch_size: 16, steps: 9, learning_rate: 1e-2}\n"
    )
    config = config_loading.load_config(ToyConfig, str(path), ["phases.0.steps=12"])
    assert type(config) is ToyConfig and type(config.phases[0]) is ToyPhase
    assert (config.log_interval, config.checkpoint_interval) == (3, 6)
    assert (config.phases[0].global_batch_size, config.phases[0].steps) == (16, 12)
    assert config.phases[0].learning_rate == 0.01  # YAML 1.1 read "1e-2" as a string
    assert config.strategy.name == "default"  # the recipe's own default
    reloaded = config_loading.config_from_dict(ToyConfig, config.to_dict())
    assert reloaded == config


@pytest.mark.parametrize(
    "overrides, error, message",
    [
        (
            ["phases.0.global_batch_size=0"],
            ValueError,
            r"phases.0.global_batch_size must be in \[1, inf\], got 0",
        ),
        (
            ["phases.0.global_batch_size=9", "phases.0.gradient_accumulation_steps=2"],
            ValueError,
            r"phases.0.global_batch_size=9 must be divisible by "
            r"phases.0.gradient_accumulation_steps=2",
        ),
        (
            ["steps_per_execution=4"],
            ValueError,
            r"steps_per_execution=4 must divide log_interval x .* = 2",
        ),
        (["checkpoint_interval=3"], ValueError, r"checkpoint_interval must be a multiple of"),
        (["mixed_precision=float16"], ValueError, r"mixed_precision must be one of .*'float16'"),
        (["phases=[]"], ValueError, r"phases must hold at least one phase"),
        (["seed=abc"], TypeError, r"seed must be an integer, got 'abc'"),
        (["overwrite=1"], TypeError, r"overwrite must be true or false, got 1"),
        (["strategy=mirrored"], TypeError, r"strategy must be a mapping of StrategyConfig fields"),
        (["phases.0.lr=1"], ValueError, r"unknown config key 'phases.0.lr'.*'learning_rate'"),
        (
            ["phases.0.max_per_replica_batch_size=0"],
            ValueError,
            r"phases.0.max_per_replica_batch_size must be in \[1, inf\], got 0",
        ),
        (
            ["strategy.name=data_parallel"],
            ValueError,
            r"strategy.name='data_parallel' is not available on the tensorflow backend; "
            r"allowed there: \('auto', 'tpu', 'multi_worker', 'mirrored', 'one_device', "
            r"'default'\)",
        ),
        (
            ["strategy.num_processes=2"],
            ValueError,
            r"strategy.num_processes=2 is a setting of the jax backend's process group and "
            r"input pipelines, not used on the tensorflow backend, where tf.distribute finds "
            r"the workers in TF_CONFIG .*; allowed there: null",
        ),
        (
            ["strategy.initialization_timeout=5"],
            ValueError,
            r"strategy.initialization_timeout=5 is a setting of the jax .*allowed there: 300",
        ),
        (["strategy.input_pipelines=2"], ValueError, r"strategy.input_pipelines=2 is a setting"),
        (
            ["strategy.name=model_parallel", "strategy.model_axis_size=2"],
            ValueError,
            r"strategy.name='model_parallel' is not available on the tensorflow backend; "
            r"allowed there: \(.*'default'\) \(data_parallel and model_parallel are "
            r"keras.distribution's DataParallel and ModelParallel, for KERAS_BACKEND=jax\)",
        ),
        (
            ["strategy.model_axis_size=2"],
            ValueError,
            r"strategy.model_axis_size=2 sizes the model axis of strategy.name=model_parallel, "
            r"but strategy.name='default'; allowed with it: null",
        ),
    ],
)
def test_bad_values_name_the_key_and_value(tmp_path, overrides, error, message):
    with pytest.raises(error, match=message):
        config_loading.load_config(ToyConfig, overrides=[f"output_dir={tmp_path}", *overrides])


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"input_pipelines": 0}, r"strategy.input_pipelines must be in \[1, inf\], got 0"),
        ({"initialization_timeout": 0}, r"strategy.initialization_timeout must be in \[1, inf\]"),
        (
            {"num_processes": 2, "process_id": 2},
            r"strategy.process_id must be in \[0, strategy.num_processes=2\), got 2",
        ),
        (
            {"coordinator_address": "10.0.0.1"},
            r"strategy.coordinator_address must be host:port \(e.g. 10.0.0.1:1234\), got "
            r"'10.0.0.1'",
        ),
        (
            {"multi_host": False, "num_processes": 2},
            r"strategy.multi_host=false runs one process, but strategy.num_processes=2 name a "
            r"process group",
        ),
    ],
)
def test_process_group_settings_are_checked_on_jax(settings, message):
    strategy = training_config.StrategyConfig(name="data_parallel", **settings)
    with pytest.raises(ValueError, match=message):
        training_config.check_strategy_config(strategy, backend="jax")


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            {"name": "model_parallel"},
            r"strategy.name=model_parallel needs strategy.model_axis_size, the number of devices "
            r"each split kernel is split over \(a divisor of the run's devices, e.g. 2, 4 or 8\), "
            r"got null",
        ),
        (
            {"name": "model_parallel", "model_axis_size": 0},
            r"strategy.model_axis_size must be in \[1, inf\], got 0",
        ),
        (
            {"name": "data_parallel", "model_axis_size": 2},
            r"strategy.model_axis_size=2 sizes the model axis of strategy.name=model_parallel, "
            r"but strategy.name='data_parallel'; allowed with it: null",
        ),
    ],
)
def test_the_model_axis_is_sized_with_model_parallel_only_on_jax(settings, message):
    with pytest.raises(ValueError, match=message):
        training_config.check_strategy_config(
            training_config.StrategyConfig(**settings), backend="jax"
        )
    model_parallel = training_config.StrategyConfig(name="model_parallel", model_axis_size=2)
    assert training_config.check_strategy_config(model_parallel, backend="jax") is None


# Hand-computed splits: (global batch, replicas, most examples per replica) -> the fewest
# micro-batches k with the global batch divisible by replicas x k and at most that many
# examples per replica.
@pytest.mark.parametrize(
    "global_batch_size, replicas, limit, steps",
    [
        (1024, 8, None, 1),  # no limit: no accumulation
        (1024, 8, 128, 1),  # 128 per replica fits
        (1024, 8, 32, 4),  # a v3-8: 1024 = 8 x 32 x 4
        (1024, 256, 32, 1),  # a pod slice: 1024 = 256 x 4, no accumulation
        (1024, 8, 100, 2),  # 64 per replica is the first split <= 100
        (96, 8, 5, 3),  # 12 and 6 are too many; 96 = 8 x 4 x 3
        (10, 2, 1, 5),  # down to one example per replica
        (32768, 8, 256, 16),  # MLPerf ResNet-50 at 32K on 8 cores of 256
    ],
)
def test_accumulation_derived_from_the_replicas_and_the_limit(
    global_batch_size, replicas, limit, steps
):
    assert plan.derive_accumulation_steps("phases.0", global_batch_size, replicas, limit) == steps
    phase = plan.plan_phase(
        training_config.PhaseConfig(global_batch_size, 1, None, limit), replicas
    )
    assert phase.per_replica_batch_size == global_batch_size // (replicas * steps)
    assert phase.gradient_accumulation_steps == steps


def test_an_explicit_accumulation_wins_over_the_derived_one():
    phase = training_config.PhaseConfig(1024, 1, 2, 128)  # would derive k = 1 on 8 replicas
    resolved = plan.plan_phase(phase, 8)
    assert resolved.per_replica_batch_size == 64 and resolved.gradient_accumulation_steps == 2
    unlimited = plan.plan_phase(training_config.PhaseConfig(1024, 1, 2), 8)
    assert unlimited.per_replica_batch_size == 64


@pytest.mark.parametrize(
    "phase, replicas, message",
    [
        (
            training_config.PhaseConfig(12, 1, None, 4),
            8,
            r"phases.1.global_batch_size=12 cannot be split over 8 replicas into micro-batches "
            r"of at most phases.1.max_per_replica_batch_size=4 examples per replica: no "
            r"gradient_accumulation_steps k has 12 divisible by 8 x k with 12 / \(8 x k\) <= 4",
        ),
        (
            training_config.PhaseConfig(1024, 1, 2, 32),
            8,
            r"phases.1.global_batch_size=1024 / \(8 replicas x gradient_accumulation_steps=2\) "
            r"= 64 examples per replica exceeds phases.1.max_per_replica_batch_size=32",
        ),
        (
            training_config.PhaseConfig(1024, 1, 4, 1024),
            3,
            r"phases.1.global_batch_size=1024 / gradient_accumulation_steps=4 = 256 examples per "
            r"micro-batch must be divisible by the 3 replicas",
        ),
    ],
)
def test_an_impossible_split_names_the_numbers(phase, replicas, message):
    with pytest.raises(ValueError, match=message):
        plan.plan_phase(phase, replicas, index=1)


def test_the_derived_accumulation_meets_steps_per_execution(tmp_path):
    # 4 training calls per execution need windows of 2 steps x 2 micro-batches: known only once
    # the accumulation is derived, so checked again when the config is resolved.
    overrides = [f"output_dir={tmp_path}", "steps_per_execution=4"]
    for index, limit in enumerate((4, 2)):
        overrides.append(f"phases.{index}.max_per_replica_batch_size={limit}")
    config = config_loading.load_config(ToyConfig, overrides=overrides)
    resolved = plan.plan_run(config, 1)
    assert [phase.gradient_accumulation_steps for phase in resolved.phases] == [2, 2]
    overrides[-1] = "phases.1.max_per_replica_batch_size=4"  # 4 examples: k = 1
    config = config_loading.load_config(ToyConfig, overrides=overrides)
    with pytest.raises(
        ValueError,
        match=r"steps_per_execution=4 must divide log_interval x "
        r"phases.1.gradient_accumulation_steps = 2",
    ):
        plan.plan_run(config, 1)


def test_configs_load_validate_and_print_without_tensorflow_or_keras_hub():
    # In a fresh interpreter: every recipe's config module, a validated config, and the
    # commands' --print_config, with no TensorFlow, keras-hub or Keras imported on the way.
    program = """
import contextlib, io, sys
from keras_largebatch.bert.pretraining import config as bert_config
from keras_largebatch.bert.pretraining import __main__ as pretrain
from keras_largebatch.study import config as study_config
from keras_largebatch.training import config as training_config, config_loading, plan
from keras_largebatch.vision import __main__ as train, config as vision_config
bert_config.load_config(overrides=["phases.0.max_per_replica_batch_size=8"])
vision_config.load_config()
study_config.preset("tiny").validate()
for command in (pretrain, train):
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        assert command.main(["--print_config", "phases.0.steps=700"]) == 0
    assert "steps: 700" in printed.getvalue()
print(sorted(m for m in ("tensorflow", "keras_hub", "keras") if m in sys.modules))
"""
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
