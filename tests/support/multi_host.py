"""Runs of the trainer as a group of JAX processes on this machine, as a multi-host run is.

Parent side (tests/training/test_multi_host.py):

    write_recipe_data(work_dir)    # once, before the modes that run BERT and the images
    launch = run_group("group", work_dir, num_processes=2, devices_per_process=1)
    launch.results[1]["group"]     # what process 1 recorded under "group" (its summary)
    launch.returncodes, launch.stderr

Each process is ``python -m tests.support.multi_host MODE WORK_DIR`` with ``KERAS_BACKEND=jax``,
``JAX_PLATFORMS=cpu`` and ``XLA_FLAGS=--xla_force_host_platform_device_count=D
--xla_backend_optimization_level=0`` and the cheaper emitters of tests/support/xla_flags.py
(compiling is most of what these small programs cost, and every run compared is compiled
alike); a group
of more than one names its coordinator (127.0.0.1 on a port that was free a moment before),
size and process id in Keras's ``KERAS_DISTRIBUTION_*`` variables, which the trainer reads.
JAX's CPU backend runs the collectives between the processes over gloo, its default on Linux.
A process adds what each run of its mode gives to ``WORK_DIR/result-<process id>.json`` as soon
as the run ends, so a mode whose last run kills its processes still reports the runs before it.

The modes, each a list of runs of the toy recipe (tests/support/toy_recipe.py: two phases of
6 steps at global batches 8 and 4) and of the real recipes (tests/support/jax_training.py: the
tiny BERT, dropout 0, and the image recipe's small ResNet, batch norm included, each of 2 steps
of 8 examples, the warmup's and one at the peak rate, the images with an evaluation at the
end), all with 2 micro-batches per step in their first phase and 2 input pipelines. The
recipes' runs share the launches of the toy runs (a launch costs each process seconds of
start-up) and read the record files that `write_recipe_data` wrote before it (the processes of
a group would race to write them):

* ``reference`` (1 process): the toy run and BERT each on 2 devices and on 1, the images on 1
  (tests/vision/test_train_jax.py compares them on 2 devices with 1); the first global
  micro-batch.
* ``group``: processes given different configs; a whole toy run with its progress lines; the
  first global micro-batch; BERT; then a toy run that every process kills (SIGKILL) after step
  4's checkpoint.
* ``lost_peer``: a toy run whose process 1 alone is killed after step 4's checkpoint, with a
  `LOST_PEER_TIMEOUT` of seconds; process 1 writes the time of its death to
  ``WORK_DIR/lost-peer-killed-at``.
* ``resume``: the killed runs again, which resume; a whole toy run of its own; the images.
* ``join_timeout``: process 0 of a group of 2 whose process 1 never starts, named by the
  strategy's keys with a timeout of `JOIN_TIMEOUT` seconds.
"""

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import keras

from tests.support import jax_training
from tests.support import processes as python_processes
from tests.support.bert_records import write_records
from tests.support.multiworker import free_ports
from tests.support.runs import ROOT, InterruptAfter
from tests.support.xla_flags import with_test_flags

ACCUMULATE = "phases.0.gradient_accumulation_steps=2"
DATA_PARALLEL = "strategy.name=data_parallel"
TWO_PIPELINES = "strategy.input_pipelines=2"
ONE_DEVICE = "strategy.devices=['cpu:0']"
# The recipes' runs: 2 steps (the warmup's and one at the peak rate) tell their weights apart
# as well as more, and each step of them costs the processes about a CPU-second.
RECIPE_STEPS = "phases.0.steps=2"
JOIN_TIMEOUT = 3
LOST_PEER_TIMEOUT = 6
LOST_PEER_KILLED_AT = "lost-peer-killed-at"
KILLED_AFTER_BATCHES = 9  # micro-batch 1 of step 5 in phase 1, after step 4's checkpoint
_XLA_FLAGS = "--xla_force_host_platform_device_count={} --xla_backend_optimization_level=0"
# Where `write_recipe_data` lists the record files it wrote, under WORK_DIR.
_DATA_FILES = os.path.join("data", "files.json")
# strace of a process and its threads' file system calls; stopping the process at these
# calls alone (a seccomp filter), not at each of its threads' many others, keeps it fast.
_STRACE = ("strace", "-f", "--seccomp-bpf", "-qq", "-e", "trace=%file")
# Test-side file operations that only the writing process may do, as strace names them.
_WRITING_CALLS = ("mkdir", "rename", "unlink", "rmdir", "creat")
_STDERR_TAIL_CHARS = 6000


