"""GLUE TSVs written field by field in each task's layout parse to the right examples and labels;
every fault is an error naming the file and the line."""

import dataclasses
import os

import numpy as np
import pytest

from keras_largebatch.bert.finetuning import glue

MNLI_TRAIN_HEADER = (
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
    "gold_label",
)
MNLI_DEV_HEADER = MNLI_TRAIN_HEADER[:11] + ("label2", "label3", "label4", "label5", "gold_label")
STSB_HEADER = (
    "index",
    "genre",
    "filename",
    "year",
    "old_index",
    "source1",
    "source2",
    "sentence1",
    "sentence2",
    "score",
)


def _mnli_row(index, genre, premise, hypothesis, labels):
    """A row of MNLI: ids, genre, four parses (placeholders), the pair, annotators, gold."""
    return (str(index), "31193", "31193n", genre, "( ( A ) )", "( B )", "(ROOT A)", "(ROOT B)") + (
        premise,
        hypothesis,
        *labels,
    )


# task -> split -> (header or None, rows); each row is the file's fields, in order.
FILES = {
    "cola": {
        "train": (
            None,
            [
                ("gj04", "1", "", "Our friends won't buy this analysis, let alone the next one."),
                ("gj04", "0", "*", "They drank the pub."),
            ],
        ),
        "dev": (None, [("bc01", "0", "*", 'He said "that" the rocks.')]),
    },
    "sst2": {
        "train": (
            ("sentence", "label"),
            [("it 's a charming and often affecting journey . ", "1"), ("a tedious film . ", "0")],
        ),
        "dev": (("sentence", "label"), [('the " best " film ', "1")]),
    },
    "mrpc": {
        "train": (
            ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
            [
                ("1", "702876", "702977", 'He called " the witness " .', 'Only " the witness " .'),
                ("0", "2108705", "2108831", "Yucaipa owned it .", "Yucaipa bought it ."),
            ],
        ),
        "dev": (
            ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
            [("1", "1", "2", "A .", "B .")],
        ),
    },
    "stsb": {
        "train": (
            STSB_HEADER,
            [
                ("0", "main-captions", "MSRvid", "2012test", "0001", "none", "none")
                + ("A plane is taking off.", "An air plane is taking off.", "5.000"),
                ("1", "main-captions", "MSRvid", "2012test", "0004", "none", "none")
                + ("A man is playing a large flute.", "A man is playing a flute.", "3.800"),
            ],
        ),
        "dev": (
            STSB_HEADER,
            [("0", "main-news", "MSRpar", "2012test", "0002", "none", "none", "A.", "B.", "0.000")],
        ),
    },
    "qqp": {
        "train": (
            ("id", "qid1", "qid2", "question1", "question2", "is_duplicate"),
            [
                ("201359", "303345", "303346", "Why are cats so soft?", "Why are dogs soft?", "0"),
                (
                    "172974",
                    "266948",
                    "175089",
                    "Why travel alone?",
                    "Reasons to travel alone?",
                    "1",
                ),
            ],
        ),
        "dev": (
            ("id", "qid1", "qid2", "question1", "question2", "is_duplicate"),
            [("1", "2", "3", '"Quoted" question?', "Another?", "1")],
        ),
    },
    "mnli": {
        "train": (
            MNLI_TRAIN_HEADER,
            [
                _mnli_row(
                    0, "government", "Conceptually cream skimming.", "Skimming.", ["neutral"] * 2
                ),
                _mnli_row(1, "telephone", "You know.", "You do.", ["entailment"] * 2),
                _mnli_row(2, "fiction", "It rained.", "It was dry.", ["contradiction"] * 2),
            ],
        ),
        "dev_matched": (
            MNLI_DEV_HEADER,
            [
                _mnli_row(
                    0,
                    "slate",
                    "The new rights are nice enough",
                    "Everyone really likes the newest benefits ",
                    ["neutral", "entailment", "neutral", "neutral", "neutral", "neutral"],
                )
            ],
        ),
        "dev_mismatched": (
            MNLI_DEV_HEADER,
            [_mnli_row(0, "letters", "Your gift.", "A gift.", ["entailment"] * 6)],
        ),
    },
    "qnli": {
        "train": (
            ("index", "question", "sentence", "label"),
            [
                ("0", "When did it begin?", "It began in 2001.", "entailment"),
                ("1", "Who won?", "It rained.", "not_entailment"),
            ],
        ),
        "dev": (("index", "question", "sentence", "label"), [("0", "Q?", "S.", "entailment")]),
    },
    "rte": {
        "train": (
            ("index", "sentence1", "sentence2", "label"),
            [
                ("0", "No Weapons Found in Iraq Yet.", "Weapons Found in Iraq.", "not_entailment"),
                ("1", "A place of sorrow.", "A place.", "entailment"),
            ],
        ),
        "dev": (
            ("index", "sentence1", "sentence2", "label"),
            [("0", "A.", "B.", "not_entailment")],
        ),
    },
    "wnli": {
        "train": (
            ("index", "sentence1", "sentence2", "label"),
            [
                ("0", "I stuck a pin through a carrot.", "The carrot had a hole.", "1"),
                ("1", "John couldn't see the stage.", "The stage was short.", "0"),
            ],
        ),
        "dev": (("index", "sentence1", "sentence2", "label"), [("0", "A.", "B.", "0")]),
    },
    "next_sentence": {
        "train": (
            ("index", "source", "sentence1", "sentence2", "label"),
            [
                ("0", "email.message", "Return the payload.", "It is a list.", "1"),
                ("1", "email.message", "Return the payload.", "Show the help text.", "0"),
            ],
        ),
        "dev": (
            ("index", "source", "sentence1", "sentence2", "label"),
            [("0", "pydoc", "Show the help text.", "It pages.", "1")],
        ),
    },
}

