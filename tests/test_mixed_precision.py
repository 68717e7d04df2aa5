"""LAMB and LARS under mixed precision (issue: correct at scale).

With `mixed_float16`, `keras.optimizers.LossScaleOptimizer` (LSO) multiplies the loss by a
dynamic scale and divides the gradients by it. A step whose gradient is not finite must be
skipped whole: weights, slots, accumulators, recorded trust ratios and the step count stay
as they were, the scale halves, and the next finite step continues as if the bad one had
never happened. The references are the NumPy transcriptions run on the finite steps only,
and the same fit on data without the bad batch.

On 2 mirrored replicas LSO decides from replica 0's own gradient (keras 3.15); our base
class checks the summed gradient, so an overflow on replica 1 alone is skipped too, though
LSO then keeps its scale. `mixed_bfloat16` needs no loss scale: there the point is that
norms, slots and trust ratios stay float32. Variables that are themselves float16 or
bfloat16 (no policy) keep their slots in that dtype; the norms are still accumulated in
float32.

Scales are powers of two, so scaling and unscaling a float32 gradient is exact and the
comparisons can be tight.
"""

import contextlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch import LAMB, LARS
from keras_largebatch.optimizers import biases_and_norms
from tests.optimizers import reference
from tests.optimizers.skip_cases import micro_batch_means, poisoned
from tests.support.regression import build_model, regression_data

# reference.SHAPES holds (7,) and (): the default rule excludes them from weight decay.
DEFAULT_MASK = [True, False, True, False]

CONFIGS = {
    "LAMB": (
        lambda **kw: LAMB(learning_rate=1e-2, weight_decay=0.01, record_trust_ratio=True, **kw),
        lambda weights, steps: reference.lamb(
            weights, steps, lr=1e-2, wd=0.01, decay_mask=DEFAULT_MASK
        ),
    ),
    "LARS": (
        lambda **kw: LARS(
            learning_rate=0.1,
            trust_coefficient=0.1,
            weight_decay=1e-2,
            record_trust_ratio=True,
            **kw,
        ),
        lambda weights, steps: reference.lars(
            weights,
            steps,
            lr=0.1,
            eta=0.1,
            wd=1e-2,
            decay_mask=DEFAULT_MASK,
        ),
    ),
}

INITIAL_SCALE = 2.0**10


@contextlib.contextmanager
def dtype_policy(name):
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def optimizer_state(optimizer, variables):
    """Every value a skipped step must leave alone, by name: weights and the inner optimizer's
    variables (step count, slots, accumulators, recorded trust ratios)."""
    state = {f"weight/{v.path}": np.array(v.numpy()) for v in variables}
    state.update({f"optimizer/{v.path}": np.array(v.numpy()) for v in optimizer.variables})
    return state


def assert_state_equal(actual, expected):
    assert sorted(actual) == sorted(expected)
    for key in expected:
        np.testing.assert_array_equal(actual[key], expected[key], err_msg=key)


@pytest.mark.parametrize("bad_value", [np.inf, np.nan])
@pytest.mark.parametrize("accumulation", [None, 3])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_direct_apply_skips_a_non_finite_step(name, accumulation, bad_value):
    # Mixed precision keeps the variables in float32; only the forward pass runs in float16.
    make_optimizer, run_reference = CONFIGS[name]
    weights, gradient_steps = reference.make_problem(steps=9 if accumulation else 5, seed=7)
    # After 4 micro-batches of 3 the accumulators hold one micro-batch: a skip there must
    # neither add to them nor reset them.
    bad_at = 4 if accumulation else 2
    variables = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(weights)]
    inner = make_optimizer(gradient_accumulation_steps=accumulation)
    optimizer = keras.optimizers.LossScaleOptimizer(inner, initial_scale=INITIAL_SCALE)
    optimizer.build(variables)

    def apply(grads):
        scale = float(optimizer.dynamic_scale.numpy())
        optimizer.apply([tf.constant(g * scale) for g in grads], variables)

    for grads in gradient_steps[:bad_at]:
        apply(grads)
    before = optimizer_state(inner, variables)
    if accumulation:
        assert np.any(inner._accumulated_gradients[0].numpy() != 0)
    apply(poisoned(gradient_steps[bad_at], bad_value))
    assert_state_equal(optimizer_state(inner, variables), before)
    assert float(optimizer.dynamic_scale.numpy()) == INITIAL_SCALE / 2

    for grads in gradient_steps[bad_at:]:
        apply(grads)
    expected, expected_ratios = run_reference(
        weights, micro_batch_means(gradient_steps, accumulation)
    )
    for actual, wanted in zip(variables, expected):
        np.testing.assert_allclose(actual.numpy(), wanted, rtol=1e-5, atol=1e-6)
    ratios = inner.trust_ratios()
    np.testing.assert_allclose([ratios[v.path] for v in variables], expected_ratios[-1], rtol=1e-4)
    assert int(inner.iterations.numpy()) == len(expected_ratios)


