"""Exporting a pretraining run to a keras-hub preset: keras-hub's own loaders read back the
checkpoint's weights and pretraining's tokenization, a classifier trains on raw strings, and
bad inputs are refused before anything is written.

One tiny run (1 layer, hidden 16, 4 steps under mixed_bfloat16, checkpoints at global steps 2
and 4) on synthetic records over a vocabulary written by hand, so that token ids are known.
"""

import contextlib
import io
import json
import os
import shutil
from pathlib import Path

import h5py
import keras
import keras_hub
import numpy as np
import pytest

from keras_largebatch.bert import export as export_lib
from keras_largebatch.bert import pretraining as pretrain_lib
from keras_largebatch.bert.data import vocab as vocab_lib
from keras_largebatch.bert.export import __main__ as export_command
from keras_largebatch.bert.export import run as export_run
from keras_largebatch.bert.pretraining import config as config_lib
from keras_largebatch.bert.pretraining import recipe as recipe_lib
from keras_largebatch.training.run_directory import RUN_CONFIG_FILENAME
from keras_largebatch.vision.config import TrainConfig
from tests.support.bert_records import write_records
from tests.support.runs import checkpoint_arrays

# Ids 0-4 the special tokens; then the words the tokenization checks use.
VOCABULARY = list(vocab_lib.SPECIAL_TOKENS) + (
    ["hello", "world", ",", "uber", "the", "##s", ".", "[", "]", "cls"]
    + [f"w{index}" for index in range(14)]
)
TEXT = "Héllo Wörld, Über"
# Lowercased and accent-stripped, "hello world , uber": read off VOCABULARY.
TEXT_IDS = [5, 6, 7, 8]
MORE_TEXTS = {"THE Worlds.": [9, 6, 10, 11], "[CLS] zebra": [12, 14, 13, 1]}
POSITION_EMBEDDINGS = 24


def _checkpoint(run_dir, step):
    return os.path.join(run_dir, "checkpoints", f"ckpt-{step:09d}.weights.h5")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """``(config, run_dir)`` of the tiny pretraining run."""
    directory = tmp_path_factory.mktemp("export_run")
    vocab_file = vocab_lib.save_vocabulary(VOCABULARY, str(directory / "vocab.txt"))
    records = write_records(directory / "train.tfrecord", 32, vocabulary_size=len(VOCABULARY))
    run_dir = str(directory / "run")
    phase = (
        "{seq_length: 16, max_predictions_per_seq: 4, global_batch_size: 8, steps: 4, "
        f"warmup_steps: 1, input_files: ['{records}']}}"
    )
    config = config_lib.load_config(
        overrides=[
            f"output_dir={run_dir}",
            "model.num_layers=1",
            "model.hidden_dim=16",
            "model.num_heads=2",
            "model.dropout=0.0",
            f"model.max_sequence_length={POSITION_EMBEDDINGS}",
            f"data.vocab_file={vocab_file}",
            f"phases=[{phase}]",
            "log_interval=2",
            "checkpoint_interval=2",
            "mixed_precision=mixed_bfloat16",
            "strategy.name=default",
        ]
    )
    pretrain_lib.pretrain(config, log=lambda line: None)
    return config, run_dir


@pytest.fixture(scope="module")
def exported(run, tmp_path_factory):
    """``(returned dict, preset_dir, progress lines, the run directory's files before)`` of an
    export with the defaults."""
    preset_dir = str(tmp_path_factory.mktemp("presets") / "newest")
    lines, before = [], _listing(run[1])
    result = export_lib.export_preset(run[1], preset_dir, log=lines.append)
    return result, preset_dir, lines, before


@pytest.fixture(scope="module")
def step_two(run, tmp_path_factory):
    """``(exit status, stdout, stderr, preset_dir)`` of the command exporting global step 2 at
    the longest sequence length the position embeddings allow, into an existing empty dir."""
    preset_dir = tmp_path_factory.mktemp("step_two")
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        status = export_command.main(
            [run[1], str(preset_dir), "--step", "2", "--sequence-length", str(POSITION_EMBEDDINGS)]
        )
    return status, stdout.getvalue(), stderr.getvalue(), str(preset_dir)


