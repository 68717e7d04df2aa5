import keras
import numpy as np
import pytest

from keras_largebatch import LAMB, LARS


@keras.saving.register_keras_serializable(package="keras_largebatch_tests")
def exclude_embeddings(variable):
    return "embedding" in variable.path


OPTIMIZERS = {
    "lamb": lambda: LAMB(
        learning_rate=keras.optimizers.schedules.PolynomialDecay(1e-2, 20, 1e-3),
        beta_1=0.85,
        epsilon=1e-5,
        weight_decay=0.01,
        bias_correction=False,
        exclude_from_weight_decay=["layer_norm", "bias"],
        exclude_from_layer_adaptation=exclude_embeddings,
        min_trust_ratio=0.01,
        max_trust_ratio=10.0,
        record_trust_ratio=True,
        global_clipnorm=1.0,
        gradient_accumulation_steps=2,
    ),
    "lars": lambda: LARS(
        learning_rate=0.5,
        momentum=0.95,
        trust_coefficient=0.01,
        epsilon=1e-8,
        weight_decay=1e-4,
        nesterov=True,
        clip=True,
        exclude_from_weight_decay=[],
        exclude_from_layer_adaptation=["norm"],
    ),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_config_round_trip(name):
    optimizer = OPTIMIZERS[name]()
    config = optimizer.get_config()
    restored = type(optimizer).from_config(config)
    assert restored.get_config() == config
    serialized = keras.optimizers.serialize(optimizer)
    assert keras.optimizers.deserialize(serialized).get_config() == config
    if name == "lamb":
        assert config["exclude_from_weight_decay"] == ["layer_norm", "bias"]
        assert restored._layer_adaptation_rule.spec is exclude_embeddings


def _model():
    inputs = keras.Input((6,), dtype="int32")
    x = keras.layers.Embedding(20, 8, name="embedding")(inputs)
    x = keras.layers.Dense(8, activation="relu", name="dense")(x)
    x = keras.layers.LayerNormalization(name="layer_norm")(x)
    outputs = keras.layers.Dense(1, name="head")(keras.layers.GlobalAveragePooling1D()(x))
    return keras.Model(inputs, outputs)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_save_load_continues_training_identically(name, tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 20, (48, 6))
    y = rng.normal(size=(48, 1)).astype("float32")
    keras.utils.set_random_seed(0)
    model = _model()
    model.compile(OPTIMIZERS[name](), "mse")
    # 3 steps of 16: an odd number of micro-batches leaves LAMB mid-accumulation cycle.
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.models.load_model(path)

    assert type(loaded.optimizer) is type(model.optimizer)
    assert loaded.optimizer.get_config() == model.optimizer.get_config()
    assert int(loaded.optimizer.iterations) == int(model.optimizer.iterations)
    for a, b in zip(loaded.optimizer.variables, model.optimizer.variables):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

    for m in (model, loaded):
        m.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    for a, b in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(loaded.get_weights()[0], _model().get_weights()[0])
