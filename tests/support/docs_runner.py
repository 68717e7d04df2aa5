"""Runs documentation blocks: ``python docs_runner.py PAGES.json``.

``PAGES.json`` is a list of pages, each ``{"page", "directory", "blocks"}`` with blocks
``{"line", "code"}``. Each page's blocks run in order in a namespace of the page's own, in its
own working directory, each compiled under the page's name with its lines where they are on the
page, so a traceback points at the page. A page whose block fails stops there; the next page
still runs. Before each block the runner prints `MARKER`, the page's and the block's index on a
line of their own to stdout, so that what each block printed can be told apart, and after a
page `MARKER`, its index and ``ok`` or ``failed``. Exits 1 if a page failed.
"""

import json
import os
import sys
import traceback

MARKER = "\x1e docs"


def run_page(index, page):
    """Runs one page's blocks; True if every block ran."""
    os.makedirs(page["directory"], exist_ok=True)
    os.chdir(page["directory"])
    if "keras" in sys.modules:  # the Keras state an earlier page left (names, the graph)
        sys.modules["keras"].backend.clear_session()
    namespace = {"__name__": "__main__"}
    for number, block in enumerate(page["blocks"]):
        print(f"{MARKER} {index} {number}", flush=True)
        code = compile("\n" * (block["line"] - 1) + block["code"], page["page"], "exec")
        try:
            exec(code, namespace)
        except BaseException:
            sys.stdout.flush()
            print(f"{MARKER} {index} {page['page']}:{block['line']}: failed", file=sys.stderr)
            traceback.print_exc()
            sys.stderr.flush()
            return False
        sys.stdout.flush()
    return True


def main(path):
    with open(path, encoding="utf-8") as file:
        pages = json.load(file)
    failed = False
    for index, page in enumerate(pages):
        ran = run_page(index, page)
        print(f"{MARKER} {index} {'ok' if ran else 'failed'}", flush=True)
        failed = failed or not ran
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
