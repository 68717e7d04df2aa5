"""Each test file's seconds in a full run, read from pytest's JUnit XML report, for the order in
which the suite hands files to its workers (tests/conftest.py).

    python -m pytest -q -n 2 --dist loadfile --junitxml=report.xml tests
    python -m tests.support.file_seconds report.xml > tests/file_seconds.json
"""

import json
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

TABLE = Path(__file__).resolve().parents[1] / "file_seconds.json"


def file_seconds(report):
    """``{test file relative to the repository: summed seconds of its tests}`` of a report."""
    seconds = {}
    for case in ElementTree.parse(report).iter("testcase"):
        # "tests.bert.test_pretrain" or "tests.bert.test_pretrain.TestClass"
        parts = case.get("classname").split(".")
        if parts[-1][:1].isupper():
            parts = parts[:-1]
        path = "/".join(parts) + ".py"
        seconds[path] = seconds.get(path, 0.0) + float(case.get("time") or 0.0)
    return {path: round(value, 1) for path, value in sorted(seconds.items())}


def heaviest_first(paths, table=None):
    """``paths`` (test files, relative to the repository) from the most seconds to the fewest;
    a file missing from the table counts as the table's median."""
    table = json.loads(TABLE.read_text()) if table is None else table
    known = sorted(table.values())
    default = known[len(known) // 2] if known else 0.0
    return sorted(paths, key=lambda path: (-table.get(path, default), path))


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_file():
        sys.exit(
            "usage: python -m tests.support.file_seconds REPORT.xml (a pytest --junitxml report)"
        )
    print(json.dumps(file_seconds(sys.argv[1]), indent=1))
