"""The documentation is true: its examples run, its reference is complete, the README is short.

* Every ```python block of README.md and docs/ that is not marked ``<!-- fragment -->`` runs, a
  page's blocks in order in one fresh process (`tests/support/docs_blocks.py` says how blocks
  are marked), and prints what the ```text block after it shows.
* Every public class and function of the package has an entry in the API reference (a
  ``::: module`` directive of docs/api/ that renders it) and a docstring to render.
* The README is short, shows the two commands CI runs, links only to files that exist and shows
  no image (its relative paths break in the package's long description on PyPI).
* No page names a path of the machine the docs were written on or a commit hash; every
  benchmark script is on the Benchmarks page with its command.

`mkdocs build --strict`, which fails on a broken link or anchor, a page missing from the nav and
an API name that does not resolve, runs in .ci/run.
"""

import ast
import concurrent.futures
import configparser
import json
import os
import re
import subprocess
import sys

import pytest

from tests.support import docs_blocks
from tests.support.docs_runner import MARKER
from tests.support.runs import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
GETTING_STARTED = DOCS / "getting-started.md"
PACKAGE = ROOT / "keras_largebatch"
RUNNER = ROOT / "tests" / "support" / "docs_runner.py"
SESSIONS = docs_blocks.sessions(PAGES, ROOT)
SESSION_TIMEOUT = 240
INSTALL_COMMAND = (
    'python -m pip install -e ".[bert]" && python -m keras_largebatch.bert.pretraining'
)
TEST_COMMAND = (
    'python -m pip install -e ".[test]" && python -m pytest -q -n 2 --dist loadfile tests'
)
# Named in the issue that asked for the reference: each must have an entry of its own.
REQUIRED_ENTRIES = (
    "keras_largebatch.optimizers.trust_ratio.ExclusionRule",
    "keras_largebatch.optimizers.trust_ratio.trust_ratio",
    "keras_largebatch.optimizers.lars.LARS.velocities",
    "keras_largebatch.schedules.warmup.warmup_ramp",
    "keras_largebatch.training.trainer.train",
    "keras_largebatch.training.recipe.Recipe",
    "keras_largebatch.bert.data.pretraining_data.create_default_pretraining_data",
    "keras_largebatch.bert.pretraining.model.BertPretrainer",
    "keras_largebatch.vision.fashion_mnist.load",
)


# === The blocks run ===


def _run_process(env, sessions, directory):
    """Runs the sessions of one environment in one process; returns its stdout and stderr."""
    directory.mkdir(parents=True)
    pages = [
        {
            "page": session.page,
            "directory": str(directory / f"page{index}"),
            "blocks": [{"line": block.line, "code": block.code} for block in session.blocks],
        }
        for index, session in enumerate(sessions)
    ]
    (directory / "pages.json").write_text(json.dumps(pages))
    process_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT))
    process_env.pop("KERAS_BACKEND", None)
    process_env.update(env)
    result = subprocess.run(
        [sys.executable, str(RUNNER), str(directory / "pages.json")],
        cwd=directory,
        env=process_env,
        capture_output=True,
        text=True,
        timeout=SESSION_TIMEOUT,
    )
    return result.stdout, result.stderr


@pytest.fixture(scope="module")
def session_results(tmp_path_factory):
    """``{session name: (ran, what each block printed, the page's stderr)}``, the sessions of
    each environment in one process, two processes at a time."""
    root = tmp_path_factory.mktemp("docs")
    by_env = {}
    for session in SESSIONS:
        by_env.setdefault(session.env, []).append(session)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            env: pool.submit(_run_process, env, sessions, root / f"process{index}")
            for index, (env, sessions) in enumerate(by_env.items())
        }
    results = {}
    for env, sessions in by_env.items():
        stdout, stderr = futures[env].result()
        for index, session in enumerate(sessions):
            results[session.name] = _page_result(index, len(session.blocks), stdout, stderr)
    return results


def _page_result(index, count, stdout, stderr):
    """``(ran, printed by each block, stderr)`` of page ``index`` of a process's output."""
    printed = [""] * count
    ran = False
    current = None
    # Not splitlines(): it also splits at the marker's record separator.
    for line in (line + "\n" for line in stdout.split("\n")):
        if line.startswith(f"{MARKER} "):
            page, _, rest = line[len(MARKER) + 1 :].strip().partition(" ")
            if int(page) == index and rest == "ok":
                ran = True
            current = int(rest) if int(page) == index and rest.isdigit() else None
        elif current is not None:
            printed[current] += line
    return ran, printed, stderr


@pytest.mark.parametrize("session", SESSIONS, ids=[session.name for session in SESSIONS])
def test_python_blocks_run_and_print_what_the_page_shows(session, session_results):
    ran, printed, stderr = session_results[session.name]
    assert ran, f"{session.name} failed:\n{stderr[-6000:]}"
    for block, output in zip(session.blocks, printed):
        if block.expected_output is not None:
            assert docs_blocks.outputs_match(block.expected_output, output), (
                f"{block.page}:{block.line}: the page shows\n{block.expected_output}\n"
                f"but the block printed\n{output}"
            )


