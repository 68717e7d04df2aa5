"""Pretraining config: defaults, YAML files, key=value overrides and their errors."""

import glob
import os

import pytest

from keras_largebatch.bert.pretraining import config as config_lib
from keras_largebatch.training.plan import plan_run
from tests.support.config_fields import assert_fields_documented

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_defaults_are_the_default_job():
    config = config_lib.load_config()
    assert config.model.size is None and config.model.size_name() == "tiny"
    assert config.model.dimensions() == (2, 128, 2, 512)
    assert config.optimizer.name == "lamb"
    assert config.optimizer.weight_decay == 0.01
    assert len(config.phases) == 1 and config.phases[0].seq_length == 128
    assert config.output_dir == "runs/bert_tiny_lamb"


def test_every_field_has_a_default_and_a_meaning():
    for cls in (
        config_lib.PretrainConfig,
        config_lib.ModelConfig,
        config_lib.PhaseConfig,
        config_lib.OptimizerConfig,
        config_lib.DataConfig,
        config_lib.StrategyConfig,
    ):
        cls()  # constructs with no arguments: every field has a default
        assert_fields_documented(cls)


def test_yaml_round_trip_and_string_numbers(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(
        "model:\n  size: mini\n"
        "phases:\n"
        "  - {seq_length: 128, global_batch_size: 64, steps: 100, peak_learning_rate: 6e-3,"
        " warmup_steps: 10}\n"
        "  - {seq_length: 512, max_predictions_per_seq: 80, global_batch_size: 32, steps: 20,"
        " peak_learning_rate: 4.0e-3, warmup_steps: 2, power: 0.5}\n"
        "optimizer:\n  weight_decay: 1e-2\n"
    )
    config = config_lib.load_config(str(path))
    # PyYAML reads 6e-3 and 1e-2 (no decimal point) as strings; numeric fields take them.
    assert config.phases[0].peak_learning_rate == 0.006
    assert config.optimizer.weight_decay == 0.01
    assert config.phases[1].max_predictions_per_seq == 80
    assert config.model.size == "mini"
    reloaded_path = tmp_path / "again.yaml"
    reloaded_path.write_text(config.to_yaml())
    assert config_lib.load_config(str(reloaded_path)) == config


def test_overrides_reach_nested_fields_and_list_items():
    config = config_lib.load_config(
        overrides=[
            "model.size=mini",
            "phases.0.steps=100",
            "phases.0.warmup_steps=5",
            "optimizer.global_clipnorm=null",
            "optimizer.exclude_from_weight_decay=[bias]",
            "mixed_precision=mixed_bfloat16",
            "strategy.devices=['/cpu:0', '/cpu:1']",
            "phases.0.peak_learning_rate=1e-3",
        ]
    )
    assert config.model.size == "mini"
    assert config.phases[0].steps == 100 and config.phases[0].warmup_steps == 5
    assert config.phases[0].peak_learning_rate == 0.001
    assert config.optimizer.global_clipnorm is None
    assert config.optimizer.exclude_from_weight_decay == ["bias"]
    assert config.mixed_precision == "mixed_bfloat16"
    assert config.strategy.devices == ["/cpu:0", "/cpu:1"]


def test_whole_phase_list_override():
    config = config_lib.load_config(
        overrides=[
            "phases=[{steps: 10, warmup_steps: 1}, {seq_length: 64, steps: 10, warmup_steps: 1}]"
        ]
    )
    assert [phase.seq_length for phase in config.phases] == [128, 64]
    assert config.phases[1].global_batch_size == config_lib.PhaseConfig().global_batch_size


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["learning_rate=0.1"], r"unknown config key 'learning_rate'.*valid keys.*'phases'"),
        (["optimizer.lr=0.1"], r"unknown config key 'optimizer.lr'.*'weight_decay'"),
        (["phases.3.steps=10"], r"'3' must be a list index in \[0, 1\)"),
        (
            ["model.size=huge"],
            r"model.size must be one of \['tiny', 'mini', 'small', 'medium', "
            r"'base', 'large'\], got 'huge'",
        ),
        (
            ["phases.0.gradient_accumulation_steps=0"],
            r"phases.0.gradient_accumulation_steps must be in \[1, inf\], got 0",
        ),
        (
            ["phases.0.max_predictions_per_seq=200"],
            r"phases.0.max_predictions_per_seq must be in \[1, phases.0.seq_length=128\], got 200",
        ),
        (["phases.0.warmup_steps=2000"], r"phases.0.warmup_steps must be < phases.0.steps=2000"),
        (["mixed_precision=float16"], r"mixed_precision must be one of .*got 'float16'"),
        (["optimizer.name=sgd"], r"optimizer.name must be one of \['lamb', 'adamw'\], got 'sgd'"),
        (["strategy.name=gpu"], r"strategy.name must be one of .*got 'gpu'"),
        (["checkpoint_interval=30"], r"checkpoint_interval must be a multiple of log_interval=25"),
        (
            ["phases.0.gradient_accumulation_steps=3"],
            r"global_batch_size=32 must be divisible by phases.0.gradient_accumulation_steps=3",
        ),
        (["steps_per_execution=7"], r"steps_per_execution=7 must divide log_interval x .* = 25"),
        (["model.max_sequence_length=64"], r"model.max_sequence_length must be >= .* got 64"),
        (["model.hidden_dim=101"], r"model.hidden_dim=101 must be divisible by model.num_heads=2"),
        (
            ["optimizer.name=adamw", "phases.0.gradient_accumulation_steps=2"],
            r"phases.0.gradient_accumulation_steps=2 needs optimizer.name='lamb'",
        ),
        (["model.size"], r"an override must look like key=value"),
        (["phases.0.steps=[1"], r"override 'phases.0.steps=\[1': the value is not valid YAML"),
    ],
)
def test_bad_overrides_name_the_key_and_value(overrides, message):
    with pytest.raises(ValueError, match=message):
        config_lib.load_config(overrides=overrides)


