"""The run directory: a run's config, checkpoints with their state, TensorBoard logs, summary.

    OUTPUT_DIR/run_config.json      the run's config (what a rerun must match to resume)
    OUTPUT_DIR/checkpoints/         ckpt-<global step>.weights.h5 (weights and optimizer
                                    state) and state.json, naming the newest and the kept ones;
                                    for a recipe with a best_metric, best-<global step>.weights.h5
                                    and best.json, the best evaluation's weights and metrics
    OUTPUT_DIR/logs/                TensorBoard scalars at the global optimizer step
    OUTPUT_DIR/summary.json         the run's summary, written when it completes or diverges
    OUTPUT_DIR/rollbacks.json       the divergence guard's rollbacks, each when it happens

Every file is replaced atomically (`keras_largebatch._files`: written under a temporary name of
its own, then renamed), so a process killed at any point leaves the previous state and
checkpoint intact; the next run that writes here removes what such a process left half-written.
Paths go through `tf.io.gfile`, so ``gs://`` directories work like local ones.
"""

import json
import os
import shutil
import tempfile

import h5py
import tensorflow as tf

from keras_largebatch import _files
from keras_largebatch._tensorboard import SummaryWriter
from keras_largebatch.training.config import config_differences

RUN_CONFIG_FILENAME = "run_config.json"
SUMMARY_FILENAME = "summary.json"
ROLLBACKS_FILENAME = "rollbacks.json"
STATE_FILENAME = "state.json"
CHECKPOINT_PREFIX = "ckpt-"
BEST_FILENAME = "best.json"
BEST_PREFIX = "best-"
CHECKPOINT_SUFFIX = ".weights.h5"
UNREADABLE_SUFFIX = ".unreadable"

# The config keys that say where a run's files are, not which run it is.
LOCATION_KEYS = ("output_dir", "checkpoint_dir")


