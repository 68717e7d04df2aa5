"""Text files to BERT pretraining record shards in an output directory.

Every document is turned into sentence-pair instances ``dupe_factor`` times, each time with
different random choices (``instances``, ``masking``); all instances are shuffled and written
round-robin over ``num_output_shards`` files in the record schema (``records``), then a
``manifest.json`` that describes the run. With ``dynamic_masking`` the records hold the unmasked
``input_ids`` and no ``masked_lm_*`` features; ``input_pipeline.make_pretraining_dataset(...,
dynamic_masking=True)`` masks them anew every time it reads them.

Randomness comes from ``seed`` alone (``instance_tasks``): the same arguments write the same
bytes, whatever the number of worker processes.
"""

import dataclasses
import glob as local_glob
import json
import os
import random
import sys

import tensorflow as tf

from keras_largebatch import _files
from keras_largebatch._checks import check_bool, check_integer, check_optional_integer
from keras_largebatch._logging import ProgressLog
from keras_largebatch.bert.data import corpus as corpus_lib
from keras_largebatch.bert.data import instance_tasks, instances, masking
from keras_largebatch.bert.data import vocab as vocab_lib
from keras_largebatch.bert.data.defaults import (
    DEFAULT_CORPUS_DUPE_FACTOR,
    DEFAULT_MAX_PREDICTIONS_PER_SEQ,
    DEFAULT_MAX_SEQ_LENGTH,
    DEFAULT_SEED,
)
from keras_largebatch.bert.data.manifest import MANIFEST_FILENAME

RECORD_FILE_PREFIX = "pretraining"
VOCABULARY_FILENAME = "vocab.txt"
# google-research/bert's default for --dupe_factor.
DEFAULT_DUPE_FACTOR = 10
# Enough files for the input pipeline to read several at once.
DEFAULT_NUM_OUTPUT_SHARDS = 8


@dataclasses.dataclass(frozen=True)
class PretrainingData:
    """What a creation run wrote: pass ``record_files`` to ``make_pretraining_dataset``."""

    record_files: list
    vocab_file: str
    num_examples: int
    manifest_file: str
    config: dict


