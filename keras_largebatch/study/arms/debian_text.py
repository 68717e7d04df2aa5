"""English prose from the documentation that Debian packages ship: the masked-LM arm's corpus,
read offline.

The packages of `SOURCES` are installed by the study itself (`ensure_installed`, the way the
project's CI installs Fashion-MNIST's package), never downloaded any other way. A source is a
directory of one package and the file endings read there, in the format the package ships:
gzipped reStructuredText or plain text (the kernel's ``Documentation/``), Sphinx's
reStructuredText sources (``_sources/*.rst.txt``), or rendered HTML pages, of which the
paragraphs (``<p>``) are read. Every file is one document. Its prose paragraphs are kept and split
into sentences by the embedded corpus's reader (`keras_largebatch.bert.data.corpus
.prose_sentences`), so code, grammar, tables and headings are dropped. Sources are read in the
order listed and files in sorted path order, so a machine with the same package versions reads
the same corpus.
"""

import dataclasses
import gzip
import html.parser
import os
import subprocess

from keras_largebatch.bert.data.corpus import prose_sentences


@dataclasses.dataclass(frozen=True)
class Source:
    """One directory of a package's documentation: the files under ``directory`` whose names
    end with one of ``suffixes``, except those under a directory named in ``excluded``."""

    package: str
    directory: str
    suffixes: tuple
    excluded: tuple = ()


_RUST = "/usr/share/doc/rust-doc/html"
# English manuals and API references of Debian 12 ("bookworm"), chosen for their prose and for
# installing without a desktop or a runtime. Translations are left out.
SOURCES = (
    Source(
        "linux-doc-6.1",
        "/usr/share/doc/linux-doc-6.1/Documentation",
        (".rst.gz", ".txt.gz"),
        excluded=("translations",),
    ),
    Source("python3.11-doc", "/usr/share/doc/python3.11/html/_sources", (".rst.txt",)),
    Source("qtbase5-doc-html", "/usr/share/qt5/doc", (".html",)),
    Source("openjdk-17-doc", "/usr/share/doc/openjdk-17-jre-headless/api", (".html",)),
    Source("postgresql-doc-15", "/usr/share/doc/postgresql-doc-15/html", (".html",)),
    Source("libboost1.74-doc", "/usr/share/doc/libboost1.74-doc", (".html",)),
    Source("python-sqlalchemy-doc", "/usr/share/doc/python-sqlalchemy-doc/html", (".html",)),
    Source("llvm-15-doc", "/usr/share/doc/llvm-15-doc/html", (".html",)),
    Source("python-scipy-doc", "/usr/share/doc/python-scipy-doc/html", (".html",)),
    Source("python-django-doc", "/usr/share/doc/python-django-doc/html", (".html",)),
    Source("python-pandas-doc", "/usr/share/doc/python-pandas-doc/html", (".html",)),
    Source("python-sympy-doc", "/usr/share/doc/python-sympy-doc/html", (".html",)),
    Source("python-astropy-doc", "/usr/share/doc/python-astropy-doc/html", (".html",)),
    Source("octave-doc", "/usr/share/doc/octave/octave.html", (".html",)),
    Source("sqlite3-doc", "/usr/share/doc/sqlite3", (".html",)),
    Source("git-doc", "/usr/share/doc/git-doc", (".html",)),
    Source("nodejs-doc", "/usr/share/doc/nodejs", (".html",)),
    *(
        Source("libglib2.0-doc", f"/usr/share/gtk-doc/html/{library}", (".html",))
        for library in ("glib", "gobject", "gio")
    ),
    *(
        Source("libgtk-3-doc", f"/usr/share/gtk-doc/html/{library}", (".html",))
        for library in ("gtk3", "gdk3")
    ),
    Source("libvirt-doc", "/usr/share/doc/libvirt-doc/html", (".html",)),
    Source("erlang-doc", "/usr/share/doc/erlang-doc", (".html",)),
    Source("python-sklearn-doc", "/usr/share/doc/python-sklearn-doc/html", (".html",)),
    # The books and the standard library; `core` repeats `std` and the architectures'
    # intrinsics page by page.
    *(
        Source("rust-doc", f"{_RUST}/{book}", (".html",))
        for book in ("book", "reference", "nomicon", "rustc", "embedded-book", "std")
    ),
)

INSTALL_COMMAND = "apt-get update -qq && apt-get install -y -qq"


