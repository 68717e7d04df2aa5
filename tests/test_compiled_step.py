"""The byte count `benchmarks/compiled_step.py` reads from TensorFlow's optimized HLO (TensorFlow
does not expose XLA's cost analysis): against a hand count, and against XLA's own cost
analysis of a program JAX compiles."""

import importlib.util

import pytest

from tests.support.runs import ROOT


def _compiled_step():
    spec = importlib.util.spec_from_file_location(
        "compiled_step", ROOT / "benchmarks" / "compiled_step.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HLO = """HloModule example

%on_true (p: (f32[8], f32[8])) -> (f32[8]) {
  %p = (f32[8]{0}, f32[8]{0}) parameter(0)
  %a = f32[8]{0} get-tuple-element(%p), index=0
  %b = f32[8]{0} get-tuple-element(%p), index=1
  %sum = f32[8]{0} add(%a, %b)
  ROOT %out = (f32[8]{0}) tuple(%sum)
}

%on_false (q: (f32[8])) -> (f32[8]) {
  %q = (f32[8]{0}) parameter(0)
  %c = f32[8]{0} get-tuple-element(%q), index=0
  ROOT %kept = (f32[8]{0}) tuple(%c)
}

ENTRY %main (x: f32[8], y: f32[8], k: pred[]) -> (f32[8], bf16[2,3]) {
  %x = f32[8]{0} parameter(0)
  %y = f32[8]{0} parameter(1)
  %k = pred[] parameter(2)
  %square = f32[8]{0} multiply(%x, %x)
  %half = bf16[2,3]{1,0} constant({ {0, 0, 0}, {0, 0, 0} })
  %narrow = bf16[2,3]{1,0} negate(%half)
  %both = (f32[8]{0}, f32[8]{0}) tuple(%square, %y)
  %one = (f32[8]{0}) tuple(%y)
  %chosen = (f32[8]{0}) conditional(%k, %both, %one), BRANCHES
  %r = f32[8]{0} get-tuple-element(%chosen), index=0
  ROOT %result = (f32[8]{0}, bf16[2,3]{1,0}) tuple(%r, %narrow)
}
""".replace("BRANCHES", "true_computation=%on_true, false_computation=%on_false")


def test_hlo_bytes_counts_each_operand_once_and_the_branch_taken():
    compiled_step = _compiled_step()
    # multiply: reads x once (both operands), writes 8 floats; negate: 6 bf16 in, 6 out.
    entry = 32 + 32 + 12 + 12
    assert compiled_step.hlo_bytes(HLO, 0) == entry + 3 * 32  # the add: 2 reads, 1 write
    assert compiled_step.hlo_bytes(HLO, 1) == entry


def test_hlo_bytes_agrees_with_xla_cost_analysis():
    jax = pytest.importorskip("jax")
    optax = pytest.importorskip("optax")
    compiled_step = _compiled_step()
    shapes = [(64, 256), (256,), (256, 64), (64,)]
    weights = [jax.numpy.ones(s) for s in shapes]
    transform = optax.lamb(1e-3, weight_decay=0.01)

    def step(state, grads, weights):
        updates, state = transform.update(grads, state, weights)
        return optax.apply_updates(weights, updates), state

    compiled = (
        jax.jit(step, donate_argnums=(0, 2))
        .lower(transform.init(weights), weights, weights)
        .compile()
    )
    analysis = compiled.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, list) else analysis
    expected = float(analysis["bytes accessed"])
    assert compiled_step.hlo_bytes(compiled.as_text(), 0) == pytest.approx(expected, rel=1e-3)
