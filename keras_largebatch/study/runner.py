"""The whole study: check everything, walk every cell's protocol through the trials the
ledger does not hold yet, write the report."""

import time
from typing import NamedTuple

from keras_largebatch._logging import ProgressLog
from keras_largebatch.study import data as data_lib
from keras_largebatch.study import estimate as estimate_lib
from keras_largebatch.study import ledger, measures, protocol, report
from keras_largebatch.study.config import StudyConfig
from keras_largebatch.study.trial import run_trial as _run_trial


class StudyOutcome(NamedTuple):
    """What a call of `run_study` did."""

    rows: list  # the ledger's rows at the end, typed
    trials_trained: int  # trials this call trained
    trials_skipped: int  # trials the ledger already held
    report_paths: list  # the summary and the plots


def _duration(seconds):
    minutes, seconds = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {seconds:02d}s" if minutes else f"{seconds}s"


def ledger_settings(config, data):
    """What the ledger's settings file holds: the config's results-deciding fields and the
    fingerprint of the validation split."""
    return dict(config.settings(), validation_split=data.split_fingerprint)


def run_study(config, output_dir, overwrite=False, run_trial=None, page=None):
    """Runs the study of ``config`` (a `StudyConfig`) into ``output_dir``, continuing the
    ledger there (`ledger.prepare`; ``overwrite`` starts over when its settings differ), then
    writes the report (`report.write_report`) and, with ``page``, the page's report block
    (`report.update_page`).

    Every check (the settings, the data, the batch sizes against the data, the ledger's
    settings and points, the page's markers) runs before the first trial.
    ``run_trial(trial, config, data)`` defaults to `trial.run_trial` and returns a ledger
    row. Progress goes to stderr.
    """
    config.validate()
    data = _load(config)
    if page is not None:
        report.check_page(page)
    run_trial = run_trial or _run_trial
    rows, notes = ledger.prepare(
        output_dir, ledger_settings(config, data), overwrite, report_files=report.FILES
    )
    for note in notes:
        _progress(note)
    by_key = {row["key"]: row for row in rows}
    for batch_size in config.batch_sizes:
        for optimizer in config.optimizers:
            protocol.walk_cell(config, optimizer, batch_size, by_key)  # checks the points
    trained = 0
    started = time.perf_counter()
    cells = [(size, name) for size in config.batch_sizes for name in config.optimizers]
    for number, (batch_size, optimizer) in enumerate(cells, start=1):
        while True:
            progress = protocol.walk_cell(config, optimizer, batch_size, by_key)
            if not progress.pending:
                break
            for trial in progress.pending:
                _progress(
                    f"cell {number}/{len(cells)} {optimizer} batch {batch_size}: "
                    f"{trial.phase} {trial.index} seed {trial.seed}, budget "
                    f"{trial.step_budget} steps ({_duration(time.perf_counter() - started)} "
                    "so far)"
                )
                row = run_trial(trial, config, data)
                ledger.append_row(output_dir, row)
                by_key[row["key"]] = row
                trained += 1
                _progress(_trial_result(row, config))
    rows = ledger.read_rows(output_dir)
    paths, analysed = report.write_report(config, rows, output_dir)
    if page is not None:
        report.update_page(page, config, analysed, output_dir)
        paths.append(page)
    _progress(f"done: {trained} trials trained; {', '.join(paths)}")
    return StudyOutcome(rows, trained, len(rows) - trained, paths)


def report_only(output_dir, page=None):
    """Writes the report of the study in ``output_dir`` from its ledger and settings alone
    (no data, no training), and with ``page`` the page's report block; returns the paths."""
    settings = ledger.read_settings(output_dir)
    settings.pop("validation_split", None)
    config = StudyConfig(**settings).validate()
    if page is not None:
        report.check_page(page)
    paths, analysed = report.write_report(config, ledger.read_rows(output_dir), output_dir)
    if page is not None:
        report.update_page(page, config, analysed, output_dir)
        paths.append(page)
    return paths


def estimate(config, examples=None):
    """The lines saying how long ``config``'s study takes here (`estimate.measure`, then
    `estimate.wall_time`), after the same checks as `run_study`; trains only the
    measurement's steps."""
    config.validate()
    data = _load(config)
    speed = estimate_lib.measure(config, data, examples)
    return estimate_lib.describe(config, speed, *estimate_lib.wall_time(config, speed))


def _load(config):
    data = data_lib.load(
        config.data_dir, config.train_examples, config.validation_examples, config.split_seed
    )
    config.check_data(len(data.train_images))
    return data


def _trial_result(row, config):
    if row["stop"] == "diverged":
        return f"  diverged after {row['steps_trained']} of {row['step_budget']} steps"
    curve = row["curve"]
    reached = [
        f"{target:g} at {measures.steps_to_target(curve, target)}"
        for target in config.targets
        if measures.steps_to_target(curve, target) is not None
    ]
    text = (
        f"  validation accuracy {curve[-1][1]:.4f} at step {curve[-1][0]}; "
        f"{', '.join(reached) or 'no target reached'} ({_duration(row['seconds'])})"
    )
    if row["test_accuracy"] is not None:
        text += f"; test accuracy {row['test_accuracy']:.4f}"
    return text


_progress = ProgressLog("study")
