"""Fine-tuning on GLUE: runs that evaluate and keep their best checkpoint, resume, the optimizers,
random initialization, bad inputs, and the embedded default end to end on a reduced size.

The preset is a tiny BERT (1 layer, hidden 16, no dropout) saved with keras-hub's own
``save_to_preset``; the tasks are TSV files written here in SST-2's and STS-B's layouts. Dev
scores are checked against keras-hub's own pipeline: the checkpoint loaded into
``BertTextClassifier.from_preset`` with its preprocessor, predicting on the raw strings.
"""

import functools
import json
import os
import shutil

import keras
import keras_hub
import numpy as np
import pytest

from keras_largebatch import LAMB
from keras_largebatch.bert import export as export_lib
from keras_largebatch.bert import finetuning as finetune_lib
from keras_largebatch.bert import pretraining as pretrain_lib
from keras_largebatch.bert.data import corpus as corpus_lib
from keras_largebatch.bert.finetuning import __main__ as finetune_command
from keras_largebatch.bert.finetuning import config as finetune_config
from keras_largebatch.bert.finetuning import default_task as default_task_lib
from keras_largebatch.bert.finetuning import glue as glue_lib
from keras_largebatch.bert.finetuning import recipe as finetune_recipe
from keras_largebatch.bert.pretraining import config as pretrain_config_lib
from keras_largebatch.training.optimizer_factory import decays
from keras_largebatch.training.plan import plan_run
from tests.support.config_fields import assert_fields_documented
from tests.support.runs import Interrupt, InterruptAfter, checkpoint_arrays

WORDS = "the a movie film plot cast was is felt seemed good bad very quite".split()
VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
SEQUENCE_LENGTH = 12
STSB_HEADER = (
    "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
)


def _save_preset(directory):
    """A tiny BERT preset as keras-hub saves one: backbone, tokenizer, preprocessor."""
    keras.utils.set_random_seed(1)
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=VOCABULARY, lowercase=True)
    keras_hub.models.BertBackbone(
        vocabulary_size=len(VOCABULARY),
        num_layers=1,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=32,
        dropout=0.0,
    ).save_to_preset(directory)
    tokenizer.save_to_preset(directory)
    keras_hub.models.BertTextClassifierPreprocessor(
        tokenizer, sequence_length=SEQUENCE_LENGTH
    ).save_to_preset(directory)
    return str(directory)


def _sentiment_rows(count, seed, positive_every=2):
    """``(sentence, label)``: label 1 for "good", 0 for "bad", among filler words; one in
    ``positive_every`` is negative."""
    rng = np.random.default_rng(seed)
    rows = []
    for index in range(count):
        label = int(index % positive_every != 0)
        words = list(rng.choice(["the movie", "a film", "the plot", "the cast"], 1))
        words += [rng.choice(["was", "is", "felt", "seemed"]), rng.choice(["very", "quite"])]
        words.append("good" if label else "bad")
        rows.append((" ".join(words), label))
    return rows


