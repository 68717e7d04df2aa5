"""Runs of the trainer with `keras.distribution.ModelParallel` on the JAX backend: the tiny BERT
on 1 device under DataParallel, and under model_parallel on a (1, 2) and a (2, 2) mesh, in one
process and in a group of two.

tests/training/test_model_parallel_trainer.py runs them with `launch`: mode ``one_process`` in
one process of 4 CPU devices, mode ``group`` in 2 processes of 2 (a process holds one Keras
backend, and the test process runs on TensorFlow), each as

    KERAS_BACKEND=jax XLA_FLAGS=--xla_force_host_platform_device_count=D JAX_PLATFORMS=cpu \
        python -m tests.support.model_parallel_training MODE WORK_DIR RECORD_FILE...

Every run is `jax_training.tiny_bert_config`'s (1 layer, hidden 16, 2 heads, vocabulary 64,
dropout 0, 6 steps of 8 examples) with 2 micro-batches per step over 2 input pipelines, on the
record files given, so that every run reads the same data. The last line a process prints is
one JSON object: run name -> its summary (whose "checkpoint" the tests read); the layout of
every trainable variable during each model-parallel run ("layouts"); the progress lines of the
(2, 2) run ("lines"); and the messages of the refused settings ("refused").
"""

import json
import os
import subprocess
import sys

import keras

from tests.support import jax_training
from tests.support import processes as python_processes
from tests.support.multiworker import free_ports
from tests.support.runs import ROOT, Interrupt, InterruptAfter
from tests.support.xla_flags import with_test_flags

ACCUMULATE = "phases.0.gradient_accumulation_steps=2"
TWO_PIPELINES = "strategy.input_pipelines=2"
MODEL_PARALLEL = ("strategy.name=model_parallel", "strategy.model_axis_size=2")
TWO_DEVICES = "strategy.devices=['cpu:0', 'cpu:1']"
INTERRUPTED_AFTER_BATCHES = 9  # micro-batch 1 of step 5, after step 4's checkpoint


class Layouts(keras.callbacks.Callback):
    """Records, at the first training call of each `fit`, how every trainable variable is laid
    out: the mesh axis of each dimension (None: not split), the shape of one device's part and
    the devices that hold it."""

    def __init__(self):
        super().__init__()
        self.fits = []
        self._recorded = False

    def on_train_begin(self, logs=None):
        self._recorded = False

    def on_train_batch_end(self, batch, logs=None):
        if self._recorded:
            return
        self._recorded = True
        self.fits.append(
            {
                variable.path: {
                    "axes": _axes(variable.value.sharding.spec, variable.ndim),
                    "part": list(variable.value.addressable_shards[0].data.shape),
                    "devices": len(variable.value.sharding.device_set),
                }
                for variable in self.model.trainable_variables
            }
        )


def _axes(spec, ndim):
    """The mesh axis of each of ``ndim`` dimensions (JAX leaves out trailing unsplit ones)."""
    return list(spec) + [None] * (ndim - len(spec))


def run(work_dir, record_files, name, *overrides, callbacks=(), lines=None):
    """`jax_training.tiny_bert_config`'s run with 2 micro-batches per step over 2 input
    pipelines (so that one process and a group of two read the same data), in
    ``WORK_DIR/name``; returns its summary."""
    from keras_largebatch.bert import pretraining as pretrain

    config = jax_training.tiny_bert_config(
        os.path.join(work_dir, name), record_files, ACCUMULATE, TWO_PIPELINES, *overrides
    )
    log = lines.append if lines is not None else lambda line: None
    return pretrain.pretrain(config, callbacks=callbacks, log=log)


def one_process(work_dir, record_files):
    """The runs on one device, on a (1, 2) and a (2, 2) mesh, and the (2, 2) run interrupted
    and resumed; the layouts, progress lines and refusals of the module docstring."""
    two, four, lines = Layouts(), Layouts(), []
    results = {
        "one_device": run(work_dir, record_files, "one_device", jax_training.ONE_DEVICE),
        "two_devices": run(
            work_dir, record_files, "two_devices", *MODEL_PARALLEL, TWO_DEVICES, callbacks=[two]
        ),
        "four_devices": run(
            work_dir, record_files, "four_devices", *MODEL_PARALLEL, callbacks=[four], lines=lines
        ),
    }
    results["layouts"] = {"two_devices": two.fits, "four_devices": four.fits}
    results["lines"] = lines
    interrupt = InterruptAfter(INTERRUPTED_AFTER_BATCHES)
    try:
        run(work_dir, record_files, "resumed", *MODEL_PARALLEL, callbacks=[interrupt])
    except Interrupt:
        pass
    results["resumed"] = run(work_dir, record_files, "resumed", *MODEL_PARALLEL)
    results["refused"] = refused(work_dir, record_files)
    return results


