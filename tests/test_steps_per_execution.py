"""Several steps per execution under mirrored strategies: the unrolled train function of
`keras_largebatch.distribute.unroll_steps_per_execution` gives the weights and logs of single
steps, where Keras's own multi-step function fails (keras-team/keras issue #19246).

Collective all-reduce (MirroredStrategy's default, on which Keras's function fails) runs in a
fresh process (`tests.support.mirrored_steps`): its group keys are per strategy, so in this
session, which makes other mirrored strategies, their instances would collide."""

import json
import sys

import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch.distribute import unroll_steps_per_execution
from keras_largebatch.training import trainer
from tests.support import processes
from tests.support.mirrored_steps import DEVICES, differences, fit
from tests.support.regression import build_model
from tests.support.runs import ROOT
from tests.support.toy_recipe import ToyRegression, load

# (optimizer, gradient accumulation steps) on collective all-reduce; Keras's SGD too, since
# Keras's own optimizers meet the same failure.
COLLECTIVE_CASES = [("LAMB", None), ("LAMB", 2), ("LARS", 2), ("SGD", None)]


@pytest.fixture(scope="module")
def collective():
    result = processes.run(
        [sys.executable, "-m", "tests.support.mirrored_steps", json.dumps(COLLECTIVE_CASES)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("optimizer, accumulation", COLLECTIVE_CASES)
def test_collective_all_reduce_runs_three_steps_per_execution_as_single_steps(
    collective, optimizer, accumulation
):
    difference = collective[f"{optimizer}/{accumulation}"]
    assert difference["weights"] <= 1e-6 and difference["logs"] <= 1e-5, difference


@pytest.mark.parametrize(
    "cross_device_ops, optimizer, accumulation",
    [
        (tf.distribute.HierarchicalCopyAllReduce, "LAMB", 2),
        (tf.distribute.ReductionToOneDevice, "LARS", None),
    ],
)
def test_other_reductions_run_three_steps_per_execution_as_single_steps(
    cross_device_ops, optimizer, accumulation
):
    strategy = tf.distribute.MirroredStrategy(DEVICES, cross_device_ops=cross_device_ops())
    difference = differences(strategy, optimizer, accumulation)
    assert difference["weights"] <= 1e-6 and difference["logs"] <= 1e-5, difference


def test_other_strategies_and_single_steps_keep_keras_s_function():
    one_device = tf.distribute.MirroredStrategy(
        DEVICES, cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
    for strategy, steps in ((tf.distribute.get_strategy(), 4), (one_device, 1)):
        with strategy.scope():
            model = build_model()
            model.compile(optimizer="sgd", loss="mse", steps_per_execution=steps)
        assert unroll_steps_per_execution(model).train_function is None


def train_steps_per_execution_on_workers(strategy):
    """On each of 2 workers: single steps and 2 steps per execution, from the same weights;
    run in the suite's one two-worker launch (tests/training/test_multi_worker_trainer.py,
    which compares them)."""
    results = {}
    for steps in (1, 2):
        weights, _ = fit(strategy, "LAMB", 2, steps)
        results.update({f"steps{steps}/{index}": value for index, value in enumerate(weights)})
    return results


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
