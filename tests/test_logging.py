"""The one progress line of every command: ``[name] line``, optionally stamped with seconds."""

import re

from keras_largebatch._logging import ProgressLog


def test_progress_lines_go_to_stderr_with_their_prefix(capsys, monkeypatch):
    clock = iter([0.0, 100.0, 112.34, 200.0])  # study, create_data made, its line, disabled
    monkeypatch.setattr("keras_largebatch._logging.time.perf_counter", lambda: next(clock))
    ProgressLog("study")("trial 1 of 4")
    stamped = ProgressLog("create_data", elapsed=True)
    stamped("wrote 8 shards")
    ProgressLog("create_data", enabled=False)("not shown")
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines[0] == "[study] trial 1 of 4"
    assert re.fullmatch(r"\[create_data +12\.3s\] wrote 8 shards", lines[1]), lines[1]
    assert len(lines) == 2
