"""The trainer: runs (or resumes, or reports) a recipe's phases in its run directory.

    summary = Trainer(config, recipe).train()    # or train(config, recipe)

The run config goes one way: the trainer picks the devices (`devices`), resolves the config
once into a frozen plan for their replicas (`plan`), claims the run directory
(`run_directory`), lets the recipe prepare its inputs, builds the model in the devices' scope,
and for each phase hands the recipe that phase's plan (a `plan.PhasePlan`) to build its
optimizer and data, then trains logging windows. The user's config object is never changed.

Preemption: a checkpoint (weights and optimizer state) is written every
``checkpoint_interval`` optimizer steps and at the end of each phase; running the same run
again resumes from the newest readable checkpoint, at the same phase and step, so at most
``checkpoint_interval`` steps are trained again and none is skipped. The recipe's input starts
at the batch the resumed step trains on, located rather than replayed, so the resumed run reads
what an uninterrupted run reads and gives the same weights (when the model has no randomness of
its own, such as dropout, whose random state is not checkpointed). A run that completed reports
its stored summary and trains nothing. Under MultiWorkerMirroredStrategy only the chief writes
checkpoints, logs and the summary, and on JAX only process 0; every worker or process resumes
from the same state file. The processes of a run check first that they were given the same
config, then that they read the same run directory, and return once the summary is written.

One Keras epoch is one logging window of ``log_interval`` optimizer steps, so the metrics Keras
resets at each epoch are the window's means.
"""

import contextlib
import math
import os
import time

import keras

from keras_largebatch._logging import ProgressLog
from keras_largebatch.callbacks import LearningRateLogger, TrustRatioMonitor
from keras_largebatch.input_order import RECORD_COUNTS_FILENAME, RecordCounts
from keras_largebatch.training.devices import create_devices
from keras_largebatch.training.divergence import (
    DivergenceGuard,
    TrainingDiverged,
    host_value,
    non_finite_variables,
)
from keras_largebatch.training.evaluation import EXAMPLES
from keras_largebatch.training.input_release import fit_releasing_input
from keras_largebatch.training.plan import plan_run, run_record
from keras_largebatch.training.process_group import PeerWatch
from keras_largebatch.training.run_directory import RunDirectory
from keras_largebatch.training.summary import RunSummary


def train(config, recipe, callbacks=(), log=None):
    """Runs the run that ``config`` and ``recipe`` describe: ``Trainer(...).train()``."""
    return Trainer(config, recipe, callbacks, log).train()