def run_group(mode, work_dir, num_processes, devices_per_process, timeout=300, trace=()):
    """Runs ``mode`` in ``num_processes`` processes of ``devices_per_process`` CPU devices each
    and waits for all (every one is killed past ``timeout`` seconds, and this raises).

    ``trace``: process ids to run under ``strace`` (when installed), logging the file system
    calls that change files to ``WORK_DIR/strace-<id>.txt``.

    Returns a namespace: ``returncodes`` and ``stderr`` (lists, by process id), ``results``
    (each process's recorded runs, by process id), ``traced`` (the ids actually traced) and
    ``seconds`` (from the start of the first process to the end of the last).
    """
    os.makedirs(work_dir, exist_ok=True)
    (port,) = free_ports(1)
    processes, outputs, traced = [], [], []
    start = time.monotonic()
    try:
        for index in range(num_processes):
            env = dict(
                os.environ,
                KERAS_BACKEND="jax",
                JAX_PLATFORMS="cpu",
                XLA_FLAGS=with_test_flags(_XLA_FLAGS.format(devices_per_process)),
                CUDA_VISIBLE_DEVICES="",
            )
            if num_processes > 1:
                env.update(
                    KERAS_DISTRIBUTION_JOB_ADDRESSES=f"127.0.0.1:{port}",
                    KERAS_DISTRIBUTION_NUM_PROCESSES=str(num_processes),
                    KERAS_DISTRIBUTION_PROCESS_ID=str(index),
                )
            command = [sys.executable, "-m", "tests.support.multi_host", mode, str(work_dir)]
            if index in trace and _strace_works():
                log = os.path.join(work_dir, f"strace-{index}.txt")
                command = [*_STRACE, "-o", log, *command]
                traced.append(index)
            stderr = open(os.path.join(work_dir, f"stderr-{index}.txt"), "w+")
            outputs.append(stderr)
            processes.append(
                python_processes.Popen(
                    command,
                    cwd=ROOT,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                )
            )
        deadline = start + timeout
        while any(process.poll() is None for process in processes):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"mode {mode!r} did not end within {timeout} s; processes killed:\n"
                    + _tails(outputs)
                )
            time.sleep(0.1)
        return SimpleNamespace(
            returncodes=[process.returncode for process in processes],
            seconds=time.monotonic() - start,
            stderr=_read(outputs),
            results=[_results(work_dir, index) for index in range(num_processes)],
            traced=traced,
        )
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        for output in outputs:
            output.close()


def write_recipe_data(work_dir):
    """Writes the record files that the modes' BERT and image runs read, under
    ``WORK_DIR/data``: 2 BERT record files of 32 examples and `jax_training.write_image_records`'s
    (2 training files), so that the training files divide over the 2 input pipelines."""
    directory = os.path.join(work_dir, "data")
    os.makedirs(directory, exist_ok=True)
    bert = [
        write_records(os.path.join(directory, f"bert-{index}.tfrecord"), 32, seed=index + 1)
        for index in range(2)
    ]
    image_train, image_eval = jax_training.write_image_records(directory)
    files = {"bert": bert, "image_train": image_train, "image_eval": image_eval}
    with open(os.path.join(work_dir, _DATA_FILES), "w") as stream:
        json.dump(files, stream)


