"""Train a small model on the JAX backend, on one device and with its variables sharded over
two by `keras.distribution.ModelParallel`, and print how far apart the two runs end.

Run by tests/optimizers/test_model_parallel.py as

    KERAS_BACKEND=jax XLA_FLAGS=--xla_force_host_platform_device_count=2 JAX_PLATFORMS=cpu \
        python -m tests.support.model_parallel_steps

(a process holds one Keras backend, and the test process runs on TensorFlow). Two shardings:

* "tensor_parallel": a (1, 2) mesh ("batch", "model"); the first kernel and its bias are split
  by columns over "model", the second kernel by rows (Megatron-LM's pair), the rest replicated;
* "fsdp": a (2,) mesh ("batch",) that splits both the batch and every variable's first axis,
  as ZeRO-3 and FSDP do.

Each sharded run asserts that its variables, and the optimizer slots of each, hold the layout
asked for, so that a comparison of replicated variables cannot pass for one of sharded ones.

Prints one JSON object on its last line: "cases", case -> the largest absolute difference
between the one-device and the sharded run of the final "weights" and of the recorded
"trust_ratios", the largest difference of a trust ratio relative to that ratio
("trust_ratios_relative"), the largest weight ("weight_scale"), how far training moved the
weights ("moved"), the paths of the variables that were "sharded" and both runs'
"iterations"; and "last_step", the state of one column-split LAMB kernel after its sharded
run (weights, moments, recorded trust ratio, step count), from which a test can rebuild the
last step.
"""

import json

import jax
import keras
import numpy as np
from keras.initializers import GlorotUniform

from keras_largebatch import LAMB, LARS
from tests.support.regression import regression_data

GLOBAL_BATCH_SIZE = 16
STEPS = 4

# Weight decay and layer adaptation both leave out the LayerNormalization, and LAMB's decay
# the biases too, so that excluded variables are split as well as adapted ones (the biases
# under both shardings, the LayerNormalization under "fsdp"). The clip binds: the gradient
# norm of each batch is 6 to 8 here.
OPTIMIZERS = {
    "LAMB": (
        LAMB,
        dict(
            learning_rate=1e-2,
            weight_decay=0.05,
            exclude_from_weight_decay=["norm", "bias"],
            exclude_from_layer_adaptation=["norm"],
            global_clipnorm=0.5,
            record_trust_ratio=True,
        ),
    ),
    "LARS": (
        LARS,
        dict(
            learning_rate=1.0,
            trust_coefficient=0.02,
            weight_decay=1e-3,
            nesterov=True,
            exclude_from_weight_decay=["norm"],
            exclude_from_layer_adaptation=["norm"],
            global_clipnorm=0.5,
            record_trust_ratio=True,
        ),
    ),
}

# Sharding -> (mesh shape, mesh axis names, {variable path: partition spec}); variables not
# named are replicated.
SHARDINGS = {
    "tensor_parallel": (
        (1, 2),
        ("batch", "model"),
        {
            "mlp/up/kernel": (None, "model"),
            "mlp/up/bias": ("model",),
            "mlp/down/kernel": ("model", None),
        },
    ),
    "fsdp": (
        (2,),
        ("batch",),
        {
            "mlp/up/kernel": ("batch", None),
            "mlp/up/bias": ("batch",),
            "mlp/norm/gamma": ("batch",),
            "mlp/norm/beta": ("batch",),
            "mlp/down/kernel": ("batch", None),
            "mlp/down/bias": ("batch",),
            "mlp/head/kernel": ("batch", None),
            "mlp/head/bias": ("batch",),
        },
    ),
}


# (optimizer, sharding, gradient accumulation steps, dtype); float32 unless named. The bfloat16
# case holds LAMB's float32 slots of bfloat16 variables, which LAMB makes itself.
CASES = [
    (optimizer_name, sharding, accumulation, None)
    for optimizer_name in OPTIMIZERS
    for sharding in SHARDINGS
    for accumulation in (None, 2)
] + [("LAMB", "fsdp", 2, "bfloat16")]
# The case whose column-split kernel "last_step" reports.
LAST_STEP_CASE = ("LAMB", "tensor_parallel", None, None)


def case_name(case):
    """The case's name in the printed object, e.g. "LAMB/fsdp/accumulation=2", with
    "/bfloat16" after it for a bfloat16 model."""
    optimizer_name, sharding, accumulation, dtype = case
    return f"{optimizer_name}/{sharding}/accumulation={accumulation}" + (
        f"/{dtype}" if dtype else ""
    )


def build_model(dtype=None):
    """Dense(16, tanh) "up", LayerNormalization "norm", Dense(8, tanh) "down", Dense(2)
    "head", on 6 features: every dimension is even, so each can be split over 2 devices. The
    kernels are Glorot-uniform with seeds 1 to 3; ``dtype`` is the layers' dtype policy."""
    return keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(
                16, "tanh", kernel_initializer=GlorotUniform(1), dtype=dtype, name="up"
            ),
            keras.layers.LayerNormalization(dtype=dtype, name="norm"),
            keras.layers.Dense(
                8, "tanh", kernel_initializer=GlorotUniform(2), dtype=dtype, name="down"
            ),
            keras.layers.Dense(2, kernel_initializer=GlorotUniform(3), dtype=dtype, name="head"),
        ],
        name="mlp",
    )


def model_parallel(sharding):
    """The `ModelParallel` distribution of ``SHARDINGS[sharding]`` over both devices."""
    shape, axis_names, specs = SHARDINGS[sharding]
    mesh = keras.distribution.DeviceMesh(shape, axis_names, devices=jax.devices())
    layout_map = keras.distribution.LayoutMap(mesh)
    for path, spec in specs.items():
        layout_map[path] = spec
    return keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")


