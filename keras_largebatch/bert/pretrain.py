"""BERT pretraining with LAMB: the ``keras-largebatch-pretrain`` command and its library function.

    python -m keras_largebatch.bert.pretrain [--config FILE.yaml] [key=value ...]

With no arguments this is the embedded default job: it writes the default corpus (English prose
shipped with Python), its vocabulary and TFRecords under ``runs/bert_tiny_lamb/data``, then
pretrains BERT-tiny with LAMB, printing a progress line per logging window and a JSON summary
at the end. `config.PretrainConfig` lists every setting.

The run directory (``output_dir``) holds ``run_config.json`` (the run's config), the data the
run created, ``checkpoints/`` (``state.json`` names the newest checkpoint, its phase and step),
``logs/`` (TensorBoard scalars at the global optimizer step) and ``summary.json``.

Preemption: a checkpoint (weights and optimizer state) is written every
``checkpoint_interval`` optimizer steps and at the end of each phase; running the same command
again resumes from the newest one, at the same phase and step, so at most
``checkpoint_interval`` steps are trained again and none is skipped. With
``data.deterministic`` (the default) the batches are read in a fixed order and the resumed run
skips exactly the batches already trained, so it gives the same weights as an uninterrupted
run (with dropout 0; dropout's random state is not checkpointed). With
``data.deterministic=false`` the input pipeline reads files in parallel and is reseeded from
the step it resumes at. Running the command after the run completed prints the stored summary
and trains nothing. A run directory holding a different config is refused unless
``overwrite=true``, which deletes the run's checkpoints, logs and summary (and recreates the
default data) and starts over. Under MultiWorkerMirroredStrategy only the chief writes
checkpoints, logs and the summary; every worker resumes from the same state file.
"""

import argparse
import json
import os
import sys
import time
import uuid

import keras
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from keras_largebatch.bert import config as config_lib
from keras_largebatch.bert import create_data
from keras_largebatch.bert import input_pipeline
from keras_largebatch.bert import model as model_lib
from keras_largebatch.bert import vocab as vocab_lib
from keras_largebatch.callbacks import LearningRateLogger, TrustRatioMonitor
from keras_largebatch.distribute import describe_strategy, get_strategy
from keras_largebatch.optimizers import LAMB, ExclusionRule
from keras_largebatch.schedules import WarmupPolynomialDecay

RUN_CONFIG_FILENAME = "run_config.json"
SUMMARY_FILENAME = "summary.json"
STATE_FILENAME = "state.json"
CHECKPOINT_PREFIX = "ckpt-"
CHECKPOINT_SUFFIX = ".weights.h5"
# The window metrics reported in progress lines and the summary, in this order.
REPORTED_METRICS = (
    "loss", "masked_lm_loss", "masked_lm_accuracy", "next_sentence_loss",
    "next_sentence_accuracy",
)


