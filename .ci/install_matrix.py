"""Resolve each install line of the README with pip and check what it would install.

    python .ci/install_matrix.py [--output .ci/install_matrix.txt]

Not a test: it needs the package index, and what it finds changes with every release there.
Every pip command of a line runs as ``pip install --dry-run --ignore-installed --report FILE
ARGUMENTS`` from the repository root, the package named by its path (``.``, ``.[bert]``), for
this interpreter and platform, against PyPI as a fresh machine sees it: this machine's pip
configuration files and ``PIP_*`` settings are left out, except the CA bundle and the timeout.

A line of several commands (the TensorFlow TPU road) installs the union of what each resolves
alone, a name resolved by a later command replacing the earlier one. Resolving a command alone
adds nothing that the sequence would not: pip also resolves the dependencies of a package that
is already installed once a requirement reaches it (a ``--no-deps`` install of requests, then
``pip install requests-toolbelt``, installs urllib3).

Each line is checked for the distributions that must and must not be installed, and for
consistency: every requirement of every installed distribution, under the extras asked of it,
met by an installed one at a matching version, ``provides`` naming a stand-in (tensorflow-tpu
installs the ``tensorflow`` module, but pip does not count it as tensorflow). That is what pip
does not check for the packages of a ``--no-deps`` command.

A line is PASS when every check holds, FAIL when one does not, and NOT RESOLVED when pip fails
or one of the line's ``-f`` indexes cannot be reached: pip then resolves from PyPI alone, which
is not the line, so its checks are shown but prove nothing. The exit status is 1 when a line
fails, else 0.
"""

import argparse
import dataclasses
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
JAX_TPU_INDEX = "https://storage.googleapis.com/jax-releases/libtpu_releases.html"
TENSORFLOW_TPU_INDEX = "https://storage.googleapis.com/libtpu-tf-releases/index.html"
# The pip settings of this machine that change how it connects, not what it resolves.
KEPT_PIP_SETTINGS = ("PIP_CERT", "PIP_DEFAULT_TIMEOUT")
NO_TENSORFLOW = ("tensorflow", "tensorflow-cpu", "tensorflow-tpu", "tensorflow-text")
RECIPES = ("tensorflow", "keras-hub", "tensorflow-text", "pyyaml")
# The requirements of keras-hub 0.32 other than tensorflow-text, for the TensorFlow TPU road,
# which installs keras-hub without its dependencies.
KERAS_HUB_OTHER_REQUIREMENTS = (
    "absl-py",
    "packaging",
    "regex",
    "rich",
    "kagglehub",
    "kagglesdk==0.1.28",
    "sentencepiece",
    "tokenizers",
)


@dataclasses.dataclass(frozen=True)
class Line:
    """One install line: its pip commands (the arguments after ``pip install``), what must and
    must not end up installed, and ``provides``: name -> the distribution that stands in for it."""

    name: str
    commands: tuple
    must: tuple
    must_not: tuple = ()
    provides: tuple = ()


