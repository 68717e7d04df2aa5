"""LAMB and LARS give the single-device answer on N replicas (issue: correct at scale).

The reference is always the same model trained on one device at the same global batch:
MirroredStrategy over 2 and 4 logical CPUs (tests/conftest.py), MultiWorkerMirroredStrategy
over 2 local processes (`train_configs_on_workers`, run in the suite's one two-worker launch,
tests/training/test_multi_worker_trainer.py), and accumulation of k micro-batches inside
`model.fit`.

A trust ratio divides out a uniform scale of the gradient, and so does a clip that binds, so
the configurations that adapt and clip cannot see a gradient summed over the wrong number of
replicas or micro-batches. "lars_sgd_loose_clip" can: no variable is adapted, every one
steps by lr * (g + wd * w), and its clip does not bind (a test below checks which clips do).
A gradient 2x too large there fails the comparisons by ~1e5 times their tolerance.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch import LAMB, LARS
from keras_largebatch.distribute import describe_strategy
from tests.support.optimizer_cases import CONFIGS
from tests.support.regression import build_model, regression_data

OPTIMIZERS = {"LAMB": LAMB, "LARS": LARS}

# Whether each configuration's global_clipnorm changes its weights.
CLIP_BINDS = {
    "lamb_decay_exclusions": True,
    "lars_decay_nesterov": True,
    "lars_sgd_loose_clip": False,
}
# The configurations with a global_clipnorm, those of the accumulation and multi-worker
# runs: two adapted under a clip that binds, and one that shows the gradient's scale.
CLIPPED = sorted(CLIP_BINDS)


def train_model(strategy, config, global_batch_size=16, steps=4, accumulation=1, clip=True):
    """Train ``steps`` optimizer steps of ``global_batch_size`` examples.

    With ``accumulation = k`` the data comes as ``k * steps`` micro-batches of
    ``global_batch_size / k`` and the optimizer accumulates them, so every variant sees the
    same examples per optimizer step. ``clip=False`` drops the config's global_clipnorm.
    Returns the final weights, the iteration count and the replicas in sync.
    """
    name, kwargs = CONFIGS[config]
    if not clip:
        kwargs = {key: value for key, value in kwargs.items() if key != "global_clipnorm"}
    features, targets = regression_data(global_batch_size * steps, noise=0.1)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = (
        tf.data.Dataset.from_tensor_slices((features, targets))
        .batch(global_batch_size // accumulation, drop_remainder=True)
        .with_options(options)
    )
    with strategy.scope():
        model = build_model()
        optimizer = OPTIMIZERS[name](
            gradient_accumulation_steps=None if accumulation == 1 else accumulation, **kwargs
        )
        model.compile(optimizer=optimizer, loss="mse")
    model.fit(dataset, epochs=1, steps_per_epoch=steps * accumulation, verbose=0)
    result = {f"weight_{i}": w for i, w in enumerate(model.get_weights())}
    result["iterations"] = np.array(optimizer.iterations.numpy())
    result["num_replicas"] = np.array(strategy.num_replicas_in_sync)
    return result


def train_configs_on_workers(strategy, configs, accumulation):
    """`train_model` for each of ``configs`` in one cluster; a multi-worker function.

    Also returns what the cluster was: this worker's task index, the workers and replicas
    the strategy counts, and an all-reduced sum of one per replica (what the collectives
    actually joined: 1 for a worker that fell back to training alone).
    """
    result = {}
    for config in configs:
        run = train_model(strategy, config, accumulation=accumulation)
        result.update({f"{config}/{key}": value for key, value in run.items()})
    description = describe_strategy(strategy)
    result["num_workers"] = np.array(description["num_workers"])
    result["num_replicas"] = np.array(description["num_replicas"])
    # -1: no cluster (a strategy without a resolver).
    result["task_id"] = np.array(getattr(strategy.cluster_resolver, "task_id", -1))
    ones = strategy.run(lambda: tf.constant(1.0))
    result["replicas_summed"] = np.array(strategy.reduce("SUM", ones, axis=None))
    return result


def assert_same_weights(actual, expected, rtol=1e-5, atol=1e-6):
    keys = sorted(k for k in expected if k.startswith("weight_"))
    assert keys and sorted(k for k in actual if k.startswith("weight_")) == keys
    for key in keys:
        np.testing.assert_allclose(actual[key], expected[key], rtol=rtol, atol=atol, err_msg=key)


def largest_difference(actual, expected):
    return max(np.max(np.abs(actual[k] - expected[k])) for k in expected if k.startswith("weight_"))


def mirrored(replicas):
    # Collective all-reduce keys its groups per strategy from 1, so a second in-process
    # strategy over a different number of CPUs would join the first one's group and abort;
    # reduction on one device sums the same values without collectives.
    return tf.distribute.MirroredStrategy(
        [f"/cpu:{i}" for i in range(replicas)],
        cross_device_ops=tf.distribute.ReductionToOneDevice(),
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


@pytest.mark.parametrize("config", CLIPPED)
def test_global_clipnorm_binds_only_where_meant(config, single_device):
    difference = largest_difference(single_device(config), single_device(config, clip=False))
    if CLIP_BINDS[config]:
        assert difference > 1e-3
    else:
        assert difference < 1e-6


@pytest.mark.parametrize("replicas", [2, 4])
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_mirrored_matches_single_device(config, replicas, single_device):
    expected = single_device(config)
    actual = train_model(mirrored(replicas), config)
    assert int(actual["num_replicas"]) == replicas
    assert_same_weights(actual, expected)
    # The weights moved: equality of untrained models would prove nothing.
    untrained = build_model().get_weights()
    assert not np.allclose(expected["weight_0"], untrained[0], atol=1e-3)


@pytest.mark.parametrize("config", CLIPPED)
@pytest.mark.parametrize("replicas", [1, 2])
def test_accumulation_in_fit_matches_one_large_batch(config, replicas, single_device):
    expected = single_device(config)
    strategy = mirrored(replicas) if replicas > 1 else tf.distribute.get_strategy()
    actual = train_model(strategy, config, accumulation=4)
    assert int(actual["num_replicas"]) == replicas
    assert_same_weights(actual, expected)
    assert int(actual["iterations"]) == int(expected["iterations"]) == 4


def test_keras_clips_each_replica_share_and_we_clip_the_global_batch(single_device):
    # The same model and data; only where the clip happens differs. A tight clip makes every
    # step clip, so clipping each replica's half-batch gradient changes the result.
    def train(strategy, optimizer_factory):
        features, targets = regression_data(64, noise=0.1)
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
