"""One trial of an arm: the workload's model at one optimizer, batch size, settings and seed,
its rate warmed up linearly and then constant, the validation set evaluated at steps growing
geometrically (`measures.evaluation_steps`); it stops at the target, at divergence, at its
budget, or at the step where it can no longer be its cell's best. A seed's run ends with the
test set."""

import math
import time

import keras

from keras_largebatch.schedules import WarmUp
from keras_largebatch.study.arms import measures, protocol
from keras_largebatch.study.arms.spaces import OPTIMIZERS
from keras_largebatch.training.input_release import fit_releasing_input
from keras_largebatch.training.optimizer_factory import create_optimizer


def build_optimizer(optimizer, settings, weight_decay, exclusions, variables):
    """The arm's ``optimizer`` at ``settings``: linear warmup over the searched steps to the
    searched rate, then that rate; ``weight_decay`` on every variable but ``exclusions`` (and
    LARS's trust ratio left out of them too, as MLPerf's); no step skipped for a non-finite
    gradient (as Keras's optimizers): a trial that produces one diverges."""
    spec = OPTIMIZERS[optimizer]
    schedule = WarmUp(settings["learning_rate"], max(1, round(settings["warmup_steps"])))
    first_moment = 1 - settings["one_minus_momentum"]
    arguments = dict(spec.fixed)
    if optimizer in ("nesterov", "lars"):
        arguments["momentum"] = first_moment
    else:
        arguments.update(beta_1=first_moment, beta_2=settings["beta_2"])
    if optimizer in ("lars", "lamb"):
        arguments["skip_non_finite_steps"] = False
    if optimizer == "lars":
        arguments["exclude_from_layer_adaptation"] = list(exclusions)
    return create_optimizer(
        spec.factory_name,
        schedule,
        weight_decay=weight_decay,
        exclude_from_weight_decay=list(exclusions),
        variables=variables,
        **arguments,
    )


class _Evaluations(keras.callbacks.Callback):
    """Evaluates after the given steps; stops at the target, at divergence (a non-finite
    training loss, or a validation loss above ``divergence_loss``) and after
    ``stop_after``."""

    def __init__(self, evaluate, steps, target, metric, divergence_loss, stop_after):
        super().__init__()
        self.evaluate = evaluate
        self.steps = set(steps)
        self.target = target
        self.metric = metric
        self.divergence_loss = divergence_loss
        self.stop_after = stop_after
        self.curve = []
        self.stop = "budget"
        self.steps_trained = 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps_trained = batch + 1
        if not math.isfinite(float(logs["loss"])):
            self._stop("diverged")
            return
        if self.steps_trained not in self.steps and self.steps_trained != self.stop_after:
            return
        values = self.evaluate()
        if not math.isfinite(values["loss"]) or values["loss"] > self.divergence_loss:
            self._stop("diverged")
            return
        self.curve.append((self.steps_trained, values["accuracy"], values["loss"]))
        if measures.reached(values[self.metric], self.target, self.metric):
            self._stop("target")
        elif self.stop_after is not None and self.steps_trained >= self.stop_after:
            self._stop("pruned")

    def _stop(self, reason):
        self.stop = reason
        self.model.stop_training = True


def run_trial(trial, config, workload, data, callbacks=()):
    """Trains ``trial`` (a `protocol.Trial`) of ``config``'s arm on ``workload``'s ``data``;
    returns its ledger row (`keras_largebatch.study.ledger.COLUMNS`). ``callbacks`` run after
    the trial's own, which stops it."""
    started = time.perf_counter()
    arm = config.definition
    model = workload.build_model(trial.seed)
    optimizer = build_optimizer(
        trial.optimizer,
        trial.settings,
        arm.weight_decay,
        workload.decay_exclusions,
        model.trainable_variables,
    )
    workload.compile(model, optimizer)
    budget = trial.step_budget
    steps = measures.evaluation_steps(budget, config.evaluation_growth, config.first_evaluation)
    evaluations = _Evaluations(
        lambda: workload.evaluate(model, data, "validation"),
        steps,
        config.target,
        workload.metric,
        workload.divergence_loss,
        trial.stop_after,
    )
    fit_releasing_input(
        model,
        workload.train_dataset(data, trial.batch_size, trial.seed),
        epochs=1,
        steps_per_epoch=budget,
        callbacks=[evaluations, *callbacks],
        verbose=0,
    )
    test = None
    if trial.phase == protocol.SEEDS and evaluations.stop != "diverged":
        test = workload.evaluate(model, data, "test")
    return trial.row(
        evaluations.steps_trained,
        evaluations.stop,
        evaluations.curve,
        test,
        time.perf_counter() - started,
    )
