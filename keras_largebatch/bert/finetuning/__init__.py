"""BERT fine-tuning on GLUE: GLUE reading (`glue`) and metrics (`glue_metrics`), the offline
default task (`default_task`), the config (`config`), the recipe on the harness (`recipe`), the
``keras-largebatch-finetune`` command (``__main__``) and its library functions.

    python -m keras_largebatch.bert.finetuning model.preset=PRESET data.task=TASK \\
        data.glue_dir=DIR [key=value ...]

fine-tunes keras-hub's `BertTextClassifier` from a BERT preset directory (one that
``keras-largebatch-export`` wrote from a pretraining run, or any keras-hub BERT preset on disk)
on one GLUE task's ``train.tsv``, scoring every dev split each epoch and at the end
(`recipe.GlueFineTuning`); `config.FinetuneConfig` lists every setting. The
run directory is every recipe's (`keras_largebatch.training.trainer`): ``run_config.json``,
``checkpoints/`` (with ``best-<step>.weights.h5`` and ``best.json``, the weights and metrics of
the best dev evaluation of the task's main metric), ``logs/`` and ``summary.json``, which holds
the dev metrics of every evaluation and the best one. A rerun resumes from the newest
checkpoint, and the best weights kept are never replaced by a worse evaluation.

With no arguments (``model.preset`` null) this is the embedded default, which says whether
pretraining helped: it takes the default tiny pretraining run (``runs/bert_tiny_lamb``, which
``keras_largebatch.bert.pretraining`` writes; run first with its defaults if it has no summary),
exports it as a preset into this run's own ``OUTPUT_DIR/preset``, writes the default
``next_sentence`` task (`keras_largebatch.bert.finetuning.default_task`) to ``OUTPUT_DIR/data``, and
fine-tunes twice with the same data, steps and seeds: from the pretrained backbone
(``OUTPUT_DIR/pretrained``) and from a random initialization of the same architecture
(``OUTPUT_DIR/random_init``). It prints both dev scores side by side, with the score of a
word-overlap rule that uses no model (`default_task.overlap_rule`), and writes them to
``OUTPUT_DIR/comparison.json``. Progress goes to stderr, the summary (or comparison) as JSON to
stdout.
"""

import json
import math
import os
import shutil
import time

from keras_largebatch import _files
from keras_largebatch._logging import ProgressLog

PRESET_DIRNAME = "preset"


DATA_DIRNAME = "data"


COMPARISON_FILENAME = "comparison.json"


# The embedded default's two runs: (run directory name, model.random_init).
INITIALIZATIONS = (("pretrained", False), ("random_init", True))


def finetune(config, callbacks=(), log=None):
    """Runs (or resumes, or reports) the fine-tuning run that ``config`` describes.

    Args:
        config: a validated `config.FinetuneConfig` with a ``model.preset``; never
            changed. Its phases' null ``steps`` are resolved from their epochs over the
            training set (`config.FinetuneConfig.with_steps`), which the run directory
            then records.
        callbacks: extra Keras callbacks added to every phase's `fit`, after the run's own.
        log: a function taking one progress line; default prints to stderr.

    Returns:
        The summary dict, also written to ``OUTPUT_DIR/summary.json``: the trainer's
        (`keras_largebatch.training.trainer.Trainer.train`) with ``evaluations`` (the dev
        metrics of every evaluation, ``{split}_{metric}``), ``best`` (the best evaluation of
        ``main_metric`` and its weights file), ``task``, ``main_metric``, ``preset``,
        ``random_init``, ``sequence_length``, ``num_train_examples``, ``num_dev_examples``,
        ``optimizer``.

    Raises:
        FileNotFoundError: the preset, the task's directory or one of its files is missing.
        ValueError: no ``model.preset``, a preset that is not a BERT one, a task file with a
            fault (named with its line), an output directory holding a different run, or a
            batch that does not split over the replicas; all before any training.
    """
    # Imported here, so that `main` quiets TensorFlow's start-up lines before they load and
    # --print-config prints without them.
    from keras_largebatch.bert.finetuning.recipe import GlueFineTuning, load_inputs
    from keras_largebatch.training.trainer import Trainer

    if config.is_embedded_default():
        raise ValueError(
            "model.preset is null, which stands for the embedded default (run_embedded_default); "
            "give a keras-hub BERT preset directory to fine-tune one"
        )
    inputs = load_inputs(config)
    config = config.with_steps(len(inputs.examples["train"].labels))
    return Trainer(config, GlueFineTuning(config, inputs), callbacks, log).train()


