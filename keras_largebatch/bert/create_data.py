"""Raw text to BERT pretraining TFRecords, in the google-research/bert schema.

Input text files hold one sentence per line and a blank line between documents. Every document
is turned into sentence-pair instances ``dupe_factor`` times, each time with different random
choices:

* A target length of ``max_seq_length - 3`` tokens (with probability ``short_seq_prob`` a random
  length in ``[2, max_seq_length - 3]`` instead, so the model also sees short sequences).
* Sentences are gathered until they reach the target length; a random cut splits them into
  segment A and segment B. With probability 1/2 (always, if only one sentence was gathered)
  segment B is replaced by text starting at a random sentence of another document:
  ``next_sentence_labels = 1`` means "B is a random next", 0 means "B is the actual next".
  Unused sentences are put back for the next instance.
* The longer segment is trimmed one token at a time, from its front or back at random, until
  ``[CLS] A [SEP] B [SEP]`` fits in ``max_seq_length``.
* Unless ``dynamic_masking``, the tokens are masked by google-research/bert's 80/10/10 rule
  (``masking.mask_tokens``).

All instances are shuffled and written round-robin over ``num_output_shards`` files, one
``tf.train.Example`` per instance in the schema of ``records`` (``max_seq_length`` is its
``seq_length``).

With ``dynamic_masking`` the records hold the unmasked ``input_ids`` and no ``masked_lm_*``
features; ``input_pipeline.make_pretraining_dataset(..., dynamic_masking=True)`` masks them anew
every time it reads them.

Randomness comes from ``seed`` alone: the work is split into fixed tasks (one per pass over
a fixed block of documents), each with its own generator derived from ``(seed, pass, block)``,
so the output is byte-identical whatever the number of worker processes.
"""

import argparse
import dataclasses
import glob as local_glob
import json
import multiprocessing
import os
import random
import sys
import time

import numpy as np
import tensorflow as tf

from keras_largebatch._file_patterns import resolve_file_patterns
from keras_largebatch.bert import corpus as corpus_lib
from keras_largebatch.bert import masking
from keras_largebatch.bert import records
from keras_largebatch.bert import vocab as vocab_lib
from keras_largebatch.bert.masking import TokenIds, mask_tokens  # noqa: F401 (public here too)

RECORD_FILE_PREFIX = "pretraining"
MANIFEST_FILENAME = "manifest.json"
VOCABULARY_FILENAME = "vocab.txt"
# Documents per task. Fixed, not derived from the worker count, so that tasks and their seeds,
# hence the output, do not depend on how many processes run them.
DOCUMENTS_PER_TASK = 32
# Sentences per tokenizer call: large enough to amortize the TF call, small enough for memory.
TOKENIZE_BATCH_SIZE = 8192
# The default corpus is ~170K tokens; 5 passes give ~9.5K instances at sequence length 128,
# enough for the tiny CPU pretraining run, in about 10 s (7 s of it learning the vocabulary).
DEFAULT_CORPUS_DUPE_FACTOR = 5
# Below this many corpus tokens times dupe passes, starting worker processes costs more than
# the work (see choose_num_workers).
PARALLEL_MIN_TOKEN_PASSES = 20_000_000


@dataclasses.dataclass(frozen=True)
class InstanceOptions:
    """How instances are cut and masked (see the module docstring)."""

    max_seq_length: int = records.DEFAULT_MAX_SEQ_LENGTH
    max_predictions_per_seq: int = records.DEFAULT_MAX_PREDICTIONS_PER_SEQ
    masked_lm_prob: float = masking.DEFAULT_MASKED_LM_PROB
    short_seq_prob: float = 0.1
    dynamic_masking: bool = False

    def __post_init__(self):
        # [CLS] A [SEP] B [SEP] with A and B at least one token each.
        if self.max_seq_length < 5:
            raise ValueError(f"max_seq_length must be >= 5, got {self.max_seq_length}")
        if not 1 <= self.max_predictions_per_seq <= self.max_seq_length:
            raise ValueError(
                "max_predictions_per_seq must be in [1, max_seq_length="
                f"{self.max_seq_length}], got {self.max_predictions_per_seq}"
            )
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise ValueError(f"masked_lm_prob must be in (0, 1), got {self.masked_lm_prob}")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError(f"short_seq_prob must be in [0, 1], got {self.short_seq_prob}")


