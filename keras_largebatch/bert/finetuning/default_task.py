"""The embedded default's fine-tuning task, ``next_sentence``: does B follow A in its text?

BERT's own next-sentence prediction (Devlin et al., arXiv 1810.04805, section 3.1) asked of
text that pretraining never read. It is built offline from text that ships with Python: the
sentences come from the docstrings of standard-library modules that the default pretraining
corpus (`keras_largebatch.bert.data.corpus`) leaves out (its ``DOCSTRING_MODULES`` are read at their
top level only, so their submodules are left out too), and a sentence that also appears in that
corpus, compared case-insensitively, is dropped. A dev sentence has never been seen in
pretraining or in training.

Each pair of consecutive sentences (A, B) of one docstring gives two examples: (A, B) with
label 1, and (A, B') with label 0, where B' is the second sentence of another pair of the same
split taken from another docstring. Every sentence that is some pair's B is also exactly one
other pair's B', so each first sentence, and each second sentence, is as often in one class as
in the other: no token, and no sentence, tells the label on its own; only how A and B relate
does. The
classes are balanced, and every docstring belongs to one split only.

The files take WNLI's layout (`keras_largebatch.bert.finetuning.glue`) with a source column:
the header ``index, source, sentence1, sentence2, label``, the source being the module of A
(and of B when B follows it).
Like the corpus, the task is a pure function of the arguments and the Python version.
"""

import ast
import math
import os
import random
import re
import sysconfig

from keras_largebatch import _checks, _files
from keras_largebatch.bert.data import corpus

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
TASK_NAME = "next_sentence"
# 1,500 of the 1,706 pairs of consecutive sentences that CPython 3.11 offers: 500 for dev,
# 1,000 for train.
DEFAULT_NUM_TRAIN = 2000
DEFAULT_NUM_DEV = 1000
DEFAULT_SEED = 12345
MIN_SENTENCE_WORDS = 6
MAX_SENTENCE_WORDS = 40
HEADER = ("index", "source", "sentence1", "sentence2", "label")
_FILES = ("train.tsv", "dev.tsv")


def source_documents():
    """The candidate pairs, by docstring, in module order: a list of ``(module name, pairs)``
    with ``pairs`` the docstring's ``(A, B)`` of consecutive sentences, for docstrings with at
    least one.

    Sentences are prose sentences (the corpus's own filter) with runs of whitespace made single
    spaces. A candidate has `MIN_SENTENCE_WORDS` to `MAX_SENTENCE_WORDS` words, ends in ``.``,
    ``?`` or ``!``, does not start with a docstring section's name (``Raises:``), is not in the
    pretraining corpus and is not a repeat (both compared case-insensitively). A pair is two
    candidates that are consecutive in the docstring, nothing left out between them.
    """
    seen = {
        _sentence_key(sentence)
        for document in corpus.default_corpus_documents()
        for sentence in document
    }
    documents = []
    for module_name in SOURCE_MODULES:
        for docstring in _module_docstrings(module_name):
            candidates = []
            for sentence in corpus.prose_sentences(docstring):
                sentence = " ".join(sentence.split())
                key = _sentence_key(sentence)
                if _is_candidate(sentence) and key not in seen:
                    seen.add(key)
                    candidates.append(sentence)
                else:
                    candidates.append(None)
            pairs = [
                (first, second)
                for first, second in zip(candidates, candidates[1:])
                if first is not None and second is not None
            ]
            if pairs:
                documents.append((module_name, pairs))
    return documents