# task -> split -> (first texts, second texts or None, labels): the layouts read by hand.
EXPECTED = {
    "cola": {
        "train": (
            ("Our friends won't buy this analysis, let alone the next one.", "They drank the pub."),
            None,
            [1, 0],
        ),
        "dev": (('He said "that" the rocks.',), None, [0]),
    },
    "sst2": {
        "train": (
            ("it 's a charming and often affecting journey . ", "a tedious film . "),
            None,
            [1, 0],
        ),
        "dev": (('the " best " film ',), None, [1]),
    },
    "mrpc": {
        "train": (
            ('He called " the witness " .', "Yucaipa owned it ."),
            ('Only " the witness " .', "Yucaipa bought it ."),
            [1, 0],
        ),
        "dev": (("A .",), ("B .",), [1]),
    },
    "stsb": {
        "train": (
            ("A plane is taking off.", "A man is playing a large flute."),
            ("An air plane is taking off.", "A man is playing a flute."),
            [5.0, 3.8],
        ),
        "dev": (("A.",), ("B.",), [0.0]),
    },
    "qqp": {
        "train": (
            ("Why are cats so soft?", "Why travel alone?"),
            ("Why are dogs soft?", "Reasons to travel alone?"),
            [0, 1],
        ),
        "dev": (('"Quoted" question?',), ("Another?",), [1]),
    },
    "mnli": {
        # entailment 0, neutral 1, contradiction 2.
        "train": (
            ("Conceptually cream skimming.", "You know.", "It rained."),
            ("Skimming.", "You do.", "It was dry."),
            [1, 0, 2],
        ),
        "dev_matched": (
            ("The new rights are nice enough",),
            ("Everyone really likes the newest benefits ",),
            [1],
        ),
        "dev_mismatched": (("Your gift.",), ("A gift.",), [0]),
    },
    "qnli": {
        "train": (("When did it begin?", "Who won?"), ("It began in 2001.", "It rained."), [0, 1]),
        "dev": (("Q?",), ("S.",), [0]),
    },
    "rte": {
        "train": (
            ("No Weapons Found in Iraq Yet.", "A place of sorrow."),
            ("Weapons Found in Iraq.", "A place."),
            [1, 0],
        ),
        "dev": (("A.",), ("B.",), [1]),
    },
    "wnli": {
        "train": (
            ("I stuck a pin through a carrot.", "John couldn't see the stage."),
            ("The carrot had a hole.", "The stage was short."),
            [1, 0],
        ),
        "dev": (("A.",), ("B.",), [0]),
    },
    "next_sentence": {
        "train": (
            ("Return the payload.", "Return the payload."),
            ("It is a list.", "Show the help text."),
            [1, 0],
        ),
        "dev": (("Show the help text.",), ("It pages.",), [1]),
    },
}


def _write_tsv(path, header, rows, bom=False, line_end="\n"):
    lines = ([header] if header else []) + list(rows)
    text = "".join("\t".join(fields) + line_end for fields in lines)
    with open(path, "wb") as tsv_file:
        tsv_file.write((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))


def _write_task(directory, task_name, **changes):
    """Writes one task's files; ``changes`` maps a split to its (header, rows) instead."""
    os.makedirs(directory, exist_ok=True)
    for split, (header, rows) in {**FILES[task_name], **changes}.items():
        # MRPC's files start with a UTF-8 byte-order mark, as the GLUE download writes them.
        _write_tsv(os.path.join(directory, split + ".tsv"), header, rows, bom=task_name == "mrpc")
    return str(directory)