@dataclasses.dataclass(frozen=True)
class Instance:
    """One sentence pair, before padding: ``tokens`` is ``[CLS] A [SEP] B [SEP]`` (masked)."""

    tokens: list
    segment_ids: list
    is_random_next: bool
    masked_lm_positions: list
    masked_lm_ids: list


@dataclasses.dataclass(frozen=True)
class PretrainingData:
    """What a creation run wrote: pass ``record_files`` to ``make_pretraining_dataset``."""

    record_files: list
    vocab_file: str
    num_examples: int
    manifest_file: str
    config: dict


def read_documents(input_files):
    """Reads text files into documents, each a list of sentence strings.

    Args:
        input_files: paths or glob patterns (``gs://`` works through ``tf.io.gfile``); each file
            has one sentence per line and a blank line between documents.

    Returns:
        The non-empty documents of all files, files in the given order (patterns expanded in
        sorted order).
    """
    documents = []
    for path in resolve_input_files(input_files):
        sentences = []
        with tf.io.gfile.GFile(path, "r") as text_file:
            for line in text_file:
                line = line.strip()
                if line:
                    sentences.append(line)
                elif sentences:
                    documents.append(sentences)
                    sentences = []
        if sentences:
            documents.append(sentences)
    return documents


def resolve_input_files(input_files):
    """Expands paths and patterns (``resolve_file_patterns``), raising ValueError for one that
    matches nothing."""
    return resolve_file_patterns(input_files, "input_files", "input")


def tokenize_documents(documents, tokenizer):
    """Tokenizes every sentence; returns documents as lists of token-id lists.

    Sentences that tokenize to nothing and documents left empty are dropped.
    """
    sentences = [sentence for document in documents for sentence in document]
    token_ids = []
    for start in range(0, len(sentences), TOKENIZE_BATCH_SIZE):
        batch = tf.constant(sentences[start:start + TOKENIZE_BATCH_SIZE])
        token_ids.extend(list(map(int, ids)) for ids in tokenizer(batch))
    tokenized_documents = []
    position = 0
    for document in documents:
        tokenized = [ids for ids in token_ids[position:position + len(document)] if ids]
        position += len(document)
        if tokenized:
            tokenized_documents.append(tokenized)
    return tokenized_documents


def create_instances_from_document(documents, document_index, options, token_ids, rng):
    """Cuts ``documents[document_index]`` into sentence-pair instances (module docstring)."""
    document = documents[document_index]
    max_num_tokens = options.max_seq_length - 3
    target_length = max_num_tokens
    if rng.random() < options.short_seq_prob:
        target_length = rng.randint(2, max_num_tokens)
    instances = []
    chunk = []
    chunk_length = 0
    sentence_index = 0
    while sentence_index < len(document):
        chunk.append(document[sentence_index])
        chunk_length += len(document[sentence_index])
        if sentence_index == len(document) - 1 or chunk_length >= target_length:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = [token for sentence in chunk[:a_end] for token in sentence]
            if len(chunk) == 1 or rng.random() < 0.5:
                is_random_next = True
                tokens_b = _random_next_tokens(
                    documents, document_index, target_length - len(tokens_a), rng
                )
                # The sentences after the cut were not used; the next instance starts with them.
                sentence_index -= len(chunk) - a_end
            else:
                is_random_next = False
                tokens_b = [token for sentence in chunk[a_end:] for token in sentence]
            _truncate_pair(tokens_a, tokens_b, max_num_tokens, rng)
            tokens = [token_ids.cls_id, *tokens_a, token_ids.sep_id, *tokens_b, token_ids.sep_id]
            segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
            if options.dynamic_masking:
                positions, labels = [], []
            else:
                tokens, positions, labels = masking.mask_tokens(tokens, options, token_ids, rng)
            instances.append(Instance(tokens, segment_ids, is_random_next, positions, labels))
            chunk = []
            chunk_length = 0
        sentence_index += 1
    return instances


def _random_next_tokens(documents, document_index, target_length, rng):
    """At least ``target_length`` tokens (or a document's rest) from another random document."""
    # Drawing from the other documents directly avoids google-research/bert's retry loop, which
    # can fall back to the same document.
    other_index = rng.randrange(len(documents) - 1)
    if other_index >= document_index:
        other_index += 1
    other_document = documents[other_index]
    tokens = []
    for sentence in other_document[rng.randrange(len(other_document)):]:
        tokens.extend(sentence)
        if len(tokens) >= target_length:
            break
    return tokens