def _write_sst2(directory, num_train=48, num_dev=16):
    os.makedirs(directory)
    # Three of four dev labels positive: a constant prediction scores 0.75 or 0.25, so the
    # class ids are checked even by a model that has not learned yet.
    splits = {"train": _sentiment_rows(num_train, 0), "dev": _sentiment_rows(num_dev, 1, 4)}
    for split, rows in splits.items():
        lines = ["sentence\tlabel"] + [f"{sentence}\t{label}" for sentence, label in rows]
        (directory / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return splits


def _write_stsb(directory, num_train=32, num_dev=16):
    """Pairs scored 5 when both say the same of the movie, 0 when not, 2.5 in between."""
    os.makedirs(directory)
    splits = {}
    for split, count, seed in (("train", num_train, 2), ("dev", num_dev, 3)):
        first, second = _sentiment_rows(count, seed), _sentiment_rows(count, seed + 10)
        rows = []
        for index, ((a, label_a), (b, label_b)) in enumerate(zip(first, second)):
            score = 5.0 if label_a == label_b else 0.0
            rows.append((a, b, 2.5 if index % 5 == 0 else score))
        lines = [STSB_HEADER] + [
            f"{index}\tmain\tfile\t2012\t{index}\tnone\tnone\t{a}\t{b}\t{score:.3f}"
            for index, (a, b, score) in enumerate(rows)
        ]
        (directory / f"{split}.tsv").write_text("\n".join(lines) + "\n")
        splits[split] = rows
    return splits


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("inputs")
    return {
        "preset": _save_preset(root / "preset"),
        "sst2": str(root / "sst2"),
        "sst2_rows": _write_sst2(root / "sst2"),
        "stsb": str(root / "stsb"),
        "stsb_rows": _write_stsb(root / "stsb"),
    }


def _overrides(output_dir, preset, glue_dir, task="sst2"):
    """Batches of 8 over 48 examples for 2 epochs: 6 steps an epoch, evaluated and checkpointed
    each."""
    return [
        f"output_dir={output_dir}",
        f"model.preset={preset}",
        f"data.glue_dir={glue_dir}",
        f"data.task={task}",
        "model.classifier_dropout=0.0",
        "phases.0.global_batch_size=8",
        "phases.0.epochs=2",
        "phases.0.peak_learning_rate=2.0e-2",
        "log_interval=2",
        "checkpoint_interval=6",
        "keep_checkpoints=10",
        "data.eval_batch_size=8",
        "strategy.name=default",
    ]


def _config(output_dir, files, *overrides, task="sst2"):
    return finetune_config.load_config(
        overrides=_overrides(output_dir, files["preset"], files[task], task) + list(overrides)
    )


def _quiet(line):
    pass


@pytest.fixture(scope="module")
def sst2_run(tmp_path_factory, files):
    config = _config(tmp_path_factory.mktemp("sst2_run"), files)
    return config, finetune_lib.finetune(config, log=_quiet)


def _reference_classifier(preset, num_classes):
    """keras-hub's own pipeline: the classifier from the preset, with its preprocessor."""
    return keras_hub.models.BertTextClassifier.from_preset(
        preset, num_classes=num_classes, dropout=0.0
    )


def _reference_predictions(classifier, weights, texts):
    """What ``classifier`` predicts on raw strings with a checkpoint's weights."""
    classifier.load_weights(weights)
    return np.asarray(classifier.predict(texts, batch_size=4, verbose=0), np.float32)


def _assert_same_arrays(path, reference_path):
    arrays, reference = checkpoint_arrays(path), checkpoint_arrays(reference_path)
    assert arrays.keys() == reference.keys() and len(reference) > 20
    for name in reference:
        np.testing.assert_array_equal(arrays[name], reference[name], err_msg=name)


def test_a_run_evaluates_each_epoch_and_keeps_the_best_checkpoint(sst2_run, files):
    config, summary = sst2_run
    assert summary["global_steps"] == 12  # int(48 / 8 x 2 epochs)
    assert [e["global_step"] for e in summary["evaluations"]] == [6, 12]
    on_disk = json.loads(open(os.path.join(config.output_dir, "summary.json")).read())
    assert on_disk["evaluations"] == summary["evaluations"] and on_disk["best"] == summary["best"]
    scores = [e["dev_accuracy"] for e in summary["evaluations"]]
    best = summary["best"]
    assert best["dev_accuracy"] == max(scores)
    assert best["global_step"] == summary["evaluations"][scores.index(max(scores))]["global_step"]
    checkpoints = os.path.join(config.output_dir, "checkpoints")
    _assert_same_arrays(
        best["checkpoint"], os.path.join(checkpoints, f"ckpt-{best['global_step']:09d}.weights.h5")
    )
    # Every evaluation's score is what keras-hub's pipeline gives with its checkpoint.
    sentences = [sentence for sentence, _ in files["sst2_rows"]["dev"]]
    labels = np.array([label for _, label in files["sst2_rows"]["dev"]])
    classifier = _reference_classifier(files["preset"], 2)
    for evaluation in summary["evaluations"]:
        weights = os.path.join(checkpoints, f"ckpt-{evaluation['global_step']:09d}.weights.h5")
        logits = _reference_predictions(classifier, weights, sentences)
        assert evaluation["dev_accuracy"] == pytest.approx(np.mean(logits.argmax(-1) == labels))
    assert summary["task"] == "sst2" and summary["main_metric"] == "dev_accuracy"
    assert summary["num_train_examples"] == 48 and summary["num_dev_examples"] == {"dev": 16}
    assert summary["sequence_length"] == SEQUENCE_LENGTH and summary["optimizer"] == "adamw"


def test_resume_after_an_interruption_equals_the_uninterrupted_run(tmp_path, files, sst2_run):
    _, expected = sst2_run
    config = _config(tmp_path, files)
    with pytest.raises(Interrupt):  # at step 10: evaluated at 6, checkpoint of 6 the newest
        finetune_lib.finetune(config, callbacks=[InterruptAfter(10)], log=_quiet)
    summary = finetune_lib.finetune(config, log=_quiet)
    assert summary["resumed_from_step"] == 6
    assert summary["evaluations"] == [
        {**evaluation, "elapsed_seconds": resumed["elapsed_seconds"]}
        for evaluation, resumed in zip(expected["evaluations"], summary["evaluations"])
    ]
    _assert_same_arrays(summary["checkpoint"], expected["checkpoint"])
    assert summary["best"]["global_step"] == expected["best"]["global_step"]
    _assert_same_arrays(summary["best"]["checkpoint"], expected["best"]["checkpoint"])


def test_stsb_regression_through_the_command(tmp_path, files, capsys):
    overrides = _overrides(tmp_path, files["preset"], files["stsb"], "stsb")
    # 32 examples in batches of 8: evaluated and checkpointed every 4 steps.
    assert finetune_command.main(overrides + ["checkpoint_interval=4"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["global_steps"] == 8 and set(summary["final"]) == {"loss"}
    evaluations = summary["evaluations"]
    assert [e["global_step"] for e in evaluations] == [4, 8]
    assert set(evaluations[0]) == {"global_step", "elapsed_seconds", "dev_pearson", "dev_spearman"}
    # The scores of the dev pairs, unclipped, as keras-hub's pipeline predicts them.
    rows = files["stsb_rows"]["dev"]
    texts = ([a for a, _, _ in rows], [b for _, b, _ in rows])
    scores = np.array([score for _, _, score in rows])
    classifier = _reference_classifier(files["preset"], 1)
    checkpoints = tmp_path / "checkpoints"
    reference = {}
    for evaluation in evaluations:
        step = evaluation["global_step"]
        predictions = _reference_predictions(
            classifier, checkpoints / f"ckpt-{step:09d}.weights.h5", texts
        )[:, 0]
        reference[step] = np.corrcoef(scores, predictions)[0, 1]
    # A model this small predicts nearly one score (its 8 predictions spread over about 1e-5),
    # so the correlations rest on float32 rounding: the same weights in other batches moved
    # Pearson by up to 1.6e-3 (seen on a loaded machine), and can swap ranks. Each evaluation
    # must still be that of its own checkpoint: nearest it, and within 5e-3; Spearman's own
    # arithmetic is tested in test_glue_metrics.
    for evaluation in evaluations:
        pearson = reference[evaluation["global_step"]]
        nearest = min(reference, key=lambda s: abs(reference[s] - evaluation["dev_pearson"]))
        assert nearest == evaluation["global_step"]
        assert evaluation["dev_pearson"] == pytest.approx(pearson, abs=5e-3)
        assert -1 <= evaluation["dev_spearman"] <= 1
    # Scores outside GLUE's [0, 5] are scored as predicted, not clipped.
    recipe = finetune_recipe.GlueFineTuning(finetune_config.load_config(overrides=overrides))
    np.testing.assert_array_equal(recipe.predictions([[-1.5], [6.0]]), [-1.5, 6.0])
    pearsons = [e["dev_pearson"] for e in evaluations]
    best = summary["best"]
    assert len(set(pearsons)) == 2 and best["dev_pearson"] == max(pearsons)
    assert best["global_step"] == evaluations[pearsons.index(max(pearsons))]["global_step"]
    _assert_same_arrays(
        best["checkpoint"], checkpoints / f"ckpt-{best['global_step']:09d}.weights.h5"
    )


def _built(config):
    inputs = finetune_recipe.load_inputs(config)
    config = config.with_steps(len(inputs.examples["train"].labels))
    recipe = finetune_recipe.GlueFineTuning(config, inputs)
    keras.utils.set_random_seed(config.seed)
    model = recipe.build_model()
    phase = plan_run(config, num_replicas=1).phases[0]
    optimizer = recipe.build_optimizer(phase, model)
    optimizer.build(model.trainable_variables)
    return model, optimizer, phase


@pytest.mark.parametrize("name", ["adamw", "lamb"])
def test_the_optimizers_follow_bert_s_recipe(tmp_path, files, name):
    config = _config(tmp_path, files, f"optimizer.name={name}", "phases.0.epochs=10")
    model, optimizer, phase = _built(config)
    assert phase.steps == 60 and isinstance(optimizer, LAMB) == (name == "lamb")
    # 10% linear warmup from 0 to the peak, then linear decay to 0.
    rates = [float(optimizer._learning_rate(step)) for step in (0, 3, 6, 33, 60)]
    np.testing.assert_allclose(rates, [0.0, 1.0e-2, 2.0e-2, 1.0e-2, 0.0], atol=1e-7)
    undecayed = {v.path for v in model.trainable_variables if not decays(optimizer, v)}
    assert undecayed == {
        v.path for v in model.trainable_variables if "layer_norm" in v.path or "bias" in v.path
    }
    assert "logits/bias" in undecayed and "logits/kernel" not in undecayed
    if name == "lamb":
        unadapted = {v.path for v in model.trainable_variables if not optimizer.adapts(v)}
        assert unadapted == undecayed


def test_random_init_is_the_preset_s_architecture_with_fresh_weights(tmp_path, files):
    preset_backbone = keras_hub.models.BertBackbone.from_preset(files["preset"])
    expected = {v.path: v.numpy() for v in preset_backbone.weights}
    for random_init in (False, True):
        config = _config(tmp_path / str(random_init), files, f"model.random_init={random_init}")
        model, _, _ = _built(config)
        weights = {v.path: v.numpy() for v in model.backbone.weights}
        assert weights.keys() == expected.keys()
        kernels = [path for path in expected if path.endswith(("kernel", "embeddings"))]
        assert len(kernels) > 8
        for path in kernels:
            assert np.array_equal(weights[path], expected[path]) != random_init, path


def _bad_preset(root, edit):
    path = root / "bad_preset"
    shutil.copytree(_save_preset(root / "good_preset"), path)
    edit(path)
    return str(path)


def _rewrite(path, old, new):
    path.write_text(path.read_text().replace(old, new))


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda root, f: ["data.glue_dir=" + str(root / "nowhere")], "is not a directory"),
        (lambda root, f: (os.remove(root / "task" / "dev.tsv"), [])[1], "missing .*dev.tsv"),
        (
            lambda root, f: (_rewrite(root / "task" / "train.tsv", "sentence\t", "text\t"), [])[1],
            r"train.tsv:1: the header",
        ),
        (
            lambda root, f: (_rewrite(root / "task" / "dev.tsv", "good\t1", "good\t2"), [])[1],
            r"dev.tsv:\d+: label '2' is not one of \['0', '1'\]",
        ),
        (
            lambda root, f: (_rewrite(root / "task" / "dev.tsv", "good\t1", "good\t1\tx"), [])[1],
            r"dev.tsv:\d+: expected 2 tab-separated columns",
        ),
        (lambda root, f: ["model.preset=" + str(root / "none")], "model.preset .* does not exist"),
        (
            lambda root, f: [
                "model.preset="
                + _bad_preset(
                    root,
                    lambda p: _rewrite(
                        p / "config.json", "keras_hub>BertBackbone", "keras_hub>GPT2Backbone"
                    ),
                )
            ],
            "describes a 'keras_hub>GPT2Backbone', not a 'keras_hub>BertBackbone'",
        ),
        (
            lambda root, f: [
                "model.preset=" + _bad_preset(root, lambda p: os.remove(p / "tokenizer.json"))
            ],
            "holds no tokenizer.json",
        ),
        (lambda root, f: ["data.sequence_length=40"], "data.sequence_length=40 exceeds .* 32"),
    ],
)
def test_bad_inputs_are_refused_before_anything_is_written(tmp_path, files, setup, message):
    shutil.copytree(files["sst2"], tmp_path / "task")
    overrides = _overrides(tmp_path / "run", files["preset"], tmp_path / "task")
    config = finetune_config.load_config(overrides=overrides + setup(tmp_path, files))
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        finetune_lib.finetune(config, log=_quiet)
    assert not os.path.exists(tmp_path / "run")


