"""The masked-LM arm's workload and its corpus: the Debian documentation reader on tiny files
in the packages' formats, packing and the split by document, the cache, dynamic masking
counted, and the evaluation loss recomputed in NumPy, on a few documents of the embedded
corpus with a tiny model."""

import gzip
import os

import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch.bert.data import vocab as vocab_lib
from keras_largebatch.bert.data.corpus import default_corpus_documents
from keras_largebatch.study.arms import bert_mlm, bert_mlm_data, debian_text

TINY = {
    "corpus": "python",
    "sequence_length": 32,
    "vocabulary_size": 300,
    "num_layers": 1,
    "hidden_dim": 16,
    "num_heads": 2,
    "intermediate_dim": 32,
    "validation_sequences": 40,
    "test_sequences": 30,
}


@pytest.fixture(scope="module")
def documents():
    # The first documents of the embedded corpus: enough text for a vocabulary of 300 and
    # a few hundred sequences, little enough to learn it in seconds.
    return default_corpus_documents()[:12]


@pytest.fixture(scope="module")
def prepared(documents, tmp_path_factory):
    """A tiny workload on ``documents`` and its loaded data."""
    patch = pytest.MonkeyPatch()
    patch.setitem(bert_mlm_data.CORPORA, "python", lambda: documents)
    workload = bert_mlm.MaskedLanguageModelWorkload(
        **TINY, data_dir=str(tmp_path_factory.mktemp("cache") / "python")
    )
    yield workload, workload.load()
    patch.undo()


# === The Debian reader ===


def test_reads_each_package_format_as_one_document_of_prose(tmp_path):
    kernel = tmp_path / "Documentation"
    (kernel / "admin-guide").mkdir(parents=True)
    (kernel / "translations" / "it_IT").mkdir(parents=True)
    rst = (
        "Booting the kernel\n==================\n\nThe boot loader hands the kernel its "
        "command line. Each parameter is read\nonce, early.\n\n.. code-block:: c\n\n"
        "    int main(void);\n"
    )
    with gzip.open(kernel / "admin-guide" / "boot.rst.gz", "wt") as stream:
        stream.write(rst)
    with gzip.open(kernel / "translations" / "it_IT" / "boot.rst.gz", "wt") as stream:
        stream.write("Il kernel legge la riga di comando una sola volta.\n")
    with gzip.open(kernel / "notes.txt.gz", "wt") as stream:
        stream.write("Plain text notes say what the\nmodule does at load time.\n")
    (kernel / "logo.svg.gz").write_bytes(gzip.compress(b"<svg/>"))
    sources = tmp_path / "_sources"
    sources.mkdir()
    (sources / "tutorial.rst.txt").write_text(
        "Lists hold items in order. A tuple cannot change.\n\n>>> [1, 2]\n"
    )
    pages = tmp_path / "html"
    pages.mkdir()
    (pages / "page.html").write_text(
        "<html><head><script>var p = 'Not a paragraph of prose.';</script></head><body>"
        "<h1>Title Of The Page</h1><p>The planner picks a join&nbsp;order by\n cost. "
        "It reads <code>pg_stats</code> for each table.<p>An unclosed paragraph ends at "
        "the next one.</p><pre>SELECT 1;</pre><div><p>Tables keep rows on pages.</div>"
        "</body></html>"
    )
    listed = (
        debian_text.Source("linux-doc", str(kernel), (".rst.gz", ".txt.gz"), ("translations",)),
        debian_text.Source("python-doc", str(sources), (".rst.txt",)),
        debian_text.Source("pg-doc", str(pages), (".html",)),
    )

    assert debian_text.read_documents(listed) == [
        [
            "The boot loader hands the kernel its command line.",
            "Each parameter is read once, early.",
        ],
        ["Plain text notes say what the module does at load time."],
        ["Lists hold items in order.", "A tuple cannot change."],
        [
            "The planner picks a join order by cost.",
            "It reads pg_stats for each table.",
            "An unclosed paragraph ends at the next one.",
            "Tables keep rows on pages.",
        ],
    ]


def test_a_missing_source_directory_names_the_package_and_its_install_command(tmp_path):
    source = debian_text.Source("linux-doc-6.1", str(tmp_path / "absent"), (".rst.gz",))
    with pytest.raises(FileNotFoundError, match="apt-get install -y -qq linux-doc-6.1"):
        debian_text.read_documents([source])


def test_without_root_installing_names_the_command_to_run(monkeypatch):
    monkeypatch.setattr(debian_text, "is_installed", lambda package: package == "installed-doc")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    sources = [
        debian_text.Source(package, "/nowhere", (".html",))
        for package in ("installed-doc", "first-doc", "second-doc", "first-doc")
    ]
    with pytest.raises(PermissionError) as raised:
        debian_text.ensure_installed(sources)
    assert "apt-get update -qq && apt-get install -y -qq first-doc second-doc'" in str(raised.value)