def _truncate_pair(tokens_a, tokens_b, max_num_tokens, rng):
    """Trims the longer list in place, from the front or the back at random, until both fit."""
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        # Trimming both ends keeps the model from learning where truncation happens.
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def serialize_instance(instance, options):
    """Pads an instance to the record lengths and serializes it as a ``tf.train.Example``
    (``records``); without ``masked_lm_*`` features when ``options.dynamic_masking``."""
    values = {
        "input_ids": instance.tokens,
        "input_mask": [1] * len(instance.tokens),
        "segment_ids": instance.segment_ids,
        "next_sentence_labels": [int(instance.is_random_next)],
    }
    if not options.dynamic_masking:
        values["masked_lm_positions"] = instance.masked_lm_positions
        values["masked_lm_ids"] = instance.masked_lm_ids
        values["masked_lm_weights"] = [1.0] * len(instance.masked_lm_positions)
    return records.serialize_example(
        values, options.max_seq_length, options.max_predictions_per_seq
    )


@dataclasses.dataclass(frozen=True)
class _Task:
    """One pass (``dupe_index``) over the documents ``[first, last)``, with its own seed."""

    dupe_index: int
    first: int
    last: int
    seed: int


def _make_tasks(num_documents, dupe_factor, seed):
    tasks = []
    for dupe_index in range(dupe_factor):
        for block, first in enumerate(range(0, num_documents, DOCUMENTS_PER_TASK)):
            task_seed = int(np.random.SeedSequence([seed, dupe_index, block]).generate_state(1)[0])
            tasks.append(
                _Task(dupe_index, first, min(first + DOCUMENTS_PER_TASK, num_documents), task_seed)
            )
    return tasks


def _run_task(task, documents, options, token_ids):
    """Serialized instances of one task; a top-level function so worker processes can run it."""
    rng = random.Random(task.seed)
    return [
        serialize_instance(instance, options)
        for document_index in range(task.first, task.last)
        for instance in create_instances_from_document(
            documents, document_index, options, token_ids, rng
        )
    ]


def record_file_names(output_dir, num_output_shards):
    """Paths of the record shards a run with ``num_output_shards`` writes."""
    return [
        os.path.join(
            output_dir, f"{RECORD_FILE_PREFIX}-{index:05d}-of-{num_output_shards:05d}.tfrecord"
        )
        for index in range(num_output_shards)
    ]


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


def _check_run_arguments(dupe_factor, num_output_shards, num_workers):
    if dupe_factor < 1:
        raise ValueError(f"dupe_factor must be >= 1, got {dupe_factor}")
    if num_output_shards < 1:
        raise ValueError(f"num_output_shards must be >= 1, got {num_output_shards}")
    if num_workers is not None and num_workers < 1:
        raise ValueError(f"num_workers must be >= 1 (or None for all CPUs), got {num_workers}")


def default_num_workers():
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def create_pretraining_data(
    input_files,
    output_dir,
    vocab_file=None,
    vocabulary_size=vocab_lib.DEFAULT_VOCABULARY_SIZE,
    max_seq_length=records.DEFAULT_MAX_SEQ_LENGTH,
    max_predictions_per_seq=records.DEFAULT_MAX_PREDICTIONS_PER_SEQ,
    masked_lm_prob=masking.DEFAULT_MASKED_LM_PROB,
    dupe_factor=10,
    short_seq_prob=0.1,
    num_output_shards=8,
    seed=12345,
    num_workers=None,
    dynamic_masking=False,
    overwrite=False,
    progress=True,
):
    """Writes BERT pretraining TFRecords for text files (the module docstring has the details).

    Args:
        input_files: text file paths or glob patterns; one sentence per line, a blank line
            between documents.
        output_dir: local directory for the shards ``pretraining-00000-of-00008.tfrecord (index-of-count)``,
            ``manifest.json`` and, when a vocabulary is built, ``vocab.txt``.
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
        overwrite: replace existing output in ``output_dir``; without it, existing output is an
            error raised before any work.
        progress: print progress lines to stderr.

    Returns:
        A ``PretrainingData`` describing the written files.

    All serialized instances are held in memory for the global shuffle, as in
    google-research/bert (about 1 KB each at sequence length 128); for a corpus too large for
    that, run once per part of the input, each into its own ``output_dir``.
    """
    options = InstanceOptions(
        max_seq_length, max_predictions_per_seq, masked_lm_prob, short_seq_prob, dynamic_masking
    )
    _check_run_arguments(dupe_factor, num_output_shards, num_workers)
    input_paths = resolve_input_files(input_files)
    if vocab_file is not None and not os.path.isfile(vocab_file):
        raise FileNotFoundError(f"vocab_file {vocab_file!r} does not exist")
    built_vocab_file = os.path.join(output_dir, VOCABULARY_FILENAME)
    planned = record_file_names(output_dir, num_output_shards)
    planned.append(os.path.join(output_dir, MANIFEST_FILENAME))
    if vocab_file is None:
        planned.append(built_vocab_file)
    _claim_outputs(output_dir, planned, overwrite)
    config = _run_config(input_paths, vocab_file, vocabulary_size, options, dupe_factor,
                         num_output_shards, seed)
    return _create(input_paths, output_dir, config, options, num_workers, _Progress(progress))


