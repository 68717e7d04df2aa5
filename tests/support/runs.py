"""Helpers for tests of training runs: read a checkpoint's arrays, interrupt a run, run a module
on the JAX backend over two host devices."""

import json
import os
import sys
from pathlib import Path

import h5py
import keras

from tests.support import processes
from tests.support.xla_flags import NO_LLVM_OPTIMIZATION, with_test_flags

ROOT = Path(__file__).resolve().parents[2]


def checkpoint_arrays(path):
    """Every array of a Keras weights file (model weights and optimizer state), by HDF5 path."""
    arrays = {}
    with h5py.File(path, "r") as file:
        file.visititems(
            lambda name, item: (
                arrays.__setitem__(name, item[()]) if isinstance(item, h5py.Dataset) else None
            )
        )
    return arrays


class Interrupt(Exception):
    """Raised by `InterruptAfter`, as a preemption would end a run."""


class InterruptAfter(keras.callbacks.Callback):
    """Ends the run (`interrupt`: raises `Interrupt`) after ``batches`` training calls."""

    def __init__(self, batches):
        super().__init__()
        self.batches = batches
        self.seen = 0

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        if self.seen == self.batches:
            self.interrupt()

    def interrupt(self):
        raise Interrupt(f"interrupted after {self.batches} training calls")


def run_on_jax(module, *args, timeout=300, optimize_compiled_code=True):
    """Runs ``python -m module args`` on the JAX backend with 2 CPU devices and returns the JSON
    object it prints on its last line (this process runs Keras on TensorFlow, and a process
    holds one backend).

    ``optimize_compiled_code=False`` turns off LLVM's optimization of the code XLA generates,
    most of what compiling small programs costs: for modules whose results are compared with
    each other, every one compiled alike, or with NumPy within the tolerances the optimized
    code passes too."""
    xla_flags = with_test_flags("--xla_force_host_platform_device_count=2")
    if not optimize_compiled_code:
        xla_flags += f" {NO_LLVM_OPTIMIZATION}"
    env = dict(
        os.environ,
        KERAS_BACKEND="jax",
        XLA_FLAGS=xla_flags,
        JAX_PLATFORMS="cpu",
        CUDA_VISIBLE_DEVICES="",
    )
    result = processes.run(
        [sys.executable, "-m", module, *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