def is_installed(package):
    """True when dpkg reports ``package`` installed (False where there is no dpkg)."""
    try:
        result = subprocess.run(
            ["dpkg-query", "--show", "--showformat=${Status}", package],
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        return False
    return result.returncode == 0 and result.stdout.strip() == "install ok installed"


def missing_packages(sources=SOURCES):
    """The packages of ``sources`` that are not installed, in order, each once."""
    packages = dict.fromkeys(source.package for source in sources)
    return [package for package in packages if not is_installed(package)]


def package_versions(sources=SOURCES):
    """``{package: version}`` of the installed packages of ``sources`` (what decides the
    text read from them)."""
    packages = list(dict.fromkeys(source.package for source in sources))
    result = subprocess.run(
        ["dpkg-query", "--show", "--showformat=${Package} ${Version}\\n", *packages],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(line.split(" ", 1) for line in result.stdout.splitlines())


def install_command(packages):
    """The shell command that installs ``packages``: what `ensure_installed` runs as root."""
    return f"{INSTALL_COMMAND} {' '.join(packages)}"


def ensure_installed(sources=SOURCES):
    """Installs the packages of ``sources`` that are missing (``apt-get install -y -qq``, after
    ``apt-get update -qq``) and returns their names. Not root, it raises PermissionError naming
    the command to run instead; a failed ``apt-get`` raises CalledProcessError."""
    missing = missing_packages(sources)
    if not missing:
        return []
    if os.geteuid() != 0:
        raise PermissionError(
            f"the Debian documentation corpus needs the packages {missing}, which are not "
            f"installed, and installing them needs root: run `sudo sh -c "
            f"'{install_command(missing)}'`"
        )
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True)
    return missing


def source_files(source):
    """The files of ``source``, sorted by path; FileNotFoundError when its directory is
    missing (the package is not installed, or its layout changed)."""
    if not os.path.isdir(source.directory):
        raise FileNotFoundError(
            f"{source.directory} (package {source.package}) is not a directory: install the "
            f"package with `{install_command([source.package])}`"
        )
    paths = []
    for directory, subdirectories, names in os.walk(source.directory):
        subdirectories[:] = [name for name in subdirectories if name not in source.excluded]
        paths.extend(
            os.path.join(directory, name) for name in names if name.endswith(source.suffixes)
        )
    return sorted(paths)


def read_text(path):
    """The text of ``path``, gunzipped when its name ends in ``.gz``; bytes that are not
    UTF-8 read as U+FFFD."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as stream:
        return stream.read()


class _Paragraphs(html.parser.HTMLParser):
    """Collects the text of each ``<p>`` element, without scripts, styles and preformatted
    blocks inside it."""

    _SKIPPED = ("script", "style", "pre")

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.paragraphs = []
        self._current = None
        self._skipping = 0

    def handle_starttag(self, tag, attrs):
        if tag in self._SKIPPED:
            self._skipping += 1
        elif tag == "p":
            self._close()
            self._current = []

    def handle_endtag(self, tag):
        if tag in self._SKIPPED:
            self._skipping = max(0, self._skipping - 1)
        elif tag in ("p", "div", "body", "td", "li", "dd"):
            # HTML lets a </p> be left out; an enclosing block's end closes the paragraph.
            self._close()

    def handle_data(self, data):
        if self._current is not None and not self._skipping:
            self._current.append(data)

    def close(self):
        super().close()
        self._close()

    def _close(self):
        if self._current is not None:
            text = " ".join("".join(self._current).split())
            if text:
                self.paragraphs.append(text)
            self._current = None


def html_paragraphs(text):
    """The paragraphs (``<p>`` elements) of an HTML page, each as one line of text with its
    character references decoded and its whitespace collapsed."""
    parser = _Paragraphs()
    parser.feed(text)
    parser.close()
    return parser.paragraphs


def document_sentences(path):
    """The prose sentences of one documentation file (module docstring), by its format:
    HTML for names ending in ``.html`` (``.html.gz``), reStructuredText or plain text else."""
    text = read_text(path)
    if path.endswith((".html", ".html.gz")):
        text = "\n\n".join(html_paragraphs(text))
    return prose_sentences(text)


def read_documents(sources=SOURCES):
    """The corpus: one document (a list of sentences) per file of ``sources`` that holds
    prose, sources in order, files in sorted path order."""
    documents = []
    for source in sources:
        for path in source_files(source):
            sentences = document_sentences(path)
            if sentences:
                documents.append(sentences)
    return documents


def debian_documents(sources=SOURCES):
    """`read_documents` after `ensure_installed`: the corpus, installing what it needs."""
    ensure_installed(sources)
    return read_documents(sources)
