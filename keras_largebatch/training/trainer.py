"""The trainer: runs (or resumes, or reports) a recipe's phases in its run directory.

Preemption: a checkpoint (weights and optimizer state) is written every
``checkpoint_interval`` optimizer steps and at the end of each phase; running the same run
again resumes from the newest readable checkpoint, at the same phase and step, so at most
``checkpoint_interval`` steps are trained again and none is skipped. When the recipe's input is
deterministic, the resumed run skips exactly the batches already trained, so it gives the same
weights as an uninterrupted run (when the model has no randomness of its own, such as
dropout, whose random state is not checkpointed). A run that completed reports its stored
summary and trains nothing. Under MultiWorkerMirroredStrategy only the chief writes
checkpoints, logs and the summary; every worker resumes from the same state file.

The devices (`training.devices`) are a tf.distribute strategy on the TensorFlow backend and
`keras.distribution.DataParallel` on JAX; each phase's global batch is split over their replicas
and, where a phase gives ``max_per_replica_batch_size`` without ``gradient_accumulation_steps``,
into as few micro-batches as fit (`config.PhaseConfig.resolve`).

One Keras epoch is one logging window of ``log_interval`` optimizer steps, so the metrics Keras
resets at each epoch are the window's means.
"""

import sys
import time

import keras
import numpy as np

from keras_largebatch.callbacks import LearningRateLogger, TrustRatioMonitor
from keras_largebatch.training.devices import create_devices
from keras_largebatch.training.run_directory import RunDirectory

# Seeds of successive (re)starts of a phase with shuffled input stay apart.
_SEED_STRIDE = 1_000_003


def train(config, recipe, callbacks=(), log=None):
    """Runs the run that ``config`` (a `training.config.RunConfig`) and ``recipe`` describe.

    Args:
        config: the run's config; validated here, then its phases' accumulation steps are
            derived for the replicas present (`config.RunConfig.resolve`, in place).
        recipe: a `training.recipe.Recipe` built from the same config.
        callbacks: extra Keras callbacks added to every phase's `fit`, after the run's own.
        log: a function taking one progress line; default prints to stderr.

    Returns:
        The summary dict, also written to ``OUTPUT_DIR/summary.json``: ``global_steps``,
        ``examples_per_second`` (training throughput of this process, compilation excluded),
        ``initial`` and ``final`` (the first and last logging window's reported metrics),
        ``phases`` (per phase: steps, global batch, replicas, per-replica batch, accumulation
        steps, throughput), ``strategy`` (backend, kind, replicas, workers, devices),
        ``resumed_from_step``, ``wall_time_seconds``, ``checkpoint``, and the recipe's own
        fields.

    Raises:
        ValueError: a bad config value (a setting of the other Keras backend included), an
            output directory holding a different run, a batch that does not split over the
            replicas within ``max_per_replica_batch_size``, or bad input found by the recipe;
            all before any training. OSError: no checkpoint of the run can be read.
    """
    log = log or _stderr_logger(recipe.name)
    start_time = time.perf_counter()
    config.validate()
    devices = create_devices(config.strategy)
    config.resolve(devices.num_replicas)
    run = RunDirectory(config)
    run.writes = devices.writes
    state = run.claim()
    if state is not None and state["complete"] and run.has_summary():
        log(
            f"the run in {config.output_dir} is already complete ({state['global_step']} "
            f"steps); its summary is {run.summary_path}. Use another output_dir, or "
            "overwrite=true to train again"
        )
        return run.read_summary()
    # A complete state without a summary (killed just before writing it) goes on below: the
    # last phase-end checkpoint leaves no step to train, and the summary is written.
    recipe.prepare(log)
    if state is not None:
        state = run.readable_state(warn=lambda line: log(f"warning: {line}"))
    description = devices.describe()
    log(
        f"{description['backend']} backend, strategy {description['kind']} with "
        f"{devices.num_replicas} replica(s) on {description['devices']}; mixed precision "
        f"{config.mixed_precision}"
    )

    keras.utils.set_random_seed(config.seed)
    # Everything that makes or uses the model's variables runs in the devices' scope: JAX's
    # DataParallel places variables and splits batches only while its distribution is set.
    with devices.scope():
        model = recipe.build_model()
        start_phase, start_step = 0, 0
        if state is not None:
            start_phase, start_step = state["phase"], state["step"]
            if start_step == config.phases[start_phase].steps:
                # A phase-end checkpoint: the next phase starts from its weights with a fresh
                # optimizer, so only the model's weights are loaded (it has no optimizer yet).
                model.load_weights(state["checkpoint"])
                start_phase, start_step = start_phase + 1, 0
            log(
                f"resuming from {state['checkpoint']} at phase {start_phase + 1}, step "
                f"{start_step} (global step {state['global_step']})"
            )

        history = RunHistory(state, recipe.reported_metrics)
        for index in range(start_phase, len(config.phases)):
            phase_start = start_step if index == start_phase else 0
            if not _run_phase(
                config,
                recipe,
                index,
                phase_start,
                model,
                devices,
                run,
                history,
                state if index == start_phase and phase_start else None,
                list(callbacks),
                log,
            ):
                break  # the recipe's target was reached
    summary = history.summary(
        description, run.state()["checkpoint"], time.perf_counter() - start_time
    )
    summary.update(recipe.summary())
    run.write_summary(summary)
    return summary


