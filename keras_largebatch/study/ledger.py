"""The study's ledger: one CSV row per finished trial, and the settings beside it.

A row is appended and flushed to disk as soon as its trial ends, so a killed study loses at
most the trial it was running; on start the rows say which trials to skip, and the protocol
(`keras_largebatch.study.protocol`) walks them to the same decisions. A study resumed with
other settings would mix two experiments in one table, so it is refused unless the caller
asks to start over.
"""

import ast
import csv
import io
import json
import math
import os

import numpy as np

from keras_largebatch import _files

LEDGER = "trials.csv"
SETTINGS = "study.json"

# Column -> how a CSV cell is read back ("" is None).
COLUMNS = {
    "key": str,  # optimizer/batch size/step budget/phase/index/seed: the trial's identity
    "phase": str,  # "search", "extension" or "confirmation"
    "optimizer": str,
    "batch_size": int,
    "step_budget": int,  # steps of the trial's budget (and of its schedule)
    "index": int,  # the trial's number within its phase
    "seed": int,  # of the weights and the data order
    "point": ast.literal_eval,  # the unit coordinates of its settings
    "settings": ast.literal_eval,  # {name: value}: the optimizer's settings
    "steps_trained": int,  # fewer than step_budget when it stopped early
    "stop": str,  # "target" (the last one), "diverged" or "budget"
    "curve": ast.literal_eval,  # [(step, validation accuracy, validation loss), ...]
    "test_accuracy": float,  # confirmation trials only, at the end of the budget
    "test_loss": float,
    # [(step, training loss, validation accuracy, B_simple, low, high), ...] (None: NaN) of
    # the smallest batch's confirmation with seed 0
    "noise_scale": ast.literal_eval,
    "seconds": float,  # wall time of the trial
}


class LedgerError(RuntimeError):
    """The output directory holds a study that this one must not continue or overwrite."""


def _plain(value, nested=False):
    """``value`` with NumPy scalars as Python numbers, lists as tuples, and (inside a list,
    tuple or dict) a NaN or infinite number as None, so that its ``repr`` reads back with
    `ast.literal_eval`."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (list, tuple)):
        return tuple(_plain(item, nested=True) for item in value)
    if isinstance(value, dict):
        return {key: _plain(item, nested=True) for key, item in value.items()}
    if nested and isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _format(value):
    value = _plain(value)
    if value is None:
        return ""
    if isinstance(value, tuple):
        # A curve reads back as a list of tuples, a point as a tuple.
        return repr(list(value)) if value and isinstance(value[0], tuple) else repr(value)
    if isinstance(value, (float, dict)):
        return repr(value)
    return str(value)


def _parse(row):
    return {
        column: (None if row[column] == "" else read(row[column]))
        for column, read in COLUMNS.items()
    }


def read_rows(output_dir):
    """The ledger's rows, typed (`COLUMNS`), or [] when there is none."""
    path = os.path.join(output_dir, LEDGER)
    if not os.path.exists(path):
        return []
    with open(path, newline="") as stream:
        return [_parse(row) for row in csv.DictReader(stream)]


def append_row(output_dir, row):
    """Appends ``row`` (a dict over `COLUMNS`; missing columns are empty) and forces it to
    disk, writing the header first into a new ledger."""
    path = os.path.join(output_dir, LEDGER)
    unknown = sorted(set(row) - set(COLUMNS))
    if unknown:
        raise ValueError(f"ledger rows have the columns {list(COLUMNS)}, got also {unknown}")
    line = io.StringIO()
    writer = csv.DictWriter(line, fieldnames=list(COLUMNS), lineterminator="\n")
    if not os.path.exists(path):
        writer.writeheader()
    writer.writerow({column: _format(row.get(column)) for column in COLUMNS})
    # One write of whole lines, so a kill leaves at most a partial last line.
    with open(path, "a", newline="") as stream:
        stream.write(line.getvalue())
        stream.flush()
        os.fsync(stream.fileno())