def pretrain(config, callbacks=(), log=None):
    """Runs (or resumes, or reports) the pretraining run that ``config`` describes.

    Args:
        config: a `config.PretrainConfig`; validated here.
        callbacks: extra Keras callbacks added to every phase's `fit`, after the run's own.
        log: a function taking one progress line; default prints to stderr.

    Returns:
        The summary dict, also written to ``OUTPUT_DIR/summary.json``: ``global_steps``,
        ``examples_per_second`` (training throughput of this process, compilation excluded),
        ``initial`` and ``final`` (the first and last logging window's loss and accuracies),
        ``phases`` (per phase: steps, sequence length, batch, throughput), ``strategy``,
        ``resumed_from_step``, ``wall_time_seconds``, ``checkpoint``.

    Raises:
        ValueError: a bad config value, output directory holding a different run, record file
            pattern matching nothing, record not matching the phase's lengths, or a batch that
            does not divide over the replicas. All are raised before any training.
    """
    log = log or _print_to_stderr
    start_time = time.perf_counter()
    config.validate()
    run = _RunDirectory(config)
    state = run.claim()
    if state is not None and state["complete"] and tf.io.gfile.exists(run.summary_path):
        log(f"the run in {config.output_dir} is already complete ({state['global_step']} "
            f"steps); its summary is {run.summary_path}. Use another output_dir, or "
            "overwrite=true to train again")
        with tf.io.gfile.GFile(run.summary_path) as stream:
            return json.load(stream)
    # A complete state without a summary (killed just before writing it) goes on below: the
    # last phase-end checkpoint leaves no step to train, and the summary is written.
    strategy = get_strategy(
        config.strategy.name, tpu=config.strategy.tpu, devices=config.strategy.devices
    )
    num_replicas = strategy.num_replicas_in_sync
    # Under MultiWorkerMirroredStrategy only the chief writes checkpoints, logs and summary.
    run.writes = strategy.extended.should_checkpoint
    for index, phase in enumerate(config.phases):
        check_batch_division(f"phases.{index}", phase, num_replicas)
    record_files, vocab_file = _prepare_data(config, log)
    vocabulary_size = (config.model.vocabulary_size
                       or len(vocab_lib.load_vocabulary(vocab_file)))
    description = describe_strategy(strategy)
    log(f"strategy {description['kind']} with {num_replicas} replica(s) on "
        f"{description['devices']}; mixed precision {config.mixed_precision}")

    keras.utils.set_random_seed(config.seed)
    with strategy.scope():
        model = build_model(config, vocabulary_size)
    start_phase, start_step = 0, 0
    if state is not None:
        start_phase, start_step = state["phase"], state["step"]
        if start_step == config.phases[start_phase].steps:
            # A phase-end checkpoint: the next phase starts from its weights with a fresh
            # optimizer, so only the model's weights are loaded (the model has no optimizer yet).
            model.load_weights(state["checkpoint"])
            start_phase, start_step = start_phase + 1, 0
        log(f"resuming from {state['checkpoint']} at phase {start_phase + 1}, step {start_step} "
            f"(global step {state['global_step']})")

    history = _History(state)
    for index in range(start_phase, len(config.phases)):
        phase_start = start_step if index == start_phase else 0
        _run_phase(config, index, phase_start, model, strategy, record_files[index], run,
                   history, state if index == start_phase and phase_start else None,
                   list(callbacks), log)
    summary = history.summary(config, description, time.perf_counter() - start_time,
                              run.state()["checkpoint"])
    run.write_summary(summary)
    return summary


def build_model(config, vocabulary_size):
    """The `BertPretrainer` that ``config.model`` and ``config.mixed_precision`` describe."""
    model_config = config.model
    num_layers, hidden_dim, num_heads, intermediate_dim = model_config.dimensions()
    backbone = model_lib.bert_backbone(
        model_config.size,
        vocabulary_size=vocabulary_size,
        max_sequence_length=(
            model_config.max_sequence_length or max(p.seq_length for p in config.phases)
        ),
        dropout=model_config.dropout,
        num_layers=num_layers,
        hidden_dim=hidden_dim,
        num_heads=num_heads,
        intermediate_dim=intermediate_dim,
        dtype=config.mixed_precision,
    )
    return model_lib.BertPretrainer(backbone)


