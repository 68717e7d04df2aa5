"""Several logical CPU devices in one process, so MirroredStrategy runs several replicas on a
machine without accelerators (tests, demos)."""

from keras_largebatch import _extras
from keras_largebatch._checks import check_integer

try:
    import tensorflow as tf
except ModuleNotFoundError as error:
    raise _extras.missing_extra(__name__, "tensorflow", error) from error


def configure_logical_cpus(num_devices):
    """Splits the CPU into `num_devices` logical devices, "/cpu:0" ... "/cpu:{num_devices-1}".

    Lets MirroredStrategy run several replicas on a CPU-only machine, for tests and demos.
    Must run before TensorFlow initializes its runtime (before the first op or
    `tf.config.list_logical_devices`); calling it again with the same count afterwards is a
    no-op, so a test session and a demo script can both call it.

    Returns:
        The device names, for `get_strategy("mirrored", devices=...)`.

    Raises:
        TypeError: `num_devices` is not an integer.
        ValueError: `num_devices` is below 1.
        RuntimeError: TensorFlow is already initialized with a different number of
            logical CPU devices.
    """
    check_integer("num_devices", num_devices, low=1)
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)]
        )
    except RuntimeError:
        # The runtime is initialized; the configuration it started with is fixed.
        current = len(tf.config.get_logical_device_configuration(cpu) or [cpu])
        if current != num_devices:
            raise RuntimeError(
                f"configure_logical_cpus(num_devices={num_devices}): TensorFlow is already "
                f"initialized with {current} logical CPU device(s), which cannot change in "
                "this process; call it before any TensorFlow op runs"
            ) from None
    return [f"/cpu:{index}" for index in range(num_devices)]
