"""The study end to end on tiny Fashion-MNIST files: the ledger and plots it writes, resume
after a kill, divergence in a real trial, and bad input refused before any training."""

import csv
import dataclasses
import os
import sys

import matplotlib.image
import numpy as np
import pytest

from keras_largebatch.study import __main__ as command
from keras_largebatch.study import config as config_lib
from keras_largebatch.study import grid, ledger, report, trial
from keras_largebatch.study.data import load
from keras_largebatch.study.runner import run_study
from tests.support.fashion_mnist_files import write_fashion_mnist

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fashion_mnist")
    write_fashion_mnist(directory, num_train=256, num_test=100)
    return str(directory)


@pytest.fixture(scope="module")
def tiny_study(data_dir, tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("study")
    config = config_lib.preset("tiny", data_dir=data_dir)
    return config, output_dir, run_study(config, str(output_dir))


def test_the_tiny_preset_writes_one_row_per_trial(tiny_study):
    config, output_dir, outcome = tiny_study
    with open(output_dir / ledger.LEDGER, newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert list(rows[0]) == list(ledger.COLUMNS)
    trials = [row for row in rows if row["kind"] == "trial"]
    assert len(trials) == 4 * 2 * 2 == outcome.trials_trained
    assert outcome.trials_skipped == 0
    assert {
        (r["optimizer"], int(r["batch_size"]), int(r["learning_rate_index"])) for r in trials
    } == {t.key() for t in grid.trials(config)}
    for row in ledger.read_rows(output_dir)[1:]:
        # 256 images: 16 steps per epoch at batch 16, 4 at 64; two evaluations per epoch.
        assert row["total_steps"] == 256 // row["batch_size"]
        steps = [step for step, _ in row["test_accuracy_curve"]]
        assert steps == ([8, 16] if row["batch_size"] == 16 else [2, 4])
        assert not row["diverged"] and row["steps_trained"] == row["total_steps"]
        assert 0 <= row["final_test_accuracy"] <= 1
        assert row["final_test_accuracy"] == row["test_accuracy_curve"][-1][1]
        reached = [step for step, accuracy in row["test_accuracy_curve"] if accuracy >= 0.25]
        assert row["steps_to_target"] == (reached[0] if reached else None)
    # Some trials reach the target, some do not: both branches are exercised.
    assert {row["steps_to_target"] is None for row in ledger.read_rows(output_dir)[1:]} == {
        True,
        False,
    }


def test_the_noise_scale_is_measured_once_at_the_smallest_batch(tiny_study):
    _, output_dir, outcome = tiny_study
    noise_rows = [row for row in outcome.rows if row["kind"] == "noise_scale"]
    assert len(noise_rows) == 1
    assert noise_rows[0]["batch_size"] == 16 and noise_rows[0]["optimizer"] == "lamb"
    assert np.isfinite(noise_rows[0]["gradient_noise_scale"])
    assert report.noise_scale(outcome.rows) == (noise_rows[0]["gradient_noise_scale"], 16)


def test_the_table_and_plots_are_written(tiny_study):
    _, output_dir, outcome = tiny_study
    assert outcome.report_paths == [
        str(output_dir / name) for name in (report.SUMMARY, report.ACCURACY_PLOT, report.STEPS_PLOT)
    ]
    table = (output_dir / report.SUMMARY).read_text().splitlines()
    # A header, its rule, then one line per (optimizer, batch size).
    assert len([line for line in table if line.startswith("|")]) == 2 + 4 * 2
    assert "Gradient noise scale B_simple at batch 16" in table[-1]
    for name in (report.ACCURACY_PLOT, report.STEPS_PLOT):
        assert (output_dir / name).read_bytes()[:8] == PNG_SIGNATURE
        assert matplotlib.image.imread(output_dir / name).shape[:2] == (440, 640)


def test_the_best_cell_ignores_diverged_trials():
    base = {"kind": "trial", "optimizer": "lars", "batch_size": 64, "diverged": False}
    rows = [
        dict(base, final_test_accuracy=0.8, learning_rate=1.0, steps_to_target=40),
        dict(base, final_test_accuracy=0.7, learning_rate=2.0, steps_to_target=20),
        dict(base, final_test_accuracy=None, learning_rate=4.0, steps_to_target=10, diverged=True),
    ]
    (cell,) = report.cells(rows)
    assert cell.best_test_accuracy == 0.8 and cell.best_learning_rate == 1.0
    # A trial that reached the target before diverging did reach it.
    assert cell.steps_to_target == 10 and (cell.trials, cell.diverged) == (3, 1)


def test_a_killed_study_resumes_where_it_stopped(data_dir, tmp_path):
    config = config_lib.preset("tiny", data_dir=data_dir, optimizers=["sgd_nesterov", "lamb"])
    trained = []

    def killed_after_three(trial_to_run, *arguments):
        if len(trained) == 3:
            raise KeyboardInterrupt
        trained.append(trial_to_run.key())
        return trial.run_trial(trial_to_run, *arguments)

    with pytest.raises(KeyboardInterrupt):
        run_study(config, str(tmp_path), run_trial=killed_after_three)
    assert len(ledger.read_rows(tmp_path)) == 1 + 3

    resumed = []

    def counted(trial_to_run, *arguments):
        resumed.append(trial_to_run.key())
        return trial.run_trial(trial_to_run, *arguments)

    def not_again(*arguments):
        raise AssertionError("the noise scale was measured again")

    outcome = run_study(config, str(tmp_path), run_trial=counted, measure_noise_scale=not_again)
    all_trials = [t.key() for t in grid.trials(config)]
    assert trained == all_trials[:3] and resumed == all_trials[3:]
    assert (outcome.trials_trained, outcome.trials_skipped) == (5, 3)
    rows = outcome.rows
    assert [
        (r["optimizer"], r["batch_size"], r["learning_rate_index"]) for r in rows[1:]
    ] == all_trials


def test_a_trial_with_a_huge_rate_diverges_and_stops_early(data_dir):
    config = config_lib.preset("tiny", data_dir=data_dir, evaluations_per_epoch=4)
    data = load(data_dir, 256)
    row = trial.run_trial(grid.Trial("sgd_nesterov", 16, 0, 1e4), config, data)
    assert row["diverged"] and row["final_test_accuracy"] is None
    assert row["steps_trained"] < row["total_steps"] == 16


def _refuse(*arguments):
    raise AssertionError("training started")


@pytest.mark.parametrize(
    "overrides, error, message",
    [
        ({"optimizers": ["adam"]}, ValueError, r"optimizers must be one of \['sgd_nesterov', "),
        ({"batch_sizes": [16, 512]}, ValueError, r"batch_sizes must be <= the 256 training"),
        ({"batch_sizes": [64, 32]}, ValueError, r"batch_sizes must be ascending.*\[64, 32\]"),
        ({"epochs": 0}, ValueError, r"epochs must be in \[1, inf\], got 0"),
        ({"epochs": 1.5}, TypeError, r"epochs must be an integer, got 1.5"),
        ({"target_accuracy": 1.2}, ValueError, r"target_accuracy must be in \[0, 1\], got 1.2"),
        ({"train_examples": 1000}, ValueError, r"train_examples must be <= the 256 training"),
        (
            {"scaling_rules": {"lars": "cubic"}},
            ValueError,
            r"scaling_rules\['lars'\] must be one of \['sqrt', 'linear'\], got 'cubic'",
        ),
        (
            {"optimizers": ["lamb"], "scaling_rules": {"lars": "sqrt"}},
            ValueError,
            r"scaling_rules must be one of \['lamb'\], got 'lars'",
        ),
        ({"data_dir": "nowhere"}, FileNotFoundError, r"\['train-labels-idx1-ubyte.gz', .*nowhere"),
    ],
)
def test_bad_input_is_refused_before_training(data_dir, tmp_path, overrides, error, message):
    config = dataclasses.replace(config_lib.PRESETS["tiny"], data_dir=data_dir)
    config = dataclasses.replace(config, **overrides)
    output_dir = tmp_path / "study"
    with pytest.raises(error, match=message):
        run_study(config, str(output_dir), run_trial=_refuse, measure_noise_scale=_refuse)
    assert not output_dir.exists()


def test_other_settings_in_the_same_directory_are_refused_before_training(data_dir, tmp_path):
    config = config_lib.preset("tiny", data_dir=data_dir)
    ledger.prepare(str(tmp_path), dataclasses.replace(config, epochs=2).settings())
    with pytest.raises(ledger.LedgerError, match=r"epochs: 2 there, 1 now"):
        run_study(config, str(tmp_path), run_trial=_refuse, measure_noise_scale=_refuse)
    assert sorted(os.listdir(tmp_path)) == [ledger.SETTINGS]


def test_without_matplotlib_the_command_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    # As on an install without the study extra: importing matplotlib fails.
    package = sys.modules["keras_largebatch.study"]
    for name in ("runner", "report"):
        monkeypatch.delitem(sys.modules, f"keras_largebatch.study.{name}")
        monkeypatch.delattr(package, name)
    for name in ("matplotlib.backends.backend_agg", "matplotlib.figure"):
        monkeypatch.setitem(sys.modules, name, None)
    output_dir = tmp_path / "study"
    assert command.main(["--output-dir", str(output_dir)]) == 2
    assert "pip install 'keras-largebatch[study]'" in capsys.readouterr().err
    assert not output_dir.exists()


def test_the_command_names_the_bad_option_and_writes_nothing(tmp_path, capsys):
    output_dir = tmp_path / "study"
    assert command.main(["--output-dir", str(output_dir), "--preset", "huge"]) == 2
    assert "error: preset must be one of ['default', 'large', 'tiny'], got 'huge'" in (
        capsys.readouterr().err
    )
    assert command.main(["--output-dir", str(output_dir), "--batch-sizes", "64,0"]) == 2
    assert "batch_sizes must be in [1, inf], got 0" in capsys.readouterr().err
    assert command.main(["--output-dir", str(output_dir), "--scaling-rules", "lars=cube"]) == 2
    assert "scaling_rules['lars'] must be one of ['sqrt', 'linear'], got 'cube'" in (
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        command.main(["--output-dir", str(output_dir), "--scaling-rules", "lars"])
    assert "expected OPTIMIZER=RULE" in capsys.readouterr().err
    assert not output_dir.exists()


def test_a_ledger_from_other_starting_rates_is_refused_before_training(data_dir, tmp_path):
    config = config_lib.preset("tiny", data_dir=data_dir, noise_scale_epochs=0.0)
    ledger.prepare(str(tmp_path), config.settings())
    first = grid.trials(config)[0]
    ledger.append_row(
        str(tmp_path),
        {
            "kind": "trial",
            "optimizer": first.optimizer,
            "batch_size": first.batch_size,
            "learning_rate_index": first.learning_rate_index,
            "learning_rate": 2 * first.learning_rate,
            "diverged": False,
        },
    )
    with pytest.raises(ledger.LedgerError, match=r"ran at learning rate .* grid gives"):
        run_study(config, str(tmp_path), run_trial=_refuse, measure_noise_scale=_refuse)
    assert len(ledger.read_rows(str(tmp_path))) == 1
