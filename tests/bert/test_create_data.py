"""create_data against the spec, on a corpus whose every token names its document and sentence.

Sentence ``s`` of document ``d`` is the word ``d{d}s{s}`` repeated; the vocabulary file holds
exactly these words, so each token id decodes to ``(d, s)`` and a record's pair structure can be
checked from its ids alone.
"""

import fractions
import os

import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch.bert.data import __main__ as create_data
from keras_largebatch.bert.data import corpus as corpus_lib
from keras_largebatch.bert.data import instance_tasks, instances, pretraining_data
from keras_largebatch.bert.data import vocab as vocab_lib

NUM_DOCUMENTS = 60
SENTENCES_PER_DOCUMENT = 8
WORDS_PER_SENTENCE = 4
CLS, SEP, MASK = 2, 3, 4  # positions in vocab_lib.SPECIAL_TOKENS


def _tag(document, sentence):
    return f"d{document}s{sentence}"


@pytest.fixture(scope="module")
def tagged_corpus(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tagged")
    documents = [
        "\n".join(
            " ".join([_tag(d, s)] * WORDS_PER_SENTENCE) for s in range(SENTENCES_PER_DOCUMENT)
        )
        for d in range(NUM_DOCUMENTS)
    ]
    text_file = directory / "corpus.txt"
    text_file.write_text("\n\n".join(documents) + "\n")
    tags = [_tag(d, s) for d in range(NUM_DOCUMENTS) for s in range(SENTENCES_PER_DOCUMENT)]
    vocab_file = directory / "vocab.txt"
    vocab_lib.save_vocabulary(list(vocab_lib.SPECIAL_TOKENS) + tags, str(vocab_file))
    id_to_tag = {
        index + len(vocab_lib.SPECIAL_TOKENS): (d, s)
        for index, (d, s) in enumerate(
            (d, s) for d in range(NUM_DOCUMENTS) for s in range(SENTENCES_PER_DOCUMENT)
        )
    }
    return str(text_file), str(vocab_file), id_to_tag


def _create(tagged_corpus, output_dir, **kwargs):
    text_file, vocab_file, _ = tagged_corpus
    arguments = dict(
        vocab_file=vocab_file,
        max_seq_length=64,
        max_predictions_per_seq=10,
        dupe_factor=10,
        short_seq_prob=0.0,
        num_output_shards=3,
        seed=7,
        num_workers=1,
        progress=False,
    )
    arguments.update(kwargs)
    return pretraining_data.create_pretraining_data([text_file], str(output_dir), **arguments)


def _read_records(paths):
    """Every record of ``paths`` as a dict of NumPy arrays, decoded by tf.train.Example."""
    records = []
    for path in paths:
        for serialized in tf.data.TFRecordDataset(path).as_numpy_iterator():
            features = tf.train.Example.FromString(serialized).features.feature
            records.append(
                {
                    name: np.array(feature.int64_list.value or feature.float_list.value)
                    for name, feature in features.items()
                }
            )
    return records


def _split_pair(record):
    """(segment A ids, segment B ids) of a ``[CLS] A [SEP] B [SEP]`` record, checking framing."""
    length = int(record["input_mask"].sum())
    ids = record["input_ids"]
    length_a = int((record["segment_ids"][:length] == 0).sum()) - 2
    assert ids[0] == CLS and ids[length_a + 1] == SEP and ids[length - 1] == SEP
    np.testing.assert_array_equal(record["input_mask"][length:], 0)
    np.testing.assert_array_equal(ids[length:], 0)
    np.testing.assert_array_equal(record["segment_ids"][length:], 0)
    np.testing.assert_array_equal(record["segment_ids"][length_a + 2 : length], 1)
    return ids[1 : length_a + 1], ids[length_a + 2 : length - 1]


def _expected_random_next_fraction(num_sentences):
    """The spec's share of random-next pairs for documents of ``num_sentences`` equal sentences
    that fit one instance: a chunk of 1 sentence is always random; a chunk of n >= 2 is cut
    after a uniform 1..n-1 sentences and is random with probability 1/2, in which case the
    sentences after the cut form the next chunk."""
    random_count = {1: fractions.Fraction(1)}
    instance_count = {1: fractions.Fraction(1)}
    for n in range(2, num_sentences + 1):
        cuts = range(1, n)
        random_count[n] = fractions.Fraction(1, 2) * (
            1 + sum(random_count[n - cut] for cut in cuts) / len(cuts)
        )
        instance_count[n] = 1 + fractions.Fraction(1, 2) * (
            sum(instance_count[n - cut] for cut in cuts) / len(cuts)
        )
    return float(random_count[num_sentences] / instance_count[num_sentences])


def test_record_schema_matches_google_research_bert(tagged_corpus, tmp_path):
    result = _create(tagged_corpus, tmp_path, dupe_factor=1)
    assert result.record_files == [
        str(tmp_path / f"pretraining-0000{index}-of-00003.tfrecord") for index in range(3)
    ]
    serialized = next(tf.data.TFRecordDataset(result.record_files[0]).as_numpy_iterator())
    features = tf.train.Example.FromString(serialized).features.feature
    expected = {
        "input_ids": ("int64_list", 64),
        "input_mask": ("int64_list", 64),
        "segment_ids": ("int64_list", 64),
        "masked_lm_positions": ("int64_list", 10),
        "masked_lm_ids": ("int64_list", 10),
        "masked_lm_weights": ("float_list", 10),
        "next_sentence_labels": ("int64_list", 1),
    }
    kinds = {name: feature.WhichOneof("kind") for name, feature in features.items()}
    assert {
        name: (kind, len(getattr(features[name], kind).value)) for name, kind in kinds.items()
    } == expected
    counts = [sum(1 for _ in tf.data.TFRecordDataset(path)) for path in result.record_files]
    # Round-robin: shard sizes differ by at most one, the first shards taking the remainder.
    assert sum(counts) == result.num_examples and max(counts) - min(counts) <= 1
    assert counts == sorted(counts, reverse=True)


def test_pairs_follow_the_next_sentence_rule(tagged_corpus, tmp_path):
    _, _, id_to_tag = tagged_corpus
    result = _create(tagged_corpus, tmp_path, dynamic_masking=True)
    records = _read_records(result.record_files)
    assert "masked_lm_positions" not in records[0]
    labels = np.array([int(record["next_sentence_labels"][0]) for record in records])
    for record, label in zip(records, labels):
        tokens_a, tokens_b = _split_pair(record)
        tags_a = [id_to_tag[token] for token in tokens_a]
        tags_b = [id_to_tag[token] for token in tokens_b]
        assert len({d for d, _ in tags_a}) == 1 and len({d for d, _ in tags_b}) == 1
        assert [s for _, s in tags_a] == sorted(s for _, s in tags_a)
        if label == 0:
            assert tags_b[0][0] == tags_a[0][0] and tags_b[0][1] > tags_a[-1][1]
        else:
            assert tags_b[0][0] != tags_a[0][0]
    expected = _expected_random_next_fraction(SENTENCES_PER_DOCUMENT)
    tolerance = 4 * np.sqrt(expected * (1 - expected) / len(labels))
    assert abs(labels.mean() - expected) < tolerance, (labels.mean(), expected, len(labels))


def test_masking_statistics(tagged_corpus, tmp_path):
    _, _, id_to_tag = tagged_corpus
    records = _read_records(_create(tagged_corpus, tmp_path).record_files)
    outcomes = {"mask": 0, "kept": 0, "random": 0}
    masked_tokens = total_tokens = 0
    for record in records:
        length = int(record["input_mask"].sum())
        num_predictions = int(record["masked_lm_weights"].sum())
        assert num_predictions == min(10, max(1, round(length * 0.15)))
        np.testing.assert_array_equal(record["masked_lm_weights"][:num_predictions], 1.0)
        np.testing.assert_array_equal(record["masked_lm_weights"][num_predictions:], 0.0)
        np.testing.assert_array_equal(record["masked_lm_positions"][num_predictions:], 0)
        np.testing.assert_array_equal(record["masked_lm_ids"][num_predictions:], 0)
        positions = record["masked_lm_positions"][:num_predictions]
        assert np.all(np.diff(positions) > 0)
        length_a = int((record["segment_ids"][:length] == 0).sum()) - 2
        assert not set(positions) & {0, length_a + 1, length - 1}, "[CLS]/[SEP] masked"
        originals = record["masked_lm_ids"][:num_predictions]
        assert all(original in id_to_tag for original in originals)
        at_positions = record["input_ids"][positions]
        outcomes["mask"] += int((at_positions == MASK).sum())
        outcomes["kept"] += int((at_positions == originals).sum())
        outcomes["random"] += int(((at_positions != MASK) & (at_positions != originals)).sum())
        assert all(token in id_to_tag for token in at_positions if token != MASK)
        unmasked = np.setdiff1d(
            np.arange(length), np.concatenate([positions, [0, length_a + 1, length - 1]])
        )
        assert all(record["input_ids"][position] in id_to_tag for position in unmasked)
        masked_tokens += num_predictions
        total_tokens += length
    total = sum(outcomes.values())
    assert total > 4000, total
    # A random replacement equals the original with probability 1/480, counted as "kept".
    for outcome, probability in (
        ("mask", 0.8),
        ("kept", 0.1 + 0.1 / 480),
        ("random", 0.1 - 0.1 / 480),
    ):
        tolerance = 4 * np.sqrt(probability * (1 - probability) / total)
        assert abs(outcomes[outcome] / total - probability) < tolerance, (outcome, outcomes)
    assert abs(masked_tokens / total_tokens - 0.15) < 0.01


def test_same_seed_same_bytes_and_other_seed_differs(tagged_corpus, tmp_path):
    first = _create(tagged_corpus, tmp_path / "first", dupe_factor=2)
    second = _create(tagged_corpus, tmp_path / "second", dupe_factor=2)
    other = _create(tagged_corpus, tmp_path / "other", dupe_factor=2, seed=8)
    for path_first, path_second in zip(first.record_files, second.record_files):
        assert open(path_first, "rb").read() == open(path_second, "rb").read()
    assert open(first.record_files[0], "rb").read() != open(other.record_files[0], "rb").read()


def test_output_does_not_depend_on_worker_count(tagged_corpus, tmp_path):
    # Spawned workers import TensorFlow, so this runs the 2-worker path once, on 2 passes.
    one = _create(tagged_corpus, tmp_path / "one", dupe_factor=2, num_workers=1)
    two = _create(tagged_corpus, tmp_path / "two", dupe_factor=2, num_workers=2)
    assert len(instance_tasks.make_tasks(NUM_DOCUMENTS, 2, 7)) > 2
    for path_one, path_two in zip(one.record_files, two.record_files):
        assert open(path_one, "rb").read() == open(path_two, "rb").read()


def test_refuses_to_overwrite_before_any_work(tagged_corpus, tmp_path, monkeypatch):
    first = _create(tagged_corpus, tmp_path, dupe_factor=1, num_output_shards=4)
    before = {path: os.path.getmtime(path) for path in first.record_files}

    def fail(*args, **kwargs):
        raise AssertionError("read input before checking the output")

    with monkeypatch.context() as patch:
        patch.setattr(instances, "read_documents", fail)
        with pytest.raises(FileExistsError, match=r"already holds 5 output file.*--overwrite"):
            _create(tagged_corpus, tmp_path, dupe_factor=1, num_output_shards=4)
        # Shards of another shard count would mix into a glob, so they count as existing too.
        with pytest.raises(FileExistsError, match="pretraining-00000-of-00004"):
            _create(tagged_corpus, tmp_path, dupe_factor=1, num_output_shards=2)
    assert before == {path: os.path.getmtime(path) for path in first.record_files}
    second = _create(tagged_corpus, tmp_path, dupe_factor=1, num_output_shards=2, overwrite=True)
    assert sorted(path.name for path in tmp_path.glob("*.tfrecord")) == [
        os.path.basename(path) for path in second.record_files
    ]


def test_command_line(tagged_corpus, tmp_path, capsys):
    text_file, vocab_file, _ = tagged_corpus
    argv = [
        "--input_files",
        text_file,
        "--vocab_file",
        vocab_file,
        "--output_dir",
        str(tmp_path),
        "--max_seq_length",
        "32",
        "--max_predictions_per_seq",
        "5",
        "--dupe_factor",
        "1",
        "--num_output_shards",
        "2",
        "--num_workers",
        "1",
    ]
    assert create_data.main(argv) == 0
    progress = capsys.readouterr().err
    assert "wrote shard 1/2" in progress and "wrote shard 2/2" in progress
    record = _read_records([str(tmp_path / "pretraining-00000-of-00002.tfrecord")])[0]
    assert len(record["input_ids"]) == 32 and len(record["masked_lm_ids"]) == 5
    assert create_data.main(argv) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert create_data.main(argv + ["--overwrite"]) == 0


def test_builds_vocabulary_when_none_is_given(tmp_path):
    sentences = [
        "The quick brown fox jumps over the lazy dog.",
        "A quick brown dog naps.",
        "The lazy fox sleeps all day long.",
    ]
    text_file = tmp_path / "text.txt"
    text_file.write_text("\n".join(sentences) + "\n\n" + "\n".join(reversed(sentences)) + "\n")
    result = pretraining_data.create_pretraining_data(
        [str(text_file)],
        str(tmp_path / "out"),
        vocabulary_size=100,
        max_seq_length=16,
        max_predictions_per_seq=3,
        dupe_factor=1,
        num_output_shards=1,
        num_workers=1,
        progress=False,
    )
    vocabulary = vocab_lib.load_vocabulary(result.vocab_file)
    assert result.vocab_file == str(tmp_path / "out" / "vocab.txt")
    assert vocabulary[:5] == list(vocab_lib.SPECIAL_TOKENS) and "quick" in vocabulary
    # Two documents of the same sentences, duplicated once: 4 instances at these lengths.
    assert result.num_examples == 4


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"max_predictions_per_seq": 65},
            r"max_predictions_per_seq must be in \[1, max_seq_length=64\], got 65",
        ),
        ({"masked_lm_prob": 1.5}, r"masked_lm_prob must be in \(0, 1\), got 1.5"),
        ({"dupe_factor": 0}, "dupe_factor must be >= 1, got 0"),
        ({"num_output_shards": 0}, "num_output_shards must be >= 1, got 0"),
        ({"max_seq_length": 4}, "max_seq_length must be >= 5, got 4"),
    ],
)
def test_rejects_bad_arguments(tagged_corpus, tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        _create(tagged_corpus, tmp_path, **kwargs)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_seq_length": 64.0}, "max_seq_length must be an integer, got 64.0 of type float"),
        ({"masked_lm_prob": "0.15"}, "masked_lm_prob must be a number, got '0.15' of type str"),
        ({"dupe_factor": "2"}, "dupe_factor must be an integer, got '2' of type str"),
        ({"dynamic_masking": 1}, "dynamic_masking must be True or False, got 1"),
        ({"num_workers": 1.5}, "num_workers must be an integer or None, got 1.5"),
    ],
)
def test_rejects_arguments_of_the_wrong_type(tagged_corpus, tmp_path, kwargs, message):
    with pytest.raises(TypeError, match=message):
        _create(tagged_corpus, tmp_path, **kwargs)
    assert not list(tmp_path.iterdir())


