"""Save models compiled with our optimizers in one process, load them in fresh ones.

Run by tests/test_registration.py, on the backend that ``KERAS_BACKEND`` names, as

    python -m tests.support.registration_round_trip save WORK_DIR
    python -m tests.support.registration_round_trip load WORK_DIR ORDER

``save`` imports ``keras_largebatch``, looks Keras up without importing it, then imports it and
records which classes the package registered; it trains each case's model `STEPS` steps, saves
it (``CASE.keras``), trains `STEPS` more and writes those weights (``CASE_uninterrupted.npz``),
and writes the serialized optimizers of `SERIALIZED` with their configs (``serialized.json``).
``load`` starts from nothing but Keras and, by ``ORDER``, ``import keras_largebatch`` before
Keras (``package_first``) or after it (``keras_first``), recording what the package imported
with it or registered; ``keras_first`` first tries every case without the package
(``without_package``). Each order then loads each model, trains it `STEPS` steps
(``ORDER_CASE.npz``) and deserializes the optimizers. The last line printed is one JSON object:
per order, the imports and registrations, and per case the loaded classes or the error.
"""

import json
import os
import sys

STEPS = 3
BATCH_SIZE = 8


def _data():
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS * BATCH_SIZE, 6)).astype("float32")
    y = rng.normal(size=(STEPS * BATCH_SIZE, 1)).astype("float32")
    return x, y


def _fit(model):
    x, y = _data()
    model.fit(x, y, batch_size=BATCH_SIZE, epochs=1, shuffle=False, verbose=0)


def _model():
    import keras

    inputs = keras.Input((6,))
    x = keras.layers.Dense(8, activation="relu", name="dense")(inputs)
    x = keras.layers.LayerNormalization(name="layer_norm")(x)
    return keras.Model(inputs, keras.layers.Dense(1, name="head")(x))


def _cases():
    """Case name -> optimizer: between them every schedule and both optimizers."""
    import keras

    from keras_largebatch import LAMB, LARS, WarmUp, WarmupPolynomialDecay

    return {
        # 3 micro-batches, 2 per update: LAMB is saved mid-accumulation.
        "lamb": LAMB(
            learning_rate=WarmupPolynomialDecay(1e-2, total_steps=10, warmup_steps=1),
            weight_decay=0.01,
            exclude_from_weight_decay=["layer_norm", "bias"],
            gradient_accumulation_steps=2,
        ),
        "lars": LARS(
            learning_rate=WarmUp(keras.optimizers.schedules.CosineDecay(0.5, 10), 2),
            momentum=0.9,
            weight_decay=1e-4,
            nesterov=True,
        ),
    }


def _serialized():
    """Optimizers with the two schedules the saved models do not use."""
    from keras_largebatch import LAMB, LARS, LarsMLPerfSchedule, MultiPhaseSchedule

    phases = [
        {"steps": 10, "peak_learning_rate": 6e-3, "warmup_steps": 2, "power": 0.5},
        {"steps": 5, "peak_learning_rate": 4e-3, "warmup_steps": 1},
    ]
    return {
        "lamb": LAMB(learning_rate=MultiPhaseSchedule(phases), beta_1=0.8, weight_decay=0.01),
        "lars": LARS(
            learning_rate=LarsMLPerfSchedule(
                2.0, steps_per_epoch=4, warmup_epochs=1.5, total_steps=20
            ),
            exclude_from_layer_adaptation=["norm"],
        ),
    }


def _comparable(config):
    # A config as JSON holds it (tuples become lists).
    return json.loads(json.dumps(config))


def _registered():
    import keras

    return sorted(
        name
        for name, value in keras.saving.get_custom_objects().items()
        if value.__module__.startswith("keras_largebatch.")
    )


def save(work_dir):
    import importlib.util

    import keras_largebatch  # noqa: F401

    # Looking Keras up, without importing it, leaves the registration to come.
    assert importlib.util.find_spec("keras")
    import keras
    import numpy as np

    result = {"registered": _registered()}

    for case, optimizer in _cases().items():
        keras.utils.set_random_seed(0)
        model = _model()
        model.compile(optimizer, "mse")
        _fit(model)
        model.save(os.path.join(work_dir, f"{case}.keras"))
        _fit(model)
        np.savez(os.path.join(work_dir, f"{case}_uninterrupted.npz"), *model.get_weights())
    serialized = {
        name: {
            "serialized": _comparable(keras.optimizers.serialize(optimizer)),
            "config": _comparable(optimizer.get_config()),
        }
        for name, optimizer in _serialized().items()
    }
    with open(os.path.join(work_dir, "serialized.json"), "w") as stream:
        json.dump(serialized, stream)
    return result


def _class_name(value):
    return f"{type(value).__module__}.{type(value).__name__}"


def load(work_dir, order):
    if order == "package_first":
        import keras_largebatch  # noqa: F401

        imported = sorted(
            name for name in ("jax", "keras", "keras_hub", "tensorflow") if name in sys.modules
        )
    import keras  # noqa: F401

    if order == "package_first":
        result = {
            "package_first": {
                "imported_with_package": imported,
                "registered": _registered(),
                "modules": sorted(m for m in sys.modules if m.startswith("keras_largebatch.")),
            }
        }
    else:
        # Without the package Keras cannot find the classes; then the import fixes it.
        result = {"without_package": _load_cases(work_dir, "without_package")}
        import keras_largebatch  # noqa: F401

        result["keras_first"] = {"registered": _registered()}
    result[order].update(_load_cases(work_dir, order))
    return result


def _load_cases(work_dir, order):
    import keras
    import numpy as np

    result = {}
    for case in _cases_saved(work_dir):
        try:
            model = keras.models.load_model(os.path.join(work_dir, f"{case}.keras"))
        except TypeError as error:
            result[case] = {"error": str(error)}
            continue
        optimizer = model.optimizer
        result[case] = {
            "optimizer": _class_name(optimizer),
            "learning_rate": _class_name(optimizer._learning_rate),
        }
        _fit(model)
        np.savez(os.path.join(work_dir, f"{order}_{case}.npz"), *model.get_weights())
    with open(os.path.join(work_dir, "serialized.json")) as stream:
        serialized = json.load(stream)
    for name, saved in serialized.items():
        optimizer = keras.optimizers.deserialize(saved["serialized"])
        if not isinstance(optimizer, keras.optimizers.Optimizer):
            # Keras hands back the class name of a class it cannot find.
            result[f"deserialized_{name}"] = {"returned": repr(optimizer)}
            continue
        result[f"deserialized_{name}"] = {
            "optimizer": _class_name(optimizer),
            "learning_rate": _class_name(optimizer._learning_rate),
            "same_config": _comparable(optimizer.get_config()) == saved["config"],
        }
    return result


def _cases_saved(work_dir):
    return sorted(
        name[: -len(".keras")] for name in os.listdir(work_dir) if name.endswith(".keras")
    )


def main(argv):
    mode, work_dir, *order = argv
    result = save(work_dir) if mode == "save" else load(work_dir, *order)
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
