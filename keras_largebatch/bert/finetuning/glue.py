"""GLUE tasks as the GLUE download lays them out: what each task is, and reading its TSV files.

The nine tasks of Wang et al., "GLUE: A Multi-Task Benchmark and Analysis Platform for Natural
Language Understanding" (arXiv 1804.07461), plus ``next_sentence``, the embedded default's task
(`keras_largebatch.bert.finetuning.default_task`). One task's directory holds ``train.tsv`` and
``dev.tsv``
(MNLI: ``dev_matched.tsv`` and ``dev_mismatched.tsv``), tab-separated, one example per line:

=============  ==========================================  ==========================  ===========
task           header (columns read)                       label                       main metric
=============  ==========================================  ==========================  ===========
cola           none: source, label, original label,        0, 1                        Matthews
               sentence
sst2           sentence, label                             0, 1                        accuracy
mrpc           Quality, #1 ID, #2 ID, #1 String,           Quality: 0, 1               F1
               #2 String
stsb           index, genre, filename, year, old_index,    score: a number in [0, 5]   Pearson
               source1, source2, sentence1, sentence2,
               score
qqp            id, qid1, qid2, question1, question2,       is_duplicate: 0, 1          F1
               is_duplicate
mnli           index, promptID, pairID, genre, four        gold_label: entailment,     accuracy
               parses, sentence1, sentence2, label1,       neutral, contradiction
               (dev: label2 ... label5), gold_label
qnli           index, question, sentence, label            entailment, not_entailment  accuracy
rte            index, sentence1, sentence2, label          entailment, not_entailment  accuracy
wnli           index, sentence1, sentence2, label          0, 1                        accuracy
next_sentence  index, source, sentence1, sentence2, label  0, 1                        accuracy
=============  ==========================================  ==========================  ===========

Fields are separated by tabs and never quoted: GLUE's text holds quote characters that a CSV
reader would take for quoting (they are read as text). Lines end at ``\\n`` only (a ``\\r``
before it is dropped). A UTF-8 byte-order mark before the first line is skipped: MRPC's files
can start with one, since Microsoft's source file does and the GLUE download script copies its
header line.

The files are checked as they are read, and every fault is an error that names the file and the
1-based line: a header that is not the task's, a line whose number of columns is not the
header's, a label outside the task's set, text that is not UTF-8. Malformed lines are not
skipped. An early release of QQP had rows broken by a newline inside a question
(nyu-mll/GLUE-baselines issue 5); the GLUE download script now fetches a cleaned release,
``QQP-clean.zip``. Should a file still hold such a line, the error says where: repair the line
or fetch the file again.
"""

import dataclasses
import math
import os
from typing import Optional

import numpy as np

TASK_NAMES = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli", "next_sentence")
# STS-B's similarity scores (Cer et al., "SemEval-2017 Task 1", arXiv 1708.00055).
STSB_SCORE_RANGE = (0.0, 5.0)
TRAIN_SPLIT = "train"

_BYTE_ORDER_MARK = b"\xef\xbb\xbf"


@dataclasses.dataclass(frozen=True)
class Task:
    """One GLUE task: its labels, its text columns, its dev splits and its metrics."""

    name: str  # one of TASK_NAMES
    num_classes: int  # 1 for stsb (regression), else the number of labels
    label_names: tuple  # the TSV's label strings, index = class id; () for stsb
    is_pair: bool  # two text columns (sentence pair tasks)
    dev_splits: tuple  # ("dev",), or ("dev_matched", "dev_mismatched") for mnli
    metrics: tuple  # the names `glue_metrics.score` returns, main metric first
    main_metric: str  # the metric that picks the best checkpoint


@dataclasses.dataclass(frozen=True)
class Examples:
    """The examples of one split, in file order."""

    first: tuple  # the first (or only) text of each example
    second: Optional[tuple]  # the second text of each example of a pair task; None otherwise
    labels: np.ndarray  # int32 class ids (index into label_names); float32 scores for stsb


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Where a task's TSV keeps its texts and its label."""

    columns: tuple  # the header's column names (cola's files have none: names for messages)
    text_columns: tuple  # one column, or two for a pair
    label_column: str
    has_header: bool = True
    dev_columns: Optional[tuple] = None  # the dev files' header where it differs (MNLI's)


