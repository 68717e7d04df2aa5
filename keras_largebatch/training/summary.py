"""What a run's summary reports, gathered as it trains: first and last window metrics,
evaluations, the target, and throughput per phase.

Training time (``elapsed``) adds up over the processes of a resumed run: each checkpoint keeps
what `RunSummary.state` returns, the time trained up to it included (compilation and
evaluation too), and a resumed run starts from it.
"""

import time

import numpy as np


class RunSummary:
    """The summary of one run, filled in window by window (`add_window`, `add_evaluation`,
    `end_phase`) and read out by `summary`.

    Args:
        state: the checkpoint state a resumed run starts from (what `state` returned then),
            or None for a new run.
        reported_metrics: the window metrics that ``initial`` and ``final`` keep.
        best: the record of the best evaluation the run kept so far
            (`run_directory.RunDirectory.best`), or None.
    """

    def __init__(self, state, reported_metrics, best=None):
        self.best = best
        state = state or {}
        self.reported_metrics = reported_metrics
        self.initial = state.get("initial")
        self.final = state.get("final")
        self.evaluations = state.get("evaluations", [])
        self.target = state.get("target")
        self.rollbacks = state.get("rollbacks", [])
        self.diverged = None
        self.resumed_from = state.get("global_step")
        self.global_step = state.get("global_step", 0)
        self._elapsed_before = state.get("elapsed_seconds", 0.0)
        self._start = time.perf_counter()
        self.phases = []
        self._windows = []

    def elapsed(self):
        """Seconds of training so far, over every process of the run."""
        return self._elapsed_before + time.perf_counter() - self._start

    def state(self):
        """What a checkpoint keeps of the summary, for a resumed run's summary."""
        return {
            "initial": self.initial,
            "final": self.final,
            "evaluations": self.evaluations,
            "target": self.target,
            "rollbacks": self.rollbacks,
            "elapsed_seconds": self.elapsed(),
        }

    def roll_back(self, state, rollback):
        """Returns to the checkpoint ``state`` restored after a divergence (its evaluations and
        last window; the time trained since counts on) and records ``rollback``."""
        self.final = state.get("final")
        self.evaluations = list(state.get("evaluations", []))
        self.target = state.get("target")
        self.rollbacks = self.rollbacks + [rollback]

    def add_window(self, global_step, metrics, examples, seconds):
        """A logging window that ended at ``global_step`` after training ``examples`` in
        ``seconds``, with its ``metrics`` (a dict holding every reported metric)."""
        reported = {name: metrics[name] for name in self.reported_metrics}
        if self.initial is None:
            self.initial = reported
        self.final = reported
        self.global_step = global_step
        self._windows.append((examples, seconds))

    def add_evaluation(self, global_step, evaluation, reached):
        """An evaluation at ``global_step``; ``reached``: it met the recipe's target."""
        elapsed = self.elapsed()
        self.evaluations.append(
            {"global_step": global_step, "elapsed_seconds": elapsed, **evaluation}
        )
        if reached and self.target is None:
            self.target = {"global_step": global_step, "seconds": elapsed}

    def end_phase(self, phase, recipe_fields):
        """Closes a phase (a `plan.PhasePlan`) with the recipe's fields of its entry."""
        # The first window of each fit includes tracing and compilation.
        windows = self._windows[1:] or self._windows
        examples = sum(count for count, _ in windows)
        seconds = sum(seconds for _, seconds in windows)
        self.phases.append(
            {
                "phase": phase.number,
                "steps": phase.steps,
                **recipe_fields,
                "global_batch_size": phase.global_batch_size,
                "num_replicas": phase.num_replicas,
                "per_replica_batch_size": phase.per_replica_batch_size,
                "gradient_accumulation_steps": phase.gradient_accumulation_steps,
                "examples_per_second": examples / seconds if seconds else None,
            }
        )
        self._windows = []

    def summary(self, strategy_description, checkpoint, wall_time):
        """The summary dict: steps, throughput, initial and final metrics, phases, strategy,
        resume point, wall time, newest checkpoint and, when the run evaluated, the
        evaluations, the target's step and time, when it kept one, the best evaluation, and the
        divergence guard's ``rollbacks`` and ``diverged`` when there were any."""
        rates = [p["examples_per_second"] for p in self.phases if p["examples_per_second"]]
        summary = {
            "global_steps": self.global_step,
            "examples_per_second": float(np.mean(rates)) if rates else None,
            "initial": self.initial,
            "final": self.final,
            "phases": self.phases,
            "strategy": strategy_description,
            "resumed_from_step": self.resumed_from,
            "wall_time_seconds": wall_time,
            "checkpoint": checkpoint,
        }
        if self.evaluations:
            summary["evaluations"] = self.evaluations
            summary["target_reached_at_step"] = (self.target or {}).get("global_step")
            summary["time_to_target_seconds"] = (self.target or {}).get("seconds")
        if self.best is not None:
            summary["best"] = self.best
        if self.rollbacks:
            summary["rollbacks"] = self.rollbacks
        if self.diverged is not None:
            summary["diverged"] = self.diverged
        return summary