def slots(optimizer, variable):
    """The optimizer variables made for ``variable`` (Keras names them after its path)."""
    prefix = variable.path.replace("/", "_") + "_"
    return [slot for slot in optimizer.variables if slot.name.startswith(prefix)]


def check_layout(model, sharding, slots_per_variable):
    """Assert that each variable is split as ``SHARDINGS[sharding]`` says, over both devices,
    and that its optimizer slots are split like it; returns the paths of the split ones."""
    specs = SHARDINGS[sharding][2]
    sharded = []
    for variable in model.trainable_variables:
        placement = variable.value.sharding
        assert len(placement.device_set) == 2, (variable.path, placement)
        wanted = jax.sharding.NamedSharding(
            placement.mesh, jax.sharding.PartitionSpec(*specs.get(variable.path, ()))
        )
        assert placement.is_equivalent_to(wanted, variable.ndim), (variable.path, placement)
        assert placement.is_fully_replicated == (variable.path not in specs), variable.path
        if not placement.is_fully_replicated:
            sharded.append(variable.path)
        variable_slots = slots(model.optimizer, variable)
        assert len(variable_slots) == slots_per_variable, (variable.path, variable_slots)
        for slot in variable_slots:
            assert slot.value.sharding.is_equivalent_to(placement, variable.ndim), (
                slot.path,
                slot.value.sharding,
                placement,
            )
    return sharded


def train(case, initial_weights):
    """``STEPS`` optimizer steps of ``GLOBAL_BATCH_SIZE`` examples, in micro-batches of
    ``GLOBAL_BATCH_SIZE / accumulation``, from ``initial_weights``, for ``case = (optimizer
    name, sharding or None for one device, accumulation, dtype)``. Returns the trained model."""
    optimizer_name, sharding, accumulation, dtype = case
    optimizer_class, kwargs = OPTIMIZERS[optimizer_name]
    features, targets = regression_data(GLOBAL_BATCH_SIZE * STEPS)
    keras.distribution.set_distribution(model_parallel(sharding) if sharding else None)
    try:
        model = build_model(dtype)
        model.set_weights(initial_weights)
        model.compile(
            optimizer=optimizer_class(
                gradient_accumulation_steps=None if accumulation == 1 else accumulation, **kwargs
            ),
            loss="mse",
        )
        model.fit(
            features,
            targets,
            batch_size=GLOBAL_BATCH_SIZE // (accumulation or 1),
            epochs=1,
            shuffle=False,
            verbose=0,
        )
        return model
    finally:
        keras.distribution.set_distribution(None)


def weights(model):
    """The trainable weights by path, as NumPy arrays."""
    return {v.path: np.asarray(v.value) for v in model.trainable_variables}


def compare(one_device, sharded, initial_weights):
    """The record of one case (see the module docstring), but for "sharded"."""
    expected, actual = weights(one_device), weights(sharded)
    expected_ratios = one_device.optimizer.trust_ratios()
    actual_ratios = sharded.optimizer.trust_ratios()
    assert expected.keys() == actual.keys() and expected_ratios.keys() == actual_ratios.keys()
    return {
        "weights": max(float(np.max(np.abs(actual[p] - expected[p]))) for p in expected),
        "trust_ratios": max(abs(actual_ratios[p] - expected_ratios[p]) for p in expected_ratios),
        "weight_scale": max(float(np.max(np.abs(w))) for w in expected.values()),
        "trust_ratios_relative": max(
            abs(actual_ratios[p] - expected_ratios[p]) / expected_ratios[p] for p in expected_ratios
        ),
        "moved": max(
            float(np.max(np.abs(w - w0))) for w, w0 in zip(expected.values(), initial_weights)
        ),
        "iterations": [
            int(keras.ops.convert_to_numpy(model.optimizer.iterations))
            for model in (one_device, sharded)
        ],
    }


def last_step(model):
    """The state of the column-split "mlp/up/kernel" after a LAMB run, as nested lists."""
    kernel = next(v for v in model.trainable_variables if v.path == "mlp/up/kernel")
    state = {slot.name.rsplit("_", 1)[1]: slot for slot in slots(model.optimizer, kernel)}
    optimizer = model.optimizer
    return {
        "weights": np.asarray(kernel.value).tolist(),
        "momentum": np.asarray(state["momentum"].value).tolist(),
        "velocity": np.asarray(state["velocity"].value).tolist(),
        "trust_ratio": optimizer.trust_ratios()["mlp/up/kernel"],
        "iterations": int(keras.ops.convert_to_numpy(optimizer.iterations)),
        "split_axis": SHARDINGS["tensor_parallel"][2]["mlp/up/kernel"].index("model"),
        "config": {
            key: optimizer.get_config()[key]
            for key in ("learning_rate", "beta_1", "beta_2", "epsilon", "weight_decay")
        },
    }


def main():
    assert keras.backend.backend() == "jax", keras.backend.backend()
    assert len(jax.devices()) == 2, jax.devices()
    initial_weights = build_model().get_weights()
    results = {"cases": {}}
    one_device_runs = {}
    for case in CASES:
        optimizer_name, sharding, accumulation, dtype = case
        one_device_case = (optimizer_name, None, accumulation, dtype)
        if one_device_case not in one_device_runs:
            one_device_runs[one_device_case] = train(one_device_case, initial_weights)
        one_device = one_device_runs[one_device_case]
        sharded = train(case, initial_weights)
        slots_per_variable = (2 if optimizer_name == "LAMB" else 1) + bool(accumulation)
        results["cases"][case_name(case)] = dict(
            compare(one_device, sharded, initial_weights),
            sharded=check_layout(sharded, sharding, slots_per_variable),
        )
        if case == LAST_STEP_CASE:
            results["last_step"] = last_step(sharded)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