def test_rejects_missing_input_and_single_document(tagged_corpus, tmp_path):
    _, vocab_file, _ = tagged_corpus
    with pytest.raises(ValueError, match=r"input file pattern '.*nothing-\*\.txt' matches no file"):
        pretraining_data.create_pretraining_data(
            [str(tmp_path / "nothing-*.txt")],
            str(tmp_path / "out"),
            vocab_file=vocab_file,
            progress=False,
        )
    single = tmp_path / "single.txt"
    single.write_text("d0s0 d0s0\nd0s1 d0s1\n")
    with pytest.raises(ValueError, match="hold 1 non-empty document.*at least 2"):
        pretraining_data.create_pretraining_data(
            [str(single)],
            str(tmp_path / "out"),
            vocab_file=vocab_file,
            num_workers=1,
            progress=False,
        )


# A two-document stand-in for the embedded corpus keeps the default-data tests short.
STAND_IN_DOCUMENTS = [
    [f"Sentence {word} of the first document." for word in "abcdef"],
    [f"Another {word} sentence in document two." for word in "ghijkl"],
]
STAND_IN_ARGUMENTS = dict(
    max_seq_length=16,
    max_predictions_per_seq=3,
    vocabulary_size=60,
    dupe_factor=2,
    num_output_shards=2,
    num_workers=1,
    progress=False,
)


