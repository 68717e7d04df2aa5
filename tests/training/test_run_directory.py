"""The run directory: claiming, refusing, overwriting, keep-N checkpoints, unreadable ones."""

import json
import os

import keras
import numpy as np
import pytest

from keras_largebatch.training.run_directory import RunDirectory, checkpoint_problem
from tests.support.toy_recipe import load


def _model(value):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.set_weights([np.full((2, 1), value, "float32"), np.zeros(1, "float32")])
    return model


def _save(run, model, global_step):
    return run.save_checkpoint(
        model, {"phase": 0, "step": global_step, "global_step": global_step, "complete": False}
    )


def test_claim_writes_the_config_and_refuses_another_runs_checkpoints(tmp_path):
    run = RunDirectory(load(tmp_path))
    assert run.claim() is None
    with open(tmp_path / "run_config.json") as stream:
        assert json.load(stream)["log_interval"] == 2
    _save(run, _model(1.0), 4)
    assert RunDirectory(load(tmp_path)).claim()["global_step"] == 4
    with pytest.raises(
        ValueError,
        match=r"holds a run with a different config \(differs at "
        r"\['phases.0.steps'\]\).*overwrite=true",
    ):
        RunDirectory(load(tmp_path, "phases.0.steps=8")).claim()


def test_a_run_recorded_before_a_config_section_existed_resumes_at_its_defaults(tmp_path):
    run = RunDirectory(load(tmp_path))
    run.claim()
    _save(run, _model(1.0), 4)
    state = json.loads((tmp_path / "checkpoints" / "state.json").read_text())
    del state["config"]["divergence"]
    (tmp_path / "checkpoints" / "state.json").write_text(json.dumps(state))
    assert RunDirectory(load(tmp_path)).claim()["global_step"] == 4
    with pytest.raises(ValueError, match=r"differs at \['divergence.action'\]"):
        RunDirectory(load(tmp_path, "divergence.action=rollback")).claim()


def test_claim_refuses_a_directory_of_something_else(tmp_path):
    (tmp_path / "thesis.tex").write_text("mine")
    with pytest.raises(ValueError, match="is not empty and holds no run_config.json"):
        RunDirectory(load(tmp_path)).claim()
    assert os.listdir(tmp_path) == ["thesis.tex"]


def test_overwrite_removes_only_what_runs_write(tmp_path):
    run = RunDirectory(load(tmp_path))
    run.claim()
    _save(run, _model(1.0), 4)
    run.write_scalars(4, {"loss": 1.0})
    run.write_summary({"global_steps": 4})
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "checkpoints" / "mine.h5").write_text("mine")
    assert RunDirectory(load(tmp_path, "phases.0.steps=8", "overwrite=true")).claim() is None
    assert sorted(os.listdir(tmp_path)) == ["checkpoints", "notes.txt", "run_config.json"]
    assert os.listdir(tmp_path / "checkpoints") == ["mine.h5"]


def test_keeps_the_newest_checkpoints_and_lists_them_in_the_state(tmp_path):
    run = RunDirectory(load(tmp_path, "keep_checkpoints=2"))
    run.claim()
    for step in (4, 8, 12):
        _save(run, _model(step), step)
    assert sorted(os.listdir(tmp_path / "checkpoints")) == [
        "ckpt-000000008.weights.h5",
        "ckpt-000000012.weights.h5",
        "state.json",
    ]
    state = run.state()
    assert state["global_step"] == 12
    assert [entry["global_step"] for entry in state["kept"]] == [8, 12]


