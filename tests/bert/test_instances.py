"""Text files to documents, and the checks of InstanceOptions (pairs: test_create_data.py)."""

import pytest

from keras_largebatch.bert.data import instances


def test_documents_are_separated_by_blank_lines_across_files(tmp_path):
    (tmp_path / "b.txt").write_text("One.\nTwo.\n\n\n  Three.  \n")
    (tmp_path / "a.txt").write_text("\nFour.\n\nFive.\nSix.")
    documents = instances.read_documents(f"{tmp_path / 'b.txt'},{tmp_path / 'a.txt'}")
    assert documents == [["One.", "Two."], ["Three."], ["Four."], ["Five.", "Six."]]
    assert instances.read_documents([str(tmp_path / "*.txt")]) == [
        ["Four."],
        ["Five.", "Six."],
        ["One.", "Two."],
        ["Three."],
    ]


def test_instance_options_defaults_and_checks():
    assert instances.InstanceOptions() == instances.InstanceOptions(128, 20, 0.15, 0.1, False)
    with pytest.raises(ValueError, match=r"short_seq_prob must be in \[0, 1\], got 1.5"):
        instances.InstanceOptions(short_seq_prob=1.5)
    with pytest.raises(TypeError, match="short_seq_prob must be a number, got None"):
        instances.InstanceOptions(short_seq_prob=None)