def create_pretraining_data(
    input_files,
    output_dir,
    vocab_file=None,
    vocabulary_size=vocab_lib.DEFAULT_VOCABULARY_SIZE,
    max_seq_length=DEFAULT_MAX_SEQ_LENGTH,
    max_predictions_per_seq=DEFAULT_MAX_PREDICTIONS_PER_SEQ,
    masked_lm_prob=masking.DEFAULT_MASKED_LM_PROB,
    dupe_factor=DEFAULT_DUPE_FACTOR,
    short_seq_prob=instances.DEFAULT_SHORT_SEQ_PROB,
    num_output_shards=DEFAULT_NUM_OUTPUT_SHARDS,
    seed=DEFAULT_SEED,
    num_workers=None,
    dynamic_masking=False,
    overwrite=False,
    progress=True,
    whole_word_mask=False,
    lowercase=True,
    strip_accents=True,
):
    """Writes BERT pretraining TFRecords for text files (the module docstring has the details).

    Args:
        input_files: text file paths or glob patterns; one sentence per line, a blank line
            between documents.
        output_dir: local directory for the shards ``pretraining-00000-of-00008.tfrecord``
            (index-of-count), ``manifest.json`` and, when a vocabulary is built, ``vocab.txt``.
        vocab_file: a vocabulary (one token per line) to tokenize with. None builds one of at
            most ``vocabulary_size`` tokens from the input and writes it to ``vocab.txt``.
        vocabulary_size: size bound for a built vocabulary.
        max_seq_length: tokens per instance, [CLS] and [SEP]s included.
        max_predictions_per_seq: most masked positions per instance.
        masked_lm_prob: fraction of tokens to mask.
        dupe_factor: passes over the corpus, each with different cuts and masks.
        short_seq_prob: probability of a shorter random target length.
        num_output_shards: record files, written round-robin.
        seed: the only source of randomness; the same seed gives byte-identical files.
        num_workers: processes creating instances; None uses every available CPU when the
            input is large enough to repay their start-up (``choose_num_workers``), else one.
            The output does not depend on it.
        dynamic_masking: write unmasked records without ``masked_lm_*`` features, for the input
            pipeline's per-epoch masking.
        whole_word_mask: mask whole words, a token with its ``##`` continuations, never part
            of one (``masking``); not with ``dynamic_masking``.
        overwrite: replace existing output in ``output_dir``; without it, existing output is an
            error raised before any work.
        progress: print progress lines to stderr.
        lowercase: lowercase text before WordPiece (a preset's tokenizer may not).
        strip_accents: strip accents before WordPiece.

    Returns:
        A ``PretrainingData`` describing the written files.

    All serialized instances are held in memory for the global shuffle, as in
    google-research/bert (about 1 KB each at sequence length 128); for a corpus too large for
    that, run once per part of the input, each into its own ``output_dir``.
    """
    options = instances.InstanceOptions(
        max_seq_length,
        max_predictions_per_seq,
        masked_lm_prob,
        short_seq_prob,
        dynamic_masking,
        whole_word_mask,
    )
    _check_run_arguments(
        vocabulary_size, dupe_factor, num_output_shards, seed, num_workers, overwrite, progress
    )
    input_paths = instances.resolve_input_files(input_files)
    if vocab_file is not None and not os.path.isfile(vocab_file):
        raise FileNotFoundError(f"vocab_file {vocab_file!r} does not exist")
    planned = record_file_names(output_dir, num_output_shards)
    planned.append(os.path.join(output_dir, MANIFEST_FILENAME))
    if vocab_file is None:
        planned.append(os.path.join(output_dir, VOCABULARY_FILENAME))
    _claim_outputs(output_dir, planned, overwrite)
    config = _run_config(
        input_paths, vocab_file, vocabulary_size, options, dupe_factor, num_output_shards, seed
    )
    # Recorded only when not the default, so that manifests written before stay the same.
    if not lowercase:
        config["lowercase"] = False
    if not strip_accents:
        config["strip_accents"] = False
    return _create(
        input_paths,
        output_dir,
        config,
        options,
        num_workers,
        _progress_log(progress),
    )


def create_default_pretraining_data(
    output_dir,
    max_seq_length=DEFAULT_MAX_SEQ_LENGTH,
    max_predictions_per_seq=DEFAULT_MAX_PREDICTIONS_PER_SEQ,
    vocabulary_size=vocab_lib.DEFAULT_VOCABULARY_SIZE,
    masked_lm_prob=masking.DEFAULT_MASKED_LM_PROB,
    dupe_factor=DEFAULT_CORPUS_DUPE_FACTOR,
    short_seq_prob=instances.DEFAULT_SHORT_SEQ_PROB,
    num_output_shards=DEFAULT_NUM_OUTPUT_SHARDS,
    seed=DEFAULT_SEED,
    num_workers=None,
    dynamic_masking=False,
    overwrite=False,
    progress=True,
    whole_word_mask=False,
):
    """Writes the embedded default corpus, its vocabulary and its TFRecords to ``output_dir``.

    For the default pretraining job: needs no download. If ``output_dir`` already holds the
    output of a call with the same arguments (and the same Python, whose standard library is the
    corpus), that output is returned without work; output of different arguments is an error
    unless ``overwrite``. The arguments are ``create_pretraining_data``'s.

    Returns:
        A ``PretrainingData``; ``record_files`` go to ``make_pretraining_dataset``.
    """
    options = instances.InstanceOptions(
        max_seq_length,
        max_predictions_per_seq,
        masked_lm_prob,
        short_seq_prob,
        dynamic_masking,
        whole_word_mask,
    )
    _check_run_arguments(
        vocabulary_size, dupe_factor, num_output_shards, seed, num_workers, overwrite, progress
    )
    corpus_file = os.path.join(output_dir, corpus_lib.DEFAULT_CORPUS_FILENAME)
    config = {
        **_run_config(
            [corpus_file], None, vocabulary_size, options, dupe_factor, num_output_shards, seed
        ),
        "default_corpus_python": sys.version.split()[0],
    }
    manifest_file = os.path.join(output_dir, MANIFEST_FILENAME)
    if not overwrite and os.path.isfile(manifest_file):
        with open(manifest_file, encoding="utf-8") as manifest_stream:
            manifest = json.load(manifest_stream)
        expected_files = manifest["record_files"] + [manifest["vocab_file"], corpus_file]
        if manifest["config"] == config and all(map(os.path.isfile, expected_files)):
            _progress_log(progress)(f"reusing {manifest['num_examples']} examples in {output_dir}")
            return PretrainingData(
                manifest["record_files"],
                manifest["vocab_file"],
                manifest["num_examples"],
                manifest_file,
                config,
            )
    planned = record_file_names(output_dir, num_output_shards) + [
        manifest_file,
        corpus_file,
        os.path.join(output_dir, VOCABULARY_FILENAME),
    ]
    # The manifest is written last: without it, a directory holding nothing but this
    # function's own (regenerable) files is an interrupted earlier call, redone here.
    interrupted = not os.path.isfile(manifest_file) and _only_own_outputs(output_dir, planned)
    _claim_outputs(output_dir, planned, overwrite or interrupted)
    corpus_lib.write_default_corpus(output_dir)
    return _create(
        [corpus_file],
        output_dir,
        config,
        options,
        num_workers,
        _progress_log(progress),
    )


