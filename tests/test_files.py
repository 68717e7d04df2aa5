"""The one atomic writer (`keras_largebatch._files`): a target is replaced whole or not at all,
temporary names are unique and hidden, and a directory that holds anything is never replaced."""

import os

import pytest

from keras_largebatch import _files


def test_write_text_replaces_the_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "state.json"
    path.write_text("old")
    assert _files.write_text(path, "néw") == path
    assert path.read_text(encoding="utf-8") == "néw"
    assert os.listdir(tmp_path) == ["state.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_temporary(tmp_path):
    path = tmp_path / "weights.h5"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="killed"):
        with _files.replacing(path, suffix=".h5") as temporary:
            with open(temporary, "wb") as stream:
                stream.write(b"half")
            raise RuntimeError("killed")
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["weights.h5"]


def test_temporary_names_are_hidden_unique_and_name_their_target(tmp_path):
    path = tmp_path / "ckpt-000000010.weights.h5"
    names = {os.path.basename(_files.temporary_path(path, ".weights.h5")) for _ in range(50)}
    assert len(names) == 50
    for name in names:
        assert name.startswith(".") and name.endswith(".weights.h5")
        assert _files.target_of(name) == "ckpt-000000010.weights.h5"
    assert _files.target_of("ckpt-000000010.weights.h5") is None
    assert _files.target_of(".hidden") is None


def test_copy_file_and_write_bytes(tmp_path):
    source = tmp_path / "source"
    source.write_bytes(b"\x00\x01")
    _files.copy_file(source, tmp_path / "copy")
    _files.write_bytes(tmp_path / "bytes", b"\x02")
    assert (tmp_path / "copy").read_bytes() == b"\x00\x01"
    assert (tmp_path / "bytes").read_bytes() == b"\x02"
    assert sorted(os.listdir(tmp_path)) == ["bytes", "copy", "source"]


def test_new_directory_appears_whole_and_may_replace_an_empty_one(tmp_path):
    for target in (tmp_path / "absent" / "preset", tmp_path / "empty"):
        if target.name == "empty":
            target.mkdir()
        with _files.new_directory(target) as directory:
            assert not os.path.exists(target / "a.txt")
            _files.write_text(os.path.join(directory, "a.txt"), "a")
        assert os.listdir(target) == ["a.txt"]
    assert sorted(os.listdir(tmp_path)) == ["absent", "empty"]


def test_new_directory_never_replaces_a_directory_that_holds_anything(tmp_path):
    target = tmp_path / "preset"
    target.mkdir()
    (target / "user.txt").write_text("mine")
    entered = []
    with pytest.raises(FileExistsError, match="not an empty directory"):
        with _files.new_directory(target):
            entered.append(True)
    assert not entered
    # Filled by another process while this one wrote: refused at the rename, nothing lost.
    other = tmp_path / "raced"
    with pytest.raises(FileExistsError, match="raced"):
        with _files.new_directory(other) as directory:
            _files.write_text(os.path.join(directory, "mine.txt"), "mine")
            other.mkdir()
            (other / "theirs.txt").write_text("theirs")
    assert os.listdir(other) == ["theirs.txt"]
    assert sorted(os.listdir(tmp_path)) == ["preset", "raced"]
    assert (target / "user.txt").read_text() == "mine"


def test_a_failure_inside_new_directory_leaves_nothing(tmp_path):
    with pytest.raises(ValueError, match="bad"):
        with _files.new_directory(tmp_path / "preset") as directory:
            _files.write_text(os.path.join(directory, "a.txt"), "a")
            raise ValueError("bad")
    assert os.listdir(tmp_path) == []


def test_new_directory_refuses_a_remote_path():
    with pytest.raises(ValueError, match="local directories only, got 'gs://bucket/preset'"):
        with _files.new_directory("gs://bucket/preset"):
            pass