class RecordState(keras.callbacks.Callback):
    """Keeps the optimizer state and loss scale after every batch."""

    def __init__(self):
        super().__init__()
        self.states = []
        self.scales = []

    def on_train_batch_end(self, batch, logs=None):
        optimizer = self.model.optimizer
        self.states.append(
            optimizer_state(optimizer.inner_optimizer, self.model.trainable_variables)
        )
        self.scales.append(float(optimizer.dynamic_scale.numpy()))


def fit_mixed_float16(
    name, features, targets, batch_size, accumulation, initial_scale, strategy=None
):
    make_optimizer, _ = CONFIGS[name]
    strategy = strategy or tf.distribute.get_strategy()
    with dtype_policy("mixed_float16"), strategy.scope():
        model = build_model()
        optimizer = keras.optimizers.LossScaleOptimizer(
            make_optimizer(gradient_accumulation_steps=accumulation), initial_scale=initial_scale
        )
        model.compile(optimizer=optimizer, loss="mse")
    recorder = RecordState()
    model.fit(
        features,
        targets,
        batch_size=batch_size,
        epochs=1,
        shuffle=False,
        verbose=0,
        callbacks=[recorder],
    )
    return model, recorder


def insert_overflowing_batch(features, targets, batch_size, at, row):
    """The data with one more batch at position ``at`` whose row ``row`` overflows float16."""
    # 1e6 is beyond float16's 65504: the first layer's input is inf, its gradient NaN.
    bad_features = features[:batch_size].copy()
    bad_features[row, 0] = 1e6
    split = at * batch_size
    return (
        np.concatenate([features[:split], bad_features, features[split:]]),
        np.concatenate([targets[:split], targets[:batch_size], targets[split:]]),
    )


@pytest.mark.parametrize("accumulation", [None, 3])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_fit_skips_the_batch_that_overflows_float16(name, accumulation):
    batch_size = 8
    good_batches = 9 if accumulation else 5
    bad_at = 4 if accumulation else 2
    features, targets = regression_data(good_batches * batch_size)
    with_bad = insert_overflowing_batch(features, targets, batch_size, bad_at, row=3)
    model, recorder = fit_mixed_float16(name, *with_bad, batch_size, accumulation, INITIAL_SCALE)

    assert_state_equal(recorder.states[bad_at], recorder.states[bad_at - 1])
    assert (
        recorder.scales[bad_at - 1] == INITIAL_SCALE
        and recorder.scales[bad_at] == INITIAL_SCALE / 2
    )
    optimizer_steps = good_batches // (accumulation or 1)
    assert int(model.optimizer.iterations.numpy()) == optimizer_steps

    # The same data without the bad batch: scaling by a power of two commutes with every
    # float16 operation short of under- or overflow, so only the skip could tell them apart.
    clean, _ = fit_mixed_float16(
        name, features, targets, batch_size, accumulation, INITIAL_SCALE / 2
    )
    for actual, expected in zip(model.get_weights(), clean.get_weights()):
        np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-7)
    assert not np.allclose(model.get_weights()[0], build_model().get_weights()[0], atol=1e-3)


def mirrored_two_cpus():
    # Collective all-reduce keys its groups per strategy, so in-process strategies of
    # different sizes would collide; reduction on one device sums the same values.
    return tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )


def per_replica(variable):
    return [np.array(v.numpy()) for v in variable.value.values]


def mirrored_stepper(strategy, optimizer, variables):
    """A compiled step applying replica r's gradients on replica r, scaled by the loss scale."""

    @tf.function
    def step(per_replica_grads):
        def apply(grads):
            optimizer.apply([g * optimizer.dynamic_scale for g in grads], variables)

        strategy.run(apply, args=(per_replica_grads,))

    def run(replica_grads):
        step(
            strategy.experimental_distribute_values_from_function(
                lambda context: [
                    tf.constant(g) for g in replica_grads[context.replica_id_in_sync_group]
                ]
            )
        )

    return run