def build_optimizer(optimizer_config, phase, model, mixed_precision=None):
    """A fresh optimizer for one phase, with its warmup + polynomial-decay schedule.

    LAMB (`keras_largebatch.LAMB`) gets the exclusions as path patterns; Keras's AdamW matches
    only short variable names, so it gets the same variables as an explicit list. With
    ``mixed_float16`` the optimizer is wrapped in `keras.optimizers.LossScaleOptimizer`.
    """
    schedule = WarmupPolynomialDecay(
        peak_learning_rate=phase.peak_learning_rate,
        total_steps=phase.steps,
        warmup_steps=phase.warmup_steps,
        end_learning_rate=phase.end_learning_rate,
        power=phase.power,
    )
    accumulation = phase.gradient_accumulation_steps
    accumulation = accumulation if accumulation > 1 else None
    common = dict(
        learning_rate=schedule,
        beta_1=optimizer_config.beta_1,
        beta_2=optimizer_config.beta_2,
        epsilon=optimizer_config.epsilon,
        weight_decay=optimizer_config.weight_decay,
        global_clipnorm=optimizer_config.global_clipnorm,
        gradient_accumulation_steps=accumulation,
    )
    if optimizer_config.name == "lamb":
        optimizer = LAMB(
            exclude_from_weight_decay=list(optimizer_config.exclude_from_weight_decay),
            exclude_from_layer_adaptation=list(optimizer_config.exclude_from_layer_adaptation),
            record_trust_ratio=True,
            **common,
        )
    else:
        optimizer = keras.optimizers.AdamW(**common)
        rule = ExclusionRule(list(optimizer_config.exclude_from_weight_decay),
                             "optimizer.exclude_from_weight_decay")
        optimizer.exclude_from_weight_decay(
            var_list=[variable for variable in model.trainable_variables if rule.excludes(variable)]
        )
    if mixed_precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def check_batch_division(key, phase, num_replicas):
    """Raises ValueError unless a phase's micro-batch splits evenly over the replicas."""
    micro_batch = phase.global_batch_size // phase.gradient_accumulation_steps
    if micro_batch % num_replicas:
        raise ValueError(
            f"{key}.global_batch_size={phase.global_batch_size} / gradient_accumulation_steps="
            f"{phase.gradient_accumulation_steps} = {micro_batch} examples per micro-batch must "
            f"be divisible by the {num_replicas} replicas of the strategy"
        )
    return micro_batch // num_replicas


def make_phase_dataset(strategy, record_files, phase, data_config, start_step=0, seed=0):
    """The distributed dataset of one phase, positioned at optimizer step ``start_step``.

    Each replica's batch is ``global_batch_size / (gradient_accumulation_steps *
    num_replicas)``. With ``data_config.deterministic`` the records are read in file order
    (`make_pretraining_dataset(is_training=False)`, repeated) and the batches of the steps
    already trained are skipped, so a resumed run sees what an uninterrupted one would; else
    the parallel, shuffled training pipeline is seeded from ``(seed, start_step)``.
    """
    skip_batches = start_step * phase.gradient_accumulation_steps

    def dataset_fn(input_context):
        batch_size = input_context.get_per_replica_batch_size(
            phase.global_batch_size // phase.gradient_accumulation_steps
        )
        if data_config.deterministic:
            dataset = input_pipeline.make_pretraining_dataset(
                record_files, phase.seq_length, phase.max_predictions_per_seq, batch_size,
                is_training=False, input_context=input_context,
            )
            return dataset.repeat().skip(skip_batches)
        return input_pipeline.make_pretraining_dataset(
            record_files, phase.seq_length, phase.max_predictions_per_seq, batch_size,
            is_training=True, input_context=input_context, seed=seed * 1_000_003 + start_step,
            shuffle_buffer_size=data_config.shuffle_buffer_size,
        )

    return strategy.distribute_datasets_from_function(dataset_fn)


