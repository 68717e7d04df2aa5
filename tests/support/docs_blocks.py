"""The Python blocks of the documentation, as the docs tests run them.

A page's fenced ```python blocks run in order in one namespace, like the cells of a notebook, so a
block may use what an earlier block of the page defined. An HTML comment on the line before a
block (blank lines between are allowed) changes how it runs:

* ``<!-- fragment -->``: the block is a part of a program (it names things it does not define);
  it is not run.
* ``<!-- env: NAME=VALUE ... -->``: the block runs with these environment variables (e.g.
  ``KERAS_BACKEND=jax``), in the page's namespace of blocks with the same settings; other
  blocks run without them (on TensorFlow).

The pages' blocks of the same settings run in one process, each page in a namespace and a
working directory of its own; a page that needs a process to itself (one that sets TensorFlow's
devices, which must come before any other TensorFlow op) gives settings no other page gives.

A ```text block right after a run block (blank lines between are allowed) is what that block
prints; `outputs_match` compares it with what the block printed.
"""

import dataclasses
import re
from pathlib import Path

FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[\w+-]*)")
DIRECTIVE = re.compile(r"^<!--\s*(?P<body>.*?)\s*-->$")
NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced block: its page, first code line (1-based), language, code and directives."""

    page: str
    line: int
    language: str
    code: str
    fragment: bool = False
    env: tuple = ()
    expected_output: str = None


@dataclasses.dataclass(frozen=True)
class Session:
    """The run blocks of one page that share one process and namespace."""

    page: str
    env: tuple
    blocks: tuple

    @property
    def name(self):
        settings = " ".join(f"{key}={value}" for key, value in self.env)
        return f"{self.page} [{settings}]" if settings else self.page


def parse_directive(line):
    """``(fragment, env)`` of an HTML comment line; ``None`` if the line is not a directive."""
    match = DIRECTIVE.match(line.strip())
    if not match:
        return None
    body = match.group("body")
    if body == "fragment":
        return True, ()
    if body.startswith("env:"):
        env = []
        for setting in body[len("env:") :].split():
            name, equals, value = setting.partition("=")
            if not equals or not name:
                raise ValueError(f"an env directive takes NAME=VALUE settings, got {setting!r}")
            env.append((name, value))
        return False, tuple(env)
    return None


def read_blocks(path, root):
    """Every fenced block of the Markdown file ``path``, named relative to ``root``."""
    page = Path(path).relative_to(root).as_posix()
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    blocks = []
    previous = None  # the last non-blank line outside a block
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if not match:
            if lines[index].strip():
                previous = lines[index]
            index += 1
            continue
        indent, fence, language = match.group("indent", "fence", "info")
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        if end == len(lines):
            raise ValueError(f"{page}:{index + 1}: a code block that never closes")
        code = "\n".join(line[len(indent) :] for line in lines[index + 1 : end]) + "\n"
        directive = parse_directive(previous) if previous is not None else None
        fragment, env = directive or (False, ())
        blocks.append(Block(page, index + 2, language.lower(), code, fragment, env))
        previous = None
        index = end + 1
    return _attach_outputs(blocks, lines)


def _attach_outputs(blocks, lines):
    """Gives each Python block the ```text block that follows it with only blank lines between."""
    attached = []
    skip = set()
    for position, block in enumerate(blocks):
        if position in skip:
            continue
        following = blocks[position + 1] if position + 1 < len(blocks) else None
        if block.language == "python" and following is not None and following.language == "text":
            end_of_code = block.line + block.code.count("\n")  # the closing fence's line
            between = lines[end_of_code : following.line - 2]
            if not any(line.strip() for line in between):
                block = dataclasses.replace(block, expected_output=following.code)
                skip.add(position + 1)
        attached.append(block)
    return attached


def sessions(paths, root):
    """The run blocks of ``paths`` grouped by page and environment, in page order."""
    grouped = {}
    for path in paths:
        for block in read_blocks(path, root):
            if block.language == "python" and not block.fragment:
                grouped.setdefault((block.page, block.env), []).append(block)
    return [Session(page, env, tuple(blocks)) for (page, env), blocks in grouped.items()]


def outputs_match(expected, actual, relative=0.05, last_digits=2):
    """True when ``actual`` prints what ``expected`` shows: the same lines and words, and each
    number within ``relative`` of the shown one plus ``last_digits`` units of its last shown
    decimal place, since the last digits of a training run differ between machines and library
    versions."""
    expected_lines = [line.split() for line in expected.strip().splitlines()]
    actual_lines = [line.split() for line in actual.strip().splitlines()]
    if len(expected_lines) != len(actual_lines):
        return False
    for expected_line, actual_line in zip(expected_lines, actual_lines):
        expected_text, actual_text = " ".join(expected_line), " ".join(actual_line)
        if NUMBER.sub("#", expected_text) != NUMBER.sub("#", actual_text):
            return False
        for shown, printed in zip(NUMBER.findall(expected_text), NUMBER.findall(actual_text)):
            mantissa = re.split("[eE]", shown)[0]
            decimals = len(mantissa.partition(".")[2])
            exponent = int(re.split("[eE]", shown)[1]) if re.search("[eE]", shown) else 0
            unit = 10.0 ** (exponent - decimals)
            shown, printed = float(shown), float(printed)
            if abs(shown - printed) > relative * max(abs(shown), abs(printed)) + last_digits * unit:
                return False
    return True