@pytest.mark.parametrize(
    "override, message",
    [
        ("optimizer.weight_decay=abc", r"optimizer.weight_decay must be a number, got 'abc'"),
        ("phases.0.steps=12.5", r"phases.0.steps must be an integer, got 12.5"),
        ("overwrite=maybe", r"overwrite must be true or false, got 'maybe'"),
        (
            "phases.0.input_files=a.tfrecord",
            r"phases.0.input_files must be a list, got 'a.tfrecord'; in YAML or an override it "
            r"is written in brackets, quoted for the shell: 'phases.0.input_files=\[a.tfrecord\]'",
        ),
    ],
)
def test_values_of_the_wrong_type_are_type_errors(override, message):
    with pytest.raises(TypeError, match=message):
        config_lib.load_config(overrides=[override])


def test_the_list_override_a_type_error_suggests_is_accepted():
    config = config_lib.load_config(overrides=["phases.0.input_files=[a.tfrecord]"])
    assert config.phases[0].input_files == ["a.tfrecord"]


def test_unknown_key_in_a_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("model:\n  sise: mini\n")
    with pytest.raises(ValueError, match=r"unknown config key model.sise; valid keys: .*'size'"):
        config_lib.load_config(str(path))
    path.write_text("- just a list\n")
    with pytest.raises(ValueError, match="must hold a YAML mapping"):
        config_lib.load_config(str(path))