def build_default_task(num_train=DEFAULT_NUM_TRAIN, num_dev=DEFAULT_NUM_DEV, seed=DEFAULT_SEED):
    """Builds the task's examples without writing them.

    Args:
        num_train: examples in the train split, an even number from 4 (half of each class).
        num_dev: examples in the dev split, an even number from 4.
        seed: the seed of the choice of docstrings, of the negatives and of the order.

    Returns:
        ``{"train": rows, "dev": rows}``, each row ``(module name, sentence A, sentence B,
        label)`` with label 1 when B follows A in its docstring and 0 when B comes from
        another docstring.

    Raises:
        TypeError, ValueError: arguments of the wrong type or range, or more examples than
            the docstrings give.
    """
    _check_sizes(num_train, num_dev, seed)
    documents = source_documents()
    rng = random.Random(seed)
    rng.shuffle(documents)
    available = 2 * sum(len(pairs) for _, pairs in documents)
    wanted = {"dev": num_dev // 2, "train": num_train // 2}
    # Dev first, so that its pairs do not depend on num_train.
    splits = {}
    remaining = iter(enumerate(documents))
    for split, num_pairs in wanted.items():
        chosen = []  # (docstring index, module name, A, B)
        while len(chosen) < num_pairs:
            item = next(remaining, None)
            if item is None:
                raise ValueError(
                    f"num_train + num_dev must be at most about {available}: this Python's "
                    f"standard library gives {available // 2} pairs of consecutive sentences, "
                    f"each one example of each class, and a docstring's pairs stay in one "
                    f"split; got {num_train} + {num_dev}"
                )
            index, (module_name, pairs) = item
            # At most half of a split's pairs from one docstring, so that every pair can take
            # its negative from another one (`_other_docstring_permutation`).
            chosen += [
                (index, module_name, first, second) for first, second in pairs[: num_pairs // 2]
            ]
        # A docstring's pairs are not split between splits; the extra ones are left out.
        chosen = chosen[:num_pairs]
        negatives = _other_docstring_permutation([index for index, *_ in chosen], rng)
        rows = []
        for (_, module_name, first, second), other in zip(chosen, negatives):
            rows += [(module_name, first, second, 1), (module_name, first, chosen[other][3], 0)]
        rng.shuffle(rows)
        splits[split] = rows
    return {"train": splits["train"], "dev": splits["dev"]}


def overlap_rule(train, dev):
    """The word-overlap rule, a baseline with no model: label 1 when the Jaccard overlap of the
    two sentences' lowercased words (``\\w+``), ``|A & B| / |A | B|``, is at least a threshold,
    the one most accurate on ``train`` (the smallest of equals).

    Args:
        train: the `keras_largebatch.bert.finetuning.glue.Examples` that choose the threshold,
            of a pair task with labels 0 and 1.
        dev: the `keras_largebatch.bert.finetuning.glue.Examples` scored with it.

    Returns:
        ``{"threshold": t, "train_accuracy": ..., "dev_accuracy": ...}``.
    """
    train_overlaps, dev_overlaps = (
        [_overlap(first, second) for first, second in zip(examples.first, examples.second)]
        for examples in (train, dev)
    )
    train_labels, dev_labels = (examples.labels.tolist() for examples in (train, dev))

    def accuracy(threshold, overlaps, labels):
        right = sum(
            (overlap >= threshold) == bool(label) for overlap, label in zip(overlaps, labels)
        )
        return right / len(labels)

    # Every distinct overlap is a threshold to try, and one above them all (always 0).
    candidates = sorted(set(train_overlaps)) + [math.inf]
    threshold = max(candidates, key=lambda t: (accuracy(t, train_overlaps, train_labels), -t))
    return {
        "threshold": threshold,
        "train_accuracy": accuracy(threshold, train_overlaps, train_labels),
        "dev_accuracy": accuracy(threshold, dev_overlaps, dev_labels),
    }


def write_default_task(
    output_dir, num_train=DEFAULT_NUM_TRAIN, num_dev=DEFAULT_NUM_DEV, seed=DEFAULT_SEED
):
    """Writes ``output_dir/train.tsv`` and ``output_dir/dev.tsv`` of task ``next_sentence``.

    Written atomically: both files go into a sibling temporary directory, renamed to
    ``output_dir`` once complete. If ``output_dir`` already holds exactly the files these
    arguments give, nothing is written (a second call is a no-op).

    Args:
        output_dir: the task's directory (`glue.read_task` reads it as ``data.glue_dir``); its
            parent is created if needed. It must not exist, be empty, or hold this very task.
        num_train: examples in the train split, an even number from 4 (half of each class).
        num_dev: examples in the dev split, an even number from 4.
        seed: the seed of the choice of docstrings, of the negatives and of the order.

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
    try:
        with _files.new_directory(output_dir) as temporary_dir:
            for filename, text in contents.items():
                _files.write_text(os.path.join(temporary_dir, filename), text)
    except FileExistsError:
        # Another process wrote it first.
        return _same_task_or_raise(output_dir, contents)
    return output_dir


def _check_sizes(num_train, num_dev, seed):
    for name, value in (("num_train", num_train), ("num_dev", num_dev)):
        # Two pairs at least, from two docstrings, to take each other's second sentence.
        _checks.check_integer(name, value, low=4)
        if value % 2:
            raise ValueError(
                f"{name} must be even (each pair of sentences gives one example of each class), "
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
    """WNLI's layout with a source column: a header, then index, source, A, B, label."""
    lines = ["\t".join(HEADER) + "\n"]
    for index, (module_name, first, second, label) in enumerate(rows):
        lines.append(f"{index}\t{module_name}\t{first}\t{second}\t{label}\n")
    return "".join(lines)


def _overlap(first, second):
    words = [set(re.findall(r"\w+", sentence.lower())) for sentence in (first, second)]
    union = words[0] | words[1]
    return len(words[0] & words[1]) / len(union) if union else 0.0


def _sentence_key(sentence):
    return " ".join(sentence.split()).lower()


def _is_candidate(sentence):
    words = sentence.split()
    return (
        MIN_SENTENCE_WORDS <= len(words) <= MAX_SENTENCE_WORDS
        and sentence[-1] in ".?!"
        and not words[0].endswith(":")
    )


def _other_docstring_permutation(docstrings, rng):
    """A permutation ``p`` of ``range(len(docstrings))`` with ``docstrings[p[i]] !=
    docstrings[i]`` for every ``i``: pair ``i``'s negative takes pair ``p[i]``'s B.

    Drawn at random, then each position whose draw falls in its own docstring ``c`` swaps with
    a position ``o`` outside ``c`` whose draw is outside ``c`` too. Such an ``o`` exists when
    no docstring holds more than half the positions: of the ``n - n_c >= n_c`` positions
    outside ``c``, at most ``n_c - 1`` hold a draw from ``c``. The swap fixes the position and
    breaks none.
    """
    size = len(docstrings)
    permutation = list(range(size))
    rng.shuffle(permutation)
    for position in range(size):
        own = docstrings[position]
        if docstrings[permutation[position]] != own:
            continue
        other = rng.choice(
            [
                other
                for other in range(size)
                if docstrings[other] != own and docstrings[permutation[other]] != own
            ]
        )
        permutation[position], permutation[other] = permutation[other], permutation[position]
    return permutation


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