LINES = (
    Line(
        "Core: LAMB, LARS, schedules, scaling and callbacks, on any Keras backend",
        ((".",),),
        must=("keras-largebatch", "keras", "numpy"),
        must_not=NO_TENSORFLOW + ("keras-hub", "pyyaml", "matplotlib", "jax", "torch"),
    ),
    Line(
        "Core on JAX (CPU)",
        ((".", "jax"),),
        must=("keras-largebatch", "keras", "jax", "jaxlib"),
        must_not=NO_TENSORFLOW,
    ),
    Line(
        "CPU: the BERT recipe",
        ((".[bert]",),),
        must=("keras-largebatch", "keras") + RECIPES,
        must_not=("tensorflow-tpu",),
    ),
    Line(
        "CPU: the image recipe",
        ((".[vision]",),),
        must=("keras-largebatch", "keras", "tensorflow", "keras-hub", "pyyaml"),
    ),
    Line(
        "keras-largebatch-plot-schedule",
        ((".[plot]",),),
        must=("keras-largebatch", "matplotlib", "pyyaml"),
        must_not=NO_TENSORFLOW,
    ),
    Line(
        "The test suite (the README's test command)",
        ((".[test]",),),
        must=("keras-largebatch", "keras", "matplotlib", "jax", "torch", "pytest", "ruff")
        + RECIPES
        + ("papermill", "ipykernel", "nbformat"),
    ),
    Line(
        "NVIDIA GPU, TensorFlow",
        ((".[bert]", "tensorflow[and-cuda]"),),
        must=RECIPES + ("nvidia-cudnn-cu12", "nvidia-cublas-cu12", "nvidia-nccl-cu12"),
    ),
    Line(
        "NVIDIA GPU, JAX (TensorFlow on the CPU for tf.data)",
        (("jax[cuda12]", ".[bert]"),),
        must=RECIPES + ("jax", "jax-cuda12-plugin", "jax-cuda12-pjrt", "nvidia-cudnn-cu12"),
    ),
    Line(
        "Cloud TPU VM / Colab TPU, JAX",
        (("jax[tpu]", ".[bert]", "-f", JAX_TPU_INDEX),),
        must=RECIPES + ("jax", "libtpu"),
        must_not=("tensorflow-tpu",),
    ),
    Line(
        "Cloud TPU VM / Colab TPU, TensorFlow",
        (
            ("tensorflow-tpu==2.20.*", "-f", TENSORFLOW_TPU_INDEX),
            (".", "pyyaml"),
            ("--no-deps", "keras-hub==0.32.*", "tensorflow-text==2.20.*"),
            KERAS_HUB_OTHER_REQUIREMENTS,
        ),
        must=("tensorflow-tpu", "libtpu", "keras-largebatch", "keras")
        + ("keras-hub", "tensorflow-text", "pyyaml"),
        must_not=("tensorflow", "tensorflow-cpu"),
        provides=(("tensorflow", "tensorflow-tpu"),),
    ),
)


@dataclasses.dataclass
class Installed:
    version: str
    requires: list
    requested_extras: tuple


