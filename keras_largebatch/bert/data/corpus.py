"""The embedded default corpus: English prose that every Python installation carries.

The text comes from CPython itself, so it is available offline on any machine and needs no
download: the language-reference topics of ``pydoc_data.topics`` (the text behind ``help("if")``)
followed by the docstrings of a fixed list of pure-Python standard-library modules. Docstrings are
read from the module sources with :mod:`ast`; no module is imported, so building the corpus runs
none of their code.

The output follows the input format of google-research/bert's ``create_pretraining_data.py``:
one sentence per line, a blank line between documents. One pydoc topic is one document; one
module's docstrings (module, classes, functions, in source order) are one document. Only prose
paragraphs are kept: grammar productions, code examples and headings are dropped. The result is
deterministic for a given Python version (the text changes with the standard library, not
between runs or machines).
"""

import ast
import importlib.util
import os
import pydoc_data.topics
import re

from keras_largebatch import _files

# Pure-Python modules with long prose docstrings, present in CPython 3.10 through 3.13. Listed
# explicitly (not discovered) so the corpus does not depend on what else is installed.
DOCSTRING_MODULES = (
    "argparse",
    "ast",
    "asyncio",
    "base64",
    "bdb",
    "calendar",
    "cmd",
    "codecs",
    "collections",
    "concurrent",
    "configparser",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "doctest",
    "email",
    "enum",
    "filecmp",
    "fnmatch",
    "fractions",
    "ftplib",
    "functools",
    "getopt",
    "gettext",
    "glob",
    "gzip",
    "heapq",
    "hmac",
    "html",
    "http",
    "imaplib",
    "inspect",
    "ipaddress",
    "json",
    "locale",
    "logging",
    "mailbox",
    "multiprocessing",
    "netrc",
    "numbers",
    "optparse",
    "os",
    "pathlib",
    "pdb",
    "pickle",
    "pickletools",
    "platform",
    "plistlib",
    "poplib",
    "pprint",
    "profile",
    "pstats",
    "queue",
    "random",
    "re",
    "reprlib",
    "sched",
    "secrets",
    "selectors",
    "shelve",
    "shlex",
    "shutil",
    "smtplib",
    "socket",
    "socketserver",
    "ssl",
    "statistics",
    "string",
    "subprocess",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "timeit",
    "tokenize",
    "trace",
    "traceback",
    "turtle",
    "typing",
    "unittest",
    "urllib",
    "uuid",
    "warnings",
    "wave",
    "weakref",
    "webbrowser",
    "xml",
    "zipfile",
    "zipimport",
)

DEFAULT_CORPUS_FILENAME = "default_corpus.txt"

_HEADING_UNDERLINE = re.compile(r"^\s*([*=\-~^#+])\1{2,}\s*$")
_LIST_MARKER = re.compile(r"^(?:[*\-+]|\d+\.|\(\w\))\s+")
# A sentence ends at . ! or ? (optionally followed by a closing quote or bracket) when the next
# word starts like a sentence; "e.g." and "i.e." are excluded because they never end one.
_SENTENCE_BOUNDARY = re.compile(
    r"(?<!\be\.g\.)(?<!\bi\.e\.)(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[A-Z\"'(])"
)
_MIN_SENTENCE_WORDS = 3


def default_corpus_documents():
    """Returns the default corpus as a list of documents, each a list of sentence strings.

    Documents are the pydoc topics in sorted key order, then one document per module of
    ``DOCSTRING_MODULES`` (modules missing from this Python are skipped). Documents with fewer
    than two sentences are dropped, because a next-sentence pair needs two.
    """
    texts = [pydoc_data.topics.topics[key] for key in sorted(pydoc_data.topics.topics)]
    for module_name in DOCSTRING_MODULES:
        docstrings = _module_docstrings(module_name)
        if docstrings:
            texts.append("\n\n".join(docstrings))
    documents = [prose_sentences(text) for text in texts]
    return [sentences for sentences in documents if len(sentences) >= 2]


def write_default_corpus(output_dir):
    """Writes the default corpus to ``output_dir/default_corpus.txt`` and returns that path.

    The file holds one sentence per line and a blank line between documents. ``output_dir`` is
    created if needed; an existing corpus file is replaced (its content is a pure function of the
    Python installation, so it is never user data).
    """
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, DEFAULT_CORPUS_FILENAME)
    text = "\n\n".join("\n".join(sentences) for sentences in default_corpus_documents())
    return _files.write_text(path, text + "\n")


def _module_docstrings(module_name):
    """Docstrings of a top-level module's source file, module first, then in source order."""
    spec = importlib.util.find_spec(module_name)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return []
    with open(spec.origin, encoding="utf-8") as source_file:
        tree = ast.parse(source_file.read())
    nodes = [tree] + [
        node
        for node in ast.walk(tree)
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    docstrings = (ast.get_docstring(node) for node in nodes)
    return [docstring for docstring in docstrings if docstring]


def prose_sentences(text):
    """The sentences of reST-like ``text`` (a docstring, a documentation topic): its prose
    paragraphs only (no code, grammar or headings), joined across line breaks and split at
    sentence ends, each of at least three words. The pretraining corpus and the fine-tuning
    default (`keras_largebatch.bert.finetuning.default_task`) read text through it alike."""
    sentences = []
    for paragraph in _paragraphs(text):
        if not _is_prose(paragraph):
            continue
        for sentence in _SENTENCE_BOUNDARY.split(paragraph):
            if len(sentence.split()) >= _MIN_SENTENCE_WORDS:
                sentences.append(sentence)
    return sentences


def _paragraphs(text):
    """Yields blank-line separated paragraphs as single lines, without headings or list markers."""
    lines = []
    for line in text.splitlines() + [""]:
        if _HEADING_UNDERLINE.match(line):
            # The line above an underline is a heading, not part of a sentence.
            lines = lines[:-1]
        elif line.strip():
            lines.append(line.strip())
        elif lines:
            yield _LIST_MARKER.sub("", " ".join(lines))
            lines = []


def _is_prose(paragraph):
    """True for a paragraph that reads as English sentences rather than code or grammar."""
    if "::=" in paragraph or ">>>" in paragraph or "..." in paragraph[:4]:
        return False
    if not (paragraph[0].isupper() or paragraph[0] == '"') or paragraph[-1] not in '.:!?)"':
        return False
    letters_and_spaces = sum(char.isalpha() or char == " " for char in paragraph)
    return letters_and_spaces >= 0.8 * len(paragraph)