def test_every_field_has_a_default_and_a_meaning():
    for cls in (
        finetune_config.FinetuneConfig,
        finetune_config.PhaseConfig,
        finetune_config.ModelConfig,
        finetune_config.OptimizerConfig,
        finetune_config.DataConfig,
    ):
        cls()
        assert_fields_documented(cls)
    config = finetune_config.load_config()
    assert config.is_embedded_default() and config.data.task == "next_sentence"
    assert (config.optimizer.name, config.optimizer.weight_decay) == ("adamw", 0.01)
    phase = config.phases[0]
    assert (phase.global_batch_size, phase.epochs, phase.warmup_proportion) == (32, 3.0, 0.1)
    # with_steps copies: the loaded config keeps its null steps.
    assert config.with_steps(4000).phases[0].steps == 375 and phase.steps is None


def test_config_errors_name_the_key(monkeypatch, capsys):
    def train(*args, **kwargs):
        raise AssertionError("a config that should be refused reached training")

    monkeypatch.setattr(finetune_lib, "finetune", train)
    monkeypatch.setattr(finetune_lib, "run_embedded_default", train)
    for overrides, message in (
        (["data.task=sst3"], "data.task must be one of"),
        (["data.task=sst2"], "data.glue_dir is null"),
        (["model.random_init=true"], "model.random_init=true needs model.preset"),
        (["phases.0.gradient_accumulation_steps=2"], "needs optimizer.name='lamb'"),
        (["data.default_train_examples=33"], "data.default_train_examples must be even"),
        (["data.default_dev_examples=2"], "data.default_dev_examples must be in [4, inf], got 2"),
        (["eval_interval=30"], "eval_interval must be a multiple of log_interval=25"),
    ):
        assert finetune_command.main(overrides) == 2
        assert message in capsys.readouterr().err
    assert finetune_command.main(["--print-config", "phases.0.epochs=2"]) == 0
    printed = finetune_config.config_from_dict(
        __import__("yaml").safe_load(capsys.readouterr().out)
    )
    assert printed.phases[0].epochs == 2 and printed.phases[0].steps is None


