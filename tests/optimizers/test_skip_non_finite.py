"""`skip_non_finite_steps=True`: a step whose global gradient is not finite is skipped whole
(with accumulation, all its micro-batches), counted in `skipped_steps`, and the run goes on
as if it had not been there. On JAX the same cases run in tests/optimizers/backend_check.py."""

import keras
import numpy as np
import pytest

from keras_largebatch import LAMB, LARS
from tests.optimizers import reference
from tests.optimizers.skip_cases import CASES, micro_batch_means, poisoned, run_case


@pytest.mark.parametrize("compile_mode", [None, "graph"])
@pytest.mark.parametrize("accumulation", [None, 2])
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_non_finite_step_is_skipped_whole_and_counted(name, accumulation, compile_mode):
    result = run_case(name, accumulation, compile_mode)
    assert result["error"] < 1, result
    assert result["skipped_steps"] == 1
    # The step count counts applied steps only: the bias correction saw 3 steps, not 4.
    assert result["iterations"] == result["applied"] == 3


def test_without_the_flag_nan_reaches_the_weights_as_before():
    weights, steps = reference.make_problem(steps=3, seed=21)
    variables = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(weights)]
    optimizer = LAMB(learning_rate=1e-2)
    optimizer.apply([keras.ops.convert_to_tensor(g) for g in poisoned(steps[0], np.nan)], variables)
    assert optimizer.skipped_steps is None
    assert np.isnan(variables[0].numpy()).any()
    assert int(optimizer.iterations.numpy()) == 1


def test_the_flag_is_checked_and_serialized():
    with pytest.raises(TypeError, match="skip_non_finite_steps"):
        LARS(skip_non_finite_steps="yes")
    optimizer = LARS(skip_non_finite_steps=True)
    assert LARS.from_config(optimizer.get_config()).skip_non_finite_steps is True
    assert int(optimizer.skipped_steps.numpy()) == 0


def test_mirrored_skip_is_decided_on_the_summed_gradient():
    import tensorflow as tf

    from tests.test_mixed_precision import mirrored_two_cpus, per_replica, replica_shares

    make, run_reference = CASES["LAMB"]
    weights, steps = reference.make_problem(steps=6, seed=22)
    shares, sums = replica_shares(steps, seed=23)
    # Replica 1's share of micro-batch 2 (optimizer step 1 of 3) is NaN.
    shares[2] = [shares[2][0], poisoned(shares[2][1], np.nan)]
    strategy = mirrored_two_cpus()
    with strategy.scope():
        variables = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(weights)]
        optimizer = make(gradient_accumulation_steps=2, skip_non_finite_steps=True)
        optimizer.build(variables)

    @tf.function
    def step(per_replica_grads):
        strategy.run(lambda grads: optimizer.apply(grads, variables), args=(per_replica_grads,))

    for pair in shares:
        step(
            strategy.experimental_distribute_values_from_function(
                lambda context, pair=pair: [
                    tf.constant(g) for g in pair[context.replica_id_in_sync_group]
                ]
            )
        )
    expected, _ = run_reference(weights, micro_batch_means(sums[:2] + sums[4:], 2))
    for variable, wanted in zip(variables, expected):
        for value in per_replica(variable):
            np.testing.assert_allclose(value, wanted, rtol=1e-5, atol=1e-6)
    assert int(optimizer.skipped_steps.numpy()) == 1
    assert per_replica(optimizer._iterations) == [4, 4]


@pytest.mark.parametrize("skip", [False, True])
def test_mirrored_accumulation_reduces_the_gradients_once_per_optimizer_step(skip):
    # Counts, as they run, the gradient tensors the strategy reduces over 8 micro-batches of
    # 4-step accumulation on 2 replicas: one batched reduction of the 2 gradients per step.
    import tensorflow as tf

    counts = tf.Variable([0, 0], dtype=tf.int64)

    class Counting(tf.distribute.ReductionToOneDevice):
        def batch_reduce_implementation(self, reduce_op, pairs, options):
            gradients = sum(1 for value, _ in pairs if value.values[0].shape.rank > 0)
            counts.assign_add([gradients, len(pairs) - gradients])
            return super().batch_reduce_implementation(reduce_op, pairs, options)

    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"], cross_device_ops=Counting())
    with strategy.scope():
        variables = [keras.Variable(np.ones((8, 4), "float32"), name="kernel")]
        variables.append(keras.Variable(np.ones((4,), "float32"), name="bias"))
        optimizer = LAMB(1e-3, gradient_accumulation_steps=4, skip_non_finite_steps=skip)
        optimizer.build(variables)

    @tf.function
    def step():
        grads = [tf.ones((8, 4)), tf.ones((4,))]
        strategy.run(lambda: optimizer.apply(grads, variables))

    for _ in range(8):
        step()
    gradients, scalars = counts.numpy().tolist()
    assert gradients == 2 * 2  # 2 optimizer steps, 2 gradients each, not 8 x 2
    # Without the flag, whether each micro-batch is finite on every replica: 1 number each.
    assert scalars == (0 if skip else 8)
    assert int(optimizer.iterations.numpy()) == 2