@pytest.mark.parametrize("task_name", sorted(FILES))
def test_hand_written_files_parse_to_their_examples(tmp_path, task_name):
    glue_dir = _write_task(tmp_path / task_name, task_name)
    task = glue.get_task(task_name)
    splits = glue.read_task(task_name, glue_dir)
    assert sorted(splits) == sorted(EXPECTED[task_name]) == sorted(("train",) + task.dev_splits)
    for split, (first, second, labels) in EXPECTED[task_name].items():
        examples = splits[split]
        assert examples.first == first
        assert examples.second == second
        if task_name == "stsb":
            assert examples.labels.dtype == np.float32
            np.testing.assert_allclose(examples.labels, labels, rtol=1e-6)
        else:
            assert examples.labels.dtype == np.int32
            assert examples.labels.tolist() == labels
        read_alone = glue.read_split(task, glue_dir, split)
        assert read_alone.first == first and read_alone.labels.tolist() == examples.labels.tolist()


def test_task_table():
    assert glue.TASK_NAMES == tuple(FILES)
    expected = {
        # name: (num_classes, label_names, is_pair, main metric, metrics)
        "cola": (2, ("0", "1"), False, "matthews_correlation", ("matthews_correlation",)),
        "sst2": (2, ("0", "1"), False, "accuracy", ("accuracy",)),
        "mrpc": (2, ("0", "1"), True, "f1", ("f1", "accuracy")),
        "stsb": (1, (), True, "pearson", ("pearson", "spearman")),
        "qqp": (2, ("0", "1"), True, "f1", ("f1", "accuracy")),
        "mnli": (3, ("entailment", "neutral", "contradiction"), True, "accuracy", ("accuracy",)),
        "qnli": (2, ("entailment", "not_entailment"), True, "accuracy", ("accuracy",)),
        "rte": (2, ("entailment", "not_entailment"), True, "accuracy", ("accuracy",)),
        "wnli": (2, ("0", "1"), True, "accuracy", ("accuracy",)),
        "next_sentence": (2, ("0", "1"), True, "accuracy", ("accuracy", "f1")),
    }
    for name, (num_classes, label_names, is_pair, main_metric, metrics) in expected.items():
        task = glue.get_task(name)
        assert (task.name, task.num_classes, task.label_names, task.is_pair) == (
            name,
            num_classes,
            label_names,
            is_pair,
        )
        assert (task.main_metric, task.metrics) == (main_metric, metrics)
        assert task.dev_splits == (
            ("dev_matched", "dev_mismatched") if name == "mnli" else ("dev",)
        )
        assert glue.get_task(task) is task


def test_unknown_task_and_split():
    with pytest.raises(
        ValueError, match=r"data\.task must be one of cola, sst2, .*next_sentence, got 'SST-2'"
    ):
        glue.get_task("SST-2")
    with pytest.raises(TypeError, match="data.task must be a task name"):
        glue.get_task(3)
    with pytest.raises(TypeError, match="data.task must be a task name"):
        glue.get_task(dataclasses.replace(glue.get_task("cola"), name="cola2"))
    with pytest.raises(
        ValueError,
        match="split of GLUE task 'mnli' must be one of train, dev_matched, dev_mismatched, "
        "got 'dev'",
    ):
        glue.read_split("mnli", "/nonexistent", "dev")


def test_lines_end_at_newline_only(tmp_path):
    rows = [("a \r b", "1"), ("c", "0")]
    glue_dir = _write_task(tmp_path, "sst2", train=(("sentence", "label"), rows))
    # Windows line ends read the same; a carriage return inside a field is text.
    _write_tsv(tmp_path / "dev.tsv", ("sentence", "label"), rows, line_end="\r\n")
    splits = glue.read_task("sst2", glue_dir)
    for split in ("train", "dev"):
        assert splits[split].first == ("a \r b", "c")
        assert splits[split].labels.tolist() == [1, 0]


def test_missing_directory_and_files(tmp_path):
    with pytest.raises(
        FileNotFoundError,
        match=r"data\.glue_dir '.*absent' is not a directory; GLUE task 'rte' expects one "
        r"holding train\.tsv, dev\.tsv",
    ):
        glue.read_task("rte", str(tmp_path / "absent"))
    glue_dir = _write_task(tmp_path / "mnli", "mnli")
    os.remove(os.path.join(glue_dir, "dev_mismatched.tsv"))
    # The train file is broken too, but the missing file is reported before any is read.
    _write_tsv(os.path.join(glue_dir, "train.tsv"), ("bad",), [])
    expected = (
        r"missing .*dev_mismatched\.tsv: the directory of GLUE task 'mnli' holds train\.tsv, "
        r"dev_matched\.tsv, dev_mismatched\.tsv"
    )
    with pytest.raises(FileNotFoundError, match=expected):
        glue.read_task("mnli", glue_dir)
    with pytest.raises(FileNotFoundError, match=expected):
        glue.read_split("mnli", glue_dir, "dev_mismatched")
    assert glue.read_split("mnli", glue_dir, "dev_matched").labels.tolist() == [1]


