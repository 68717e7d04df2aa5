"""The embedded default's next_sentence task: parses as GLUE, balanced, every positive a real
pair of consecutive sentences and every negative a foreign one, disjoint splits, dev unseen in
pretraining, no single token or sentence that gives the label away, and written once,
atomically."""

import collections
import os
import random
import re

import numpy as np
import pytest

from keras_largebatch.bert.data import corpus
from keras_largebatch.bert.finetuning import default_task, glue


@pytest.fixture(scope="module")
def pretraining_documents():
    """The pretraining corpus, read once for the module: the tests and the task builds share it."""
    documents = corpus.default_corpus_documents()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(corpus, "default_corpus_documents", lambda: documents)
        yield documents


@pytest.fixture(scope="module")
def written(tmp_path_factory, pretraining_documents):
    """The default task, written with the default arguments and read back as GLUE."""
    output_dir = str(tmp_path_factory.mktemp("default") / "next_sentence")
    assert default_task.write_default_task(output_dir) == output_dir
    return output_dir, glue.read_task("next_sentence", output_dir)


@pytest.fixture(scope="module")
def docstring_of(pretraining_documents):
    """Each real pair ``(A, B)`` -> the index of its docstring, from the sources themselves."""
    return {
        pair: index
        for index, (_, pairs) in enumerate(default_task.source_documents())
        for pair in pairs
    }


def _rows(examples):
    return list(zip(examples.first, examples.second, examples.labels.tolist()))


def _tokens(sentence):
    """Lowercased words and punctuation marks, as BERT's uncased basic tokenizer splits them."""
    return set(re.findall(r"\w+|[^\w\s]", sentence.lower()))


def test_files_parse_as_glue_in_wnlis_layout_with_a_source(written):
    output_dir, splits = written
    assert sorted(os.listdir(output_dir)) == ["dev.tsv", "train.tsv"]
    assert len(splits["train"].first) == default_task.DEFAULT_NUM_TRAIN
    assert len(splits["dev"].first) == default_task.DEFAULT_NUM_DEV
    for split, examples in splits.items():
        with open(os.path.join(output_dir, f"{split}.tsv"), encoding="utf-8") as tsv_file:
            header, *rows = [line.rstrip("\n").split("\t") for line in tsv_file]
        assert header == ["index", "source", "sentence1", "sentence2", "label"]
        assert [int(index) for index, *_ in rows] == list(range(len(rows)))
        assert [(first, second) for _, _, first, second, _ in rows] == list(
            zip(examples.first, examples.second)
        )
        assert {source for _, source, *_ in rows} <= set(default_task.SOURCE_MODULES)


def test_positives_follow_in_their_docstring_and_negatives_come_from_another(written, docstring_of):
    _, splits = written
    for examples in splits.values():
        rows = _rows(examples)
        positives = [(first, second) for first, second, label in rows if label == 1]
        negatives = [(first, second) for first, second, label in rows if label == 0]
        assert len(positives) == len(negatives) == len(rows) // 2
        assert all(pair in docstring_of for pair in positives)
        # The negative's B is some real pair's B, from a docstring other than A's.
        docstring_of_b = {second: docstring_of[first, second] for first, second in positives}
        docstring_of_a = {first: docstring_of[first, second] for first, second in positives}
        for first, second in negatives:
            assert (first, second) not in docstring_of
            assert docstring_of_b[second] != docstring_of_a[first]
        for first, second in positives + negatives:
            for sentence in (first, second):
                assert (
                    default_task.MIN_SENTENCE_WORDS
                    <= len(sentence.split())
                    <= default_task.MAX_SENTENCE_WORDS
                )


def test_each_sentence_is_as_often_in_one_class_as_in_the_other(written):
    _, splits = written
    for examples in splits.values():
        rows = _rows(examples)
        for column in (0, 1):
            by_label = [
                collections.Counter(row[column] for row in rows if row[2] == label)
                for label in (0, 1)
            ]
            assert by_label[0] == by_label[1]


def test_no_sentence_shared_between_splits(written):
    _, splits = written
    sentences = {
        split: {" ".join(s.lower().split()) for s in examples.first + examples.second}
        for split, examples in splits.items()
    }
    assert not sentences["train"] & sentences["dev"]


