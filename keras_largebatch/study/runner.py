"""The whole study: check everything, measure the noise scale, run the trials the ledger does
not hold yet, write the table and the plots."""

import math
import time
from typing import NamedTuple

from keras_largebatch._logging import ProgressLog
from keras_largebatch.study import data as data_lib
from keras_largebatch.study import grid, ledger, report
from keras_largebatch.study.noise import measure_noise_scale as _measure_noise_scale
from keras_largebatch.study.trial import run_trial as _run_trial


class StudyOutcome(NamedTuple):
    """What a call of `run_study` did."""

    rows: list  # the ledger's rows at the end, typed
    trials_trained: int  # trials this call trained
    trials_skipped: int  # trials the ledger already held
    report_paths: list  # the summary table and the plots


def _duration(seconds):
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes}m {seconds:02d}s" if minutes else f"{seconds}s"


def run_study(config, output_dir, overwrite=False, run_trial=None, measure_noise_scale=None):
    """Runs the study of ``config`` (a `StudyConfig`) into ``output_dir``, continuing the
    ledger there (`ledger.prepare`; ``overwrite`` starts over when its settings differ).

    Every check (the settings, the data, the batch sizes against the data, the ledger's
    settings) runs before the first trial. ``run_trial(trial, config, data)`` and
    ``measure_noise_scale(config, data)`` default to `trial.run_trial` and
    `noise.measure_noise_scale`; each returns a ledger row. Progress goes to stderr.
    """
    config.validate()
    data = data_lib.load(config.data_dir, config.train_examples)
    config.check_batch_sizes(len(data.train_images))
    run_trial = run_trial or _run_trial
    measure_noise_scale = measure_noise_scale or _measure_noise_scale
    rows, notes = ledger.prepare(
        output_dir, config.settings(), overwrite, report_files=report.FILES
    )
    for note in notes:
        _progress(note)
    planned = grid.trials(config)
    done = _finished_trials(rows, planned)
    if config.noise_scale_epochs and not any(row["kind"] == "noise_scale" for row in rows):
        _progress(f"measuring the gradient noise scale at batch {config.batch_sizes[0]}")
        row = measure_noise_scale(config, data)
        ledger.append_row(output_dir, row)
        _progress(f"B_simple = {row['gradient_noise_scale']:.4g} examples")
    pending = [trial for trial in planned if trial.key() not in done]
    if len(pending) < len(planned):
        _progress(f"resuming: {len(planned) - len(pending)} of {len(planned)} trials done")
    started = time.perf_counter()
    for number, trial in enumerate(pending, start=1):
        left = ""
        if number > 1:
            per_trial = (time.perf_counter() - started) / (number - 1)
            left = f", about {_duration(per_trial * (len(pending) - number + 1))} left"
        _progress(
            f"trial {len(planned) - len(pending) + number}/{len(planned)}: {trial.optimizer} "
            f"batch {trial.batch_size} lr {trial.learning_rate:.4g} "
            f"({trial.learning_rate_index + 1}/{config.learning_rates_per_cell}){left}"
        )
        row = run_trial(trial, config, data)
        ledger.append_row(output_dir, row)
        _progress(_trial_result(row))
    rows = ledger.read_rows(output_dir)
    paths = report.write_report(rows, output_dir, config.target_accuracy)
    _progress(f"done: {len(pending)} trials trained; {', '.join(paths)}")
    return StudyOutcome(rows, len(pending), len(planned) - len(pending), paths)


def _finished_trials(rows, planned):
    """The keys of the trials ``rows`` hold. Raises `ledger.LedgerError` when a row's rate is
    not the one the grid now gives it: the optimizers' start points changed since the ledger
    was written, which its settings file does not record."""
    rates = {trial.key(): trial.learning_rate for trial in planned}
    done = set()
    for row in rows:
        if row["kind"] != "trial":
            continue
        key = (row["optimizer"], row["batch_size"], row["learning_rate_index"])
        if key in rates and not math.isclose(row["learning_rate"], rates[key], rel_tol=1e-9):
            raise ledger.LedgerError(
                f"the ledger's trial {key} ran at learning rate {row['learning_rate']!r}, this "
                f"study's grid gives {rates[key]!r}: the starting points changed; use another "
                "output directory, or pass overwrite to start over"
            )
        done.add(key)
    return done


def _trial_result(row):
    if row["diverged"]:
        return f"  diverged after {row['steps_trained']} of {row['total_steps']} steps"
    steps = row["steps_to_target"]
    reached = "target not reached" if steps is None else f"target at step {steps}"
    return (
        f"  test accuracy {row['final_test_accuracy']:.4f} after {row['total_steps']} steps, "
        f"{reached} ({_duration(row['seconds'])})"
    )


_progress = ProgressLog("study")
