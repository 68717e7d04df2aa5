"""Where a pretraining run's weights start (continued pretraining): a keras-hub BERT preset
(``model.preset``) or a checkpoint of an earlier pretraining run (``model.init_checkpoint``).

Either fixes the architecture, which an explicit ``model.size`` or dimension may not contradict,
and the vocabulary, which the records must have been made with; both are checked before
training (`check_architecture`, `check_vocabulary`). Only a run that starts from step 0 loads
these weights: a resumed run restores its own checkpoint.
"""

import json
import os

from keras_largebatch.bert.data import manifest
from keras_largebatch.bert.data import vocab as vocab_lib
from keras_largebatch.bert.export import run as export_run
from keras_largebatch.bert.pretraining import model as model_lib

# The model config's fields that a start fixes; a BertBackbone config names them the same.
ARCHITECTURE_FIELDS = (
    "vocabulary_size",
    "num_layers",
    "hidden_dim",
    "num_heads",
    "intermediate_dim",
    "max_sequence_length",
)
_DIMENSIONS = ARCHITECTURE_FIELDS[1:5]


class PresetStart:
    """A keras-hub BERT preset directory: its backbone and, where it has one, masked-LM head."""

    def __init__(self, preset):
        self.preset = preset
        self.name = f"model.preset={preset!r}"

    def architecture(self):
        """The `keras_hub.models.BertBackbone` config of the preset's ``config.json``."""
        config_file = os.path.join(str(self.preset), "config.json")
        if not os.path.isfile(config_file):
            raise ValueError(
                f"{self.name} is not a keras-hub preset directory (no config.json in it)"
            )
        with open(config_file, encoding="utf-8") as stream:
            recorded = json.load(stream)
        if recorded.get("class_name") != "BertBackbone":
            raise ValueError(
                f"{self.name} holds a {recorded.get('class_name')!r}, not a BertBackbone"
            )
        return recorded["config"]

    def vocabulary_file(self):
        return vocab_lib.preset_tokenization(self.preset)["vocab_file"]

    def load(self, model):
        model_lib.load_preset_weights(model, self.preset)


class CheckpointStart:
    """A checkpoint of a `keras_largebatch.bert.pretraining` run: every weight of its model,
    both heads included. ``path`` is the run directory (its newest readable checkpoint) or one
    of its ``checkpoints/*.weights.h5``."""

    def __init__(self, path, log=None):
        self.name = f"model.init_checkpoint={path!r}"
        if str(path).endswith(".weights.h5"):
            if os.path.basename(os.path.dirname(str(path))) != "checkpoints":
                raise ValueError(
                    f"{self.name} must be a pretraining run directory or a .weights.h5 in its "
                    "checkpoints/ directory (the run's config gives the architecture)"
                )
            if not os.path.isfile(path):
                raise ValueError(f"{self.name} does not exist")
            self.config = export_run.read_pretraining_config(os.path.dirname(os.path.dirname(path)))
            self.checkpoint = str(path)
        else:
            self.config = export_run.read_pretraining_config(path)
            self.checkpoint, _ = export_run.choose_checkpoint(
                self.config, None, log or (lambda line: None)
            )

    def architecture(self):
        model_config = self.config.model
        start = starting_point(model_config)
        if start is not None:
            return start.architecture()
        if model_config.vocabulary_size is not None:
            vocabulary_size = model_config.vocabulary_size
        else:
            vocabulary_size = len(vocab_lib.load_vocabulary(self.vocabulary_file()))
        return {
            "vocabulary_size": vocabulary_size,
            **dict(zip(_DIMENSIONS, model_config.dimensions())),
            "max_sequence_length": model_config.max_sequence_length
            or max(phase.seq_length for phase in self.config.phases),
        }

    def vocabulary_file(self):
        return export_run.vocabulary_file(self.config)

    def load(self, model):
        # The checkpoint's optimizer state is not loaded: the run starts a fresh optimizer.
        model.load_weights(self.checkpoint)


def starting_point(model_config, log=None):
    """The `PresetStart` or `CheckpointStart` that ``model_config`` names, or None."""
    if model_config.preset is not None:
        return PresetStart(model_config.preset)
    if model_config.init_checkpoint is not None:
        return CheckpointStart(model_config.init_checkpoint, log)
    return None


def model_dimensions(model_config):
    """``(num_layers, hidden_dim, num_heads, intermediate_dim)`` of the model: its start's,
    else the named size's after the overrides."""
    start = starting_point(model_config)
    if start is None:
        return model_config.dimensions()
    architecture = start.architecture()
    return tuple(architecture[name] for name in _DIMENSIONS)


def check_architecture(config, start):
    """Raises ValueError, naming both values, where ``config.model`` sets a size or a dimension
    other than the start's, or a phase is longer than its position embeddings."""
    model_config = config.model
    architecture = start.architecture()
    if model_config.size is not None:
        size = dict(zip(_DIMENSIONS, model_config.dimensions()))
        if any(architecture[name] != value for name, value in size.items()):
            raise ValueError(
                f"model.size={model_config.size!r} ({size}) conflicts with {start.name}, whose "
                f"architecture is { {name: architecture[name] for name in size} }; the "
                "architecture comes from it: drop model.size"
            )
    for name in ARCHITECTURE_FIELDS:
        value = getattr(model_config, name)
        if value is not None and value != architecture[name]:
            raise ValueError(
                f"model.{name}={value} conflicts with {start.name}, whose {name} is "
                f"{architecture[name]}; the architecture comes from it: drop model.{name}"
            )
    for index, phase in enumerate(config.phases):
        if phase.seq_length > architecture["max_sequence_length"]:
            raise ValueError(
                f"phases.{index}.seq_length={phase.seq_length} is longer than {start.name}'s "
                f"{architecture['max_sequence_length']} position embeddings"
            )


def check_vocabulary(config, start, record_files):
    """The run's vocabulary file, the start's, after checking that every phase's records were
    made with it (their vocabulary: ``data.vocab_file``, else the one the manifest beside the
    records names).

    Raises:
        ValueError: a vocabulary differs (naming both sizes and the first differing token), or
            nothing tells which vocabulary some records were made with.
    """
    start_file = start.vocabulary_file()
    start_vocabulary = vocab_lib.load_vocabulary(start_file)
    for index, files in enumerate(record_files):
        data_file = config.data.vocab_file or manifest.vocabulary_of(files[0])
        if data_file is None:
            raise ValueError(
                f"phases.{index}.input_files have no manifest.json naming their vocabulary, and "
                f"data.vocab_file is null: give data.vocab_file, the vocabulary the records were "
                f"made with, so that it can be checked against {start.name}'s"
            )
        data_vocabulary = vocab_lib.load_vocabulary(data_file)
        difference = vocab_lib.first_difference(data_vocabulary, start_vocabulary)
        if difference is not None:
            token_id, token, start_token = difference
            raise ValueError(
                f"phases.{index}'s records use vocabulary {data_file!r} of "
                f"{len(data_vocabulary)} tokens, and {start.name} has {len(start_vocabulary)} "
                f"tokens ({start_file}); they first differ at id {token_id}: {token!r} where it "
                f"has {start_token!r}. Make the records with its vocabulary (keras-largebatch-"
                "create-data --preset PRESET_DIR, or --vocab-file)"
            )
    return start_file