def test_dev_sentences_never_appear_in_pretraining(written, pretraining_documents):
    _, splits = written
    pretraining = {
        " ".join(sentence.lower().split())
        for document in pretraining_documents
        for sentence in document
    }
    dev = splits["dev"]
    dev_sentences = {" ".join(s.lower().split()) for s in dev.first + dev.second}
    assert len(dev_sentences) >= default_task.DEFAULT_NUM_DEV // 2
    assert not dev_sentences & pretraining


def _rule_accuracies(examples):
    """Accuracy of each rule "label p if token t is present, else 1 - p", by (t, p)."""
    counts = collections.Counter((token, label) for tokens, label in examples for token in tokens)
    num_label = collections.Counter(label for _, label in examples)
    return {
        (token, present_label): (
            counts[token, present_label]
            + num_label[1 - present_label]
            - counts[token, 1 - present_label]
        )
        / len(examples)
        for token, _ in counts
        for present_label in (0, 1)
    }


@pytest.mark.parametrize("where", ["first", "second", "either"])
def test_no_single_token_predicts_the_label(written, where):
    _, splits = written

    def tokens(examples):
        return [
            (
                {"first": _tokens(first), "second": _tokens(second)}.get(
                    where, _tokens(first) | _tokens(second)
                ),
                label,
            )
            for first, second, label in _rows(examples)
        ]

    train, dev = tokens(splits["train"]), tokens(splits["dev"])
    train_accuracies = _rule_accuracies(train)
    token, present_label = max(train_accuracies, key=train_accuracies.get)
    # The best rule on train, applied to dev example by example.
    right = sum(
        (present_label if token in found else 1 - present_label) == label for found, label in dev
    )
    assert right / len(dev) <= 0.55
    if where != "either":
        # Within one sentence even the best rule chosen on dev itself is at chance: each
        # sentence is there once in each class.
        assert max(_rule_accuracies(dev).values()) == 0.5


def test_deterministic_in_the_seed(written):
    _, splits = written
    rebuilt = default_task.build_default_task()
    for split, examples in splits.items():
        assert [(a, b, label) for _, a, b, label in rebuilt[split]] == _rows(examples)


def _examples(rows):
    return glue.Examples(
        first=tuple(a for a, _, _ in rows),
        second=tuple(b for _, b, _ in rows),
        labels=np.array([label for _, _, label in rows], np.int32),
    )


def test_the_word_overlap_rule_picks_its_threshold_on_train():
    # Jaccard overlaps 1, 0, 1/5 and 1/7 (case and punctuation aside): from 1/5 up is label 1.
    train = _examples(
        [
            ("A b.", "a B", 1),
            ("a b", "c d", 0),
            ("a b c", "a d e", 1),
            ("a b c d", "a e f g", 0),
        ]
    )
    # 1/3 (label 0) and 1/6 (label 1) are wrong at 1/5; 1 and 0 are right.
    dev = _examples([("x y", "x z", 0), ("p q r s t", "p u", 1), ("m", "m", 1), ("k", "j", 0)])
    rule = default_task.overlap_rule(train, dev)
    assert rule == pytest.approx({"threshold": 0.2, "train_accuracy": 1.0, "dev_accuracy": 0.5})


def test_the_word_overlap_rule_is_far_from_perfect_on_the_default_task(written):
    _, splits = written
    rule = default_task.overlap_rule(splits["train"], splits["dev"])
    # Real pairs share more words than foreign ones, but not always.
    assert 0.6 < rule["dev_accuracy"] < 0.8


# === Building and writing, on a few synthetic docstrings ===

DOCUMENTS = [
    (
        f"module{index % 3}",
        [
            (f"Sentence {index}.{k} of this docstring.", f"Sentence {index}.{k + 1} then.")
            for k in (0, 2)
        ],
    )
    for index in range(20)
]


@pytest.fixture
def few_documents(monkeypatch):
    monkeypatch.setattr(default_task, "source_documents", lambda: list(DOCUMENTS))


def _contents(directory):
    return {
        name: open(os.path.join(directory, name), "rb").read()
        for name in sorted(os.listdir(directory))
    }


def test_seed_and_sizes(few_documents):
    first = default_task.build_default_task(num_train=20, num_dev=10, seed=1)
    assert first == default_task.build_default_task(num_train=20, num_dev=10, seed=1)
    assert first != default_task.build_default_task(num_train=20, num_dev=10, seed=2)
    # Dev is drawn first, so it does not change with the train size.
    assert first["dev"] == default_task.build_default_task(20 + 30, 10, seed=1)["dev"]
    with pytest.raises(
        ValueError,
        match=r"num_train \+ num_dev must be at most about 80: .* 40 pairs .*got 72 \+ 10",
    ):
        default_task.build_default_task(num_train=72, num_dev=10)
    with pytest.raises(ValueError, match="num_dev must be even .*got 11"):
        default_task.build_default_task(num_dev=11)
    with pytest.raises(ValueError, match=r"num_train must be in \[4, inf\], got 2"):
        default_task.build_default_task(num_train=2)
    with pytest.raises(TypeError, match="seed must be an integer"):
        default_task.build_default_task(seed="1")


