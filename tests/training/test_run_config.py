"""The generic run config: defaults, YAML and overrides, and checks that name key and value."""

import pytest

from keras_largebatch.training import config as training_config
from tests.support.config_fields import assert_fields_documented
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
    config = training_config.load_config(ToyConfig, str(path), ["phases.0.steps=12"])
    assert type(config) is ToyConfig and type(config.phases[0]) is ToyPhase
    assert (config.log_interval, config.checkpoint_interval) == (3, 6)
    assert (config.phases[0].global_batch_size, config.phases[0].steps) == (16, 12)
    assert config.phases[0].learning_rate == 0.01  # YAML 1.1 read "1e-2" as a string
    assert config.strategy.name == "default"  # the recipe's own default
    reloaded = training_config.config_from_dict(ToyConfig, config.to_dict())
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
    ],
)
def test_bad_values_name_the_key_and_value(tmp_path, overrides, error, message):
    with pytest.raises(error, match=message):
        training_config.load_config(ToyConfig, overrides=[f"output_dir={tmp_path}", *overrides])
