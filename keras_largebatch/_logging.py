"""The commands' output on stderr: TensorFlow's C++ start-up lines quieted (in the package's
commands and the test suite), and one kind of progress line (`ProgressLog`).

Importing TensorFlow prints notices that say nothing about the run: the oneDNN notice, the
CUDA probing of a machine without a GPU ("Could not find cuda drivers", "Unable to register
cuDNN factory", "failed call to cuInit"), the CPU-instruction notice, and absl's "All log
messages before absl::InitializeLog() ..." that heads them. Most are written while the
shared libraries load, before TensorFlow reads ``TF_CPP_MIN_LOG_LEVEL``, so that variable
alone hides only the later ones (the CPU-instruction notice, with level 1 or more).
``TF_ENABLE_ONEDNN_OPTS=0`` would hide the oneDNN notice only by turning the oneDNN kernels
off, which changes speed and round-off: not done here.
"""

import importlib.util
import os
import sys
import tempfile
import time

# Substrings of the start-up lines that are dropped; every other line is written through.
_START_UP_NOTICES = (
    "All log messages before absl::InitializeLog() is called",
    "oneDNN custom operations are on",
    "Could not find cuda drivers",
    "Unable to register cuDNN factory",
    "Unable to register cuFFT factory",
    "Unable to register cuBLAS factory",
    "failed call to cuInit",
    "computation placer already registered",
    "This TensorFlow binary is optimized to use available CPU instructions",
    "To enable the following instructions:",
)


def quiet_tensorflow_logs():
    """Import TensorFlow without its start-up lines, and keep its INFO/WARNING lines off.

    Call it before anything imports TensorFlow (or Keras on the TensorFlow backend): first in
    a command's ``main``, or in a test session's setup. It sets ``TF_CPP_MIN_LOG_LEVEL=2``
    unless the environment already sets it (subprocesses inherit it), then imports TensorFlow
    and lists its devices (the CUDA probe) with the process's stderr captured, and writes
    back every captured line that is not a start-up notice. ``TF_CPP_MIN_LOG_LEVEL=0`` in
    the environment keeps everything. Does nothing once TensorFlow is imported: its lines
    are then already out.
    """
    if "tensorflow" in sys.modules or importlib.util.find_spec("tensorflow") is None:
        return  # already out, or a core install without TensorFlow: nothing to quiet
    if os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2") == "0":
        return
    with tempfile.TemporaryFile(mode="w+b") as captured:
        sys.stderr.flush()
        saved_stderr = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow as tf

            tf.config.list_physical_devices()
        finally:
            sys.stderr.flush()
            os.dup2(saved_stderr, 2)
            os.close(saved_stderr)
            captured.seek(0)
            lines = captured.read().decode(errors="replace").splitlines(keepends=True)
            sys.stderr.write(
                "".join(line for line in lines if not any(n in line for n in _START_UP_NOTICES))
            )
            sys.stderr.flush()


class ProgressLog:
    """The progress lines of a command on stderr: ``[name] line``, or with ``elapsed``
    ``[name   12.3s] line``, stamped with the seconds since the log was made; ``enabled=False``
    drops every line. Called with one line at a time."""

    def __init__(self, name, elapsed=False, enabled=True):
        self.name = name
        self.elapsed = elapsed
        self.enabled = enabled
        self.start_time = time.perf_counter()

    def __call__(self, line):
        if not self.enabled:
            return
        prefix = self.name
        if self.elapsed:
            prefix = f"{prefix} {time.perf_counter() - self.start_time:6.1f}s"
        print(f"[{prefix}] {line}", file=sys.stderr, flush=True)