def record_file_names(output_dir, num_output_shards):
    """Paths of the record shards a run with ``num_output_shards`` writes."""
    return [
        os.path.join(
            output_dir, f"{RECORD_FILE_PREFIX}-{index:05d}-of-{num_output_shards:05d}.tfrecord"
        )
        for index in range(num_output_shards)
    ]


def _check_run_arguments(
    vocabulary_size, dupe_factor, num_output_shards, seed, num_workers, overwrite, progress
):
    check_integer("vocabulary_size", vocabulary_size)
    for argument, value in (("dupe_factor", dupe_factor), ("num_output_shards", num_output_shards)):
        if check_integer(argument, value) < 1:
            raise ValueError(f"{argument} must be >= 1, got {value}")
    check_integer("seed", seed)
    check_optional_integer("num_workers", num_workers, low=1)
    check_bool("overwrite", overwrite)
    check_bool("progress", progress)


def _run_config(
    input_files, vocab_file, vocabulary_size, options, dupe_factor, num_output_shards, seed
):
    """What a manifest records of the arguments that decide the output bytes."""
    recorded_options = dataclasses.asdict(options)
    if not options.whole_word_mask:
        # Left out when off, so that manifests written before the option still match.
        del recorded_options["whole_word_mask"]
    return {
        "input_files": input_files,
        "vocab_file": vocab_file,
        "vocabulary_size": vocabulary_size,
        **recorded_options,
        "dupe_factor": dupe_factor,
        "num_output_shards": num_output_shards,
        "seed": seed,
    }