class Trainer:
    """Runs one recipe's run; what lives as long as the run (devices, plan, run directory,
    model, summary) lives here, set by `train`, which runs once per `Trainer`.

    Args:
        config: the run's config (a validated `config.RunConfig`: `config_loading.load_config`
            returns one; check a config built or changed in Python with ``validate()``).
            Never changed.
        recipe: a `recipe.Recipe` built from the same config.
        callbacks: extra Keras callbacks added to every phase's `fit`, after the run's own.
        log: a function taking one progress line; default prints ``[NAME] line`` to stderr.
    """

    def __init__(self, config, recipe, callbacks=(), log=None):
        self.config = config
        self.recipe = recipe
        self.callbacks = list(callbacks)
        self.log = log or ProgressLog(recipe.name)
        self.devices = None
        self.plan = None
        self.run_directory = None
        self.model = None
        self.summary = None
        self.checkpoint = None
        # The newest checkpoint's state, what a rollback restores; the guard; the divergence
        # of the window just ended (a dict) until the trainer acts on it; how far the phase's
        # input runs ahead of its steps after rollbacks.
        self.checkpoint_state = None
        self.guard = None
        self.diverged = None
        self.input_offset = 0

    def train(self):
        """Trains (or resumes, or reports) the run; returns its summary.

        Returns:
            The summary dict, also written to ``OUTPUT_DIR/summary.json``: ``global_steps``,
            ``examples_per_second`` (training throughput of this process, compilation
            excluded), ``initial`` and ``final`` (the first and last logging window's reported
            metrics), ``phases`` (per phase: steps, global batch, replicas, per-replica batch,
            accumulation steps, throughput), ``strategy`` (backend, kind, replicas, workers,
            devices, and the mesh under model_parallel), ``resumed_from_step``,
            ``wall_time_seconds``, ``checkpoint``, ``evaluations`` (when the recipe
            evaluates), ``best`` (with a `recipe.Recipe.best_metric`: the best evaluation and
            the file of its weights), and the recipe's own fields.

        Raises:
            ValueError: a setting of the other Keras backend, model_parallel for a recipe
                without a layout map or with a model axis that does not divide the devices,
                an output directory holding a different run, a batch that does not split
                over the replicas within ``max_per_replica_batch_size`` or over the input
                pipelines, processes given different configs or seeing different run
                directories, or bad input found by the recipe; all before any training.
                OSError: no checkpoint of the run can be read.
        """
        start_time = time.perf_counter()
        self.devices = create_devices(self.config.strategy, layout_map=self.recipe.layout_map)
        with self._watch_peers():
            return self._train(start_time)

    def _watch_peers(self):
        """On JAX with several processes, a `process_group.PeerWatch`: a process whose peer is
        lost stops within ``strategy.peer_timeout`` seconds, naming it and the checkpoint."""
        if keras.backend.backend() != "jax" or self.devices.num_processes == 1:
            return contextlib.nullcontext()
        return PeerWatch(self.config.strategy.peer_timeout, lambda: self.checkpoint)

    def _train(self, start_time):
        # First, while every process still runs the same code: a process whose config fails
        # a check that the others pass would leave them waiting in a collective.
        self.devices.check_same(
            "the run's config (start every process with the same)", run_record(self.config)
        )
        self.plan = plan_run(
            self.config,
            self.devices.num_replicas,
            input_pipelines=self.devices.input_pipelines,
            num_processes=self.devices.num_processes,
        )
        self.run_directory = RunDirectory(
            self.config,
            recorded_config=self.plan.record,
            writes=self.devices.writes,
            check_same=self.devices.check_same,
            saves_are_collective=self.devices.saves_are_collective,
        )
        state = self.run_directory.claim()
        if state is not None and state["complete"] and self.run_directory.has_summary():
            self.log(
                f"the run in {self.config.output_dir} is already complete "
                f"({state['global_step']} steps); its summary is "
                f"{self.run_directory.summary_path}. Use another output_dir, or "
                "overwrite=true to train again"
            )
            return self.run_directory.read_summary()
        # A complete state without a summary (killed just before writing it) goes on below: the
        # last phase-end checkpoint leaves no step to train, and the summary is written.
        self.recipe.prepare(
            self.plan,
            self.log,
            RecordCounts(
                os.path.join(self.config.output_dir, RECORD_COUNTS_FILENAME),
                writes=self.devices.writes,
            ),
        )
        if state is not None:
            state = self.run_directory.readable_state(
                warn=lambda line: self.log(f"warning: {line}")
            )
        description = self.devices.describe()
        self.log(f"{_describe_devices(description)}; mixed precision {self.config.mixed_precision}")
        keras.utils.set_random_seed(self.config.seed)
        # Everything that makes or uses the model's variables runs in the devices' scope: JAX's
        # DataParallel places variables and splits batches only while its distribution is set.
        # The newest checkpoint, as this process knows it: the others than the writer cannot
        # read it from the state file, which the writer may not have written yet.
        self.checkpoint = state["checkpoint"] if state is not None else None
        self.checkpoint_state = state
        self.guard = DivergenceGuard(self.config.divergence, (state or {}).get("recent_losses", ()))
        diverged = None
        with self.devices.scope():
            self.model = self.recipe.build_model()
            if state is None:
                self.recipe.initialize(self.model)
            start_phase, start_step = self._resume_point(state)
            self.summary = RunSummary(
                state,
                self.recipe.reported_metrics,
                # The weights kept on disk, even those of an evaluation after the checkpoint
                # resumed from: it is never replaced by a worse one.
                best=self.run_directory.best() if state is not None else None,
            )
            try:
                for phase in self.plan.phases[start_phase:]:
                    resuming = phase.index == start_phase and start_step > 0
                    self.input_offset = state.get("input_offset", 0) if resuming else 0
                    self._train_phase(
                        phase,
                        start_step if resuming else 0,
                        state["checkpoint"] if resuming else None,
                    )
                    if self.summary.target is not None:
                        break  # the recipe's target was reached
            except TrainingDiverged as error:
                diverged = error
        summary = self.summary.summary(
            description, self.checkpoint, time.perf_counter() - start_time
        )
        summary.update(self.recipe.summary())
        self.run_directory.write_summary(summary)
        # A barrier: no process returns (to read the summary, say) before the writer wrote it.
        self.devices.check_same("the run's end", summary["global_steps"])
        if diverged is not None:
            raise diverged
        return summary

    def _resume_point(self, state):
        """``(phase index, step)`` to start at; loads the weights of a phase-end checkpoint."""
        if state is None:
            return 0, 0
        start_phase, start_step = state["phase"], state["step"]
        if start_step == self.plan.phases[start_phase].steps:
            # A phase-end checkpoint: the next phase starts from its weights with a fresh
            # optimizer, so only the model's weights are loaded (it has no optimizer yet).
            self.model.load_weights(state["checkpoint"])
            start_phase, start_step = start_phase + 1, 0
        self.log(
            f"resuming from {state['checkpoint']} at phase {start_phase + 1}, step "
            f"{start_step} (global step {state['global_step']})"
        )
        return start_phase, start_step

    def _train_phase(self, phase, start_step, checkpoint):
        """Trains ``phase`` (a `plan.PhasePlan`) from ``start_step``, restoring ``checkpoint``
        (weights and optimizer state) first when one is given."""
        optimizer = self.recipe.build_optimizer(phase, self.model)
        if self.config.mixed_precision == "mixed_float16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        self.model.compile(
            optimizer=optimizer,
            steps_per_execution=self.config.steps_per_execution,
            **self.recipe.compile_arguments(phase),
        )
        optimizer.build(self.model.trainable_variables)
        self.devices.prepare_fit(self.model)
        if checkpoint is not None:
            self.model.load_weights(checkpoint)
        self.log(
            f"phase {phase.number}/{phase.num_phases}: {phase.steps} steps, "
            f"{phase.describe_split()}"
            + "".join(f", {key} {value}" for key, value in self.recipe.phase_summary(phase).items())
            + (f", from step {start_step}" if start_step else "")
        )
        windows = _WindowEnds(self, phase, start_step)
        callbacks = self.recipe.callbacks(phase) + [LearningRateLogger()]
        if getattr(getattr(optimizer, "inner_optimizer", optimizer), "record_trust_ratio", False):
            callbacks.append(TrustRatioMonitor())
        # The devices' own last: they see the state as every other callback left it.
        callbacks += [windows] + self.callbacks + self.devices.fit_callbacks()
        step = start_step
        while True:
            for first_step, end_step, window in _fit_segments(
                phase.steps, self.config.log_interval, step
            ):
                if self.summary.target is not None or self.diverged is not None:
                    break
                fit_releasing_input(
                    self.model,
                    make_phase_dataset(
                        self.devices, self.recipe, phase, first_step + self.input_offset
                    ),
                    epochs=(end_step - first_step) // window,
                    steps_per_epoch=window * phase.gradient_accumulation_steps,
                    callbacks=callbacks,
                    shuffle=False,
                    verbose=0,
                )
            if self.diverged is None:
                break
            step = self._roll_back(phase)
        if windows.step != phase.steps and self.summary.target is None:
            raise RuntimeError(
                f"phase {phase.number} stopped at step {windows.step} of {phase.steps}: a "
                "callback stopped training early; the newest checkpoint is "
                f"{self.checkpoint or 'none (none was written)'}"
            )
        self.summary.end_phase(phase, self.recipe.phase_summary(phase))

    def end_window(self, phase, step, steps, seconds, logs, non_finite=0):
        """At the end of a logging window that trained ``steps`` optimizer steps of ``phase``
        in ``seconds`` and ended at ``step``, ``non_finite`` of its steps having been skipped by
        our optimizers for a non-finite gradient: records it, prints its progress line,
        evaluates when due, writes its TensorBoard scalars and, when due, a checkpoint. A
        window whose every step had a non-finite gradient diverged (a LossScaleOptimizer's
        overflows are not counted: they are its way of finding a scale). Returns True when the
        recipe's target is reached or the window diverged, which ends the fit."""
        global_step = phase.first_global_step + step
        metrics = {name: float(value) for name, value in (logs or {}).items()}
        metrics["examples_per_second"] = steps * phase.global_batch_size / seconds
        self.summary.add_window(global_step, metrics, steps * phase.global_batch_size, seconds)
        self._log_progress(phase, step, global_step, metrics)
        reason = self.guard.check(metrics["loss"])
        if reason is None and non_finite and not steps:
            reason = f"every step of the window had a non-finite gradient ({non_finite} skipped)"
        if reason is not None:
            self._diverge(phase, step, global_step, reason)
            self.run_directory.write_scalars(global_step, metrics)
            return True
        evaluation = self._evaluate_if_due(phase, step, global_step) or {}
        self.run_directory.write_scalars(
            global_step,
            {**metrics, **{f"eval_{name}": value for name, value in evaluation.items()}},
        )
        self._checkpoint_if_due(phase, step, global_step)
        return self.summary.target is not None or self.diverged is not None

    def _diverge(self, phase, step, global_step, reason):
        self.diverged = {
            "phase": phase.number,
            "step": step,
            "global_step": global_step,
            "reason": reason,
            "last_good_checkpoint": self.checkpoint,
        }

    def _roll_back(self, phase):
        """Acts on the divergence of the window just ended: restores the newest checkpoint of
        ``phase`` and returns its step, the phase's input now positioned past the window that
        diverged (and ``divergence.skip_batches`` more steps); raises `TrainingDiverged` when
        the run stops instead (``divergence.action=stop``, no checkpoint of the phase to
        restore, or ``divergence.max_rollbacks`` reached)."""
        diverged, settings, restored = self.diverged, self.config.divergence, self.checkpoint_state
        why_not = None
        if settings.action != "rollback":
            why_not = ""
        elif len(self.summary.rollbacks) >= settings.max_rollbacks:
            why_not = f"; divergence.max_rollbacks={settings.max_rollbacks} rollbacks done"
        elif restored is None or restored["phase"] != phase.index:
            why_not = f"; no checkpoint of phase {phase.number} to roll back to"
        if why_not is not None:
            self.diverged = None
            self.summary.diverged = diverged
            raise TrainingDiverged(
                f"the run diverged in phase {diverged['phase']} at step {diverged['step']} "
                f"(global {diverged['global_step']}): {diverged['reason']}; the last good "
                f"checkpoint is {diverged['last_good_checkpoint'] or 'none (none was written)'}"
                f"{why_not}"
            )
        self.input_offset += diverged["step"] + settings.skip_batches - restored["step"]
        rollback = dict(
            diverged,
            restored_step=restored["step"],
            input_offset=self.input_offset,
        )
        self.model.load_weights(restored["checkpoint"])
        self.guard.roll_back(restored.get("recent_losses", ()))
        self.summary.roll_back(restored, rollback)
        self.run_directory.write_rollbacks(self.summary.rollbacks)
        self.diverged = None
        self.log(
            f"the run diverged in phase {phase.number} at step {diverged['step']} (global "
            f"{diverged['global_step']}): {diverged['reason']}; rolled back to "
            f"{restored['checkpoint']} (step {restored['step']}), the input now "
            f"{self.input_offset} steps ahead (rollback {len(self.summary.rollbacks)} of at "
            f"most {settings.max_rollbacks})"
        )
        return restored["step"]

    def _log_progress(self, phase, step, global_step, metrics):
        reported = " ".join(
            f"{label} {metrics[name]:.4f}" for label, name in self.recipe.progress_metrics
        )
        optimizer = self.model.optimizer
        # Our optimizers count the steps of the phase they skipped for a non-finite gradient.
        skipped = getattr(getattr(optimizer, "inner_optimizer", optimizer), "skipped_steps", None)
        skipped = int(host_value(skipped)) if skipped is not None else 0
        self.log(
            f"phase {phase.number} step {step}/{phase.steps} (global {global_step}): "
            f"{reported} lr {metrics.get('learning_rate', float('nan')):.3g} "
            f"{metrics['examples_per_second']:,.0f} examples/s, "
            + (f"{skipped} step(s) skipped (gradient not finite), " if skipped else "")
            + f"{self.summary.elapsed():.0f} s elapsed"
        )

    def _evaluate_if_due(self, phase, step, global_step):
        """The recipe's evaluation when one is due at ``step`` (its interval, or the phase's
        end in a phase that evaluates), else None."""
        interval = self.recipe.evaluation_interval(phase)
        if not interval or (step % interval and step != phase.steps):
            return None
        evaluation = {
            name: int(value) if name == EXAMPLES else float(value)
            for name, value in self.recipe.evaluate(self.model).items()
        }
        reached = self.recipe.target_reached(evaluation)
        self.summary.add_evaluation(global_step, evaluation, reached)
        self.log(
            f"evaluation at global step {global_step}: "
            + " ".join(
                f"{name} {value}" if name == EXAMPLES else f"{name} {value:.4f}"
                for name, value in evaluation.items()
            )
            + (
                f"; target reached after {self.summary.elapsed():.0f} s of training"
                if reached
                else ""
            )
        )
        self._keep_if_best(global_step, evaluation)
        return evaluation

    def _keep_if_best(self, global_step, evaluation):
        """Keeps the model's weights when ``evaluation`` is strictly better than every earlier
        one of the run in the recipe's `best_metric` (a NaN never is)."""
        metric = self.recipe.best_metric()
        if metric is None:
            return
        if metric not in evaluation:
            raise ValueError(
                f"the {self.recipe.name!r} recipe's best_metric {metric!r} is not one of its "
                f"evaluation's metrics {sorted(evaluation)}"
            )
        value, best = evaluation[metric], self.summary.best
        if math.isnan(value) or (best is not None and not value > best[metric]):
            return
        with self.devices.local_scope():
            self.summary.best = self.run_directory.save_best(
                self.model, {"global_step": global_step, **evaluation}
            )
        self.log(f"best {metric} so far: weights kept in {self.summary.best['checkpoint']}")

    def _checkpoint_if_due(self, phase, step, global_step):
        """A checkpoint every ``checkpoint_interval`` steps, at the phase's end and when the
        run completes (its last step, or the target reached)."""
        complete = (phase.is_last and step == phase.steps) or self.summary.target is not None
        if step % self.config.checkpoint_interval and step != phase.steps and not complete:
            return
        non_finite = non_finite_variables(self.model.weights + self.model.optimizer.variables)
        if non_finite:
            self._diverge(
                phase,
                step,
                global_step,
                f"{len(non_finite)} variable(s) not finite, such as {non_finite[0]} (no "
                "checkpoint written)",
            )
            return
        state = {
            "phase": phase.index,
            "step": step,
            "global_step": global_step,
            "complete": complete,
            # Kept in the state too, so a run killed between its last checkpoint and its
            # summary can still write the summary without training again.
            **self.summary.state(),
            **self.guard.state(),
            "input_offset": self.input_offset,
        }
        # Only the writer keeps a file: on JAX it saves without starting a collective; under
        # a multi-worker strategy, where saving is one, the others save a throwaway copy.
        with self.devices.local_scope():
            self.checkpoint = self.run_directory.save_checkpoint(self.model, state)
        self.checkpoint_state = dict(state, checkpoint=self.checkpoint)
        self.log(f"checkpoint {self.checkpoint}")


