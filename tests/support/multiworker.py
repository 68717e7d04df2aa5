"""Run a function on N local processes forming a MultiWorkerMirroredStrategy cluster.

Parent side (in a test):

    from tests.support.multiworker import run_multi_worker

    results = run_multi_worker(train_three_steps, num_workers=2, kwargs={"learning_rate": 0.1})
    results[0]["kernel"]  # what worker 0's function returned under "kernel"

Worker side: `train_three_steps(strategy, learning_rate)` is a module-level function that the
worker imports by name. It receives the strategy, already created (MultiWorkerMirroredStrategy
must exist before any other TensorFlow op in the process, so the harness creates it first),
and returns a dict of array-likes, which come back to the parent as NumPy arrays.

Each worker is `python multiworker.py` with two environment variables: `TF_CONFIG` (a
cluster of N workers on 127.0.0.1 ports that were free a moment before, this worker's task
index) and `KERAS_LARGEBATCH_WORKER_SPEC` (JSON: the function, its kwargs, the strategy name
and where to write the result). The parent's `sys.path` is passed on as `PYTHONPATH`, so any
function the test process can import, the workers can import too.
"""

import importlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

from tests.support import processes

SPEC_ENV = "KERAS_LARGEBATCH_WORKER_SPEC"

# After one worker fails, the others are usually blocked in a collective that will never
# complete. They get this long to fail on their own and say why on stderr, then are killed.
_FAILURE_GRACE_SECONDS = 2.0
_STDERR_TAIL_CHARS = 6000


def run_multi_worker(
    function,
    num_workers=2,
    kwargs=None,
    strategy="multi_worker",
    timeout=120.0,
    env=None,
):
    """Runs `function(strategy, **kwargs)` on `num_workers` local worker processes.

    Args:
        function: a module-level function, or its name as "package.module:function". It must
            be importable in a fresh process (a function defined in a test module is) and
            must return a dict mapping names to array-likes.
        num_workers: processes in the cluster, >= 1. Default 2.
        kwargs: keyword arguments for `function`; must be JSON-serializable. Default None.
        strategy: the name each worker passes to `keras_largebatch.distribute.get_strategy`
            ("multi_worker", or "auto" to exercise the TF_CONFIG detection). Default
            "multi_worker".
        timeout: seconds for the whole run, TensorFlow start-up included, after which every
            worker is killed. Default 120.
        env: extra environment variables for the workers, on top of this process's
            (TF_CONFIG, the spec, KERAS_BACKEND and PYTHONPATH are always set by the
            harness). Default None.

    Returns:
        A list with one dict per worker, in task-index order, of the NumPy arrays its
        function returned.

    Raises:
        ValueError: `function` is not importable by name, or another argument is out of
            range or not JSON-serializable; raised before any worker starts.
        RuntimeError: a worker exited with an error; the message holds every worker's
            exit code and the tail of its stderr.
        TimeoutError: the run took longer than `timeout`; the message holds every worker's
            stderr tail.
    """
    function_name = _function_name(function)
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"num_workers must be an int >= 1, got {num_workers!r}")
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
    kwargs = dict(kwargs or {})
    try:
        json.dumps(kwargs)
    except TypeError as error:
        raise ValueError(f"kwargs must be JSON-serializable ({error}), got {kwargs!r}") from None

    addresses = [f"127.0.0.1:{port}" for port in free_ports(num_workers)]
    with tempfile.TemporaryDirectory(prefix="multiworker-") as work_dir:
        workers = []
        try:
            for index in range(num_workers):
                workers.append(
                    _start_worker(index, addresses, function_name, kwargs, strategy, env, work_dir)
                )
            _wait(workers, timeout)
            return [_load_result(worker["result_path"]) for worker in workers]
        finally:
            for worker in workers:
                if worker["process"].poll() is None:
                    worker["process"].kill()
                    worker["process"].wait()
                worker["stdout"].close()
                worker["stderr"].close()