def _run_phase(config, index, start_step, model, strategy, record_files, run, history,
               resume_state, callbacks, log):
    phase = config.phases[index]
    with strategy.scope():
        optimizer = build_optimizer(config.optimizer, phase, model, config.mixed_precision)
        model.compile(optimizer=optimizer, steps_per_execution=config.steps_per_execution)
        optimizer.build(model.trainable_variables)
    if resume_state is not None:
        model.load_weights(resume_state["checkpoint"])
    log(f"phase {index + 1}/{len(config.phases)}: {phase.steps} steps of "
        f"{phase.global_batch_size} examples at sequence length {phase.seq_length}"
        + (f", from step {start_step}" if start_step else ""))
    loop = _PhaseLoop(config, index, start_step, run, history, log)
    phase_callbacks = [LearningRateLogger()]
    if config.optimizer.name == "lamb":
        phase_callbacks.append(TrustRatioMonitor())
    phase_callbacks.append(loop)
    # One Keras epoch is one logging window. Keras cannot end an epoch early without running
    # past it, so when log_interval does not divide the phase's steps, the last, shorter window
    # is a second `fit` on a dataset positioned after the full windows.
    full_windows_end = phase.steps - phase.steps % config.log_interval
    segments = []
    if start_step < full_windows_end:
        segments.append((start_step, full_windows_end, config.log_interval))
    if full_windows_end < phase.steps:
        segments.append((full_windows_end, phase.steps, phase.steps - full_windows_end))
    for first_step, end_step, window in segments:
        dataset = make_phase_dataset(strategy, record_files, phase, config.data, first_step,
                                     seed=config.data.seed + index)
        model.fit(
            dataset,
            epochs=(end_step - first_step) // window,
            steps_per_epoch=window * phase.gradient_accumulation_steps,
            callbacks=phase_callbacks + callbacks,
            shuffle=False,
            verbose=0,
        )
    if loop.step != phase.steps:
        raise RuntimeError(
            f"phase {index + 1} stopped at step {loop.step} of {phase.steps}: a callback stopped "
            f"training early; the newest checkpoint is in {run.checkpoint_dir}"
        )
    history.end_phase(index, phase)


class _PhaseLoop(keras.callbacks.Callback):
    """At the end of each logging window of a phase: prints a progress line, writes TensorBoard
    scalars and, every ``checkpoint_interval`` steps and at the phase's end, a checkpoint.

    One Keras epoch is one logging window, so the metrics Keras resets at each epoch are the
    window's means.
    """

    def __init__(self, config, phase_index, start_step, run, history, log):
        super().__init__()
        self.config = config
        self.phase_index = phase_index
        self.phase = config.phases[phase_index]
        self.step = start_step
        self.run = run
        self.history = history
        self.log = log
        self.phase_offset = sum(p.steps for p in config.phases[:phase_index])
        self._window_start = None
        self._window_first_step = start_step

    def _optimizer_step(self):
        return int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def on_epoch_begin(self, epoch, logs=None):
        self._window_start = time.perf_counter()
        self._window_first_step = self._optimizer_step()

    def on_epoch_end(self, epoch, logs=None):
        self.step = self._optimizer_step()
        seconds = time.perf_counter() - self._window_start
        steps = self.step - self._window_first_step
        examples_per_second = steps * self.phase.global_batch_size / seconds
        global_step = self.phase_offset + self.step
        metrics = {name: float(value) for name, value in (logs or {}).items()}
        metrics["examples_per_second"] = examples_per_second
        self.history.add_window(global_step, metrics, steps, seconds, self.phase.global_batch_size)
        self.run.write_scalars(global_step, metrics)
        self.log(
            f"phase {self.phase_index + 1} step {self.step}/{self.phase.steps} "
            f"(global {global_step}): loss {metrics['loss']:.4f} "
            f"mlm_acc {metrics['masked_lm_accuracy']:.4f} "
            f"nsp_acc {metrics['next_sentence_accuracy']:.4f} "
            f"lr {metrics.get('learning_rate', float('nan')):.3g} "
            f"{examples_per_second:,.0f} examples/s"
        )
        if self.step % self.config.checkpoint_interval == 0 or self.step == self.phase.steps:
            path = self.run.save_checkpoint(
                self.model, self.phase_index, self.step, global_step,
                complete=(self.phase_index == len(self.config.phases) - 1
                          and self.step == self.phase.steps),
                initial=self.history.initial,
                final=self.history.final,
            )
            self.log(f"checkpoint {path}")


