"""Reading a finished pretraining run for export: its config, its vocabulary and the checkpoint
to export, without writing anything in the run directory."""

import dataclasses
import json
import os

from keras_largebatch import _checks


def read_pretraining_config(run_dir):
    """The `config.PretrainConfig` that ``run_dir``'s ``run_config.json`` records, with
    ``output_dir`` set to ``run_dir`` (where the run is now, which may not be where it was
    trained); not validated, since its strategy may name devices of another machine or backend.

    Raises:
        ValueError: ``run_dir`` is not a directory, holds no ``run_config.json``, or holds one
            that is not a BERT pretraining run's config (an image run's, for instance).
    """
    import tensorflow as tf

    from keras_largebatch.training.run_directory import RUN_CONFIG_FILENAME

    if not tf.io.gfile.isdir(run_dir):
        raise ValueError(f"run_dir {run_dir!r} is not a directory")
    config_path = os.path.join(run_dir, RUN_CONFIG_FILENAME)
    if not tf.io.gfile.exists(config_path):
        raise ValueError(
            f"run_dir {run_dir!r} holds no {RUN_CONFIG_FILENAME}, so it is not a training run's "
            "directory; give the output_dir of a keras_largebatch.bert.pretraining run"
        )
    with tf.io.gfile.GFile(config_path) as stream:
        try:
            recorded = json.load(stream)
        except json.JSONDecodeError as error:
            raise ValueError(f"{config_path} is not JSON: {error}") from error
    # Imported here: the config module needs PyYAML, which `main` checks for (with the rest of
    # the bert extra) after parsing, so that --help works without it.
    from keras_largebatch.bert.pretraining import config as config_lib

    try:
        config = config_lib.config_from_dict(recorded)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"run_dir {run_dir!r} is not a BERT pretraining run: its {RUN_CONFIG_FILENAME} is "
            f"not a keras_largebatch.bert.pretraining config ({error})"
        ) from error
    return dataclasses.replace(config, output_dir=run_dir)


def vocabulary_file(config):
    """The vocabulary the run tokenized its text with: ``data.vocab_file``, else that of the
    ``model.preset`` or ``model.init_checkpoint`` it started from, else the one built
    for the default corpus's records of its first phase that read them (under
    ``OUTPUT_DIR/data``, where `keras_largebatch.bert.pretraining.recipe.prepare_data` creates
    them).

    Raises:
        ValueError: the file does not exist, or the run has none (``data.vocab_file`` is null
            and every phase read records from ``input_files``).
    """
    import tensorflow as tf

    from keras_largebatch.bert.data.pretraining_data import VOCABULARY_FILENAME

    if config.data.vocab_file is not None:
        if not tf.io.gfile.exists(config.data.vocab_file):
            raise ValueError(
                f"the run's data.vocab_file {config.data.vocab_file!r} does not exist (a "
                "relative path is read from the current directory)"
            )
        return config.data.vocab_file
    from keras_largebatch.bert.pretraining import initial_weights

    start = initial_weights.starting_point(config.model)
    if start is not None:
        # Pretraining checked that the records use the vocabulary of the weights it started from.
        return start.vocabulary_file()
    for phase in config.phases:
        if phase.input_files is None:
            path = os.path.join(
                phase.default_data_dir(config.output_dir, config.data.dynamic_masking),
                VOCABULARY_FILENAME,
            )
            if not tf.io.gfile.exists(path):
                raise ValueError(
                    f"the run's default-corpus vocabulary {path!r} does not exist; the "
                    "tokenizer needs the vocabulary the run was trained with"
                )
            return path
    raise ValueError(
        f"the run in {config.output_dir!r} has no vocabulary: data.vocab_file is null and every "
        "phase read input_files, so nothing records which token each id is; a preset's "
        "tokenizer needs the vocabulary the records were made with"
    )


def choose_checkpoint(config, step, log):
    """``(path, global step)`` of the checkpoint to export: the one the run keeps at global
    step ``step``, or with ``step`` None the newest that can be read
    (`keras_largebatch.training.run_directory.RunDirectory.readable_state`; a newer unreadable
    one is reported through ``log`` and left as it is). Checkpoints are read where the run
    directory holds them now, as resuming the run reads them.

    Raises:
        ValueError: the run wrote no checkpoint, or keeps none at ``step`` (the message lists
            the steps it keeps).
        OSError: the chosen checkpoint cannot be read, or none can.
    """
    from keras_largebatch.training import run_directory as run_directory_lib

    run_directory = run_directory_lib.RunDirectory(config, writes=False)
    state = run_directory.state()
    if state is None:
        raise ValueError(
            f"the run in {config.output_dir!r} has no checkpoint: "
            f"{run_directory.state_path} does not exist"
        )
    if step is None:
        entry = run_directory.readable_state(log)
        return entry["checkpoint"], entry["global_step"]
    kept = {entry["global_step"]: entry["checkpoint"] for entry in run_directory.kept_checkpoints()}
    if step not in kept:
        raise ValueError(
            f"step {step} is not a checkpoint of the run in {config.output_dir!r}; its "
            f"checkpoints are at global steps {sorted(kept)}"
        )
    problem = run_directory_lib.checkpoint_problem(kept[step])
    if problem is not None:
        raise OSError(f"the checkpoint of step {step}, {kept[step]}, cannot be read: {problem}")
    return kept[step], step


def path_argument(name, path):
    """``path`` (a string or path-like) as a string; TypeError naming the argument ``name``
    otherwise."""
    if not isinstance(path, (str, os.PathLike)):
        raise _checks.type_error(name, path, "a path")
    return os.fspath(path)
