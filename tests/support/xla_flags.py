"""The XLA settings the tests' JAX programs compile with on the CPU.

Nothing the tests assert depends on how fast the compiled code runs, and compiling is much of
what their small JAX programs cost. ``--xla_cpu_use_fusion_emitters=false`` has XLA's CPU
compiler emit its fused loops through its LLVM IR emitters rather than the newer MLIR ones: the
same programs, compiled for about a third less (a multi-host reference process of
tests/support/multi_host.py: 30.5 -> 19.4 CPU-s). `tests/conftest.py` adds it to the
environment of every test process, so the processes they start inherit it; the commands that
set ``XLA_FLAGS`` themselves start from `with_test_flags`. TensorFlow's XLA takes the flag too.
``--xla_backend_optimization_level=0`` (LLVM's optimizations off) is the tests' choice where
their results are compared with each other or within the tolerances the optimized code passes.
"""

CHEAP_EMITTERS = "--xla_cpu_use_fusion_emitters=false"
NO_LLVM_OPTIMIZATION = "--xla_backend_optimization_level=0"


def with_test_flags(flags=""):
    """``flags`` (an ``XLA_FLAGS`` value) with `CHEAP_EMITTERS` added unless it is there."""
    if CHEAP_EMITTERS in flags.split():
        return flags
    return f"{flags} {CHEAP_EMITTERS}".strip()
