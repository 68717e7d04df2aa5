"""A stand-in for `trial.run_trial` whose curves follow from the trial's point: the protocol's
decisions can then be worked out by hand, and a study of dozens of trials runs in a blink."""

from keras_largebatch.study import measures, protocol


def speed(trial):
    """Accuracy gained per first-round budget: per optimizer, a landscape with a known best.

    - adamw: faster at lower learning rates, beyond the range's low end too;
    - lamb: reaches the primary target of the tests' config only after 90% of the first
      budget, whatever the settings (the budget is doubled);
    - sgd_momentum: diverges from the middle of the learning-rate range up;
    - lars: the same at every point (ties: the first trial is the best).
    """
    rate_coordinate = trial.point[0]
    if trial.optimizer == "adamw":
        return 0.25 + 0.5 * (0.5 - rate_coordinate)
    if trial.optimizer == "lamb":
        return 0.1 / 0.9
    if trial.optimizer == "sgd_momentum":
        return None if rate_coordinate > 0.5 else 0.3 + 0.1 * rate_coordinate
    return 0.3


def run_trial(trial, config, data=None):
    """The ledger row of ``trial``: accuracy ``0.1 + speed * step / first budget``, capped
    at 0.99, at the evaluation steps; stops at the last target as `trial.run_trial` does."""
    first_budget = config.step_budget(trial.batch_size)
    rate = speed(trial)
    confirmation = trial.phase == protocol.CONFIRMATION
    curve, stop = [], "budget"
    if rate is None:
        stop = "diverged"
    else:
        for step in measures.evaluation_steps(trial.step_budget, config.evaluations_per_budget):
            accuracy = min(0.99, 0.1 + rate * step / first_budget + 0.001 * trial.seed)
            curve.append((step, accuracy, 1.0))
            if not confirmation and accuracy >= config.targets[-1]:
                stop = "target"
                break
    return {
        "key": trial.key(),
        "phase": trial.phase,
        "optimizer": trial.optimizer,
        "batch_size": trial.batch_size,
        "step_budget": trial.step_budget,
        "index": trial.index,
        "seed": trial.seed,
        "point": trial.point,
        "settings": trial.settings,
        "steps_trained": curve[-1][0] if curve else 1,
        "stop": stop,
        "curve": curve,
        "test_accuracy": curve[-1][1] - 0.01 if confirmation and curve else None,
        "test_loss": 1.0 if confirmation and curve else None,
        "noise_scale": None,
        "seconds": 0.0,
    }