class _History:
    """What the summary reports: first and last window metrics and training throughput."""

    def __init__(self, state):
        self.initial = None if state is None else state["initial"]
        # Kept in the state too, so a run killed between its last checkpoint and its summary
        # can still write the summary without training again.
        self.final = None if state is None else state.get("final")
        self.resumed_from = None if state is None else state["global_step"]
        self.global_step = 0 if state is None else state["global_step"]
        self.phases = []
        self._windows = []

    def add_window(self, global_step, metrics, steps, seconds, global_batch_size):
        reported = {name: metrics[name] for name in REPORTED_METRICS}
        if self.initial is None:
            self.initial = reported
        self.final = reported
        self.global_step = global_step
        self._windows.append((steps * global_batch_size, seconds))

    def end_phase(self, index, phase):
        # The first window of each fit includes tracing and compilation.
        windows = self._windows[1:] or self._windows
        examples = sum(count for count, _ in windows)
        seconds = sum(seconds for _, seconds in windows)
        self.phases.append({
            "phase": index + 1,
            "steps": phase.steps,
            "seq_length": phase.seq_length,
            "global_batch_size": phase.global_batch_size,
            "examples_per_second": examples / seconds if seconds else None,
        })
        self._windows = []

    def summary(self, config, strategy_description, wall_time, checkpoint):
        rates = [p["examples_per_second"] for p in self.phases if p["examples_per_second"]]
        return {
            "global_steps": self.global_step,
            "examples_per_second": float(np.mean(rates)) if rates else None,
            "initial": self.initial,
            "final": self.final,
            "phases": self.phases,
            "strategy": strategy_description,
            "model_size": config.model.size,
            "optimizer": config.optimizer.name,
            "resumed_from_step": self.resumed_from,
            "wall_time_seconds": wall_time,
            "checkpoint": checkpoint,
        }


def _prepare_data(config, log):
    """Returns ``(record files per phase, vocabulary file)``: the phases' checked input files,
    or the default corpus's records, created under OUTPUT_DIR/data when missing."""
    record_files = [None] * len(config.phases)
    for index, phase in enumerate(config.phases):
        if phase.input_files is not None:
            files = input_pipeline.resolve_record_files(phase.input_files)
            for path in files:
                input_pipeline.check_record_file(path, phase.seq_length,
                                                 phase.max_predictions_per_seq)
            record_files[index] = files
    vocab_file = config.data.vocab_file
    if vocab_file is not None and not tf.io.gfile.exists(vocab_file):
        raise ValueError(f"data.vocab_file {vocab_file!r} does not exist")
    if vocab_file is None and config.model.vocabulary_size is None and all(record_files):
        raise ValueError(
            "model.vocabulary_size is null and data.vocab_file is null: give one of them for "
            "records from input_files (the model's vocabulary must match the records' ids)"
        )
    for index, phase in enumerate(config.phases):
        if record_files[index] is not None:
            continue
        data = create_data.create_default_pretraining_data(
            os.path.join(config.output_dir, "data",
                         f"seq{phase.seq_length}-pred{phase.max_predictions_per_seq}"),
            max_seq_length=phase.seq_length,
            max_predictions_per_seq=phase.max_predictions_per_seq,
            vocabulary_size=config.data.vocabulary_size,
            dupe_factor=config.data.dupe_factor,
            seed=config.data.seed,
            overwrite=config.overwrite,
            progress=True,
        )
        log(f"phase {index + 1} data: {data.num_examples} examples in "
            f"{os.path.dirname(data.record_files[0])}")
        if vocab_file is None:
            vocab_file = data.vocab_file
        elif vocab_lib.load_vocabulary(vocab_file) != vocab_lib.load_vocabulary(data.vocab_file):
            raise ValueError(
                f"phase {index + 1}'s default records use vocabulary {data.vocab_file}, which "
                f"differs from {vocab_file}; the model has one vocabulary for every phase"
            )
        record_files[index] = data.record_files
    return record_files, vocab_file


