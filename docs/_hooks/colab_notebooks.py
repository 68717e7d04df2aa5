"""MkDocs hook: the notebooks of colab/ become pages under notebooks/, read where they are.

The notebooks live in colab/ (where Colab opens them and the tests execute them), outside the
docs directory. This adds each as the page ``notebooks/NAME.ipynb``, which mkdocs-jupyter then
renders as it renders any notebook page (without executing it).
"""

import pathlib

import mkdocs.plugins
from mkdocs.structure.files import File

NOTEBOOK_DIRECTORY = "colab"
SITE_DIRECTORY = "notebooks"


class _NotebookPage(File):
    """A notebook read from outside the docs directory, built as a page."""

    def is_documentation_page(self):
        return True


# After mkdocs-jupyter's own on_files (priority 0), which wraps the notebooks it finds in the
# docs directory; these are pages already.
@mkdocs.plugins.event_priority(-100)
def on_files(files, config):
    root = pathlib.Path(config.config_file_path).parent
    for notebook in sorted((root / NOTEBOOK_DIRECTORY).glob("*.ipynb")):
        files.append(
            _NotebookPage.generated(
                config, f"{SITE_DIRECTORY}/{notebook.name}", abs_src_path=str(notebook)
            )
        )
    return files
