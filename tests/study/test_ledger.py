"""The ledger: rows read back as written, a partly written last row dropped, and a study with
other settings refused (or replaced when asked)."""

import json
import os

import numpy as np
import pytest

from keras_largebatch.study import ledger

ROW = {
    "key": "lamb/64/300/search/1/0",
    "phase": "search",
    "optimizer": "lamb",
    "batch_size": 64,
    "step_budget": 300,
    "index": 1,
    "seed": 0,
    "point": (0.25, 0.5, 0.75, 0.1, 0.9),
    "settings": {"learning_rate": 0.01, "beta_2": 0.999, "bias_adaptation": True},
    "steps_trained": 20,
    "stop": "target",
    "curve": [(10, 0.5, 1.25), (20, 0.875, 0.5)],
    "test_accuracy": None,
    "test_loss": None,
    "noise_scale": None,
    "seconds": 1.5,
}


def test_rows_read_back_as_written(tmp_path):
    assert ledger.prepare(tmp_path, {"epochs": 2}) == ([], [])
    ledger.append_row(tmp_path, ROW)
    measured = dict(
        ROW,
        phase="confirmation",
        test_accuracy=0.8125,
        noise_scale=[(10, 1.5, 0.5, 480.5, np.float64(300.0), float("nan"))],
    )
    ledger.append_row(tmp_path, measured)
    rows = ledger.read_rows(tmp_path)
    assert rows[0] == ROW
    # NumPy numbers read back as Python's, and a NaN inside a list as None.
    assert rows[1]["noise_scale"] == [(10, 1.5, 0.5, 480.5, 300.0, None)]
    assert rows[1]["test_accuracy"] == 0.8125 and rows[1]["test_loss"] is None
    with open(tmp_path / ledger.LEDGER) as stream:
        assert stream.readline().strip() == ",".join(ledger.COLUMNS)
    with pytest.raises(ValueError, match=r"got also \['step'\]"):
        ledger.append_row(tmp_path, {"step": 1})


def test_the_same_settings_resume_and_a_partial_row_is_dropped(tmp_path):
    ledger.prepare(tmp_path, {"epochs": 2})
    ledger.append_row(tmp_path, ROW)
    with open(tmp_path / ledger.LEDGER, "a") as stream:
        stream.write("lamb/64/300/search/2/0,search,lamb,64")  # killed in the middle of a row
    rows, notes = ledger.prepare(tmp_path, {"epochs": 2})
    assert rows == [ROW] and "partly written" in notes[0]
    ledger.append_row(tmp_path, dict(ROW, index=2))
    assert [row["index"] for row in ledger.read_rows(tmp_path)] == [1, 2]


def test_other_settings_are_refused_unless_overwrite_is_asked(tmp_path):
    ledger.prepare(tmp_path, {"epochs": 2, "seed": 0})
    ledger.append_row(tmp_path, ROW)
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ledger.LedgerError, match=r"epochs: 2 there, 3 now.*overwrite"):
        ledger.prepare(tmp_path, {"epochs": 3, "seed": 0})
    assert len(ledger.read_rows(tmp_path)) == 1
    rows, notes = ledger.prepare(tmp_path, {"epochs": 3, "seed": 0}, overwrite=True)
    assert rows == [] and not os.path.exists(tmp_path / ledger.LEDGER)
    assert any("removed" in note for note in notes)
    assert json.loads((tmp_path / ledger.SETTINGS).read_text()) == {"epochs": 3, "seed": 0}
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_csv_without_its_settings_is_not_taken_for_a_ledger(tmp_path):
    (tmp_path / ledger.LEDGER).write_text("a,b\n1,2\n")
    with pytest.raises(ledger.LedgerError, match="no study.json"):
        ledger.prepare(tmp_path, {"epochs": 2})
    assert (tmp_path / ledger.LEDGER).read_text() == "a,b\n1,2\n"


def test_files_of_the_same_names_as_the_report_are_not_replaced_silently(tmp_path):
    (tmp_path / "summary.md").write_text("mine")
    with pytest.raises(ledger.LedgerError, match=r"\['summary.md'\] but no study.json"):
        ledger.prepare(tmp_path, {"epochs": 2}, report_files=["summary.md", "plot.png"])
    assert sorted(os.listdir(tmp_path)) == ["summary.md"]
    rows, notes = ledger.prepare(
        tmp_path, {"epochs": 2}, overwrite=True, report_files=["summary.md", "plot.png"]
    )
    assert rows == [] and "will be replaced" in notes[0]
    # Once the study owns the directory, its own report is rewritten on resume.
    assert ledger.prepare(tmp_path, {"epochs": 2}, report_files=["summary.md"]) == ([], [])


def test_the_settings_are_read_back(tmp_path):
    with pytest.raises(ledger.LedgerError, match="holds no study.json"):
        ledger.read_settings(tmp_path)
    ledger.prepare(tmp_path, {"epochs": 2})
    assert ledger.read_settings(tmp_path) == {"epochs": 2}
