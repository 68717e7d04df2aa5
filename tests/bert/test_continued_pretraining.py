"""Continued pretraining from a keras-hub preset: the model starts from the preset's weights
(backbone and masked-LM head, read back by keras-hub's own loader as the reference), the data
must use its vocabulary, and a resumed run restores its own checkpoint, not the preset.

The preset is a tiny `keras_hub.models.BertMaskedLM` (1 layer, hidden 16) with random weights,
saved to disk by keras-hub; nothing is downloaded.
"""

import os

import keras
import keras_hub
import numpy as np
import pytest

from keras_largebatch.bert import export as export_lib
from keras_largebatch.bert import pretraining as pretrain_lib
from keras_largebatch.bert.data import __main__ as create_data
from keras_largebatch.bert.data import vocab as vocab_lib
from keras_largebatch.bert.pretraining import config as config_lib
from keras_largebatch.bert.pretraining import model as model_lib
from keras_largebatch.bert.pretraining import recipe as recipe_lib
from keras_largebatch.training.plan import plan_run
from tests.support.runs import run_on_jax

WORDS = ["the", "dog", "cat", "runs", "sleeps", "big", "small", "red", "sun", "is", "."]
VOCABULARY = list(vocab_lib.SPECIAL_TOKENS) + WORDS + ["##s"] + [f"w{i}" for i in range(16)]
POSITION_EMBEDDINGS = 24


@pytest.fixture(scope="module")
def preset(tmp_path_factory):
    """A BertMaskedLM preset directory whose every weight is random (biases included)."""
    directory = str(tmp_path_factory.mktemp("preset") / "bert_masked_lm")
    keras.utils.set_random_seed(3)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(VOCABULARY),
        num_layers=1,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=POSITION_EMBEDDINGS,
    )
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=VOCABULARY, lowercase=True)
    task = keras_hub.models.BertMaskedLM(
        backbone, keras_hub.models.BertMaskedLMPreprocessor(tokenizer, sequence_length=16)
    )
    rng = np.random.default_rng(0)
    task.set_weights([rng.normal(0, 0.1, w.shape).astype("float32") for w in task.get_weights()])
    task.save_to_preset(directory)
    return directory


@pytest.fixture(scope="module")
def records(preset, tmp_path_factory):
    """Records written by ``create-data --preset`` from a small text."""
    directory = tmp_path_factory.mktemp("preset_records")
    rng = np.random.default_rng(1)
    documents = [
        "\n".join(
            " ".join(rng.choice(WORDS[:-1], size=rng.integers(3, 7))) + " ."
            for _ in range(rng.integers(3, 6))
        )
        for _ in range(12)
    ]
    text_file = directory / "text.txt"
    text_file.write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    output_dir = directory / "records"
    status = create_data.main(
        [
            "--input-files",
            str(text_file),
            "--output-dir",
            str(output_dir),
            "--preset",
            preset,
            "--max-seq-length=16",
            "--max-predictions-per-seq=4",
            "--dupe-factor=4",
            "--num-output-shards=1",
            "--num-workers=1",
        ]
    )
    assert status == 0
    return str(output_dir / "pretraining-00000-of-00001.tfrecord")


def _config(output_dir, preset, record_file, *overrides):
    phase = (
        "{seq_length: 16, max_predictions_per_seq: 4, global_batch_size: 8, steps: 3, "
        f"warmup_steps: 1, input_files: ['{record_file}']}}"
    )
    return config_lib.load_config(
        overrides=[
            f"output_dir={output_dir}",
            f"model.preset={preset}",
            "model.dropout=0.0",
            f"phases=[{phase}]",
            "log_interval=1",
            "checkpoint_interval=1",
            "strategy.name=default",
            *overrides,
        ]
    )


def _assert_same_weights(actual, expected):
    assert len(actual) == len(expected)
    for index, (value, reference) in enumerate(zip(actual, expected)):
        np.testing.assert_array_equal(value, reference, err_msg=f"weight {index}")