def _drop_partial_last_line(path):
    """A study killed while appending leaves a last line without its newline: dropped, so
    the next row starts on a line of its own."""
    with open(path, "rb") as stream:
        content = stream.read()
    if content and not content.endswith(b"\n"):
        _files.write_bytes(path, content[: content.rfind(b"\n") + 1])
        return True
    return False


def read_settings(output_dir):
    """The settings stored in ``output_dir``. Raises `LedgerError` when there are none."""
    path = os.path.join(output_dir, SETTINGS)
    if not os.path.exists(path):
        raise LedgerError(f"{output_dir} holds no {SETTINGS}: not a study's output directory")
    with open(path) as stream:
        return json.load(stream)


def prepare(output_dir, settings, overwrite=False, report_files=()):
    """Makes ``output_dir`` ready for the study of ``settings`` (a dict of JSON values):

    - no ledger or settings there: writes the settings, returns [];
    - the same settings: returns the rows written so far, to be skipped;
    - other settings, a ledger without its settings file, or (with no settings file) any of
      ``report_files`` (names the study will write there): raises `LedgerError`, unless
      ``overwrite``: the ledger and settings files are then replaced and the report files
      will be (files the study does not write are left alone).

    Returns ``(rows, notes)``: the typed rows and lines that say what was done.
    """
    os.makedirs(output_dir, exist_ok=True)
    ledger_path = os.path.join(output_dir, LEDGER)
    settings_path = os.path.join(output_dir, SETTINGS)
    settings = json.loads(json.dumps(settings))
    notes = []
    present = [name for name in report_files if os.path.exists(os.path.join(output_dir, name))]
    if present and not os.path.exists(settings_path):
        if not overwrite:
            raise LedgerError(
                f"{output_dir} holds {present} but no {SETTINGS}: the study would replace "
                "files it did not write. Choose another output directory, or pass overwrite"
            )
        notes.append(f"overwrite: {present} in {output_dir} will be replaced")
    if os.path.exists(settings_path) or os.path.exists(ledger_path):
        stored = None
        if os.path.exists(settings_path):
            with open(settings_path) as stream:
                stored = json.load(stream)
        if stored == settings:
            if os.path.exists(ledger_path) and _drop_partial_last_line(ledger_path):
                notes.append(f"dropped a partly written last row of {ledger_path}")
            return read_rows(output_dir), notes
        if not overwrite:
            raise LedgerError(_mismatch(output_dir, stored, settings))
        for path in (ledger_path, settings_path):
            if os.path.exists(path):
                os.remove(path)
                notes.append(f"overwrite: removed {path}")
    _files.write_text(settings_path, json.dumps(settings, indent=2) + "\n")
    return [], notes


def check_settings(output_dir, settings, partial=False):
    """Raises `LedgerError` unless ``output_dir`` holds a study of ``settings`` (``partial``:
    of those settings, whatever else it holds); reads only."""
    stored = read_settings(output_dir)
    settings = json.loads(json.dumps(settings))
    compared = {key: stored.get(key) for key in settings} if partial else stored
    if compared != settings:
        raise LedgerError(_mismatch(output_dir, compared, settings))


def _mismatch(output_dir, stored, settings):
    if stored is None:
        return (
            f"{output_dir} holds {LEDGER} but no {SETTINGS}: not a ledger this study wrote. "
            "Choose another output directory, or pass overwrite to replace it"
        )
    differences = ", ".join(
        f"{key}: {stored.get(key)!r} there, {settings.get(key)!r} now"
        for key in sorted(set(stored) | set(settings))
        if stored.get(key) != settings.get(key)
    )
    return (
        f"{output_dir} holds a study with other settings ({differences}); resuming would mix "
        "two experiments. Use the same settings, another output directory, or pass "
        "overwrite to start over there"
    )
