"""The embedded default's fine-tuning task, ``word_order``: is a sentence in its real word order?

Built offline from text that ships with Python, and from none that pretraining reads: the
sentences come from the docstrings of standard-library modules that the default pretraining
corpus (`keras_largebatch.bert.corpus`) leaves out (its ``DOCSTRING_MODULES`` are read at their
top level only, so their submodules are left out too), and a sentence that also appears in that
corpus, compared case-insensitively, is dropped. A dev sentence has never been seen in
pretraining.

Each source sentence gives two examples, in the same split: itself (label 1) and a copy with
its word order corrupted (label 0), either two words swapped or a span of one to three words
moved, at least two positions away. The first and the last word stay in place, so the start and
the final punctuation tell nothing. Both examples hold the same words, so no word's presence
tells the label: any rule "label 1 if token w is present" is right on exactly one example of
each pair. The classes are balanced, and every source sentence belongs to one split only.

The files are CoLA's layout (`keras_largebatch.bert.glue`): no header, and the columns source
(the module the sentence comes from), label, original label (``*`` for a corrupted sentence, as
CoLA marks an unacceptable one) and sentence. Like the corpus, the task is a pure function of
the arguments and the Python version.
"""

import ast
import os
import random
import shutil
import sysconfig
import uuid

from keras_largebatch import _checks
from keras_largebatch.bert import corpus

# Standard-library modules with long prose docstrings that the pretraining corpus does not
# read, present in CPython 3.10 through 3.13 (ones missing from this Python are skipped).
# Listed explicitly, so the task does not depend on what else is installed.
SOURCE_MODULES = (
    "_pydecimal",
    "_pyio",
    "logging.handlers",
    "unittest.mock",
    "email.message",
    "pydoc",
    "http.cookiejar",
    "email._header_value_parser",
    "xml.etree.ElementTree",
    "unittest.case",
    "importlib._bootstrap_external",
    "http.server",
    "urllib.request",
    "asyncio.tasks",
    "http.client",
    "asyncio.base_events",
    "concurrent.futures._base",
    "asyncio.locks",
    "xml.sax.xmlreader",
    "xmlrpc.server",
    "urllib.parse",
    "xml.sax.handler",
    "importlib._bootstrap",
    "importlib.metadata",
    "importlib.abc",
    "asyncio.streams",
    "asyncio.events",
    "email._policybase",
    "_collections_abc",
    "lzma",
    "asyncio.unix_events",
    "email.headerregistry",
    "site",
    "pkgutil",
    "fileinput",
    "asyncio.futures",
    "asyncio.transports",
    "code",
    "logging.config",
    "asyncio.protocols",
    "email.header",
    "symtable",
    "dis",
    "email.utils",
    "email.charset",
    "xmlrpc.client",
    "email.policy",
    "http.cookies",
    "operator",
    "json.encoder",
    "mimetypes",
    "importlib.util",
    "email.generator",
    "pyclbr",
    "bz2",
    "graphlib",
    "xml.dom.minidom",
    "sysconfig",
)
TASK_NAME = "word_order"
# 2,500 source sentences of the about 3,500 that CPython 3.11 offers.
DEFAULT_NUM_TRAIN = 4000
DEFAULT_NUM_DEV = 1000
DEFAULT_SEED = 12345
MIN_SENTENCE_WORDS = 6
MAX_SENTENCE_WORDS = 40
# The longest span a corruption moves, and the least distance it moves a word.
MAX_MOVED_SPAN = 3
MIN_DISPLACEMENT = 2
_CORRUPTION_ATTEMPTS = 100
_FILES = ("train.tsv", "dev.tsv")


def source_sentences():
    """The candidate sentences, in module order: a list of ``(module name, sentence)``.

    Prose sentences (the corpus's own filter) of `MIN_SENTENCE_WORDS` to `MAX_SENTENCE_WORDS`
    words that end in ``.``, ``?`` or ``!``, with runs of whitespace made single spaces,
    excluding those that start with a docstring section's name (``Raises:``), those that appear
    in the pretraining corpus, and repeats (both compared case-insensitively).
    """
    seen = {
        _sentence_key(sentence)
        for document in corpus.default_corpus_documents()
        for sentence in document
    }
    sentences = []
    for module_name in SOURCE_MODULES:
        for docstring in _module_docstrings(module_name):
            for sentence in corpus._prose_sentences(docstring):
                sentence = " ".join(sentence.split())
                key = _sentence_key(sentence)
                if _is_candidate(sentence) and key not in seen:
                    seen.add(key)
                    sentences.append((module_name, sentence))
    return sentences