def test_a_negative_never_takes_its_own_docstrings_sentence(few_documents):
    pairs = {pair: index for index, (_, pairs) in enumerate(DOCUMENTS) for pair in pairs}
    for seed in range(20):
        splits = default_task.build_default_task(num_train=8, num_dev=8, seed=seed)
        for rows in splits.values():
            for _, first, second, label in rows:
                docstring_of_first = next(i for (a, _), i in pairs.items() if a == first)
                docstring_of_second = next(i for (_, b), i in pairs.items() if b == second)
                assert (docstring_of_first == docstring_of_second) == (label == 1)


def test_one_docstring_gives_at_most_half_of_a_splits_pairs(monkeypatch):
    many = [(f"First {k} words in one docstring.", f"Then {k} more words here.") for k in range(6)]
    documents = [("big", many)] + [
        (f"small{k}", [(f"A short first one {k}.", f"And a second one {k}.")]) for k in range(6)
    ]
    monkeypatch.setattr(default_task, "source_documents", lambda: list(documents))
    for seed in range(10):
        splits = default_task.build_default_task(num_train=4, num_dev=8, seed=seed)
        for split, num_pairs in (("dev", 4), ("train", 2)):
            positives = [module for module, *_, label in splits[split] if label]
            assert len(positives) == num_pairs
            assert positives.count("big") <= num_pairs // 2


def test_every_draw_takes_each_negative_from_another_docstring():
    rng = random.Random(0)
    for _ in range(300):
        size = rng.randint(2, 30)
        docstrings = [rng.randrange(1, 6) for _ in range(size // 2)]
        # No docstring over half: the other half from docstrings of their own.
        docstrings += [-index for index in range(size - len(docstrings))]
        rng.shuffle(docstrings)
        permutation = default_task._other_docstring_permutation(docstrings, rng)
        assert sorted(permutation) == list(range(size))
        assert all(docstrings[p] != d for p, d in zip(permutation, docstrings))


def test_write_again_is_a_no_op_and_other_content_is_never_overwritten(tmp_path, few_documents):
    output_dir = str(tmp_path / "parent" / "task")
    assert default_task.write_default_task(output_dir, 20, 10, seed=3) == output_dir
    written_files = _contents(output_dir)
    assert sorted(written_files) == ["dev.tsv", "train.tsv"]
    # No temporary directory is left beside it.
    assert os.listdir(tmp_path / "parent") == ["task"]
    modified = os.stat(os.path.join(output_dir, "train.tsv")).st_mtime_ns
    assert default_task.write_default_task(output_dir, 20, 10, seed=3) == output_dir
    assert os.stat(os.path.join(output_dir, "train.tsv")).st_mtime_ns == modified
    with pytest.raises(
        ValueError,
        match=r"holds a train\.tsv other than the next_sentence task these arguments give",
    ):
        default_task.write_default_task(output_dir, 20, 10, seed=4)
    assert _contents(output_dir) == written_files
    # A file the task does not write: refused before anything is built.
    with open(os.path.join(output_dir, "notes.txt"), "w") as notes:
        notes.write("mine")
    with pytest.raises(
        ValueError, match=r"holds \['notes\.txt'\], which the next_sentence task does not write"
    ):
        default_task.write_default_task(output_dir, 20, 10, seed=3)
    assert _contents(output_dir) == {**written_files, "notes.txt": b"mine"}
    with pytest.raises(ValueError, match="exists and is not a directory"):
        default_task.write_default_task(os.path.join(output_dir, "notes.txt"), 20, 10)


def test_an_empty_directory_is_written(tmp_path, few_documents):
    output_dir = tmp_path / "empty"
    output_dir.mkdir()
    default_task.write_default_task(output_dir, 8, 8, seed=0)
    splits = glue.read_task("next_sentence", str(output_dir))
    assert splits["train"].labels.tolist().count(1) == 4
    assert sorted(os.listdir(tmp_path)) == ["empty"]