def _reference_backbone(config, checkpoint):
    """The backbone of a freshly built BertPretrainer with ``checkpoint`` loaded."""
    pretrainer = recipe_lib.build_model(config, len(VOCABULARY))
    pretrainer.load_weights(checkpoint)
    return pretrainer.backbone


def _weights(model):
    """``{variable path: array}`` of every variable of ``model``."""
    weights = {v.path: keras.ops.convert_to_numpy(v) for v in model.weights}
    assert len(weights) == len(model.weights)
    return weights


def _assert_same_weights(loaded, reference):
    loaded, reference = _weights(loaded), _weights(reference)
    assert sorted(loaded) == sorted(reference)
    for path, value in reference.items():
        np.testing.assert_array_equal(loaded[path], value, err_msg=path)


def test_backbone_from_preset_holds_the_newest_checkpoints_weights(run, exported):
    config, run_dir = run
    result, preset_dir, lines, run_files = exported
    assert _listing(run_dir) == run_files
    assert result == {
        "preset_dir": preset_dir,
        "run_dir": run_dir,
        "step": 4,
        "sequence_length": 16,
        "vocabulary_size": len(VOCABULARY),
        "dtype": "mixed_bfloat16",
        "lowercase": True,
        "strip_accents": True,
    }
    loaded = keras_hub.models.BertBackbone.from_preset(preset_dir)
    _assert_same_weights(loaded, _reference_backbone(config, _checkpoint(run_dir, 4)))
    # And against the checkpoint file itself, read with h5py.
    arrays = checkpoint_arrays(_checkpoint(run_dir, 4))
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(loaded.token_embedding.embeddings),
        arrays["layers/bert_backbone/layers/reversible_embedding/vars/0"],
    )
    assert lines[0].startswith("exporting global step 4 of ")


def test_mixed_precision_run_gives_float32_weights_and_says_how_to_load(exported):
    preset_dir = exported[1]
    with open(os.path.join(preset_dir, "config.json")) as stream:
        assert json.load(stream)["config"]["dtype"]["config"]["name"] == "mixed_bfloat16"
    with h5py.File(os.path.join(preset_dir, "model.weights.h5")) as file:
        dtypes = set()
        file.visititems(
            lambda name, item: dtypes.add(item.dtype) if isinstance(item, h5py.Dataset) else None
        )
    assert dtypes == {np.dtype("float32")}
    # keras-hub builds at the global policy unless dtype= is given, whatever config.json says.
    assert keras_hub.models.BertBackbone.from_preset(preset_dir).dtype_policy.name == "float32"
    mixed = keras_hub.models.BertBackbone.from_preset(preset_dir, dtype="mixed_bfloat16")
    assert mixed.dtype_policy.name == "mixed_bfloat16"
    with open(os.path.join(preset_dir, "README.md")) as stream:
        readme = stream.read()
    assert 'from_preset("PRESET_DIR", dtype="float32")' in readme
    assert '`dtype="mixed_bfloat16"` computes in the mixed precision of pretraining' in readme


def test_tokenizer_gives_pretrainings_ids(exported):
    tokenizer = keras_hub.models.BertTokenizer.from_preset(exported[1])
    pretraining = vocab_lib.make_tokenizer(VOCABULARY)
    for text, ids in {TEXT: TEXT_IDS, **MORE_TEXTS}.items():
        assert _ids(tokenizer(text)) == ids, text
        assert _ids(pretraining(text)) == ids, text
    assert tokenizer.get_vocabulary() == VOCABULARY


