"""File patterns to file paths, the same way for every command that reads files.

A pattern is a path or a glob, local or on any file system ``tf.io.gfile`` knows (``gs://...``).
A string may also hold several patterns separated by commas, as google-research/bert's
``create_pretraining_data.py --input_file`` and ``run_pretraining.py --input_file`` take them.
"""

import os

import tensorflow as tf

from keras_largebatch._checks import check_string


def resolve_file_patterns(patterns, argument, kind):
    """Expands patterns into file paths: each pattern's matches sorted, patterns in order.

    Args:
        patterns: a pattern (str or ``os.PathLike``) or a list or tuple of them; a str is split
            at commas.
        argument: the caller's argument name, for error messages.
        kind: what the files are (``"input"``, ``"record"``), for error messages.

    Returns:
        The matching paths as strings. A file matched by two patterns appears twice; callers
        that want each file once remove the repeats.

    Raises:
        TypeError: for patterns that are neither a str, a path nor a list or tuple of them.
        ValueError: when there is no pattern, or a pattern matches no file (naming it).
    """
    if isinstance(patterns, (str, os.PathLike)):
        patterns = [patterns]
    if not isinstance(patterns, (list, tuple)):
        raise TypeError(
            f"{argument} must be a file pattern or a list of them, got {patterns!r} of type "
            f"{type(patterns).__name__}"
        )
    if not patterns:
        raise ValueError(f"{argument} must name at least one {kind} file or pattern, got none")
    paths = []
    for index, pattern in enumerate(patterns):
        if isinstance(pattern, os.PathLike):
            pieces = [os.fspath(pattern)]
        else:
            pieces = check_string(f"{argument}[{index}]", pattern).split(",")
        for piece in pieces:
            matches = sorted(tf.io.gfile.glob(piece))
            if not matches:
                raise ValueError(f"{kind} file pattern {piece!r} matches no file")
            paths.extend(matches)
    return paths


def resolve_record_files(file_patterns, argument="file_patterns"):
    """Expands record file patterns (`resolve_file_patterns`): sorted, each file once."""
    return sorted(set(resolve_file_patterns(file_patterns, argument, "record")))