def replica_shares(gradient_steps, seed):
    """Split each global gradient into two replica shares that sum to it."""
    rng = np.random.default_rng(seed)
    shares = []
    for grads in gradient_steps:
        first = [(rng.uniform(0.2, 0.8) * g).astype(np.float32) for g in grads]
        shares.append([first, [g - f for g, f in zip(grads, first)]])
    return shares, [[a + b for a, b in zip(*pair)] for pair in shares]


@pytest.mark.parametrize("bad_replica", [0, 1])
@pytest.mark.parametrize("name, accumulation", [("LAMB", None), ("LAMB", 3), ("LARS", None)])
def test_mirrored_skips_a_step_non_finite_on_one_replica_on_all_of_them(
    name, accumulation, bad_replica
):
    make_optimizer, run_reference = CONFIGS[name]
    weights, gradient_steps = reference.make_problem(steps=6 if accumulation else 4, seed=8)
    shares, sums = replica_shares(gradient_steps, seed=9)
    bad_at = 4 if accumulation else 2
    strategy = mirrored_two_cpus()
    with strategy.scope():
        variables = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(weights)]
        inner = make_optimizer(gradient_accumulation_steps=accumulation)
        optimizer = keras.optimizers.LossScaleOptimizer(inner, initial_scale=INITIAL_SCALE)
        optimizer.build(variables)
    step = mirrored_stepper(strategy, optimizer, variables)

    def state():
        return {v.path: per_replica(v) for v in variables + list(inner.variables)}

    for pair in shares[:bad_at]:
        step(pair)
    before = state()
    bad_pair = list(shares[bad_at])
    bad_pair[bad_replica] = poisoned(bad_pair[bad_replica], np.inf)
    step(bad_pair)
    after = state()
    for path, replicas in before.items():
        for replica in range(2):
            np.testing.assert_array_equal(
                after[path][replica], replicas[replica], err_msg=f"{path} replica {replica}"
            )
    # LossScaleOptimizer decides from replica 0's own gradient (keras 3.15): it halves the
    # scale only when replica 0 overflowed. Our optimizers check the summed gradient, so
    # the update is skipped either way, but the scale stays when only replica 1 overflowed.
    expected_scale = INITIAL_SCALE / 2 if bad_replica == 0 else INITIAL_SCALE
    assert per_replica(optimizer.dynamic_scale) == [expected_scale, expected_scale]

    for pair in shares[bad_at:]:
        step(pair)
    expected, expected_ratios = run_reference(weights, micro_batch_means(sums, accumulation))
    for variable, wanted in zip(variables, expected):
        for value in per_replica(variable):
            np.testing.assert_allclose(value, wanted, rtol=1e-5, atol=1e-6)
    ratios = inner.trust_ratios()
    np.testing.assert_allclose([ratios[v.path] for v in variables], expected_ratios[-1], rtol=1e-4)
    assert per_replica(inner._iterations) == [len(gradient_steps)] * 2


@pytest.mark.parametrize("bad_replica", [0, 1])
def test_mirrored_fit_skips_a_batch_that_overflows_on_one_replica(bad_replica):
    # Each replica gets one half of the global batch of 16, in order.
    batch_size, good_batches, bad_at, accumulation = 16, 6, 4, 3
    features, targets = regression_data(good_batches * batch_size)
    with_bad = insert_overflowing_batch(
        features, targets, batch_size, bad_at, row=3 + 8 * bad_replica
    )
    model, recorder = fit_mixed_float16(
        "LAMB", *with_bad, batch_size, accumulation, INITIAL_SCALE, strategy=mirrored_two_cpus()
    )
    assert_state_equal(recorder.states[bad_at], recorder.states[bad_at - 1])
    scale_after = INITIAL_SCALE / 2 if bad_replica == 0 else INITIAL_SCALE
    assert recorder.scales[bad_at:] == [scale_after] * (len(recorder.scales) - bad_at)
    assert int(model.optimizer.iterations.numpy()) == good_batches // accumulation

    clean, _ = fit_mixed_float16(
        "LAMB",
        features,
        targets,
        batch_size,
        accumulation,
        scale_after,
        strategy=mirrored_two_cpus(),
    )
    for actual, expected in zip(model.get_weights(), clean.get_weights()):
        np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-7)