def group_process(work_dir, record_files):
    """One process of a group of two with 2 devices each: the refusal of a model axis across
    the processes, then the (2, 2) run, each process holding one row of the mesh."""
    results = {}
    try:
        run(work_dir, record_files, "group_refused", *MODEL_PARALLEL, "strategy.model_axis_size=4")
    except ValueError as error:
        results["refused"] = [str(error), os.path.exists(os.path.join(work_dir, "group_refused"))]
    layouts = Layouts()
    results["group"] = run(work_dir, record_files, "group", *MODEL_PARALLEL, callbacks=[layouts])
    results["layouts"] = layouts.fits
    return results


def refused(work_dir, record_files):
    """What each refused setting raises, and whether its output directory exists after: the
    BERT recipe on a model axis of 3, which does not divide the 4 devices, and of 4, which does
    not divide the 2 attention heads; and the image
    recipe, which has no layout map (its training files do not exist, so that a refusal after
    its `prepare` would raise another message)."""
    from keras_largebatch import vision as vision_train

    cases = {
        "model_axis_size=3": lambda name: run(
            work_dir, record_files, name, *MODEL_PARALLEL, "strategy.model_axis_size=3"
        ),
        "model_axis_size=4": lambda name: run(
            work_dir, record_files, name, *MODEL_PARALLEL, "strategy.model_axis_size=4"
        ),
        "images": lambda name: vision_train.train(
            jax_training.small_image_config(
                os.path.join(work_dir, name),
                [os.path.join(work_dir, "missing-train")],
                [os.path.join(work_dir, "missing-eval")],
                *MODEL_PARALLEL,
            ),
            log=lambda line: None,
        ),
    }
    messages = {}
    for case, start in cases.items():
        name = f"refused-{case}"
        try:
            start(name)
        except ValueError as error:
            messages[case] = [str(error), os.path.exists(os.path.join(work_dir, name))]
    return messages


def launch(mode, work_dir, record_files, num_processes, devices_per_process, timeout=300):
    """Runs ``mode`` in ``num_processes`` processes of ``devices_per_process`` CPU devices each
    (more than one: a group on 127.0.0.1 named in Keras's ``KERAS_DISTRIBUTION_*`` variables)
    and returns what each printed last, by process id; raises, with each process's stderr,
    unless all end well within ``timeout`` seconds."""
    (port,) = free_ports(1)
    group = {
        "KERAS_DISTRIBUTION_JOB_ADDRESSES": f"127.0.0.1:{port}",
        "KERAS_DISTRIBUTION_NUM_PROCESSES": str(num_processes),
    }
    processes = [
        python_processes.Popen(
            [sys.executable, "-m", __name__, mode, str(work_dir), *map(str, record_files)],
            cwd=ROOT,
            env=dict(
                os.environ,
                KERAS_BACKEND="jax",
                JAX_PLATFORMS="cpu",
                # LLVM's optimizations of these tiny programs cost more time than they save;
                # every run, the one-device reference too, is compiled without them.
                XLA_FLAGS=with_test_flags(
                    f"--xla_force_host_platform_device_count={devices_per_process} "
                    "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
                ),
                CUDA_VISIBLE_DEVICES="",
                **(
                    dict(group, KERAS_DISTRIBUTION_PROCESS_ID=str(index))
                    if num_processes > 1
                    else {}
                ),
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for index in range(num_processes)
    ]
    try:
        outputs = [process.communicate(timeout=timeout) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    for index, (process, (_, stderr)) in enumerate(zip(processes, outputs)):
        assert process.returncode == 0, f"process {index}:\n{stderr[-4000:]}"
    return [json.loads(stdout.strip().splitlines()[-1]) for stdout, _ in outputs]


MODES = {"one_process": one_process, "group": group_process}


def main(argv):
    assert keras.backend.backend() == "jax", keras.backend.backend()
    import jax

    mode, work_dir, *record_files = argv
    if mode == "one_process":
        # The runs compile many of the same programs (the resumed run all of the uninterrupted
        # one's); JAX's persistent cache loads each one compiled before instead of compiling
        # it again, which halves the time. A loaded program is the one compiled.
        jax.config.update("jax_compilation_cache_dir", os.path.join(work_dir, "jax_cache"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    print(json.dumps(MODES[mode](work_dir, record_files)))


if __name__ == "__main__":
    main(sys.argv[1:])