# === Packing and splitting ===


def test_packs_a_document_into_cls_runs_sep_padded():
    sequences = bert_mlm_data.pack_document(
        np.arange(10, 17), sequence_length=5, cls_id=2, sep_id=3
    )
    np.testing.assert_array_equal(
        sequences, [[2, 10, 11, 12, 3], [2, 13, 14, 15, 3], [2, 16, 3, 0, 0]]
    )


def test_the_split_is_by_document_exact_and_deterministic():
    rng = np.random.default_rng(1)
    per_document = [
        np.full((rng.integers(1, 6), 4), index, np.int32) for index in range(50)
    ]  # each sequence holds its document's index
    splits = bert_mlm_data.split_documents(per_document, 20, 15, seed=0)
    assert len(splits["validation"][0]) == 20 and len(splits["test"][0]) == 15
    document_sets = {}
    for split, (sequences, documents) in splits.items():
        np.testing.assert_array_equal(sequences[:, 0], documents)
        document_sets[split] = set(documents.tolist())
    assert not document_sets["train"] & (document_sets["validation"] | document_sets["test"])
    assert not document_sets["validation"] & document_sets["test"]
    # Every sequence of a training document is there; the evaluation splits lose at most
    # the tail of their last document.
    for index in document_sets["train"]:
        assert (splits["train"][1] == index).sum() == len(per_document[index])
    again = bert_mlm_data.split_documents(per_document, 20, 15, seed=0)
    for split in bert_mlm_data.SPLITS:
        np.testing.assert_array_equal(again[split][0], splits[split][0])
    other = bert_mlm_data.split_documents(per_document, 20, 15, seed=1)
    assert not np.array_equal(other["validation"][1], splits["validation"][1])


def test_a_split_that_leaves_nothing_to_train_on_is_refused():
    per_document = [np.zeros((2, 4), np.int32) for _ in range(5)]
    with pytest.raises(ValueError, match="validation_sequences=6 and test_sequences=3"):
        bert_mlm_data.split_documents(per_document, 6, 3, seed=0)


def test_loaded_splits_share_no_document_and_hold_the_asked_counts(prepared):
    workload, data = prepared
    assert len(data.sequences["validation"]) == TINY["validation_sequences"]
    assert len(data.sequences["test"]) == TINY["test_sequences"]
    sets = [set(data.documents[split].tolist()) for split in bert_mlm_data.SPLITS]
    assert not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2])
    cls_id = data.vocabulary.index(vocab_lib.CLS_TOKEN)
    sep_id = data.vocabulary.index(vocab_lib.SEP_TOKEN)
    for sequences in data.sequences.values():
        assert sequences.shape[1] == TINY["sequence_length"]
        assert (sequences[:, 0] == cls_id).all() and ((sequences == sep_id).sum(1) == 1).all()
    assert data.train_examples == len(data.sequences["train"]) > 100


# === The cache ===


def test_a_second_load_reads_the_cache_back_equal(prepared):
    workload, data = prepared
    files = sorted(os.listdir(workload.data_dir))
    again = workload.load()
    assert sorted(os.listdir(workload.data_dir)) == files == ["arrays.npz", "settings.json"]
    assert again.fingerprint == data.fingerprint and again.vocabulary == data.vocabulary
    for split in bert_mlm_data.SPLITS:
        np.testing.assert_array_equal(again.sequences[split], data.sequences[split])
        np.testing.assert_array_equal(again.documents[split], data.documents[split])