def run_embedded_default(config, pretrain_config=None, callbacks=(), log=None):
    """The embedded default: fine-tunes the default pretraining run's export and a random
    initialization of the same architecture alike, and compares their dev scores.

    Args:
        config: a validated `config.FinetuneConfig` with ``model.preset`` null; its settings
            are those of both runs. ``data.glue_dir`` null: the default task.
        pretrain_config: the pretraining run's
            `keras_largebatch.bert.pretraining.config.PretrainConfig` (None: its defaults,
            ``runs/bert_tiny_lamb``); trained first when its directory has no summary.
        callbacks: extra Keras callbacks of both fine-tuning runs.
        log: a function taking one progress line; default prints each stage's lines to
            stderr with its name.

    Returns:
        The comparison, also written to ``OUTPUT_DIR/comparison.json``: ``task``, ``metric``
        (the task's main metric on its first dev split), ``pretrained`` and ``random_init``
        (each ``best``, ``best_step``, ``final``, ``run_dir``, and for an accuracy
        ``final_interval_95``), ``dev_examples`` (for an accuracy), ``word_overlap_rule``
        (on the default task: `default_task.overlap_rule`), ``steps``, ``preset``,
        ``pretraining_run``, ``pretraining_steps``, ``glue_dir``, ``wall_time_seconds``.

    Raises:
        ValueError: ``OUTPUT_DIR`` holds files the embedded default does not write, or an
            error of pretraining, export or fine-tuning, before it trains.
    """
    from keras_largebatch.bert import export
    from keras_largebatch.bert import pretraining as pretrain
    from keras_largebatch.bert.finetuning import default_task, glue
    from keras_largebatch.bert.pretraining import config as pretrain_config_lib

    start_time = time.perf_counter()
    if not config.is_embedded_default():
        raise ValueError(
            f"model.preset={config.model.preset!r}: the embedded default exports the default "
            "pretraining run itself; leave model.preset null"
        )
    output_dir = config.output_dir
    _check_embedded_output_dir(output_dir)
    say = log or ProgressLog("finetune")
    pretrain_config = pretrain_config or pretrain_config_lib.load_config()
    pretraining_run = pretrain_config.output_dir
    if not os.path.isfile(os.path.join(pretraining_run, "summary.json")):
        say(f"the pretraining run {pretraining_run} has no summary yet: pretraining it first")
        pretrain.pretrain(pretrain_config, log=log)
    with open(os.path.join(pretraining_run, "summary.json"), encoding="utf-8") as stream:
        pretraining_steps = json.load(stream)["global_steps"]
    preset_dir = os.path.join(output_dir, PRESET_DIRNAME)
    if config.overwrite and os.path.isdir(preset_dir):
        shutil.rmtree(preset_dir)
    if os.path.isdir(preset_dir) and os.listdir(preset_dir):
        say(f"fine-tuning the preset exported earlier, {preset_dir} (overwrite=true exports again)")
    else:
        exported = export.export_preset(pretraining_run, preset_dir, log=log)
        say(f"exported step {exported['step']} of {pretraining_run} to {preset_dir}")
    glue_dir = config.data.glue_dir or default_task.write_default_task(
        os.path.join(output_dir, DATA_DIRNAME),
        num_train=config.data.default_train_examples,
        num_dev=config.data.default_dev_examples,
    )
    summaries = {}
    for name, random_init in INITIALIZATIONS:
        run_config = config.for_run(
            os.path.join(output_dir, name), preset_dir, glue_dir, random_init
        )
        summaries[name] = finetune(run_config, callbacks, log or ProgressLog(f"finetune {name}"))
    comparison = compare(summaries)
    for name, _ in INITIALIZATIONS:
        comparison[name]["run_dir"] = os.path.join(output_dir, name)
    if config.data.glue_dir is None:
        splits = glue.read_task(config.data.task, glue_dir)
        comparison["word_overlap_rule"] = default_task.overlap_rule(splits["train"], splits["dev"])
    comparison.update(
        preset=preset_dir,
        pretraining_run=pretraining_run,
        pretraining_steps=pretraining_steps,
        glue_dir=glue_dir,
        wall_time_seconds=time.perf_counter() - start_time,
    )
    _files.write_text(
        os.path.join(output_dir, COMPARISON_FILENAME), json.dumps(comparison, indent=2)
    )
    for line in describe_comparison(comparison):
        say(line)
    return comparison