def test_default_data_is_reused_refused_or_overwritten(tmp_path, monkeypatch):
    documents = STAND_IN_DOCUMENTS
    monkeypatch.setattr(corpus_lib, "default_corpus_documents", lambda: documents)
    arguments = STAND_IN_ARGUMENTS
    first = pretraining_data.create_default_pretraining_data(str(tmp_path), **arguments)
    corpus_text = open(tmp_path / "default_corpus.txt").read()
    assert [block.split("\n") for block in corpus_text.rstrip("\n").split("\n\n")] == documents
    assert first.vocab_file == str(tmp_path / "vocab.txt")
    records = sum(1 for path in first.record_files for _ in tf.data.TFRecordDataset(path))
    assert records == first.num_examples

    def fail(*args, **kwargs):
        raise AssertionError("recreated data that was already there")

    with monkeypatch.context() as patch:
        patch.setattr(pretraining_data, "_create", fail)
        again = pretraining_data.create_default_pretraining_data(str(tmp_path), **arguments)
        assert (again.record_files, again.num_examples) == (first.record_files, first.num_examples)
        with pytest.raises(FileExistsError, match="--overwrite"):
            pretraining_data.create_default_pretraining_data(
                str(tmp_path), **{**arguments, "seed": 1}
            )
    other = pretraining_data.create_default_pretraining_data(
        str(tmp_path), **{**arguments, "seed": 1}, overwrite=True
    )
    assert other.config["seed"] == 1


