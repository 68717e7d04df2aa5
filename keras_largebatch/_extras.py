"""Which extra each optional feature needs, and the one-line error that names it.

The core, `keras_largebatch.optimizers`, `schedules`, `scaling` and `callbacks`, needs Keras and
NumPy only and runs on every Keras backend. The rest needs an extra,
``pip install "keras-largebatch[EXTRA]"``, or from a checkout ``pip install -e ".[EXTRA]"``
(`install_command` gives the line that fits how this copy was installed):

* ``tensorflow``: TensorFlow, for `keras_largebatch.distribute` and the training harness (its
  input pipelines are `tf.data` on every backend), and PyYAML for the harness's configs;
* ``bert``: that, keras-hub and tensorflow-text (which learns WordPiece vocabularies), for
  BERT pretraining;
* ``vision``: that and keras-hub, for image classification;
* ``plot``: matplotlib and PyYAML (for ``--config``), for ``keras-largebatch-plot-schedule``.
"""

import importlib.metadata
import importlib.util
import json
import os
import sys
import urllib.parse
import urllib.request

# The modules each extra installs, as setup.cfg's [options.extras_require] lists their
# distributions (tests/test_extras.py checks that the two agree).
EXTRA_MODULES = {
    "tensorflow": ("tensorflow", "yaml"),
    "bert": ("tensorflow", "yaml", "keras_hub", "tensorflow_text"),
    "vision": ("tensorflow", "yaml", "keras_hub"),
    "plot": ("matplotlib", "yaml"),
}
# Module -> the distribution pip installs it from.
DISTRIBUTIONS = {
    "keras_hub": "keras-hub",
    "matplotlib": "matplotlib",
    "tensorflow": "tensorflow",
    "tensorflow_text": "tensorflow-text",
    "yaml": "pyyaml",
}


DISTRIBUTION = "keras-largebatch"
# The package's directory; its parent is a checkout when it holds setup.cfg beside it.
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def install_command(extra):
    """The pip line that adds ``extra`` to this copy of the package, as it was installed:

    * imported from a checkout (installed editable, ``pip install -e DIR``, or only on the
      path): ``pip install -e "DIR[extra]"``;
    * installed from a wheel file that is still where pip read it: ``pip install
      "WHEEL[extra]"``;
    * otherwise (from the package registry): ``pip install "keras-largebatch[extra]"``.

    A checkout is the package's parent directory when it holds ``setup.cfg``; the wheel is
    read from the distribution's ``direct_url.json`` (PEP 610), which pip writes for an
    install from a file, and not for one from the registry.
    """
    checkout = os.path.dirname(_PACKAGE_DIR)
    if os.path.isfile(os.path.join(checkout, "setup.cfg")):
        return f'pip install -e "{checkout}[{extra}]"'
    wheel = _installed_from_file()
    if wheel is not None:
        return f'pip install "{wheel}[{extra}]"'
    return f'pip install "{DISTRIBUTION}[{extra}]"'


def _installed_from_file():
    """The local file pip installed this distribution from, if it is still there, else None."""
    try:
        text = importlib.metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
        direct_url = json.loads(text) if text else {}
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None
    url = direct_url.get("url", "") if isinstance(direct_url, dict) else ""
    if not str(url).startswith("file:") or "archive_info" not in direct_url:
        return None
    path = urllib.request.url2pathname(urllib.parse.urlparse(url).path)
    return path if os.path.isfile(path) else None


class MissingExtraError(ModuleNotFoundError):
    """``feature`` needs ``extra``, which is not (wholly) installed; ``reason`` says what is
    missing. A ModuleNotFoundError, so that code catching the import's error still does."""

    def __init__(self, feature, extra, reason, name=None):
        install = install_command(extra)
        super().__init__(f"{feature} needs the {extra} extra ({reason}): {install}", name=name)
        self.extra = extra


def missing_extra(feature, extra, error):
    """The MissingExtraError to raise, from ``error``, when importing a module of ``extra``
    for ``feature`` failed with the ModuleNotFoundError ``error``."""
    return MissingExtraError(feature, extra, str(error), name=error.name)


def missing_modules(extra):
    """The modules of ``extra`` that are not installed; looked up, not imported."""
    return [module for module in EXTRA_MODULES[extra] if importlib.util.find_spec(module) is None]


def exit_unless_installed(prog, extra, parser=None, argv=None):
    """Ends the command ``prog`` when a module of ``extra`` is not installed, with one line on
    stderr and exit status 2, as its other errors. Its ``main`` calls this first, before any
    work and before anything imports TensorFlow.

    Given the command's ``parser`` (one that imports nothing of the extra), ``argv`` is parsed
    first, so that ``--help`` prints and a usage error is reported without the extra, and the
    parsed arguments are returned (the command parses its line once).
    """
    args = None if parser is None else parser.parse_args(argv)
    missing = missing_modules(extra)
    if not missing:
        return args
    names = [DISTRIBUTIONS[module] for module in missing]
    verb = "is" if len(names) == 1 else "are"
    reason = f"{_join(names)} {verb} not installed"
    error = MissingExtraError("the command", extra, reason, name=missing[0])
    print(f"{prog}: error: {error}", file=sys.stderr)
    raise SystemExit(2)


def _join(names):
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
