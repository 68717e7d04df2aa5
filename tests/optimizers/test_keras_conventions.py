"""LAMB and LARS follow Keras's conventions where a user coming from `keras.optimizers.Lamb`
meets them: ``weight_decay=None``, reading a Keras `Lamb` config, and what a variable without
gradient does under LAMB's trust ratio."""

import keras
import numpy as np
import pytest

from keras_largebatch import LAMB, LARS
from keras_largebatch.optimizers import biases_and_norms


@pytest.mark.parametrize("optimizer_class", [LAMB, LARS])
def test_weight_decay_none_means_no_decay(optimizer_class):
    optimizer = optimizer_class(learning_rate=0.1, weight_decay=None)
    assert optimizer.weight_decay == 0.0
    variable = keras.Variable(np.ones((2, 2), np.float32), name="kernel")
    assert not optimizer.decays(variable) and optimizer.adapts(variable)


def test_a_keras_lamb_config_reads_as_keras_lamb_behaves():
    keras_config = keras.optimizers.Lamb(learning_rate=0.02, weight_decay=0.01).get_config()
    with pytest.warns(UserWarning, match="keras.optimizers.Lamb config.*inside the trust ratio"):
        optimizer = LAMB.from_config(keras_config)
    assert optimizer.epsilon == keras_config["epsilon"] == 1e-7
    assert np.isclose(float(optimizer.learning_rate), 0.02)
    bias = keras.Variable(np.zeros((3,), np.float32), name="bias")
    # Keras's Lamb has no exclusion: every variable adapted and decayed.
    assert optimizer.adapts(bias) and optimizer.decays(bias)
    # The default config's weight_decay=None reads too.
    with pytest.warns(UserWarning):
        assert LAMB.from_config(keras.optimizers.Lamb().get_config()).weight_decay == 0.0
    # Our own config round-trips without the warning and keeps its exclusions.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = LAMB.from_config(LAMB(weight_decay=0.01).get_config())
        unadapted = LAMB.from_config(
            LAMB(weight_decay=0.01, exclude_from_layer_adaptation=biases_and_norms).get_config()
        )
    assert again.adapts(bias) and not again.decays(bias)
    assert not unadapted.adapts(bias) and not unadapted.decays(bias)


def _norm_ratio_after_zero_gradients(optimizer, steps=100):
    variable = keras.Variable(np.full((4, 4), 0.5, np.float32), name="unused_kernel")
    optimizer.build([variable])
    for _ in range(steps):
        optimizer.apply([np.zeros((4, 4), np.float32)], [variable])
    return float(np.linalg.norm(variable.numpy()) / np.linalg.norm(np.full((4, 4), 0.5)))


@pytest.mark.parametrize("weight_decay", [1e-6, 1e-2, 0.1])
def test_a_variable_without_gradient_shrinks_at_the_learning_rate(weight_decay):
    # g = 0: m = v = 0, the update is u = wd * w with trust ratio |w| / |wd * w| = 1 / wd, so
    # each step is w -= lr * w whatever wd: |w_100| / |w_0| = (1 - lr) ** 100.
    ratio = _norm_ratio_after_zero_gradients(LAMB(learning_rate=1e-2, weight_decay=weight_decay))
    np.testing.assert_allclose(ratio, 0.99**100, rtol=1e-4)
    # Bounding the trust ratio at 1 keeps it as decoupled decay does: (1 - lr * wd) ** 100.
    bounded = LAMB(learning_rate=1e-2, weight_decay=weight_decay, max_trust_ratio=1.0)
    np.testing.assert_allclose(
        _norm_ratio_after_zero_gradients(bounded), (1 - 1e-2 * weight_decay) ** 100, rtol=1e-4
    )
    # Excluding it from weight decay keeps it unchanged.
    excluded = LAMB(
        learning_rate=1e-2, weight_decay=weight_decay, exclude_from_weight_decay=["unused"]
    )
    assert _norm_ratio_after_zero_gradients(excluded) == 1.0