def test_an_unreadable_newest_checkpoint_falls_back_to_an_older_one(tmp_path):
    run = RunDirectory(load(tmp_path))
    run.claim()
    older, newest = _save(run, _model(1.0), 4), _save(run, _model(2.0), 8)
    size = os.path.getsize(newest)
    with open(newest, "r+b") as stream:
        stream.truncate(size // 2)  # as a preempted copy to network storage leaves it
    assert checkpoint_problem(older) is None and checkpoint_problem(newest)
    warnings = []
    state = run.readable_state(warnings.append)
    assert state["global_step"] == 4 and state["checkpoint"] == older
    assert len(warnings) == 1 and newest in warnings[0] and "cannot be read" in warnings[0]
    # Kept for inspection under another name; a retrained checkpoint cannot overwrite it.
    assert os.path.getsize(newest + ".unreadable") == size // 2 and not os.path.exists(newest)
    model = _model(0.0)
    model.load_weights(state["checkpoint"])
    np.testing.assert_array_equal(model.get_weights()[0], np.full((2, 1), 1.0))
    # Resuming writes step 8 again; the state forgets the unreadable entry.
    _save(run, _model(3.0), 8)
    assert [entry["global_step"] for entry in run.state()["kept"]] == [4, 8]
    assert os.path.exists(newest + ".unreadable")


def test_no_readable_checkpoint_is_an_error_naming_them_all(tmp_path):
    run = RunDirectory(load(tmp_path))
    run.claim()
    paths = [_save(run, _model(1.0), 4), _save(run, _model(2.0), 8)]
    for path in paths:
        with open(path, "r+b") as stream:
            stream.truncate(100)
    with pytest.raises(OSError, match="no checkpoint of the run") as raised:
        run.readable_state(lambda line: None)
    assert all(path in str(raised.value) for path in paths)
    assert sorted(os.listdir(tmp_path / "checkpoints")) == [
        "ckpt-000000004.weights.h5",
        "ckpt-000000008.weights.h5",
        "state.json",
    ]


def test_a_process_that_does_not_write_creates_nothing_and_reads_the_writers_state(tmp_path):
    output_dir = tmp_path / "run"
    reader = RunDirectory(load(output_dir), writes=False)
    assert reader.claim() is None
    _save(reader, _model(1.0), 4)
    reader.write_scalars(4, {"loss": 1.0})
    reader.write_summary({"global_steps": 4})
    assert not output_dir.exists()
    writer = RunDirectory(load(output_dir))
    writer.claim()
    _save(writer, _model(1.0), 4)
    assert RunDirectory(load(output_dir), writes=False).claim()["global_step"] == 4


def test_the_processes_compare_what_they_read_before_the_writer_changes_anything(tmp_path):
    run = RunDirectory(load(tmp_path))
    run.claim()
    _save(run, _model(1.0), 4)
    compared = []

    def check_same(description, value):
        # Every process has read, and the writer has not yet removed or written anything.
        compared.append((value, sorted(os.listdir(tmp_path / "checkpoints"))))

    overwriting = RunDirectory(load(tmp_path, "overwrite=true"), check_same=check_same)
    assert overwriting.claim() is None
    assert compared == [
        (
            {"state": None, "refused": None, "summary": False},
            ["ckpt-000000004.weights.h5", "state.json"],
        )
    ]
    assert os.listdir(tmp_path / "checkpoints") == []
    # A refusal is compared too, then raised: no process is left waiting for the others.
    compared.clear()
    (tmp_path / "run_config.json").unlink()
    (tmp_path / "thesis.tex").write_text("mine")
    with pytest.raises(ValueError, match="is not empty and holds no run_config.json"):
        RunDirectory(load(tmp_path), check_same=check_same).claim()
    assert compared[0][0]["refused"].startswith(f"output_dir '{tmp_path}' is not empty")


def test_a_moved_run_directory_reads_its_checkpoints_where_it_is_now(tmp_path):
    # A run trained on one machine and copied to another (its state file names the old paths)
    # resumes, and names its best weights, from the new place.
    import shutil

    trained = tmp_path / "trained"
    run = RunDirectory(load(trained))
    run.claim()
    _save(run, _model(1.0), 2)
    _save(run, _model(2.0), 4)
    run.save_best(_model(3.0), {"global_step": 2, "dev_accuracy": 0.5})
    moved = tmp_path / "moved"
    shutil.copytree(trained, moved)
    shutil.rmtree(trained)
    copy = RunDirectory(load(moved))
    assert copy.claim()["global_step"] == 4
    state = copy.readable_state(warn=pytest.fail)
    assert state["checkpoint"] == str(moved / "checkpoints" / "ckpt-000000004.weights.h5")
    assert [entry["checkpoint"] for entry in state["kept"]] == [
        str(moved / "checkpoints" / f"ckpt-00000000{step}.weights.h5") for step in (2, 4)
    ]
    assert copy.best()["checkpoint"] == str(moved / "checkpoints" / "best-000000002.weights.h5")
    model = _model(0.0)
    model.load_weights(state["checkpoint"])
    assert model.get_weights()[0][0, 0] == 2.0
    # Training on from the new place writes and prunes there.
    _save(copy, _model(5.0), 6)
    assert sorted(os.listdir(moved / "checkpoints")) == [
        "best-000000002.weights.h5",
        "best.json",
        "ckpt-000000004.weights.h5",
        "ckpt-000000006.weights.h5",
        "state.json",
    ]


def test_a_save_killed_half_way_leaves_the_checkpoint_and_its_litter_is_removed(tmp_path):
    from keras_largebatch import _files

    run = RunDirectory(load(tmp_path))
    run.claim()
    checkpoint = _save(run, _model(1.0), 4)
    before = open(checkpoint, "rb").read()
    # Interrupted inside save_weights: the checkpoint is intact and the temporary file removed.
    with pytest.raises(KeyboardInterrupt):
        with _files.replacing(checkpoint, suffix=".weights.h5") as temporary:
            _model(2.0).save_weights(temporary)
            raise KeyboardInterrupt
    # A SIGKILL leaves the temporary file: the next run that writes here removes it.
    litter = _files.temporary_path(tmp_path / "checkpoints" / "best-000000004.weights.h5")
    open(litter, "wb").close()
    (tmp_path / "checkpoints" / ".mine").write_text("mine")
    assert open(checkpoint, "rb").read() == before
    assert RunDirectory(load(tmp_path)).claim()["global_step"] == 4
    assert sorted(os.listdir(tmp_path / "checkpoints")) == [
        ".mine",
        "ckpt-000000004.weights.h5",
        "state.json",
    ]