class _RunDirectory:
    """The files of a run: its config, checkpoints with their state, logs and summary."""

    def __init__(self, config):
        self.config = config
        self.output_dir = config.output_dir
        self.checkpoint_dir = config.checkpoint_dir or os.path.join(config.output_dir,
                                                                    "checkpoints")
        self.log_dir = os.path.join(config.output_dir, "logs")
        self.config_path = os.path.join(config.output_dir, RUN_CONFIG_FILENAME)
        self.summary_path = os.path.join(config.output_dir, SUMMARY_FILENAME)
        self.state_path = os.path.join(self.checkpoint_dir, STATE_FILENAME)
        self.writes = True
        self._writer = None

    def _run_config(self):
        values = self.config.to_dict()
        del values["overwrite"]
        return values

    def claim(self):
        """Takes the directory for this run; returns the checkpoint state to resume or None.

        Raises ValueError, before anything is written, if the checkpoints there belong to a
        run with another config, or the directory holds files of something other than a run,
        unless ``overwrite`` (which deletes the earlier run's checkpoints, logs and summary).
        A directory whose run wrote no checkpoint yet is taken over with the new config.
        """
        expected = self._run_config()
        state = self.state()
        if self.config.overwrite:
            self._remove_run_files()
            state = None
        elif state is not None and state["config"] != expected:
            raise ValueError(
                f"checkpoint_dir {self.checkpoint_dir!r} holds a run with a different config "
                f"(differs at {sorted(_differences(state['config'], expected))}); use another "
                "output_dir, run with the same config to resume it, or pass overwrite=true to "
                "start over"
            )
        elif (not tf.io.gfile.exists(self.config_path) and tf.io.gfile.isdir(self.output_dir)
              and tf.io.gfile.listdir(self.output_dir)):
            raise ValueError(
                f"output_dir {self.output_dir!r} is not empty and holds no "
                f"{RUN_CONFIG_FILENAME}, so it is not a pretraining run's directory; choose "
                "an empty or new output_dir, or pass overwrite=true to use it anyway (files "
                "there that the run does not write are left alone)"
            )
        tf.io.gfile.makedirs(self.output_dir)
        _write_atomically(self.config_path, json.dumps(expected, indent=2))
        return state

    def _remove_run_files(self):
        """Deletes what earlier runs wrote here (checkpoints, state, logs, summary), only that."""
        if tf.io.gfile.isdir(self.checkpoint_dir):
            for name in tf.io.gfile.listdir(self.checkpoint_dir):
                if name == STATE_FILENAME or (name.startswith(CHECKPOINT_PREFIX)
                                              and name.endswith(CHECKPOINT_SUFFIX)):
                    tf.io.gfile.remove(os.path.join(self.checkpoint_dir, name))
        if tf.io.gfile.isdir(self.log_dir):
            tf.io.gfile.rmtree(self.log_dir)
        for path in (self.summary_path, self.config_path):
            if tf.io.gfile.exists(path):
                tf.io.gfile.remove(path)

    def state(self):
        """The newest checkpoint's state (phase, step, global_step, checkpoint path...), or None."""
        if not tf.io.gfile.exists(self.state_path):
            return None
        with tf.io.gfile.GFile(self.state_path) as stream:
            return json.load(stream)

    def save_checkpoint(self, model, phase, step, global_step, complete, initial, final):
        """Writes weights and optimizer state, then the state file naming them, atomically.

        A process killed at any point leaves the previous state file and checkpoint intact:
        the weights go to a temporary name first and the state file is replaced by a rename.
        """
        name = f"{CHECKPOINT_PREFIX}{global_step:09d}{CHECKPOINT_SUFFIX}"
        path = os.path.join(self.checkpoint_dir, name)
        if not self.writes:
            return path
        tf.io.gfile.makedirs(self.checkpoint_dir)
        temporary = os.path.join(self.checkpoint_dir,
                                 f"{CHECKPOINT_PREFIX}partial{CHECKPOINT_SUFFIX}")
        model.save_weights(temporary, overwrite=True)
        tf.io.gfile.rename(temporary, path, overwrite=True)
        state = {
            "phase": phase,
            "step": step,
            "global_step": global_step,
            "complete": complete,
            "checkpoint": path,
            "initial": initial,
            "final": final,
            "config": self._run_config(),
        }
        _write_atomically(self.state_path, json.dumps(state, indent=2))
        checkpoints = sorted(
            name for name in tf.io.gfile.listdir(self.checkpoint_dir)
            if name.startswith(CHECKPOINT_PREFIX) and name.endswith(CHECKPOINT_SUFFIX)
            and name[len(CHECKPOINT_PREFIX):-len(CHECKPOINT_SUFFIX)].isdigit()
        )
        for old in checkpoints[:-self.config.keep_checkpoints]:
            tf.io.gfile.remove(os.path.join(self.checkpoint_dir, old))
        return path

    def write_scalars(self, global_step, metrics):
        """TensorBoard scalars at the global step; written with `tf.summary.write` and the
        scalars plugin's metadata, so the `tensorboard` package is needed only to view them."""
        if not self.writes:
            return
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)
        metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
        )
        with self._writer.as_default():
            for name, value in metrics.items():
                tf.summary.write(name, tf.constant(value, tf.float32), step=global_step,
                                 metadata=metadata)
        self._writer.flush()

    def write_summary(self, summary):
        if self.writes:
            _write_atomically(self.summary_path, json.dumps(summary, indent=2))