def test_classifier_from_preset_predicts_and_trains_on_raw_strings(exported):
    classifier = keras_hub.models.BertTextClassifier.from_preset(exported[1], num_classes=2)
    assert classifier.preprocessor.sequence_length == 16
    packed = _ids(classifier.preprocessor([TEXT])["token_ids"])
    assert packed == [[2, *TEXT_IDS, 3] + [0] * 10]
    texts = [TEXT, "the worlds. w3 w4"]
    assert np.isfinite(classifier.predict(texts, verbose=0)).all()
    before = _weights(classifier.backbone)
    classifier.fit(x=texts, y=np.array([0, 1]), batch_size=2, epochs=1, shuffle=False, verbose=0)
    after = _weights(classifier.backbone)
    embedding = "token_embedding/embeddings"
    assert not np.array_equal(before[embedding], after[embedding])


def test_command_exports_the_given_step_and_prints_json(run, step_two):
    config, run_dir = run
    status, stdout, stderr, preset_dir = step_two
    assert status == 0, stderr
    printed = json.loads(stdout)
    assert printed["step"] == 2 and printed["sequence_length"] == POSITION_EMBEDDINGS
    assert printed["preset_dir"] == preset_dir
    assert "[export] exporting global step 2 of " in stderr
    loaded = keras_hub.models.BertBackbone.from_preset(preset_dir)
    _assert_same_weights(loaded, _reference_backbone(config, _checkpoint(run_dir, 2)))
    newest = _weights(_reference_backbone(config, _checkpoint(run_dir, 4)))
    assert not np.array_equal(
        _weights(loaded)["token_embedding/embeddings"], newest["token_embedding/embeddings"]
    )
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor.from_preset(preset_dir)
    assert preprocessor.sequence_length == POSITION_EMBEDDINGS