# Stand-in documents for the default corpus: a few pretraining steps need little text.
STAND_IN_DOCUMENTS = [
    [
        f"The {noun} of section {index} is read before the {other} is written.",
        f"Every {other} returns a value that the {noun} keeps for later.",
        f"A {noun} may be closed when the {other} no longer needs it.",
    ]
    for index, (noun, other) in enumerate(
        [("file", "buffer"), ("socket", "stream"), ("handler", "record"), ("parser", "token")] * 4
    )
]


def test_the_embedded_default_compares_pretrained_and_random_init(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_lib, "default_corpus_documents", lambda: STAND_IN_DOCUMENTS)
    # Both calls build the task from the standard library's docstrings: parsed once here (the
    # parse's own result is tested in test_default_task), a fresh list each call (the task
    # shuffles it in place).
    parsed = functools.cache(default_task_lib.source_documents)
    monkeypatch.setattr(default_task_lib, "source_documents", lambda: list(parsed()))
    pretrain_config = pretrain_config_lib.load_config(
        overrides=[
            f"output_dir={tmp_path / 'pretraining'}",
            "model.num_layers=1",
            "model.hidden_dim=16",
            "model.num_heads=2",
            "model.dropout=0.0",
            "data.vocabulary_size=60",
            "data.dupe_factor=2",
            "phases=[{seq_length: 32, max_predictions_per_seq: 3, global_batch_size: 8, "
            "steps: 4, warmup_steps: 1}]",
            "log_interval=2",
            "checkpoint_interval=4",
            "strategy.name=default",
        ]
    )
    config = finetune_config.load_config(
        overrides=[
            f"output_dir={tmp_path / 'finetuning'}",
            "data.default_train_examples=32",
            "data.default_dev_examples=16",
            "data.sequence_length=24",
            "phases.0.global_batch_size=8",
            "phases.0.epochs=1",
            "log_interval=2",
            "checkpoint_interval=4",
            "strategy.name=default",
        ]
    )
    lines = []
    comparison = finetune_lib.run_embedded_default(config, pretrain_config, log=lines.append)
    root = tmp_path / "finetuning"
    assert sorted(os.listdir(root)) == [
        "comparison.json",
        "data",
        "preset",
        "pretrained",
        "random_init",
    ]
    assert json.loads((root / "comparison.json").read_text()) == comparison
    assert comparison["task"] == "next_sentence" and comparison["metric"] == "dev_accuracy"
    assert comparison["steps"] == 4 and comparison["pretraining_steps"] == 4
    summaries = {
        name: json.loads((root / name / "summary.json").read_text())
        for name in ("pretrained", "random_init")
    }
    for name, summary in summaries.items():
        assert summary["preset"] == str(root / "preset")
        assert summary["random_init"] == (name == "random_init")
        assert comparison[name]["best"] == summary["best"]["dev_accuracy"]
        assert comparison[name]["best_step"] == summary["best"]["global_step"]
        final = comparison[name]["final"]
        assert final == summary["evaluations"][-1]["dev_accuracy"]
        # The 95% normal interval of the final accuracy over the 16 dev examples.
        assert comparison[name]["final_interval_95"] == pytest.approx(
            1.96 * (final * (1 - final) / 16) ** 0.5
        )
    assert comparison["dev_examples"] == 16
    exported = keras_hub.models.BertBackbone.from_preset(str(root / "preset"))
    assert exported.num_layers == 1 and exported.hidden_dim == 16
    assert lines[-3].startswith("  pretrained backbone")
    assert lines[-2].startswith("  random initialization")
    assert f"{comparison['pretrained']['best']:.4f}" in lines[-3]
    assert f"{comparison['random_init']['best']:.4f}" in lines[-2]
    interval = comparison["random_init"]["final_interval_95"]
    assert lines[-2].endswith(f"(final +/- {interval:.3f} at 95% over 16 dev examples)")
    # The baseline with no model, on the same task files.
    splits = glue_lib.read_task("next_sentence", str(root / "data"))
    rule = default_task_lib.overlap_rule(splits["train"], splits["dev"])
    assert comparison["word_overlap_rule"] == rule
    assert lines[-1].startswith(f"  word-overlap rule      {rule['dev_accuracy']:.4f} (no model")
    # A second call reports the completed runs and writes the same comparison.
    again = finetune_lib.run_embedded_default(config, pretrain_config, log=lines.append)
    assert {name: again[name] for name in ("pretrained", "random_init")} == {
        name: comparison[name] for name in ("pretrained", "random_init")
    }


def test_the_embedded_default_refuses_a_directory_of_something_else(tmp_path, monkeypatch):
    def work(*args, **kwargs):
        raise AssertionError("the embedded default started work in a refused directory")

    monkeypatch.setattr(pretrain_lib, "pretrain", work)
    monkeypatch.setattr(export_lib, "export_preset", work)
    (tmp_path / "notes.txt").write_text("mine")
    config = finetune_config.load_config(overrides=[f"output_dir={tmp_path}"])
    pretrain_config = pretrain_config_lib.load_config(overrides=[f"output_dir={tmp_path / 'p'}"])
    with pytest.raises(ValueError, match=r"holds \['notes.txt'\]"):
        finetune_lib.run_embedded_default(config, pretrain_config, log=_quiet)
    assert os.listdir(tmp_path) == ["notes.txt"]
