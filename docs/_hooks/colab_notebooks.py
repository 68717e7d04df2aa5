"""MkDocs hook: the notebooks of colab/ become pages under notebooks/, shown executed.

The notebooks live in colab/ (where Colab opens them and the tests execute them), outside the
docs directory, stored without outputs. This executes each at smoke size, as the tests do
(papermill with ``SMOKE_TEST=True``, on this machine's CPU), puts a line at its top that says so
and links the download of the executed copy, and adds that copy as the page
``notebooks/NAME.ipynb``, which mkdocs-jupyter renders as it renders any notebook page.

An executed copy is kept in ``.cache/notebooks/NAME-HASH/`` (the hash of the notebook), so a
rebuild (``mkdocs serve``) executes only a notebook that changed. With
``KERAS_LARGEBATCH_DOCS_EXECUTE=0``, or where papermill is not installed, the notebooks are shown
as stored, unexecuted, and the build says so.
"""

import hashlib
import logging
import os
import pathlib
import tempfile

import mkdocs.plugins
from mkdocs.structure.files import File

NOTEBOOK_DIRECTORY = "colab"
SITE_DIRECTORY = "notebooks"
CACHE_DIRECTORY = pathlib.Path(".cache") / "notebooks"
EXECUTE_ENV = "KERAS_LARGEBATCH_DOCS_EXECUTE"
_LOG = logging.getLogger("mkdocs.hooks.colab_notebooks")
_NOTE = (
    "*This page shows the notebook executed at smoke size (`SMOKE_TEST=True`) on a CPU when the "
    "site was built; on a TPU or GPU runtime it trains at full size. "
    "[Download it]({name}) with these outputs, or open `colab/{name}` from the repository.*"
)


class _NotebookPage(File):
    """A notebook read from outside the docs directory, built as a page."""

    def is_documentation_page(self):
        return True


def _executed(notebook, root):
    """The executed copy of ``notebook`` (made now unless the cache holds it), or None when
    notebooks are not executed."""
    if os.environ.get(EXECUTE_ENV, "1") == "0":
        return None
    try:
        import nbformat
        import papermill
    except ModuleNotFoundError as error:
        _LOG.info("notebooks shown unexecuted: %s (install the docs extra)", error)
        return None
    digest = hashlib.sha256(notebook.read_bytes()).hexdigest()[:16]
    # Under its own name (mkdocs-jupyter offers the page's source for download by its name),
    # in a directory named by the hash.
    cache = root / CACHE_DIRECTORY / f"{notebook.stem}-{digest}"
    executed = cache / notebook.name
    if executed.exists():
        return executed
    cache.mkdir(parents=True, exist_ok=True)
    _LOG.info("executing %s at smoke size for the site", notebook.name)
    with tempfile.TemporaryDirectory(prefix="notebook-") as work:
        output = pathlib.Path(work) / notebook.name
        # Every directory parameter (OUTPUT_DIR, DATA_DIR ...) relative to a temporary working
        # directory: nothing is written outside it, and the page shows no path of this machine.
        directories = {name: name.lower() for name in _parameter_names(notebook, nbformat)}
        papermill.execute_notebook(
            str(notebook),
            str(output),
            parameters={"SMOKE_TEST": True, **directories},
            kernel_name="python3",
            cwd=work,
            progress_bar=False,
        )
        document = nbformat.read(str(output), as_version=4)
        document.cells.insert(0, nbformat.v4.new_markdown_cell(_NOTE.format(name=notebook.name)))
        # Written under a name of this process, then renamed: a build that stops midway leaves
        # no half-written copy in the cache.
        partial = cache / f".{executed.name}.{os.getpid()}"
        nbformat.write(document, str(partial))
        os.replace(partial, executed)
    return executed


def _parameter_names(notebook, nbformat):
    """The names ending in ``_DIR`` that the notebook's parameters cell assigns."""
    document = nbformat.read(str(notebook), as_version=4)
    names = []
    for cell in document.cells:
        if cell.cell_type == "code" and "parameters" in cell.metadata.get("tags", []):
            for line in cell.source.splitlines():
                name = line.split("=", 1)[0].strip()
                if "=" in line and name.isidentifier() and name.endswith("_DIR"):
                    names.append(name)
    return names


# After mkdocs-jupyter's own on_files (priority 0), which wraps the notebooks it finds in the
# docs directory; these are pages already.
@mkdocs.plugins.event_priority(-100)
def on_files(files, config):
    root = pathlib.Path(config.config_file_path).parent
    for notebook in sorted((root / NOTEBOOK_DIRECTORY).glob("*.ipynb")):
        source = _executed(notebook, root) or notebook
        files.append(
            _NotebookPage.generated(
                config, f"{SITE_DIRECTORY}/{notebook.name}", abs_src_path=str(source)
            )
        )
    return files