def compare(summaries):
    """The dev scores of the embedded default's runs side by side, from their summaries
    (``{run name: summary}``): per run its ``best`` and ``final`` evaluation of the main
    metric and the best's step. For an accuracy, ``final_interval_95`` is the half-width of
    the 95% normal interval of the final accuracy over the dev examples,
    1.96 sqrt(p (1 - p) / n): the best evaluation is chosen on the same examples, so it is the
    optimistic figure and the final one the fair one."""
    first = next(iter(summaries.values()))
    metric = first["main_metric"]
    comparison = {"task": first["task"], "metric": metric, "steps": first["global_steps"]}
    for name, summary in summaries.items():
        final = summary["evaluations"][-1][metric]
        comparison[name] = {
            "best": summary["best"][metric],
            "best_step": summary["best"]["global_step"],
            "final": final,
        }
        split, _, base_metric = metric.rpartition("_")
        if base_metric == "accuracy":
            num_examples = summary["num_dev_examples"][split]
            comparison[name]["final_interval_95"] = 1.96 * math.sqrt(
                final * (1 - final) / num_examples
            )
            comparison["dev_examples"] = num_examples
    return comparison


def describe_comparison(comparison):
    """The progress lines that show a `compare` result: one line per run."""
    lines = [
        f"{comparison['task']} {comparison['metric']} after {comparison['steps']} steps "
        "(best / final evaluation):"
    ]
    labels = {"pretrained": "pretrained backbone", "random_init": "random initialization"}
    for name, _ in INITIALIZATIONS:
        scores = comparison[name]
        line = f"  {labels[name]:<22} {scores['best']:.4f} / {scores['final']:.4f}"
        if "final_interval_95" in scores:
            line += (
                f" (final +/- {scores['final_interval_95']:.3f} at 95% over "
                f"{comparison['dev_examples']} dev examples)"
            )
        lines.append(line)
    if "word_overlap_rule" in comparison:
        rule = comparison["word_overlap_rule"]
        lines.append(
            f"  {'word-overlap rule':<22} {rule['dev_accuracy']:.4f} (no model: label 1 when the "
            f"sentences share at least {rule['threshold']:.3f} of their words, chosen on train)"
        )
    return lines


def _check_embedded_output_dir(output_dir):
    """Refuses an ``output_dir`` holding anything the embedded default does not write (its
    preset, data, runs and comparison, and the hidden temporary files of their atomic
    writes), before anything is written."""
    if not os.path.isdir(output_dir):
        return
    own = {PRESET_DIRNAME, DATA_DIRNAME, COMPARISON_FILENAME} | {
        name for name, _ in INITIALIZATIONS
    }
    foreign = sorted(
        name for name in os.listdir(output_dir) if name not in own and not name.startswith(".")
    )
    if foreign:
        raise ValueError(
            f"output_dir {output_dir!r} holds {foreign}, which the embedded default does not "
            f"write (it writes {sorted(own)}); choose an empty or new output_dir"
        )
