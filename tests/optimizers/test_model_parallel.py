"""LAMB and LARS with their variables split over devices by `keras.distribution.ModelParallel`
equal one device.

A trust ratio is a function of the norms of a whole variable. Split a kernel over devices and
each holds part of it: an implementation that takes the norms of each device's part gives
each part its own ratio (DeepSpeed's LAMB under ZeRO's partitioning, deepspeedai/DeepSpeed
issues 88 and 490). On JAX the `keras.ops` norm of a sharded array is the global one (XLA
adds the all-reduce), so a sharded run must take the steps of one device. The runs are in a
subprocess on the JAX backend with two host devices (tests/support/model_parallel_steps.py),
as this process runs Keras on TensorFlow; each sharded run asserts there that its variables
and their optimizer slots are split as asked.
"""

import numpy as np
import pytest

from tests.support.runs import run_on_jax

CASES = [
    f"{optimizer}/{sharding}/accumulation={accumulation}"
    for optimizer in ("LAMB", "LARS")
    for sharding in ("tensor_parallel", "fsdp")
    for accumulation in (None, 2)
]
BFLOAT16_CASE = "LAMB/fsdp/accumulation=2/bfloat16"
SHARDED = {
    "tensor_parallel": ["mlp/up/kernel", "mlp/up/bias", "mlp/down/kernel"],
    "fsdp": [
        "mlp/up/kernel",
        "mlp/up/bias",
        "mlp/norm/gamma",
        "mlp/norm/beta",
        "mlp/down/kernel",
        "mlp/down/bias",
        "mlp/head/kernel",
        "mlp/head/bias",
    ],
}
# The sharded run adds the partial sums of a split matmul, of a norm and of the batch mean in
# another order than one device, so an operation may round differently by an ulp (2**-23 of
# the value in float32). Over 4 steps that stays within a few ulps: 1e-6 of the largest weight
# is about 8 ulps of it, and 100 times below what one wrong step moves
# (test_recorded_trust_ratio_is_global_and_a_per_shard_one_would_show). Each trust ratio is
# held to 1e-6 of itself.
TOLERANCE = 1e-6
# One ulp of bfloat16's 8-bit significand.
BFLOAT16_TOLERANCE = 2.0**-7


@pytest.fixture(scope="module")
def runs():
    pytest.importorskip("jax")
    return run_on_jax(
        "tests.support.model_parallel_steps", timeout=120, optimize_compiled_code=False
    )


def _check_case(result, sharding, tolerance):
    assert result["sharded"] == SHARDED[sharding]
    assert result["iterations"] == [4, 4]
    assert result["weights"] <= tolerance * result["weight_scale"]
    assert result["trust_ratios_relative"] <= tolerance


@pytest.mark.parametrize("case", CASES)
def test_sharded_run_matches_one_device(case, runs):
    result = runs["cases"][case]
    _check_case(result, case.split("/")[1], TOLERANCE)
    # Training moved the weights by far more than the bound: the comparison can see a step.
    assert result["moved"] > 1e3 * TOLERANCE * result["weight_scale"]


def test_bfloat16_variables_have_float32_slots_split_like_them(runs):
    # LAMB makes the float32 slots of a bfloat16 variable itself; the subprocess asserts that
    # they are split like their variables, and this that the run still equals one device.
    result = runs["cases"][BFLOAT16_CASE]
    _check_case(result, "fsdp", BFLOAT16_TOLERANCE)
    assert result["moved"] > BFLOAT16_TOLERANCE * result["weight_scale"]


def _lamb_last_step(state):
    """The weights before the last LAMB step and its update ``u = r + wd * w``, rebuilt from
    the state after it: ``w_after = w - lr * trust * u`` with ``r = m_hat / (sqrt(v_hat) +
    eps)`` of the moments after it."""
    config, step = state["config"], state["iterations"]
    weights_after = np.asarray(state["weights"], np.float64)
    # The corrections as the optimizer computes them, in float32: 1 - 0.999**4 loses 8 of
    # float32's 24 bits, a difference of 1e-5 in the ratio if computed in float64.
    correction_1, correction_2 = (
        float(np.float32(1) - np.float32(config[beta]) ** np.float32(step))
        for beta in ("beta_1", "beta_2")
    )
    normalized = (np.asarray(state["momentum"]) / correction_1) / (
        np.sqrt(np.asarray(state["velocity"]) / correction_2) + config["epsilon"]
    )
    scale = config["learning_rate"] * state["trust_ratio"]
    weights = (weights_after + scale * normalized) / (1 - scale * config["weight_decay"])
    return weights, normalized + config["weight_decay"] * weights


def test_recorded_trust_ratio_is_global_and_a_per_shard_one_would_show(runs):
    state = runs["last_step"]
    weights, update = _lamb_last_step(state)
    recorded = state["trust_ratio"]
    # A float32 power may differ from the optimizer's by an ulp, 1.5e-5 of 1 - 0.999**4.
    np.testing.assert_allclose(np.linalg.norm(weights) / np.linalg.norm(update), recorded, 1e-5)
    # Each device's half of the column-split kernel, with a ratio from its own norms.
    for weights_part, update_part in zip(
        np.split(weights, 2, axis=state["split_axis"]),
        np.split(update, 2, axis=state["split_axis"]),
    ):
        per_shard = np.linalg.norm(weights_part) / np.linalg.norm(update_part)
        assert abs(per_shard - recorded) > 1e3 * TOLERANCE * recorded
        # The last step alone would then have moved some weights by more than 100 times
        # what the comparison above allows.
        step_difference = state["config"]["learning_rate"] * abs(per_shard - recorded)
        assert step_difference * np.max(np.abs(update_part)) > 100 * TOLERANCE * np.max(
            np.abs(weights)
        )
