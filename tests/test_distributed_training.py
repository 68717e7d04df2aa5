"""LAMB and LARS give the single-device answer on N replicas (issue: correct at scale).

The reference is always the same model trained on one device at the same global batch:
MirroredStrategy over 2 and 4 logical CPUs (tests/conftest.py), MultiWorkerMirroredStrategy
over 2 local processes, and accumulation of k micro-batches inside `model.fit`.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch import LAMB, LARS
from tests.support.multiworker import run_multi_worker

OPTIMIZERS = {"LAMB": LAMB, "LARS": LARS}

CONFIGS = {
    "lamb_plain": ("LAMB", dict(learning_rate=1e-2)),
    "lamb_decay_exclusions": (
        "LAMB",
        dict(learning_rate=1e-2, weight_decay=0.05, exclude_from_weight_decay=["norm", "bias"],
             exclude_from_layer_adaptation=["norm"], global_clipnorm=0.5),
    ),
    "lars_plain": ("LARS", dict(learning_rate=1.0, trust_coefficient=0.02)),
    "lars_decay_nesterov": (
        "LARS",
        dict(learning_rate=1.0, trust_coefficient=0.02, weight_decay=1e-3, nesterov=True,
             exclude_from_layer_adaptation=[], global_clipnorm=0.5),
    ),
}


def regression_data(count, seed=0):
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(count, 6)).astype("float32")
    targets = (features @ rng.normal(size=(6, 2)) + 0.1 * rng.normal(size=(count, 2))).astype("float32")
    return features, targets


def build_model():
    return keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(16, activation="tanh", kernel_initializer=keras.initializers.GlorotUniform(1)),
            keras.layers.LayerNormalization(),
            keras.layers.Dense(2, kernel_initializer=keras.initializers.GlorotUniform(2)),
        ]
    )


def train_model(strategy, config, global_batch_size=16, steps=4, accumulation=1):
    """Train ``steps`` optimizer steps of ``global_batch_size`` examples; a multi-worker function.

    With ``accumulation = k`` the data comes as ``k * steps`` micro-batches of
    ``global_batch_size / k`` and the optimizer accumulates them, so every variant sees the
    same examples per optimizer step. Returns the final weights and the iteration count.
    """
    name, kwargs = CONFIGS[config]
    features, targets = regression_data(global_batch_size * steps)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = (
        tf.data.Dataset.from_tensor_slices((features, targets))
        .batch(global_batch_size // accumulation, drop_remainder=True)
        .with_options(options)
    )
    with strategy.scope():
        model = build_model()
        optimizer = OPTIMIZERS[name](gradient_accumulation_steps=accumulation, **kwargs)
        model.compile(optimizer=optimizer, loss="mse")
    model.fit(dataset, epochs=1, steps_per_epoch=steps * accumulation, verbose=0)
    result = {f"weight_{i}": w for i, w in enumerate(model.get_weights())}
    result["iterations"] = np.array(optimizer.iterations.numpy())
    return result


def assert_same_weights(actual, expected, rtol=1e-5, atol=1e-6):
    keys = sorted(k for k in expected if k.startswith("weight_"))
    assert keys and sorted(k for k in actual if k.startswith("weight_")) == keys
    for key in keys:
        np.testing.assert_allclose(actual[key], expected[key], rtol=rtol, atol=atol, err_msg=key)


def mirrored(replicas):
    # Collective all-reduce keys its groups per strategy from 1, so a second in-process
    # strategy over a different number of CPUs would join the first one's group and abort;
    # reduction on one device sums the same values without collectives.
    return tf.distribute.MirroredStrategy(
        [f"/cpu:{i}" for i in range(replicas)], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )


@pytest.fixture(scope="module")
def single_device():
    cache = {}

    def result(config, **kwargs):
        key = (config, tuple(sorted(kwargs.items())))
        if key not in cache:
            cache[key] = train_model(tf.distribute.get_strategy(), config, **kwargs)
        return cache[key]

    return result


@pytest.mark.parametrize("replicas", [2, 4])
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_mirrored_matches_single_device(config, replicas, single_device):
    expected = single_device(config)
    assert_same_weights(train_model(mirrored(replicas), config), expected)
    # The weights moved: equality of untrained models would prove nothing.
    untrained = build_model().get_weights()
    assert not np.allclose(expected["weight_0"], untrained[0], atol=1e-3)


@pytest.mark.parametrize("config", ["lamb_decay_exclusions", "lars_decay_nesterov"])
@pytest.mark.parametrize("replicas", [1, 2])
def test_accumulation_in_fit_matches_one_large_batch(config, replicas, single_device):
    expected = single_device(config)
    strategy = mirrored(replicas) if replicas > 1 else tf.distribute.get_strategy()
    actual = train_model(strategy, config, accumulation=4)
    assert_same_weights(actual, expected)
    assert int(actual["iterations"]) == int(expected["iterations"]) == 4


def test_keras_clips_each_replica_share_and_we_clip_the_global_batch(single_device):
    # The same model and data; only where the clip happens differs. A tight clip makes every
    # step clip, so clipping each replica's half-batch gradient changes the result.
    def train(strategy, optimizer_factory):
        features, targets = regression_data(64)
        with strategy.scope():
            model = build_model()
            model.compile(optimizer=optimizer_factory(), loss="mse")
        model.fit(features, targets, batch_size=16, epochs=1, shuffle=False, verbose=0)
        return {f"weight_{i}": w for i, w in enumerate(model.get_weights())}

    ours = lambda: LAMB(learning_rate=1e-2, global_clipnorm=0.05)  # noqa: E731
    theirs = lambda: keras.optimizers.AdamW(learning_rate=1e-2, global_clipnorm=0.05)  # noqa: E731
    assert_same_weights(train(mirrored(2), ours), train(tf.distribute.get_strategy(), ours))
    keras_one, keras_two = train(tf.distribute.get_strategy(), theirs), train(mirrored(2), theirs)
    difference = max(np.max(np.abs(keras_two[k] - keras_one[k])) for k in keras_one)
    assert difference > 1e-3


@pytest.mark.parametrize("config", ["lamb_decay_exclusions", "lars_decay_nesterov"])
def test_multi_worker_matches_single_device(config, single_device):
    results = run_multi_worker(train_model, num_workers=2, kwargs={"config": config, "accumulation": 2},
                               timeout=240)
    expected = single_device(config)
    for result in results:
        assert_same_weights(result, expected)