def test_keras_optimizer_applies_a_replica_1_overflow_to_every_replica():
    # Why the check above lives in our base class: a Keras optimizer under the same
    # LossScaleOptimizer takes replica 0's "finite" and writes the overflow into every replica.
    strategy = mirrored_two_cpus()
    with strategy.scope():
        variable = keras.Variable(np.ones((3,), np.float32), name="w")
        optimizer = keras.optimizers.LossScaleOptimizer(
            keras.optimizers.SGD(0.1), initial_scale=INITIAL_SCALE
        )
        optimizer.build([variable])
    step = mirrored_stepper(strategy, optimizer, [variable])
    step([[np.ones(3, np.float32)], [np.array([1.0, np.inf, 1.0], np.float32)]])
    for value in per_replica(variable):
        # w - lr * (g_0 + g_1), elementwise: the finite entries move, the overflow lands.
        np.testing.assert_array_equal(
            value, np.float32([1.0 - 0.1 * 2.0, -np.inf, 1.0 - 0.1 * 2.0])
        )
    assert per_replica(optimizer.dynamic_scale) == [INITIAL_SCALE, INITIAL_SCALE]


class RecordLAMBState(keras.callbacks.Callback):
    """Keeps the loss, weights and LAMB slots after every batch."""

    def __init__(self):
        super().__init__()
        self.losses, self.weights, self.momentums, self.velocities = [], [], [], []

    def on_train_batch_end(self, batch, logs=None):
        optimizer = self.model.optimizer
        self.losses.append(logs["loss"])
        self.weights.append([np.array(v.numpy()) for v in self.model.trainable_variables])
        self.momentums.append([np.array(m.numpy()) for m in optimizer._momentums])
        self.velocities.append([np.array(v.numpy()) for v in optimizer._velocities])


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_mixed_bfloat16_trains_with_float32_norms_and_slots(name):
    make_optimizer, _ = CONFIGS[name]
    features, targets = regression_data(32)
    with dtype_policy("mixed_bfloat16"):
        model = build_model()
        model.compile(optimizer=make_optimizer(), loss="mse")
    assert model.layers[0].compute_dtype == "bfloat16"
    recorder = RecordLAMBState() if name == "LAMB" else keras.callbacks.History()
    history = model.fit(
        features, targets, batch_size=32, epochs=20, shuffle=False, verbose=0, callbacks=[recorder]
    )
    losses = history.history["loss"]
    assert losses[-1] < 0.5 * losses[0], losses
    optimizer = model.optimizer
    slots = (
        optimizer._momentums + optimizer._velocities if name == "LAMB" else optimizer._velocities
    )
    dtypes = {v.dtype for v in model.trainable_variables + slots + optimizer._trust_ratio_records}
    assert dtypes == {"float32"}
    if name == "LAMB":
        assert_last_lamb_trust_ratio_is_float32_accurate(
            optimizer, model.trainable_variables, recorder
        )


def assert_last_lamb_trust_ratio_is_float32_accurate(optimizer, variables, recorder):
    # The last step's trust ratio, recomputed in float64 from the weights before it and the
    # moments after it, agrees to float32 rounding; norms of a bfloat16 update (8 bits of
    # mantissa) would be off by ~1e-3.
    step = len(recorder.weights)
    # The betas enter as float32 constants; 0.999 rounds by 1.3e-8, which 1 - beta_2**20
    # amplifies to ~6e-6.
    beta_1, beta_2 = float(np.float32(0.9)), float(np.float32(0.999))
    c1 = 1.0 / (1.0 - beta_1**step)
    c2 = 1.0 / np.sqrt(1.0 - beta_2**step)
    ratios = optimizer.trust_ratios()
    checked = 0
    for index, variable in enumerate(variables):
        if not optimizer.adapts(variable):
            continue
        before = recorder.weights[-2][index].astype(np.float64)
        m = recorder.momentums[-1][index].astype(np.float64)
        v = recorder.velocities[-1][index].astype(np.float64)
        update = m * c1 / (np.sqrt(v) * c2 + 1e-6)
        if optimizer.decays(variable):
            update = update + 0.01 * before
        expected = np.linalg.norm(before) / np.linalg.norm(update)
        np.testing.assert_allclose(
            ratios[variable.path], expected, rtol=2e-6, err_msg=variable.path
        )
        np.testing.assert_allclose(
            recorder.weights[-1][index],
            before - 1e-2 * expected * update,
            rtol=1e-5,
            atol=1e-7,
            err_msg=variable.path,
        )
        checked += 1
    assert checked == len(variables)


