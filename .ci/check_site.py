"""Checks the built documentation site in a headless browser: search answers, and screenshots
of the pages to look at.

    python -m mkdocs build --strict --site-dir /tmp/site
    python .ci/check_site.py /tmp/site --screenshots /tmp/shots

Serves the site on 127.0.0.1 (the search index is fetched by a web worker, which a page opened
from file:// cannot start), types each query into the search box as a reader would, and exits 1
unless every query finds at least one page. Then it saves a screenshot of each page named by
``--pages`` (default: the home page, the how-to page, a notebook and an API page).

Needs a Chromium (Debian: ``apt-get install chromium``) and the ``playwright`` package, which
drives it (``pip install playwright``; no browser download is needed with ``--chromium``). Not a
test: the test suite must pass without a browser. Run by hand before a release of the docs.
"""

import argparse
import functools
import http.server
import pathlib
import shutil
import sys
import threading

DEFAULT_QUERIES = ("trust ratio", "gradient accumulation", "WarmupPolynomialDecay")
DEFAULT_PAGES = ("", "how-to/", "notebooks/quickstart/", "api/optimizers/")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


def _serve(site):
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", type=pathlib.Path, help="the built site's directory")
    parser.add_argument("--screenshots", type=pathlib.Path, help="directory for the screenshots")
    parser.add_argument("--queries", nargs="+", default=DEFAULT_QUERIES)
    parser.add_argument("--pages", nargs="+", default=DEFAULT_PAGES)
    parser.add_argument(
        "--chromium",
        default=shutil.which("chromium") or shutil.which("chromium-browser"),
        help="the Chromium executable (default: chromium on the PATH)",
    )
    parser.add_argument("--wait", type=float, default=15.0, help="seconds a query may take")
    args = parser.parse_args(argv)
    if not (args.site / "search" / "search_index.json").is_file():
        parser.error(f"site {str(args.site)!r} holds no search/search_index.json: build it first")
    if not args.chromium:
        parser.error("no Chromium found: install one (apt-get install chromium) or pass --chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ModuleNotFoundError:
        parser.error("the playwright package is not installed: pip install playwright")
    if args.screenshots is not None:
        args.screenshots.mkdir(parents=True, exist_ok=True)

    server, address = _serve(args.site)
    failed = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=args.chromium, args=["--no-sandbox"]
            )
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            for query in args.queries:
                page.goto(address)
                # As a reader: the page settled (the worker has its index), then keystrokes.
                page.wait_for_load_state("networkidle")
                page.click("input.md-search__input")
                page.keyboard.type(query, delay=30)
                meta = page.locator(".md-search-result__meta")
                try:
                    page.wait_for_function(
                        "() => /matching document/.test("
                        "document.querySelector('.md-search-result__meta').innerText)",
                        timeout=args.wait * 1000,
                    )
                    found = meta.inner_text()
                except Exception:  # noqa: BLE001 (a timeout: reported as the text shown)
                    found = meta.inner_text()
                ok = "matching document" in found and not found.startswith("No ")
                print(f"search {query!r}: {found}")
                if not ok:
                    failed.append(query)
                if args.screenshots is not None:
                    name = "search-" + "-".join(query.lower().split()) + ".png"
                    page.screenshot(path=str(args.screenshots / name))
            for path in args.pages if args.screenshots is not None else ():
                page.goto(address + path)
                page.wait_for_load_state("networkidle")
                name = (path.strip("/").replace("/", "-") or "home") + ".png"
                page.screenshot(path=str(args.screenshots / name), full_page=True)
                print(f"screenshot {address + path} -> {args.screenshots / name}")
            browser.close()
            for error in errors:
                print(f"page error: {error}")
    finally:
        server.shutdown()
    if failed:
        print(f"search found nothing for {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