@functools.cache
def _strace_works():
    """Whether strace is installed, takes `_STRACE`'s options and may trace here (a container
    may forbid ptrace)."""
    if not shutil.which("strace"):
        return False
    probe = subprocess.run([*_STRACE, "-o", os.devnull, "true"], capture_output=True, timeout=30)
    return probe.returncode == 0


def files_written(trace_path, directory):
    """The paths under ``directory`` that a process traced by `run_group` created, opened for
    writing, renamed, removed or made a folder of."""
    directory = os.path.realpath(directory)
    written = []
    with open(trace_path) as stream:
        for line in stream:
            if directory not in line:
                continue
            call = line.split("(", 1)[0].split()[-1]
            writes = call.startswith(_WRITING_CALLS) or (
                call.startswith("open") and any(flag in line for flag in ("O_WRONLY", "O_RDWR"))
            )
            if writes and "= -1" not in line:
                written.append(line.strip())
    return written


def _read(outputs):
    texts = []
    for output in outputs:
        output.flush()
        output.seek(0)
        texts.append(output.read())
    return texts


def _tails(outputs):
    return "\n".join(
        f"--- process {index}:\n{text[-_STDERR_TAIL_CHARS:]}"
        for index, text in enumerate(_read(outputs))
    )


def _results(work_dir, index):
    path = os.path.join(work_dir, f"result-{index}.json")
    if not os.path.exists(path):
        return {}
    with open(path) as stream:
        return json.load(stream)


# === The processes' side ===


def _process_id():
    return int(os.environ.get("KERAS_DISTRIBUTION_PROCESS_ID", 0))


class _Recorder:
    """Adds each run's result to this process's result file as soon as it is known."""

    def __init__(self, work_dir):
        self.path = os.path.join(work_dir, f"result-{_process_id()}.json")
        self.results = {}

    def __setitem__(self, name, value):
        self.results[name] = value
        with open(self.path, "w") as stream:
            json.dump(self.results, stream)


def _run(work_dir, name, *overrides, callbacks=(), lines=None):
    from keras_largebatch.training import trainer
    from tests.support.toy_recipe import ToyRegression, load

    config = load(os.path.join(work_dir, name), DATA_PARALLEL, ACCUMULATE, *overrides)
    log = lines.append if lines is not None else lambda line: None
    return trainer.train(config, ToyRegression(config), callbacks, log)


def _data_files(work_dir):
    with open(os.path.join(work_dir, _DATA_FILES)) as stream:
        return json.load(stream)


def _bert(work_dir, name, *overrides):
    """The tiny BERT, with 2 micro-batches per step over 2 input pipelines."""
    from keras_largebatch.bert import pretraining as pretrain

    config = jax_training.tiny_bert_config(
        os.path.join(work_dir, name),
        _data_files(work_dir)["bert"],
        ACCUMULATE,
        TWO_PIPELINES,
        RECIPE_STEPS,
        *overrides,
    )
    return pretrain.pretrain(config, log=lambda line: None)


def _images(work_dir, name, *overrides):
    """The image recipe's small ResNet, with 2 micro-batches per step over 2 input pipelines."""
    from keras_largebatch import vision as train

    files = _data_files(work_dir)
    config = jax_training.small_image_config(
        os.path.join(work_dir, name),
        files["image_train"],
        files["image_eval"],
        ACCUMULATE,
        TWO_PIPELINES,
        RECIPE_STEPS,
        "eval_interval=2",
        *overrides,
    )
    return train.train(config, log=lambda line: None)


def _refused(work_dir, name, *overrides):
    try:
        _run(work_dir, name, *overrides)
    except ValueError as error:
        return str(error)
    return None