def test_tpu_configs_hold_the_published_recipes():
    """The published recipes (You et al. 2020, arXiv:1904.00962; NVIDIA DeepLearningExamples
    BERT), transcribed by hand here."""
    configs = {
        os.path.basename(path): config_lib.load_config(path)
        for path in glob.glob(os.path.join(REPOSITORY, "tpu_configs", "bert_*.yaml"))
        if not path.endswith("bert_tiny_default.yaml")  # the embedded default, for CPUs
    }
    nvidia = configs["bert_large_lamb_nvidia.yaml"]
    assert nvidia.model.size == "large"
    assert [
        (p.seq_length, p.global_batch_size, p.steps, p.peak_learning_rate, p.warmup_steps, p.power)
        for p in nvidia.phases
    ] == [(128, 65536, 7038, 6e-3, 2000, 0.5), (512, 32768, 1563, 4e-3, 200, 0.5)]
    assert nvidia.optimizer.global_clipnorm == 1.0
    mixed = configs["bert_large_lamb_64k_32k.yaml"]
    assert [(p.seq_length, p.global_batch_size) for p in mixed.phases] == [
        (128, 65536),
        (512, 32768),
    ]
    assert sum(p.steps for p in mixed.phases) == 8599
    # The 32K run: 15,625 steps, 90% at length 128; 5e-3 by the square-root rule.
    large_32k = configs["bert_large_lamb_32k.yaml"]
    assert [
        (p.seq_length, p.global_batch_size, p.steps, p.peak_learning_rate, p.power)
        for p in large_32k.phases
    ] == [(128, 32768, 14063, 5e-3, 1.0), (512, 32768, 1562, 5e-3, 1.0)]
    # BERT-Base at batch 4,096: the 32K run's examples, its warmup steps, 5e-3 x sqrt(1/8).
    base = configs["bert_base_lamb_v3_8.yaml"]
    assert base.model.size == "base"
    for phase, reference in zip(base.phases, large_32k.phases):
        assert phase.steps * phase.global_batch_size == reference.steps * 32768
        assert phase.warmup_steps == reference.warmup_steps
        assert phase.peak_learning_rate == pytest.approx(5e-3 * (4096 / 32768) ** 0.5, rel=1e-3)
    # At most 64 examples per core at length 128 and 16 at 512: on 8 cores the command derives
    # 8 and 32 micro-batches (of 512 and 128 examples), which steps_per_execution divides.
    assert _split(base, 8) == [(64, 8), (16, 32)]
    # The BERT-Large recipes at the same caps: the paper's 2,048 cores need no accumulation, a
    # v3-8 host 64 and 256 micro-batches (32K), a 1,024-core slice 2 at length 512 (64K/32K).
    assert _split(large_32k, 2048) == [(16, 1), (16, 1)]
    assert _split(large_32k, 8) == [(64, 64), (16, 256)]
    for name in ("bert_large_lamb_nvidia.yaml", "bert_large_lamb_64k_32k.yaml"):
        assert _split(configs[name], 2048) == [(32, 1), (16, 1)]
        assert _split(configs[name], 1024) == [(64, 1), (16, 2)]
    for config in configs.values():
        assert config.strategy.name == "auto" and config.strategy.tpu is None
        assert config.mixed_precision == "mixed_bfloat16"
        assert config.model.max_sequence_length in (None, 512)
        assert config.optimizer.weight_decay == 0.01


def _split(config, num_replicas):
    """(examples per replica, gradient_accumulation_steps) of each phase of ``config`` on
    ``num_replicas`` replicas, as the run's plan derives and checks them."""
    return [
        (phase.per_replica_batch_size, phase.gradient_accumulation_steps)
        for phase in plan_run(config, num_replicas).phases
    ]


def test_default_records_need_a_local_output_dir():
    with pytest.raises(
        ValueError,
        match=r"phases.0.input_files is null.*'gs://bucket/run', which must then be local",
    ):
        config_lib.load_config(overrides=["output_dir=gs://bucket/run"])


def test_a_removed_key_says_what_replaced_it(tmp_path):
    message = r"config key 'data.deterministic' was removed: the training order is always"
    with pytest.raises(ValueError, match=message):
        config_lib.load_config(overrides=["data.deterministic=false"])
    path = tmp_path / "old.yaml"
    path.write_text("data:\n  deterministic: false\n")
    with pytest.raises(ValueError, match=message):
        config_lib.load_config(str(path))
