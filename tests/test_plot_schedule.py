"""The plot is a valid PNG of the schedule's values; the command builds the right schedule."""

import json

import keras
import matplotlib.image
import numpy as np
import pytest
import yaml

from keras_largebatch.plot_schedule import plot_schedule
from keras_largebatch.plot_schedule.__main__ import main
from keras_largebatch.schedules import MultiPhaseSchedule, WarmUp

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

PHASES = [
    {"steps": 70, "peak_learning_rate": 6e-3, "warmup_steps": 20, "power": 0.5},
    {"steps": 30, "peak_learning_rate": 4e-3, "warmup_steps": 7},
]


def two_phase_reference(step):
    if step < 70:
        return 6e-3 * step / 20 if step < 20 else 6e-3 * (1 - (step - 20) / 50) ** 0.5
    step -= 70
    return 4e-3 * step / 7 if step < 7 else 4e-3 * (1 - (step - 7) / 23)


def assert_png(path):
    with open(path, "rb") as file:
        assert file.read(8) == PNG_SIGNATURE
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    # Not a blank canvas: the curve and axes are drawn.
    assert image[..., :3].min() < 0.5


def test_plot_multi_phase_schedule_values_and_png(tmp_path):
    path = tmp_path / "lr.png"
    # 11 evenly spaced points (0, 10, ..., 100) miss both peaks (20 and 77)
    # and the restart (70); they must be added.
    steps, rates = plot_schedule(MultiPhaseSchedule(PHASES), path, num_points=11)
    assert_png(path)
    assert {20, 69, 70, 77, 99, 100} <= set(steps.tolist())
    assert steps[0] == 0 and steps[-1] == 100
    np.testing.assert_allclose(rates, [two_phase_reference(s) for s in steps], rtol=1e-5, atol=1e-9)
    assert rates.max() == pytest.approx(6e-3)


def test_plot_keras_schedule_needs_total_steps(tmp_path):
    schedule = WarmUp(keras.optimizers.schedules.ExponentialDecay(1.0, 10, 0.5), warmup_steps=5)
    with pytest.raises(ValueError, match="total_steps is needed to plot a WarmUp"):
        plot_schedule(schedule, tmp_path / "lr.png")
    steps, rates = plot_schedule(schedule, tmp_path / "lr.png", total_steps=25, num_points=26)
    assert_png(tmp_path / "lr.png")
    expected = [s / 5 if s < 5 else 0.5 ** ((s - 5) / 10) for s in range(26)]
    np.testing.assert_allclose(rates, expected, rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"total_steps": 0}, "total_steps must be in (0, inf], got 0"),
        ({"num_points": 1}, "num_points must be in [2, inf], got 1"),
    ],
)
def test_plot_bad_arguments(tmp_path, kwargs, message):
    with pytest.raises(ValueError) as error:
        plot_schedule(MultiPhaseSchedule(PHASES), tmp_path / "lr.png", **kwargs)
    assert message in str(error.value)


def test_command_plots_phases_from_yaml(tmp_path, capsys):
    config = tmp_path / "phases.yaml"
    config.write_text(yaml.safe_dump({"phases": PHASES}))
    output = tmp_path / "phases.png"
    assert main([str(output), "--config", str(config), "--num-points", "50"]) == 0
    assert_png(output)
    assert f"wrote {output}" in capsys.readouterr().out


def test_command_plots_serialized_schedule_from_json(tmp_path):
    config = tmp_path / "schedule.json"
    config.write_text(json.dumps(keras.optimizers.schedules.serialize(MultiPhaseSchedule(PHASES))))
    output = tmp_path / "schedule.png"
    assert (
        main([str(output), "--config", str(config), "--total-steps", "120", "--num-points", "20"])
        == 0
    )
    assert_png(output)


def test_command_builds_warmup_polynomial_decay_from_flags(tmp_path, monkeypatch):
    plotted = {}

    def record(schedule, output_path, total_steps, num_points, title):
        plotted.update(config=schedule.get_config(), total_steps=total_steps, title=title)

    monkeypatch.setattr("keras_largebatch.plot_schedule.__main__.plot_schedule", record)
    argv = [
        "out.png",
        "--peak-learning-rate",
        "6e-3",
        "--total-steps",
        "7038",
        "--warmup-steps",
        "2000",
    ]
    assert main(argv + ["--power", "0.5", "--title", "phase 1"]) == 0
    assert plotted == {
        "config": {
            "peak_learning_rate": 6e-3,
            "total_steps": 7038,
            "warmup_steps": 2000,
            "end_learning_rate": 0.0,
            "power": 0.5,
        },
        "total_steps": 7038,
        "title": "phase 1",
    }


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["out.png"],
            "give --config, or all of --peak-learning-rate, --total-steps and --warmup-steps",
        ),
        (
            ["out.png", "--peak-learning-rate", "1e-3", "--total-steps", "10"],
            "give --config, or all of",
        ),
        (
            [
                "out.png",
                "--peak-learning-rate",
                "1e-3",
                "--total-steps",
                "10",
                "--warmup-steps",
                "20",
            ],
            "warmup_steps=20 >= total_steps=10",
        ),
        (["out.png", "--config", "missing.yaml"], "No such file or directory"),
    ],
)
def test_command_errors(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_command_rejects_config_without_schedule(tmp_path, capsys):
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump({"learning_rate": 1e-3}))
    with pytest.raises(SystemExit):
        main([str(tmp_path / "out.png"), "--config", str(config)])
    error = capsys.readouterr().err
    # Read as a pretraining config: the unknown key is named, with the keys that exist.
    assert "learning_rate" in error and "'phases'" in error
    with pytest.raises(SystemExit):
        main([str(tmp_path / "out.png"), "--config", str(config), "--warmup-steps", "3"])
    assert "give them or --config, not both" in capsys.readouterr().err


def test_command_plots_a_pretraining_config(tmp_path):
    # The pretraining recipes' phases carry data keys too (seq_length, global_batch_size, ...),
    # and a config may leave phase fields, or the phases, to their defaults.
    from pathlib import Path

    from keras_largebatch.plot_schedule import schedule_from_config
    from keras_largebatch.plot_schedule.__main__ import main

    config = Path(__file__).resolve().parents[1] / "tpu_configs" / "bert_large_lamb_nvidia.yaml"
    schedule = schedule_from_config(yaml.safe_load(config.read_text()))
    rates = [float(schedule(step)) for step in (1000, 2000, 7038, 7038 + 100, 7038 + 200)]
    assert rates == pytest.approx([3e-3, 6e-3, 0.0, 2e-3, 4e-3], abs=1e-9)
    # BERT's defaults: a peak of 1e-2 after 200 warmup steps.
    defaults = schedule_from_config({"model": {"size": "mini"}, "phases": [{"steps": 300}]})
    assert [float(defaults(step)) for step in (100, 200, 300)] == pytest.approx([5e-3, 1e-2, 0.0])
    output = tmp_path / "lr.png"
    assert main([str(output), "--config", str(config)]) == 0
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
