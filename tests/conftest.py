"""Session-wide test setup.

Splits the CPU into 4 logical devices, "/cpu:0" ... "/cpu:3", so in-process tests can run
MirroredStrategy with 1, 2 or 4 replicas on a CPU-only machine. It has to happen here, at
session start: TensorFlow fixes its devices when its runtime initializes, and the first
test to run an op would otherwise lock in a single CPU device. Ops outside a strategy still
run on "/cpu:0", so tests that do not distribute see no difference.

TensorFlow's C++ start-up lines (oneDNN and CUDA notices) are silenced first, before anything
imports TensorFlow; ``TF_CPP_MIN_LOG_LEVEL`` is set in the environment, so the subprocesses
that tests start inherit it. So is ``XLA_FLAGS``'s cheaper compile (tests/support/xla_flags.py).
"""

import faulthandler
import gc
import importlib.util
import os
import shutil
import subprocess
import time

from tests.support.xla_flags import with_test_flags

NUM_LOGICAL_CPUS = 4
# Before TensorFlow or JAX starts here or in a process a test starts (tests/support/xla_flags.py).
os.environ["XLA_FLAGS"] = with_test_flags(os.environ.get("XLA_FLAGS", ""))


def pytest_configure(config):
    # pytest-xdist hands files to workers in collection order with this off (by default, most
    # tests first); pytest_collection_modifyitems puts the slowest files first.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    # Test runs without TensorFlow (e.g. a JAX-only job) must still collect.
    if importlib.util.find_spec("tensorflow") is None:
        return
    from keras_largebatch._logging import quiet_tensorflow_logs

    quiet_tensorflow_logs()
    from keras_largebatch.distribute import configure_logical_cpus

    configure_logical_cpus(NUM_LOGICAL_CPUS)


# With KERAS_LARGEBATCH_GC_LOG=PATH, every garbage collection of a test process that takes longer
# than GC_LOG_SECONDS appends a line to PATH: its seconds, its generation, the test it ran in,
# the objects it freed, those left tracked (frozen ones not counted) and the process's resident
# memory (under pytest-xdist each worker process appends its own). A collection that runs past
# GC_DUMP_SECONDS adds every thread's Python stack and, for a full one with py-spy installed
# (not a test dependency), the native stack. A measurement aid for the suite's time, off by default.
GC_LOG_ENV = "KERAS_LARGEBATCH_GC_LOG"
GC_LOG_SECONDS = 0.5
GC_DUMP_SECONDS = 5
_gc_state = {"test": "(collection)", "started": None, "log": None, "watcher": None}


def _gc_callback(phase, info):
    if phase == "start":
        _gc_state["started"] = time.perf_counter()
        # A collection still running after GC_DUMP_SECONDS writes every thread's stack to the
        # log (from faulthandler's own thread: the collecting one holds the interpreter).
        faulthandler.dump_traceback_later(GC_DUMP_SECONDS, file=_gc_state["log"])
        if info["generation"] == 2 and shutil.which("py-spy"):
            # Python's stacks end where the collection began; what it waits for in native code
            # (a destructor, a lock) shows only in the native stack py-spy reads from outside.
            _gc_state["watcher"] = subprocess.Popen(
                f"sleep {GC_DUMP_SECONDS} && exec py-spy dump --native --pid {os.getpid()}",
                shell=True,
                stdout=_gc_state["log"],
                stderr=subprocess.STDOUT,
            )
        return
    faulthandler.cancel_dump_traceback_later()
    watcher, _gc_state["watcher"] = _gc_state["watcher"], None
    if watcher is not None:
        if watcher.poll() is None and time.perf_counter() - _gc_state["started"] < GC_DUMP_SECONDS:
            watcher.kill()
        watcher.wait()
    if _gc_state["started"] is None:
        return
    seconds = time.perf_counter() - _gc_state["started"]
    _gc_state["started"] = None
    if seconds > GC_LOG_SECONDS:
        # What the collection freed, what it left tracked, and the process's resident memory.
        with open("/proc/self/statm") as statm:
            resident = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30
        # Flushed at once: faulthandler writes its dumps to the same file's descriptor.
        _gc_state["log"].write(
            f"{seconds:.2f} s gen {info['generation']} {_gc_state['test']} "
            f"collected={info['collected']} tracked={len(gc.get_objects())} "
            f"rss={resident:.2f}GiB\n"
        )
        _gc_state["log"].flush()


def pytest_sessionstart(session):
    if os.environ.get(GC_LOG_ENV):
        _gc_state["log"] = open(os.environ[GC_LOG_ENV], "a", encoding="utf-8")  # noqa: SIM115
        gc.callbacks.append(_gc_callback)


def pytest_collection_modifyitems(session, config, items):
    # The slowest files first (their seconds in a full run, tests/file_seconds.json), each
    # file's tests in their own order: with two workers taking one file at a time, the run then
    # ends on short files, not with one worker idle while the other runs a long one.
    from tests.support.file_seconds import heaviest_first

    by_file = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    items[:] = [item for path in heaviest_first(by_file) for item in by_file[path]]


def pytest_collection_finish(session):
    # Every module the tests import is imported by now (TensorFlow, Keras, JAX: about 460,000
    # tracked objects, most of what a test process holds). Frozen, they are left out of every
    # later full collection. Without this, such collections took up to 30-60 s in the suite on
    # this project's 2-core machines (the same collection 0.6 s in one run, 10.6 s in
    # another); with it, the longest took 2.7 s.
    gc.collect()
    gc.freeze()


def pytest_runtest_logstart(nodeid, location):
    _gc_state["test"] = nodeid


def pytest_sessionfinish(session, exitstatus):
    if _gc_callback in gc.callbacks:
        gc.callbacks.remove(_gc_callback)
        faulthandler.cancel_dump_traceback_later()
        _gc_state["log"].close()
