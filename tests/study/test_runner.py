"""The study end to end on tiny Fashion-MNIST files: the ledger, the report and the plots it
writes, the page's report block, the report again from the ledger alone, and bad input
refused before any training."""

import csv
import dataclasses
import sys

import matplotlib.image
import pytest

from keras_largebatch.study import __main__ as command
from keras_largebatch.study import analysis, ledger, protocol, report
from keras_largebatch.study import config as config_lib
from keras_largebatch.study.runner import run_study
from tests.study import fake_trials
from tests.support.fashion_mnist_files import write_fashion_mnist
from tests.support.runs import ROOT

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PAGE = f"# The study\n\nBefore `{report.BEGIN}`.\n\n{report.BEGIN}\nold\n{report.END}\n\nAfter.\n"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fashion_mnist")
    write_fashion_mnist(directory, num_train=256, num_test=100)
    return str(directory)


@pytest.fixture(scope="module")
def tiny_study(data_dir, tmp_path_factory):
    # Two optimizers of one pair: every part of the report has something to show.
    output_dir = tmp_path_factory.mktemp("study")
    page = output_dir.parent / "page.md"
    page.write_text(PAGE)
    config = config_lib.preset("tiny", data_dir=data_dir, optimizers=["adamw", "lamb"])
    return config, output_dir, page, run_study(config, str(output_dir), page=str(page))


