"""The devices a run trains on, behind one small interface, on the TensorFlow or the JAX backend.

The trainer talks to one object, made by `create_devices` from the run's ``strategy`` settings:

    devices = create_devices(config.strategy, layout_map=recipe.layout_map)
    devices.num_replicas             # examples of a micro-batch are split over this many
    devices.num_processes            # processes of the run (workers, hosts)
    devices.input_pipelines          # JAX: input pipelines of the run; TensorFlow: None
    devices.writes                   # False on all processes but one: they write no file
    devices.saves_are_collective     # True: every process joins a save (the others save a
                                     # throwaway copy)
    devices.check_same(what, value)  # raises unless every process has the same value
    with devices.local_scope():      # work of this process alone (the writer's checkpoint)
        ...
    with devices.scope():            # build, compile, load and fit inside it
        model = ...
        devices.prepare_fit(model)   # after compile
        model.fit(devices.distribute(dataset_fn), callbacks=devices.fit_callbacks(), ...)
    devices.describe()               # backend, kind, replicas, workers, devices (and the mesh
                                     # under model_parallel): for the summary

On TensorFlow it wraps the `tf.distribute` strategy of `keras_largebatch.distribute.get_strategy`:
``dataset_fn`` is called once per input pipeline with its `tf.distribute.InputContext`, and
returns that pipeline's per-replica batches. On JAX it is `keras.distribution.DataParallel` over
every device of every process (or the ``strategy.devices`` named), after the processes of a
multi-process run have formed their group (`process_group`): ``dataset_fn`` is called once per
input pipeline (``strategy.input_pipelines``, by default one per process) with a context of as
many pipelines and replicas, so that it returns that pipeline's share of every micro-batch; each
process joins the shares of its pipelines, and Keras makes them one global micro-batch split
over the devices along the batch axis. The step is one program over all of them, so the
gradient, a sum over the batch and the batch-norm statistics already cover the global batch.

With ``strategy.name=model_parallel`` it is `keras.distribution.ModelParallel` over a mesh of
``(devices / M, M)`` devices, axes ``("batch", "model")`` with ``M`` the
``strategy.model_axis_size``: the recipe's `Recipe.layout_map` splits its large kernels over
"model", and the batch is split over "batch" only, so the run's replicas (``num_replicas``, what
a micro-batch is split over) are its ``devices / M`` rows. Each row lies within one process
(``M`` must divide every process's devices), so that a process holds whole rows and reads its
own share of the input as under DataParallel.

`config.check_strategy_config` refuses a setting of the other backend (``strategy.name=mirrored``
on JAX, ``data_parallel`` or ``model_parallel`` on TensorFlow), naming the key, its value, the
backend and what is allowed.
"""

import contextlib

import keras
import numpy as np
import tensorflow as tf

from keras_largebatch import distribute
from keras_largebatch.training.config import check_strategy_config
from keras_largebatch.training.process_group import (
    check_same,
    check_same_with,
    start_process_group,
)


def create_devices(strategy, layout_map=None):
    """The `TensorFlowDevices` or `JaxDevices` that the ``strategy`` settings (a
    `config.StrategyConfig`, checked by `config.check_strategy_config`) describe on Keras's backend.

    ``layout_map``: for ``strategy.name=model_parallel``, the function of the device mesh that
    returns the model's `keras.distribution.LayoutMap` (a recipe's `Recipe.layout_map`).

    Call it before any other TensorFlow op runs (see `keras_largebatch.distribute.get_strategy`).
    """
    check_strategy_config(strategy)
    if keras.backend.backend() == "jax":
        return JaxDevices(strategy, layout_map)
    return TensorFlowDevices(
        distribute.get_strategy(strategy.name, tpu=strategy.tpu, devices=strategy.devices)
    )


