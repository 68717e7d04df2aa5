"""The embedded default's word_order task: parses as GLUE, balanced, disjoint splits, dev unseen
in pretraining, no single token that gives the label away, and written once, atomically."""

import collections
import os
import re

import pytest

from keras_largebatch.bert import corpus, default_task, glue


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
    output_dir = str(tmp_path_factory.mktemp("default") / "word_order")
    assert default_task.write_default_task(output_dir) == output_dir
    return output_dir, glue.read_task("word_order", output_dir)


def _pairs(examples):
    return list(zip(examples.first, examples.labels.tolist()))


def _tokens(sentence):
    """Lowercased words and punctuation marks, as BERT's uncased basic tokenizer splits them."""
    return set(re.findall(r"\w+|[^\w\s]", sentence.lower()))


def test_files_parse_as_glue_in_colas_layout(written):
    output_dir, splits = written
    assert sorted(os.listdir(output_dir)) == ["dev.tsv", "train.tsv"]
    assert len(splits["train"].first) == default_task.DEFAULT_NUM_TRAIN
    assert len(splits["dev"].first) == default_task.DEFAULT_NUM_DEV
    for split, examples in splits.items():
        with open(os.path.join(output_dir, f"{split}.tsv"), encoding="utf-8") as tsv_file:
            rows = [line.rstrip("\n").split("\t") for line in tsv_file]
        assert [sentence for _, _, _, sentence in rows] == list(examples.first)
        for source, label, original_label, _ in rows:
            assert source in default_task.SOURCE_MODULES
            # CoLA marks an unacceptable sentence with "*" in its original-label column.
            assert original_label == {"1": "", "0": "*"}[label]


def test_classes_balanced_and_every_corruption_reorders_its_sentence(written):
    _, splits = written
    for examples in splits.values():
        labels = examples.labels.tolist()
        assert labels.count(0) == labels.count(1) == len(labels) // 2
        real = [sentence for sentence, label in _pairs(examples) if label == 1]
        corrupted = [sentence for sentence, label in _pairs(examples) if label == 0]
        assert len(set(real)) == len(real) and not set(real) & set(corrupted)
        # Each corrupted sentence has its source in the same split: the same words (same
        # first, same last), in another order.
        by_words = {tuple(sorted(sentence.split())): sentence for sentence in real}
        for sentence in corrupted:
            words = sentence.split()
            source = by_words[tuple(sorted(words))].split()
            assert words != source and (words[0], words[-1]) == (source[0], source[-1])
            assert default_task.MIN_SENTENCE_WORDS <= len(words) <= default_task.MAX_SENTENCE_WORDS


def test_no_sentence_shared_between_splits(written):
    _, splits = written
    bags = {
        split: {tuple(sorted(sentence.lower().split())) for sentence in examples.first}
        for split, examples in splits.items()
    }
    # Not a sentence, nor any reordering of one.
    assert not bags["train"] & bags["dev"]


def test_dev_sentences_never_appear_in_pretraining(written, pretraining_documents):
    _, splits = written
    pretraining = {
        " ".join(sentence.lower().split())
        for document in pretraining_documents
        for sentence in document
    }
    dev = {" ".join(sentence.lower().split()) for sentence in splits["dev"].first}
    assert len(dev) == default_task.DEFAULT_NUM_DEV
    assert not dev & pretraining


def _rule_accuracies(examples):
    """Accuracy of each rule "label p if token t is in the sentence, else 1 - p", by (t, p)."""
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


def test_no_single_token_predicts_the_label(written):
    _, splits = written
    train = [(_tokens(sentence), label) for sentence, label in _pairs(splits["train"])]
    dev = [(_tokens(sentence), label) for sentence, label in _pairs(splits["dev"])]
    train_accuracies = _rule_accuracies(train)
    token, present_label = max(train_accuracies, key=train_accuracies.get)
    # The best rule on train, applied to dev example by example.
    right = sum(
        (present_label if token in tokens else 1 - present_label) == label for tokens, label in dev
    )
    assert right / len(dev) <= 0.55
    # Even the best rule chosen on dev itself: every rule is right on one example of each pair.
    assert max(_rule_accuracies(dev).values()) == 0.5


def test_deterministic_in_the_seed(written):
    _, splits = written
    rebuilt = default_task.build_default_task()
    for split, examples in splits.items():
        assert [(sentence, label) for _, label, sentence in rebuilt[split]] == _pairs(examples)


# === Writing, on a few synthetic sentences ===

SENTENCES = [
    (f"module{index % 3}", f"Sentence {index} holds several quite different words for us.")
    for index in range(40)
]


@pytest.fixture
def few_sentences(monkeypatch):
    monkeypatch.setattr(default_task, "source_sentences", lambda: list(SENTENCES))


def _contents(directory):
    return {
        name: open(os.path.join(directory, name), "rb").read()
        for name in sorted(os.listdir(directory))
    }


def test_seed_and_sizes(few_sentences):
    first = default_task.build_default_task(num_train=20, num_dev=10, seed=1)
    assert first == default_task.build_default_task(num_train=20, num_dev=10, seed=1)
    assert first != default_task.build_default_task(num_train=20, num_dev=10, seed=2)
    # Dev is drawn first, so it does not change with the train size.
    assert sorted(first["dev"]) == sorted(
        default_task.build_default_task(20 + 30, 10, seed=1)["dev"]
    )
    with pytest.raises(
        ValueError, match=r"num_train \+ num_dev must be at most 80 .*40 sentences.*got 72 \+ 10"
    ):
        default_task.build_default_task(num_train=72, num_dev=10)
    with pytest.raises(ValueError, match="num_dev must be even .*got 11"):
        default_task.build_default_task(num_dev=11)
    with pytest.raises(ValueError, match=r"num_train must be in \[2, inf\], got 0"):
        default_task.build_default_task(num_train=0)
    with pytest.raises(TypeError, match="seed must be an integer"):
        default_task.build_default_task(seed="1")


def test_write_again_is_a_no_op_and_other_content_is_never_overwritten(tmp_path, few_sentences):
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
        ValueError, match=r"holds a train\.tsv other than the word_order task these arguments give"
    ):
        default_task.write_default_task(output_dir, 20, 10, seed=4)
    assert _contents(output_dir) == written_files
    # A file the task does not write: refused before anything is built.
    with open(os.path.join(output_dir, "notes.txt"), "w") as notes:
        notes.write("mine")
    with pytest.raises(
        ValueError, match=r"holds \['notes\.txt'\], which the word_order task does not write"
    ):
        default_task.write_default_task(output_dir, 20, 10, seed=3)
    assert _contents(output_dir) == {**written_files, "notes.txt": b"mine"}
    with pytest.raises(ValueError, match="exists and is not a directory"):
        default_task.write_default_task(os.path.join(output_dir, "notes.txt"), 20, 10)


def test_an_empty_directory_is_written(tmp_path, few_sentences):
    output_dir = tmp_path / "empty"
    output_dir.mkdir()
    default_task.write_default_task(output_dir, 4, 2, seed=0)
    splits = glue.read_task("word_order", str(output_dir))
    assert splits["train"].labels.tolist().count(1) == 2
    assert sorted(os.listdir(tmp_path)) == ["empty"]