def test_command_error_is_one_line(run, tmp_path, capsys):
    assert export_command.main([run[1], str(tmp_path / "preset"), "--step", "3"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"keras-largebatch-export: error: step 3 is not a checkpoint of the run in "
        f"{run[1]!r}; its checkpoints are at global steps [2, 4]\n"
    )
    assert not (tmp_path / "preset").exists()


def _copy_run(run_dir, destination, edit_config=None):
    """A copy of the run's config and checkpoints whose state file names the copies."""
    shutil.copytree(os.path.join(run_dir, "checkpoints"), destination / "checkpoints")
    state_path = destination / "checkpoints" / "state.json"
    state_path.write_text(state_path.read_text().replace(run_dir, str(destination)))
    with open(os.path.join(run_dir, RUN_CONFIG_FILENAME)) as stream:
        recorded = json.load(stream)
    if edit_config is not None:
        edit_config(recorded)
    (destination / RUN_CONFIG_FILENAME).write_text(json.dumps(recorded))
    return str(destination)


def test_unreadable_newest_checkpoint(run, tmp_path):
    copy = _copy_run(run[1], tmp_path / "run")
    newest = _checkpoint(copy, 4)
    with open(newest, "r+b") as stream:
        stream.truncate(os.path.getsize(newest) // 2)
    truncated = Path(newest).read_bytes()
    with pytest.raises(OSError, match=r"checkpoint of step 4, .*ckpt-000000004.* cannot be read"):
        export_lib.export_preset(copy, str(tmp_path / "preset"), step=4, log=lambda line: None)
    assert not (tmp_path / "preset").exists()
    # Without a step, the newest readable one; the unreadable one is reported, left as it is.
    lines = []
    config = export_run.read_pretraining_config(copy)
    assert export_run.choose_checkpoint(config, None, lines.append) == (_checkpoint(copy, 2), 2)
    assert len(lines) == 1 and newest in lines[0] and "cannot be read" in lines[0]
    assert Path(newest).read_bytes() == truncated


def test_vocabulary_of_the_default_corpus_is_found_in_the_run(run, tmp_path):
    def default_corpus(recorded):
        recorded["data"]["vocab_file"] = None
        recorded["phases"][0]["input_files"] = None

    copy = _copy_run(run[1], tmp_path / "run", default_corpus)
    config = export_run.read_pretraining_config(copy)
    with pytest.raises(ValueError, match="default-corpus vocabulary .*seq16-pred4"):
        export_run.vocabulary_file(config)
    expected = vocab_lib.save_vocabulary(
        VOCABULARY, os.path.join(copy, "data", "seq16-pred4", "vocab.txt")
    )
    assert export_run.vocabulary_file(config) == expected


@pytest.mark.parametrize(
    "case, error, match",
    [
        ("not_empty", ValueError, "preset_dir .* is not empty"),
        ("preset_is_a_file", ValueError, "exists and is not a directory"),
        ("remote_preset", ValueError, "preset_dir must be a local directory"),
        ("empty_run_dir", ValueError, "holds no run_config.json, so it is not a training run"),
        ("missing_run_dir", ValueError, "is not a directory"),
        ("image_run", ValueError, "is not a BERT pretraining run: .*unknown config key"),
        ("no_checkpoint", ValueError, "has no checkpoint: .*state.json does not exist"),
        ("no_vocabulary", ValueError, "has no vocabulary: data.vocab_file is null"),
        ("unknown_step", ValueError, r"step 5 is not a checkpoint .* global steps \[2, 4\]"),
        ("step_type", TypeError, "step must be an integer"),
        ("too_long", ValueError, r"sequence_length must be in \[3, 24\] .* got 25"),
        ("too_short", ValueError, r"sequence_length must be in \[3, inf\], got 2"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(run, tmp_path, case, error, match):
    run_dir, preset_dir, arguments = run[1], tmp_path / "preset", {}
    if case == "not_empty":
        preset_dir.mkdir()
        (preset_dir / "notes.txt").write_text("mine")
    elif case == "preset_is_a_file":
        preset_dir.write_text("mine")
    elif case == "remote_preset":
        preset_dir = "gs://bucket/preset"
    elif case == "empty_run_dir":
        run_dir = tmp_path / "empty"
        run_dir.mkdir()
    elif case == "missing_run_dir":
        run_dir = tmp_path / "missing"
    elif case == "image_run":
        run_dir = tmp_path / "images"
        run_dir.mkdir()
        (run_dir / RUN_CONFIG_FILENAME).write_text(json.dumps(TrainConfig().to_dict()))
    elif case == "no_checkpoint":
        run_dir = tmp_path / "fresh"
        run_dir.mkdir()
        shutil.copy(os.path.join(run[1], RUN_CONFIG_FILENAME), run_dir)
    elif case == "no_vocabulary":

        def records_without_vocabulary(recorded):
            recorded["data"]["vocab_file"] = None
            recorded["model"]["vocabulary_size"] = len(VOCABULARY)

        run_dir = _copy_run(run[1], tmp_path / "run", records_without_vocabulary)
    elif case == "unknown_step":
        arguments = {"step": 5}
    elif case == "step_type":
        arguments = {"step": "4"}
    elif case == "too_long":
        arguments = {"sequence_length": POSITION_EMBEDDINGS + 1}
    elif case == "too_short":
        arguments = {"sequence_length": 2}
    before = _listing(tmp_path)
    with pytest.raises(error, match=match):
        export_lib.export_preset(run_dir, preset_dir, log=lambda line: None, **arguments)
    assert _listing(tmp_path) == before
    if case == "not_empty":
        assert (preset_dir / "notes.txt").read_text() == "mine"


def test_failed_write_leaves_no_directory(run, tmp_path, monkeypatch):
    def fail(self, preset_dir):
        raise OSError("disk full")

    monkeypatch.setattr(keras_hub.models.BertTextClassifierPreprocessor, "save_to_preset", fail)
    with pytest.raises(OSError, match="disk full"):
        export_lib.export_preset(run[1], tmp_path / "preset", log=lambda line: None)
    assert os.listdir(tmp_path) == []


def _ids(tensor):
    return keras.ops.convert_to_numpy(tensor).tolist()


def _listing(directory):
    """Every path under ``directory`` with the bytes of each file."""
    listing = {}
    for root, directories, files in os.walk(directory):
        for name in directories:
            listing[os.path.join(root, name)] = None
        for name in files:
            with open(os.path.join(root, name), "rb") as stream:
                listing[os.path.join(root, name)] = stream.read()
    return listing