def _differences(old, new, prefix=""):
    if isinstance(old, dict) and isinstance(new, dict):
        keys = set(old) | set(new)
        return [d for key in keys
                for d in _differences(old.get(key), new.get(key), f"{prefix}{key}.")]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for index, (a, b) in enumerate(zip(old, new))
                for d in _differences(a, b, f"{prefix}{index}.")]
    return [] if old == new else [prefix.rstrip(".")]


def _write_atomically(path, text):
    # A name of its own per writer: every worker of a multi-worker run writes run_config.json.
    temporary = f"{path}.tmp-{uuid.uuid4().hex}"
    with tf.io.gfile.GFile(temporary, "w") as stream:
        stream.write(text)
    tf.io.gfile.rename(temporary, path, overwrite=True)


def _print_to_stderr(line):
    print(f"[pretrain] {line}", file=sys.stderr, flush=True)


def build_parser():
    """The command line of ``keras-largebatch-pretrain``."""
    parser = argparse.ArgumentParser(
        prog="keras-largebatch-pretrain",
        description="Pretrain BERT with LAMB. With no arguments: the embedded default job "
                    "(BERT-tiny on the default corpus, a few minutes on a CPU).",
        epilog="Overrides use dotted keys and YAML values, e.g. model.size=mini "
               "phases.0.steps=100 phases.0.peak_learning_rate=6.0e-3 "
               "optimizer.global_clipnorm=null strategy.name=tpu mixed_precision=mixed_bfloat16",
    )
    parser.add_argument("--config", default=None, metavar="FILE.yaml",
                        help="YAML file with any subset of the config's fields (default: the "
                             "embedded defaults)")
    parser.add_argument("--print_config", action="store_true",
                        help="print the resolved config as YAML and exit without training")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="config overrides applied after the file")
    return parser


def main(argv=None):
    """Entry point of ``keras-largebatch-pretrain``; returns the process exit status."""
    args = build_parser().parse_args(argv)
    try:
        config = config_lib.load_config(args.config, args.overrides)
        if args.print_config:
            print(config.to_yaml(), end="")
            return 0
        summary = pretrain(config)
    except (ValueError, OSError, RuntimeError) as error:
        # OSError: missing files, or output that would be overwritten; RuntimeError:
        # get_strategy cannot find or reach the TPU.
        print(f"keras-largebatch-pretrain: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
