"""The timing loop the input-pipeline benchmarks share: items per second of an iterator."""

import time


def median_items_per_second(iterator, items_per_batch, steps, warmup_steps, rounds=5):
    """Median over ``rounds`` of ``steps`` calls of ``next(iterator)``, after ``warmup_steps``
    untimed ones (tf.data fills its buffers and traces its functions first)."""
    for _ in range(warmup_steps):
        next(iterator)
    rates = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(steps):
            next(iterator)
        rates.append(steps * items_per_batch / (time.perf_counter() - start))
    return sorted(rates)[len(rates) // 2]
