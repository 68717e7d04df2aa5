"""Run Python code as on a machine where some packages are not installed.

    python -m tests.support.without_modules tensorflow,keras_hub MODULE [ARGUMENT ...]
    python -m tests.support.without_modules tensorflow -c CODE

runs ``python -m MODULE ARGUMENT ...`` (or ``python -c CODE``) in this process after wrapping
every finder of `sys.meta_path` so that none finds the named top-level packages or anything
under them: importing one raises ModuleNotFoundError and `importlib.util.find_spec` returns
None, as on a machine without them, however installed they are here. The tests of the extras
(tests/test_extras.py) run the commands and the core so.
"""

import runpy
import sys


class HidingFinder:
    """``finder``, except that it finds nothing in the top-level packages ``names``."""

    def __init__(self, finder, names):
        self.finder = finder
        self.names = names

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] in self.names:
            return None
        return self.finder.find_spec(fullname, path, target)

    def __getattr__(self, name):
        # The rest of the finder's interface (invalidate_caches, find_distributions, ...).
        return getattr(self.finder, name)


def main():
    names, *arguments = sys.argv[1:]
    hidden = frozenset(names.split(","))
    imported = sorted(name for name in hidden if name in sys.modules)
    if imported:
        raise SystemExit(f"already imported, so they cannot be hidden: {imported}")
    sys.meta_path[:] = [HidingFinder(finder, hidden) for finder in sys.meta_path]
    if arguments[0] == "-c":
        sys.argv = ["-c", *arguments[2:]]
        exec(compile(arguments[1], "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = arguments
        runpy.run_module(arguments[0], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
