import keras
import numpy as np
import pytest

from keras_largebatch import LAMB, LARS
from keras_largebatch.optimizers.trust_ratio import ExclusionRule, biases_and_norms, trust_ratio


@pytest.mark.parametrize(
    "weight_norm, update_norm, kwargs, expected",
    [
        (2.0, 4.0, {}, 0.5),
        (0.0, 4.0, {}, 1.0),
        (2.0, 0.0, {}, 1.0),
        (0.0, 0.0, {}, 1.0),
        (2.0, 4.0, dict(trust_coefficient=0.001, denominator=8.0), 0.00025),
        (2.0, 4.0, dict(max_trust_ratio=0.25), 0.25),
        (2.0, 4.0, dict(min_trust_ratio=0.75), 0.75),
        # The fallback of 1 is not clamped: a zero norm means "no adaptation".
        (0.0, 4.0, dict(max_trust_ratio=0.25), 1.0),
    ],
)
def test_trust_ratio_values(weight_norm, update_norm, kwargs, expected):
    value = trust_ratio(np.float32(weight_norm), np.float32(update_norm), **kwargs)
    assert float(keras.ops.convert_to_numpy(value)) == pytest.approx(expected, rel=1e-6)


def _model():
    inputs = keras.Input((5,), dtype="int32")
    x = keras.layers.Embedding(11, 4, name="embedding")(inputs)
    x = keras.layers.Dense(6, bias_initializer="ones", name="dense")(x)
    x = keras.layers.LayerNormalization(beta_initializer="ones", name="layer_norm")(x)
    x = keras.layers.BatchNormalization(beta_initializer="ones", name="batch_norm")(x)
    outputs = keras.layers.Dense(2, bias_initializer="ones", name="head")(
        keras.layers.GlobalAveragePooling1D()(x)
    )
    return keras.Model(inputs, outputs)


def _adapted_and_decayed(optimizer, model):
    """The paths of the variables that shrink in one step with zero gradients."""
    variables = model.trainable_variables
    before = [v.numpy().copy() for v in variables]
    optimizer.build(variables)
    optimizer.apply([np.zeros(v.shape, np.float32) for v in variables], variables)
    decayed = {v.path for v, b in zip(variables, before) if not np.array_equal(v.numpy(), b)}
    return decayed


def test_default_rules_and_biases_and_norms_on_a_real_model():
    model = _model()
    paths = {v.path for v in model.trainable_variables}
    matrices = {"embedding/embeddings", "dense/kernel", "head/kernel"}
    assert matrices < paths
    # By default the matrices alone decay, and every variable is adapted.
    default = LAMB(learning_rate=0.1, weight_decay=0.5)
    assert _adapted_and_decayed(default, model) == matrices
    assert all(default.adapts(v) for v in model.trainable_variables)

    optimizer = LAMB(
        learning_rate=0.1, record_trust_ratio=True, exclude_from_layer_adaptation=biases_and_norms
    )
    model = _model()
    model.compile(optimizer, "mse")
    model.fit(np.random.randint(0, 11, (8, 5)), np.random.rand(8, 2), verbose=0, batch_size=8)
    ratios = optimizer.trust_ratios()
    adapted = {path for path, ratio in ratios.items() if ratio != 1.0}
    assert adapted == matrices
    # gamma/beta/bias/moving statistics are excluded, whatever their trained values.
    assert all(ratios[p] == 1.0 for p in paths - matrices)


def test_pattern_and_callable_rules():
    model = _model()
    decayed = _adapted_and_decayed(
        LAMB(learning_rate=0.1, weight_decay=0.5, exclude_from_weight_decay=["^head/", "norm"]),
        model,
    )
    assert decayed == {"embedding/embeddings", "dense/kernel", "dense/bias"}

    model = _model()
    decayed = _adapted_and_decayed(
        LARS(
            learning_rate=0.1,
            weight_decay=0.5,
            exclude_from_weight_decay=lambda v: "embedding" in v.path,
        ),
        model,
    )
    assert (
        "embedding/embeddings" not in decayed
        and "head/kernel" in decayed
        and "head/bias" in decayed
    )

    model = _model()
    assert len(
        _adapted_and_decayed(
            LAMB(learning_rate=0.1, weight_decay=0.5, exclude_from_weight_decay=[]), model
        )
    ) == len(model.trainable_variables)