def test_a_users_file_in_data_dir_is_never_overwritten(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    workload = bert_mlm.MaskedLanguageModelWorkload(**TINY, data_dir=str(tmp_path))
    with pytest.raises(FileExistsError, match="holds files but no cache"):
        workload.load()
    assert os.listdir(tmp_path) == ["notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_cache_of_other_settings_is_refused(prepared):
    workload, _ = prepared
    other = bert_mlm.MaskedLanguageModelWorkload(
        **dict(TINY, test_sequences=31), data_dir=workload.data_dir
    )
    with pytest.raises(ValueError, match=r"differing in \['test_sequences'\]"):
        other.load()


# === Masking and evaluation ===


def test_dynamic_masking_masks_15_percent_80_10_10_anew_each_batch(prepared):
    workload, data = prepared
    batches = workload.train_dataset(data, batch_size=64, seed=3).take(30)
    masked = kept = replaced = positions = real_tokens = 0
    first_positions = []
    for x, y, weights in batches:
        token_ids, real = x["token_ids"].numpy(), weights.numpy() > 0
        chosen = np.take_along_axis(token_ids, x["mask_positions"].numpy(), axis=1)[real]
        originals = y.numpy()[real]
        mask_id = data.vocabulary.index(vocab_lib.MASK_TOKEN)
        masked += (chosen == mask_id).sum()
        kept += (chosen == originals).sum()
        replaced += ((chosen != mask_id) & (chosen != originals)).sum()
        positions += real.sum()
        real_tokens += x["padding_mask"].numpy().sum()
        first_positions.append(x["mask_positions"].numpy()[0])
    assert abs(positions / real_tokens - 0.15) < 0.01
    # 10% random draws land on the original token 1 time in ~300: "kept" is 10% plus that.
    np.testing.assert_allclose(
        [masked / positions, kept / positions, replaced / positions], [0.8, 0.1, 0.1], atol=0.02
    )
    assert len({tuple(p) for p in first_positions}) > 1
    again = next(iter(workload.train_dataset(data, batch_size=64, seed=3)))
    np.testing.assert_array_equal(again[0]["mask_positions"][0], first_positions[0])


def test_the_evaluation_loss_is_the_masked_cross_entropy_of_the_logits(prepared):
    workload, data = prepared
    model = workload.build_model(seed=0)
    result = workload.evaluate(model, data, "validation")
    x, y, weights = workload.evaluation_inputs(data, "validation")
    logits = model.predict(x, batch_size=64, verbose=0).astype(np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    cross_entropy = -np.take_along_axis(log_probabilities, y[..., None], axis=-1)[..., 0]
    assert weights.sum() > len(y)  # several masked positions per sequence, padding slots 0
    np.testing.assert_allclose(
        result["loss"], (cross_entropy * weights).sum() / weights.sum(), rtol=1e-5
    )
    accuracy = ((logits.argmax(-1) == y) * weights).sum() / weights.sum()
    np.testing.assert_allclose(result["accuracy"], accuracy, rtol=1e-6)
    # The masks are fixed: a second evaluation scores the same positions the same way.
    assert workload.evaluate(model, data, "validation") == result
    assert workload.evaluate(model, data, "test")["loss"] != result["loss"]


def test_a_compiled_step_trains_on_the_masked_loss(prepared):
    import keras

    workload, data = prepared
    model = workload.build_model(seed=0)
    paths = [variable.path for variable in model.trainable_variables]
    assert "pooled_dense/kernel" not in paths and "mlm_head/output_bias" in paths
    excluded = [p for p in paths if any(rule in p for rule in workload.decay_exclusions)]
    assert all(p.endswith(("/gamma", "/beta", "bias")) for p in excluded)
    assert all(p.endswith(("kernel", "embeddings")) for p in set(paths) - set(excluded))
    workload.compile(model, keras.optimizers.SGD(0.0))
    x, y, weights = next(iter(workload.train_dataset(data, batch_size=16, seed=0)))
    loss = model.evaluate(x, y, sample_weight=weights, verbose=0, return_dict=True)["loss"]
    logits = tf.cast(model(x, training=False), tf.float64).numpy()
    cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits).numpy()
    expected = (cross_entropy * weights.numpy()).sum() / weights.numpy().sum()
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


# === Arguments ===


@pytest.mark.parametrize(
    "argument, value, error, message",
    [
        ("corpus", "wikipedia", ValueError, "corpus must be one of"),
        ("sequence_length", 2, ValueError, r"sequence_length must be in \[3, inf\], got 2"),
        ("vocabulary_size", 5, ValueError, "vocabulary_size must be in"),
        ("num_layers", 1.5, TypeError, "num_layers must be an integer, got 1.5"),
        ("hidden_dim", 15, ValueError, "hidden_dim must be a multiple of num_heads=2, got 15"),
        ("dropout", 1.0, ValueError, r"dropout must be in \[0, 1\), got 1.0"),
        ("validation_sequences", 0, ValueError, "validation_sequences must be in"),
        ("train_sequences", "all", TypeError, "train_sequences must be an integer or None"),
        ("data_dir", 3, TypeError, "data_dir must be a path"),
    ],
)
def test_a_bad_argument_is_named_with_its_value(argument, value, error, message):
    with pytest.raises(error, match=message):
        bert_mlm.MaskedLanguageModelWorkload(**dict(TINY, **{argument: value}))


def test_a_bad_split_or_batch_size_is_named(prepared):
    workload, data = prepared
    with pytest.raises(ValueError, match="split must be one of .*got 'train'"):
        workload.evaluation_inputs(data, "train")
    with pytest.raises(ValueError, match=r"batch_size must be in \[1, "):
        workload.train_dataset(data, batch_size=data.train_examples + 1, seed=0)
