"""What the input benchmarks share: the timing loop (items per second of an iterator) and the
options of the default corpus's data they read."""

import time

from keras_largebatch.bert.data.defaults import DEFAULT_CORPUS_DUPE_FACTOR


def add_default_data_arguments(parser):
    """``--data-dir`` (where the default corpus's records are, or are created) and
    ``--dupe-factor`` (its passes over the corpus when created)."""
    parser.add_argument(
        "--data-dir",
        "--data_dir",
        default="runs/bert_default_data",
        help="where the default pretraining data is (or is created)",
    )
    parser.add_argument(
        "--dupe-factor",
        "--dupe_factor",
        type=int,
        default=DEFAULT_CORPUS_DUPE_FACTOR,
        help="passes over the default corpus when its data is created",
    )


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