@pytest.mark.parametrize("optimizer_class", [LAMB, LARS])
def test_keras_exclude_from_weight_decay_is_refused_for_the_constructor_rule(optimizer_class):
    # One exclusion mechanism: Keras's method would keep its exclusions out of get_config.
    optimizer = optimizer_class(learning_rate=0.1, weight_decay=0.5)
    with pytest.raises(ValueError, match=r"var_names=\['kernel'\].*exclude_from_weight_decay="):
        optimizer.exclude_from_weight_decay(var_names=["kernel"])
    model = _model()
    # The constructor rule it points to excludes the same variables, and is saved.
    optimizer = optimizer_class(
        learning_rate=0.1, weight_decay=0.5, exclude_from_weight_decay=["kernel"]
    )
    optimizer.build(model.trainable_variables)
    decayed = {v.path for v in model.trainable_variables if optimizer.decays(v)}
    assert not any(path.endswith("kernel") for path in decayed)
    assert "embedding/embeddings" in decayed
    restored = optimizer_class.from_config(optimizer.get_config())
    assert {v.path for v in model.trainable_variables if restored.decays(v)} == decayed


def _tiny_keras_hub_bert():
    """A keras-hub BertBackbone built offline, small enough for a unit test."""
    keras_hub = pytest.importorskip("keras_hub")
    return keras_hub.models.BertBackbone(
        vocabulary_size=100,
        num_layers=2,
        num_heads=2,
        hidden_dim=32,
        intermediate_dim=64,
        max_sequence_length=16,
    )


def test_patterns_match_keras_hub_bert_paths():
    variables = _tiny_keras_hub_bert().trainable_variables
    rule = ExclusionRule(["layer_norm", "bias"], "exclude_from_weight_decay")
    excluded = {v.path for v in variables if rule.excludes(v)}
    kept = {v.path for v in variables} - excluded
    assert any("layer_norm" in p and p.endswith("gamma") for p in excluded)
    assert any(p.endswith("/bias") for p in excluded)
    assert kept and all(len(v.shape) >= 2 for v in variables if v.path in kept)
    # The short names Keras's own `exclude_from_weight_decay(var_names=...)` matches would
    # not reach the layer-norm gammas ("gamma" has no "layer_norm" in it).
    assert not any("layer_norm" in v.name for v in variables)


def test_biases_and_norms_excludes_every_bias_of_a_keras_hub_bert():
    # keras-hub's EinsumDense query/key/value biases are rank 2: a rank rule alone would decay
    # and adapt them, unlike google-research/bert, NVIDIA and TF Model Garden.
    from tests.optimizers import reference

    keras.utils.set_random_seed(0)
    variables = _tiny_keras_hub_bert().trainable_variables
    rng = np.random.default_rng(0)
    for variable in variables:
        if variable.name in ("bias", "beta"):
            # Zero would make the trust ratio fall back to 1 whatever the rule.
            variable.assign(rng.normal(size=variable.shape).astype(np.float32))
    biases = [v for v in variables if v.name == "bias"]
    assert any(len(v.shape) == 2 for v in biases)
    excluded = [len(v.shape) <= 1 or v.name == "bias" for v in variables]
    assert all(len(v.shape) >= 2 for v, out in zip(variables, excluded) if not out)
    assert {v.name for v, out in zip(variables, excluded) if not out} == {"embeddings", "kernel"}

    weights = [v.numpy().copy() for v in variables]
    grads = [rng.normal(size=v.shape).astype(np.float32) for v in variables]
    optimizer = LAMB(
        learning_rate=0.1,
        weight_decay=0.5,
        record_trust_ratio=True,
        exclude_from_layer_adaptation=biases_and_norms,
    )
    optimizer.build(variables)
    optimizer.apply([keras.ops.convert_to_tensor(g) for g in grads], variables)

    kept = [not out for out in excluded]
    expected, (expected_ratios,) = reference.lamb(
        weights, [grads], lr=0.1, wd=0.5, decay_mask=kept, adapt_mask=kept
    )
    for variable, value in zip(variables, expected):
        np.testing.assert_allclose(variable.numpy(), value, rtol=1e-5, atol=1e-6)
    ratios = optimizer.trust_ratios()
    for variable, out, ratio in zip(variables, excluded, expected_ratios):
        assert ratios[variable.path] == (1.0 if out else pytest.approx(ratio, rel=1e-4))
    # Decaying and adapting the rank-2 biases would have moved them elsewhere.
    adapted, _ = reference.lamb(weights, [grads], lr=0.1, wd=0.5)
    for variable, value in zip(variables, adapted):
        if variable.name == "bias" and len(variable.shape) == 2:
            assert np.max(np.abs(variable.numpy() - value)) > 1e-3