def test_pages_have_blocks_to_run():
    pages = {session.page for session in SESSIONS}
    for page in ("README.md", "docs/getting-started.md", "docs/guides/harness.md"):
        assert page in pages
    for session in SESSIONS:
        assert session.blocks


def test_the_getting_started_example_is_the_readme_example_and_learns(session_results):
    (example,) = [b for b in docs_blocks.read_blocks(GETTING_STARTED, ROOT) if _runs(b)][:1]
    readme = [b for b in docs_blocks.read_blocks(README, ROOT) if _runs(b)]
    assert [block.code for block in readme] == [example.code]
    assert len(example.code.splitlines()) <= 25
    for session in SESSIONS:
        if session.blocks[0].code == example.code:
            output = session_results[session.name][1][0]
            accuracy = float(re.search(r"accuracy (\d\.\d+)", output).group(1))
            assert accuracy > 0.95, (session.name, output)


def _runs(block):
    return block.language == "python" and not block.fragment


# === The parser and the comparison the runs rely on ===


def test_blocks_are_read_with_their_directives_and_outputs(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "Text.\n\n```python\nprint(1)\n```\n\n```text\n1\n```\n\n<!-- fragment -->\n"
        "```python\nmodel.fit(...)\n```\n\n<!-- env: KERAS_BACKEND=jax A=b -->\n\n"
        "```python\nprint(2)\n```\n\nThen:\n\n```text\nnot an output\n```\n"
    )
    first, fragment, jax, text = docs_blocks.read_blocks(page, tmp_path)
    assert (first.line, first.code, first.expected_output) == (4, "print(1)\n", "1\n")
    assert fragment.fragment and not first.fragment and not jax.fragment
    assert jax.env == (("KERAS_BACKEND", "jax"), ("A", "b")) and jax.expected_output is None
    assert text.language == "text"
    sessions = docs_blocks.sessions([page], tmp_path)
    assert [(s.env, [b.code for b in s.blocks]) for s in sessions] == [
        ((), ["print(1)\n"]),
        ((("KERAS_BACKEND", "jax"), ("A", "b")), ["print(2)\n"]),
    ]


def test_outputs_match_words_exactly_and_numbers_closely():
    assert docs_blocks.outputs_match("loss 1.000  ok\n", "loss 1.02 ok")
    assert not docs_blocks.outputs_match("loss 1.000 ok", "loss 1.2 ok")
    assert not docs_blocks.outputs_match("loss 1.0 ok", "loss 1.0 okay")
    assert not docs_blocks.outputs_match("a\nb", "a")
    assert docs_blocks.outputs_match("[18, 18]", "[19, 17]")
    assert docs_blocks.outputs_match("step 0: 0.000000", "step 0: 0.000001")
    assert not docs_blocks.outputs_match("step 0: 0.000000", "step 0: 0.004")
    assert not docs_blocks.outputs_match("step 2000: 0.007000", "step 2000: 0.006000")
    assert docs_blocks.outputs_match("rate 5.0e-3", "rate 0.0051")


# === The API reference is complete ===


def _public_modules():
    """``(dotted name, path)`` of every module whose dotted name has no private part."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if any(part.startswith("_") for part in parts):
            continue
        yield ".".join(parts), path


def _public_objects():
    """``{dotted name: (its module, has a docstring)}`` of the classes and functions each
    public module defines (restricted to its ``__all__`` where it has one), and of their public
    methods that have a docstring (those without are Keras's hooks, overridden)."""
    objects = {}
    for module, path in _public_modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        exported = None
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and any(getattr(target, "id", "") == "__all__" for target in node.targets)
                and isinstance(node.value, (ast.List, ast.Tuple))
            ):
                exported = set(ast.literal_eval(node.value))
        for node in tree.body:
            if not isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                continue
            if node.name.startswith("_") or (exported is not None and node.name not in exported):
                continue
            objects[f"{module}.{node.name}"] = (module, bool(ast.get_docstring(node)))
            for member in node.body if isinstance(node, ast.ClassDef) else ():
                if isinstance(member, ast.FunctionDef) and not member.name.startswith("_"):
                    if ast.get_docstring(member):
                        objects[f"{module}.{node.name}.{member.name}"] = (module, True)
    return objects


def _api_directives():
    """``{identifier: renders submodules}`` of every ``::: identifier`` in docs/api/."""
    directives = {}
    for page in sorted((DOCS / "api").rglob("*.md")):
        lines = page.read_text(encoding="utf-8").splitlines()
        for index, line in enumerate(lines):
            match = re.match(r"^::: ([\w.]+)\s*$", line)
            if match:
                options = []
                for option in lines[index + 1 :]:
                    if not option.startswith("    "):
                        break
                    options.append(option.strip())
                directives[match.group(1)] = "show_submodules: true" in options
    return directives


