"""The wall-time estimate: the protocol's trials counted by hand, and the measurement and the
command on tiny files."""

import pytest

from keras_largebatch.study import __main__ as command
from keras_largebatch.study import config as config_lib
from keras_largebatch.study import estimate
from keras_largebatch.study.data import load
from tests.support.fashion_mnist_files import write_fashion_mnist


def test_the_trials_are_counted_as_the_protocol_runs_them():
    # tiny: budgets 48 and 12 steps, 4 evaluations, 2 trials, 1 beyond an edge, 2 seeds.
    config = config_lib.preset("tiny")
    speed = estimate.Speed({16: 160.0, 64: 640.0}, {16: 1.0, 64: 1.0}, evaluation_seconds=0.5)
    # 48 * 16 / 160 + 4 * 0.5 + 1 = 7.8 s; at 64: 12 * 64 / 640 + 3 = 4.2 s.
    assert estimate.trial_seconds(config, speed, 16, 48) == pytest.approx(7.8)
    assert estimate.trial_seconds(config, speed, 64, 24) == pytest.approx(5.4)
    low, high = estimate.wall_time(config, speed, doubled_from=64)
    # 4 optimizers x (2 trials + 2 seeds) x (7.8 + 4.2).
    assert low == pytest.approx(192.0)
    # At 16: 4 x (3 + 2) x 7.8; at 64: 4 x (3 x 4.2 + (3 + 2) x 5.4), the budget doubled.
    assert high == pytest.approx(156.0 + 158.4)


def test_the_command_measures_and_prints_the_estimate(tmp_path, capsys):
    write_fashion_mnist(tmp_path, num_train=256, num_test=100)
    config = config_lib.preset("tiny", data_dir=str(tmp_path))
    speed = estimate.measure(config, load(str(tmp_path), 256, 64, 0), examples=128)
    assert sorted(speed.examples_per_second) == [16, 64]
    assert min(speed.examples_per_second.values()) > 0 and speed.evaluation_seconds > 0
    argv = ["--preset", "tiny", "--data-dir", str(tmp_path), "--estimate"]
    assert command.main(argv + ["--output-dir", str(tmp_path / "study")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("batch     16:") and lines[-1].startswith("about ")
    assert not (tmp_path / "study").exists()
