"""The devices a run trains on, behind one small interface, on the TensorFlow or the JAX backend.

The trainer talks to one object, made by `create_devices` from the run's ``strategy`` settings:

    devices = create_devices(config.strategy)
    devices.num_replicas             # examples of a micro-batch are split over this many
    devices.writes                   # False on the non-chief workers: they write no file
    with devices.scope():            # build, compile, load and fit inside it
        model = ...
        devices.prepare_fit(model)   # after compile
        model.fit(devices.distribute(dataset_fn), ...)
    devices.describe()               # backend, kind, replicas, workers, devices: for the summary

On TensorFlow it wraps the `tf.distribute` strategy of `keras_largebatch.distribute.get_strategy`:
``dataset_fn`` is called once per input pipeline with its `tf.distribute.InputContext`, and
returns that pipeline's per-replica batches. On JAX it is `keras.distribution.DataParallel` over
every device (or the ``strategy.devices`` named): ``dataset_fn`` is called once with the context
of a single pipeline and a single replica, so the batches it returns are whole micro-batches, which
Keras splits over the devices along the batch axis; the step is one program over all of them, so
the gradient, a sum over the batch and the batch-norm statistics already cover the global batch.

`config.check_strategy_config` refuses a setting of the other backend (``strategy.name=mirrored``
on JAX, ``data_parallel`` on TensorFlow), naming the key, its value, the backend and what is
allowed.
"""

import keras
import tensorflow as tf

from keras_largebatch import distribute
from keras_largebatch.training.config import check_strategy_config


def create_devices(strategy):
    """The `TensorFlowDevices` or `JaxDevices` that the ``strategy`` settings (a
    `config.StrategyConfig`, checked by `config.check_strategy_config`) describe on Keras's backend.

    Call it before any other TensorFlow op runs (see `keras_largebatch.distribute.get_strategy`).
    """
    check_strategy_config(strategy)
    if keras.backend.backend() == "jax":
        return JaxDevices(strategy.devices)
    return TensorFlowDevices(
        distribute.get_strategy(strategy.name, tpu=strategy.tpu, devices=strategy.devices)
    )


class TensorFlowDevices:
    """A `tf.distribute.Strategy`: the replicas of its scope, one input pipeline per worker."""

    backend = "tensorflow"

    def __init__(self, strategy):
        self.strategy = strategy
        self.num_replicas = int(strategy.num_replicas_in_sync)
        self.writes = bool(strategy.extended.should_checkpoint)

    def scope(self):
        return self.strategy.scope()

    def distribute(self, dataset_fn):
        """The distributed dataset of ``dataset_fn(input_context)``, called per input pipeline."""
        return self.strategy.distribute_datasets_from_function(dataset_fn)

    def prepare_fit(self, model):
        """Readies a compiled ``model`` for `fit` on these devices: several steps per execution
        under a mirrored strategy (`keras_largebatch.distribute.unroll_steps_per_execution`)."""
        distribute.unroll_steps_per_execution(model)

    def describe(self):
        """``backend`` and the `keras_largebatch.distribute.describe_strategy` fields."""
        return {"backend": self.backend, **distribute.describe_strategy(self.strategy)}


class JaxDevices:
    """`keras.distribution.DataParallel` over ``devices`` (Keras device names; None: all of
    them, over every host): variables are replicated on each device, batches split over them."""

    backend = "jax"

    def __init__(self, devices=None):
        if tf.config.list_physical_devices("GPU"):
            # TensorFlow only reads the input here; left its GPUs, it would take their memory
            # from JAX (JAX's documentation, "GPU memory allocation"). Once TensorFlow has
            # started, its devices are fixed, as whoever started it set them.
            try:
                tf.config.set_visible_devices([], "GPU")
            except RuntimeError:
                pass
        available = keras.distribution.list_devices()
        if devices is not None:
            missing = [device for device in devices if device not in available]
            if missing:
                raise ValueError(
                    f"strategy.devices={devices!r}: {missing} not found; the jax backend "
                    f"lists {available}"
                )
        self.devices = list(devices or available)
        self.distribution = keras.distribution.DataParallel(devices=self.devices)
        self.num_replicas = len(self.devices)
        import jax

        self.num_workers = jax.process_count()
        self.writes = jax.process_index() == 0

    def scope(self):
        return self.distribution.scope()

    def distribute(self, dataset_fn):
        """``dataset_fn`` read as one pipeline of whole micro-batches; `model.fit` splits each
        over the devices (and over the hosts of a multi-host run)."""
        return dataset_fn(
            tf.distribute.InputContext(
                num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1
            )
        )

    def prepare_fit(self, model):
        """Nothing to ready on JAX (the mirrored-strategy fault is TensorFlow's)."""

    def describe(self):
        return {
            "backend": self.backend,
            "kind": "data_parallel",
            "num_replicas": self.num_replicas,
            "num_workers": self.num_workers,
            "devices": self.devices,
        }