class RunDirectory:
    """The files of one run under ``config.output_dir`` (a `training.config.RunConfig`).

    Args:
        config: the run's config; not changed.
        recorded_config: the config as ``run_config.json`` records it (what a rerun must match
            to resume), as plain data: the trainer's plan, with every phase's accumulation
            resolved (`training.plan.RunPlan.record`). None: ``config.to_dict()``.
        writes: False on every process of a run but one (the chief of a multi-worker run,
            process 0 on JAX): they read the state but write no file.
        check_same: ``check_same(description, value)``, called by every process of the run,
            raises on each unless all passed an equal value (``devices.check_same``); None:
            the run's one process.
        saves_are_collective: True where saving weights is a collective that every process
            must join (``devices.saves_are_collective``: the workers of a tf.distribute
            multi-worker run, whose variables are mirrored over all of them): a process that
            writes no file then saves a throwaway copy, deleted at once, alongside the
            writer's save.
    """

    def __init__(
        self,
        config,
        recorded_config=None,
        writes=True,
        check_same=None,
        saves_are_collective=False,
    ):
        self.config = config
        self.recorded_config = recorded_config if recorded_config is not None else config.to_dict()
        self.output_dir = config.output_dir
        self.checkpoint_dir = config.checkpoint_dir or os.path.join(
            config.output_dir, "checkpoints"
        )
        self.log_dir = os.path.join(config.output_dir, "logs")
        self.config_path = os.path.join(config.output_dir, RUN_CONFIG_FILENAME)
        self.summary_path = os.path.join(config.output_dir, SUMMARY_FILENAME)
        self.rollbacks_path = os.path.join(config.output_dir, ROLLBACKS_FILENAME)
        self.state_path = os.path.join(self.checkpoint_dir, STATE_FILENAME)
        self.best_path = os.path.join(self.checkpoint_dir, BEST_FILENAME)
        self.writes = writes
        self.check_same = check_same or (lambda description, value: None)
        self.saves_are_collective = saves_are_collective
        self._writer = None

    def _run_config(self):
        return {key: value for key, value in self.recorded_config.items() if key != "overwrite"}

    def claim(self):
        """Takes the directory for this run; returns the checkpoint state to resume or None.

        Raises ValueError, before anything is written, if the checkpoints there belong to a
        run with another config, or the directory holds files of something other than a run,
        unless ``overwrite`` (which deletes the earlier run's checkpoints, logs and summary).
        A directory whose run wrote no checkpoint yet is taken over with the new config.

        Every process of a run calls it. Each decides from the files as they are before any
        process changes them: the decisions meet in ``check_same`` (a collective, so a
        barrier), which raises on every process unless all decided alike (they read different
        directories), and only then does the writer change the files.
        """
        try:
            state, refusal = self._resumable_state(), None
        except ValueError as error:
            state, refusal = None, str(error)
        self.check_same(
            f"what output_dir {self.output_dir!r} holds (every process must see the same "
            "files: a shared file system or gs://)",
            {"state": state, "refused": refusal, "summary": self.has_summary()},
        )
        if refusal is not None:
            raise ValueError(refusal)
        if self.writes:
            if self.config.overwrite:
                self._remove_run_files()
            elif state is None:
                # A best kept by a run that wrote no checkpoint belongs to no run that resumes.
                self._remove_best_files()
            self._remove_partial_saves()
            tf.io.gfile.makedirs(self.output_dir)
            _files.write_text(self.config_path, json.dumps(self._run_config(), indent=2))
        return state

    def _resumable_state(self):
        """The checkpoint state `claim` resumes (None: none, or ``overwrite``); reads only."""
        if self.config.overwrite:
            return None
        expected = self._run_config()
        state = self.state()
        # Where the run lives is not what it is: a moved or copied run directory resumes.
        differences = state is not None and [
            key
            for key in config_differences(
                self._with_new_sections(state["config"], expected), expected
            )
            if key not in LOCATION_KEYS
        ]
        if differences:
            raise ValueError(
                f"checkpoint_dir {self.checkpoint_dir!r} holds a run with a different config "
                f"(differs at {sorted(differences)}); use "
                "another output_dir, run with the same config to resume it, or pass "
                "overwrite=true to start over"
            )
        if (
            not tf.io.gfile.exists(self.config_path)
            and tf.io.gfile.isdir(self.output_dir)
            and tf.io.gfile.listdir(self.output_dir)
        ):
            raise ValueError(
                f"output_dir {self.output_dir!r} is not empty and holds no "
                f"{RUN_CONFIG_FILENAME}, so it is not a training run's directory; choose "
                "an empty or new output_dir, or pass overwrite=true to use it anyway (files "
                "there that the run does not write are left alone)"
            )
        return state

    def _with_new_sections(self, recorded, expected):
        """``recorded`` (a run's recorded config) with the defaults of the top-level fields of
        ``expected`` added since it was recorded (such as ``divergence``): that run ran as
        they say."""
        defaults = type(self.config)().to_dict()
        added = {key: defaults[key] for key in expected if key not in recorded and key in defaults}
        return {**added, **recorded}

    def _remove_run_files(self):
        """Deletes what earlier runs wrote here (checkpoints, state, logs, summary), only that."""
        for name in self._checkpoint_names(include_unreadable=True) + [STATE_FILENAME]:
            path = os.path.join(self.checkpoint_dir, name)
            if tf.io.gfile.exists(path):
                tf.io.gfile.remove(path)
        self._remove_best_files()
        if tf.io.gfile.isdir(self.log_dir):
            tf.io.gfile.rmtree(self.log_dir)
        for path in (self.summary_path, self.config_path, self.rollbacks_path):
            if tf.io.gfile.exists(path):
                tf.io.gfile.remove(path)

    def _remove_partial_saves(self):
        """Deletes the weights files that a process killed while saving left half-written."""
        if not tf.io.gfile.isdir(self.checkpoint_dir):
            return
        for name in tf.io.gfile.listdir(self.checkpoint_dir):
            target = _files.target_of(name)
            if target and target.startswith((CHECKPOINT_PREFIX, BEST_PREFIX)):
                _files.remove(os.path.join(self.checkpoint_dir, name))

    def _checkpoint_names(self, include_unreadable=False):
        if not tf.io.gfile.isdir(self.checkpoint_dir):
            return []
        names = []
        for name in tf.io.gfile.listdir(self.checkpoint_dir):
            stem = name[: -len(UNREADABLE_SUFFIX)] if name.endswith(UNREADABLE_SUFFIX) else name
            if stem is not name and not include_unreadable:
                continue
            if (
                stem.startswith(CHECKPOINT_PREFIX)
                and stem.endswith(CHECKPOINT_SUFFIX)
                and stem[len(CHECKPOINT_PREFIX) : -len(CHECKPOINT_SUFFIX)].isdigit()
            ):
                names.append(name)
        return sorted(names)

    def state(self):
        """The newest checkpoint's state (phase, step, global_step, checkpoint path...), or None.

        Its checkpoint paths are this directory's: a run directory moved or copied after
        training (from a TPU VM's bucket to a laptop, say) resumes and exports from where it is
        now, not from where its state file was written.
        """
        if not tf.io.gfile.exists(self.state_path):
            return None
        with tf.io.gfile.GFile(self.state_path) as stream:
            state = json.load(stream)
        state = self._here(state)
        if "kept" in state:
            state["kept"] = [self._here(entry) for entry in state["kept"]]
        return state

    def kept_checkpoints(self):
        """The kept checkpoints' entries (``global_step``, ``checkpoint`` path...), oldest
        first, at this directory's paths (as `state` gives them); [] before the first."""
        return _kept(self.state())

    def _here(self, record):
        """``record`` with its ``checkpoint`` file looked up in this run's checkpoint_dir
        (every checkpoint, best weights included, is written there)."""
        name = os.path.basename(record["checkpoint"])
        return dict(record, checkpoint=os.path.join(self.checkpoint_dir, name))

    def readable_state(self, warn):
        """The state of the newest checkpoint that can be read, or None if none was written.

        A newer checkpoint file that cannot be read (truncated or corrupted by the storage) is
        reported through ``warn`` and renamed to ``NAME.unreadable``, kept for inspection, so
        the steps trained again cannot overwrite it. Raises OSError naming every checkpoint
        tried when none is readable, and then renames nothing.
        """
        state = self.state()
        if state is None:
            return None
        unreadable = []
        for entry in sorted(_kept(state), key=lambda entry: entry["global_step"], reverse=True):
            problem = checkpoint_problem(entry["checkpoint"])
            if problem is None:
                for path, problem in unreadable:
                    self._set_aside(path, problem, warn)
                return dict(state, **entry)
            unreadable.append((entry["checkpoint"], problem))
        raise OSError(
            f"no checkpoint of the run in {self.checkpoint_dir} can be read: "
            + "; ".join(f"{path} ({problem})" for path, problem in unreadable)
            + ". Nothing was changed; repair or restore one of them, or pass overwrite=true to "
            "start over"
        )

    def _set_aside(self, path, problem, warn):
        kept = path + UNREADABLE_SUFFIX
        if self.writes and tf.io.gfile.exists(path):
            tf.io.gfile.rename(path, kept, overwrite=True)
            warn(
                f"checkpoint {path} cannot be read ({problem}); kept as {kept}; resuming from "
                "the newest older checkpoint"
            )
        else:
            warn(
                f"checkpoint {path} cannot be read ({problem}); resuming from the newest "
                "older checkpoint"
            )

    def save_checkpoint(self, model, state):
        """Writes weights and optimizer state, then the state file naming them, atomically.

        ``state`` holds at least ``global_step``, ``phase`` and ``step``; the trainer adds what
        its resume needs. Keeps the newest ``keep_checkpoints`` checkpoints. Returns the path.
        """
        name = f"{CHECKPOINT_PREFIX}{state['global_step']:09d}{CHECKPOINT_SUFFIX}"
        path = os.path.join(self.checkpoint_dir, name)
        if not self.writes:
            self._join_save(model)
            return path
        tf.io.gfile.makedirs(self.checkpoint_dir)
        with _files.replacing(path, suffix=CHECKPOINT_SUFFIX) as temporary:
            model.save_weights(temporary)
        entry = dict(state, checkpoint=path)
        previous = self.state()
        # Entries at or after this step are of checkpoints a resume from an older one replaces.
        kept = [
            old
            for old in _kept(previous)
            if old["checkpoint"] != path and old["global_step"] < state["global_step"]
        ]
        kept = (kept + [_entry(entry)])[-self.config.keep_checkpoints :]
        _files.write_text(
            self.state_path, json.dumps(dict(entry, kept=kept, config=self._run_config()), indent=2)
        )
        keep = {os.path.basename(old["checkpoint"]) for old in kept}
        for old in self._checkpoint_names():
            if old not in keep:
                tf.io.gfile.remove(os.path.join(self.checkpoint_dir, old))
        return path

    def best(self):
        """The record of the best evaluation kept (what `save_best` returned), or None."""
        if not tf.io.gfile.exists(self.best_path):
            return None
        with tf.io.gfile.GFile(self.best_path) as stream:
            return self._here(json.load(stream))

    def save_best(self, model, evaluation):
        """Keeps the model's weights (and optimizer state) as the run's best evaluation:
        writes ``best-<global step>.weights.h5``, then ``best.json`` naming it, each atomically,
        then deletes the best weights it replaces, so a process killed at any point leaves a
        record naming its own weights. Returns the record: ``evaluation`` (its ``global_step``
        and metrics) and ``checkpoint``, the weights file."""
        name = f"{BEST_PREFIX}{evaluation['global_step']:09d}{CHECKPOINT_SUFFIX}"
        record = dict(evaluation, checkpoint=os.path.join(self.checkpoint_dir, name))
        if not self.writes:
            self._join_save(model)
            return record
        tf.io.gfile.makedirs(self.checkpoint_dir)
        with _files.replacing(record["checkpoint"], suffix=CHECKPOINT_SUFFIX) as temporary:
            model.save_weights(temporary)
        _files.write_text(self.best_path, json.dumps(record, indent=2))
        for old in self._best_weights_names():
            if old != name:
                tf.io.gfile.remove(os.path.join(self.checkpoint_dir, old))
        return record

    def _join_save(self, model):
        """On a process that writes no file, where saving is a collective: saves ``model``'s
        weights into a temporary directory of its own and deletes it, so that this process
        takes part in the collectives of the writer's save, which would wait for it forever
        (TensorFlow's multi-worker guide has every worker save, the others to temporary
        paths)."""
        if not self.saves_are_collective:
            return
        directory = tempfile.mkdtemp(prefix="keras-largebatch-throwaway-")
        try:
            model.save_weights(os.path.join(directory, f"throwaway{CHECKPOINT_SUFFIX}"))
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def _best_weights_names(self):
        if not tf.io.gfile.isdir(self.checkpoint_dir):
            return []
        return [
            name
            for name in tf.io.gfile.listdir(self.checkpoint_dir)
            if name.startswith(BEST_PREFIX) and name.endswith(CHECKPOINT_SUFFIX)
        ]

    def _remove_best_files(self):
        for name in self._best_weights_names() + [BEST_FILENAME]:
            path = os.path.join(self.checkpoint_dir, name)
            if tf.io.gfile.exists(path):
                tf.io.gfile.remove(path)

    def write_scalars(self, global_step, metrics):
        """TensorBoard scalars, ``{tag: number}``, at the global step in ``log_dir``."""
        if not self.writes:
            return
        if self._writer is None:
            self._writer = SummaryWriter(self.log_dir)
        self._writer.write_scalars(global_step, metrics)

    def has_summary(self):
        return tf.io.gfile.exists(self.summary_path)

    def read_summary(self):
        with tf.io.gfile.GFile(self.summary_path) as stream:
            return json.load(stream)

    def write_rollbacks(self, rollbacks):
        """Records the run's rollbacks so far (a list of dicts) in ``rollbacks.json``."""
        if self.writes:
            _files.write_text(self.rollbacks_path, json.dumps(rollbacks, indent=2))

    def write_summary(self, summary):
        if self.writes:
            _files.write_text(self.summary_path, json.dumps(summary, indent=2))


def checkpoint_problem(path):
    """Why the Keras weights file at ``path`` cannot be read, or None if every array reads."""
    if not tf.io.gfile.exists(path):
        return "missing"
    try:
        with tf.io.gfile.GFile(path, "rb") as stream, h5py.File(stream, "r") as file:
            file.visititems(lambda name, item: item[()] if isinstance(item, h5py.Dataset) else None)
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        return f"{type(error).__name__}: {error}"
    return None


def _kept(state):
    """The kept checkpoints' entries of a state file, oldest first."""
    if state is None:
        return []
    # State files written before the kept list existed name only the newest checkpoint.
    return state.get("kept") or [_entry(state)]


def _entry(state):
    """What the state file keeps of each checkpoint (everything but the kept list and config)."""
    return {key: value for key, value in state.items() if key not in ("kept", "config")}