def test_header_that_is_not_the_tasks(tmp_path):
    glue_dir = _write_task(tmp_path, "qnli", dev=(("index", "sentence1", "sentence2", "label"), []))
    path = os.path.join(glue_dir, "dev.tsv")
    with pytest.raises(ValueError) as error:
        glue.read_task("qnli", glue_dir)
    assert str(error.value) == (
        f"{path}:1: the header of GLUE task 'qnli' (dev) must be the 4 tab-separated columns "
        "['index', 'question', 'sentence', 'label'], found 4: "
        "['index', 'sentence1', 'sentence2', 'label']"
    )
    # MNLI's dev files have the five annotators' labels: a train header there is wrong.
    mnli_dir = _write_task(
        tmp_path / "mnli", "mnli", dev_matched=(MNLI_TRAIN_HEADER, FILES["mnli"]["train"][1])
    )
    with pytest.raises(
        ValueError, match=r"dev_matched\.tsv:1: the header .*\(dev_matched\) must be the 16"
    ):
        glue.read_task("mnli", mnli_dir)


def test_wrong_number_of_columns(tmp_path):
    # A tab inside a question (QQP's old release had such rows) gives 7 columns on line 3.
    rows = [
        ("1", "2", "3", "Why?", "Why not?", "0"),
        ("4", "5", "6", "Why\tthat?", "Why not?", "1"),
    ]
    glue_dir = _write_task(tmp_path, "qqp", train=(FILES["qqp"]["train"][0], rows))
    path = os.path.join(glue_dir, "train.tsv")
    with pytest.raises(ValueError) as error:
        glue.read_task("qqp", glue_dir)
    assert str(error.value).startswith(
        f"{path}:3: expected 6 tab-separated columns ['id', 'qid1', 'qid2', 'question1', "
        "'question2', 'is_duplicate'] (GLUE task 'qqp'), found 7: "
    )
    # CoLA's files have no header: the first line is line 1 of the examples, and an empty line
    # is one empty column.
    cola_rows = [("gj04", "1", "", "Fine."), ("",)]
    cola_dir = _write_task(tmp_path / "cola", "cola", dev=(None, cola_rows))
    with pytest.raises(
        ValueError, match=r"dev\.tsv:2: expected 4 tab-separated columns .*found 1: \[''\]"
    ):
        glue.read_task("cola", cola_dir)


def test_label_outside_the_tasks_set(tmp_path):
    rows = [_mnli_row(0, "slate", "A.", "B.", ["neutral", "-"])]
    glue_dir = _write_task(
        tmp_path, "mnli", train=(MNLI_TRAIN_HEADER, FILES["mnli"]["train"][1] + rows)
    )
    path = os.path.join(glue_dir, "train.tsv")
    with pytest.raises(ValueError) as error:
        glue.read_task("mnli", glue_dir)
    assert str(error.value) == (
        f"{path}:5: gold_label '-' is not one of ['entailment', 'neutral', 'contradiction'] "
        "(GLUE task 'mnli')"
    )
    sst_dir = _write_task(
        tmp_path / "sst2", "sst2", dev=(("sentence", "label"), [("a", "positive")])
    )
    with pytest.raises(
        ValueError, match=r"dev\.tsv:2: label 'positive' is not one of \['0', '1'\]"
    ):
        glue.read_task("sst2", sst_dir)


@pytest.mark.parametrize("score", ["5.5", "-0.1", "high", "nan", ""])
def test_stsb_score_outside_zero_to_five(tmp_path, score):
    row = ("0", "g", "f", "y", "0", "none", "none", "A.", "B.", score)
    glue_dir = _write_task(tmp_path, "stsb", dev=(STSB_HEADER, [FILES["stsb"]["dev"][1][0], row]))
    with pytest.raises(
        ValueError, match=rf"dev\.tsv:3: score '{score}' is not a number in \[0, 5\]"
    ):
        glue.read_task("stsb", glue_dir)


def test_empty_split_and_text_that_is_not_utf8(tmp_path):
    glue_dir = _write_task(tmp_path, "wnli", dev=(("index", "sentence1", "sentence2", "label"), []))
    with pytest.raises(ValueError, match=r"dev\.tsv holds no examples \(GLUE task 'wnli', dev\)"):
        glue.read_task("wnli", glue_dir)
    cola_dir = _write_task(tmp_path / "cola", "cola", train=(None, []))
    with pytest.raises(ValueError, match=r"train\.tsv holds no examples"):
        glue.read_task("cola", cola_dir)
    with open(os.path.join(cola_dir, "train.tsv"), "wb") as tsv_file:
        tsv_file.write(b"gj04\t1\t\tFine.\ngj04\t1\t\tCaf\xe9.\n")
    with pytest.raises(ValueError, match=r"train\.tsv:2: not UTF-8 text"):
        glue.read_task("cola", cola_dir)