# The spacing of floats just above 1 (machine epsilon) of each low-precision dtype.
EPSILON = {"float16": 2.0**-10, "bfloat16": 2.0**-7}
# A (64, 64) kernel of scale 6 has ||w||^2 ~ 1.5e5, and half of it still exceeds float16's
# largest value (65504): accumulated in float16 its norm would be inf. Then a kernel, a bias
# and a scalar, both left unadapted (so that their unscaled steps are checked too).
LOW_PRECISION_SHAPES = [(64, 64), (5, 3), (7,), ()]
LOW_PRECISION_MASK = [True, True, False, False]
LOW_PRECISION_CASES = {
    "LAMB": (
        lambda: LAMB(
            learning_rate=0.1,
            weight_decay=0.01,
            record_trust_ratio=True,
            exclude_from_layer_adaptation=biases_and_norms,
        ),
        lambda weights, steps: reference.lamb(
            weights,
            steps,
            lr=0.1,
            wd=0.01,
            decay_mask=LOW_PRECISION_MASK,
            adapt_mask=LOW_PRECISION_MASK,
        ),
    ),
    "LARS": (
        lambda: LARS(
            learning_rate=0.1,
            trust_coefficient=0.1,
            weight_decay=0.01,
            record_trust_ratio=True,
            exclude_from_layer_adaptation=biases_and_norms,
        ),
        lambda weights, steps: reference.lars(
            weights,
            steps,
            lr=0.1,
            eta=0.1,
            wd=0.01,
            decay_mask=LOW_PRECISION_MASK,
            adapt_mask=LOW_PRECISION_MASK,
        ),
    ),
}


def representable(values, dtype):
    """``values`` rounded to ``dtype``, as float64."""
    return keras.ops.convert_to_numpy(keras.ops.cast(keras.ops.cast(values, dtype), "float64"))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["LAMB", "LARS"])
def test_low_precision_variables_take_the_float64_step(name, dtype):
    make_optimizer, run_reference = LOW_PRECISION_CASES[name]
    rng = np.random.default_rng(21)
    weights = [
        representable((6.0 if shape == (64, 64) else 1.0) * rng.normal(size=shape), dtype)
        for shape in LOW_PRECISION_SHAPES
    ]
    gradients = [representable(rng.normal(size=shape), dtype) for shape in LOW_PRECISION_SHAPES]
    variables = [keras.Variable(w, dtype=dtype, name=f"w{i}") for i, w in enumerate(weights)]
    optimizer = make_optimizer()
    optimizer.build(variables)
    optimizer.apply([keras.ops.cast(g, dtype) for g in gradients], variables)
    # The reference takes the same step in float64 from the same (representable) values.
    expected, expected_ratios = run_reference(weights, [gradients])

    # The ratios are float32 functions of values the low-precision dtype holds exactly, so
    # they carry float32 rounding only; norms accumulated in the variable's dtype would be off
    # by up to 2^-9 (bfloat16) or inf (float16, the (64, 64) kernel).
    assert {v.dtype for v in optimizer._trust_ratio_records} == {"float32"}
    # LAMB keeps its moments in float32 (in bfloat16, beta_2 = 0.999 rounds to 1); LARS's
    # velocity has the variable's dtype, which its fused TensorFlow kernel requires.
    slots = optimizer._momentums if name == "LAMB" else optimizer.velocities
    assert {v.dtype for v in slots} == {"float32" if name == "LAMB" else dtype}
    ratios = optimizer.trust_ratios()
    np.testing.assert_allclose([ratios[v.path] for v in variables], expected_ratios[0], rtol=1e-5)

    epsilon = EPSILON[dtype]
    for index, (variable, wanted, before) in enumerate(zip(variables, expected, weights)):
        actual = representable(variable.value, "float64")
        step = np.abs(wanted - before)
        # Half an ulp for rounding the new weight, and 2 epsilon of the step for the roundings
        # that compute it (rate times ratio, decay term, product, momentum).
        tolerance = epsilon * (np.abs(wanted) / 2 + 2 * step)
        error = np.abs(actual - wanted)
        assert np.all(error <= tolerance), (index, float(np.max(error / tolerance)))
        # Not standing still: each variable has steps of many times their tolerance.
        assert np.max(step / tolerance) > 10, index