def _run_config(input_files, vocab_file, vocabulary_size, options, dupe_factor,
                num_output_shards, seed):
    """What a manifest records of the arguments that decide the output bytes."""
    return {
        "input_files": input_files,
        "vocab_file": vocab_file,
        "vocabulary_size": vocabulary_size,
        **dataclasses.asdict(options),
        "dupe_factor": dupe_factor,
        "num_output_shards": num_output_shards,
        "seed": seed,
    }


def _create(input_paths, output_dir, config, options, num_workers, progress):
    documents = read_documents(input_paths)
    num_sentences = sum(len(document) for document in documents)
    progress(f"read {len(documents)} documents, {num_sentences} sentences "
              f"from {len(input_paths)} file(s)")
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
    documents = tokenize_documents(documents, vocab_lib.make_tokenizer(vocabulary))
    if len(documents) < 2:
        raise ValueError(
            f"input_files {input_paths} hold {len(documents)} non-empty document(s); random "
            "next-sentence pairs need at least 2 (separate documents with a blank line)"
        )
    num_tokens = sum(len(sentence) for document in documents for sentence in document)
    progress(f"tokenized {num_tokens} tokens in {len(documents)} documents")

    tasks = _make_tasks(len(documents), config["dupe_factor"], config["seed"])
    num_workers = choose_num_workers(num_workers, num_tokens, config["dupe_factor"], len(tasks))
    records = _run_tasks(
        tasks, documents, options, masking.TokenIds.from_vocabulary(vocabulary), num_workers, progress
    )
    random.Random(config["seed"]).shuffle(records)
    record_files = record_file_names(output_dir, config["num_output_shards"])
    for shard_index, path in enumerate(record_files):
        shard_records = records[shard_index::len(record_files)]
        with tf.io.TFRecordWriter(path) as writer:
            for record in shard_records:
                writer.write(record)
        progress(f"wrote shard {shard_index + 1}/{len(record_files)}: {path} "
                  f"({len(shard_records)} examples)")
    manifest_file = os.path.join(output_dir, MANIFEST_FILENAME)
    with open(manifest_file, "w", encoding="utf-8") as manifest:
        json.dump({
            "config": config,
            "vocab_file": vocab_file,
            "record_files": record_files,
            "num_examples": len(records),
        }, manifest, indent=2)
    progress(f"done: {len(records)} examples")
    return PretrainingData(record_files, vocab_file, len(records), manifest_file, config)


def choose_num_workers(num_workers, num_tokens, dupe_factor, num_tasks):
    """Worker processes for a run: ``num_workers`` if given, else all CPUs when that pays off.

    A spawned worker takes about 6 s to start (it imports TensorFlow), and one process creates
    instances at about 1.2M corpus tokens per second (dupe passes counted), so with
    ``num_workers=None`` a run uses one process below ``PARALLEL_MIN_TOKEN_PASSES`` token
    passes: the default corpus (170K tokens x 5 passes) takes 0.7 s inline and 7 s with 2
    workers. Never more workers than tasks.
    """
    if num_workers is None:
        parallel = num_tokens * dupe_factor >= PARALLEL_MIN_TOKEN_PASSES
        num_workers = default_num_workers() if parallel else 1
    return max(1, min(num_workers, num_tasks))


