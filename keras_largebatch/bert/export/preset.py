"""Writing a keras-hub preset from a pretraining run: the backbone of one checkpoint, a tokenizer
that tokenizes as pretraining did, and a text-classifier preprocessor (see
`keras_largebatch.bert.export`)."""

import os

from keras_largebatch import _checks, _files
from keras_largebatch._logging import ProgressLog
from keras_largebatch.bert.export.run import (
    choose_checkpoint,
    path_argument,
    read_pretraining_config,
    vocabulary_file,
)

# The heavy modules (TensorFlow, keras-hub and the modules that import them) are imported in
# the functions that use them, so that `main` quiets TensorFlow's start-up lines before they
# load, and --help needs none of them.

README_FILENAME = "README.md"
# Packing a text into [CLS] text [SEP] needs room for one token of text.
MIN_SEQUENCE_LENGTH = 3


def export_preset(run_dir, preset_dir, step=None, sequence_length=None, log=None):
    """Writes one checkpoint of a BERT pretraining run as a keras-hub preset.

    The preset holds the run's `keras_hub.models.BertBackbone` with the checkpoint's weights,
    a `keras_hub.models.BertTokenizer` over the run's vocabulary with pretraining's lowercasing
    and accent stripping, and a `keras_hub.models.BertTextClassifierPreprocessor` at
    ``sequence_length``. It is written atomically: built in a temporary sibling directory of
    ``preset_dir``, then renamed into place; a failure removes the temporary directory.

    Mixed precision: ``config.json`` records the run's dtype policy (``mixed_bfloat16`` or
    ``mixed_float16``), and the returned ``dtype`` names it. The weights are float32 either way
    (Keras's mixed policies keep float32 variables and compute in the low precision), so
    exporting a float32 policy instead would change no weight, only the record of how the model
    was trained; keeping it tells the preset's users. It does not choose how they compute:
    keras-hub's ``from_preset`` (0.32) builds the model at Keras's global dtype policy (float32
    unless set) when given no ``dtype``, whatever the preset records. The preset's ``README.md``
    says so, and how to load in float32 (``dtype="float32"``) or in the run's policy.

    Args:
        run_dir: the run directory (``output_dir``) of a `keras_largebatch.bert.pretraining` run;
            local or ``gs://``. Only read.
        preset_dir: a local directory that does not exist or is empty.
        step: the global step of the checkpoint to export, one the run keeps; None: the newest
            checkpoint that can be read (a newer unreadable one is reported through ``log``).
        sequence_length: the preprocessor's packed length, at least 3 and at most the model's
            position embeddings; None: the run's longest phase ``seq_length``.
        log: a function taking one progress line; default prints to stderr.

    Returns:
        ``{"preset_dir", "run_dir", "step", "sequence_length", "vocabulary_size", "dtype",
        "lowercase", "strip_accents"}``: the paths as given, the checkpoint's global step,
        the preprocessor's length, the tokens of the tokenizer's vocabulary, the backbone's
        dtype policy and the tokenizer's casing and accent settings.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: ``preset_dir`` exists and is not an empty directory (it is left as it
            is), ``run_dir`` is not a BERT pretraining run, the run has no vocabulary file or
            no checkpoint, ``step`` names no checkpoint the run keeps (the message lists those
            it keeps), or ``sequence_length`` is out of range. All are raised before anything
            is written.
        OSError: the checkpoint named by ``step`` cannot be read, or none can when ``step`` is
            None.
    """
    log = log or ProgressLog("export")
    run_dir = path_argument("run_dir", run_dir)
    preset_dir = path_argument("preset_dir", preset_dir)
    _check_new_directory(preset_dir)
    _checks.check_optional_integer("step", step)
    _checks.check_optional_integer("sequence_length", sequence_length, low=MIN_SEQUENCE_LENGTH)
    config = read_pretraining_config(run_dir)
    vocabulary = _load_vocabulary(config)
    checkpoint, global_step = choose_checkpoint(config, step, log)
    pretrainer = _build_pretrainer(config, vocabulary)
    backbone = pretrainer.backbone
    if sequence_length is None:
        sequence_length = max(phase.seq_length for phase in config.phases)
    elif sequence_length > backbone.max_sequence_length:
        raise ValueError(
            f"sequence_length must be in [{MIN_SEQUENCE_LENGTH}, "
            f"{backbone.max_sequence_length}] (the model's position embeddings), got "
            f"{sequence_length}"
        )
    log(f"exporting global step {global_step} of {run_dir} ({checkpoint})")
    pretrainer.load_weights(checkpoint)
    tokenizer = _tokenizer(vocabulary, config)
    exported = {
        "preset_dir": preset_dir,
        "run_dir": run_dir,
        "step": global_step,
        "sequence_length": sequence_length,
        "vocabulary_size": len(vocabulary),
        "dtype": backbone.dtype_policy.name,
        "lowercase": tokenizer.lowercase,
        "strip_accents": tokenizer.strip_accents,
    }
    with _files.new_directory(preset_dir) as directory:
        _save(directory, backbone, tokenizer, exported)
    log(f"wrote {preset_dir}: sequence length {sequence_length}, dtype {exported['dtype']}")
    return exported