def _documented(name, module, directives):
    """Rendered by a directive: of the object, of its module, or of a package above the module
    that renders its submodules."""
    if name in directives or module in directives:
        return True
    parts = module.split(".")
    return any(directives.get(".".join(parts[:end])) for end in range(1, len(parts)))


def _is_module(dotted):
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_every_public_class_and_function_has_an_api_entry():
    objects = _public_objects()
    directives = _api_directives()
    missing = sorted(
        name for name, (module, _) in objects.items() if not _documented(name, module, directives)
    )
    assert not missing, f"no API entry (add a ::: directive to docs/api/): {missing}"
    undocumented = sorted(name for name, (_, documented) in objects.items() if not documented)
    assert not undocumented, f"public, with no docstring for the API reference: {undocumented}"
    for name in REQUIRED_ENTRIES:
        assert name in objects, name
    for directive in directives:
        assert _is_module(directive), f"docs/api/ documents {directive}, which is no module"


def test_the_api_index_lists_every_top_level_name():
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    (exports,) = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_EXPORTS"
    ]
    index = (DOCS / "api" / "index.md").read_text(encoding="utf-8")
    objects = _public_objects()
    for name, module in exports.items():
        entries = re.findall(rf"\[`{name}`\]\[([\w.]+)\]", index)
        assert entries, f"docs/api/index.md does not list keras_largebatch.{name}"
        assert entries[0] in objects and entries[0].startswith(module), (name, entries)


# === The README is a front page ===


def test_the_readme_is_a_short_front_page_with_the_two_commands():
    readme = README.read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    for command in (INSTALL_COMMAND, TEST_COMMAND):
        assert f"\n{command}\n" in readme, command
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f"\n{TEST_COMMAND}\n" in ci, ".ci/run must run the README's test command"
    assert "mkdocs build --strict" in ci


def test_the_readme_links_resolve_and_show_no_image():
    readme = README.read_text(encoding="utf-8")
    assert not re.search(r"!\[[^\]]*\]\(", readme) and "<img" not in readme
    for target in re.findall(r"\]\(([^)\s]+)\)", readme):
        if re.match(r"^[a-z]+://", target):
            continue
        path = target.split("#")[0]
        assert (ROOT / path).exists(), f"README.md links to {target}, which does not exist"


def test_the_readme_names_every_command():
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    scripts = setup["options.entry_points"]["console_scripts"].split("\n")
    names = [line.split("=")[0].strip() for line in scripts if line.strip()]
    readme = README.read_text(encoding="utf-8")
    assert names and all(f"`{name}`" in readme for name in names), names


# === What the pages may not say ===

LOCAL_PATH = re.compile(r"(/work/|/root/|/home/|/Users/|/check/|[A-Z]:\\\\)")
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


@pytest.mark.parametrize("page", PAGES, ids=[page.relative_to(ROOT).as_posix() for page in PAGES])
def test_pages_name_no_local_path_or_commit(page):
    text = page.read_text(encoding="utf-8")
    assert not LOCAL_PATH.search(text), LOCAL_PATH.search(text).group(0)
    assert not COMMIT.search(text), f"a commit hash? {COMMIT.search(text).group(0)}"


def test_the_benchmarks_page_gives_every_script_its_command():
    page = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    scripts = sorted(path.name for path in (ROOT / "benchmarks").glob("*.py"))
    helpers = {"throughput.py"}  # the shared timing loop, not a benchmark
    for script in scripts:
        if script not in helpers:
            assert f"python benchmarks/{script}" in page, script
    for script in re.findall(r"python benchmarks/(\w+\.py)", page):
        assert script in scripts, f"docs/benchmarks.md names benchmarks/{script}"


# The pages whose "| `key` | `default` | meaning |" tables give the BERT pretraining command's
# defaults (harness.md: the keys every run has, as the BERT command sets them).
DEFAULTS_TABLES = ("guides/harness.md", "guides/bert-pretraining.md")
_DEFAULT_ROW = re.compile(r"^\| `([a-z_.N]+)` \| `([^`]*)` \|", re.MULTILINE)


def _config_value(config, key):
    value = config
    for part in key.split("."):
        value = value[0] if part == "N" else getattr(value, part)
    return value


@pytest.mark.parametrize("page", DEFAULTS_TABLES)
def test_the_bert_defaults_tables_give_the_configs_defaults(page):
    yaml = pytest.importorskip("yaml")
    from keras_largebatch.bert.pretraining import config as bert_config

    config = bert_config.PretrainConfig()
    rows = _DEFAULT_ROW.findall((DOCS / page).read_text(encoding="utf-8"))
    assert len(rows) >= 10, page
    for key, shown in rows:
        expected = _config_value(config, key)
        if isinstance(expected, (list, tuple)):
            expected = list(expected)
        assert yaml.safe_load(shown) == expected, f"{page}: {key} shows {shown!r}"