def test_model_from_preset_gives_keras_hubs_masked_lm_logits(preset, tmp_path):
    config = _config(tmp_path, preset, "unused.tfrecord")
    recipe = recipe_lib.BertPretraining(config)
    model = recipe_lib.build_model(config, recipe.vocabulary_size())
    recipe.initialize(model)
    reference = keras_hub.models.BertMaskedLM.from_preset(preset, preprocessor=None)
    _assert_same_weights(model.backbone.get_weights(), reference.backbone.get_weights())
    _assert_same_weights(
        model.get_layer("mlm_head").get_weights(), reference.masked_lm_head.get_weights()
    )
    rng = np.random.default_rng(2)
    batch = {
        "token_ids": rng.integers(0, len(VOCABULARY), size=(3, 16)).astype("int32"),
        "segment_ids": np.repeat([[0] * 8 + [1] * 8], 3, axis=0).astype("int32"),
        "padding_mask": np.ones((3, 16), dtype="int32"),
        "mask_positions": rng.integers(1, 15, size=(3, 4)).astype("int32"),
    }
    logits = keras.ops.convert_to_numpy(model(batch)["masked_lm"])
    expected = keras.ops.convert_to_numpy(reference(batch))
    np.testing.assert_allclose(logits, expected, rtol=1e-6, atol=1e-6)
    # The same logits give the same masked-LM loss; a head left random would not.
    labels = rng.integers(0, len(VOCABULARY), size=(3, 4))
    loss = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    fresh = recipe_lib.build_model(config, recipe.vocabulary_size())(batch)["masked_lm"]
    fresh_loss = keras.losses.sparse_categorical_crossentropy(labels, fresh, from_logits=True)
    assert not np.allclose(loss, fresh_loss)


class _Interrupt(Exception):
    pass


def _callback(on_begin=None, interrupt_after=None):
    class Callback(keras.callbacks.Callback):
        seen = 0

        def on_train_begin(self, logs=None):
            if on_begin is not None:
                on_begin(self.model)

        def on_train_batch_end(self, batch, logs=None):
            Callback.seen += 1
            if Callback.seen == interrupt_after:
                raise _Interrupt("interrupted")

    return Callback()


@pytest.fixture(scope="module")
def resumed_run(preset, records, tmp_path_factory):
    """A run from the preset on 2 mirrored replicas, interrupted after 2 of its 3 steps and
    resumed with the preset loader made to fail: ``(config, weights at the start, summary,
    log lines of the resumed run)``."""
    config = _config(
        tmp_path_factory.mktemp("resumed_run"),
        preset,
        records,
        "strategy.name=mirrored",
        "strategy.devices=['/cpu:0', '/cpu:1']",
    )
    started = {}

    def record_start(model):
        started["backbone"] = model.backbone.get_weights()
        started["mlm_head"] = model.get_layer("mlm_head").get_weights()

    with pytest.raises(_Interrupt):
        pretrain_lib.pretrain(
            config, callbacks=[_callback(record_start, interrupt_after=2)], log=lambda line: None
        )

    def no_preset(*args):
        raise AssertionError("a resumed run loaded the preset")

    lines = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(model_lib, "load_preset_weights", no_preset)
        summary = pretrain_lib.pretrain(config, log=lines.append)
    return config, started, summary, lines


def test_run_starts_from_the_preset_on_two_replicas_and_resumes_from_its_own_checkpoint(
    preset, resumed_run
):
    _, started, summary, lines = resumed_run
    reference = keras_hub.models.BertMaskedLM.from_preset(preset, preprocessor=None)
    _assert_same_weights(started["backbone"], reference.backbone.get_weights())
    _assert_same_weights(started["mlm_head"], reference.masked_lm_head.get_weights())
    assert any("resuming from" in line and "phase 1, step 1" in line for line in lines)
    assert summary["global_steps"] == 3 and summary["strategy"]["num_replicas"] == 2
    assert (
        summary["model_size"] is None and summary["initialized_from"] == f"model.preset={preset!r}"
    )


def test_run_starts_from_the_preset_on_two_jax_devices(preset, records, tmp_path):
    pytest.importorskip("jax")
    run = run_on_jax(
        "tests.support.jax_training",
        "bert_preset",
        tmp_path,
        preset,
        records,
        timeout=600,
        optimize_compiled_code=False,
    )
    assert run["start_minus_preset"] == 0.0
    summary = run["summary"]
    assert summary["strategy"]["backend"] == "jax"
    assert summary["strategy"]["devices"] == ["cpu:0", "cpu:1"]
    assert summary["global_steps"] == 2
    assert summary["initialized_from"] == f"model.preset={preset!r}"