def _check_new_directory(preset_dir):
    """Raises ValueError unless ``preset_dir`` is a local path that is free or empty."""
    if "://" in preset_dir:
        raise ValueError(
            f"preset_dir must be a local directory (keras-hub writes presets with local file "
            f"I/O), got {preset_dir!r}"
        )
    if os.path.lexists(preset_dir) and not os.path.isdir(preset_dir):
        raise ValueError(f"preset_dir {preset_dir!r} exists and is not a directory")
    if os.path.isdir(preset_dir) and os.listdir(preset_dir):
        raise ValueError(
            f"preset_dir {preset_dir!r} is not empty; give a new or empty directory (nothing "
            "in it was changed)"
        )


def _load_vocabulary(config):
    """The run's vocabulary, checked against its model's token embedding."""
    from keras_largebatch.bert.data import vocab as vocab_lib

    path = vocabulary_file(config)
    vocabulary = vocab_lib.load_vocabulary(path)
    embedding_rows = config.model.vocabulary_size or len(vocabulary)
    if len(vocabulary) > embedding_rows:
        raise ValueError(
            f"the run's vocabulary {path!r} has {len(vocabulary)} tokens, more than the "
            f"model.vocabulary_size={embedding_rows} rows of its token embedding"
        )
    return vocabulary


def _build_pretrainer(config, vocabulary):
    """The run's `BertPretrainer`, built as pretraining built it; its weights are random until
    a checkpoint (whose paths name the pretrainer's layers) is loaded into it."""
    from keras_largebatch.bert.pretraining import recipe

    return recipe.build_model(config, config.model.vocabulary_size or len(vocabulary))


def _tokenizer(vocabulary, config):
    """A `BertTokenizer` that tokenizes raw text as pretraining did: uncased, or as the
    ``model.preset`` of a continued run does (its records were made with its settings)."""
    import keras_hub

    from keras_largebatch.bert.data import vocab as vocab_lib

    casing = {}
    if config.model.preset is not None:
        casing = vocab_lib.preset_tokenization(config.model.preset)
        del casing["vocab_file"]
    pretraining = vocab_lib.make_tokenizer(vocabulary, **casing)
    return keras_hub.models.BertTokenizer(
        vocabulary=list(vocabulary),
        lowercase=pretraining.lowercase,
        strip_accents=pretraining.strip_accents,
        split=pretraining.split,
        split_on_cjk=pretraining.split_on_cjk,
        suffix_indicator=pretraining.suffix_indicator,
        oov_token=pretraining.oov_token,
    )


def _save(directory, backbone, tokenizer, exported):
    import keras_hub

    backbone.save_to_preset(directory)
    # The preprocessor saves its tokenizer with it (tokenizer.json and the vocabulary asset).
    keras_hub.models.BertTextClassifierPreprocessor(
        tokenizer, sequence_length=exported["sequence_length"]
    ).save_to_preset(directory)
    with open(os.path.join(directory, README_FILENAME), "w", encoding="utf-8") as stream:
        stream.write(_readme(exported, backbone.dtype_policy.variable_dtype))


def _readme(exported, weights_dtype):
    """The preset's model card: where it comes from, its tokenizer and how to load it."""
    dtype = exported["dtype"]
    lines = [
        "# BERT from a keras-largebatch pretraining run",
        "",
        f"The backbone at global step {exported['step']} of the BERT pretraining run in "
        f"`{exported['run_dir']}`, with its tokenizer and a text-classifier preprocessor, "
        "exported by `keras-largebatch-export` as a keras-hub preset.",
        "",
        f"- Tokenizer: WordPiece over {exported['vocabulary_size']} tokens "
        "(`assets/tokenizer/vocabulary.txt`); raw text is "
        + ("lowercased" if exported["lowercase"] else "kept in its case")
        + (" and its accents stripped" if exported["strip_accents"] else "")
        + ", as in pretraining.",
        f"- Preprocessor: sequence length {exported['sequence_length']}.",
        f"- Dtype policy: `{dtype}` (the run's, in `config.json`); the weights are stored in "
        f"{weights_dtype}.",
        "",
        "Load it with keras-hub, PRESET_DIR being this directory:",
        "",
        "```python",
        "import keras_hub",
        "",
        'backbone = keras_hub.models.BertBackbone.from_preset("PRESET_DIR", dtype="float32")',
        "classifier = keras_hub.models.BertTextClassifier.from_preset(",
        '    "PRESET_DIR", num_classes=2, dtype="float32"',
        ")",
        "```",
        "",
        '`dtype="float32"` computes in float32'
        + (
            f'; `dtype="{dtype}"` computes in the mixed precision of pretraining'
            if dtype != "float32"
            else ""
        )
        + ". Without `dtype`, keras-hub's `from_preset` (0.32) builds the model at Keras's "
        "global dtype policy (float32 unless `keras.config.set_dtype_policy` changed it), not "
        "at the one `config.json` records.",
    ]
    return "\n".join(lines) + "\n"
