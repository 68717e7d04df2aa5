"""The wheel of the repository as a commit of the working tree would build it."""

import shutil
import subprocess
import sys

import pytest

from tests.support.runs import ROOT


def build_wheel(directory):
    """Copies the files a commit would hold (tracked, or untracked and not ignored) under
    ``directory``/source, builds their wheel in ``directory``/dist and returns its path."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout of the repository")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    source, dist = directory / "source", directory / "dist"
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
        + ["-q", "-w", str(dist), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    (path,) = dist.glob("keras_largebatch-*.whl")
    return path