def batch_split(phase, num_replicas):
    """``global batch G = R replicas x P examples x K accumulation steps`` for a resolved
    ``phase`` (a `config.PhaseConfig`) on ``num_replicas`` replicas."""
    return (
        f"global batch {phase.global_batch_size} = {_count(num_replicas, 'replica')} x "
        f"{_count(phase.micro_batch_size() // num_replicas, 'example')} x "
        f"{_count(phase.gradient_accumulation_steps, 'accumulation step')}"
    )


def make_phase_dataset(devices, recipe, phase_index, phase, start_step=0):
    """The distributed dataset of one phase on ``devices`` (`devices.TensorFlowDevices` or
    `devices.JaxDevices`), positioned at optimizer step ``start_step``.

    With ``recipe.deterministic_input`` the recipe's fixed-order dataset is repeated and the
    batches of the steps already trained are skipped, so a resumed run sees what an
    uninterrupted one would; else the recipe's shuffled dataset is seeded from the recipe's
    ``input_seed``, the phase and ``start_step``.
    """
    skip_batches = start_step * phase.gradient_accumulation_steps
    micro_batch = phase.micro_batch_size()

    def dataset_fn(input_context):
        batch_size = input_context.get_per_replica_batch_size(micro_batch)
        if recipe.deterministic_input:
            dataset = recipe.dataset(phase_index, batch_size, input_context, shuffle_seed=None)
            return dataset.repeat().skip(skip_batches)
        seed = (recipe.input_seed + phase_index) * _SEED_STRIDE + start_step
        return recipe.dataset(phase_index, batch_size, input_context, shuffle_seed=seed)

    return devices.distribute(dataset_fn)


def build_optimizer(recipe, phase_index, model, mixed_precision):
    """The recipe's optimizer for a phase, loss-scaled under ``mixed_float16``."""
    optimizer = recipe.build_optimizer(phase_index, model)
    if mixed_precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def _run_phase(
    config, recipe, index, start_step, model, devices, run, history, resume_state, callbacks, log
):
    phase = config.phases[index]
    optimizer = build_optimizer(recipe, index, model, config.mixed_precision)
    model.compile(
        optimizer=optimizer,
        steps_per_execution=config.steps_per_execution,
        **recipe.compile_arguments(index),
    )
    optimizer.build(model.trainable_variables)
    if resume_state is not None:
        model.load_weights(resume_state["checkpoint"])
    log(
        f"phase {index + 1}/{len(config.phases)}: {phase.steps} steps, "
        f"{batch_split(phase, devices.num_replicas)}"
        + "".join(f", {key} {value}" for key, value in recipe.phase_summary(index).items())
        + (f", from step {start_step}" if start_step else "")
    )
    windows = _LoggingWindows(config, recipe, index, start_step, run, history, log)
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    phase_callbacks = recipe.callbacks(index) + [LearningRateLogger()]
    if getattr(inner, "record_trust_ratio", False):
        phase_callbacks.append(TrustRatioMonitor())
    phase_callbacks.append(windows)
    # Keras cannot end an epoch early without running past it, so when log_interval does not
    # divide the phase's steps, the last, shorter window is a second `fit` on a dataset
    # positioned after the full windows.
    full_windows_end = phase.steps - phase.steps % config.log_interval
    segments = []
    if start_step < full_windows_end:
        segments.append((start_step, full_windows_end, config.log_interval))
    if full_windows_end < phase.steps:
        segments.append((full_windows_end, phase.steps, phase.steps - full_windows_end))
    for first_step, end_step, window in segments:
        if history.target is not None:
            break
        model.fit(
            make_phase_dataset(devices, recipe, index, phase, first_step),
            epochs=(end_step - first_step) // window,
            steps_per_epoch=window * phase.gradient_accumulation_steps,
            callbacks=phase_callbacks + callbacks,
            shuffle=False,
            verbose=0,
        )
    if windows.step != phase.steps and history.target is None:
        raise RuntimeError(
            f"phase {index + 1} stopped at step {windows.step} of {phase.steps}: a callback "
            f"stopped training early; the newest checkpoint is in {run.checkpoint_dir}"
        )
    history.end_phase(index, phase, devices.num_replicas, recipe.phase_summary(index))
    return history.target is None