class TensorFlowDevices:
    """A `tf.distribute.Strategy`: the replicas of its scope, one input pipeline per worker."""

    backend = "tensorflow"
    input_pipelines = None  # one per worker, as tf.distribute decides

    def __init__(self, strategy):
        self.strategy = strategy
        self.num_replicas = int(strategy.num_replicas_in_sync)
        self.num_processes = distribute.describe_strategy(strategy)["num_workers"]
        self.writes = bool(strategy.extended.should_checkpoint)
        # Saving reads and makes mirrored variables: on several workers, a collective.
        self.saves_are_collective = self.num_processes > 1

    def scope(self):
        return self.strategy.scope()

    def distribute(self, dataset_fn):
        """The distributed dataset of ``dataset_fn(input_context)``, called per input pipeline."""
        return self.strategy.distribute_datasets_from_function(dataset_fn)

    def check_same(self, description, value):
        """Raises ValueError on every worker unless all passed an equal ``value``, naming
        where they differ (`process_group.check_same_with`, over the strategy's all-gather).
        A collective: every worker calls it, in the same order, so it is also a barrier. One
        worker: does nothing."""
        if self.num_processes > 1:
            check_same_with(self._gather, description, value)

    def _gather(self, array):
        """``array`` of every worker, stacked in task order (each worker's first replica).
        Sent as float32, which every collective implementation carries (NCCL included; an
        int32 tensor would live in host memory) and which holds the bytes and lengths
        `check_same_with` sends exactly."""
        local = tf.constant(np.asarray(array).astype(np.float32)[None])
        values = self.strategy.experimental_distribute_values_from_function(lambda _: local)
        gathered = self.strategy.gather(values, axis=0).numpy()
        return gathered[:: self.num_replicas // self.num_processes].astype(array.dtype)

    def local_scope(self):
        """A scope for work of this worker alone: the strategy's scope stays."""
        return contextlib.nullcontext()

    def prepare_fit(self, model):
        """Readies a compiled ``model`` for `fit` on these devices: several steps per execution
        under a mirrored strategy (`keras_largebatch.distribute.unroll_steps_per_execution`)."""
        distribute.unroll_steps_per_execution(model)

    def fit_callbacks(self):
        """Callbacks every `fit` on these devices needs: none on TensorFlow."""
        return []

    def describe(self):
        """``backend`` and the `keras_largebatch.distribute.describe_strategy` fields."""
        return {"backend": self.backend, **distribute.describe_strategy(self.strategy)}


class JaxDevices:
    """`keras.distribution.DataParallel` over the run's devices (``strategy.devices``, Keras
    device names; None: all of them, over every host): variables are replicated on each
    device, batches split over them. Or, with ``strategy.name=model_parallel``,
    `keras.distribution.ModelParallel` over a ``(batch, model)`` mesh of them, the variables
    laid out by ``layout_map(device_mesh)``, batches split over the "batch" axis.

    A run of several processes (`process_group.start_process_group`, called first) is one
    program over the devices of all of them; each process reads its share of the input
    (`distribute`), and only process 0 writes files.
    """

    backend = "jax"

    def __init__(self, strategy, layout_map=None):
        start_process_group(strategy)
        if tf.config.list_physical_devices("GPU"):
            # TensorFlow only reads the input here; left its GPUs, it would take their memory
            # from JAX (JAX's documentation, "GPU memory allocation"). Once TensorFlow has
            # started, its devices are fixed, as whoever started it set them.
            try:
                tf.config.set_visible_devices([], "GPU")
            except RuntimeError:
                pass
        import jax

        by_name = {f"{device.platform}:{device.id}": device for device in jax.devices()}
        available = keras.distribution.list_devices()
        devices = strategy.devices
        if devices is not None:
            missing = [device for device in devices if device not in available]
            if missing:
                raise ValueError(
                    f"strategy.devices={devices!r}: {missing} not found; the jax backend "
                    f"lists {available}"
                )
        self.num_processes = jax.process_count()
        self.process_index = jax.process_index()
        # Each process's devices together, in process order: Keras makes the global batch
        # with `jax.make_array_from_process_local_data`, which then puts process p's rows at
        # slice p of it.
        self.devices = sorted(devices or available, key=lambda name: by_name[name].process_index)
        self.local_devices = [
            name for name in self.devices if by_name[name].process_index == self.process_index
        ]
        counts = {
            process: sum(by_name[name].process_index == process for name in self.devices)
            for process in range(self.num_processes)
        }
        named = f"strategy.devices={devices!r}" if devices else "the devices JAX lists"
        if len(set(counts.values())) != 1 or not counts[0]:
            raise ValueError(
                f"{named} must hold as many devices of every process, at least one; got "
                f"{counts} devices per process"
            )
        self.kind = "model_parallel" if strategy.name == "model_parallel" else "data_parallel"
        self.mesh_shape = None  # model_parallel: {"batch": rows, "model": devices per row}
        if self.kind == "model_parallel":
            if layout_map is None:
                raise ValueError(
                    "strategy.name=model_parallel needs the recipe's layout map: "
                    "create_devices(strategy, layout_map=recipe.layout_map)"
                )
            self.mesh_shape = self._mesh_shape(strategy.model_axis_size, named, counts[0])
            mesh = keras.distribution.DeviceMesh(
                shape=tuple(self.mesh_shape.values()),
                axis_names=tuple(self.mesh_shape),
                devices=self.devices,
            )
            self.distribution = keras.distribution.ModelParallel(
                layout_map=layout_map(mesh), batch_dim_name="batch", auto_shard_dataset=False
            )
            self.num_replicas = self.mesh_shape["batch"]
        else:
            self.distribution = keras.distribution.DataParallel(
                devices=self.devices, auto_shard_dataset=False
            )
            self.num_replicas = len(self.devices)
        self.input_pipelines = strategy.input_pipelines or self.num_processes
        self.writes = self.process_index == 0
        # The writer saves in `local_scope`, outside the distribution: no collective.
        self.saves_are_collective = False

    def _mesh_shape(self, model_axis_size, named, devices_per_process):
        """``{"batch": rows, "model": model_axis_size}`` of the ModelParallel mesh; raises
        unless ``model_axis_size`` divides the devices (``named``) and, in a run of several
        processes, each process's ``devices_per_process``."""
        key = f"strategy.model_axis_size={model_axis_size}"
        if len(self.devices) % model_axis_size:
            raise ValueError(
                f"{key} must divide the {len(self.devices)} devices of the run ({named}: "
                f"{self.devices}); the mesh is (devices / model_axis_size, model_axis_size)"
            )
        if self.num_processes > 1 and devices_per_process % model_axis_size:
            raise ValueError(
                f"{key} must divide the {devices_per_process} devices of each of the "
                f"{self.num_processes} processes: a row of the (batch, model) mesh must lie "
                "within one process, which reads the input of its rows (a model axis across "
                "processes would need every process to read the same batch)"
            )
        return {"batch": len(self.devices) // model_axis_size, "model": model_axis_size}

    def scope(self):
        return self.distribution.scope()

    def distribute(self, dataset_fn):
        """This process's share of the input: ``dataset_fn`` called for each of its input
        pipelines (`local_input_pipelines`) with a `tf.distribute.InputContext` of
        `input_pipelines` pipelines and as many replicas, so that each returns batches of
        ``micro-batch / input_pipelines`` examples, joined along the batch axis. `model.fit`
        makes each joined batch its process's slice of the global micro-batch, which holds
        the pipelines' batches in pipeline order: a run's data depends on its input
        pipelines, not on how many processes read them."""
        datasets = [
            dataset_fn(
                tf.distribute.InputContext(
                    num_input_pipelines=self.input_pipelines,
                    input_pipeline_id=index,
                    num_replicas_in_sync=self.input_pipelines,
                )
            )
            for index in self.local_input_pipelines
        ]
        if len(datasets) == 1:
            return datasets[0]
        return tf.data.Dataset.zip(tuple(datasets)).map(_concatenate)

    @property
    def local_input_pipelines(self):
        """The indices of this process's input pipelines (the plan checks that they split)."""
        per_process = self.input_pipelines // self.num_processes
        return range(self.process_index * per_process, (self.process_index + 1) * per_process)

    def check_same(self, description, value):
        """Raises ValueError on every process unless all passed an equal ``value``
        (`process_group.check_same`); every process calls it."""
        check_same(description, value)

    @contextlib.contextmanager
    def local_scope(self):
        """A scope for work of this process alone, such as the writer's checkpoint: outside
        the distribution, so that the variables Keras makes meanwhile (saving weights builds
        a throwaway optimizer) are this process's and start no collective (JAX checks that
        a value put on the devices of every process is the same on each) that the other
        processes would never join."""
        distribution = keras.distribution.distribution()
        keras.distribution.set_distribution(None)
        try:
            yield
        finally:
            keras.distribution.set_distribution(distribution)

    def prepare_fit(self, model):
        """Nothing to ready on JAX (the mirrored-strategy fault is TensorFlow's)."""

    def fit_callbacks(self):
        """`CommitTrainingState`: every `fit` on JAX compiles its train step once."""
        return [CommitTrainingState()]

    def describe(self):
        """``backend``, ``kind``, ``num_replicas``, ``num_workers``, ``devices``, the process's
        index, devices and input pipelines; and for model_parallel ``mesh_shape``, ``{"batch":
        rows, "model": devices per row}`` (the replicas are the rows)."""
        return {
            "backend": self.backend,
            "kind": self.kind,
            "num_replicas": self.num_replicas,
            **({"mesh_shape": self.mesh_shape} if self.mesh_shape else {}),
            "num_workers": self.num_processes,
            "devices": self.devices,
            "process_index": self.process_index,
            "local_devices": self.local_devices,
            "input_pipelines": self.input_pipelines,
        }


class CommitTrainingState(keras.callbacks.Callback):
    """Pins every value of the training state to its device at the start of each epoch, so
    that a train step is compiled once rather than three times.

    `jax.jit` keys its compiled programs on whether each argument is committed to a device.
    Over a mesh of one device, Keras leaves a variable's value where it was made, on the
    default device and uncommitted: the equivalent layout is skipped. The first step then
    compiles for uncommitted state, the second for the committed state the first returned,
    and every epoch after the first compiles once more for its metrics, which Keras resets to
    uncommitted zeros before `on_epoch_begin` (as loading a checkpoint leaves the weights).
    Committing each such value where it already is, after the reset and before the epoch's
    first step reads the state, moves no data and leaves one program. Over several devices
    the values are committed already and nothing changes."""

    def on_epoch_begin(self, epoch, logs=None):
        import jax

        model = self.model
        optimizer = getattr(model, "optimizer", None)
        state = [model.trainable_variables, model.non_trainable_variables]
        state += [optimizer.variables if optimizer is not None else [], model.metrics_variables]
        for variables in state:
            for variable in variables:
                value = variable.value
                if isinstance(value, jax.Array) and not value.committed:
                    variable.assign(jax.device_put(value, value.sharding))


def _concatenate(*batches):
    """One batch of the batches of several pipelines, in their order, along the batch axis."""
    return tf.nest.map_structure(lambda *parts: tf.concat(parts, axis=0), *batches)