def _create(input_paths, output_dir, config, options, num_workers, progress):
    """Reads, tokenizes, creates, shuffles and writes; the manifest last."""
    documents = instances.read_documents(input_paths)
    num_sentences = sum(len(document) for document in documents)
    progress(
        f"read {len(documents)} documents, {num_sentences} sentences "
        f"from {len(input_paths)} file(s)"
    )
    if config["vocab_file"] is None:
        vocabulary = vocab_lib.build_vocabulary(
            [sentence for document in documents for sentence in document],
            config["vocabulary_size"],
        )
        vocab_file = vocab_lib.save_vocabulary(
            vocabulary, os.path.join(output_dir, VOCABULARY_FILENAME)
        )
        progress(f"built a vocabulary of {len(vocabulary)} tokens: {vocab_file}")
    else:
        vocab_file = config["vocab_file"]
        vocabulary = vocab_lib.load_vocabulary(vocab_file)
    tokenizer = vocab_lib.make_tokenizer(
        vocabulary,
        lowercase=config.get("lowercase", True),
        strip_accents=config.get("strip_accents", True),
    )
    documents = instances.tokenize_documents(documents, tokenizer)
    if len(documents) < 2:
        raise ValueError(
            f"input_files {input_paths} hold {len(documents)} non-empty document(s); random "
            "next-sentence pairs need at least 2 (separate documents with a blank line)"
        )
    num_tokens = sum(len(sentence) for document in documents for sentence in document)
    progress(f"tokenized {num_tokens} tokens in {len(documents)} documents")

    tasks = instance_tasks.make_tasks(len(documents), config["dupe_factor"], config["seed"])
    num_workers = instance_tasks.choose_num_workers(
        num_workers, num_tokens, config["dupe_factor"], len(tasks)
    )
    serialized = instance_tasks.run_tasks(
        tasks,
        documents,
        options,
        masking.TokenIds.from_vocabulary(vocabulary),
        num_workers,
        progress,
    )
    random.Random(config["seed"]).shuffle(serialized)
    record_files = record_file_names(output_dir, config["num_output_shards"])
    records_per_file = []
    for shard_index, path in enumerate(record_files):
        shard_records = serialized[shard_index :: len(record_files)]
        records_per_file.append(len(shard_records))
        with _files.replacing(path) as temporary, tf.io.TFRecordWriter(temporary) as writer:
            for record in shard_records:
                writer.write(record)
        progress(
            f"wrote shard {shard_index + 1}/{len(record_files)}: {path} "
            f"({len(shard_records)} examples)"
        )
    manifest_file = os.path.join(output_dir, MANIFEST_FILENAME)
    _files.write_text(
        manifest_file,
        json.dumps(
            {
                "config": config,
                "vocab_file": vocab_file,
                "record_files": record_files,
                "num_examples": len(serialized),
                # Where a training position falls (`keras_largebatch.input_order`).
                "records_per_file": records_per_file,
            },
            indent=2,
        ),
    )
    progress(f"done: {len(serialized)} examples")
    return PretrainingData(record_files, vocab_file, len(serialized), manifest_file, config)


def _existing_outputs(output_dir, planned_paths):
    """Planned paths that exist, plus record shards of any earlier run in ``output_dir``."""
    stale_shards = local_glob.glob(os.path.join(output_dir, f"{RECORD_FILE_PREFIX}-*.tfrecord"))
    return sorted({path for path in planned_paths if os.path.exists(path)} | set(stale_shards))


def _only_own_outputs(output_dir, planned_paths):
    """True if every file in ``output_dir`` is a planned output or a record shard."""
    if not os.path.isdir(output_dir):
        return False
    own = {os.path.basename(path) for path in planned_paths}
    return all(
        name in own or (name.startswith(f"{RECORD_FILE_PREFIX}-") and name.endswith(".tfrecord"))
        for name in os.listdir(output_dir)
    )


def _claim_outputs(output_dir, planned_paths, overwrite):
    """Refuses to touch existing output unless ``overwrite``; then removes it."""
    existing = _existing_outputs(output_dir, planned_paths)
    if existing and not overwrite:
        raise FileExistsError(
            f"output_dir {output_dir!r} already holds {len(existing)} output file(s) "
            f"({', '.join(os.path.basename(path) for path in existing[:4])}"
            f"{', ...' if len(existing) > 4 else ''}); pass overwrite=True (--overwrite; "
            "overwrite=true for keras-largebatch-pretrain) to replace them, or choose another "
            "output_dir"
        )
    # Stale shards from a run with another shard count would otherwise mix into a file pattern.
    for path in existing:
        os.remove(path)
    os.makedirs(output_dir, exist_ok=True)


def _progress_log(enabled):
    """Data creation's progress lines, stamped with the seconds since creation started."""
    return ProgressLog("create_data", elapsed=True, enabled=enabled)