def _first_micro_batch(work_dir, *overrides):
    """The targets of phase 1's first global micro-batch, made from this process's batch as
    Keras's JAX trainer makes it (`distribute_data_input`), gathered from every process."""
    import numpy as np
    from jax.experimental import multihost_utils
    from keras.src.backend.jax.distribution_lib import distribute_data_input

    from keras_largebatch.training.devices import create_devices
    from keras_largebatch.training.plan import plan_run
    from keras_largebatch.training.trainer import make_phase_dataset
    from tests.support.toy_recipe import ToyRegression, load

    config = load(os.path.join(work_dir, "unused"), DATA_PARALLEL, ACCUMULATE, *overrides)
    devices = create_devices(config.strategy)
    plan = plan_run(config, devices.num_replicas, devices.input_pipelines, devices.num_processes)
    dataset = make_phase_dataset(devices, ToyRegression(config), plan.phases[0])
    _, targets = next(iter(dataset))
    targets = np.asarray(targets)
    layout = devices.distribution.get_data_layout(targets.shape)
    batch = distribute_data_input(targets, layout, devices.distribution.batch_dim_name)
    return {
        "local": targets.ravel().tolist(),
        "global": np.asarray(multihost_utils.process_allgather(batch, tiled=True)).ravel().tolist(),
    }


class KillAfter(InterruptAfter):
    """Kills its process (SIGKILL, as a preemption does) after ``batches`` training calls, once
    every process of the run has got there."""

    def interrupt(self):
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("killed")
        os.kill(os.getpid(), signal.SIGKILL)


class KillProcess1After(InterruptAfter):
    """Kills process 1 alone (SIGKILL) after ``batches`` training calls, recording when."""

    def interrupt(self):
        if _process_id() == 1:
            with open(os.path.join(self.work_dir, LOST_PEER_KILLED_AT), "w") as stream:
                stream.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)


def _reference(work_dir, record):
    record["two_devices"] = _run(work_dir, "two_devices", TWO_PIPELINES)
    record["one_device"] = _run(work_dir, "one_device", TWO_PIPELINES, ONE_DEVICE)
    record["first_micro_batch"] = _first_micro_batch(work_dir, TWO_PIPELINES)
    record["bert_two_devices"] = _bert(work_dir, "bert_two_devices")
    record["bert_one_device"] = _bert(work_dir, "bert_one_device", ONE_DEVICE)
    record["images_one_device"] = _images(work_dir, "images_one_device", ONE_DEVICE)


def _group(work_dir, record):
    mine = f"phases.0.learning_rate={0.05 + 0.05 * _process_id()}"
    record["mismatch"] = _refused(work_dir, "mismatch", mine)
    lines = []
    record["group"] = _run(work_dir, "group", lines=lines)
    record["lines"] = lines
    record["first_micro_batch"] = _first_micro_batch(work_dir)
    record["bert"] = _bert(work_dir, "bert")
    _run(work_dir, "killed", callbacks=[KillAfter(KILLED_AFTER_BATCHES)])


def _lost_peer(work_dir, record):
    kill = KillProcess1After(KILLED_AFTER_BATCHES)
    kill.work_dir = work_dir
    _run(work_dir, "lost", f"strategy.peer_timeout={LOST_PEER_TIMEOUT}", callbacks=[kill])


def _resume(work_dir, record):
    record["resumed"] = _run(work_dir, "killed")
    record["lost_resumed"] = _run(work_dir, "lost", f"strategy.peer_timeout={LOST_PEER_TIMEOUT}")
    record["wide"] = _run(work_dir, "wide", TWO_PIPELINES)
    record["images"] = _images(work_dir, "images")


def _join_timeout(work_dir, record):
    (port,) = free_ports(1)
    _run(
        work_dir,
        "join_timeout",
        f"strategy.coordinator_address=127.0.0.1:{port}",
        "strategy.num_processes=2",
        "strategy.process_id=0",
        f"strategy.initialization_timeout={JOIN_TIMEOUT}",
    )


MODES = {
    "reference": _reference,
    "group": _group,
    "lost_peer": _lost_peer,
    "resume": _resume,
    "join_timeout": _join_timeout,
}


def main(argv):
    assert keras.backend.backend() == "jax", keras.backend.backend()
    mode, work_dir = argv
    MODES[mode](work_dir, _Recorder(work_dir))


if __name__ == "__main__":
    main(sys.argv[1:])