def test_the_ledger_holds_every_trial_the_protocol_asked_for(tiny_study):
    config, output_dir, _, outcome = tiny_study
    with open(output_dir / ledger.LEDGER, newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert list(rows[0]) == list(ledger.COLUMNS)
    assert len(rows) == outcome.trials_trained and outcome.trials_skipped == 0
    by_key = {row["key"]: row for row in outcome.rows}
    for batch_size in config.batch_sizes:
        for optimizer in config.optimizers:
            progress = protocol.walk_cell(config, optimizer, batch_size, by_key)
            assert progress.pending == [] and len(progress.confirmations) == config.seeds
    for row in outcome.rows:
        confirmation = row["phase"] == protocol.CONFIRMATION
        # The test set only for the selected settings, at the end of their budget.
        assert (row["test_accuracy"] is not None) == (confirmation and row["stop"] != "diverged")
        if row["stop"] == "budget":
            assert row["steps_trained"] == row["step_budget"] == row["curve"][-1][0]
        if row["stop"] == "target":
            assert not confirmation and row["curve"][-1][1] >= config.targets[-1]
    assert {len(row["settings"]) for row in outcome.rows} == {4}


def test_the_report_and_plots_are_written_and_the_page_gets_the_report(tiny_study):
    config, output_dir, page, outcome = tiny_study
    assert outcome.report_paths == [str(output_dir / name) for name in report.FILES] + [str(page)]
    summary = (output_dir / report.SUMMARY).read_text()
    assert "**LAMB against AdamW:" in summary and "**The claim is" in summary
    # One line per batch size in the steps and accuracy tables, one per cell in the last.
    assert summary.count("\n| 16 |") == 2 and summary.count("\n| 64 |") == 2
    assert len([line for line in summary.splitlines() if line.startswith("| LAMB | ")]) == 3
    for name in (report.STEPS_PLOT, report.ACCURACY_PLOT, report.NOISE_PLOT):
        assert (output_dir / name).read_bytes()[:8] == PNG_SIGNATURE
        assert matplotlib.image.imread(output_dir / name).shape[1] == 720
    text = page.read_text()
    before, block = text.split(f"\n{report.BEGIN}\n")
    block, after = block.split(f"{report.END}\n")
    assert before == f"# The study\n\nBefore `{report.BEGIN}`.\n" and after == "\nAfter.\n"
    # The page's copy links the plots relative to the page.
    prefix = f"{output_dir.name}/"
    assert (
        block.strip()
        == summary.replace("](steps_", f"]({prefix}steps_")
        .replace("](accuracy_", f"]({prefix}accuracy_")
        .replace("](noise_", f"]({prefix}noise_")
        .strip()
    )


def test_the_noise_scale_is_measured_along_the_smallest_batchs_best_runs(tiny_study):
    config, _, _, outcome = tiny_study
    cells, incomplete = analysis.results(config, outcome.rows)
    assert incomplete == []
    measured = analysis.noise_scales(cells, config)
    assert [item.optimizer for item in measured] == ["adamw", "lamb"]
    for item in measured:
        assert len(item.points) >= config.noise_scale_points and item.batch_size == 16
    assert all(row["noise_scale"] is None for row in outcome.rows if row["batch_size"] == 64)


def test_the_report_again_from_the_ledger_alone_is_the_same(tiny_study):
    _, output_dir, page, _ = tiny_study
    summary, text = (output_dir / report.SUMMARY).read_text(), page.read_text()
    (output_dir / report.SUMMARY).write_text("stale")
    page.write_text(PAGE)
    argv = ["--report-only", "--output-dir", str(output_dir), "--page", str(page)]
    assert command.main(argv) == 0
    assert (output_dir / report.SUMMARY).read_text() == summary and page.read_text() == text


def test_a_finished_study_started_again_trains_nothing(tiny_study):
    config, output_dir, _, first = tiny_study

    def refuse(*arguments):
        raise AssertionError("trained again")

    outcome = run_study(config, str(output_dir), run_trial=refuse)
    assert (outcome.trials_trained, outcome.trials_skipped) == (0, len(first.rows))


def _refuse(*arguments):
    raise AssertionError("training started")


@pytest.mark.parametrize(
    "overrides, error, message",
    [
        ({"optimizers": ["adam"]}, ValueError, r"optimizers must be one of \['sgd_momentum', "),
        ({"batch_sizes": [16, 256]}, ValueError, r"batch_sizes must be <= the 192 training"),
        ({"batch_sizes": [64, 32]}, ValueError, r"batch_sizes must be ascending.*\[64, 32\]"),
        ({"trials_per_cell": 6}, ValueError, r"trials_per_cell must be a power of 2.*got 6"),
        ({"seeds": 1.5}, TypeError, r"seeds must be an integer, got 1.5"),
        ({"primary_target": 0.3}, ValueError, r"primary_target must be one of \[0.15, 0.2, 0.25"),
        ({"targets": [0.2, 0.1]}, ValueError, r"targets must be ascending"),
        ({"train_examples": 1000}, ValueError, r"train_examples must be <= the 256 training"),
        (
            {"validation_examples": 256},
            ValueError,
            r"validation_examples must be in \[1, 255\] for 256 examples, got 256",
        ),
        (
            {"noise_scale_micro_batches": 13},
            ValueError,
            r"noise_scale_micro_batches=13 micro-batches of batch_sizes\[0\]=16 need 208",
        ),
        ({"data_dir": "nowhere"}, FileNotFoundError, r"\['train-labels-idx1-ubyte.gz', .*nowhere"),
    ],
)
def test_bad_input_is_refused_before_training(data_dir, tmp_path, overrides, error, message):
    config = dataclasses.replace(config_lib.PRESETS["tiny"], data_dir=data_dir)
    config = dataclasses.replace(config, **overrides)
    output_dir = tmp_path / "study"
    with pytest.raises(error, match=message):
        run_study(config, str(output_dir), run_trial=_refuse)
    assert not output_dir.exists()


def test_a_page_without_the_markers_is_refused_before_training(data_dir, tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"# Mine\n{report.END}\n{report.BEGIN}\n")  # in the wrong order
    config = config_lib.preset("tiny", data_dir=data_dir)
    with pytest.raises(ValueError, match=rf"{page} must hold the line"):
        run_study(config, str(tmp_path / "study"), run_trial=_refuse, page=str(page))
    assert page.read_text() == f"# Mine\n{report.END}\n{report.BEGIN}\n"
    assert not (tmp_path / "study").exists()


def test_other_settings_in_the_same_directory_are_refused_before_training(data_dir, tmp_path):
    config = config_lib.preset("tiny", data_dir=data_dir, noise_scale_points=0)
    run_study(config, str(tmp_path), run_trial=fake_trials.run_trial)
    rows = ledger.read_rows(tmp_path)
    other = dataclasses.replace(config, trials_per_cell=4)
    with pytest.raises(ledger.LedgerError, match=r"trials_per_cell: 2 there, 4 now"):
        run_study(other, str(tmp_path), run_trial=_refuse)
    # Another validation split is another experiment too.
    with pytest.raises(ledger.LedgerError, match=r"split_seed: 0 there, 1 now.*validation_split"):
        run_study(dataclasses.replace(config, split_seed=1), str(tmp_path), run_trial=_refuse)
    assert ledger.read_rows(tmp_path) == rows


def test_without_matplotlib_the_command_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    # As on an install without the study extra: importing matplotlib fails.
    package = sys.modules["keras_largebatch.study"]
    for name in ("runner", "report", "plots"):
        monkeypatch.delitem(sys.modules, f"keras_largebatch.study.{name}")
        monkeypatch.delattr(package, name)
    for name in ("matplotlib.backends.backend_agg", "matplotlib.figure"):
        monkeypatch.setitem(sys.modules, name, None)
    output_dir = tmp_path / "study"
    # Missing data too: were matplotlib not missed, the command would stop there, not train.
    argv = ["--preset", "tiny", "--data-dir", str(tmp_path / "none"), "--output-dir"]
    assert command.main([*argv, str(output_dir)]) == 2
    assert f'pip install -e "{ROOT}[study]"' in capsys.readouterr().err
    assert not output_dir.exists()


def test_the_command_names_the_bad_option_and_writes_nothing(tmp_path, capsys):
    output_dir = tmp_path / "study"
    assert command.main(["--output-dir", str(output_dir), "--preset", "huge"]) == 2
    assert "error: preset must be one of ['full', 'default', 'tiny'], got 'huge'" in (
        capsys.readouterr().err
    )
    assert command.main(["--output-dir", str(output_dir), "--batch-sizes", "64,0"]) == 2
    assert "batch_sizes must be in [1, inf], got 0" in capsys.readouterr().err
    assert command.main(["--output-dir", str(output_dir), "--trials-per-cell", "3"]) == 2
    assert "trials_per_cell must be a power of 2" in capsys.readouterr().err
    assert command.main(["--report-only", "--output-dir", str(output_dir)]) == 2
    assert "holds no study.json" in capsys.readouterr().err
    assert not output_dir.exists()


def test_a_partial_ledger_decides_nothing(tiny_study):
    # The criteria are stated over every batch size, so a report of a study still running says
    # how far it is and gives no verdict that the remaining cells could overturn.
    config, _, _, outcome = tiny_study
    rows = [row for row in outcome.rows if (row["optimizer"], row["batch_size"]) != ("lamb", 64)]
    cells, incomplete = analysis.results(config, rows)
    assert incomplete == [("lamb", 64)]
    fits = {}
    for name in config.optimizers:
        fit = analysis.fit_optimizer(cells, name, config.primary_target, config.bootstrap_samples)
        if fit is not None:
            fits[name] = fit
    verdicts = analysis.verdicts(cells, fits, config)
    text = report.markdown(
        config, cells, incomplete, fits, analysis.noise_scales(cells, config), verdicts
    )
    total = len(cells) + 1
    assert f"**The claim is not decided yet**: {len(cells)} of {total} cells are complete" in text
    assert "confirmed" not in text and "refuted" not in text
    assert "Not complete yet (left out above and below): LAMB at 64." in text