def test_run_starts_from_another_runs_checkpoint(preset, records, resumed_run, tmp_path):
    source_config, _, source_summary, _ = resumed_run
    # The architecture comes from the source run (here, its preset): no model.* given.
    phase = (
        "{seq_length: 16, max_predictions_per_seq: 4, global_batch_size: 8, steps: 1, "
        f"warmup_steps: 0, input_files: ['{records}']}}"
    )
    config = config_lib.load_config(
        overrides=[
            f"output_dir={tmp_path}",
            f"model.init_checkpoint={source_config.output_dir}",
            f"phases=[{phase}]",
            "strategy.name=default",
        ]
    )
    started = {}
    pretrain_lib.pretrain(
        config,
        callbacks=[_callback(lambda model: started.update(weights=model.get_weights()))],
        log=lambda line: None,
    )
    reference = recipe_lib.build_model(source_config, len(VOCABULARY))
    reference.load_weights(source_summary["checkpoint"])
    _assert_same_weights(started["weights"], reference.get_weights())
    # The continued run exports with the preset's tokenizer, as its records were made.
    exported = export_lib.export_preset(tmp_path, tmp_path / "exported", log=lambda line: None)
    tokenizer = keras_hub.models.BertTokenizer.from_preset(str(tmp_path / "exported"))
    assert tokenizer.get_vocabulary() == VOCABULARY and exported["vocabulary_size"] == len(
        VOCABULARY
    )


def _other_vocabulary(path):
    vocabulary = list(VOCABULARY)
    vocabulary[VOCABULARY.index("dog")] = "wolf"
    vocabulary.append("zebra")
    return vocab_lib.save_vocabulary(vocabulary, str(path))


@pytest.mark.parametrize(
    "overrides, match",
    [
        (
            ["model.size=mini"],
            r"model.size='mini' \(\{'num_layers': 4, 'hidden_dim': 256, .*\) conflicts with "
            r"model.preset=.*whose architecture is \{'num_layers': 1, 'hidden_dim': 16, ",
        ),
        (
            ["model.hidden_dim=32"],
            r"model.hidden_dim=32 conflicts with model.preset=.*whose hidden_dim is 16",
        ),
        (
            ["data.vocab_file={other}"],
            r"phases.0's records use vocabulary .*other.txt' of 34 tokens, and model.preset=.* "
            r"has 33 tokens .*first differ at id 6: 'wolf' where it has 'dog'",
        ),
    ],
)
def test_conflicting_architecture_or_vocabulary_is_refused_before_training(
    preset, records, tmp_path, overrides, match
):
    other = _other_vocabulary(tmp_path / "other.txt")
    config = _config(
        tmp_path / "run", preset, records, *[item.format(other=other) for item in overrides]
    )
    with pytest.raises(ValueError, match=match):
        pretrain_lib.pretrain(config, log=lambda line: None)
    assert not os.path.exists(tmp_path / "run" / "checkpoints")


def test_whole_word_dynamic_masking_from_the_config(preset, tmp_path):
    # "dogs", "cats" and "suns" are two tokens each ("dog ##s"): words a mask never splits.
    text = "\n\n".join(
        "\n".join(f"the {word} is big . {word} runs" for word in ("dogs", "cats", "suns", "dog"))
        for _ in range(6)
    )
    (tmp_path / "text.txt").write_text(text + "\n", encoding="utf-8")
    common = ["--max-seq-length=16", "--max-predictions-per-seq=4", "--num-output-shards=1"]
    assert (
        create_data.main(
            ["--input-files", str(tmp_path / "text.txt"), "--output-dir", str(tmp_path / "data")]
            + ["--preset", preset, "--dynamic-masking", "--num-workers=1", *common]
        )
        == 0
    )
    record_file = str(tmp_path / "data" / "pretraining-00000-of-00001.tfrecord")
    with pytest.raises(ValueError, match="data.whole_word_mask=true masks in the input pipeline"):
        _config(tmp_path / "run", preset, record_file, "data.whole_word_mask=true")
    config = _config(
        tmp_path / "run",
        preset,
        record_file,
        "data.dynamic_masking=true",
        "data.whole_word_mask=true",
        "data.masked_lm_prob=0.3",
    )
    recipe = recipe_lib.BertPretraining(config)
    plan = plan_run(config, 1)
    recipe.prepare(plan, lambda line: None, record_counts=None)
    continuation = VOCABULARY.index("##s")
    masked_continuations = 0
    for features, labels, weights in recipe.dataset(plan.phases[0], 8, None, 0).take(4):
        positions = features["mask_positions"].numpy()
        token_ids = features["token_ids"].numpy()
        real = weights["masked_lm"].numpy() > 0
        originals = labels["masked_lm"].numpy()
        assert real.any()
        for row in range(8):
            chosen = set(positions[row][real[row]].tolist())
            for position, label in zip(positions[row][real[row]], originals[row][real[row]]):
                # A masked "##s" comes with the token before it (unless truncation left it
                # first in its segment) ...
                if label == continuation and token_ids[row][position - 1] not in (2, 3):
                    masked_continuations += 1
                    assert position - 1 in chosen
                # ... and a masked token with its "##s" (an unmasked token is as it was).
                if position + 1 not in chosen:
                    assert token_ids[row][position + 1] != continuation
    assert masked_continuations > 0