def _run_tasks(tasks, documents, options, token_ids, num_workers, progress):
    """Runs the tasks, in parallel when ``num_workers > 1``; returns records in task order."""
    if num_workers == 1:
        run = _TaskRunner(documents, options, token_ids)
        return _collect(([run(task)] for task in tasks), len(tasks), num_workers, progress)
    # Pool.imap pickles the callable, corpus included, with every item: sending a few
    # contiguous groups of tasks instead of single tasks keeps that cost negligible.
    num_groups = min(len(tasks), 4 * num_workers)
    bounds = [len(tasks) * group // num_groups for group in range(num_groups + 1)]
    groups = [tasks[first:last] for first, last in zip(bounds, bounds[1:])]
    # "spawn", not "fork": this process already runs TensorFlow threads, and forking a
    # multithreaded process can deadlock the child.
    with multiprocessing.get_context("spawn").Pool(num_workers) as pool:
        results = pool.imap(_TaskGroupRunner(documents, options, token_ids), groups)
        return _collect(results, len(tasks), num_workers, progress)


def _collect(results, num_tasks, num_workers, progress):
    """Concatenates per-task record lists arriving in groups, reporting about 10 times."""
    records = []
    done = 0
    next_report = 0
    for group_records in results:
        for task_records in group_records:
            records.extend(task_records)
        done += len(group_records)
        if done >= next_report or done == num_tasks:
            progress(f"created instances: task {done}/{num_tasks}, "
                     f"{len(records)} examples so far ({num_workers} worker(s))")
            next_report = done + max(1, num_tasks // 10)
    return records


@dataclasses.dataclass(frozen=True)
class _TaskRunner:
    """Picklable callable binding the corpus to ``_run_task``."""

    documents: list
    options: InstanceOptions
    token_ids: masking.TokenIds

    def __call__(self, task):
        return _run_task(task, self.documents, self.options, self.token_ids)


class _TaskGroupRunner(_TaskRunner):
    """Runs a list of tasks in a worker process; returns one record list per task."""

    def __call__(self, tasks):
        return [super(_TaskGroupRunner, self).__call__(task) for task in tasks]


class _Progress:
    """Progress lines on stderr, stamped with the seconds since the run started."""

    def __init__(self, enabled):
        self.enabled = enabled
        self.start_time = time.perf_counter()

    def __call__(self, message):
        if self.enabled:
            elapsed = time.perf_counter() - self.start_time
            print(f"[create_data {elapsed:6.1f}s] {message}", file=sys.stderr, flush=True)


def create_default_pretraining_data(
    output_dir,
    max_seq_length=records.DEFAULT_MAX_SEQ_LENGTH,
    max_predictions_per_seq=records.DEFAULT_MAX_PREDICTIONS_PER_SEQ,
    vocabulary_size=vocab_lib.DEFAULT_VOCABULARY_SIZE,
    masked_lm_prob=masking.DEFAULT_MASKED_LM_PROB,
    dupe_factor=DEFAULT_CORPUS_DUPE_FACTOR,
    short_seq_prob=0.1,
    num_output_shards=8,
    seed=12345,
    num_workers=None,
    dynamic_masking=False,
    overwrite=False,
    progress=True,
):
    """Writes the embedded default corpus, its vocabulary and its TFRecords to ``output_dir``.

    For the default pretraining job: needs no download and takes about 10 s on 2 CPU cores at
    the defaults (15-30 s when the machine is busy). If ``output_dir`` already holds the output
    of a call with the same arguments (and the same Python, whose standard library is the
    corpus), that output is returned without work; output of different arguments is an error
    unless ``overwrite``.

    Returns:
        A ``PretrainingData``; ``record_files`` go to ``make_pretraining_dataset``.
    """
    options = InstanceOptions(
        max_seq_length, max_predictions_per_seq, masked_lm_prob, short_seq_prob, dynamic_masking
    )
    _check_run_arguments(dupe_factor, num_output_shards, num_workers)
    corpus_file = os.path.join(output_dir, corpus_lib.DEFAULT_CORPUS_FILENAME)
    config = {
        **_run_config([corpus_file], None, vocabulary_size, options, dupe_factor,
                      num_output_shards, seed),
        "default_corpus_python": sys.version.split()[0],
    }
    manifest_file = os.path.join(output_dir, MANIFEST_FILENAME)
    if not overwrite and os.path.isfile(manifest_file):
        with open(manifest_file, encoding="utf-8") as manifest_stream:
            manifest = json.load(manifest_stream)
        expected_files = manifest["record_files"] + [manifest["vocab_file"], corpus_file]
        if manifest["config"] == config and all(map(os.path.isfile, expected_files)):
            _Progress(progress)(f"reusing {manifest['num_examples']} examples in {output_dir}")
            return PretrainingData(
                manifest["record_files"], manifest["vocab_file"], manifest["num_examples"],
                manifest_file, config,
            )
    planned = record_file_names(output_dir, num_output_shards) + [
        manifest_file, corpus_file, os.path.join(output_dir, VOCABULARY_FILENAME),
    ]
    # The manifest is written last: without it, a directory holding nothing but this
    # function's own (regenerable) files is an interrupted earlier call, redone here.
    interrupted = not os.path.isfile(manifest_file) and _only_own_outputs(output_dir, planned)
    _claim_outputs(output_dir, planned, overwrite or interrupted)
    corpus_lib.write_default_corpus(output_dir)
    return _create([corpus_file], output_dir, config, options, num_workers, _Progress(progress))


def build_parser():
    """The command-line interface of ``keras-largebatch-create-data``."""
    parser = argparse.ArgumentParser(
        prog="keras-largebatch-create-data",
        description="Write BERT pretraining TFRecords (google-research/bert schema) from text "
                    "files with one sentence per line and a blank line between documents.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input_files", nargs="+", metavar="PATH_OR_GLOB",
                        help="input text files or glob patterns")
    source.add_argument("--default_corpus", action="store_true",
                        help="use the embedded corpus (Python's own documentation) and build "
                             "its vocabulary; excludes --vocab_file")
    parser.add_argument("--output_dir", required=True,
                        help="directory for the record shards, manifest.json and vocab.txt")
    parser.add_argument("--vocab_file", default=None,
                        help="vocabulary to use, one token per line (default: build one from "
                             "the input into OUTPUT_DIR/vocab.txt)")
    parser.add_argument("--vocabulary_size", type=int, default=vocab_lib.DEFAULT_VOCABULARY_SIZE,
                        help="most tokens in a built vocabulary (default: %(default)s)")
    parser.add_argument("--max_seq_length", type=int, default=records.DEFAULT_MAX_SEQ_LENGTH,
                        help="tokens per instance, [CLS] and [SEP]s included "
                             "(default: %(default)s)")
    parser.add_argument("--max_predictions_per_seq", type=int,
                        default=records.DEFAULT_MAX_PREDICTIONS_PER_SEQ,
                        help="most masked positions per instance (default: %(default)s)")
    parser.add_argument("--masked_lm_prob", type=float, default=masking.DEFAULT_MASKED_LM_PROB,
                        help="fraction of tokens to mask (default: %(default)s)")
    parser.add_argument("--dupe_factor", type=int, default=None,
                        help="passes over the corpus, each with new cuts and masks (default: "
                             f"10, or {DEFAULT_CORPUS_DUPE_FACTOR} with --default_corpus)")
    parser.add_argument("--short_seq_prob", type=float, default=0.1,
                        help="probability of a shorter random target length "
                             "(default: %(default)s)")
    parser.add_argument("--num_output_shards", type=int, default=8,
                        help="record files, written round-robin (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=12345,
                        help="the same seed writes the same bytes (default: %(default)s)")
    parser.add_argument("--num_workers", type=int, default=None,
                        help="worker processes; the output does not depend on it (default: "
                             "all available CPUs for inputs large enough to repay starting "
                             "them, else 1)")
    parser.add_argument("--dynamic_masking", action="store_true",
                        help="write unmasked records (no masked_lm_* features) for the input "
                             "pipeline's per-epoch masking")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace existing output in OUTPUT_DIR (without it, existing "
                             "output is an error raised before any work)")
    return parser


def main(argv=None):
    """Entry point of ``keras-largebatch-create-data``; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    common = dict(
        max_seq_length=args.max_seq_length,
        max_predictions_per_seq=args.max_predictions_per_seq,
        vocabulary_size=args.vocabulary_size,
        masked_lm_prob=args.masked_lm_prob,
        short_seq_prob=args.short_seq_prob,
        num_output_shards=args.num_output_shards,
        seed=args.seed,
        num_workers=args.num_workers,
        dynamic_masking=args.dynamic_masking,
        overwrite=args.overwrite,
    )
    try:
        if args.default_corpus:
            if args.vocab_file is not None:
                parser.error("--default_corpus builds its own vocabulary; drop --vocab_file")
            create_default_pretraining_data(
                args.output_dir,
                dupe_factor=(
                    DEFAULT_CORPUS_DUPE_FACTOR if args.dupe_factor is None else args.dupe_factor
                ),
                **common,
            )
        else:
            create_pretraining_data(
                args.input_files,
                args.output_dir,
                vocab_file=args.vocab_file,
                dupe_factor=10 if args.dupe_factor is None else args.dupe_factor,
                **common,
            )
    except (ValueError, FileExistsError, FileNotFoundError) as error:
        print(f"keras-largebatch-create-data: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
