"""tests/support/processes.py starts a test's Python commands by forking a process that has
imported TensorFlow, Keras, JAX and keras-hub: each command must see what it would see started
anew by `subprocess`, which is the reference here."""

import os
import signal
import subprocess
import sys

import pytest

from tests.support import processes

# What a command sees of its start: its arguments, the first entry of its path, its directory,
# an environment variable, its __name__ and its exit status.
SEEN = (
    "import os, sys; print(sys.argv[1:], repr(sys.path[0]), os.getcwd(), "
    "os.environ.get('PROCESSES_PROBE'), __name__); sys.exit(int(sys.argv[-1]))"
)


def _commands(tmp_path):
    script = tmp_path / "seen.py"
    script.write_text(SEEN)
    package = tmp_path / "probe_package"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "seen.py").write_text(SEEN)
    return {
        "code": [sys.executable, "-c", SEEN, "a", "3"],
        "script": [sys.executable, str(script), "b", "0"],
        "module": [sys.executable, "-m", "probe_package.seen", "c", "4"],
    }


@pytest.mark.parametrize("kind", ["code", "script", "module"])
def test_a_command_sees_what_it_sees_started_anew(kind, tmp_path):
    command = _commands(tmp_path)[kind]
    env = dict(os.environ, PROCESSES_PROBE=kind)
    expected = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True)
    forked = processes.run(command, env=env, cwd=tmp_path, capture_output=True, text=True)
    assert expected.returncode == int(command[-1]), expected.stderr
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        expected.returncode,
        expected.stdout,
        expected.stderr,
    )


def test_the_command_starts_with_the_modules_imported_and_sets_jax_platforms():
    probe = (
        "import sys; print('tensorflow' in sys.modules and 'keras' in sys.modules); "
        "import jax; print(jax.config.jax_platforms)"
    )
    for platforms in ("cpu", None):
        env = dict(os.environ, KERAS_BACKEND="jax")
        env.pop("JAX_PLATFORMS", None)
        if platforms:
            env["JAX_PLATFORMS"] = platforms
        result = processes.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.split() == ["True", str(platforms)]


def test_streams_signals_and_timeouts_as_subprocess(tmp_path):
    log = tmp_path / "log.txt"
    with open(log, "w+") as stream:
        code = "import sys; print('out'); print('err', file=sys.stderr)"
        process = processes.Popen(
            [sys.executable, "-c", code], stdout=stream, stderr=subprocess.STDOUT
        )
        assert isinstance(process, processes.Popen) and process.wait(timeout=300) == 0
    assert sorted(log.read_text().split()) == ["err", "out"]

    sleeping = processes.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert sleeping.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        sleeping.wait(timeout=0.2)
    sleeping.send_signal(signal.SIGKILL)
    assert sleeping.wait(timeout=30) == -signal.SIGKILL

    with pytest.raises(subprocess.TimeoutExpired):
        processes.run([sys.executable, "-c", "import time; time.sleep(60)"], timeout=0.5)


def test_other_commands_and_the_switch_use_subprocess(monkeypatch):
    other = processes.Popen(["true"])
    assert isinstance(other, subprocess.Popen) and other.wait() == 0
    monkeypatch.setenv(processes.DISABLE_ENV, "0")
    plain = processes.run(
        [sys.executable, "-c", "import sys; print('tensorflow' in sys.modules)"],
        capture_output=True,
        text=True,
    )
    assert plain.stdout.strip() == "False"
