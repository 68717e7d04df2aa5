"""resolve_file_patterns: globs, comma lists, paths and other file systems, and its errors."""

import re

import pytest
import tensorflow as tf

from keras_largebatch._file_patterns import resolve_file_patterns


@pytest.fixture
def files(tmp_path):
    for name in ("b-1.txt", "a-2.txt", "a-1.txt", "c.log"):
        (tmp_path / name).write_text(name)
    return tmp_path


def test_each_pattern_sorted_patterns_in_order(files):
    patterns = [str(files / "b-*.txt"), str(files / "a-*.txt")]
    paths = resolve_file_patterns(patterns, "inputs", "input")
    assert paths == [str(files / "b-1.txt"), str(files / "a-1.txt"), str(files / "a-2.txt")]


def test_a_string_a_path_and_a_comma_list(files):
    assert resolve_file_patterns(str(files / "c.log"), "inputs", "input") == [str(files / "c.log")]
    assert resolve_file_patterns(files / "c.log", "inputs", "input") == [str(files / "c.log")]
    comma_list = f"{files / 'c.log'},{files / 'a-*.txt'}"
    assert resolve_file_patterns(comma_list, "inputs", "input") == [
        str(files / "c.log"),
        str(files / "a-1.txt"),
        str(files / "a-2.txt"),
    ]
    # A file named by two patterns is listed twice; callers decide whether to keep repeats.
    assert (
        resolve_file_patterns([str(files / "c.log")] * 2, "inputs", "input")
        == [str(files / "c.log")] * 2
    )


def test_other_file_systems_go_through_tf_io_gfile():
    # ram:// stands in for gs://: a file system that only tf.io.gfile can list.
    tf.io.gfile.makedirs("ram://patterns")
    for name in ("y.tfrecord", "x.tfrecord"):
        with tf.io.gfile.GFile(f"ram://patterns/{name}", "w") as stream:
            stream.write(name)
    assert resolve_file_patterns("ram://patterns/*.tfrecord", "inputs", "record") == [
        "ram://patterns/x.tfrecord",
        "ram://patterns/y.tfrecord",
    ]


def test_errors_name_the_argument_or_the_pattern(files):
    missing = str(files / "missing-*.txt")
    with pytest.raises(
        ValueError, match=re.escape(f"record file pattern '{missing}' matches no file")
    ):
        resolve_file_patterns([str(files / "c.log"), missing], "file_patterns", "record")
    with pytest.raises(
        ValueError, match="input_files must name at least one input file or pattern"
    ):
        resolve_file_patterns([], "input_files", "input")
    with pytest.raises(
        TypeError,
        match=r"input_files must be a file pattern or a list of them, "
        r"got 3 of type int",
    ):
        resolve_file_patterns(3, "input_files", "input")
    with pytest.raises(TypeError, match=r"input_files\[1\] must be a string, got None"):
        resolve_file_patterns([str(files / "c.log"), None], "input_files", "input")
