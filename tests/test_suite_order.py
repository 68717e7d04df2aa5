"""The suite hands its slowest files to the workers first (tests/conftest.py), by the seconds
each file took in a full run (tests/file_seconds.json, written by tests/support/file_seconds.py)."""

import json

from tests.support.file_seconds import TABLE, file_seconds, heaviest_first
from tests.support.runs import ROOT

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.test_a" name="test_one" time="1.5"/>
<testcase classname="tests.test_a" name="test_two" time="2.0"/>
<testcase classname="tests.bert.test_b.TestGroup" name="test_three" time="4.0"/>
</testsuite></testsuites>
"""


def test_seconds_are_summed_per_file_whatever_the_class(tmp_path):
    report = tmp_path / "report.xml"
    report.write_text(REPORT)
    assert file_seconds(report) == {"tests/bert/test_b.py": 4.0, "tests/test_a.py": 3.5}


def test_slowest_first_and_an_unknown_file_counts_as_the_median():
    table = {"tests/a.py": 1.0, "tests/b.py": 50.0, "tests/c.py": 10.0}
    paths = ["tests/a.py", "tests/new.py", "tests/b.py", "tests/c.py"]
    assert heaviest_first(paths, table) == [
        "tests/b.py",
        "tests/c.py",
        "tests/new.py",
        "tests/a.py",
    ]


def test_the_table_names_only_files_that_exist():
    assert [path for path in json.loads(TABLE.read_text()) if not (ROOT / path).is_file()] == []