def _function_name(function):
    if isinstance(function, str):
        if function.count(":") != 1:
            raise ValueError(
                f'function must be a callable or "package.module:function", got {function!r}'
            )
        return function
    module, qualname = getattr(function, "__module__", None), getattr(function, "__qualname__", "")
    if not callable(function) or module in (None, "__main__") or "<" in qualname:
        raise ValueError(
            "function must be a module-level function the workers can import (not a lambda, "
            f"a nested function or one defined in __main__), got {function!r}"
        )
    return f"{module}:{qualname}"


def free_ports(count):
    """Ports the OS had free a moment ago; all sockets are held at once so they differ."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _start_worker(index, addresses, function_name, kwargs, strategy, env, work_dir):
    result_path = os.path.join(work_dir, f"worker_{index}.npz")
    worker_env = dict(os.environ)
    # TensorFlow's INFO start-up lines would fill the stderr tail shown on failure.
    worker_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    worker_env.update(env or {})
    worker_env.update(
        {
            "TF_CONFIG": json.dumps(
                {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}}
            ),
            SPEC_ENV: json.dumps(
                {
                    "function": function_name,
                    "kwargs": kwargs,
                    "strategy": strategy,
                    "result_path": result_path,
                }
            ),
            "KERAS_BACKEND": "tensorflow",
            "PYTHONPATH": os.pathsep.join(path or os.getcwd() for path in sys.path),
        }
    )
    stdout = open(os.path.join(work_dir, f"worker_{index}.stdout"), "w+")
    stderr = open(os.path.join(work_dir, f"worker_{index}.stderr"), "w+")
    process = processes.Popen(
        [sys.executable, os.path.abspath(__file__)],
        env=worker_env,
        stdout=stdout,
        stderr=stderr,
        stdin=subprocess.DEVNULL,
    )
    return {
        "index": index,
        "process": process,
        "stdout": stdout,
        "stderr": stderr,
        "result_path": result_path,
    }


def _wait(workers, timeout):
    deadline = time.monotonic() + timeout
    failed_at = None
    while True:
        codes = [worker["process"].poll() for worker in workers]
        if all(code == 0 for code in codes):
            return
        if failed_at is None and any(code not in (None, 0) for code in codes):
            failed_at = time.monotonic()
        if all(code is not None for code in codes) or (
            failed_at is not None and time.monotonic() - failed_at > _FAILURE_GRACE_SECONDS
        ):
            raise RuntimeError(f"multi-worker run failed:\n{_report(workers)}")
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"multi-worker run did not finish within {timeout} s, workers killed:\n"
                f"{_report(workers)}"
            )
        time.sleep(0.1)


def _report(workers):
    lines = []
    for worker in workers:
        code = worker["process"].poll()
        worker["stderr"].flush()
        worker["stderr"].seek(0)
        tail = worker["stderr"].read()[-_STDERR_TAIL_CHARS:]
        status = "still running" if code is None else f"exit code {code}"
        lines.append(f"--- worker {worker['index']} ({status}), stderr tail:\n{tail}")
    return "\n".join(lines)


def _load_result(path):
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def _worker_main():
    spec = json.loads(os.environ[SPEC_ENV])
    # Before importing the function's module: that import may pull in Keras, and the strategy
    # has to exist before TensorFlow runs anything.
    from keras_largebatch.distribute import get_strategy

    strategy = get_strategy(spec["strategy"])
    module_name, qualname = spec["function"].split(":")
    function = importlib.import_module(module_name)
    for attribute in qualname.split("."):
        function = getattr(function, attribute)
    result = function(strategy, **spec["kwargs"])
    if not isinstance(result, dict):
        raise TypeError(
            f"{spec['function']} must return a dict of array-likes, got {type(result).__name__}"
        )
    np.savez(spec["result_path"], **{name: np.asarray(value) for name, value in result.items()})


if __name__ == "__main__":
    _worker_main()