def build_default_task(num_train=DEFAULT_NUM_TRAIN, num_dev=DEFAULT_NUM_DEV, seed=DEFAULT_SEED):
    """Builds the task's examples without writing them.

    Args:
        num_train: examples in the train split, an even number (half of each class).
        num_dev: examples in the dev split, an even number.
        seed: the seed of the choice of sentences, of their corruptions and of the order.

    Returns:
        ``{"train": rows, "dev": rows}``, each row ``(module name, label, sentence)`` with label
        1 for a real sentence and 0 for its corrupted copy.

    Raises:
        TypeError, ValueError: arguments of the wrong type or range, or more examples than
            the sentences give.
    """
    _check_sizes(num_train, num_dev, seed)
    sentences = source_sentences()
    rng = random.Random(seed)
    rng.shuffle(sentences)
    real = {_sentence_key(sentence) for _, sentence in sentences}
    wanted = {"dev": num_dev // 2, "train": num_train // 2}
    splits = {"dev": [], "train": []}
    sentence_iterator = iter(sentences)
    # Dev first, so that its sentences do not depend on num_train.
    for split, num_pairs in wanted.items():
        while len(splits[split]) < 2 * num_pairs:
            source = next(sentence_iterator, None)
            if source is None:
                raise ValueError(
                    f"num_train + num_dev must be at most {2 * len(sentences)} (this Python's "
                    f"standard library gives {len(sentences)} sentences, each one example of "
                    f"each class), got {num_train} + {num_dev}"
                )
            module_name, sentence = source
            corrupted = _corrupted(sentence, rng, real)
            if corrupted is not None:
                splits[split] += [(module_name, 1, sentence), (module_name, 0, corrupted)]
    for rows in splits.values():
        random.Random(seed).shuffle(rows)
    return {"train": splits["train"], "dev": splits["dev"]}


def write_default_task(
    output_dir, num_train=DEFAULT_NUM_TRAIN, num_dev=DEFAULT_NUM_DEV, seed=DEFAULT_SEED
):
    """Writes ``output_dir/train.tsv`` and ``output_dir/dev.tsv`` of task ``word_order``.

    Written atomically: both files go into a sibling temporary directory, renamed to
    ``output_dir`` once complete. If ``output_dir`` already holds exactly the files these
    arguments give, nothing is written (a second call is a no-op).

    Args:
        output_dir: the task's directory (`glue.read_task` reads it as ``data.glue_dir``); its
            parent is created if needed. It must not exist, be empty, or hold this very task.
        num_train: examples in the train split, an even number (half of each class).
        num_dev: examples in the dev split, an even number.
        seed: the seed of the choice of sentences, of their corruptions and of the order.

    Returns:
        ``output_dir``, as a string.

    Raises:
        TypeError, ValueError: arguments of the wrong type or range, or more examples than the
            sentences give.
        ValueError: ``output_dir`` holds anything else (other files, or the task written with
            other arguments or by another Python version); nothing there is changed.
    """
    output_dir = os.fspath(output_dir)
    _check_sizes(num_train, num_dev, seed)
    _check_output_dir(output_dir)
    splits = build_default_task(num_train, num_dev, seed)
    contents = {f"{split}.tsv": _tsv_text(rows) for split, rows in splits.items()}
    if os.path.isdir(output_dir) and os.listdir(output_dir):
        return _same_task_or_raise(output_dir, contents)
    parent = os.path.dirname(os.path.abspath(output_dir))
    os.makedirs(parent, exist_ok=True)
    temporary_dir = os.path.join(
        parent, f".{os.path.basename(os.path.abspath(output_dir))}.tmp-{uuid.uuid4().hex}"
    )
    os.makedirs(temporary_dir)
    try:
        for filename, text in contents.items():
            with open(os.path.join(temporary_dir, filename), "w", encoding="utf-8") as tsv_file:
                tsv_file.write(text)
        # Replaces output_dir only if it is absent or empty (POSIX rename).
        os.rename(temporary_dir, output_dir)
    except OSError:
        shutil.rmtree(temporary_dir, ignore_errors=True)
        if os.path.isdir(output_dir) and os.listdir(output_dir):
            # Another process wrote it first.
            return _same_task_or_raise(output_dir, contents)
        raise
    return output_dir


def _check_sizes(num_train, num_dev, seed):
    for name, value in (("num_train", num_train), ("num_dev", num_dev)):
        _checks.check_integer(name, value, low=2)
        if value % 2:
            raise ValueError(
                f"{name} must be even (one real and one corrupted copy of each sentence), "
                f"got {value}"
            )
    _checks.check_integer("seed", seed)


def _check_output_dir(output_dir):
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise ValueError(f"output_dir {output_dir!r} exists and is not a directory")
    if os.path.isdir(output_dir):
        others = sorted(set(os.listdir(output_dir)) - set(_FILES))
        if others:
            raise ValueError(
                f"output_dir {output_dir!r} holds {others}, which the {TASK_NAME} task does "
                f"not write; nothing was changed: choose an empty or new directory"
            )


def _same_task_or_raise(output_dir, contents):
    for filename, text in contents.items():
        path = os.path.join(output_dir, filename)
        if not os.path.isfile(path) or _read_text(path) != text:
            raise ValueError(
                f"output_dir {output_dir!r} holds a {filename} other than the {TASK_NAME} "
                f"task these arguments give (other arguments, another Python version, or "
                f"other data); nothing was changed: remove it or choose another directory"
            )
    return output_dir


def _read_text(path):
    with open(path, encoding="utf-8", newline="") as tsv_file:
        return tsv_file.read()


def _tsv_text(rows):
    """CoLA's layout: source, label, original label (``*`` when corrupted), sentence."""
    return "".join(
        f"{module_name}\t{label}\t{'' if label else '*'}\t{sentence}\n"
        for module_name, label, sentence in rows
    )


def _sentence_key(sentence):
    return " ".join(sentence.split()).lower()


def _is_candidate(sentence):
    words = sentence.split()
    return (
        MIN_SENTENCE_WORDS <= len(words) <= MAX_SENTENCE_WORDS
        and sentence[-1] in ".?!"
        and not words[0].endswith(":")
    )


def _corrupted(sentence, rng, real):
    """The sentence with two words swapped or a short span moved, or None if no draw gives a
    word order that differs from the sentence and from every real one (``real``: their keys)."""
    words = sentence.split()
    for _ in range(_CORRUPTION_ATTEMPTS):
        if rng.random() < 0.5:
            candidate = _swap_two_words(words, rng)
        else:
            candidate = _move_span(words, rng)
        corrupted = " ".join(candidate)
        if candidate != words and _sentence_key(corrupted) not in real:
            return corrupted
    return None


def _swap_two_words(words, rng):
    """Swaps two words of the interior (not the first or last) at least two positions apart."""
    first, second = sorted(rng.sample(range(1, len(words) - 1), 2))
    if second - first < MIN_DISPLACEMENT:
        return words
    swapped = list(words)
    swapped[first], swapped[second] = words[second], words[first]
    return swapped


def _move_span(words, rng):
    """Moves a span of 1 to `MAX_MOVED_SPAN` interior words at least two positions away."""
    interior = len(words) - 2
    length = rng.randint(1, min(MAX_MOVED_SPAN, interior - MIN_DISPLACEMENT))
    start = rng.randint(1, interior - length + 1)
    span = words[start : start + length]
    rest = words[:start] + words[start + length :]
    # Inserting before rest[position] keeps the first and the last word where they are.
    position = rng.randint(1, len(rest) - 1)
    if abs(position - start) < MIN_DISPLACEMENT:
        return words
    return rest[:position] + span + rest[position:]


def _module_docstrings(module_name):
    """Docstrings of a standard-library module's source (module, classes, functions, in source
    order), read with :mod:`ast` from the standard library's directory, so no module is
    imported; [] for a module this Python lacks."""
    base = os.path.join(sysconfig.get_paths()["stdlib"], *module_name.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as source_file:
                tree = ast.parse(source_file.read())
            nodes = [tree] + [
                node
                for node in ast.walk(tree)
                if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            ]
            return [docstring for docstring in map(ast.get_docstring, nodes) if docstring]
    return []