def test_worker_count_defaults_to_parallel_only_for_large_inputs():
    threshold = instance_tasks.PARALLEL_MIN_TOKEN_PASSES
    cpus = instance_tasks.default_num_workers()
    assert instance_tasks.choose_num_workers(None, threshold // 10 - 1, 10, num_tasks=50) == 1
    assert instance_tasks.choose_num_workers(None, threshold // 10, 10, num_tasks=50) == min(
        cpus, 50
    )
    assert instance_tasks.choose_num_workers(None, threshold, 10, num_tasks=1) == 1
    assert instance_tasks.choose_num_workers(3, 10, 1, num_tasks=50) == 3
    assert instance_tasks.choose_num_workers(3, 10, 1, num_tasks=2) == 2


def test_default_data_interrupted_before_its_manifest_is_redone(tmp_path, monkeypatch):
    # The manifest is written last; without it the directory's own files are regenerable.
    monkeypatch.setattr(corpus_lib, "default_corpus_documents", lambda: STAND_IN_DOCUMENTS)
    arguments = STAND_IN_ARGUMENTS
    first = pretraining_data.create_default_pretraining_data(str(tmp_path), **arguments)
    expected = [open(path, "rb").read() for path in first.record_files]
    os.remove(first.manifest_file)
    again = pretraining_data.create_default_pretraining_data(str(tmp_path), **arguments)
    assert [open(path, "rb").read() for path in again.record_files] == expected
    # A file the function did not write still makes it refuse.
    os.remove(again.manifest_file)
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="overwrite=true for keras-largebatch-pretrain"):
        pretraining_data.create_default_pretraining_data(str(tmp_path), **arguments)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_command_line_whole_word_mask_never_splits_a_word(tmp_path):
    # Words of one to three WordPieces; every sentence a shuffle of them.
    pieces = {"unbreakable": ["un", "##break", "##able"], "cats": ["cat", "##s"], "sat": ["sat"]}
    pieces.update({"matted": ["mat", "##ted"], "rug": ["rug"], "on": ["on"]})
    vocabulary = list(vocab_lib.SPECIAL_TOKENS) + sorted({p for w in pieces.values() for p in w})
    vocab_file = tmp_path / "vocab.txt"
    vocab_lib.save_vocabulary(vocabulary, str(vocab_file))
    rng = np.random.default_rng(0)
    documents = [
        "\n".join(" ".join(rng.permutation(list(pieces))) for _ in range(6)) for _ in range(20)
    ]
    text_file = tmp_path / "text.txt"
    text_file.write_text("\n\n".join(documents) + "\n")
    argv = ["--input_files", str(text_file), "--vocab_file", str(vocab_file)]
    argv += ["--max_seq_length", "32", "--max_predictions_per_seq", "8", "--dupe_factor", "5"]
    argv += ["--num_workers", "1", "--num_output_shards", "1", "--whole-word-mask"]
    assert create_data.main(argv + ["--output_dir", str(tmp_path / "out")]) == 0
    records = _read_records([str(tmp_path / "out" / "pretraining-00000-of-00001.tfrecord")])
    masked = total = 0
    for record in records:
        count = int(record["masked_lm_weights"].sum())
        positions = set(record["masked_lm_positions"][:count].tolist())
        tokens = [vocabulary[i] for i in record["input_ids"]]
        for position, original in zip(
            record["masked_lm_positions"][:count], record["masked_lm_ids"]
        ):
            tokens[position] = vocabulary[original]
        word = []
        for position, token in enumerate(tokens + ["[SEP]"]):
            if not token.startswith("##") and word:
                assert set(word) <= positions or not set(word) & positions, (tokens, word)
                word = []
            if token not in ("[CLS]", "[SEP]", "[PAD]"):
                word.append(position)
        masked += count
        total += int(record["input_mask"].sum())
    assert len(records) > 100
    # round(n * 0.15) per sequence, less where only words too long to fit were left.
    assert abs(masked / total - 0.15) < 0.01, masked / total
    assert create_data.main(argv + ["--output_dir", str(tmp_path / "x"), "--dynamic-masking"]) == 2