_BINARY = ("0", "1")
_ENTAILMENT = ("entailment", "not_entailment")
_COLA_COLUMNS = ("source", "label", "original_label", "sentence")
_MNLI_COLUMNS = (
    "index",
    "promptID",
    "pairID",
    "genre",
    "sentence1_binary_parse",
    "sentence2_binary_parse",
    "sentence1_parse",
    "sentence2_parse",
    "sentence1",
    "sentence2",
    "label1",
)
_TASKS = {
    "cola": (
        Task(
            "cola", 2, _BINARY, False, ("dev",), ("matthews_correlation",), "matthews_correlation"
        ),
        _Layout(_COLA_COLUMNS, ("sentence",), "label", has_header=False),
    ),
    "sst2": (
        Task("sst2", 2, _BINARY, False, ("dev",), ("accuracy",), "accuracy"),
        _Layout(("sentence", "label"), ("sentence",), "label"),
    ),
    "mrpc": (
        Task("mrpc", 2, _BINARY, True, ("dev",), ("f1", "accuracy"), "f1"),
        _Layout(
            ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
            ("#1 String", "#2 String"),
            "Quality",
        ),
    ),
    "stsb": (
        Task("stsb", 1, (), True, ("dev",), ("pearson", "spearman"), "pearson"),
        _Layout(
            ("index", "genre", "filename", "year", "old_index", "source1", "source2")
            + ("sentence1", "sentence2", "score"),
            ("sentence1", "sentence2"),
            "score",
        ),
    ),
    "qqp": (
        Task("qqp", 2, _BINARY, True, ("dev",), ("f1", "accuracy"), "f1"),
        _Layout(
            ("id", "qid1", "qid2", "question1", "question2", "is_duplicate"),
            ("question1", "question2"),
            "is_duplicate",
        ),
    ),
    "mnli": (
        Task(
            "mnli",
            3,
            ("entailment", "neutral", "contradiction"),
            True,
            ("dev_matched", "dev_mismatched"),
            ("accuracy",),
            "accuracy",
        ),
        _Layout(
            _MNLI_COLUMNS + ("gold_label",),
            ("sentence1", "sentence2"),
            "gold_label",
            dev_columns=_MNLI_COLUMNS + ("label2", "label3", "label4", "label5", "gold_label"),
        ),
    ),
    "qnli": (
        Task("qnli", 2, _ENTAILMENT, True, ("dev",), ("accuracy",), "accuracy"),
        _Layout(("index", "question", "sentence", "label"), ("question", "sentence"), "label"),
    ),
    "rte": (
        Task("rte", 2, _ENTAILMENT, True, ("dev",), ("accuracy",), "accuracy"),
        _Layout(("index", "sentence1", "sentence2", "label"), ("sentence1", "sentence2"), "label"),
    ),
    "wnli": (
        Task("wnli", 2, _BINARY, True, ("dev",), ("accuracy",), "accuracy"),
        _Layout(("index", "sentence1", "sentence2", "label"), ("sentence1", "sentence2"), "label"),
    ),
    "next_sentence": (
        Task("next_sentence", 2, _BINARY, True, ("dev",), ("accuracy", "f1"), "accuracy"),
        _Layout(
            ("index", "source", "sentence1", "sentence2", "label"),
            ("sentence1", "sentence2"),
            "label",
        ),
    ),
}


def get_task(name):
    """Returns the `Task` named ``name`` (one of `TASK_NAMES`); a `Task` is returned as it is.

    Raises:
        TypeError: ``name`` is neither a string nor a `Task` of one of `TASK_NAMES`.
        ValueError: ``name`` is not one of `TASK_NAMES`.
    """
    if isinstance(name, Task) and name.name in _TASKS:
        return name
    if not isinstance(name, str):
        raise TypeError(
            f"data.task must be a task name (one of {', '.join(TASK_NAMES)}), got {name!r} "
            f"of type {type(name).__name__}"
        )
    if name not in _TASKS:
        raise ValueError(f"data.task must be one of {', '.join(TASK_NAMES)}, got {name!r}")
    return _TASKS[name][0]


def split_names(task):
    """``("train",)`` followed by the task's dev splits: the files a task directory holds."""
    return (TRAIN_SPLIT,) + get_task(task).dev_splits


def read_split(task, glue_dir, split):
    """Reads and checks ``glue_dir/<split>.tsv`` of one task.

    Args:
        task: a `Task` or a task name.
        glue_dir: the task's directory, as the GLUE download lays it out (``glue_data/SST-2``).
        split: ``"train"`` or one of ``task.dev_splits``.

    Returns:
        The split's `Examples`, in file order.

    Raises:
        FileNotFoundError: ``glue_dir`` or the split's file is missing.
        ValueError: an unknown split, or a fault in the file (named with its line): a header
            that is not the task's, a line with another number of columns, a label outside
            the task's set, text that is not UTF-8, or no example at all.
    """
    task = get_task(task)
    _check_split(task, split)
    path = _split_path(task, glue_dir, split)
    _check_files_exist(task, glue_dir, (split,))
    return _read_examples(task, path, split)


