"""The gradient noise scale at the study's smallest batch, measured by
`keras_largebatch.GradientNoiseScale` (McCandlish et al., arXiv:1812.06162).

One device has one batch size per step, so the measurement run accumulates two micro-batches
of the smallest batch ``B`` per LAMB step: the small batch is ``B`` and the big one ``2B``.
"""

import math
import time

from keras_largebatch.callbacks import GradientNoiseScale
from keras_largebatch.study import grid
from keras_largebatch.study import trial as trial_lib

OPTIMIZER = "lamb"
ACCUMULATION_STEPS = 2


def measure_noise_scale(config, data):
    """Trains LAMB for ``config.noise_scale_epochs`` at micro-batches of
    ``config.batch_sizes[0]``, two per step, at the rate the grid starts from for the
    accumulated batch; returns the ledger row holding the last ``B_simple`` estimate."""
    started = time.perf_counter()
    micro_batch_size = config.batch_sizes[0]
    batch_size = ACCUMULATION_STEPS * micro_batch_size
    total_steps = max(
        1, math.floor(config.noise_scale_epochs * len(data.train_images) / batch_size)
    )
    learning_rate = grid.starting_learning_rate(OPTIMIZER, batch_size)
    schedule = trial_lib.learning_rate_schedule(learning_rate, total_steps, config.warmup_fraction)
    optimizer = trial_lib.build_optimizer(
        OPTIMIZER, schedule, config.weight_decay, gradient_accumulation_steps=ACCUMULATION_STEPS
    )
    model = trial_lib.compile_model(optimizer, config.seed)
    history = model.fit(
        trial_lib.train_dataset(data, micro_batch_size, config.seed),
        epochs=1,
        steps_per_epoch=total_steps * ACCUMULATION_STEPS,
        callbacks=[GradientNoiseScale(micro_batch_size)],
        shuffle=False,
        verbose=0,
    )
    return {
        "kind": "noise_scale",
        "optimizer": OPTIMIZER,
        "batch_size": micro_batch_size,
        "learning_rate": learning_rate,
        "total_steps": total_steps,
        "steps_trained": total_steps,
        "gradient_noise_scale": float(history.history["gradient_noise_scale"][-1]),
        "seconds": time.perf_counter() - started,
    }
