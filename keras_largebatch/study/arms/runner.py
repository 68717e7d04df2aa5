"""An arm end to end: check everything, walk the protocol through the trials the ledger does
not hold yet (the pilot, then the main cells it sets), write the report."""

import os
import time
from typing import NamedTuple

from keras_largebatch import _checks, _files
from keras_largebatch._logging import ProgressLog
from keras_largebatch.study import ledger
from keras_largebatch.study.arms import analysis, measures, noise_scale, report
from keras_largebatch.study.arms.config import ArmConfig, make_workload

_progress = ProgressLog("study")


class ArmOutcome(NamedTuple):
    """What a call of `run_arm` did: where the arm stands, the trials it trained, and the
    report's files."""

    state: analysis.ArmState
    trials_trained: int
    report_paths: list


def _rows_by_key(output_dir):
    return {row["key"]: row for row in ledger.read_rows(output_dir)}


def ledger_settings(config, workload, data):
    """What the ledger's settings file holds: the arm's settings, the workload's, and the
    data's fingerprint and size (a resumed arm must share them)."""
    return dict(
        config.settings(),
        workload_settings=workload.settings(),
        data=data.fingerprint,
        train_examples=data.train_examples,
    )


def run_arm(
    config,
    output_dir,
    overwrite=False,
    run_trial=None,
    page=None,
    max_trials=None,
    workload=None,
    noise=True,
):
    """Runs ``config``'s arm (an `ArmConfig`) into ``output_dir``, continuing its ledger
    (``overwrite`` starts over when the settings differ), then writes the report and, with
    ``page``, the page's block for this arm (`update_page`). ``run_trial(trial, config,
    workload, data)`` defaults to `trial.run_trial`; ``max_trials`` stops after that many
    trials (the rest on the next call); ``workload`` defaults to the arm's
    (`config.make_workload`). With ``noise``, a complete arm then measures its noise scale
    (`noise_scale.measure`, once; a fake workload has no model to measure). Every check runs
    before the first trial."""
    config.validate()
    if max_trials is not None:
        _checks.check_integer("max_trials", max_trials, low=0)
    if page is not None:
        check_page(page, config.arm)
    workload = workload or make_workload(config)
    data = workload.load()
    if config.batch_sizes is not None and config.batch_sizes[-1] > data.train_examples:
        raise ValueError(
            f"batch_sizes must be <= the {data.train_examples} training examples, got "
            f"{config.batch_sizes[-1]}"
        )
    if config.pilot_batch_sizes[-1] > data.train_examples:
        raise ValueError(
            f"pilot_batch_sizes must be <= the {data.train_examples} training examples, got "
            f"{config.pilot_batch_sizes[-1]}"
        )
    if run_trial is None:
        from keras_largebatch.study.arms.trial import run_trial
    rows, notes = ledger.prepare(
        output_dir,
        ledger_settings(config, workload, data),
        overwrite,
        report_files=report.FILES + (noise_scale.NOISE_FILE,),
    )
    for note in notes:
        _progress(note)
    by_key = {row["key"]: row for row in rows}
    metric = workload.metric
    trained = 0
    started = time.perf_counter()
    complete = False
    while max_trials is None or trained < max_trials:
        state = analysis.arm_state(config, by_key, metric, data.train_examples, interval=False)
        trial = state.next_trial()
        if trial is None:
            complete = True
            break
        _progress(
            f"{config.arm} {trial.stage} {trial.optimizer} batch {trial.batch_size}: "
            f"{trial.phase} {trial.index} seed {trial.seed} "
            f"({time.perf_counter() - started:.0f} s so far)"
        )
        row = run_trial(trial, config, workload, data)
        ledger.append_row(output_dir, row)
        by_key[row["key"]] = row
        trained += 1
        reached = measures.steps_to_target(row["curve"], config.target, metric)
        _progress(
            f"  {row['stop']} after {row['steps_trained']} steps; target "
            f"{'at step ' + str(reached) if reached else 'not reached'} ({row['seconds']:.0f} s)"
        )
    if noise and complete and noise_scale.read(output_dir) is None:
        _progress(f"{config.arm}: the noise scale at batch {config.pilot_batch_sizes[0]:,}")
        measured = noise_scale.measure(config, output_dir, workload=workload)
        _progress(f"  {measured['seconds']:.0f} s")
    state = analysis.arm_state(config, by_key, metric, data.train_examples)
    paths = report.write_report(config, state, metric, output_dir)
    if page is not None:
        update_page(page, config, state, metric, output_dir)
        paths.append(page)
    return ArmOutcome(state, trained, paths)


def report_only(output_dir, page=None):
    """Writes the report of the arm in ``output_dir`` from its ledger and settings alone."""
    settings = ledger.read_settings(output_dir)
    settings.pop("workload_settings")
    settings.pop("data")
    train_examples = settings.pop("train_examples")
    config = ArmConfig(**settings).validate()
    metric = make_workload(config).metric
    state = analysis.arm_state(config, _rows_by_key(output_dir), metric, train_examples)
    paths = report.write_report(config, state, metric, output_dir)
    if page is not None:
        update_page(page, config, state, metric, output_dir)
        paths.append(page)
    return paths


def _markers(arm):
    return f"<!-- study-arm {arm}: begin -->", f"<!-- study-arm {arm}: end -->"


def check_page(page, arm):
    """Raises unless the Markdown file ``page`` holds this arm's begin marker once and its
    end marker once after it; returns its lines."""
    begin, end = _markers(arm)
    with open(page) as stream:
        lines = stream.read().splitlines(keepends=True)
    begins = [i for i, line in enumerate(lines) if line.strip() == begin]
    ends = [i for i, line in enumerate(lines) if line.strip() == end]
    if len(begins) != 1 or len(ends) != 1 or begins[0] > ends[0]:
        raise ValueError(
            f"{page} must hold the line {begin!r} once and, after it, the line {end!r} once; "
            "the arm's report goes between them"
        )
    return lines, begins[0], ends[0]


def update_page(page, config, state, metric, output_dir):
    """Replaces this arm's block of ``page`` by its report, with the plots in ``output_dir``
    linked from the page."""
    lines, begin, end = check_page(page, config.arm)
    text = report.markdown(config, state, metric, noise_scale.read(output_dir)) + report.plot_links(
        config, output_dir, os.path.dirname(os.path.abspath(page))
    )
    _files.write_text(page, "".join(lines[: begin + 1]) + text + "".join(lines[end:]))


def default_output_dir(arm, preset):
    """Where an arm writes when no ``--output-dir`` is given."""
    return os.path.join("runs", f"study-{arm}-{preset}")