def read_task(task, glue_dir):
    """Reads and checks every split of one task: ``train`` and the task's dev splits.

    Args:
        task: a `Task` or a task name.
        glue_dir: the task's directory, as the GLUE download lays it out.

    Returns:
        ``{"train": Examples, "dev": Examples}``; for mnli ``"dev_matched"`` and
        ``"dev_mismatched"`` in place of ``"dev"``. Every file is read and checked before
        anything is returned.

    Raises:
        FileNotFoundError: ``glue_dir`` or one of the task's files is missing (checked for all
            files before any is read).
        ValueError: a fault in one of the files, as `read_split` raises it.
    """
    task = get_task(task)
    splits = split_names(task)
    _check_files_exist(task, glue_dir, splits)
    return {
        split: _read_examples(task, _split_path(task, glue_dir, split), split) for split in splits
    }


def _check_split(task, split):
    allowed = split_names(task)
    if split not in allowed:
        raise ValueError(
            f"split of GLUE task {task.name!r} must be one of {', '.join(allowed)}, got {split!r}"
        )


def _split_path(task, glue_dir, split):
    return os.path.join(os.fspath(glue_dir), split + ".tsv")


def _check_files_exist(task, glue_dir, splits):
    expected = ", ".join(split + ".tsv" for split in split_names(task))
    if not os.path.isdir(glue_dir):
        raise FileNotFoundError(
            f"data.glue_dir {os.fspath(glue_dir)!r} is not a directory; GLUE task {task.name!r} "
            f"expects one holding {expected}"
        )
    missing = [
        _split_path(task, glue_dir, split)
        for split in splits
        if not os.path.isfile(_split_path(task, glue_dir, split))
    ]
    if missing:
        raise FileNotFoundError(
            f"missing {', '.join(missing)}: the directory of GLUE task {task.name!r} holds "
            f"{expected}"
        )


def _read_examples(task, path, split):
    layout = _TASKS[task.name][1]
    columns = layout.columns
    if layout.dev_columns is not None and split != TRAIN_SPLIT:
        columns = layout.dev_columns
    text_indices = [columns.index(name) for name in layout.text_columns]
    label_index = columns.index(layout.label_column)
    texts = [[] for _ in text_indices]
    labels = []
    for line_number, fields in _lines(path):
        if line_number == 1 and layout.has_header:
            if tuple(fields) != columns:
                raise ValueError(
                    f"{path}:1: the header of GLUE task {task.name!r} ({split}) must be the "
                    f"{len(columns)} tab-separated columns {list(columns)}, found "
                    f"{len(fields)}: {fields}"
                )
            continue
        if len(fields) != len(columns):
            raise ValueError(
                f"{path}:{line_number}: expected {len(columns)} tab-separated columns "
                f"{list(columns)} (GLUE task {task.name!r}), found {len(fields)}: {fields}"
            )
        for text, index in zip(texts, text_indices):
            text.append(fields[index])
        labels.append(_label(task, fields[label_index], layout.label_column, path, line_number))
    if not labels:
        raise ValueError(f"{path} holds no examples (GLUE task {task.name!r}, {split})")
    dtype = np.float32 if task.num_classes == 1 else np.int32
    return Examples(
        first=tuple(texts[0]),
        second=tuple(texts[1]) if task.is_pair else None,
        labels=np.asarray(labels, dtype=dtype),
    )


def _lines(path):
    """Yields ``(line number, fields)``; lines end at ``\\n`` (a ``\\r`` before it is dropped)."""
    with open(path, "rb") as tsv_file:
        for line_number, raw_line in enumerate(tsv_file, start=1):
            if line_number == 1 and raw_line.startswith(_BYTE_ORDER_MARK):
                raw_line = raw_line[len(_BYTE_ORDER_MARK) :]
            try:
                line = raw_line.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(f"{path}:{line_number}: not UTF-8 text ({error})") from None
            if line.endswith("\n"):
                line = line[:-1]
            if line.endswith("\r"):
                line = line[:-1]
            yield line_number, line.split("\t")


def _label(task, value, column, path, line_number):
    """The class id of a label string, or STS-B's score as a float."""
    if task.num_classes == 1:
        low, high = STSB_SCORE_RANGE
        try:
            score = float(value)
        except ValueError:
            score = math.nan
        if not low <= score <= high:
            raise ValueError(
                f"{path}:{line_number}: {column} {value!r} is not a number in [{low:g}, {high:g}] "
                f"(GLUE task {task.name!r})"
            )
        return score
    if value not in task.label_names:
        raise ValueError(
            f"{path}:{line_number}: {column} {value!r} is not one of {list(task.label_names)} "
            f"(GLUE task {task.name!r})"
        )
    return task.label_names.index(value)