class _WindowEnds(keras.callbacks.Callback):
    """Times each logging window (one Keras epoch) of a phase and hands its end to the
    `Trainer`; stops training when the trainer says the run is done."""

    def __init__(self, trainer, phase, start_step):
        super().__init__()
        self.trainer = trainer
        self.phase = phase
        self.step = start_step
        self._window_start = None
        self._window_first_step = start_step

    def _optimizer_step(self):
        return int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def _non_finite_skips(self):
        """Our optimizers' count of the phase's steps skipped for a non-finite gradient."""
        optimizer = self.model.optimizer
        skipped = getattr(getattr(optimizer, "inner_optimizer", optimizer), "skipped_steps", None)
        return int(host_value(skipped)) if skipped is not None else 0

    def on_epoch_begin(self, epoch, logs=None):
        self._window_start = time.perf_counter()
        self._window_first_step = self._optimizer_step()
        self._window_first_skips = self._non_finite_skips()

    def on_epoch_end(self, epoch, logs=None):
        # A step that applied nothing (our optimizers' skip of a non-finite gradient, or a
        # LossScaleOptimizer's overflow) read its batches but left the step count behind. The
        # count is brought level with the input here, so that the step keeps naming the input
        # position: windows, checkpoints, the schedule and a resumed run's input stay aligned
        # (as PyTorch and optax training loops count a skipped step as taken).
        planned = self.params["steps"] // self.phase.gradient_accumulation_steps
        skipped = planned - (self._optimizer_step() - self._window_first_step)
        if skipped > 0:
            self.model.optimizer.iterations.assign_add(skipped)
        self.step = self._optimizer_step()
        if self.trainer.end_window(
            self.phase,
            self.step,
            planned - max(skipped, 0),
            time.perf_counter() - self._window_start,
            logs,
            non_finite=self._non_finite_skips() - self._window_first_skips,
        ):
            self.model.stop_training = True