class _LoggingWindows(keras.callbacks.Callback):
    """At the end of each logging window of a phase: prints a progress line, writes TensorBoard
    scalars and, every ``checkpoint_interval`` steps and at the phase's end, a checkpoint."""

    def __init__(self, config, recipe, phase_index, start_step, run, history, log):
        super().__init__()
        self.config = config
        self.recipe = recipe
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
        reported = " ".join(
            f"{label} {metrics[name]:.4f}" for label, name in self.recipe.progress_metrics
        )
        self.log(
            f"phase {self.phase_index + 1} step {self.step}/{self.phase.steps} "
            f"(global {global_step}): {reported} "
            f"lr {metrics.get('learning_rate', float('nan')):.3g} "
            f"{examples_per_second:,.0f} examples/s, {self.history.elapsed():.0f} s elapsed"
        )
        evaluation = self._evaluate(global_step)
        self.run.write_scalars(
            global_step,
            {**metrics, **{f"eval_{name}": value for name, value in (evaluation or {}).items()}},
        )
        complete = (
            self.phase_index == len(self.config.phases) - 1 and self.step == self.phase.steps
        ) or self.history.target is not None
        if (
            self.step % self.config.checkpoint_interval == 0
            or self.step == self.phase.steps
            or complete
        ):
            path = self.run.save_checkpoint(
                self.model,
                {
                    "phase": self.phase_index,
                    "step": self.step,
                    "global_step": global_step,
                    "complete": complete,
                    # Kept in the state too, so a run killed between its last checkpoint and its
                    # summary can still write the summary without training again.
                    **self.history.state(),
                },
            )
            self.log(f"checkpoint {path}")
        if self.history.target is not None:
            self.model.stop_training = True

    def _evaluate(self, global_step):
        interval = self.recipe.evaluation_interval(self.phase_index)
        if not interval or (self.step % interval and self.step != self.phase.steps):
            return None
        evaluation = {
            name: float(value) for name, value in self.recipe.evaluate(self.model).items()
        }
        reached = self.recipe.target_reached(evaluation)
        self.history.add_evaluation(global_step, evaluation, reached)
        self.log(
            f"evaluation at global step {global_step}: "
            + " ".join(f"{name} {value:.4f}" for name, value in evaluation.items())
            + (
                f"; target reached after {self.history.elapsed():.0f} s of training"
                if reached
                else ""
            )
        )
        return evaluation


class RunHistory:
    """What the summary reports: first and last window metrics, evaluations and throughput.

    Training time (``elapsed``) adds up over the processes of a resumed run: each checkpoint
    keeps the time trained up to it, compilation and evaluation included.
    """

    def __init__(self, state, reported_metrics):
        state = state or {}
        self.reported_metrics = reported_metrics
        self.initial = state.get("initial")
        self.final = state.get("final")
        self.evaluations = state.get("evaluations", [])
        self.target = state.get("target")
        self.resumed_from = state.get("global_step")
        self.global_step = state.get("global_step", 0)
        self._elapsed_before = state.get("elapsed_seconds", 0.0)
        self._start = time.perf_counter()
        self.phases = []
        self._windows = []

    def elapsed(self):
        """Seconds of training so far, over every process of the run."""
        return self._elapsed_before + time.perf_counter() - self._start

    def state(self):
        """What a checkpoint keeps of the history, for a resumed run's summary."""
        return {
            "initial": self.initial,
            "final": self.final,
            "evaluations": self.evaluations,
            "target": self.target,
            "elapsed_seconds": self.elapsed(),
        }

    def add_window(self, global_step, metrics, steps, seconds, global_batch_size):
        reported = {name: metrics[name] for name in self.reported_metrics}
        if self.initial is None:
            self.initial = reported
        self.final = reported
        self.global_step = global_step
        self._windows.append((steps * global_batch_size, seconds))

    def add_evaluation(self, global_step, evaluation, reached):
        elapsed = self.elapsed()
        self.evaluations.append(
            {"global_step": global_step, "elapsed_seconds": elapsed, **evaluation}
        )
        if reached and self.target is None:
            self.target = {"global_step": global_step, "seconds": elapsed}

    def end_phase(self, index, phase, num_replicas, recipe_fields):
        # The first window of each fit includes tracing and compilation.
        windows = self._windows[1:] or self._windows
        examples = sum(count for count, _ in windows)
        seconds = sum(seconds for _, seconds in windows)
        self.phases.append(
            {
                "phase": index + 1,
                "steps": phase.steps,
                **recipe_fields,
                "global_batch_size": phase.global_batch_size,
                "num_replicas": num_replicas,
                "per_replica_batch_size": phase.micro_batch_size() // num_replicas,
                "gradient_accumulation_steps": phase.gradient_accumulation_steps,
                "examples_per_second": examples / seconds if seconds else None,
            }
        )
        self._windows = []

    def summary(self, strategy_description, checkpoint, wall_time):
        rates = [p["examples_per_second"] for p in self.phases if p["examples_per_second"]]
        summary = {
            "global_steps": self.global_step,
            "examples_per_second": float(np.mean(rates)) if rates else None,
            "initial": self.initial,
            "final": self.final,
            "phases": self.phases,
            "strategy": strategy_description,
            "resumed_from_step": self.resumed_from,
            "wall_time_seconds": wall_time,
            "checkpoint": checkpoint,
        }
        if self.evaluations:
            summary["evaluations"] = self.evaluations
            summary["target_reached_at_step"] = (self.target or {}).get("global_step")
            summary["time_to_target_seconds"] = (self.target or {}).get("seconds")
        return summary


def _count(number, noun):
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _stderr_logger(name):
    def log(line):
        print(f"[{name}] {line}", file=sys.stderr, flush=True)

    return log
