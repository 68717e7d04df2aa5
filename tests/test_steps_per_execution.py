"""Several steps per execution under mirrored strategies: the unrolled train function of
`keras_largebatch.distribute.unroll_steps_per_execution` gives the weights and logs of single
steps, where Keras's own multi-step function fails (keras-team/keras issue #19246)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch import LAMB, LARS
from keras_largebatch.distribute import unroll_steps_per_execution
from keras_largebatch.training import trainer
from tests.support.multiworker import run_multi_worker
from tests.support.regression import build_model, regression_data
from tests.support.toy_recipe import ToyRegression, load

DEVICES = ["/cpu:0", "/cpu:1"]
CROSS_DEVICE_OPS = {
    "collective": lambda: None,  # MirroredStrategy's default, the one Keras's function fails on
    "hierarchical_copy": tf.distribute.HierarchicalCopyAllReduce,
    "one_device": tf.distribute.ReductionToOneDevice,
}
OPTIMIZERS = {
    "LAMB": lambda accumulation: LAMB(
        0.02, weight_decay=0.01, gradient_accumulation_steps=accumulation
    ),
    "LARS": lambda accumulation: LARS(
        0.5, weight_decay=1e-4, gradient_accumulation_steps=accumulation
    ),
    "SGD": lambda accumulation: keras.optimizers.SGD(
        0.01, momentum=0.9, gradient_accumulation_steps=accumulation
    ),
}


def _fit(strategy, optimizer, accumulation, steps_per_execution):
    """Weights and history of 2 epochs of 8 steps of the seeded regression at batch 8."""
    features, targets = regression_data(64)
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = build_model()
        model.compile(
            optimizer=OPTIMIZERS[optimizer](accumulation),
            loss="mean_squared_error",
            metrics=["mean_absolute_error"],
            steps_per_execution=steps_per_execution,
        )
    unroll_steps_per_execution(model)
    dataset = tf.data.Dataset.from_tensor_slices((features, targets)).batch(8).repeat()
    history = model.fit(
        strategy.experimental_distribute_dataset(dataset), epochs=2, steps_per_epoch=8, verbose=0
    )
    return [variable.numpy() for variable in model.weights], history.history


@pytest.mark.parametrize(
    "cross_device_ops, optimizer, accumulation",
    [
        ("collective", "LAMB", None),
        ("collective", "LAMB", 2),
        ("collective", "LARS", 2),
        ("collective", "SGD", None),  # Keras's own optimizers meet the same failure
        ("hierarchical_copy", "LAMB", 2),
        ("one_device", "LARS", None),
    ],
)
def test_four_steps_per_execution_equal_four_single_steps(
    cross_device_ops, optimizer, accumulation
):
    def strategy():
        ops = CROSS_DEVICE_OPS[cross_device_ops]()
        return tf.distribute.MirroredStrategy(DEVICES, cross_device_ops=ops)

    single, single_logs = _fit(strategy(), optimizer, accumulation, 1)
    unrolled, unrolled_logs = _fit(strategy(), optimizer, accumulation, 4)
    assert len(single) > 4
    for expected, value in zip(single, unrolled):
        np.testing.assert_allclose(value, expected, rtol=1e-6, atol=1e-7)
    assert unrolled_logs.keys() == single_logs.keys()
    for name in single_logs:
        np.testing.assert_allclose(unrolled_logs[name], single_logs[name], rtol=1e-6)


def test_other_strategies_and_single_steps_keep_keras_s_function():
    for strategy, steps in (
        (tf.distribute.get_strategy(), 4),
        (tf.distribute.MirroredStrategy(DEVICES), 1),
    ):
        with strategy.scope():
            model = build_model()
            model.compile(optimizer="sgd", loss="mse", steps_per_execution=steps)
        assert unroll_steps_per_execution(model).train_function is None


def train_on_workers(strategy):
    """On each of 2 workers: single steps and 2 steps per execution, from the same weights."""
    results = {}
    for steps in (1, 2):
        weights, _ = _fit(strategy, "LAMB", 2, steps)
        results.update({f"steps{steps}/{index}": value for index, value in enumerate(weights)})
    return results


def test_two_workers_run_two_steps_per_execution_as_single_steps():
    for result in run_multi_worker(train_on_workers, num_workers=2, timeout=300):
        names = [name for name in result if name.startswith("steps1/")]
        assert len(names) > 4
        for name in names:
            np.testing.assert_allclose(
                result[name.replace("steps1/", "steps2/")], result[name], rtol=1e-6, atol=1e-7
            )


def test_the_harness_runs_steps_per_execution_on_mirrored_replicas(tmp_path):
    runs = {}
    for steps in (1, 2):
        config = load(
            tmp_path / str(steps),
            "strategy.name=mirrored",
            "strategy.devices=['/cpu:0', '/cpu:1']",
            f"steps_per_execution={steps}",
        )
        runs[steps] = trainer.train(config, ToyRegression(config), log=lambda line: None)
    assert runs[2]["global_steps"] == runs[1]["global_steps"] == 12
    for name in ("loss", "mean_absolute_error"):
        np.testing.assert_allclose(runs[2]["final"][name], runs[1]["final"][name], rtol=1e-6)