def make_phase_dataset(devices, recipe, phase, start_step=0):
    """The distributed dataset of one phase (a `plan.PhasePlan`) on ``devices``
    (`devices.TensorFlowDevices` or `devices.JaxDevices`), positioned at optimizer step
    ``start_step``: each input pipeline starts at the batch after the ``start_step`` steps'
    share of its batches, which the recipe locates without reading the batches before it
    (`keras_largebatch.input_order`), so a resumed run reads what an uninterrupted one would,
    and starts as fast at step 100,000 as at step 10.
    """

    def dataset_fn(input_context):
        batch_size = input_context.get_per_replica_batch_size(phase.micro_batch_size)
        # A pipeline serves num_replicas_in_sync / num_input_pipelines replicas a batch each
        # per micro-batch: global / (pipelines x batch) of its batches per optimizer step.
        batches_per_step = phase.global_batch_size // (
            input_context.num_input_pipelines * batch_size
        )
        return recipe.dataset(phase, batch_size, input_context, start_step * batches_per_step)

    return devices.distribute(dataset_fn)


def _describe_devices(description):
    """The devices of a `devices.describe` for the first progress line: backend, strategy,
    replicas and devices (and their mesh under model_parallel), and in a run of several JAX
    processes which one this is."""
    text = (
        f"{description['backend']} backend, strategy {description['kind']} with "
        f"{description['num_replicas']} replica(s) on {description['devices']}"
    )
    if description.get("mesh_shape"):
        text += ", a mesh of " + " x ".join(
            f"{size} ({axis})" for axis, size in description["mesh_shape"].items()
        )
    if description.get("process_index") is None or description["num_workers"] == 1:
        return text
    return (
        f"{text} in {description['num_workers']} processes; this is process "
        f"{description['process_index']}, on {description['local_devices']}, reading "
        f"{description['input_pipelines'] // description['num_workers']} of the "
        f"{description['input_pipelines']} input pipelines"
    )


def _fit_segments(steps, log_interval, start_step):
    """``(first step, end step, window)`` of each `fit` that trains a phase of ``steps`` steps
    from ``start_step``. Keras cannot end an epoch early without running past it, so when
    ``log_interval`` does not divide the phase's steps, the last, shorter window is a second
    `fit` on a dataset positioned after the full windows."""
    full_windows_end = steps - steps % log_interval
    segments = []
    if start_step < full_windows_end:
        segments.append((start_step, full_windows_end, log_interval))
    if full_windows_end < steps:
        segments.append((full_windows_end, steps, steps - full_windows_end))
    return segments