def pip_environment():
    """The environment of the pip commands: no configuration file, no ``PIP_*`` setting but the
    kept ones."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PIP_") or key in KEPT_PIP_SETTINGS
    }
    environment.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    return environment


def resolve(arguments, work_dir, retries=True):
    """``(installed, error)``: name -> Installed for what ``pip install ARGUMENTS`` would
    install, or None and pip's last lines of error output. ``retries=False`` spares pip its
    retries of an index known to be unreachable, which it would fetch for every project."""
    report = Path(work_dir) / "report.json"
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed"]
    command += ["--quiet", "--report", str(report), *arguments]
    if not retries:
        command += ["--retries", "0"]
    result = subprocess.run(
        command, cwd=ROOT, env=pip_environment(), capture_output=True, text=True
    )
    if result.returncode != 0:
        return None, "\n".join(result.stderr.strip().splitlines()[-8:])
    installed = {}
    for item in json.loads(report.read_text())["install"]:
        metadata = item["metadata"]
        installed[canonicalize_name(metadata["name"])] = Installed(
            metadata["version"],
            metadata.get("requires_dist") or [],
            tuple(item.get("requested_extras") or ()) if item.get("requested") else (),
        )
    return installed, None


def unreachable_indexes(line):
    """``-f`` index of the line -> why it cannot be read, for those that cannot."""
    urls = [
        command[index + 1]
        for command in line.commands
        for index, argument in enumerate(command)
        if argument == "-f"
    ]
    failures = {}
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                response.read(1)
        except (urllib.error.URLError, OSError) as error:
            failures[url] = str(getattr(error, "reason", error))
    return failures


def unmet_requirements(installed, provides):
    """Each requirement of an installed distribution, under the extras asked of it, that no
    installed distribution meets, as a sentence."""
    provides = dict(provides)
    problems = []
    extras_seen = {name: set(item.requested_extras) for name, item in installed.items()}
    pending = list(installed)
    while pending:
        name = pending.pop()
        item = installed[name]
        for line in item.requires:
            requirement = Requirement(line)
            if requirement.marker is not None and not any(
                requirement.marker.evaluate({"extra": extra})
                for extra in sorted(extras_seen[name]) + [""]
            ):
                continue
            wanted = canonicalize_name(requirement.name)
            present = wanted if wanted in installed else provides.get(wanted)
            if present not in installed:
                problems.append(f"{name} {item.version} requires {requirement}: not installed")
                continue
            version = installed[present].version
            if not requirement.specifier.contains(version, prereleases=True):
                stand_in = "" if present == wanted else f" (as {present})"
                problems.append(
                    f"{name} {item.version} requires {requirement}: {version}{stand_in} installed"
                )
            if not set(requirement.extras) <= extras_seen[present]:
                extras_seen[present] |= set(requirement.extras)
                pending.append(present)
    return sorted(set(problems))


def check(line, work_dir):
    """``(status, report lines)`` of one install line."""
    lines = [f"== {line.name}"]
    lines += [f"   $ pip install {' '.join(command)}" for command in line.commands]
    unreachable = unreachable_indexes(line)
    installed = {}
    for command in line.commands:
        resolved, error = resolve(command, work_dir, retries=not unreachable)
        if resolved is None:
            lines.append(f"   NOT RESOLVED: pip failed on `pip install {' '.join(command)}`:")
            lines += [f"      {text}" for text in error.splitlines()]
            return "NOT RESOLVED", lines
        installed.update(resolved)
    failures = [f"must be installed, is not: {name}" for name in line.must if name not in installed]
    failures += [
        f"must not be installed, is: {name}" for name in line.must_not if name in installed
    ]
    failures += unmet_requirements(installed, line.provides)
    if unreachable:
        status = "NOT RESOLVED"
        lines.append("   NOT RESOLVED: pip resolved from PyPI alone, the line's index unreachable:")
        lines += [f"      {url}: {reason}" for url, reason in unreachable.items()]
        lines.append("   What PyPI alone gives (these checks prove nothing for the line):")
    else:
        status = "FAIL" if failures else "PASS"
        lines.append(f"   {status}")
    checked = sorted(set(line.must) | {name for name in line.must_not if name in installed})
    versions = ", ".join(
        f"{name} {installed[name].version}" for name in checked if name in installed
    )
    lines.append(f"   {len(installed)} distributions; " + versions)
    if line.must_not:
        lines.append(f"   must not be installed: {', '.join(line.must_not)}")
    lines += [f"   {failure}" for failure in failures] or ["   every requirement met"]
    return status, [
        wrapped
        for text in lines
        for wrapped in textwrap.wrap(
            text, 100, subsequent_indent="      ", break_long_words=False, break_on_hyphens=False
        )
        or [text]
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", help="also write the report to this file")
    args = parser.parse_args(argv)
    pip_version = subprocess.run(
        [sys.executable, "-m", "pip", "--version"], capture_output=True, text=True
    ).stdout.split()[1]
    report = [
        f"python .ci/install_matrix.py, {datetime.date.today()}: pip {pip_version}, "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{platform.system().lower()} {platform.machine()}",
        "each command resolved as: pip install --dry-run --ignore-installed --report FILE ...",
        "",
    ]
    statuses = []
    with tempfile.TemporaryDirectory() as work_dir:
        for line in LINES:
            status, lines = check(line, work_dir)
            statuses.append(status)
            report += lines + [""]
            print("\n".join(lines) + "\n", flush=True)
    counts = {status: statuses.count(status) for status in ("PASS", "FAIL", "NOT RESOLVED")}
    report.append(", ".join(f"{count} {status}" for status, count in counts.items()))
    print(report[-1])
    if args.output:
        Path(args.output).write_text("\n".join(report) + "\n")
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
